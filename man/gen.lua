--- Fill a man page template (scdoc source) with sections generated from the code's own sources:
-- `@SETTINGS@` from lua/imexguard/settings.lua (schema: name, kind, default, doc) and
-- `@OUTCOMES@` from lua/imexguard/outcomes.lua (name, exit code, meaning), so that the pages
-- cannot drift from the code; an outcome without a meaning fails the build.
-- Usage: lua5.4 man/gen.lua TEMPLATE OUTPUT (run from the top of the repository).
package.path = "lua/?.lua;" .. package.path
local settings = require "imexguard.settings"
local outcomes = require "imexguard.outcomes"

local TYPES = { number = "number > 0", string = "string", path = "absolute path", boolean = "boolean",
  bus = "string: \"system\", \"user\" or a D-Bus address \"unix:...\"",
  argv = "path, or list of strings (argv prefix)", mode = "octal string (permission bits)" }

-- A default as written in the settings file.
local function lit(v)
  if v == nil then
    return "unset"
  elseif type(v) == "string" then
    return string.format("\"%s\"", v)
  end
  return tostring(v)
end

-- scdoc treats * _ \ as markup: escape them.
local function esc(s)
  return (s:gsub("[%*_\\]", "\\%0"))
end

--- The settings section: one entry per schema entry, in schema order.
-- @return string scdoc text
local function settings_section()
  local out = {}
  for _, e in ipairs(settings.schema) do
    local ty = TYPES[e.kind] or e.kind
    if e.kind == "enum" then
      ty = "one of \"" .. table.concat(e.values, "\", \"") .. "\""
    end
    local unit = e.unit or (e.kind == "number" and "seconds" or "none")
    out[#out + 1] = string.format("*%s*\n\tType: %s. Default: %s. Unit: %s.\n\n\t%s.\n",
      esc(e.name), esc(ty), esc(lit(e.default)), unit, esc(e.doc:gsub("^seconds: ", "")))
  end
  return table.concat(out, "\n")
end

--- The outcomes section: one entry "NAME, exit CODE" and its meaning per outcome, in exit-code
-- order.
-- @return string scdoc text
local function outcomes_section()
  local out = {}
  for _, o in ipairs(outcomes.list) do
    local name, code, meaning = o[1], o[2], o[3]
    assert(meaning, "lua/imexguard/outcomes.lua: outcome " .. name .. " has no meaning")
    local shown = "exit " .. code
    if name == "peers-unhealthy" then
      shown = shown .. " (exit " .. outcomes.PEERS_UNHEALTHY_FAIL .. " with on\\_peer\\_fault = \"fail\")"
    elseif name == "config-fault" then
      shown = shown .. " (exit 0 with on\\_config\\_fault = \"warn\")"
    end
    out[#out + 1] = string.format("*%s*, %s\n\t%s.\n", name, shown, esc(meaning))
  end
  out[#out + 1] = "(usage or internal error), exit 1\n"
    .. "\ta bad command line, or an error of imexguard itself.\n"
  return table.concat(out, "\n")
end

local src, dst = arg[1], arg[2]
assert(src and dst, "usage: lua5.4 man/gen.lua TEMPLATE OUTPUT")
local f = assert(io.open(src, "rb"))
local text = f:read("a")
f:close()
text = text:gsub("@SETTINGS@", function() return settings_section() end)
text = text:gsub("@OUTCOMES@", function() return outcomes_section() end)
local o = assert(io.open(dst, "wb"))
o:write(text)
o:close()
