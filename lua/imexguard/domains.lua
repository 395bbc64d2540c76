-- SPDX-License-Identifier: Apache-2.0
--- The domain map: which nodes share one IMEX domain (docs/design.md, step 2a; field cases C29, C30,
-- C45, C46, C47). One IMEX domain per NVLink domain or partition: NVIDIA's DRA driver and AWS write
-- one node list per clique / UltraServer, never one list across racks, and leave nodes without
-- NVLink (CPU nodes) out of every list. A job that spans racks therefore gets one node list per
-- rack: on a node, the job's nodes in THIS node's domain, in the job's hostlist order (the same
-- bytes on each of them).
--
-- Sources (setting domain_map; "auto" takes the first that defines domains, in this order):
--   "topology"    Slurm's block topology, one block per NVL72 rack or partition: topology.yaml
--                 (Slurm 25.05+: several topologies; every block topology's blocks, the job's
--                 topology deciding where two place a node differently, imexguard.racks) or, when
--                 there is no topology.yaml (Slurm reads topology.conf only then), topology.conf
--                 (`BlockName=b1 Nodes=gb[01-18]` lines), found beside the slurm.conf that SLURM_CONF
--                 names (else beside the setting slurm_conf, /etc/slurm/slurm.conf), or the file of
--                 the setting topology_file; with the nodes slurmctld places at run time (Slurm
--                 25.11+) when the files leave a node of the job unplaced (setting
--                 slurmctld_topology). Slurm 22.05 has no block plugin: imexguard reads the file
--                 itself, Slurm need not load it. A tree topology defines no NVLink domain: "auto"
--                 says so (map.note) and goes on.
--   "tree"        the leaf switches of Slurm's tree topology (topology.conf's `SwitchName=rack1
--                 Nodes=...` lines, a `tree:` topology of topology.yaml): OCI's racks (never "auto").
--   "address_map" the third column of the address map ("name address domain").
--   "static"      the static list itself (the static policy only, policies/static_domain.lua; the
--                 policy narrows the job to it: this module only says that source applies).
--   "none"        the whole job is one domain (imexguard before domains; "auto" without a source).
-- Domains are named: the block or switch name (qualified "TOPOLOGY:BLOCK" where two topologies use
-- one name), or the address map's column value (a name of the form <ClusterUUID>.<CliqueId> can be
-- compared with the GPUs' fabric by the fabric check).
-- Pure Lua; files are read with host.read, slurmctld asked with host.run (imexguard.topology.ask).
-- Loaded when first used (imexguard.lazy): `status` on a site without a domain map needs neither.
local lazy = require("imexguard.lazy")
local hostlist, addresses, topology, racks, slurmconf =
  lazy("imexguard.hostlist", "imexguard.addresses", "imexguard.topology", "imexguard.racks",
    "imexguard.slurmconf")
local one_line = require("imexguard.text").one_line

local M = {}

--- Largest topology file read (bytes).
M.MAX_FILE = 1024 * 1024
--- Where slurm.conf and its topology files are when SLURM_CONF is not set (Slurm's default).
M.DEFAULT_DIR = "/etc/slurm"
--- The values of the setting domain_map.
M.SOURCES = { "auto", "none", "topology", "tree", "address_map", "static" }

--- A map from a list of domains: every node in at most one domain (imexguard.racks.build).
-- @param kind string "topology" | "tree" | "address_map"
-- @param where string the file (for messages and the log)
-- @param list list of {name = string, expr = hostlist, line = integer}
-- @return map {kind, source = where, domains = {{name, nodes = {names}}...}, of = {[node] = name}},
--   or nil, message naming the file and line (bad hostlist, a node in two domains, a name twice)
function M.build(kind, where, list)
  return racks.build(kind, where, list)
end

-- The block domains of parsed topologies as a job without a partition sees them (an empty map when
-- no topology is a block one).
local function blocks_of(topos, err, path)
  if not topos then return nil, err end
  local map, merr = racks.map(topos, "block", nil, path)
  if map == nil then return nil, merr end
  return map or { kind = "topology", source = path, domains = {}, of = {}, conflicts = {} }
end

--- Parse Slurm's topology.conf (imexguard.topology.parse_conf): its blocks as a map (the tree
-- plugin's SwitchName= lines define none; see M.load for "tree").
-- @return map (see M.build; domains empty without a block), or nil, message naming the file and line
function M.parse_topology_conf(text, path)
  local topos, err = topology.parse_conf(text, path)
  return blocks_of(topos, err, path)
end

--- Parse Slurm 25.05's topology.yaml (imexguard.topology.parse_yaml): the blocks of its block
-- topologies as a map, as a job without a partition binding sees them (the cluster_default
-- topology's placement wins; a node that two other topologies place differently is in
-- map.conflicts).
-- @return map (see M.build; domains empty without a block topology), or nil, message naming the file
--   and line
function M.parse_topology_yaml(text, path)
  local topos, err = topology.parse_yaml(text, path)
  return blocks_of(topos, err, path)
end

--- Parse a topology file by its name: *.yaml / *.yml as topology.yaml, else topology.conf.
function M.parse_topology(text, path)
  if path:match("%.ya?ml$") then return M.parse_topology_yaml(text, path) end
  return M.parse_topology_conf(text, path)
end

--- The directory of slurm.conf: that of SLURM_CONF (slurmd sets it in the prolog environment),
-- else that of the setting slurm_conf (default /etc/slurm/slurm.conf).
-- @param ctx table policy context (env, settings)
-- @return string directory
function M.slurm_dir(ctx)
  local conf = ctx.env and ctx.env.SLURM_CONF
  if type(conf) ~= "string" or not conf:match("^/") then
    local ok, v = pcall(function() return ctx.settings.slurm_conf end)
    conf = ok and v or (M.DEFAULT_DIR .. "/slurm.conf")
  end
  local dir = conf:match("^(.*)/[^/]*$")
  return (dir and dir ~= "") and dir or "/"
end

--- The topology files to look at, in order: the setting topology_file, else topology.yaml and then
-- topology.conf beside slurm.conf (Slurm 25.05+ reads topology.yaml when it exists, and then ignores
-- topology.conf: so does imexguard).
-- @return list of paths, boolean (true: named by the setting)
function M.topology_paths(ctx)
  local s = ctx.settings
  local set = s.topology_file
  if set then return { set }, true end
  local dir = M.slurm_dir(ctx)
  return { dir .. "/topology.yaml", dir .. "/topology.conf" }, false
end

--- Slurm's topologies from the first topology file that exists (M.topology_paths).
-- @param ctx table policy context (host.read)
-- @return list of topologies (imexguard.topology), path; or false (no file); or nil, message
--   (unreadable or unparsable: the file and line)
function M.read_topologies(ctx)
  local paths, named = M.topology_paths(ctx)
  for _, path in ipairs(paths) do
    local body, err, code = ctx.host.read(path, M.MAX_FILE)
    if body then
      local topos, perr = topology.parse(body, path)
      if not topos then return nil, perr end
      return topos, path
    elseif code ~= "ENOENT" or named then
      return nil, string.format("topology file %s unreadable: %s", path, tostring(err))
    end
  end
  return false
end

--- The topology the job's partition binds (C47: `PartitionName=P ... Topology=NAME` in slurm.conf,
-- Slurm 25.05+; SLURM_JOB_PARTITION names the job's partition, never its topology). Read only where
-- it can decide something: several topologies and a partition in the environment.
-- @param ctx table policy context (env.SLURM_JOB_PARTITION; slurm.conf through imexguard.slurmconf)
-- @param topos list of topologies
-- @return binding {partition, topology, file, line} or nil (none, or nothing to decide), or nil,
--   message, "slurm-conf-unreadable" (slurm.conf or an Include could not be read)
function M.partition_binding(ctx, topos)
  local part = ctx.env and ctx.env.SLURM_JOB_PARTITION
  if #topos < 2 or type(part) ~= "string" or part == "" then return nil end
  local conf, err = slurmconf.load(ctx)
  if not conf then
    if err == nil then return nil end
    return nil, string.format("the topology of partition %s: %s", part, err), "slurm-conf-unreadable"
  end
  local name, where = slurmconf.partition_topology(conf, part)
  if not name then return nil end
  return { partition = part, topology = name, file = where.file, line = where.line }
end

--- The domains of Slurm's topologies (kind "block": blocks; "tree": leaf switches), for the job's
-- partition.
-- @return map (imexguard.racks.map's), or false, note (no file, or no topology of that kind; note: a
--   tree and no block, C45), or nil, message, code (unreadable, unparsable, a real conflict)
local function load_topology(ctx, kind)
  local topos, path = M.read_topologies(ctx)
  if not topos then return topos, path end
  local binding, berr, code = M.partition_binding(ctx, topos)
  if berr then return nil, berr, code end
  local map, err = racks.map(topos, kind, binding, path)
  if map == nil then return nil, err end
  if not map then return false, kind == "block" and racks.tree_note(topos, path) or nil end
  map.partition = ctx.env and ctx.env.SLURM_JOB_PARTITION
  return map
end

--- Parse the domain column of an address map ("name address domain"; imexguard.addresses).
-- @return map (see M.build; domains empty when no line has a third column), or nil, message
function M.parse_address_map(text, path)
  local _, err, cols = addresses.parse_map(text, path)
  if err then return nil, err end
  local list = {}
  for _, c in ipairs(cols) do
    if c.domain then list[#list + 1] = { name = c.domain, expr = c.name, line = c.line } end
  end
  return M.build("address_map", path, list)
end

--- The domains of the address map's third column, when it has one.
-- @return map, or false, or nil, message
local function load_address_map(ctx)
  local path = ctx.settings.address_map
  if not path then return false end
  local text, err = ctx.host.read(path, addresses.MAX_MAP)
  if not text then return nil, string.format("address map %s unreadable: %s", path, tostring(err)) end
  local map, perr = M.parse_address_map(text, path)
  if not map then return nil, perr end
  return #map.domains > 0 and map or false
end

-- "tree": the leaf switches of the tree topology, else an error naming the files.
local function load_tree(ctx)
  local map, err, code = load_topology(ctx, "tree")
  if map == nil then return nil, err, code end
  if map then return map end
  return nil, string.format("domain_map = \"tree\" but no tree topology (SwitchName= lines, a tree: "
    .. "topology) in %s", table.concat((M.topology_paths(ctx)), " or "))
end

--- The domain map of this run (setting domain_map; see the top of this file).
-- @param ctx table policy context (settings.domain_map, topology_file, address_map; env.SLURM_CONF,
--   SLURM_JOB_PARTITION; host.read)
-- @param opts table|nil {static = true: the static list is a source (the static policy)}
-- @return map {kind = "topology"|"tree"|"address_map"|"static"|"none", source = file or text,
--   domains = list (nil for "static" and "none"), of = {[node] = domain name}, note = a line to log
--   (a tree and no block, C45) or nil; "topology" and "tree" also imexguard.racks' fields}, or nil,
--   message, code (nil: bad input; "slurm-conf-unreadable") (an unreadable or unparsable file, a
--   partition bound to a topology the file lacks, or a source that was asked for and defines no
--   domain)
function M.load(ctx, opts)
  local s = ctx.settings
  local want = s.domain_map or "auto"
  local static = opts and opts.static
  if want == "none" then return { kind = "none", source = "domain_map = \"none\"" } end
  if want == "static" then
    if not static then
      return nil, "domain_map = \"static\" needs the static policy (policies/static_domain.lua)"
    end
    return { kind = "static", source = "the static node list" }
  end
  if want == "tree" then return load_tree(ctx) end
  local note
  if want == "auto" or want == "topology" then
    local map, err, code = load_topology(ctx, "block")
    if map == nil then return nil, err, code end
    if map then return map end
    note = err
    if want == "topology" then
      return nil, one_line(string.format("domain_map = \"topology\" but no block is defined in %s%s",
        table.concat((M.topology_paths(ctx)), " or "), note and ("; " .. note) or ""))
    end
  end
  local map, err = load_address_map(ctx)
  if map == nil then return nil, err end
  if map then return map end
  if want == "address_map" then
    return nil, string.format("domain_map = \"address_map\" but the address map %s has no domain column",
      tostring(s.address_map))
  end
  if static then return { kind = "static", source = "the static node list", note = note } end
  return { kind = "none", source = "no domain map (the job is one IMEX domain)", note = note }
end

--- The map with slurmctld's topology when the files leave a node of the job unplaced (C46;
-- imexguard.racks.refresh: setting slurmctld_topology); other maps as they are.
-- @param ctx table policy context
-- @param map table from M.load
-- @param names list the job's node names (this node's alone for status); node string this node
-- @return map
function M.refresh(ctx, map, names, node)
  if map.kind ~= "topology" and map.kind ~= "tree" then return map end
  return racks.refresh(ctx, map, names, node)
end

--- The domain of a node name: the name, else its short form (a host name "gb01.cluster" when the
-- map names Slurm's "gb01").
-- @return domain name or nil
function M.domain_of(map, node)
  if not map.of or not node then return nil end
  return map.of[node] or map.of[(tostring(node):match("^[^.]+"))]
end

-- A node of the job that two block topologies place differently, neither the job's (C47).
local function conflict_of(map, names, node)
  if not map.conflicts or not next(map.conflicts) then return nil end
  for _, n in ipairs(names) do
    local c = map.conflicts[n] or map.conflicts[(n:match("^[^.]+"))]
    if c then return c end
  end
  return map.conflicts[node]
end

--- Split the job by domain, as this node sees it.
-- @param map table from M.load (with domains)
-- @param names list the job's node names (hostlist order)
-- @param node string this node's Slurm name
-- @return split {name = this node's domain or nil, nodes = the job's nodes in it (job order),
--   left_out = the job's nodes in no domain (job order), others = {{name, nodes}} the job's nodes in
--   the other domains (in order of first appearance), topology = the name of the topology of this
--   node's domain or nil}, or nil, message (a node of the job that two block topologies place
--   differently and the job's topology does not decide: C47's real conflict, named)
function M.split(map, names, node)
  local conflict = conflict_of(map, names, node)
  if conflict then
    local job = map.job_topology
    return nil, one_line(string.format("%s; the job's topology (%s) does not decide: bind the job's "
      .. "partition to one (PartitionName=%s ... Topology=NAME in slurm.conf)", conflict,
      job and (job.name .. ", a " .. job.kind .. " topology") or "none: no binding, no cluster_default",
      type(map.partition) == "string" and map.partition ~= "" and map.partition or "P"))
  end
  local mine = M.domain_of(map, node)
  local sp = { name = mine, nodes = {}, left_out = {}, others = {} }
  local other = {}
  for _, n in ipairs(names) do
    local d = M.domain_of(map, n)
    if d == nil then
      sp.left_out[#sp.left_out + 1] = n
    elseif d == mine then
      sp.nodes[#sp.nodes + 1] = n
    else
      if not other[d] then
        other[d] = { name = d, nodes = {} }
        sp.others[#sp.others + 1] = other[d]
      end
      local o = other[d].nodes
      o[#o + 1] = n
    end
  end
  for _, d in ipairs(map.domains or {}) do
    if d.name == mine then sp.topology = d.topology end
  end
  return sp
end

--- This node's IMEX domain as `status` shows it (one line; never fails: a map that cannot be read
-- is named in the line). slurmctld is asked as the prolog asks it (M.refresh) when the files do not
-- place this node, unless opts.slurmctld is false (`health`, every HealthCheckInterval on every
-- node: never the controller).
-- @param ctx table policy context
-- @param node string this node's Slurm name
-- @param opts table|nil {slurmctld = false: the files alone}
-- @return string line, table|nil {name, kind, source, nodes} (nil: no domain map)
function M.node_line(ctx, node, opts)
  if ctx.settings.domain_map == "static" then return "IMEX domain: the static node list (domain_map)" end
  local map, err = M.load(ctx)
  if not map then return "IMEX domain map: " .. tostring(err) end
  if not map.domains then return "IMEX domain: " .. map.source .. (map.note and ("; " .. map.note) or "") end
  if not (opts and opts.slurmctld == false) then map = M.refresh(ctx, map, { node }, node) end
  local name = M.domain_of(map, node)
  if not name then
    return string.format("IMEX domain: node %s is in none of %s (no source places it)", node, map.source),
      { kind = map.kind, source = map.source }
  end
  for _, d in ipairs(map.domains) do
    if d.name == name then
      return string.format("IMEX domain: %s from %s: %s", name, map.source, hostlist.text_in_order(d.nodes)),
        { name = name, kind = map.kind, source = map.source, nodes = d.nodes }
    end
  end
end

--- The one log line of the split: this node's domain, the others, the nodes left out.
-- @param dom table ctx.domain (see steps.domain)
-- @param node string this node's name
-- @return string
function M.describe(dom, node)
  local topo = dom.topology and dom.topology ~= topology.CONF_NAME and (" (topology " .. dom.topology .. ")")
    or ""
  local r = { string.format("IMEX domain of node %s: %s%s from %s: %s", node, tostring(dom.name), topo,
    dom.source, hostlist.text_in_order(dom.nodes)) }
  for _, o in ipairs(dom.others or {}) do
    r[#r + 1] = string.format("job's nodes in domain %s: %s (their own list)", o.name,
      hostlist.text_in_order(o.nodes))
  end
  if #(dom.left_out or {}) > 0 then
    r[#r + 1] = string.format("left out (in no IMEX domain, not waited for): %s",
      hostlist.text_in_order(dom.left_out))
  end
  return table.concat(r, "; ")
end

-- A finding from a message "FILE line N: why" (file and line taken apart) or a plain one.
local function finding(level, msg, file, line)
  local f, l, rest = tostring(msg):match("^(/%S-) line (%d+): (.*)$")
  if f then return { level = level, file = f, line = tonumber(l), message = rest } end
  return { level = level, file = file, line = line, message = tostring(msg) }
end

-- The findings of slurm.conf's partitions bound to a topology the file lacks.
local function binding_findings(ctx, topos, path, out)
  local conf = slurmconf.load(ctx)
  if not conf then return end -- unreadable: the config test of slurm.conf names it
  local names = {}
  for _, t in ipairs(topos) do names[t.name] = true end
  for _, p in ipairs(slurmconf.partitions(conf)) do
    if p.topology and not names[p.topology] then
      out[#out + 1] = finding("error", string.format("partition %s binds topology %s, which %s does not "
        .. "define: its jobs end bad-input", p.name, p.topology, path), p.file, p.line)
    end
  end
end

--- What `imexguard -t` (config-test) says about the domain map (C45, C47): the topology file
-- unreadable or unparsable, a tree and no block topology under "auto" (a tree defines no NVLink
-- domain), no block or no tree where domain_map asks for one, a partition bound to a topology the
-- file lacks, nodes that two block topologies place differently (jobs whose topology decides
-- neither end bad-input on them). Reads the files only; never asks slurmctld.
-- @param ctx table policy context (settings, env, host.read)
-- @return list of findings {level = "error"|"warning", file = path or nil, line = integer or nil,
--   message = string}
function M.findings(ctx)
  local out = {}
  local want = ctx.settings.domain_map or "auto"
  if want ~= "auto" and want ~= "topology" and want ~= "tree" then return out end
  local topos, path = M.read_topologies(ctx)
  if topos == nil then return { finding("error", path) } end
  if not topos then
    if want ~= "auto" then
      out[1] = finding("error", string.format("domain_map = %q but no topology file: %s", want,
        table.concat((M.topology_paths(ctx)), " or ")))
    end
    return out
  end
  binding_findings(ctx, topos, path, out)
  local kind = want == "tree" and "tree" or "block"
  local map, err = racks.map(topos, kind, nil, path)
  if map == nil then
    out[#out + 1] = finding("error", err)
  elseif not map then
    local note, line = racks.tree_note(topos, path)
    if kind == "tree" or want == "topology" or not note then
      out[#out + 1] = finding("error", string.format("domain_map = %q but %s defines no %s topology", want,
        path, kind), path)
    else
      out[#out + 1] = finding("warning", note, path, line)
    end
  else
    local n, first = 0, nil
    for node, c in pairs(map.conflicts) do
      n = n + 1
      if not first or node < first[1] then first = { node, c } end
    end
    if first then
      out[#out + 1] = finding("warning", string.format("%d node(s) placed differently by two block "
        .. "topologies (%s): jobs there whose partition binds neither end bad-input", n, first[2]), path)
    end
  end
  return out
end

return M
