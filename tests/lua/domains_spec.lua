-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.domains: the readers of Slurm's block topology and the address map's domain
-- column, the sources in order, and the split of a job by domain.
local domains = require("imexguard.domains")
local testing = require("imexguard.testing")

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

  it("refuses, naming file and line: a node in two blocks, a block twice, a bad hostlist, "
    .. "an unknown line, a token that is not KEY=VALUE", function()
    local cases = {
      { "BlockName=b1 Nodes=a[1-2]\nBlockName=b2 Nodes=a2\n",
        "/t line 2: node a2 is in domain b2 and in domain b1" },
      { "BlockName=b1 Nodes=a1\nBlockName=b1 Nodes=a2\n", "/t line 2: domain b1 defined twice" },
      { "BlockName=b1 Nodes=a[1-\n", "/t line 1: domain b1:" },
      { "\nNodeName=a1 Block=b1\n", "/t line 2: unparsable line" },
      { "BlockName=b1 Nodes=a1 junk\n", "/t line 1: expected KEY=VALUE, got 'junk'" },
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

  it("several block topologies: all their blocks, the cluster_default one first; a node two place "
    .. "differently, neither the default: a conflict named", function()
    local two = "- topology: x\n  block:\n    blocks:\n      - block: x1\n        nodes: a1\n"
      .. "- topology: y\n  cluster_default: true\n  block:\n    blocks:\n      - block: y1\n"
      .. "        nodes: a2\n"
    assert.same({ "y1=a2", "x1=a1" }, names(assert(domains.parse_topology_yaml(two, "/t.yaml"))))
    -- a2 in x1 too: the default's y1 wins, no conflict
    local map = assert(domains.parse_topology_yaml(two:gsub("nodes: a1", "nodes: a[1-2]"), "/t.yaml"))
    assert.equal("y1", map.of.a2)
    assert.same({}, map.conflicts)
    -- no default: a2 in x1 = a[1-2] and y1 = a2 is a conflict, a1 is not
    map = assert(domains.parse_topology_yaml(two:gsub("nodes: a1", "nodes: a[1-2]")
      :gsub("  cluster_default: true\n", ""), "/t.yaml"))
    assert.is_nil(map.conflicts.a1)
    assert.equal("node a2 is in block x1 of topology x (/t.yaml line 4) and in block y1 of topology y (line "
      .. "9)",
      map.conflicts.a2)
    local sp, err = domains.split(map, { "a1", "a2" }, "a1")
    assert.is_nil(sp)
    assert.matches("node a2 is in block x1 of topology x", err, 1, true)
    assert.matches("the job's topology (none: no binding, no cluster_default) does not decide", err, 1, true)
    -- two topologies with one block name: the second one's is qualified
    map = assert(domains.parse_topology_yaml(two:gsub("block: x1", "block: y1"), "/t.yaml"))
    assert.same({ "y1=a2", "x:y1=a1" }, names(map))
  end)

  it("refuses an unparsable line, a tab, flow-style blocks, an entry without nodes", function()
    local cases = {
      { "- topology: b\n  block:\n    what is this\n", "/t line 3: unparsable line" },
      { "- topology: b\n\tblock:\n", "/t line 2: tab" },
      { "- topology: b\n  block:\n    blocks: [{block: b1}]\n", "/t line 3: flow style" },
      { '- topology: b\n  block:\n    blocks:\n      - {block: b1, nodes: "gb[01-04]"}\n',
        "/t line 4: flow style" },
      { "- topology: b\n  block:\n    blocks:\n      - nodes: a1\n", "/t line 4: entry without a name" },
      { "- topology: b\n  tree:\n    switches:\n      - {switch: s1}\n", "/t line 4: flow style" },
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

describe("domains.load: trees, several topologies, slurmctld (C45, C46, C47)", function()
  -- the messages a fake host logged at LEVEL
  local function logs(h, level)
    local out = {}
    for _, l in ipairs(h.logs) do
      if l[1] == level then out[#out + 1] = l[2] end
    end
    return out
  end
  local function ctx(files, settings, env, host_opts)
    local o = host_opts or {}
    o.files = files
    local h = testing.host(o)
    return testing.ctx{ host = h, settings = settings or {}, env = env or {} }, h
  end
  local TREE = "SwitchName=rack1 Nodes=gb[01-04]\nSwitchName=rack2 Nodes=gb[05-08]\nSwitchName=nb1 "
    .. "Switches=rack[1-2]\n"
  -- C47's input: a tree default, a block topology per GPU generation
  local YAML = [[
- topology: eth
  cluster_default: true
  tree:
    switches:
      - switch: top
        nodes: gb200-[0-7],gb300-[0-7]
- topology: gb200-racks
  block:
    blocks:
      - block: nvl0
        nodes: gb200-[0-3]
      - block: nvl1
        nodes: gb200-[4-7]
- topology: gb300-racks
  block:
    blocks:
      - block: nvl0
        nodes: gb300-[0-3]
      - block: nvl1
        nodes: gb300-[4-7]
]]
  local SLURM_CONF = "SlurmctldHost=c\nPartitionName=gb200 Nodes=gb200-[0-7] Topology=gb200-racks State=UP\n"
    .. "PartitionName=gb300 Nodes=gb300-[0-7] Topology=gb300-racks\nPartitionName=cpu Nodes=gb200-0\n"

  it("a tree and no block (C45): auto says so and the job is one domain; tree takes the leaves", function()
    local files = { ["/etc/slurm/topology.conf"] = TREE }
    local map = assert(domains.load(ctx(files)))
    assert.equal("none", map.kind)
    assert.matches("/etc/slurm/topology.conf defines a tree topology (SwitchName= lines) and no block "
      .. "topology: "
      .. "a tree defines no NVLink domain", map.note, 1, true)
    map = assert(domains.load(ctx(files, { domain_map = "tree" })))
    assert.equal("tree", map.kind)
    assert.same({ "rack1=gb01,gb02,gb03,gb04", "rack2=gb05,gb06,gb07,gb08" }, names(map))
    -- "topology" asked for: an error that says why
    local m, err = domains.load(ctx(files, { domain_map = "topology" }))
    assert.is_nil(m)
    assert.matches("no block is defined in .*; .* defines a tree topology", err)
    -- "tree" without a tree
    m, err = domains.load(ctx({ ["/etc/slurm/topology.conf"] = "BlockName=b1 Nodes=a1\n" },
      { domain_map = "tree" }))
    assert.is_nil(m)
    assert.matches('domain_map = "tree" but no tree topology', err, 1, true)
  end)

  it("a tree topology of topology.yaml: its leaf switches under tree", function()
    local map = assert(domains.load(ctx({ ["/etc/slurm/topology.yaml"] = YAML }, { domain_map = "tree" })))
    assert.same({ "top=gb200-0,gb200-1,gb200-2,gb200-3,gb200-4,gb200-5,gb200-6,gb200-7,gb300-0,gb300-1,"
      .. "gb300-2,gb300-3,gb300-4,gb300-5,gb300-6,gb300-7" }, names(map))
  end)

  it("topology.yaml hides topology.conf, as Slurm reads it", function()
    local map = assert(domains.load(ctx({ ["/etc/slurm/topology.yaml"] = "- topology: f\n  flat: true\n",
      ["/etc/slurm/topology.conf"] = "BlockName=c1 Nodes=a[1-2]\n" })))
    assert.equal("none", map.kind)
  end)

  it("C47: the job's partition picks its topology; without a binding, the default; names qualified",
    function()
    local files = { ["/s/topology.yaml"] = YAML, ["/s/slurm.conf"] = SLURM_CONF }
    local env = { SLURM_CONF = "/s/slurm.conf", SLURM_JOB_PARTITION = "gb200" }
    local map = assert(domains.load(ctx(files, {}, env)))
    assert.equal("gb200-racks", map.job_topology.name)
    local sp = assert(domains.split(map, { "gb200-2", "gb200-3", "gb200-4", "gb200-5" }, "gb200-4"))
    assert.same({ "nvl1", { "gb200-4", "gb200-5" }, "gb200-racks" }, { sp.name, sp.nodes, sp.topology })
    assert.same({ { name = "nvl0", nodes = { "gb200-2", "gb200-3" } } }, sp.others)
    -- the gb300 partition: its blocks keep their names, gb200's are qualified
    env.SLURM_JOB_PARTITION = "gb300"
    map = assert(domains.load(ctx(files, {}, env)))
    sp = assert(domains.split(map, { "gb300-3", "gb300-4" }, "gb300-3"))
    assert.same({ "nvl0", { "gb300-3" } }, { sp.name, sp.nodes })
    assert.equal("gb200-racks:nvl1", map.of["gb200-5"])
    -- a partition without a binding: the default (a tree) decides nothing, every block still counts
    env.SLURM_JOB_PARTITION = "cpu"
    map = assert(domains.load(ctx(files, {}, env)))
    assert.equal("eth", map.job_topology.name)
    sp = assert(domains.split(map, { "gb200-3", "gb200-4" }, "gb200-3"))
    assert.same({ "nvl0", { "gb200-3" } }, { sp.name, sp.nodes })
  end)

  it("C47: a real conflict is bad input only for the nodes it concerns, named", function()
    local both = YAML:gsub("nodes: gb300%-%[0%-3%]", "nodes: gb200-[0-1]")
    local files = { ["/s/topology.yaml"] = both, ["/s/slurm.conf"] = SLURM_CONF }
    local env = { SLURM_CONF = "/s/slurm.conf", SLURM_JOB_PARTITION = "cpu" }
    local map = assert(domains.load(ctx(files, {}, env)))
    assert.truthy(domains.split(map, { "gb200-5" }, "gb200-5"))
    local sp, err = domains.split(map, { "gb200-0", "gb200-5" }, "gb200-5")
    assert.is_nil(sp)
    assert.matches("node gb200-0 is in block nvl0 of topology gb200-racks (/s/topology.yaml line 10) and in "
      .. "block nvl0 of topology gb300-racks (line 17); the job's topology (eth, a tree topology) does not "
      .. "decide: bind the job's partition to one (PartitionName=cpu ", err, 1, true)
    -- the job's partition binds one: it decides
    env.SLURM_JOB_PARTITION = "gb300"
    map = assert(domains.load(ctx(files, {}, env)))
    sp = assert(domains.split(map, { "gb200-0", "gb200-1", "gb200-5" }, "gb200-0"))
    assert.same({ "nvl0", { "gb200-0", "gb200-1" } }, { sp.name, sp.nodes })
  end)

  it("C47: a partition bound to a topology the file lacks; an unreadable slurm.conf", function()
    local files = { ["/s/topology.yaml"] = YAML, ["/s/slurm.conf"] = SLURM_CONF:gsub("gb300%-racks",
      "gb300-rax") }
    local m, err = domains.load(ctx(files, {}, { SLURM_CONF = "/s/slurm.conf",
      SLURM_JOB_PARTITION = "gb300" }))
    assert.is_nil(m)
    assert.equal("/s/slurm.conf line 3: partition gb300 binds topology gb300-rax, which /s/topology.yaml "
      .. "does "
      .. "not define", err)
    local code
    m, err, code = domains.load(ctx({ ["/s/topology.yaml"] = YAML }, {},
      { SLURM_CONF = "/s/slurm.conf", SLURM_JOB_PARTITION = "gb300" }))
    assert.is_nil(m)
    assert.equal("slurm-conf-unreadable", code)
    assert.matches("the topology of partition gb300: slurm.conf (SLURM_CONF): /s/slurm.conf unreadable", err,
      1,
      true)
  end)

  it("C46: slurmctld asked once when the files leave a node of the job unplaced, not otherwise", function()
    local show = "BlockName=b1 BlockIndex=0 Nodes=gb[01-04] BlockSize=4\n"
      .. "BlockName=b2 BlockIndex=1 Nodes=gb[05-09] BlockSize=4\n"
      .. "AggregatedBlock=b[1-2] BlockIndex=2 Nodes=gb[01-09] BlockSize=8\n"
    local files = { ["/etc/slurm/topology.conf"] = "BlockName=b1 Nodes=gb[01-04]\nBlockName=b2 "
      .. "Nodes=gb[05-08]\n" }
    local c, h = ctx(files, {}, {}, { scontrol = { stdout = show } })
    local map = domains.refresh(c, assert(domains.load(c)), { "gb03", "gb04" }, "gb03")
    assert.same({}, h.runs_of("scontrol")) -- every node placed by the file: no call
    map = domains.refresh(c, map, { "gb08", "gb09" }, "gb09")
    assert.same({ { "/usr/bin/scontrol", "show", "topology" } }, h.runs_of("scontrol"))
    assert.equal("b2", map.of.gb09)
    assert.equal("slurmctld (topology default; files: /etc/slurm/topology.conf)", map.source)
    assert.matches("asked slurmctld for topology default (scontrol show topology, 10 ms): "
      .. "/etc/slurm/topology.conf places no unit for gb09", logs(h, "info")[1], 1, true)
    -- off: never; always: even when the files place every node
    c, h = ctx(files, { slurmctld_topology = "off" }, {}, { scontrol = { stdout = show } })
    map = domains.refresh(c, assert(domains.load(c)), { "gb09" }, "gb09")
    assert.same({}, h.runs_of("scontrol"))
    assert.is_nil(map.of.gb09)
    assert.equal('slurmctld not asked (slurmctld_topology = "off")', map.slurmctld)
    c, h = ctx(files, { slurmctld_topology = "always" }, {}, { scontrol = { stdout = show } })
    domains.refresh(c, assert(domains.load(c)), { "gb01" }, "gb01")
    assert.equal(1, #h.runs_of("scontrol"))
  end)

  it("C46: slurmctld's answer for the job's topology by name; a failed ask leaves the files' map", function()
    local files = { ["/s/topology.yaml"] = YAML, ["/s/slurm.conf"] = SLURM_CONF }
    local env = { SLURM_CONF = "/s/slurm.conf", SLURM_JOB_PARTITION = "gb200" }
    local live = "BlockName=nvl0 BlockIndex=0 Nodes=gb200-[0-3] BlockSize=4\n"
      .. "BlockName=nvl1 BlockIndex=1 Nodes=gb200-[4-8] BlockSize=4\n"
    local c, h = ctx(files, {}, env, { scontrol = { stdout = live } })
    local map = domains.refresh(c, assert(domains.load(c)), { "gb200-7", "gb200-8" }, "gb200-8")
    assert.same({ "/usr/bin/scontrol", "show", "topology", "gb200-racks" }, h.runs_of("scontrol")[1])
    assert.equal("nvl1", map.of["gb200-8"])
    assert.equal("gb300-racks:nvl0", map.of["gb300-1"]) -- the other topology from the file
    c, h = ctx(files, {}, env, { scontrol = { status = 1, stderr = "slurm_load_topo error: Unable to contact "
      .. "slurm controller (connect failure)\n" } })
    map = domains.refresh(c, assert(domains.load(c)), { "gb200-8" }, "gb200-8")
    assert.is_nil(map.of["gb200-8"])
    assert.matches("Unable to contact slurm controller (connect failure): the files' placement stands",
      logs(h, "warning")[1], 1, true)
    assert.matches("slurmctld asked, no usable answer", map.slurmctld, 1, true)
  end)
end)

describe("domains.findings: what -t says (C45, C47)", function()
  local function findings(files, settings, env)
    local h = testing.host{ files = files }
    return domains.findings(testing.ctx{ host = h, settings = settings or {}, env = env or {} })
  end

  it("a tree and no block: a warning naming the file and line", function()
    assert.same({ { level = "warning", file = "/etc/slurm/topology.conf", line = 2,
      message = "/etc/slurm/topology.conf defines a tree topology (SwitchName= lines) and no block "
        .. "topology: a "
        .. "tree defines no NVLink domain, so the job's nodes are one IMEX domain; set domain_map = "
          .. "\"tree\" if "
        .. "each leaf switch is one NVLink rack, or describe the racks as blocks (topology/block)" } },
      findings({ ["/etc/slurm/topology.conf"] = "# racks\nSwitchName=r1 Nodes=a[1-2]\n" }))
    assert.same({}, findings({ ["/etc/slurm/topology.conf"] = "SwitchName=r1 Nodes=a[1-2]\n" },
      { domain_map = "tree" }))
    assert.same({}, findings({ ["/etc/slurm/topology.conf"] = "BlockName=b1 Nodes=a[1-2]\n" }))
    assert.same({}, findings({}))
  end)

  it("errors: an unparsable file (file and line), a partition bound to a missing topology, no tree",
    function()
    assert.same({ { level = "error", file = "/etc/slurm/topology.conf", line = 1,
      message = "expected KEY=VALUE, got 'junk'" } },
        findings({ ["/etc/slurm/topology.conf"] = "BlockName=b1 junk\n" }))
    local f = findings({ ["/s/topology.yaml"] = "- topology: a\n  block:\n    blocks:\n      - block: b1\n"
      .. "        nodes: a1\n",
        ["/s/slurm.conf"] = "PartitionName=DEFAULT Topology=zz\nPartitionName=p Nodes=a1\n" },
      {}, { SLURM_CONF = "/s/slurm.conf" })
    assert.same({ { level = "error", file = "/s/slurm.conf", line = 1,
      message = "partition p binds topology zz, "
      .. "which /s/topology.yaml does not define: its jobs end bad-input" } }, f)
    f = findings({ ["/etc/slurm/topology.conf"] = "BlockName=b1 Nodes=a1\n" }, { domain_map = "tree" })
    assert.equal("error", f[1].level)
    assert.matches('domain_map = "tree" but /etc/slurm/topology.conf defines no tree topology', f[1].message,
      1, true)
  end)
end)
