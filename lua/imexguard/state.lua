--- The node's state file (state_dir/state.json): what imexguard wrote, what the daemon runs, and
-- the job registry (design.md steps 4, 5, 6 and 9).
-- Fields (all optional): nodes (string, the node-list bytes last written), written_us (when),
-- running_nodes (the bytes the daemon was last (re)started with by imexguard), invocation_id
-- (systemd's InvocationID of that start), started_us (its ExecMainStartTimestamp), job (the job id
-- of the run that wrote the entry), jobs (the job registry: a list of {id = string, nodes = the
-- node-list bytes the job runs with, registered_us = number, invocation_id = string, ...}, see
-- imexguard.registry). Times are microseconds since the epoch, stored as decimal strings because
-- lua-cjson 2.1 encodes numbers with 14 significant digits only (a microsecond timestamp has 16).
-- The file is written with host.write_atomic, so it is the old or the new one.
local cjson = require "cjson"

local M = {}

--- Largest state file read (bytes).
M.MAX_BYTES = 1024 * 1024

local US_FIELDS = { written_us = true, started_us = true, registered_us = true }

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

-- Scalar fields of a decoded object (microsecond fields back to numbers).
local function scalars(t)
  local out = {}
  for k, v in pairs(t) do
    if type(k) == "string" and scalar(v) then
      if US_FIELDS[k] then v = tonumber(v) end
      out[k] = v
    end
  end
  return out
end

--- Read the state file.
-- @param host table the primitives (read)
-- @param settings table validated settings
-- @return table state ({} when missing), and a warning string when the file was unreadable or
--   not valid JSON (then the state is {} too: every decision that uses it falls back to facts),
--   or when registry entries were malformed (they are dropped; the rest is kept)
function M.load(host, settings)
  local path = M.path(settings)
  local text, err, code = host.read(path, M.MAX_BYTES)
  if not text then
    if code == "ENOENT" then return {} end
    return {}, string.format("state file %s unreadable (%s), ignored", path, tostring(err))
  end
  local ok, t = pcall(cjson.decode, text)
  if not ok or type(t) ~= "table" then
    return {}, string.format("state file %s is not valid JSON, ignored", path)
  end
  local st = scalars(t)
  local warn
  if type(t.jobs) == "table" then
    local jobs, bad = {}, 0
    for _, e in ipairs(t.jobs) do
      if type(e) == "table" and type(e.id) == "string" and e.id ~= "" and type(e.nodes) == "string" then
        jobs[#jobs + 1] = scalars(e)
      else
        bad = bad + 1
      end
    end
    if bad > 0 then
      warn = string.format("state file %s: %d malformed job registration(s) dropped", path, bad)
    end
    st.jobs = jobs
  elseif t.jobs ~= nil then
    warn = string.format("state file %s: 'jobs' is not a list, registry dropped", path)
  end
  return st, warn
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

return M
