-- SPDX-License-Identifier: Apache-2.0
--- What the IMEX daemon itself said when its unit failed (field case C50 of docs/design.md): its
-- last error line, from the journal of the unit's invocation (host.journal_read: what the unit's
-- processes wrote on stdout/stderr) or from config.cfg's LOG_FILE_NAME (host.read_tail: what the
-- daemon appended since the start), and, when the line says the node's one IMEX session is taken
-- ("Failed to allocate Imex session ... NV_ERR_IN_USE"), who holds it (host.file_holders). Every
-- `service-failed` of a failed start quotes it, and so do `status` and `health` for a failed unit.
-- A host without these primitives (a site's own test host) proves nothing: no quote, no error.
-- Loaded only on a failure or a start (imexguard.lazy).
local text = require("imexguard.text")
local imexcfg = require("imexguard.imexcfg")

local M = {}

--- Bytes of LOG_FILE_NAME read from its end.
M.MAX_LOG = 64 * 1024
--- Journal entries read (the newest of the unit's).
M.MAX_ENTRIES = 50
--- Longest quoted line (bytes; text.ends keeps its start and its end).
M.MAX_QUOTE = 300
--- Seconds one read may take (each bounded by the run's budget too).
M.TIMEOUT = 2
--- The words of the daemon's error when another daemon holds the node's IMEX session [seen: NVIDIA
-- aicr, VR200 guide].
M.SESSION_TEXT = "NV_ERR_IN_USE"
--- Where the driver names the device minor of the fabric-imex-mgmt capability (its
-- /dev/nvidia-caps/nvidia-capN), as for every NVIDIA capability (the MIG ones are documented).
M.CAPABILITY = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
M.CAPABILITY_DIR = "/dev/nvidia-caps/nvidia-cap"

-- A line's level tag as the daemon writes it ("[ERROR] [tid 39] ...", tests/fixtures/ctl/errors.txt).
local ERROR_TAGS = { "[ERROR]", "[FATAL]", "[CRITICAL]" }

--- Is a line of the daemon's an error line? A level tag [ERROR], [FATAL] or [CRITICAL], or a
-- journal priority of err or worse (syslog's 0..3).
-- @param line string
-- @param priority integer|nil the journal entry's PRIORITY
-- @return boolean
function M.is_error(line, priority)
  if type(priority) == "number" and priority <= 3 then return true end
  for _, tag in ipairs(ERROR_TAGS) do
    if line:find(tag, 1, true) then return true end
  end
  return false
end

-- A setting the settings table may not have (a read-only view raises on an unknown name).
local function setting(ctx, name)
  local ok, v = pcall(function() return ctx.settings[name] end)
  return ok and v or nil
end

--- The daemon's log file (LOG_FILE_NAME of config.cfg, else NVIDIA's default; "" or a value set
-- with different values, C34: none).
-- @param cfg table|nil parsed config.cfg
-- @return string|nil
function M.log_file(cfg)
  local v, unknown = imexcfg.get(cfg, "LOG_FILE_NAME")
  if unknown or v == nil or v == "" or v:sub(1, 1) ~= "/" then return nil end
  return v
end

--- A mark taken just before a start job: where the daemon's words of this start begin.
-- @param ctx table policy context
-- @param cfg table|nil parsed config.cfg
-- @return table {since_us = wall clock (microseconds), log = LOG_FILE_NAME or nil, log_size = its
--   size now (nil: absent), cfg = cfg}
function M.mark(ctx, cfg)
  local h = ctx.host
  local log = M.log_file(cfg)
  local st = log and h.stat(log)
  return { since_us = math.floor(h.wallclock() * 1e6), log = log, log_size = st and st.size or nil,
    cfg = cfg }
end

-- The journal's matches for the unit: _SYSTEMD_UNIT (and its invocation) on the system manager;
-- _SYSTEMD_USER_UNIT on another bus (a user manager: whether journald tags its units' output with
-- their invocation is not relied on).
local function matches(ctx, props)
  local unit = ctx.settings.unit
  if ctx.settings.bus ~= "system" then return { "_SYSTEMD_USER_UNIT=" .. unit } end
  local m = { "_SYSTEMD_UNIT=" .. unit }
  local id = props and props.invocation_id
  if type(id) == "string" and id:match("^%x+$") and #id == 32 then
    m[2] = "_SYSTEMD_INVOCATION_ID=" .. id
  end
  return m
end

-- A read's timeout: M.TIMEOUT, less when the budget has less left.
local function bounded(ctx)
  return math.max(0, math.min(M.TIMEOUT, ctx.host.remaining() - 0.5))
end

-- The line to quote among what the daemon said (oldest first, {line, priority}): the error line that
-- says the IMEX session is in use (M.SESSION_TEXT: the cause, where a later error line is the daemon
-- giving up), else the last error line, else the last line; or nil when it said nothing.
local function pick(lines)
  local last, err
  for i = #lines, 1, -1 do
    local l = lines[i]
    last = last or l.line
    if M.is_error(l.line, l.priority) then
      if l.line:find(M.SESSION_TEXT, 1, true) then return { line = l.line, error = true } end
      err = err or l.line
    end
  end
  if err then return { line = err, error = true } end
  return last and { line = last, error = false } or nil
end

-- What pick quotes of the unit's journal since since_us, or nil.
local function from_journal(ctx, props, since_us)
  local h = ctx.host
  if type(h.journal_read) ~= "function" then return nil end
  local entries, err = h.journal_read(matches(ctx, props), { since_us = since_us or 0,
    max_entries = M.MAX_ENTRIES, timeout = bounded(ctx) })
  if not entries then
    h.log("debug", text.one_line("the daemon's journal not read: " .. tostring(err)))
    return nil
  end
  local lines = {}
  for _, e in ipairs(entries) do
    if e.message ~= "" then lines[#lines + 1] = { line = e.message, priority = e.priority } end
  end
  return pick(lines)
end

-- What pick quotes of what the daemon appended to its log since the mark
-- (the mark's size; without one, the log's end when it was written since since_us), or nil.
local function from_log(ctx, mark, since_us)
  local h, log = ctx.host, mark.log
  if not log or type(h.read_tail) ~= "function" then return nil end
  if not mark.log_size and since_us then
    local st = h.stat(log)
    if not (st and st.mtime_us and st.mtime_us >= since_us) then return nil end
  end
  local data, err = h.read_tail(log, M.MAX_LOG, mark.log_size or 0)
  if not data then
    h.log("debug", text.one_line("the daemon's log not read: " .. tostring(err)))
    return nil
  end
  local lines = {}
  for line in data:gmatch("[^\n]+") do
    if line:find("%S") then lines[#lines + 1] = { line = line } end
  end
  return pick(lines)
end

--- The daemon's last error line since a mark: the journal of the unit's invocation first (its own
-- stderr), else LOG_FILE_NAME; without an error line, its last line.
-- @param ctx table policy context
-- @param mark table M.mark's (nil: since the unit's last start, props.exec_main_start_us when known)
-- @param props table|nil the unit's properties after the failure (invocation_id, exec_main_start_us)
-- @param cfg table|nil parsed config.cfg (when there is no mark)
-- @return table|nil {line = string, error = boolean (an error line, not just the last one),
--   source = "journal" or the log file's path}
function M.last_error(ctx, mark, props, cfg)
  mark = mark or { log = M.log_file(cfg), cfg = cfg }
  local since = mark.since_us
  if not since and props and (tonumber(props.exec_main_start_us) or 0) > 0 then
    since = props.exec_main_start_us
  end
  local j = from_journal(ctx, props, since)
  if j and j.error then j.source = "journal"; return j end
  local l = from_log(ctx, mark, since)
  if l and (l.error or not j) then l.source = mark.log; return l end
  if j then j.source = "journal" end
  return j
end

-- The session device of a real node: /dev/nvidia-caps/nvidia-capN, N the DeviceFileMinor of the
-- fabric-imex-mgmt capability; or nil, why.
local function capability_device(ctx)
  local data, err = ctx.host.read(M.CAPABILITY, 4096)
  if not data then return nil, tostring(err) end -- the message names the file
  local minor = data:match("DeviceFileMinor:%s*(%d+)")
  if not minor then return nil, M.CAPABILITY .. " names no DeviceFileMinor" end
  return M.CAPABILITY_DIR .. minor
end

-- "pid 4242 (nvidia-imex -c /x; cgroup /system.slice/docker-1.scope)".
local function holder_text(ctx, p)
  local cg = ctx.host.read("/proc/" .. tostring(p.pid) .. "/cgroup", 4096)
  local path = cg and cg:match("^[^\n]*:([^:\n]*)")
  return string.format("pid %d (%s%s)", p.pid, text.ends(p.cmdline ~= "" and p.cmdline or p.comm or "?", 160),
    path and ("; cgroup " .. text.ends(path, 120)) or "")
end

--- Who holds this node's one IMEX session: the processes that keep the session's file open (the
-- setting imex_session_file, else the fabric-imex-mgmt capability device [guess: which descriptor
-- of the holder names it on a real node is not documented]).
-- @param ctx table policy context
-- @return string one clause for a message ("the IMEX session is held by pid ... (keeps FILE
--   open ...)" or why the holder is not known)
function M.session_holder(ctx)
  local h = ctx.host
  local path, label = setting(ctx, "imex_session_file"), "setting imex_session_file"
  if not path then
    local err
    path, err = capability_device(ctx)
    if not path then return "who holds it is not known here (" .. err .. ")" end
    label = "the fabric-imex-mgmt capability device, which a daemon holding the session keeps open: a guess"
  end
  if type(h.file_holders) ~= "function" then return "who holds it is not known here (no file_holders)" end
  local holders, err = h.file_holders(path, bounded(ctx))
  if not holders then return "who holds it is not known here (" .. tostring(err) .. ")" end
  if #holders == 0 then
    return string.format("no process visible here keeps %s open (%s): the holder runs in another PID "
      .. "namespace (a container's nvidia-imex?)", path, label)
  end
  local names = {}
  for i = 1, math.min(#holders, 2) do names[i] = holder_text(ctx, holders[i]) end
  if #holders > 2 then names[#names + 1] = (#holders - 2) .. " more" end
  return string.format("the IMEX session is held by %s, which keeps %s open (%s); one daemon per node "
    .. "holds it: stop the other one", table.concat(names, ", "), path, label)
end

--- The words to add to a `service-failed` message: the daemon's last error line quoted with its
-- source, and for NV_ERR_IN_USE who holds the session; "" when the daemon said nothing found.
-- @param ctx table policy context
-- @param mark table|nil M.mark's before the start (nil: since the unit's last start)
-- @param props table|nil the unit's properties after the failure
-- @param cfg table|nil parsed config.cfg (without a mark)
-- @return string "; the daemon's last error line (SOURCE): '...'[; the IMEX session ...]" or "" (SOURCE:
--   "journal of UNIT" or the log file's path)
function M.explain(ctx, mark, props, cfg)
  local said = M.last_error(ctx, mark, props, cfg)
  if not said then return "" end
  local what = said.error and "the daemon's last error line" or "the daemon's last line"
  local source = said.source == "journal" and ("journal of " .. ctx.settings.unit) or said.source
  local out = string.format("; %s (%s): '%s'", what, source, text.ends(said.line, M.MAX_QUOTE))
  if said.line:find(M.SESSION_TEXT, 1, true) then out = out .. "; " .. M.session_holder(ctx) end
  return out
end

return M
