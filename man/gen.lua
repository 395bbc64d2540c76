-- SPDX-License-Identifier: Apache-2.0
--- Fill a man page template (scdoc source) with sections generated from the code's own sources,
-- so that the pages cannot drift from the code:
-- `@SYNOPSIS@` and `@COMMANDS@` from lua/imexguard/commands.lua (name, arg, json, help, deadline),
-- `@JSON_COMMANDS@` the commands whose output --json changes, `@DEADLINE@` the default of the
-- setting `deadline`, `@SETTINGS@` from lua/imexguard/settings.lua (schema: name, kind, default,
-- doc), `@OUTCOMES@` from lua/imexguard/outcomes.lua (name, exit code, meaning; an outcome
-- without a meaning fails the build), `@METRICS@` from lua/imexguard/metrics.lua (family, type,
-- labels, help) and `@METRICS_COMMANDS@` the commands whose runs are recorded, `@REASON_MAX@`
-- the longest drain reason and `@REASON_REGEX@` the grammar of a reason (lua/imexguard/drain.lua),
-- `@EXPECTED_REASONS@` the reasons of the node condition (lua/imexguard/expected.lua).
-- A command's entry in @COMMANDS@ is its help, then the lines the template gives it: a line
-- `@MORE NAME@` followed by lines that start with a tab (a block that names no command fails the
-- build). Usage: lua5.4 man/gen.lua TEMPLATE OUTPUT (run from the top of the repository).
package.path = "lua/?.lua;" .. package.path
local commands = require("imexguard.commands")
local settings = require("imexguard.settings")
local outcomes = require("imexguard.outcomes")
local metrics = require("imexguard.metrics")
local drain = require("imexguard.drain")

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

--- The metrics section: one entry per metric family, in the file's order.
-- @return string scdoc text
local function metrics_section()
  local out = {}
  for _, name in ipairs(metrics.ORDER) do
    local h = metrics.HELP[name]
    local labels = (h[3] or "") ~= "" and ("; labels " .. h[3]) or ""
    out[#out + 1] = string.format("*%s* (%s%s)\n\t%s\n", esc(name), h[1], esc(labels), esc(h[2]))
  end
  return table.concat(out, "\n")
end

-- A command as the synopsis and the COMMANDS section write it after its name: " _ARG_" and
-- " [*--json*]" and " [*-q*|*-v*]".
local function form(c)
  return (c.arg and " _" .. esc(c.arg) .. "_" or "") .. (c.json and " [*--json*]" or "")
    .. (c.verbosity and " [*-q*|*-v*]" or "")
end

-- A command's name as the synopsis and the COMMANDS section write it: "*name*", with its short
-- option "*name*|*-t*".
local function named(c)
  return "*" .. esc(c.name) .. "*" .. (c.short and "|*-" .. c.short .. "*" or "")
end

--- The SYNOPSIS lines: one per run of consecutive commands of the same form ("*a*|*b* [*--json*]").
-- @return string scdoc text
local function synopsis_section()
  local lines = {}
  local names, last
  for _, c in ipairs(commands.list) do
    if form(c) ~= last then
      names, last = {}, form(c)
      lines[#lines + 1] = { names = names, form = last }
    end
    names[#names + 1] = named(c)
  end
  local out = {}
  for _, l in ipairs(lines) do
    out[#out + 1] = "*imexguard* [_OPTIONS_] " .. table.concat(l.names, "|") .. l.form
  end
  return table.concat(out, "\n\n")
end

--- Take the `@MORE NAME@` blocks out of a template.
-- @param text string the template
-- @return string the template without them
-- @return table command name -> its lines (each starting with a tab)
local function take_more(text)
  local kept, more, name = {}, {}, nil
  for line in text:gmatch("([^\n]*)\n") do
    local n = line:match("^@MORE (%S+)@$")
    if n then
      assert(commands.by_name[n], "@MORE " .. n .. "@: not a command of lua/imexguard/commands.lua")
      name, more[n] = n, {}
    elseif name and line:match("^\t") then
      table.insert(more[name], line)
    else
      name = nil
      kept[#kept + 1] = line
    end
  end
  return table.concat(kept, "\n") .. "\n", more
end

--- The COMMANDS section: per command "*NAME* _ARG_ [*--json*]", its help as a sentence (and its own
-- budget), then the template's lines for it.
-- @param more table command name -> lines (take_more)
-- @return string scdoc text
local function commands_section(more)
  local out = {}
  for _, c in ipairs(commands.list) do
    local help = esc((c.help:gsub("^%l", string.upper)))
    if c.deadline then
      help = help .. "; budget " .. c.deadline .. " seconds unless *--deadline*"
    end
    local entry = { named(c) .. form(c), "\t" .. help .. "." }
    for _, line in ipairs(more[c.name] or {}) do entry[#entry + 1] = line end
    out[#out + 1] = table.concat(entry, "\n") .. "\n"
  end
  return table.concat(out, "\n")
end

local src, dst = arg[1], arg[2]
assert(src and dst, "usage: lua5.4 man/gen.lua TEMPLATE OUTPUT")
local f = assert(io.open(src, "rb"))
local text = f:read("a")
f:close()
local more
text, more = take_more(text)
text = text:gsub("@SYNOPSIS@", function() return synopsis_section() end)
text = text:gsub("@COMMANDS@", function() return commands_section(more) end)
text = text:gsub("@JSON_COMMANDS@", function()
  local names = {}
  for _, name in ipairs(commands.names("json")) do names[#names + 1] = "*" .. esc(name) .. "*" end
  return table.concat(names, ", ")
end)
text = text:gsub("@DEADLINE@", function() return lit(settings.by_name.deadline.default) end)
text = text:gsub("@SETTINGS@", function() return settings_section() end)
text = text:gsub("@OUTCOMES@", function() return outcomes_section() end)
text = text:gsub("@METRICS@", function() return metrics_section() end)
text = text:gsub("@METRICS_COMMANDS@", function()
  local names = {}
  for _, name in ipairs(commands.names("metrics")) do names[#names + 1] = "*" .. esc(name) .. "*" end
  return table.concat(names, ", ")
end)
text = text:gsub("@REASON_MAX@", function() return tostring(drain.MAX_REASON) end)
text = text:gsub("@EXPECTED_REASONS@", function()
  local out = {}
  for _, r in ipairs(require("imexguard.expected").REASONS) do
    out[#out + 1] = string.format("*%s* (%d)\n\t%s.\n", esc(r[1]), r[2] and 1 or 0, esc(r[3]))
  end
  return table.concat(out, "\n")
end)
text = text:gsub("@REASON_REGEX@", function() return drain.REGEX end)
text = text:gsub("@REASON_REGEX_TAIL@", function() return (drain.REGEX:gsub("^%^", "")) end)
local o = assert(io.open(dst, "wb"))
o:write(text)
o:close()
