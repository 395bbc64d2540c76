-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy's IMEX domains (imexguard.domains; docs/design.md step 2, C29, C30):
-- a job that spans NVLink domains gets one node list per domain, its nodes in no domain are left out.
local testing = require("imexguard.testing")
local outcomes = require("imexguard.outcomes")

-- gb01..gb12, cpu07 with addresses 10.0.1.x (gb), 10.0.9.7 (cpu07)
local NODES = { cpu07 = "10.0.9.7" }
for i = 1, 12 do NODES[string.format("gb%02d", i)] = string.format("10.0.1.%d", i) end

local TOPO = "/etc/slurm/topology.conf"
local C29_CONF = "# C29: two racks\nBlockName=b1 Nodes=gb[01-04]\nBlockName=b2 Nodes=gb[05-08]\n"
  .. "BlockSizes=4\n"

local function scenario(node, o)
  o = o or {}
  local files = o.files or { [TOPO] = o.topology or C29_CONF }
  return testing.scenario{ node = node, nodes = NODES, files = files, file = o.file or { node },
    settings = o.settings, mesh = o.mesh, policy = o.policy, nvidia_smi = o.nvidia_smi }
end

-- The log line that names the split (logged once at info).
local function split_lines(s)
  local out = {}
  for _, l in ipairs(s:logs("info")) do
    if l:find("IMEX domain", 1, true) then out[#out + 1] = l end
  end
  return out
end

describe("default policy: IMEX domains from Slurm's block topology (C29)", function()
  it("a job over two blocks: each node writes its own block's nodes of the job, in job order", function()
    local want = { gb03 = { "gb03", "gb04" }, gb04 = { "gb03", "gb04" }, gb05 = { "gb05", "gb06" },
      gb06 = { "gb05", "gb06" } }
    local bytes = {}
    for node, list in pairs(want) do
      local s = scenario(node)
      local outcome, message, _, ctx = s:prolog{ job = 101, nodelist = "gb[03-06]" }
      assert.equal("ok", outcome, message)
      assert.same(list, s:file_nodes())
      assert.same(list, s:daemon())
      assert.equal(list[1] == "gb03" and "b1" or "b2", ctx.domain.name)
      assert.equal("topology", ctx.domain.kind)
      assert.equal(TOPO, ctx.domain.source)
      assert.same(list, ctx.domain.nodes)
      assert.same({}, ctx.domain.left_out)
      local lines = split_lines(s)
      assert.equal(1, #lines)
      assert.matches("from " .. TOPO, lines[1], 1, true)
      bytes[node] = s:file()
    end
    -- byte-identical on the nodes of one domain
    assert.equal(bytes.gb03, bytes.gb04)
    assert.equal(bytes.gb05, bytes.gb06)
    assert.not_equal(bytes.gb03, bytes.gb05)
  end)

  it("a sick node in the other block never makes this node wait or blame anyone", function()
    local s = scenario("gb03", { mesh = { unhealthy = { gb06 = "UNAVAILABLE", gb05 = "UNAVAILABLE" } } })
    local t0 = s.host.now()
    local outcome, message = s:prolog{ job = 101, nodelist = "gb[03-06]" }
    assert.equal("ok", outcome, message)
    assert.is_true(s.host.now() - t0 < 5)
    assert.not_matches("gb0[56]", message)
    assert.not_matches("10%.0%.1%.[56]", message)
  end)

  it("a sick node of this block is still waited for and blamed", function()
    local s = scenario("gb03", { mesh = { unhealthy = { gb04 = "UNAVAILABLE" } } })
    local outcome, message = s:prolog{ job = 101, nodelist = "gb[03-06]" }
    assert.equal("peers-unhealthy", outcome)
    assert.matches("gb04", message)
    assert.not_matches("gb0[56]", message)
  end)

  it("three blocks, the job's order not sorted, a one-node domain", function()
    local topo = "BlockName=r1 Nodes=gb[01-04]\nBlockName=r2 Nodes=gb[05-08]\nBlockName=r3 Nodes=gb[09-12]\n"
    local job = "gb07,gb02,gb09,gb05,gb01"
    local s = scenario("gb05", { topology = topo })
    local outcome, message, _, ctx = s:prolog{ job = 7, nodelist = job }
    assert.equal("ok", outcome, message)
    assert.same({ "gb07", "gb05" }, s:file_nodes()) -- the job's order, not sorted
    assert.same({ { name = "r1", nodes = { "gb02", "gb01" } }, { name = "r3", nodes = { "gb09" } } },
      ctx.domain.others)
    local one = scenario("gb09", { topology = topo })
    outcome, message, _, ctx = one:prolog{ job = 7, nodelist = job }
    assert.equal("ok", outcome, message)
    assert.equal("10.0.1.9\n", one:file()) -- a node alone in its domain: a one-line list
    assert.equal("r3", ctx.domain.name)
  end)

  it("topology.conf beside the slurm.conf that SLURM_CONF names", function()
    local s = scenario("gb05", { files = { ["/var/spool/slurmd/conf-cache/topology.conf"] = C29_CONF } })
    local outcome, message, _, ctx = s:prolog{ job = 101, nodelist = "gb[03-06]",
      env = { SLURM_CONF = "/var/spool/slurmd/conf-cache/slurm.conf" } }
    assert.equal("ok", outcome, message)
    assert.same({ "gb05", "gb06" }, s:file_nodes())
    assert.equal("/var/spool/slurmd/conf-cache/topology.conf", ctx.domain.source)
  end)

  it("Slurm 25.05's topology.yaml (its block section; the tree topology beside it is ignored)", function()
    local yaml = [[
- topology: fat
  cluster_default: false
  tree:
    switches:
      - switch: s0
        nodes: gb[01-12]
- topology: racks   # the NVL72 racks
  cluster_default: true
  block:
    block_sizes:
      - 4
    blocks:
      - block: "b1"
        nodes: gb[01-04]
      - block: b2
        nodes: gb[05-08]
]]
    local s = scenario("gb04", { files = { ["/etc/slurm/topology.yaml"] = yaml } })
    local outcome, message, _, ctx = s:prolog{ job = 101, nodelist = "gb[03-06]" }
    assert.equal("ok", outcome, message)
    assert.same({ "gb03", "gb04" }, s:file_nodes())
    assert.equal("b1", ctx.domain.name)
    assert.equal("/etc/slurm/topology.yaml", ctx.domain.source)
  end)

  it("a node in two blocks: bad-input naming the file and line, nothing changed", function()
    local s = scenario("gb03", { topology = C29_CONF .. "BlockName=b3 Nodes=gb[08-09]\n" })
    local outcome, message = s:prolog{ job = 101, nodelist = "gb[03-06]" }
    assert.equal("bad-input", outcome)
    assert.equal(2, outcomes.exit_code(outcome))
    assert.matches(TOPO .. " line 5: node gb08 is in domain b3 and in domain b2 (line 3)", message, 1, true)
    assert.same({}, s.host.writes)
    assert.same({}, s:unit_jobs())
  end)

  it("an unparsable line: bad-input naming the file and line, nothing changed", function()
    local s = scenario("gb03", { topology = C29_CONF .. "Block b4 gb[09-12]\n" })
    local outcome, message = s:prolog{ job = 101, nodelist = "gb[03-06]" }
    assert.equal("bad-input", outcome)
    assert.matches(TOPO .. " line 5:", message, 1, true)
    assert.same({}, s.host.writes)
  end)

  it("domain_map = \"none\": the whole job is one domain (as before domains)", function()
    local s = scenario("gb03", { settings = { domain_map = "none" } })
    local outcome, message, _, ctx = s:prolog{ job = 101, nodelist = "gb[03-06]" }
    assert.equal("ok", outcome, message)
    assert.same({ "gb03", "gb04", "gb05", "gb06" }, s:file_nodes())
    assert.equal("none", ctx.domain.kind)
    assert.is_nil(ctx.domain.name)
  end)

  it("auto without any map: the whole job is one domain, said once in the log", function()
    local s = scenario("gb03", { files = {} })
    local outcome, message = s:prolog{ job = 101, nodelist = "gb[03-06]" }
    assert.equal("ok", outcome, message)
    assert.same({ "gb03", "gb04", "gb05", "gb06" }, s:file_nodes())
    local lines = split_lines(s)
    assert.equal(1, #lines)
    assert.matches("no domain map", lines[1], 1, true)
  end)

  it("domain_map = \"topology\" without a topology file: bad-input naming the files", function()
    local s = scenario("gb03", { files = {}, settings = { domain_map = "topology" } })
    local outcome, message = s:prolog{ job = 101, nodelist = "gb[03-06]" }
    assert.equal("bad-input", outcome)
    assert.matches("/etc/slurm/topology.conf", message, 1, true)
    assert.same({}, s.host.writes)
  end)

  it("plan shows each domain's nodes and the ones left out", function()
    local s = scenario("gb03")
    local outcome, message, out = s:plan{ job = 101, nodelist = "gb[03-06],cpu07" }
    assert.equal("ok", outcome, message)
    assert.matches("IMEX domain b1 (this node's, from " .. TOPO .. "): gb[03-04]", out, 1, true)
    assert.matches("IMEX domain b2: gb[05-06] (its own list there)", out, 1, true)
    assert.matches("left out (in no IMEX domain): cpu07", out, 1, true)
    local _, _, js = s:plan{ job = 101, nodelist = "gb[03-06],cpu07", json = true }
    local t = require("cjson").decode(js)
    assert.equal("b1", t.imex_domain.name)
    assert.same({ "gb03", "gb04" }, t.imex_domain.nodes)
    assert.same({ "cpu07" }, t.imex_domain.left_out)
    assert.same({ "gb05", "gb06" }, t.imex_domain.others[1].nodes)
  end)

  it("status shows this node's domain", function()
    local s = scenario("gb05", { file = { "gb05", "gb06" } })
    local outcome, message, out = s:status{}
    assert.equal("ok", outcome, message)
    assert.matches("\ndomain       b2 gb[05-08] (from " .. TOPO .. ")\n", out, 1, true)
  end)
end)

describe("default policy: nodes of the job in no IMEX domain (C30)", function()
  it("gb[01-02],cpu07: gb01 writes {gb01, gb02}, never waits for cpu07, names it once", function()
    local s = scenario("gb01")
    local t0 = s.host.now()
    local outcome, message, _, ctx = s:prolog{ job = 30, nodelist = "gb[01-02],cpu07" }
    assert.equal("ok", outcome, message)
    assert.same({ "gb01", "gb02" }, s:file_nodes())
    assert.same({ "cpu07" }, ctx.domain.left_out)
    assert.is_true(s.host.now() - t0 < 5)
    local lines = split_lines(s)
    assert.equal(1, #lines)
    assert.matches("left out (in no IMEX domain, not waited for): cpu07", lines[1], 1, true)
  end)

  it("on cpu07 (in no domain, its GPUs on no NVLink fabric) the prolog skips, changing nothing", function()
    local s = scenario("cpu07", { nvidia_smi = testing.FABRIC_NONE })
    local outcome, message = s:prolog{ job = 30, nodelist = "gb[01-02],cpu07" }
    assert.equal("skipped", outcome)
    assert.equal(0, outcomes.exit_code(outcome))
    assert.matches("node cpu07 is in no IMEX domain of " .. TOPO .. ": not an IMEX node (no multi-node "
      .. "NVLink", message, 1, true)
    assert.same({}, s.host.writes)
    assert.same({}, s:unit_jobs())
  end)

  it("a job entirely outside any domain, on trays (GPUs in an NVLink partition): not-placed (C46)", function()
    local s = scenario("gb10")
    local outcome, message = s:prolog{ job = 31, nodelist = "gb[10-12]" }
    assert.equal("not-placed", outcome, message)
    assert.equal(24, outcomes.exit_code(outcome))
    assert.same({}, s.host.writes)
  end)

  it("an address map that omits cpu07 is not bad input any more", function()
    local map = "gb01 10.0.1.1 b1\ngb02 10.0.1.2 b1\ngb05 10.0.1.5 b2\n"
    local s = scenario("gb01", { files = { ["/etc/imexguard/addresses"] = map },
      settings = { address_source = "map", address_map = "/etc/imexguard/addresses" } })
    local outcome, message, _, ctx = s:prolog{ job = 30, nodelist = "gb[01-02],cpu07" }
    assert.equal("ok", outcome, message)
    assert.same({ "gb01", "gb02" }, s:file_nodes())
    assert.equal("address_map", ctx.domain.kind)
    assert.equal("b1", ctx.domain.name)
  end)

  it("the address map's domain column: <ClusterUUID>.<CliqueId> names, a job over two of them", function()
    local u1, u2 = "5f3c0c0e-0000-4000-8000-000000000001.32766", "5f3c0c0e-0000-4000-8000-000000000002.32766"
    local map = "gb03 10.0.1.3 " .. u1 .. "\ngb04 10.0.1.4 " .. u1 .. "\ngb05 10.0.1.5 " .. u2 .. "\n"
      .. "gb06 10.0.1.6 " .. u2 .. "\ncpu07 10.0.9.7\n"
    -- gb06's GPUs report the partition its domain is named by (imexguard.fabric compares them, C31)
    local uuid, clique = u2:match("^(.*)%.(%d+)$")
    local gpus = {}
    for i = 1, 4 do gpus[i] = { cluster_uuid = uuid, clique_id = clique } end
    local s = scenario("gb06", { files = { ["/etc/imexguard/addresses"] = map },
      settings = { address_source = "map", address_map = "/etc/imexguard/addresses" },
      nvidia_smi = testing.gpus(gpus) })
    local outcome, message, _, ctx = s:prolog{ job = 30, nodelist = "gb[03-06],cpu07" }
    assert.equal("ok", outcome, message)
    assert.same({ "gb05", "gb06" }, s:file_nodes())
    assert.equal(u2, ctx.domain.name)
    assert.same({ "cpu07" }, ctx.domain.left_out)
  end)
end)

-- issue 32 item 1: the domain map's file is shared by the whole cluster; one typo there must not
-- drain every node at its next job (imexguard.lastgood).
describe("a cluster-wide file that breaks after it worked (issue 32 item 1)", function()
  local RECORD = testing.STATE:gsub("[^/]+$", "") .. "domain-map.last"
  -- b2's line broken: an unclosed bracket
  local BROKEN = "# C29: two racks\nBlockName=b1 Nodes=gb[01-04]\nBlockName=b2 Nodes=gb[05-08\nBlockSizes=4\n"

  -- gb03 after a job on b1 (the map recorded), the file then broken
  local function after_good(topo_after)
    local s = scenario("gb03", { file = { "gb03", "gb04" } })
    local outcome, message = s:prolog{ job = 100, nodelist = "gb[03-04]" }
    assert.equal("ok", outcome, message)
    assert.matches("\nkind topology\nsource " .. TOPO .. "\ndomain b1 gb01 gb02 gb03 gb04\ndomain b2 gb05",
      s:writes(RECORD)[1], 1, true)
    assert.equal("ok", (s:epilog{ job = 100, nodelist = "gb[03-04]" }))
    s.host.set_file(TOPO, topo_after or BROKEN)
    return s
  end

  it("a prolog that succeeds records the map once (again only when it changes); plan records nothing",
    function()
      local s = after_good(C29_CONF)
      assert.equal("ok", (s:prolog{ job = 101, nodelist = "gb[03-04]" }))
      assert.equal(1, #s:writes(RECORD)) -- the same map: not written again
      local p = scenario("gb03", { file = { "gb03", "gb04" } })
      p:plan{ job = 100, nodelist = "gb[03-04]" }
      assert.same({}, p:writes(RECORD))
    end)

  it("broken after it worked: the record stands in for the job's nodes it places as the file does; loud",
    function()
      local s = after_good()
      local outcome, message, _, ctx = s:prolog{ job = 101, nodelist = "gb[01-04]" }
      assert.equal("ok", outcome, message)
      assert.same({ "gb01", "gb02", "gb03", "gb04" }, s:file_nodes())
      assert.matches("using the last domain map that parsed", ctx.domain.fallback, 1, true)
      local errs = table.concat(s:logs("err"), "\n")
      assert.matches(TOPO .. " line 3: domain b2: invalid hostlist 'gb[05-08': unclosed '['", errs, 1, true)
      assert.matches("for job nodes gb[01-04], which it places as the file does", errs, 1, true)
    end)

  it("a job node of the broken line only: taken from the record (gb05 in b2)", function()
    local s = after_good()
    local node5 = scenario("gb05", { file = { "gb05" } })
    node5.host.set_file(RECORD, s:writes(RECORD)[1])
    node5.host.set_file(TOPO, BROKEN)
    local outcome, message = node5:prolog{ job = 102, nodelist = "gb[04-06]" }
    assert.equal("ok", outcome, message)
    assert.same({ "gb05", "gb06" }, node5:file_nodes())
  end)

  it("a node the file moved to another block: the file's error, bad-input, nothing written", function()
    -- gb04 now in b2 (a deliberate edit), and a typo in another line
    local moved = "BlockName=b1 Nodes=gb[01-03]\nBlockName=b2 Nodes=gb[04-08]\nBlockName=b3 Nodes=gb[09-1\n"
    local s = after_good(moved)
    local outcome, message = s:prolog{ job = 101, nodelist = "gb[03-04]" }
    assert.equal("bad-input", outcome)
    assert.matches("cannot stand in: node gb04 is in domain b1 there and in b2 in the file", message, 1, true)
    assert.same({}, s:writes()) -- the node list untouched (job 100's was current)
    assert.equal(0, s:restarts())
  end)

  it("this node not in the record, or no record at all: the file's error", function()
    local s = scenario("gb09", { file = { "gb09" }, topology = BROKEN })
    local outcome, message = s:prolog{ job = 101, nodelist = "gb09" }
    assert.equal("bad-input", outcome)
    assert.matches("line 3: domain b2: invalid hostlist", message, 1, true)
    local g = after_good()
    local other = scenario("gb09", { file = { "gb09" }, topology = BROKEN })
    other.host.set_file(RECORD, g:writes(RECORD)[1])
    outcome, message = other:prolog{ job = 101, nodelist = "gb09" }
    assert.equal("bad-input", outcome)
    assert.matches("this node gb09 is in none of its domains", message, 1, true)
  end)

  it("status names the broken file and that prologs here use the record", function()
    local s = after_good()
    local _, message = s:status{}
    assert.matches("IMEX domain map broken: prologs here use the last map that parsed (" .. RECORD
      .. "): this node in domain b1", message, 1, true)
  end)
end)

describe("default policy: racks placed at run time, not in the file (C46)", function()
  -- slurmctld's topology after `scontrol update NodeName=gb09 Topology=default:b2` (Slurm 25.11+)
  local LIVE = "BlockName=b1 BlockIndex=0 Nodes=gb[01-04] BlockSize=4\n"
    .. "BlockName=b2 BlockIndex=1 Nodes=gb[05-09] BlockSize=4\n"
    .. "AggregatedBlock=b[1-2] BlockIndex=2 Nodes=gb[01-09] BlockSize=8\n"

  local function tray(node, o)
    o = o or {}
    return testing.scenario{ node = node, nodes = NODES, files = { [TOPO] = C29_CONF }, file = { node },
      settings = o.settings, scontrol = o.scontrol or { stdout = LIVE }, nvidia_smi = o.nvidia_smi,
      unit = o.unit }
  end

  it("a node slurmctld placed in b2: every node of the job writes the same list, asking slurmctld once",
    function()
    local bytes = {}
    for _, node in ipairs { "gb05", "gb06", "gb09" } do
      local s = tray(node)
      local outcome, message, _, ctx = s:prolog{ job = 46, nodelist = "gb[05-06],gb09" }
      assert.equal("ok", outcome, message)
      assert.same({ "gb05", "gb06", "gb09" }, s:file_nodes())
      assert.equal("b2", ctx.domain.name)
      assert.matches("^slurmctld %(topology default; files: " .. TOPO:gsub("%p", "%%%0") .. "%)$",
        ctx.domain.source)
      assert.same({ { "/usr/bin/scontrol", "show", "topology" } }, s.host.runs_of("scontrol"))
      local asked = table.concat(s:logs("info"), "\n")
      assert.matches("asked slurmctld for topology default (scontrol show topology, ", asked, 1, true)
      assert.matches(TOPO .. " places no unit for gb09; slurmctld_topology = \"off\" never asks", asked, 1,
        true)
      bytes[node] = s:file()
    end
    assert.equal(bytes.gb05, bytes.gb09)
    assert.equal(bytes.gb06, bytes.gb09)
  end)

  it("a job the files place whole never asks slurmctld (the fast path stays as it was)", function()
    local s = tray("gb05")
    local outcome, message = s:prolog{ job = 47, nodelist = "gb[05-06]" }
    assert.equal("ok", outcome, message)
    assert.same({}, s.host.runs_of("scontrol"))
  end)

  it("no source places the tray: not-placed (exit 24) on it, naming what was asked; nothing changed",
    function()
    local s = tray("gb09", { scontrol = { stdout = "BlockName=b1 BlockIndex=0 Nodes=gb[01-04] BlockSize=4\n"
      .. "BlockName=b2 BlockIndex=1 Nodes=gb[05-08] BlockSize=4\n" } })
    local outcome, message = s:prolog{ job = 48, nodelist = "gb[05-06],gb09" }
    assert.equal("not-placed", outcome)
    assert.matches("node gb09 runs IMEX (its GPUs are on an NVLink fabric (GPU 0: fabric.state Completed",
      message, 1, true)
    assert.matches("but is in no IMEX domain of slurmctld (topology default; files: " .. TOPO .. "); "
      .. "slurmctld asked: not placed, job 48 not started here without IMEX", message, 1, true)
    assert.same({}, s.host.writes)
    assert.same({}, s:unit_jobs())
    -- slurmctld cannot be reached: named too
    s = tray("gb09", { scontrol = { status = 1, stderr = "slurm_load_topo error: Unable to contact slurm "
      .. "controller (connect failure)\n" } })
    outcome, message = s:prolog{ job = 48, nodelist = "gb[05-06],gb09" }
    assert.equal("not-placed", outcome)
    assert.matches("slurmctld asked, no usable answer: scontrol show topology exited 1: slurm_load_topo "
      .. "error: "
      .. "Unable to contact slurm controller", message, 1, true)
    -- slurmctld_topology = "off": not asked, and said
    s = tray("gb09", { settings = { slurmctld_topology = "off" } })
    outcome, message = s:prolog{ job = 48, nodelist = "gb[05-06],gb09" }
    assert.equal("not-placed", outcome)
    assert.matches('slurmctld not asked (slurmctld_topology = "off")', message, 1, true)
    assert.same({}, s.host.runs_of("scontrol"))
  end)

  it("an unplaced node runs IMEX by its GPUs, else by its active unit; no NVLink is a skip", function()
    -- nvidia-smi absent: the active unit decides
    local s = tray("gb10", { nvidia_smi = testing.ABSENT })
    local outcome, message = s:prolog{ job = 49, nodelist = "gb10" }
    assert.equal("not-placed", outcome)
    assert.matches("runs IMEX (nvidia-imex.service is active)", message, 1, true)
    s = tray("gb10", { nvidia_smi = testing.ABSENT, unit = "inactive" })
    outcome, message = s:prolog{ job = 49, nodelist = "gb10" }
    assert.equal("skipped", outcome)
    assert.matches("not an IMEX node (nvidia-imex.service is inactive and the fabric unknown)", message, 1,
      true)
    -- GPUs still registering count as on the fabric; all N/A (no NVSwitch) do not
    s = tray("gb10", { nvidia_smi = testing.gpus({ { state = "In Progress", cluster_uuid = "N/A",
      clique_id = "N/A" } }) })
    assert.equal("not-placed", (s:prolog{ job = 49, nodelist = "gb10" }))
    s = tray("gb10", { nvidia_smi = testing.FABRIC_NONE })
    assert.equal("skipped", (s:prolog{ job = 49, nodelist = "gb10" }))
  end)

  it("health (every HealthCheckInterval) never asks slurmctld", function()
    local s = testing.scenario{ node = "gb09", nodes = NODES, files = { [TOPO] = C29_CONF },
      file = { "gb09" },
      scontrol = { stdout = LIVE } }
    local outcome, message = s:health{}
    assert.equal("ok", outcome, message)
    assert.same({}, s.host.runs_of("scontrol"))
  end)

  it("status asks slurmctld for a node the files do not place, and shows its rack", function()
    local s = testing.scenario{ node = "gb09", nodes = NODES, files = { [TOPO] = C29_CONF },
      file = { "gb09" },
      scontrol = { stdout = LIVE } }
    local outcome, message, out = s:status{}
    assert.equal("ok", outcome, message)
    assert.matches("\ndomain       b2 gb[05-09] (from slurmctld (topology default; files: " .. TOPO .. "))\n",
      out,
      1, true)
  end)
end)

describe("default policy: racks as leaf switches of a tree (C45)", function()
  local TREE = "SwitchName=rack1 Nodes=gb[01-04]\nSwitchName=rack2 Nodes=gb[05-08]\nSwitchName=nb1 "
    .. "Switches=rack[1-2]\n"

  it("auto: a tree defines no NVLink domain, said in the log; the job is one domain", function()
    local s = scenario("gb03", { topology = TREE })
    local outcome, message, _, ctx = s:prolog{ job = 45, nodelist = "gb[03-06]" }
    assert.equal("ok", outcome, message)
    assert.equal("none", ctx.domain.kind)
    assert.same({ "gb03", "gb04", "gb05", "gb06" }, s:file_nodes())
    assert.matches(TOPO
      .. " defines a tree topology (SwitchName= lines) and no block topology: a tree defines "
      .. "no NVLink domain", s:logs("warning")[1], 1, true)
  end)

  it("domain_map = \"tree\": each leaf switch is a rack (the C29 split)", function()
    for node, list in pairs { gb03 = { "gb03", "gb04" }, gb06 = { "gb05", "gb06" } } do
      local s = scenario(node, { topology = TREE, settings = { domain_map = "tree" } })
      local outcome, message, _, ctx = s:prolog{ job = 45, nodelist = "gb[03-06]" }
      assert.equal("ok", outcome, message)
      assert.same(list, s:file_nodes())
      assert.equal("tree", ctx.domain.kind)
      assert.equal(node == "gb03" and "rack1" or "rack2", ctx.domain.name)
    end
  end)
end)

describe("default policy: several topologies bound to partitions (C47)", function()
  local YAML = [[
- topology: eth
  cluster_default: true
  tree:
    switches:
      - switch: top
        nodes: gb[01-12]
- topology: gb200-racks
  block:
    blocks:
      - block: nvl0
        nodes: gb[01-04]
      - block: nvl1
        nodes: gb[05-08]
- topology: gb300-racks
  block:
    blocks:
      - block: nvl0
        nodes: gb[09-12]
]]
  local CONF = "PartitionName=gb200 Nodes=gb[01-08] Topology=gb200-racks\nPartitionName=gb300 "
    .. "Nodes=gb[09-12] "
    .. "Topology=gb300-racks\n"

  local function part(node, partition, yaml)
    local s = testing.scenario{ node = node, nodes = NODES, file = { node },
      files = { ["/etc/slurm/topology.yaml"] = yaml or YAML, ["/etc/slurm/slurm.conf"] = CONF } }
    return s, { job = 47, nodelist = "gb[03-06]", env = { SLURM_JOB_PARTITION = partition,
      SLURM_CONF = "/etc/slurm/slurm.conf" } }
  end

  it("job gb[03-06] in partition gb200: its topology's racks, every node at once", function()
    for node, list in pairs { gb03 = { "gb03", "gb04" }, gb04 = { "gb03", "gb04" }, gb05 = { "gb05", "gb06" },
      gb06 = { "gb05", "gb06" } } do
      local s, job = part(node, "gb200")
      local outcome, message, _, ctx = s:prolog(job)
      assert.equal("ok", outcome, message)
      assert.same(list, s:file_nodes())
      assert.equal("gb200-racks", ctx.domain.topology)
      assert.matches("(topology gb200-racks) from /etc/slurm/topology.yaml", table.concat(s:logs("info"),
        "\n"),
        1, true)
    end
  end)

  it("gb300 nodes placed the other way by gb200-racks: a gb300 job is not bad input", function()
    local yaml = YAML:gsub("nodes: gb%[09%-12%]", "nodes: gb[05-06]")
    local s, job = part("gb05", "gb300", yaml)
    job.nodelist = "gb[05-06]"
    local outcome, message, _, ctx = s:prolog(job)
    assert.equal("ok", outcome, message)
    assert.equal("gb300-racks", ctx.domain.topology)
    -- no binding and a tree default: the conflict is real, named, nothing changed
    s, job = part("gb05", "other", yaml)
    outcome, message = s:prolog(job)
    assert.equal("bad-input", outcome)
    assert.matches("node gb05 is in block nvl1 of topology gb200-racks (/etc/slurm/topology.yaml line 12) "
      .. "and in "
      .. "block nvl0 of topology gb300-racks (line 17); the job's topology (eth, a tree topology) does not "
        .. "decide: "
      .. "bind the job's partition to one (PartitionName=other ... Topology=NAME in slurm.conf)", message, 1,
        true)
    assert.same({}, s.host.writes)
  end)
end)
