-- SPDX-License-Identifier: Apache-2.0
--- The records a finished run leaves on the node for later readers, shaped from the driver's run
-- table: the last prolog and epilog that `status` shows (imexguard.state.save_last) and the run's
-- sample in the Prometheus textfile (imexguard.metrics.record). The driver writes them after the
-- outcome (D.after); neither changes it.
local M = {}

-- The run's seconds so far (monotonic clock), from run.started (set by the driver's settings call).
local function duration(run, now)
  return math.max(0, now - (run.started or now))
end

--- Record the run as the last one of its command (imexguard.state.save_last: what `status` shows
-- as the last prolog and epilog): outcome, exit code, job, end (wall clock, microseconds), duration
-- and message. A state directory that does not exist yet (no run took the node lock: nothing to
-- show either) is no failure.
-- @param run table the driver's run (command, settings, ctx, started)
-- @param host table the real primitives
-- @param outcome string
-- @param code integer its exit code
-- @param message string one line (the final line's, with its counts)
-- @return true, or nil, error message
function M.save_last(run, host, outcome, code, message)
  local now = host.now()
  local job = run.ctx and run.ctx.job and run.ctx.job.id
  local ok, err, ecode = require('imexguard.state').save_last(host, run.settings, run.command, {
    outcome = outcome, exit_code = code, job = job ~= nil and tostring(job) or nil,
    ended_us = host.wallclock() * 1e6, duration = duration(run, now), message = message })
  if not ok and ecode ~= 'ENOENT' then return nil, err end
  return true
end

-- A list of the run's as metrics labels, one table of label strings per item (row(item)), or nil
-- when the run has no such list.
local function labels(list, row)
  if type(list) ~= 'table' then return nil end
  local out = {}
  for i, x in ipairs(list) do out[i] = row(x) end
  return out
end

-- The node states of the mesh the run's last ctl answer listed (ctx.mesh_seen, set by
-- imexguard.health.probe), or nil.
local function mesh_nodes(seen)
  return labels(type(seen) == 'table' and seen.nodes, function(n)
    return { id = tostring(n.id), host = tostring(n.host), status = tostring(n.status) }
  end)
end

-- The GPUs' fabric registration the run read (ctx.fabric, set by imexguard.fabric.check), or nil.
local function fabric_gpus(fab)
  return labels(type(fab) == 'table' and fab.gpus, function(g)
    local part = g.cluster_uuid and (g.cluster_uuid .. '.' .. tostring(g.clique_id)) or 'N/A'
    return { gpu = tostring(g.index), state = g.na and 'N/A' or tostring(g.state),
      status = tostring(g.status or 'N/A'), partition = part }
  end)
end

--- Record the run in the metrics file (imexguard.metrics.record): outcome, exit code, duration
-- (monotonic seconds), end (Unix seconds), the unit's starts and restarts and the nudges of this
-- run (run.restarts, run.nudges: the driver's counting host), the mesh's node states and the GPUs'
-- fabric registration the run saw.
-- @param run table the driver's run (command, settings, ctx, started, restarts, nudges)
-- @param host table the real primitives
-- @param outcome string
-- @param code integer its exit code
-- @return boolean true when the file was written (metrics.record)
function M.save_metrics(run, host, outcome, code)
  local now = host.now()
  local ctx = run.ctx
  return require('imexguard.metrics').record({ host = host, settings = run.settings }, {
    command = run.command, outcome = outcome, exit_code = code, duration = duration(run, now),
    ended = host.wallclock(), restarts = run.restarts or 0, nudges = run.nudges or 0,
    nodes = mesh_nodes(ctx and rawget(ctx, 'mesh_seen')),
    gpus = fabric_gpus(ctx and rawget(ctx, 'fabric')),
    version = host.version })
end

return M
