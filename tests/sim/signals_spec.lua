-- SPDX-License-Identifier: Apache-2.0
-- What imexguard leaves for the GPU health stack (issue 31, items 1 and 2), under the real systemd
-- user manager (tests/with-systemd; contrib/simdomain.lua, one imexsim@NODE.service per node):
-- the unit's restarts by systemd itself (Restart=on-failure, a daemon the simulator crashes with
-- IMEXSIM_CRASH_AFTER_MS) counted from NRestarts between runs, a reset-failed and a restart by hand
-- not counted (ExecMainStartTimestamp), health's unit-flapping (exit 23), status and the metrics;
-- and the node condition (state_dir/condition.json, imexguard_imex_expected) after prolog, epilog
-- and health. Every wait polls a condition with a deadline; the domain is destroyed in after_each.
package.path = "contrib/?.lua;" .. package.path
local cjson = require("cjson")
local simdomain = require("simdomain")

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

describe("the health stack's signals under systemd", function()
  local d, metrics

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  local function on_n1(command, job, nodelist, args)
    return d:run_all({ command = command, job = job, nodelist = nodelist, names = { "n1" },
      args = "--set metrics_dir=" .. metrics .. " " .. (args or "") }).n1
  end
  local function nrestarts() return tonumber(d:prop("n1", "NRestarts")) end
  local function condition() return cjson.decode((assert(read(d:dir("n1") .. "/state/condition.json")))) end
  local function prom() return read(metrics .. "/imexguard.prom") or "" end

  -- n1 up, READY, and the same main process for `hold` seconds (no restart coming)
  local function settled(hold)
    return simdomain.wait_until(function()
      local pid = d:prop("n1", "MainPID")
      if d:prop("n1", "ActiveState") ~= "active" or pid == "0" or d:ctl("n1", "-q") ~= "READY\n" then
        return false
      end
      os.execute("sleep " .. hold)
      return d:prop("n1", "MainPID") == pid
    end, 30)
  end

  it("a unit that systemd restarts 3 times: health ends unit-flapping (23) naming the count and the "
    .. "window; reset-failed and a restart by hand count nothing; the window lets them go", function()
    d = simdomain.in_order(1)
    metrics = d.root .. "/metrics"
    os.execute("mkdir -p " .. metrics)
    assert(d:unit_options("n1", { Unit = { StartLimitBurst = 100, StartLimitIntervalSec = 60 },
      Service = { Restart = "on-failure", RestartSec = "100ms" } }))
    assert(d:start())
    assert.truthy(settled(0.2))
    local h = on_n1("health", 1, "n1")
    assert.are.equal("ok", h.outcome, h.output)
    -- the daemon crashes 0.4 s after each start; systemd restarts it (NRestarts counts up)
    d:configure("n1", { IMEXSIM_CRASH_AFTER_MS = 400 })
    assert(d:systemctl("restart", d:unit("n1")))
    assert.truthy(simdomain.wait_until(function() return (nrestarts() or 0) >= 3 end, 30), "no restarts")
    d:configure("n1", { IMEXSIM_CRASH_AFTER_MS = false })
    assert.truthy(settled(0.6), "n1 never settled")
    local n = nrestarts()
    assert.is_true(n >= 3)
    h = on_n1("health", 1, "n1")
    assert.are.equal("unit-flapping", h.outcome, h.output)
    assert.are.equal(23, h.status)
    assert.truthy(h.output:find("restarted " .. n .. " times in the last 10 min", 1, true), h.output)
    assert.truthy(h.output:find("flapping_window = 600 s", 1, true), h.output)
    assert.truthy(h.output:find("new IMEX instance", 1, true), h.output)
    assert.truthy(h.output:find("imexguard: unit-flapping: ", 1, true), h.output) -- the reason line
    assert.matches("\nimexguard_unit_restarts_total " .. n .. "\n", prom())
    assert.matches("\nimexguard_unit_flapping 1\n", prom())
    -- status says so on its restarts line, with the same outcome
    local st = on_n1("status", 1, "n1")
    assert.are.equal("unit-flapping", st.outcome, st.output)
    assert.truthy(st.output:find("restarts     flapping: " .. n .. " by systemd in the last 10 min", 1, true),
      st.output)
    -- reset-failed zeroes NRestarts of the running unit: no restart, none lost
    assert(d:systemctl("reset-failed", d:unit("n1")))
    assert.are.equal(0, nrestarts())
    h = on_n1("health", 1, "n1")
    assert.are.equal("unit-flapping", h.outcome, h.output)
    assert.truthy(h.output:find("restarted " .. n .. " times", 1, true), h.output)
    assert.matches("\nimexguard_unit_restarts_total " .. n .. "\n", prom())
    -- a restart by hand: a new main process, NRestarts 0: no automatic restart
    assert(d:systemctl("restart", d:unit("n1")))
    assert.truthy(settled(0.2))
    h = on_n1("health", 1, "n1")
    assert.truthy(h.output:find("restarted " .. n .. " times", 1, true), h.output)
    assert.matches("\nimexguard_unit_restarts_total " .. n .. "\n", prom())
    -- a window of 1 s: once the last restart (the record's latest event) is older, not flapping
    local rec = cjson.decode((assert(read(d:dir("n1") .. "/state/unit-restarts.json"))))
    local last = tonumber(rec.events[#rec.events][1]) / 1e6
    assert.truthy(simdomain.wait_until(function()
      local p = io.popen("date +%s.%N")
      local now = tonumber(p:read("a"))
      p:close()
      return now > last + 1.2
    end, 10))
    h = on_n1("health", 1, "n1", "--set flapping_window=1")
    assert.are.equal("ok", h.outcome, h.output)
    assert.matches("\nimexguard_unit_flapping 0\n", prom())
  end)

  it("the node condition: job-registered after the prolog, idle after the epilog, written only on a "
    .. "change; the metric with its reason", function()
    d = simdomain.in_order(2)
    metrics = d.root .. "/metrics"
    os.execute("mkdir -p " .. metrics)
    assert(d:start())
    local r = d:run_all{ job = 7, nodelist = "n[1-2]", args = "--set metrics_dir=" .. metrics }
    assert.are.equal("ok", r.n1.outcome, r.n1.output)
    local c = condition()
    assert.same({ true, "job-registered", { "7" } }, { c.expected, c.reason, c.jobs })
    assert.matches('\nimexguard_imex_expected{reason="job%-registered"} 1\n', prom())
    local path = d:dir("n1") .. "/state/condition.json"
    local function inode()
      local p = io.popen("stat -c %i '" .. path .. "'")
      local s = p:read("a")
      p:close()
      return s
    end
    local before = inode()
    -- the fast path (same job again): nothing changes, the file is not replaced
    r = on_n1("prolog", 7, "n[1-2]")
    assert.are.equal("ok", r.outcome, r.output)
    assert.are.equal(before, inode())
    r = on_n1("epilog", 7, "n[1-2]")
    assert.are.equal("ok", r.outcome, r.output)
    c = condition()
    assert.same({ false, "idle", {} }, { c.expected, c.reason, c.jobs })
    assert.matches('\nimexguard_imex_expected{reason="idle"} 0\n', prom())
    -- a disabled unit (C23): health says not applicable, the condition unit-disabled
    assert(d:systemctl("disable", "--now", d:unit("n1")))
    local h = on_n1("health", 8, "n[1-2]")
    assert.are.equal("skipped", h.outcome, h.output)
    c = condition()
    assert.same({ false, "unit-disabled" }, { c.expected, c.reason })
  end)
end)
