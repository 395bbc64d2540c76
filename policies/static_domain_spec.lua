-- SPDX-License-Identifier: Apache-2.0
-- Specs of the static-domain site policy: verify only, never rewrite, start, restart or stop.
local testing = require("imexguard.testing")
local outcomes = require("imexguard.outcomes")
local P = require("static_domain")

-- The rack: n1..n4 in the static list the daemon was started with at boot.
local RACK = { "n1", "n2", "n3", "n4" }

local function untouched(s)
  assert.same({}, s.host.writes)
  assert.same({}, s:unit_jobs())
  assert.equal(0, s.host.count("lock"))
  assert.equal(0, s.host.count("unit_reset_failed"))
end

describe("static_domain policy", function()
  it("a job on a subset of a healthy domain: ok, nothing changed", function()
    local s = testing.scenario{ policy = P, file = RACK }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1,3]" }
    assert.equal("ok", outcome)
    assert.matches("job's 2 nodes are healthy", message)
    assert.matches("nothing rewritten or restarted", message)
    untouched(s)
    assert.same(RACK, s:file_nodes())
  end)

  it("domain_map = \"none\", nodes outside the static domain: bad-input naming them, nothing changed",
    function()
    local s = testing.scenario{ policy = P, file = { "n1", "n2" }, settings = { domain_map = "none" },
      nodes = { n1 = "10.0.0.1", n2 = "10.0.0.2", n3 = "10.0.0.3", n4 = "10.0.0.4", n5 = "10.0.0.5" } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-5]" }
    assert.equal("bad-input", outcome)
    assert.equal(2, outcomes.exit_code(outcome))
    assert.matches("nodes n3 %(10.0.0.3%), n4 %(10.0.0.4%), n5 %(10.0.0.5%) are not in the static IMEX "
      .. "domain of node n1", message)
    assert.matches(testing.NODES, message, 1, true)
    untouched(s)
    assert.equal(0, s.host.count("run"))
  end)

  it("a stopped daemon is never started: domain-unhealthy on this node", function()
    local s = testing.scenario{ policy = P, file = RACK, unit = "failed" }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("domain-unhealthy", outcome)
    assert.matches("nvidia%-imex%.service is failed", message)
    assert.matches("never starts it", message)
    untouched(s)
  end)

  it("a peer of the job unhealthy: peers-unhealthy naming it", function()
    local s = testing.scenario{ policy = P, file = RACK, mesh = { unhealthy = { n2 = "UNAVAILABLE" } } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("peers-unhealthy", outcome)
    assert.matches(": n2: status UNAVAILABLE", message)
    untouched(s)
  end)

  it("a rack node outside the job being down does not hold the job up", function()
    local s = testing.scenario{ policy = P, file = RACK, mesh = { unhealthy = { n4 = "UNAVAILABLE" } } }
    local t0 = s.host.now()
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("ok", outcome)
    assert.matches("outside the job: 10.0.0.4", message)
    assert.equal(1, #s.host.runs_of("nvidia-imex-ctl"))
    assert.equal(1, #s.host.runs_of("nvidia-smi"))
    assert.equal(0, s.host.count("sleep"))
    assert.is_true(s.host.now() - t0 < 1)
  end)

  it("no static list on the node: domain-unhealthy naming the file", function()
    local s = testing.scenario{ policy = P, file = false }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("domain-unhealthy", outcome)
    assert.matches("missing or empty", message)
    untouched(s)
  end)

  it("epilog and plan change nothing", function()
    local s = testing.scenario{ policy = P, file = RACK }
    assert.equal("ok", (s:epilog{ job = 101 }))
    local outcome, message = s:plan{ job = 101, nodelist = "n[1-2]" }
    assert.equal("ok", outcome)
    assert.matches("would verify only", message)
    assert.matches("job's nodes healthy", message)
    untouched(s)
  end)
  it("the whole rack in a static list not in hostlist order: ok (the file's order counts)", function()
    local s = testing.scenario{ policy = P, file = { "n3", "n1", "n4", "n2" } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-4]" }
    assert.equal("ok", outcome, message)
    untouched(s)
  end)

  it("a configuration fault (peers UNAVAILABLE, links CONNECTED): not healthy, peers not blamed", function()
    local all = { n1 = "CONNECTED", n2 = "CONNECTED", n3 = "CONNECTED", n4 = "CONNECTED" }
    local s = testing.scenario{ policy = P, file = RACK, mesh = { status = "DEGRADED", nodes = {
      { host = "n1", connections = all },
      { host = "n2", status = "UNAVAILABLE" }, { host = "n3", status = "UNAVAILABLE" },
      { host = "n4", status = "UNAVAILABLE" } } } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("config-fault", outcome)
    assert.matches("configuration fault", message)
    untouched(s)
  end)

  describe("a job over two racks (C29, C30)", function()
    local NODES = { cpu07 = "10.0.9.7" }
    for i = 1, 8 do NODES[string.format("gb%02d", i)] = string.format("10.0.1.%d", i) end
    local R1, R2 = { "gb01", "gb02", "gb03", "gb04" }, { "gb05", "gb06", "gb07", "gb08" }
    local TOPO = "BlockName=b1 Nodes=gb[01-04]\nBlockName=b2 Nodes=gb[05-08]\n"

    it("the static list is the domain: each rack verifies the job's nodes of its own rack", function()
      for _, c in ipairs({ { "gb03", R1, { "gb03", "gb04" } }, { "gb06", R2, { "gb05", "gb06" } } }) do
        local s = testing.scenario{ policy = P, node = c[1], nodes = NODES, file = c[2] }
        local outcome, message, _, ctx = s:prolog{ job = 101, nodelist = "gb[03-06],cpu07" }
        assert.equal("ok", outcome, message)
        assert.matches("job's 2 nodes are healthy", message)
        assert.equal("static", ctx.domain.kind)
        assert.same(c[3], ctx.domain.nodes)
        assert.equal(3, #ctx.domain.left_out)
        untouched(s)
        assert.same(c[2], s:file_nodes())
      end
    end)

    it("a CPU node the address map omits is left out, not bad input (C30)", function()
      local map = "gb01 10.0.1.1\ngb02 10.0.1.2\ngb03 10.0.1.3\ngb04 10.0.1.4\n"
      local s = testing.scenario{ policy = P, node = "gb01", nodes = NODES, file = R1,
        files = { ["/etc/imexguard/addresses"] = map },
        settings = { address_source = "map", address_map = "/etc/imexguard/addresses" } }
      local outcome, message, _, ctx = s:prolog{ job = 101, nodelist = "gb[01-02],cpu07" }
      assert.equal("ok", outcome, message)
      assert.same({ "gb01", "gb02" }, ctx.domain.nodes)
      assert.same({ "cpu07" }, ctx.domain.left_out)
      local s2 = testing.scenario{ policy = P, node = "gb01", nodes = NODES, file = R1,
        files = { ["/etc/imexguard/addresses"] = map },
        settings = { address_source = "map", address_map = "/etc/imexguard/addresses", domain_map = "none" } }
      outcome, message = s2:prolog{ job = 101, nodelist = "gb[01-02],cpu07" }
      assert.equal("bad-input", outcome) -- without a domain map every node needs an address
      assert.matches("node cpu07 is not in the address map", message, 1, true)
    end)

    it("a sick node of the other rack never makes this rack wait or fail", function()
      local s = testing.scenario{ policy = P, node = "gb03", nodes = NODES, file = R1,
        mesh = { unhealthy = { gb06 = "UNAVAILABLE" } } }
      local t0 = s.host.now()
      local outcome, message = s:prolog{ job = 101, nodelist = "gb[03-06]" }
      assert.equal("ok", outcome, message)
      assert.is_true(s.host.now() - t0 < 5)
    end)

    it("with Slurm's blocks: a node of this block missing from the static list is bad-input", function()
      local s = testing.scenario{ policy = P, node = "gb03", nodes = NODES, file = { "gb01", "gb02", "gb03" },
        files = { ["/etc/slurm/topology.conf"] = TOPO } }
      local outcome, message, _, ctx = s:prolog{ job = 101, nodelist = "gb[03-06]" }
      assert.equal("bad-input", outcome)
      assert.matches("node gb04 (10.0.1.4) is not in the static IMEX domain of node gb03", message, 1, true)
      assert.not_matches("gb05", message)
      assert.equal("b1", ctx.domain.name)
      untouched(s)
    end)

    it("with Slurm's blocks and a complete static list: ok for the job's nodes of this block", function()
      local s = testing.scenario{ policy = P, node = "gb05", nodes = NODES, file = R2,
        files = { ["/etc/slurm/topology.conf"] = TOPO } }
      local outcome, message = s:prolog{ job = 101, nodelist = "gb[03-06]" }
      assert.equal("ok", outcome, message)
      assert.matches("job's 2 nodes are healthy", message)
    end)
  end)
end)

-- C35: a static list of rack-slot host names (driver 570.158.01+), resolving to the trays.
describe("static_domain policy: host names in the static list (C35)", function()
  local NAMES = "rack7-slot01\nrack7-slot02\nrack7-slot03\nrack7-slot04\n"
  local function slots(extra)
    local r = { ["rack7-slot01"] = { "10.0.0.1" }, ["rack7-slot02"] = { "10.0.0.2" },
      ["rack7-slot03"] = { "10.0.0.3" }, ["rack7-slot04"] = { "10.0.0.4" } }
    for k, v in pairs(extra or {}) do r[k] = v end
    return r
  end

  it("names resolving to the trays: the job's nodes are verified against them; ok, nothing changed",
    function()
    local s = testing.scenario{ policy = P, file = NAMES, resolve = slots() }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1,3]" }
    assert.equal("ok", outcome, message)
    assert.matches("job's 2 nodes are healthy", message)
    untouched(s)
    assert.equal("ok", (s:plan{ job = 101, nodelist = "n[1-4]" }))
  end)

  it("the ctl showing the names: a peer of the job unhealthy is named by its node name", function()
    local s = testing.scenario{ policy = P, file = NAMES, resolve = slots(), mesh = { status = "DEGRADED",
      nodes = { { host = "rack7-slot01" }, { host = "rack7-slot02", status = "UNAVAILABLE" },
        { host = "rack7-slot03" }, { host = "rack7-slot04" } } } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("peers-unhealthy", outcome)
    assert.matches("n2: status UNAVAILABLE", message, 1, true)
  end)

  it("two names that resolve to one address: bad-input naming both, nothing changed (not a crash)", function()
    local s = testing.scenario{ policy = P, file = NAMES,
      resolve = slots({ ["rack7-slot03"] = { "10.0.0.2" } }) }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("bad-input", outcome, message)
    assert.matches("rack7-slot02 and rack7-slot03 are both 10.0.0.2", message, 1, true)
    untouched(s)
    assert.equal("bad-input", (s:plan{ job = 101, nodelist = "n[1-2]" }))
  end)

  it("a name that does not resolve is named; a job node not among the resolved is bad-input", function()
    local s = testing.scenario{ policy = P, file = NAMES,
      resolve = slots({ ["rack7-slot04"] = "EAI_NONAME" }) }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("ok", outcome, message)
    assert.matches("rack7%-slot04 %(resolving node rack7%-slot04 failed", s:logs("warning")[1])
    outcome, message = s:prolog{ job = 102, nodelist = "n[1-4]" }
    assert.equal("bad-input", outcome)
    assert.matches("node n4 %(10.0.0.4%) is not in the static IMEX domain", message)
    assert.matches("names that do not resolve: rack7%-slot04", message)
    untouched(s)
  end)

  it("address_source = map: the names come from the address map, like the job's", function()
    local map = "n1 10.0.0.1\nn2 10.0.0.2\nrack7-slot01 10.0.0.1\nrack7-slot02 10.0.0.2\n"
    local s = testing.scenario{ policy = P, file = "rack7-slot01\nrack7-slot02\n",
      files = { ["/etc/imexguard/addresses"] = map },
      settings = { address_source = "map", address_map = "/etc/imexguard/addresses" } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("ok", outcome, message)
    assert.equal(0, s.host.count("resolve"))
  end)

  it("status shows each node's name and address; an unresolved name is named", function()
    local s = testing.scenario{ policy = P, file = NAMES, resolve = slots() }
    local outcome, message, report = s:status{}
    assert.equal("ok", outcome, message)
    assert.matches("\n1 +10.0.0.2 +rack7%-slot02 +READY", report)
    assert.matches("\n0%* +10.0.0.1 +rack7%-slot01 +READY", report)
    s = testing.scenario{ policy = P, file = NAMES, resolve = slots({ ["rack7-slot03"] = "EAI_NONAME" }) }
    outcome, message = s:status{}
    assert.equal("ok", outcome) -- the daemon resolved it and shows it healthy; imexguard could not
    assert.matches("names that do not resolve: rack7%-slot03", message)
  end)
end)

describe("static_domain policy: the GPUs' NVLink fabric (C31, C41-C43), as the built-in policy", function()
  local ZERO = "00000000-0000-0000-0000-000000000000"
  local VERSION = "/proc/driver/nvidia/version"
  local MODULE = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    .. "(dvs-builder@U16-I3-B03-4-3)  Thu Oct 23 10:00:00 UTC 2025\n"

  it("a GPU unhealthy on the fabric: fabric-fault naming it, before the health wait; nothing changed",
    function()
      local s = testing.scenario{ policy = P, file = RACK,
        nvidia_smi = testing.gpus({ {}, { health = { summary = "Unhealthy", route_unhealthy = "True" } } }) }
      local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
      assert.equal("fabric-fault", outcome)
      assert.matches("GPU 1: fabric health Summary Unhealthy, Route Unhealthy True", message, 1, true)
      assert.equal(0, #s.host.runs_of("nvidia-imex-ctl"))
      untouched(s)
      local o, m, report = s:plan{ job = 101, nodelist = "n[1-2]" }
      assert.equal("fabric-fault", o)
      assert.matches("GPU 1", m, 1, true)
      assert.matches("\nfabric: fault: GPU 1", report)
    end)

  it("an HGX board (every GPU registered, zero ClusterUUID): ok, no fabric check, said once", function()
    local s = testing.scenario{ policy = P, file = RACK, nvidia_smi = testing.FABRIC_HGX }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("ok", outcome, message)
    local said = 0
    for _, l in ipairs(s:logs("info")) do
      if l:find("no multi-node NVLink", 1, true) then said = said + 1 end
    end
    assert.equal(1, said)
    local zero = {}
    for i = 1, 4 do zero[i] = { cluster_uuid = ZERO, clique_id = 0 } end
    zero[3] = {}
    s = testing.scenario{ policy = P, file = RACK, nvidia_smi = testing.gpus(zero) }
    assert.equal("fabric-fault", (s:prolog{ job = 102, nodelist = "n[1-2]" }))
  end)

  it("a degraded fabric: ok, the degradation in the final line", function()
    local s = testing.scenario{ policy = P, file = RACK,
      nvidia_smi = testing.gpus({ {}, {}, { health = { bandwidth = "Degraded" } }, {} }) }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("ok", outcome)
    assert.matches("degraded: GPU 2 Bandwidth Degraded", message, 1, true)
  end)

  it("NVML cannot start (driver/library version mismatch): driver-mismatch (21), both versions", function()
    for _, unknown in ipairs({ "skip", "fail" }) do
      local s = testing.scenario{ policy = P, file = RACK, nvidia_smi = testing.NVML_MISMATCH,
        files = { [VERSION] = MODULE }, settings = { on_fabric_unknown = unknown } }
      local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
      assert.equal("driver-mismatch", outcome)
      assert.equal(21, outcomes.exit_code(outcome))
      assert.matches("kernel module 580.95.05", message, 1, true)
      assert.matches("NVML library 580.105", message, 1, true)
      untouched(s)
    end
  end)
end)
