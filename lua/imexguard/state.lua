--- The node's state file (state_dir/state.json): what imexguard wrote and what the daemon runs.
-- Fields (all optional): nodes (string, the node-list bytes last written), written_us (when),
-- running_nodes (the bytes the daemon was last (re)started with by imexguard), invocation_id
-- (systemd's InvocationID of that start), started_us (its ExecMainStartTimestamp), job (the job id
-- of the run that wrote the entry). Times are microseconds since the epoch, stored as decimal
-- strings because lua-cjson 2.1 encodes numbers with 14 significant digits only (a microsecond
-- timestamp has 16). The file is written with host.write_atomic, so it is the old or the new one.
local cjson = require "cjson"

local M = {}

--- Largest state file read (bytes).
M.MAX_BYTES = 1024 * 1024

local US_FIELDS = { written_us = true, started_us = true }

--- Path of the state file.
-- @param settings table validated settings (state_dir)
-- @return string path
function M.path(settings)
  return settings.state_dir .. "/state.json"
end

--- Read the state file.
-- @param host table the primitives (read)
-- @param settings table validated settings
-- @return table state ({} when missing), and a warning string when the file was unreadable or
--   not valid JSON (then the state is {} too: every decision that uses it falls back to facts)
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
  local st = {}
  for k, v in pairs(t) do
    if type(k) == "string" and (type(v) == "string" or type(v) == "number" or type(v) == "boolean") then
      if US_FIELDS[k] then v = tonumber(v) end
      st[k] = v
    end
  end
  return st
end

--- Encode a state table (microsecond fields as decimal strings).
-- @param st table state
-- @return string JSON text, newline-terminated
function M.encode(st)
  local out = {}
  for k, v in pairs(st) do
    if US_FIELDS[k] and type(v) == "number" then
      v = string.format("%d", math.floor(v))
    end
    out[k] = v
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
