-- SPDX-License-Identifier: Apache-2.0
--- Generate the bash completion of imexguard (`make completion`, build/completion/imexguard), so
-- that it cannot drift from the code: the commands and the command that takes a policy file from
-- lua/imexguard/commands.lua, the names of --set (and the values of enum and boolean settings)
-- from lua/imexguard/settings.lua, the options and their argument names from the usage text of
-- the built binary (`imexguard --help`, read on standard input; src/cli.c is its one source).
-- Usage (from the top of the repository): build/imexguard --help | lua5.4 contrib/completion/gen.lua
--   contrib/completion/imexguard.bash.in OUTPUT
package.path = "lua/?.lua;" .. package.path
local commands = require("imexguard.commands")
local settings = require("imexguard.settings")

local src, dst = arg[1], arg[2]
assert(src and dst, "usage: imexguard --help | lua5.4 contrib/completion/gen.lua TEMPLATE OUTPUT")
local help = io.read("a")

-- Options: the "Options:" lines of the usage text, "  --name ARG  text" or "  -h, --help  text".
local options, with_arg = {}, {}
local in_options = false
for line in help:gmatch("[^\n]*") do
  if line:match("^Options:") then
    in_options = true
  elseif line:match("^%S") then
    in_options = false
  elseif in_options then
    local short, long, argname = line:match("^  (%-%a), (%-%-[%w-]+)%s*(%u*[%u=]*)")
    if not long then long, argname = line:match("^  (%-%-[%w-]+) ?([%u=]*)") end
    if long then
      if short then options[#options + 1] = short end
      options[#options + 1] = long
      if argname and argname ~= "" then with_arg[#with_arg + 1] = { long, argname } end
    end
  end
end
assert(#options >= 4 and #with_arg >= 3, "no options found in the usage text on standard input")

-- The shell action after an option's argument name: FILE a file, DIR a directory, KEY=VALUE a
-- setting (the template's own branch), anything else (SECONDS) nothing to offer.
local ACTIONS = { FILE = "_imexguard_files", DIR = "_imexguard_dirs", ["KEY=VALUE"] = "_imexguard_set" }
local cases, names = {}, {}
for _, o in ipairs(with_arg) do
  names[#names + 1] = o[1]
  local action = ACTIONS[o[2]] and (ACTIONS[o[2]] .. ' "$cur"') or ":"
  cases[#cases + 1] = string.format("\t%s) %s ;;", o[1], action)
end

local cmds, file_cmds = {}, {}
for _, c in ipairs(commands.list) do
  cmds[#cmds + 1] = c.name
  if c.arg then file_cmds[#file_cmds + 1] = c.name end
end

local keys, values = {}, {}
for _, e in ipairs(settings.schema) do
  keys[#keys + 1] = e.name
  if e.kind == "enum" then
    values[#values + 1] = string.format("\t%s) values=%q ;;", e.name, table.concat(e.values, " "))
  elseif e.kind == "boolean" then
    values[#values + 1] = string.format("\t%s) values=\"true false\" ;;", e.name)
  end
end

local f = assert(io.open(src, "rb"))
local text = f:read("a")
f:close()
local subst = {
  COMMANDS = table.concat(cmds, " "),
  FILE_COMMANDS = table.concat(file_cmds, "|"),
  OPTIONS = table.concat(options, " "),
  ARG_OPTIONS = table.concat(names, "|"),
  OPTION_CASES = table.concat(cases, "\n"),
  SETTINGS = table.concat(keys, " "),
  SETTING_VALUES = table.concat(values, "\n"),
}
text = text:gsub("@([%u_]+)@", function(k) return assert(subst[k], "unknown @" .. k .. "@") end)
local o = assert(io.open(dst, "wb"))
o:write(text)
o:close()
