-- SPDX-License-Identifier: Apache-2.0
--- config-test's check of the cluster-wide maps a prolog reads (imexguard.configtest; issue 32
-- item 1): the domain map (setting domain_map: Slurm's block topology in topology.yaml or
-- topology.conf, the address map's third column; imexguard.domains, the prolog's own loader) and
-- the address map (address_source = "map"; imexguard.addresses). These files are shared by the
-- whole cluster: one typo there fails every node's next prolog (bad-input), so each fault is named
-- with its file and line, and the file that was found is said.
local domains = require("imexguard.domains")
local addresses = require("imexguard.addresses")
local slurmconf = require("imexguard.slurmconf")

local M = {}

--- A loader's message "PATH line N: why" (imexguard.domains, imexguard.addresses) as a finding's
-- file, line and message; a message of another shape is kept whole.
-- @param msg string
-- @return string|nil file, integer|nil line, string message
function M.place(msg)
  msg = tostring(msg)
  local file, line, why = msg:match("^address map (/%S+) line (%d+): (.*)$")
  if not file then file, line, why = msg:match("^(/%S+) line (%d+): (.*)$") end
  if file then return file, tonumber(line), why end
  file, why = msg:match("^topology file (/%S+) unreadable: (.*)$")
  if file then return file, nil, "unreadable: " .. why end
  file, why = msg:match("^address map (/%S+) unreadable: (.*)$")
  if file then return file, nil, "unreadable: " .. why end
  return nil, nil, msg
end

-- The keys Slurm's topology.conf knows (topology.conf(5): the block and the tree plugins).
local TOPOLOGY_KEYS = { blockname = true, nodes = true, blocksizes = true, switchname = true,
  switches = true, linkspeed = true }

--- Keys of topology.conf that imexguard's reader passes over but Slurm does not know (a misspelt
-- `Nodes` beside a `Nodes=` that parses): warnings naming the line.
-- @param host table the primitives (read)
-- @param path string a topology.conf
-- @return list of findings
function M.unknown_topology_keys(host, path)
  local text = path:match("%.ya?ml$") == nil and host.read(path, domains.MAX_FILE)
  local out = {}
  for raw, n in slurmconf.logical_lines(text or "") do
    local line = raw:gsub("#.*$", "")
    local has_nodes = line:lower():find("nodes=", 1, true) ~= nil
    for key in line:gmatch("([%a_]+)=") do
      if not TOPOLOGY_KEYS[key:lower()] then
        -- Slurm's parser refuses a key it does not know; imexguard's reads such a unit as one without
        -- nodes (which Slurm 25.11 allows), so a line without Nodes= is an error: its nodes are lost
        out[#out + 1] = { level = has_nodes and "warning" or "error", file = path, line = n,
          message = string.format("key %s is not one of Slurm's topology.conf keys (BlockName, Nodes, "
            .. "BlockSizes, SwitchName, Switches, LinkSpeed)%s", key,
            has_nodes and "" or "; this line has no Nodes=, so its unit would have no nodes") }
      end
    end
  end
  return out
end

-- Nodes and domains of a map, for the info line.
local function sizes(map)
  local nodes = 0
  for _, d in ipairs(map.domains or {}) do nodes = nodes + #d.nodes end
  return #(map.domains or {}), nodes
end

--- config-test's check "domain map": the map a prolog would load (imexguard.domains.load), its
-- faults with file and line, and which file it came from.
-- @param ctx table the run's context (settings, env, host)
-- @return list of findings (imexguard.configtest)
function M.domain_map(ctx)
  local s = ctx.settings
  if s.domain_map == "static" then
    return { { level = "info", message = "domain map: the static node list (domain_map = \"static\")" } }
  end
  local map, err = domains.load(ctx)
  if not map and s.address_source == "map" and tostring(err):find("^address map ") then
    return {} -- the address map's own check names it
  end
  if not map then
    local file, line, why = M.place(err)
    -- imexguard.lastgood: a prolog here may still run on the last map that parsed
    local node = require("imexguard.steps.base").node_name(ctx)
    local note = require("imexguard.lastgood").status_note(ctx, node)
    return { { level = "error", outcome = "bad-input", file = file, line = line,
      message = "IMEX domain map: " .. why .. (note and ("; " .. note .. ", for the job nodes it places as "
        .. "the file does; a node without that record ends bad-input") or " (every prolog here would end "
        .. "bad-input)") } }
  end
  local out = {}
  if map.kind == "topology" then
    for _, f in ipairs(M.unknown_topology_keys(ctx.host, map.source)) do out[#out + 1] = f end
  end
  -- the topologies as a whole (C45, C47): a tree and no block topology, a partition bound to a
  -- topology the file lacks, nodes two block topologies place differently
  for _, f in ipairs(domains.findings(ctx)) do out[#out + 1] = f end
  if map.domains then
    local nd, nn = sizes(map)
    table.insert(out, 1, { level = "info", file = map.source,
      message = string.format("domain map (%s) read: %d domains, %d nodes", map.kind, nd, nn) })
  else
    local paths = domains.topology_paths(ctx)
    table.insert(out, 1, { level = "info", message = string.format("domain map: %s (looked for %s)",
      map.source, table.concat(paths, ", ")) })
  end
  return out
end

--- config-test's check "address map": with address_source = "map" the map parses
-- (imexguard.addresses.load_map); names its fault with file and line.
-- @param ctx table the run's context
-- @return list of findings (imexguard.configtest)
function M.address_map(ctx)
  local s = ctx.settings
  if s.address_source ~= "map" then return {} end
  local map, err = addresses.load_map(ctx.host, s.address_map)
  if not map then
    local file, line, why = M.place(err)
    return { { level = "error", outcome = "bad-input", file = file, line = line,
      message = "address map: " .. why .. " (every prolog here would end bad-input)" } }
  end
  local n = 0
  for _ in pairs(map) do n = n + 1 end
  return { { level = "info", file = s.address_map,
    message = string.format("address map read: %d names", n) } }
end

return M
