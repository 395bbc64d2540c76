-- SPDX-License-Identifier: Apache-2.0
--- The NVLink racks in Slurm's topologies (docs/design.md, step 2a; field cases C29, C45, C46, C47):
-- which units of the topologies (imexguard.topology) are a job's IMEX domains, and where slurmctld's
-- run-time placement comes in. Used by imexguard.domains, which owns the order of the sources.
--
--   * Blocks (domain_map "auto" or "topology"): every block of every block topology is an NVLink
--     rack or partition. Several block topologies (topology.yaml, one per GPU generation) may place
--     a node differently: the job's topology wins, the one its partition binds (`PartitionName=P
--     ... Topology=NAME`, SLURM_JOB_PARTITION) or else the cluster_default one, when it is a block
--     topology; where neither decides, two blocks with different nodes for one node of the job is a
--     real conflict (bad-input naming both). A tree defines no NVLink domain: a cluster with a tree
--     and no block topology is said to have none (C45).
--   * Leaf switches (domain_map "tree", OCI's rule): the switches with nodes and no child switch of
--     one tree topology: the job's, else the default one, else the only one.
--   * slurmctld (C46): Slurm 25.11 places nodes in blocks and switches at run time (`scontrol update
--     NodeName=X Topology=default:b2`, `slurmd --conf "Topology=..."`), which no file lists. When the
--     files leave a node of the job unplaced (or always, setting slurmctld_topology = "always"),
--     one `scontrol show topology [NAME]` (imexguard.topology.ask, once per run) gives the topology
--     as it is now, and replaces the file's version of it.
-- A map: {kind = "topology"|"tree", source = the file, domains = {{name, nodes, line, topology}},
--   of = {[node] = domain name}, conflicts = {[node] = message}, topos (the file's topologies),
--   job_topology (the job's: its partition's, else the default; nil: none), binding (the
--   partition's binding or nil), ask = the topology slurmctld is asked for ({name}: its name, ""
--   for topology.conf's, asked without an argument; nil: none can be), slurmctld (set by M.refresh),
--   partition (set by imexguard.domains: SLURM_JOB_PARTITION)}.
local lazy = require("imexguard.lazy")
local topology, hostlist = lazy("imexguard.topology", "imexguard.hostlist")
local one_line = require("imexguard.text").one_line

local M = {}

-- A parse error: nil and "FILE line N: why".
local function bad(path, n, fmt, ...)
  return nil, string.format("%s line %d: " .. fmt, path, n, ...)
end

--- A map from a list of units: every node in at most one of them.
-- @param kind string "topology" | "tree" | "address_map"
-- @param where string the file (for messages and the log)
-- @param list list of {name = string, expr = hostlist or nil, line = integer}
-- @return map {kind, source = where, domains = {{name, nodes = {names}, line}...}, of = {[node] = name}},
--   or nil, message naming the file and line (bad hostlist, a node in two units, a name twice)
function M.build(kind, where, list)
  local map = { kind = kind, source = where, domains = {}, of = {} }
  local line_of, by_name = {}, {}
  for _, d in ipairs(list) do
    local nodes, err = {}, nil
    if d.expr then nodes, err = hostlist.expand(d.expr) end
    if not nodes then return bad(where, d.line, "domain %s: %s", d.name, tostring(err)) end
    local dom = by_name[d.name]
    if dom and kind ~= "address_map" then
      return bad(where, d.line, "domain %s defined twice (also line %d)", d.name, dom.line)
    end
    if not dom then
      dom = { name = d.name, nodes = {}, line = d.line }
      by_name[d.name] = dom
      map.domains[#map.domains + 1] = dom
    end
    for _, node in ipairs(nodes) do
      local other = map.of[node]
      if other and not (other == d.name and kind == "address_map") then
        return bad(where, d.line, "node %s is in domain %s and in domain %s (line %d): a node is in one "
          .. "IMEX domain", node, d.name, other, line_of[node])
      end
      if not other then
        map.of[node], line_of[node] = d.name, d.line
        dom.nodes[#dom.nodes + 1] = node
      end
    end
  end
  return map
end

-- The job's topology: the one the partition binds, else the default one.
-- @return topology or nil, or nil, message (the binding names a topology that is not there)
local function job_topology(topos, binding, path)
  if binding then
    for _, t in ipairs(topos) do
      if t.name == binding.topology then return t end
    end
    return nil, string.format("%s line %d: partition %s binds topology %s, which %s does not define",
      binding.file, binding.line, binding.partition, binding.topology, path)
  end
  for _, t in ipairs(topos) do
    if t.default then return t end
  end
  return nil
end

-- Whether two lists hold the same names.
local function same_nodes(a, b)
  if #a ~= #b then return false end
  local set = {}
  for _, n in ipairs(a) do set[n] = true end
  for _, n in ipairs(b) do if not set[n] then return false end end
  return true
end

-- Merge the map of one block topology (m, from topology t) into the union map; `first` says that t
-- is the job's topology (its placement wins over the others').
local function merge(map, m, t, first, where_of)
  for _, d in ipairs(m.domains) do
    local name = d.name
    if map.names[name] then name = t.name .. ":" .. d.name end
    map.names[name] = true
    -- its nodes: those no earlier topology placed (the job's topology first: its placement wins)
    local dom = { name = name, nodes = {}, line = d.line, topology = t.name }
    map.domains[#map.domains + 1] = dom
    for _, node in ipairs(d.nodes) do
      local had = where_of[node]
      if not had then
        map.of[node], where_of[node] = name, dom
        dom.nodes[#dom.nodes + 1] = node
      elseif not had.first and not same_nodes(had.all, d.nodes) and not map.conflicts[node] then
        map.conflicts[node] = string.format("node %s is in block %s of topology %s (%s line %d) and in block "
          .. "%s of topology %s (line %d)", node, had.name, had.topology, map.source, had.line, d.name,
          t.name, d.line)
      end
    end
    dom.first, dom.all = first, d.nodes
  end
end

-- The union of the block topologies (the job's first).
-- @return map, or false (no block topology), or nil, message
local function block_map(topos, job, path)
  local order = {}
  if job and job.kind == "block" then order[1] = job end
  for _, t in ipairs(topos) do
    if t.kind == "block" and t ~= job then order[#order + 1] = t end
  end
  if #order == 0 then return false end
  local map = { kind = "topology", source = path, domains = {}, of = {}, conflicts = {}, names = {} }
  local where_of = {}
  for i, t in ipairs(order) do
    local m, err = M.build("topology", path, t.blocks)
    if not m then return nil, err end
    merge(map, m, t, i == 1 and t == job, where_of)
  end
  map.names = nil
  -- one topology to ask slurmctld for: the job's, else the only one ("" names topology.conf's)
  local target = (job and job.kind == "block" and job) or (#order == 1 and order[1]) or nil
  map.ask = target and { name = target.from_conf and "" or target.name } or nil
  return map
end

-- The leaf switches of the job's tree topology (else the default one, else the only one).
-- @return map, or false (no tree topology), or nil, message (several and none picked)
local function tree_map(topos, job, path)
  local trees = {}
  for _, t in ipairs(topos) do
    if t.kind == "tree" then trees[#trees + 1] = t end
  end
  local use = (job and job.kind == "tree" and job) or (#trees == 1 and trees[1]) or nil
  if not use then
    if #trees == 0 then return false end
    return bad(path, trees[2].line, "several tree topologies (%s, %s) and neither is the job's "
      .. "(PartitionName=... Topology=) nor the default: which leaf switches are racks is unknown",
      trees[1].name, trees[2].name)
  end
  local map, err = M.build("tree", path, topology.leaves(use))
  if not map then return nil, err end
  for _, d in ipairs(map.domains) do d.topology = use.name end
  map.conflicts = {}
  map.ask = { name = use.from_conf and "" or use.name }
  return map
end

--- The domains of Slurm's topologies for a job.
-- @param topos list of topologies (imexguard.topology: parse, parse_conf or parse_yaml)
-- @param kind string "block" (blocks) | "tree" (leaf switches)
-- @param binding table|nil the job's partition's binding {partition, topology, file, line}
-- @param path string the file (for messages)
-- @return map (see the header; topos and job_topology set), or false (no topology of that kind),
--   or nil, message naming the file and line
function M.map(topos, kind, binding, path)
  local job, err = job_topology(topos, binding, path)
  if err then return nil, err end
  local map
  if kind == "tree" then map, err = tree_map(topos, job, path) else map, err = block_map(topos, job, path) end
  if not map then return map, err end
  map.topos, map.job_topology, map.binding = topos, job, binding
  return map
end

--- What to say when a cluster's topologies define no block (C45): a tree defines no NVLink domain.
-- @return string one line naming the tree, and its line in the file; or nil (no tree either)
function M.tree_note(topos, path)
  for _, t in ipairs(topos) do
    if t.kind == "tree" then
      local line = t.from_conf and t.switches[1].line or t.line
      return one_line(string.format("%s defines a tree topology (%s) and no block topology: a tree defines "
        .. "no NVLink domain, so the job's nodes are one IMEX domain; set domain_map = \"tree\" if each leaf "
        .. "switch is one NVLink rack, or describe the racks as blocks (topology/block)", path,
        t.from_conf and "SwitchName= lines" or ("topology " .. t.name))), line
    end
  end
  return nil
end

--- The job's nodes (and this node) that the map does not place.
-- @return list of names
function M.unplaced(map, names, node)
  local out = {}
  for _, n in ipairs(names) do
    if not (map.of[n] or map.of[(n:match("^[^.]+"))]) then out[#out + 1] = n end
  end
  if node and not (map.of[node] or map.of[(node:match("^[^.]+"))]) then
    local listed = false
    for _, n in ipairs(out) do listed = listed or n == node end
    if not listed then out[#out + 1] = node end
  end
  return out
end

-- The map again with topology `live` (slurmctld's answer) in place of the file's version of it.
local function with_live(map, live, kind)
  local target = map.ask.name
  local topos = {}
  for _, t in ipairs(map.topos) do
    if (target == "" and t.default) or t.name == target then
      live.name, live.default, live.from_conf, live.line = t.name, t.default, t.from_conf, t.line
      topos[#topos + 1] = live
    else
      topos[#topos + 1] = t
    end
  end
  return M.map(topos, kind, map.binding, map.source)
end

--- slurmctld's topology (C46), when the files leave a node of the job unplaced (setting
-- slurmctld_topology "auto"; "always": every run; "off": never). One `scontrol show topology
-- [NAME]` per run (imexguard.topology.ask); its answer replaces the file's version of that topology.
-- An answer that cannot be had, or that has no unit of the map's kind, leaves the files' map.
-- Logged: when slurmctld is asked and why (info), a failed ask (warning). Sets map.slurmctld (the
-- returned map's): one clause saying what slurmctld gave, or why it was not asked (nil when nothing
-- was missing).
-- @param ctx table policy context (settings.slurmctld_topology, scontrol; host.run, host.log)
-- @param map table from M.map
-- @param names list the job's node names; node string this node's name
-- @return map (the same one, or the one with slurmctld's answer)
function M.refresh(ctx, map, names, node)
  local mode = ctx.settings.slurmctld_topology or "auto"
  local missing = M.unplaced(map, names, node)
  if mode ~= "always" and #missing == 0 then return map end
  if mode == "off" then
    map.slurmctld = "slurmctld not asked (slurmctld_topology = \"off\")"
    return map
  end
  if not map.ask then
    map.slurmctld = "slurmctld not asked: several block topologies and the job's is none of them"
    return map
  end
  local name = map.ask.name ~= "" and map.ask.name or nil
  local live, err, took = topology.ask(ctx, name)
  local why = mode == "always" and "slurmctld_topology = \"always\""
    or string.format("%s places no unit for %s", map.source, hostlist.text_in_order(missing))
  local asked = string.format("asked slurmctld for topology %s (scontrol show topology%s, %.0f ms): %s; "
    .. "slurmctld_topology = \"off\" never asks", name or "default", name and (" " .. name) or "",
    (took or 0) * 1000, why)
  local kind = map.kind == "tree" and "tree" or "block"
  local fresh, ferr = nil, err
  if live and live.kind ~= kind then
    ferr = string.format("it reports no %s there", kind == "tree" and "switch" or "block")
  elseif live then
    fresh, ferr = with_live(map, live, kind)
  end
  if not fresh then
    ctx.host.log("warning", one_line(string.format("%s; %s: the files' placement stands", asked,
      tostring(ferr))))
    map.slurmctld = one_line("slurmctld asked, no usable answer: " .. tostring(ferr))
    return map
  end
  fresh.source = string.format("slurmctld (topology %s; files: %s)", name or "default", map.source)
  fresh.slurmctld = "slurmctld asked"
  ctx.host.log("info", one_line(asked))
  return fresh
end

return M
