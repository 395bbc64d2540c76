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
-- captures (tests/fixtures/nvidia-smi/qx-*.xml: GB200 and GB300 trays, HGX B200 and H100, an A100).
--
-- The fabric fields of each GPU, checked (M.fabric_gpus), are what imexguard.fabric judges; the
-- CSV of `nvidia-smi --query-gpu=index,fabric.state,...` (what earlier imexguard versions asked,
-- and what a site's nvidia_smi command may still print) and the Fabric section of `nvidia-smi -q`
-- (field reports) give the same checked GPUs (M.parse_csv, M.parse_q).
local trim = require("imexguard.text").trim
local excerpt = require("imexguard.text").excerpt

local M = {}

--- nvidia-smi's arguments (after the program) for the document.
M.QUERY = { "-q", "-x" }
--- The name of the input in messages.
M.NAME = "nvidia-smi -q -x"
--- What nvidia-smi prints for a field without a value.
M.NA = "N/A"
--- The limits given to host.xml_parse: nvidia-smi prints about 45 KB and 750 elements per GPU, six
-- levels deep. `skip`: the elements of a GPU that no record reads, left out of the tree (parsed
-- still): the supported clocks alone are two thirds of an HGX board's elements (3992 of 6045 in
-- tests/fixtures/nvidia-smi/qx-b200.xml), and a busy GPU's process lists grow with its jobs.
M.LIMITS = { max_bytes = 8 * 1024 * 1024, max_depth = 16, max_elements = 200000,
  skip = { "supported_clocks", "processes", "accounted_processes", "pci", "ecc_errors", "retired_pages",
    "remapped_rows", "clocks_event_reasons", "temperature", "voltage", "clocks", "max_clocks",
    "applications_clocks", "default_applications_clocks", "deferred_clocks", "clock_policy" } }

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

-- ---------------------------------------------------------------------------------------------
-- The fabric fields of each GPU, checked: what imexguard.fabric judges.

--- The ClusterUUID of a GPU outside any multi-node NVLink domain.
M.ZERO_UUID = "00000000-0000-0000-0000-000000000000"
--- The registration states (fabric.state) a GPU passes through; N/A (or "Not Supported") is none.
M.STATES = { ["Not Started"] = "pending", ["In Progress"] = "pending", ["Completed"] = "done" }

local UUID = "^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$"
--- The Lua pattern of a UUID as nvidia-smi prints it (8-4-4-4-12 hex digits).
M.UUID_PATTERN = UUID
-- the tokens nvidia-smi prints for a field without a value (bare in CSV, bracketed in some versions)
local NA = { ["N/A"] = true, ["[N/A]"] = true, ["Not Supported"] = true, ["[Not Supported]"] = true }

--- Is v a field without a value ("N/A", "Not Supported", bracketed or not; nil)?
-- @param v string|nil
-- @return boolean
function M.is_na(v)
  return v == nil or NA[v] == true
end

--- A GPU's checked fabric fields.
-- @param index integer the GPU's index
-- @param f table {state, status, cluster_uuid, clique_id} as printed (strings; nil: absent)
-- @param where string the GPU in messages ("line 3: GPU 1", "GPU 1 (00000008:01:00.0)")
-- @return {index, na = boolean (the state is N/A: no fabric on this GPU), state = string|nil,
--   status = string|nil, cluster_uuid = lowercase string|nil, clique_id = integer|nil} (nil: N/A),
--   or nil, message naming the GPU and the field (an unknown state, an empty status, a
--   ClusterUUID that is not a UUID, a CliqueId that is not a number)
local function checked(index, f, where)
  local g = { index = index, na = M.is_na(f.state) }
  if not g.na then
    if not M.STATES[f.state] then
      return nil, string.format("%s: unknown fabric.state %s", where, excerpt(f.state))
    end
    g.state = f.state
  end
  if not M.is_na(f.status) then
    if f.status == "" then return nil, string.format("%s: empty fabric.status", where) end
    g.status = f.status
  end
  if not M.is_na(f.cluster_uuid) then
    if not f.cluster_uuid:match(UUID) then
      return nil, string.format("%s: fabric.clusterUuid %s is not a UUID", where, excerpt(f.cluster_uuid))
    end
    g.cluster_uuid = f.cluster_uuid:lower()
  end
  if not M.is_na(f.clique_id) then
    g.clique_id = f.clique_id:match("^%d+$") and math.tointeger(tonumber(f.clique_id))
    if not g.clique_id then
      return nil, string.format("%s: fabric.cliqueId %s is not a number", where, excerpt(f.clique_id))
    end
  end
  return g
end

--- The checked fabric of every GPU of M.records' result: per GPU, checked's fields plus `health`
-- (its <health> fields, raw, or nil when the driver prints none) and `platform` (its
-- <platformInfo>, raw, or nil). A GPU without a <fabric> element (an older driver) is N/A.
-- @param r table M.records' (or M.parse's) result
-- @param name string|nil the input in messages (default M.NAME)
-- @return list of GPUs in index order, or nil, message (one line naming the input, the GPU and
--   the field; no <gpu> element at all)
function M.fabric_gpus(r, name)
  name = name or M.NAME
  if #r.gpus == 0 then return nil, name .. ": no <gpu> element" end
  local gpus = {}
  for i, rec in ipairs(r.gpus) do
    local where = string.format("%s: GPU %d (%s)", name, rec.index, tostring(rec.pci_bus_id))
    local g, err = checked(rec.index, rec.fabric or {}, where)
    if not g then return nil, err end
    g.health, g.platform = rec.fabric and rec.fabric.health, rec.platform
    gpus[i] = g
  end
  return gpus
end

--- Parse the CSV of `nvidia-smi --query-gpu=index,fabric.state,fabric.status,fabric.clusterUuid,
-- fabric.cliqueId --format=csv,noheader` (pure): one line per GPU, fields separated by commas;
-- blanks around fields and blank lines are ignored; CRLF taken. No Health block, no platformInfo.
-- @param csv string
-- @return list of GPUs in the order printed (checked's shape), or nil, message naming the line and
--   the field (no line, a line without 5 fields, an index that is not a number or repeats, and
--   checked's)
function M.parse_csv(csv)
  if type(csv) ~= "string" then return nil, "no output" end
  local gpus, seen, n = {}, {}, 0
  for line in (csv .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    line = trim(line)
    if line ~= "" then
      local f = {}
      for field in (line .. ","):gmatch("([^,]*),") do f[#f + 1] = trim(field) end
      if #f ~= 5 then
        return nil, string.format("line %d: %d fields instead of 5 (index, state, status, ClusterUUID, "
          .. "CliqueId): %s", n, #f, excerpt(line))
      end
      local index = f[1]:match("^%d+$") and math.tointeger(tonumber(f[1]))
      if not index then
        return nil, string.format("line %d: GPU index %s is not a number", n, excerpt(f[1]))
      end
      if seen[index] then return nil, string.format("line %d: GPU %d listed twice", n, index) end
      seen[index] = true
      local g, err = checked(index, { state = f[2], status = f[3], cluster_uuid = f[4], clique_id = f[5] },
        string.format("line %d: GPU %d", n, index))
      if not g then return nil, err end
      gpus[#gpus + 1] = g
    end
  end
  if #gpus == 0 then return nil, "no GPU line" end
  return gpus
end

-- The labels of `nvidia-smi -q`'s Fabric section: its fields, and those of its Health block
-- (label -> key of M.FABRIC or element of M.HEALTH).
local Q_FABRIC = { State = "state", Status = "status", CliqueId = "clique_id", ClusterUUID = "cluster_uuid" }
local Q_HEALTH = { Summary = "summary", Bandwidth = "bandwidth",
  ["Route Recovery in progress"] = "route_recovery_in_progress", ["Route Unhealthy"] = "route_unhealthy",
  ["Access Timeout Recovery"] = "access_timeout_recovery", ["Incorrect Configuration"] =
  "incorrect_configuration", ["Partition Assigned"] = "partition_assigned" }

--- The "label : value" of a line, or nil.
local function label_value(line)
  return line:match("^%s*(%S[^:]-)%s*:%s*(.-)%s*$")
end

--- Parse the Fabric sections of `nvidia-smi -q` (pure): per GPU ("GPU 00000009:01:00.0" headers, in
-- order, numbered from 0), its Fabric block's State, Status, CliqueId and ClusterUUID, and its
-- Health block. Reads field reports (tests/fixtures/nvidia-smi/q-*.txt); the check runs `-q -x`.
-- @param report string
-- @return list of GPUs as M.parse_csv's, with `health` when the section has one, or nil, message
function M.parse_q(report)
  if type(report) ~= "string" then return nil, "no output" end
  local gpus, cur, section, indent = {}, nil, nil, nil
  for line in (report .. "\n"):gmatch("([^\n]*)\n") do
    line = line:gsub("\r$", "")
    local lead = #line:match("^(%s*)")
    if line:match("^GPU %x+:%x+:%x+%.%x") then
      cur, section = { fabric = {} }, nil
      gpus[#gpus + 1] = cur
    elseif cur and trim(line) == "Fabric" then
      section, indent = "fabric", lead
    elseif section and trim(line) ~= "" then
      if lead <= indent then
        section = nil
      elseif trim(line) == "Health" then
        cur.health = cur.health or {}
      else
        local k, v = label_value(line)
        local key = Q_FABRIC[k]
        if key and cur.fabric[key] == nil and not cur.health then cur.fabric[key] = v end
        if Q_HEALTH[k] and cur.health and cur.health[Q_HEALTH[k]] == nil then cur.health[Q_HEALTH[k]] = v end
      end
    end
  end
  if #gpus == 0 then return nil, "no GPU section" end
  local out = {}
  for i, rec in ipairs(gpus) do
    local g, err = checked(i - 1, rec.fabric, "GPU " .. (i - 1))
    if not g then return nil, err end
    g.health = rec.health
    out[i] = g
  end
  return out
end

return M
