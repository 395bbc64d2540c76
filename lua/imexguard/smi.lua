-- SPDX-License-Identifier: Apache-2.0
--- What nvidia-smi reports about a node's GPUs, as records (pure; docs/design.md "Reading
-- nvidia-smi's XML"): the document of `nvidia-smi -q -x` (parsed by the primitive
-- host.xml_parse) turned into the driver version and, per GPU, its identity, its NVLink fabric
-- (registration and the Health block of driver 580, field cases C41 and C42) and its place in the
-- rack (platformInfo); also nvidia-smi's answer when NVML cannot start (C43) and the kernel
-- module's version line (/proc/driver/nvidia/version). Nothing here judges health: that is
-- imexguard.fabric's.
--
-- Values are the elements' text as nvidia-smi prints it (strings, white space at both ends
-- removed): "N/A" (a field without a value on this GPU) stays the string "N/A", an element that is
-- not in the document is nil, an empty element is "". Element names are those of the real
-- captures (tests/fixtures/nvidia-smi/qx-*.xml: GB200 and GB300 trays, an HGX B200, an A100).
local M = {}

--- nvidia-smi's arguments (after the program) for the document.
M.QUERY = { "-q", "-x" }
--- The name of the input in messages.
M.NAME = "nvidia-smi -q -x"
--- What nvidia-smi prints for a field without a value.
M.NA = "N/A"
--- The limits given to host.xml_parse: nvidia-smi prints about 45 KB and 750 elements per GPU, six
-- levels deep.
M.LIMITS = { max_bytes = 8 * 1024 * 1024, max_depth = 16, max_elements = 200000 }

--- The fields of a GPU's <fabric> element (record key = element name).
M.FABRIC = { state = "state", status = "status", clique_id = "cliqueId", cluster_uuid = "clusterUuid" }
--- The fields of <fabric><health> (driver 580; older drivers print fewer or none).
M.HEALTH = { "summary", "bandwidth", "route_recovery_in_progress", "route_unhealthy",
  "access_timeout_recovery", "incorrect_configuration", "partition_assigned" }
--- The fields of <platformInfo> (a tray's physical place: the rack's chassis serial number, the
-- slot, the tray, the host and module ids; peer_type "Switch Connected" behind NVSwitches).
M.PLATFORM = { "chassis_serial_number", "slot_number", "tray_index", "host_id", "module_id", "peer_type" }

-- The first child element of e named tag, or nil.
local function child(e, tag)
  for _, c in ipairs(e) do
    if c.tag == tag then return c end
  end
  return nil
end

-- The text of e's first child named tag, or nil when there is none.
local function text(e, tag)
  local c = e and child(e, tag)
  return c and c.text
end

-- A table of the texts of e's children named in `names` (list: key = name; map: key -> name), or
-- nil when e is nil.
local function fields(e, names)
  if not e then return nil end
  local r = {}
  for k, name in pairs(names) do
    if type(k) == "number" then k = name end
    r[k] = text(e, name)
  end
  return r
end

--- A GPU's record from its <gpu> element.
-- @param g table the element (host.xml_parse's shape)
-- @param index integer the GPU's position in the document, from 0
-- @return table {index, pci_bus_id, minor_number, uuid, product_name, fabric = {state, status,
--   clique_id, cluster_uuid, health = {summary, bandwidth, route_recovery_in_progress,
--   route_unhealthy, access_timeout_recovery, incorrect_configuration, partition_assigned} or nil}
--   or nil, platform = {chassis_serial_number, slot_number, tray_index, host_id, module_id,
--   peer_type} or nil}
function M.gpu(g, index)
  local fabric = child(g, "fabric")
  local rec = {
    index = index,
    pci_bus_id = g.attr.id,
    minor_number = text(g, "minor_number"),
    uuid = text(g, "uuid"),
    product_name = text(g, "product_name"),
    fabric = fields(fabric, M.FABRIC),
    platform = fields(child(g, "platformInfo"), M.PLATFORM),
  }
  if rec.fabric then rec.fabric.health = fields(child(fabric, "health"), M.HEALTH) end
  return rec
end

--- The records of a parsed document.
-- @param root table the document element (host.xml_parse's result)
-- @param name string|nil the input in messages (default M.NAME)
-- @return table {driver_version = string|nil, cuda_version = string|nil, attached_gpus = integer|nil
--   (nil when absent or not a number), gpus = list of M.gpu records in the document's order, so
--   that gpus[i].index == i - 1: nvidia-smi's index (the order of NVML's enumeration, that of
--   `nvidia-smi -L` and of the CSV query's `index`), the <gpu> elements being printed in it}, or
--   nil, message naming the input (a document that is not nvidia-smi's)
function M.records(root, name)
  name = name or M.NAME
  if type(root) ~= "table" or root.tag ~= "nvidia_smi_log" then
    return nil, string.format("%s: the document is <%s>, not nvidia-smi's <nvidia_smi_log>", name,
      type(root) == "table" and tostring(root.tag) or "?")
  end
  local attached = text(root, "attached_gpus")
  local r = { driver_version = text(root, "driver_version"), cuda_version = text(root, "cuda_version"),
    attached_gpus = attached and attached:match("^%d+$") and math.tointeger(tonumber(attached)) or nil,
    gpus = {} }
  for _, c in ipairs(root) do
    if c.tag == "gpu" then r.gpus[#r.gpus + 1] = M.gpu(c, #r.gpus) end
  end
  return r
end

--- Parse nvidia-smi's document: host.xml_parse (M.LIMITS) and M.records.
-- @param host table the primitives (xml_parse)
-- @param doc string nvidia-smi's stdout
-- @param name string|nil the input in messages (default M.NAME)
-- @return records as M.records', or nil, message (one line naming the input), code (host.xml_parse's
--   code: "xml", "limit", "EFBIG"..., or "not-smi" for a well-formed document of another kind)
function M.parse(host, doc, name)
  name = name or M.NAME
  local root, err, code = host.xml_parse(doc, name, M.LIMITS)
  if not root then return nil, err, code end
  local r, rerr = M.records(root, name)
  if not r then return nil, rerr, "not-smi" end
  return r
end

--- nvidia-smi's answer when NVML cannot start (C43; e.g. after a driver update without a reboot,
-- exit 18: "Failed to initialize NVML: Driver/library version mismatch" then "NVML library
-- version: 580.105"), from its output (stdout and stderr may be joined).
-- @param out string
-- @return table {reason = "Driver/library version mismatch", library_version = "580.105" or nil},
--   or nil when the output is not such an answer
function M.nvml_failure(out)
  if type(out) ~= "string" then return nil end
  local reason = out:match("Failed to initialize NVML: ([^\r\n]*)")
  if not reason then return nil end
  reason = reason:gsub("%s+$", "")
  return { reason = reason, library_version = out:match("NVML library version: ([%w%.%-]+)") }
end

--- The kernel module's version from /proc/driver/nvidia/version, whose first line is "NVRM
-- version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (builder)  DATE"
-- (the open modules) or "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  DATE".
-- @param contents string the file's contents
-- @return string the version ("580.95.05"), or nil when no NVRM line carries one
function M.kernel_version(contents)
  local line = type(contents) == "string" and contents:match("NVRM version:[^\n]*")
  if not line then return nil end
  for word in line:gmatch("%S+") do
    if word:match("^%d+%.%d+[%.%d]*$") then return word end
  end
  return nil
end

return M
