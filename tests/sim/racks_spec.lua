-- SPDX-License-Identifier: Apache-2.0
-- NVLink racks (IMEX domains, field cases C29 and C30 of docs/design.md): simulated racks of their
-- own address ranges (127.<rack>.<net>.x) under a real systemd user manager (tests/with-systemd;
-- contrib/simdomain.lua with `racks`), Slurm's block topology in a topology.conf beside the
-- slurm.conf that SLURM_CONF names. A job over two racks gets one node list per rack; a sick node of
-- one rack never holds up the other; a node of the job in no rack is left out; the static policy
-- verifies each rack on its own. Every wait polls with a deadline; every unit is stopped in after_each.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")
local system = require("system")

-- The node list bytes of these nodes (their addresses, one a line).
local function bytes(d, names)
  local t = {}
  for _, n in ipairs(names) do t[#t + 1] = d.addr[n] end
  return table.concat(t, "\n") .. "\n"
end

-- The hosts of a node's `ctl -N -j`, in ID order.
local function ctl_hosts(d, name)
  local t = d:ctl_json(name)
  local out = {}
  for id = 0, 255 do
    local node = t and t.nodes and t.nodes[tostring(id)]
    if not node then break end
    out[#out + 1] = node.host
  end
  return out, t and t.status
end

-- A domain of racks whose daemons each run a one-node list (nothing of a job yet), started.
local function racks(sizes, settings)
  local d = simdomain.new { racks = sizes, extra_cfg = simdomain.FAST_RECONNECT, settings = settings }
  for _, n in ipairs(d.names) do d:write_node_list(n, { n }) end
  assert(d:start())
  return d
end

describe("simulated NVLink racks: one IMEX domain per rack", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  it("the racks have address ranges of their own and a topology.conf", function()
    d = simdomain.new { racks = { 2, 3 } }
    assert.same({ { "n1", "n2" }, { "n3", "n4", "n5" } }, d.racks)
    assert.matches("^127%.1%.%d+%.1$", d.addr.n1)
    assert.matches("^127%.2%.%d+%.3$", d.addr.n5)
    local topo = simdomain.read_file(d.root .. "/topology.conf")
    assert.matches("BlockName=rack1 Nodes=n[1-2]\nBlockName=rack2 Nodes=n[3-5]\n", topo, 1, true)
  end)

  it("a job over two racks: one list per rack, in the job's order, each rack UP on its own", function()
    d = racks({ 3, 3 })
    local job = { "n5", "n2", "n3", "n4" }
    local res = d:prologs { job = 1, nodelist = "n5,n[2-4]", names = job }
    local want = { rack1 = { "n2", "n3" }, rack2 = { "n5", "n4" } }
    for _, n in ipairs(job) do
      local r = res[n]
      assert.are.equal(0, r.status, n .. ": " .. r.output)
      assert.are.equal("ok", r.outcome, r.output)
      local list = want["rack" .. d.rack[n]]
      assert.are.equal(bytes(d, list), d:nodes_file(n))
      assert.matches("IMEX domain of node " .. n .. ": rack" .. d.rack[n] .. " from " .. d.root
        .. "/topology.conf", r.output, 1, true)
      local hosts, status = ctl_hosts(d, n)
      assert.are.equal("UP", status)
      assert.same({ d.addr[list[1]], d.addr[list[2]] }, hosts)
    end
    -- n1 and n6 are in no job: their daemons were left alone
    assert.are.equal(bytes(d, { "n1" }), d:nodes_file("n1"))
    assert.are.equal(bytes(d, { "n6" }), d:nodes_file("n6"))
  end)

  it("a sick node in rack 2 never makes rack 1 wait; rack 2 blames it", function()
    d = racks({ 2, 2 }, { "health_timeout = 3" })
    assert(d:systemctl("stop", d:unit("n4")))
    local t0 = system.monotime()
    local res = d:prologs { job = 2, nodelist = "n[1-4]", names = { "n1", "n2" } }
    local took = system.monotime() - t0
    for _, n in ipairs({ "n1", "n2" }) do
      assert.are.equal("ok", res[n].outcome, res[n].output)
      assert.are.equal(bytes(d, { "n1", "n2" }), d:nodes_file(n))
      assert.not_matches(d.addr.n4:gsub("%.", "%%."), res[n].output)
    end
    assert.is_true(took < 3, string.format("rack 1 took %.1f s, the health timeout is 3 s", took))
    res = d:prologs { job = 2, nodelist = "n[1-4]", names = { "n3" } }
    assert.are.equal("peers-unhealthy", res.n3.outcome, res.n3.output)
    assert.matches("n4", res.n3.output)
    assert.not_matches("%(n[12]%)", res.n3.output)
  end)

  it("a node of the job in no rack (a CPU node) is left out and never waited for", function()
    d = racks({ 2 }, { "health_timeout = 3" })
    local t0 = system.monotime()
    -- cpu7 is in no block and not in the address map: before domains, bad input on every node
    local res = d:prologs { job = 3, nodelist = "n[1-2],cpu7", names = { "n1", "n2" } }
    local took = system.monotime() - t0
    for _, n in ipairs({ "n1", "n2" }) do
      assert.are.equal("ok", res[n].outcome, res[n].output)
      assert.are.equal(bytes(d, { "n1", "n2" }), d:nodes_file(n))
      assert.matches("left out (in no IMEX domain, not waited for): cpu7", res[n].output, 1, true)
    end
    assert.is_true(took < 3, string.format("took %.1f s", took))
  end)

  it("the static policy over two racks: each rack's static list verified for its own nodes", function()
    d = simdomain.new { racks = { 2, 2 }, extra_cfg = simdomain.FAST_RECONNECT }
    for _, rack in ipairs(d.racks) do
      for _, n in ipairs(rack) do d:write_node_list(n, rack) end
    end
    assert(d:start())
    local before = {}
    for _, n in ipairs(d.names) do
      assert(simdomain.wait_until(function() return select(2, ctl_hosts(d, n)) == "UP" end, 10), n .. " UP")
      before[n] = d:invocation(n)
    end
    local policy = simdomain.quote(os.getenv("PWD") .. "/policies/static_domain.lua")
    local res = d:prologs { job = 4, nodelist = "n[1-4]", args = "--policy " .. policy }
    for _, n in ipairs(d.names) do
      assert.are.equal("ok", res[n].outcome, res[n].output)
      assert.matches("job's 2 nodes are healthy", res[n].output, 1, true)
      assert.are.equal(before[n], d:invocation(n), n .. " not restarted")
      assert.are.equal(bytes(d, d.racks[d.rack[n]]), d:nodes_file(n))
    end
    -- the static list itself as the domain map (no topology read): the same verdicts
    res = d:prologs { job = 5, nodelist = "n[1-4]",
      args = "--policy " .. policy .. " --set domain_map=static" }
    for _, n in ipairs(d.names) do
      assert.are.equal("ok", res[n].outcome, res[n].output)
      assert.matches("IMEX domain of node " .. n .. ": the static node list", res[n].output, 1, true)
      assert.are.equal(before[n], d:invocation(n), n .. " not restarted")
    end
  end)
end)

describe("simulated NVLink racks: a tray placed at run time (C46, slurmctld's topology)", function()
  local d, demo

  -- The demo's stand-in for slurmctld (contrib/demo/scontrol): its state directory knows the
  -- cluster's nodes and the racks' topology.conf; `scontrol update NodeName=X Topology=default:B`
  -- places a node at run time as Slurm 25.11+ does.
  local function scontrol_setting(dir)
    return string.format("scontrol = { \"/usr/bin/env\", %q, %q }", "IMEXGUARD_DEMO_DIR=" .. dir,
      os.getenv("PWD") .. "/contrib/demo/scontrol")
  end

  local function scontrol(args)
    local ok = os.execute("IMEXGUARD_DEMO_DIR=" .. simdomain.quote(demo) .. " contrib/demo/scontrol " .. args)
    return ok == true
  end

  before_each(function()
    demo = os.tmpname()
    os.remove(demo)
    assert(os.execute("mkdir -p " .. simdomain.quote(demo .. "/slurm")))
  end)

  after_each(function()
    if d then d:destroy() end
    d = nil
    os.execute("rm -rf " .. simdomain.quote(demo))
  end)

  -- Racks {2, 3} whose topology.conf leaves n5 out (a tray that joins rack 2 at run time), started.
  local function elastic()
    d = racks({ 2, 3 }, { scontrol_setting(demo) })
    simdomain.write_file(d.root .. "/topology.conf",
      "BlockName=rack1 Nodes=n[1-2]\nBlockName=rack2 Nodes=n[3-4]\n")
    simdomain.write_file(demo .. "/env", "DEMO_NODES='n1 n2 n3 n4 n5'\nDEMO_TOPOLOGY_CONF='" .. d.root
      .. "/topology.conf'\n")
    return d
  end

  it("placed with scontrol update: every prolog of the job at once writes rack 2 with n5", function()
    elastic()
    assert.is_true(scontrol("update NodeName=n5 Topology=default:rack2"))
    local job = { "n3", "n4", "n5" }
    local res = d:prologs { job = 46, nodelist = "n[3-5]", names = job }
    for _, n in ipairs(job) do
      assert.are.equal("ok", res[n].outcome, res[n].output)
      assert.are.equal(bytes(d, job), d:nodes_file(n))
      assert.matches("asked slurmctld for topology default (scontrol show topology, ", res[n].output, 1, true)
      assert.matches("IMEX domain of node " .. n .. ": rack2 from slurmctld", res[n].output, 1, true)
      local hosts, status = ctl_hosts(d, n)
      assert.are.equal("UP", status)
      assert.same({ d.addr.n3, d.addr.n4, d.addr.n5 }, hosts)
    end
  end)

  it("not placed anywhere: n5 ends not-placed (24), nothing changed there; n3 and n4 run rack 2", function()
    elastic()
    local job = { "n3", "n4", "n5" }
    local res = d:prologs { job = 47, nodelist = "n[3-5]", names = job }
    assert.are.equal("not-placed", res.n5.outcome, res.n5.output)
    assert.are.equal(24, res.n5.status)
    assert.matches("node n5 runs IMEX (" .. d:unit("n5") .. " is active) but is in no IMEX domain",
      res.n5.output,
      1, true)
    assert.are.equal(bytes(d, { "n5" }), d:nodes_file("n5"))
    for _, n in ipairs { "n3", "n4" } do
      assert.are.equal("ok", res[n].outcome, res[n].output)
      assert.are.equal(bytes(d, { "n3", "n4" }), d:nodes_file(n))
      assert.matches("left out (in no IMEX domain, not waited for): n5", res[n].output, 1, true)
    end
  end)
end)
