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

-- The GPUs' fabric the run read (ctx.fabric, set by imexguard.fabric.check), the Health Summary as
-- `health` ("N/A" without one), or nil.
local function fabric_gpus(fab)
  return labels(type(fab) == 'table' and fab.gpus, function(g)
    local part = g.cluster_uuid and (g.cluster_uuid .. '.' .. tostring(g.clique_id)) or 'N/A'
    local summary = type(g.health) == 'table' and g.health.summary or nil
    return { gpu = tostring(g.index), state = g.na and 'N/A' or tostring(g.state),
      status = tostring(g.status or 'N/A'), partition = part, health = tostring(summary or 'N/A') }
  end)
end

--- What the GPU health stack reads, after a run of a command that imexguard.commands marks
-- `signals` (prolog, epilog, health, forget): the unit's restart count (imexguard.flapping, from the unit's
-- properties the run read last: run.unit_props, the driver's watching host; nothing is asked of
-- systemd again) and the node condition "IMEX expected here" (imexguard.expected, from the outcome,
-- those properties, the registry and the policy's imex_always_expected). Each file is replaced only
-- when it changed, so a fast-path prolog reads three small files in state_dir and writes none.
-- run.signals gets {expected = {expected, reason}, flap = flapping.judge's result or nil} for the
-- metrics. Without state_dir (no prolog made it yet: no job registered) nothing is kept (the
-- metrics need it too: their lock is there). The files are written only when their text changed.
-- @param run table the driver's run (settings, unit_props, static)
-- @param host table the real primitives
-- @param outcome string the run's outcome
-- @return nil, or a message when a file could not be written (the outcome never changes)
function M.save_signals(run, host, outcome)
  local s, props = run.settings, run.unit_props
  local flap, ferr, fcode
  if props and props.n_restarts then
    flap, ferr, fcode = require('imexguard.flapping').record(host, s, props)
  end
  local st = require('imexguard.state').load(host, s)
  local jobs = st and require('imexguard.registry').jobs(st) or nil
  local cond, cerr, ccode = require('imexguard.expected').record(host, s, { outcome = outcome, props = props,
    jobs = jobs, static = run.static, flap = flap })
  run.signals = { expected = cond, flap = flap, st = st, jobs = jobs }
  local err, code = ferr or cerr, fcode or ccode
  -- no state_dir (ENOENT: no prolog made it yet, and it is never made here: a run by hand with the
  -- default settings must not create /run/imexguard), or a run that is not root (an admin trying
  -- health by hand): nothing kept
  if err and code ~= "ENOENT" and host.euid() == 0 then return err end
  return nil
end

--- This node's digest in its Slurm node's Extra (imexguard.digest; setting slurm_extra), after a run of
-- a `signals` command, written only when it changed: from the unit's properties the run read last,
-- the daemon's config.cfg (the -c of the unit's ExecStart) and node list, the ctl's answer the run
-- saw (ctx.mesh_seen), the registry (run.signals) and the outcome; the daemon's last error line is
-- read by health and by a run that failed, the domain's name by health (the others keep the last).
-- @param run table the driver's run (settings, env, ctx, unit_props, signals, command)
-- @param host table the real primitives
-- @param outcome string
-- @param code integer its exit code
-- @return nil, or a message when Slurm did not take it (the outcome never changes)
function M.save_digest(run, host, outcome, code)
  local s, ctx = run.settings, run.ctx
  local node = run.env and run.env.SLURMD_NODENAME
  if not (s.slurm_extra and ctx and type(node) == "string" and node:match("^[%w][%w._-]*$")) then
    return nil
  end
  local digest = require('imexguard.digest')
  local props = run.unit_props
  local ok, config = pcall(require('imexguard.steps.applies').daemon_config, ctx, props)
  local dom
  if run.command == 'health' then
    local _, d = require('imexguard.domains').node_line(ctx, node)
    dom = d and d.name
  end
  local sig = run.signals or {}
  local d = digest.build(host, { config = ok and config or s.imex_config, props = props,
    mesh = rawget(ctx, 'mesh_seen'), domain = dom, st = sig.st, jobs = sig.jobs, command = run.command,
    outcome = outcome, ok = code == 0, previous = digest.previous(host, s),
    with_error = run.command == 'health' or code ~= 0 })
  local done, err = digest.publish(host, s, node, d)
  if done == nil then return err end
  return nil
end

-- The setting membership ("list" or "slots"; nil for settings without it).
local function membership(settings)
  if type(settings) ~= 'table' or not require('imexguard.settings').by_name.membership then return nil end
  return settings.membership
end

--- Record the run in the metrics file (imexguard.metrics.record): outcome, exit code, duration
-- (monotonic seconds), end (Unix seconds), the unit's starts and restarts and the nudges of this
-- run (run.restarts, run.nudges: the driver's counting host), the name map's writes in place and
-- the membership mode (run.map_writes, the setting), the mesh's node states and the GPUs'
-- fabric registration the run saw, the node condition and the unit's restarts (run.signals, set by
-- M.save_signals before).
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
    map_writes = run.map_writes or 0, membership = membership(run.settings),
    nodes = mesh_nodes(ctx and rawget(ctx, 'mesh_seen')),
    gpus = fabric_gpus(ctx and rawget(ctx, 'fabric')),
    domain_map_fallback = ctx and type(rawget(ctx, 'domain')) == 'table'
      and rawget(ctx, 'domain').fallback ~= nil or false,
    expected = run.signals and run.signals.expected, flap = run.signals and run.signals.flap,
    version = host.version })
end

return M
