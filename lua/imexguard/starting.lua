-- SPDX-License-Identifier: Apache-2.0
--- A daemon started seconds ago (issue 32 item 5): right after this node's daemon (re)started, its
-- peers reconnect to the new instance each on its own back-off (0.5-3 s per NVIDIA, 15 s and more
-- seen), so for a while the domain is DEGRADED and this node looks cut off, with no faulty node to
-- name. A prolog waits up to health_timeout for it (step 8); a health check that judged such a node
-- at once drained it, and a later run resumed it (with HealthCheckInterval=300, up to five minutes
-- drained). So `health` and `status` judge a daemon younger than health_timeout (systemd's
-- ExecMainStartTimestamp) whose only faults are those of a start (not READY yet, links not up yet)
-- as starting: `health` waits for it within its own budget (the health wait, imexguard.health.wait,
-- as the prolog's), `status` does not wait; what is still not healthy then is reported as
-- starting, with the daemon's age, exit 0: no drain. A real fault (a node map that is not the
-- list's, a configuration fault, a peer UNAVAILABLE) is judged as always, however young the daemon.
local one_line = require("imexguard.text").one_line

local M = {}

--- Local faults a start explains (verdict.judge's local_kind): the daemon not READY yet, its links
-- to peers not up yet. A daemon still not READY when the wait ends is judged as always (a daemon
-- that never becomes READY drains at once, not after health_timeout); one READY whose peers are
-- still reconnecting is starting.
M.LOCAL_KINDS = { ["not-ready"] = true, ["cut-off"] = true }

-- Whether a verdict is this node's daemon not READY (yet).
local function not_ready(v)
  return v ~= nil and v.verdict == "local-fault" and v.local_kind == "not-ready"
end

--- The age of this node's daemon when it is younger than health_timeout.
-- @param ctx table policy context (settings.health_timeout, host.wallclock)
-- @param props table|nil the unit's properties (active_state, exec_main_start_us)
-- @return number seconds, or nil (not running, never started, or older)
function M.young(ctx, props)
  if type(props) ~= "table" or props.active_state ~= "active" then return nil end
  local started = tonumber(props.exec_main_start_us) or 0
  if started <= 0 then return nil end
  local age = ctx.host.wallclock() - started / 1e6
  if age < 0 or age >= ctx.settings.health_timeout then return nil end
  return age
end

--- Whether an unhealthy verdict is one a start explains: this node not READY yet or cut off from
-- its peers, no faulty node identified, or peers whose only fault is this node's link to them.
-- @param v table verdict.judge's verdict
-- @return boolean
function M.explained(v)
  if v.healthy then return false end
  if v.verdict == "unhealthy" then return true end
  if v.verdict == "local-fault" then return M.LOCAL_KINDS[v.local_kind] == true end
  if v.verdict ~= "peer-fault" then return false end
  for _, f in ipairs(v.faulty or {}) do
    if not tostring(f.reason):find("^connection from this node") then return false end
  end
  return true
end

--- Judge a young daemon (see the top of this file).
-- @param ctx table policy context (command: `health` waits, `status` does not)
-- @param props table|nil the unit's properties
-- @param v table the verdict on the first answer
-- @param wait function|nil wait() -> outcome, message, the last verdict: the health wait from that
--   answer (health)
-- @return nil (not young, or a fault a start does not explain: judge as always), or outcome,
--   message: "ok" with "starting" and the daemon's age, or the wait's outcome ("ok", or a fault
--   the wait ended on that a start does not explain: the daemon still not READY, a configuration
--   fault, a stale mismatch...)
function M.judge(ctx, props, v, wait)
  local age = M.young(ctx, props)
  if not age or not M.explained(v) then return nil end
  local unit = ctx.settings.unit
  if not wait and not_ready(v) then return nil end
  if wait then
    local outcome, msg, last = wait()
    if outcome == "ok" then
      return "ok", one_line(string.format("%s (%s started %.0f s before this check)", msg, unit, age))
    end
    if not_ready(last) or (last and not M.explained(last)) or (outcome ~= "domain-unhealthy"
      and outcome ~= "peers-unhealthy") then
      return outcome, msg
    end
    v = last or v
  end
  local now = M.young(ctx, props) or age
  return "ok", one_line(string.format("starting: %s started %.0f s ago, less than health_timeout (%g s), and "
    .. "its peers are still connecting: %s; judged when it is older", unit, now, ctx.settings.health_timeout,
    tostring(v.summary)))
end

return M
