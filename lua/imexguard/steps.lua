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
-- @return want {expr, source, names, addrs, bytes, self, self_index, names_by = {[addr] = name}},
--   or nil, "bad-input"|"deadline-exceeded", message naming the bad input
function M.desired(ctx, info)
  local s, host = ctx.settings, ctx.host
  local expr, source, warning = slurmenv.nodelist(ctx.env or {})
  if not expr then return fail("bad-input", "job node list: %s", tostring(source)) end
  if warning then host.log("warning", M.one_line(warning)) end
  local names, herr = hostlist.expand(expr)
  if not names then
    return fail("bad-input", "bad hostlist %s=%q: %s", tostring(source), expr, tostring(herr))
  end
  if #names == 0 then return fail("bad-input", "hostlist %s=%q is empty", tostring(source), expr) end
  local addrs, aerr, code = addresses.lookup(host, s, names)
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

--- Step 3: take the node lock (state_dir/lock).
-- @return guard (use `local g <close> = guard`), or nil, "lock-timeout"|"deadline-exceeded", message
--   naming the holder's pid and job
function M.lock(ctx)
  local s = ctx.settings
  local path = s.state_dir .. "/lock"
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
--   unit = props, answer = ctl answer or nil (reused as the first health poll)}, or nil, outcome, message
function M.assess(ctx, info, want, st, opts)
  local s, host = ctx.settings, ctx.host
  local props, o, m = M.settle_unit(ctx, opts.wait)
  if not props then return nil, o, m end
  local a = props.active_state
  local v = { unit = props, action = "none" }
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

--- Step 6 (not yet implemented): may the daemon be restarted under the other jobs using IMEX on this
-- node? The job registry (jobs whose prolog succeeded and whose epilog has not run, kept in the state
-- file) will be consulted here; until it exists every restart is allowed.
-- @param ctx table policy context
-- @param st table state file contents
-- @return true, or false, message (the policy then returns "conflict")
function M.may_restart(ctx, st) -- luacheck: no unused args
  return true
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
