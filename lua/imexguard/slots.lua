-- SPDX-License-Identifier: Apache-2.0
--- Membership by slots (`membership = "slots"`; docs/design.md, "Membership by slots"): the slot
-- names, the slot list and the layout of the private hosts file, the name map, that the daemon's
-- unit sees as /etc/hosts. Pure: no primitive, no setting (imexguard.steps.slots reads and writes).
--
-- A slot is named after its node, `NODE.imexguard.invalid` (`.invalid`: RFC 6761, no resolver
-- answers for it), so a name never moves to another node. The slot list is one name per node of
-- the IMEX domain, in the domain's own order. The hosts file holds two lines per slot, the node's
-- address and the sentinel's, each led by its switch byte: a blank (in force) or `#` (a comment,
-- glibc's files source skips it):
--    10.0.0.1 gb01.imexguard.invalid
--   #127.0.0.2 gb01.imexguard.invalid
-- Its addresses never change while a daemon runs it; a change of the map flips switch bytes and
-- nothing else (M.switch), so a reader racing the write sees each slot mapped to its own node, the
-- sentinel, both or neither, never to another node's address.
local matches = require("imexguard.text").matches

local M = {}

--- The suffix of every slot name (RFC 6761's reserved `.invalid`: never resolved elsewhere).
M.SUFFIX = ".imexguard.invalid"
--- Where a slot that is not in force resolves: nothing listens there, a connection is refused at
-- once (all of 127/8 is local on Linux); the address NVIDIA's DRA driver uses (its PR 1465).
M.SENTINEL = "127.0.0.2"
--- The first line of a hosts file this module builds.
M.HEADER = "# imexguard: the name map of membership = \"slots\" for the IMEX daemon's unit; written by "
  .. "imexguard under its node lock, never edit it. First byte of a line: blank = in force, # = not.\n"

--- Can this Slurm node name be a slot name (letters, digits, '-', '_', '.'; starting with a letter
-- or a digit; at most 200 bytes)?
-- @param node string
-- @return true, or nil, message naming it
function M.check_node(node)
  if type(node) ~= "string" or #node == 0 or #node > 200 or not node:match("^[%w][%w%-_%.]*$") then
    return nil, string.format("node name %q cannot be a slot name (letters, digits, '-', '_', '.')",
      tostring(node))
  end
  return true
end

--- The slot name of a node.
-- @param node string Slurm node name ("gb01")
-- @return string "gb01.imexguard.invalid"
function M.name(node)
  return node .. M.SUFFIX
end

--- The node of a slot name, or nil when it is not one.
-- @param slot string
-- @return string|nil
function M.node_of(slot)
  if type(slot) ~= "string" or #slot <= #M.SUFFIX or slot:sub(-#M.SUFFIX) ~= M.SUFFIX then return nil end
  return slot:sub(1, #slot - #M.SUFFIX)
end

--- The slot list of a domain: its nodes' slot names in the domain's order, and the node list
-- file's bytes (one name a line, LF, a final newline).
-- @param nodes list the domain's node names, in its order
-- @return names (list), bytes (string), or nil, message naming a node that cannot be a slot
function M.list(nodes)
  local names = {}
  for i, n in ipairs(nodes) do
    local ok, err = M.check_node(n)
    if not ok then return nil, err end
    names[i] = M.name(n)
  end
  return names, #names > 0 and (table.concat(names, "\n") .. "\n") or ""
end

--- The slot names of a node list file's bytes when every entry is one (a daemon running a slot
-- list), else nil.
-- @param bytes string|nil
-- @return list|nil
function M.parse_list(bytes)
  if type(bytes) ~= "string" or bytes == "" then return nil end
  local out = {}
  for line in bytes:gmatch("[^\n]+") do
    if not M.node_of(line) then return nil end
    out[#out + 1] = line
  end
  return #out > 0 and out or nil
end

--- A set of slot names from lists of them ({[name] = true}).
-- @param ... lists (nil ignored)
-- @return table set
function M.union(...)
  local set = {}
  for i = 1, select("#", ...) do
    for _, n in ipairs(select(i, ...) or {}) do set[n] = true end
  end
  return set
end

--- The registry field of a job's slots (blank-separated names) and back.
-- @param list list of slot names
-- @return string
function M.field(list)
  return table.concat(list, " ")
end

--- @param field string|nil a registry entry's `slots`
-- @return list of slot names ({} for nil)
function M.of_field(field)
  return matches(field, "%S+")
end

--- The hosts file of a slot list: the header, then per slot its node's line and the sentinel's,
-- the node's in force when the slot is in `on`.
-- @param names list the slot names (domain order)
-- @param addrs table {[slot name] = IPv4 address}: every slot's node
-- @param on table set {[slot name] = true}: the slots in force
-- @return string bytes, or nil, message naming a slot without an address
function M.build(names, addrs, on)
  local out = { M.HEADER }
  for _, n in ipairs(names) do
    local a = addrs[n]
    if type(a) ~= "string" or not a:match("^%d+%.%d+%.%d+%.%d+$") or a == M.SENTINEL then
      return nil, string.format("slot %s has no usable address (%s)", n, tostring(a))
    end
    out[#out + 1] = string.format("%s%s %s\n%s%s %s\n", on[n] and " " or "#", a, n, on[n] and "#" or " ",
      M.SENTINEL, n)
  end
  return table.concat(out)
end

-- One data line of the layout: switch byte, IPv4 address, one blank, the slot name.
local function data_line(line)
  local sw, addr, name = line:match("^([ #])(%d+%.%d+%.%d+%.%d+) (%S+)$")
  return sw, addr, name
end

--- Parse a hosts file built by M.build (the layout is checked: header lines, then pairs of a node's
-- line and the sentinel's line of one slot, nothing else).
-- @param bytes string
-- @return map {names = list (file order), addr = {[name] = node address}, on = {[name] = true when
--   only the node's line is in force}, sentinel = {[name] = true when only the sentinel's line is},
--   at = {[name] = {node = byte offset of its node line's switch, sentinel = of the sentinel's}}},
--   or nil, message (the line that breaks the layout)
function M.parse(bytes)
  local map = { names = {}, addr = {}, on = {}, sentinel = {}, at = {} }
  local pos, n, pending = 1, 0, nil
  while pos <= #bytes do
    local nl = bytes:find("\n", pos, true)
    if not nl then return nil, string.format("line %d has no final newline", n + 1) end
    local line = bytes:sub(pos, nl - 1)
    n = n + 1
    local sw, addr, name = data_line(line)
    if not sw then
      if line:sub(1, 1) ~= "#" or pending or #map.names > 0 then
        return nil, string.format("line %d is not a slot line (%q)", n, line:sub(1, 60))
      end
    elseif not pending then
      if not M.node_of(name) or map.addr[name] or addr == M.SENTINEL then
        return nil, string.format("line %d is not the node line of a new slot (%q)", n, line:sub(1, 60))
      end
      pending = { name = name, addr = addr, sw = sw, at = pos }
    else
      if name ~= pending.name or addr ~= M.SENTINEL then
        return nil, string.format("line %d is not the sentinel line of slot %s", n, pending.name)
      end
      local s = pending.name
      map.names[#map.names + 1], map.addr[s] = s, pending.addr
      map.on[s] = pending.sw == " " and sw == "#" or nil
      map.sentinel[s] = pending.sw == "#" and sw == " " or nil
      map.at[s] = { node = pending.at, sentinel = pos }
      pending = nil
    end
    pos = nl + 1
  end
  if pending then return nil, "slot " .. pending.name .. " has no sentinel line" end
  return map
end

--- The same file with the slots of `on` in force and every other slot on the sentinel: only switch
-- bytes differ from `bytes` (same size, same addresses).
-- @param bytes string a file M.parse accepts
-- @param map table M.parse(bytes)
-- @param on table set {[slot name] = true}
-- @return new bytes, changes {added = list, removed = list} (file order; a slot with both or neither
--   line in force counts as a change to its state now)
function M.switch(bytes, map, on)
  local b = { bytes:byte(1, -1) }
  local ch = { added = {}, removed = {} }
  local blank, hash = (" "):byte(), ("#"):byte()
  for _, s in ipairs(map.names) do
    local want_on = on[s] == true
    if want_on and not map.on[s] then ch.added[#ch.added + 1] = s end
    if not want_on and not map.sentinel[s] then ch.removed[#ch.removed + 1] = s end
    b[map.at[s].node] = want_on and blank or hash
    b[map.at[s].sentinel] = want_on and hash or blank
  end
  local parts = {}
  for i = 1, #b, 4096 do parts[#parts + 1] = string.char(table.unpack(b, i, math.min(i + 4095, #b))) end
  return table.concat(parts), ch
end

--- The slots in force in a parsed file (file order).
-- @param map table M.parse's
-- @return list
function M.in_force(map)
  local out = {}
  for _, s in ipairs(map.names) do
    if map.on[s] then out[#out + 1] = s end
  end
  return out
end

return M
