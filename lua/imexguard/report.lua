-- SPDX-License-Identifier: Apache-2.0
--- The reports of the default policy's `plan`, `status` and `registrations` commands: what a person
-- reads on stdout (or JSON with --json), the per-node mesh table of `status` included. Pure functions
-- of the facts the policy gathered; no primitive is called.
local json = require("imexguard.json")
local hostlist = require("imexguard.hostlist")
local health = require("imexguard.health")
local verdict = require("imexguard.verdict")
local registry = require("imexguard.registry")
local text = require("imexguard.text")
local nodelist = require("imexguard.nodelist")

local M = {}

--- Lines of a node list that only the old one has, and lines that only the new one has.
-- @param old string|nil current bytes (nil: unreadable, taken as empty)
-- @param new string desired bytes
-- @return removed list of lines, added list of lines (each in file order)
function M.diff(old, new)
  local oldl, newl = nodelist.lines(old or ""), nodelist.lines(new)
  local inold, innew = {}, {}
  for _, l in ipairs(oldl) do inold[l] = true end
  for _, l in ipairs(newl) do innew[l] = true end
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
  local s, a = f.ctx.settings, f.assessment
  local restart = a.action ~= "none"
  if not f.allowed then
    return text.one_line(f.why .. (restart and ("; " .. a.action .. " needed: " .. a.reason) or ""))
  end
  local cf = f.config_fault and ("; but " .. f.findings[1] .. ": the prolog would end config-fault") or ""
  if f.changed or restart then
    return text.one_line(string.format("would %s%s%s%s",
      f.changed and ("rewrite " .. f.info.nodes_file) or "",
      (f.changed and restart) and " and " or "",
      restart and (a.action .. " " .. s.unit .. " (" .. a.reason .. ")") or "", cf))
  end
  return text.one_line("nothing to do: node list unchanged, " .. s.unit .. " current" .. cf)
end

--- The job's split by IMEX domain (steps.domain) as `plan`'s JSON field `imex_domain`
-- (docs/json.md): null without a domain map.
-- @param dom table|nil want.domain
-- @return json object {name, kind, source, nodes, left_out, others = [{name, nodes}]} or nil
function M.domain_json(dom)
  if not dom or dom.kind == "none" then return nil end
  local others = {}
  for i, o in ipairs(dom.others or {}) do
    others[i] = json.object():set("name", o.name):set("nodes", json.array(o.nodes))
  end
  return json.object():set("name", dom.name):set("kind", dom.kind):set("source", dom.source)
    :set("nodes", json.array(dom.nodes)):set("left_out", json.array(dom.left_out))
    :set("others", json.array(others))
end

--- The job's split by IMEX domain as lines of the text plan (none without a domain map): this
-- node's domain, the job's nodes in other domains, the nodes left out.
-- @param dom table|nil want.domain
-- @param r table lines (appended to)
function M.domain_lines(dom, r)
  if not dom or dom.kind == "none" then return end
  local in_order = hostlist.text_in_order
  r[#r + 1] = string.format("IMEX domain %s (this node's, from %s): %s", tostring(dom.name or dom.kind),
    dom.source, in_order(dom.nodes))
  for _, o in ipairs(dom.others) do
    r[#r + 1] = string.format("IMEX domain %s: %s (its own list there)", o.name, in_order(o.nodes))
  end
  if #dom.left_out > 0 then
    r[#r + 1] = string.format("left out (in no IMEX domain): %s", in_order(dom.left_out))
  end
end

-- plan's membership (docs/json.md): {mode, slot_hosts, slots = [{slot, node, now, after}], signal};
-- list mode {mode = "list"} with nulls.
local function plan_membership_json(m)
  if not m then
    return json.object():set("mode", "list"):set("slot_hosts", nil):set("slots", nil):set("signal", nil)
  end
  local list = {}
  for i, x in ipairs(m.slots) do
    list[i] = json.object():set("slot", x.slot):set("node", x.node):set("now", x.now):set("after", x.after)
  end
  return json.object():set("mode", "slots"):set("slot_hosts", m.path):set("slots", json.array(list))
    :set("signal", m.signal)
end

--- The plan as JSON (one object, newline-terminated; docs/json.md, "plan").
local function plan_json(f)
  local want, a = f.want, f.assessment
  local nodes = {}
  for i, addr in ipairs(want.addrs) do
    -- membership by slots: addrs are the job's slots, ips their addresses
    nodes[i] = json.object():set("name", want.list[i]):set("address", (want.ips or want.addrs)[i])
      :set("self", addr == want.self)
  end
  local removed, added = M.diff(f.old, want.bytes)
  local seen = f.verdict
  local regs = {}
  for i, e in ipairs(registry.jobs(f.st)) do regs[i] = M.registration_json(e) end
  local outcome = not f.allowed and (f.refusal or "conflict") or (f.config_fault and "config-fault" or "ok")
  return json.encode(json.report("plan"):set("ok", f.allowed and not f.config_fault)
    :set("outcome", outcome):set("message", M.plan_message(f))
    :set("job", f.job):set("node", f.node):set("source", want.source):set("hostlist", want.expr)
    :set("hosts", hostlist.text_sorted(want.list)):set("nodes", json.array(nodes))
    :set("nodes_file", f.info.nodes_file):set("changed", f.changed)
    :set("removed", json.array(removed)):set("added", json.array(added)):set("unreadable", f.old_err)
    :set("unit_state", a.unit.active_state):set("action", a.action):set("reason", a.reason)
    :set("domain_status", seen and seen.status or nil):set("healthy", seen and seen.healthy or nil)
    :set("order", a.order):set("config", f.info.config):set("config_source", f.info.config_source)
    :set("config_findings", json.array(f.findings)):set("config_fault", f.config_fault == true)
    :set("config_warnings", json.array(f.warnings))
    :set("conflict", not f.allowed and f.why or nil):set("registrations", json.array(regs))
    :set("imex_domain", M.domain_json(want.domain)):set("membership", plan_membership_json(f.membership)))
end

--- The node list part of the text plan: the desired list, then what happens to the file.
local function plan_list_lines(f, r)
  local want, info = f.want, f.info
  r[#r + 1] = string.format("desired node list from %s=%s (%d nodes):", tostring(want.source), want.expr,
    #want.addrs)
  for i, a in ipairs(want.addrs) do
    r[#r + 1] = string.format("  %-16s %s%s", a, want.list[i], a == want.self and "  (this node)" or "")
  end
  M.domain_lines(want.domain, r)
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
  local s, a = f.ctx.settings, f.assessment
  local r = { string.format("plan for job %s on node %s (nothing is changed)", f.job, f.node) }
  plan_list_lines(f, r)
  if f.membership then require("imexguard.steps.slots").plan_lines(f.membership, r) end
  r[#r + 1] = string.format("unit %s: %s/%s", s.unit, tostring(a.unit.active_state),
    tostring(a.unit.sub_state))
  r[#r + 1] = string.format("config: %s (from the %s)", tostring(f.info.config),
    tostring(f.info.config_source))
  for _, line in ipairs(f.findings or {}) do r[#r + 1] = "config fault: " .. line end
  for _, line in ipairs(f.warnings or {}) do r[#r + 1] = "config warning: " .. line end
  r[#r + 1] = a.action ~= "none" and string.format("%s: yes, %s", a.action, a.reason)
    or ("restart: no, " .. a.reason)
  local jobs = registry.jobs(f.st)
  r[#r + 1] = #jobs == 0 and "registered jobs: none" or ("registered jobs: " .. registry.ids(jobs))
  if not f.allowed then r[#r + 1] = (f.refusal or "conflict") .. ": " .. f.why end
  if f.verdict then
    r[#r + 1] = string.format("domain now: %s (%s)", tostring(f.verdict.status),
      f.verdict.healthy and "healthy" or "not healthy")
  end
  return table.concat(r, "\n") .. "\n"
end

--- The report of `imexguard plan`.
-- @param f table the plan's facts: ctx, job (id string), node (this node's name), info (applies),
--   want (desired list), st (state file), old (current list bytes, or nil), old_err (why the current
--   list is unreadable, or nil), changed (boolean), assessment (steps.assess_daemon), allowed
--   (boolean), why (conflict message when not allowed), refusal ("conflict", or "refused" for a
--   policy's own rule: issue 32 item 6), verdict (verdict.judge of the ctl's answer,
--   or nil),
--   findings (config_findings), config_fault (config_fault_found and a job of several nodes),
--   warnings (config.cfg's warnings, lines: cmdtarget.findings, C44)
-- @return string report, JSON when f.ctx.json (newline-terminated)
function M.plan(f)
  if f.ctx.json then return plan_json(f) end
  return plan_text(f)
end

-- ---- the node's facts (status) ----------------------------------------------------------------

-- "3f2a9c0e" and the rest: an invocation ID, shortened unless verbose (systemctl's journal
-- cursor style: 8 characters name it among a node's invocations).
local function short_id(id, verbose)
  if type(id) ~= "string" or id == "" then return nil end
  return verbose and id or id:sub(1, 8)
end

--- The unit line of status: "nvidia-imex.service: active (running) since 2026-12-01T22:10:05Z;
-- invocation 3f2a9c0e; main PID 4242" (what `systemctl status` shows first).
-- @param facts table the node's facts (unit_name, unit = host.unit's properties or {error =})
-- @param verbose boolean the whole invocation ID and the unit's result
-- @return string
function M.unit_line(facts, verbose)
  local u = facts.unit or {}
  if u.error then return string.format("%s: state unknown (%s)", tostring(facts.unit_name), u.error) end
  if u.load_state == "not-found" then return tostring(facts.unit_name) .. ": not installed" end
  local parts = { string.format("%s: %s (%s)", tostring(facts.unit_name), tostring(u.active_state),
    tostring(u.sub_state)) }
  local since = json.time_us(u.state_change_us) or json.time_us(u.active_enter_us)
  if since then parts[1] = parts[1] .. " since " .. since end
  local inv = short_id(u.invocation_id, verbose)
  if inv then parts[#parts + 1] = "invocation " .. inv end
  if (u.main_pid or 0) > 0 then parts[#parts + 1] = "main PID " .. u.main_pid end
  if verbose and u.result and u.result ~= "" then parts[#parts + 1] = "result " .. u.result end
  if u.unit_file_state and u.unit_file_state ~= "enabled" then
    parts[#parts + 1] = tostring(u.unit_file_state)
  end
  return table.concat(parts, "; ")
end

-- "ok at 2026-12-02T00:30:01Z, job 102, 0.41 s" or "never (on this boot)".
local function last_line(rec, verbose)
  if rec == nil then return "none recorded" end
  if rec.error then return "unknown: " .. rec.error end
  local s = string.format("%s at %s", tostring(rec.outcome), json.time_us(rec.ended_us) or "?")
  if rec.job then s = s .. ", job " .. tostring(rec.job) end
  if type(rec.duration) == "number" then s = s .. string.format(", %.2f s", rec.duration) end
  if (verbose or rec.exit_code ~= 0) and type(rec.message) == "string" and rec.message ~= "" then
    s = s .. ": " .. rec.message
  end
  return s
end

-- The registrations for a person: "102 (gb[01-18], 6m10s ago)"; verbose adds each node list.
local function jobs_line(facts, verbose)
  if facts.jobs_error then return "unknown: " .. facts.jobs_error end
  local jobs = facts.jobs or {}
  if #jobs == 0 then return "none" end
  local parts = {}
  for i, e in ipairs(jobs) do
    local age = e.registered_us and registry.age_text(facts.now - e.registered_us / 1e6) .. " ago" or "?"
    parts[i] = string.format("%s (%s, %s%s)", e.id, registry.entry_hosts(e), age,
      verbose and ("; invocation " .. tostring(short_id(e.invocation_id, true) or "unknown")) or "")
  end
  return string.format("%d registered: %s", #jobs, table.concat(parts, ", "))
end

-- "free" or "held by pid 4242 (job=102) since 2026-12-02T00:30:01Z".
local function lock_line(facts, verbose)
  local l = facts.lock or {}
  local where = verbose and l.path and (" (" .. l.path .. ")") or ""
  if l.error then return "unknown: " .. l.error .. where end
  if not l.holder then return "free" .. where end
  local h = l.holder
  return string.format("held by %s%s%s%s", h.pid and ("pid " .. h.pid) or "an unknown process",
    h.owner and (" (" .. h.owner .. ")") or "", h.since and (" since " .. (json.time(h.since) or "?")) or "",
    where)
end

--- This node's domain as a site defined it (ctx.domain: {name, nodes, source}, or {error} when the
-- map cannot be read, or {kind, source} without a name when this node is in none) for a person.
-- @param d table|nil
-- @return string "(not defined)" when nil
function M.domain_line(d)
  if type(d) ~= "table" then return "(not defined)" end
  if d.error then return tostring(d.error) end
  if not d.name then
    return string.format("none: this node is in no IMEX domain of %s (not an IMEX node)", tostring(d.source))
  end
  local nodes = type(d.nodes) == "table" and hostlist.text_sorted(d.nodes) or nil
  return string.format("%s%s%s", tostring(d.name), nodes and (" " .. nodes) or "",
    d.source and (" (from " .. tostring(d.source) .. ")") or "")
end

--- This node's NVLink fabric registration (ctx.fabric, set by imexguard.fabric.check) for a person.
-- @param f table|string|nil {state, message, partition = {id}} or a string
-- @return string "(not read)" when nil, else "STATE: message"
function M.fabric_line(f)
  if type(f) ~= "table" then return f == nil and "(not read)" or tostring(f) end
  return string.format("%s: %s", tostring(f.state), tostring(f.message))
end

--- The node's facts for a person: one "key  value" line each (status' head).
-- @param facts table see M.status
-- @param verbose boolean
-- @return list of lines
function M.facts_lines(facts, verbose)
  local rows = {
    { "node", tostring(facts.node) },
    { "unit", M.unit_line(facts, verbose) },
    { "last prolog", last_line(facts.last and facts.last.prolog, verbose) },
    { "last epilog", last_line(facts.last and facts.last.epilog, verbose) },
    { "jobs", jobs_line(facts, verbose) },
    { "node lock", lock_line(facts, verbose) },
    { "domain", M.domain_line(facts.domain) },
    { "fabric", M.fabric_line(facts.fabric) },
    { "restarts", require("imexguard.flapping").line(facts.restarts) },
  }
  if facts.membership then
    rows[#rows + 1] = { "membership", require("imexguard.steps.slots").fact_line(facts.membership) }
  end
  if verbose and facts.state_path then rows[#rows + 1] = { "state file", facts.state_path } end
  local out = {}
  for i, r in ipairs(rows) do out[i] = string.format("%-12s %s", r[1], r[2]) end
  return out
end

-- ---- JSON of the facts ------------------------------------------------------------------------

-- Membership (status): {mode, slot_hosts, in_force} (null without facts; docs/json.md).
local function membership_json(m)
  if type(m) ~= "table" then return nil end
  return json.object():set("mode", m.mode):set("slot_hosts", m.path)
    :set("in_force", m.in_force and json.array(m.in_force) or nil):set("error", m.error)
end

local function unit_json(facts)
  local u = facts.unit or {}
  return json.object():set("name", facts.unit_name):set("load_state", u.load_state)
    :set("active_state", u.active_state):set("sub_state", u.sub_state):set("result", u.result)
    :set("unit_file_state", u.unit_file_state):set("since", json.time_us(u.state_change_us)
      or json.time_us(u.active_enter_us))
    :set("invocation_id", u.invocation_id ~= "" and u.invocation_id or nil)
    :set("main_pid", (u.main_pid or 0) > 0 and u.main_pid or nil):set("error", u.error)
end

local function last_json(rec)
  if rec == nil then return nil end
  return json.object():set("outcome", rec.outcome):set("exit_code", rec.exit_code):set("job", rec.job)
    :set("time", json.time_us(rec.ended_us)):set("duration", rec.duration):set("message", rec.message)
    :set("error", rec.error)
end

--- A registry entry as JSON: {id, hosts, nodes (addresses), registered (ISO 8601), invocation_id}.
-- @param e table registry entry
-- @return json object
function M.registration_json(e)
  return json.object():set("id", e.id):set("hosts", registry.entry_hosts(e))
    :set("nodes", json.array(nodelist.lines(e.nodes))):set("registered", json.time_us(e.registered_us))
    :set("invocation_id", e.invocation_id ~= "" and e.invocation_id or nil)
end

local function lock_json(facts)
  local l = facts.lock or {}
  local h = l.holder
  local held
  if h ~= nil then held = true elseif l.error == nil then held = false end
  return json.object():set("path", l.path):set("held", held)
    :set("pid", h and h.pid):set("owner", h and h.owner):set("since", h and json.time(h.since))
    :set("error", l.error)
end

local function domain_json(d)
  if type(d) ~= "table" then return nil end
  return json.object():set("name", d.name)
    :set("nodes", json.array(type(d.nodes) == "table" and d.nodes or {})):set("source", d.source)
    :set("error", d.error)
end

--- This node's fabric as JSON (docs/json.md): {state, message, partition, degraded = [{gpu, field, value}]}.
-- @param f table|string|nil ctx.fabric
-- @return json object, or nil
function M.fabric_json(f)
  if type(f) ~= "table" then return f ~= nil and json.object():set("state", tostring(f)) or nil end
  local degraded = {}
  for _, d in ipairs(type(f.degraded) == "table" and f.degraded or {}) do
    degraded[#degraded + 1] = json.object():set("gpu", d.gpu):set("field", d.field):set("value", d.value)
  end
  return json.object():set("state", f.state):set("message", f.message)
    :set("partition", type(f.partition) == "table" and f.partition.id or nil)
    :set("degraded", json.array(degraded))
end

-- The head of the status JSON: schema, command, ok, outcome, exit_code, message, time and the
-- node's facts (null where unknown).
local function status_head(opts)
  local facts = opts.facts or {}
  local regs
  if facts.jobs then
    regs = {}
    for i, e in ipairs(facts.jobs) do regs[i] = M.registration_json(e) end
  end
  return json.report("status"):set("ok", opts.exit_code == 0):set("outcome", opts.outcome)
    :set("exit_code", opts.exit_code):set("message", opts.message)
    :set("time", json.time(facts.now)):set("node", facts.node)
    :set("unit", opts.facts and unit_json(facts) or nil)
    :set("last_prolog", last_json(facts.last and facts.last.prolog))
    :set("last_epilog", last_json(facts.last and facts.last.epilog))
    :set("registrations", regs and json.array(regs) or nil) :set("registrations_error", facts.jobs_error)
    :set("lock", opts.facts and lock_json(facts) or nil)
    :set("domain", domain_json(facts.domain)):set("fabric", M.fabric_json(facts.fabric))
    :set("restarts", require("imexguard.flapping").json(facts.restarts))
    :set("membership", membership_json(facts.membership))
end

-- The mesh keys of the status JSON (null without a mesh).
local function mesh_keys(o, mesh, v, opts, rows)
  local order = v and v.order
  o:set("status", mesh and mesh.status):set("timestamp", mesh and json.ctl_time(mesh.timestamp))
    :set("self", opts.self):set("self_id", v and v.self_id):set("verdict", v and v.verdict)
    :set("node_list", opts.node_list):set("config", opts.config)
    :set("config_findings", json.array(opts.findings)):set("config_warnings", json.array(opts.warnings))
    :set("order", order and json.object():set("kind", order.kind):set("summary", order.summary) or nil)
    :set("nodes", json.array(rows))
  return o
end

--- The report of a `status` that found no mesh to show: the node's facts (when known), the
-- outcome and its message.
-- @param outcome string
-- @param message string one line
-- @param json_out boolean
-- @param opts table|nil {facts = M.status' facts, exit_code = integer, verbosity = -1|0|1, warnings =
--   config.cfg's warnings (lines)}
-- @return string report (newline-terminated)
function M.status_plain(outcome, message, json_out, opts)
  opts = opts or {}
  if json_out then
    local o = status_head({ facts = opts.facts, outcome = outcome, message = message,
      exit_code = opts.exit_code })
    return json.encode(mesh_keys(o, nil, nil, { warnings = opts.warnings }, {}))
  end
  if (opts.verbosity or 0) < 0 then return M.quiet_line(outcome, message, nil, opts.facts) end
  local out = opts.facts and M.facts_lines(opts.facts, (opts.verbosity or 0) > 0) or {}
  for _, w in ipairs(opts.warnings or {}) do out[#out + 1] = "config warning: " .. w end
  out[#out + 1] = outcome .. ": " .. message
  return table.concat(out, "\n") .. "\n"
end

--- The one-line form of status (-q): the same on every node that sees the same domain, so that
-- `pdsh -w gb[01-18] imexguard status -q | dshbak -c` folds a healthy rack into one group:
-- "OUTCOME: IMEX STATUS, R/N READY[, not READY: HOSTS]; UNIT ACTIVE; jobs IDS" (no node name, no
-- time, no ID of this node).
-- @param outcome string
-- @param message string the run's message (used only when there is no mesh)
-- @param mesh table|nil the parsed mesh (ctl.parse_mesh)
-- @param facts table|nil the node's facts
-- @param names table|nil {[address] = Slurm name}
-- @return string one line, newline-terminated
function M.quiet_line(outcome, message, mesh, facts, names)
  local parts = {}
  -- a ctl whose daemon is not running answers one placeholder row 0.0.0.0 DOWN: nobody's state
  local placeholder = mesh and #mesh.nodes == 1 and mesh.nodes[1].host == "0.0.0.0"
  if mesh and not placeholder then
    local ready, bad = 0, {}
    for _, n in ipairs(mesh.nodes) do
      if n.status == "READY" then ready = ready + 1 else bad[#bad + 1] = n.host end
    end
    parts[1] = string.format("IMEX %s, %d/%d READY%s", tostring(mesh.status), ready, #mesh.nodes,
      #bad > 0 and (", not READY: " .. health.hosts_ranged(bad, names)) or "")
  else
    parts[1] = (tostring(message):gsub("^node [^%s:]+: ", ""))
  end
  if facts then
    local u = facts.unit or {}
    parts[#parts + 1] = string.format("%s %s", tostring(facts.unit_name),
      tostring(u.active_state or "unknown"))
    local ids = {}
    for i, e in ipairs(facts.jobs or {}) do ids[i] = e.id end
    local jobs = #ids > 0 and table.concat(ids, ",") or "none"
    parts[#parts + 1] = facts.jobs_error and "jobs unknown" or ("jobs " .. jobs)
  end
  return text.one_line(outcome .. ": " .. table.concat(parts, "; ")) .. "\n"
end

-- ---- the status table -------------------------------------------------------------------------

-- A node's connections: counts and the links not CONNECTED ({host, state}), in numeric order of
-- the hosts (10.0.0.9 before 10.0.0.10).
local function connections(node)
  local total, up, bad = 0, 0, {}
  for host, st in pairs(node.connections or {}) do
    total = total + 1
    if st == "CONNECTED" then up = up + 1 else bad[#bad + 1] = { host = host, state = tostring(st) } end
  end
  if #bad > 1 then
    local hosts, by = {}, {}
    for _, b in ipairs(bad) do hosts[#hosts + 1] = b.host; by[b.host] = b end
    bad = {}
    for i, h in ipairs(hostlist.sort(hosts)) do bad[i] = by[h] end
  end
  return total, up, bad
end

--- Connections summary of one node for a person: "17/17 connected", or "15/17 connected;
-- UNAVAILABLE gb[05,07]" (the links not CONNECTED by state, hosts as health.hosts_ranged); verbose:
-- each link "gb05 10.0.0.5 UNAVAILABLE".
-- @param node table a node of the parsed mesh
-- @param names table|nil {[address] = Slurm name}
-- @param verbose boolean
-- @return string
function M.conn_summary(node, names, verbose)
  local total, up, bad = connections(node)
  local s = string.format("%d/%d connected", up, total)
  if #bad == 0 then return s end
  local parts = {}
  if verbose then
    for i, b in ipairs(bad) do
      local n = names and names[b.host]
      parts[i] = (n and (n .. " ") or "") .. b.host .. " " .. b.state
    end
    return s .. "; " .. table.concat(parts, ", ")
  end
  local states, by = {}, {}
  for _, b in ipairs(bad) do
    if not by[b.state] then by[b.state] = {}; states[#states + 1] = b.state end
    by[b.state][#by[b.state] + 1] = b.host
  end
  table.sort(states)
  for i, st in ipairs(states) do parts[i] = st .. " " .. health.hosts_ranged(by[st], names) end
  return s .. "; " .. table.concat(parts, "; ")
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

-- The rows of the table: one per node, with the JSON object of each.
local function node_rows(mesh, v, opts)
  local names = opts.names or {}
  local diag = diagnoses(v)
  local map_of = {}
  for _, m in ipairs(v and v.map_faults or verdict.map_faults(mesh)) do map_of[m.id] = m.text end
  local rows, objs = {}, {}
  for _, node in ipairs(mesh.nodes) do
    local total, up, bad = connections(node)
    local down = {}
    for i, b in ipairs(bad) do
      down[i] = json.object():set("host", b.host):set("name", names[b.host]):set("state", b.state)
    end
    local r = {
      id = node.id, host = node.host, name = names[node.host] or "", status = tostring(node.status),
      self = node.host == opts.self, map = map_of[node.id] or "ok",
      connections = M.conn_summary(node, names, (opts.verbosity or 0) > 0),
      -- the verdict blames expected hosts; any other node that is not READY says so itself
      diagnosis = diag[node.host] or map_of[node.id]
        or (node.status ~= "READY" and ("status " .. tostring(node.status)))
        or "ok",
    }
    rows[#rows + 1] = r
    objs[#objs + 1] = json.object():set("id", node.id):set("host", node.host):set("name", names[node.host])
      :set("self", r.self):set("status", r.status):set("version", node.version)
      :set("connected", up):set("links", total):set("down", json.array(down))
      :set("map", r.map):set("diagnosis", r.diagnosis)
  end
  return rows, objs
end

--- The report of `status` with a mesh: the node's facts (the unit and since when, the last
-- prolog and epilog, the registered jobs, the node lock, the domain and fabric of this node), then
-- the mesh for a person (or as JSON), one row per node: ID (`*` marks this node), host, name,
-- state, connections, diagnosis.
-- @param mesh table parsed mesh (ctl.parse_mesh)
-- @param v table|nil verdict (verdict.judge; nil: the node-map findings are computed here)
-- @param opts table {self = address, names = {[addr] = slurm name}, json = boolean, outcome, message,
--   exit_code = integer, verbosity = -1 (one line, M.quiet_line) | 0 | 1 (every link), findings = list
--   of config.cfg findings (lines), warnings = its warnings (lines: cmdtarget.findings), config =
--   config path, node_list = path of the ordered list the
--   map was compared with, facts = {node, now (Unix seconds), unit_name, unit = host.unit's
--   properties or {error}, last = {prolog, epilog = state.load_last's records or {error}}, jobs =
--   registry entries or nil with jobs_error, lock = {path, holder = host.lock_holder's or nil,
--   error}, domain = ctx.domain or nil, fabric = ctx.fabric or nil, state_path} (nil: no facts)}
-- @return string report (newline-terminated); JSON: docs/json.md, "status"
function M.status(mesh, v, opts)
  local rows, objs = node_rows(mesh, v, opts)
  if opts.json then
    return json.encode(mesh_keys(status_head(opts), mesh, v, opts, objs))
  end
  if (opts.verbosity or 0) < 0 then
    return M.quiet_line(opts.outcome or "ok", opts.message or "", mesh, opts.facts, opts.names)
  end
  local head = { "ID", "HOST", "NAME", "STATE", "CONNECTIONS", "DIAGNOSIS" }
  local cells = { head }
  for _, r in ipairs(rows) do
    cells[#cells + 1] = { tostring(r.id) .. (r.self and "*" or ""), r.host, r.name, r.status, r.connections,
      r.diagnosis }
  end
  local out = opts.facts and M.facts_lines(opts.facts, (opts.verbosity or 0) > 0) or {}
  out[#out + 1] = string.format("IMEX domain %s at %s: %d nodes (* = this node)", tostring(mesh.status),
    tostring(json.ctl_time(mesh.timestamp)), #rows)
  text.columns(cells, out)
  out[#out + 1] = self_line(v, opts)
  if v and v.order and v.order.kind ~= "same" then out[#out + 1] = "node map: " .. v.order.summary end
  for _, f in ipairs(opts.findings or {}) do out[#out + 1] = "config fault: " .. f end
  for _, w in ipairs(opts.warnings or {}) do out[#out + 1] = "config warning: " .. w end
  if opts.message then out[#out + 1] = tostring(opts.outcome) .. ": " .. opts.message end
  return table.concat(out, "\n") .. "\n"
end

-- ---- registrations ----------------------------------------------------------------------------

--- The report of `registrations`: the job registry of this node.
-- @param facts table {node, now (Unix seconds), jobs = registry entries, state_path}
-- @param opts table {json = boolean, verbosity = -1|0|1, outcome, exit_code, message}
-- @return string report (newline-terminated): text "JOB  HOSTS  REGISTERED  AGE" rows (-q: the job
--   ids on one line; -v: the node list's addresses and the daemon's invocation too), or JSON
--   (docs/json.md, "registrations")
function M.registrations(facts, opts)
  local jobs = facts.jobs or {}
  if opts.json then
    local regs = {}
    for i, e in ipairs(jobs) do regs[i] = M.registration_json(e) end
    return json.encode(json.report("registrations"):set("ok", opts.exit_code == 0)
      :set("outcome", opts.outcome):set("exit_code", opts.exit_code):set("message", opts.message)
      :set("time", json.time(facts.now)):set("node", facts.node):set("state_file", facts.state_path)
      :set("registrations", json.array(regs)))
  end
  local verbosity = opts.verbosity or 0
  if verbosity < 0 then
    local ids = {}
    for i, e in ipairs(jobs) do ids[i] = e.id end
    return (#ids > 0 and table.concat(ids, " ") or "none") .. "\n"
  end
  if #jobs == 0 then return string.format("no job registered on node %s\n", tostring(facts.node)) end
  local cells = { { "JOB", "HOSTS", "REGISTERED", "AGE" } }
  if verbosity > 0 then cells[1][5], cells[1][6] = "INVOCATION", "NODE LIST" end
  for _, e in ipairs(jobs) do
    local row = { e.id, registry.entry_hosts(e), json.time_us(e.registered_us) or "?",
      e.registered_us and registry.age_text(facts.now - e.registered_us / 1e6) or "?" }
    if verbosity > 0 then
      row[5] = e.invocation_id ~= "" and tostring(e.invocation_id) or "unknown"
      row[6] = (tostring(e.nodes):gsub("\n$", ""):gsub("\n", ","))
    end
    cells[#cells + 1] = row
  end
  return table.concat(text.columns(cells), "\n") .. "\n"
end

return M
