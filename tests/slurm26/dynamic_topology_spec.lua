-- SPDX-License-Identifier: Apache-2.0
-- Slurm 26.05's dynamic topology under topology/block (tests/slurm26/run: topology.conf with blocks
-- b1 = n[1-2], b2 = n[3-4]; the topology of topology.conf is named "default"): a node placed at run
-- time with `scontrol update NodeName=X Topology=default:b2`, or registering with
-- `slurmd -Z --conf "... Topology=default:b2"` (a dynamic node; a CLOUD node without -Z), is in no
-- file; slurmctld reports it in `scontrol show topology` and in `scontrol show node`'s Topology=
-- field, which only such a node has (C46). The outputs are kept verbatim as fixtures
-- (tests/fixtures/slurm/show-*-26.05-*.txt) for the fake scontrol and the parsers;
-- IMEXGUARD_UPDATE_FIXTURES=1 writes them from this run. The file's own topology as both releases
-- print it: tests/slurm24/topology_spec.lua.
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

-- The field names of `scontrol show node` output (volatile values left aside), in order.
local function fields(text)
  local t = {}
  for k in text:gmatch("([%w_]+)=") do t[#t + 1] = k end
  return t
end

describe("Slurm 26.05 dynamic topology (topology/block)", function()
  local function topology(args)
    local out, err, status = cluster.run("scontrol show topology" .. (args and " " .. args or ""))
    return out, err, status
  end

  -- The start time slurmctld has for node N's slurmd ("" when none).
  local function slurmd_start(n)
    local _, node = cluster.sh("scontrol show node " .. n)
    return node:match("SlurmdStartTime=(%S+)") or ""
  end

  -- Stop node N's slurmd by PID (pid file) and wait until it is gone.
  local function stop_slurmd(n)
    local pid = (simdomain.read_file(cluster.root .. "/run/slurmd-" .. n .. ".pid") or ""):match("%d+")
    if not pid then return end
    os.execute("kill " .. pid)
    simdomain.wait_until(function() return os.execute("kill -0 " .. pid .. " 2>/dev/null") ~= true end,
      10, 0.1)
  end

  -- Start node N's slurmd with slurm.conf and ARGS, and wait until it has registered (a later
  -- SlurmdStartTime than BEFORE, the node idle and responding).
  local function start_slurmd(n, args, before)
    local ok, out = cluster.sh(cluster.in_root .. "slurmd -f " .. simdomain.quote(os.getenv("SLURM_CONF"))
      .. " -N " .. n .. " " .. args)
    assert(ok, out)
    return simdomain.wait_until(function()
      local _, node = cluster.sh("scontrol show node " .. n)
      local t, st = node:match("SlurmdStartTime=(%S+)"), node:match(" State=(%S+)") or ""
      return t and t ~= before and t ~= "None" and st:match("^IDLE") and not st:match("POWER")
        and not st:match("NOT_RESPONDING")
    end, 30, 0.2)
  end

  -- The dynamic node n5 gone: its slurmd stopped by PID, the node deleted (it outlives a
  -- reconfigure, and its Topology=default:b2 would stop slurmctld from loading a topology.yaml
  -- without "default").
  local function drop_n5()
    stop_slurmd("n5")
    local _, node = cluster.sh("scontrol show node n5")
    if node:match("^NodeName=n5 ") then
      local ok, out = cluster.sh("scontrol delete NodeName=n5")
      assert(ok, out)
    end
  end

  teardown(function()
    drop_n5()
    -- the file's placement back: a reconfigure reads topology.conf again
    assert(cluster.apply_config())
    assert.are.equal(cluster.fixture("show-topology-26.05-block.txt"), topology())
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("scontrol update NodeName=n2 Topology=default:b2 moves n2 into b2, shown in show node", function()
    local ok, out = cluster.sh("scontrol update NodeName=n2 Topology=default:b2")
    assert(ok, out)
    out = topology()
    assert.are.equal(cluster.fixture("show-topology-26.05-dynamic.txt", out), out)
    local _, node = cluster.sh("scontrol show node n2")
    assert.are.same(fields(cluster.fixture("show-node-26.05-dynamic.txt", node)), fields(node))
    assert.truthy(node:find("\n   Topology=default:b2\n", 1, true), node)
  end)

  it("a block that is not in the file is refused and nothing moves", function()
    local before = topology()
    local out, err, status = cluster.run("scontrol update NodeName=n1 Topology=default:b9")
    assert.are.equal("", out)
    assert.are.equal("slurm_update error: Requested topology configuration is not available\n", err)
    assert.are.equal(1, status)
    assert.are.equal(before, topology())
  end)

  it("Topology= (empty) takes the node out of every block, and its Topology= field goes", function()
    local ok, out = cluster.sh("scontrol update NodeName=n4 Topology=")
    assert(ok, out)
    out = topology()
    assert.are.equal(cluster.fixture("show-topology-26.05-removed.txt", out), out)
    local _, node = cluster.sh("scontrol show node n4")
    assert.is_nil(node:find("Topology=", 1, true), node)
  end)

  it("slurmd -Z --conf with Topology=default:b2 registers a node n5 in b2", function()
    assert(cluster.apply_config()) -- the file's placement again
    -- its port: slurm.conf's SlurmdPort, which no other slurmd of the tier listens on
    local ok, out = cluster.sh(cluster.in_root .. "slurmd -f " .. simdomain.quote(os.getenv("SLURM_CONF"))
      .. " -Z --conf 'CPUs=1 Topology=default:b2' -N n5")
    assert(ok, out)
    local node
    assert.truthy(simdomain.wait_until(function()
      node = select(2, cluster.sh("scontrol show node n5"))
      return node:find(" State=IDLE+DYNAMIC_NORM ", 1, true)
    end, 30, 0.2), "n5 registered: " .. tostring(node))
    assert.truthy(node:find("\n   Topology=default:b2\n", 1, true), node)
    out = topology()
    assert.are.equal(cluster.fixture("show-topology-26.05-dynamic-node.txt", out), out)
    out = topology("node=n5")
    assert.are.equal(cluster.fixture("show-topology-26.05-dynamic-node-n5.txt", out), out)
    drop_n5()
    assert.are.equal(cluster.fixture("show-topology-26.05-block.txt"), topology())
  end)

  it("slurmd --conf 'Topology=...' of a node in slurm.conf (not CLOUD) is ignored", function()
    local before = slurmd_start("n2")
    stop_slurmd("n2")
    assert.truthy(start_slurmd("n2", "--conf 'Topology=default:b2'", before), "n2's slurmd registered again")
    local out = topology()
    local _, node = cluster.sh("scontrol show node n2")
    -- n2 as slurmd is started by tests/e2e/run again
    before = slurmd_start("n2")
    stop_slurmd("n2")
    assert.truthy(start_slurmd("n2", "", before), "n2's slurmd registered again")
    assert.are.equal(cluster.fixture("show-topology-26.05-block.txt"), out)
    assert.is_nil(node:find("Topology=", 1, true), node)
  end)

  it("a CLOUD node registers with slurmd --conf 'Topology=default:b2', leaves once powered down", function()
    local port = tonumber(simdomain.read_file(os.getenv("SLURM_CONF")):match("\nSlurmctldPort=(%d+)")) + 6
    local restore, ok, err = cluster.reconfigure {
      ["slurm.conf"] = function(text)
        return text .. "NodeName=n6 NodeHostname=localhost NodeAddr=127.0.0.1 Port=" .. port
          .. " CPUs=1 State=CLOUD\nSuspendProgram=/bin/true\nResumeProgram=/bin/true\nSuspendTimeout=5\n"
      end,
    }
    local up, down, node, gone
    if ok then
      up = start_slurmd("n6", "--conf 'Topology=default:b2'", "None") and topology()
      node = select(2, cluster.sh("scontrol show node n6"))
      stop_slurmd("n6")
      cluster.sh("scontrol update NodeName=n6 State=POWER_DOWN_FORCE")
      down = simdomain.wait_until(function()
        return select(2, cluster.sh("scontrol show node n6")):match("State=IDLE%+CLOUD%+POWERED_DOWN ")
      end, 30, 0.2)
      gone = { topology(), (select(2, cluster.sh("scontrol show node n6"))) }
    end
    assert(restore())
    assert(ok, err)
    assert.truthy(up, "n6 registered")
    assert.are.equal(cluster.fixture("show-topology-26.05-cloud-node.txt", up), up)
    assert.truthy(node:find("\n   Topology=default:b2\n", 1, true), node)
    assert.truthy(down, "n6 powered down")
    assert.are.equal(cluster.fixture("show-topology-26.05-block.txt"), gone[1])
    assert.is_nil(gone[2]:find("Topology=", 1, true), gone[2])
  end)
end)
