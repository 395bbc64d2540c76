--- The steps the default policy is built from (design.md "Decision model"). Each step returns its
-- result, or nil, outcome, message (one line naming the node, file, unit or host at fault). The
-- decision steps (applies, desired, read_nodes, assess) have no side effects, so `plan` and
-- `prolog` share them; the acting steps (lock, write_nodes, restart) change the node.
local hostlist = require "imexguard.hostlist"
local nodelist = require "imexguard.nodelist"
local imexcfg = require "imexguard.imexcfg"
local slurmenv = require "imexguard.slurmenv"
local addresses = require "imexguard.addresses"
local state = require "imexguard.state"
local health = require "imexguard.health"
local registry = require "imexguard.registry"
local settings_schema = require "imexguard.settings"

local M = {}

--- Largest nodes_config.cfg / config.cfg read (bytes).
M.MAX_FILE = 1024 * 1024
--- Default node list file when neither the setting nor config.cfg names one (NVIDIA's default).
M.DEFAULT_NODES_FILE = "/etc/nvidia-imex/nodes_config.cfg"

-- systemd UnitFileState values under which the unit starts at boot or with its dependencies.
local ENABLED = {
  ["enabled"] = true, ["enabled-runtime"] = true, ["static"] = true, ["indirect"] = true,
  ["generated"] = true, ["alias"] = true, ["linked"] = true, ["linked-runtime"] = true,
  ["transient"] = true,
}

--- Make a message one line.
function M.one_line(s)
  return (tostring(s):gsub("[\r\n]+", " "):gsub("%s+$", ""))
end

local function fail(outcome, fmt, ...)
  return nil, outcome, M.one_line(string.format(fmt, ...))
end

--- Outcome for a failed primitive: "deadline" always means the run's budget ran out.
local function by_code(code, outcome)
  if code == "deadline" then return "deadline-exceeded" end
  return outcome
end

--- This node's name for messages: SLURMD_NODENAME, else the host name.
function M.node_name(ctx)
  local job = ctx.job or {}
  return job.nodename or (ctx.env and ctx.env.SLURMD_NODENAME) or ctx.host.hostname()
end

--- The job id as a string ("?" when unknown).
function M.job_id(ctx)
  local job = ctx.job or {}
  return tostring(job.id or (ctx.env and (ctx.env.SLURM_JOB_ID or ctx.env.SLURM_JOBID)) or "?")
end

--- Query the unit's properties; a failed query is "unknown", never "inactive" (C17).
-- @return props, or nil, "unit-unknown"|"deadline-exceeded", message
function M.query_unit(ctx)
  local unit = ctx.settings.unit
  local props, err, code = ctx.host.unit(unit)
  if not props then
    return fail(by_code(code, "unit-unknown"), "node %s: state of %s unknown (%s: %s); nothing restarted",
      M.node_name(ctx), unit, tostring(code), tostring(err))
  end
  return props
end

--- Step 1: does IMEX apply to this node?
-- @return info {unit = props, cfg = {KEY = value}, nodes_file = path}, or nil, outcome, message
--   ("skipped" when IMEX does not apply: unit not installed, not enabled, no config.cfg)
function M.applies(ctx)
  local s, host = ctx.settings, ctx.host
  local props, o, m = M.query_unit(ctx)
  if not props then return nil, o, m end
  if props.load_state ~= "loaded" then
    return fail("skipped", "IMEX not installed on this node: %s load state %s", s.unit,
      tostring(props.load_state))
  end
  if not ENABLED[props.unit_file_state] then
    return fail("skipped", "IMEX not enabled on this node: %s is %s", s.unit, tostring(props.unit_file_state))
  end
  local text, err, code = host.read(s.imex_config, M.MAX_FILE)
  if not text then
    if code == "ENOENT" then return fail("skipped", "not an IMEX node: %s does not exist", s.imex_config) end
    return fail(by_code(code, "bad-input"), "IMEX config %s unreadable: %s", s.imex_config, tostring(err))
  end
  local cfg, perr = imexcfg.parse(text)
  if not cfg then return fail("bad-input", "IMEX config %s: %s", s.imex_config, tostring(perr)) end
  local nodes_file = s.nodes_file
  if not nodes_file then
    local v = imexcfg.get and imexcfg.get(cfg, "IMEX_NODE_CONFIG_FILE") or cfg.IMEX_NODE_CONFIG_FILE
    nodes_file = (v and v ~= "") and v or M.DEFAULT_NODES_FILE
  end
  local bind = cfg.BIND_INTERFACE_IP
  return { unit = props, cfg = cfg, nodes_file = nodes_file, bind = (bind ~= "" and bind) or nil }
end

--- Step 2: the desired node list.
-- @param opts table|nil {lookup = function(ctx, names) -> list of addresses (same order), or nil,
--   message naming the node, code}: the address source; default: imexguard.addresses.lookup with
--   the settings (DNS, or the address_map file). A site policy passes its own (policies/address_map.lua).
-- @return want {expr, source, names, addrs, bytes, self, self_index, names_by = {[addr] = name}},
--   or nil, "bad-input"|"deadline-exceeded", message naming the bad input
function M.desired(ctx, info, opts)
  local s, host = ctx.settings, ctx.host
  local lookup = opts and opts.lookup
  local expr, source, warning = slurmenv.nodelist(ctx.env or {})
  if not expr then return fail("bad-input", "job node list: %s", tostring(source)) end
  if warning then host.log("warning", M.one_line(warning)) end
  local names, herr = hostlist.expand(expr)
  if not names then
    return fail("bad-input", "bad hostlist %s=%q: %s", tostring(source), expr, tostring(herr))
  end
  if #names == 0 then return fail("bad-input", "hostlist %s=%q is empty", tostring(source), expr) end
  local addrs, aerr, code
  if lookup then
    addrs, aerr, code = lookup(ctx, names)
  else
    addrs, aerr, code = addresses.lookup(host, s, names)
  end
  if not addrs then return fail(by_code(code, "bad-input"), "%s", tostring(aerr)) end
  local ok, cerr = nodelist.check(addrs, { allow_loopback = s.allow_loopback, names = names })
  if not ok then
    return fail("bad-input", "job node list from %s=%s: %s", tostring(source), expr, tostring(cerr))
  end
  local self, idx = addresses.self(host, info.bind, addrs)
  if not self then return fail("bad-input", "node %s: %s", M.node_name(ctx), tostring(idx)) end
  local by = {}
  for i, a in ipairs(addrs) do by[a] = names[i] end
  return { expr = expr, source = source, names = by, list = names, addrs = addrs, self = self,
    self_index = idx, bytes = nodelist.format(addrs) }
end

--- A held node lock; closing it (to-be-closed variable, or :release()) unlocks it once.
local Guard = {}
Guard.__index = Guard
function Guard:release()
  if self.lock then
    local lk = self.lock
    self.lock = nil
    lk:unlock()
  end
end
Guard.__close = Guard.release

--- A setting the schema may not have yet: its value, or `default` when imexguard.settings does not
-- define it (reading an unknown key of ctx.settings raises, so a policy asks here first).
-- @param ctx table policy context
-- @param name string setting name
-- @param default any
-- @return value
function M.setting(ctx, name, default)
  if not settings_schema.by_name[name] then return default end
  local v = ctx.settings[name]
  if v == nil then return default end
  return v
end

--- Mode of the state directory (0755).
M.STATE_DIR_MODE = tonumber("755", 8)

--- Create a directory and its missing parents (host.mkdir: an existing directory is success).
-- The state directory (/run/imexguard by default) is on a tmpfs: it is gone after a reboot.
-- @param host table the primitives (mkdir; a host without it is left alone)
-- @param path string absolute directory
-- @param mode integer permission bits (e.g. 493 = 0755)
-- @return true, or nil, message, code (of the first mkdir that failed)
function M.ensure_dir(host, path, mode)
  if type(host.mkdir) ~= "function" then return true end
  local ok, err, code = host.mkdir(path, mode)
  if ok then return true end
  if code == "ENOENT" then
    local parent = path:match("^(.+)/[^/]+/*$")
    if parent and parent ~= path then
      local pok, perr, pcode = M.ensure_dir(host, parent, mode)
      if not pok then return nil, perr, pcode end
      return host.mkdir(path, mode)
    end
  end
  return nil, err, code
end

--- Step 3: take the node lock (state_dir/lock), creating state_dir first (host.mkdir, 0755).
-- @return guard (use `local g <close> = guard`), or nil, "lock-timeout"|"deadline-exceeded", message
--   naming the holder's pid and job (or the state directory that cannot be created)
function M.lock(ctx)
  local s = ctx.settings
  local path = s.state_dir .. "/lock"
  local dok, derr, dcode = M.ensure_dir(ctx.host, s.state_dir, M.STATE_DIR_MODE)
  if not dok then
    return fail(by_code(dcode, "lock-timeout"), "node %s: cannot create the state directory %s for node lock "
      .. "%s: %s", M.node_name(ctx), s.state_dir, path, tostring(derr))
  end
  local lk, err, code, holder = ctx.host.lock(path, s.lock_timeout, "job=" .. M.job_id(ctx))
  if not lk then
    local who = holder and string.format("pid %s (%s)", tostring(holder.pid), tostring(holder.owner))
      or "an unknown process"
    if code == "timeout" then
      return fail("lock-timeout", "node %s: node lock %s held by %s for more than %g s", M.node_name(ctx),
        path, who, s.lock_timeout)
    elseif code == "deadline" then
      return fail("deadline-exceeded",
        "node %s: the run's deadline passed waiting for node lock %s held by %s", M.node_name(ctx), path, who)
    end
    return fail("lock-timeout", "node %s: cannot take node lock %s: %s", M.node_name(ctx), path,
      tostring(err))
  end
  return setmetatable({ lock = lk }, Guard)
end

--- Step 4a: the node list file's current bytes.
-- @return string bytes ("" when the file does not exist), or nil, message when unreadable (the file
--   is then rewritten: an unreadable or oversized list is never right)
function M.read_nodes(ctx, info)
  local text, err, code = ctx.host.read(info.nodes_file, M.MAX_FILE)
  if text then return text end
  if code == "ENOENT" then return "" end
  return nil, string.format("%s unreadable (%s)", info.nodes_file, tostring(err))
end

--- Step 4b: write the node list atomically and record it in the state file.
-- @param st table state (updated in place)
-- @return true, or nil, "write-failed"|"deadline-exceeded", message (the old file is intact)
function M.write_nodes(ctx, info, want, st)
  local host = ctx.host
  local ok, err, code = host.write_atomic(info.nodes_file, want.bytes, tonumber("644", 8))
  if not ok then
    return fail(by_code(code, "write-failed"), "node %s: writing node list %s failed: %s; old file intact",
      M.node_name(ctx), info.nodes_file, tostring(err))
  end
  st.nodes = want.bytes
  st.written_us = host.wallclock() * 1e6
  st.job = M.job_id(ctx)
  local sok, serr = state.save(host, ctx.settings, st)
  if not sok then host.log("warning", M.one_line("state file not updated: " .. tostring(serr))) end
  return true
end

--- Step 5a: the unit's state once it has settled (C17: activating/deactivating means wait).
-- @param wait boolean poll while activating/deactivating (bounded by start_timeout); false: return
--   the unsettled properties at once (plan)
-- @return props, or nil, outcome, message
function M.settle_unit(ctx, wait)
  local s, host = ctx.settings, ctx.host
  local start = host.now()
  while true do
    local props, o, m = M.query_unit(ctx)
    if not props then return nil, o, m end
    local a = props.active_state
    if not wait or (a ~= "activating" and a ~= "deactivating") then return props end
    if host.now() - start >= s.start_timeout then
      return fail("service-failed", "node %s: %s still %s after %g s (wait-timeout)", M.node_name(ctx),
        s.unit, a, s.start_timeout)
    end
    local ok = host.sleep(math.min(s.poll_interval, s.start_timeout - (host.now() - start)))
    if not ok then
      return fail("deadline-exceeded", "node %s: deadline passed while %s was %s", M.node_name(ctx),
        s.unit, a)
    end
  end
end

--- Step 5: is the running daemon stale?
-- @param st table state file contents
-- @param opts table {changed = the list file's bytes differ (written now, or would be in plan),
--   wait = wait for activating/deactivating, write_pending = plan (the file is not written)}
-- @return verdict {action = "none"|"start"|"restart"|"wait", reset_failed = boolean, reason = string,
--   unit = props, answer = ctl answer or nil (reused as the first health poll), nodes = want.bytes
--   (the list the daemon would run after the action), changed = opts.changed}, or nil, outcome, message
function M.assess(ctx, info, want, st, opts)
  local s, host = ctx.settings, ctx.host
  local props, o, m = M.settle_unit(ctx, opts.wait)
  if not props then return nil, o, m end
  local a = props.active_state
  local v = { unit = props, action = "none", nodes = want.bytes, changed = opts.changed and true or false }
  if a == "activating" or a == "deactivating" then
    v.action, v.reason = "wait", string.format("%s is %s; prolog would wait up to %g s", s.unit, a,
      s.start_timeout)
    return v
  end
  if a == "failed" then
    v.action, v.reset_failed = "start", true
    v.reason = string.format("%s failed (result %s)", s.unit, tostring(props.result))
    return v
  end
  if a ~= "active" and a ~= "reloading" then
    v.action, v.reason = "start", string.format("%s is %s", s.unit, tostring(a))
    return v
  end
  v.action = "restart"
  if opts.changed and opts.write_pending then
    v.reason = "node list changes; the daemon reads it only at start"
    return v
  end
  -- (a) a file the daemon reads at start was written at or after its start.
  local started = tonumber(props.exec_main_start_us) or 0
  if started > 0 then
    for _, path in ipairs({ info.nodes_file, s.imex_config }) do
      local fst = host.stat(path)
      if fst and fst.mtime_us and fst.mtime_us >= started then
        v.reason = string.format("%s changed after the daemon started", path)
        return v
      end
    end
  end
  -- (b) the state file says this very daemon instance was started with another list.
  if st.invocation_id and st.invocation_id == props.invocation_id and st.running_nodes
    and st.running_nodes ~= want.bytes then
    v.reason = string.format("daemon (invocation %s) was started with another node list", props.invocation_id)
    return v
  end
  -- (c) the ctl proves another list; an unusable answer proves nothing (C06).
  local ans = health.probe(ctx)
  v.answer = ans
  -- A running daemon's list always holds this node (else it refuses to start), so an answer that
  -- lacks this node describes no running daemon: it proves nothing (the health wait judges it).
  local have, n = {}, 0
  if ans.domain then have, n = health.host_set(ans.domain) end
  if ans.domain and have[want.self] then
    local same = n == #want.addrs
    for _, addr in ipairs(want.addrs) do same = same and have[addr] == true end
    if not same then
      local hosts = {}
      for _, node in ipairs(ans.domain.nodes) do hosts[#hosts + 1] = tostring(node.host) end
      v.reason = string.format("the ctl shows the daemon running hosts {%s}, the job wants {%s}",
        table.concat(hosts, " "), table.concat(want.addrs, " "))
      v.answer = nil
      return v
    end
    v.action, v.reason = "none", "daemon current"
  elseif ans.domain then
    v.action = "none"
    v.reason = "daemon current by its start time; the ctl does not list this node " .. want.self
  else
    v.action, v.reason = "none", "daemon current by its start time; ctl unusable: " .. tostring(ans.err)
  end
  return v
end

--- Step 6: may the daemon be (re)started, or the node list rewritten, under the other jobs that use
-- IMEX on this node? The default rule (design.md step 6, case C08): refuse when another registered
-- job runs with a DIFFERENT node list (its peers would drop its imports, or its daemon would come
-- back with a list it cannot use); a job with the same list never blocks. The setting
-- restart_under_jobs = true allows it anyway (a warning names the jobs). Call it BEFORE writing the
-- node list: on refusal the file and the unit stay as they are.
-- With the setting registration_max_age (seconds, when the schema has it), older registrations are
-- dropped from `st` first (stale: an epilog that never ran; see imexguard.registry).
-- @param ctx table policy context (ctx.job.id: this job, never in conflict with itself)
-- @param st table state file contents (st.jobs: the registry)
-- @param verdict table from assess (nodes: the list the daemon would run; action)
-- @return true, or false, message (one line naming the job ids, what to do; the policy then
--   returns "conflict"), and the list of conflicting entries
function M.may_restart(ctx, st, verdict)
  local s, host = ctx.settings, ctx.host
  local now_us = host.wallclock() * 1e6
  local stale = registry.prune(st, now_us, M.setting(ctx, "registration_max_age"))
  if #stale > 0 then
    host.log("warning", M.one_line(string.format("node %s: ignoring stale registration(s) of job %s "
      .. "(older than registration_max_age)", M.node_name(ctx), registry.ids(stale))))
  end
  local nodes = verdict.nodes
  local others = registry.conflicting(st, M.job_id(ctx), nodes)
  if #others == 0 then return true, nil, others end
  if s.restart_under_jobs then
    host.log("warning", M.one_line(string.format("node %s: %s %s for job %s under job %s (other node list), "
      .. "allowed by restart_under_jobs", M.node_name(ctx), verdict.action, s.unit, M.job_id(ctx),
      registry.ids(others))))
    return true, nil, others
  end
  return false, M.conflict_message(ctx, verdict, others, "it with another node list"), others
end

--- The conflict message: what this job needs, which jobs block it, and how an admin clears a
-- stale registration.
-- @param ctx table policy context
-- @param verdict table from assess (action, nodes, changed)
-- @param entries list registry entries that block
-- @param why string e.g. "it with another node list" (after "uses"/"use")
-- @return string one line
function M.conflict_message(ctx, verdict, entries, why)
  local now_us = ctx.host.wallclock() * 1e6
  local parts = {}
  for i, e in ipairs(entries) do
    parts[i] = string.format("%s (%s, %sregistered %s ago)", e.id, registry.show_nodes(e.nodes),
      e.shared and ("shared " .. tostring(e.shared) .. ", ") or "",
      registry.show_age((now_us - (e.registered_us or now_us)) / 1e6))
  end
  local what = verdict.action ~= "none" and (verdict.action .. " " .. ctx.settings.unit) or ""
  if verdict.changed then what = "rewrite the node list" .. (what ~= "" and (" and " .. what) or "") end
  local one = #entries == 1
  return M.one_line(string.format("node %s: job %s would %s with %s, but %s %s %s %s; nothing written or "
    .. "restarted. If %s no longer runs here: SLURM_JOB_ID=%s imexguard epilog", M.node_name(ctx),
    M.job_id(ctx), what, registry.show_nodes(verdict.nodes), one and "job" or "jobs",
    table.concat(parts, ", "), one and "uses" or "use", why,
    one and ("job " .. entries[1].id) or "one of them", one and entries[1].id or "<id>"))
end

--- Step 9: register this job (prolog succeeded) and save the state file, under the node lock.
-- @param ctx table policy context (job id)
-- @param st table state (changed and saved)
-- @param want table desired list (bytes)
-- @param extra table|nil more fields of the entry (invocation_id is filled from the unit)
-- @return entry, or nil, message (state file not written: logged by the caller), or nil when the
--   job has no id (nothing registered, a warning is logged)
function M.register(ctx, st, want, extra)
  local host = ctx.host
  local id = M.job_id(ctx)
  if id == "?" then
    host.log("warning", "job has no SLURM_JOB_ID: not registered")
    return nil
  end
  local e = { invocation_id = "" }
  for k, v in pairs(extra or {}) do e[k] = v end
  if e.invocation_id == "" then
    local props = host.unit(ctx.settings.unit)
    e.invocation_id = props and props.invocation_id or ""
  end
  local entry = registry.register(st, id, want.bytes, host.wallclock() * 1e6, e)
  local ok, err = state.save(host, ctx.settings, st)
  if not ok then
    return nil, M.one_line(string.format("state file not written, job %s not registered: %s", id,
      tostring(err)))
  end
  return entry
end

--- Step 7: (re)start the unit and record what it runs.
-- @param v table verdict from assess (action "start" or "restart", reset_failed)
-- @param st table state (updated in place and saved)
-- @return true and the new props (nil when systemd did not answer after the job), or nil, outcome,
--   message
function M.restart(ctx, want, v, st)
  local s, host = ctx.settings, ctx.host
  if v.reset_failed then
    local ok, err = host.unit_reset_failed(s.unit)
    if not ok then host.log("warning", M.one_line("reset-failed of " .. s.unit .. ": " .. tostring(err))) end
  end
  local verb = v.action == "restart" and "restart" or "start"
  local res, err, code = host.unit_job(s.unit, verb, s.start_timeout)
  if res ~= "done" then
    return fail(by_code(code, "service-failed"), "node %s: systemd %s of %s: %s (%s)", M.node_name(ctx), verb,
      s.unit, tostring(code or res), tostring(err))
  end
  local props = host.unit(s.unit)
  if props and props.active_state ~= "active" and props.active_state ~= "activating"
    and props.active_state ~= "reloading" then
    return fail("service-failed", "node %s: %s is %s (result %s) right after %s", M.node_name(ctx), s.unit,
      tostring(props.active_state), tostring(props.result), verb)
  end
  st.running_nodes = want.bytes
  st.invocation_id = props and props.invocation_id or nil
  st.started_us = props and props.exec_main_start_us or nil
  st.job = M.job_id(ctx)
  local ok, serr = state.save(host, s, st)
  if not ok then host.log("warning", M.one_line("state file not updated: " .. tostring(serr))) end
  return true, props
end

return M
