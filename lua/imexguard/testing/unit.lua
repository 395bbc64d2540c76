-- SPDX-License-Identifier: Apache-2.0
--- The fake host's systemd unit (src/unit.c's primitives over sd-bus): unit (the properties),
-- unit_job (start, restart, try-restart, stop, waiting for the job's result), unit_reset_failed,
-- unit_kill, unit_start_transient (recorded: the prolog's watcher), with scripted queries and job
-- results. Test infrastructure of imexguard.testing.
local base = require("imexguard.testing.base")
local nodelist = require("imexguard.nodelist")

local M = {}

--- Properties of a unit that is not installed.
local function not_found()
  return { load_state = "not-found", unit_file_state = "", active_state = "inactive", sub_state = "dead",
    result = "success", main_pid = 0, invocation_id = "", exec_main_start_us = 0, active_enter_us = 0,
    n_restarts = 0 }
end

--- Add the unit primitives to a fake host.
-- @param h table the fake host (gets unit, unit_job, unit_reset_failed, unit_kill,
--   unit_start_transient, unit_props and the helper daemon_nodes; needs kills, transients, now)
-- @param w table the host's shared world (gets unit, daemon_nodes, new_invocation; needs rec,
--   wall_us, spend, files)
-- @param opts table testing.host options (unit, unit_script, restart, daemon_nodes, any_unit,
--   unit_kill = a code: every unit_kill fails with it, or function(name, signal, timeout);
--   unit_start_transient = likewise a code or function(name, spec, timeout); default: true)
function M.install(h, w, opts)
  local serial = 0
  function w.new_invocation()
    serial = serial + 1
    return string.format("%032x", 0xabc000 + serial)
  end
  local unit
  if opts.unit == false then
    unit = not_found()
  else
    unit = { load_state = "loaded", unit_file_state = "enabled", active_state = "active",
      sub_state = "running",
      result = "success", main_pid = 4242, invocation_id = w.new_invocation(),
      exec_main_start_us = w.wall_us() - 1800e6, active_enter_us = w.wall_us() - 1800e6, n_restarts = 0 }
    for k, v in pairs(opts.unit or {}) do unit[k] = v end
  end
  w.unit, h.unit_props = unit, unit
  local nodes = w.files[base.NODES]
  w.daemon_nodes = opts.daemon_nodes or (nodes and nodelist.lines(nodes.data)) or {}
  function h.daemon_nodes() return w.daemon_nodes end
  local unit_script = opts.unit_script and base.copy(opts.unit_script) or {}
  function h.unit(name)
    w.rec("unit", name)
    local step = table.remove(unit_script, 1)
    if type(step) == "string" then return nil, "unit " .. name .. ": query " .. step, step end
    if type(step) == "table" then for k, v in pairs(step) do unit[k] = v end end
    if name ~= base.UNIT and not opts.any_unit then return not_found() end
    return base.copy(unit)
  end
  function h.unit_reset_failed(name)
    w.rec("unit_reset_failed", name)
    if unit.active_state == "failed" then unit.active_state, unit.result = "inactive", "success" end
    return true
  end
  local kill = opts.unit_kill
  local function killed(name, signal, timeout)
    if type(kill) == "function" then return kill(name, signal, timeout) end
    if kill then return nil, string.format("kill %s: the call failed (%s)", name, kill), kill end
    if unit.main_pid == 0 then
      return nil, string.format("kill %s: org.freedesktop.systemd1.NoSuchProcess: No main process to kill",
        name), "bus"
    end
    return true
  end
  function h.unit_kill(name, signal, timeout)
    w.rec("unit_kill", name, signal, timeout)
    local r = table.pack(killed(name, signal, timeout))
    h.kills[#h.kills + 1] = { unit = name, signal = signal, timeout = timeout, at = h.now(),
      sent = r[1] == true }
    return table.unpack(r, 1, r.n)
  end
  M.install_jobs(h, w, opts)
  M.install_transient(h, w, opts)
end

--- Add unit_start_transient to a fake host (the prolog's watcher): recorded in h.transients, true
-- unless opts.unit_start_transient is a code (every call fails with it) or a function.
-- @param h table the fake host (gets unit_start_transient; needs transients, now)
-- @param w table the host's shared world (needs rec)
-- @param opts table testing.host options
function M.install_transient(h, w, opts)
  local transient = opts.unit_start_transient
  function h.unit_start_transient(name, spec, timeout)
    w.rec("unit_start_transient", name, spec, timeout)
    h.transients[#h.transients + 1] = { name = name, spec = spec, at = h.now() }
    if type(transient) == "function" then return transient(name, spec, timeout) end
    if transient then
      return nil, string.format("start %s: the call failed (%s)", name, transient), transient
    end
    return true
  end
end

--- The unit's state after a start/restart job that ended "done".
-- @param w table world (unit, files, daemon_nodes, new_invocation, wall_us)
-- @param r table the scripted job ({invocation_id, active_state, unit_result})
local function started(w, r)
  local unit = w.unit
  unit.active_state, unit.sub_state, unit.result = "active", "running", "success"
  unit.invocation_id = r.invocation_id or w.new_invocation()
  unit.exec_main_start_us, unit.active_enter_us = w.wall_us(), w.wall_us()
  unit.main_pid = unit.main_pid + 1
  local nodes = w.files[base.NODES]
  w.daemon_nodes = nodes and nodelist.lines(nodes.data) or {}
  if r.active_state and r.active_state ~= "active" then
    unit.active_state, unit.sub_state = r.active_state, r.active_state == "failed" and "failed" or "dead"
    unit.result = r.unit_result or (r.active_state == "failed" and "exit-code" or "success")
    if r.active_state ~= "activating" then unit.main_pid = 0 end
  end
end

--- What the daemon of a start/restart job says (C50): the job gets a new invocation ID (systemd
-- gives every start one, a failed one too), its script's `journal` entries go to the journal as
-- the unit's (_SYSTEMD_UNIT, _SYSTEMD_INVOCATION_ID; imexguard.testing.journal) and its `appends`
-- ({[path] = text}) to those files (LOG_FILE_NAME).
-- @param w table world (unit, new_invocation, journal_add, append)
-- @param name string the unit
-- @param r table the scripted job
local function said(w, name, r)
  if not (r.journal or r.appends) then return end
  w.unit.invocation_id = r.invocation_id or w.new_invocation()
  for _, e in ipairs(r.journal or {}) do
    local c = base.copy(e)
    c.fields = c.fields or { _SYSTEMD_UNIT = name, _SYSTEMD_INVOCATION_ID = w.unit.invocation_id }
    if w.journal_add then w.journal_add(c) end
  end
  for path, text in pairs(r.appends or {}) do w.append(path, text) end
end

--- Add unit_job to a fake host: each job consumes one entry of opts.restart (a table, or a list of
-- them), and records itself in h.jobs.
-- @param h table the fake host (gets unit_job; needs jobs)
-- @param w table the host's shared world (needs unit, rec, spend, new_invocation, wall_us, files,
--   daemon_nodes)
-- @param opts table testing.host options (restart = {result, duration (seconds), unit_result, ...}
--   or a list of them; default: every job is "done" after 0.5 s)
function M.install_jobs(h, w, opts)
  local unit = w.unit
  local script = opts.restart
  if script and script[1] == nil and next(script) ~= nil then script = { script } end
  script = script and base.copy(script) or {}
  function h.unit_job(name, verb, timeout)
    w.rec("unit_job", name, verb, timeout)
    if unit.load_state ~= "loaded" then
      h.jobs[#h.jobs + 1] = { unit = name, verb = verb, result = "bus" }
      return nil, string.format("%s %s: Unit %s not found.", verb, name, name), "bus"
    end
    local r = table.remove(script, 1) or {}
    local result = r.result or "done"
    local job = { unit = name, verb = verb, result = result }
    h.jobs[#h.jobs + 1] = job
    if result == "wait-timeout" then
      local code = w.spend(timeout) and "deadline" or "wait-timeout"
      job.result = code
      return nil, string.format("%s %s: no JobRemoved within %g s", verb, name, timeout), code
    end
    if w.spend(r.duration or 0.5) then
      job.result = "deadline"
      return nil, verb .. " " .. name .. ": the run's deadline passed", "deadline"
    end
    if verb ~= "stop" then said(w, name, r) end
    if result ~= "done" then
      unit.active_state, unit.sub_state, unit.result = "failed", "failed", r.unit_result or "exit-code"
      unit.main_pid = 0
      return nil, string.format("job %s %s finished with result %s", verb, name, result), result
    end
    local starts = verb == "restart" or (verb == "start" and unit.active_state ~= "active")
      or (verb == "try-restart" and unit.active_state == "active")
    if verb == "stop" then
      unit.active_state, unit.sub_state, unit.main_pid = "inactive", "dead", 0
    elseif starts then
      started(w, r)
    end
    return "done"
  end
end

return M
