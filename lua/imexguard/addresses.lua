-- SPDX-License-Identifier: Apache-2.0
--- Slurm node names -> IPv4 addresses for the IMEX node list (docs/design.md, step 2).
-- Sources: "dns" (host.resolve: a name must resolve to exactly ONE IPv4 address) or "map": the
-- address map, the one way to give node names fixed IMEX addresses (settings address_source = "map"
-- and address_map, conventionally /etc/imexguard/addresses), a file of "name address" lines with
-- '#' comments. A site policy with a source that is not a file replaces step 2's lookup through
-- the default policy's `lookup` hook.
-- Why one address (field case C04, docs/design.md "Field cases"): every node of a job must write
-- the same bytes, but the ORDER of a multi-address answer is per node (round-robin DNS rotates it;
-- glibc's getaddrinfo sorts by RFC 6724 rule 9, longest prefix match with the node's own
-- addresses), so "the first answer" differs between nodes and no per-node choice is safe. Such a
-- name is bad input; the site lists the IMEX address of each node in an address map instead.
local nodelist = require("imexguard.nodelist")
local trim = require("imexguard.text").trim

local M = {}

--- Largest address map read (bytes).
M.MAX_MAP = 1024 * 1024
--- The documented path of the address map (the setting address_map has no default).
M.MAP_PATH = "/etc/imexguard/addresses"

--- Parse the text of an address map.
-- @param text string file contents: lines "name address [domain]", blank lines and '#' comments
--   ignored; the optional third column names the node's IMEX domain (imexguard.domains)
-- @param path string file name (for messages)
-- @return table {[name] = address}, nil, list of the lines {name, address, domain (or nil), line},
--   or nil, message naming the file and line
function M.parse_map(text, path)
  local map, cols = {}, {}
  local n = 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    line = trim((line:gsub("#.*$", "")))
    if line ~= "" then
      local name, addr, rest = line:match("^(%S+)%s+(%S+)%s*(.*)$")
      local domain = rest and rest ~= "" and rest:match("^(%S+)$") or nil
      if not name or (rest ~= "" and not domain) then
        return nil, string.format("address map %s line %d: expected 'name address [domain]', got '%s'", path,
          n, line)
      end
      if map[name] and map[name] ~= addr then
        return nil, string.format("address map %s line %d: %s listed twice (%s, %s)", path, n, name,
          map[name], addr)
      end
      map[name] = addr
      cols[#cols + 1] = { name = name, address = addr, domain = domain, line = n }
    end
  end
  return map, nil, cols
end

--- Read and parse the configured address map.
-- @param host table primitives (read)
-- @param path string
-- @return map table, or nil, message
function M.load_map(host, path)
  if type(path) ~= "string" or path == "" then
    return nil, string.format("address_source is \"map\" but the setting address_map is not set "
      .. "(address_map = %q)", M.MAP_PATH)
  end
  local text, err = host.read(path, M.MAX_MAP)
  if not text then return nil, string.format("address map %s unreadable: %s", path, tostring(err)) end
  local map, perr = M.parse_map(text, path)
  if not map then return nil, perr end
  return map
end

--- The distinct IPv4 literals of a resolver answer, in answer order.
local function ipv4s(list)
  local out, seen = {}, {}
  for _, a in ipairs(list) do
    if nodelist.is_ipv4(a) and not seen[a] then
      seen[a] = true
      out[#out + 1] = a
    end
  end
  return out
end

--- Map the job's node names to addresses. DNS: a name must resolve to exactly one IPv4 address
-- (duplicates in the answer count once); several are refused (see the top of this file).
-- @param host table primitives (resolve, read)
-- @param settings table validated settings (address_source, address_map, resolve_timeout)
-- @param names list of Slurm node names (hostlist order)
-- @return list of address strings in the same order, or nil, message naming the node, code
--   (code is the primitive's code, e.g. "timeout", "deadline", or nil for a data error)
function M.lookup(host, settings, names)
  local addrs = {}
  if settings.address_source == "map" then
    local map, err = M.load_map(host, settings.address_map)
    if not map then return nil, err end
    for i, name in ipairs(names) do
      local a = map[name]
      if not a then
        return nil, string.format("node %s is not in the address map %s", name, settings.address_map)
      end
      addrs[i] = a
    end
    return addrs
  end
  for i, name in ipairs(names) do
    if nodelist.is_ipv4(name) then
      addrs[i] = name
    else
      local list, err, code = host.resolve(name, settings.resolve_timeout)
      if not list then
        return nil, string.format("resolving node %s failed: %s", name, tostring(err)), code
      end
      local v4 = ipv4s(list)
      if #v4 == 0 then
        return nil, string.format("node %s resolves to no IPv4 address (answer: %s)", name,
          #list > 0 and table.concat(list, " ") or "empty"), nil
      end
      if #v4 > 1 then
        return nil, string.format("node %s resolves to %d IPv4 addresses (%s): their order differs between "
          .. "nodes, so the nodes of a job could write different node lists; list each node's IMEX address "
          .. "in an address map (address_source = \"map\", address_map = FILE)", name, #v4,
          table.concat(v4, " ")), nil
      end
      addrs[i] = v4[1]
    end
  end
  return addrs
end

--- The entries of a node list file as addresses (C35: driver 570.158.01 and later accept host
-- names in nodes_config.cfg, and some sites write a fixed list of rack-slot names at boot). An
-- IPv4 literal is its own address; a host name goes through `M.lookup` (address_source: the
-- resolver, or the address map), one at a time, so that every name that does not resolve is named.
-- The daemon resolves the names itself (its resolver, not the address map): a map that disagrees
-- with DNS or /etc/hosts describes another domain than the daemon's.
-- @param host table primitives (resolve, read)
-- @param settings table validated settings (address_source, address_map, resolve_timeout)
-- @param entries list of strings the node list's entries, in order (nodelist.parse)
-- @return addrs (list: the address of entry i, or false when it did not resolve), names
--   ({[address] = entry} for the entries that are host names), unresolved (list of one-line
--   "NAME (why)", in order)
function M.resolve_entries(host, settings, entries)
  local addrs, names, unresolved = {}, {}, {}
  for i, e in ipairs(entries) do
    if nodelist.is_ipv4(e) then
      addrs[i] = e
    else
      local r, err = M.lookup(host, settings, { e })
      addrs[i] = r and r[1] or false
      if r then
        names[r[1]] = e
      else
        unresolved[#unresolved + 1] = string.format("%s (%s)", e, tostring(err))
      end
    end
  end
  return addrs, names, unresolved
end

--- A node list's entries as the daemon's list of addresses (C35): `M.resolve_entries`, then each
-- entry replaced by its address; an entry that does not resolve stays as written (and is named
-- in `unresolved`).
-- @param host table primitives (resolve, read)
-- @param settings table validated settings (address_source, address_map, resolve_timeout)
-- @param entries list of strings the node list's entries, in order (nodelist.parse)
-- @return resolved (a new list, entry i's address or entry i), names ({[address] = entry} for the
--   entries that are host names), by_entry ({[entry] = address} for the entries that are not their
--   own address: what `ctl.map_hosts` takes), unresolved (list of one-line "NAME (why)", in order)
function M.resolve_list(host, settings, entries)
  local addrs, names, unresolved = M.resolve_entries(host, settings, entries)
  local resolved, by_entry = {}, {}
  for i, e in ipairs(entries) do
    resolved[i] = addrs[i] or e
    if addrs[i] and addrs[i] ~= e then by_entry[e] = addrs[i] end
  end
  return resolved, names, by_entry, unresolved
end

--- This node's entry of the list.
-- @param host table primitives (local_addresses)
-- @param bind string|nil BIND_INTERFACE_IP from config.cfg ("" or nil when unset)
-- @param addrs list the job's addresses
-- @return address string and its index, or nil, message
function M.self(host, bind, addrs)
  if bind and bind ~= "" then
    for i, a in ipairs(addrs) do
      if a == bind then return a, i end
    end
    return nil, string.format("this node's BIND_INTERFACE_IP %s is not in the job's node list (%s)", bind,
      table.concat(addrs, " "))
  end
  local localset = {}
  local locals = host.local_addresses() or {}
  for _, a in ipairs(locals) do localset[a] = true end
  for i, a in ipairs(addrs) do
    if localset[a] then return a, i end
  end
  return nil, string.format("no local address of this node (%s) is in the job's node list (%s)",
    #locals > 0 and table.concat(locals, " ") or "none", table.concat(addrs, " "))
end

return M
