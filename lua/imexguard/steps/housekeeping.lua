-- SPDX-License-Identifier: Apache-2.0
--- Under the node lock, before any decision (docs/design.md, "Decision model of the default
-- policy": "Leftover temp files" and "Load the state file", after step 3; cases C36, C39): the
-- state file and what earlier runs left in it and beside it. Step 3a removes the temp files of
-- killed writes; a state file that cannot be read makes the registry unknown (conflict, the file
-- kept); the registrations of another boot and the record of an interrupted change are dropped.
-- The prolog and the epilog both run it.
local base = require("imexguard.steps.base")
local one_line = require("imexguard.text").one_line
-- Loaded when first used (imexguard.lazy).
local lazy = require("imexguard.lazy")
local state, registry = lazy("imexguard.state", "imexguard.registry")

local node_name = base.node_name

local M = {}

--- Step 3a (C39): under the node lock, remove the temp files a killed write left next to the state
-- file and the node list (host.remove_temps: only `.<basename>.imexguard.XXXXXX` names of those two
-- files, whose writer is gone; never anything else). Best effort: a failure is logged at debug, like
-- each removal. A host without the primitive (an older kit) removes nothing.
-- @param ctx table policy context
-- @param info table|nil from applies (info.nodes_file); nil: the state file's directory only
-- @return list of the removed paths
function M.remove_temps(ctx, info)
  local host, removed = ctx.host, {}
  if type(host.remove_temps) ~= "function" then return removed end
  local paths = { state.path(ctx.settings) }
  if info and info.nodes_file then paths[#paths + 1] = info.nodes_file end
  for _, path in ipairs(paths) do
    local names, err = host.remove_temps(path)
    local dir = path:match("^(.*)/[^/]*$") or "."
    if type(names) == "table" then
      table.sort(names)
      for _, n in ipairs(names) do
        removed[#removed + 1] = dir .. "/" .. n
        host.log("debug", one_line(string.format("removed %s/%s, the temp file of a write of %s that was "
          .. "killed before its rename", dir, n, path)))
      end
    elseif names == nil then
      host.log("debug", one_line("leftover temp files not checked: " .. tostring(err)))
    end
  end
  return removed
end

--- The message for a state file that cannot be read or is corrupt (state.load failed): the job
-- registry is unknown, so nothing may change and the file must not be overwritten.
-- @param ctx table policy context
-- @param err string state.load's message (names the file and the error)
-- @return "conflict", one-line message (what to do)
function M.registry_unknown(ctx, err)
  return "conflict", one_line(string.format("node %s: %s: the job registry is unknown, nothing changed and "
    .. "the file is kept. Inspect it; remove it only when no job uses IMEX on this node (the next "
    .. "prolog then starts a new registry)", node_name(ctx), tostring(err)))
end

--- C36: drop the registrations made during another boot (imexguard.registry.drop_other_boots): a
-- state_dir that outlives a reboot still lists the jobs the reboot ended. Logged at warning, one
-- line naming the jobs; the caller saves the state when it saves it anyway.
-- @param ctx table policy context
-- @param st table state (changed in place)
-- @return list of the removed entries
function M.drop_other_boots(ctx, st)
  local now = base.boot_id(ctx)
  local removed = registry.drop_other_boots(st, now)
  if #removed > 0 then
    ctx.host.log("warning", one_line(string.format("node %s: dropping the registration(s) of job %s: made "
      .. "during another boot (boot ID %s, now %s), which ended those jobs", node_name(ctx),
      registry.ids(removed), tostring(removed[1].boot_id), now)))
  end
  return removed
end

--- Under the node lock: a record of a change in progress (state.interrupted_job) means the prolog
-- that wrote it died before it ended (it held this lock; kill -9, a node crash, slurmd's kill at
-- PrologEpilogTimeout). Slurm fails a job whose prolog did not finish (drain, requeue), so that
-- job does not run here: its registration is dropped, or it would block the next job (conflict).
-- A requeued job registers again in its own prolog. The state is saved with the next registration.
-- @param st table state (changed in place)
-- @return the dropped job id, or nil
function M.drop_interrupted(ctx, st)
  local id = state.interrupted_job(st)
  if not id then return nil end
  registry.unregister(st, id)
  state.end_deployment(st)
  ctx.host.log("warning", one_line(string.format("node %s: the prolog of job %s was interrupted during "
    .. "a change (its record is still in %s); Slurm does not run a job whose prolog did not finish, so "
    .. "its registration is dropped", node_name(ctx), tostring(id), state.path(ctx.settings))))
  return id
end

return M
