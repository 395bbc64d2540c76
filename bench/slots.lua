-- SPDX-License-Identifier: Apache-2.0
--- bench/slots.lua: scenario g of `make bench` (bench/README.md): membership by slots against the
-- per-job list (docs/design.md, "Membership by slots") on the same job sequence, in one run. A rack
-- of six simulated nodes (one block of Slurm's topology), 22 jobs over changing subsets, three
-- rounds with two disjoint jobs at once; every prolog of a round starts at once (Slurm's order),
-- then every epilog of the round at once. Per mode, from a cold rack: daemon starts (the
-- simulator's log), each prolog's wall, each job's time until ready (from the round's start until a
-- watcher sees every node of the job READY and CONNECTED to every other, in its first node's ctl),
-- each epilog's wall, and the outcomes.
-- Test infrastructure style: plain Lua 5.4 with io/os, called by bench/bench.lua with its helpers.
local M = {}

--- The job sequence: rounds of {job id offset, hostlist}; the jobs of a round run at once on
-- disjoint nodes. 22 jobs.
M.SEQUENCE = {
  { { 1, "n[1-3]" }, { 2, "n[4-6]" } },
  { { 3, "n[1-6]" } },
  { { 4, "n[1-2]" }, { 5, "n[3-6]" } },
  { { 6, "n[2-5]" } },
  { { 7, "n[1,3,5]" }, { 8, "n[2,4,6]" } },
  { { 9, "n[1-4]" } }, { { 10, "n[3-6]" } }, { { 11, "n[1-2]" } }, { { 12, "n[1-6]" } },
  { { 13, "n[2-3]" } }, { { 14, "n[4-6]" } }, { { 15, "n[1,6]" } }, { { 16, "n[1-5]" } },
  { { 17, "n[2-6]" } }, { { 18, "n[1-3]" } }, { { 19, "n[4-5]" } }, { { 20, "n[1-6]" } },
  { { 21, "n[3-4]" } }, { { 22, "n[1-2,5-6]" } },
}

--- The nodes of one of the sequence's hostlists ("n[1-3]", "n[1,3,5]", "n[1-2,5-6]").
function M.expand(expr)
  local out = {}
  for part in assert(expr:match("^n%[(.*)%]$"), expr):gmatch("[^,]+") do
    local a, b = part:match("^(%d+)%-(%d+)$")
    for i = tonumber(a or part), tonumber(b or part) do out[#out + 1] = "n" .. i end
  end
  return out
end

-- A node's settings file with `membership` (and the map in its directory) set.
local function set_mode(h, d, name, mode)
  local path = d:config(name)
  local text = h.simdomain.read_file(path):gsub("\nmembership = [^\n]*", ""):gsub("\nslot_hosts = [^\n]*", "")
  h.simdomain.write_file(path, text .. string.format("membership = %q\nslot_hosts = %q\n", mode,
    d:dir(name) .. "/hosts"))
end

-- Is every node of `names` READY and CONNECTED to every other in the ctl of names[1]? Hosts are
-- addresses (list) or slot names (slots): both are looked for.
local function ready(d, names)
  local v = d:ctl_json(names[1])
  if not v or type(v.nodes) ~= "table" then return false end
  local want, row_of, id_of = {}, {}, {}
  for _, n in ipairs(names) do
    want[d.addr[n]], want[n .. ".imexguard.invalid"] = n, n
  end
  for id, node in pairs(v.nodes) do
    local n = want[node.host]
    if n then row_of[n], id_of[n] = node, id end
  end
  for _, a in ipairs(names) do
    local row = row_of[a]
    if not row or row.status ~= "READY" then return false end
    for _, b in ipairs(names) do
      local c = row.connections and id_of[b] and row.connections[id_of[b]]
      if a ~= b and (not c or c.status ~= "CONNECTED") then return false end
    end
  end
  return true
end

-- Start `command` of every job of `round` on its nodes at once; returns the procs.
local function start(h, d, round, base, command)
  local procs = {}
  for _, job in ipairs(round) do
    local names = M.expand(job[2])
    for _, name in ipairs(names) do
      local p = { name = name, job = base + job[1], nodelist = job[2], names = names }
      p.out = string.format("%s/bench-slots-%s-%d.out", d:dir(name), command, p.job)
      p.handle = h.spawn(h.command(d, name, p.job, job[2], #names, p.out, command))
      procs[#procs + 1] = p
    end
  end
  return procs
end

-- Collect the procs (wall, outcome); failures counted.
local function collect(h, procs, into, outcomes)
  for _, p in ipairs(procs) do
    local r = h.collect(p.handle)
    into[#into + 1] = r.took
    local text = h.simdomain.read_file(p.out) or ""
    local o = text:match("outcome=([%w%-]+)") or ("exit " .. tostring(r.status))
    outcomes[o] = (outcomes[o] or 0) + 1
    if o ~= "ok" then
      h.say("  g) %s of job %d on %s: %s", p.out:match("bench%-slots%-(%a+)"), p.job, p.name, text)
    end
  end
end

-- One mode on a cold rack: the whole sequence. Returns {starts, prolog = {s...}, ready = {s...},
-- epilog = {s...}, outcomes = {[outcome] = count}, jobs = n}.
local function one_mode(h, mode, net, base)
  local d = h.new_domain(nil, net, nil, { 6 })
  for _, name in ipairs(d.names) do
    set_mode(h, d, name, mode)
    assert(d:unit_options(name, { Service = { BindReadOnlyPaths = "-" .. d:dir(name) .. "/hosts:/etc/hosts",
      InaccessiblePaths = "-/run/nscd" } }))
  end
  h.units(d, "enable")
  local r = { prolog = {}, ready = {}, epilog = {}, outcomes = {}, jobs = 0 }
  for _, round in ipairs(M.SEQUENCE) do
    local t0 = h.now()
    local procs = start(h, d, round, base, "prolog")
    local pending = {}
    for _, job in ipairs(round) do pending[#pending + 1] = M.expand(job[2]) end
    while #pending > 0 and h.now() - t0 < 120 do
      for i = #pending, 1, -1 do
        if ready(d, pending[i]) then
          r.ready[#r.ready + 1] = h.now() - t0
          table.remove(pending, i)
        end
      end
      h.sleep(0.02)
    end
    collect(h, procs, r.prolog, r.outcomes)
    r.jobs = r.jobs + #round
    collect(h, start(h, d, round, base, "epilog"), r.epilog, r.outcomes)
  end
  r.starts = 0
  for _, name in ipairs(d.names) do r.starts = r.starts + d:starts(name) end
  h.drop_domain(d)
  return r
end

--- Run scenario g: both modes, list first, each on a cold rack of its own addresses.
-- @param h table bench.lua's helpers: new_domain, drop_domain, units, spawn, collect, command(d,
--   name, job, nodelist, nnodes, out, command), now, sleep, say, simdomain
-- @param net integer the third octet of the racks' addresses (one per mode: net, net + 1)
-- @return {list = one_mode's, slots = one_mode's}
function M.run(h, net)
  return { list = one_mode(h, "list", net, 900), slots = one_mode(h, "slots", net + 1, 950) }
end

return M
