-- SPDX-License-Identifier: Apache-2.0
-- The fabric check: parsing nvidia-smi's CSV and -q answers (imexguard.smi; field reports in
-- tests/fixtures/nvidia-smi/), judging a node's GPUs (imexguard.fabricjudge), the domain map's
-- partition name, and the bounded check on the kit's host (imexguard.fabric).
local fabric = require("imexguard.fabric")
local smi = require("imexguard.smi")
local fabricjudge = require("imexguard.fabricjudge")
local testing = require("imexguard.testing")

local U = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
local V = "dc6e40c4-d722-4357-9ba6-5291dd461278"

local function fixture(name)
  local f = assert(io.open("tests/fixtures/nvidia-smi/" .. name))
  local t = f:read("a")
  f:close()
  return t
end

local function line(i, state, status, uuid, clique)
  return string.format("%d, %s, %s, %s, %s", i, state, status, uuid, clique)
end

describe("smi.parse_csv", function()
  it("reads the field reports' CSV", function()
    local g = assert(smi.parse_csv(fixture("csv-4gpu-completed.csv")))
    assert.equal(4, #g)
    assert.same({ index = 3, na = false, state = "Completed", status = "Success", cluster_uuid = U,
      clique_id = 4026 }, g[4])
    g = assert(smi.parse_csv(fixture("csv-no-nvswitch.csv")))
    assert.equal(4, #g)
    for _, x in ipairs(g) do
      assert.is_true(x.na)
      assert.is_nil(x.state)
      assert.is_nil(x.status)
      assert.is_nil(x.cluster_uuid)
      assert.is_nil(x.clique_id)
    end
    g = assert(smi.parse_csv(fixture("csv-insufficient-resources.csv")))
    assert.equal("Insufficient Resources", g[1].status)
    assert.equal(smi.ZERO_UUID, g[1].cluster_uuid)
    assert.equal(0, g[1].clique_id)
  end)

  it("takes blanks, tabs, CRLF, blank lines, bracketed N/A and an upper-case UUID", function()
    local g = assert(smi.parse_csv("\n  0 ,Completed,   Success ,\t" .. U:upper() .. " ,32766\r\n\n"
      .. "1, [N/A], [Not Supported], N/A, [N/A]\r\n   \n"))
    assert.equal(2, #g)
    assert.equal(U, g[1].cluster_uuid)
    assert.equal(32766, g[1].clique_id)
    assert.is_true(g[2].na)
  end)

  it("keeps every state and any status text", function()
    local g = assert(smi.parse_csv(table.concat({ line(0, "Not Started", "N/A", "N/A", "N/A"),
      line(1, "In Progress", "N/A", "N/A", "N/A"), line(2, "Completed", "Unknown Error", U, 7) }, "\n")))
    assert.equal("Not Started", g[1].state)
    assert.equal("In Progress", g[2].state)
    assert.equal("Unknown Error", g[3].status)
  end)

  local bad = {
    { "", "no GPU line" },
    { "\n \n", "no GPU line" },
    { "0, Completed, Success, " .. U, "4 fields instead of 5" },
    { "0, Completed, Success, " .. U .. ", 1, extra", "6 fields instead of 5" },
    { "x, Completed, Success, " .. U .. ", 1", "index" },
    { "-1, Completed, Success, " .. U .. ", 1", "index" },
    { "0, Completed, Success, " .. U .. ", 1\n0, Completed, Success, " .. U .. ", 1", "listed twice" },
    { "0, Done, Success, " .. U .. ", 1", "unknown fabric.state" },
    { "0, Completed, , " .. U .. ", 1", "empty fabric.status" },
    { "0, Completed, Success, 9c6f5af3, 1", "not a UUID" },
    { "0, Completed, Success, " .. U .. ", 1.5", "not a number" },
    { "0, Completed, Success, " .. U .. ", -3", "not a number" },
    { 'Field "fabric.state" is not a valid field to query.', "fields instead of 5" },
    { "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "fields" },
    { "\0\1\2", "fields" },
  }
  for _, c in ipairs(bad) do
    it("refuses " .. string.format("%q", c[1]):sub(1, 50) .. " naming what is wrong", function()
      local g, err = smi.parse_csv(c[1])
      assert.is_nil(g)
      assert.matches(c[2], err, 1, true)
      assert.is_nil(err:find("\n"))
    end)
  end

  it("refuses a non-string", function()
    assert.is_nil(smi.parse_csv(nil))
  end)
end)

describe("smi.parse_q (nvidia-smi -q, Fabric section)", function()
  it("reads the field reports", function()
    local g = assert(smi.parse_q(fixture("q-insufficient-resources.txt")))
    assert.same({ index = 0, na = false, state = "Completed", status = "Insufficient Resources",
      cluster_uuid = smi.ZERO_UUID, clique_id = 0 }, g[1])
    g = assert(smi.parse_q(fixture("q-completed-health-unhealthy.txt")))
    assert.same({ index = 0, na = false, state = "Completed", status = "Success", cluster_uuid = V,
      clique_id = 2, health = { summary = "Unhealthy", bandwidth = "Full" } }, g[1])
  end)

  it("numbers several GPUs in order; a GPU without a Fabric section is N/A", function()
    local g = assert(smi.parse_q("GPU 00000008:01:00.0\n    Fabric\n        State : In Progress\n"
      .. "        Status : N/A\n        CliqueId : N/A\n        ClusterUUID : N/A\n    Other\n"
      .. "        State : Completed\nGPU 00000009:01:00.0\n    Product Name : NVIDIA GB200\n"))
    assert.equal(2, #g)
    assert.equal("In Progress", g[1].state)
    assert.is_true(g[2].na)
    assert.is_nil(smi.parse_q("no gpus here"))
  end)
end)

describe("fabricjudge.judge", function()
  local function judge(lines) return fabricjudge.judge(assert(smi.parse_csv(table.concat(lines, "\n")))) end
  local function healthy(n, uuid, clique)
    local t = {}
    for i = 0, n - 1 do t[#t + 1] = line(i, "Completed", "Success", uuid or U, clique or 32766) end
    return t
  end

  it("healthy: every GPU registered in one partition, named", function()
    local v = judge(healthy(4))
    assert.equal("healthy", v.kind)
    assert.same({ cluster_uuid = U, clique_id = 32766, id = U .. ".32766" }, v.partition)
    assert.matches(U .. ".32766", v.message, 1, true)
    assert.equal("healthy", judge(healthy(1)).kind)
    assert.equal("healthy", fabricjudge.judge(assert(smi.parse_csv(fixture("csv-4gpu-completed.csv")))).kind)
  end)

  it("none: every GPU N/A (no NVSwitch)", function()
    local v = fabricjudge.judge(assert(smi.parse_csv(fixture("csv-no-nvswitch.csv"))))
    assert.equal("none", v.kind)
    assert.matches("no multi%-node NVLink", v.message)
  end)

  it("pending: a GPU Not Started or In Progress, the others registered", function()
    local t = healthy(4)
    t[3] = line(2, "In Progress", "N/A", "N/A", "N/A")
    local v = judge(t)
    assert.equal("pending", v.kind)
    assert.same({ 2 }, v.pending)
    assert.matches("GPU 2 In Progress", v.message, 1, true)
    t[1] = line(0, "Not Started", "N/A", "N/A", "N/A")
    v = judge(t)
    assert.same({ 0, 2 }, v.pending)
  end)

  local faults = {
    { "a failed status", 1, line(1, "Completed", "Insufficient Resources", U, 32766),
      { "GPU 1", "fabric.status Insufficient Resources", "failed" } },
    { "Unknown Error", 2, line(2, "Completed", "Unknown Error", U, 32766), { "GPU 2", "Unknown Error" } },
    { "a zero ClusterUUID", 3, line(3, "Completed", "Success", smi.ZERO_UUID, 0),
      { "GPU 3", "zero ClusterUUID" } },
    { "no ClusterUUID", 0, line(0, "Completed", "Success", "N/A", 5), { "GPU 0", "zero ClusterUUID" } },
    { "no CliqueId", 1, line(1, "Completed", "Success", U, "N/A"), { "GPU 1", "no CliqueId" } },
    { "a GPU N/A beside registered ones", 2, line(2, "N/A", "N/A", "N/A", "N/A"),
      { "GPU 2", "fabric.state N/A" } },
    { "another CliqueId", 3, line(3, "Completed", "Success", U, 4026),
      { "GPU 3", "CliqueId 4026", "GPUs 0-2", U .. ".32766" } },
    { "another ClusterUUID", 1, line(1, "Completed", "Success", V, 32766),
      { "GPU 1", V, "GPUs 0, 2, 3" } },
  }
  for _, c in ipairs(faults) do
    it("fault: " .. c[1] .. " names the GPU and its fields", function()
      local t = healthy(4)
      t[c[2] + 1] = c[3]
      local v = judge(t)
      assert.equal("fault", v.kind)
      assert.equal(c[2], v.gpu)
      for _, want in ipairs(c[4]) do assert.matches(want, v.message, 1, true) end
    end)
  end

  it("a fault wins over a GPU still registering (a failed status is final)", function()
    local t = healthy(4)
    t[1] = line(0, "In Progress", "N/A", "N/A", "N/A")
    t[2] = line(1, "Completed", "Insufficient Resources", smi.ZERO_UUID, 0)
    assert.equal("fault", judge(t).kind)
  end)

  it("two partitions of two GPUs each: the first printed keeps the majority's place", function()
    local v = judge({ line(0, "Completed", "Success", U, 1), line(1, "Completed", "Success", U, 1),
      line(2, "Completed", "Success", U, 2), line(3, "Completed", "Success", U, 2) })
    assert.equal("fault", v.kind)
    assert.equal(2, v.gpu)
    assert.matches("GPUs 0-1", v.message, 1, true)
  end)

  it("the -q field report with Insufficient Resources is a fault", function()
    local v = fabricjudge.judge(assert(smi.parse_q(fixture("q-insufficient-resources.txt"))))
    assert.equal("fault", v.kind)
    assert.matches("Insufficient Resources", v.message, 1, true)
  end)
end)

describe("fabricjudge over the real -q -x captures (C41, C42)", function()
  local host = require("helpers").host()
  -- the checked GPUs of a capture, each <gpu> block passed through edit(block, index) first
  local function gpus(name, edit)
    local n = -1
    local text = fixture("qx-" .. name .. ".xml"):gsub("<gpu id=.-</gpu>", function(b)
      n = n + 1
      return edit and edit(b, n) or b
    end)
    return assert(smi.fabric_gpus(assert(smi.parse(host, text))))
  end
  local function set(b, tag, value)
    local r, k = b:gsub("<" .. tag .. ">[^<]*</" .. tag .. ">",
      "<" .. tag .. ">" .. value .. "</" .. tag .. ">")
    assert(k == 1, tag)
    return r
  end
  local GB = "00000001-0000-0000-0000-000000000001"

  it("GB200 and GB300 trays: healthy, in their partition; a rack by their platformInfo", function()
    local v = fabricjudge.judge(gpus("gb200"))
    assert.equal("healthy", v.kind)
    assert.equal(GB .. ".2", v.partition.id)
    assert.equal("rack", v.placement)
    v = fabricjudge.judge(gpus("gb300"))
    assert.equal("healthy", v.kind) -- incorrect_configuration None is no fault
    assert.equal(GB .. ".32766", v.partition.id)
  end)

  it("C41: HGX B200 and H100 (every GPU registered, zero ClusterUUID): none, never a fault", function()
    for _, name in ipairs({ "b200", "h100" }) do
      local v = fabricjudge.judge(gpus(name))
      assert.equal("none", v.kind, name)
      assert.matches("no multi-node NVLink: all 8 GPUs registered with a zero ClusterUUID", v.message, 1,
        true)
      assert.equal("single", v.placement, name)
      assert.is_nil(v.warn)
    end
    assert.equal("none", fabricjudge.judge(gpus("a100")).kind)
  end)

  it("C41: a zero ClusterUUID beside non-zero ones on one node stays a fault, naming the GPU", function()
    local v = fabricjudge.judge(gpus("gb200", function(b, i)
      if i == 3 then b = set(set(b, "clusterUuid", smi.ZERO_UUID), "cliqueId", "0") end
      return b
    end))
    assert.equal("fault", v.kind)
    assert.equal(3, v.gpu)
    assert.matches("GPU 3:", v.message, 1, true)
    assert.matches("zero ClusterUUID beside GPUs 0-2 in partition " .. GB .. ".2", v.message, 1, true)
  end)

  it("C41: an HGX board still registering (Fabric Manager not done, or partition mode): none, not "
    .. "waited for; a rack's tray registering is pending (waited for)", function()
      local function starting(b) return set(set(b, "state", "Not Started"), "status", "N/A") end
      for _, name in ipairs({ "b200", "h100" }) do
        local v = fabricjudge.judge(gpus(name, starting))
        assert.equal("none", v.kind, name)
        assert.matches("platformInfo names no rack slot or tray", v.message, 1, true)
        assert.matches("not waited for: GPU 0 Not Started", v.message, 1, true)
      end
      local v = fabricjudge.judge(gpus("gb200", function(b, i) return i == 1 and starting(b) or b end))
      assert.equal("pending", v.kind)
      assert.same({ 1 }, v.pending)
      v = fabricjudge.judge(gpus("gb200", starting))
      assert.equal("pending", v.kind) -- slot 14, tray 4: a rack's tray
      -- the CSV answer tells nothing of the place: waited for, as before
      v = fabricjudge.judge(assert(smi.parse_csv("0, Not Started, N/A, N/A, N/A\n")))
      assert.equal("pending", v.kind)
      assert.is_nil(v.placement)
    end)

  it("C41: every GPU of a rack's tray registered with a zero ClusterUUID: none, with a warning naming "
    .. "the tray's place", function()
      local v = fabricjudge.judge(gpus("gb200", function(b)
        return set(set(b, "clusterUuid", smi.ZERO_UUID), "cliqueId", "0")
      end))
      assert.equal("none", v.kind)
      assert.is_true(v.warn)
      assert.matches("slot 14, tray 4 of chassis 1820000000001", v.message, 1, true)
    end)

  local faults = {
    { "summary", "Unhealthy", "Summary Unhealthy" },
    { "route_unhealthy", "True", "Route Unhealthy True" },
    { "incorrect_configuration", "Insufficient NVLinks", "Incorrect Configuration Insufficient NVLinks" },
    { "incorrect_configuration", "Incompatible GPU Firmware", "Incorrect Configuration Incompatible GPU" },
  }
  for _, c in ipairs(faults) do
    it("C42: GPU 1 " .. c[3] .. " while registered Completed, Success: a fault naming the GPU and the field",
      function()
        local v = fabricjudge.judge(gpus("gb200", function(b, i)
          return i == 1 and set(b, c[1], c[2]) or b
        end))
        assert.equal("fault", v.kind)
        assert.equal(1, v.gpu)
        assert.matches("GPU 1: fabric health " .. c[3], v.message, 1, true)
      end)
  end

  it("C42: Unhealthy with a route unhealthy names both fields; two GPUs at fault are both named", function()
    local v = fabricjudge.judge(gpus("gb300", function(b, i)
      if i == 1 or i == 3 then b = set(set(b, "summary", "Unhealthy"), "route_unhealthy", "True") end
      return b
    end))
    assert.equal("fault", v.kind)
    assert.equal(1, v.gpu)
    assert.matches("GPU 1: fabric health Summary Unhealthy, Route Unhealthy True; GPU 3: fabric health "
      .. "Summary Unhealthy, Route Unhealthy True", v.message, 1, true)
  end)

  it("C42: the field report of a GB200 GPU Completed, Success with Summary Unhealthy is a fault", function()
    local v = fabricjudge.judge(assert(smi.parse_q(fixture("q-completed-health-unhealthy.txt"))))
    assert.equal("fault", v.kind)
    assert.matches("GPU 0: fabric health Summary Unhealthy", v.message, 1, true)
  end)

  local degraded = {
    { "summary", "Limited Capacity", "Summary Limited Capacity" },
    { "bandwidth", "Degraded", "Bandwidth Degraded" },
    { "route_recovery_in_progress", "True", "Route Recovery in progress True" },
    { "access_timeout_recovery", "True", "Access Timeout Recovery True" },
  }
  for _, c in ipairs(degraded) do
    it("C42: GPU 2 " .. c[3] .. ": degraded (jobs run, slower), named", function()
      local v = fabricjudge.judge(gpus("gb200", function(b, i) return i == 2 and set(b, c[1], c[2]) or b end))
      assert.equal("degraded", v.kind)
      assert.equal(GB .. ".2", v.partition.id)
      assert.same({ { gpu = 2, field = c[1], label = fabricjudge.LABELS[c[1]], value = c[2] } }, v.degraded)
      assert.matches("degraded: GPU 2 " .. c[3], v.message, 1, true)
    end)
  end

  it("C42: a fault outranks a degradation; N/A health fields (H100, B200) are no finding", function()
    local v = fabricjudge.judge(gpus("gb200", function(b, i)
      if i == 0 then b = set(b, "bandwidth", "Degraded") end
      if i == 2 then b = set(b, "summary", "Unhealthy") end
      return b
    end))
    assert.equal("fault", v.kind)
    assert.equal(2, v.gpu)
  end)
end)

describe("fabric.matches (the domain map's partition name)", function()
  local p = { cluster_uuid = U, clique_id = 32766 }
  it("a name of the form <ClusterUUID>.<CliqueId> or <ClusterUUID>:<CliqueId> is compared", function()
    assert.is_true(fabric.matches(p, U .. ".32766"))
    assert.is_true(fabric.matches(p, U:upper() .. ":32766"))
    local ok, why = fabric.matches(p, U .. ".4026")
    assert.is_false(ok)
    assert.matches(U .. ".4026", why, 1, true)
    assert.matches(U .. ".32766", why, 1, true)
    ok, why = fabric.matches(p, V .. ":32766")
    assert.is_false(ok)
    assert.matches(V .. ".32766", why, 1, true)
  end)

  it("a node without a partition is not in the named one", function()
    local ok, why = fabric.matches(nil, U .. ".1")
    assert.is_false(ok)
    assert.matches("no NVLink partition", why, 1, true)
  end)

  it("any other name: no comparison", function()
    for _, name in ipairs({ "rack1", "b1", "", U, U .. ".", U .. ".x", "9c6f5af3.1", U .. ".1.2",
      "x" .. U .. ".1" }) do
      assert.is_nil(fabric.matches(p, name), name)
    end
    assert.is_nil(fabric.matches(p, nil))
  end)
end)

describe("fabric.check on the kit's host", function()
  local function ctx(hopts, settings)
    local h = testing.host(hopts)
    return testing.ctx{ host = h, settings = settings }, h
  end

  it("runs the query through host.run with the nvidia_smi argv, bounded", function()
    local c, h = ctx({}, { nvidia_smi = { "/opt/wrap", "nvidia-smi" } })
    local r = assert(fabric.check(c))
    assert.equal("healthy", r.state)
    assert.same({ "/opt/wrap", "nvidia-smi", smi.QUERY[1], smi.QUERY[2] }, h.runs[1])
    assert.equal(r, c.fabric)
    assert.equal(testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID, r.partition.id)
  end)

  it("off: nothing runs", function()
    local c, h = ctx({}, { fabric_check = "off" })
    assert.equal("off", assert(fabric.check(c, { wait = true })).state)
    assert.equal(0, #h.runs)
  end)

  it("waits while a GPU registers, paced, then ok; one that stays is a fault after fabric_timeout", function()
    local t0
    local function registering(_, _, h)
      t0 = t0 or h.now()
      local st = h.now() - t0 < 4 and "In Progress" or "Completed"
      return testing.gpus({ {}, {}, { state = st }, {} })
    end
    local c, h = ctx({ nvidia_smi = registering })
    local r = assert(fabric.check(c, { wait = true }))
    assert.equal("healthy", r.state)
    assert.is_true(h.now() - t0 >= 4)
    assert.is_true(h.now() - t0 <= 4 + 2 * 0.25 * 2 + 0.1) -- at most one slow gap past the change
    assert.is_true(r.polls <= 1 + 4 / 0.25 + 4)
    assert.matches("after waiting", r.message)
    -- without wait (status): one read, pending
    c = ctx({ nvidia_smi = testing.gpus({ {}, { state = "In Progress" } }) })
    assert.equal("pending", assert(fabric.check(c)).state)
    -- it stays: fabric-fault after fabric_timeout, naming the GPU
    c, h = ctx({ nvidia_smi = testing.gpus({ {}, { state = "In Progress" } }) }, { fabric_timeout = 3 })
    local start = h.now()
    local ok, o, m = fabric.check(c, { wait = true })
    assert.is_nil(ok)
    assert.equal("fabric-fault", o)
    assert.matches("GPU 1 In Progress", m, 1, true)
    assert.matches("fabric_timeout 3", m, 1, true)
    assert.is_true(h.now() - start <= 3 + 0.1)
  end)

  it("a budget that runs out while waiting is deadline-exceeded", function()
    local c = ctx({ deadline = 2, nvidia_smi = testing.gpus({ { state = "Not Started" } }) })
    local ok, o = fabric.check(c, { wait = true })
    assert.is_nil(ok)
    assert.is_true(o == "deadline-exceeded" or o == "fabric-fault")
  end)

  local unknown = {
    { "absent", testing.ABSENT, "cannot run" },
    { "hung", testing.HANG, "hung" },
    { "failing", { status = 9, stdout = "NVIDIA-SMI has failed because it couldn't communicate with the "
      .. "NVIDIA driver.\n" }, "exited 9" },
    { "garbage", "garbage\n", "unparsable" },
  }
  for _, u in ipairs(unknown) do
    it("nvidia-smi " .. u[1] .. ": skipped with a warning, or fabric-unknown with on_fabric_unknown = fail",
      function()
        local c, h = ctx({ nvidia_smi = u[2] })
        local t0 = h.now()
        local r = assert(fabric.check(c, { wait = true }))
        assert.equal("unknown", r.state)
        assert.matches(u[3], r.message, 1, true)
        assert.is_true(h.now() - t0 <= fabric.CALL_TIMEOUT + 1e-6) -- never a hang: one bounded call
        assert.equal(1, #h.runs)
        local warned = false
        for _, l in ipairs(h.logs) do
          warned = warned or (l[1] == "warning" and l[2]:find(u[3], 1, true) ~= nil)
        end
        assert.is_true(warned)
        c = ctx({ nvidia_smi = u[2] }, { on_fabric_unknown = "fail" })
        local ok, o, m = fabric.check(c, { wait = true })
        assert.is_nil(ok)
        assert.equal("fabric-unknown", o)
        assert.matches(u[3], m, 1, true)
      end)
  end

  local VERSION = "/proc/driver/nvidia/version"
  local MODULE = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    .. "(dvs-builder@U16-I3-B03-4-3)  Thu Oct 23 10:00:00 UTC 2025\nGCC version:  gcc version 12.2.0\n"

  it("C43: NVML cannot start (driver/library version mismatch): driver-mismatch naming both versions, "
    .. "whatever on_fabric_unknown says, without waiting", function()
      for _, on_unknown in ipairs({ "skip", "fail" }) do
        local c, h = ctx({ nvidia_smi = testing.NVML_MISMATCH, files = { [VERSION] = MODULE } },
          { on_fabric_unknown = on_unknown })
        local ok, o, m = fabric.check(c, { wait = true })
        assert.is_nil(ok)
        assert.equal("driver-mismatch", o)
        assert.matches("NVML cannot start: Driver/library version mismatch: kernel module 580.95.05 ("
          .. VERSION .. "), NVML library 580.105", m, 1, true)
        assert.matches("reboot", m, 1, true)
        assert.equal("driver-mismatch", c.fabric.state)
        assert.equal(1, #h.runs)
        assert.equal(0, h.count("sleep"))
      end
    end)

  it("C43: the kernel module's version from the setting driver_version_file; unreadable: named", function()
    local c = ctx({ nvidia_smi = testing.NVML_MISMATCH, files = { ["/srv/version"] = MODULE } },
      { driver_version_file = "/srv/version" })
    local _, o, m = fabric.check(c)
    assert.equal("driver-mismatch", o)
    assert.matches("kernel module 580.95.05 (/srv/version)", m, 1, true)
    c = ctx({ nvidia_smi = testing.NVML_MISMATCH })
    _, o, m = fabric.check(c)
    assert.equal("driver-mismatch", o)
    assert.matches("kernel module version unknown (" .. VERSION .. ": ", m, 1, true)
    c = ctx({ nvidia_smi = { status = 18, stdout = "Failed to initialize NVML: Driver/library version "
      .. "mismatch\n" }, files = { [VERSION] = "garbage\n" } })
    _, o, m = fabric.check(c)
    assert.equal("driver-mismatch", o)
    assert.matches("has no NVRM version line", m, 1, true)
    assert.matches("NVML library version not printed", m, 1, true)
  end)

  it("NVML failing for another reason is unknown (on_fabric_unknown decides), named", function()
    local c = ctx({ nvidia_smi = { status = 255, stdout = "Failed to initialize NVML: Unknown Error\n" } })
    local r = assert(fabric.check(c))
    assert.equal("unknown", r.state)
    assert.matches("NVML cannot start: Unknown Error", r.message, 1, true)
  end)

  it("C41: an HGX board registering: none, one read, not waited for, said once", function()
    local zero = {}
    for i = 1, 8 do
      zero[i] = { state = "Not Started", status = "N/A", cluster_uuid = "N/A", clique_id = "N/A",
        platform = { chassis_serial_number = "", slot_number = "N/A", tray_index = "N/A" },
        health = { partition_assigned = false } }
    end
    local c, h = ctx({ nvidia_smi = testing.gpus(zero) })
    local r = assert(fabric.check(c, { wait = true }))
    assert.equal("none", r.state)
    assert.equal(1, r.polls)
    assert.equal(0, h.count("sleep"))
    local said = 0
    for _, l in ipairs(h.logs) do
      if l[1] ~= "debug" and l[2]:find("no multi-node NVLink", 1, true) then said = said + 1 end
    end
    assert.equal(1, said)
  end)

  it("C42: a degraded fabric: the result says so and names each finding", function()
    local c = ctx({ nvidia_smi = testing.gpus({ {}, { health = { summary = "Limited Capacity" } } }) })
    local r = assert(fabric.check(c, { wait = true }))
    assert.equal("degraded", r.state)
    assert.equal(testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID, r.partition.id)
    assert.same({ gpu = 1, field = "summary", label = "Summary", value = "Limited Capacity" }, r.degraded[1])
  end)

  it("a site command printing the CSV of the earlier query is still read (registration only)", function()
    local csv = "0, Completed, Success, " .. U .. ", 32766\n1, Completed, Insufficient Resources, " .. U
      .. ", 32766\n"
    local ok, o, m = fabric.check(ctx({ nvidia_smi = csv }))
    assert.is_nil(ok)
    assert.equal("fabric-fault", o)
    assert.matches("GPU 1:", m, 1, true)
    local r = assert(fabric.check(ctx({ nvidia_smi = "0, Completed, Success, " .. U .. ", 32766\n" })))
    assert.equal("healthy", r.state)
  end)

  it("a cut or garbled document is unknown, naming where the XML stops", function()
    local doc = testing.gpus().stdout
    for _, text in ipairs({ doc:sub(1, #doc // 2), (doc:gsub("</fabric>", "</fabrik>", 1)) }) do
      local r = assert(fabric.check(ctx({ nvidia_smi = text })))
      assert.equal("unknown", r.state)
      assert.matches("unparsable: nvidia%-smi %-q %-x: .* at line %d+", r.message)
    end
    local r = assert(fabric.check(ctx({ nvidia_smi = { stdout = doc, truncated = true } })))
    assert.equal("unknown", r.state)
    assert.matches("printed more than " .. fabric.max_output() .. " bytes", r.message, 1, true)
  end)

  it("the domain map's name: another partition is this node's fabric-fault, both named", function()
    local c = ctx({})
    local mine = testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID
    assert(fabric.check(c, { domain = { name = mine } }))
    assert(fabric.check(c, { domain = { name = "rack7" } }))
    local ok, o, m = fabric.check(c, { domain = { name = V .. ".1" } })
    assert.is_nil(ok)
    assert.equal("fabric-fault", o)
    assert.matches(V .. ".1", m, 1, true)
    assert.matches(mine, m, 1, true)
    c = ctx({ nvidia_smi = testing.FABRIC_NONE })
    ok, o = fabric.check(c, { domain = { name = V .. ".1" } })
    assert.is_nil(ok)
    assert.equal("fabric-fault", o)
  end)
end)
