-- SPDX-License-Identifier: Apache-2.0
--- What the two configuration commands print (the host runs them itself after the settings, no
-- entry point; imexguard.driver's D.show_config and D.config_test): `show-config` (-T, as `sshd -T`
-- and `scontrol show config`) every setting with its value and where it came from, and what a run
-- uses where the value alone does not say it (M.effective, which stats files), and `config-test`
-- (-t, as `sshd -t`) its verdict line. The rest are pure functions of the run table (docs/json.md
-- for the JSON).
local S = require('imexguard.settings')
local commands = require('imexguard.commands')
local one_line = require('imexguard.text').one_line

local M = {}

-- The settings file as the two commands name it.
local function settings_file(run)
  return run.config .. (run.config_absent and ' (absent: all defaults)' or '')
end

-- A value as a settings file writes it (the output of show-config is a valid settings file): a
-- list as `{ a, b }`, a table of names (policy_settings) as `{ name = value, ... }` in name order.
local function literal(v)
  if type(v) == 'string' then return string.format('%q', v) end
  if type(v) == 'table' then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = literal(x) end
    if #parts == 0 then
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = k end
      table.sort(keys)
      for i, k in ipairs(keys) do parts[i] = k .. ' = ' .. literal(v[k]) end
    end
    return #parts == 0 and '{}' or ('{ ' .. table.concat(parts, ', ') .. ' }')
  end
  return tostring(v)
end

-- The policy's own settings (P.settings, imexguard.policysettings) under policy_settings: one
-- comment line each, its value (defaults filled in), kind and default, what it does.
local function policy_settings_lines(run, lines)
  if run.policy_unloaded then
    lines[#lines + 1] = '--   policy_settings not checked: the policy does not load: ' .. run.policy_unloaded
    return
  end
  local values = run.settings.policy_settings or {}
  for _, e in ipairs(run.policy_schema or {}) do
    lines[#lines + 1] = one_line(string.format('--   policy_settings.%s = %s (%s%s): %s', e.name,
      values[e.name] == nil and 'unset' or literal(values[e.name]), e.kind,
      e.default ~= nil and (', default ' .. literal(e.default)) or '', tostring(e.doc or '')))
  end
end

--- What a run uses where a setting's value alone does not say it (issue 32, item 3): the
-- slurm.conf a run reads (SLURM_CONF of the environment comes before the setting slurm_conf, then the
-- configless cache: imexguard.slurmconf.locate) and the topology file of the domain map
-- (imexguard.domains.topology_paths: the setting topology_file, else the first of topology.yaml and
-- topology.conf beside that slurm.conf that exists). Reads only (stat).
-- @param ctx table {host (stat), env, settings}
-- @return table {[setting name] = {path = string|nil, why = one line}}
function M.effective(ctx)
  local out = {}
  local path, why = require('imexguard.slurmconf').locate(ctx)
  if not path then
    out.slurm_conf = { why = 'no slurm.conf: neither this file nor '
      .. require('imexguard.slurmconf').CONFIGLESS .. ' exists' }
  elseif why ~= 'setting slurm_conf' then
    out.slurm_conf = { path = path, why = why }
  end
  local domains = require('imexguard.domains')
  local paths, named = domains.topology_paths(ctx)
  if not named then
    for _, p in ipairs(paths) do
      if ctx.host.stat(p) then
        out.topology_file = { path = p, why = 'beside slurm.conf' }
        break
      end
    end
    out.topology_file = out.topology_file or { why = 'neither ' .. table.concat(paths, ' nor ') .. ' exists' }
  end
  return out
end

-- The note of a setting whose run uses another file than its value says (M.effective), or ''.
local function effective_note(run, name)
  local e = run.effective and run.effective[name]
  if not e then return '' end
  if e.path then return string.format('; a run reads %s (%s)', e.path, e.why) end
  return '; ' .. e.why
end

-- show-config --json: {schema, command, ok, config, settings = [{name, value (null: unset),
-- source, effective (the path a run uses when the value alone does not say it, else null), why}]}
-- in that order.
local function settings_json(run, shown, src)
  local json = require('imexguard.json')
  local list = {}
  for i, e in ipairs(S.schema) do
    local v = shown[e.name]
    if type(v) == 'table' and e.kind == 'table' then
      local o, keys = json.object(), {}
      for k in pairs(v) do keys[#keys + 1] = k end
      table.sort(keys)
      for _, k in ipairs(keys) do o:set(k, type(v[k]) == 'table' and json.array(v[k]) or v[k]) end
      v = o
    elseif type(v) == 'table' then
      v = json.array(v)
    end
    local eff = run.effective and run.effective[e.name] or {}
    list[i] = json.object():set('name', e.name):set('value', v):set('source', src[e.name] or 'default')
      :set('effective', eff.path):set('why', eff.why)
  end
  return json.encode(json.report('show-config'):set('ok', true):set('config', run.config)
    :set('settings', json.array(list)))
end

-- show-config's text: a valid settings file, `name = value -- source` (an unset one commented out).
local function settings_text(run, shown, src)
  local lines = { '-- imexguard settings from ' .. settings_file(run) .. ': value and source (default, '
    .. 'FILE:LINE, --set, --deadline, --policy)' }
  for _, e in ipairs(S.schema) do
    local v = shown[e.name]
    local source = src[e.name] or 'default'
    local note = effective_note(run, e.name)
    if v == nil then
      lines[#lines + 1] = string.format('-- %s unset (%s)%s', e.name, source, note)
    else
      lines[#lines + 1] = string.format('%s = %s -- %s%s', e.name, literal(v), source, note)
    end
    if e.name == 'policy_settings' then policy_settings_lines(run, lines) end
  end
  return table.concat(lines, '\n') .. '\n'
end

--- `show-config`: every setting of the schema in its order, its value and where it came from
-- (run.sources: default, FILE:LINE, --set, --deadline, --policy). --json writes the object of
-- docs/json.md.
-- @param run table the run (after the driver's settings call: run.settings, run.sources)
-- @return string the final line's message, string the output
function M.settings_report(run)
  local src = run.sources or {}
  local shown = {}
  for k, v in pairs(run.settings) do shown[k] = v end
  if run.policy then shown.policy = run.policy end
  local out = run.json and settings_json(run, shown, src) or settings_text(run, shown, src)
  return string.format('%d settings from %s', #S.schema, settings_file(run)), out
end

--- `config-test`'s line once the policy loaded: "FILE[ with N --set]: ok; policy P loads (entry
-- points)", and "; built-in C, ..." naming the commands the policy leaves to the built-in policy
-- (imexguard.commands: entry "optional").
-- @param run table the run
-- @param name string the policy's path, or the built-in policy's module name
-- @param policy table the loaded policy
-- @param entries string its entry points ("prolog, epilog, ...")
-- @return string one line
function M.test_line(run, name, policy, entries)
  local sets = #(run.sets or {}) > 0 and string.format(' with %d --set', #run.sets) or ''
  local builtin = {}
  for _, c in ipairs(commands.list) do
    if c.entry == 'optional' and type(policy[c.name]) ~= 'function' then builtin[#builtin + 1] = c.name end
  end
  return one_line(string.format('%s%s: ok; policy %s loads (%s)%s', settings_file(run), sets, name, entries,
    #builtin > 0 and ('; built-in ' .. table.concat(builtin, ', ')) or ''))
end

return M
