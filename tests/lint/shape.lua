-- SPDX-License-Identifier: Apache-2.0
--- The lint tier's check of the code's shape and of the docs' lists (the project's standards):
-- no function in lua/ or policies/ over MAX_FUNCTION lines (specs aside), no production Lua file
-- over MAX_FILE lines (the test kit and specs aside), and docs/design.md naming every outcome of
-- lua/imexguard/outcomes.lua in its outcome table and every module of lua/imexguard/ in its module
-- table. A function's lines are those `luac5.4 -l -p` gives it (`function <FILE:FIRST,LAST>`, from
-- its `function` keyword to its `end`), so a long string or comment inside one counts, as it does
-- for a reader. Run from the repository root: lua5.4 tests/lint/shape.lua; prints one line per
-- finding and exits 1 when there is one.
local MAX_FUNCTION, MAX_FILE = 60, 700

local function lines_of(cmd)
  local p = assert(io.popen(cmd))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  local ok, _, code = p:close()
  if not ok then error(cmd .. ": exit " .. tostring(code), 0) end
  return out
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local findings = {}
local function finding(fmt, ...) findings[#findings + 1] = string.format(fmt, ...) end

-- The Lua files of lua/ and policies/ that git knows (a new file counts once it is added).
local files = lines_of("git ls-files -- 'lua/*.lua' 'policies/*.lua'")
for _, path in ipairs(files) do
  local spec = path:match("_spec%.lua$") ~= nil
  local kit = path:match("^lua/imexguard/testing/") ~= nil
  if not spec then
    for _, l in ipairs(lines_of("luac5.4 -l -p " .. quote(path))) do
      local first, last = l:match("^function <[^>]-:(%d+),(%d+)>")
      if first then
        local n = tonumber(last) - tonumber(first) + 1
        if n > MAX_FUNCTION then
          finding("%s:%s: a function of %d lines (at most %d)", path, first, n, MAX_FUNCTION)
        end
      end
    end
    local _, count = read(path):gsub("\n", "")
    if not kit and count > MAX_FILE then finding("%s: %d lines (at most %d)", path, count, MAX_FILE) end
  end
end

-- docs/design.md's section from `from` up to the next line starting with `to`.
local design = read("docs/design.md")
local function section(from, to)
  local a = assert(design:find(from, 1, true), "docs/design.md: no " .. from)
  local b = design:find("\n" .. to, a + #from, true) or #design
  return design:sub(a, b)
end

local outcome_table = section("## Outcomes and exit codes", "## ")
for _, o in ipairs(dofile("lua/imexguard/outcomes.lua").list) do
  if not outcome_table:find("| `" .. o[1] .. "` |", 1, true) then
    finding("docs/design.md, \"Outcomes and exit codes\": no row of the outcome %s", o[1])
  end
end

local module_table = section("Lua modules (`lua/imexguard/`)", "### ")
for _, path in ipairs(files) do
  local name = path:match("^lua/imexguard/(.+)%.lua$")
  if name then
    name = name:gsub("/init$", ""):gsub("/", ".")
    if not module_table:find("`" .. name .. "`", 1, true) then
      finding("docs/design.md, its module table: no `%s` (%s)", name, path)
    end
  end
end

for _, f in ipairs(findings) do print(f) end
os.exit(#findings == 0 and 0 or 1)
