-- SPDX-License-Identifier: Apache-2.0
--- The verdict on a mesh, the parsed `nvidia-imex-ctl -N` answer (imexguard.ctl parses it): the
-- ordered node map compared with a node list, each node's view of that map, and the domain's health
-- for one job on this node, with the blame (this node, its peers, a configuration fault): `judge`.
--
-- Pure Lua, no side effects: a function of a mesh from `ctl.parse_mesh` or `ctl.parse_text`.
-- Field cases of docs/design.md ("Field cases"): C20 (not configured, not running, degraded peers
-- and UP are four different verdicts), C21 (a domain's identity is its ordered ID -> host map,
-- never a host set alone) and C22 (a configuration fault is not a peer fault).
-- @module imexguard.verdict

local M = {}

-- Render a list of strings for a one-line summary (at most 6 named).
local function hosts_text(list)
  local shown = {}
  for i = 1, math.min(#list, 6) do
    shown[i] = list[i]
  end
  local s = table.concat(shown, ", ")
  if #list > 6 then
    s = s .. string.format(" and %d more", #list - 6)
  end
  return s
end

local function check_mesh(fname, mesh)
  if type(mesh) ~= "table" or type(mesh.by_host) ~= "table" or type(mesh.nodes) ~= "table" then
    error("verdict." .. fname .. ": mesh must come from ctl.parse_mesh or ctl.parse_text", 3)
  end
end

--- The ordered node map of an answer: node ID -> host.
-- A node's ID is the 0-based line number of its address in the node list its daemon started with
-- (NVIDIA IMEX guide), so this map, not the set of hosts, is the daemon's identity of the domain.
-- @tparam table mesh result of `ctl.parse_mesh` or `ctl.parse_text`
-- @treturn table `{[id] = host}` (integer ids as the answer gives them, normally 0 .. n-1)
-- @treturn integer the number of nodes in the answer
-- @raise when mesh is not a parsed mesh
function M.node_map(mesh)
  check_mesh("node_map", mesh)
  local map = {}
  for _, n in ipairs(mesh.nodes) do
    map[n.id] = n.host
  end
  return map, #mesh.nodes
end

-- "0=10.0.0.6 1=10.0.0.5" for the ids of `moved` on one side (at most 6).
local function ids_text(moved, side)
  local parts = {}
  for i = 1, math.min(#moved, 6) do
    parts[i] = moved[i].id .. "=" .. tostring(moved[i][side] or "(none)")
  end
  if #moved > 6 then parts[#parts + 1] = string.format("and %d more", #moved - 6) end
  return table.concat(parts, " ")
end

-- The one-line summary of a comparison (see compare_map).
local function compare_summary(r, self_host)
  if r.kind == "self-absent" then
    return string.format("the answer does not list this node %s: it proves nothing about this node's daemon",
      self_host)
  elseif r.kind == "same" then
    return string.format("node map matches the node list (%d nodes, this node id %d)", r.count,
      r.self_id)
  elseif r.kind == "reordered" then
    local ids = {}
    for i, m in ipairs(r.moved) do ids[i] = tostring(m.id) end
    return string.format("same nodes, another order: ids %s differ (the daemon runs %s; the node list "
      .. "has %s)", hosts_text(ids), ids_text(r.moved, "daemon"), ids_text(r.moved, "job"))
  end
  local parts = {}
  if #r.missing > 0 then parts[#parts + 1] = "missing " .. hosts_text(r.missing) end
  if #r.extra > 0 then parts[#parts + 1] = "extra " .. hosts_text(r.extra) end
  for _, d in ipairs(r.duplicates) do
    local ids = {}
    for i, id in ipairs(d.ids) do ids[i] = tostring(id) end
    parts[#parts + 1] = string.format("host %s under ids %s", d.host, table.concat(ids, " and "))
  end
  if #parts == 0 then
    parts[1] = string.format("ids differ (the daemon runs %s; the node list has %s)",
      ids_text(r.moved, "daemon"), ids_text(r.moved, "job"))
  end
  return "the daemon runs other nodes than the node list: " .. table.concat(parts, "; ")
end

-- The answer's ids of `count` and above, ascending and each once: with 0 .. count-1, the ids where
-- the answer's map and a node list of `count` entries can differ (an id that neither holds matches).
-- Linear in the ids listed: never a loop up to the largest id, which an answer may give as 999999999.
local function ids_above(nodes, count)
  local above = {}
  for _, n in ipairs(nodes) do
    if n.id >= count then above[#above + 1] = n.id end
  end
  for i = 2, #above do
    if above[i] <= above[i - 1] then -- not from parse_mesh (its nodes are ordered by id, each once)
      table.sort(above)
      local once = {}
      for j, id in ipairs(above) do
        if id ~= above[j - 1] then once[#once + 1] = id end
      end
      return once
    end
  end
  return above
end

--- Compare the answer's ordered node map with the job's ordered node list.
-- ID i of the job's list is its (i+1)-th entry: the line the node list file gives it. Kinds, in
-- this order of precedence:
--
-- * `"self-absent"`: the answer does not list this node. A running daemon's list always holds
--   its own node (else it refuses to start), so such an answer proves nothing about it;
-- * `"same"`: every ID maps to the job's host of that ID (no other id, no duplicate);
-- * `"reordered"` ("same nodes, another order", case C21): the same hosts, each once, under the
--   same ids 0 .. n-1, but some ids map to another host. The daemon is stale: its peers that run
--   the job's order see a node-map mismatch;
-- * `"different"`: hosts missing or extra, a host under two ids, or ids outside 0 .. n-1.
-- @tparam table mesh result of `ctl.parse_mesh` or `ctl.parse_text`
-- @tparam {string,...} expected the job's node list in order (as in nodes_config.cfg)
-- @tparam string self_host this node's address in that list
-- @treturn table `{kind = "same"|"reordered"|"different"|"self-absent", count = nodes in the answer,
--   self_id = this node's id in the answer (lowest when listed twice) or nil,
--   job_self_id = this node's id in the job's list or nil,
--   moved = { {id =, daemon = host|nil, job = host|nil}, ... } (every id whose host differs, by id),
--   missing = {host...} (job order), extra = {host...} (id order),
--   duplicates = { {host =, ids = {id...}}, ... }, summary = one-line string}`
-- @raise on wrong argument types, or a host twice in `expected`
function M.compare_map(mesh, expected, self_host)
  check_mesh("compare_map", mesh)
  if type(expected) ~= "table" or type(self_host) ~= "string" then
    error("verdict.compare_map: expected must be a list and self_host a string", 2)
  end
  local job_id = {}
  for i, h in ipairs(expected) do
    if job_id[h] then
      error("verdict.compare_map: host " .. tostring(h) .. " twice in the job's node list", 2)
    end
    job_id[h] = i - 1
  end
  local map, count = M.node_map(mesh)
  local r = { count = count, job_self_id = job_id[self_host], moved = {}, missing = {}, extra = {},
    duplicates = mesh.duplicates or {} }
  r.self_id = mesh.by_host[self_host] and mesh.by_host[self_host].id
  for _, n in ipairs(mesh.nodes) do
    if job_id[n.host] == nil then r.extra[#r.extra + 1] = n.host end
  end
  for _, h in ipairs(expected) do
    if not mesh.by_host[h] then r.missing[#r.missing + 1] = h end
  end
  local gaps = false
  local function compare(id)
    local d, j = map[id], expected[id + 1]
    if d ~= j then
      r.moved[#r.moved + 1] = { id = id, daemon = d, job = j }
      gaps = gaps or d == nil or j == nil
    end
  end
  for id = 0, #expected - 1 do compare(id) end
  for _, id in ipairs(ids_above(mesh.nodes, #expected)) do compare(id) end
  if r.self_id == nil then
    r.kind = "self-absent"
  elseif #r.moved == 0 and #r.duplicates == 0 then
    r.kind = "same"
  elseif not gaps and #r.missing == 0 and #r.extra == 0 and #r.duplicates == 0 then
    r.kind = "reordered"
  else
    r.kind = "different"
  end
  r.summary = compare_summary(r, self_host)
  return r
end

-- Findings of one node's view: its links against the answer's node map.
local function node_findings(n, map, by_host)
  local out = {}
  for _, l in ipairs(n.links or {}) do
    local mapped = map[l.id]
    if l.status == "NODE_MAP_MISMATCH" then
      out[#out + 1] = { kind = "mismatch", id = l.id, host = l.host,
        text = string.format("reports a node map mismatch with id %d (%s)", l.id, l.host) }
    end
    if mapped == nil then
      out[#out + 1] = { kind = "unknown-id", id = l.id, host = l.host,
        text = string.format("its connection names id %d (%s), an id absent from the node map", l.id,
          l.host) }
    elseif not by_host[l.host] then
      out[#out + 1] = { kind = "unknown-host", id = l.id, host = l.host,
        text = string.format("its connection names host %s (id %d), a host absent from the node map", l.host,
          l.id) }
    elseif mapped ~= l.host then
      out[#out + 1] = { kind = "other-host", id = l.id, host = l.host,
        text = string.format("its id %d is %s, the node map's id %d is %s", l.id, l.host, l.id, mapped) }
    end
  end
  return out
end

--- Per-node check of the node map: does each node's view (the ids and hosts of its connections)
-- agree with the answer's node map? Every daemon of a domain must hold the same ordered list; a
-- daemon whose map differs has communication disabled with its peers ("node map mismatch", `!M!`,
-- NVIDIA IMEX guide). Connections naming an id or a host absent from the node map are findings,
-- never ignored. Text answers (`parse_text`) carry no host per connection: only `!M!` shows there.
-- @tparam table mesh result of `ctl.parse_mesh` or `ctl.parse_text`
-- @treturn table list, by node id, of the nodes with findings: `{ {id =, host =, findings = { {kind =
--   "mismatch"|"unknown-id"|"unknown-host"|"other-host", id = link id, host = link host, text =}... },
--   text = one line joining the findings}, ... }`; empty when every view agrees
-- @raise when mesh is not a parsed mesh
function M.map_faults(mesh)
  check_mesh("map_faults", mesh)
  local map = M.node_map(mesh)
  local list = {}
  for _, n in ipairs(mesh.nodes) do
    local f = node_findings(n, map, mesh.by_host)
    if #f > 0 then
      local texts = {}
      for i, x in ipairs(f) do texts[i] = x.text end
      list[#list + 1] = { id = n.id, host = n.host, findings = f,
        text = "node map mismatch: " .. hosts_text(texts) }
    end
  end
  return list
end

--- Likely causes of a configuration fault (C22), most common first.
M.CONFIG_FAULT_CAUSES = {
  "the command port (IMEX_CMD_PORT, default 50005) is firewalled between the nodes",
  "IMEX_CMD_BIND_INTERFACE_IP is a loopback address",
  "IMEX_CMD_ENABLED=0",
  "IMEX_CMD_PORT differs between the nodes",
}

-- Peers of this node: expected hosts present in the domain, other than this node (expected order);
-- and those whose connection from this node is not CONNECTED.
local function peers_of(mesh, expected, self)
  local peers, broken = {}, {}
  for _, h in ipairs(expected) do
    local p = mesh.by_host[h]
    if h ~= self.host and p then
      peers[#peers + 1] = p
      if self.connections[h] ~= "CONNECTED" then broken[#broken + 1] = p end
    end
  end
  return peers, broken
end

-- True when this node is cut off from a majority (at least two) of its peers, and those peers are
-- READY and CONNECTED among themselves.
local function cut_off(peers, broken)
  if #broken < 2 or #broken * 2 <= #peers then return false end
  for _, a in ipairs(broken) do
    if a.status ~= "READY" then return false end
    for _, b in ipairs(broken) do
      if a ~= b and a.connections[b.host] ~= "CONNECTED" then return false end
    end
  end
  return true
end

-- The configuration-fault signature of one peer: UNAVAILABLE (its status did not come over its
-- command port) while this node's connection to it (the peer port) is CONNECTED.
local function unreachable_cmd(self, p)
  return p.status == "UNAVAILABLE" and self.connections[p.host] == "CONNECTED"
end

-- Local-fault checks in order; sets v and returns true when this node is at fault.
local function judge_local(v, mesh, expected, self_host, order, maps, note, stale, own_only)
  local head = string.format("domain %s", tostring(mesh.status))
  local self = mesh.by_host[self_host]
  local function fault(kind, fmt, ...)
    v.local_fault, v.verdict, v.local_kind = true, "local-fault", kind
    v.summary = string.format("%s: this node %s " .. fmt, head, self_host, ...) .. note
    return true
  end
  if not self then return fault("absent", "is not in the domain") end
  if order and (order.kind == "reordered" or #order.duplicates > 0) then
    return fault("map", "runs a node map that is not the node list's: %s", order.summary)
  end
  if #(mesh.duplicates or {}) > 0 then
    local d = mesh.duplicates[1]
    return fault("map", "runs a node map holding host %s under %d ids", d.host, #d.ids)
  end
  -- this node's own view differs from its map (a NODE_MAP_MISMATCH link alone is two-sided: with
  -- this node's map equal to the node list, the peer at its other end is the odd one)
  for _, m in ipairs(maps) do
    if m.id == self.id then
      for _, f in ipairs(m.findings) do
        if f.kind ~= "mismatch" then return fault("map", "has id %d, %s", self.id, m.text) end
      end
    end
  end
  if self.status ~= "READY" then return fault("not-ready", "is %s, not READY", self.status) end
  local peers, broken = peers_of(mesh, expected, self)
  -- cut off by stale node-map mismatches only (C32): both ends run the list, a restart clears it
  if not stale and not own_only and cut_off(peers, broken) then
    return fault("cut-off", "is cut off from %d of %d peers that are connected to each other", #broken,
      #peers)
  end
  return false
end

-- Configuration fault: every peer shows the unreachable-command-port signature; sets v.
local function judge_config(v, mesh, expected, self_host, note)
  local self = mesh.by_host[self_host]
  local peers = peers_of(mesh, expected, self)
  if #peers == 0 then return false end
  local hosts = {}
  for _, p in ipairs(peers) do
    if not unreachable_cmd(self, p) then return false end
    hosts[#hosts + 1] = p.host
  end
  v.verdict = "config-fault"
  v.config_fault = { peers = hosts, causes = M.CONFIG_FAULT_CAUSES }
  v.summary = string.format("domain %s: configuration fault, not a peer fault: this node %s is READY and "
    .. "connected to its %d peers, which show UNAVAILABLE because node status travels over the command "
    .. "port; likely: %s%s", tostring(mesh.status), self_host, #peers, table.concat(M.CONFIG_FAULT_CAUSES,
    "; "), note)
  return true
end

--- Does node p's own view name every other host of `list`, none of them INVALID (a host its own
-- list lacks: IMEXSIM_CTL_CONNECTIONS=local, tests/fixtures/ctl/c21-reordered-peer.json)? A peer
-- where it does not visibly runs another node list; a node-map mismatch alone does not say so: both
-- ends of a stale mismatch run the same list (C32).
-- @param p table a node of a mesh (ctl.parse_mesh: host, connections {[host] = state})
-- @param list list of addresses
-- @return boolean
function M.names_list(p, list)
  for _, h in ipairs(list) do
    local st = p.connections and p.connections[h]
    if h ~= p.host and (st == nil or st == "INVALID") then return false end
  end
  return true
end

-- Does peer p run `list` as far as the answer shows: its view names every host of the list under
-- that list's ids (no finding other than a mismatch) and none of them INVALID (M.names_list)?
local function runs_list(p, list, findings)
  for _, f in ipairs(findings or {}) do
    if f.kind ~= "mismatch" then return false end
  end
  return M.names_list(p, list)
end

-- Node-map mismatches between two peers (both ends NODE_MAP_MISMATCH) where nothing else is wrong:
-- each peer is named (v.faulty), so this node, healthy, is not blamed for a domain below UP; their
-- own prologs restart to clear it (C32).
local function stale_between_peers(v, mesh, expected, self_host)
  for _, a in ipairs(expected) do
    local p = mesh.by_host[a]
    if a ~= self_host and p then
      for _, b in ipairs(expected) do
        local q = mesh.by_host[b]
        if b ~= a and b ~= self_host and q and p.connections[b] == "NODE_MAP_MISMATCH"
          and q.connections[a] == "NODE_MAP_MISMATCH" then
          v.faulty[#v.faulty + 1] = { host = a, reason = "node map mismatch with " .. b
            .. " (both ends show it; a restart of both clears it)" }
          break
        end
      end
    end
  end
end

--- A stale node-map mismatch (C32): this node's daemon runs `list` (the node list it must run, in
-- order) and is READY, and every expected peer whose link with this node shows NODE_MAP_MISMATCH
-- on both ends is READY and runs that list too (a mismatch on this node's end only, the peer
-- CONNECTED, is a peer that restarted with this node's list and a reconnect not yet made: the
-- nudge's case, imexguard.nudge.lagging). Then the lists agree and the block is an
-- earlier one that IMEX keeps until both ends restart (AWS's PCS guide: only a restart of the ends
-- with one list clears it; a SIGUSR1 does not). Nobody is at fault and waiting does not help.
-- @tparam table mesh result of `ctl.parse_mesh`
-- @tparam {string,...} expected the job's hosts
-- @tparam string self_host this node's address
-- @tparam table|nil order `compare_map` of the answer against the list the daemon must run
-- @tparam table maps result of `map_faults`
-- @tparam[opt] {string,...} list the ordered list the daemons must run (default `expected`)
-- @treturn table|nil `{peers = {host...} (expected order)}`, or nil when there is no such link or
--   a mismatched peer does not (visibly) run the list: a real mismatch its own prolog will clear
function M.stale_mismatch(mesh, expected, self_host, order, maps, list)
  local self = mesh.by_host[self_host]
  if not self or self.status ~= "READY" or not order or order.kind ~= "same" then return nil end
  local findings = {}
  for _, m in ipairs(maps) do findings[m.id] = m.findings end
  local peers = {}
  for _, h in ipairs(expected) do
    local p = mesh.by_host[h]
    if h ~= self_host and p then
      local theirs = p.connections and p.connections[self_host]
      local mine = self.connections[h]
      if mine == "NODE_MAP_MISMATCH" and theirs == "NODE_MAP_MISMATCH" then
        if p.status ~= "READY" or not runs_list(p, list or expected, findings[p.id]) then return nil end
        peers[#peers + 1] = h
      end
    end
  end
  return #peers > 0 and { peers = peers } or nil
end

-- The faulty peers (and extra nodes not READY), with reasons (judge_peers).

-- A peer's node-map reason: its own view differs from the map (named), or it is in a node map
-- mismatch with this node, whose map is the node list's at this point. A mismatch between two peers
-- blames neither: the odd one is also in mismatch with this node.
local function map_reason(self, p, findings)
  local texts, with_self = {}, self.connections[p.host] == "NODE_MAP_MISMATCH"
  for _, f in ipairs(findings or {}) do
    if f.kind ~= "mismatch" then
      texts[#texts + 1] = f.text
    elseif f.host == self.host then
      with_self = true
    end
  end
  if #texts > 0 then return "node map mismatch: " .. hosts_text(texts) end
  if with_self then return "node map mismatch with this node, whose map is the node list's" end
  return nil
end

-- Readiness per job (membership by slots): the first link from peer p to another node of the job
-- that is not CONNECTED, as a reason; nil when p is connected to all of them.
local function pair_reason(p, expected, self_host)
  for _, q in ipairs(expected) do
    if q ~= p.host and q ~= self_host and (p.connections or {})[q] ~= "CONNECTED" then
      return "connection to " .. q .. " " .. tostring((p.connections or {})[q] or "absent")
    end
  end
  return nil
end

local function judge_peers(v, mesh, expected, self_host, maps, list_name, per_job)
  local self = mesh.by_host[self_host]
  local wanted, findings = {}, {}
  for _, h in ipairs(expected) do wanted[h] = true end
  for _, m in ipairs(maps) do findings[m.id] = m.findings end
  for _, p in ipairs((peers_of(mesh, expected, self))) do
    local reason = map_reason(self, p, findings[p.id])
    if not reason and unreachable_cmd(self, p) then
      reason = "status UNAVAILABLE while connected from this node: its command port (IMEX_CMD_PORT) is "
        .. "unreachable from here (its config.cfg or a firewall)"
    elseif not reason and p.status ~= "READY" then
      reason = "status " .. p.status
    elseif not reason and self.connections[p.host] ~= "CONNECTED" then
      reason = "connection from this node " .. tostring(self.connections[p.host] or "absent")
    elseif not reason and per_job then
      reason = pair_reason(p, expected, self_host)
    end
    if reason then v.faulty[#v.faulty + 1] = { host = p.host, reason = reason } end
  end
  if per_job then return end -- the domain's other slots map to the sentinel: not the job's
  for _, n in ipairs(mesh.nodes) do
    if not wanted[n.host] and n.status ~= "READY" then
      v.faulty[#v.faulty + 1] = { host = n.host,
        reason = "status " .. n.status .. " (not in " .. (list_name or "the job's node list") .. ")" }
    end
  end
end

-- The note a summary ends with when the answer's hosts differ from the expected ones (`missing`,
-- `extra`), "" when they do not; `list_name`: what `expected` is, in messages.
local function mismatch_note(v, list_name)
  if not v.mismatch then return "" end
  local note = "; node map differs from " .. list_name
  if #v.missing > 0 then note = note .. ": missing " .. hosts_text(v.missing) end
  if #v.extra > 0 then
    note = note .. (#v.missing > 0 and "; extra " or ": extra ") .. hosts_text(v.extra)
  end
  return note
end

-- C33: no job here; what this node owns is fine (judge_local passed), its links to peers are not
-- judged. Completes v as healthy and returns it.
local function judge_own_only(v, mesh, self_host)
  local self, connected, peers = mesh.by_host[self_host], 0, 0
  for _, n in ipairs(mesh.nodes) do
    if n.host ~= self_host then
      peers = peers + 1
      if self.connections[n.host] == "CONNECTED" then connected = connected + 1 end
    end
  end
  v.healthy, v.verdict = true, "healthy"
  v.summary = string.format("domain %s: this node %s READY, its node map its own; links to peers not "
    .. "judged (%d of %d connected)", tostring(mesh.status), self_host, connected, peers)
  return v
end

-- The peer-fault summary's list: the first six faulty nodes with their reasons, and how many more.
local function faulty_text(faulty)
  local parts = {}
  for i = 1, math.min(#faulty, 6) do
    parts[i] = faulty[i].host .. " (" .. faulty[i].reason .. ")"
  end
  if #faulty > 6 then
    parts[#parts + 1] = string.format("and %d more", #faulty - 6)
  end
  return table.concat(parts, ", ")
end

-- The verdict once the local and configuration checks passed and the peers are judged: healthy,
-- stale-mismatch, peer-fault or unhealthy, with its summary. Completes v and returns it.
local function judge_overall(v, mesh, expected, self_host, stale, note, per_job)
  local head = string.format("domain %s", tostring(mesh.status))
  v.healthy = (per_job or mesh.status == "UP") and #v.missing == 0 and #v.faulty == 0
  v.stale_mismatch = not v.healthy and stale or nil
  if not v.healthy and not stale and #v.faulty == 0 then
    stale_between_peers(v, mesh, expected, self_host)
  end
  if v.stale_mismatch then
    v.verdict, v.faulty = "stale-mismatch", {}
    v.summary = string.format("%s: stale node-map mismatch: this node %s and %s run the same node list, yet "
      .. "their link shows NODE_MAP_MISMATCH (IMEX keeps it until both ends restart)%s", head, self_host,
      hosts_text(v.stale_mismatch.peers), note)
  elseif v.healthy and per_job then
    v.verdict = "healthy"
    v.healthy_message = string.format("the job's %d nodes READY and connected to each other (membership by "
      .. "slots: the domain's other slots refuse, domain %s)", #expected, tostring(mesh.status))
    v.summary = head .. ": " .. v.healthy_message .. note
  elseif v.healthy then
    v.verdict = "healthy"
    v.summary = string.format("%s: %d expected nodes READY and connected%s", head, #expected, note)
  elseif #v.faulty > 0 then
    v.verdict = "peer-fault"
    v.summary = string.format("%s: peers not healthy: %s%s", head, faulty_text(v.faulty), note)
  else
    v.verdict = "unhealthy"
    v.summary = string.format("%s: %s%s", head, #v.missing > 0 and "expected nodes absent"
      or "no faulty node identified", note)
  end
  return v
end

-- The verdict on a parsed mesh (M.judge's; its opts and result).
local function judge_mesh(mesh, expected, self_host, node_list, opts)
  local list = expected
  if node_list ~= nil then list = node_list end
  if list ~= false and type(list) ~= "table" then
    error("verdict.judge: want.node_list must be a list or false", 3)
  end
  -- what `expected` is, in messages: a prolog's job, or status's node list file (no job there)
  local list_name = opts and opts.list_name or "the job's node list"
  local job = M.compare_map(mesh, expected, self_host)
  local order = list and (list == expected and job or M.compare_map(mesh, list, self_host)) or nil
  local maps = M.map_faults(mesh)
  local v = { status = mesh.status, healthy = false, local_fault = false, order = order,
    map_faults = maps, self_id = job.self_id, missing = job.missing, extra = job.extra, faulty = {} }
  v.mismatch = #v.missing > 0 or #v.extra > 0
  local per_job = opts ~= nil and opts.per_job or false
  -- per job, the domain's other slots are no difference to note
  local note = per_job and "" or mismatch_note(v, list_name)
  local own_only = opts ~= nil and opts.own_only
  local stale = not own_only and M.stale_mismatch(mesh, expected, self_host, order, maps, list or nil)
  if judge_local(v, mesh, expected, self_host, order, maps, note, stale, own_only)
    or judge_config(v, mesh, expected, self_host, note) then
    return v
  end
  if own_only then return judge_own_only(v, mesh, self_host) end
  judge_peers(v, mesh, expected, self_host, maps, list_name, per_job)
  return judge_overall(v, mesh, expected, self_host, stale, note, per_job)
end

--- The verdict on a ctl answer for one job on this node: the one judgement of the domain's health
-- from the ctl (the health wait's default judge, `status`, `health`, `plan`).
-- Healthy iff the domain is UP, every expected host is present and READY, the answer's ordered
-- node map is the job's (or, for a domain-wide list with extra hosts, holds each job host once),
-- every node's view of the map agrees with it, and this node's connections to every other
-- expected host are CONNECTED. Verdicts, checked in this order:
--
-- * `"local-fault"` (`local_fault = true`): this node is absent from the answer; its daemon runs
--   the node list's nodes in another order ("same nodes, another order", C21) or a host under two
--   ids;
--   its own view of the node map disagrees with the map; it is not READY; or it is cut off (not
--   CONNECTED) from a majority of the expected peers, at least two, that are READY and CONNECTED
--   among themselves;
-- * `"config-fault"` (C22): this node is READY and CONNECTED to every expected peer, and every one
--   of them is UNAVAILABLE: node status travels over the command port, which this node cannot
--   reach on any peer. Nobody is blamed (`faulty` is empty); `config_fault` names the causes;
-- * `"healthy"`;
-- * `"stale-mismatch"` (C32): not healthy, and every link of this node that shows NODE_MAP_MISMATCH
--   joins two daemons that both run the node list (`stale_mismatch`; `stale_mismatch = {peers}`):
--   nobody is blamed (`faulty` is empty), a restart of both ends is the remedy;
-- * `"peer-fault"`: `faulty` lists the peers that are not READY, whose view of the node map
--   differs, or whose connection from this node is not CONNECTED, with the reason; extra
--   (unexpected) nodes that are not READY are listed too, since they hold the domain below UP;
-- * `"unhealthy"`: not healthy, no node identified (expected hosts absent, domain not UP).
-- `mismatch` is true when the answer's hosts differ from the expected ones (`missing`, `extra`);
-- an extra host alone does not make the domain unhealthy (a static, domain-wide node list is a
-- valid setup: the job's ids are not the daemon's then, and `order.kind` is "different").
-- An answer without a mesh: "unreachable" (the ctl answered, the local daemon did not) is a
-- `"local-fault"` verdict whose `local_fault` and `summary` are the answer's message; any other
-- (malformed, "unconfigured" exit 255, a hang, cannot run: C06) proves nothing and is nil.
-- @tparam table answer a ctl answer (health.probe's): `{mesh = result of ctl.parse_mesh or
--   ctl.parse_text}`, or `{err = message, kind = "unreachable"|"unconfigured"|"malformed"|...}`
-- @tparam table want `{addrs = {string,...}, self = string, node_list = {string,...}|false|nil,
--   per_job = boolean|nil}`:
--   addrs (`expected` below) the job's node list (addresses as in nodes_config.cfg, in order); self
--   this node's address in it; node_list the ordered list the daemon must run, when it is not the
--   job's (a static, domain-wide node list: pass that file's list); false: no order comparison
--   (each node's view is still checked); nil: `expected` (the prolog's `want` is such a table)
-- Readiness per job (`want.per_job` or `opts.per_job`: membership by slots, docs/design.md
-- "Membership by slots"): the domain's status and its nodes outside `expected` are not judged (the
-- other slots map to a sentinel and show UNAVAILABLE); healthy needs every expected node READY and
-- every one CONNECTED to every other, as the answer shows each node's links: a peer whose link to
-- another expected node is down is `faulty` ("connection to HOST STATUS"); a healthy verdict has a
-- `healthy_message` (the health wait's message).
-- @tparam[opt] table opts `{own_only = boolean, list_name = string, per_job = boolean}`: own_only
--   (C33: a node with
--   no registered job): only this node's own part is judged
--   (the local-fault checks but "cut off", and the configuration fault: its command port is its
--   own); otherwise "healthy", whatever its links to peers that may have moved on to other lists;
--   `list_name`: what `expected` is, in messages (default "the job's node list"; status and
--   health, which run without a job, name the node list file or the daemon's own list)
-- @treturn table verdict `{verdict = "healthy"|"local-fault"|"config-fault"|"stale-mismatch"|"peer-fault"|
--   "unhealthy", local_kind = "absent"|"map"|"not-ready"|"cut-off" (a local fault's kind, else nil),
--   healthy = boolean, status = domain status, local_fault = boolean, mismatch = boolean,
--   missing = {host...} (expected order), extra = {host...} (id order),
--   faulty = { {host =, reason =}... }, self_id = this node's id in the answer or nil,
--   order = `compare_map` against the node list (nil when want.node_list is false),
--   map_faults = result of `map_faults`,
--   config_fault = {peers = {host...}, causes = {string...}} or nil, stale_mismatch = {peers = {host...}}
--   or nil, summary = one-line string}`, or nil (an answer that proves nothing)
-- @raise on wrong argument types (an answer with neither a mesh nor an error)
function M.judge(answer, want, opts)
  if type(answer) ~= "table" or (answer.mesh == nil and answer.err == nil and answer.kind == nil) then
    error("verdict.judge: answer must come from health.probe ({mesh =} or {err =, kind =})", 2)
  end
  if type(want) ~= "table" or type(want.addrs) ~= "table" or type(want.self) ~= "string" then
    error("verdict.judge: want.addrs must be a list and want.self a string", 2)
  end
  if answer.mesh ~= nil then
    check_mesh("judge", answer.mesh)
    if want.per_job and not (opts and opts.per_job) then
      local o = { per_job = true }
      for k, x in pairs(opts or {}) do o[k] = x end
      opts = o
    end
    return judge_mesh(answer.mesh, want.addrs, want.self, want.node_list, opts)
  end
  if answer.kind == "unreachable" then
    return { verdict = "local-fault", healthy = false, status = "DOWN", local_fault = answer.err, faulty = {},
      summary = answer.err }
  end
  return nil
end

return M
