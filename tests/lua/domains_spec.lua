-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.domains: the readers of Slurm's block topology and the address map's domain
-- column, the sources in order, and the split of a job by domain.
local domains = require "imexguard.domains"
local testing = require "imexguard.testing"

local function names(map)
  local out = {}
  for _, d in ipairs(map.domains) do out[#out + 1] = d.name .. "=" .. table.concat(d.nodes, ",") end
  return out
end

describe("domains.parse_topology_conf", function()
  it("reads BlockName lines (keys in any case, comments, a continued line), ignores BlockSizes", function()
    local map = assert(domains.parse_topology_conf("# racks\nBlockName=b1 Nodes=gb[01-02] # rack 1\n"
      .. "blockname=b2 \\\n  nodes=gb[03-04]\nBlockSizes=2,4\n\n", "/t.conf"))
    assert.same({ "b1=gb01,gb02", "b2=gb03,gb04" }, names(map))
    assert.equal("b2", map.of.gb04)
    assert.equal("topology", map.kind)
  end)

  it("a tree topology (SwitchName lines only) defines no domain", function()
    local map = assert(domains.parse_topology_conf(
      "SwitchName=s0 Nodes=gb[01-04]\nSwitchName=s1 Switches=s0\n", "/t.conf"))
    assert.same({}, map.domains)
  end)

  it("refuses, naming file and line: a node in two blocks, a block twice, no Nodes, a bad hostlist, "
    .. "an unknown line, a token that is not KEY=VALUE", function()
    local cases = {
      { "BlockName=b1 Nodes=a[1-2]\nBlockName=b2 Nodes=a2\n",
        "/t line 2: node a2 is in domain b2 and in domain b1" },
      { "BlockName=b1 Nodes=a1\nBlockName=b1 Nodes=a2\n", "/t line 2: domain b1 defined twice" },
      { "BlockName=b1\n", "/t line 1: block b1 has no Nodes=" },
      { "BlockName=b1 Nodes=a[1-\n", "/t line 1: domain b1:" },
      { "\nNodeName=a1 Block=b1\n", "/t line 2: unparsable line" },
      { "BlockName=b1 Nodes=a1 junk\n", "/t line 1: expected KEY=VALUE, got 'junk'" },
      { "BlockName=b1 \\", "/t line 1: the last line ends with" },
    }
    for _, c in ipairs(cases) do
      local map, err = domains.parse_topology_conf(c[1], "/t")
      assert.is_nil(map)
      assert.matches(c[2], err, 1, true)
    end
  end)
end)

describe("domains.parse_topology_yaml", function()
  it("reads the block topology, ignoring the tree and flat ones", function()
    local map = assert(domains.parse_topology_yaml([[
---
- topology: t
  tree:
    switches:
      - switch: s0
        nodes: gb[01-08]
- topology: f
  flat: true
- topology: b
  block:
    block_sizes: [2, 4]
    blocks:
      - block: b1
        nodes: 'gb[01-02]'
      - nodes: gb[03-04]
        block: b2
]], "/t.yaml"))
    assert.same({ "b1=gb01,gb02", "b2=gb03,gb04" }, names(map))
  end)

  it("several block topologies: the cluster_default one; none marked: an error naming the line", function()
    local two = "- topology: x\n  block:\n    blocks:\n      - block: x1\n        nodes: a1\n"
      .. "- topology: y\n  cluster_default: true\n  block:\n    blocks:\n      - block: y1\n"
      .. "        nodes: a2\n"
    assert.same({ "y1=a2" }, names(assert(domains.parse_topology_yaml(two, "/t.yaml"))))
    local map, err = domains.parse_topology_yaml(two:gsub("  cluster_default: true\n", ""), "/t.yaml")
    assert.is_nil(map)
    assert.matches("/t.yaml line 6: several block topologies (x, y)", err, 1, true)
  end)

  it("refuses an unparsable line, a tab, flow-style blocks, an entry without nodes", function()
    local cases = {
      { "- topology: b\n  block:\n    what is this\n", "/t line 3: unparsable line" },
      { "- topology: b\n\tblock:\n", "/t line 2: tab" },
      { "- topology: b\n  block:\n    blocks: [{block: b1}]\n", "/t line 3: flow style" },
      { '- topology: b\n  block:\n    blocks:\n      - {block: b1, nodes: "gb[01-04]"}\n',
        "/t line 4: flow style" },
      { "- topology: b\n  block:\n    blocks:\n      - block: b1\n", "/t line 4: block b1 has no nodes" },
    }
    for _, c in ipairs(cases) do
      local map, err = domains.parse_topology_yaml(c[1], "/t")
      assert.is_nil(map)
      assert.matches(c[2], err, 1, true)
    end
  end)
end)

describe("domains.load: the sources in order", function()
  local function ctx(files, settings, env)
    local h = testing.host{ files = files }
    return testing.ctx{ host = h, settings = settings or {}, env = env or {} }
  end
  local CONF = "BlockName=c1 Nodes=a[1-2]\n"
  local YAML = "- topology: b\n  block:\n    blocks:\n      - block: y1\n        nodes: a[1-2]\n"
  local MAP = "a1 10.0.0.1 m1\na2 10.0.0.2 m1\n"

  it("auto: topology.yaml, then topology.conf, then the address map's column, then none", function()
    local all = { ["/etc/slurm/topology.yaml"] = YAML, ["/etc/slurm/topology.conf"] = CONF, ["/m"] = MAP }
    local s = { address_map = "/m" }
    assert.equal("y1", domains.load(ctx(all, s)).of.a1)
    all["/etc/slurm/topology.yaml"] = nil
    assert.equal("c1", domains.load(ctx(all, s)).of.a1)
    all["/etc/slurm/topology.conf"] = nil
    assert.equal("m1", domains.load(ctx(all, s)).of.a1)
    assert.equal("none", domains.load(ctx(all, {})).kind)
    assert.equal("static", domains.load(ctx(all, {}), { static = true }).kind)
    -- an explicit source is used even when an earlier one exists
    all["/etc/slurm/topology.conf"] = CONF
    assert.equal("m1", domains.load(ctx(all, { address_map = "/m", domain_map = "address_map" })).of.a1)
    assert.equal("none", domains.load(ctx(all, { domain_map = "none" })).kind)
  end)

  it("beside SLURM_CONF, else beside the setting slurm_conf; topology_file wins", function()
    local files = { ["/s/topology.conf"] = CONF, ["/x/topo.yaml"] = YAML }
    assert.equal("/s/topology.conf", domains.load(ctx(files, {}, { SLURM_CONF = "/s/slurm.conf" })).source)
    assert.equal("/s/topology.conf", domains.load(ctx(files, { slurm_conf = "/s/slurm.conf" })).source)
    assert.equal("/x/topo.yaml", domains.load(ctx(files, { topology_file = "/x/topo.yaml" },
      { SLURM_CONF = "/s/slurm.conf" })).source)
    local map, err = domains.load(ctx(files, { topology_file = "/x/none.conf" }))
    assert.is_nil(map)
    assert.matches("topology file /x/none.conf unreadable", err, 1, true)
  end)

  it("a source asked for that defines no domain, static outside the static policy: errors", function()
    local map, err = domains.load(ctx({}, { domain_map = "topology" }))
    assert.is_nil(map)
    assert.matches("no block is defined in /etc/slurm/topology.yaml or /etc/slurm/topology.conf", err, 1,
      true)
    map, err = domains.load(ctx({ ["/m"] = "a1 10.0.0.1\n" },
      { domain_map = "address_map", address_map = "/m" }))
    assert.is_nil(map)
    assert.matches("has no domain column", err, 1, true)
    map, err = domains.load(ctx({}, { domain_map = "static" }))
    assert.is_nil(map)
    assert.matches("needs the static policy", err, 1, true)
  end)
end)

describe("domains.split", function()
  it("this node's domain in job order, the others by first appearance, the ones in no domain", function()
    local map = assert(domains.parse_topology_conf("BlockName=r1 Nodes=a[1-4]\nBlockName=r2 Nodes=b[1-4]\n",
      "/t"))
    local sp = domains.split(map, { "b2", "x9", "a3", "b1", "a1" }, "a1.cluster.example")
    assert.equal("r1", sp.name) -- a host name's short form
    assert.same({ "a3", "a1" }, sp.nodes)
    assert.same({ "x9" }, sp.left_out)
    assert.same({ { name = "r2", nodes = { "b2", "b1" } } }, sp.others)
    assert.is_nil(domains.split(map, { "a1" }, "x9").name)
  end)
end)
