-- SPDX-License-Identifier: Apache-2.0
--- Ctl answers built for the Lua specs (tests/lua), each written once: the described meshes that
-- imexguard.testing.render_mesh turns into `nvidia-imex-ctl -N -j` JSON, and JSON answers of
-- any node ids for the scale specs.
local cjson = require("cjson")

local M = {}

--- Four node addresses, this node first.
M.HOSTS = { "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4" }

--- A described mesh (testing.render_mesh) of `hosts` where this node (the first) is READY and
-- CONNECTED to every peer, and the peers are UNAVAILABLE: the command port of the peers cannot be
-- reached (C22).
-- @tparam {string,...} hosts addresses, this node first
-- @treturn table {status, nodes}
function M.cmd_unreachable(hosts)
  local nodes, conns = {}, {}
  for _, h in ipairs(hosts) do conns[h] = "CONNECTED" end
  nodes[1] = { host = hosts[1], connections = conns }
  for i = 2, #hosts do nodes[i] = { host = hosts[i], status = "UNAVAILABLE", version = "" } end
  return { status = "DEGRADED", nodes = nodes }
end

--- A `-N -j` answer (JSON text) of the given node ids, every node READY and connected to every one,
-- with the ids in `ids` order; node i's address is 10.1.(i // 250).(i % 250).
-- @tparam {integer,...} ids node ids
-- @treturn string JSON
function M.dense(ids)
  local nodes = {}
  for _, i in ipairs(ids) do
    local conns = {}
    for _, j in ipairs(ids) do
      conns[tostring(j)] = { host = "10.1." .. j // 250 .. "." .. j % 250, status = "CONNECTED" }
    end
    nodes[tostring(i)] = { status = "READY", host = "10.1." .. i // 250 .. "." .. i % 250,
      connections = conns }
  end
  return cjson.encode({ status = "UP", nodes = nodes })
end

--- The `id` of each entry of `list` (parsed nodes or links), in order.
function M.ids_of(list)
  local out = {}
  for i, x in ipairs(list) do out[i] = x.id end
  return out
end

return M
