-- SPDX-License-Identifier: Apache-2.0
--- Step 7 of the built-in policy, "(re)start" (docs/design.md, "Decision model of the default
-- policy"; cases C26, C27): the unit's actions and the check around them. A start is refused, and
-- a healthy answer does not count (step 8), while a process that is not the unit's holds the
-- daemon's command service (check_port_owner); a start or restart is one systemd job, waited for, whose
-- failure names the unit's Result with the admin's recovery (one reset-failed and one more start
-- after start-limit-hit); what the daemon was started with is recorded in the state file.
local base = require("imexguard.steps.base")
local one_line = require("imexguard.text").one_line
local excerpt = require("imexguard.text").excerpt
-- Loaded when first used (imexguard.lazy).
local lazy = require("imexguard.lazy")
local imexcfg, state, registry, daemonlog =
  lazy("imexguard.imexcfg", "imexguard.state", "imexguard.registry", "imexguard.daemonlog")

local fail, by_code, node_name = base.fail, base.by_code, base.node_name

local M = {}

--- Is process `pid` the unit's? Its main PID, or a process in the unit's control group
-- (/proc/PID/cgroup names the unit: the kernel's cgroup v2 path, which systemd names after the unit).
local function unit_process(ctx, pid, props)
  local main = props and tonumber(props.main_pid)
  if main and main > 0 and pid == main then return true end
  local cg = ctx.host.read("/proc/" .. tostring(pid) .. "/cgroup", 65536)
  return cg ~= nil and cg:find("/" .. ctx.settings.unit, 1, true) ~= nil
end

--- C27: something answering on this node's command service (IMEX_CMD_PORT of config.cfg, or the
-- unix socket IMEX_CMD_UNIX_DOMAIN_PATH, C37) that is not the unit's process (a daemon started by
-- hand, a leftover of a crashed unit): the ctl would show ITS state, so nothing may be called
-- healthy, and a start of the unit would fail or run a second daemon. Uses
-- host.port_owner(port, nil, address, main_pid) and host.socket_owner(path, nil, main_pid) ->
-- {pid, comm, cmdline} | nil, msg, code, with the unit's main PID as the hint (its descriptors are
-- read first: every process only when it does not hold the socket); a host without them, or an
-- owner it cannot find, proves nothing (logged at debug). The TCP port is checked only where one is
-- configured (imexcfg.command_service).
-- @param ctx table policy context
-- @param info table from applies (cfg)
-- @param props table|nil the unit's properties (main_pid, active_state)
-- @return true, or nil, "service-failed", message naming the process (pid, command line), the port
--   or socket and the unit
function M.check_port_owner(ctx, info, props)
  local host = ctx.host
  local svc, serr = imexcfg.command_service(info.cfg)
  if not svc then
    host.log("debug", one_line("command port owner not checked: " .. tostring(serr)))
    return true
  end
  local main = props and tonumber(props.main_pid)
  local hint = main and main > 0 and main or nil
  if svc.socket and type(host.socket_owner) == "function" then
    local ok, o, m = M.check_listener_owner(ctx, props, "socket " .. svc.socket,
      host.socket_owner(svc.socket, nil, hint))
    if not ok then return nil, o, m end
  end
  if svc.port and type(host.port_owner) == "function" then
    -- the command port's address: IMEX_CMD_BIND_INTERFACE_IP, else BIND_INTERFACE_IP, else any (the
    -- simulator runs one daemon per loopback address on the same port; a node runs one)
    local cmd_ip = info.cfg and info.cfg.IMEX_CMD_BIND_INTERFACE_IP
    if cmd_ip == "" then cmd_ip = nil end
    return M.check_listener_owner(ctx, props, "port " .. svc.port,
      host.port_owner(svc.port, nil, cmd_ip or info.bind, hint))
  end
  return true
end

--- The judgement of M.check_port_owner on one listener of the command service: healthy only when it is
-- the active unit's process.
-- @param ctx table policy context
-- @param props table|nil the unit's properties
-- @param what string "port 50005" or "socket /run/imex/cmd.sock" (for the message)
-- @param owner table|nil host.port_owner's or host.socket_owner's result
-- @param err string|nil its message when nil
-- @param code string|nil its code ("none": nothing listens)
-- @return true, or nil, "service-failed", message
function M.check_listener_owner(ctx, props, what, owner, err, code)
  local host, unit = ctx.host, ctx.settings.unit
  if not owner then
    if code ~= "none" then
      host.log("debug", one_line("command " .. what .. " owner unknown: " .. tostring(err)))
    end
    return true
  end
  local pid = tonumber(owner.pid)
  if not pid then return true end
  local active = props and (props.active_state == "active" or props.active_state == "reloading")
  if active and unit_process(ctx, pid, props) then return true end
  local cmd = owner.cmdline
  if type(cmd) == "table" then cmd = table.concat(cmd, " ") end
  return fail("service-failed", "node %s: pid %d (%s) listens on the IMEX command %s but is not the "
    .. "main process of %s (%s, main pid %s): a daemon started by hand or left over; its answers are not "
    .. "the unit's. Stop it (kill %d), then run the prolog again", node_name(ctx), pid,
    excerpt(cmd or owner.comm or "?"), what, unit, props and tostring(props.active_state) or "state unknown",
    props and tostring(props.main_pid) or "?", pid)
end

--- What an admin does about a unit Result after a failed start/restart job (systemd.exec(5),
-- systemd.service(5): the unit's Result property says why it failed).
M.RESULT_HINTS = {
  ["start-limit-hit"] = "the unit was started more than StartLimitBurst times within "
    .. "StartLimitIntervalSec (systemd.unit(5)); recover with: systemctl reset-failed %s (then the next "
    .. "prolog starts it), raise StartLimitBurst/StartLimitIntervalSec in the unit, or set "
    .. "reset_failed_retry = true",
  ["exit-code"] = "the daemon exited with an error at start; see journalctl -u %s",
  ["timeout"] = "the daemon did not finish starting within the unit's TimeoutStartSec; see journalctl -u %s",
  ["core-dump"] = "the daemon dumped core at start; see journalctl -u %s and coredumpctl",
  ["signal"] = "the daemon was killed by a signal at start; see journalctl -u %s",
  ["watchdog"] = "the daemon's watchdog expired; see journalctl -u %s",
  ["resources"] = "systemd could not set up the unit (resources); see journalctl -u %s",
}

--- What systemd's Result of a unit that is not running says (systemd.service(5), "Result"): why
-- it stopped, for `status` of a stopped unit (issue 32 item 8). "success" is no failure.
M.RESULT_MEANING = {
  ["success"] = "stopped cleanly: by systemctl stop, a policy or a clean exit of the daemon; not a crash",
  ["exit-code"] = "the daemon exited with a non-zero code",
  ["signal"] = "the daemon was killed by a signal",
  ["core-dump"] = "the daemon dumped core",
  ["timeout"] = "a start or stop took longer than the unit's timeout",
  ["watchdog"] = "the daemon's watchdog expired",
  ["start-limit-hit"] = "started more than StartLimitBurst times within StartLimitIntervalSec; systemctl "
    .. "reset-failed clears it",
  ["resources"] = "systemd could not set up the unit's resources",
  ["oom-kill"] = "the kernel's OOM killer ended the daemon",
  ["exec-condition"] = "an ExecCondition= of the unit said not to run",
}

--- The unit's Result after a failed job, named with its recovery.
-- @param ctx table policy context
-- @return string result (systemd's Result property, "unknown" when the query fails), string text
function M.unit_result(ctx)
  local unit = ctx.settings.unit
  local props = ctx.host.unit(unit)
  local result = props and props.result or "unknown"
  local hint = M.RESULT_HINTS[result]
  local text = "unit Result " .. tostring(result)
  if hint then text = text .. ": " .. string.format(hint, unit) end
  return result, text
end

--- Run one start/restart job; a failed job names the unit's Result and quotes what the daemon said
-- (C50: its last error line since `mark`, and who holds the IMEX session for NV_ERR_IN_USE;
-- imexguard.daemonlog). After start-limit-hit, with
-- reset_failed_retry (default true), one reset-failed and one more job "start" (never "restart":
-- a daemon that became current meanwhile is left alone), within the run's deadline; not when this
-- run has already reset the unit (at most one reset-failed and one retry per run, C26).
-- @param verb string "start" or "restart"
-- @param reset_done boolean|nil true: this run already reset-failed the unit before the job
-- @param mark table|nil daemonlog.mark's, taken before the job (nil: nothing is quoted)
-- @return true, or nil, outcome, message
function M.unit_start_job(ctx, verb, reset_done, mark)
  local s, host = ctx.settings, ctx.host
  local res, err, code = host.unit_job(s.unit, verb, s.start_timeout)
  if res == "done" then return true end
  if code == "deadline" then
    return fail("deadline-exceeded", "node %s: systemd %s of %s: %s", node_name(ctx), verb, s.unit,
      tostring(err))
  end
  local result, text = M.unit_result(ctx)
  if result == "start-limit-hit" and not reset_done and base.setting(ctx, "reset_failed_retry", false) then
    local ok, rerr = host.unit_reset_failed(s.unit)
    if ok then
      host.log("warning", one_line(string.format("node %s: %s of %s hit the unit's start limit; "
        .. "reset-failed and one more start (reset_failed_retry)", node_name(ctx), verb, s.unit)))
      local res2, err2, code2 = host.unit_job(s.unit, "start", s.start_timeout)
      if res2 == "done" then return true end
      local result2, text2 = M.unit_result(ctx)
      return fail(by_code(code2, "service-failed"), "node %s: systemd start of %s after reset-failed "
        .. "(reset_failed_retry) failed too: %s (%s); %s%s", node_name(ctx), s.unit, tostring(code2 or res2),
        tostring(err2), result2 == "unknown" and text or text2, M.daemon_said(ctx, mark, code2))
    end
    text = text .. "; reset-failed failed: " .. tostring(rerr)
  end
  return fail(by_code(code, "service-failed"), "node %s: systemd %s of %s failed (%s): %s%s%s",
    node_name(ctx), verb, s.unit, tostring(code or res), text, base.root_hint(host, code, err),
    M.daemon_said(ctx, mark, code))
end

--- What the daemon said after a failed start (imexguard.daemonlog.explain since `mark`), "" when
-- there is no mark, nothing was found, or the run's deadline ended the job (nothing more is read).
-- @param ctx table policy context
-- @param mark table|nil daemonlog.mark's
-- @param code string|nil the failed job's code
-- @return string "; the daemon's last error line (...): '...'..." or ""
function M.daemon_said(ctx, mark, code)
  if not mark or code == "deadline" then return "" end
  return daemonlog.explain(ctx, mark, ctx.host.unit(ctx.settings.unit))
end

--- Step 7: (re)start the unit and record what it runs (state.record_start): the new invocation ID
-- and the exact bytes of the node list and of config.cfg (read just before the start) it was
-- started with; the job's registry entry (from begin_change) gets the invocation ID. Saving that
-- is best effort (a warning): the job is already registered. The record of the change in progress
-- stays until the prolog ends (step 9b): a run killed during the health wait is an interrupted
-- prolog too. A failed unit is reset-failed before its start only with
-- reset_failed_retry (it clears the start-limit counter, so it is the site's call). A start is
-- refused when another process holds the command port (M.check_port_owner). A failed start quotes
-- the daemon's own last error line (C50, imexguard.daemonlog: a mark is taken before the job).
-- @param want table the desired list (bytes, config_path)
-- @param a table the assessment (assess_daemon: action "start" or "restart", reset_failed)
-- @param st table state (updated in place and saved)
-- @param info table|nil from applies (a start checks the command port)
-- @return true and the new props (nil when systemd did not answer after the job), or nil, outcome,
--   message
function M.restart(ctx, want, a, st, info)
  local s, host = ctx.settings, ctx.host
  if info and a.action == "start" then
    local ok, o, m = M.check_port_owner(ctx, info, a.unit)
    if not ok then return nil, o, m end
  end
  local reset_done = false
  if a.reset_failed and base.setting(ctx, "reset_failed_retry", false) then
    local ok, err = host.unit_reset_failed(s.unit)
    reset_done = true
    if not ok then host.log("warning", one_line("reset-failed of " .. s.unit .. ": " .. tostring(err))) end
  end
  local verb = a.action == "restart" and "restart" or "start"
  local cfg_text = host.read(want.config_path or s.imex_config, base.MAX_FILE)
  local mark = daemonlog.mark(ctx, info and info.cfg or want.cfg)
  local jok, jo, jm = M.unit_start_job(ctx, verb, reset_done, mark)
  if not jok then return nil, jo, jm end
  local props = host.unit(s.unit)
  if props and props.active_state ~= "active" and props.active_state ~= "activating"
    and props.active_state ~= "reloading" then
    local _, text = M.unit_result(ctx)
    return fail("service-failed", "node %s: %s is %s right after %s: %s%s", node_name(ctx), s.unit,
      tostring(props.active_state), verb, text, daemonlog.explain(ctx, mark, props))
  end
  local id = base.job_id(ctx)
  state.record_start(st, { nodes = want.bytes, config = cfg_text or nil, job = id,
    invocation_id = props and props.invocation_id or nil,
    started_us = props and props.exec_main_start_us or nil })
  local entry = registry.find(st, id)
  if entry and entry.invocation_id == "" and props and props.invocation_id then
    entry.invocation_id = props.invocation_id
  end
  local ok, serr = state.save(host, s, st)
  if not ok then host.log("warning", one_line("state file not updated: " .. tostring(serr))) end
  return true, props
end

return M
