-- SPDX-License-Identifier: Apache-2.0
-- imexguard and nodes Slurm 26.05 places in blocks at run time (C46), under the real controller:
-- topology.conf places b1 = n[1-2], b2 = n3 only, and lists b3 without nodes (Slurm keeps such a
-- block for nodes placed at run time); n4 joins b2 with `scontrol update NodeName=n4
-- Topology=default:b2`, a dynamic node n5 with `slurmd -Z --conf "CPUs=1 Topology=default:b2"`. The
-- prolog (domain_map = "auto", slurmctld_topology = "auto") reads topology.conf, finds a node of the
-- job unplaced, asks slurmctld once (`scontrol show topology`), and every node of the job writes the
-- same list. A node no source places ends not-placed (exit 24): never a job without IMEX on a tray.
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

describe("Slurm 26.05: trays placed in blocks at run time (C46)", function()
  local d, restore

  -- Stop the dynamic node's slurmd by PID and delete the node (it outlives a reconfigure).
  local function drop_n5()
    local pid = (simdomain.read_file(cluster.root .. "/run/slurmd-n5.pid") or ""):match("%d+")
    if pid then
      os.execute("kill " .. pid)
      simdomain.wait_until(function() return os.execute("kill -0 " .. pid .. " 2>/dev/null") ~= true end, 10,
        0.1)
    end
    if select(2, cluster.sh("scontrol show node n5")):match("^NodeName=n5 ") then
      cluster.sh("scontrol update PartitionName=p Nodes=n[1-4]")
      cluster.sh("scontrol delete NodeName=n5")
    end
  end

  setup(function()
    local ok, err
    restore, ok, err = cluster.reconfigure {
      ["topology.conf"] = "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n3\nBlockName=b3\n",
    }
    assert(ok, err)
    d = cluster.domain({ "health_timeout = 8", 'domain_map = "auto"' }, 5)
    for _, n in ipairs(d.names) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    drop_n5()
    -- the drained n4 back first: a reconfigure waits for four idle nodes
    local idle = cluster.reset()
    if d then d:stop() end
    if restore then assert(restore()) end
    assert.is_true(idle and cluster.reset(), "the cluster is idle again")
  end)

  it("n4 placed with scontrol update: n3 and n4 write b2's list, each asking slurmctld once", function()
    local ok, out = cluster.sh("scontrol update NodeName=n4 Topology=default:b2")
    assert(ok, out)
    local seen = { n3 = #cluster.log_of("n3"), n4 = #cluster.log_of("n4") }
    local id = cluster.sbatch("-N2 -w n[3-4]", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id) .. cluster.log_of("n4"))
    for _, n in ipairs { "n3", "n4" } do
      assert.are.same({ "ok" }, cluster.outcomes(n, id), cluster.log_of(n))
      assert.are.same({ "n3", "n4" }, cluster.list_of(d, n))
      local log = cluster.log_of(n):sub(seen[n] + 1) -- this job's prolog and epilog
      local _, asks = log:gsub("asked slurmctld for topology default %(scontrol show topology, %d+ ms%): "
        .. "[^\n]*places no unit for n4", "")
      assert.are.equal(1, asks, log)
      assert.matches("IMEX domain of node " .. n .. ": b2 from slurmctld", log, 1, true)
    end
  end)

  it("a dynamic node (slurmd -Z --conf Topology=default:b2): n4 and n5 write one list", function()
    local ok, out = cluster.sh(cluster.in_root .. "slurmd -f " .. simdomain.quote(os.getenv("SLURM_CONF"))
      .. " -Z --conf 'CPUs=1 Topology=default:b2' -N n5")
    assert(ok, out)
    assert.truthy(simdomain.wait_until(function()
      return select(2, cluster.sh("scontrol show node n5")):find(" State=IDLE+DYNAMIC_NORM ", 1, true)
    end, 30, 0.2), "n5 registered")
    ok, out = cluster.sh("scontrol update PartitionName=p Nodes=n[1-5]")
    assert(ok, out)
    local id = cluster.sbatch("-N2 -w n[4-5]", "true")
    local state = cluster.wait_job(id)
    local logs = cluster.log_of("n4") .. cluster.log_of("n5")
    assert.are.equal("COMPLETED", state, cluster.job_output(id) .. logs)
    for _, n in ipairs { "n4", "n5" } do
      assert.are.same({ "ok" }, cluster.outcomes(n, id), cluster.log_of(n))
      assert.are.same({ "n4", "n5" }, cluster.list_of(d, n))
    end
    local j = d:ctl_json("n5")
    assert.are.equal("UP", j and j.status)
    drop_n5()
  end)

  it("a block the file lists without nodes: slurmctld shows it, a tray placed there is in it", function()
    local ok, out = cluster.sh("scontrol update NodeName=n4 Topology=default:b3")
    assert(ok, out)
    out = cluster.run("scontrol show topology")
    assert.are.equal(cluster.fixture("show-topology-26.05-empty-block.txt", out), out)
    local id = cluster.sbatch("-N1 -w n4", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id) .. cluster.log_of("n4"))
    assert.are.same({ "ok" }, cluster.outcomes("n4", id), cluster.log_of("n4"))
    assert.matches("IMEX domain of node n4: b3 from slurmctld", cluster.log_of("n4"), 1, true)
    assert.are.same({ "n4" }, cluster.list_of(d, "n4"))
  end)

  it("a node in no block gets no job (topology/block); a tray the files miss, slurmctld not asked: "
    .. "not-placed (24) there, drained; the peer that asked slurmctld blames it", function()
    -- out of every block: Slurm places no job there at all
    local ok, out = cluster.sh("scontrol update NodeName=n4 Topology=")
    assert(ok, out)
    local _, err, status = cluster.run("sbatch --parsable -N2 -w n[3-4] -o /dev/null --wrap true")
    assert.are.equal(1, status)
    assert.matches("Requested node configuration is not available", err, 1, true)
    -- in b2 for Slurm, but imexguard may read only the files on n4
    ok, out = cluster.sh("scontrol update NodeName=n4 Topology=default:b2")
    assert(ok, out)
    local conf = cluster.simroot .. "/n4/imexguard.conf"
    local text = simdomain.read_file(conf)
    simdomain.write_file(conf, text .. 'slurmctld_topology = "off"\n')
    local before = d:nodes_file("n4")
    local id = cluster.sbatch("-N2 -w n[3-4]", "true")
    cluster.wait_job(id)
    local done = simdomain.wait_until(function() return cluster.outcomes("n4", id)[1] end, 30, 0.2)
    simdomain.write_file(conf, text)
    assert.truthy(done, cluster.log_of("n4"))
    assert.are.same({ "not-placed" }, cluster.outcomes("n4", id), cluster.log_of("n4"))
    assert.matches("prolog job=" .. id
      .. " outcome=not%-placed: node n4 runs IMEX %([^\n]*%) but is in no IMEX "
      .. "domain of [^\n]*topology.conf; slurmctld not asked %(slurmctld_topology = \"off\"%)",
        cluster.log_of("n4"))
    assert.are.equal(before, d:nodes_file("n4"))
    -- n3 asked slurmctld: n4 is in b2 for it, so n3 waits for n4 (which drains): peers-unhealthy, exit 0
    assert.are.same({ "peers-unhealthy" }, cluster.outcomes("n3", id), cluster.log_of("n3"))
    assert.are.same({ "n3", "n4" }, cluster.list_of(d, "n3"))
    -- Slurm drains the node whose prolog failed
    assert.truthy(simdomain.wait_until(function() return cluster.node_state("n4"):match("drain") end, 30,
      0.2))
  end)
end)
