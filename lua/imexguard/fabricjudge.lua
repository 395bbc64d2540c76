-- SPDX-License-Identifier: Apache-2.0
--- The judgement on a node's GPUs as the NVLink fabric sees them (pure; field cases C31, C41, C42
-- of docs/design.md): their registration, whether the node has multi-node NVLink at all, and the
-- fabric's own Health block. The GPUs are imexguard.smi's checked ones (M.fabric_gpus over
-- `nvidia-smi -q -x`, or parse_csv, parse_q); reading them and waiting is imexguard.fabric's.
--
-- Facts (NVIDIA NVML documentation, "Fabric definitions"; nvidia-smi -q section "Fabric"; the real
-- captures in tests/fixtures/nvidia-smi/; seen on GB200 NVL72 in Azure's azhpc-images PR #506, the
-- NVIDIA DRA driver, gpud):
-- * Registration: fabric.state is "Not Started", "In Progress" or "Completed"; fabric.status is
--   separate and only meaningful once Completed, where it can carry a failure ("Insufficient
--   Resources", "Unknown Error"...). A GPU without NVSwitch reports N/A. Two GPUs share memory over
--   NVLink iff both completed with status Success and their (ClusterUUID, CliqueId) pair, the NVLink
--   partition, is the same.
-- * A zero ClusterUUID means no multi-node NVLink: HGX boards (B200, H100: single-node NVSwitch)
--   register every GPU Completed, Success, CliqueId 0, ClusterUUID all zero (the captures; NVIDIA's
--   DRA driver treats it as "not multi-node", not an error).
-- * Where a node is: <platformInfo> names a rack tray's slot and tray index (GB200, GB300:
--   slot_number, tray_index), and only GB200/GB300 print <health><partition_assigned>; HGX boards
--   print an empty or N/A chassis serial number and N/A slot and tray (the B200 and H100 captures).
--   A chassis serial number alone is not a rack (a DGX chassis may carry one).
-- * Health (driver 580, NVML healthMask and healthSummary): Summary Healthy, Limited Capacity,
--   Unhealthy or N/A; Bandwidth Full or Degraded; Route Recovery in progress, Route Unhealthy,
--   Access Timeout Recovery True or False; Incorrect Configuration None or a reason (SysGUID,
--   Chassis Serial Number, No Partition, Insufficient NVLinks, Incompatible GPU Firmware, Invalid
--   Location). NVIDIA's NMX partition health calls a partition with parked GPUs or missing trunk
--   links "operational" (degraded) and an unhealthy one "not operational".
local smi = require("imexguard.smi")
local one_line = require("imexguard.text").one_line

local M = {}

--- The Health fields that make this node at fault: element -> function(value) -> true when bad.
--- (Summary Unhealthy, Route Unhealthy True, an Incorrect Configuration other than None/N/A.)
M.HEALTH_FAULTS = {
  { "summary", function(v) return v == "unhealthy" end },
  { "route_unhealthy", function(v) return v == "true" end },
  { "incorrect_configuration", function(v) return v ~= "none" and v ~= "" end },
}
--- The Health fields that degrade the fabric without stopping jobs (they run, slower): Summary
-- Limited Capacity, Bandwidth Degraded, a route recovery or an access timeout recovery in progress.
M.HEALTH_DEGRADED = {
  { "summary", function(v) return v == "limited capacity" end },
  { "bandwidth", function(v) return v == "degraded" end },
  { "route_recovery_in_progress", function(v) return v == "true" end },
  { "access_timeout_recovery", function(v) return v == "true" end },
}
--- The Health fields' names as `nvidia-smi -q` prints them (for messages).
M.LABELS = { summary = "Summary", bandwidth = "Bandwidth", route_recovery_in_progress =
  "Route Recovery in progress", route_unhealthy = "Route Unhealthy", access_timeout_recovery =
  "Access Timeout Recovery", incorrect_configuration = "Incorrect Configuration", partition_assigned =
  "Partition Assigned" }

--- A GPU's fields for a message: "GPU 1: fabric.state Completed, fabric.status Insufficient
-- Resources, ClusterUUID ..., CliqueId ...".
-- @param g table a checked GPU (imexguard.smi)
-- @return string
function M.describe(g)
  return string.format("GPU %d: fabric.state %s, fabric.status %s, ClusterUUID %s, CliqueId %s", g.index,
    g.na and "N/A" or tostring(g.state), g.status or "N/A", g.cluster_uuid or "N/A",
    g.clique_id and tostring(g.clique_id) or "N/A")
end

--- The partition identity of a registered GPU: {cluster_uuid, clique_id, id = "<uuid>.<cliqueid>"}.
local function partition_of(g)
  return { cluster_uuid = g.cluster_uuid, clique_id = g.clique_id,
    id = g.cluster_uuid .. "." .. tostring(g.clique_id) }
end

-- "GPUs 0-2" / "GPU 3" / "GPUs 0, 2".
local function gpu_list(indices)
  table.sort(indices)
  if #indices == 1 then return "GPU " .. indices[1] end
  local run = true
  for i = 2, #indices do run = run and indices[i] == indices[i - 1] + 1 end
  if run then return string.format("GPUs %d-%d", indices[1], indices[#indices]) end
  return "GPUs " .. table.concat(indices, ", ")
end

local function numbered(v) return v ~= nil and v:match("^%d+$") ~= nil end

--- Does this node have multi-node NVLink (C41)? From the GPUs' platformInfo and Health block.
-- @param gpus list of checked GPUs
-- @return "rack" (a GPU registered with a non-zero ClusterUUID, a platformInfo with a slot number
--   or tray index, or a Health block with partition_assigned: a tray of an NVLink rack), "single"
--   (platformInfo printed, and none of those: an HGX board), or nil (nothing tells: the CSV answer,
--   an older driver), and a phrase naming the evidence
function M.placement(gpus)
  local seen_platform = false
  for _, g in ipairs(gpus) do
    local p = g.platform
    if g.state == "Completed" and g.cluster_uuid and g.cluster_uuid ~= smi.ZERO_UUID then
      return "rack", string.format("GPU %d is registered in partition %s", g.index, partition_of(g).id)
    end
    if p and (numbered(p.slot_number) or numbered(p.tray_index)) then
      return "rack", string.format("platformInfo places GPU %d in slot %s, tray %s of chassis %s", g.index,
        tostring(p.slot_number), tostring(p.tray_index), tostring(p.chassis_serial_number))
    end
    if g.health and g.health.partition_assigned ~= nil then
      return "rack", string.format("GPU %d's fabric health has Partition Assigned", g.index)
    end
    seen_platform = seen_platform or p ~= nil
  end
  if seen_platform then return "single", "platformInfo names no rack slot or tray (an HGX board)" end
  return nil, "nothing tells whether this node has multi-node NVLink"
end

-- The Health fields of g that match a rule list (M.HEALTH_FAULTS or M.HEALTH_DEGRADED), as
-- {gpu, field, label, value} (the value as printed); empty without a Health block.
local function health_findings(g, rules)
  local out = {}
  if not g.health then return out end
  for _, rule in ipairs(rules) do
    local v = g.health[rule[1]]
    if not smi.is_na(v) and rule[2](v:lower()) then
      out[#out + 1] = { gpu = g.index, field = rule[1], label = M.LABELS[rule[1]], value = v }
    end
  end
  return out
end

-- "Summary Unhealthy, Route Unhealthy True".
local function fields_text(list)
  local t = {}
  for _, f in ipairs(list) do t[#t + 1] = f.label .. " " .. f.value end
  return table.concat(t, ", ")
end

local function fault(v, g, why)
  v.kind, v.gpu = "fault", g.index
  v.message = one_line(string.format("%s (%s)", M.describe(g), why))
  return v
end

-- The registration of every GPU sorted: returns nil, or v as a fault (a GPU N/A beside registered
-- ones, a failed status); else the lists pending, zero (Completed, Success, zero or no
-- ClusterUUID), multi (Completed, Success, non-zero ClusterUUID).
local function sort_registration(v, gpus)
  local pending, zero, multi = {}, {}, {}
  for _, g in ipairs(gpus) do
    if g.na then
      return fault(v, g, "no fabric registration while other GPUs of this node have one")
    elseif smi.STATES[g.state] == "pending" then
      pending[#pending + 1] = g
    elseif g.status ~= "Success" then
      return fault(v, g, "registration with the NVLink fabric failed")
    elseif not g.cluster_uuid or g.cluster_uuid == smi.ZERO_UUID then
      zero[#zero + 1] = g
    else
      multi[#multi + 1] = g
    end
  end
  return nil, pending, zero, multi
end

-- The GPUs of `multi` outside the largest partition (the first printed on a tie) as a fault, or nil.
local function partition_fault(v, multi)
  local groups, order = {}, {}
  for _, g in ipairs(multi) do
    local id = partition_of(g).id
    if not groups[id] then groups[id] = {}; order[#order + 1] = id end
    table.insert(groups[id], g)
  end
  if #order < 2 then return nil end
  table.sort(order, function(a, b)
    if #groups[a] ~= #groups[b] then return #groups[a] > #groups[b] end
    return groups[a][1].index < groups[b][1].index
  end)
  local main, odd = order[1], groups[order[2]][1]
  local main_ix = {}
  for _, g in ipairs(groups[main]) do main_ix[#main_ix + 1] = g.index end
  return fault(v, odd, string.format("in another NVLink partition than %s (ClusterUUID.CliqueId %s): the "
    .. "GPUs of one node cannot share memory", gpu_list(main_ix), main))
end

-- Faults among the registered GPUs of a node with multi-node NVLink: a zero ClusterUUID beside
-- non-zero ones, no CliqueId, the Health block (C42); v as a fault, or nil.
local function multi_fault(v, zero, multi)
  if #multi == 0 then return nil end
  if #zero > 0 then
    local ix = {}
    for _, g in ipairs(multi) do ix[#ix + 1] = g.index end
    return fault(v, zero[1], string.format("zero ClusterUUID beside %s in partition %s: not in this node's "
      .. "multi-node NVLink domain", gpu_list(ix), partition_of(multi[1]).id))
  end
  for _, g in ipairs(multi) do
    if not g.clique_id then return fault(v, g, "no CliqueId") end
  end
  local bad = {}
  for _, g in ipairs(multi) do
    local f = health_findings(g, M.HEALTH_FAULTS)
    if #f > 0 then bad[#bad + 1] = string.format("GPU %d: fabric health %s", g.index, fields_text(f)) end
    if #f > 0 and not v.gpu then v.gpu = g.index end
  end
  if #bad == 0 then return nil end
  v.kind = "fault"
  v.message = one_line(table.concat(bad, "; ") .. " (the NVLink fabric reports this GPU unhealthy: jobs "
    .. "fail or hang in NVLink transfers)")
  return v
end

-- The verdict of a node without multi-node NVLink: every GPU N/A, every registered GPU with a zero
-- ClusterUUID, or GPUs still registering on a node whose platformInfo names no rack slot.
local function none(v, why)
  v.kind, v.message = "none", "no multi-node NVLink: " .. why
  return v
end

--- Judge the GPUs of this node (pure).
-- @param gpus list of checked GPUs (imexguard.smi: fabric_gpus, parse_csv, parse_q)
-- @return verdict {kind = "healthy" | "degraded" | "pending" | "fault" | "none", message = one line,
--   partition = {cluster_uuid, clique_id, id} (healthy, degraded), gpu = index of the (first) GPU
--   at fault (fault), pending = list of indices still registering (pending), degraded = list of
--   {gpu, field, label, value} (degraded), placement = "rack" | "single" | nil (M.placement),
--   warn = true when a "none" contradicts the placement, gpus = the input}.
--   none: every GPU N/A; every GPU Completed, Success with a zero ClusterUUID (C41); GPUs Not
--   Started or In Progress, none registered in a partition, on a node whose platformInfo names no
--   rack slot (not waited for: C41). Fault (this node is at fault): a Completed GPU whose status
--   is not Success, a GPU with N/A beside registered ones, a zero ClusterUUID beside non-zero ones,
--   a missing CliqueId, GPUs in different partitions, a Health block with Summary Unhealthy, Route
--   Unhealthy True or an Incorrect Configuration (C42). Pending: no fault, some GPU Not Started or
--   In Progress on a node that may have multi-node NVLink. Healthy: every GPU Completed, Success,
--   in one partition; degraded: the same with Summary Limited Capacity, Bandwidth Degraded or a
--   recovery in progress on some GPU (jobs run, slower).
function M.judge(gpus)
  local v = { gpus = gpus }
  local where, evidence = M.placement(gpus)
  v.placement = where
  local na = 0
  for _, g in ipairs(gpus) do if g.na then na = na + 1 end end
  if na == #gpus then return none(v, string.format("fabric.state N/A on all %d GPUs", #gpus)) end
  local f, pending, zero, multi = sort_registration(v, gpus)
  if f then return f end
  if multi_fault(v, zero, multi) then return v end
  if #pending > 0 then
    local states = {}
    for _, g in ipairs(pending) do states[#states + 1] = "GPU " .. g.index .. " " .. g.state end
    if #multi == 0 and where == "single" then
      return none(v, evidence .. "; fabric registration not waited for: " .. table.concat(states, ", "))
    end
    v.kind, v.pending = "pending", {}
    for _, g in ipairs(pending) do v.pending[#v.pending + 1] = g.index end
    v.message = "fabric registration not finished: " .. table.concat(states, ", ")
    return v
  end
  if #multi == 0 then
    none(v, string.format("all %d GPUs registered with a zero ClusterUUID (NVLink inside the node only)",
      #gpus))
    if where == "rack" then
      v.warn = true
      v.message = one_line(v.message .. "; yet " .. evidence .. ": if it belongs to a rack's NVLink domain, "
        .. "its fabric is not set up")
    end
    return v
  end
  if partition_fault(v, multi) then return v end
  v.partition = partition_of(multi[1])
  local deg = {}
  for _, g in ipairs(multi) do
    for _, d in ipairs(health_findings(g, M.HEALTH_DEGRADED)) do deg[#deg + 1] = d end
  end
  v.kind = #deg > 0 and "degraded" or "healthy"
  v.message = string.format("%d GPUs registered with the NVLink fabric, partition %s", #gpus, v.partition.id)
  if #deg > 0 then
    v.degraded = deg
    local t = {}
    for _, d in ipairs(deg) do t[#t + 1] = string.format("GPU %d %s %s", d.gpu, d.label, d.value) end
    v.message = one_line(v.message .. "; degraded: " .. table.concat(t, ", ") .. " (jobs run, slower)")
  end
  return v
end

return M
