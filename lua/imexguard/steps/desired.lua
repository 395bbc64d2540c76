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
local base = require "imexguard.steps.base"
local slurmenv = require "imexguard.slurmenv"
local one_line = require("imexguard.text").one_line
-- Loaded when first used (imexguard.lazy): only the commands that build a want load them.
local lazy = require "imexguard.lazy"
local hostlist = lazy "imexguard.hostlist"
local nodelist = lazy "imexguard.nodelist"
local addresses = lazy "imexguard.addresses"
local domains = lazy "imexguard.domains"

local fail, node_name = base.fail, base.node_name

local M = {}

--- Step 2a: the job's IMEX domain on this node (imexguard.domains; C29, C30): the job's nodes in
-- this node's domain, in the job's hostlist order. The split is logged once (info): the source, this
-- node's domain, the job's nodes in other domains (their own list there) and those left out (in no
-- domain: not IMEX nodes, never waited for). Sets ctx.domain (and returns it).
-- @param ctx table policy context
-- @param names list the job's node names (hostlist order)
-- @param opts table|nil {static = true: the static list is a source (the static policy)}
-- @return domain {name = domain name (nil: no map, or the static list), kind = "topology" |
--   "address_map" | "static" | "none", source = the file or what stands in for it, nodes = the job's
--   nodes in it (hostlist order), members = every node of the domain in the map's order (nil: no map,
--   or the static list), left_out = the job's nodes in no domain, others = {{name, nodes}}},
--   or nil, "bad-input" (the map cannot be read or parsed: file and line) | "skipped" (this node is in
--   no domain), message
function M.domain(ctx, names, opts)
  local map, err = domains.load(ctx, opts)
  if not map then return fail("bad-input", "node %s: IMEX domain map: %s; nothing changed", node_name(ctx),
    tostring(err)) end
  local node = node_name(ctx)
  local dom = { kind = map.kind, source = map.source, nodes = names, left_out = {}, others = {} }
  if map.domains then
    local sp = domains.split(map, names, node)
    if not sp.name then
      local msg = string.format("node %s is in no IMEX domain of %s: not an IMEX node of job %s, skipped "
        .. "(the job's nodes in domains: %d)", node, map.source, base.job_id(ctx), #names - #sp.left_out)
      ctx.host.log("warning", one_line(msg))
      return nil, "skipped", one_line(msg)
    end
    dom.name, dom.nodes, dom.left_out, dom.others = sp.name, sp.nodes, sp.left_out, sp.others
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
--   "skipped", message naming the bad input
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
  local dom, o, m = M.domain(ctx, names, opts)
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
