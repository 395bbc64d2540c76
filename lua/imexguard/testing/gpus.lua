-- SPDX-License-Identifier: Apache-2.0
--- The fake host's nvidia-smi answers (field cases C31, C41, C42, C43 of docs/design.md): the
-- document of `nvidia-smi -q -x` for described GPUs, in the layout of driver 580's
-- (tests/fixtures/nvidia-smi/qx-gb200.xml, reduced to what imexguard reads: driver_version,
-- attached_gpus, and per <gpu id=PCI>: product_name, uuid, minor_number, platformInfo, fabric with
-- its health block), and the kit's named answers. Test infrastructure of imexguard.testing.
local M = {}

--- The ClusterUUID and CliqueId of the kit's NVLink partition (the GPUs of the default nvidia-smi).
M.CLUSTER_UUID = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
M.CLIQUE_ID = 32766
local ZERO = "00000000-0000-0000-0000-000000000000"

local HEALTH = { "summary", "bandwidth", "route_recovery_in_progress", "route_unhealthy",
  "access_timeout_recovery", "incorrect_configuration", "partition_assigned" }
local PLATFORM = { "chassis_serial_number", "slot_number", "tray_index", "host_id", "peer_type", "module_id" }

-- The defaults of each kind of GPU, as the real captures print them (false: the element is not
-- printed): a rack's tray (GB200), an HGX board (B200: a zero ClusterUUID), no NVSwitch (A100), a
-- GPU still registering (a tray's; Health all N/A).
local KINDS = {
  rack = { product = "NVIDIA GB200", health = { "Healthy", "Full", "False", "False", "False", "N/A", "N/A" },
    platform = { "1820000000001", "1", "0", "1", "Switch Connected" } },
  hgx = { product = "NVIDIA B200", health = { "Healthy", "N/A", "N/A", "N/A", "False", "N/A", false },
    platform = { "", "N/A", "N/A", "1", "Switch Connected" } },
  none = { product = "NVIDIA A100-SXM4-40GB", health = { false, "N/A", "N/A", "N/A", "N/A", false, false },
    platform = { "N/A", "N/A", "N/A", "N/A", "N/A" } },
  registering = { product = "NVIDIA GB200", health = { "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A" },
    platform = { "1820000000001", "1", "0", "1", "Switch Connected" } },
}

local function esc(v)
  return (tostring(v):gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;",
    ["'"] = "&apos;" }))
end

-- "<tag>value</tag>" lines of `names`, each value(name, i) (false or nil: left out).
local function elements(out, ind, names, value)
  for i, name in ipairs(names) do
    local v = value(name, i)
    if v ~= false and v ~= nil then
      out[#out + 1] = string.format("%s<%s>%s</%s>", ind, name, esc(v), name)
    end
  end
end

-- One <gpu> element of GPU index i (from 0), described by g.
local function gpu_xml(out, i, g)
  local st = g.state or "Completed"
  local na = st == "N/A"
  local uuid = g.cluster_uuid or (na and "N/A" or M.CLUSTER_UUID)
  local kind = na and "none" or (st ~= "Completed" and "registering") or (uuid == ZERO and "hgx") or "rack"
  local k = KINDS[kind]
  out[#out + 1] = string.format('\t<gpu id="00000000:%02X:00.0">', (0x29 + 0x16 * i) % 256)
  out[#out + 1] = "\t\t<product_name>" .. esc(g.product_name or k.product) .. "</product_name>"
  out[#out + 1] = string.format("\t\t<uuid>GPU-00000000-0000-0000-0000-%012d</uuid>", i)
  out[#out + 1] = "\t\t<minor_number>" .. i .. "</minor_number>"
  out[#out + 1] = "\t\t<platformInfo>"
  local plat = g.platform or {}
  elements(out, "\t\t\t", PLATFORM, function(name, j)
    if plat[name] ~= nil then return plat[name] end
    return k.platform[j] or (kind == "none" and "N/A" or tostring(i + 1))
  end)
  out[#out + 1] = "\t\t</platformInfo>"
  out[#out + 1] = "\t\t<fabric>"
  elements(out, "\t\t\t", { "state", "status", "cliqueId", "clusterUuid" }, function(_, j)
    local clique = g.clique_id or (na and "N/A" or M.CLIQUE_ID)
    return ({ st, g.status or (na and "N/A" or "Success"), tostring(clique), uuid })[j]
  end)
  out[#out + 1] = "\t\t\t<health>"
  local health = g.health or {}
  elements(out, "\t\t\t\t", HEALTH, function(name, j)
    if health[name] ~= nil then return health[name] end
    return k.health[j]
  end)
  out[#out + 1] = "\t\t\t</health>"
  out[#out + 1] = "\t\t</fabric>"
  out[#out + 1] = "\t</gpu>"
end

--- The answer of `nvidia-smi -q -x` for described GPUs.
-- @param list table|nil GPUs, each {state = "Completed" (default) | "In Progress" | "Not Started" |
--   "N/A", status = "Success" (default; "N/A" when the state is N/A), cluster_uuid = (default
--   M.CLUSTER_UUID; N/A when the state is), clique_id = (default M.CLIQUE_ID), health = {[element
--   of <health>] = value} over the defaults of its kind (false: left out), platform = {[element of
--   <platformInfo>] = value} likewise, product_name}, or a number of healthy GPUs; default 4 healthy
--   GPUs (a GB200 compute tray) in the kit's partition. A GPU's kind gives the defaults, as the real
--   captures print them: a rack's tray (a non-zero ClusterUUID: Health Healthy, Full, False, False,
--   False, N/A, partition_assigned N/A; platformInfo chassis 1820000000001, slot 1, tray 0), an HGX
--   board (a zero ClusterUUID: Healthy, N/A, N/A, N/A, False, N/A, no partition_assigned; an empty
--   chassis serial, slot and tray N/A), no NVSwitch (state N/A: every field N/A) or registering
--   (Not Started, In Progress: a tray's platformInfo, Health N/A).
-- @param driver string|nil the driver version (default "580.105.08")
-- @return answer {stdout =, status = 0}
function M.gpus(list, driver)
  list = list or 4
  if type(list) == "number" then
    local n = list
    list = {}
    for i = 1, n do list[i] = {} end
  end
  local out = { '<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
    "<nvidia_smi_log>", "\t<timestamp>Mon Dec  1 12:00:00 2025</timestamp>",
    "\t<driver_version>" .. esc(driver or "580.105.08") .. "</driver_version>",
    "\t<cuda_version>13.0</cuda_version>", "\t<attached_gpus>" .. #list .. "</attached_gpus>" }
  for i, g in ipairs(list) do gpu_xml(out, i - 1, g) end
  out[#out + 1] = "</nvidia_smi_log>"
  return { stdout = table.concat(out, "\n") .. "\n", status = 0 }
end

--- nvidia-smi on a node without NVSwitch: every fabric field N/A (4 GPUs).
M.FABRIC_NONE = M.gpus({ { state = "N/A" }, { state = "N/A" }, { state = "N/A" }, { state = "N/A" } })
--- nvidia-smi on an HGX board (C41): 8 GPUs Completed, Success, CliqueId 0, a zero ClusterUUID.
M.FABRIC_HGX = M.gpus((function()
  local t = {}
  for i = 1, 8 do t[i] = { cluster_uuid = ZERO, clique_id = 0 } end
  return t
end)())
--- nvidia-smi after a driver update without a reboot (C43): NVML cannot start, exit 18, both lines
-- on stdout as the real one prints them.
M.NVML_MISMATCH = { status = 18, stdout = "Failed to initialize NVML: Driver/library version mismatch\n"
  .. "NVML library version: 580.105\n" }
--- nvidia-smi not installed (host.run cannot execute it).
M.ABSENT = { exec_error = "ENOENT" }

return M
