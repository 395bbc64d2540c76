-- SPDX-License-Identifier: Apache-2.0
--- `imexguard rack [--json]`: one screen for one NVLink domain, for the admin at 3 a.m. What it
-- reads, changing nothing:
--   every node's digest (imexguard.digest) from Slurm's `Extra`, with Slurm's state and reason of
--     each node, in one `scontrol show node` (no shared storage, no call between the nodes);
--   this node's own digest, made now (its daemon's last [ERROR] line included);
--   one `nvidia-imex-ctl -N -j` from this node: each node's status and each node's view of its links.
-- The domain's nodes are those whose digest names this node's IMEX domain (the domain map:
-- domain_map), with the map's nodes that have no digest; without a domain map, those whose address
-- is in this node's node list file or in the ctl's answer.
--
-- The findings come first, one line each, in this order (what makes `invalid resource handle`
-- first): two nodes claiming one ID, IDs nobody claims, a node whose ID in its daemon's map is not
-- its line in its node list file, node lists that differ, nodes that see each other differently;
-- then daemons restarted outside imexguard (under a registered job: its imports are gone), units
-- not active, nodes Slurm drained or lost, runs that failed, nodes without a digest. Then one row
-- per node: Slurm's state, its list's hash and size, its ID and line, the daemon's instance and
-- start, its last run and outcome, its daemon's last error line.
local text = require("imexguard.text")
local base = require("imexguard.steps.base")
local lazy = require("imexguard.lazy")
local state, registry, digest = lazy("imexguard.state", "imexguard.registry", "imexguard.digest")
local domains, hostlist, nodelist = lazy("imexguard.domains", "imexguard.hostlist", "imexguard.nodelist")
local health, json = lazy("imexguard.health", "imexguard.json")

local M = {}

--- Seconds `scontrol show node` may take.
M.SHOW_TIMEOUT = 5
--- Bytes of scontrol's answer kept (a few KiB per node).
M.MAX_SHOW = 16 * 1024 * 1024

--- The kinds of findings, in the order they are named.
M.KINDS = { "duplicate-id", "missing-id", "id-not-line", "list-differs", "sees-differently",
  "restarted", "unit", "slurm", "outcome", "no-digest" }
local RANK = {}
for i, k in ipairs(M.KINDS) do RANK[k] = i end

-- Slurm node states that take a node out of service (a base state or a flag of State=).
local OUT = { "DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "MAINT", "REBOOT" }

local function names_of(rows)
  local t = {}
  for i, r in ipairs(rows) do t[i] = r.name end
  return hostlist.text_sorted(t)
end

-- ---- findings (pure) -------------------------------------------------------------------------

-- IDs: two nodes claiming one, IDs of the usual list that none claims, an ID that is not the line.
local function id_findings(rows, add)
  local by_id, size = {}, {}
  for _, r in ipairs(rows) do
    local d = r.d
    if d and d.m then
      by_id[d.m] = by_id[d.m] or {}
      table.insert(by_id[d.m], r)
    end
    if d and d.n then size[d.n] = (size[d.n] or 0) + 1 end
    if d and d.m and d.p and d.m ~= d.p then
      add("id-not-line", r.name, string.format("ID %d in its daemon's node map, line %d of its node list "
        .. "file: the daemon runs another list than the file (a restart of the domain with one list clears "
        .. "it)", d.m, d.p))
    end
  end
  local ids = {}
  for id in pairs(by_id) do ids[#ids + 1] = id end
  table.sort(ids)
  for _, id in ipairs(ids) do
    local list = by_id[id]
    if #list > 1 then add("duplicate-id", names_of(list), string.format("%d nodes claim ID %d in their "
      .. "daemons' node maps: jobs across them fail (invalid resource handle)", #list, id)) end
  end
  local n, most = nil, 0
  for k, c in pairs(size) do if c > most or (c == most and k > n) then n, most = k, c end end
  for _, r in ipairs(rows) do
    if not r.d then return end -- a node without a digest: its no-digest finding says why, not "missing"
  end
  for id = 0, (n or 0) - 1 do
    if not by_id[id] then add("missing-id", "ID " .. id, string.format("no node claims ID %d of the %d-node "
      .. "list (its node has no digest, runs another list, or its daemon is down)", id, n)) end
  end
end

-- Lists that differ: the most common list is the domain's; the others are named with it.
local function list_findings(rows, add)
  local groups, order = {}, {}
  for _, r in ipairs(rows) do
    local l = r.d and r.d.l
    if l then
      if not groups[l] then groups[l] = { rows = {}, n = r.d.n }; order[#order + 1] = l end
      table.insert(groups[l].rows, r)
    end
  end
  if #order < 2 then return end
  table.sort(order, function(a, b) return #groups[a].rows > #groups[b].rows end)
  local ref = groups[order[1]]
  for i = 2, #order do
    local g = groups[order[i]]
    add("list-differs", names_of(g.rows), string.format("another node list than %s: %s (%s entries) "
      .. "against %s (%s entries)", names_of(ref.rows), order[i], tostring(g.n), order[1], tostring(ref.n)))
  end
end

-- Nodes that see each other differently, and nodes not READY, in this node's ctl answer.
local function view_findings(rows, mesh, add)
  if not mesh then return end
  local by = mesh.by_host or {}
  local addr = {}
  for _, r in ipairs(rows) do if r.d and r.d.a and by[r.d.a] then addr[#addr + 1] = r end end
  for i, r in ipairs(addr) do
    local n = by[r.d.a]
    if n.status ~= "READY" then add("sees-differently", r.name, "its daemon is " .. tostring(n.status)
      .. " in this node's answer") end
    for j = i + 1, #addr do
      local o = addr[j]
      local ab, ba = n.connections[o.d.a], by[o.d.a].connections[r.d.a]
      if ab ~= ba then
        add("sees-differently", r.name .. "," .. o.name, string.format("%s sees %s %s, %s sees %s %s",
          r.name, o.name, tostring(ab or "nothing"), o.name, r.name, tostring(ba or "nothing")))
      end
    end
  end
end

local function is_out(slurm_state)
  for _, s in ipairs(OUT) do if (slurm_state or ""):find(s, 1, true) then return true end end
  return false
end

-- One node's own faults: restarts outside imexguard, the unit, Slurm, its last run, no digest.
local function node_findings(r, add)
  local d = r.d
  if not d then
    add("no-digest", r.name, "no digest in Slurm's Extra (slurm_extra is off there, or no prolog, epilog or "
      .. "health ran since)")
  else
    local since = d.s and json.time(d.s) or "?"
    if d.x then
      add("restarted", r.name, string.format("its daemon (instance %s, started %s) is not the one job %s was "
        .. "admitted to: restarted outside imexguard under the job; a new instance, its peers dropped every "
        .. "import of the old one", tostring(d.i), since, d.x))
    elseif d.h then
      add("restarted", r.name, string.format("its daemon (instance %s, started %s) was started outside "
        .. "imexguard", tostring(d.i), since))
    end
    if d.u and d.u ~= "active" then add("unit", r.name, "the IMEX unit is " .. d.u) end
    if d.o and d.o ~= "ok" then
      add("outcome", r.name, string.format("its last %s ended %s", tostring(d.c or "run"), d.o))
    end
  end
  if is_out(r.state) then
    add("slurm", r.name, string.format("Slurm %s: %s%s", tostring(r.state), r.reason or "no reason",
      r.reason_by and (" (" .. r.reason_by .. ")") or ""))
  end
end

--- The findings on a domain's rows, most telling first (pure).
-- @param rows list of {name, state, reason, reason_by, d = digest or nil}
-- @param mesh table|nil this node's parsed ctl answer
-- @return list of {kind, node, message}
function M.findings(rows, mesh)
  local out = {}
  local function add(kind, node, message) out[#out + 1] = { kind = kind, node = node, message = message } end
  id_findings(rows, add)
  list_findings(rows, add)
  view_findings(rows, mesh, add)
  for _, r in ipairs(rows) do node_findings(r, add) end
  for i, f in ipairs(out) do f.seq = i end
  table.sort(out, function(a, b)
    if RANK[a.kind] ~= RANK[b.kind] then return RANK[a.kind] < RANK[b.kind] end
    return a.seq < b.seq
  end)
  return out
end

-- ---- gather ---------------------------------------------------------------------------------

-- The Slurm nodes with their digests, from one `scontrol show node`; nil, message when Slurm does not
-- answer.
local function slurm_nodes(ctx)
  local argv = require("imexguard.settings").command_argv(ctx.settings.scontrol, { "show", "node" })
  local res, err, code = ctx.host.run(argv, { timeout = M.SHOW_TIMEOUT, max_output = M.MAX_SHOW })
  if not res or res.status ~= 0 then
    return nil, string.format("%s show node: %s", argv[1], text.one_line(res and (res.stderr or "") or
      (tostring(err) .. " (" .. tostring(code) .. ")"), 200))
  end
  local nodes = digest.parse_show(res.stdout)
  for _, n in ipairs(nodes) do n.d = digest.from_extra(n.extra) end
  return nodes
end

-- The domain's rows: the Slurm nodes of this node's domain (see the module's head), this node's
-- digest the one made now.
-- The addresses of this node's node list and of the ctl's answer, in that order, once each.
local function addresses_of(list, mesh)
  local out, seen = {}, {}
  for _, a in ipairs(list) do
    if not seen[a] then out[#out + 1], seen[a] = a, true end
  end
  for _, n in ipairs(mesh and mesh.nodes or {}) do
    if not seen[n.host] then out[#out + 1], seen[n.host] = n.host, true end
  end
  return out
end

local function members(nodes, me, own, dom, list, mesh, by_address)
  local want, in_dom = {}, {}
  local addrs = addresses_of(list, mesh)
  for _, a in ipairs(addrs) do want[a] = true end
  for _, n in ipairs(dom and dom.nodes or {}) do in_dom[n] = true end
  local rows, seen, covered = {}, {}, {}
  for _, n in ipairs(nodes) do
    if n.name == me then n.d, n.self = own, true end
    local d = n.d
    local member = n.self or (own.d and d and d.d == own.d) or (own.d and in_dom[n.name])
      or (not own.d and d and d.a and want[d.a])
    if member and not seen[n.name] then
      rows[#rows + 1], seen[n.name] = n, true
      if d and d.a then covered[d.a] = true end
    end
  end
  if not seen[me] then rows[#rows + 1], seen[me] = { name = me, d = own, self = true }, true end
  -- without a domain map, the addresses no digest names (slurm_extra off there): by their map name
  for _, a in ipairs(own.d and {} or addrs) do
    local name = by_address[a] or a
    if not covered[a] and not seen[name] then
      rows[#rows + 1], seen[name] = { name = name, address = a }, true
    end
  end
  local names, by = {}, {}
  for i, r in ipairs(rows) do names[i], by[r.name] = r.name, r end
  local order = hostlist.sort(names)
  local sorted = {}
  for i, name in ipairs(order) do sorted[i] = by[name] end
  return sorted
end

--- Gather what `rack` shows.
-- @return table g {node, own, dom, mesh, answer, rows, slurm_error, now}, or nil, outcome, message
function M.gather(policy, ctx)
  local info, o, m = policy:applies(ctx)
  if not info then return nil, o, m end
  local host, s = ctx.host, ctx.settings
  local me = base.node_name(ctx)
  local ans = health.probe(ctx, nil, info.config, info.cfg)
  local _, dom = domains.node_line(ctx, me)
  local st = state.load(host, s)
  local props = host.unit(s.unit) or info.unit
  local last = state.load_last(host, s, "prolog")
  local own = digest.build(host, { config = info.config, props = props, mesh = ans.mesh,
    domain = dom and dom.name, st = st, jobs = st and registry.jobs(st), with_error = true,
    command = "prolog", outcome = last and last.outcome, ok = not last or last.exit_code == 0 })
  local list = nodelist.lines(host.read(info.nodes_file, base.MAX_FILE) or "")
  local nodes, serr = slurm_nodes(ctx)
  local by_address = {}
  if s.address_source == "map" then
    for name, a in pairs(require("imexguard.addresses").load_map(host, s.address_map) or {}) do
      by_address[a] = name
    end
  end
  return { node = me, own = own, dom = dom, mesh = ans.mesh, answer = ans, slurm_error = serr,
    now = host.wallclock(), rows = members(nodes or {}, me, own, dom, list, ans.mesh, by_address) }
end

-- ---- render --------------------------------------------------------------------------------

local function clock(secs) return secs and (json.time(secs) or ""):match("T(%d%d:%d%d:%d%d)") or "-" end

-- One row's columns for a person.
local function columns(r)
  local d = r.d or {}
  return { r.name .. (r.self and "*" or ""), r.state or "?",
    d.l and (d.l .. "/" .. tostring(d.n)) or "-",
    (d.m ~= nil or d.p ~= nil) and (tostring(d.m or "?") .. "/" .. tostring(d.p or "?")) or "-",
    d.i and (d.i .. " " .. clock(d.s)) or "-",
    d.o and (d.c and (d.c .. " " .. d.o) or d.o) or "-",
    d.e and text.excerpt(d.e) or "-" }
end

--- The report for a person: the head line, the findings, then the table.
function M.render_text(g, f)
  local out = {}
  local head = g.dom and g.dom.name and ("domain " .. g.dom.name .. " (" .. tostring(g.dom.source) .. ")")
    or "the domain of this node's node list"
  out[1] = string.format("rack: %s, %d node%s, seen from %s; IMEX %s", head, #g.rows,
    #g.rows == 1 and "" or "s", g.node, g.mesh and tostring(g.mesh.status)
    or ("(no answer: " .. tostring(g.answer.err) .. ")"))
  if #f == 0 then
    out[#out + 1] = "no finding: one list, one ID per node, every node seen alike, none drained"
  end
  for _, x in ipairs(f) do out[#out + 1] = x.node .. ": " .. x.message end
  if g.slurm_error then out[#out + 1] = "Slurm: " .. g.slurm_error end
  local rows = { { "NODE", "SLURM", "LIST", "ID/LINE", "DAEMON", "LAST", "LAST ERROR" } }
  for _, r in ipairs(g.rows) do rows[#rows + 1] = columns(r) end
  return table.concat(text.columns(rows, out), "\n") .. "\n"
end

local function split(ids)
  return json.array(text.matches(ids, "[^,]+"))
end

local function digest_json(d)
  if not d then return nil end
  return json.object():set("address", d.a):set("domain", d.d):set("list", d.l):set("entries", d.n)
    :set("line", d.p):set("id", d.m):set("invocation", d.i):set("started", d.s and json.time(d.s))
    :set("unit_state", d.u):set("started_outside", d.h == true):set("restarted_under", split(d.x))
    :set("last_command", d.c):set("last_outcome", d.o):set("last_error", d.e)
    :set("updated", d.t and json.time(d.t))
end

--- The report as JSON (docs/json.md, rack).
function M.render_json(g, f, outcome, message)
  local fl, nodes = {}, {}
  for i, x in ipairs(f) do
    fl[i] = json.object():set("kind", x.kind):set("node", x.node):set("message", x.message)
  end
  for i, r in ipairs(g.rows) do
    nodes[i] = json.object():set("name", r.name):set("self", r.self == true):set("slurm_state", r.state)
      :set("reason", r.reason):set("digest", digest_json(r.d))
  end
  return json.encode(json.report("rack"):set("ok", true):set("outcome", outcome):set("exit_code", 0)
    :set("message", message):set("time", json.time(g.now))
    :set("node", g.node):set("domain", g.dom and g.dom.name):set("status", g.mesh and g.mesh.status)
    :set("slurm_error", g.slurm_error):set("findings", json.array(fl)):set("nodes", json.array(nodes)))
end

--- Entry point `rack` (the default policy's P:run_rack).
-- @return outcome, message, report
function M.run(policy, ctx)
  local g, o, m = M.gather(policy, ctx)
  if not g then return o, m end
  local f = M.findings(g.rows, g.mesh)
  local first = {}
  for i = 1, math.min(3, #f) do first[i] = f[i].node .. ": " .. f[i].kind end
  local msg = text.one_line(string.format("%d node%s, %d finding%s%s", #g.rows, #g.rows == 1 and "" or "s",
    #f, #f == 1 and "" or "s", #f > 0 and (": " .. table.concat(first, "; ")) or ""))
  if ctx.json then return "ok", msg, M.render_json(g, f, "ok", msg) end
  return "ok", msg, M.render_text(g, f)
end

return M
