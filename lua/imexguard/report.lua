--- The reports of the default policy's `plan` and `status` commands: what a person reads on stdout
-- (or JSON with --json), the per-node domain table of `status` included. Pure functions of the
-- facts the policy gathered; no primitive is called.
local cjson = require "cjson"
local health = require "imexguard.health"
local verdict = require "imexguard.verdict"
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
    if f.level == "error" and not f.repeated and (f.key:match("^IMEX_CMD_") or f.key == "BIND_INTERFACE_IP")
    then return true end
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

-- ---- the status table -------------------------------------------------------------------------

-- Every host named in a connection of the domain, sorted, and the count of each node's connections:
-- sorted once for the whole table, so the summaries cost n^2, not n^2 log n.
local function connection_hosts(domain)
  local seen, hosts, counts = {}, {}, {}
  for _, node in ipairs(domain.nodes) do
    local k = 0
    for host in pairs(node.connections or {}) do
      k = k + 1
      if not seen[host] then
        seen[host] = true
        hosts[#hosts + 1] = host
      end
    end
    counts[node] = k
  end
  table.sort(hosts)
  return { hosts = hosts, counts = counts }
end

-- The hosts of one node's connections, sorted: picked from the domain's sorted hosts when the node
-- names at least a quarter of them (the usual case: every node names every node), else sorted alone.
local function sorted_connections(node, all)
  local conns, hosts = node.connections or {}, {}
  if all.counts[node] * 4 >= #all.hosts then
    for _, host in ipairs(all.hosts) do
      if conns[host] ~= nil then hosts[#hosts + 1] = host end
    end
    return hosts
  end
  for host in pairs(conns) do hosts[#hosts + 1] = host end
  table.sort(hosts)
  return hosts
end

--- Connections summary of one node: "3/4 connected; 10.0.0.4 INVALID".
local function conn_summary(node, all)
  local total, up, bad = 0, 0, {}
  for _, host in ipairs(sorted_connections(node, all)) do
    local st = node.connections[host]
    total = total + 1
    if st == "CONNECTED" then up = up + 1 else bad[#bad + 1] = host .. " " .. tostring(st) end
  end
  local s = string.format("%d/%d connected", up, total)
  if #bad > 0 then s = s .. "; " .. table.concat(bad, ", ") end
  return s
end

-- Diagnosis of each node by host: the verdict's blame, node-map findings, configuration fault.
local function diagnoses(v)
  local diag = {}
  if not v then return diag end
  for _, f in ipairs(v.faulty or {}) do diag[f.host] = tostring(f.reason) end
  if v.verdict == "config-fault" and v.config_fault then
    for _, h in ipairs(v.config_fault.peers or {}) do
      diag[h] = diag[h] or "status not known here: command port unreachable (configuration fault, see below)"
    end
  end
  return diag
end

-- "this node: ID 1 (10.0.0.2, n2) in the daemon's node map; ID 1 in the node list FILE".
local function self_line(v, opts)
  local names = opts.names or {}
  local me = health.label(opts.self, names)
  local id = v and v.self_id
  local line = id and string.format("this node %s: ID %d in the daemon's node map", me, id)
    or string.format("this node %s: not in the daemon's node map", me)
  local job_id = v and v.order and v.order.job_self_id
  if opts.node_list then
    line = line .. (job_id and string.format("; ID %d in the node list %s", job_id, opts.node_list)
      or ("; not in the node list " .. opts.node_list))
  else
    line = line .. "; node list unknown (compared with the daemon's own order)"
  end
  if opts.config then line = line .. "; config " .. opts.config end
  return line
end

--- The report of `status` with a domain: the domain for a person (or as JSON), one row per node:
-- ID (`*` marks this node), host, name, state, connections, node-map finding, diagnosis.
-- @param domain table parsed domain
-- @param v table|nil verdict (verdict.health; nil: the node-map findings are computed here)
-- @param opts table {self = address, names = {[addr] = slurm name}, json = boolean, outcome, message,
--   findings = list of config.cfg findings (lines), config = config path, node_list = path of the
--   ordered list the map was compared with}
-- @return string report (newline-terminated), with a line naming this node's ID; JSON adds
--   `node_list`, `config`, `config_findings`, `verdict`, `self_id`, `order` (compare_map's
--   kind and summary) and per node `map` ("ok" or the node-map finding)
function M.status(domain, v, opts)
  local names = opts.names or {}
  local diag = diagnoses(v)
  local map_of = {}
  for _, m in ipairs(v and v.map_faults or verdict.map_faults(domain)) do map_of[m.id] = m.text end
  local rows, all = {}, connection_hosts(domain)
  for _, node in ipairs(domain.nodes) do
    rows[#rows + 1] = {
      id = node.id, host = node.host, name = names[node.host] or "",
      status = tostring(node.status), version = node.version,
      connections = conn_summary(node, all), self = node.host == opts.self, map = map_of[node.id] or "ok",
      -- the verdict blames expected hosts; any other node that is not READY says so itself
      diagnosis = diag[node.host] or map_of[node.id]
        or (node.status ~= "READY" and ("status " .. tostring(node.status)))
        or "ok",
    }
  end
  if opts.json then
    local order = v and v.order
    return cjson.encode({ status = domain.status, timestamp = domain.timestamp, self = opts.self,
      self_id = v and v.self_id, verdict = v and v.verdict, node_list = opts.node_list, config = opts.config,
      config_findings = opts.findings,
      order = order and { kind = order.kind, summary = order.summary },
      outcome = opts.outcome, message = opts.message, nodes = rows }) .. "\n"
  end
  local head = { "ID", "HOST", "NAME", "STATE", "CONNECTIONS", "DIAGNOSIS" }
  local cells = { head }
  for _, r in ipairs(rows) do
    cells[#cells + 1] = { tostring(r.id) .. (r.self and "*" or ""), r.host, r.name, r.status, r.connections,
      r.diagnosis }
  end
  local width = {}
  for _, row in ipairs(cells) do
    for i, c in ipairs(row) do width[i] = math.max(width[i] or 0, #c) end
  end
  local out = { string.format("Domain %s at %s: %d nodes (* = this node)", tostring(domain.status),
    tostring(domain.timestamp), #rows) }
  for _, row in ipairs(cells) do
    local parts = {}
    for i, c in ipairs(row) do
      parts[i] = i < #row and (c .. string.rep(" ", width[i] - #c)) or c
    end
    out[#out + 1] = table.concat(parts, "  ")
  end
  out[#out + 1] = self_line(v, opts)
  if v and v.order and v.order.kind ~= "same" then out[#out + 1] = "node map: " .. v.order.summary end
  for _, f in ipairs(opts.findings or {}) do out[#out + 1] = "config fault: " .. f end
  if opts.message then out[#out + 1] = tostring(opts.outcome) .. ": " .. opts.message end
  return table.concat(out, "\n") .. "\n"
end

return M
