-- SPDX-License-Identifier: Apache-2.0
-- The simulator's nvidia-smi (contrib/imexsim/nvidia-smi) answering `-q -x` as the real one does
-- (field cases C41, C42, C43 of docs/design.md): its document, read with the real parser
-- (host.xml_parse) and imexguard.smi, has the real captures' layout and says what the node's
-- `gpus` file sets (Health block fields, an HGX node, no NVSwitch, timed transitions), while the CSV
-- query keeps answering as before; a hang, an exit code, a cut document; NVML failing after a
-- driver update (exit 18, both versions). Each node runs the argv of its own settings file
-- (contrib/simdomain.lua, setting nvidia_smi); no unit is started.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")
local smi = require("imexguard.smi")
-- the CSV query the simulator still answers (earlier imexguard versions ran it)
local CSV_QUERY = { "--query-gpu=index,fabric.state,fabric.status,fabric.clusterUuid,fabric.cliqueId",
  "--format=csv,noheader" }
local H = require("helpers")
local host = H.host()

local U = simdomain.CLUSTER_UUID
local TRAY_GPU = "0, Completed, Success, " .. U .. ", 32766"
local GB200 = "tests/fixtures/nvidia-smi/qx-gb200.xml"
local MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.105\n"

-- The element paths of a tree ("nvidia_smi_log/gpu/fabric/health/summary"), as a set.
local function paths(e, prefix, set)
  set = set or {}
  local p = prefix and (prefix .. "/" .. e.tag) or e.tag
  set[p] = true
  for _, c in ipairs(e) do paths(c, p, set) end
  return set
end

describe("imexsim's nvidia-smi -q -x", function()
  local d

  setup(function()
    d = simdomain.new({ nodes = 1, fabric = true })
  end)
  teardown(function()
    if d then d:destroy() end
  end)

  -- Run n1's nvidia-smi (the argv of its settings file) with `args`: status, stdout, seconds.
  local function run(args, prefix)
    local env = {}
    assert(load(assert(H.read(d:dir("n1") .. "/imexguard.conf")), "imexguard.conf", "t", env))()
    local argv = {}
    for _, a in ipairs(env.nvidia_smi) do argv[#argv + 1] = H.q(a) end
    for _, a in ipairs(args) do argv[#argv + 1] = H.q(a) end
    local t0 = host.now()
    local out = H.sh((prefix or "") .. table.concat(argv, " ") .. " 2>&1; echo \"rc=$?\"")
    local body, rc = out:match("^(.*)rc=(%d+)$")
    return tonumber(rc), body, host.now() - t0
  end
  local function xml() return run({ "-q", "-x" }) end
  local function records()
    local rc, out = xml()
    assert.equal(0, rc, out)
    return assert(smi.parse(host, out))
  end

  it("a rack's tray: the GB200 capture's layout, the CSV query's values, Health defaults", function()
    d:set_gpus("n1", simdomain.gpu_lines("rack", 4))
    local rc, out = xml()
    assert.equal(0, rc, out)
    local root = assert(host.xml_parse(out, "imexsim"))
    -- every element the simulator prints is where the real GB200 document has it
    local real = paths(assert(host.xml_parse(assert(H.read(GB200)), "gb200")))
    for p in pairs(paths(root)) do assert.is_true(real[p] == true, p .. " is not in the real layout") end
    local r = assert(smi.records(root))
    assert.equal("580.105.08", r.driver_version)
    assert.equal(4, r.attached_gpus)
    local csv_rc, csv = run(CSV_QUERY)
    assert.equal(0, csv_rc)
    local rows = assert(smi.parse_csv(csv))
    local uuids = {}
    for i, g in ipairs(r.gpus) do
      assert.equal(rows[i].index, g.index)
      assert.same({ rows[i].state, rows[i].status, rows[i].cluster_uuid, tostring(rows[i].clique_id) },
        { g.fabric.state, g.fabric.status, g.fabric.cluster_uuid, g.fabric.clique_id })
      assert.same({ summary = "Healthy", bandwidth = "Full", route_recovery_in_progress = "False",
        route_unhealthy = "False", access_timeout_recovery = "False", incorrect_configuration = "N/A",
        partition_assigned = "N/A" }, g.fabric.health)
      assert.equal("NVIDIA GB200", g.product_name)
      assert.equal(tostring(i), g.platform.module_id)
      assert.matches("^GPU%-%x+%-%x+%-%x+%-%x+%-%x+$", g.uuid)
      assert.is_nil(uuids[g.uuid], "one uuid per GPU")
      uuids[g.uuid] = true
    end
  end)

  it("Health knobs per GPU and for every GPU (C42); '-' leaves a field out; platformInfo", function()
    local lines = simdomain.gpu_lines("rack", 4)
    lines[#lines + 1] = "health 1 summary=Unhealthy, route_unhealthy=True, "
      .. "incorrect_configuration=Insufficient NVLinks"
    lines[#lines + 1] = "health * bandwidth=Degraded"
    lines[#lines + 1] = "health 3 summary=Limited Capacity, route_recovery_in_progress=True, "
      .. "partition_assigned=-"
    lines[#lines + 1] = "platform chassis_serial_number=RACK-7, slot_number=14, tray_index=4, host_id=1"
    lines[#lines + 1] = "gpu 2 product_name=NVIDIA GB300 & Co <x>, uuid=GPU-custom"
    d:set_gpus("n1", lines)
    local g = records().gpus
    local h1 = g[2].fabric.health
    assert.same({ "Unhealthy", "True", "Insufficient NVLinks", "Degraded" },
      { h1.summary, h1.route_unhealthy, h1.incorrect_configuration, h1.bandwidth })
    assert.equal("Healthy", g[1].fabric.health.summary)
    assert.equal("Degraded", g[1].fabric.health.bandwidth)
    assert.equal("Limited Capacity", g[4].fabric.health.summary)
    assert.equal("True", g[4].fabric.health.route_recovery_in_progress)
    assert.is_nil(g[4].fabric.health.partition_assigned)
    assert.equal("N/A", g[3].fabric.health.partition_assigned)
    assert.same({ "RACK-7", "14", "4" }, { g[1].platform.chassis_serial_number, g[1].platform.slot_number,
      g[1].platform.tray_index })
    assert.equal("NVIDIA GB300 & Co <x>", g[3].product_name, "escaped in the document, whole in the record")
    assert.equal("GPU-custom", g[3].uuid)
    assert.equal("Completed", g[2].fabric.state, "registration is the CSV line's")
  end)

  it("an HGX node (C41): clique 0, a zero ClusterUUID, the B200 capture's Health and platformInfo", function()
    d:set_gpus("n1", simdomain.gpu_lines("hgx", 8))
    local r = records()
    assert.equal(8, #r.gpus)
    for _, g in ipairs(r.gpus) do
      assert.same({ "Completed", "Success", "0", "00000000-0000-0000-0000-000000000000" },
        { g.fabric.state, g.fabric.status, g.fabric.clique_id, g.fabric.cluster_uuid })
      assert.same({ summary = "Healthy", bandwidth = "N/A", route_recovery_in_progress = "N/A",
        route_unhealthy = "N/A", access_timeout_recovery = "False", incorrect_configuration = "N/A" },
        g.fabric.health)
      assert.equal("", g.platform.chassis_serial_number)
      assert.equal("NVIDIA B200", g.product_name)
    end
  end)

  it("no NVSwitch: every fabric field N/A, no summary, as the A100 capture", function()
    d:set_gpus("n1", simdomain.gpu_lines("none", 2))
    local g = records().gpus[2]
    assert.same({ "N/A", "N/A", "N/A", "N/A" }, { g.fabric.state, g.fabric.status, g.fabric.clique_id,
      g.fabric.cluster_uuid })
    assert.is_nil(g.fabric.health.summary)
    assert.equal("N/A", g.fabric.health.route_unhealthy)
  end)

  it("timed transitions: registration and Health change at their time", function()
    local later, past = os.time() + 3600, os.time() - 1
    d:set_gpus("n1", { TRAY_GPU,
      string.format("1, In Progress, N/A, N/A, N/A; until %d: Completed, Success, %s, 32766", later, U),
      string.format("2, In Progress, N/A, N/A, N/A; until %d: Completed, Success, %s, 32766", past, U),
      string.format("health 0 summary=Unhealthy; until %d: summary=Healthy", past),
      string.format("health 2 route_recovery_in_progress=True; until %d: route_recovery_in_progress=False",
        later) })
    local g = records().gpus
    assert.equal("Healthy", g[1].fabric.health.summary)
    local f1 = g[2].fabric
    assert.same({ "In Progress", "N/A", "N/A" }, { f1.state, f1.status, f1.clique_id })
    assert.equal("N/A", g[2].fabric.health.summary, "a GPU still registering has no Health values [guess]")
    assert.equal("Completed", g[3].fabric.state)
    assert.equal("True", g[3].fabric.health.route_recovery_in_progress)
  end)

  it("the driver's version; a cut document and garbage are not XML (nil, message, xml)", function()
    d:set_gpus("n1", { "driver 580.95.05", "cuda 13.1", TRAY_GPU })
    local r = records()
    assert.same({ "580.95.05", "13.1" }, { r.driver_version, r.cuda_version })
    d:set_gpus("n1", { TRAY_GPU, "truncate 400" })
    local rc, out = xml()
    assert.equal(0, rc)
    assert.equal(400, #out)
    local _, err, code = smi.parse(host, out)
    assert.equal("xml", code)
    assert.matches("the document ends early", err, 1, true)
    d:set_gpus("n1", { TRAY_GPU, "WARNING: infoROM is corrupted at gpu 0" })
    rc, out = xml()
    assert.equal(0, rc)
    _, err, code = smi.parse(host, out)
    assert.equal("xml", code, err)
    -- the CSV query prints the same lines as before, in the file's order
    rc, out = run(CSV_QUERY)
    assert.equal(0, rc)
    assert.equal(TRAY_GPU .. "\nWARNING: infoROM is corrupted at gpu 0\n", out)
  end)

  it("exit codes, no driver, a hang: for both queries", function()
    d:set_gpus("n1", { TRAY_GPU, "exit 15 Unable to determine the device handle" })
    for _, args in ipairs({ { "-q", "-x" }, CSV_QUERY }) do
      local rc, out = run(args)
      assert.equal(15, rc)
      assert.matches("Unable to determine the device handle", out, 1, true)
    end
    os.remove(d:dir("n1") .. "/gpus")
    local rc, out = xml()
    assert.equal(9, rc)
    assert.matches("^NVIDIA%-SMI has failed because it couldn't communicate with the NVIDIA driver", out)
    d:set_gpus("n1", { "hang" })
    local rc_hang, _, took = run({ "-x", "-q" }, "timeout 1 ")
    assert.equal(124, rc_hang, "it hangs until killed")
    assert.is_true(took < 5)
    rc, out = run({ "-q", "-x", "-i", "0" })
    assert.equal(2, rc)
    assert.matches("answers only", out, 1, true)
  end)

  it("NVML fails after a driver update without a reboot (C43): exit 18, both versions", function()
    d:set_gpus("n1", { "driver 580.105.08", TRAY_GPU })
    d:set_kernel_driver("n1", "580.95.05")
    for _, args in ipairs({ { "-q", "-x" }, CSV_QUERY }) do
      local rc, out = run(args)
      assert.equal(18, rc)
      assert.equal(MISMATCH, out)
      assert.same({ reason = "Driver/library version mismatch", library_version = "580.105" },
        smi.nvml_failure(out))
    end
    assert.equal("580.95.05", smi.kernel_version(H.read(d:driver_version_file("n1"))))
    d:set_kernel_driver("n1", "580.105.08")
    assert.equal("580.105.08", records().driver_version)
    d:set_kernel_driver("n1", nil)
    assert.equal("580.105.08", records().driver_version)
  end)
end)
