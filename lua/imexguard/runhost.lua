-- SPDX-License-Identifier: Apache-2.0
--- The host tables a run's policy sees in place of the primitives (imexguard.driver's prepare): one
-- that counts what the run did to the unit (the metrics and the final line) and one that remembers
-- the unit's last properties (the bookkeeping after the outcome). Loaded on every run.
local M = {}

-- A read-only view of `host` with a protected metatable, like the host module it stands for: the
-- primitives of `over` first, then host's own.
local function view(host, over, iter)
  return setmetatable({}, {
    __index = function(_, k)
      local f = over[k]
      if f ~= nil then return f end
      return host[k]
    end,
    __newindex = function(_, k)
      error(string.format('cannot set imexguard.host.%s: the table is read-only in the sandbox',
        tostring(k)), 2)
    end,
    __pairs = iter,
    __metatable = 'the metatable of a host object is protected',
  })
end

--- SIGUSR1 as host.unit_kill takes it: the nudge's signal (imexguard.nudge.SIGUSR1; driver_spec
-- checks that they agree; a run does not load that module on every run).
M.SIGUSR1 = 10

--- A host table that counts the unit's starts and restarts of this run (run.restarts: the metrics'
-- imexguard_restarts_total), the nudges (run.nudges: SIGUSR1 that host.unit_kill delivered to a
-- unit, imexguard.nudge, and the slot map's switches of membership = "slots"; the final line's
-- `nudges=N` and imexguard_nudges_total) and the slot map's writes in place (run.map_writes:
-- imexguard_slot_map_writes_total). Every other primitive is the real one.
-- @param real table the primitives
-- @param run table the run (gets restarts = integer, nudges = integer, map_writes = integer)
-- @return table host
function M.counting(real, run)
  run.restarts, run.nudges, run.map_writes = 0, 0, 0
  if type(real.unit_job) ~= 'function' then return real end
  local function unit_job(name, verb, ...)
    local r = table.pack(real.unit_job(name, verb, ...))
    if r[1] == 'done' and (verb == 'start' or verb == 'restart') then run.restarts = run.restarts + 1 end
    return table.unpack(r, 1, r.n)
  end
  local function unit_kill(name, signal, ...)
    local r = table.pack(real.unit_kill(name, signal, ...))
    if r[1] == true and signal == M.SIGUSR1 then run.nudges = run.nudges + 1 end
    return table.unpack(r, 1, r.n)
  end
  -- membership = "slots": the slot map's switches written in place (imexguard.steps.slots)
  local function write_in_place(path, ...)
    local r = table.pack(real.write_in_place(path, ...))
    if r[1] == true then run.map_writes = (run.map_writes or 0) + 1 end
    return table.unpack(r, 1, r.n)
  end
  local counted = { unit_job = unit_job, unit_kill = type(real.unit_kill) == 'function' and unit_kill or nil,
    write_in_place = type(real.write_in_place) == 'function' and write_in_place or nil }
  return view(real, counted, function() return next, real, nil end)
end

--- A host table whose unit query remembers the last properties of the IMEX unit (run.unit_props):
-- what the bookkeeping after the outcome reads (runrecord.save_signals: the node condition, the
-- restart count) without asking systemd again. Every other primitive is `host`'s own.
-- @param host table the primitives (or the counting host, or a dry run's recorders)
-- @param run table the run (gets unit_props)
-- @return table host
function M.watching(host, run)
  if type(host.unit) ~= 'function' then return host end
  local unit = host.unit
  local function watched(name, ...)
    local props, err, code = unit(name, ...)
    if props and name == run.settings.unit then run.unit_props = props end
    return props, err, code
  end
  return view(host, { unit = watched }, function() return pairs(host) end)
end

--- The primitives with side effects: a dry run records them (imexguard.driver), a signals-only
-- host refuses all but unit_kill (M.signals_only).
M.SIDE_EFFECTS = {
  'write_atomic', 'write_in_place', 'remove_temps', 'mknod_char', 'mkdir', 'lock', 'unit_job',
  'unit_reset_failed', 'unit_kill', 'unit_start_transient',
}

--- The host table of a command that may only signal (imexguard.commands' signals_only: the
-- watcher): the primitives, with every side effect but host.unit_kill replaced by a function
-- that raises naming it, so that nothing its policy does can write, lock, start or restart.
-- @param real table the primitives (imexguard.host, or M.counting's view of them)
-- @param command string the command (for the message)
-- @return table host
function M.signals_only(real, command)
  local refused = {}
  for _, name in ipairs(M.SIDE_EFFECTS) do
    if name ~= 'unit_kill' then
      refused[name] = function()
        error(string.format('imexguard %s changes nothing but sends signals: host.%s refused', command,
          name), 2)
      end
    end
  end
  return view(real, refused, function() return next, real, nil end)
end

return M
