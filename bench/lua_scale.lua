-- SPDX-License-Identifier: Apache-2.0
--- bench/lua_scale.lua: how imexguard's own Lua cost grows with the size of the domain.
--
-- Usage, from the top of the tree: `lua5.4 bench/lua_scale.lua [MAX_N] [MIN_SECONDS] [PATTERN]`
-- (MAX_N: largest domain, default 576 nodes; MIN_SECONDS: CPU seconds each measurement repeats for,
-- default 0.2; PATTERN: a Lua pattern, only the functions whose name matches it are measured).
-- No systemd, no simulator, no primitive: pure functions on synthetic inputs.
--
-- The inputs follow the real outputs in tests/fixtures/ctl/: `nvidia-imex-ctl -N -j` as the daemon
-- prints it (one space of indent per level; every node lists its connection to every node, itself
-- included, so the answer grows as n^2), the text form of `-N` (legend, node lines, the n x n
-- matrix), node lists and hostlists of n nodes, an address map, and a state file whose registry
-- holds many jobs. Three domain states per n: healthy (UP), one node down (DEGRADED: its status
-- UNAVAILABLE, every connection to it DISCONNECTED) and another order (the job's node list is the
-- daemon's in another order: compare_map finds it "reordered").
--
-- Per function and n the table gives: CPU time per call (os.clock, milliseconds), the time per unit
-- of input (microseconds per node or per connection: the input a function reads) and the ratio to
-- the previous n. Doubling n doubles a node list and quadruples a ctl answer, so a function linear
-- in its input shows a ratio of about 2 (per node) or 4 (per connection) and a flat time per unit.
package.path = "lua/?.lua;" .. package.path

local ctl = require("imexguard.ctl")
local verdict = require("imexguard.verdict")
local health = require("imexguard.health")
local hostlist = require("imexguard.hostlist")
local nodelist = require("imexguard.nodelist")
local addresses = require("imexguard.addresses")
local state = require("imexguard.state")
local registry = require("imexguard.registry")
local report = require("imexguard.report")

local MAX_N = tonumber(arg[1]) or 576
local MIN_SECONDS = tonumber(arg[2]) or 0.2
local PATTERN = arg[3] or ""
local SIZES = { 18, 36, 72, 144, 288, 576 }

-- The address of node i (0-based): 10.<rack>.<i / 250>.<i % 250 + 1>, a rack of 18 nodes.
local function addr(i)
  return string.format("10.%d.%d.%d", 100 + i // 18, i // 250, i % 250 + 1)
end

-- The Slurm name of node i: gpu-rNN-nNN.
local function name(i)
  return string.format("gpu%04d", i + 1)
end

-- `nvidia-imex-ctl -N -j` of a domain whose daemons run `order` (list of addresses, id = index - 1);
-- `down`: the address of a node that is down (nil: none).
local function ctl_json(order, down)
  local n = #order
  local b = { "{\n \"nodes\": {\n" }
  for i = 0, n - 1 do
    local h = order[i + 1]
    b[#b + 1] = string.format("  \"%d\": {\n   \"status\": \"%s\",\n   \"host\": \"%s\",\n"
      .. "   \"connections\": {\n",
      i, h == down and "UNAVAILABLE" or "READY", h)
    for j = 0, n - 1 do
      local p = order[j + 1]
      local st = (h == down or p == down) and "DISCONNECTED" or "CONNECTED"
      b[#b + 1] = string.format("    \"%d\": {\n     \"host\": \"%s\",\n     \"status\": \"%s\",\n"
        .. "     \"changed\": false\n    }%s\n", j, p, st, j < n - 1 and "," or "")
    end
    b[#b + 1] = string.format("   },\n   \"changed\": false,\n   \"version\": \"570.172.08\"\n  }%s\n",
      i < n - 1 and "," or "")
  end
  b[#b + 1] = string.format(" },\n \"timestamp\": \"8/8/2025 17:38:02.641\",\n \"status\": \"%s\"\n}\n",
    down and "DEGRADED" or "UP")
  return table.concat(b)
end

-- The text form of `nvidia-imex-ctl -N` (580 legend, versions, the matrix).
local function ctl_text(order, down)
  local n = #order
  local b = { "Connectivity Table Legend:\n"
    .. "I - Invalid - Node wasn't reachable, no connection status available\n"
    .. "N - Never Connected\nR - Recovering - Connection was lost, but clean up has not yet been triggered.\n"
    .. "D - Disconnected - Connection was lost, and clean up has been triggreed.\n"
    .. "A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.\n"
    .. "!V! - Version mismatch, communication disabled.\n!M! - Node map mismatch, communication disabled.\n"
    .. "C - Connected - Ready for operation\n\n5/12/2025 06:08:10.580\nNodes:\n" }
  for i = 0, n - 1 do
    b[#b + 1] = string.format("Node #%-3d - %-15s - %-20s - Version: 570.172\n", i, order[i + 1],
      order[i + 1] == down and "UNAVAILABLE" or "READY")
  end
  local head = { "\n Nodes From\\To " }
  for j = 0, n - 1 do head[#head + 1] = string.format(" %-3d", j) end
  b[#b + 1] = table.concat(head) .. "\n"
  for i = 0, n - 1 do
    local row = { string.format("       %-8d", i) }
    for j = 0, n - 1 do
      local bad = order[i + 1] == down or order[j + 1] == down
      row[#row + 1] = bad and " D  " or " C  "
    end
    b[#b + 1] = table.concat(row) .. "\n"
  end
  b[#b + 1] = "Domain State: " .. (down and "DEGRADED" or "UP") .. "\n"
  return table.concat(b)
end

-- A state file holding `jobs` registrations of node lists of n nodes.
local function state_text(jobs, bytes)
  local st = { nodes = bytes, written_us = 1754667482641000, job = "1", running_nodes = bytes,
    running_config = "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n",
    invocation_id = string.rep("a", 32),
    started_us = 1754667482641000, jobs = {} }
  for j = 1, jobs do
    st.jobs[j] = { id = tostring(1000 + j), nodes = bytes, registered_us = 1754667482641000 + j,
      invocation_id = string.rep("b", 32) }
  end
  return state.encode(st)
end

-- A fake host for state.load and addresses.lookup: reads from a table of files.
local function fake_host(files)
  return {
    read = function(path) return files[path] end,
    resolve = function() error("no DNS in the bench") end,
    local_addresses = function() return {} end,
  }
end

-- CPU seconds per call of f, repeated for at least MIN_SECONDS.
local function time_per_call(f)
  f() -- warm up (and fail early)
  local reps, t0 = 0, os.clock()
  local t
  repeat
    f()
    reps = reps + 1
    t = os.clock() - t0
  until t >= MIN_SECONDS
  return t / reps
end

-- The inputs of one domain size: texts, lists and (through x.get) parsed domains and verdicts, made
-- for the case that needs them and dropped after it, so that no case runs beside another's heap (the
-- garbage collector's work grows with the live heap: a 576-node domain holds a million tables).
local function inputs(n)
  local addrs, names, lines = {}, {}, {}
  for i = 0, n - 1 do
    addrs[i + 1], names[i + 1] = addr(i), name(i)
    lines[i + 1] = names[i + 1] .. " " .. addrs[i + 1]
  end
  local rev = {}
  for i = 1, n do rev[i] = addrs[n + 1 - i] end
  local down = addrs[n // 2 + 1]
  local self = addrs[2]
  local x = { n = n, addrs = addrs, names = names, self = self, rev = rev,
    json_up = ctl_json(addrs), json_down = ctl_json(addrs, down), json_rev = ctl_json(rev),
    text_up = ctl_text(addrs), text_down = ctl_text(addrs, down),
    expr = hostlist.compress(names), bytes = nodelist.format(addrs),
    map_text = table.concat(lines, "\n") .. "\n", cache = {} }
  local namemap = {}
  for i = 1, n do namemap[addrs[i]] = names[i] end
  x.namemap = namemap
  -- registries: 4n jobs (several jobs per node list), the prolog's job the last
  x.jobs = 4 * n
  x.state = state_text(x.jobs, x.bytes)
  local make = {
    up = function() return assert(ctl.parse_mesh(x.json_up, 0)) end,
    down = function() return assert(ctl.parse_mesh(x.json_down, 0)) end,
    reordered = function() return assert(ctl.parse_mesh(x.json_rev, 0)) end,
    v_up = function() return verdict.judge({ mesh = x.get("up") }, { addrs = addrs, self = self }) end,
    v_down = function() return verdict.judge({ mesh = x.get("down") }, { addrs = addrs, self = self }) end,
    st = function()
      return assert(state.load(fake_host({ ["/s/state.json"] = x.state }), { state_dir = "/s" }))
    end,
  }
  function x.get(key)
    if x.cache[key] == nil then x.cache[key] = make[key]() end
    return x.cache[key]
  end
  return x
end

-- The measured functions: name, unit ("node", "conn" (n^2 connections), "job" (4n registrations),
-- "byte" (of the state file: 4n registrations of n-node lists, ~n^2)), function of the inputs.
local CASES = {
  { "ctl.parse_mesh up", "conn", function(x) return function() ctl.parse_mesh(x.json_up, 0) end end },
  { "ctl.parse_mesh down", "conn", function(x) return function() ctl.parse_mesh(x.json_down, 0) end end },
  { "ctl.parse_text up", "conn", function(x) return function() ctl.parse_text(x.text_up) end end },
  { "ctl.parse_text down", "conn", function(x) return function() ctl.parse_text(x.text_down) end end },
  { "verdict.compare_map same", "node",
    function(x)
      local d_up = x.get("up")
      return function() verdict.compare_map(d_up, x.addrs, x.self) end
    end },
  { "verdict.compare_map reordered", "node",
    function(x)
      local d_reordered = x.get("reordered")
      return function() verdict.compare_map(d_reordered, x.addrs, x.self) end
    end },
  { "verdict.map_faults up", "conn", function(x)
    local d_up = x.get("up")
    return function() verdict.map_faults(d_up) end end },
  { "verdict.judge up", "conn", function(x)
    local d_up, want = x.get("up"), { addrs = x.addrs, self = x.self }
    return function() verdict.judge({ mesh = d_up }, want) end end },
  { "verdict.judge down", "conn", function(x)
    local d_down, want = x.get("down"), { addrs = x.addrs, self = x.self }
    return function() verdict.judge({ mesh = d_down }, want) end end },
  { "verdict.judge reordered", "conn",
    function(x)
      local d_reordered, want = x.get("reordered"), { addrs = x.addrs, self = x.self }
      return function() verdict.judge({ mesh = d_reordered }, want) end
    end },
  { "verdict.judge+blame down", "conn", function(x)
    local d_down = x.get("down")
    local ctx = { host = { log = function() end }, settings = { on_peer_fault = "warn" } }
    local want = { self = x.self, names = x.namemap, addrs = x.addrs }
    return function()
      local v = verdict.judge({ mesh = d_down }, want)
      health.blame(ctx, want, v, 1.0)
    end
  end },
  { "report.status up (text)", "conn", function(x)
    local d_up, d_v_up = x.get("up"), x.get("v_up")
    return function() report.status(d_up, d_v_up, { self = x.self, names = x.namemap, node_list = "/n" }) end
  end },
  { "report.status down (json)", "conn", function(x)
    local d_down, d_v_down = x.get("down"), x.get("v_down")
    return function() report.status(d_down, d_v_down, { self = x.self, names = x.namemap, json = true }) end
  end },
  { "hostlist.expand", "node", function(x) return function() hostlist.expand(x.expr) end end },
  { "hostlist.compress", "node", function(x) return function() hostlist.compress(x.names) end end },
  { "addresses.parse_map", "node",
    function(x) return function() addresses.parse_map(x.map_text, "/m") end end },
  { "addresses.lookup map", "node", function(x)
    local h = fake_host({ ["/m"] = x.map_text })
    local s = { address_source = "map", address_map = "/m" }
    return function() addresses.lookup(h, s, x.names) end
  end },
  { "addresses.self", "node", function(x)
    local h = fake_host({})
    h.local_addresses = function() return { "192.168.0.1", x.addrs[#x.addrs] } end
    return function() addresses.self(h, nil, x.addrs) end
  end },
  { "nodelist.check", "node",
    function(x) return function() nodelist.check(x.addrs, { self = x.self }) end end },
  { "nodelist.format", "node", function(x) return function() nodelist.format(x.addrs) end end },
  { "nodelist.parse", "node", function(x) return function() nodelist.parse(x.bytes) end end },
  { "nodelist.equal", "node", function(x) return function() nodelist.equal(x.addrs, x.addrs) end end },
  { "state.load (4n jobs)", "byte", function(x)
    local h = fake_host({ ["/s/state.json"] = x.state })
    return function() state.load(h, { state_dir = "/s" }) end
  end },
  { "state.encode (4n jobs)", "byte", function(x)
    local d_st = x.get("st")
    return function() state.encode(d_st) end end },
  { "registry register+conflicting", "job", function(x)
    local d_st = x.get("st")
    return function()
      registry.register(d_st, "1", x.bytes, 1754667482641000, { invocation_id = "" })
      registry.conflicting(d_st, "1", x.bytes)
    end
  end },
  { "registry.find+unregister+register", "job", function(x)
    local d_st = x.get("st")
    local mid = tostring(1000 + x.jobs // 2)
    return function()
      local e = registry.find(d_st, mid)
      registry.unregister(d_st, mid)
      registry.register(d_st, mid, e.nodes, e.registered_us)
    end
  end },
  { "registry.ids+prune", "job", function(x)
    local d_st = x.get("st")
    return function()
      registry.ids(registry.jobs(d_st))
      registry.prune(d_st, 1754667482641000, 3600)
    end
  end },
}

local function units(x, unit)
  if unit == "conn" then return x.n * x.n end
  if unit == "job" then return x.jobs end
  if unit == "byte" then return #x.state end
  return x.n
end

local chosen = {}
for _, c in ipairs(CASES) do
  if c[1]:find(PATTERN) then chosen[#chosen + 1] = c end
end
CASES = chosen

local results = {} -- [case index] = { {n, sec, per_unit_us}... }
local sizes = {}
for _, n in ipairs(SIZES) do
  if n <= MAX_N then sizes[#sizes + 1] = n end
end
for _, n in ipairs(sizes) do
  local x = inputs(n)
  io.stderr:write(string.format("n = %d: ctl -N -j %d bytes, text %d bytes, state file %d bytes\n", n,
    #x.json_up, #x.text_up, #x.state))
  for ci, c in ipairs(CASES) do
    collectgarbage()
    local sec = time_per_call(c[3](x))
    x.cache = {}
    results[ci] = results[ci] or {}
    table.insert(results[ci], { n = n, sec = sec, per = sec * 1e6 / units(x, c[2]) })
  end
  x = nil -- luacheck: ignore
  collectgarbage()
end

print(string.format("%-34s %5s %12s %14s %7s", "function", "n", "ms/call", "us/unit", "ratio"))
for ci, c in ipairs(CASES) do
  for i, r in ipairs(results[ci]) do
    local prev = results[ci][i - 1]
    print(string.format("%-34s %5d %12.4f %10.4f/%-4s %7s", i == 1 and c[1] or "", r.n, r.sec * 1e3, r.per,
      c[2], prev and string.format("%.2f", r.sec / prev.sec) or "-"))
  end
end
print("ratio: time at n over time at the previous n; linear is 2 per node or per job, 4 per connection "
  .. "or byte.")
