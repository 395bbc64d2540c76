-- SPDX-License-Identifier: Apache-2.0
--- The GPUs' NVLink fabric registration (field case C31 of docs/design.md): read it with
-- `nvidia-smi --query-gpu=index,fabric.state,fabric.status,fabric.clusterUuid,fabric.cliqueId
-- --format=csv,noheader` (NVML's nvmlDeviceGetGpuFabricInfoV, one line per GPU), judge it, and wait
-- (bounded, paced as the health wait) while a GPU is still registering.
--
-- Facts (NVIDIA NVML documentation; nvidia-smi -q section "Fabric"; seen on GB200 NVL72 in Azure's
-- azhpc-images PR #506, the NVIDIA DRA driver, gpud): a GPU's fabric.state is "Not Started",
-- "In Progress" or "Completed"; fabric.status is separate and only meaningful once Completed, where it
-- can carry a failure ("Insufficient Resources", "Unknown Error"...). A GPU without NVSwitch reports
-- N/A in every field (no multi-node NVLink: nothing to check). Two GPUs share memory over NVLink iff
-- both completed with status Success and their (ClusterUUID, CliqueId) pair, the NVLink partition,
-- is the same; a zero ClusterUUID means no multi-node NVLink. IMEX daemons can be READY and
-- CONNECTED while a GPU is not registered: jobs then fail inside CUDA (cuMemCreate/import).
local settings_schema = require "imexguard.settings"
local pace = require "imexguard.pace"
local one_line = require("imexguard.text").one_line
local trim = require("imexguard.text").trim
local excerpt = require("imexguard.text").excerpt

local M = {}

--- The query of nvidia-smi (its arguments after the program).
M.QUERY = { "--query-gpu=index,fabric.state,fabric.status,fabric.clusterUuid,fabric.cliqueId",
  "--format=csv,noheader" }
--- Seconds one nvidia-smi call may take at most (within the run's budget): it answers in about a
-- second on a 4-GPU tray; one that takes longer is hung (a GPU fallen off the bus, a driver stuck).
M.CALL_TIMEOUT = 10
--- Largest nvidia-smi output kept (bytes): 5 short fields per GPU.
M.MAX_OUTPUT = 64 * 1024
--- Seconds kept back from the run's budget so that a wait that times out still ends in a named outcome.
M.MARGIN = 0.5
--- The ClusterUUID of a GPU outside any multi-node NVLink domain.
M.ZERO_UUID = "00000000-0000-0000-0000-000000000000"
--- The registration states (fabric.state) a GPU passes through; N/A (or "Not Supported") is none.
M.STATES = { ["Not Started"] = "pending", ["In Progress"] = "pending", ["Completed"] = "done" }

local UUID = "^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$"
-- the tokens nvidia-smi prints for a field without a value (bare in CSV, bracketed in some versions)
local NA = { ["N/A"] = true, ["[N/A]"] = true, ["Not Supported"] = true, ["[Not Supported]"] = true }

--- The argv of the query from the settings (nvidia_smi: a path or a list used as the argv prefix).
-- @param settings table validated settings
-- @return list of strings
function M.argv(settings)
  return settings_schema.command_argv(settings.nvidia_smi, M.QUERY)
end

--- Parse the CSV answer of the query (pure).
-- @param text string nvidia-smi's stdout (one line per GPU: index, state, status, ClusterUUID,
--   CliqueId, separated by commas; blanks around fields and blank lines are ignored; CRLF taken)
-- @return list of GPUs in the order printed, each {index = integer, state = string|nil,
--   status = string|nil, cluster_uuid = lowercase string|nil, clique_id = integer|nil, na = boolean
--   (the state is N/A: no fabric on this GPU)}; a field that is N/A is nil. Or nil, message naming
--   the line and the field (no line, a line without 5 fields, an index that is not a number or
--   repeats, an unknown state, a ClusterUUID that is not a UUID, a CliqueId that is not a number)
function M.parse(text)
  if type(text) ~= "string" then return nil, "no output" end
  local gpus, seen, n = {}, {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
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
      local g = { index = index, na = NA[f[2]] == true }
      if not g.na then
        if not M.STATES[f[2]] then
          return nil, string.format("line %d: GPU %d: unknown fabric.state %s", n, index, excerpt(f[2]))
        end
        g.state = f[2]
      end
      if not NA[f[3]] then
        if f[3] == "" then return nil, string.format("line %d: GPU %d: empty fabric.status", n, index) end
        g.status = f[3]
      end
      if not NA[f[4]] then
        if not f[4]:match(UUID) then
          return nil, string.format("line %d: GPU %d: fabric.clusterUuid %s is not a UUID", n, index,
            excerpt(f[4]))
        end
        g.cluster_uuid = f[4]:lower()
      end
      if not NA[f[5]] then
        g.clique_id = f[5]:match("^%d+$") and math.tointeger(tonumber(f[5]))
        if not g.clique_id then
          return nil, string.format("line %d: GPU %d: fabric.cliqueId %s is not a number", n, index,
            excerpt(f[5]))
        end
      end
      gpus[#gpus + 1] = g
    end
  end
  if #gpus == 0 then return nil, "no GPU line" end
  return gpus
end

--- Parse the Fabric sections of `nvidia-smi -q` (pure): per GPU ("GPU 00000009:01:00.0" headers, in
-- order, numbered from 0), its Fabric block's State, Status, CliqueId and ClusterUUID. Used to read
-- field reports (tests/fixtures/nvidia-smi/); the checks run the CSV query.
-- @param text string
-- @return list of GPUs as M.parse's, or nil, message
function M.parse_q(text)
  if type(text) ~= "string" then return nil, "no output" end
  local csv, cur, in_fabric, indent = {}, nil, false, nil
  local function flush()
    if cur then
      csv[#csv + 1] = table.concat({ tostring(#csv), cur.State or "N/A", cur.Status or "N/A",
        cur.ClusterUUID or "N/A", cur.CliqueId or "N/A" }, ", ")
    end
  end
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    line = line:gsub("\r$", "")
    local lead = #line:match("^(%s*)")
    if line:match("^GPU %x+:%x+:%x+%.%x") then
      flush()
      cur, in_fabric = {}, false
    elseif cur and trim(line) == "Fabric" then
      in_fabric, indent = true, lead
    elseif in_fabric and trim(line) ~= "" then
      if lead <= indent then
        in_fabric = false
      else
        local k, v = line:match("^%s*(%S[^:]-)%s*:%s*(.-)%s*$")
        local wanted = k == "State" or k == "Status" or k == "CliqueId" or k == "ClusterUUID"
        if wanted and cur[k] == nil then
          cur[k] = v
        end
      end
    end
  end
  flush()
  if #csv == 0 then return nil, "no GPU section" end
  return M.parse(table.concat(csv, "\n"))
end

--- A GPU's fields for a message: "GPU 1: fabric.state Completed, fabric.status Insufficient
-- Resources, ClusterUUID ..., CliqueId ...".
-- @param g table a GPU of parse
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

--- Judge the parsed GPUs of this node (pure).
-- @param gpus list from parse
-- @return verdict {kind = "healthy" | "pending" | "fault" | "none", message = one line, partition =
--   {cluster_uuid, clique_id, id} (healthy), gpu = index of the GPU at fault (fault), pending = list of
--   indices still registering (pending), gpus = the input}. Healthy: every GPU Completed with status
--   Success, a non-zero ClusterUUID and a CliqueId, all in one partition. Fault (this node is at
--   fault): a Completed GPU whose status is not Success, a zero or missing ClusterUUID, a missing
--   CliqueId, a GPU with N/A beside registered ones, GPUs in different partitions. Pending: no fault,
--   and some GPU "Not Started" or "In Progress". None: every GPU N/A (no multi-node NVLink).
function M.judge(gpus)
  local v = { gpus = gpus }
  local na, pending = 0, {}
  for _, g in ipairs(gpus) do if g.na then na = na + 1 end end
  if na == #gpus then
    v.kind, v.message = "none", string.format("no multi-node NVLink: fabric.state N/A on all %d GPUs", #gpus)
    return v
  end
  local function fault(g, why)
    v.kind, v.gpu = "fault", g.index
    v.message = one_line(string.format("%s (%s)", M.describe(g), why))
    return v
  end
  for _, g in ipairs(gpus) do
    if g.na then
      return fault(g, "no fabric registration while other GPUs of this node have one")
    elseif M.STATES[g.state] == "pending" then
      pending[#pending + 1] = g.index
    elseif g.status ~= "Success" then
      return fault(g, "registration with the NVLink fabric failed")
    elseif not g.cluster_uuid or g.cluster_uuid == M.ZERO_UUID then
      return fault(g, "zero ClusterUUID: not in a multi-node NVLink domain")
    elseif not g.clique_id then
      return fault(g, "no CliqueId")
    end
  end
  if #pending > 0 then
    local states = {}
    for _, g in ipairs(gpus) do
      if M.STATES[g.state] == "pending" then states[#states + 1] = "GPU " .. g.index .. " " .. g.state end
    end
    v.kind, v.pending = "pending", pending
    v.message = "fabric registration not finished: " .. table.concat(states, ", ")
    return v
  end
  -- one partition: the GPUs outside the largest group (the first printed on a tie) are named
  local groups, order = {}, {}
  for _, g in ipairs(gpus) do
    local id = partition_of(g).id
    if not groups[id] then groups[id] = {}; order[#order + 1] = id end
    table.insert(groups[id], g)
  end
  if #order > 1 then
    table.sort(order, function(a, b)
      if #groups[a] ~= #groups[b] then return #groups[a] > #groups[b] end
      return groups[a][1].index < groups[b][1].index
    end)
    local main, odd = order[1], groups[order[2]][1]
    local main_ix = {}
    for _, g in ipairs(groups[main]) do main_ix[#main_ix + 1] = g.index end
    return fault(odd, string.format("in another NVLink partition than %s (ClusterUUID.CliqueId %s): the "
      .. "GPUs of one node cannot share memory", gpu_list(main_ix), main))
  end
  v.kind, v.partition = "healthy", partition_of(gpus[1])
  v.message = string.format("%d GPUs registered with the NVLink fabric, partition %s", #gpus, v.partition.id)
  return v
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
  local proc, err, code = h.spawn(M.argv(s), { timeout = timeout, max_output = M.MAX_OUTPUT })
  local q = setmetatable({ proc = proc, err = err, code = code, timeout = timeout }, Early)
  ctx.fabric_early = q
  return q
end

--- Run the query once (or wait for the early one, M.start, when it was not used yet) and judge its
-- answer.
-- @param ctx table policy context (ctx.host.run, ctx.settings.nvidia_smi, ctx.fabric_early)
-- @param timeout number seconds for the call
-- @return verdict (judge's), or {kind = "unknown", message = one line (absent, hung, a failed exit,
--   unparsable), code = the run's error code or nil}
function M.read(ctx, timeout)
  local argv = M.argv(ctx.settings)
  local res, err, code
  local q = ctx.fabric_early
  if q and not q.used then
    q.used, timeout = true, q.timeout
    if q.proc then res, err, code = q.proc:wait() else err, code = q.err, q.code end
  else
    res, err, code = ctx.host.run(argv, { timeout = timeout, max_output = M.MAX_OUTPUT })
  end
  if not res then
    local why
    if code == "timeout" then
      why = string.format("hung: no answer within %g s", timeout)
    elseif code == "deadline" then
      why = "the run's deadline passed"
    else
      why = string.format("cannot run: %s (%s)", tostring(err), tostring(code))
    end
    return { kind = "unknown", code = code, message = one_line(argv[1] .. " " .. why) }
  end
  if res.status ~= 0 then
    local first = trim((res.stdout or "") .. "\n" .. (res.stderr or "")):match("^[^\n]*")
    return { kind = "unknown", message = one_line(string.format("%s exited %s: %s", argv[1],
      tostring(res.status or ("on signal " .. tostring(res.signal))), excerpt(first))) }
  end
  local gpus, perr = M.parse(res.stdout)
  if not gpus then
    return { kind = "unknown", message = one_line(string.format("%s answered something unparsable: %s",
      argv[1], perr)) }
  end
  return M.judge(gpus)
end

--- Parse a domain name that names an NVLink partition by its fabric identity:
-- "<ClusterUUID>.<CliqueId>" or "<ClusterUUID>:<CliqueId>".
-- @param name string
-- @return {cluster_uuid (lowercase), clique_id (integer), id}, or nil (another kind of name)
function M.parse_identity(name)
  if type(name) ~= "string" then return nil end
  local uuid, clique = name:match("^%s*(%x+%-%x+%-%x+%-%x+%-%x+)[.:](%d+)%s*$")
  if not uuid or not uuid:match(UUID) then return nil end
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
    h.log("info", "node " .. node .. ": " .. v.message .. ": no fabric check")
  end
  local name = opts.domain and opts.domain.name
  if name ~= nil and (v.kind == "healthy" or v.kind == "none") then
    local ok, why = M.matches(v.partition, name)
    if ok == false then
      r.state = "fault"
      return nil, "fabric-fault", one_line(string.format("node %s: %s; this node is at fault, not its peers",
        node, why))
    end
  end
  if v.kind == "healthy" and waited > 0 and r.polls > 1 then
    r.message = string.format("%s (after waiting %.1f s)", v.message, waited)
  end
  return r
end

--- The fabric check of a command: read the registration, wait while a GPU is registering (with
-- opts.wait: up to the setting fabric_timeout, bounded by the run's budget, polled at the health
-- wait's pace, imexguard.pace over poll_interval), judge, and compare with the domain map's name.
-- Sets ctx.fabric = the result (for status, plan and the metrics).
-- @param ctx table policy context (settings fabric_check, nvidia_smi, fabric_timeout,
--   on_fabric_unknown, poll_interval)
-- @param opts table|nil {wait = boolean (default false: one read), domain = {name = ...} | nil (this
--   node's domain from the domain map: its name is compared with matches)}
-- @return result {state = "off" | "none" | "healthy" | "pending" | "unknown", message = one line,
--   partition = identity or nil, polls = number of reads}, or nil, outcome ("fabric-fault",
--   "fabric-unknown" with on_fabric_unknown = "fail", "deadline-exceeded"), message (one line,
--   naming this node, the GPU and its fields)
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
    gpu = v.gpu }
  ctx.fabric = r
  return check_result(ctx, opts, node, v, r, waited, cut)
end

return M
