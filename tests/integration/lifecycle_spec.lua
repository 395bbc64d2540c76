-- SPDX-License-Identifier: Apache-2.0
-- Integration: the unit's lifecycle under a real systemd user manager (tests/with-systemd) with the
-- simulator (contrib/simdomain.lua): a unit that hits its start limit (C26), a daemon started by
-- hand on the command port (C27), a unit shipped disabled (C23), and a late epilog (C24, two real
-- processes); case ids are the field cases of docs/design.md, "Field cases". Every wait polls a
-- condition with a deadline; every domain (units and hand-started daemons, the latter by PID) is
-- destroyed in after_each.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

-- A new domain of n nodes whose node files all list every node in order (not started).
-- These specs restart one end of a node-map mismatch (C21's stale node, a start limit) and are about
-- that end: the simulator's old rule (either end's restart clears the mismatch), not its default
-- (both ends must restart: C32, tests/sim/converge_spec.lua).
local function domain(n) return simdomain.in_order(n, simdomain.MISMATCH_CLEARS_ONE) end

-- Run one command for a job on node n1 only; returns {status, output, outcome}.
local function on_n1(d, command, job, nodelist, args)
  return d:run_all({ command = command, job = job, nodelist = nodelist, names = { "n1" }, args = args }).n1
end

-- Wall-clock seconds with a fraction (date +%s.%N).
local function now()
  local p = io.popen("date +%s.%N")
  local t = tonumber(p:read("a"))
  p:close()
  return t
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

describe("the unit's lifecycle under systemd", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  describe("C26: a restart that hits the unit's start limit", function()
    local LIMIT = { Unit = { StartLimitBurst = 2, StartLimitIntervalSec = 120 } }
    -- Enabling a unit reloads the manager, which resets start counters: n1 is started last.
    local function given()
      d = domain(2)
      assert(d:unit_options("n1", LIMIT))
      assert(d:start({ "n2", "n1" }))
    end
    local LISTS = { "n1", "n[1-2]" }

    it("with the default: one reset-failed and one start in the same run, every prolog ok", function()
      given()
      local retried = 0
      for job = 1, 4 do
        local r = on_n1(d, "prolog", job, LISTS[job % 2 + 1])
        assert.are.equal("ok", r.outcome, r.output)
        if r.output:find("hit the unit's start limit", 1, true) then retried = retried + 1 end
        assert.are.equal("ok", on_n1(d, "epilog", job, LISTS[job % 2 + 1]).outcome)
      end
      assert.is_true(retried >= 1, "the start limit was hit and retried")
      assert.are.equal("active", d:prop("n1", "ActiveState"))
    end)

    it("reset_failed_retry=false: the failing run names start-limit-hit and the recovery; the next "
      .. "run with the default resets it", function()
      given()
      local failed
      for job = 11, 15 do
        local r = on_n1(d, "prolog", job, LISTS[job % 2 + 1], "--set reset_failed_retry=false")
        if r.outcome ~= "ok" then
          failed = r
          break
        end
        on_n1(d, "epilog", job, LISTS[job % 2 + 1])
      end
      assert.truthy(failed, "a restart hit StartLimitBurst=2")
      assert.are.equal("service-failed", failed.outcome, failed.output)
      assert.are.equal(7, failed.status)
      assert.truthy(failed.output:find("unit Result start-limit-hit", 1, true), failed.output)
      assert.truthy(failed.output:find("systemctl reset-failed " .. d:unit("n1"), 1, true), failed.output)
      assert.truthy(failed.output:find("StartLimitBurst", 1, true), failed.output)
      assert.are.equal("failed", d:prop("n1", "ActiveState"))
      assert.are.equal("start-limit-hit", d:prop("n1", "Result"))
      local r = on_n1(d, "prolog", 20, "n1")
      assert.are.equal("ok", r.outcome, r.output)
      assert.are.equal("active", d:prop("n1", "ActiveState"))
    end)
  end)

  it("C27: a daemon started by hand holds the command port: status and prolog never ok", function()
    d = domain(2)
    assert(d:start({ "n2" }))
    assert(d:systemctl("enable", d:unit("n1")))
    local pid = assert(d:start_stray("n1"))
    assert.truthy(simdomain.wait_until(function() return d:ctl("n1", "-q") == "READY\n" end, 10))
    local st = on_n1(d, "status", 30, "n[1-2]")
    assert.are.equal("service-failed", st.outcome, st.output)
    assert.truthy(st.output:find(d:unit("n1") .. " (inactive, main pid 0)", 1, true), st.output)
    assert.truthy(st.output:find("pid " .. pid, 1, true), st.output)
    local r = on_n1(d, "prolog", 31, "n[1-2]")
    assert.are.equal("service-failed", r.outcome, r.output)
    assert.are.equal(7, r.status)
    assert.truthy(r.output:find("pid " .. pid, 1, true), r.output)
    assert.truthy(simdomain.alive(pid))
    local e = on_n1(d, "epilog", 31, "n[1-2]")
    assert.truthy(e.output:find("was not registered", 1, true), e.output)
    d:stop_strays()
    r = on_n1(d, "prolog", 32, "n[1-2]")
    assert.are.equal("ok", r.outcome, r.output)
    st = on_n1(d, "status", 32, "n[1-2]")
    assert.are.equal("ok", st.outcome, st.output)
  end)

  it("C23: a disabled unit is skipped with a warning naming manage_disabled_unit; with it, started "
    .. "per job and never enabled", function()
    d = domain(2)
    assert(d:start())
    assert(d:systemctl("disable", "--now", d:unit("n1")))
    local r = on_n1(d, "prolog", 40, "n[1-2]")
    assert.are.equal("skipped", r.outcome, r.output)
    assert.are.equal(0, r.status)
    assert.truthy(r.output:find("manage_disabled_unit = true", 1, true), r.output)
    assert.are.equal("inactive", d:prop("n1", "ActiveState"))
    r = on_n1(d, "prolog", 41, "n[1-2]", "--set manage_disabled_unit=true")
    assert.are.equal("ok", r.outcome, r.output)
    assert.are.equal("active", d:prop("n1", "ActiveState"))
    assert.are.equal("disabled", d:prop("n1", "UnitFileState"))
    local st = on_n1(d, "status", 41, "n[1-2]", "--set manage_disabled_unit=true")
    assert.are.equal("ok", st.outcome, st.output)
  end)

  describe("C24: the previous job's epilog is late", function()
    it("a prolog in conflict waits without the node lock; the epilog runs meanwhile; then ok", function()
      d = domain(2)
      assert(d:start())
      assert.are.equal("ok", on_n1(d, "prolog", 300, "n[1-2]").outcome)
      -- job 301 (only n1) starts while job 300 is still registered with {n1, n2}
      local env = simdomain.prolog_env(301, "n1", "n1", 1)
      local assign = {}
      for k, v in pairs(env) do assign[#assign + 1] = k .. "=" .. simdomain.quote(v) end
      local out = d:dir("n1") .. "/prolog-301.out"
      local pipe = assert(io.popen(string.format("env -i %s %s --config %s prolog >%s 2>&1; echo $?",
        table.concat(assign, " "), simdomain.quote(d.build .. "/imexguard"),
        simdomain.quote(d:config("n1")), simdomain.quote(out))))
      assert.truthy(simdomain.wait_until(function()
        return (read(out) or ""):find("conflict_wait: waiting", 1, true)
      end, 20), read(out))
      local t0 = now()
      local e = on_n1(d, "epilog", 300, "n[1-2]")
      assert.are.equal("ok", e.outcome, e.output)
      assert.truthy(e.output:find("job 300 unregistered", 1, true), e.output)
      assert.is_true(now() - t0 < 3, "the epilog did not wait for the node lock")
      local status = tonumber(pipe:read("a"):match("%d+"))
      pipe:close()
      local text = read(out)
      assert.are.equal(0, status, text)
      assert.truthy(text:find("outcome=ok", 1, true), text)
      assert.are.equal(d.addr.n1 .. "\n", d:nodes_file("n1"))
      -- job 302 wants {n1, n2} while 301 stays registered: still conflict, named, after the wait
      local r = on_n1(d, "prolog", 302, "n[1-2]", "--set conflict_wait=1")
      assert.are.equal("conflict", r.outcome, r.output)
      assert.are.equal(5, r.status)
      assert.truthy(r.output:find("imexguard forget 301", 1, true), r.output)
      assert.truthy(r.output:find("after waiting 1 s", 1, true), r.output)
      assert.are.equal(d.addr.n1 .. "\n", d:nodes_file("n1"))
    end)
  end)
end)
