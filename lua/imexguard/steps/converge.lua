-- SPDX-License-Identifier: Apache-2.0
--- Steps 8 and 10 of the built-in policy, convergence across the prolog order (docs/design.md,
-- "Decision model of the default policy", steps 8a, 8 and 10; cases C31, C32, C51, C52): the health
-- wait after the fabric check, the one restart that clears a stale node-map mismatch (only on the
-- older end), and the watcher a prolog leaves (P:leave_watcher, imexguard.watch) so that the
-- domain converges whichever prolog returns first, with the watcher's own run (`imexguard watch`).
-- Its functions take the policy as their first argument and call the steps as its methods
-- (P:check_fabric, P:may_restart, P:restart, P:wait_healthy, P:converge, P:leave_watcher,
-- P:applies, P:desired), so a site's override is used; the policy's methods wait_healthy,
-- wait_converged, converge and run_watch call them.
local base = require("imexguard.steps.base")
local outcomes = require("imexguard.outcomes")
local one_line = require("imexguard.text").one_line
-- Loaded when first used (imexguard.lazy).
local lazy = require("imexguard.lazy")
local desired, slots, health, watch = lazy("imexguard.steps.desired", "imexguard.steps.slots",
  "imexguard.health", "imexguard.watch")

local M = {}

--- Step 8 after 8a: P:check_fabric first (waiting while a GPU registers; this node's fabric fault
-- ends the step at once: it outranks a peer's fault, names this node's GPU and blames no peer, and
-- needs no wait on the domain), then poll the ctl until the job's domain is healthy (health.wait;
-- the assessment's ctl answer is the first poll).
-- @param policy table the policy (check_fabric)
-- @return outcome, message
function M.wait_healthy(policy, ctx, want, assessment)
  local r, fo, fm = policy:check_fabric(ctx, want, true)
  if not r then return fo, fm end
  local outcome, msg = health.wait(ctx, want, assessment.answer)
  if want.slots then outcome, msg = slots.after_wait(ctx, want, outcome, msg) end -- the SIGUSR1 floor
  if r.state == "unknown" or r.state == "degraded" or (r.polls or 0) > 1 then
    msg = msg .. "; fabric: " .. r.message
  end
  return outcome, one_line(msg)
end

--- Steps 8 and 10: P:converge (the health wait and C32's one restart); an outcome that exits 0
-- leaves the watcher (P:leave_watcher, step 10: the convergence of the peers that restart after this
-- prolog returns; its note is added to the message).
-- @param policy table the policy (converge, leave_watcher)
-- @param assessment table from P:assess_daemon (action, nodes, unit, answer: the first poll)
-- @param st table the state file (the registry; saved by P:restart)
-- @return outcome, message, restarted (true when this run restarted the daemon to converge; called
--   once per run, so that is the one restart)
function M.wait_converged(policy, ctx, want, assessment, st, info)
  local outcome, msg, restarted = policy:converge(ctx, want, assessment, st, info)
  local w = outcomes.exit_code(outcome, ctx.settings) == 0 and policy:leave_watcher(ctx, want)
  if w then msg = one_line(msg .. "; " .. w) end
  return outcome, msg, restarted
end

--- Wait for health and converge (C32): P:wait_healthy; when it ends in a stale node-map mismatch
-- (both ends of a link run the job's node list, the link still shows NODE_MAP_MISMATCH, and IMEX
-- keeps it until both ends restart), restart this node's daemon once per run where P:may_restart
-- allows a restart under the registered jobs (the rule of every restart), then wait again. Where it
-- may not, wait once more (the other end may hold the block alone and restart); where the mismatch
-- stays after that, or after this node's restart, the outcome stays stuck-mismatch, naming the
-- nodes to restart together. A nudge (SIGUSR1) is no substitute: it does not clear the block.
-- Only the older end restarts (C52): a daemon this run started or restarted (assessment.action
-- "start" or "restart") is a new instance, started after the mismatch its peers show began, so it
-- cannot be the end that remembers it (IMEX remembers a mismatch on the end that had the peer
-- connected when the peer's list changed); it never restarts again for one, and waits the whole
-- health wait for the older end's restart instead of stale_mismatch_after.
-- @param policy table the policy (wait_healthy, may_restart, restart)
-- @return outcome, message, restarted (as M.wait_converged)
function M.converge(policy, ctx, want, assessment, st, info)
  local fresh = assessment.action == "start" or assessment.action == "restart"
  if fresh then desired.set_stale_wait(want) end
  local outcome, msg = policy:wait_healthy(ctx, want, assessment)
  if outcome ~= health.STALE_MISMATCH_OUTCOME then return outcome, msg end
  local unit = ctx.settings.unit
  if fresh then
    return outcome, one_line(msg .. "; this run " .. assessment.action .. "ed " .. unit
      .. " after the mismatch began, so this end cannot be the one that holds it: the other end must restart")
  end
  local a = { action = "restart", nodes = assessment.nodes, unit = assessment.unit, changed = false,
    reason = "a stale node-map mismatch (C32)" }
  local allowed, why = policy:may_restart(ctx, st, a)
  if not allowed then
    -- the other end may hold the block alone and restart to clear it: one more round of the wait
    ctx.host.log("warning", one_line("node " .. base.node_name(ctx) .. ": may not restart " .. unit
      .. " to clear a stale node-map mismatch (" .. tostring(why) .. "); waiting once more for the other "
      .. "end's restart"))
    local o2, m2 = policy:wait_healthy(ctx, want, {})
    if o2 ~= health.STALE_MISMATCH_OUTCOME then return o2, m2 end
    return o2, one_line(m2 .. "; this node may not restart it: " .. tostring(why))
  end
  ctx.host.log("warning", one_line("node " .. base.node_name(ctx) .. ": restarting " .. unit
    .. " once to clear a stale node-map mismatch: " .. msg))
  local rok, props, rm = policy:restart(ctx, want, a, st, info)
  if not rok then return props, rm end
  -- this end is new now; the other end's prolog may be restarting its daemon (a slow unit job, a
  -- systemd re-exec): the whole health wait for it, not stale_mismatch_after
  desired.set_stale_wait(want)
  local o2, m2 = policy:wait_healthy(ctx, want, {})
  if o2 == health.STALE_MISMATCH_OUTCOME then
    m2 = m2 .. "; this run already restarted " .. unit .. " once to clear it: the other end must restart too"
  else
    m2 = m2 .. "; " .. unit .. " restarted once to clear a stale node-map mismatch"
  end
  return o2, one_line(m2), true
end

--- Entry point `watch` (P:run_watch; the prolog's watcher, imexguard.watch.run): the watch, which
-- only ever sends SIGUSR1 (the host of `watch` refuses every other side effect), of the job's IMEX
-- domain as the prolog found it (P:applies, P:desired; the channel step is the prolog's), found at
-- its first poll (a job that ended before costs no query).
-- @param policy table the policy (applies, desired)
-- @return outcome, message
function M.watch_job(policy, ctx)
  local id, o, m = base.check_job_id(ctx)
  if not id then return o, m end
  return watch.run(ctx, function()
    local info, io, im = policy:applies(ctx)
    if not info then return nil, io, im end
    return policy:desired(ctx, info)
  end)
end

return M
