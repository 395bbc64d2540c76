-- SPDX-License-Identifier: Apache-2.0
--- Step 2 of the built-in policy, "desired list", with step 2a, "the job's IMEX domain on this
-- node" (docs/design.md, "Decision model of the default policy"; cases C04, C05, C11, C12, C29,
-- C30): before the lock, changing nothing, the job's nodes in this node's domain as the node list
-- file's exact bytes. This room owns `want`, the prolog's central record: it builds it (M.want_of;
-- M.desired adds the domain) and is the one place that changes it (M.narrow, M.set_node_list,
-- M.set_stale_wait, M.set_slots); every later step reads it. Its fields:
--   expr        string  the job's hostlist (SLURM_JOB_NODELIST, else SLURM_NODELIST)
--   source      string  the variable it came from
--   list        list    the job's node names in this node's domain, in the hostlist's order
--   addrs       list    their IPv4 addresses, same order (the desired node list)
--   names       table   {[address] = node name}: how messages name a node
--   self        string  this node's address in `addrs`; self_index its position (1-based)
--   bytes       string  the node list file's exact bytes (nodelist.format of `addrs`, C04)
--   config_path string  the daemon's config.cfg (applies' info.config, C28): the ctl's `-c`, the
--                       bytes recorded at a (re)start; cfg (table) that file parsed (info.cfg): the
--                       command service (C37) and this node's findings in a configuration fault (C22)
--   domain      table   step 2a's split (M.domain; also ctx.domain); absent in a want of M.want_of
--                       alone
--   node_list   list|nil  set by M.set_node_list: the ordered list the daemon runs when it is not
--                       `addrs` (the static policy's list, resolved): health's judge compares the
--                       daemon's map with it
--   by_entry    table|nil set by M.set_node_list: {[name in that list] = its address} (C35), to map
--                       the ctl's host names to the job's addresses
--   stale_wait  boolean|nil set by M.set_stale_wait: this node restarted to clear a stale node-map
--                       mismatch (C32), so health.wait waits its whole time for the other end
--   config_fault_polls number|nil never set here: a caller may set it before health.wait, which
--                       reads it (default health.CONFIG_FAULT_POLLS)
--   slots       table|nil set by M.set_slots (membership = "slots", imexguard.steps.slots): {list = the
--                       domain's slot names in its order, bytes = the slot list file, job = the job's
--                       slots (hostlist order), self = this node's slot, addr_of = {[job slot] =
--                       address}, names = {[slot] = node name} of the domain, domain = its name}; then
--                       addrs, self, names, bytes, node_list are the slots' (addrs: the job's slots;
--                       node_list: the domain's slot list), ips the job's addresses (config.cfg's
--                       findings), and per_job is true (readiness per job, verdict.judge)
local base = require("imexguard.steps.base")
local slurmenv = require("imexguard.slurmenv")
local one_line = require("imexguard.text").one_line
-- Loaded when first used (imexguard.lazy): only the commands that build a want load them.
local lazy = require("imexguard.lazy")
local hostlist, nodelist, addresses = lazy("imexguard.hostlist", "imexguard.nodelist", "imexguard.addresses")
local domains, lastgood = lazy("imexguard.domains", "imexguard.lastgood")
local fabric, fabricjudge, smi = lazy("imexguard.fabric", "imexguard.fabricjudge", "imexguard.smi")

local fail, node_name = base.fail, base.node_name

local M = {}

-- Whether this node runs IMEX although no source places it (C46): GPUs in an NVLink partition
-- (imexguard.fabric: a GPU with a non-zero ClusterUUID, or still registering), else, when the
-- fabric cannot be read or fabric_check is "off", the unit active.
-- @param info table|nil from applies (unit: its properties)
-- @return boolean, string why (one clause)
local function imex_node(ctx, info)
  if ctx.settings.fabric_check ~= "off" then
    local timeout = math.min(fabric.CALL_TIMEOUT, math.max(ctx.host.remaining() - fabric.MARGIN, 0.05))
    local v = fabric.read(ctx, timeout)
    if v.kind ~= "unknown" and v.kind ~= "driver-mismatch" then
      -- "none": no multi-node NVLink (no NVSwitch, or an HGX board: C41)
      for _, g in ipairs(v.kind ~= "none" and v.gpus or {}) do
        local uuid = g.cluster_uuid
        if not g.na and (smi.STATES[g.state] == "pending" or (uuid and uuid ~= smi.ZERO_UUID)) then
          return true, string.format("its GPUs are on an NVLink fabric (%s)", fabricjudge.describe(g))
        end
      end
      return false, v.message
    end
  end
  local props = info and info.unit
  if props and props.active_state == "active" then
    return true, string.format("%s is active", ctx.settings.unit)
  end
  return false, string.format("%s is %s and the fabric unknown", ctx.settings.unit,
    tostring(props and props.active_state))
end

-- This node is in no domain of the map: not-placed when it runs IMEX (C46: a tray that no file
-- lists must not run its job without IMEX), else skipped (C30: a CPU node). Logged (warning).
local function unplaced(ctx, map, names, sp, info)
  local node = node_name(ctx)
  local is_imex, why = imex_node(ctx, info)
  local asked = map.slurmctld and ("; " .. map.slurmctld) or ""
  local msg
  if is_imex then
    msg = string.format("node %s runs IMEX (%s) but is in no IMEX domain of %s%s: not placed, job %s not "
      .. "started here without IMEX; place it (topology file, scontrol update NodeName=%s Topology=..., "
      .. "the address map's column) or take it out of service", node, why, map.source, asked,
      base.job_id(ctx), node)
    ctx.host.log("warning", one_line(msg))
    return nil, "not-placed", one_line(msg)
  end
  msg = string.format("node %s is in no IMEX domain of %s: not an IMEX node (%s), job %s skipped (the job's "
    .. "nodes in domains: %d)", node, map.source, why, base.job_id(ctx), #names - #sp.left_out)
  ctx.host.log("warning", one_line(msg))
  return nil, "skipped", one_line(msg)
end

--- Step 2a: the job's IMEX domain on this node (imexguard.domains; C29, C30, C45, C46, C47): the job's
-- nodes in this node's domain, in the job's hostlist order. The map comes from the files (the job's
-- partition choosing among several topologies), with slurmctld's run-time placement when the files
-- leave a node of the job unplaced (domains.refresh). The split is logged once (info): the source,
-- this node's domain, the job's nodes in other domains (their own list there) and those left out (in
-- no domain: not IMEX nodes, never waited for); a tree that defines no domain is said (warning). Sets
-- ctx.domain (and returns it).
-- @param ctx table policy context
-- @param names list the job's node names (hostlist order)
-- @param opts table|nil {static = true: the static list is a source (the static policy)}
-- @param info table|nil from applies: whether this node runs IMEX when no source places it
-- @return domain {name = domain name (nil: no map, or the static list), kind = "topology" | "tree" |
--   "address_map" | "static" | "none", source = the file or what stands in for it, nodes = the job's
--   nodes in it (hostlist order), members = every node of the domain in the map's order (nil: no map,
--   or the static list), left_out = the job's nodes in no domain, others = {{name, nodes}},
--   topology = the Slurm topology of this node's domain (several in topology.yaml) or nil,
--   fallback = one line when the map's file is broken and the last map that parsed stands in
--   (imexguard.lastgood), else nil}; a map that parsed is also ctx.domain_map (a prolog that succeeds
--   records it: imexguard.lastgood.save); or nil, "bad-input" (the map cannot be read or parsed, and
--   the last map that parsed cannot stand in: file and line; a real conflict of two topologies) |
--   "slurm-conf-unreadable" | "skipped" (this node is in no domain and runs no IMEX) | "not-placed"
--   (this node runs IMEX and no source places it), message
function M.domain(ctx, names, opts, info)
  local node = node_name(ctx)
  local map, err, code = domains.load(ctx, opts)
  -- issue 32 item 1: a cluster-wide file that broke after it worked: the last map that parsed, for
  -- the nodes it places as the file does (imexguard.lastgood); else the file's error
  if not map and code == nil then
    map, err = lastgood.fallback(ctx, err, names, node, opts)
  elseif map and map.domains and #map.domains > 0 then
    rawset(ctx, "domain_map", map)
  end
  if not map then return fail(code or "bad-input", "node %s: IMEX domain map: %s; nothing changed", node,
    tostring(err)) end
  if map.note then ctx.host.log("warning", one_line(map.note)) end
  local dom = { kind = map.kind, source = map.source, nodes = names, left_out = {}, others = {},
    fallback = map.fallback }
  if map.domains then
    map = domains.refresh(ctx, map, names, node)
    local sp, serr = domains.split(map, names, node)
    if not sp then return fail("bad-input", "node %s: IMEX domain map: %s; nothing changed", node, serr) end
    if not sp.name then return unplaced(ctx, map, names, sp, info) end
    dom.name, dom.nodes, dom.left_out, dom.others = sp.name, sp.nodes, sp.left_out, sp.others
    dom.kind, dom.source, dom.topology = map.kind, map.source, sp.topology
    for _, d in ipairs(map.domains) do
      if d.name == sp.name then dom.members = d.nodes end -- the domain's own order (membership by slots)
    end
    ctx.host.log("info", one_line(domains.describe(dom, node)))
  elseif map.kind == "none" then
    ctx.host.log("info", one_line("IMEX domain: " .. map.source))
  end
  rawset(ctx, "domain", dom)
  return dom
end

-- The addresses of the static list's nodes one by one (the static list is the domain: a node
-- without an address is in no static list, so it is left out, C30: an address map that omits the
-- CPU nodes, not bad input). Narrows dom.nodes and dom.left_out.
-- @return names, addrs, or nil, "deadline-exceeded", message
local function static_addresses(look, dom, names, aerr)
  local kept, no_address, addrs = {}, {}, {}
  for _, n in ipairs(names) do
    local a, _, c = look({ n })
    if a then
      kept[#kept + 1], addrs[#addrs + 1] = n, a[1]
    elseif c == "deadline" then
      return fail("deadline-exceeded", "%s", tostring(aerr))
    else
      no_address[#no_address + 1] = n
    end
  end
  dom.nodes, dom.left_out = kept, no_address
  return kept, addrs
end

--- Step 2: the desired node list: the job's nodes in this node's IMEX domain (M.domain) as addresses.
-- @param info table from applies (bind, config, cfg)
-- @param opts table|nil {lookup = function(ctx, names) -> list of addresses (same order), or nil,
--   message naming the node, code}: the address source; default: imexguard.addresses.lookup with
--   the settings (DNS, or the address map). A site policy passes its own through the lookup hook.
--   static = true: the static list is a domain source (the static policy narrows want itself).
-- @return want (the header's fields, domain included), or nil, "bad-input"|"deadline-exceeded"|
--   "skipped"|"not-placed"|"slurm-conf-unreadable", message naming the bad input
function M.desired(ctx, info, opts)
  local lookup = opts and opts.lookup
  local expr, source, warning = slurmenv.nodelist(ctx.env or {})
  if not expr then return fail("bad-input", "job node list: %s", tostring(source)) end
  if warning then ctx.host.log("warning", one_line(warning)) end
  local names, herr = hostlist.expand(expr)
  if not names then
    return fail("bad-input", "bad hostlist %s=%q: %s", tostring(source), expr, tostring(herr))
  end
  if #names == 0 then return fail("bad-input", "hostlist %s=%q is empty", tostring(source), expr) end
  local dom, o, m = M.domain(ctx, names, opts, info)
  if not dom then return nil, o, m end
  names = dom.nodes
  if #names == 0 then
    return fail("bad-input", "node %s: none of the job's nodes (%s=%s) is in its IMEX domain %s (%s)",
      node_name(ctx), tostring(source), expr, tostring(dom.name), dom.source)
  end
  local function look(list)
    if lookup then return lookup(ctx, list) end
    return addresses.lookup(ctx.host, ctx.settings, list)
  end
  local addrs, aerr, code = look(names)
  if not addrs and dom.kind == "static" and code ~= "deadline" then
    names, addrs, m = static_addresses(look, dom, names, aerr)
    if not names then return nil, addrs, m end
  end
  if not addrs then return fail(base.by_code(code, "bad-input"), "%s", tostring(aerr)) end
  local want, werr = M.want_of(ctx, info, expr, source, names, addrs)
  if not want then return nil, "bad-input", werr end
  want.domain = dom
  return want
end

--- The want of the given nodes and their addresses, checked (nodelist.check; this node in it).
-- @param ctx table policy context
-- @param info table from applies (bind; config and cfg: the daemon's config)
-- @param expr string the job's hostlist, source string its variable
-- @param names list node names, addrs list their addresses (same order)
-- @return want (the header's fields, without domain), or nil, message
function M.want_of(ctx, info, expr, source, names, addrs)
  local ok, cerr = nodelist.check(addrs, { allow_loopback = ctx.settings.allow_loopback, names = names })
  if not ok then
    return nil, one_line(string.format("job node list from %s=%s: %s", tostring(source), expr,
      tostring(cerr)))
  end
  local self, idx = addresses.self(ctx.host, info.bind, addrs)
  if not self then return nil, one_line(string.format("node %s: %s", node_name(ctx), tostring(idx))) end
  local by = {}
  for i, a in ipairs(addrs) do by[a] = names[i] end
  return { expr = expr, source = source, names = by, list = names, addrs = addrs, self = self,
    self_index = idx, bytes = nodelist.format(addrs), config_path = info.config, cfg = info.cfg }
end

-- The fields of a want that M.want_of makes from its nodes (M.narrow makes them anew).
local OF_THE_NODES = { expr = true, source = true, names = true, list = true, addrs = true, self = true,
  self_index = true, bytes = true, config_path = true, cfg = true }

--- A want of some of want's nodes (the static policy narrows the job to its static list): the
-- fields of the nodes made anew by M.want_of (same hostlist and source), every other field
-- (domain, node_list, by_entry...) kept.
-- @param ctx table policy context
-- @param info table from applies
-- @param want table the want to narrow (unchanged)
-- @param names list node names, addrs list their addresses (same order)
-- @return want, or nil, message
function M.narrow(ctx, info, want, names, addrs)
  local narrowed, err = M.want_of(ctx, info, want.expr, want.source, names, addrs)
  if not narrowed then return nil, err end
  for k, v in pairs(want) do
    if not OF_THE_NODES[k] then narrowed[k] = v end
  end
  return narrowed
end

--- The daemon runs another ordered list than want.addrs (the static policy's list): set
-- want.node_list and want.by_entry (see the header).
-- @param want table (changed in place)
-- @param node_list list of addresses, in the daemon's order
-- @param by_entry table {[name in that list] = its address} (C35)
function M.set_node_list(want, node_list, by_entry)
  want.node_list, want.by_entry = node_list, by_entry
end

--- Membership by slots (imexguard.steps.slots): make `want` a slot want (see the header, `slots`).
-- @param want table (changed in place; its addrs must be the job's addresses, list its nodes)
-- @param rec table the header's `slots` record
function M.set_slots(want, rec)
  want.slots, want.ips = rec, want.addrs
  want.addrs, want.self, want.bytes, want.node_list = rec.job, rec.self, rec.bytes, rec.list
  want.names, want.per_job = rec.names, true
  for i, s in ipairs(rec.job) do
    if s == rec.self then want.self_index = i end
  end
end

--- This node restarted its daemon to clear a stale node-map mismatch (C32): the health wait then
-- waits its whole time for the other end's restart (want.stale_wait).
-- @param want table (changed in place)
function M.set_stale_wait(want)
  want.stale_wait = true
end

return M
