-- SPDX-License-Identifier: Apache-2.0
-- Slurm's topology/block, 24.11 and later (tests/slurm24/run, tests/slurm26/run: blocks b1 = n[1-2],
-- b2 = n[3-4] in the topology.conf beside slurm.conf): a job over both blocks gets one IMEX node list
-- per block, not one across them (C29; the fabric issue). imexguard finds the blocks with domain_map =
-- "auto", which reads topology.conf beside the slurm.conf that SLURM_CONF names (slurmd 24.11 sets it
-- in the prolog's environment: the slurm.conf of n1 and n2, the conf-cache of the configless n3 and
-- n4).
local cluster = require("tests.e2e.cluster")

describe("Slurm " .. cluster.slurm .. " topology/block", function()
  local d
  local all = cluster.nodes

  setup(function()
    d = cluster.domain { "health_timeout = 8", 'domain_map = "auto"' }
    for _, n in ipairs(all) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  -- Each block's nodes write that block's list, and only that block's.
  local function per_block(id)
    for _, n in ipairs(all) do
      assert.are.same({ "ok" }, cluster.outcomes(n, id), cluster.log_of(n))
    end
    assert.are.same({ d.addr.n1, d.addr.n2 }, cluster.lines(d:nodes_file("n1")))
    assert.are.same({ d.addr.n1, d.addr.n2 }, cluster.lines(d:nodes_file("n2")))
    assert.are.same({ d.addr.n3, d.addr.n4 }, cluster.lines(d:nodes_file("n3")))
    assert.are.same({ d.addr.n3, d.addr.n4 }, cluster.lines(d:nodes_file("n4")))
  end

  it("a 4-node job over both blocks: one IMEX list per block", function()
    local id = cluster.sbatch("-N4", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id))
    per_block(id)
  end)

  it("a job placed with --segment=2: one list per block, also from one list across both", function()
    -- the wrong state first: one list across the blocks on every node
    for _, n in ipairs(all) do d:write_node_list(n, all) end
    local id = cluster.sbatch("-N4 --segment=2", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id))
    per_block(id)
  end)
end)
