-- SPDX-License-Identifier: Apache-2.0
-- The default policy and the GPUs' NVLink fabric (field cases C31, C41, C42, C43 of
-- docs/design.md), on the kit's scenarios: the prolog's health step, health, status and plan.
-- nvidia-smi is scripted by argv (C40): the default world's GPUs are registered in one partition,
-- their fabric healthy (the kit's `-q -x` document, imexguard.testing.gpus).
local testing = require("imexguard.testing")
local outcomes = require("imexguard.outcomes")
local cjson = require("cjson")

local U = "dc6e40c4-d722-4357-9ba6-5291dd461278"

-- nvidia-smi of a 4-GPU tray with GPU `i` described by `g`, the others registered.
local function tray(i, g)
  local list = { {}, {}, {}, {} }
  list[i + 1] = g
  return testing.gpus(list)
end

local function scenario(o)
  o.policy = o.policy or "policies.default"
  return testing.scenario(o)
end

local function logged(s, level, text)
  local n = 0
  for _, m in ipairs(s:logs(level)) do if m:find(text, 1, true) then n = n + 1 end end
  return n
end

describe("default policy: the NVLink fabric (C31)", function()
  it("a healthy tray: the prolog runs nvidia-smi once after the domain is healthy, ok", function()
    local s = scenario{}
    assert.equal("ok", s:prolog{ nodelist = "n[1-2]" })
    assert.equal(1, #s.host.runs_of("nvidia-smi"))
    assert.same({ "101" }, s:registered())
    assert.equal("healthy", s.last.ctx.fabric.state)
    assert.equal(testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID, s.last.ctx.fabric.partition.id)
  end)

  describe("(a) GPU 2 In Progress, then Completed, Success", function()
    local function registering(seconds)
      local t0
      return function(_, _, h)
        t0 = t0 or h.now()
        return tray(2, { state = h.now() - t0 < seconds and "In Progress" or "Completed" })
      end
    end

    it("4 s: the prolog waits, bounded and paced, then ok", function()
      local s = scenario{ nvidia_smi = registering(4) }
      local t0 = s.host.now()
      local o, m = s:prolog{ nodelist = "n[1-2]" }
      assert.equal("ok", o)
      assert.matches("after waiting", m)
      assert.is_true(s.host.now() - t0 >= 4)
      local polls = #s.host.runs_of("nvidia-smi")
      assert.is_true(polls > 2 and polls <= 1 + 4 / 0.25 + 4, polls)
      assert.same({ "101" }, s:registered())
    end)

    it("12 s with fabric_timeout = 30: ok; 40 s: fabric-fault naming GPU 2, job not registered", function()
      assert.equal("ok", (scenario{ nvidia_smi = registering(12) }:prolog{ nodelist = "n[1-2]" }))
      local s = scenario{ nvidia_smi = registering(40) }
      local o, m = s:prolog{ nodelist = "n[1-2]" }
      assert.equal("fabric-fault", o)
      assert.equal(16, outcomes.exit_code(o))
      assert.matches("GPU 2 In Progress", m, 1, true)
      assert.same({}, s:registered())
    end)

    it("Not Started on every GPU after a reboot, then Completed: ok", function()
      local t0
      local s = scenario{ nvidia_smi = function(_, _, h)
        t0 = t0 or h.now()
        local st = h.now() - t0 < 2 and "Not Started" or "Completed"
        return testing.gpus({ { state = st }, { state = st }, { state = st }, { state = st } })
      end }
      assert.equal("ok", (s:prolog{ nodelist = "n[1-2]" }))
    end)

    it("health and status do not wait: ok, the GPU named in the message", function()
      local s = scenario{ nvidia_smi = tray(2, { state = "In Progress" }) }
      local o, m = s:health{}
      assert.equal("ok", o)
      assert.matches("GPU 2 In Progress", m, 1, true)
      assert.equal(1, #s.host.runs_of("nvidia-smi"))
    end)
  end)

  describe("(b) a failed registration: this node is at fault", function()
    for _, c in ipairs({
      { 1, { status = "Insufficient Resources" }, "Insufficient Resources" },
      { 3, { status = "Unknown Error" }, "Unknown Error" },
      { 0, { cluster_uuid = "00000000-0000-0000-0000-000000000000", clique_id = 0 }, "zero ClusterUUID" },
      { 2, { state = "N/A" }, "fabric.state N/A" },
    }) do
      it("GPU " .. c[1] .. ": " .. c[3] .. ": fabric-fault naming the GPU and the field, peers not blamed",
        function()
          local s = scenario{ nvidia_smi = tray(c[1], c[2]), mesh = { unhealthy = { n2 = "UNAVAILABLE" } } }
          local o, m = s:prolog{ nodelist = "n[1-2]" }
          assert.equal("fabric-fault", o)
          assert.matches("GPU " .. c[1] .. ":", m, 1, true)
          assert.matches(c[3], m, 1, true)
          assert.matches("this node is at fault, not its peers", m, 1, true)
          assert.is_nil(m:find("10.0.0.2 (n2)", 1, true))
          assert.same({}, s:registered())
          assert.equal(0, s:restarts())
        end)
    end

    it("after a change too: the job is unregistered again, the outcome named", function()
      local s = scenario{ nvidia_smi = tray(1, { status = "Insufficient Resources" }) }
      local o, m = s:prolog{ nodelist = "n[1,3]" }
      assert.equal("fabric-fault", o)
      assert.matches("GPU 1", m, 1, true)
      assert.equal(1, s:restarts())
      assert.same({}, s:registered())
    end)

    it("health: fabric-fault with the drain line; status: the same outcome and a fabric line", function()
      local s = scenario{ nvidia_smi = tray(1, { status = "Insufficient Resources" }) }
      local o, m, report = s:health{}
      assert.equal("fabric-fault", o)
      assert.matches("GPU 1", m, 1, true)
      assert.matches("^imexguard: fabric%-fault: ", report)
      local so, _, out = s:status{}
      assert.equal("fabric-fault", so)
      assert.matches("\nfabric +fault: GPU 1: ", out)
    end)

    it("plan predicts it", function()
      local s = scenario{ nvidia_smi = tray(1, { status = "Insufficient Resources" }) }
      local o, _, out = s:plan{ nodelist = "n[1-2]" }
      assert.equal("fabric-fault", o)
      assert.matches("fabric: fault", out, 1, true)
      assert.same({}, s:writes())
    end)
  end)

  describe("(c) GPUs in different partitions", function()
    it("GPU 3 with another CliqueId than GPUs 0-2: fabric-fault naming GPU 3 and both partitions", function()
      local s = scenario{ nvidia_smi = tray(3, { clique_id = 4026 }) }
      local o, m = s:prolog{ nodelist = "n[1-2]" }
      assert.equal("fabric-fault", o)
      assert.matches("GPU 3:", m, 1, true)
      assert.matches("CliqueId 4026", m, 1, true)
      assert.matches("GPUs 0-2", m, 1, true)
      assert.matches(testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID, m, 1, true)
    end)

    it("GPU 0 with another ClusterUUID: GPU 0 named", function()
      local o, m = scenario{ nvidia_smi = tray(0, { cluster_uuid = U }) }:prolog{ nodelist = "n[1-2]" }
      assert.equal("fabric-fault", o)
      assert.matches("GPU 0:", m, 1, true)
      assert.matches(U, m, 1, true)
    end)
  end)

  describe("(d) every GPU N/A (no NVSwitch)", function()
    it("no fabric check, said once in the log; ok", function()
      local s = scenario{ nvidia_smi = testing.FABRIC_NONE }
      assert.equal("ok", (s:prolog{ nodelist = "n[1-2]" }))
      assert.equal(1, #s.host.runs_of("nvidia-smi"))
      assert.equal(1, logged(s, "info", "no multi-node NVLink"))
      assert.same({ "101" }, s:registered())
      local o = s:status{}
      assert.equal("ok", o)
    end)
  end)

  describe("(e) nvidia-smi absent, hanging, failing or garbled", function()
    for _, c in ipairs({
      { "absent", testing.ABSENT, "cannot run" },
      { "hanging", testing.HANG, "hung" },
      { "failing", { status = 9, stdout = "NVIDIA-SMI has failed because it couldn't communicate with "
        .. "the NVIDIA driver.\n" }, "exited 9" },
      { "garbled", "0, Completed\n", "unparsable" },
    }) do
      it(c[1] .. ": skipped with one warning (default), or fabric-unknown (17) with on_fabric_unknown = fail",
        function()
          local s = scenario{ nvidia_smi = c[2] }
          local t0 = s.host.now()
          local o, m = s:prolog{ nodelist = "n[1-2]" }
          assert.equal("ok", o)
          assert.matches(c[3], m, 1, true)
          assert.equal(1, logged(s, "warning", c[3]))
          assert.is_true(s.host.now() - t0 < 15) -- never a hang: one call of at most 10 s
          s = scenario{ nvidia_smi = c[2], settings = { on_fabric_unknown = "fail" } }
          o, m = s:prolog{ nodelist = "n[1-2]" }
          assert.equal("fabric-unknown", o)
          assert.equal(17, outcomes.exit_code(o))
          assert.matches(c[3], m, 1, true)
          assert.same({}, s:registered())
        end)
    end
  end)

  it("the prolog starts nvidia-smi before the lock; a prolog that ends before step 8a kills it", function()
    local s = scenario{ jobs = { { id = 100, nodes = "n[1-2]" } } }
    local o = s:prolog{ nodelist = "n[1,3]" } -- a registered job on another list: conflict
    assert.equal("conflict", o)
    assert.equal(1, #s.host.runs_of("nvidia-smi"))
    assert.is_truthy(s.host.spawns[1].killed)
    assert.is_nil(s.host.spawns[1].waited)
  end)

  it("fabric_check = off: nvidia-smi never runs", function()
    local s = scenario{ nvidia_smi = tray(1, { status = "Insufficient Resources" },
      nil), settings = { fabric_check = "off" } }
    assert.equal("ok", (s:prolog{ nodelist = "n[1-2]" }))
    assert.equal("ok", (s:status{}))
    assert.equal(0, #s.host.runs_of("nvidia-smi"))
  end)

  it("the domain map names a partition (want.domain): another identity is this node's fault", function()
    local P = require("policies.default").extend()
    local default = require("policies.default")
    function P:desired(ctx, info)
      local want, o, m = default.desired(self, ctx, info)
      if want then want.domain = { name = U .. ".7", nodes = { "n1", "n2" }, source = "spec" } end
      return want, o, m
    end
    local o, m = scenario{ policy = P }:prolog{ nodelist = "n[1-2]" }
    assert.equal("fabric-fault", o)
    assert.matches(U .. ".7", m, 1, true)
    assert.matches(testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID, m, 1, true)
  end)

  it("a domain map that names a partition by its fabric identity: this node's GPUs are compared", function()
    local function prolog(name)
      local map = "n1 10.0.0.1 " .. name .. "\nn2 10.0.0.2 " .. name .. "\n"
      return scenario{ files = { ["/etc/imexguard/addresses"] = map },
        settings = { address_source = "map", address_map = "/etc/imexguard/addresses" } }
        :prolog{ nodelist = "n[1-2]" }
    end
    local o, m = prolog(U .. ":7")
    assert.equal("fabric-fault", o)
    assert.matches(U .. ".7", m, 1, true)
    o, m = prolog(testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID)
    assert.equal("ok", o, m)
  end)

  it("status --json: the fabric's state, message and partition", function()
    local _, _, out = scenario{}:status{ json = true }
    local t = cjson.decode(out)
    assert.equal("healthy", t.fabric.state)
    assert.equal(testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID, t.fabric.partition)
  end)
end)

describe("default policy: single-node NVSwitch nodes beside the racks (C41)", function()
  local ZERO = "00000000-0000-0000-0000-000000000000"

  it("an HGX board (every GPU Completed, Success, zero ClusterUUID): ok, no fabric check, said once; "
    .. "health and status ok with the fabric line", function()
      local s = scenario{ nvidia_smi = testing.FABRIC_HGX }
      local o, m = s:prolog{ nodelist = "n[1-2]" }
      assert.equal("ok", o, m)
      assert.equal(1, logged(s, "info", "no multi-node NVLink: all 8 GPUs registered with a zero "
        .. "ClusterUUID"))
      assert.equal(0, logged(s, "warning", "NVLink"))
      assert.same({ "101" }, s:registered())
      assert.equal("ok", (s:health{}))
      local so, _, out = s:status{}
      assert.equal("ok", so)
      assert.matches("\nfabric +none: no multi%-node NVLink", out)
      local po, _, plan = s:plan{ nodelist = "n[1-2]" }
      assert.equal("ok", po)
      assert.matches("\nfabric: none: no multi%-node NVLink", plan)
    end)

  it("a zero ClusterUUID beside non-zero ones stays fabric-fault, naming the GPU", function()
    local s = scenario{ nvidia_smi = tray(3, { cluster_uuid = ZERO, clique_id = 0 }) }
    local o, m = s:prolog{ nodelist = "n[1-2]" }
    assert.equal("fabric-fault", o)
    assert.matches("GPU 3:", m, 1, true)
    assert.matches("zero ClusterUUID beside GPUs 0-2", m, 1, true)
    assert.equal("fabric-fault", (s:health{}))
  end)

  it("GPUs Not Started on a board whose platformInfo names no rack slot: not waited for, ok", function()
    local list = {}
    for i = 1, 8 do
      list[i] = { state = "Not Started", status = "N/A", cluster_uuid = "N/A", clique_id = "N/A",
        platform = { chassis_serial_number = "", slot_number = "N/A", tray_index = "N/A" },
        health = { partition_assigned = false } }
    end
    local s = scenario{ nvidia_smi = testing.gpus(list) }
    local t0 = s.host.now()
    local o, m = s:prolog{ nodelist = "n[1-2]" }
    assert.equal("ok", o, m)
    assert.is_true(s.host.now() - t0 < 1)
    assert.equal(1, #s.host.runs_of("nvidia-smi"))
    assert.equal(1, logged(s, "info", "not waited for: GPU 0 Not Started"))
  end)
end)

describe("default policy: the fabric's own health (C42)", function()
  for _, c in ipairs({
    { { summary = "Unhealthy", route_unhealthy = "True" }, "Summary Unhealthy, Route Unhealthy True" },
    { { incorrect_configuration = "Insufficient NVLinks" }, "Incorrect Configuration Insufficient NVLinks" },
  }) do
    it("GPU 1 " .. c[2] .. " while registered: fabric-fault naming the GPU and the field; health, status, "
      .. "plan the same", function()
        local s = scenario{ nvidia_smi = tray(1, { health = c[1] }),
          mesh = { unhealthy = { n2 = "UNAVAILABLE" } } }
        local o, m = s:prolog{ nodelist = "n[1-2]" }
        assert.equal("fabric-fault", o)
        assert.equal(16, outcomes.exit_code(o))
        assert.matches("GPU 1: fabric health " .. c[2], m, 1, true)
        assert.matches("this node is at fault, not its peers", m, 1, true)
        assert.is_nil(m:find("10.0.0.2 (n2)", 1, true))
        assert.same({}, s:registered())
        local ho, hm = s:health{}
        assert.equal("fabric-fault", ho)
        assert.matches("GPU 1: fabric health", hm, 1, true)
        local so, _, out = s:status{}
        assert.equal("fabric-fault", so)
        assert.matches("\nfabric +fault: GPU 1: fabric health", out)
        assert.equal("fabric-fault", (s:plan{ nodelist = "n[1-2]" }))
      end)
  end

  it("Limited Capacity, Degraded bandwidth, a recovery in progress: ok, named in the final line, health, "
    .. "status and plan; status --json lists them", function()
      local s = scenario{ nvidia_smi = testing.gpus({ {}, { health = { bandwidth = "Degraded" } },
        { health = { summary = "Limited Capacity", route_recovery_in_progress = "True" } }, {} }) }
      local o, m = s:prolog{ nodelist = "n[1-2]" }
      assert.equal("ok", o)
      assert.matches("fabric: 4 GPUs registered with the NVLink fabric, partition " .. testing.CLUSTER_UUID
        .. "." .. testing.CLIQUE_ID .. "; degraded: GPU 1 Bandwidth Degraded, GPU 2 Summary Limited "
        .. "Capacity, GPU 2 Route Recovery in progress True (jobs run, slower)", m, 1, true)
      assert.same({ "101" }, s:registered())
      local ho, hm = s:health{}
      assert.equal("ok", ho)
      assert.matches("degraded: GPU 1 Bandwidth Degraded", hm, 1, true)
      local so, sm, out = s:status{}
      assert.equal("ok", so)
      assert.matches("degraded: GPU 1 Bandwidth Degraded", sm, 1, true)
      assert.matches("\nfabric +degraded: ", out)
      local _, _, plan = s:plan{ nodelist = "n[1-2]" }
      assert.matches("\nfabric: degraded: ", plan)
      local t = cjson.decode((select(3, s:status{ json = true })))
      assert.equal("degraded", t.fabric.state)
      assert.same({ gpu = 1, field = "bandwidth", value = "Degraded" }, t.fabric.degraded[1])
      assert.equal(3, #t.fabric.degraded)
    end)

  it("a healthy fabric: status --json has an empty degraded list", function()
    local t = cjson.decode((select(3, scenario{}:status{ json = true })))
    assert.equal("healthy", t.fabric.state)
    assert.same({}, t.fabric.degraded)
  end)
end)

describe("default policy: NVML cannot start (C43)", function()
  local VERSION = "/proc/driver/nvidia/version"
  local MODULE = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    .. "(dvs-builder@U16-I3-B03-4-3)  Thu Oct 23 10:00:00 UTC 2025\n"

  for _, unknown in ipairs({ "skip", "fail" }) do
    it("driver/library version mismatch with on_fabric_unknown = " .. unknown .. ": driver-mismatch (21) "
      .. "naming both versions; the job is not registered; health, status, plan the same", function()
        local s = scenario{ nvidia_smi = testing.NVML_MISMATCH, files = { [VERSION] = MODULE },
          settings = { on_fabric_unknown = unknown } }
        local o, m = s:prolog{ nodelist = "n[1-2]" }
        assert.equal("driver-mismatch", o)
        assert.equal(21, outcomes.exit_code(o))
        assert.matches("kernel module 580.95.05 (" .. VERSION .. "), NVML library 580.105", m, 1, true)
        assert.same({}, s:registered())
        for _, cmd in ipairs({ "health", "status" }) do
          local co, cm = s[cmd](s, {})
          assert.equal("driver-mismatch", co, cmd)
          assert.matches("NVML library 580.105", cm, 1, true)
        end
        local _, _, out = s:status{}
        assert.matches("\nfabric +driver%-mismatch: NVML cannot start", out)
        assert.equal("driver-mismatch", (s:plan{ nodelist = "n[1-2]" }))
      end)
  end

  it("after a change too: the job is unregistered again", function()
    local s = scenario{ nvidia_smi = testing.NVML_MISMATCH, files = { [VERSION] = MODULE } }
    local o = s:prolog{ nodelist = "n[1,3]" }
    assert.equal("driver-mismatch", o)
    assert.same({}, s:registered())
  end)
end)
