-- SPDX-License-Identifier: Apache-2.0
-- Slurm 26.05's topology/tree as slurmctld reads it (C45): TopologyPlugin=topology/tree and a
-- topology.conf of SwitchName lines (leaf1 = n[1-2], leaf2 = n[3-4] under spine), applied with
-- `scontrol reconfigure`. What `scontrol show topology` prints is kept verbatim as fixtures
-- (tests/fixtures/slurm/show-topology-26.05-tree*.txt; IMEXGUARD_UPDATE_FIXTURES=1 writes them);
-- the leaf switch reaches the job's tasks (SLURM_TOPOLOGY_ADDR), not the prolog. imexguard (C45):
-- with domain_map = "auto" a tree defines no NVLink domain and its log says so; with "tree" each leaf
-- switch is a rack; with slurmctld_topology = "always" a node moved to another leaf at run time
-- (`scontrol update NodeName=n3 Topology=default:leaf1`) is in that leaf's list.
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

local TREE = "SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n[3-4]\n"
  .. "SwitchName=spine Switches=leaf[1-2]\n"

describe("Slurm 26.05 topology/tree", function()
  local d, restore

  setup(function()
    local ok, err
    restore, ok, err = cluster.reconfigure {
      ["topology.conf"] = TREE,
      ["slurm.conf"] = function(text)
        return (text:gsub("\nTopologyPlugin=topology/block\n", "\nTopologyPlugin=topology/tree\n"))
      end,
    }
    assert(ok, err)
    d = cluster.domain { "health_timeout = 8", 'domain_map = "none"' }
    for _, n in ipairs(cluster.nodes) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    if d then d:stop() end
    if restore then assert(restore()) end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("show topology: one line per switch, leaves first as in the file; node= its leaf and up", function()
    for _, c in ipairs { { "", "tree" }, { " node=n3", "tree-node-n3" },
      { " switch=leaf1", "tree-switch-leaf1" } } do
      local out, err, status = cluster.run("scontrol show topology" .. c[1])
      assert.are.equal("", err)
      assert.are.equal(0, status)
      assert.are.equal(cluster.fixture("show-topology-26.05-" .. c[2] .. ".txt", out), out)
    end
  end)

  -- A fresh simulated domain (each node its own list) with these settings, started.
  local function domain(settings)
    if d then d:stop() end
    d = cluster.domain(settings)
    for _, n in ipairs(cluster.nodes) do d:write_node_list(n, { n }) end
    assert(d:start())
  end

  -- Every node's prolog outcomes and list (node names, sorted) for job ID.
  local function lists(id, nodes)
    local t = {}
    for _, n in ipairs(nodes or cluster.nodes) do
      t[n] = table.concat(cluster.outcomes(n, id), ",") .. " " .. table.concat(cluster.list_of(d, n), ",")
    end
    return t
  end

  it("imexguard, domain_map auto: no NVLink domain from a tree, said in the log; one list", function()
    domain { "health_timeout = 8", 'domain_map = "auto"' }
    local id = cluster.sbatch("-N4", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id))
    local all = "ok n1,n2,n3,n4"
    assert.are.same({ n1 = all, n2 = all, n3 = all, n4 = all }, lists(id))
    assert.matches("warning: " .. cluster.root
      .. "/spool/n3/conf-cache/topology.conf defines a tree topology "
      .. "(SwitchName= lines) and no block topology: a tree defines no NVLink domain", cluster.log_of("n3"),
        1, true)
  end)

  it("imexguard, domain_map tree: each leaf switch is a rack", function()
    domain { "health_timeout = 8", 'domain_map = "tree"' }
    local id = cluster.sbatch("-N4", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id))
    assert.are.same({ n1 = "ok n1,n2", n2 = "ok n1,n2", n3 = "ok n3,n4", n4 = "ok n3,n4" }, lists(id))
  end)

  it("imexguard, slurmctld_topology always: a node moved to another leaf at run time follows it", function()
    domain { "health_timeout = 8", 'domain_map = "tree"', 'slurmctld_topology = "always"' }
    local ok, out = cluster.sh("scontrol update NodeName=n3 Topology=default:spine:leaf1")
    assert(ok, out)
    local id = cluster.sbatch("-N3 -w n[1-3]", "true")
    local state = cluster.wait_job(id)
    assert(cluster.apply_config()) -- the files' placement back
    assert.are.equal("COMPLETED", state, cluster.job_output(id))
    local three = "ok n1,n2,n3"
    assert.are.same({ n1 = three, n2 = three, n3 = three }, lists(id, { "n1", "n2", "n3" }))
    assert.matches("asked slurmctld for topology default (scontrol show topology, ", cluster.log_of("n1"), 1,
      true)
  end)

  it("the prolog gets no switch; the job's tasks get SLURM_TOPOLOGY_ADDR", function()
    local out = cluster.root .. "/topo-addr-%s"
    local id = cluster.sbatch("-N2 -w n[3-4]", "echo \"$SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN\" > "
      .. out:format("$SLURM_JOB_ID"))
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id))
    assert.are.equal("spine.leaf2.n3 switch.switch.node\n", simdomain.read_file(out:format(id)))
    local env = cluster.parse_env(cluster.env_text("prolog", "n3", id))
    assert.are.equal("n[3-4]", env.SLURM_JOB_NODELIST)
    for k in pairs(env) do assert.is_nil(k:match("TOPO"), k) end
  end)
end)
