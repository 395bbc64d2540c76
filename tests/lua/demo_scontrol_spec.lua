-- SPDX-License-Identifier: Apache-2.0
-- contrib/demo/scontrol, the demo's and the tests' stand-in for scontrol: the node calls of the
-- prolog and health.sh (show node, drain, resume) and Slurm 25.11's topology (field case C46 of
-- docs/design.md: `scontrol update NodeName=... Topology=default:b2` places a node in a block at
-- run time; `show topology` and `show node`'s Topology= say so), in the layout of Slurm's source
-- (src/plugins/topology/block/topology_block.c, block_record.c, src/api/node_info.c). Each spec
-- runs the script on a cluster of its own in a temp dir.
local H = require("helpers")

local SCONTROL = "contrib/demo/scontrol"

describe("contrib/demo/scontrol", function()
  local dir

  -- Run the stand-in: exit status, stdout, stderr.
  local function sc(...)
    local args = {}
    for _, a in ipairs({ ... }) do args[#args + 1] = H.q(a) end
    local out = H.sh("IMEXGUARD_DEMO_DIR=" .. H.q(dir) .. " " .. SCONTROL .. " " .. table.concat(args, " ")
      .. " 2>" .. H.q(dir .. "/err") .. "; echo \"rc=$?\"")
    local body, rc = out:match("^(.*)rc=(%d+)$")
    return tonumber(rc), body, H.read(dir .. "/err") or ""
  end

  -- The lines of `show topology` as {kind, name, index, nodes, size}.
  local function topology(...)
    local rc, out, err = sc("show", "topology", ...)
    assert.equal(0, rc, err)
    local recs = {}
    for line in out:gmatch("[^\n]+") do
      local kind, name, index, rest = line:match("^(%a+)=(%S+) BlockIndex=(%d+)(.*)$")
      assert(kind, "unexpected line: " .. line)
      recs[#recs + 1] = { kind, name, tonumber(index), rest:match(" Nodes=(%S*)"),
        tonumber(rest:match(" BlockSize=(%d+)$")) }
    end
    return recs, err
  end

  before_each(function()
    dir = H.tmpdir()
    os.execute("mkdir -p " .. H.q(dir .. "/slurm"))
    local nodes = {}
    for i = 1, 40 do nodes[i] = string.format("gb%02d", i) end
    H.write(dir .. "/env", "DEMO_NODES='" .. table.concat(nodes, " ") .. "'\n")
    -- two NVL36 racks of 18 trays and a third without trays yet; gb37-gb40 elastic
    H.write(dir .. "/slurm/topology.conf", "BlockName=nvl1 Nodes=gb[01-18]\nBlockName=nvl2 Nodes=gb[19-36]\n"
      .. "BlockName=nvl3\nBlockSizes=18\n")
  end)
  after_each(function() H.rmdir(dir) end)

  it("show node: the lines health.sh reads, drain and resume", function()
    local rc, out = sc("show", "node", "gb03")
    assert.equal(0, rc)
    assert.matches("^NodeName=gb03 ", out)
    assert.matches("\n   State=IDLE ", out, 1, true)
    assert.is_nil(out:find("Reason=", 1, true))
    assert.equal(0, (sc("update", "NodeName=gb03", "State=DRAIN", "Reason=imexguard: local-fault: x")))
    out = select(2, sc("show", "node", "gb03"))
    assert.matches("\n   State=IDLE%+DRAIN ", out)
    assert.matches("\n   Reason=imexguard: local%-fault: x %[root@[%d%-T:]+%]\n", out)
    assert.equal(0, (sc("update", "NodeName=gb03", "State=RESUME")))
    assert.matches("\n   State=IDLE ", select(2, sc("show", "node", "gb03")), 1, true)
    rc = sc("show", "node", "gb99")
    assert.equal(1, rc)
  end)

  it("show topology: one line per block of topology.conf, then the aggregated block", function()
    assert.same({
      { "BlockName", "nvl1", 0, "gb[01-18]", 18 },
      { "BlockName", "nvl2", 1, "gb[19-36]", 18 },
      { "BlockName", "nvl3", 2, nil, 18 },
    }, topology())
    -- default BlockSizes (1, 2, 4, 8 blocks): aggregated blocks of 2 and of 4 blocks
    H.write(dir .. "/slurm/topology.conf", "BlockName=b1 Nodes=gb[01-04]\nBlockName=b2 Nodes=gb[05-08]\n"
      .. "BlockName=b3 Nodes=gb[09-12]\n")
    assert.same({
      { "BlockName", "b1", 0, "gb[01-04]", 4 },
      { "BlockName", "b2", 1, "gb[05-08]", 4 },
      { "BlockName", "b3", 2, "gb[09-12]", 4 },
      { "AggregatedBlock", "b[1-2]", 3, "gb[01-08]", 8 },
      { "AggregatedBlock", "b[1-3]", 4, "gb[01-12]", 16 },
    }, topology())
  end)

  it("C46: update Topology= places a node in a block at run time; show node and show topology say so",
    function()
      assert.equal(0, (sc("update", "NodeName=gb37", "Topology=default:nvl3")))
      assert.equal(0, (sc("update", "NodeName=gb38", "Topology=default:nvl2")))
      local recs = topology()
      assert.same({ "nvl2", "gb[19-36,38]" }, { recs[2][2], recs[2][4] })
      assert.same({ "nvl3", "gb37" }, { recs[3][2], recs[3][4] })
      assert.equal("gb[01-18]", recs[1][4], "a block no node joined or left keeps topology.conf's value")
      local _, out = sc("show", "node", "gb37")
      assert.matches("\n   Topology=default:nvl3\n", out, 1, true)
      _, out = sc("show", "node", "gb05")
      assert.is_nil(out:find("Topology=", 1, true), "placed by topology.conf alone: no Topology=")
      -- moving a node takes it out of its block; Topology= (empty) out of every block
      assert.equal(0, (sc("update", "NodeName=gb05", "Topology=default:nvl3")))
      assert.equal(0, (sc("update", "NodeName=gb38", "Topology=")))
      recs = topology()
      assert.same({ "gb[01-04,06-18]", "gb[19-36]", "gb[05,37]" }, { recs[1][4], recs[2][4], recs[3][4] })
      _, out = sc("show", "node", "gb38")
      assert.is_nil(out:find("Topology=", 1, true))
    end)

  -- Real Slurm 26.05 outputs (tests/slurm26/dynamic_topology_spec.lua keeps them as
  -- tests/fixtures/slurm/show-topology-26.05-*.txt): topology.conf b1 = n[1-2], b2 = n[3-4].
  local REAL = {
    block_node_n3 = "BlockName=b2 BlockIndex=1 Nodes=n[3-4] BlockSize=2\n"
      .. "AggregatedBlock=b[1-2] BlockIndex=2 Nodes=n[1-4] BlockSize=4\n",
    dynamic = "BlockName=b1 BlockIndex=0 Nodes=n1 BlockSize=2\n"
      .. "BlockName=b2 BlockIndex=1 Nodes=n[2-4] BlockSize=2\n"
      .. "AggregatedBlock=b[1-2] BlockIndex=2 Nodes=n[1-4] BlockSize=4\n",
    removed = "BlockName=b1 BlockIndex=0 Nodes=n1 BlockSize=2\n"
      .. "BlockName=b2 BlockIndex=1 Nodes=n[2-3] BlockSize=2\n"
      .. "AggregatedBlock=b[1-2] BlockIndex=2 Nodes=n[1-3] BlockSize=4\n",
    dynamic_node_n5 = "BlockName=b2 BlockIndex=1 Nodes=n[3-5] BlockSize=2\n"
      .. "AggregatedBlock=b[1-2] BlockIndex=2 Nodes=n[1-5] BlockSize=4\n",
    -- the field names of `show node n2` after its update (the capture's Port= is left out: Slurm
    -- prints it only for a port other than slurm.conf's SlurmdPort, and the capture's was)
    node_fields = "NodeName Arch CoresPerSocket CPUAlloc CPUEfctv CPUTot CPULoad AvailableFeatures "
      .. "ActiveFeatures Gres NodeAddr NodeHostName Version OS RealMemory AllocMem FreeMem Sockets Boards "
      .. "State ThreadsPerCore TmpDisk Weight Owner MCS_label Partitions BootTime SlurmdStartTime "
      .. "LastBusyTime ResumeAfterTime SuspendTime CfgTRES cpu mem billing AllocTRES CurrentWatts AveWatts "
      .. "Topology",
  }

  it("answers as real Slurm 26.05 did in the same steps", function()
    H.write(dir .. "/env", "DEMO_NODES='n1 n2 n3 n4 n5'\n")
    H.write(dir .. "/slurm/topology.conf", "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-4]\n")
    local function show(...) return select(2, sc("show", "topology", ...)) end
    assert.equal(REAL.block_node_n3, show("node=n3"))
    local rc, out, err = sc("show", "topology", "n3")
    assert.same({ 0, "", "slurm_load_topo error: Requested topology configuration is not available\n" },
      { rc, out, err })
    assert.equal(0, (sc("update", "NodeName=n2", "Topology=default:b2")))
    assert.equal(REAL.dynamic, show())
    local node = select(2, sc("show", "node", "n2"))
    local names = {}
    for k in node:gmatch("([%w_]+)=") do names[#names + 1] = k end
    assert.equal(REAL.node_fields, table.concat(names, " "))
    assert.matches("\n   Topology=default:b2\n\n$", node)
    assert.equal(0, (sc("update", "NodeName=n4", "Topology=")))
    assert.equal(REAL.removed, show())
    -- the file's placement again (a reconfigure), then n5 registering with
    -- slurmd --conf Topology=default:b2
    for _, n in ipairs({ "n2", "n4" }) do os.remove(dir .. "/slurm/" .. n .. ".topology") end
    H.write(dir .. "/slurm/n5.topology", "default:b2\n")
    assert.equal(REAL.dynamic_node_n5, show("node=n5"))
  end)

  it("show topology node= and unit=: the blocks holding the nodes; none is an error line, exit 0", function()
    assert.equal(0, (sc("update", "NodeName=gb37", "Topology=default:nvl3")))
    assert.same({ { "BlockName", "nvl3", 2, "gb37", 18 } }, topology("node=gb37"))
    assert.same({ { "BlockName", "nvl1", 0, "gb[01-18]", 18 } }, topology("default", "node=gb[02-03]"))
    assert.same({ { "BlockName", "nvl2", 1, "gb[19-36]", 18 } }, topology("unit=nvl2"))
    local recs, err = topology("node=gb40")
    assert.same({}, recs)
    assert.equal("scontrol: error: Topology information contains no block with nodes gb40\n", err)
    recs, err = topology("block=nvl9")
    assert.same({}, recs)
    assert.equal("scontrol: error: Topology information contains no block named nvl9\n", err)
  end)

  it("errors: a block or topology that does not exist changes nothing; no topology.conf prints nothing",
    function()
      local rc, _, err = sc("update", "NodeName=gb37", "Topology=default:nvl9")
      assert.equal(1, rc)
      assert.equal("slurm_update error: Requested topology configuration is not available\n", err)
      rc, _, err = sc("update", "NodeName=gb37", "Topology=other:nvl1")
      assert.equal(1, rc)
      assert.matches("^slurm_update error: ", err)
      assert.is_nil(H.read(dir .. "/slurm/gb37.topology"))
      local recs
      recs, err = topology("gb200-racks")
      assert.same({}, recs)
      assert.equal("slurm_load_topo error: Requested topology configuration is not available\n", err)
      os.remove(dir .. "/slurm/topology.conf")
      recs, err = topology()
      assert.same({}, recs)
      assert.equal("", err)
    end)
end)
