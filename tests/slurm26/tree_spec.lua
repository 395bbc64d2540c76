-- SPDX-License-Identifier: Apache-2.0
-- Slurm 26.05's topology/tree as slurmctld reads it (C45): TopologyPlugin=topology/tree and a
-- topology.conf of SwitchName lines (leaf1 = n[1-2], leaf2 = n[3-4] under spine), applied with
-- `scontrol reconfigure`. What `scontrol show topology` prints is kept verbatim as fixtures
-- (tests/fixtures/slurm/show-topology-26.05-tree*.txt; IMEXGUARD_UPDATE_FIXTURES=1 writes them);
-- the leaf switch reaches the job's tasks (SLURM_TOPOLOGY_ADDR), not the prolog.
local cluster = require "tests.e2e.cluster"
local simdomain = require "simdomain"

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
