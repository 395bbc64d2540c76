-- SPDX-License-Identifier: Apache-2.0
--- Site policy: park IMEX on this node alone when the last job that uses it here ends, so that an
-- idle node reads healthy to DCGM's IMEX health watch. With the default policy an idle node keeps
-- the last job's node list; once its peers move on to another job's list its domain is DEGRADED
-- and DCGM fails it (docs/design.md, "The GPU health stack"); stopping the daemon
-- (stop_on_last_epilog.lua) fails it too (the ctl's -q exits 1: COMMAND_ERROR). Parked, the idle
-- daemon runs a node list of this node alone: `nvidia-imex-ctl -N -j` says UP and `-q` READY
-- whatever the former peers run. The price: the next job's prolog restarts the daemon with its own
-- list, even for the same nodes as the last job (the default's fast path is lost between jobs),
-- and the epilog restarts it once more (no job is registered then, so no import is lost).
-- The prolog is the default policy's; the epilog unregisters the job as the default does, and when
-- no other job is registered afterwards it writes this node's own address (BIND_INTERFACE_IP, else
-- the local address the node list has) as the node list and restarts the unit (started when it was
-- not running), under the node lock, with the default's steps (nodes_file.write_node_list,
-- restart.restart: the state file records what the daemon runs, so the next prolog knows). A node
-- already parked changes nothing. A write or restart that fails ends the epilog in its outcome (the
-- node drains: an admin looks at a daemon that would not start).
local default = require("policies.default")
local base = require("imexguard.steps.base")
local lazy = require("imexguard.lazy")
local applies, nodes_file, restart, nodelist =
  lazy("imexguard.steps.applies", "imexguard.steps.nodes_file", "imexguard.steps.restart",
    "imexguard.nodelist")
local text = require("imexguard.text")

local P = default.extend()

-- This node's address in its node list: BIND_INTERFACE_IP, else the first local address it has.
local function own_address(ctx, info, lines)
  if info.bind then return info.bind end
  local locals = {}
  for _, a in ipairs(ctx.host.local_addresses() or {}) do locals[a] = true end
  for _, a in ipairs(lines) do
    if locals[a] then return a end
  end
  return nil
end

--- The epilog after the job's entry was removed and the state file saved (under the node lock).
-- @param ctx table policy context
-- @param st table state (saved)
-- @param entry table the removed registry entry
-- @param remaining list the other registered entries
-- @return nil (the default message), or outcome, message
function P:after_unregister(ctx, st, entry, remaining)
  if #remaining > 0 then return default.after_unregister(self, ctx, st, entry, remaining) end
  local node, u = base.node_name(ctx), ctx.settings.unit
  local info, o, m = applies.applies(ctx)
  if not info then
    ctx.host.log("info", text.one_line("not parking " .. u .. ": " .. tostring(m)))
    if o == "skipped" then return nil end
    return o, m
  end
  local old = ctx.host.read(info.nodes_file, base.MAX_FILE)
  local me = own_address(ctx, info, nodelist.lines(old or ""))
  if not me then
    ctx.host.log("warning", text.one_line(string.format("node %s: not parking %s: no address of this node "
      .. "in %s", node, u, info.nodes_file)))
    return nil
  end
  local want = { bytes = me .. "\n", config_path = info.config }
  local active = info.unit.active_state == "active"
  if old == want.bytes and active then
    return "ok", string.format("job %s unregistered on node %s, the last job using IMEX; %s already "
      .. "parked on this node alone", entry.id, node, u)
  end
  if old ~= want.bytes then
    local ok, wo, wm = nodes_file.write_node_list(ctx, info, want, st)
    if not ok then return wo, wm end
  end
  local a = { action = active and "restart" or "start", unit = info.unit }
  local rok, ro, rm = restart.restart(ctx, want, a, st, info)
  if not rok then return ro, rm end
  return "ok", string.format("job %s unregistered on node %s, the last job using IMEX; %s parked on this "
    .. "node alone (%s)", entry.id, node, u, me)
end

return P
