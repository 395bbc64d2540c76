-- SPDX-License-Identifier: Apache-2.0
--- Mutators of the soak fuzzer (tests/soak/soak_fuzz.lua), driven by math.random (seeded by
-- tests/soak/run.lua): bytewise (truncation, invalid UTF-8, flips, splices), line-wise, JSON-tree
-- (missing keys, wrong types, huge numbers, duplicate ids, unknown states) and Lua-token mutations.
local cjson = require("cjson")

local M = {}

--- A random element of list t.
function M.pick(t)
  return t[math.random(#t)]
end

-- Strings that break parsers: invalid UTF-8 (lone continuation, overlong, surrogate, truncated
-- sequence, 0xff), NUL, control bytes, huge and odd numbers, JSON and Lua punctuation.
M.NASTY = {
  "\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\x80", "\0", "\r", "\t", "\27[31m", "\n\n",
  "99999999999999999999999", "1e308", "-1e999", "1e-400", "-0", "0x7fffffffffffffff", "NaN", "-1",
  "18446744073709551616", "{", "}", "[", "]", ",", ":", "\"", "\\", "\\u0000", "\\ud800", "null",
  "true", "=", "--", "[[", "]]", "..", "%", "#", " ", "", "UP", "DOWN", "DEGRADED", "READY",
  "CONNECTED", "127.0.0.1", "10.0.0.1", "256.1.1.1", "10.0.0", "::1", "n[1-2]",
}

local function rand_bytes(n)
  local t = {}
  for i = 1, n do t[i] = string.char(math.random(0, 255)) end
  return table.concat(t)
end

--- One bytewise mutation of s (1 to 4 applied).
function M.bytes(s)
  for _ = 1, math.random(4) do
    local n = #s
    local i = math.random(0, n)
    local r = math.random(9)
    if r == 1 then
      s = s:sub(1, i) -- truncation
    elseif r == 2 then
      s = s:sub(1, i) .. M.pick(M.NASTY) .. s:sub(i + 1)
    elseif r == 3 and n > 0 then
      local j = math.random(i, math.min(n, i + 16))
      s = s:sub(1, i) .. s:sub(j + 1) -- delete a range
    elseif r == 4 and n > 0 then
      local j = math.random(i, math.min(n, i + 64))
      s = s:sub(1, j) .. s:sub(i + 1, j) .. s:sub(j + 1) -- duplicate a range
    elseif r == 5 and i > 0 then
      s = s:sub(1, i - 1) .. string.char(math.random(0, 255)) .. s:sub(i + 1) -- flip a byte
    elseif r == 6 then
      s = s:sub(1, i) .. rand_bytes(math.random(1, 8)) .. s:sub(i + 1)
    elseif r == 7 then
      s = s:gsub("%d+", function(d) return math.random(4) == 1 and M.pick(M.NASTY) or d end)
    elseif r == 8 then
      s = s:gsub("%u%u+", function(w)
        return math.random(4) == 1 and M.pick({ "BOGUS", "", "up", "Ready" }) or w
      end)
    else
      s = s:sub(1, i) .. s:sub(1, math.random(0, n)) -- splice a prefix
    end
  end
  return s
end

--- A line-wise mutation (drop, duplicate, swap, rewrite a line), then maybe a bytewise one.
function M.text(s)
  local lines = {}
  for l in (s .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  for _ = 1, math.random(3) do
    local i = math.random(#lines)
    local r = math.random(5)
    if r == 1 then
      table.remove(lines, i)
    elseif r == 2 then
      table.insert(lines, i, lines[i])
    elseif r == 3 then
      local j = math.random(#lines)
      lines[i], lines[j] = lines[j], lines[i]
    elseif r == 4 then
      lines[i] = M.pick(M.NASTY) .. (lines[i] or "") .. M.pick(M.NASTY)
    else
      lines[i] = (lines[i] or ""):gsub("%S+", function(w)
        return math.random(3) == 1 and M.pick(M.NASTY) or w
      end)
    end
    if #lines == 0 then lines[1] = "" end
  end
  local out = table.concat(lines, "\n")
  if math.random(2) == 1 then out = M.bytes(out) end
  return out
end

local function deep_copy(v)
  if type(v) ~= "table" then return v end
  local t = {}
  for k, x in pairs(v) do t[k] = deep_copy(x) end
  return t
end

-- Every table on a path from the root, with its key list, for choosing where to mutate.
local function tables(v, out)
  if type(v) == "table" then
    out[#out + 1] = v
    for _, x in pairs(v) do tables(x, out) end
  end
  return out
end

local WRONG = {
  function() return math.random(-5, 5) end,
  function() return 2 ^ 63 end, function() return 1e308 end, function() return -2 ^ 53 - 1 end,
  function() return "" end, function() return M.pick(M.NASTY) end, function() return true end,
  function() return cjson.null end, function() return {} end, function() return { 1, 2, 3 } end,
  function() return { status = "UP" } end, function() return string.rep("x", math.random(100, 5000)) end,
}

--- A JSON text from a mutated copy of tree (1 to 3 mutations), sometimes with a duplicate key
-- (the same id twice, as only the text can hold it) or cut short.
function M.json(tree)
  local t = deep_copy(tree)
  for _ = 1, math.random(3) do
    local all = tables(t, {})
    local node = M.pick(all)
    local keys = {}
    for k in pairs(node) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local r = math.random(5)
    if #keys == 0 or r == 5 then
      local key = M.pick({ "status", "host", "nodes", "0", "99", "-1", "1e3", "extra", "connections" })
      node[key] = M.pick(WRONG)()
    else
      local k = M.pick(keys)
      if r == 1 then
        node[k] = nil -- a missing key
      elseif r == 2 then
        node[k] = M.pick(WRONG)() -- a wrong type, huge number
      elseif r == 3 and type(node[k]) == "string" then
        -- an unknown state
        node[k] = M.pick({ "BOGUS", "up", "", "READY ", "UNAVAILABLE", "DEGRADED", "\xff\xfe" })
      else
        -- a copy under another id
        node[M.pick({ "0", "1", "2", tostring(math.random(0, 300)) })] = deep_copy(node[k])
      end
    end
  end
  local ok, text = pcall(cjson.encode, t)
  if not ok then text = "{}" end
  local r = math.random(6)
  if r == 1 then
    text = text:gsub('"1":', '"0":', 1) -- a duplicate id
  elseif r == 2 then
    text = text:sub(1, math.random(0, #text)) -- truncation
  elseif r == 3 then
    text = M.bytes(text)
  end
  return text
end

local LUA_TOKENS = {
  "=", "==", "~=", "..", "...", "{", "}", "(", ")", "[", "]", ",", ";", "local", "return", "nil",
  "true", "false", "1e999", "-1", "0/0", "'x'", "\"y\"", "[[z]]", "--", "#", "deadline", "ctl", "unit",
  "_ENV", "os", "print", "function", "end", "if", "then", "x", "{ 'a', 'b' }", "\"\xff\"", "2^63",
}

--- A mutated settings file: token-level edits of assignments (values of the wrong type, unknown
-- names, broken syntax), then maybe a bytewise mutation. It never writes a loop on purpose (a
-- runaway is still bounded by the fuzzer's instruction count).
function M.lua(s)
  local lines = {}
  for l in s:gmatch("[^\n]+") do lines[#lines + 1] = l end
  for _ = 1, math.random(3) do
    local i = math.random(#lines)
    local r = math.random(4)
    if r == 1 then
      lines[i] = lines[i]:gsub("= (.*)$", function() return "= " .. M.pick(LUA_TOKENS) end)
    elseif r == 2 then
      lines[i] = lines[i]:gsub("%S+", function(w) return math.random(3) == 1 and M.pick(LUA_TOKENS) or w end)
    elseif r == 3 then
      table.remove(lines, i)
      if #lines == 0 then lines[1] = "" end
    else
      table.insert(lines, i, M.pick(LUA_TOKENS) .. " = " .. M.pick(LUA_TOKENS))
    end
  end
  local out = table.concat(lines, "\n") .. "\n"
  if math.random(3) == 1 then out = M.bytes(out) end
  return out
end

return M
