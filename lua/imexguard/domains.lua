-- SPDX-License-Identifier: Apache-2.0
--- The domain map: which nodes share one IMEX domain (docs/design.md, step 2; field cases C29, C30).
-- One IMEX domain per NVLink domain or partition: NVIDIA's DRA driver and AWS write one node list
-- per clique / UltraServer, never one list across racks, and leave nodes without NVLink (CPU nodes)
-- out of every list. A job that spans racks therefore gets one node list per rack: on a node, the
-- job's nodes in THIS node's domain, in the job's hostlist order (the same bytes on each of them).
--
-- Sources (setting domain_map; "auto" takes the first that defines domains, in this order):
--   "topology"    Slurm's block topology, one block per NVL72 rack or partition: topology.yaml
--                 (Slurm 25.05+, its `block:` section) or topology.conf (`BlockName=b1
--                 Nodes=gb[01-18]` lines; `BlockSizes=` and the tree plugin's `SwitchName=` lines are
--                 ignored), found beside the slurm.conf that SLURM_CONF names (else beside the
--                 setting slurm_conf, /etc/slurm/slurm.conf),
--                 or the file of the setting topology_file. Slurm 22.05 has no block plugin:
--                 imexguard reads the file itself, Slurm need not load it.
--   "address_map" the third column of the address map ("name address domain").
--   "static"      the static list itself (the static policy only, policies/static_domain.lua; the
--                 policy narrows the job to it: this module only says that source applies).
--   "none"        the whole job is one domain (imexguard before domains; "auto" without a source).
-- Domains are named: the block name, or the address map's column value (a name of the form
-- <ClusterUUID>.<CliqueId> can be compared with the GPUs' fabric by the fabric check).
-- Pure Lua; files are read with host.read.
-- Loaded when first used (imexguard.lazy): `status` on a site without a domain map needs neither.
local lazy = require "imexguard.lazy"
local hostlist = lazy "imexguard.hostlist"
local addresses = lazy "imexguard.addresses"
local trim = require("imexguard.text").trim

local M = {}

--- Largest topology file read (bytes).
M.MAX_FILE = 1024 * 1024
--- Where slurm.conf and its topology files are when SLURM_CONF is not set (Slurm's default).
M.DEFAULT_DIR = "/etc/slurm"
--- The values of the setting domain_map.
M.SOURCES = { "auto", "none", "topology", "address_map", "static" }

-- A parse error: nil and "FILE line N: why".
local function bad(path, n, fmt, ...)
  return nil, string.format("%s line %d: " .. fmt, path, n, ...)
end

--- A map from a list of domains: every node in at most one domain.
-- @param kind string "topology" | "address_map"
-- @param where string the file (for messages and the log)
-- @param list list of {name = string, expr = hostlist, line = integer}
-- @return map {kind, source = where, domains = {{name, nodes = {names}}...}, of = {[node] = name}},
--   or nil, message naming the file and line (bad hostlist, a node in two domains, a name twice)
function M.build(kind, where, list)
  local map = { kind = kind, source = where, domains = {}, of = {} }
  local line_of, by_name = {}, {}
  for _, d in ipairs(list) do
    local nodes, err = hostlist.expand(d.expr)
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

--- Parse Slurm's topology.conf (topology/block; slurm topology.conf(5)): `BlockName=NAME
-- Nodes=HOSTLIST` lines are the domains; `BlockSizes=` lines and the tree plugin's `SwitchName=`
-- lines are ignored; '#' comments, keys case-insensitive, a trailing '\' continues the line.
-- @param text string file contents
-- @param path string file name (for messages)
-- @return map (see M.build; domains empty when the file has no block), or nil, message naming the
--   file and line
function M.parse_topology_conf(text, path)
  local list, n, pending, first = {}, 0, nil, 1
  for raw in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local line = raw:gsub("#.*$", "")
    if pending then line = pending .. " " .. line else first = n end
    pending = nil
    if line:match("\\%s*$") then
      pending = line:gsub("\\%s*$", "")
    elseif trim(line) ~= "" then
      local kv, lead = {}, nil
      for tok in line:gmatch("%S+") do
        local k, v = tok:match("^([%a_]+)=(.*)$")
        if not k then return bad(path, first, "expected KEY=VALUE, got '%s'", tok) end
        k = k:lower()
        lead = lead or k
        kv[k] = v
      end
      if lead == "blockname" then
        if kv.blockname == "" then return bad(path, first, "BlockName is empty") end
        if not kv.nodes or kv.nodes == "" then
          return bad(path, first, "block %s has no Nodes=", kv.blockname)
        end
        list[#list + 1] = { name = kv.blockname, expr = kv.nodes, line = first }
      elseif lead ~= "blocksizes" and lead ~= "switchname" then
        return bad(path, first, "unparsable line (expected BlockName=, BlockSizes= or SwitchName=): '%s'",
          trim(line))
      end
    end
  end
  if pending then return bad(path, first, "the last line ends with '\\'") end
  return M.build("topology", path, list)
end

-- A YAML scalar with its quotes removed.
local function unquote(v)
  v = trim(v)
  local q = v:match("^[\"'](.*)[\"']$")
  return q or v
end

-- Read one line of topology.yaml (line n) into the reader's state st = {topos = list of {name,
-- line, default, blocks}, topo = the topology being read, block_indent = the indentation of its
-- `block:` key while inside it, entry = the `- block:` entry being read}.
-- @return true, or nil, message naming the file and line
local function yaml_line(st, raw, n, path)
  local line = raw:gsub("^%s*#.*$", ""):gsub("%s+#.*$", "")
  if trim(line) == "" or line:match("^%-%-%-") or line:match("^%.%.%.") then return true end
  if line:find("\t", 1, true) then return bad(path, n, "tab in indentation") end
  local indent = #line:match("^( *)")
  local body = line:sub(indent + 1)
  local dash = body:match("^%-%s+(.*)$")
  if body == "-" then dash = "" end
  local item = dash ~= nil
  if item then body = dash end
  local key, value = body:match("^([%w_%-]+):%s*(.*)$")
  if not key and not item then return bad(path, n, "unparsable line: '%s'", trim(raw)) end
  if st.block_indent and indent <= st.block_indent then st.block_indent, st.entry = nil, nil end
  local topo = st.topo
  if key == "topology" and item then
    st.topo = { name = unquote(value), line = n }
    st.topos[#st.topos + 1] = st.topo
  elseif key == "cluster_default" and topo then
    topo.default = unquote(value) == "true"
  elseif key == "block" and not item and value == "" and topo then
    st.block_indent, topo.blocks = indent, topo.blocks or {}
  elseif st.block_indent and item and body:match("^{") then
    -- `- {block: b1, nodes: ...}`: a flow mapping; never dropped in silence (the job would be
    -- one domain across the racks)
    return bad(path, n, "flow style ('%s') is not read; write 'block:' and 'nodes:' on lines of "
      .. "their own", trim(body))
  elseif st.block_indent and key == "blocks" and value:match("^%[") then
    return bad(path, n, "flow style (blocks: [...]) is not read; write the blocks one per line")
  elseif st.block_indent and key and (key == "block" or key == "nodes") then
    if item then
      st.entry = { line = n }
      topo.blocks[#topo.blocks + 1] = st.entry
    elseif not st.entry then
      return bad(path, n, "'%s:' outside a '- block:' entry", key)
    end
    if key == "block" then st.entry.name = unquote(value) else st.entry.expr = unquote(value) end
  end
  return true
end

-- The domains of the block topology of topology.yaml (the one with blocks, or the cluster_default
-- one of several), as M.build takes them.
-- @param topos list of topologies (yaml_line's st.topos)
-- @param path string file name
-- @return list of {name, expr, line} ({} when no topology is a block one), or nil, message naming
--   the file and line
local function yaml_blocks(topos, path)
  local with = {}
  for _, t in ipairs(topos) do
    if t.blocks then with[#with + 1] = t end
  end
  local use = with[1]
  if #with > 1 then
    use = nil
    for _, t in ipairs(with) do
      if t.default then use = t end
    end
    if not use then
      return bad(path, with[2].line, "several block topologies (%s, %s) and none is cluster_default",
        tostring(with[1].name), tostring(with[2].name))
    end
  end
  local list = {}
  for _, e in ipairs(use and use.blocks or {}) do
    if not e.name or e.name == "" then return bad(path, e.line, "block entry without a name") end
    if not e.expr or e.expr == "" then return bad(path, e.line, "block %s has no nodes:", e.name) end
    list[#list + 1] = { name = e.name, expr = e.expr, line = e.line }
  end
  return list
end

--- Parse the block part of Slurm 25.05's topology.yaml (slurm topology.yaml(5)): a list of
-- topologies (`- topology: NAME`, `cluster_default: true`), each with `tree:`, `block:` or `flat:`;
-- a block section has `block_sizes:` (ignored) and `blocks:`, a list of `- block: NAME` /
-- `nodes: HOSTLIST`. A small line reader (block style only; no YAML library): a line that is not
-- `key: value`, `key:`, `- key: value` or `- scalar` is unparsable. With several block topologies
-- the cluster_default one is used.
-- @param text string file contents
-- @param path string file name
-- @return map (see M.build; domains empty when no topology is a block one), or nil, message naming
--   the file and line
function M.parse_topology_yaml(text, path)
  local st, n = { topos = {} }, 0
  for raw in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local ok, err = yaml_line(st, raw, n, path)
    if not ok then return nil, err end
  end
  local list, err = yaml_blocks(st.topos, path)
  if not list then return nil, err end
  return M.build("topology", path, list)
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
-- topology.conf beside slurm.conf (Slurm 25.05 reads topology.yaml when it exists).
-- @return list of paths, boolean (true: named by the setting)
function M.topology_paths(ctx)
  local s = ctx.settings
  local set = s.topology_file
  if set then return { set }, true end
  local dir = M.slurm_dir(ctx)
  return { dir .. "/topology.yaml", dir .. "/topology.conf" }, false
end

--- The block topology, when a file defines blocks.
-- @return map, or false (no file, or none with a block), or nil, message (unreadable or unparsable)
local function load_topology(ctx)
  local paths, named = M.topology_paths(ctx)
  for _, path in ipairs(paths) do
    local text, err, code = ctx.host.read(path, M.MAX_FILE)
    if text then
      local map, perr = M.parse_topology(text, path)
      if not map then return nil, perr end
      if #map.domains > 0 then return map end
    elseif code ~= "ENOENT" or named then
      return nil, string.format("topology file %s unreadable: %s", path, tostring(err))
    end
  end
  return false
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

--- The domain map of this run (setting domain_map; see the top of this file).
-- @param ctx table policy context (settings.domain_map, topology_file, address_map; env.SLURM_CONF;
--   host.read)
-- @param opts table|nil {static = true: the static list is a source (the static policy)}
-- @return map {kind = "topology"|"address_map"|"static"|"none", source = file or text,
--   domains = list (nil for "static" and "none"), of = {[node] = domain name}}, or nil, message
--   (an unreadable or unparsable file, or a source that was asked for and defines no domain)
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
  if want == "auto" or want == "topology" then
    local map, err = load_topology(ctx)
    if map == nil then return nil, err end
    if map then return map end
    if want == "topology" then
      return nil, string.format("domain_map = \"topology\" but no block is defined in %s",
        table.concat((M.topology_paths(ctx)), " or "))
    end
  end
  local map, err = load_address_map(ctx)
  if map == nil then return nil, err end
  if map then return map end
  if want == "address_map" then
    return nil, string.format("domain_map = \"address_map\" but the address map %s has no domain column",
      tostring(s.address_map))
  end
  if static then return { kind = "static", source = "the static node list" } end
  return { kind = "none", source = "no domain map (the job is one IMEX domain)" }
end

--- The domain of a node name: the name, else its short form (a host name "gb01.cluster" when the
-- map names Slurm's "gb01").
-- @return domain name or nil
function M.domain_of(map, node)
  if not map.of or not node then return nil end
  return map.of[node] or map.of[(tostring(node):match("^[^.]+"))]
end

--- Split the job by domain, as this node sees it.
-- @param map table from M.load (with domains)
-- @param names list the job's node names (hostlist order)
-- @param node string this node's Slurm name
-- @return split {name = this node's domain or nil, nodes = the job's nodes in it (job order),
--   left_out = the job's nodes in no domain (job order), others = {{name, nodes}} the job's nodes in
--   the other domains (in order of first appearance)}
function M.split(map, names, node)
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
  return sp
end

--- This node's IMEX domain as `status` shows it (one line; never fails: a map that cannot be read
-- is named in the line).
-- @param ctx table policy context
-- @param node string this node's Slurm name
-- @return string line, table|nil {name, kind, source, nodes} (nil: no domain map)
function M.node_line(ctx, node)
  if ctx.settings.domain_map == "static" then return "IMEX domain: the static node list (domain_map)" end
  local map, err = M.load(ctx)
  if not map then return "IMEX domain map: " .. tostring(err) end
  if not map.domains then return "IMEX domain: " .. map.source end
  local name = M.domain_of(map, node)
  if not name then
    return string.format("IMEX domain: node %s is in none of %s (not an IMEX node)", node, map.source),
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
  local r = { string.format("IMEX domain of node %s: %s from %s: %s", node, tostring(dom.name), dom.source,
    hostlist.text_in_order(dom.nodes)) }
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

return M
