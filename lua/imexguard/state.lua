-- SPDX-License-Identifier: Apache-2.0
--- The node's state file (state_dir/state.json): what imexguard wrote, what the daemon runs, and
-- the job registry (docs/design.md, steps 4, 5, 6 and 9, and "The state file and the job registry").
-- Fields (all optional):
--   nodes (string, the node-list bytes last written), written_us (when), job (the job id of the run
--   that wrote the entry);
--   running_nodes, running_config (strings: the exact bytes of the node list and of config.cfg the
--   daemon was last (re)started with by imexguard), invocation_id (systemd's InvocationID of that
--   start), started_us (its ExecMainStartTimestamp): while the unit's invocation ID is this one and
--   both files hold these bytes, the daemon is current whatever the files' mtimes say;
--   deploying_nodes, deploying_job, deploying_us: a change in progress (saved, with the job
--   registered, BEFORE the node list is rewritten or the unit restarted; removed when the prolog
--   ends). Still present at the next run: that run was killed half way;
--   jobs (the job registry: a list of {id = string, nodes = the node-list bytes the job runs with,
--   registered_us = number, invocation_id = string, hosts = string (the job's Slurm names
--   compressed, "gb[03-18]", for people), boot_id = string, ...}, see imexguard.registry).
-- Times are microseconds since the epoch, stored as decimal strings because lua-cjson 2.1 encodes
-- numbers with 14 significant digits only (a microsecond timestamp has 16).
-- The prolog's steps write these fields through the functions below (record_write, record_start,
-- begin_deployment, end_deployment); others read them.
-- The file is written with host.write_atomic, so it is the old or the new one. A file that exists
-- but cannot be read or is not what imexguard writes (truncated JSON, a field of the wrong type, a
-- malformed registry entry) is an error, never "no jobs": the registry is then unknown, and
-- overwriting it would erase the registrations of running jobs.
local cjson = require("cjson")
local T = require("imexguard.text")

local M = {}

--- Largest state file read (bytes).
M.MAX_BYTES = 1024 * 1024

local US_FIELDS = { written_us = true, started_us = true, registered_us = true, deploying_us = true }
--- Known string fields (top level and registry entries); any other field must be a scalar.
local STRING_FIELDS = { nodes = true, running_nodes = true, running_config = true, invocation_id = true,
  job = true, deploying_nodes = true, deploying_job = true, id = true, hosts = true,
  boot_id = true }

local function scalar(v)
  local t = type(v)
  return t == "string" or t == "number" or t == "boolean"
end

--- Path of the state file.
-- @param settings table validated settings (state_dir)
-- @return string path
function M.path(settings)
  return settings.state_dir .. "/state.json"
end

-- A stored time as an integer number of microseconds, or nil when `M.encode` could not write it
-- back: a decimal string or a JSON number, >= 0 and below 2^63 (a longer run of digits reads as a
-- float, 1e999 as infinity). A fraction is dropped, as `M.encode` does.
local function time_us(v)
  local n
  if type(v) == "string" then
    n = v:match("^%d+$") and math.tointeger(tonumber(v))
  elseif type(v) == "number" then
    n = math.tointeger(math.floor(v)) -- nil for NaN, +-Inf and beyond the integers
  end
  return n and n >= 0 and n or nil
end

-- A field's name for a message: as it is when it is a plain name, else quoted on one line.
local function field(k)
  return k:match("^[%w_]+$") and k or T.quote(k, 80)
end

-- Scalar fields of a decoded object, checked (microsecond fields back to numbers).
-- @return table, or nil, message naming the field
local function scalars(t, where)
  local out = {}
  for k, v in pairs(t) do
    if type(k) ~= "string" then return nil, where .. " has a non-string key" end
    if k ~= "jobs" or where ~= "the file" then
      if US_FIELDS[k] then
        local n = time_us(v)
        if not n then
          return nil, string.format("%s: %s is not a decimal time in microseconds below 2^63", where, k)
        end
        v = n
      elseif STRING_FIELDS[k] and type(v) ~= "string" then
        return nil, string.format("%s: %s is a %s, not a string", where, field(k), type(v))
      elseif not scalar(v) then
        return nil, string.format("%s: %s is not a scalar", where, field(k))
      elseif type(v) == "number" and (v ~= v or v == math.huge or v == -math.huge) then
        -- cjson cannot write it back
        return nil, string.format("%s: %s is not a finite number", where, field(k))
      end
      out[k] = v
    end
  end
  return out
end

-- Is t a JSON array (keys 1..n)? An empty object counts as an empty list.
local function is_list(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

--- Read the state file.
-- @param host table the primitives (read)
-- @param settings table validated settings
-- @return table state ({} when the file does not exist: ENOENT), or nil, message (one line naming
--   the file and what is wrong with it) when it cannot be read or is not a valid state file
--   (not JSON, not an object, a field of the wrong type, a time that is not an integer number of
--   microseconds in 0 .. 2^63 - 1, a number that is NaN or infinite, a registry that is not a list of
--   {id = non-empty string, nodes = string, ...} entries): the registry is unknown
function M.load(host, settings)
  local path = M.path(settings)
  local text, err, code = host.read(path, M.MAX_BYTES)
  if not text then
    if code == "ENOENT" then return {} end
    return nil, string.format("state file %s unreadable (%s)", path, tostring(err))
  end
  local ok, t = pcall(cjson.decode, text)
  if not ok or type(t) ~= "table" then
    return nil, string.format("state file %s is not valid JSON (%d bytes)", path, #text)
  end
  if next(t) ~= nil and is_list(t) then
    return nil, string.format("state file %s is not a JSON object", path)
  end
  local st, serr = scalars(t, "the file")
  if not st then return nil, string.format("state file %s: %s", path, serr) end
  if t.jobs ~= nil then
    if type(t.jobs) ~= "table" or not is_list(t.jobs) then
      return nil, string.format("state file %s: 'jobs' is not a list", path)
    end
    local jobs = {}
    for i, e in ipairs(t.jobs) do
      if type(e) ~= "table" or type(e.id) ~= "string" or e.id == "" or type(e.nodes) ~= "string" then
        return nil, string.format("state file %s: job registration #%d is malformed (not an object with "
          .. "a string id and nodes)", path, i)
      end
      local je, jerr = scalars(e, "job registration #" .. i)
      if not je then return nil, string.format("state file %s: %s", path, jerr) end
      jobs[i] = je
    end
    st.jobs = jobs
  end
  return st
end

local function encode_scalars(t)
  local out = {}
  for k, v in pairs(t) do
    if US_FIELDS[k] and type(v) == "number" then
      v = string.format("%d", math.floor(v))
    end
    if scalar(v) then out[k] = v end
  end
  return out
end

--- Encode a state table (microsecond fields as decimal strings; an empty registry is omitted,
-- because lua-cjson encodes an empty table as an object).
-- @param st table state
-- @return string JSON text, newline-terminated
function M.encode(st)
  local out = encode_scalars(st)
  if type(st.jobs) == "table" and #st.jobs > 0 then
    local jobs = {}
    for i, e in ipairs(st.jobs) do jobs[i] = encode_scalars(e) end
    out.jobs = jobs
  end
  return cjson.encode(out) .. "\n"
end

--- Write the state file atomically.
-- @param host table the primitives (write_atomic)
-- @param settings table validated settings
-- @param st table state
-- @return true, or nil, message, code (from host.write_atomic)
function M.save(host, settings, st)
  return host.write_atomic(M.path(settings), M.encode(st), tonumber("644", 8))
end

-- ---- the records of the prolog's steps (the fields above; the caller saves the file) --------

--- Record the node list just written (step 4b): its bytes, when, and by which job.
-- @param st table state (changed in place)
-- @param nodes string the node-list bytes written
-- @param now_us number wall clock, microseconds
-- @param job string the job id of the run
function M.record_write(st, nodes, now_us, job)
  st.nodes, st.written_us, st.job = nodes, now_us, job
end

--- Record what the daemon was just (re)started with (step 7): step 5's evidence for the next run.
-- @param st table state (changed in place)
-- @param rec table {nodes = the node-list bytes, config = config.cfg's bytes read just before the
--   start (nil: unreadable), invocation_id = systemd's InvocationID of the start, started_us = its
--   ExecMainStartTimestamp (both nil when systemd did not answer), job = the job id of the run}
function M.record_start(st, rec)
  st.running_nodes, st.running_config = rec.nodes, rec.config
  st.invocation_id, st.started_us, st.job = rec.invocation_id, rec.started_us, rec.job
end

--- Record a change in progress (step 9a): saved with the job's registration BEFORE the node list is
-- rewritten or the unit (re)started, removed (M.end_deployment) when the prolog ends.
-- @param st table state (changed in place)
-- @param nodes string the node-list bytes being deployed
-- @param job string the job id
-- @param now_us number wall clock, microseconds
function M.begin_deployment(st, nodes, job, now_us)
  st.deploying_nodes, st.deploying_job, st.deploying_us = nodes, job, now_us
end

--- Remove the record of a change in progress (its prolog ended, or its interruption was handled).
-- @param st table state (changed in place)
function M.end_deployment(st)
  st.deploying_nodes, st.deploying_job, st.deploying_us = nil, nil, nil
end

--- The job whose change was interrupted: a record of a change in progress found under the node
-- lock was left by a prolog that died before it ended (it held that lock).
-- @param st table state
-- @return string job id, or nil when no change was in progress
function M.interrupted_job(st)
  return st.deploying_job
end

-- ---- the last prolog and epilog -------------------------------------------------------------

--- Commands whose last run is recorded (M.save_last): what `status` shows.
M.LAST = { prolog = true, epilog = true }

--- Path of the record of the last run of a command: state_dir/last-COMMAND.json. One file per
-- command, written whole with host.write_atomic after the run's outcome is known and without the
-- node lock (the run has released it by then): the last writer wins, which is what "last" means,
-- and no read-modify-write can lose a registration of the state file.
-- @param settings table validated settings (state_dir)
-- @param command string "prolog" or "epilog"
-- @return string path
function M.last_path(settings, command)
  return settings.state_dir .. "/last-" .. command .. ".json"
end

--- Record the last run of a command.
-- @param host table the primitives (write_atomic)
-- @param settings table validated settings
-- @param command string a command of M.LAST
-- @param rec table {outcome = string, exit_code = integer, job = string|nil, ended_us = number
--   (wall clock, microseconds), duration = seconds, message = string (one line)}
-- @return true, or nil, message, code (from host.write_atomic; "ENOENT": no state_dir yet)
function M.save_last(host, settings, command, rec)
  local t = {}
  for k, v in pairs(rec) do
    if scalar(v) then t[k] = v end
  end
  t.command = command
  if type(rec.ended_us) == "number" then t.ended_us = string.format("%d", math.floor(rec.ended_us)) end
  return host.write_atomic(M.last_path(settings, command), cjson.encode(t) .. "\n", tonumber("644", 8))
end

--- The record of the last run of a command (M.save_last), ended_us as a number.
-- @param host table the primitives (read)
-- @param settings table validated settings
-- @param command string
-- @return table record, or nil when the command never ran here (no file), or nil, message (one
--   line naming the file) when it cannot be read or is not such a record
function M.load_last(host, settings, command)
  local path = M.last_path(settings, command)
  local text, err, code = host.read(path, 65536)
  if not text then
    if code == "ENOENT" then return nil end
    return nil, string.format("%s unreadable (%s)", path, tostring(err))
  end
  local ok, t = pcall(cjson.decode, text)
  if not ok or type(t) ~= "table" or type(t.outcome) ~= "string" then
    return nil, string.format("%s is not a record of the last %s", path, command)
  end
  local rec = {}
  for k, v in pairs(t) do
    if scalar(v) then rec[k] = v end
  end
  rec.ended_us = time_us(t.ended_us)
  rec.exit_code = math.tointeger(rec.exit_code) or rec.exit_code
  return rec
end

return M
