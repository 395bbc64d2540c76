-- SPDX-License-Identifier: Apache-2.0
--- A site policy's own settings (issue 32 item 7): the policy declares them in a list `P.settings`
-- (entries shaped as imexguard.settings' schema: name, kind, default, doc, and values for an enum,
-- min, max and unit for a number), the admin sets them in imexguard.conf under one key,
-- `policy_settings = { NAME = value, ... }` (or `--set policy_settings.NAME=VALUE`), and every
-- run that loads the policy checks them against the declaration: an unknown name or a wrong value
-- is a settings-error naming the file and line, as any setting's; the policy reads them, defaults
-- filled in, as ctx.settings.policy_settings.NAME. `show-config` lists them with their sources.
-- The one namespace for policy settings: a policy never invents another key of its own.
local S = require("imexguard.settings")

local M = {}

--- The kinds a policy may declare (imexguard.settings' kinds that carry no host meaning).
M.KINDS = { number = true, string = true, boolean = true, enum = true, path = true, mode = true }

--- The declared settings of a policy, checked: its `settings` list (nil: none).
-- @param policy table the loaded policy
-- @return list of entries (empty when it declares none), or nil, error (the declaration is wrong:
--   the policy's fault, policy-error)
function M.schema_of(policy)
  local decl = rawget(policy, "settings")
  if decl == nil then decl = policy.settings end
  if decl == nil then return {} end
  if type(decl) ~= "table" then
    return nil, "settings must be a list of setting declarations, is " .. type(decl)
  end
  local seen = {}
  for i, e in ipairs(decl) do
    if type(e) ~= "table" or type(e.name) ~= "string" or not e.name:match("^[%a_][%w_]*$") then
      return nil, string.format("settings[%d] has no name (a Lua name)", i)
    end
    if seen[e.name] then return nil, string.format("setting '%s' is declared twice", e.name) end
    seen[e.name] = true
    if not M.KINDS[e.kind] then
      return nil, string.format("setting '%s' has kind %s (one of: boolean, enum, mode, number, path, "
        .. "string)", e.name, tostring(e.kind))
    end
    if e.kind == "enum" and type(e.values) ~= "table" then
      return nil, string.format("setting '%s' is an enum without values", e.name)
    end
    if e.default ~= nil then
      local ok, err = S.check_value(e, e.default)
      if ok == nil then return nil, "the default of " .. tostring(err) end
    end
  end
  return decl
end

-- A value from --set (text) read by the entry's kind; any other value as it is.
local function from_text(e, v)
  if type(v) ~= "string" or (e.kind ~= "number" and e.kind ~= "boolean") then return v end
  local x = S.parse_text(e, v)
  if x == nil or x == S.UNSET then return v end
  return x
end

--- Check the admin's policy_settings against the declaration and fill in the defaults.
-- @param schema list the declared entries (M.schema_of)
-- @param raw table|nil the setting policy_settings (nil: none given)
-- @return table {NAME = value} (every declared name; nil for an unset one without default), or nil,
--   error naming the key: "unknown policy setting 'x' (the policy declares: a, b)" or
--   "setting 'policy_settings.x' must be ..."
function M.validate(schema, raw)
  local by = {}
  for _, e in ipairs(schema) do by[e.name] = e end
  for k in pairs(raw or {}) do
    if not by[k] then
      local names = {}
      for i, e in ipairs(schema) do names[i] = e.name end
      return nil, string.format("unknown policy setting '%s' (the policy declares %s)", tostring(k),
        #names > 0 and table.concat(names, ", ") or "none")
    end
  end
  local out = {}
  for _, e in ipairs(schema) do
    local v = (raw or {})[e.name]
    if v == nil then
      out[e.name] = e.default
    else
      local ok, err = S.check_value(e, from_text(e, v))
      if ok == nil then
        return nil, (tostring(err):gsub("setting '" .. e.name .. "'",
          "setting 'policy_settings." .. e.name .. "'"))
      end
      out[e.name] = ok
    end
  end
  return out
end

--- Check a loaded policy's settings and put them in the run's settings (settings.policy_settings,
-- what ctx.settings shows the policy).
-- @param policy table the loaded policy
-- @param settings table the run's validated settings (changed: policy_settings)
-- @return true, or nil, outcome ("policy-error": the declaration; "settings-error": the values),
--   message
function M.apply(policy, settings)
  local schema, serr = M.schema_of(policy)
  if not schema then return nil, "policy-error", "policy settings: " .. serr end
  local values, err = M.validate(schema, settings.policy_settings)
  if not values then return nil, "settings-error", err end
  settings.policy_settings = values
  return true
end

return M
