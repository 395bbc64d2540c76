--- Site policy: node addresses from the site's IMEX hosts file instead of DNS. Everything else is
-- the default policy (policies/default.lua); only step 2's address source is replaced, through
-- the `lookup` hook (steps.desired calls it with the job's node names in hostlist order and
-- checks what it returns: IPv4 literals, no loopback, no duplicates, this node present).
--
-- The file is in hosts(5) format, as many sites already keep one for their NVLink/IMEX network:
--   # address      names...
--   10.10.0.1      gb200-n001 gb200-n001-imex
-- Blank lines and '#' comments are ignored; a name listed twice with different addresses is an
-- error (two nodes could otherwise write different lists). A node not in the file, or an
-- unreadable file, is bad-input naming the node or the file: nothing written, nothing restarted.
-- There is deliberately no fallback to DNS: a site that keeps a map does so because DNS answers
-- another network's addresses.
-- (The default policy also has a built-in map source: address_source = "map" with address_map,
-- "name address" lines. This policy shows how a site plugs in a source of its own.)
local default = require "policies.default"

--- Path of the hosts file (fixed by this site; edit here).
local HOSTS_FILE = "/etc/imexguard/imex-hosts"
--- Largest hosts file read (bytes).
local MAX_BYTES = 1024 * 1024

--- Parse hosts(5) text into {[name] = address}.
-- @return map, or nil, message naming the file and line
local function parse_hosts(text, path)
  local map, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    line = line:gsub("#.*$", "")
    local fields = {}
    for f in line:gmatch("%S+") do fields[#fields + 1] = f end
    if #fields == 1 then
      return nil, string.format("%s line %d: '%s' has no name", path, n, fields[1])
    end
    for i = 2, #fields do
      local name, addr = fields[i], fields[1]
      if map[name] and map[name] ~= addr then
        return nil, string.format("%s line %d: %s listed twice (%s, %s)", path, n, name, map[name], addr)
      end
      map[name] = addr
    end
  end
  return map
end

local function lookup(ctx, names)
  local text, err = ctx.host.read(HOSTS_FILE, MAX_BYTES)
  if not text then
    return nil, string.format("IMEX hosts file %s unreadable: %s", HOSTS_FILE, tostring(err))
  end
  local map, perr = parse_hosts(text, HOSTS_FILE)
  if not map then return nil, perr end
  local addrs = {}
  for i, name in ipairs(names) do
    addrs[i] = map[name]
    if not addrs[i] then
      return nil, string.format("node %s is not in the IMEX hosts file %s", name, HOSTS_FILE)
    end
  end
  return addrs
end

local P = default.extend{ lookup = lookup }
P.HOSTS_FILE = HOSTS_FILE
P.parse_hosts = parse_hosts
--- Files this policy needs in a test world (the kit's nodes n1..n4 = 10.0.0.1..4): for specs, and
-- for `imexguard check`, whose standard world holds none of the node's files.
P.check_files = { [HOSTS_FILE] = "10.0.0.1 n1\n10.0.0.2 n2\n10.0.0.3 n3\n10.0.0.4 n4\n" }
return P
