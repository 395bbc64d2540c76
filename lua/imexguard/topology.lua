-- SPDX-License-Identifier: Apache-2.0
--- Slurm's network topologies as imexguard reads them (docs/design.md, step 2a; field cases C29,
-- C45, C46, C47): the files beside slurm.conf, and what slurmctld reports. No decision here: which
-- topology a job uses and which of its units are IMEX domains is imexguard.domains'.
--
-- A topology is a table {name, kind, default, line, path, blocks, switches}:
--   name      string   topology.yaml's `topology:` (topology.conf's is "default", as Slurm names it)
--   kind      string   "block" (topology/block), "tree" (topology/tree) or "flat" (no unit)
--   default   boolean  topology.yaml's `cluster_default: true` (topology.conf's one topology: true)
--   blocks    list     {name, expr = the Nodes= hostlist or nil, line}: BlockName= lines, `- block:`
--   switches  list     {name, expr = Nodes= or nil, children = Switches= or nil, line}: SwitchName=
--                      lines, `- switch:` entries; a leaf switch has nodes and no child switch
--   from_conf boolean  true for topology.conf's (slurmctld is asked for it without a name)
-- Facts (Slurm topology.conf(5), topology.yaml(5), and the real 26.05 daemons: tests/slurm26/README.md):
--   * topology.yaml wins over topology.conf when both exist (beside slurm.conf; a configless node's
--     conf-cache holds both); it holds several topologies, the first `cluster_default: true` one is
--     the default, a partition binds one with `PartitionName=... Topology=NAME`.
--   * `scontrol show topology [NAME]` prints one topology: `BlockName=b1 BlockIndex=0 Nodes=n[1-2]
--     BlockSize=2` lines (then `AggregatedBlock=` lines, planning aggregates: no unit), or
--     `SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]` lines (upper ones with `Switches=`), with
--     the nodes placed at run time (Slurm 25.11+: `scontrol update NodeName=X Topology=default:b2`,
--     `slurmd --conf "Topology=..."`), which no file lists. Without NAME the default topology
--     (Slurm 24.11 and 26.05 alike); NAME is a topology from 25.05 (24.11: a node). An unknown NAME:
--     "slurm_load_topo error: ..." on stderr and exit status 0, no line.
-- Pure Lua, except M.ask (host.run).
local settings_schema = require("imexguard.settings")
local slurmconf = require("imexguard.slurmconf")
local text = require("imexguard.text")

local trim, one_line = text.trim, text.one_line

local M = {}

--- Largest topology file or scontrol answer read (bytes).
M.MAX_FILE = 1024 * 1024
--- Seconds one `scontrol show topology` may take (within the run's budget).
M.ASK_TIMEOUT = 5
--- The name Slurm gives topology.conf's topology (`Topology=default:b2`).
M.CONF_NAME = "default"

-- A parse error: nil and "FILE line N: why".
local function bad(path, n, fmt, ...)
  return nil, string.format("%s line %d: " .. fmt, path, n, ...)
end

local function new_topology(name, line, path)
  return { name = name, line = line, path = path, blocks = {}, switches = {}, default = false }
end

-- The kind of a topology from what it holds (topology.conf: blocks win, as the block plugin reads
-- BlockName= lines and the tree plugin SwitchName= lines).
local function kind_of(t)
  if t.declared then return t.declared end
  if #t.blocks > 0 then return "block" end
  if #t.switches > 0 then return "tree" end
  return "flat"
end

-- One logical line of topology.conf (KEY=VALUE tokens) into topology t.
local function conf_line(t, line, n, path)
  local kv, lead = {}, nil
  for tok in line:gmatch("%S+") do
    local k, v = tok:match("^([%a_]+)=(.*)$")
    if not k then return bad(path, n, "expected KEY=VALUE, got '%s'", tok) end
    k = k:lower()
    lead = lead or k
    kv[k] = v
  end
  local expr = kv.nodes ~= "" and kv.nodes or nil
  if lead == "blockname" then
    if kv.blockname == "" then return bad(path, n, "BlockName is empty") end
    t.blocks[#t.blocks + 1] = { name = kv.blockname, expr = expr, line = n }
  elseif lead == "switchname" then
    if kv.switchname == "" then return bad(path, n, "SwitchName is empty") end
    t.switches[#t.switches + 1] = { name = kv.switchname, expr = expr,
      children = kv.switches ~= "" and kv.switches or nil, line = n }
  elseif lead ~= "blocksizes" then
    return bad(path, n, "unparsable line (expected BlockName=, BlockSizes= or SwitchName=): '%s'", trim(line))
  end
  return true
end

--- Parse topology.conf (slurm topology.conf(5)): `BlockName=NAME [Nodes=HOSTLIST]` lines
-- (topology/block), `SwitchName=NAME [Nodes=HOSTLIST] [Switches=HOSTLIST] [LinkSpeed=N]` lines
-- (topology/tree), `BlockSizes=` (ignored); '#' comments, keys case-insensitive, a trailing '\'
-- continues the line (joined as Slurm joins it: imexguard.slurmconf.logical_lines). A block or
-- switch without Nodes= is kept without nodes (nodes may join it at run time).
-- @param body string file contents
-- @param path string file name (for messages)
-- @return list of one topology (see the header; named "default", the default), or nil, message
--   naming the file and line
function M.parse_conf(body, path)
  local t = new_topology(M.CONF_NAME, 1, path)
  t.default, t.from_conf = true, true
  for raw, n in slurmconf.logical_lines(body) do
    local line = raw:gsub("#.*$", "")
    if trim(line) ~= "" then
      local ok, err = conf_line(t, line, n, path)
      if not ok then return nil, err end
    end
  end
  t.kind = kind_of(t)
  return { t }
end

-- A YAML scalar with its quotes removed.
local function unquote(v)
  v = trim(v)
  local q = v:match("^[\"'](.*)[\"']$")
  return q or v
end

-- The entry keys of each section: the key that starts an entry, the keys kept.
local SECTIONS = { block = { list = "blocks", lead = "block" },
  tree = { list = "switches", lead = "switch" } }

-- An entry's key inside a section (`- block: b1`, `nodes: ...`, `children: ...`).
local function entry_key(st, key, value, item, path, n)
  local sec = SECTIONS[st.section]
  if item then
    st.entry = { line = n }
    local list = st.topo[sec.list]
    list[#list + 1] = st.entry
  elseif not st.entry then
    return bad(path, n, "'%s:' outside a '- %s:' entry", key, sec.lead)
  end
  if key == sec.lead then
    st.entry.name = unquote(value)
  elseif key == "nodes" then
    st.entry.expr = unquote(value)
  else
    st.entry.children = unquote(value)
  end
  return true
end

-- The keys read inside a section's entries (others, such as link_speed, are ignored).
local ENTRY_KEYS = { block = true, switch = true, nodes = true, children = true }

-- Read one line of topology.yaml (line n) into the reader's state st = {topos = list of
-- topologies, topo = the one being read, section = "block"|"tree" while inside its section,
-- section_indent = that section key's indentation, entry = the entry being read}.
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
  if st.section and indent <= st.section_indent then st.section, st.entry = nil, nil end
  local topo = st.topo
  if key == "topology" and item then
    st.topo = new_topology(unquote(value), n, path)
    st.topos[#st.topos + 1] = st.topo
  elseif key == "cluster_default" and topo and not st.section then
    topo.default = unquote(value) == "true"
  elseif (key == "block" or key == "tree") and not item and value == "" and topo and not st.section then
    st.section, st.section_indent, topo.declared = key, indent, key
  elseif key == "flat" and not item and topo and not st.section then
    topo.declared = "flat"
  elseif st.section and item and body:match("^{") then
    -- `- {block: b1, nodes: ...}`: a flow mapping; never dropped in silence (the job would be one
    -- domain across the racks)
    return bad(path, n, "flow style ('%s') is not read; write one key per line", trim(body))
  elseif st.section and (key == "blocks" or key == "switches") and value:match("^%[") then
    return bad(path, n, "flow style (%s: [...]) is not read; write one entry per line", key)
  elseif st.section and key and ENTRY_KEYS[key] and (key ~= "block" or st.section == "block")
    and (key ~= "switch" or st.section == "tree") then
    return entry_key(st, key, value, item, path, n)
  end
  return true
end

-- Check the entries of the topologies read (a name each; a block's nodes or a switch's nodes or
-- children may be absent: filled at run time).
local function check_entries(topos, path)
  local seen = {}
  for _, t in ipairs(topos) do
    if t.name == "" then return bad(path, t.line, "topology without a name") end
    if seen[t.name] then return bad(path, t.line, "topology %s defined twice (also line %d)", t.name,
      seen[t.name]) end
    seen[t.name] = t.line
    for _, list in ipairs { t.blocks, t.switches } do
      for _, e in ipairs(list) do
        if not e.name or e.name == "" then return bad(path, e.line, "entry without a name") end
        if e.expr == "" then e.expr = nil end
        if e.children == "" then e.children = nil end
      end
    end
    t.kind = kind_of(t)
  end
  return true
end

--- Parse Slurm 25.05's topology.yaml (slurm topology.yaml(5)): a list of topologies (`- topology:
-- NAME`, `cluster_default: true`), each with a `block:` section (`block_sizes:` ignored, `blocks:`
-- a list of `- block: NAME` / `nodes: HOSTLIST`), a `tree:` section (`switches:` a list of
-- `- switch: NAME` / `nodes: HOSTLIST` / `children: HOSTLIST`) or `flat: true`. A small line reader
-- (block style only; no YAML library): a line that is not `key: value`, `key:`, `- key: value` or
-- `- scalar` is unparsable, and flow style inside a section is refused.
-- @param body string file contents
-- @param path string file name
-- @return list of topologies (file order; see the header), or nil, message naming the file and line
function M.parse_yaml(body, path)
  local st, n = { topos = {} }, 0
  for raw in (body .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local ok, err = yaml_line(st, raw, n, path)
    if not ok then return nil, err end
  end
  local ok, err = check_entries(st.topos, path)
  if not ok then return nil, err end
  -- the first cluster_default: true is the default (topology.yaml(5)); one topology alone is
  local default
  for _, t in ipairs(st.topos) do
    if t.default and not default then default = t else t.default = false end
  end
  if not default and #st.topos == 1 then st.topos[1].default = true end
  return st.topos
end

--- Parse a topology file by its name: *.yaml / *.yml as topology.yaml, else topology.conf.
function M.parse(body, path)
  if path:match("%.ya?ml$") then return M.parse_yaml(body, path) end
  return M.parse_conf(body, path)
end

--- Parse what `scontrol show topology [NAME]` printed (one topology; AggregatedBlock lines, which
-- aggregate blocks for planning, are left out; an empty `Nodes=` is a unit without nodes).
-- @param body string stdout
-- @param name string the topology's name (what was asked, "default" for none)
-- @return topology (see the header; kind "flat" when no line names a unit), or nil, message (a line
--   that is none of Slurm's)
function M.parse_show(body, name)
  local t = new_topology(name, 1, "scontrol show topology")
  local n = 0
  for line in (body .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local kv = {}
    for k, v in line:gmatch("([%a_]+)=(%S*)") do kv[k:lower()] = v end
    local expr = kv.nodes ~= "" and kv.nodes or nil
    if kv.blockname then
      t.blocks[#t.blocks + 1] = { name = kv.blockname, expr = expr, line = n }
    elseif kv.switchname then
      t.switches[#t.switches + 1] = { name = kv.switchname, expr = expr,
        children = kv.switches ~= "" and kv.switches or nil, line = n }
    elseif not kv.aggregatedblock and trim(line) ~= "" then
      return nil, string.format("scontrol show topology line %d: not a block or switch: '%s'", n,
        text.excerpt(trim(line)))
    end
  end
  t.kind = kind_of(t)
  return t
end

--- The leaf switches of a tree (a switch with nodes and no child switch): OCI's racks.
-- @param t topology
-- @return list of switches
function M.leaves(t)
  local out = {}
  for _, s in ipairs(t.switches) do
    if s.expr and not s.children then out[#out + 1] = s end
  end
  return out
end

-- The first line of scontrol's stderr, for a message (one line, at most 200 bytes).
local function first_error(stderr)
  return one_line(trim(stderr or ""):match("^[^\n]*"), 200)
end

-- The topology in scontrol's answer (host.run's results), or nil, why.
local function answer(argv, name, res, err, code)
  local shown = "scontrol " .. table.concat(argv, " ", #argv - (name and 2 or 1))
  if not res then return nil, string.format("%s: %s (%s)", argv[1], tostring(err), tostring(code)) end
  if res.status ~= 0 then
    return nil, string.format("%s exited %s: %s", shown, tostring(res.status or ("on signal "
      .. tostring(res.signal))), first_error(res.stderr))
  end
  local topo, why = M.parse_show(res.stdout or "", name or M.CONF_NAME)
  if topo and topo.kind == "flat" and trim(res.stderr or "") ~= "" then
    -- an unknown name: "slurm_load_topo error: ..." on stderr, exit status 0
    return nil, string.format("%s: %s", shown, first_error(res.stderr))
  end
  return topo, why
end

--- Ask slurmctld for a topology as it is now (nodes placed at run time included): one
-- `scontrol show topology [NAME]` (settings.scontrol), bounded by M.ASK_TIMEOUT and the run's budget,
-- answered once per run (kept in ctx: the next call returns the same answer). Slurm's advice is that
-- a prolog should not call the controller (every prolog of a job at once, on every node); the
-- caller asks only when the files leave a node of the job unplaced (imexguard.racks), and the
-- setting slurmctld_topology = "off" never asks.
-- @param ctx table policy context (host.run, host.remaining, host.now, settings.scontrol)
-- @param name string|nil the topology (nil: the default one, no argument: Slurm 24.11 reads an
--   argument as a node)
-- @return topology (parse_show's), or nil, message (scontrol could not run, exited non-zero,
--   printed an error and no unit, or something unparsable); then the seconds the call took
function M.ask(ctx, name)
  local cache = rawget(ctx, "slurmctld_topology")
  if not cache then
    cache = {}
    rawset(ctx, "slurmctld_topology", cache)
  end
  local key = name or ""
  if cache[key] then return cache[key][1], cache[key][2], cache[key][3] end
  local h = ctx.host
  local argv = settings_schema.command_argv(ctx.settings.scontrol, { "show", "topology", name })
  local timeout = math.min(M.ASK_TIMEOUT, math.max(h.remaining() - 1, 0.05))
  local t0 = h.now()
  local res, err, code = h.run(argv, { timeout = timeout, max_output = M.MAX_FILE })
  local took = h.now() - t0
  local topo, why = answer(argv, name, res, err, code)
  if why then why = one_line(why) end
  cache[key] = { topo, why, took }
  return topo, why, took
end

return M
