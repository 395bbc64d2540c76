-- SPDX-License-Identifier: Apache-2.0
--- Steps 9a, 9b and 9 of the built-in policy, the job's registration (docs/design.md, "Decision
-- model of the default policy"; case C08): under the lock, the job's entry in the registry of the
-- state file. Before a change (9a) it is saved with the record of the change in progress, and the
-- change ends (9b) keeping it or removing it again; on the path that changes nothing it is saved
-- once the domain is healthy (9). Both build the entry the same way (its id, node list and time,
-- the boot, the job's hosts, the policy's fields and the daemon's invocation ID).
local base = require("imexguard.steps.base")
local outcomes = require("imexguard.outcomes")
local one_line = require("imexguard.text").one_line
-- Loaded when first used (imexguard.lazy).
local lazy = require("imexguard.lazy")
local state, registry, hostlist = lazy("imexguard.state", "imexguard.registry", "imexguard.hostlist")

local node_name = base.node_name

local M = {}

-- Register the job in st (not saved): its id, node list (want.bytes) and time, the boot it belongs
-- to (C36), the job's hosts compressed for people (`hosts`), then the policy's `extra` (which
-- wins); an invocation_id that extra leaves unset or "" is invocation()'s.
-- @return entry, id, now_us (the registration's time)
local function add_entry(ctx, st, want, extra, invocation)
  local e = { boot_id = base.boot_id(ctx) }
  if type(want.list) == "table" then e.hosts = hostlist.ranged(want.list) end
  for k, v in pairs(extra or {}) do e[k] = v end
  if e.invocation_id == nil or e.invocation_id == "" then e.invocation_id = invocation() end
  local id, now_us = base.job_id(ctx), ctx.host.wallclock() * 1e6
  return registry.register(st, id, want.bytes, now_us, e), id, now_us
end

-- Until the (re)start, the daemon the job will run on is not known.
local function not_started() return "" end

--- A change in progress (M.begin_change): the job's registration, saved before the change.
local Change = {}
Change.__index = Change

--- Step 9a: before a change (rewrite of the node list and/or (re)start of the unit), under the node
-- lock: register the job and record what is about to be deployed (state.begin_deployment), and
-- save the state file. Nothing on the node has changed yet, so when the save fails the run ends
-- there (write-failed): a change under a registration that was never saved would leave the job
-- unprotected (a later job with another list would restart IMEX under it).
-- @param ctx table policy context
-- @param st table state (changed in place)
-- @param want table desired list (bytes, list)
-- @param extra table|nil more fields of the entry (invocation_id: "" until the (re)start)
-- @return change object (`local c <close> = change`; c:finish(outcome) keeps the registration on
--   exit 0 and removes it again otherwise; leaving the scope unfinished removes it), or nil,
--   "write-failed"|"deadline-exceeded", message
function M.begin_change(ctx, st, want, extra)
  local _, id, now_us = add_entry(ctx, st, want, extra, not_started)
  state.begin_deployment(st, want.bytes, id, now_us)
  local ok, err, code = state.save(ctx.host, ctx.settings, st)
  if not ok then
    return base.fail(base.by_code(code, "write-failed"), "node %s: state file %s not written: %s; job %s "
      .. "not registered, so nothing was changed (node list not rewritten, %s not restarted)", node_name(ctx),
      state.path(ctx.settings), tostring(err), id, ctx.settings.unit)
  end
  return setmetatable({ ctx = ctx, st = st, id = id }, Change)
end

--- Step 9b: keep the registration (the prolog succeeded), or remove it again (best effort, logged)
-- when the run ends in an outcome with a non-zero exit; the record of the change in progress goes
-- either way. Idempotent.
-- @param outcome string the run's outcome
-- @return string note for the run's message ("job 101 registered" / "job 101 unregistered ...")
function Change:finish(outcome)
  if self.finished then return self.note end
  self.finished = true
  local ctx, st = self.ctx, self.st
  local keep = outcomes.exit_code(outcome, ctx.settings) == 0
  if not keep then registry.unregister(st, self.id) end
  state.end_deployment(st)
  local ok, err = state.save(ctx.host, ctx.settings, st)
  if keep then
    self.note = "job " .. self.id .. " registered"
    if not ok then
      -- the job stays registered; the next run takes the leftover record for an interrupted prolog
      ctx.host.log("warning", one_line(string.format("node %s: state file %s not updated after job %s: %s",
        node_name(ctx), state.path(ctx.settings), self.id, tostring(err))))
    end
  elseif ok then
    self.note = string.format("job %s unregistered (%s)", self.id, tostring(outcome))
  else
    self.note = string.format("job %s could not be unregistered (%s); after it ends: SLURM_JOB_ID=%s "
      .. "imexguard epilog", self.id, tostring(err), self.id)
    ctx.host.log("warning", one_line(string.format("node %s: prolog of job %s ended %s but its "
      .. "registration stays in state file %s: %s", node_name(ctx), self.id, tostring(outcome),
      state.path(ctx.settings), tostring(err))))
  end
  return self.note
end

-- Leaving the scope without finish (a step raised): unregister, as for a failing outcome.
function Change:__close(err)
  if not self.finished then self:finish(err ~= nil and "policy-error" or "conflict") end
end

--- Step 9: register this job (prolog succeeded, nothing changed) and save the state file, under
-- the node lock.
-- @param ctx table policy context (job id)
-- @param st table state (changed and saved)
-- @param want table desired list (bytes, list)
-- @param extra table|nil more fields of the entry (invocation_id is filled from the unit)
-- @return entry, or nil, message (state file not written; the policy ends in write-failed: a job
--   the registry does not know is unprotected), code (host.write_atomic's), or nil when the job has
--   no id (nothing registered, a warning is logged)
function M.register(ctx, st, want, extra)
  local host = ctx.host
  if base.job_id(ctx) == "?" then
    host.log("warning", "job has no SLURM_JOB_ID: not registered")
    return nil
  end
  local entry, id = add_entry(ctx, st, want, extra, function()
    local props = host.unit(ctx.settings.unit)
    return props and props.invocation_id or ""
  end)
  local ok, err, code = state.save(host, ctx.settings, st)
  if not ok then
    return nil, one_line(string.format("state file %s not written, job %s not registered: %s",
      state.path(ctx.settings), id, tostring(err))), code
  end
  return entry
end

return M
