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
  local function run(command, round, outcome, stagger)
    local procs = {}
    for _, job in ipairs(round) do
      for k, name in ipairs(assert(hostlist.expand(job[2]))) do
        local env = simdomain.prolog_env(job[1], job[2], name, #hostlist.expand(job[2]))
        env.SLURM_CONF = d.slurm_conf
        local assign = {}
        for key, v in pairs(env) do assign[#assign + 1] = key .. "='" .. v .. "'" end
        table.sort(assign)
        local out = string.format("%s/%s-%s.out", d:dir(name), command, job[1])
        -- stagger: the prologs of a job a second apart (the order Slurm may give them)
        local cmd = string.format("sleep %d; env -i %s %s/imexguard --config %s %s >%s 2>&1; echo $?",
          stagger and (k - 1) or 0, table.concat(assign, " "), d.build, d:config(name), command, out)
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

  -- `imexguard status` of node `name`: its output and exit status.
  local function status(name)
    local p = assert(io.popen(string.format("%s/imexguard --config %s status 2>&1; echo rc=$?", d.build,
      d:config(name))))
    local out = p:read("a")
    p:close()
    return out, tonumber(out:match("rc=(%d+)\n$"))
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
    for id, c in pairs(me.connections) do
      for _, o in ipairs(others) do
        if by_id[id] == slot(o) and c.status == "CONNECTED" then out[#out + 1] = o end
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

  -- The status of node `from`'s link to node `to` in from's ctl, whatever the list (addresses or slots).
  local function link(from, to)
    local t = assert(d:ctl_json(from))
    local hosts = { [d.addr[from]] = "from", [slot(from)] = "from", [d.addr[to]] = "to", [slot(to)] = "to" }
    local me, id
    for k, n in pairs(t.nodes) do
      if hosts[n.host] == "from" then me = n elseif hosts[n.host] == "to" then id = k end
    end
    return me and id and me.connections[id] and me.connections[id].status
  end

  it("switching the rack between the modes is one setting and loses nothing: a running job keeps its "
    .. "daemons and links; each node restarts once, at its first job in the new mode", function()
    rack("list")
    run("prolog", { { 201, "n[1-2]" } })
    assert.are.equal("CONNECTED", link("n1", "n2"))
    for _, name in ipairs(d.names) do set_mode(name, "slots") end -- the switch
    run("prolog", { { 202, "n[3-6]" } })
    assert.are.equal(1, d:starts("n1"))
    assert.are.equal(1, d:starts("n2"))
    assert.are.equal("CONNECTED", link("n1", "n2")) -- job 201 lost nothing
    assert.are.equal("CONNECTED", link("n2", "n1"))
    run("epilog", { { 201, "n[1-2]" } })
    run("prolog", { { 203, "n[1-2]" } }) -- their first job in slots mode: one restart each
    assert.are.equal(2, d:starts("n1"))
    assert.are.equal(2, d:starts("n2"))
    assert_isolated({ "n1", "n2" }, { "n3", "n4", "n5", "n6" })
    for _, name in ipairs(d.names) do set_mode(name, "list") end -- and back, job 202 running
    run("epilog", { { 203, "n[1-2]" } }) -- the slot list still runs: its slots out of the map
    assert.are.same({ slot("n1") }, in_force("n1"))
    run("prolog", { { 204, "n[1-2]" } })
    assert.are.equal(3, d:starts("n1"))
    for _, name in ipairs({ "n3", "n4", "n5", "n6" }) do
      assert.are.equal(1, d:starts(name), name .. " restarted under job 202")
      for _, other in ipairs({ "n3", "n4", "n5", "n6" }) do
        if other ~= name then assert.are.equal("CONNECTED", link(name, other), name .. " -> " .. other) end
      end
    end
    run("epilog", { { 202, "n[3-6]" }, { 204, "n[1-2]" } })
    assert.are.same({ slot("n3") }, in_force("n3"))
  end)

  it("jobs over changing subsets, some at once: every prolog ok, one daemon start per node, no link "
    .. "between concurrent jobs, every epilog leaves the other slots refusing", function()
    rack("slots")
    local seq = {
      { { 101, "n[1-3]" }, { 102, "n[4-6]" } },
      { { 103, "n[1-2]" }, { 104, "n[3-4]" }, { 105, "n[5-6]" } },
      { { 106, "n[1,4,6]" }, { 107, "n[2-3,5]" } },
      { { 108, "n[1-6]" } },
    }
    for i, round in ipairs(seq) do
      local r = run("prolog", round, "ok", i == 3) -- round 3: each job's prologs a second apart
      for _, job in ipairs(round) do
        for _, name in ipairs(hostlist.expand(job[2])) do
          assert.matches("the job's %d+ nodes READY and connected to each other", r[job[1]][name].output)
        end
      end
      for ia, a in ipairs(round) do
        for ib, b in ipairs(round) do
          if ia < ib then assert_isolated(hostlist.expand(a[2]), hostlist.expand(b[2])) end
        end
      end
      -- status judges the registered job on its own nodes (the domain is DEGRADED by design)
      local first = hostlist.expand(round[1][2])[1]
      local out, code = status(first)
      assert.are.equal(0, code, out)
      assert.matches("membership by slots: job " .. round[1][1] .. " ready", out)
      assert.matches("membership +slots: name map", out)
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
    for _, name in ipairs(d.names) do
      assert.are.equal(1, d:starts(name), name .. " started more than once")
    end
  end)
end)
