-- SPDX-License-Identifier: Apache-2.0
--- `nvidia-imex-ctl` output parsed: `-q`, `-N -j` and the text form of `-N` (imexguard.verdict
-- judges a parsed answer).
--
-- A *mesh* is the parsed answer of `-N -j` (or `-N`): the daemons of the IMEX domain as the local
-- daemon sees them (they form a full TCP mesh, each node connected to every other), each with its
-- node id, host, state and links, and the domain's state (`status`, one of DOMAIN_STATES). The word
-- "domain" is kept for the IMEX domain itself (the nodes one node list serves: imexguard.domains).
--
-- Pure Lua plus cjson, no side effects: the caller runs the ctl (host.run) and passes stdout
-- (stdout and stderr joined is fine) and the exit status. Sources: NVIDIA IMEX guide (local states,
-- `-q`/`-N`/`-j`, node IDs), the real outputs in tests/fixtures/ctl/ and the field cases of
-- docs/design.md ("Field cases"): C06 (a real JSON parser, state from the top-level `status`, every
-- malformed answer is "malformed", never a mismatch), C20 (not configured, not running and
-- unreadable are three different answers) and C21 (a host under two node ids is kept: it is a
-- node list the daemon runs, for the verdict to judge).
--
-- Errors are `nil, message, kind` where kind is:
--
-- * `"unconfigured"`: exit status 255 or "Failed to read node configuration file" (seen);
-- * `"unreachable"`: the local daemon did not answer ("failed to connect", exit 1, any other
--   non-zero status, or no status at all: killed by a signal);
-- * `"malformed"`: exit 0 but the output is not what the format promises (never guessed at).
-- @module imexguard.ctl
local cjson = require("cjson")
local text = require("imexguard.text")
local expect = require("imexguard.expect")

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

--- Longest excerpt of the ctl's output in a message (bytes; text.ends keeps its start and its end).
-- The ctl's longest line seen, error 14 on a host without IPv6 (C44), is 171 bytes.
M.EXCERPT_MAX = 240

-- Some output for a one-line message, quoted: its start and its end kept (text.ends), since the
-- cause of a failure is often at the end of the ctl's line (C44: "... Address family not supported
-- by protocol").
local function excerpt(s)
  return "'" .. text.ends(s, M.EXCERPT_MAX) .. "'"
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
  local word = text.trim(out) -- a state holds no blank: "READY x" is no state
  if not M.STATES[word] then
    return nil, string.format("nvidia-imex-ctl -q: not a known state: %s",
      out == "" and "no output" or excerpt(out)), "malformed"
  end
  return word
end

local find, tointeger = string.find, math.tointeger

local function is_id(k)
  return type(k) == "string" and #k <= 9 and find(k, "^%d+$") ~= nil
end

-- A node id of the text form as an integer, or nil when it is not 1 to 9 decimal digits (the JSON
-- form's limit, `is_id`; a longer run of digits is no node id and overflows an integer).
local function text_id(s)
  if s and is_id(s) then
    return math.tointeger(tonumber(s))
  end
  return nil
end

local function id_less(a, b)
  return a.id < b.id
end

-- A list of tables with integer `id`s ordered by id, and the lowest id that appears twice (nil when
-- none; the order of equal ids is then unspecified). Linear when the ids are dense (a ctl answer's
-- ids are 0 .. n-1: every node's n connections are bucketed, so an answer of n nodes costs n^2,
-- not n^2 log n); a comparison sort for sparse ids. May return a new list.
local function order_by_id(list)
  local n = #list
  if n < 2 then
    return list
  end
  local lo, hi = list[1].id, list[1].id
  for i = 2, n do
    local id = list[i].id
    if id < lo then lo = id elseif id > hi then hi = id end
  end
  if hi - lo >= 2 * n then
    table.sort(list, id_less)
    for i = 2, n do
      if list[i - 1].id == list[i].id then return list, list[i].id end
    end
    return list
  end
  local slot, twice = {}, nil
  for i = 1, n do
    local e = list[i]
    local k = e.id - lo + 1
    if slot[k] == nil then
      slot[k] = e
    elseif twice == nil or e.id < twice then
      twice = e.id
    end
  end
  local out, m = {}, 0
  for k = 1, hi - lo + 1 do
    local e = slot[k]
    if e ~= nil then
      m = m + 1
      out[m] = e
    end
  end
  return out, twice
end

-- Validate one decoded node; returns the result node or nil, reason. A host named under two ids
-- in the connections is kept (`links` has both; `connections` keeps the lower id's status): it is
-- a node-map finding of `verdict.map_faults`, not an unreadable answer.
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
  local links, count = {}, 0
  for ck, c in pairs(n.connections) do
    if not is_id(ck) then
      return nil, "connections of node " .. key .. " are not keyed by node ids"
    end
    local host, status
    if type(c) == "table" then host, status = c.host, c.status end
    if type(host) ~= "string" or host == "" or type(status) ~= "string" then
      return nil, "connection " .. ck .. " of node " .. key .. " lacks host or status"
    end
    count = count + 1
    links[count] = { id = tointeger(tonumber(ck)), host = host, status = status }
  end
  local twice
  links, twice = order_by_id(links)
  if twice then
    return nil, "connections of node " .. key .. " list id " .. twice .. " twice"
  end
  local conns = {}
  for _, l in ipairs(links) do
    conns[l.host] = conns[l.host] or l.status
  end
  return {
    id = math.tointeger(tonumber(key)),
    host = n.host,
    status = n.status,
    version = n.version,
    hostname = n.hostName,
    connections = conns,
    links = links,
  }
end

-- Index nodes (ordered by id) by host: a host under two ids gets the lower id, and the host is
-- listed in `duplicates`.
local function index(nodes)
  local by_host, dups = {}, {}
  for _, n in ipairs(nodes) do
    local first = by_host[n.host]
    if first then
      if not dups[n.host] then
        dups[n.host] = { host = n.host, ids = { first.id } }
        dups[#dups + 1] = dups[n.host]
      end
      table.insert(dups[n.host].ids, n.id)
    else
      by_host[n.host] = n
    end
  end
  local list = {}
  for i, d in ipairs(dups) do list[i] = d end
  return by_host, list
end

--- A parsed mesh with its hosts renamed (C35: a node list of host names; whether the ctl then
-- shows each node's `host` as the name or as its address is not documented, so a name is mapped to
-- the address it resolves to and an address is kept).
-- @tparam table mesh from `parse_mesh`
-- @tparam table map {[host as shown] = address}; hosts not in it are kept
-- @treturn table a new mesh of the same shape (by_host and duplicates rebuilt); `mesh` itself
--   when map is empty
function M.map_hosts(mesh, map)
  if next(map) == nil then return mesh end
  local function h(x) return map[x] or x end
  local nodes = {}
  for i, n in ipairs(mesh.nodes) do
    local conns, links = {}, {}
    for host, st in pairs(n.connections or {}) do conns[h(host)] = st end
    for j, l in ipairs(n.links or {}) do links[j] = { id = l.id, host = h(l.host), status = l.status } end
    nodes[i] = { id = n.id, host = h(n.host), status = n.status, version = n.version, hostname = n.hostname,
      connections = conns, links = links }
  end
  local by_host, dups = index(nodes)
  return { status = mesh.status, timestamp = mesh.timestamp, nodes = nodes, by_host = by_host,
    duplicates = dups }
end

--- A ctl answer read with a node list's host names as addresses (C35: `map_hosts` on its mesh).
-- @tparam table answer a ctl answer ({mesh = parsed mesh, ...}, or one without a mesh)
-- @tparam table|nil map {[host as shown] = address}
-- @treturn table `answer` itself when it has no mesh or map is nil or empty, else a new answer
--   whose `mesh` is mapped and whose other fields are answer's
function M.map_answer_hosts(answer, map)
  if not (answer.mesh and map and next(map)) then return answer end
  return setmetatable({ mesh = M.map_hosts(answer.mesh, map) }, { __index = answer })
end

--- Parse `nvidia-imex-ctl -N -j`.
-- Requires a JSON object with a top-level `status` of UP/DEGRADED/DOWN and `nodes` an object
-- keyed by decimal node ids (any order) holding at least one node; each node needs `host`,
-- `status` and a `connections` object keyed by node ids whose entries have `host` and `status`.
-- `version` and `hostName` are optional (missing on older drivers).
-- @tparam string|nil stdout the output
-- @tparam integer|nil status exit status (nil: killed by a signal)
-- A host under two node ids is kept (both nodes listed, `by_host` has the lower id, `duplicates`
-- names it): it is a node list the daemon runs, judged by `verdict.compare_map`, not an unreadable
-- answer.
-- @treturn[1] table mesh `{status =, timestamp = string|nil, nodes = { {id = integer, host =,
--   status =, version = string|nil, hostname = string|nil, connections = {[host] = status},
--   links = { {id = integer, host =, status =}, ... } (this node's connections by id)}, ...}
--   (sorted by id), by_host = {[host] = node}, duplicates = { {host =, ids = {integer...}}, ...}}`
-- @treturn[2] nil
-- @treturn[2] string one-line message
-- @treturn[2] string kind: "unconfigured", "unreachable" or "malformed"
-- @raise on wrong argument types
function M.parse_mesh(stdout, status)
  local out = check_args("parse_mesh", stdout, status)
  local what = "nvidia-imex-ctl -N -j"
  local ok, err, kind = failure(what, out, status)
  if not ok then
    return nil, err, kind
  end
  local function malformed(why) -- `why` may quote a raw field: made one line
    return nil, text.one_line(string.format("%s: malformed output: %s", what, why)), "malformed"
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
  local twice
  nodes, twice = order_by_id(nodes)
  if twice then
    return malformed("node id " .. twice .. " appears twice")
  end
  local by_host, dups = index(nodes)
  return { status = doc.status, timestamp = doc.timestamp, nodes = nodes, by_host = by_host,
    duplicates = dups }
end

-- One row of the text matrix: from id, {[to id] = letter}; or nil, reason.
local function matrix_row(line, columns)
  local digits = line:match("^%s*(%d+)")
  local from = text_id(digits)
  if not from then
    return nil, "matrix row id " .. digits .. " is not a node id"
  end
  local cells = {}
  for c in line:gsub("^%s*%d+", ""):gmatch("%S+") do
    if not M.LETTERS[c] then
      return nil, "unknown connection state '" .. c .. "'"
    end
    cells[#cells + 1] = c
  end
  if #cells ~= #columns then
    return nil, string.format("matrix row %d has %d cells for %d columns", from, #cells, #columns)
  end
  local row = {}
  for i, c in ipairs(cells) do
    row[columns[i]] = c
  end
  return from, row
end

-- Give each node of a text answer its links and connections from its matrix row; nil, reason
-- when a row is missing or a column is not a node.
local function link_rows(nodes, by_id, matrix)
  for _, n in ipairs(nodes) do
    local row = matrix[n.id]
    if not row then
      return nil, "no matrix row for node #" .. n.id
    end
    local links, count = {}, 0
    for to, letter in pairs(row) do
      if not by_id[to] then
        return nil, "matrix column " .. to .. " is not a node"
      end
      count = count + 1
      links[count] = { id = to, host = by_id[to].host, status = M.LETTERS[letter] }
    end
    n.links = order_by_id(links) -- a row has each column once
    for _, l in ipairs(n.links) do
      n.connections[l.host] = n.connections[l.host] or l.status
    end
  end
  return true
end

-- A node line of `-N`, "Node #ID - HOST - STATE[ - Version: V]", from its captures: the node, or
-- nil and why it is malformed.
local function text_node(line, id, host, state, rest)
  local node = { id = text_id(id), host = host, status = state, connections = {} }
  if not node.id then
    return nil, "node #" .. id .. " is not a node id"
  end
  if rest ~= "" then
    node.version = rest:match("^%s+%-%s+Version:%s*(%S*)$")
    if not node.version then
      return nil, "bad node line '" .. line .. "'"
    end
  end
  return node
end

-- The column ids of the matrix header "Nodes From\To 0 1 2 ...": a list, or nil and why it is
-- malformed.
local function text_columns(line)
  local columns = {}
  for c in line:gsub("^%s*Nodes From\\To", ""):gmatch("%S+") do
    columns[#columns + 1] = text_id(c:match("^%d+$"))
    if not columns[#columns] then
      return nil, "bad matrix header '" .. line .. "'"
    end
  end
  return columns
end

--- Parse the text form of `nvidia-imex-ctl -N` (for the status display and simulator tests).
-- Accepts both legends (6 lines on 570.00, 8 on 580), node lines with or without
-- `- Version: v`, the `Nodes From\To` matrix and `Domain State: X`. A node, matrix row or column id
-- of more than 9 digits (the JSON form's limit) is malformed, never an error.
-- @tparam string stdout the output of a successful run
-- @treturn[1] table mesh shaped like `parse_mesh`'s (connections from the matrix, spelled as in
--   `LETTERS`) plus `matrix = {[from_id] = {[to_id] = letter}}`
-- @treturn[2] nil
-- @treturn[2] string one-line message
-- @treturn[2] string "malformed"
-- @raise when stdout is not a string
function M.parse_text(stdout)
  expect(stdout, "string", "ctl.parse_text: stdout must be a string")
  local function malformed(why)
    return nil, "nvidia-imex-ctl -N: malformed output: " .. why, "malformed"
  end
  local nodes, by_id, matrix, columns = {}, {}, {}, nil
  local result = { nodes = nodes, matrix = matrix }
  for line in (stdout .. "\n"):gmatch("([^\n]*)\n") do
    line = text.rtrim(line)
    local id, host, state, rest = line:match("^Node #(%d+)%s+%-%s+(%S+)%s+%-%s+(%S+)(.*)$")
    if id then
      local node, why = text_node(line, id, host, state, rest)
      if not node then
        return malformed(why)
      end
      if by_id[node.id] then
        return malformed("node #" .. id .. " appears twice")
      end
      by_id[node.id] = node
      nodes[#nodes + 1] = node
    elseif line:match("^%s*Nodes From\\To") then
      local why
      columns, why = text_columns(line)
      if not columns then
        return malformed(why)
      end
    elseif line:match("^Domain State:") then
      result.status = line:match("^Domain State:%s*(%S+)$")
    elseif line:match("^%d+/%d+/%d+ %d+:%d+:%d+") then
      result.timestamp = line
    elseif columns and line:match("^%s*%d+%s") then
      local from, row = matrix_row(line, columns)
      if not from then
        return malformed(row)
      end
      matrix[from] = row
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
  local linked, why = link_rows(nodes, by_id, matrix)
  if not linked then
    return malformed(why)
  end
  nodes = order_by_id(nodes) -- no id twice: refused at its node line
  result.nodes = nodes
  local by_host, dups = index(nodes)
  result.by_host, result.duplicates = by_host, dups
  return result
end

return M
