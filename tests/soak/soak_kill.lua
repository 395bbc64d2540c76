-- SPDX-License-Identifier: Apache-2.0
--- Soak check 1: kill -9 of the whole prolog at random points. A 2-node simulated domain under the
-- private systemd of tests/with-systemd (contrib/simdomain.lua); n2 keeps the list {n1, n2}, and
-- each run on n1 alternates its job's node list between n[1-2] and n1, so every prolog rewrites the
-- list and restarts imexsim@n1. A prolog is started in its own session and, after a random delay
-- (0 to 1.2 times a measured run), its whole process group gets SIGKILL. After each kill: the node
-- list is the old or the new one byte for byte, the state file and its registry parse; then the
-- job's prolog runs again (Slurm requeues it) and must end `ok` with the new list and no temp
-- file left in the node's or the state directory; its epilog ends the job.
local util = require("soakutil")

local M = {}

-- The files a node directory of simdomain and its state directory hold; anything else is a leftover.
local EXPECTED = {
  ["config.cfg"] = true, ["imex.log"] = true, ["imexguard.conf"] = true, ["nodes_config.cfg"] = true,
  ["state"] = true, ["last-prolog.out"] = true, ["last-epilog.out"] = true, ["lock"] = true,
  ["state.json"] = true, ["imex.pid"] = true, -- the simulated daemon's own pid file (IMEXSIM_PID_FILE)
  -- the last prolog's and epilog's record for `status` (imexguard.state.save_last)
  ["last-prolog.json"] = true, ["last-epilog.json"] = true,
  -- the node condition and the unit's restart count (imexguard.expected, imexguard.flapping)
  ["condition.json"] = true, ["unit-restarts.json"] = true,
  ["imex.state"] = true, -- the simulated daemon's state file (version, start, blocks: contrib/imexsim)
}

local function leftovers(d)
  local extra = {}
  for _, dir in ipairs({ d:dir("n1"), d:dir("n1") .. "/state" }) do
    for _, n in ipairs(util.ls(dir)) do
      if not EXPECTED[n] then extra[#extra + 1] = dir .. "/" .. n end
    end
  end
  return extra
end

-- The state file of n1 parses (imexguard.state), and so does its registry.
local function state_ok(d)
  local state = require("imexguard.state")
  local registry = require("imexguard.registry")
  local st, err = state.load(util.host(), { state_dir = d:dir("n1") .. "/state" })
  if not st then return false, err end
  local ok, jobs = pcall(registry.jobs, st)
  if not ok or type(jobs) ~= "table" then return false, "registry: " .. tostring(jobs) end
  return true
end

-- Start `imexguard prolog` for job on n1 in its own session; returns its pid (= its process group).
local function start_prolog(d, job, nodelist, out)
  local simdomain = require("simdomain")
  local env = simdomain.prolog_env(job, nodelist, "n1", 1)
  local assign = {}
  for k, v in pairs(env) do assign[#assign + 1] = k .. "=" .. util.q(v) end
  table.sort(assign)
  local cmd = string.format("setsid env -i %s %s --config %s prolog >%s 2>&1 & echo $!",
    table.concat(assign, " "), util.q(d.build .. "/imexguard"), util.q(d:config("n1")), util.q(out))
  return assert(tonumber((util.sh(cmd))), "cannot start the prolog")
end

local function bytes(d, names)
  local t = {}
  for _, n in ipairs(names) do t[#t + 1] = d.addr[n] end
  return table.concat(t, "\n") .. "\n"
end

-- One round: kill a prolog of `job` at `delay` s, check, rerun. Returns landed (boolean), or
-- nil and a one-line failure.
local function round(d, job, nodelist, want, delay, scratch)
  local h = util.host()
  local old = d:nodes_file("n1")
  local pid = start_prolog(d, job, nodelist, scratch .. "/killed.out")
  local t_end = h.now() + delay
  local finished = util.wait_for(function() return not util.alive(pid) or h.now() >= t_end end,
    delay + 1, 0.005)
  local landed = finished and util.alive(pid)
  os.execute("kill -KILL -- -" .. pid .. " 2>/dev/null")
  util.wait_for(function() return not util.alive(pid) end, 5)
  os.execute("wait " .. pid .. " 2>/dev/null")
  local now = d:nodes_file("n1")
  if now ~= old and now ~= want then
    return nil, string.format("after a kill at %.3f s the node list is neither the old nor the new one: %s",
      delay, util.show(now, 200))
  end
  local ok, err = state_ok(d)
  if not ok then return nil, "after a kill the state file does not parse: " .. tostring(err) end
  local r = d:prologs { job = job, nodelist = nodelist, names = { "n1" } }.n1
  if r.outcome ~= "ok" then
    return nil, string.format("the prolog after a kill at %.3f s ended %s: %s", delay, tostring(r.outcome),
      util.show(r.output, 300))
  end
  if d:nodes_file("n1") ~= want then return nil, "the prolog after a kill left another node list" end
  local extra = leftovers(d)
  if #extra > 0 then return nil, "left after the next run: " .. table.concat(extra, " ") end
  ok, err = state_ok(d)
  if not ok then return nil, "after the next run the state file does not parse: " .. tostring(err) end
  local e = d:epilogs { job = job, nodelist = nodelist, names = { "n1" } }.n1
  if e.outcome ~= "ok" then
    return nil, "epilog ended " .. tostring(e.outcome) .. ": " .. util.show(e.output, 200)
  end
  return landed
end

--- Run the check.
-- @param tap function(ok, text)
-- @param long boolean the long form (>= 200 runs and >= 50 kills landed; short: 12 runs, >= 3 landed)
function M.run(tap, long)
  local simdomain = require("simdomain")
  local runs, min_landed = long and 200 or 12, long and 50 or 3
  -- IMEXSIM_MISMATCH_CLEARS=one: the rounds change lists on both nodes at once; the simulator's
  -- default (C32: both ends of a mismatch must restart) would add convergence restarts to them
  local d = simdomain.new { nodes = 2, extra_cfg = simdomain.MISMATCH_CLEARS_ONE }
  local scratch = util.tmpdir("kill")
  local ok, err = pcall(function()
    d:write_node_list("n1", { "n1" })
    d:write_node_list("n2", { "n1", "n2" })
    assert(d:start())
    local h = util.host()
    -- Measured runs without a kill give the scale of the random delays, per kind of round: the
    -- rounds alternate a one-node list (healthy as soon as the daemon is back) and a two-node list
    -- (healthy once the peer has reconnected, after its back-off), which take different times. Each
    -- kind is measured from the state the rounds start it from (the other list), twice or more, and
    -- the shortest run is its scale, so that most kills land while the prolog still runs.
    local span = {}
    for m = 1, 5 do
      local nl = m % 2 == 1 and "n[1-2]" or "n1"
      local t = h.now()
      local r = d:prologs { job = m, nodelist = nl, names = { "n1" } }.n1
      assert(r.outcome == "ok", "measured prolog " .. m .. ": " .. tostring(r.output))
      span[nl] = math.min(span[nl] or math.huge, h.now() - t)
      d:epilogs { job = m, nodelist = nl, names = { "n1" } }
    end
    local landed, failures, first = 0, 0, nil
    for k = 1, runs do
      local nl, names = "n1", { "n1" }
      if k % 2 == 0 then nl, names = "n[1-2]", { "n1", "n2" } end
      local got, why = round(d, 100 + k, nl, bytes(d, names), math.random() * span[nl] * 1.2, scratch)
      if got == nil then
        failures = failures + 1
        first = first or why
      elseif got then
        landed = landed + 1
      end
    end
    tap(failures == 0 and landed >= min_landed, string.format("kill -9 of the whole prolog: %d runs, "
      .. "%d kills landed (runs of %.2f s for one node, %.2f s for two; kills up to 1.2 times that), %d "
      .. "failed; each list old or new, state and registry parse, no temp file, next prolog ok", runs, landed,
      span["n1"], span["n[1-2]"], failures))
    if first then util.note(first) end
  end)
  if not ok then tap(false, "kill -9 of the whole prolog: raised: " .. tostring(err)) end
  d:destroy()
  util.rmdir(scratch)
end

return M
