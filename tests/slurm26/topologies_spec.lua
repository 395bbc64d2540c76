-- SPDX-License-Identifier: Apache-2.0
-- Slurm 26.05 with several topologies (C47): topology.yaml beside slurm.conf holds a tree named
-- "fabric" (cluster_default: leaf switches leaf1 = n[1-2], leaf2 = n[3-4]) and two block topologies,
-- "gb200" (rack1 = n[1-2], rack2 = n[3-4]) and "gb300" (rackA = n[1,3], rackB = n[2,4]); partitions
-- pa and pb over n[1-4] bind gb200 and gb300 (PartitionName=... Topology=NAME). Applied with
-- `scontrol reconfigure`, the tier's topology.conf left where it is: topology.yaml wins. What
-- `scontrol show topology [NAME]` prints is kept verbatim as fixtures
-- (tests/fixtures/slurm/show-topology-26.05-yaml-*.txt); IMEXGUARD_UPDATE_FIXTURES=1 writes them.
-- imexguard (domain_map = "auto") gives each job the racks of its partition's topology, reading the
-- binding from slurm.conf (the conf-cache on the configless n3 and n4); in the partition p, which
-- binds none (the default is the tree), the two block topologies place every node differently: a
-- real conflict, bad input named on every node.
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

local YAML = [[
---
- topology: fabric
  cluster_default: true
  tree:
    switches:
      - switch: spine
        children: leaf[1-2]
      - switch: leaf1
        nodes: n[1-2]
      - switch: leaf2
        nodes: n[3-4]
- topology: gb200
  block:
    block_sizes:
      - 2
    blocks:
      - block: rack1
        nodes: n[1-2]
      - block: rack2
        nodes: n[3-4]
- topology: gb300
  block:
    block_sizes:
      - 2
    blocks:
      - block: rackA
        nodes: n[1,3]
      - block: rackB
        nodes: n[2,4]
]]

local PARTITIONS = "PartitionName=pa Nodes=n[1-4] Topology=gb200 State=UP OverSubscribe=EXCLUSIVE\n"
  .. "PartitionName=pb Nodes=n[1-4] Topology=gb300 State=UP OverSubscribe=EXCLUSIVE\n"

describe("Slurm 26.05 topology.yaml with a tree default and two block topologies", function()
  local d, restore

  local function topology(args)
    return cluster.run("scontrol show topology" .. (args and " " .. args or ""))
  end

  setup(function()
    local ok, err
    restore, ok, err = cluster.reconfigure {
      ["topology.yaml"] = YAML,
      ["slurm.conf"] = function(text) return text .. PARTITIONS end,
    }
    assert(ok, err)
    -- every node's daemon runs its own list; imexguard reads topology.yaml and the partitions (C47)
    d = cluster.domain { "health_timeout = 8", 'domain_map = "auto"' }
    for _, n in ipairs(cluster.nodes) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    if d then d:stop() end
    if restore then assert(restore()) end
    -- the configless nodes' conf-cache follows: no topology.yaml left for a later spec
    assert.is_false(cluster.exists(cluster.root .. "/spool/n3/conf-cache/topology.yaml"))
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("show topology prints cluster_default; with a name, that topology", function()
    for _, c in ipairs { { nil, "default" }, { "fabric", "fabric" }, { "gb200", "gb200" },
      { "gb300", "gb300" }, { "gb300 node=n3", "gb300-node-n3" }, { "node=n3", "node-n3" } } do
      local out, err, status = topology(c[1])
      assert.are.equal("", err)
      assert.are.equal(0, status)
      assert.are.equal(cluster.fixture("show-topology-26.05-yaml-" .. c[2] .. ".txt", out), out)
    end
  end)

  it("the name 'default' (topology.conf's) is unknown here: an error on stderr, exit status 0", function()
    local out, err, status = topology("default")
    assert.are.equal("", out)
    assert.are.equal("slurm_load_topo error: Requested topology configuration is not available\n", err)
    assert.are.equal(0, status)
  end)

  it("a configless node gets topology.yaml beside the ignored topology.conf", function()
    local cache = cluster.root .. "/spool/n3/conf-cache/"
    assert.are.equal(YAML, simdomain.read_file(cache .. "topology.yaml"))
    assert.truthy((simdomain.read_file(cache .. "topology.conf") or ""):match("BlockName=b1"))
  end)

  it("a job's partition picks its topology; the prolog gets the partition, not the topology", function()
    -- two nodes of one block of the partition's topology, whichever Slurm picks
    for part, blocks in pairs { pa = { "n[1-2]", "n[3-4]" }, pb = { "n[1,3]", "n[2,4]" } } do
      local id = cluster.sbatch("-p " .. part .. " -N2", "true")
      assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id))
      local _, job = cluster.sh("scontrol show job " .. id)
      local nodes = job:match(" NodeList=(%S+)")
      assert.truthy(nodes == blocks[1] or nodes == blocks[2], part .. ": " .. tostring(nodes))
      local n = nodes:match("^n%[?(%d)")
      local env = cluster.parse_env(cluster.env_text("prolog", "n" .. n, id))
      assert.are.equal(part, env.SLURM_JOB_PARTITION)
      for k in pairs(env) do assert.is_nil(k:match("TOPO"), k) end
    end
  end)

  -- Every node's prolog outcomes and list (node names, sorted) for job ID.
  local function lists(id)
    local t = {}
    for _, n in ipairs(cluster.nodes) do
      t[n] = table.concat(cluster.outcomes(n, id), ",") .. " " .. table.concat(cluster.list_of(d, n), ",")
    end
    return t
  end

  it("imexguard: a job in pa gets gb200's racks, in pb gb300's, every prolog at once", function()
    local id = cluster.sbatch("-p pa -N4", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id) .. cluster.log_of("n3"))
    assert.are.same({ n1 = "ok n1,n2", n2 = "ok n1,n2", n3 = "ok n3,n4", n4 = "ok n3,n4" }, lists(id))
    assert.matches("IMEX domain of node n3: rack2 (topology gb200) from " .. cluster.root
      .. "/spool/n3/conf-cache/topology.yaml", cluster.log_of("n3"), 1, true)
    id = cluster.sbatch("-p pb -N4", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id) .. cluster.log_of("n3"))
    assert.are.same({ n1 = "ok n1,n3", n2 = "ok n2,n4", n3 = "ok n1,n3", n4 = "ok n2,n4" }, lists(id))
  end)

  it("imexguard: a job in p (no binding, a tree default) meets the real conflict: bad-input named", function()
    local before = {}
    for _, n in ipairs(cluster.nodes) do before[n] = d:nodes_file(n) end
    local id = cluster.sbatch("-p p -N4", "true")
    cluster.wait_job(id)
    local ended = simdomain.wait_until(function()
      for _, n in ipairs(cluster.nodes) do
        if not cluster.outcomes(n, id)[1] then return false end
      end
      return true
    end, 30, 0.2)
    local logs = cluster.log_of("n1")
    local idle = cluster.reset()
    assert.truthy(ended, logs)
    for _, n in ipairs(cluster.nodes) do
      assert.are.same({ "bad-input" }, cluster.outcomes(n, id), cluster.log_of(n))
      assert.are.equal(before[n], d:nodes_file(n))
    end
    assert.matches("outcome=bad-input: node n1: IMEX domain map: node n1 is in block rack1 of topology "
      .. "gb200 ("
      .. cluster.root .. "/topology.yaml line 17) and in block rackA of topology gb300 (line 26); the job's "
      .. "topology (fabric, a tree topology) does not decide: bind the job's partition to one "
        .. "(PartitionName=p "
      .. "... Topology=NAME in slurm.conf); nothing changed", logs, 1, true)
    assert.is_true(idle, "the cluster is idle again")
  end)

  it("scontrol update naming one topology takes the node out of the others", function()
    local ok, out = cluster.sh("scontrol update NodeName=n2 Topology=gb200:rack2")
    assert(ok, out)
    for _, name in ipairs { "fabric", "gb200", "gb300" } do
      out = topology(name)
      assert.are.equal(cluster.fixture("show-topology-26.05-yaml-update-" .. name .. ".txt", out), out)
    end
    local _, node = cluster.sh("scontrol show node n2")
    assert.truthy(node:find("\n   Topology=gb200:rack2\n", 1, true), node)
    -- every topology named: the node in each, as listed
    ok, out = cluster.sh("scontrol update NodeName=n2 Topology=gb200:rack1,gb300:rackB,fabric:spine:leaf1")
    assert(ok, out)
    assert.are.equal(cluster.fixture("show-topology-26.05-yaml-gb300.txt"), (topology("gb300")))
    _, node = cluster.sh("scontrol show node n2")
    assert.truthy(node:find("\n   Topology=gb200:rack1,gb300:rackB,fabric:spine:leaf1\n", 1, true), node)
  end)
end)
