-- SPDX-License-Identifier: Apache-2.0
--- bench/stats.lua: statistics, metrics and the JSON of build/bench.json.
-- A metric is one row of the results: {name, unit, median, min, max, baseline_median, ratio, n}
-- (bench/README.md, "build/bench.json"). Ratios are imexguard's median over the baseline's median
-- of the same run. Test infrastructure (plain Lua 5.4); tests/lua/bench_timing_spec.lua checks it.
local M = {}

--- min, median, max of a list of numbers.
-- @tparam {number,...} list
-- @treturn ?number min (nil for an empty list)
-- @treturn ?number median
-- @treturn ?number max
function M.mmm(list)
  if not list or #list == 0 then return nil end
  local s = {}
  for i, v in ipairs(list) do s[i] = v end
  table.sort(s)
  local n = #s
  local med = n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
  return s[1], med, s[n]
end

--- The median of a list (nil for an empty list).
-- @tparam {number,...} list
-- @treturn ?number
function M.median(list) return select(2, M.mmm(list)) end

--- "min / median / max", each value times `scale` in format `fmt` ("n/a" for an empty list).
-- @tparam {number,...} list
-- @tparam[opt] number scale 1000 for seconds shown as ms (default 1)
-- @tparam[opt] string fmt ("%.0f")
-- @treturn string
function M.fmt_mmm(list, scale, fmt)
  local lo, med, hi = M.mmm(list)
  if not lo then return "n/a" end
  scale, fmt = scale or 1, fmt or "%.0f"
  return string.format(fmt .. " / " .. fmt .. " / " .. fmt, lo * scale, med * scale, hi * scale)
end

--- a / b as text with two decimals, "n/a" when either is missing or b is 0.
-- @tparam ?number a
-- @tparam ?number b
-- @treturn string
function M.ratio(a, b)
  if not a or not b or b == 0 then return "n/a" end
  return string.format("%.2f", a / b)
end

--- Every element of a list times `k` (seconds to milliseconds: 1000).
-- @tparam {number,...} list
-- @tparam number k
-- @treturn {number,...} a new list
function M.scaled(list, k)
  local out = {}
  for i, v in ipairs(list or {}) do out[i] = v * k end
  return out
end

--- One metric of build/bench.json.
-- @tparam string name stable identifier, e.g. "fast.wall"
-- @tparam string unit "ms", "s", "KiB", "count", "calls", "calls/s", "ms/node"
-- @tparam {number,...} list imexguard's values (already in `unit`)
-- @tparam[opt] {number,...} baseline the baseline's values in the same run (same unit)
-- @treturn table {name, unit, median, min, max, baseline_median, ratio, n}; missing values are
--   M.null
function M.metric(name, unit, list, baseline)
  local lo, med, hi = M.mmm(list)
  local bmed = baseline and M.median(baseline)
  local r = (med and bmed and bmed ~= 0) and med / bmed or nil
  local N = M.null
  return { name = name, unit = unit, median = med or N, min = lo or N, max = hi or N,
    baseline_median = bmed or N, ratio = r or N, n = #(list or {}) }
end

--- The JSON null of M.json (a unique value).
M.null = setmetatable({}, { __tostring = function() return "null" end })

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    local esc = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }
    return esc[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function is_list(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t and (n > 0 or getmetatable(t) == M.list_mt)
end

--- Metatable marking an empty table as a JSON array ([] rather than {}).
M.list_mt = {}

--- JSON text of a value: tables with keys 1..n are arrays, others objects with sorted keys (so
-- that two runs diff cleanly); numbers that are integers print without a fraction; M.null is null.
-- @param v string, number, boolean, M.null or table
-- @tparam[opt] string indent current indentation (for nesting)
-- @treturn string
function M.json(v, indent)
  indent = indent or ""
  local t = type(v)
  if v == M.null or v == nil then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    if math.type(v) == "integer" or (v == math.floor(v) and math.abs(v) < 2 ^ 53) then
      return string.format("%d", v)
    end
    return (string.format("%.6g", v))
  end
  if t == "string" then return json_string(v) end
  local inner = indent .. "  "
  local parts = {}
  if is_list(v) then
    for i, x in ipairs(v) do parts[i] = inner .. M.json(x, inner) end
    if #parts == 0 then return "[]" end
    return "[\n" .. table.concat(parts, ",\n") .. "\n" .. indent .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for i, k in ipairs(keys) do parts[i] = inner .. json_string(k) .. ": " .. M.json(v[k], inner) end
  if #parts == 0 then return "{}" end
  return "{\n" .. table.concat(parts, ",\n") .. "\n" .. indent .. "}"
end

return M
