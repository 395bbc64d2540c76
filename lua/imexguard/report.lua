--- The reports of the default policy's `plan` and `status` commands: what a person reads on stdout
-- (or JSON with --json). Pure functions of the facts the policy gathered; no primitive is called.
-- The per-node domain table of `status` is drawn by imexguard.health.report.
local cjson = require "cjson"
local health = require "imexguard.health"
local registry = require "imexguard.registry"
local text = require "imexguard.text"

local M = {}

--- Lines of a node list that only the old one has, and lines that only the new one has.
-- @param old string|nil current bytes (nil: unreadable, taken as empty)
-- @param new string desired bytes
-- @return removed list of lines, added list of lines (each in file order)
function M.diff(old, new)
  local oldl, newl, inold, innew = {}, {}, {}, {}
  for l in (old or ""):gmatch("[^\n]+") do oldl[#oldl + 1] = l; inold[l] = true end
  for l in new:gmatch("[^\n]+") do newl[#newl + 1] = l; innew[l] = true end
  local removed, added = {}, {}
  for _, l in ipairs(oldl) do if not innew[l] then removed[#removed + 1] = l end end
  for _, l in ipairs(newl) do if not inold[l] then added[#added + 1] = l end end
  return removed, added
end

--- The errors of the daemon's config.cfg (imexguard.imexcfg.lint) that `plan`, `status` and `check`
-- flag before any job runs (field case C22 of docs/design.md: a command port bound to loopback,
-- IMEX_CMD_ENABLED=0, bad or equal ports, a relative node list path).
-- @param info table|nil steps.applies' result (cfg, config)
-- @param addrs list|nil the domain's addresses (a bind to one of them is not a finding: see
--   imexguard.health.config_lint)
-- @return list of one-line strings "PATH: ..." (empty when clean or unknown)
function M.config_findings(info, addrs)
  local out = {}
  if not info or type(info.cfg) ~= "table" then return out end
  for _, f in ipairs(health.config_lint(info.cfg, info.config, addrs)) do
    if f.level == "error" then out[#out + 1] = f.text end
  end
  return out
end

--- True when a finding of config_findings keeps the nodes of a domain from seeing each other's
-- status (the command service or the bind address), i.e. a job on several nodes ends config-fault.
-- @param info table|nil steps.applies' result
-- @param addrs list|nil the domain's addresses (as for config_findings)
-- @return boolean
function M.config_fault_found(info, addrs)
  if not info or type(info.cfg) ~= "table" then return false end
  for _, f in ipairs(health.config_lint(info.cfg, info.config, addrs)) do
    if f.level == "error" and (f.key:match("^IMEX_CMD_") or f.key == "BIND_INTERFACE_IP") then return true end
  end
  return false
end

--- The one-line message of a plan: what the prolog would do, or why it may not.
-- @param f table plan facts (see M.plan)
-- @return string one line
function M.plan_message(f)
  local s, v = f.ctx.settings, f.verdict
  local restart = v.action ~= "none"
  if not f.allowed then
    return text.one_line(f.why .. (restart and ("; " .. v.action .. " needed: " .. v.reason) or ""))
  end
  local cf = f.config_fault and ("; but " .. f.findings[1] .. ": the prolog would end config-fault") or ""
  if f.changed or restart then
    return text.one_line(string.format("would %s%s%s%s",
      f.changed and ("rewrite " .. f.info.nodes_file) or "",
      (f.changed and restart) and " and " or "",
      restart and (v.action .. " " .. s.unit .. " (" .. v.reason .. ")") or "", cf))
  end
  return text.one_line("nothing to do: node list unchanged, " .. s.unit .. " current" .. cf)
end

--- The plan as JSON (one object, newline-terminated).
local function plan_json(f)
  local want, v = f.want, f.verdict
  local nodes = {}
  for i, a in ipairs(want.addrs) do
    nodes[i] = { name = want.list[i], address = a, self = a == want.self }
  end
  local removed, added = M.diff(f.old, want.bytes)
  local domain = f.domain
  return cjson.encode({
    job = f.job, source = want.source, hostlist = want.expr, nodes = nodes,
    nodes_file = f.info.nodes_file, changed = f.changed, removed = removed, added = added,
    unreadable = f.old_err, unit_state = v.unit.active_state, action = v.action, reason = v.reason,
    domain = domain and domain.status or nil, healthy = domain and domain.healthy or nil,
    order = v.order, config = f.info.config, config_source = f.info.config_source,
    config_findings = f.findings, config_fault = f.config_fault or nil,
    conflict = not f.allowed and f.why or nil, registered = registry.ids(registry.jobs(f.st)),
  }) .. "\n"
end

--- The node list part of the text plan: the desired list, then what happens to the file.
local function plan_list_lines(f, r)
  local want, info = f.want, f.info
  r[#r + 1] = string.format("desired node list from %s=%s (%d nodes):", tostring(want.source), want.expr,
    #want.addrs)
  for i, a in ipairs(want.addrs) do
    r[#r + 1] = string.format("  %-16s %s%s", a, want.list[i], a == want.self and "  (this node)" or "")
  end
  if f.old_err then r[#r + 1] = "current file: " .. f.old_err end
  if not f.changed then
    r[#r + 1] = info.nodes_file .. ": unchanged"
    return
  end
  local removed, added = M.diff(f.old, want.bytes)
  r[#r + 1] = info.nodes_file .. ": would be rewritten"
  for _, l in ipairs(removed) do r[#r + 1] = "  - " .. l end
  for _, l in ipairs(added) do r[#r + 1] = "  + " .. l end
  if #removed == 0 and #added == 0 then r[#r + 1] = "  (same addresses, order or format differs)" end
end

--- The plan as text for a person (newline-terminated).
local function plan_text(f)
  local s, v = f.ctx.settings, f.verdict
  local r = { string.format("plan for job %s on node %s (nothing is changed)", f.job, f.node) }
  plan_list_lines(f, r)
  r[#r + 1] = string.format("unit %s: %s/%s", s.unit, tostring(v.unit.active_state),
    tostring(v.unit.sub_state))
  r[#r + 1] = string.format("config: %s (from the %s)", tostring(f.info.config),
    tostring(f.info.config_source))
  for _, line in ipairs(f.findings or {}) do r[#r + 1] = "config fault: " .. line end
  r[#r + 1] = v.action ~= "none" and string.format("%s: yes, %s", v.action, v.reason)
    or ("restart: no, " .. v.reason)
  local jobs = registry.jobs(f.st)
  r[#r + 1] = #jobs == 0 and "registered jobs: none" or ("registered jobs: " .. registry.ids(jobs))
  if not f.allowed then r[#r + 1] = "conflict: " .. f.why end
  if f.domain then
    r[#r + 1] = string.format("domain now: %s (%s)", tostring(f.domain.status),
      f.domain.healthy and "healthy" or "not healthy")
  end
  return table.concat(r, "\n") .. "\n"
end

--- The report of `imexguard plan`.
-- @param f table the plan's facts: ctx, job (id string), node (this node's name), info (applies),
--   want (desired list), st (state file), old (current list bytes, or nil), old_err (why the current
--   list is unreadable, or nil), changed (boolean), verdict (steps.assess), allowed (boolean), why
--   (conflict message when not allowed), domain (health.verdict of the ctl's answer, or nil),
--   findings (config_findings), config_fault (config_fault_found and a job of several nodes)
-- @return string report, JSON when f.ctx.json (newline-terminated)
function M.plan(f)
  if f.ctx.json then return plan_json(f) end
  return plan_text(f)
end

--- The report of a `status` that found no domain to show: the outcome and its message.
-- @param outcome string
-- @param message string one line
-- @param json boolean
-- @return string report (newline-terminated)
function M.status_plain(outcome, message, json)
  if json then return cjson.encode({ outcome = outcome, message = message }) .. "\n" end
  return outcome .. ": " .. message .. "\n"
end

--- The report of `status` with a domain: the per-node table (imexguard.health.report).
-- @param domain table parsed domain
-- @param v table verdict.health verdict
-- @param opts table {self = address, names = {[addr] = name}, json = boolean, outcome, message,
--   findings = config_findings, config = path of the daemon's config.cfg, node_list = path of the
--   node list the map was compared with (nil: the domain's own order)}
-- @return string report (newline-terminated)
function M.status(domain, v, opts)
  return health.report(domain, v, opts)
end

return M
