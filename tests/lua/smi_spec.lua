-- SPDX-License-Identifier: Apache-2.0
-- imexguard.smi: nvidia-smi's document (`-q -x`) as GPU records, over every real capture of
-- tests/fixtures/nvidia-smi/ (GB200, GB300, HGX B200 and H100, A100; field cases C41, C42 of
-- docs/design.md) and edited copies of them; nvidia-smi's answer when NVML cannot start (C43) and
-- the kernel module's version line. The XML is parsed by the real primitive (host.xml_parse, the
-- build's host.so): each capture's values are also read apart from the tree, with patterns over
-- the text, and must agree.
local H = require("helpers")
local smi = require("imexguard.smi")
local host = H.host()

local FIXTURES = "tests/fixtures/nvidia-smi/"

local function capture(name)
  return assert(H.read(FIXTURES .. "qx-" .. name .. ".xml"), "missing fixture qx-" .. name .. ".xml")
end

-- The <gpu> blocks of a document's text, in order.
local function gpu_blocks(text)
  local r = {}
  for block in text:gmatch("<gpu id=.-</gpu>") do r[#r + 1] = block end
  return r
end

-- The text of <tag>...</tag> inside `block` (the first), trimmed; nil when absent.
local function value(block, tag)
  local v = block and block:match("<" .. tag .. ">(.-)</" .. tag .. ">")
  return v and v:match("^%s*(.-)%s*$")
end

describe("imexguard.smi over the real captures", function()
  for _, name in ipairs({ "gb200", "gb300", "b200", "h100", "a100" }) do
    it(name .. ": every GPU's fields agree with the text, absent ones are nil", function()
      local text = capture(name)
      local r = assert(smi.parse(host, text))
      assert.equal(value(text, "driver_version"), r.driver_version)
      assert.equal(tonumber(value(text, "attached_gpus")), r.attached_gpus)
      local blocks = gpu_blocks(text)
      assert.equal(#blocks, #r.gpus)
      for i, g in ipairs(r.gpus) do
        local b = blocks[i]
        assert.equal(i - 1, g.index)
        assert.equal(b:match('^<gpu id="([^"]+)"'), g.pci_bus_id)
        for _, k in ipairs({ "uuid", "product_name", "minor_number" }) do
          assert.equal(value(b, k), g[k], k)
        end
        local fb = b:match("<fabric>.-</fabric>")
        for k, tag in pairs(smi.FABRIC) do assert.equal(value(fb, tag), g.fabric[k], k) end
        local hb = fb:match("<health>.-</health>")
        for _, tag in ipairs(smi.HEALTH) do assert.equal(value(hb, tag), g.fabric.health[tag], tag) end
        local pb = b:match("<platformInfo>.-</platformInfo>")
        for _, tag in ipairs(smi.PLATFORM) do assert.equal(value(pb, tag), g.platform[tag], tag) end
      end
    end)
  end

  it("gb200: a GB200 tray, registered in clique 2 of a non-zero cluster, healthy, slot 14 tray 4", function()
    local r = assert(smi.parse(host, capture("gb200")))
    assert.equal("580.173.02", r.driver_version)
    assert.equal(4, #r.gpus)
    local g = r.gpus[2]
    assert.same({ index = 1, pci_bus_id = "00000000:3F:00.0", minor_number = "1",
      uuid = "GPU-00000001-0000-0000-0000-000000000001", product_name = "NVIDIA GB200",
      fabric = { state = "Completed", status = "Success", clique_id = "2",
        cluster_uuid = "00000001-0000-0000-0000-000000000001",
        health = { summary = "Healthy", bandwidth = "Full", route_recovery_in_progress = "False",
          route_unhealthy = "False", access_timeout_recovery = "False", incorrect_configuration = "N/A",
          partition_assigned = "N/A" } },
      platform = { chassis_serial_number = "1820000000001", slot_number = "14", tray_index = "4",
        host_id = "1", module_id = "1", peer_type = "Switch Connected" } }, g)
  end)

  it("gb300: clique 32766, incorrect_configuration None", function()
    local r = assert(smi.parse(host, capture("gb300")))
    for _, g in ipairs(r.gpus) do
      assert.equal("32766", g.fabric.clique_id)
      assert.equal("None", g.fabric.health.incorrect_configuration)
    end
  end)

  it("b200 (HGX): clique 0, an all-zero cluster, no partition_assigned (nil, not N/A), an empty "
    .. "chassis serial", function()
      local r = assert(smi.parse(host, capture("b200")))
      assert.equal(8, #r.gpus)
      for i, g in ipairs(r.gpus) do
        assert.equal(i - 1, g.index)
        assert.equal("0", g.fabric.clique_id)
        assert.equal("00000000-0000-0000-0000-000000000000", g.fabric.cluster_uuid)
        assert.equal("Healthy", g.fabric.health.summary)
        assert.equal("N/A", g.fabric.health.bandwidth)
        assert.is_nil(g.fabric.health.partition_assigned)
        assert.equal("", g.platform.chassis_serial_number)
        assert.equal("N/A", g.platform.slot_number)
      end
      -- the document's order, not the minor numbers', is the index (they agree here)
      assert.equal("7", r.gpus[8].minor_number)
    end)

  it("a100 (no NVSwitch, driver 570): every fabric field N/A, no summary (nil)", function()
    local r = assert(smi.parse(host, capture("a100")))
    assert.equal("570.148.08", r.driver_version)
    local f = r.gpus[1].fabric
    assert.same({ "N/A", "N/A", "N/A", "N/A" }, { f.state, f.status, f.clique_id, f.cluster_uuid })
    assert.is_nil(f.health.summary)
    assert.is_nil(f.health.incorrect_configuration)
    assert.equal("N/A", f.health.bandwidth)
  end)
end)

describe("imexguard.smi on edited captures", function()
  it("C42: GPU 1 Unhealthy with a route unhealthy: the record says so (judging is fabric's)", function()
    local n = 0
    local text = capture("gb200"):gsub("<gpu id=.-</gpu>", function(b)
      n = n + 1
      if n == 2 then
        b = b:gsub("<summary>Healthy</summary>", "<summary>Unhealthy</summary>")
          :gsub("<route_unhealthy>False</route_unhealthy>", "<route_unhealthy>True</route_unhealthy>")
          :gsub("<incorrect_configuration>N/A</incorrect_configuration>",
            "<incorrect_configuration>Insufficient NVLinks</incorrect_configuration>")
      end
      return b
    end)
    local r = assert(smi.parse(host, text))
    local h = r.gpus[2].fabric.health
    assert.same({ "Unhealthy", "True", "Insufficient NVLinks" },
      { h.summary, h.route_unhealthy, h.incorrect_configuration })
    assert.equal("Healthy", r.gpus[1].fabric.health.summary)
    assert.equal("Completed", r.gpus[2].fabric.state)
  end)

  it("a GPU without <fabric> or without <health> (older drivers): nil, not an error", function()
    local text = capture("a100"):gsub("<fabric>.-</fabric>", "")
    local r = assert(smi.parse(host, text))
    assert.is_nil(r.gpus[1].fabric)
    text = capture("a100"):gsub("<health>.-</health>", "")
    r = assert(smi.parse(host, text))
    assert.equal("N/A", r.gpus[1].fabric.state)
    assert.is_nil(r.gpus[1].fabric.health)
    text = capture("a100"):gsub("<platformInfo>.-</platformInfo>", "")
    assert.is_nil(assert(smi.parse(host, text)).gpus[1].platform)
  end)

  it("a document with no GPU: an empty list (attached_gpus says 0)", function()
    local text = capture("a100"):gsub("<gpu id=.-</gpu>", ""):gsub("<attached_gpus>1<", "<attached_gpus>0<")
    local r = assert(smi.parse(host, text))
    assert.same({}, r.gpus)
    assert.equal(0, r.attached_gpus)
  end)

  it("bad input: host.xml_parse's message and code; another document is not-smi", function()
    local text = capture("gb300")
    local r, err, code = smi.parse(host, text:sub(1, #text // 2))
    assert.is_nil(r)
    assert.equal("xml", code)
    assert.matches("^nvidia%-smi %-q %-x: the document ends early %(truncated%?%) at line %d+", err)
    r, err, code = smi.parse(host, "<html><body>502</body></html>", "nvidia-smi on n3")
    assert.is_nil(r)
    assert.equal("not-smi", code)
    assert.equal("nvidia-smi on n3: the document is <html>, not nvidia-smi's <nvidia_smi_log>", err)
    r, err, code = smi.parse(host, "No devices were found\n")
    assert.same({ nil, "xml" }, { r, code })
    assert.matches("^nvidia%-smi %-q %-x: not well%-formed XML at line 1", err)
  end)

  it("uses limits of its own: a document nested too deep is refused", function()
    local deep = "<nvidia_smi_log>" .. string.rep("<x>", 20) .. string.rep("</x>", 20) .. "</nvidia_smi_log>"
    local r, err, code = smi.parse(host, deep)
    assert.is_nil(r)
    assert.equal("limit", code)
    assert.matches("nested deeper than " .. smi.LIMITS.max_depth, err, 1, true)
  end)
end)

describe("imexguard.smi.fabric_gpus: the checked fabric fields of each GPU", function()
  it("over every capture: index, state, status, lowercase ClusterUUID, integer CliqueId, the raw Health "
    .. "block and platformInfo", function()
      local g = assert(smi.fabric_gpus(assert(smi.parse(host, capture("gb200")))))
      assert.equal(4, #g)
      assert.same({ 0, false, "Completed", "Success", "00000001-0000-0000-0000-000000000001", 2 },
        { g[1].index, g[1].na, g[1].state, g[1].status, g[1].cluster_uuid, g[1].clique_id })
      assert.equal("Healthy", g[1].health.summary)
      assert.equal("14", g[1].platform.slot_number)
      for _, name in ipairs({ "b200", "h100" }) do
        g = assert(smi.fabric_gpus(assert(smi.parse(host, capture(name)))))
        assert.equal(8, #g)
        for i, x in ipairs(g) do
          assert.same({ i - 1, "Completed", "Success", smi.ZERO_UUID, 0 },
            { x.index, x.state, x.status, x.cluster_uuid, x.clique_id })
        end
      end
      assert.equal("N/A", g[1].health.summary) -- h100: every Health field N/A
      assert.equal("N/A", g[1].platform.slot_number)
      g = assert(smi.fabric_gpus(assert(smi.parse(host, capture("a100")))))
      assert.same({ true, nil, nil, nil, nil }, { g[1].na, g[1].state, g[1].status, g[1].cluster_uuid,
        g[1].clique_id })
    end)

  it("a GPU without <fabric> (an older driver) is N/A", function()
    local text = capture("a100"):gsub("<fabric>.-</fabric>", "")
    local g = assert(smi.fabric_gpus(assert(smi.parse(host, text))))
    assert.is_true(g[1].na)
    assert.is_nil(g[1].health)
  end)

  for _, c in ipairs({
    { "<state>Completed</state>", "<state>Done</state>", "unknown fabric.state Done" },
    { "<status>Success</status>", "<status></status>", "empty fabric.status" },
    { "<cliqueId>2</cliqueId>", "<cliqueId>two</cliqueId>", "fabric.cliqueId two is not a number" },
    { "<clusterUuid>00000001%-0000%-0000%-0000%-000000000001</clusterUuid>", "<clusterUuid>1</clusterUuid>",
      "fabric.clusterUuid 1 is not a UUID" },
  }) do
    it("refuses " .. c[3] .. ", naming the GPU (index and PCI id) and the field", function()
      local text = capture("gb200"):gsub(c[1], c[2], 1)
      local g, err = smi.fabric_gpus(assert(smi.parse(host, text)))
      assert.is_nil(g)
      assert.equal("nvidia-smi -q -x: GPU 0 (00000000:29:00.0): " .. c[3], err)
    end)
  end

  it("refuses a document without a GPU", function()
    local text = capture("a100"):gsub("<gpu id=.-</gpu>", "")
    local g, err = smi.fabric_gpus(assert(smi.parse(host, text)))
    assert.is_nil(g)
    assert.equal("nvidia-smi -q -x: no <gpu> element", err)
  end)
end)

describe("imexguard.smi: NVML failing and the kernel module's version (C43)", function()
  it("reads nvidia-smi's answer to a driver/library version mismatch", function()
    local out = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.105\n"
    assert.same({ reason = "Driver/library version mismatch", library_version = "580.105" },
      smi.nvml_failure(out))
    assert.same({ reason = "Driver/library version mismatch" },
      smi.nvml_failure("Failed to initialize NVML: Driver/library version mismatch\r\n"))
    assert.is_nil(smi.nvml_failure("<?xml version=\"1.0\" ?>\n<nvidia_smi_log/>"))
    assert.is_nil(smi.nvml_failure(nil))
  end)

  it("reads the version of the open and the proprietary kernel modules", function()
    assert.equal("580.95.05", smi.kernel_version("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  "
      .. "580.95.05  Release Build  (dvs-builder@U22-I3-AE18-23-3)  Sat Sep 13 00:07:47 UTC 2025\n"
      .. "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04.2)\n"))
    assert.equal("550.54.15", smi.kernel_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  "
      .. "Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"))
    assert.is_nil(smi.kernel_version("GCC version:  gcc version 12.2.0\n"))
    assert.is_nil(smi.kernel_version(nil))
  end)
end)
