-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.topology: Slurm's topology files (topology.conf's blocks and switches,
-- topology.yaml's block, tree and flat topologies) and what `scontrol show topology` prints (the real
-- 24.11 and 26.05 outputs of tests/fixtures/slurm/), and the one bounded call that asks slurmctld.
local topology = require("imexguard.topology")
local testing = require("imexguard.testing")

local function fixture(name)
  local f = assert(io.open("tests/fixtures/slurm/" .. name))
  local s = f:read("a")
  f:close()
  return s
end

-- "name=expr" of a topology's units (blocks, else switches; a leaf switch marked with no children).
local function units(t)
  local out = {}
  for _, b in ipairs(t.blocks) do out[#out + 1] = b.name .. "=" .. tostring(b.expr) end
  for _, s in ipairs(t.switches) do
    out[#out + 1] = s.name .. "=" .. tostring(s.expr) .. (s.children and ("/" .. s.children) or "")
  end
  return out
end

describe("topology.parse_conf", function()
  it("a trailing backslash joins the next line as Slurm does, with nothing between them (C45)", function()
    local t = assert(topology.parse_conf(table.concat({
      "BlockName=b1 Nodes=gb[01-04],\\",
      "gb[05-08]",
      "SwitchName=rack1 \\   ",
      "  Nodes=gb[09-10] # rack 1 \\",
      "BlockName=b2 Nodes=gb[11-12]",
    }, "\n") .. "\n", "/t"))
    assert.same({ "b1=gb[01-04],gb[05-08]", "b2=gb[11-12]", "rack1=gb[09-10]" }, units(t[1]))
    assert.same({ 1, 5 }, { t[1].blocks[1].line, t[1].blocks[2].line })
    -- a backslash on the last line continues nothing (Slurm reads the line as it is)
    assert.same({ "b1=nil" }, units(assert(topology.parse_conf("BlockName=b1 \\", "/t"))[1]))
  end)

  it("blocks: one topology named default, the default, kind block", function()
    local t = assert(topology.parse_conf("BlockName=b1 Nodes=n[1-2]\nBlockName=b2\nBlockSizes=2\n", "/t"))
    assert.equal(1, #t)
    assert.same({ "default", "block", true }, { t[1].name, t[1].kind, t[1].default })
    -- a block without Nodes= is a block without nodes from the file (nodes may join it at run time)
    assert.same({ "b1=n[1-2]", "b2=nil" }, units(t[1]))
  end)

  it("a tree (C45): SwitchName lines, leaf switches have nodes and no child switch", function()
    local t = assert(topology.parse_conf("SwitchName=rack1 Nodes=gb[01-04]\nSwitchName=rack2 "
      .. "Nodes=gb[05-08]\n"
      .. "SwitchName=nb1 Switches=rack[1-2] LinkSpeed=100\n", "/t"))[1]
    assert.equal("tree", t.kind)
    assert.same({ "rack1=gb[01-04]", "rack2=gb[05-08]", "nb1=nil/rack[1-2]" }, units(t))
    local leaves = topology.leaves(t)
    assert.same({ "rack1", "rack2" }, { leaves[1].name, leaves[2].name })
  end)

  it("refuses an unknown line and a token that is not KEY=VALUE, naming file and line", function()
    assert.same({ nil, "/t line 2: unparsable line (expected BlockName=, BlockSizes= or SwitchName=): "
      .. "'NodeName=a1'" }, { topology.parse_conf("\nNodeName=a1\n", "/t") })
    assert.same({ nil, "/t line 1: SwitchName is empty" }, { topology.parse_conf("SwitchName= Nodes=a1\n",
      "/t") })
  end)
end)

describe("topology.parse_yaml", function()
  -- tests/slurm26/topologies_spec.lua's file: a tree default and two block topologies
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
- topology: none
  flat: true
]]

  it("several topologies: each with its kind, units and line; the cluster_default one", function()
    local t = assert(topology.parse_yaml(YAML, "/t.yaml"))
    assert.same({ "fabric", "gb200", "gb300", "none" }, { t[1].name, t[2].name, t[3].name, t[4].name })
    assert.same({ "tree", "block", "block", "flat" }, { t[1].kind, t[2].kind, t[3].kind, t[4].kind })
    assert.same({ true, false, false, false }, { t[1].default, t[2].default, t[3].default, t[4].default })
    assert.same({ "spine=nil/leaf[1-2]", "leaf1=n[1-2]", "leaf2=n[3-4]" }, units(t[1]))
    assert.same({ "rackA=n[1,3]", "rackB=n[2,4]" }, units(t[3]))
    assert.same({ 2, 12, 21 }, { t[1].line, t[2].line, t[3].line })
    assert.equal(26, t[3].blocks[1].line)
  end)

  it("the first cluster_default counts; one topology alone is the default", function()
    local t = assert(topology.parse_yaml("- topology: a\n  cluster_default: true\n  flat: true\n"
      .. "- topology: b\n  cluster_default: true\n  flat: true\n", "/t"))
    assert.same({ true, false }, { t[1].default, t[2].default })
    t = assert(topology.parse_yaml("- topology: a\n  flat: true\n", "/t"))
    assert.is_true(t[1].default)
  end)

  it("refuses a topology defined twice, an entry outside its list, flow style", function()
    local cases = {
      { "- topology: a\n  flat: true\n- topology: a\n  flat: true\n", "/t line 3: topology a defined twice" },
      { "- topology: a\n  tree:\n    nodes: n1\n", "/t line 3: 'nodes:' outside a '- switch:' entry" },
      { "- topology: a\n  tree:\n    switches: [s1]\n", "/t line 3: flow style" },
    }
    for _, c in ipairs(cases) do
      local t, err = topology.parse_yaml(c[1], "/t")
      assert.is_nil(t)
      assert.matches(c[2], err, 1, true)
    end
  end)
end)

describe("topology.parse_show: what scontrol show topology printed", function()
  it("26.05 and 24.11 blocks: AggregatedBlock lines are no unit", function()
    for _, f in ipairs { "show-topology-26.05-block.txt", "show-topology-24.11-block.txt" } do
      local t = assert(topology.parse_show(fixture(f), "default"))
      assert.equal("block", t.kind)
      assert.same({ "b1=n[1-2]", "b2=n[3-4]" }, units(t))
    end
  end)

  it("nodes placed at run time (C46): an update, a dynamic node, a CLOUD node", function()
    assert.same({ "b1=n1", "b2=n[2-4]" },
      units(topology.parse_show(fixture("show-topology-26.05-dynamic.txt"),
      "default")))
    assert.same({ "b1=n[1-2]", "b2=n[3-5]" }, units(topology.parse_show(
      fixture("show-topology-26.05-dynamic-node.txt"), "default")))
    assert.same({ "b1=n[1-2]", "b2=n[3-4,6]" }, units(topology.parse_show(
      fixture("show-topology-26.05-cloud-node.txt"), "default")))
  end)

  it("a tree (topology.conf's and topology.yaml's): leaves are the switches without Switches=", function()
    local t = assert(topology.parse_show(fixture("show-topology-26.05-tree.txt"), "default"))
    assert.equal("tree", t.kind)
    assert.same({ "leaf1=n[1-2]", "leaf2=n[3-4]", "spine=n[1-4]/leaf[1-2]" }, units(t))
    local leaves = topology.leaves(assert(topology.parse_show(fixture("show-topology-26.05-yaml-default.txt"),
      "fabric")))
    assert.same({ "leaf1", "leaf2" }, { leaves[1].name, leaves[2].name })
    -- a switch left without nodes at run time ("Nodes=" empty) is no leaf
    t = assert(topology.parse_show("SwitchName=leaf9 Level=0 LinkSpeed=0 Nodes=\n", "fabric"))
    assert.same({}, topology.leaves(t))
  end)

  it("nothing (topology/flat) is a flat topology; a line of something else is refused", function()
    assert.equal("flat", assert(topology.parse_show("", "default")).kind)
    local t, err = topology.parse_show("NodeName=n1 Arch=x86_64\n", "default")
    assert.is_nil(t)
    assert.matches("scontrol show topology line 1: not a block or switch", err, 1, true)
  end)
end)

describe("topology.ask: one bounded scontrol call per run", function()
  local function ctx(script)
    local h = testing.host{ scontrol = script }
    return testing.ctx{ host = h, settings = {} }, h
  end

  it("asks once (no argument for the default topology), answers the same after", function()
    local c, h = ctx({ stdout = fixture("show-topology-26.05-dynamic-node.txt") })
    local t = assert(topology.ask(c, nil))
    assert.same({ "b1=n[1-2]", "b2=n[3-5]" }, units(t))
    assert.equal(t, topology.ask(c, nil))
    assert.same({ { "/usr/bin/scontrol", "show", "topology" } }, h.runs_of("scontrol"))
    topology.ask(c, "gb200")
    assert.same({ "/usr/bin/scontrol", "show", "topology", "gb200" }, h.runs_of("scontrol")[2])
  end)

  it("an unknown name (stderr, exit 0), a failed exit, a hang: no topology, the reason named", function()
    local c = ctx({ stderr = "slurm_load_topo error: Requested topology configuration is not available\n" })
    local t, err = topology.ask(c, "gb9")
    assert.is_nil(t)
    assert.equal("scontrol show topology gb9: slurm_load_topo error: Requested topology configuration is not "
      .. "available", err)
    c = ctx({ status = 1, stderr = "slurm_load_topo error: Unable to contact slurm controller\n" })
    t, err = topology.ask(c)
    assert.is_nil(t)
    assert.matches("scontrol show topology exited 1: slurm_load_topo error: Unable to contact", err, 1, true)
    local h
    c, h = ctx(testing.HANG)
    local t0 = h.now()
    t, err = topology.ask(c)
    assert.is_nil(t)
    assert.matches("no answer within 5 s", err, 1, true)
    assert.is_true(h.now() - t0 <= topology.ASK_TIMEOUT + 0.01)
  end)
end)

describe("topology.parse_show: a block the file gives no node", function()
  it("placed at run time (26.05's output), and without any node (no Nodes= field)", function()
    local f = assert(io.open("tests/fixtures/slurm/show-topology-26.05-empty-block.txt"))
    local t = assert(topology.parse_show(f:read("a"), "default"))
    f:close()
    assert.same({ "b1", "n[1-2]", "b2", "n3", "b3", "n4" }, { t.blocks[1].name, t.blocks[1].expr,
      t.blocks[2].name,
      t.blocks[2].expr, t.blocks[3].name, t.blocks[3].expr })
    t = assert(topology.parse_show("BlockName=b3 BlockIndex=2 BlockSize=2\n", "default"))
    assert.same({ "b3" }, { t.blocks[1].name, t.blocks[1].expr })
  end)
end)
