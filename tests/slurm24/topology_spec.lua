-- SPDX-License-Identifier: Apache-2.0
-- What `scontrol show topology` prints for the tier's topology/block (blocks b1 = n[1-2],
-- b2 = n[3-4] in topology.conf), Slurm 24.11 (tests/slurm24/run) and 26.05 (tests/slurm26/run, which
-- runs these specs too): the same lines without an argument, kept verbatim as fixtures
-- (tests/fixtures/slurm/show-topology-RELEASE-block*.txt; IMEXGUARD_UPDATE_FIXTURES=1 writes them),
-- but the argument changed meaning. 24.11 takes a node name (`scontrol show topology n3`: n3's
-- blocks); 26.05 takes a topology name and a node as `node=n3`. Either release answers the other's
-- form with an error on stderr and exit status 0. 24.11 refuses a node's Topology= update (26.05's:
-- tests/slurm26/dynamic_topology_spec.lua).
local cluster = require("tests.e2e.cluster")

-- Release -> the node form, the other form and its error.
local FORMS = {
  ["24.11"] = { node = "n3", other = "node=n3",
    error = "scontrol: error: Topology information contains no block or node named node=n3\n" },
  ["26.05"] = { node = "node=n3", other = "n3",
    error = "slurm_load_topo error: Requested topology configuration is not available\n" },
}

describe("Slurm " .. cluster.slurm .. " scontrol show topology (topology/block)", function()
  local forms = FORMS[cluster.slurm]

  local function topology(args)
    return cluster.run("scontrol show topology" .. (args and " " .. args or ""))
  end

  it("without an argument: one line per block, then the aggregated block", function()
    local out, err, status = topology()
    assert.are.equal("", err)
    assert.are.equal(0, status)
    assert.are.equal(cluster.fixture("show-topology-" .. cluster.slurm .. "-block.txt", out), out)
    -- blocks from the file: no Topology= field in the node's record
    local _, node = cluster.sh("scontrol show node n2")
    assert.is_nil(node:find("Topology=", 1, true), node)
  end)

  it("a node's blocks, and the other release's form an error with exit status 0", function()
    assert.is_table(forms, "no forms for Slurm " .. cluster.slurm)
    local out, err, status = topology(forms.node)
    assert.are.equal("", err)
    assert.are.equal(0, status)
    assert.are.equal(cluster.fixture("show-topology-" .. cluster.slurm .. "-block-node-n3.txt", out), out)
    out, err, status = topology(forms.other)
    assert.are.equal("", out)
    assert.are.equal(forms.error, err)
    assert.are.equal(0, status)
  end)

  if cluster.slurm == "24.11" then
    it("a node's Topology= update is refused", function()
      local before = topology()
      local out, err, status = cluster.run("scontrol update NodeName=n2 Topology=default:b2")
      local said = out .. err
      assert.truthy(said:find("Update of this parameter is not supported: Topology=default:b2\n", 1, true),
        said)
      assert.truthy(said:find("Request aborted\n", 1, true), said)
      assert.are.equal(1, status)
      assert.are.equal(before, topology())
    end)
  end
end)
