-- SPDX-License-Identifier: Apache-2.0
-- Membership by slots (membership = "slots", issue 30; docs/design.md, "Membership by slots") under
-- the real systemd user manager (tests/with-systemd) with the simulator: a rack of six nodes (one
-- block of Slurm's topology), jobs over changing subsets, some at once on disjoint nodes, every
-- prolog of a job started at once (Slurm's order). Each node's daemon runs the rack's slot list,
-- resolved through the name map imexguard writes (the drop-in binds it over the unit's /etc/hosts,
-- as contrib/slots/imexguard-slots.conf does); a job switches its slots in and out and signals.
-- Checked: every prolog ok; no daemon start on a node after its first job; no CONNECTED link between
-- the nodes of two jobs that run at once; every epilog leaves the node's other slots refusing (the
-- map's lines and the ctl); switching the rack between the two modes with a job running loses
-- nothing (its daemons keep running, its links stay up), both ways.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")
local hostlist = require("imexguard.hostlist")

local SUFFIX = ".imexguard.invalid"

describe("membership by slots under systemd (a rack of six)", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  -- A node's imexguard.conf with `membership` set (and slot_hosts: the map in the node's directory).
  local function set_mode(name, mode)
    local path = d:config(name)
    local text = simdomain.read_file(path):gsub("\nmembership = [^\n]*", ""):gsub("\nslot_hosts = [^\n]*", "")
    text = text .. string.format("membership = %q\nslot_hosts = %q\n", mode, d:dir(name) .. "/hosts")
    simdomain.write_file(path, text)
  end

  -- A rack of six (Slurm's block rack1 = n[1-6]); every unit has the drop-in (inert while the map does
  -- not exist), the nodes' settings say `mode`. Nothing started: the first prolog starts each daemon.
  local function rack(mode)
    d = simdomain.new { racks = { 6 }, extra_cfg = simdomain.FAST_RECONNECT }
    for _, name in ipairs(d.names) do
      set_mode(name, mode)
      assert(d:unit_options(name, { Service = {
        BindReadOnlyPaths = "-" .. d:dir(name) .. "/hosts:/etc/hosts", InaccessiblePaths = "-/run/nscd" } }))
    end
    assert(d:each_unit("enable")) -- installed and enabled, not running: the first prolog starts it
  end

  local function slot(name) return name .. SUFFIX end

  -- Run `command` of every job of `round` ({{id, hostlist}...}) on each of its nodes, all at once (as
  -- Slurm starts a job's prologs, and jobs on disjoint nodes start independently); each must end
  -- `outcome` (ok). Returns {[id] = {[node] = {status, output, outcome}}}.
  local function run(command, round, outcome)
    local procs = {}
    for _, job in ipairs(round) do
      for _, name in ipairs(assert(hostlist.expand(job[2]))) do
        local env = simdomain.prolog_env(job[1], job[2], name, #hostlist.expand(job[2]))
        env.SLURM_CONF = d.slurm_conf
        local assign = {}
        for k, v in pairs(env) do assign[#assign + 1] = k .. "='" .. v .. "'" end
        table.sort(assign)
        local out = string.format("%s/%s-%s.out", d:dir(name), command, job[1])
        local cmd = string.format("env -i %s %s/imexguard --config %s %s >%s 2>&1; echo $?",
          table.concat(assign, " "), d.build, d:config(name), command, out)
        procs[#procs + 1] = { job = job[1], name = name, out = out, pipe = assert(io.popen(cmd, "r")) }
      end
    end
    local results = {}
    for _, p in ipairs(procs) do
      local status = tonumber(p.pipe:read("a"):match("%d+"))
      p.pipe:close()
      local text = simdomain.read_file(p.out) or ""
      results[p.job] = results[p.job] or {}
      results[p.job][p.name] = { status = status, output = text, outcome = text:match("outcome=([%w%-]+)") }
    end
    for _, p in ipairs(procs) do
      local r = results[p.job][p.name]
      assert.are.equal(outcome or "ok", r.outcome, command .. " of job " .. p.job .. " on " .. p.name .. ":\n"
        .. r.output)
    end
    return results
  end

  -- The slots in force in node `name`'s map (its lines without '#').
  local function in_force(name)
    local out = {}
    for line in (simdomain.read_file(d:dir(name) .. "/hosts") or ""):gmatch("[^\n]+") do
      local addr, s = line:match("^ (%S+) (%S+)$")
      if addr and addr ~= "127.0.0.2" then out[#out + 1] = s end
    end
    table.sort(out)
    return out
  end

  -- Node `name`'s own links to the slots of `others` that its ctl shows CONNECTED.
  local function connected_to(name, others)
    local t = assert(d:ctl_json(name))
    local me
    for _, n in pairs(t.nodes) do
      if n.host == slot(name) then me = n end
    end
    assert(me, "the ctl of " .. name .. " does not show its own slot")
    local by_id, out = {}, {}
    for id, n in pairs(t.nodes) do by_id[id] = n.host end
    for id, status in pairs(me.connections) do
      for _, o in ipairs(others) do
        if by_id[id] == slot(o) and status == "CONNECTED" then out[#out + 1] = o end
      end
    end
    return out
  end

  local function assert_isolated(a, b)
    for _, x in ipairs(a) do
      assert.are.same({}, connected_to(x, b), x .. " is CONNECTED to another job's node")
    end
    for _, y in ipairs(b) do
      assert.are.same({}, connected_to(y, a), y .. " is CONNECTED to another job's node")
    end
  end

  it("jobs over changing subsets, some at once: every prolog ok, one daemon start per node, no link "
    .. "between concurrent jobs, every epilog leaves the other slots refusing", function()
    rack("slots")
    local seq = {
      { { 101, "n[1-3]" }, { 102, "n[4-6]" } },
      { { 103, "n[1-2]" }, { 104, "n[3-4]" }, { 105, "n[5-6]" } },
      { { 106, "n[1,4,6]" }, { 107, "n[2-3,5]" } },
      { { 108, "n[1-6]" } },
    }
    for _, round in ipairs(seq) do
      local r = run("prolog", round)
      for _, job in ipairs(round) do
        for _, name in ipairs(hostlist.expand(job[2])) do
          assert.matches("the job's %d+ nodes READY and connected to each other", r[job[1]][name].output)
        end
      end
      for i, a in ipairs(round) do
        for j, b in ipairs(round) do
          if i < j then assert_isolated(hostlist.expand(a[2]), hostlist.expand(b[2])) end
        end
      end
      run("epilog", round)
      for _, job in ipairs(round) do
        for _, name in ipairs(hostlist.expand(job[2])) do
          assert.are.same({ slot(name) }, in_force(name))
          local others = {}
          for _, o in ipairs(d.names) do if o ~= name then others[#others + 1] = o end end
          assert.are.same({}, connected_to(name, others))
        end
      end
    end
    for _, name in ipairs(d.names) do assert.are.equal(1, d:starts(name), name .. " started more than once") end
  end)
end)
