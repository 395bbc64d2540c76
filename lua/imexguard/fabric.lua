-- SPDX-License-Identifier: Apache-2.0
--- The fabric check, step 8a of the built-in policy (field cases C31, C41, C42, C43 of
-- docs/design.md): run `nvidia-smi -q -x` once (started early: M.start), read it
-- (imexguard.smi: the XML through host.xml_parse), judge this node's GPUs
-- (imexguard.fabricjudge), wait (bounded, paced as the health wait) while a GPU is still
-- registering, and end in an outcome: fabric-fault, driver-mismatch (NVML cannot start),
-- fabric-unknown (nvidia-smi absent, hung or unparsable, with on_fabric_unknown = "fail"), or a
-- result for status, plan and the metrics (ctx.fabric). Also the domain map's partition names
-- (M.matches).
--
-- The setting nvidia_smi is an argv prefix (a site may wrap nvidia-smi: `timeout`, a container's
-- exec); imexguard appends `-q -x`. A site command that prints the CSV of the query earlier
-- versions ran (`--query-gpu=index,fabric.state,fabric.status,fabric.clusterUuid,
-- fabric.cliqueId --format=csv,noheader`) whatever its arguments is still read: registration
-- only, without the Health block (C42) and platformInfo (C41's "not waited for").
--
-- Facts: IMEX daemons can be READY and CONNECTED while a GPU is not registered with the fabric:
-- jobs then fail inside CUDA (cuMemCreate/import). After a driver package update without a reboot,
-- nvidia-smi prints "Failed to initialize NVML: Driver/library version mismatch" and "NVML library
-- version: 580.105" and exits 18 (seen: public CI logs, e.g. mozilla/translations issue 1167); CUDA
-- cannot start there either. The loaded kernel module's version is the first line of
-- /proc/driver/nvidia/version (NVIDIA's kernel module).
local settings_schema = require("imexguard.settings")
local pace = require("imexguard.pace")
-- Loaded when first used (imexguard.lazy): nothing of them with fabric_check = "off".
local lazy = require("imexguard.lazy")
local smi, judge = lazy("imexguard.smi", "imexguard.fabricjudge")
local one_line = require("imexguard.text").one_line
local trim = require("imexguard.text").trim
local excerpt = require("imexguard.text").excerpt

local M = {}

--- Seconds one nvidia-smi call may take at most (within the run's budget): it answers in about a
-- second on a 4-GPU tray; one that takes longer is hung (a GPU fallen off the bus, a driver stuck).
M.CALL_TIMEOUT = 10
--- Seconds kept back from the run's budget so that a wait that times out still ends in a named outcome.
M.MARGIN = 0.5
--- Largest /proc/driver/nvidia/version read (bytes).
local VERSION_FILE_MAX = 4096

--- The argv of the query from the settings (nvidia_smi: a path or a list used as the argv prefix,
-- then imexguard.smi.QUERY: `-q -x`, the whole document as XML).
-- @param settings table validated settings
-- @return list of strings
function M.argv(settings)
  return settings_schema.command_argv(settings.nvidia_smi, smi.QUERY)
end

--- Largest nvidia-smi output kept (bytes): the parser's limit, imexguard.smi.LIMITS.max_bytes (an
-- 8-GPU HGX board prints 360 KB).
-- @return integer
function M.max_output()
  return smi.LIMITS.max_bytes
end

local Early = {}
Early.__index = Early

--- Kill and reap the early query unless it was waited for (also its __close). Idempotent.
function Early:close()
  if self.proc and not self.used then self.proc:close() end
  self.used = true
end
Early.__close = Early.close

--- Start the query early (host.spawn), so that nvidia-smi (about a second on a GB200 tray) runs
-- while the prolog takes the lock and asks systemd and the ctl; the check's first read then waits
-- for it (M.read). Nothing starts with fabric_check = "off" or without host.spawn.
-- @param ctx table policy context (sets ctx.fabric_early)
-- @return early query (use `local q <close> = early`: closing kills it when never waited for), or nil
function M.start(ctx)
  local h, s = ctx.host, ctx.settings
  if s.fabric_check == "off" or type(h.spawn) ~= "function" then return nil end
  local timeout = math.min(M.CALL_TIMEOUT, math.max(h.remaining() - M.MARGIN, 0.05))
  local proc, err, code = h.spawn(M.argv(s), { timeout = timeout, max_output = M.max_output() })
  local q = setmetatable({ proc = proc, err = err, code = code, timeout = timeout }, Early)
  ctx.fabric_early = q
  return q
end

--- The loaded kernel module's version (C43): the NVRM line of the setting driver_version_file
-- (default /proc/driver/nvidia/version), read with host.read.
-- @param ctx table policy context
-- @return version string, or nil, why (one line naming the file)
function M.kernel_version(ctx)
  local path = ctx.settings.driver_version_file
  local t, err = ctx.host.read(path, VERSION_FILE_MAX)
  if not t then return nil, string.format("%s: %s", path, tostring(err)) end
  local v = smi.kernel_version(t)
  if not v then return nil, path .. " has no NVRM version line" end
  return v
end

-- The verdict when NVML cannot start because the driver's kernel module and library differ (C43).
local function mismatch(ctx, nvml)
  local kernel, why = M.kernel_version(ctx)
  local path = ctx.settings.driver_version_file
  return { kind = "driver-mismatch", kernel_version = kernel, library_version = nvml.library_version,
    message = one_line(string.format("NVML cannot start: %s: kernel module %s, NVML library %s (the "
      .. "driver was updated without a reboot: CUDA cannot start on this node either; reboot it, or reload "
      .. "the nvidia kernel modules)", nvml.reason, kernel and (kernel .. " (" .. path .. ")")
      or ("version unknown (" .. why .. ")"), nvml.library_version or "version not printed")) }
end

-- The GPUs of nvidia-smi's standard output: the XML document (smi.parse, smi.fabric_gpus), or the
-- CSV of the earlier query (a site command that prints it: smi.parse_csv).
-- @return list of checked GPUs, or nil, message
local function answer_gpus(ctx, out, xml)
  if xml or out:find("<?xml", 1, true) then
    local r, err = smi.parse(ctx.host, out)
    if not r then return nil, err end
    return smi.fabric_gpus(r)
  end
  local gpus, err = smi.parse_csv(out)
  if not gpus then
    return nil, "neither the XML of nvidia-smi -q -x nor the CSV of its fabric query: " .. err
  end
  ctx.host.log("debug", "nvidia-smi answered the CSV of the fabric query (a site command): registration "
    .. "only, no Health block")
  return gpus
end

--- Run nvidia-smi once (or wait for the early one, M.start, when it was not used yet) and judge its
-- answer.
-- @param ctx table policy context (ctx.host.run, ctx.settings.nvidia_smi, ctx.fabric_early)
-- @param timeout number seconds for the call
-- @return verdict (imexguard.fabricjudge.judge's), or {kind = "driver-mismatch", message = one line
--   naming both versions, kernel_version, library_version} (NVML cannot start: C43), or
--   {kind = "unknown", message = one line (absent, hung, NVML failing for another reason, a failed
--   exit, too long, unparsable), code = the run's error code or nil}
function M.read(ctx, timeout)
  local argv = M.argv(ctx.settings)
  local res, err, code
  local q = ctx.fabric_early
  if q and not q.used then
    q.used, timeout = true, q.timeout
    if q.proc then res, err, code = q.proc:wait() else err, code = q.err, q.code end
  else
    res, err, code = ctx.host.run(argv, { timeout = timeout, max_output = M.max_output() })
  end
  local function unknown(fmt, ...)
    return { kind = "unknown", code = code, message = one_line(argv[1] .. " " .. string.format(fmt, ...)) }
  end
  if not res then
    if code == "timeout" then return unknown("hung: no answer within %g s", timeout) end
    if code == "deadline" then return unknown("the run's deadline passed") end
    return unknown("cannot run: %s (%s)", tostring(err), tostring(code))
  end
  local out = res.stdout or ""
  local xml = out:find("<nvidia_smi_log", 1, true) ~= nil
  -- NVML's failure (exit 18 on a mismatch) is a few lines, never beside the document
  local nvml = not (xml and res.status == 0) and smi.nvml_failure(out .. "\n" .. (res.stderr or ""))
  if nvml and nvml.reason:lower():find("version mismatch", 1, true) then return mismatch(ctx, nvml) end
  if nvml then return unknown("exited %s: NVML cannot start: %s", tostring(res.status), nvml.reason) end
  if res.status ~= 0 then
    local first = trim(out .. "\n" .. (res.stderr or "")):match("^[^\n]*")
    return unknown("exited %s: %s", tostring(res.status or ("on signal " .. tostring(res.signal))),
      excerpt(first))
  end
  if res.truncated then return unknown("printed more than %d bytes", M.max_output()) end
  local gpus, perr = answer_gpus(ctx, out, xml)
  if not gpus then return unknown("answered something unparsable: %s", perr) end
  return judge.judge(gpus)
end

--- Parse a domain name that names an NVLink partition by its fabric identity:
-- "<ClusterUUID>.<CliqueId>" or "<ClusterUUID>:<CliqueId>".
-- @param name string
-- @return {cluster_uuid (lowercase), clique_id (integer), id}, or nil (another kind of name)
function M.parse_identity(name)
  if type(name) ~= "string" then return nil end
  local uuid, clique = name:match("^%s*(%x+%-%x+%-%x+%-%x+%-%x+)[.:](%d+)%s*$")
  if not uuid or not uuid:match(smi.UUID_PATTERN) then return nil end
  local id = math.tointeger(tonumber(clique))
  if not id then return nil end
  uuid = uuid:lower()
  return { cluster_uuid = uuid, clique_id = id, id = uuid .. "." .. tostring(id) }
end

--- Does this node's partition match the domain map's name for its domain (C31)?
-- @param partition table|nil this node's identity {cluster_uuid, clique_id} (a healthy verdict's
--   `partition`); nil: the node's GPUs report none (no multi-node NVLink)
-- @param domain_name string the name of the node's domain in the domain map
-- @return nil when the name is not a fabric identity (no comparison); true when it names this
--   node's partition; false, one-line message naming both identities when it names another one (this
--   node is at fault: its GPUs are not in the partition the map puts it in)
function M.matches(partition, domain_name)
  local want = M.parse_identity(domain_name)
  if not want then return nil end
  if type(partition) ~= "table" or not partition.cluster_uuid then
    return false, string.format("the domain map names partition %s (domain %s); this node's GPUs report "
      .. "no NVLink partition", want.id, excerpt(domain_name))
  end
  local mine = tostring(partition.cluster_uuid):lower() .. "." .. tostring(partition.clique_id)
  if mine == want.id then return true end
  return false, string.format("the domain map names partition %s (domain %s); this node's GPUs report "
    .. "partition %s", want.id, excerpt(domain_name), mine)
end

-- Read the registration until no GPU is registering, or the window (seconds; 0: one read) or the
-- run's budget is spent, polled at the health wait's pace (imexguard.pace over poll_interval).
-- @return the last read (M.read's verdict), polls (number of reads), cut (true when the run's
--   deadline cut a sleep short)
local function read_settled(ctx, start, window)
  local h = ctx.host
  local p = pace.new(ctx.settings.poll_interval, start)
  local v
  local polls, cut = 0, false
  while true do
    local asked = h.now()
    local timeout = math.min(M.CALL_TIMEOUT, math.max(h.remaining() - M.MARGIN, 0.05))
    v = M.read(ctx, timeout)
    polls = polls + 1
    p:polled(asked, h.now(), v.message)
    h.log("debug", string.format("fabric poll %d at %.3f s: %s", polls, h.now() - start, v.message))
    if v.kind ~= "pending" then break end
    local left = window - (h.now() - start)
    if left <= 0 then break end
    if not h.sleep(math.min(p:delay(h.now()), left)) then cut = true; break end
  end
  return v, polls, cut
end

-- The check's answer on the last read v (see M.check): r (its result table, ctx.fabric), or nil,
-- outcome, message. node: this node's name; waited: seconds since the first read; cut: the run's
-- deadline cut the wait short.
local function check_result(ctx, opts, node, v, r, waited, cut)
  local h, s = ctx.host, ctx.settings
  if v.kind == "fault" then
    return nil, "fabric-fault", one_line(string.format("node %s: %s; this node is at fault, not its peers",
      node, v.message))
  end
  if v.kind == "driver-mismatch" then
    return nil, "driver-mismatch", one_line(string.format("node %s: %s; this node is at fault, not its peers",
      node, v.message))
  end
  if v.kind == "unknown" then
    if v.code == "deadline" then
      return nil, "deadline-exceeded", one_line(string.format("node %s: fabric check: %s", node, v.message))
    end
    local msg = one_line(string.format("node %s: fabric registration unknown: %s", node, v.message))
    if s.on_fabric_unknown == "fail" then return nil, "fabric-unknown", msg end
    h.log("warning", msg .. " (on_fabric_unknown = \"skip\": not checked)")
    r.message = msg
    return r
  end
  if v.kind == "pending" and cut then
    return nil, "deadline-exceeded", one_line(string.format("node %s: fabric check: the run's deadline "
      .. "passed after %.1f s: %s", node, waited, v.message))
  end
  if v.kind == "pending" and opts.wait then
    return nil, "fabric-fault", one_line(string.format("node %s: %s after waiting %.1f s (fabric_timeout "
      .. "%g s); this node is at fault, not its peers", node, v.message, waited, s.fabric_timeout))
  end
  if v.kind == "none" then
    h.log(v.warn and "warning" or "info", "node " .. node .. ": " .. v.message .. ": no fabric check")
  end
  local registered = v.kind == "healthy" or v.kind == "degraded"
  local name = opts.domain and opts.domain.name
  if name ~= nil and (registered or v.kind == "none") then
    local ok, why = M.matches(v.partition, name)
    if ok == false then
      r.state = "fault"
      return nil, "fabric-fault", one_line(string.format("node %s: %s; this node is at fault, not its peers",
        node, why))
    end
  end
  if registered and waited > 0 and r.polls > 1 then
    r.message = string.format("%s (after waiting %.1f s)", v.message, waited)
  end
  return r
end

--- The fabric check of a command: read nvidia-smi, wait while a GPU is registering on a node that
-- may have multi-node NVLink (with opts.wait: up to the setting fabric_timeout, bounded by the run's
-- budget, polled at the health wait's pace, imexguard.pace over poll_interval), judge
-- (imexguard.fabricjudge), and compare with the domain map's name. A node without multi-node NVLink
-- (state "none": every GPU N/A, or registered with a zero ClusterUUID, C41) is not checked further,
-- said once in the log (at warning when its platformInfo places it in a rack).
-- Sets ctx.fabric = the result (for status, plan and the metrics).
-- @param ctx table policy context (settings fabric_check, nvidia_smi, fabric_timeout,
--   on_fabric_unknown, poll_interval)
-- @param opts table|nil {wait = boolean (default false: one read), domain = {name = ...} | nil (this
--   node's domain from the domain map: its name is compared with matches)}
-- @return result {state = "off" | "none" | "healthy" | "degraded" | "pending" | "unknown", message =
--   one line, partition = identity or nil, polls = number of reads, gpus = the checked GPUs or nil,
--   degraded = list of {gpu, field, label, value} or nil}, or nil, outcome ("fabric-fault",
--   "driver-mismatch" whatever on_fabric_unknown says, "fabric-unknown" with on_fabric_unknown =
--   "fail", "deadline-exceeded"), message (one line, naming this node, the GPU and its fields, or
--   both driver versions). ctx.fabric is set on every path (state "fault" or "driver-mismatch" on
--   those outcomes).
function M.check(ctx, opts)
  opts = opts or {}
  local h, s = ctx.host, ctx.settings
  local node = (ctx.job and ctx.job.nodename) or (ctx.env and ctx.env.SLURMD_NODENAME) or h.hostname()
  if s.fabric_check == "off" then
    ctx.fabric = { state = "off", message = "fabric check off (fabric_check = \"off\")", polls = 0 }
    return ctx.fabric
  end
  local start = h.now()
  local window = opts.wait and math.min(s.fabric_timeout, math.max(h.remaining() - M.MARGIN, 0)) or 0
  local v, polls, cut = read_settled(ctx, start, window)
  local waited = h.now() - start
  local r = { state = v.kind, message = v.message, partition = v.partition, polls = polls, gpus = v.gpus,
    gpu = v.gpu, degraded = v.degraded }
  ctx.fabric = r
  return check_result(ctx, opts, node, v, r, waited, cut)
end

return M
