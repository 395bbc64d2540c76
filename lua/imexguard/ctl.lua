--- `nvidia-imex-ctl` output: parse `-q`, `-N -j` and the text form of `-N`; judge domain health.
--
-- Pure Lua plus cjson, no side effects: the caller runs the ctl (host.run) and passes stdout
-- (stdout and stderr joined is fine) and the exit status. Sources: NVIDIA IMEX guide (local
-- states, `-q`/`-N`/`-j`), the real outputs in tests/fixtures/ctl/ and the field cases C06 (a real
-- JSON parser, state from the top-level `status`, hosts compared as sets, every malformed answer
-- is "malformed", never a mismatch) and C20 (not configured, not running, degraded peers and UP
-- are four different answers).
--
-- Errors are `nil, message, kind` where kind is:
--
-- * `"unconfigured"`: exit status 255 or "Failed to read node configuration file" (seen);
-- * `"unreachable"`: the local daemon did not answer ("failed to connect", exit 1, any other
--   non-zero status, or no status at all: killed by a signal);
-- * `"malformed"`: exit 0 but the output is not what the format promises (never guessed at).
-- @module imexguard.ctl
local cjson = require "cjson"

local M = {}

--- Local daemon states printed by `-q` (NVIDIA IMEX guide).
M.STATES = {
  INITIALIZING = true, STARTING_AUTH_SERVER = true, WAITING_FOR_PEERS = true,
  WAITING_FOR_RECOVERY = true, INIT_GPU = true, READY = true, SHUTTING_DOWN = true, UNAVAILABLE = true,
}

--- Domain states of `-N` (fixtures; NVIDIA IMEX guide).
M.DOMAIN_STATES = { UP = true, DEGRADED = true, DOWN = true }

--- One-letter connection states of the text matrix (the legend printed by `-N`), mapped to the
-- JSON spelling. CONNECTED, INVALID, NEVER_CONNECTED and RECOVERING are seen in JSON; the other
-- names are imexguard's (NVIDIA's JSON spelling is not known).
M.LETTERS = {
  C = "CONNECTED", I = "INVALID", N = "NEVER_CONNECTED", R = "RECOVERING", D = "DISCONNECTED",
  A = "AUTHENTICATING", ["!V!"] = "VERSION_MISMATCH", ["!M!"] = "NODE_MAP_MISMATCH",
}

local UNCONFIGURED_TEXT = "Failed to read node configuration file"

-- A short, one-line rendering of some output for messages.
local function excerpt(s)
  s = s:gsub("%s+", " "):match("^ ?(.-) ?$")
  if #s > 80 then
    s = s:sub(1, 77) .. "..."
  end
  return "'" .. s .. "'"
end

local function check_args(fname, stdout, status)
  if stdout ~= nil and type(stdout) ~= "string" then
    error("ctl." .. fname .. ": stdout must be a string", 3)
  end
  if status ~= nil and type(status) ~= "number" then
    error("ctl." .. fname .. ": status must be a number or nil", 3)
  end
  return stdout or ""
end

-- The error kind of a failed command, or nil when it exited 0 and is not the unconfigured text.
local function failure(what, out, status)
  if status == 255 or out:find(UNCONFIGURED_TEXT, 1, true) then
    return nil, string.format("%s: IMEX is not configured (exit %s, %s)", what, tostring(status),
      out == "" and "no output" or excerpt(out)), "unconfigured"
  end
  if status ~= 0 or out:find("failed to connect", 1, true) then
    return nil, string.format("%s: local IMEX daemon unreachable (exit %s, %s)", what,
      status == nil and "none" or tostring(status), out == "" and "no output" or excerpt(out)), "unreachable"
  end
  return true
end

--- Parse `nvidia-imex-ctl -q`.
-- @tparam string|nil stdout the output
-- @tparam integer|nil status exit status (nil: killed by a signal)
-- @treturn[1] string the local state, one of `STATES`
-- @treturn[2] nil
-- @treturn[2] string one-line message with the exit status and an excerpt of the output
-- @treturn[2] string kind: "unconfigured", "unreachable" or "malformed"
-- @raise on wrong argument types
function M.parse_query(stdout, status)
  local out = check_args("parse_query", stdout, status)
  local ok, err, kind = failure("nvidia-imex-ctl -q", out, status)
  if not ok then
    return nil, err, kind
  end
  local word = out:match("^%s*(%S+)%s*$")
  if not word or not M.STATES[word] then
    return nil, string.format("nvidia-imex-ctl -q: not a known state: %s",
      out == "" and "no output" or excerpt(out)), "malformed"
  end
  return word
end

local function is_id(k)
  return type(k) == "string" and k:match("^%d+$") and #k <= 9
end

-- Validate one decoded node; returns the result node or nil, reason.
local function build_node(key, n)
  if type(n) ~= "table" then
    return nil, "node " .. key .. " is not an object"
  end
  if type(n.host) ~= "string" or n.host == "" then
    return nil, "node " .. key .. " has no host"
  end
  if type(n.status) ~= "string" or n.status == "" then
    return nil, "node " .. key .. " has no status"
  end
  if n.version ~= nil and type(n.version) ~= "string" then
    return nil, "node " .. key .. " has a non-string version"
  end
  if n.hostName ~= nil and type(n.hostName) ~= "string" then
    return nil, "node " .. key .. " has a non-string hostName"
  end
  if type(n.connections) ~= "table" then
    return nil, "node " .. key .. " has no connections object"
  end
  local conns = {}
  for ck, c in pairs(n.connections) do
    if not is_id(ck) then
      return nil, "connections of node " .. key .. " are not keyed by node ids"
    end
    if type(c) ~= "table" or type(c.host) ~= "string" or c.host == "" or type(c.status) ~= "string" then
      return nil, "connection " .. ck .. " of node " .. key .. " lacks host or status"
    end
    if conns[c.host] then
      return nil, "node " .. key .. " lists host " .. c.host .. " twice in its connections"
    end
    conns[c.host] = c.status
  end
  return {
    id = math.tointeger(tonumber(key)),
    host = n.host,
    status = n.status,
    version = n.version,
    hostname = n.hostName,
    connections = conns,
  }
end

-- Sort nodes by id and index them by host; nil, reason on a duplicate host or id.
local function index(nodes)
  table.sort(nodes, function(a, b) return a.id < b.id end)
  local by_host = {}
  for i, n in ipairs(nodes) do
    if by_host[n.host] then
      return nil, "host " .. n.host .. " appears twice"
    end
    if i > 1 and nodes[i - 1].id == n.id then
      return nil, "node id " .. n.id .. " appears twice"
    end
    by_host[n.host] = n
  end
  return by_host
end

--- Parse `nvidia-imex-ctl -N -j`.
-- Requires a JSON object with a top-level `status` of UP/DEGRADED/DOWN and `nodes` an object
-- keyed by decimal node ids (any order) holding at least one node; each node needs `host`,
-- `status` and a `connections` object keyed by node ids whose entries have `host` and `status`.
-- `version` and `hostName` are optional (missing on older drivers).
-- @tparam string|nil stdout the output
-- @tparam integer|nil status exit status (nil: killed by a signal)
-- @treturn[1] table domain `{status =, timestamp = string|nil, nodes = { {id = integer, host =,
--   status =, version = string|nil, hostname = string|nil, connections = {[host] = status}}, ...}
--   (sorted by id), by_host = {[host] = node}}`
-- @treturn[2] nil
-- @treturn[2] string one-line message
-- @treturn[2] string kind: "unconfigured", "unreachable" or "malformed"
-- @raise on wrong argument types
function M.parse_domain(stdout, status)
  local out = check_args("parse_domain", stdout, status)
  local what = "nvidia-imex-ctl -N -j"
  local ok, err, kind = failure(what, out, status)
  if not ok then
    return nil, err, kind
  end
  local function malformed(why)
    return nil, string.format("%s: malformed output: %s", what, why), "malformed"
  end
  if not out:find("%S") then
    return malformed("no output")
  end
  local decoded_ok, doc = pcall(cjson.decode, out)
  if not decoded_ok then
    if out:find("Domain State:", 1, true) or out:find("Nodes From", 1, true) then
      return malformed("the text table, not JSON")
    end
    return malformed("not JSON (" .. excerpt(out) .. ")")
  end
  if type(doc) ~= "table" then
    return malformed("not a JSON object")
  end
  if type(doc.status) ~= "string" or not M.DOMAIN_STATES[doc.status] then
    local got = type(doc.status) == "string" and "'" .. doc.status .. "'" or "missing"
    return malformed("top-level status is " .. got)
  end
  if doc.timestamp ~= nil and type(doc.timestamp) ~= "string" then
    return malformed("timestamp is not a string")
  end
  if type(doc.nodes) ~= "table" then
    return malformed("nodes is missing or not an object")
  end
  local nodes = {}
  for key, n in pairs(doc.nodes) do
    if not is_id(key) then
      return malformed("nodes is not an object keyed by node ids")
    end
    local node, why = build_node(key, n)
    if not node then
      return malformed(why)
    end
    nodes[#nodes + 1] = node
  end
  if #nodes == 0 then
    return malformed("no nodes")
  end
  local by_host, why = index(nodes)
  if not by_host then
    return malformed(why)
  end
  return { status = doc.status, timestamp = doc.timestamp, nodes = nodes, by_host = by_host }
end

--- Parse the text form of `nvidia-imex-ctl -N` (for the status display and simulator tests).
-- Accepts both legends (6 lines on 570.00, 8 on 580), node lines with or without
-- `- Version: v`, the `Nodes From\To` matrix and `Domain State: X`.
-- @tparam string stdout the output of a successful run
-- @treturn[1] table domain shaped like `parse_domain`'s (connections from the matrix, spelled as in
--   `LETTERS`) plus `matrix = {[from_id] = {[to_id] = letter}}`
-- @treturn[2] nil
-- @treturn[2] string one-line message
-- @treturn[2] string "malformed"
-- @raise when stdout is not a string
function M.parse_text(stdout)
  if type(stdout) ~= "string" then
    error("ctl.parse_text: stdout must be a string", 2)
  end
  local function malformed(why)
    return nil, "nvidia-imex-ctl -N: malformed output: " .. why, "malformed"
  end
  local nodes, by_id, matrix, columns = {}, {}, {}, nil
  local result = { nodes = nodes, matrix = matrix }
  for line in (stdout .. "\n"):gmatch("([^\n]*)\n") do
    line = line:gsub("%s+$", "")
    local id, host, state, rest = line:match("^Node #(%d+)%s+%-%s+(%S+)%s+%-%s+(%S+)(.*)$")
    if id then
      local node = { id = math.tointeger(tonumber(id)), host = host, status = state, connections = {} }
      if rest ~= "" then
        node.version = rest:match("^%s+%-%s+Version:%s*(%S*)$")
        if not node.version then
          return malformed("bad node line '" .. line .. "'")
        end
      end
      if by_id[node.id] then
        return malformed("node #" .. id .. " appears twice")
      end
      by_id[node.id] = node
      nodes[#nodes + 1] = node
    elseif line:match("^%s*Nodes From\\To") then
      columns = {}
      for c in line:gsub("^%s*Nodes From\\To", ""):gmatch("%S+") do
        columns[#columns + 1] = math.tointeger(tonumber(c))
        if not columns[#columns] then
          return malformed("bad matrix header '" .. line .. "'")
        end
      end
    elseif line:match("^Domain State:") then
      result.status = line:match("^Domain State:%s*(%S+)$")
    elseif line:match("^%d+/%d+/%d+ %d+:%d+:%d+") then
      result.timestamp = line
    elseif columns and line:match("^%s*%d+%s") then
      local from = math.tointeger(tonumber(line:match("^%s*(%d+)")))
      local cells = {}
      for c in line:gsub("^%s*%d+", ""):gmatch("%S+") do
        if not M.LETTERS[c] then
          return malformed("unknown connection state '" .. c .. "'")
        end
        cells[#cells + 1] = c
      end
      if #cells ~= #columns then
        return malformed(string.format("matrix row %d has %d cells for %d columns", from, #cells, #columns))
      end
      matrix[from] = {}
      for i, c in ipairs(cells) do
        matrix[from][columns[i]] = c
      end
    end
  end
  if not result.status or not M.DOMAIN_STATES[result.status] then
    return malformed("no 'Domain State: UP|DEGRADED|DOWN' line")
  end
  if #nodes == 0 then
    return malformed("no node lines")
  end
  if not columns then
    return malformed("no connection matrix")
  end
  for _, n in ipairs(nodes) do
    local row = matrix[n.id]
    if not row then
      return malformed("no matrix row for node #" .. n.id)
    end
    for to, letter in pairs(row) do
      if not by_id[to] then
        return malformed("matrix column " .. to .. " is not a node")
      end
      n.connections[by_id[to].host] = M.LETTERS[letter]
    end
  end
  local by_host, why = index(nodes)
  if not by_host then
    return malformed(why)
  end
  result.by_host = by_host
  return result
end

-- Render a list of hosts for a one-line summary (at most 6 named).
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

--- Judge a domain for one job on this node.
-- Healthy iff the domain is UP, every expected host is present and READY, and this node's
-- connections to every other expected host are CONNECTED (design.md, "Decision model" 8).
-- Blame: this node is at fault (`local_fault`) when it is absent from the domain, not READY,
-- or cut off (not CONNECTED) from a majority of the expected peers, at least two of them, while
-- those peers are READY and CONNECTED among themselves. Otherwise `faulty` lists the peers that
-- are not READY, or whose connection from this node is not CONNECTED, with the reason; extra
-- (unexpected) nodes that are not READY are listed too, since they hold the domain below UP.
-- Presence is compared as sets of hosts, never by order. `mismatch` is true when the domain's
-- hosts differ from the expected ones (`missing`, `extra`); an extra host alone does not make
-- the domain unhealthy (a static, domain-wide node list is a valid setup).
-- @tparam table domain result of `parse_domain` or `parse_text`
-- @tparam {string,...} expected the job's node list (addresses as in nodes_config.cfg)
-- @tparam string self_host this node's address in that list
-- @treturn table verdict `{healthy = boolean, status = domain status, local_fault = boolean,
--   mismatch = boolean, missing = {host...} (expected order), extra = {host...} (id order),
--   faulty = { {host =, reason =}... }, summary = one-line string}`
-- @raise on wrong argument types
function M.health(domain, expected, self_host)
  if type(domain) ~= "table" or type(domain.by_host) ~= "table" or type(domain.nodes) ~= "table" then
    error("ctl.health: domain must come from parse_domain or parse_text", 2)
  end
  if type(expected) ~= "table" or type(self_host) ~= "string" then
    error("ctl.health: expected must be a list and self_host a string", 2)
  end
  local by_host = domain.by_host
  local v = { status = domain.status, healthy = false, local_fault = false, mismatch = false,
    missing = {}, extra = {}, faulty = {} }
  local wanted = {}
  for _, h in ipairs(expected) do
    wanted[h] = true
    if not by_host[h] then
      v.missing[#v.missing + 1] = h
    end
  end
  for _, n in ipairs(domain.nodes) do
    if not wanted[n.host] then
      v.extra[#v.extra + 1] = n.host
    end
  end
  v.mismatch = #v.missing > 0 or #v.extra > 0
  local map_note = ""
  if v.mismatch then
    map_note = "; node map differs from the job's"
    if #v.missing > 0 then
      map_note = map_note .. ": missing " .. hosts_text(v.missing)
    end
    if #v.extra > 0 then
      map_note = map_note .. (#v.missing > 0 and "; extra " or ": extra ") .. hosts_text(v.extra)
    end
  end
  local self = by_host[self_host]
  local head = string.format("domain %s", tostring(domain.status))

  if not self then
    v.local_fault = true
    v.summary = string.format("%s: this node %s is not in the domain%s", head, self_host, map_note)
    return v
  end
  if self.status ~= "READY" then
    v.local_fault = true
    v.summary = string.format("%s: this node %s is %s, not READY%s", head, self_host, self.status, map_note)
    return v
  end

  -- Peers: expected hosts present in the domain, other than this node (expected order).
  local peers, broken = {}, {}
  for _, h in ipairs(expected) do
    if h ~= self_host and by_host[h] then
      peers[#peers + 1] = by_host[h]
      if self.connections[h] ~= "CONNECTED" then
        broken[#broken + 1] = by_host[h]
      end
    end
  end
  if #broken >= 2 and #broken * 2 > #peers then
    local peers_fine = true
    for _, a in ipairs(broken) do
      if a.status ~= "READY" then
        peers_fine = false
      end
      for _, b in ipairs(broken) do
        if a ~= b and a.connections[b.host] ~= "CONNECTED" then
          peers_fine = false
        end
      end
    end
    if peers_fine then
      v.local_fault = true
      v.summary = string.format("%s: this node %s is cut off from %d of %d peers that are connected to each "
        .. "other%s", head, self_host, #broken, #peers, map_note)
      return v
    end
  end

  for _, p in ipairs(peers) do
    if p.status ~= "READY" then
      v.faulty[#v.faulty + 1] = { host = p.host, reason = "status " .. p.status }
    elseif self.connections[p.host] ~= "CONNECTED" then
      v.faulty[#v.faulty + 1] = { host = p.host,
        reason = "connection from this node " .. tostring(self.connections[p.host] or "absent") }
    end
  end
  for _, n in ipairs(domain.nodes) do
    if not wanted[n.host] and n.status ~= "READY" then
      v.faulty[#v.faulty + 1] = { host = n.host,
        reason = "status " .. n.status .. " (not in the job's node list)" }
    end
  end

  v.healthy = domain.status == "UP" and #v.missing == 0 and #v.faulty == 0
  if v.healthy then
    v.summary = string.format("%s: %d expected nodes READY and connected%s", head, #expected, map_note)
  elseif #v.faulty > 0 then
    local parts = {}
    for i = 1, math.min(#v.faulty, 6) do
      parts[i] = v.faulty[i].host .. " (" .. v.faulty[i].reason .. ")"
    end
    if #v.faulty > 6 then
      parts[#parts + 1] = string.format("and %d more", #v.faulty - 6)
    end
    v.summary = string.format("%s: peers not healthy: %s%s", head, table.concat(parts, ", "), map_note)
  elseif #v.missing > 0 then
    v.summary = string.format("%s: expected nodes absent%s", head, map_note)
  else
    v.summary = string.format("%s: no faulty node identified%s", head, map_note)
  end
  return v
end

return M
