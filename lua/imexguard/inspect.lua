-- SPDX-License-Identifier: Apache-2.0
--- The inspection commands of the default policy: `status`, `health`, `plan`, `registrations` and
-- `forget` (the job registry by hand), and the steps only they use. They read the node and say what
-- they see; only `forget` changes something (one registry entry, under the node lock).
--
-- This module is a method table, not a policy: policies/default.lua's methods fall back to it
-- (`Policy`'s __index), so its methods are methods of every policy built from the default one, and its
-- entry points are there in ENTRY_POINTS (`status = "run_status"`...). Each method calls the decision
-- model's steps as methods of the policy (self:applies, self:assess_daemon, self:may_restart,
-- self:check_port_owner, self:check_fabric...), so a site's override of a step is used here too, and a
-- site may override these methods as it overrides a step (`function P:fabric_report(ctx, out)`). The
-- prolog and epilog never load this module (imexguard.lazy).
--
-- `status` is three parts: gather (what it reads: the unit, the ctl's answer, the node list file,
-- the registry), judge (the outcome and message: the verdict on the mesh, the unit, config.cfg's
-- findings, the fabric) and render (imexguard.report's table or JSON, with the node's facts).
local base = require("imexguard.steps.base")
local outcomes = require("imexguard.outcomes")
local text = require("imexguard.text")
local lazy = require("imexguard.lazy")
local housekeeping, nodes_file, restart, slots = lazy("imexguard.steps.housekeeping",
  "imexguard.steps.nodes_file", "imexguard.steps.restart", "imexguard.steps.slots")
local state, registry, lostjobs, starting, flapping = lazy("imexguard.state", "imexguard.registry",
  "imexguard.lostjobs", "imexguard.starting", "imexguard.flapping")
local ctl, health, verdict, cmdtarget =
  lazy("imexguard.ctl", "imexguard.health", "imexguard.verdict", "imexguard.cmdtarget")
local addresses, nodelist, domains, slotnames, channels = lazy("imexguard.addresses", "imexguard.nodelist",
  "imexguard.domains", "imexguard.slots", "imexguard.channels")
local report, drain, json = lazy("imexguard.report", "imexguard.drain", "imexguard.json")

--- The methods (self: the policy).
local M = {}

-- ---------------------------------------------------------------------------------------------
-- What status reads.

--- Slurm node names by address, from the address map when one is configured, with the host names
-- of the node list file (C35) beside them.
-- @param entry_names table|nil {[address] = host name of the node list file}
-- @return table {[address] = "name" or "file name, map name"}
local function names_by_address(ctx, entry_names)
  local s, by = ctx.settings, {}
  if s.address_source == "map" then
    for name, addr in pairs(addresses.load_map(ctx.host, s.address_map) or {}) do by[addr] = name end
  end
  for a, n in pairs(entry_names or {}) do
    if not by[a] then
      by[a] = n
    elseif by[a] ~= n then
      by[a] = n .. ", " .. by[a]
    end
  end
  return by
end

--- This node's address in the domain: BIND_INTERFACE_IP, else the first local address it lists.
local function self_address(ctx, info, expected)
  if info and info.bind then return info.bind end
  local locals = {}
  for _, a in ipairs(ctx.host.local_addresses() or {}) do locals[a] = true end
  for _, h in ipairs(expected) do
    if locals[h] then return h end
  end
  return "(no local address in the domain)"
end

--- The node list the domain must run, in order (C21: a node's ID is its line in it): the
-- addresses of this node's node list file (nodelist.parse); nil when it cannot be read, is empty
-- or is not a node list (status then judges the domain by its own order, and says so). Host names
-- in it (C35: a static list of rack-slot names) are resolved as the job's nodes are
-- (addresses.resolve_list); a name that does not resolve stays as written.
-- @return list, names ({[address] = host name of the file}), by_entry ({[name] = address}),
--   unresolved (list of "NAME (why)"); the last three nil for a list of addresses only
local function ordered_node_list(ctx, info)
  if not info then return nil end
  local list = nodelist.parse(nodes_file.read_node_list(ctx, info) or "")
  if not (list and #list > 0) then return nil end
  local literal = true
  for _, e in ipairs(list) do literal = literal and nodelist.is_ipv4(e) end
  if literal then return list end
  if slotnames.parse_list(table.concat(list, "\n") .. "\n") then
    -- membership by slots: the slot names are the ctl's hosts as written, each one its node's
    local names = {}
    for _, e in ipairs(list) do names[e] = slotnames.node_of(e) end
    return list, names
  end
  return addresses.resolve_list(ctx.host, ctx.settings, list)
end

--- What `status` and `health` judge this node on (C33): the registered jobs' node list when every
-- registered job has the same one (the job's nodes), false when no job is registered (the node is
-- idle: judged on what it owns), nil when the state file cannot be read or the jobs' lists differ
-- (then the node list file decides, as before).
-- @return list of addresses | false | nil, and the registered entries
local function registered_list(ctx)
  local st = state.load(ctx.host, ctx.settings)
  if not st then return nil end
  local jobs = registry.jobs(st)
  if #jobs == 0 then return false, jobs end
  for _, e in ipairs(jobs) do
    if e.nodes ~= jobs[1].nodes then return nil, jobs end
  end
  local list = nodelist.parse(jobs[1].nodes or "")
  return list and #list > 0 and list or nil, jobs
end

--- Membership by slots: this node's slot, the one the name map gives this node's address
-- (BIND_INTERFACE_IP, else a local address), else its Slurm name's; and the map's addresses (for
-- config.cfg's findings: the domain's addresses).
-- @return slot, addresses (list, or nil without a map)
local function slot_self(ctx, info)
  local _, map = slots.read(ctx)
  if type(map) ~= "table" then return slotnames.name(base.node_name(ctx)), nil end
  local mine = {}
  if info and info.bind then mine[info.bind] = true end
  for _, a in ipairs(ctx.host.local_addresses() or {}) do mine[a] = true end
  local self, addrs = nil, {}
  for _, sl in ipairs(map.names) do
    addrs[#addrs + 1] = map.addr[sl]
    if not self and mine[map.addr[sl]] then self = sl end
  end
  return self or slotnames.name(base.node_name(ctx)), addrs
end

--- Membership by slots: the registered jobs and their slots (readiness per job), false when no job
-- is registered, nil when the state file cannot be read.
-- @return list of {id, slots = list} | false | nil
local function registered_slots(ctx)
  local st = state.load(ctx.host, ctx.settings)
  if not st then return nil end
  local jobs = registry.jobs(st)
  if #jobs == 0 then return false end
  local out = {}
  for i, e in ipairs(jobs) do out[i] = { id = e.id, slots = slotnames.of_field(e.slots) } end
  return out
end

--- The facts of this node that `status` shows beside the domain, what `systemctl status` and
-- more would tell an admin: the unit's state and since when, its invocation, the last prolog and
-- epilog (state.load_last), the registered jobs (the state file), the node lock's holder
-- (host.lock_holder: never waits, never holds it), and this node's domain and fabric when a step
-- set ctx.domain ({name, nodes, source}) or ctx.fabric. Reads only; an unreadable part is named
-- in its place, never an error of the run.
-- @return table facts (report.status' opts.facts)
function M:node_facts(ctx) -- luacheck: no self
  local host, s = ctx.host, ctx.settings
  local f = { node = base.node_name(ctx), now = host.wallclock(), unit_name = s.unit,
    state_path = state.path(s), last = {} }
  local props, uerr = host.unit(s.unit)
  f.unit = props or { error = text.one_line(tostring(uerr), 200) }
  for _, c in ipairs({ "prolog", "epilog" }) do
    local rec, err = state.load_last(host, s, c)
    f.last[c] = rec or (err and { error = err }) or nil
  end
  local st, serr = state.load(host, s)
  if st then f.jobs = registry.jobs(st) else f.jobs_error = serr end
  local path = s.state_dir .. "/lock"
  f.lock = { path = path }
  if type(host.lock_holder) == "function" then
    local holder, herr = host.lock_holder(path)
    if herr then f.lock.error = tostring(herr) else f.lock.holder = holder end
  end
  f.domain, f.fabric = rawget(ctx, "domain"), rawget(ctx, "fabric")
  f.restarts = rawget(ctx, "flapping")
  f.membership = slots.fact(ctx)
  return f
end

--- status: this node's IMEX domain (imexguard.domains.node_line) as ctx.domain for the node's facts
-- (report.domain_line): {name, kind, source, nodes}, {kind, source} when this node is in none,
-- {error = line} when the map cannot be read, nil without a domain map. slurmctld is asked for a
-- node the files do not place under `status`, never under `health` (C46).
function M:domain_fact(ctx) -- luacheck: no self
  local line, dom = domains.node_line(ctx, base.node_name(ctx), { slurmctld = ctx.command ~= "health" })
  if dom then
    ctx.domain = dom
  elseif line:find("IMEX domain map: ", 1, true) == 1 then
    -- issue 32 item 1: a broken map whose last good record a prolog here would use, said loudly
    local note = require("imexguard.lastgood").status_note(ctx, base.node_name(ctx))
    ctx.domain = { error = note and (line .. "; " .. note) or line, fallback = note }
  end
end

--- Gather: what `status` reads, in the order it reads it, up to where nothing more is needed.
-- @return table g: info, applied and why (applies' results); answer (the ctl's, with the node list
--   file's host names as addresses, C35) unless applies ended it; without a mesh in the answer:
--   idle_stopped (a stopped unit, nothing answering, no job registered: nothing to judge, C33) or
--   expected (the file's list, for config.cfg's findings); with one: expected (the file's list,
--   else the daemon's own order), by_file, unresolved, self (this node's address), names
--   ({[address] = names}), jobs_list (registered_list)
local function gather(self, ctx)
  local info, applied, why = self:applies(ctx)
  local g = { info = info, applied = applied, why = why }
  if not info and applied ~= "unit-unknown" then return g end
  local ans = health.probe(ctx, nil, info and info.config, info and info.cfg)
  g.answer = ans
  -- C33: a stopped (not failed) unit that nothing answers for, with no job registered, is no fault
  -- of the node: the next prolog starts it, and a site may stop it on purpose
  -- (stop_on_last_epilog, a disabled unit managed per job); health must not drain idle nodes for it.
  -- Nothing answers: the ctl's "unreachable", or the placeholder it prints instead (0.0.0.0 DOWN).
  -- (a policy whose daemon runs at all times, static_domain's imex_always_expected: never)
  local props = info and info.unit
  if props and props.active_state == "inactive" and health.no_local_daemon(ans)
    and not rawget(ctx, "imex_always_expected") and registered_list(ctx) == false then
    g.idle_stopped, g.answer = true, { kind = "unreachable", err = ans.err or "no local daemon answers" }
    return g
  end
  if not ans.mesh then
    g.expected = ordered_node_list(ctx, info) or {}
    return g
  end
  local expected, entry_names, by_entry, unresolved = ordered_node_list(ctx, info)
  g.answer = ctl.map_answer_hosts(ans, by_entry) -- C35: the ctl may show the file's host names
  g.by_file = expected ~= nil
  if not expected then
    expected = {}
    for _, node in ipairs(g.answer.mesh.nodes) do expected[#expected + 1] = node.host end
  end
  g.expected, g.unresolved = expected, unresolved
  g.self = self_address(ctx, info, expected)
  g.names = names_by_address(ctx, entry_names)
  if g.by_file and slotnames.parse_list(table.concat(expected, "\n") .. "\n") then
    -- membership by slots: this node is its slot; each registered job is judged on its own nodes
    g.self, g.lint = slot_self(ctx, info)
    g.job_slots = registered_slots(ctx)
    g.jobs_list = g.job_slots and nil or g.job_slots
  else
    g.jobs_list, g.jobs = registered_list(ctx)
  end
  g.names[g.self] = g.names[g.self] or base.node_name(ctx)
  return g
end

-- Judge, when the ctl gave no mesh: nothing to judge (C33), else the ctl's error with config.cfg's
-- findings, the likely cause (IMEX_CMD_ENABLED=0: the ctl cannot reach the daemon, C22).
local function judge_unanswered(ctx, g)
  if g.idle_stopped then
    local result = tostring(g.info.unit.result)
    local meaning = restart.RESULT_MEANING[result]
    return "ok", string.format("node %s: %s is inactive and no job is registered here (Result=%s%s): "
      .. "nothing to judge (the next job's prolog starts it)", base.node_name(ctx), ctx.settings.unit, result,
      meaning and (": " .. meaning) or "")
  end
  local ans = g.answer
  local outcome = ans.kind == "unreachable" and "domain-unhealthy" or "ctl-unusable"
  local msg = "node " .. base.node_name(ctx) .. ": " .. tostring(ans.err)
  local findings = report.config_findings(g.info, g.expected)
  if #findings > 0 then msg = msg .. "; " .. table.concat(findings, "; ") end
  return outcome, text.one_line(msg)
end

-- The verdict on the mesh and its outcome and message. C33: a registered job's nodes are judged;
-- with no job registered, only what this node owns (the unit, its daemon READY with its own node
-- map, the command port: unit_verdict; config.cfg's findings, flagged as for any node: C22), never
-- its links to peers that may run other jobs' lists now.
-- Membership by slots: each registered job judged on its own nodes (readiness per job: every node of
-- the job READY and CONNECTED to every other; the domain's other slots refuse by design). The first
-- job that is not ready decides the outcome, named.
local function judge_slot_jobs(ctx, g)
  local info, ready, last = g.info, {}, nil
  for _, j in ipairs(g.job_slots) do
    local v = verdict.judge(g.answer, { addrs = j.slots, self = g.self, node_list = g.expected,
      per_job = true }, { list_name = "job " .. j.id .. "'s nodes" })
    if not v.healthy then
      local o, m = health.blame(ctx, { self = g.self, names = g.names, cfg = info and info.cfg,
        config_path = info and info.config }, v)
      return v, o, text.one_line("job " .. j.id .. ": " .. tostring(m))
    end
    ready[#ready + 1], last = j.id, v
  end
  return last, "ok", string.format("membership by slots: job%s %s ready: %s", #ready == 1 and "" or "s",
    table.concat(ready, ", "), tostring(last.healthy_message))
end

local function judge_mesh(ctx, g)
  if g.job_slots then return judge_slot_jobs(ctx, g) end
  local info, idle = g.info, g.jobs_list == false
  local judged = g.jobs_list or g.expected
  local want = { addrs = judged, self = g.self, node_list = g.by_file and g.expected or false,
    names = g.names, cfg = info and info.cfg, config_path = info and info.config }
  local function judge_on(own_only, answer)
    return verdict.judge(answer or g.answer, want, { own_only = own_only,
      list_name = g.jobs_list and "the registered job's node list"
        or (g.by_file and "this node's node list file" or "the daemon's own list") })
  end
  local v, lost = judge_on(idle), nil
  -- issue 32 item 4: a registration whose epilog never ran here, its other nodes moved on
  if not v.healthy and g.jobs_list and v.verdict ~= "stale-mismatch" then
    lost = lostjobs.recognise(ctx, g.answer.mesh, judged, g.self, g.jobs or {}, g.names)
    if lost and lost.dropped then idle, v = true, judge_on(true) end
  end
  if v.healthy and idle then
    return v, "ok", string.format("node %s: %s, judged on what it owns: %s", base.node_name(ctx),
      lost and lost.note or "no job registered", tostring(v.summary))
  elseif v.healthy then
    return v, "ok", string.format("domain %s, %d nodes healthy", tostring(g.answer.mesh.status), #judged)
  end
  -- issue 32 item 5: a daemon started seconds ago is starting, not faulty (health waits for it)
  local wait = ctx.command == "health" and function()
    local last
    local o, m = health.wait(ctx, want, g.answer, function(answer)
      local v2 = judge_on(idle, answer)
      if v2 then last = v2 end
      return v2
    end)
    return o, m, last
  end
  -- (peers that moved on to another list are no start: lostjobs above)
  local so, sm = nil, nil
  if not lost then so, sm = starting.judge(ctx, info and info.unit, v, wait or nil) end
  if so then return v, so, sm end
  local outcome, msg = health.blame(ctx, want, v)
  if lost then msg = text.one_line(lost.note .. "; " .. msg) end -- Slurm could not say (item 4)
  return v, outcome, msg
end

--- Judge: the outcome and message of `status` from what gather read, and what render needs beyond
-- it. With a mesh it reads more: the unit again (P:unit_verdict), the domain map (P:domain_fact)
-- and the fabric (P:fabric_verdict: this node's GPUs are one more thing it owns, C31).
-- @return table r: outcome, message, verdict (verdict.judge's; nil without a mesh), findings
--   (config.cfg's, report.config_findings)
local function judge(self, ctx, g)
  if not g.answer then return { outcome = g.applied, message = g.why } end
  -- issue 32 item 8: a unit that is not running has no daemon whose answer a table could show (the
  -- ctl's placeholder row, a node-map diff against it): its state and systemd's Result are the answer
  local uo, um, stopped = self:unit_verdict(ctx, g.info)
  if stopped and not g.idle_stopped then return { outcome = uo, message = um } end
  if not g.answer.mesh then
    local outcome, msg = judge_unanswered(ctx, g)
    -- a unit that is not running says why first (C50: a failed one with its daemon's last error line)
    if uo and outcome ~= "ok" then outcome, msg = uo, text.one_line(um .. "; " .. msg) end
    outcome, msg = self:flapping_verdict(ctx, g.info and g.info.unit, outcome, msg)
    return { outcome = outcome, message = msg }
  end
  local info = g.info
  local v, outcome, msg = judge_mesh(ctx, g)
  if not info then msg = msg .. "; unit state unknown: " .. g.why end
  if g.unresolved and #g.unresolved > 0 then
    msg = string.format("%s; node list %s: names that do not resolve: %s", msg, info.nodes_file,
      table.concat(g.unresolved, ", "))
  end
  if uo then outcome, msg = uo, um .. "; " .. msg end
  local findings = report.config_findings(info, g.lint or g.expected)
  if #findings > 0 then msg = msg .. "; " .. findings[1] .. (#findings > 1 and " (and more below)" or "") end
  self:domain_fact(ctx)
  local dom = rawget(ctx, "domain")
  if dom and dom.fallback then msg = msg .. "; IMEX domain map broken: " .. dom.fallback end
  outcome, msg = self:fabric_verdict(ctx, nil, outcome, text.one_line(msg))
  outcome, msg = self:flapping_verdict(ctx, rawget(ctx, "unit_now") or (info and info.unit), outcome, msg)
  return { outcome = outcome, message = msg, verdict = v, findings = findings }
end

--- config.cfg's warnings that `plan` and `status` show (cmdtarget.findings: C44, a command service
-- on every interface of a host without IPv6, which a ctl given only -c cannot reach).
-- @param info table|nil steps.applies' result (cfg, config)
-- @return list of one-line strings
local function config_warnings(ctx, info)
  local out = {}
  if not info or type(info.cfg) ~= "table" then return out end
  for i, f in ipairs(cmdtarget.findings(ctx, info.cfg, info.config)) do out[i] = f.message end
  return out
end

-- The options of a status report that every path shares: facts (status only: health needs none),
-- verbosity, the exit code, config.cfg's warnings.
local function status_opts(self, ctx, outcome, info)
  return { facts = ctx.command == "status" and self:node_facts(ctx) or nil, verbosity = ctx.verbosity,
    exit_code = outcomes.exit_code(outcome, ctx.settings), warnings = config_warnings(ctx, info) }
end

--- Render: the report of `status` (imexguard.report: the node's facts, then the mesh's table, or
-- the one outcome line when there is no mesh to show), with the channel's state
-- (P:status_report).
-- @return string the report
local function render(self, ctx, g, r)
  local opts = status_opts(self, ctx, r.outcome, g.info)
  if not r.verdict then
    return self:status_report(ctx, report.status_plain(r.outcome, r.message, ctx.json, opts))
  end
  opts.self, opts.names, opts.json = g.self, g.names, ctx.json
  opts.outcome, opts.message = r.outcome, r.message
  opts.findings, opts.config = r.findings, g.info and g.info.config
  opts.node_list = g.by_file and g.info.nodes_file or nil
  return self:status_report(ctx, report.status(g.answer.mesh, r.verdict, opts))
end

--- Entry point `status`: the node's facts (node_facts), then the mesh as a table, with a
-- diagnosis per node. The ctl's ordered node map is compared with this node's node list file (same
-- nodes in another order is a local fault, C21); config.cfg's findings (imexcfg.lint: a command port
-- on loopback, IMEX_CMD_ENABLED=0...) are flagged before any job runs (C22).
function M:run_status(ctx)
  local g = gather(self, ctx)
  local r = judge(self, ctx, g)
  return r.outcome, r.message, render(self, ctx, g, r)
end

--- Status of the unit behind the ctl's answer (C27): an answer is the unit's only when the unit is
-- active and the command port is its process; otherwise `status` is never "ok". A unit that is not
-- running is named with systemd's Result and what it means (steps.restart's RESULT_MEANING: "success"
-- is a clean stop, no crash), and its ctl answer is nobody's (issue 32 item 8); a failed unit with its
-- daemon's last error line (C50, imexguard.daemonlog).
-- @return nil (the unit is fine or unknown), or "service-failed", message naming the unit's state or
--   the process on the command port, and true when the unit is not running (no daemon of it answers)
function M:unit_verdict(ctx, info)
  if not info then return nil end
  local props = ctx.host.unit(ctx.settings.unit) or info.unit
  ctx.unit_now = props -- the freshest properties: the restart count's (P:flapping_verdict)
  local ok, o, m = self:check_port_owner(ctx, info, props)
  if not ok then return o, m end
  local a = props.active_state
  if a == "active" or a == "reloading" then return nil end
  -- a stopped unit: the ctl's answer (often a placeholder row 0.0.0.0 DOWN) is nobody's; no other
  -- process is blamed (check_port_owner above names one when it listens)
  local u = ctx.settings.unit
  local what = a == "failed" and string.format("the unit failed (see journalctl -u %s)", u)
    or (a == "inactive" and "the unit is stopped (a job's prolog starts it; or systemctl start " .. u .. ")")
    or "the unit is not running"
  local result = tostring(props.result)
  local meaning = restart.RESULT_MEANING[result]
  -- C50: a failed unit quotes its daemon's last error line (and who holds the IMEX session)
  local said = a == "failed" and require("imexguard.daemonlog").explain(ctx, nil, props, info.cfg) or ""
  return "service-failed", string.format("node %s: %s is %s (Result=%s%s): %s; no IMEX daemon of it answers, "
    .. "so there is no domain to show%s", base.node_name(ctx), u, tostring(a), result,
    meaning and (": " .. meaning) or "", what, said), true
end

-- ---------------------------------------------------------------------------------------------
-- What the reports add: the channel's line, the fabric's verdict and line.

--- A status report with the channel's state (P:channel_report), except the one line of -q.
function M:status_report(ctx, out)
  if ctx.command ~= "status" then return out end -- health prints its own line
  if ctx.verbosity and ctx.verbosity < 0 then return out end
  return self:channel_report(ctx, nil, out)
end

--- A report (text or JSON) with the channel's line (`plan`: the step's line; `status`: its state).
-- @param info table|nil from applies (nil: the state is read with channels.state)
-- @param out string the report
-- @return string the report
function M:channel_report(ctx, info, out) -- luacheck: no self
  local line = info and info.channel or channels.state(ctx)
  if type(out) ~= "string" then return out end
  if ctx.json then
    -- the last key of the report's object (docs/json.md): `"channel": LINE` before its final "}"
    local head = out:match("^(.*)}\n$")
    if not head then return out end
    return head .. ',"channel":' .. require("cjson").encode(line) .. "}\n"
  end
  return out .. line .. "\n"
end

--- status, health and plan: the fabric read once (P:check_fabric without waiting) joined to an outcome
-- that exits 0: a fault of this node's GPUs, driver-mismatch (or fabric-unknown with
-- on_fabric_unknown = "fail") replaces it; GPUs still registering and a degraded fabric are named in
-- the message, not a fault (the prolog waits for the first, jobs run on the second); an outcome that
-- is already non-zero stays, the fabric is not read.
-- @param want table|nil (want.domain, see P:check_fabric)
-- @return outcome, message (one line)
function M:fabric_verdict(ctx, want, outcome, msg)
  if outcomes.exit_code(outcome, ctx.settings) ~= 0 then return outcome, msg end
  local r, fo, fm = self:check_fabric(ctx, want, false)
  if not r then return fo, text.one_line(fm .. "; " .. msg) end
  if r.state == "pending" or r.state == "unknown" or r.state == "degraded" then
    msg = msg .. "; fabric: " .. r.message
  end
  return outcome, text.one_line(msg)
end

--- plan's report (text or JSON) with the fabric's line (ctx.fabric, set by P:check_fabric): text
-- "fabric: STATE: message", JSON a last field `fabric` = {state, message, partition =
-- "<ClusterUUID>.<CliqueId>" or null} (docs/json.md), null when the fabric was not read (text:
-- unchanged).
-- @param out string the report
-- @return string the report
function M:fabric_report(ctx, out) -- luacheck: no self
  local f = ctx.fabric
  if type(out) ~= "string" then return out end
  if ctx.json then
    local body = out:match("^(.*)}%s*$")
    if not body then return out end
    local v = f and json.encode(report.fabric_json(f)):gsub("\n$", "") or "null"
    return body .. ',"fabric":' .. v .. "}\n"
  end
  if not f then return out end
  return out .. "fabric: " .. report.fabric_line(f) .. "\n"
end

-- The outcomes a flapping unit replaces besides those that exit 0: what a daemon that keeps
-- restarting shows at the moment it is asked (down, unreachable, not answering), whose cause the
-- restarts are.
local FLAPPING_REPLACES = { ["domain-unhealthy"] = true, ["ctl-unusable"] = true, ["service-failed"] = true }

--- status and health: the unit's restarts by systemd itself (imexguard.flapping: NRestarts between
-- runs, in state_dir) joined to an outcome. A flapping unit (flapping_restarts within flapping_window)
-- replaces an outcome that exits 0 or one of FLAPPING_REPLACES with unit-flapping, naming the count
-- and the window (each restart is a new IMEX instance: its peers drop every import); another outcome
-- keeps its place and gets the count in its message. Sets ctx.flapping (the status line).
-- @param props table|nil the unit's properties (host.unit: n_restarts, exec_main_start_us)
-- @return outcome, message (one line)
function M:flapping_verdict(ctx, props, outcome, msg) -- luacheck: no self
  local v = flapping.verdict(ctx.host, ctx.settings, props)
  ctx.flapping = v
  if not (v and v.flapping) then return outcome, msg end
  if outcomes.exit_code(outcome, ctx.settings) == 0 or FLAPPING_REPLACES[outcome] then
    return flapping.OUTCOME, text.one_line(string.format("node %s: %s; before it: %s: %s",
      base.node_name(ctx), v.text, outcome, tostring(msg)))
  end
  return outcome, text.one_line(tostring(msg) .. "; " .. v.text)
end

-- ---------------------------------------------------------------------------------------------
-- health and plan.

--- Entry point `health` (Slurm's HealthCheckProgram, LBNL NHC): this node's IMEX as `status` sees
-- it plus the channel's state, changing nothing (the binary runs it with the dry-run recorders).
-- Not applicable (IMEX skipped here) and faults of peers only are "ok"/"skipped" (exit 0: a health
-- check drains this node, and a peer drains itself); a fault of this node is its outcome, with one
-- line `imexguard: OUTCOME: cause` as the report (what NHC and contrib/slurm/health.sh print).
-- @return outcome, message, report (nil when healthy)
function M:run_health(ctx)
  local o, m = self:run_status(ctx)
  if o == "skipped" then return "skipped", text.one_line("not applicable: " .. tostring(m)) end
  if o == "peers-unhealthy" then o, m = "ok", "this node healthy; " .. tostring(m) end
  if o == "ok" then
    local line, fault, fo = channels.state(ctx)
    if fault then o, m = fo or "channel-failed", line end
  end
  if outcomes.exit_code(o, ctx.settings) == 0 then return o, text.one_line(m) end
  return o, text.one_line(m), drain.reason(o, m) .. "\n"
end

-- plan, C32 as P:wait_converged decides it: with a stale node-map mismatch in the domain, a restart
-- to converge where the registry allows one. Returns the outcome and message.
local function plan_converge(self, ctx, f, outcome, msg)
  local a, stale = f.assessment, f.verdict.stale_mismatch
  local ca = { action = "restart", nodes = a.nodes, unit = a.unit, changed = false }
  local ok, cwhy = true, nil
  if a.action == "none" then ok, cwhy = self:may_restart(ctx, f.st, ca) end
  local head = "stale node-map mismatch with " .. table.concat(stale.peers, ", ")
  if not ok then
    return health.STALE_MISMATCH_OUTCOME, string.format("%s; %s; this node may not restart it: %s; %s", msg,
      head, tostring(cwhy), health.stale_remedy(ctx, { self = f.want.self }, f.verdict))
  elseif a.action == "none" then
    return outcome, msg .. "; " .. head .. ": the prolog would restart " .. ctx.settings.unit
      .. " once to clear it"
  end
  return outcome, msg .. "; " .. head .. ": the " .. a.action .. " clears this end"
end

--- Entry point `plan`: the prolog's decisions without any side effect (imexguard.report renders them).
function M:run_plan(ctx)
  local info, want, m = self:prepare(ctx)
  if not info then return want, m end
  local old, rerr = nodes_file.read_node_list(ctx, info)
  local changed = old ~= want.bytes
  local st, serr = state.load(ctx.host, ctx.settings)
  if not st then return housekeeping.registry_unknown(ctx, serr) end
  housekeeping.drop_other_boots(ctx, st)
  local a, o
  a, o, m = self:assess_daemon(ctx, info, want, st, { changed = changed, wait = false, write_pending = true })
  if not a then return o, m end
  local allowed, why, blocking = true, nil, nil
  if changed or a.action ~= "none" then allowed, why, blocking = self:may_restart(ctx, st, a) end
  -- a refusal that names no registered job is the policy's own (issue 32 item 6)
  local refusal = require("imexguard.steps.other_jobs").blocked(blocking) and "conflict" or "refused"
  if not allowed and refusal == "refused" then
    why = require("imexguard.steps.other_jobs").refused_message(ctx, a, why)
  end
  local f = { ctx = ctx, job = base.job_id(ctx), node = base.node_name(ctx), info = info, want = want,
    st = st, old = old, old_err = rerr, changed = changed, assessment = a, allowed = allowed, why = why,
    refusal = refusal,
    verdict = a.answer and verdict.judge(a.answer, { addrs = want.addrs, self = want.self }),
    findings = report.config_findings(info, want.ips or want.addrs), warnings = config_warnings(ctx, info),
    config_fault = #want.addrs > 1 and report.config_fault_found(info, want.ips or want.addrs),
    membership = want.slots and slots.plan_facts(ctx, st, want, a) or nil }
  local pok, po, pm = self:check_port_owner(ctx, info, a.unit)
  if not pok then
    local out = self:channel_report(ctx, info, report.plan(f))
    return po, text.one_line(pm .. "; " .. report.plan_message(f)), out
  end
  local outcome = allowed and (f.config_fault and "config-fault" or "ok") or refusal
  local msg = report.plan_message(f)
  if allowed and f.verdict and f.verdict.stale_mismatch then
    outcome, msg = plan_converge(self, ctx, f, outcome, msg)
  end
  local message = self:channel_note(info, text.one_line(msg))
  outcome, message = self:fabric_verdict(ctx, want, outcome, message)
  return outcome, message, self:fabric_report(ctx, self:channel_report(ctx, info, report.plan(f)))
end

--- Entry point `rack` (`imexguard rack [--json]`): this node's NVLink domain at a glance
-- (imexguard.rack), changing nothing.
function M:run_rack(ctx)
  return require("imexguard.rack").run(self, ctx)
end

--- Entry point `wait` (`imexguard wait [--job N] [--timeout S]`): until every node of the job in
-- this node's IMEX domain is CONNECTED to every other (imexguard.barrier), changing nothing.
function M:run_wait(ctx)
  return require("imexguard.barrier").run(self, ctx)
end

-- ---------------------------------------------------------------------------------------------
-- The job registry by hand: registrations and forget.

--- Entry point `registrations`: the jobs registered on this node (reads the state file, takes no
-- lock: the file is replaced atomically, so it is the old or the new registry).
function M:run_registrations(ctx) -- luacheck: no self
  local host, s = ctx.host, ctx.settings
  local st, serr = state.load(host, s)
  if not st then return housekeeping.registry_unknown(ctx, serr) end
  local jobs = registry.jobs(st)
  local msg = #jobs == 0 and string.format("node %s: no job registered", base.node_name(ctx))
    or string.format("node %s: %d job%s registered: %s", base.node_name(ctx), #jobs,
      #jobs == 1 and "" or "s",
      registry.ids(jobs))
  local facts = { node = base.node_name(ctx), now = host.wallclock(), jobs = jobs,
    state_path = state.path(s) }
  return "ok", msg, report.registrations(facts, { json = ctx.json, verbosity = ctx.verbosity, outcome = "ok",
    exit_code = 0, message = msg })
end

--- Entry point `forget JOBID` (ctx.arg): remove the job's entry from this node's registry under
-- the node lock, for a job whose epilog never ran (slurmd crashed, the node rebooted without
-- clearing state_dir); IMEX is left as it is and P:after_unregister is not run (that is the
-- epilog's); with membership by slots the job's slots leave the name map (steps.slots.unmap). A job
-- that is not registered is bad-input: nothing removed.
function M:run_forget(ctx)
  local id = ctx.arg
  if type(id) ~= "string" or not id:match(base.JOB_ID_PATTERN) or #id > base.JOB_ID_MAX then
    return "bad-input", string.format("forget: %s is not a Slurm job id (digits)",
      text.quote(tostring(id), 80))
  end
  id = id:gsub("^0+(%d)", "%1")
  local s, node = ctx.settings, base.node_name(ctx)
  local guard, o, m = self:lock(ctx)
  if not guard then return o, m end
  local lk <close> = guard -- luacheck: ignore lk
  local st, serr = state.load(ctx.host, s)
  if not st then return housekeeping.registry_unknown(ctx, serr) end
  local entry = registry.unregister(st, id)
  if not entry then
    local jobs = registry.jobs(st)
    return "bad-input",
      string.format("node %s: job %s is not registered here; nothing removed (registered: %s)",
      node, id, #jobs == 0 and "none" or registry.ids(jobs))
  end
  local failed, fm = self:save_unregistered(ctx, st, id)
  if failed then return failed, fm end
  -- membership by slots: the job's slots out of the name map, as its epilog would
  if slots.enabled(ctx) or slotnames.parse_list(st.running_nodes) then
    local so, sm = slots.unmap(ctx, st, id)
    if so then return so, sm end
  end
  local remaining = registry.jobs(st)
  local age = entry.registered_us and registry.age_text(ctx.host.wallclock() - entry.registered_us / 1e6)
  local msg = text.one_line(string.format("node %s: removed the registration of job %s (%s, registered %s "
    .. "ago); %s; %s left as it is", node, id, registry.entry_hosts(entry), age or "?",
    #remaining == 0 and "no job registered now" or ("still registered: job " .. registry.ids(remaining)),
    s.unit))
  return "ok", msg, msg .. "\n" -- said on stdout too: an admin ran it by hand
end

return M
