-- SPDX-License-Identifier: Apache-2.0
--- The JSON interface of `--json` (docs/json.md): objects whose keys keep the order they were set
-- in, arrays that stay arrays when empty, times in ISO 8601, and the schema version. lua-cjson
-- writes the scalars (strings, numbers, booleans); this module writes the structure, because
-- cjson.encode orders an object's keys by the hash table (they change between runs) and writes an
-- empty table as `{}`.
--
-- A value is a string, number, boolean, nil (null), `M.object()` or `M.array(list)`. A plain Lua
-- table is refused (an error names it): every report builds its shape explicitly, so that the
-- shape is the same in every run and the spec can pin it.
-- @module imexguard.json
local cjson = require("cjson")

local M = {}

--- The version of the JSON schema, the first key of every report. It changes when a key is
-- removed or renamed or a type changes; a new key does not change it.
M.SCHEMA = 1

local Object, Array = {}, {}
Object.__index = Object

--- A new object; `:set(key, value)` adds keys in order (a nil value is written as null, so the key
-- is always there).
-- @treturn table the object
function M.object()
  return setmetatable({ keys = {}, values = {}, has = {} }, Object)
end

--- Set a key (the first set fixes its place; a second set replaces the value in place).
-- @tparam string key
-- @param value a value (see the module)
-- @treturn table the object (calls chain)
function Object:set(key, value)
  if not self.has[key] then
    self.has[key] = true
    self.keys[#self.keys + 1] = key
  end
  self.values[key] = value
  return self
end

--- The value of a key (nil when unset or null).
function Object:get(key)
  return self.values[key]
end

--- An array of values (a new table; `list` may be empty or nil: `[]`).
-- @tparam table|nil list
-- @treturn table the array
function M.array(list)
  local a = { n = 0 }
  for i, v in ipairs(list or {}) do a[i] = v; a.n = i end
  return setmetatable(a, Array)
end

--- Is v an object or an array of this module?
function M.is_object(v) return getmetatable(v) == Object end
function M.is_array(v) return getmetatable(v) == Array end

local function encode(v, out, path)
  local t = type(v)
  if v == nil then
    out[#out + 1] = "null"
  elseif t == "string" or t == "boolean" then
    out[#out + 1] = cjson.encode(v)
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      out[#out + 1] = "null" -- JSON has no NaN or infinity
    elseif math.type(v) == "integer" then
      out[#out + 1] = string.format("%d", v)
    else
      -- the shortest of 15 or 17 significant digits that reads back as the same number
      local s = string.format("%.15g", v)
      if tonumber(s) ~= v then s = string.format("%.17g", v) end
      out[#out + 1] = s:gsub("^(-?%d+)$", "%1.0")
    end
  elseif getmetatable(v) == Object then
    out[#out + 1] = "{"
    for i, k in ipairs(v.keys) do
      if i > 1 then out[#out + 1] = "," end
      out[#out + 1] = cjson.encode(k)
      out[#out + 1] = ":"
      encode(v.values[k], out, path .. "." .. k)
    end
    out[#out + 1] = "}"
  elseif getmetatable(v) == Array then
    out[#out + 1] = "["
    for i = 1, v.n do
      if i > 1 then out[#out + 1] = "," end
      encode(v[i], out, path .. "[" .. i .. "]")
    end
    out[#out + 1] = "]"
  else
    error(string.format("imexguard.json: %s is a %s, not a value of imexguard.json", path, t), 0)
  end
end

--- The JSON text of a value, one line, newline-terminated.
-- @param v a value
-- @treturn string
-- @raise when a plain table or a function is met (the message names where)
function M.encode(v)
  local out = {}
  encode(v, out, "$")
  out[#out + 1] = "\n"
  return table.concat(out)
end

-- Days since 1970-01-01 -> year, month, day (proleptic Gregorian; H. Hinnant's civil_from_days).
local function civil(days)
  local z = days + 719468
  local era = (z >= 0 and z or z - 146096) // 146097
  local doe = z - era * 146097
  local yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
  local mp = (5 * doy + 2) // 153
  local d = doy - (153 * mp + 2) // 5 + 1
  local m = mp < 10 and mp + 3 or mp - 9
  return m <= 2 and y + 1 or y, m, d
end

--- A Unix time as ISO 8601 in UTC: "2026-12-01T23:41:07Z" (whole seconds; the sandbox has no
-- os.date).
-- @tparam number|nil seconds since the epoch (nil, 0 or negative: nil, "never")
-- @treturn string|nil
function M.time(seconds)
  if type(seconds) ~= "number" or seconds ~= seconds or seconds <= 0
    or seconds == math.huge then return nil end
  local s = math.floor(seconds)
  local days, rest = s // 86400, s % 86400
  local y, m, d = civil(days)
  return string.format("%04d-%02d-%02dT%02d:%02d:%02dZ", y, m, d, rest // 3600, rest % 3600 // 60, rest % 60)
end

--- A time in microseconds since the epoch (systemd's timestamps, the state file's) as M.time.
-- @tparam number|nil us
-- @treturn string|nil
function M.time_us(us)
  if type(us) ~= "number" then return nil end
  return M.time(us / 1e6)
end

--- nvidia-imex-ctl's timestamp "M/D/YYYY HH:MM:SS[.mmm]" as ISO 8601 "YYYY-MM-DDTHH:MM:SS[.mmm]".
-- The ctl gives no time zone (it is the daemon's local time), so none is added; anything else is
-- returned as it is.
-- @tparam string|nil s
-- @treturn string|nil
function M.ctl_time(s)
  if type(s) ~= "string" then return nil end
  local mo, d, y, hms = s:match("^(%d%d?)/(%d%d?)/(%d%d%d%d) (%d%d:%d%d:%d%d[%.%d]*)$")
  if not mo then return s end
  return string.format("%s-%02d-%02dT%s", y, tonumber(mo), tonumber(d), hms)
end

--- The head of every report: {"schema": SCHEMA, "command": command}.
-- @tparam string command
-- @treturn table object
function M.report(command)
  return M.object():set("schema", M.SCHEMA):set("command", command)
end

--- The report of a run that ended without one (an error: bad input, a settings or policy error,
-- the deadline; or a policy whose entry point gave no report): {"schema", "command", "ok" (exit
-- code 0), "outcome", "exit_code", "message"}.
-- @tparam string command
-- @tparam string outcome
-- @tparam integer|nil code the exit code
-- @tparam string|nil message
-- @treturn string JSON text, newline-terminated
function M.error_report(command, outcome, code, message)
  return M.encode(M.report(command):set("ok", code == 0):set("outcome", outcome):set("exit_code", code)
    :set("message", message))
end

return M
