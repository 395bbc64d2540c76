-- SPDX-License-Identifier: Apache-2.0
-- End to end under a real Slurm 22.05 (tests/e2e/run): a job over two NVLink blocks gets one IMEX
-- node list per block (field case C29 of docs/design.md). Slurm 22.05 has topology/tree only, so the
-- block topology is a topology.conf beside the tier's slurm.conf that Slurm never loads (no
-- TopologyPlugin): imexguard reads it itself (setting topology_file: slurmd 22.05 started with -f
-- passes the prolog its compiled-in SLURM_CONF, not this file).
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

local q = simdomain.quote
local root = assert(os.getenv("IMEXGUARD_E2E_ROOT"), "run through tests/e2e/run")
local simroot = os.getenv("IMEXGUARD_E2E_SIMROOT")
local logdir = os.getenv("IMEXGUARD_E2E_LOG")
-- a file of its own, named by topology_file: beside the tier's slurm.conf, the Slurm 24.11 tier keeps
-- the topology.conf its slurmctld loads (tests/slurm24), which this spec must not replace
local topology = root .. "/imexguard-topology.conf"

-- Submit a batch job; returns its id.
local function sbatch(args, script)
  local path = root .. "/job-" .. tostring(math.random(1e9)) .. ".sh"
  simdomain.write_file(path, "#!/bin/sh\n" .. script .. "\n")
  local ok, out = simdomain.capture("sbatch --parsable -D " .. q(root) .. " -o " .. q(root .. "/slurm-%j.out")
    .. " " .. args .. " " .. q(path))
  assert(ok, out)
  return assert(out:match("^(%d+)"), out)
end

-- Wait until a job has left the queue; returns its last state.
local function wait_job(id, timeout)
  local state
  simdomain.wait_until(function()
    local _, out = simdomain.capture("scontrol show job " .. id)
    state = out:match("JobState=(%S+)")
    if not state then return true end
    return state ~= "PENDING" and state ~= "RUNNING" and state ~= "CONFIGURING" and state ~= "COMPLETING"
  end, timeout or 90, 0.2)
  return state
end

local function log_of(n)
  return simdomain.read_file(logdir .. "/imexguard-" .. n .. ".log") or ""
end

describe("imexguard as the Slurm prolog: a job over two NVLink blocks", function()
  local d
  local all = { "n1", "n2", "n3", "n4" }

  setup(function()
    simdomain.write_file(topology, "# two NVL racks (topology/block; Slurm 22.05 does not load this)\n"
      .. "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-4]\nBlockSizes=2\n")
    d = simdomain.new { nodes = 4, root = simroot, settings = { "health_timeout = 8",
      string.format("topology_file = %q", topology) } }
    for _, n in ipairs(all) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    if d then d:stop() end
    os.remove(topology) -- the other e2e specs run one domain over n[1-4]
  end)

  it("a 4-node job: n1, n2 run {n1, n2}, n3, n4 run {n3, n4}, each block UP", function()
    local id = sbatch("-N4", "true")
    assert.are.equal("COMPLETED", wait_job(id))
    for _, n in ipairs(all) do
      local log = log_of(n)
      assert.truthy(log:match("prolog job=" .. id .. " outcome=ok"), log)
      assert.truthy(log:find("IMEX domain of node " .. n .. ": b" .. (n <= "n2" and 1 or 2) .. " from "
        .. topology, 1, true), log)
      local dom = assert(d:ctl_json(n))
      assert.are.equal("UP", dom.status)
    end
    local b1 = d.addr.n1 .. "\n" .. d.addr.n2 .. "\n"
    local b2 = d.addr.n3 .. "\n" .. d.addr.n4 .. "\n"
    assert.are.equal(b1, d:nodes_file("n1"))
    assert.are.equal(b1, d:nodes_file("n2"))
    assert.are.equal(b2, d:nodes_file("n3"))
    assert.are.equal(b2, d:nodes_file("n4"))
  end)
end)
