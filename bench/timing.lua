-- SPDX-License-Identifier: Apache-2.0
--- bench/timing.lua: imexguard's `--timing` lines, parsed and summed up over runs.
-- With `--timing`, any imexguard command prints on stderr, at exit, lines of exactly this form:
--     timing: NAME MS ms
--     timing: NAME MS ms N calls
-- Phases (disjoint, summing to `total`): lua-state, load-driver, settings, prepare, invoke, finish,
-- close, total. Slots inside them, with call counts: host.NAME per primitive (host.run, host.unit,
-- ...), host.spawn:NAME per method of a started command (host.spawn:wait), load, cjson.decode; a
-- part of one of them: bus.connect (inside the unit primitive that connected to systemd); and
-- in-lua (the phases' time outside every slot).
-- Test infrastructure (plain Lua 5.4); tests/lua/bench_timing_spec.lua checks it.
local M = {}

--- The phases in the order imexguard runs them (then total), for the breakdown table.
M.PHASES = { "lua-state", "load-driver", "settings", "prepare", "invoke", "finish", "close", "total" }

local PHASE_RANK = {}
for i, p in ipairs(M.PHASES) do PHASE_RANK[p] = i end

--- Parse the timing lines of one run's output (other lines are ignored).
-- @tparam string text the run's stderr (or stdout and stderr together)
-- @treturn table NAME -> {ms = number (milliseconds), calls = integer or nil}; empty when the
--   output has no timing line
function M.parse(text)
  local t = {}
  for line in (text or ""):gmatch("[^\n]+") do
    local name, ms, rest = line:match("^timing: (%S+) +([%d.]+) ms(.*)$")
    if name and tonumber(ms) then
      t[name] = { ms = tonumber(ms), calls = tonumber(rest:match("(%d+) calls?")) }
    end
  end
  return t
end

--- Does `exe` understand `--timing`? Its `--help` (on stdout, exit 0) lists the option.
-- @tparam string exe path of imexguard
-- @tparam function quote shell quoting of one word
-- @treturn boolean
function M.available(exe, quote)
  local p = io.popen(quote(exe) .. " --help 2>/dev/null", "r")
  if not p then return false end
  local out = p:read("a")
  local ok = p:close()
  return ok == true and out:find("\n%s*%-%-timing%s") ~= nil
end

local function median(list)
  local s = {}
  for i, v in ipairs(list) do s[i] = v end
  table.sort(s)
  local n = #s
  if n == 0 then return nil end
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
end

--- Sort key: phases first in their order, then slots (host.* by name, the others after).
local function order(a, b)
  local ra, rb = PHASE_RANK[a] or 100, PHASE_RANK[b] or 100
  if ra ~= rb then return ra < rb end
  return a < b
end

--- Sum up parsed runs: per name, the milliseconds of every run (a run without the name counts
-- as 0 ms and 0 calls, so that a slot that only some runs use keeps an honest median).
-- @tparam {table,...} runs results of M.parse
-- @treturn {table,...} rows in table order: {name = string, ms = {numbers}, calls = {numbers} or
--   nil when no run gave a count, phase = boolean, median_ms = number, median_calls = number or nil}
function M.summary(runs)
  local names, seen = {}, {}
  for _, r in ipairs(runs) do
    for name in pairs(r) do
      if not seen[name] then
        seen[name] = true
        names[#names + 1] = name
      end
    end
  end
  table.sort(names, order)
  local rows = {}
  for _, name in ipairs(names) do
    local row = { name = name, ms = {}, phase = PHASE_RANK[name] ~= nil }
    for _, r in ipairs(runs) do
      local x = r[name]
      row.ms[#row.ms + 1] = x and x.ms or 0
      if x and x.calls then row.calls = row.calls or {} end
    end
    if row.calls then
      for i, r in ipairs(runs) do row.calls[i] = r[name] and r[name].calls or 0 end
    end
    row.median_ms = median(row.ms)
    row.median_calls = row.calls and median(row.calls)
    rows[#rows + 1] = row
  end
  return rows
end

--- The breakdown as text lines: name, median ms, share of the total, median calls.
-- @tparam {table,...} rows M.summary's result
-- @treturn {string,...} lines (no newline)
function M.table_lines(rows)
  local total
  for _, r in ipairs(rows) do
    if r.name == "total" then total = r.median_ms end
  end
  local lines = { string.format("  %-20s %10s %7s %8s", "phase / slot", "median ms", "share", "calls") }
  for _, r in ipairs(rows) do
    local share = total and total > 0 and string.format("%6.1f%%", 100 * r.median_ms / total) or ""
    lines[#lines + 1] = string.format("  %-20s %10.2f %7s %8s", (r.phase and "" or "  ") .. r.name,
      r.median_ms, share, r.median_calls and string.format("%g", r.median_calls) or "")
  end
  return lines
end

--- The calls of one name in a parsed run (0 when absent).
-- @tparam table run M.parse's result
-- @tparam string name e.g. "host.run"
-- @treturn integer
function M.calls(run, name)
  return run[name] and run[name].calls or 0
end

return M
