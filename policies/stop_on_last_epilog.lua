-- SPDX-License-Identifier: Apache-2.0
--- Site policy: stop IMEX when the last job that uses it on this node ends. The prolog is the
-- default policy's (policies/default.lua; it starts the daemon again for the next job, "start"
-- because the unit is inactive); the epilog unregisters the job as the default does, and when no
-- other job is registered afterwards it stops the unit through systemd (StopUnit, waiting for the
-- job result, bounded by start_timeout). A stop that fails is service-failed: the epilog then
-- exits non-zero and Slurm drains the node, so an admin looks at a daemon that would not stop.
-- Only an epilog that removed a registration stops IMEX: the epilog of a job whose prolog failed
-- (never registered) leaves the unit alone, and so does a node with other jobs registered.
-- It shows how a site overrides a method of the default policy: P.extend() gives a policy table
-- that inherits every step, and assigning P:after_unregister replaces that one step.
local default = require("policies.default")
-- the room of imexguard.steps this epilog uses (the index, imexguard.steps, would load every room)
local base = require("imexguard.steps.base")
local registry = require("imexguard.registry")
local text = require("imexguard.text")

local P = default.extend()

--- The epilog after the job's entry was removed and the state file saved (under the node lock).
-- @param ctx table policy context
-- @param st table state (saved)
-- @param entry table the removed registry entry
-- @param remaining list the other registered entries
-- @return nil (the default message: still registered, left running), or outcome, message
function P:after_unregister(ctx, st, entry, remaining)
  if #remaining > 0 then return default.after_unregister(self, ctx, st, entry, remaining) end
  local s = ctx.settings
  local res, err, code = ctx.host.unit_job(s.unit, "stop", s.start_timeout)
  if res ~= "done" then
    return base.by_code(code, "service-failed"), text.one_line(string.format(
      "node %s: job %s was the last job using IMEX, but stopping %s failed: %s (%s)", base.node_name(ctx),
      entry.id, s.unit, tostring(code or res), tostring(err)))
  end
  return "ok", string.format("job %s unregistered on node %s, the last job using IMEX (%s); %s stopped",
    entry.id, base.node_name(ctx), registry.nodes_text(entry.nodes), s.unit)
end

return P
