-- SPDX-License-Identifier: Apache-2.0
--- bench/ab.lua: the paired comparison of two imexguard builds that bench/ab.sh ran in turn.
--   lua5.4 bench/ab.lua LOG
-- Prints, per --timing name (and `wall`, ms), build A's and build B's median and the median of the
-- differences B - A of consecutive runs (A then B: the pairs saw the same moment of the machine),
-- with the share of pairs in which B was faster. Plain Lua 5.4.
local path = assert(arg[1], "usage: lua5.4 bench/ab.lua LOG")

local runs = { A = {}, B = {} } -- per build, the list of runs: {NAME = value}
for line in io.lines(path) do
  local tag, name, value = line:match("^([AB]) (%S+) ([%d.]+)")
  if tag then
    local list = runs[tag]
    if name == "wall" then
      list[#list + 1] = { wall = tonumber(value) / 1000 }
    elseif #list > 0 then
      list[#list][name] = tonumber(value)
    end
  end
end

local function median(t)
  if #t == 0 then return nil end
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
end

local names, seen = {}, {}
for _, tag in ipairs { "A", "B" } do
  for _, r in ipairs(runs[tag]) do
    for k in pairs(r) do
      if not seen[k] then seen[k], names[#names + 1] = true, k end
    end
  end
end
table.sort(names)

local pairs_n = math.min(#runs.A, #runs.B)
print(string.format("%d runs of A, %d of B, %d pairs; ms (lua-heap-peak: KiB)", #runs.A, #runs.B, pairs_n))
print(string.format("%-20s %9s %9s %11s %8s", "name", "A median", "B median", "pair B-A", "B faster"))
local function fmt(x) return x and string.format("%9.3f", x) or string.format("%9s", "-") end
for _, k in ipairs(names) do
  local va, vb, d, faster = {}, {}, {}, 0
  for _, r in ipairs(runs.A) do va[#va + 1] = r[k] end
  for _, r in ipairs(runs.B) do vb[#vb + 1] = r[k] end
  for i = 1, pairs_n do
    local x, y = runs.A[i][k], runs.B[i][k]
    if x and y then
      d[#d + 1] = y - x
      if y < x then faster = faster + 1 end
    end
  end
  local diff = #d > 0 and string.format("%+.3f", median(d)) or "-"
  local share = #d > 0 and string.format("%d%%", 100 * faster // #d) or "-"
  print(string.format("%-20s %s %s %11s %8s", k, fmt(median(va)), fmt(median(vb)), diff, share))
end
