-- SPDX-License-Identifier: Apache-2.0
--- Slurm hostlist expressions (`SLURM_JOB_NODELIST`, `SLURM_NODELIST`).
--
-- Pure Lua, no side effects. The rules mirror Slurm's own expander (src/common/hostlist.c, as
-- shown by `scontrol show hostnames` of slurm 22.05, the differential oracle of
-- tests/lua/hostlist_spec.lua):
--
-- * A hostlist is a comma-separated list of groups; commas inside `[...]` belong to the bracket.
-- * A group is literal text with zero or more bracket groups `[r1,r2,...]`; each `r` is a
--   decimal value `7` or a range `lo-hi` with `lo <= hi`.
-- * Zero padding comes from the width of the written lower bound: `node-[09-10]` gives
--   `node-09 node-10`; `n[1-003]` gives `n1 n2 n3` (Slurm: `_parse_single_range`).
-- * Nothing may follow the last bracket of a group: `n[1-3]x` is invalid in Slurm 22.05.
-- * Several brackets in one group are expanded the way Slurm's `_push_range_list` recurses:
--   the last bracket varies fastest, then the remaining brackets from the first-but-last
--   backwards (for two brackets this is the plain cartesian product, `rack[1-2]-node[01-02]`
--   gives rack1-node01 rack1-node02 rack2-node01 rack2-node02).
-- * Order is the written order; duplicates are kept (Slurm keeps them in `show hostnames`).
-- * One range may hold at most 65536 names (Slurm's MAX_RANGE, "Too many hosts in range").
--
-- Stricter than Slurm (Slurm silently repairs or ignores these; imexguard never guesses a node
-- list): empty input, empty groups (`a,,b`, trailing comma), unbalanced or nested brackets,
-- whitespace or control characters, an open range `n[1-]`, values longer than 18 digits, a name
-- ending in more than 18 digits (Slurm reads such a suffix as an unsigned 64-bit number and
-- overflows it: `n99999999999999999999` becomes `n18446744073709551615`, another node; a node
-- list must name the job's nodes as Slurm does, so the name is refused, not kept), and more than
-- `MAX_NAMES` names in total.
-- @module imexguard.hostlist
local expect = require("imexguard.expect")

local M = {}

--- Largest number of names `expand` returns (imexguard's cap; an NVL72 domain has 18 nodes).
M.MAX_NAMES = 65536

--- Largest number of names in one range (Slurm's MAX_RANGE in hostlist.c).
M.MAX_RANGE = 65536

local MAX_DIGITS = 18 -- keeps every value an exact Lua integer

local function bad(expr, why)
  return nil, string.format("invalid hostlist '%s': %s", expr, why)
end

-- The number of decimal digits that end s. Anchored on the reversed string: the unanchored
-- "%d*$" retries from each digit of a long run, which is quadratic in the run's length.
local function trailing_digits(s)
  return #s:reverse():match("^%d*")
end

-- Parse the inside of one bracket into a list of {lo, hi, width}.
local function parse_ranges(body)
  if body == "" then
    return nil, "empty brackets"
  end
  local ranges = {}
  local pos = 1
  while true do
    local comma = body:find(",", pos, true)
    local item = body:sub(pos, (comma or #body + 1) - 1)
    local lo_s, hi_s = item:match("^(%d+)%-(%d+)$")
    if not lo_s then
      lo_s = item:match("^(%d+)$")
      hi_s = lo_s
    end
    if not lo_s then
      return nil, string.format("invalid range '%s'", item)
    end
    if #lo_s > MAX_DIGITS or #hi_s > MAX_DIGITS then
      return nil, string.format("number too long in range '%s'", item)
    end
    local lo, hi = math.tointeger(tonumber(lo_s)), math.tointeger(tonumber(hi_s))
    if lo > hi then
      return nil, string.format("invalid range '%s' (lower bound above upper bound)", item)
    end
    if hi - lo + 1 > M.MAX_RANGE then
      return nil, string.format("too many hosts in range '%s' (max %d)", item, M.MAX_RANGE)
    end
    ranges[#ranges + 1] = { lo = lo, hi = hi, width = #lo_s }
    if not comma then
      return ranges
    end
    pos = comma + 1
  end
end

local function count(ranges)
  local n = 0
  for _, r in ipairs(ranges) do
    n = n + (r.hi - r.lo + 1)
  end
  return n
end

-- Split one group into texts T[0..n] and bracket range lists R[1..n].
local function parse_group(group)
  local texts, brackets = {}, {}
  local pos = 1
  while true do
    local open = group:find("[", pos, true)
    if not open then
      texts[#brackets] = group:sub(pos)
      break
    end
    texts[#brackets] = group:sub(pos, open - 1)
    local close = group:find("]", open + 1, true)
    local ranges, err = parse_ranges(group:sub(open + 1, close - 1))
    if not ranges then
      return nil, err
    end
    brackets[#brackets + 1] = ranges
    pos = close + 1
  end
  if #brackets > 0 and texts[#brackets] ~= "" then
    return nil, string.format("text '%s' after the last bracket", texts[#brackets])
  end
  if #brackets == 0 and trailing_digits(group) > MAX_DIGITS then
    return nil, string.format("name '%s' ends in more than %d digits", group, MAX_DIGITS)
  end
  return texts, brackets
end

-- Expand one group into out, in Slurm's order (see the module comment).
local function expand_group(texts, brackets, out)
  local n = #brackets
  if n == 0 then
    out[#out + 1] = texts[0]
    return
  end
  local last = brackets[n]
  local function emit(prefix)
    for _, r in ipairs(last) do
      local fmt = "%0" .. r.width .. "d"
      for v = r.lo, r.hi do
        out[#out + 1] = prefix .. string.format(fmt, v)
      end
    end
  end
  -- The pending prefix is T0 R1 T1 ... R(m) followed by tail; peel R(m), as _push_range_list does.
  local function peel(m, tail)
    if m == 0 then
      return emit(tail)
    end
    for _, r in ipairs(brackets[m]) do
      local fmt = "%0" .. r.width .. "d"
      for v = r.lo, r.hi do
        peel(m - 1, texts[m - 1] .. string.format(fmt, v) .. tail)
      end
    end
  end
  peel(n - 1, texts[n - 1])
end

--- Expand a Slurm hostlist expression.
-- @tparam string expr e.g. `"node-[09-10],gpu[001,003-004]"`
-- @treturn[1] {string,...} host names in Slurm's order, duplicates kept
-- @treturn[2] nil
-- @treturn[2] string one-line error naming the expression: "invalid hostlist 'expr': why"
-- @raise when expr is not a string (programmer misuse)
function M.expand(expr)
  expect(expr, "string", "hostlist.expand: expected a string, got %s", type(expr))
  if expr == "" then
    return bad(expr, "empty")
  end
  local bad_char = expr:match("[%s%c]")
  if bad_char then
    return bad(expr, string.format("contains whitespace or a control character (byte %d)", bad_char:byte()))
  end
  -- Split at top-level commas, checking bracket balance on the way.
  local groups, depth, start = {}, 0, 1
  local i = 0
  while true do
    i = expr:find("[%[%],]", i + 1)
    if not i then break end
    local c = expr:sub(i, i)
    if c == "[" then
      if depth > 0 then
        return bad(expr, "nested '['")
      end
      depth = 1
    elseif c == "]" then
      if depth == 0 then
        return bad(expr, "']' without '['")
      end
      depth = 0
    elseif c == "," and depth == 0 then
      groups[#groups + 1] = expr:sub(start, i - 1)
      start = i + 1
    end
  end
  if depth > 0 then
    return bad(expr, "unclosed '['")
  end
  groups[#groups + 1] = expr:sub(start)

  local out = {}
  for gi, group in ipairs(groups) do
    if group == "" then
      return bad(expr, string.format("empty group %d", gi))
    end
    local texts, brackets = parse_group(group)
    if not texts then
      return bad(expr, brackets)
    end
    local total = 1
    for _, ranges in ipairs(brackets) do
      total = total * count(ranges)
      if #out + total > M.MAX_NAMES then
        return bad(expr, string.format("more than %d names", M.MAX_NAMES))
      end
    end
    expand_group(texts, brackets, out)
  end
  return out
end

--- Compress a list of names into a hostlist expression (for messages and logs).
-- Keeps the order: only neighbours with the same prefix share brackets, so
-- `expand(compress(list))` equals `list` (checked in the spec).
-- @tparam {string,...} names
-- @treturn[1] string e.g. `"node-[09-10],gpu1"` (`""` for an empty list)
-- @treturn[2] nil
-- @treturn[2] string error naming a name that cannot appear in a hostlist
-- @raise when names is not a table of strings
function M.compress(names)
  expect(names, "table", "hostlist.compress: expected a table, got %s", type(names))
  local groups = {} -- {prefix=, ranges={ {lo,hi,width,digits} }} or {literal=}
  for i, name in ipairs(names) do
    expect(name, "string", "hostlist.compress: entry %d is a %s", i, type(name))
    local d = name ~= "" and trailing_digits(name) or 0
    if name == "" or name:find("[%[%],%s%c]") or d > MAX_DIGITS then
      return nil, string.format("name %d '%s' cannot be written in a hostlist", i, name)
    end
    local prefix, digits = name:sub(1, #name - d), name:sub(#name - d + 1)
    if d == 0 then
      groups[#groups + 1] = { literal = name }
    else
      local v = math.tointeger(tonumber(digits))
      local g = groups[#groups]
      if g and g.prefix == prefix then
        local r = g.ranges[#g.ranges]
        if v == r.hi + 1 and string.format("%0" .. r.width .. "d", v) == digits then
          r.hi = v
        else
          g.ranges[#g.ranges + 1] = { lo = v, hi = v, width = #digits }
        end
      else
        groups[#groups + 1] = { prefix = prefix, ranges = { { lo = v, hi = v, width = #digits } } }
      end
    end
  end
  local parts = {}
  for _, g in ipairs(groups) do
    if g.literal then
      parts[#parts + 1] = g.literal
    else
      local items = {}
      for _, r in ipairs(g.ranges) do
        local fmt = "%0" .. r.width .. "d"
        items[#items + 1] = r.lo == r.hi and string.format(fmt, r.lo)
          or string.format(fmt .. "-" .. fmt, r.lo, r.hi)
      end
      if #items == 1 and g.ranges[1].lo == g.ranges[1].hi then
        parts[#parts + 1] = g.prefix .. items[1]
      else
        parts[#parts + 1] = g.prefix .. "[" .. table.concat(items, ",") .. "]"
      end
    end
  end
  return table.concat(parts, ",")
end

-- A name split for sorting: its text and number chunks ("r10n2" -> {"r", 10, "n", 2}), the
-- numbers with their widths, so that names compare in numeric order ("n3" before "n10").
local function chunks(name)
  local out = {}
  for text, digits in name:gmatch("(%D*)(%d*)") do
    if text ~= "" then out[#out + 1] = text end
    if digits ~= "" then
      out[#out + 1] = { v = math.tointeger(tonumber(digits)) or math.huge, w = #digits }
    end
  end
  return out
end

-- Slurm's order of hostlistsorted: names compare chunk by chunk, text as text and numbers by
-- value (Slurm's strnatcmp of the prefixes, then the numeric suffix), a shorter name first, and of
-- two equal values the narrower first ("n1" before "n01").
local function before(a, b)
  local ca, cb = a.key, b.key
  for i = 1, math.max(#ca, #cb) do
    local x, y = ca[i], cb[i]
    if x == nil then return true end
    if y == nil then return false end
    local tx, ty = type(x), type(y)
    if tx ~= ty then return tx == "string" end -- "n" before "n1": the name without a number first
    if tx == "string" then
      if x ~= y then return x < y end
    elseif x.v ~= y.v then
      return x.v < y.v
    elseif x.w ~= y.w then
      return x.w < y.w
    end
  end
  return a.name < b.name
end

--- Names in numeric order, each once: what a person reads (`gb3` before `gb10`; addresses too:
-- `10.0.0.3` before `10.0.0.10`).
-- @tparam {string,...} names
-- @treturn {string,...} a new list
-- @raise when names is not a table of strings
function M.sort(names)
  expect(names, "table", "hostlist.sort: expected a table, got %s", type(names))
  local seen, items = {}, {}
  for i, name in ipairs(names) do
    expect(name, "string", "hostlist.sort: entry %d is a %s", i, type(name))
    if not seen[name] then
      seen[name] = true
      items[#items + 1] = { name = name, key = chunks(name) }
    end
  end
  table.sort(items, before)
  local out = {}
  for i, it in ipairs(items) do out[i] = it.name end
  return out
end

--- Compress a set of names the way Slurm writes one for a person (`scontrol show hostlistsorted`,
-- Slurm's hostlist_sort then hostlist_ranged_string): in numeric order, duplicates dropped, one
-- bracket per common prefix with zero-padded ranges, e.g. {"gb10", "gb3", "gb04"} ->
-- "gb[3,04,10]", and the 18 nodes gb01..gb18 -> "gb[01-18]". Only the number that ends a name is
-- ranged, as Slurm does: "r1n[1-2],r2n1". The inverse of expand up to order and duplicates.
-- @tparam {string,...} names
-- @treturn[1] string (`""` for an empty list)
-- @treturn[2] nil
-- @treturn[2] string error naming a name that cannot appear in a hostlist
-- @raise when names is not a table of strings
function M.ranged(names)
  return M.compress(M.sort(names))
end

--- `ranged`, or the names joined by "," when one of them cannot be written in a hostlist (a
-- message must still name them): for what a person reads, in numeric order.
-- @tparam {string,...} names
-- @treturn string
function M.text_sorted(names)
  return M.ranged(names) or table.concat(M.sort(names), ",")
end

--- `compress`, or the names joined by "," when one of them cannot be written in a hostlist: for
-- what a person reads where the order is the list's own (a domain's nodes in the job's hostlist
-- order, which is the order of its node list), unlike `text_sorted`.
-- @tparam {string,...} names
-- @treturn string
function M.text_in_order(names)
  return M.compress(names) or table.concat(names, ",")
end

return M
