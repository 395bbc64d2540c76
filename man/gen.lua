--- Fill a man page template (scdoc source) with sections generated from the code's own sources:
-- `@SETTINGS@` from lua/imexguard/settings.lua (schema: name, kind, default, doc) and
-- `@OUTCOMES@` from lua/imexguard/outcomes.lua (name -> exit code), so that the pages cannot
-- drift from the code. The meaning of each outcome is kept here; a code outcome without a meaning,
-- or a meaning without a code outcome, fails the build.
-- Usage: lua5.4 man/gen.lua TEMPLATE OUTPUT (run from the top of the repository).
package.path = "lua/?.lua;" .. package.path
local settings = require "imexguard.settings"
local outcomes = require "imexguard.outcomes"

local MEANING = {
  { "ok", "the node list is right, the daemon current, the domain healthy" },
  { "skipped", "IMEX does not apply here (the unit is missing or disabled, no IMEX config)" },
  { "peers-unhealthy", "this node is healthy, the named peers are not (they drain themselves)" },
  { "bad-input", "the job's node list, job id, an address or the environment is unusable; "
    .. "nothing changed" },
  { "policy-error", "the policy or the settings raised an error, or a file was refused (trust)" },
  { "lock-timeout", "another run held the node lock too long (its pid and job are named)" },
  { "conflict", "a rewrite or restart would break another job using IMEX on this node (named), "
    .. "or the job registry is unreadable" },
  { "unit-unknown", "systemd did not answer; nothing was restarted on a guess" },
  { "service-failed", "systemd could not start the unit (the job result is named)" },
  { "ctl-unusable", "nvidia-imex-ctl hung or answered something unparsable" },
  { "domain-unhealthy", "this node's daemon did not become healthy in time" },
  { "deadline-exceeded", "the run's budget ran out (the step is named)" },
  { "write-failed", "the node list, the state file or the lock file could not be written; "
    .. "the old list is intact" },
}

local TYPES = { number = "number > 0", string = "string", path = "absolute path", boolean = "boolean",
  bus = "string: \"system\", \"user\" or a D-Bus address \"unix:...\"",
  argv = "path, or list of strings (argv prefix)" }

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
    local unit = e.kind == "number" and "seconds" or "none"
    out[#out + 1] = string.format("*%s*\n\tType: %s. Default: %s. Unit: %s.\n\n\t%s.\n",
      esc(e.name), esc(ty), esc(lit(e.default)), unit, esc(e.doc:gsub("^seconds: ", "")))
  end
  return table.concat(out, "\n")
end

--- The outcomes section: one entry "NAME, exit CODE" and its meaning per outcome, in exit-code
-- order.
-- @return string scdoc text
local function outcomes_section()
  local seen, out = {}, {}
  for _, m in ipairs(MEANING) do
    local code = outcomes.codes[m[1]]
    assert(code, "man/gen.lua: outcome " .. m[1] .. " is not in lua/imexguard/outcomes.lua")
    seen[m[1]] = true
    local shown = "exit " .. code
    if m[1] == "peers-unhealthy" then
      shown = shown .. " (exit " .. outcomes.PEERS_UNHEALTHY_FAIL .. " with on\\_peer\\_fault = \"fail\")"
    end
    out[#out + 1] = string.format("*%s*, %s\n\t%s.\n", m[1], shown, esc(m[2]))
  end
  for name in pairs(outcomes.codes) do
    assert(seen[name], "man/gen.lua: outcome " .. name .. " has no meaning in man/gen.lua")
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
