-- SPDX-License-Identifier: Apache-2.0
--- The IMEX node list file (`nodes_config.cfg`): format, parse, check.
--
-- Pure Lua, no side effects. Sources: NVIDIA IMEX guide (one address per line; a node's ID is the
-- 0-based line of its own address; every node of a domain must hold the same list in the same
-- order, else "node map mismatch"), field cases (docs/design.md, "Field cases") C04 (byte-identical
-- on every node: the given order, LF, final newline, no blank lines; never sorted, so no locale can
-- change it) and C05 (IPv4 literals only, no loopback, no duplicates, this node present).
-- @module imexguard.nodelist
local trim = require("imexguard.text").trim
local matches = require("imexguard.text").matches
local expect = require("imexguard.expect")

local M = {}

local function check_list(addrs, fname)
  if type(addrs) ~= "table" then
    error("nodelist." .. fname .. ": expected a list, got " .. type(addrs), 3)
  end
  for i, a in ipairs(addrs) do
    if type(a) ~= "string" then
      error("nodelist." .. fname .. ": entry " .. i .. " is a " .. type(a), 3)
    end
  end
end

--- The exact bytes of a node list file: one entry per line, LF, final newline.
-- The order is kept exactly as given (C04).
-- @tparam {string,...} addrs entries, usually checked with `check` first
-- @treturn[1] string file contents
-- @treturn[2] nil
-- @treturn[2] string error for an empty list or an entry that is empty or holds whitespace
-- @raise when addrs is not a list of strings
function M.format(addrs)
  check_list(addrs, "format")
  if #addrs == 0 then
    return nil, "empty node list"
  end
  for i, a in ipairs(addrs) do
    if a == "" or a:find("[%s%c]") then
      return nil, string.format("node list entry %d '%s' is empty or contains whitespace", i, a)
    end
  end
  return table.concat(addrs, "\n") .. "\n"
end

--- Parse a node list file.
-- Blank lines and lines starting with `#` (after leading spaces) are ignored; surrounding
-- whitespace (including a CR of CRLF files) is trimmed.
-- @tparam string text file contents
-- @treturn[1] {string,...} entries in file order (the index minus one is the IMEX node ID)
-- @treturn[2] nil
-- @treturn[2] string error naming the line number and the entry with inner whitespace
-- @raise when text is not a string
function M.parse(text)
  expect(text, "string", "nodelist.parse: expected a string, got %s", type(text))
  local list, lineno = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    lineno = lineno + 1
    local entry = trim(line)
    if entry ~= "" and entry:sub(1, 1) ~= "#" then
      if entry:find("[%s%c]") then
        return nil, string.format("node list line %d: '%s' is not a single entry", lineno, entry)
      end
      list[#list + 1] = entry
    end
  end
  return list
end

--- The lines of node-list bytes that imexguard wrote (`format`'s output: the file it wrote, the
-- state file's and a registry entry's `nodes`), in file order, as they are: every non-empty line,
-- nothing trimmed or skipped (`parse` reads a file a person may have written).
-- @param bytes string, or nil (no list: no entries)
-- @treturn {string,...} the entries
function M.lines(bytes)
  return matches(bytes, "[^\n]+")
end

--- Is s a strict dotted-quad IPv4 literal?
-- Four decimal parts 0-255, no leading zeros (`010` is octal to inet_aton, so it is refused),
-- nothing else around.
-- @tparam any s
-- @treturn boolean
function M.is_ipv4(s)
  if type(s) ~= "string" then
    return false
  end
  local parts = { s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$") }
  if #parts ~= 4 then
    return false
  end
  for _, p in ipairs(parts) do
    if #p > 3 or (#p > 1 and p:sub(1, 1) == "0") or tonumber(p) > 255 then
      return false
    end
  end
  return true
end

-- Why an IPv4 literal can never be an IMEX node address, or nil.
local function unusable(a, allow_loopback)
  local first = tonumber(a:match("^(%d+)"))
  if a == "255.255.255.255" then
    return "is the broadcast address"
  elseif first == 0 then
    return "is in 0.0.0.0/8 (\"this network\", RFC 1122)"
  elseif first >= 224 and first <= 239 then
    return "is a multicast address"
  elseif first == 127 and not allow_loopback then
    return "is a loopback address (127.0.0.0/8)"
  end
  return nil
end

--- Check a node list before it is written (C05).
-- @tparam {string,...} addrs entries in node list order
-- @tparam[opt] table opts `allow_loopback` (boolean: accept 127.0.0.0/8, for tests on one
--   machine), `self` (string, or list of strings: this node's addresses; one must be in the
--   list), `names` (list of host names parallel to addrs, used in messages)
-- @treturn[1] true
-- @treturn[2] nil
-- @treturn[2] string one-line error naming the bad entry, its position and, with `names`, its node
-- @raise when addrs is not a list of strings or opts is not a table
function M.check(addrs, opts)
  check_list(addrs, "check")
  opts = opts or {}
  expect(opts, "table", "nodelist.check: opts must be a table")
  local names = opts.names or {}
  local function which(i)
    local s = string.format("entry %d '%s'", i, addrs[i])
    if names[i] then
      s = s .. string.format(" (node %s)", names[i])
    end
    return s
  end
  if #addrs == 0 then
    return nil, "empty node list"
  end
  local seen = {}
  for i, a in ipairs(addrs) do
    if not M.is_ipv4(a) then
      local what = a:find(":", 1, true) and "an IPv6 address" or "a host name or malformed"
      return nil, string.format("node list %s is not an IPv4 address (%s)", which(i), what)
    end
    local why = unusable(a, opts.allow_loopback)
    if why then
      return nil, string.format("node list %s %s", which(i), why)
    end
    if seen[a] then
      local first = seen[a]
      return nil, string.format("node list %s duplicates entry %d%s", which(i), first,
        names[first] and string.format(" (node %s)", names[first]) or "")
    end
    seen[a] = i
  end
  if opts.self ~= nil then
    local selves = type(opts.self) == "table" and opts.self or { opts.self }
    local found = false
    for _, s in ipairs(selves) do
      if seen[s] then
        found = true
      end
    end
    if not found then
      return nil, string.format("this node's address %s is not in the node list %s",
        table.concat(selves, "/"), table.concat(addrs, ","))
    end
  end
  return true
end

--- Are two node lists equal, entry by entry, in order?
-- @tparam {string,...} a
-- @tparam {string,...} b
-- @treturn boolean
function M.equal(a, b)
  check_list(a, "equal")
  check_list(b, "equal")
  if #a ~= #b then
    return false
  end
  for i = 1, #a do
    if a[i] ~= b[i] then
      return false
    end
  end
  return true
end

return M
