-- SPDX-License-Identifier: Apache-2.0
-- The nudge (lua/imexguard/nudge.lua, issue 21) under the real systemd user manager
-- (tests/with-systemd; contrib/simdomain.lua, one imexsim@NODE.service per node): a 4-node domain
-- whose daemons reconnect to a lost peer only after a long back-off (IMEXSIM_RECONNECT_MS=15000,
-- doubling: a 595 daemon was seen waiting 15, 31, 62, 125 s; docs/design.md, "IMEX facts"). One
-- node's prolog restarts its daemon (its node list file is stale); the prologs of the three
-- current nodes start once that daemon is back. With the nudge (the default) they return soon
-- after it, through SIGUSR1 to their own daemons; without it (nudge = false) they wait for the
-- back-off. Either way the one restart is the only one: the nudged daemons keep their instance.
-- Every wait polls with a deadline; the domain is destroyed in after_each.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")
local system = require("system")

-- The daemons' back-off after a lost connection (ms): first retry after 15 s, then doubling.
local BACKOFF_MS = 15000
local EXTRA = { "IMEXSIM_RECONNECT_MS=" .. BACKOFF_MS, "IMEXSIM_RECONNECT_FACTOR=2",
  "IMEXSIM_RECONNECT_MAX_MS=120000" }
local JOB = "n[1-4]"
local CURRENT = { "n1", "n2", "n3" }

-- Poll fn() every 0.02 s until it returns a truthy value or `timeout` seconds pass.
local function wait_for(fn, timeout)
  local deadline = system.monotime() + timeout
  repeat
    local v = fn()
    if v then return v end
    system.sleep(0.02)
  until system.monotime() > deadline
  return nil
end

-- Lines of node `name`'s imex.log containing `text` (plain).
local function log_count(d, name, text)
  local n = 0
  for line in (simdomain.read_file(d:dir(name) .. "/imex.log") or ""):gmatch("[^\n]+") do
    if line:find(text, 1, true) then n = n + 1 end
  end
  return n
end

-- Prologs started by spawn, for after_each: {base = path prefix} (their PID in BASE.pid).
local spawned = {}

-- Start imexguard's prolog of job `job` on node `name` in the background (extra: imexguard
-- arguments, one shell string); its output goes to NODE/nudge-JOB.out, its PID to .pid, its exit
-- status to .rc.
local function spawn(d, name, job, extra)
  local env = simdomain.prolog_env(job, JOB, name, 4)
  local assign = {}
  for k, v in pairs(env) do assign[#assign + 1] = k .. "=" .. simdomain.quote(v) end
  table.sort(assign)
  local base = d:dir(name) .. "/nudge-" .. job
  local q = simdomain.quote(base)
  os.remove(base .. ".rc")
  local cmd = string.format("(env -i IMEXGUARD_NO_JOURNAL=1 %s %s --config %s %s prolog >%s.out 2>&1 & "
    .. "echo $! >%s.pid; wait $!; echo $? >%s.tmp; mv %s.tmp %s.rc) &", table.concat(assign, " "),
    simdomain.quote(d.build .. "/imexguard"), simdomain.quote(d:config(name)), extra or "", q, q, q, q, q)
  assert(os.execute(cmd))
  local p = { name = name, base = base }
  spawned[#spawned + 1] = p
  return p
end

-- Wait until every spawned prolog has ended (deadline `timeout` s); fills p.status, p.output,
-- p.ended (monotonic seconds, within one poll of 0.02 s). Returns true when all ended.
local function collect(procs, timeout)
  return wait_for(function()
    local all = true
    for _, p in ipairs(procs) do
      if not p.ended then
        local rc = simdomain.read_file(p.base .. ".rc")
        if rc then
          p.ended, p.status = system.monotime(), tonumber(rc:match("%d+"))
          p.output = simdomain.read_file(p.base .. ".out") or ""
        else
          all = false
        end
      end
    end
    return all
  end, timeout)
end

-- The number in `nudges=N` of a prolog's final line (0 when absent).
local function nudges(p)
  local line = p.output:match("outcome=[^\n]*") or ""
  return tonumber(line:match("nudges=(%d+)")) or 0
end

-- Is the domain UP on node n1, with every link CONNECTED?
local function up(d)
  local t = d:ctl_json("n1")
  return t and t.status == "UP"
end

describe("the nudge under systemd: one peer restarts, the others' back-off is 15 s", function()
  local d

  after_each(function()
    -- a prolog still running after a failure: stopped by its PID (it ends with its final line)
    for _, p in ipairs(spawned) do
      local pid = tonumber((simdomain.read_file(p.base .. ".pid") or ""):match("%d+"))
      if pid and not simdomain.read_file(p.base .. ".rc") then
        os.execute("kill " .. pid .. " 2>/dev/null")
      end
    end
    spawned = {}
    if d then d:destroy() end
    d = nil
  end)

  -- One job: n4's node list file is stale, so its prolog restarts its daemon; once the unit has
  -- its new invocation, the current nodes' prologs start. Checks that every prolog ends ok and
  -- that n4's restart is the only daemon start; returns {n4 = its prolog, procs = every prolog
  -- (p.after: seconds from the restarted daemon's start to its end), start = that start
  -- (ExecMainStartTimestampMonotonic, seconds)}.
  local function job(id, extra)
    d:write_node_list("n4", { "n4" })
    local inv = {}
    for _, n in ipairs({ "n1", "n2", "n3", "n4" }) do inv[n] = d:invocation(n) end
    local starts = {}
    for _, n in ipairs({ "n1", "n2", "n3", "n4" }) do starts[n] = d:starts(n) end
    local p4 = spawn(d, "n4", id, extra)
    local restarted = wait_for(function()
      local now = d:invocation("n4")
      return now and now ~= "" and now ~= inv.n4
    end, 30)
    if not restarted then
      collect({ p4 }, 60)
      error("n4's prolog did not restart its daemon: " .. tostring(p4.output))
    end
    local procs = { p4 }
    for _, n in ipairs(CURRENT) do procs[#procs + 1] = spawn(d, n, id, extra) end
    assert.truthy(collect(procs, 100), "a prolog did not end")
    local start = tonumber(d:prop("n4", "ExecMainStartTimestampMonotonic")) / 1e6
    for _, p in ipairs(procs) do
      assert.are.equal(0, p.status, p.name .. ": " .. p.output)
      assert.truthy(p.output:find("outcome=ok", 1, true), p.name .. ": " .. p.output)
      p.after = p.ended - start
    end
    -- the one restart is the only one: n4 started once, the nudged daemons kept their instance
    assert.are.equal(starts.n4 + 1, d:starts("n4"))
    for _, n in ipairs(CURRENT) do
      assert.are.equal(starts[n], d:starts(n), n .. " restarted")
      assert.are.equal(inv[n], d:invocation(n), n .. "'s unit has another invocation")
    end
    -- the job ends; the next one starts on an UP domain
    d:epilogs{ job = id, nodelist = JOB }
    assert.truthy(wait_for(function() return up(d) end, 60), "the domain did not come back UP")
    return { n4 = p4, procs = procs, start = start }
  end

  it("with the nudge the current nodes' prologs return soon after the restarted daemon is up, "
    .. "without it after the back-off; no daemon restarts but the one", function()
    d = simdomain.new{ nodes = 4, extra_cfg = EXTRA }
    for _, name in ipairs(d.names) do d:write_node_list(name, d.names) end
    assert(d:start())
    -- The units start one by one: the first daemons' attempts to the later ones fail and wait
    -- 15 s. A first job's prologs bring the domain UP (nudging), then it ends.
    local warm = d:prologs{ job = 1, nodelist = JOB }
    for _, n in ipairs(d.names) do assert.are.equal(0, warm[n].status, n .. ": " .. warm[n].output) end
    d:epilogs{ job = 1, nodelist = JOB }
    assert.truthy(wait_for(function() return up(d) end, 60))

    -- Without the nudge first: the daemons' own 5 s throttle of SIGUSR1 is far behind when the
    -- nudged job comes.
    local usr1 = {}
    for _, n in ipairs(d.names) do usr1[n] = log_count(d, n, "SIGUSR1") end
    local without = job(2, "--set nudge=false")
    for _, p in ipairs(without.procs) do assert.are.equal(0, nudges(p), p.name) end
    for _, n in ipairs(d.names) do assert.are.equal(usr1[n], log_count(d, n, "SIGUSR1"), n) end

    local with = job(3)
    -- the current nodes nudged their own daemons (SIGUSR1 restarts outgoing connections); the
    -- restarted node's own links were up at once: it had nothing to nudge
    local sent = 0
    for i = 2, #with.procs do sent = sent + nudges(with.procs[i]) end
    assert.is_true(sent >= 1, "no current node nudged")
    assert.are.equal(0, nudges(with.n4))
    for _, n in ipairs(CURRENT) do
      assert.is_true(log_count(d, n, "SIGUSR1: restarting outgoing connections") > usr1[n], n)
    end

    -- with < without: every prolog of the nudged job back within a few seconds of the restarted
    -- daemon's start; without, the current nodes waited for most of the back-off
    local with_max, without_min = 0, math.huge
    for _, p in ipairs(with.procs) do with_max = math.max(with_max, p.after) end
    for i = 2, #without.procs do without_min = math.min(without_min, without.procs[i].after) end
    local seen = string.format("after the restarted daemon's start: with the nudge at most %.2f s, "
      .. "without at least %.2f s", with_max, without_min)
    assert.is_true(with_max < 5, seen)
    assert.is_true(without_min > with_max + 5, seen)
    assert.is_true(without_min > BACKOFF_MS / 1000 / 2, seen)
  end)
end)
