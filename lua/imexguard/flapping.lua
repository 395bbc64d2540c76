-- SPDX-License-Identifier: Apache-2.0
--- Flapping: how often systemd restarted the IMEX unit by itself (its `Restart=` setting) in the
-- last `flapping_window` seconds, counted from the unit's `NRestarts` between runs and kept in
-- state_dir/unit-restarts.json so that the count survives from one run to the next.
--
-- systemd counts a service's automatic restarts in `NRestarts` (org.freedesktop.systemd1(5),
-- systemd 235+) and resets the count to 0 on `reset-failed` (service_reset_failed) and on the
-- next start after the service ended without an automatic restart (a stop, a restart by hand, a
-- failure past the start limit: flush_n_restarts in systemd's src/core/service.c). So the count
-- alone cannot tell a reset from a restart; the main process's start time
-- (`ExecMainStartTimestamp`) can: a reset-failed starts no process, every restart starts one. Each
-- run observes the unit (host.unit's n_restarts and exec_main_start_us) and adds what happened since
-- the last observation:
--   the same main process (same start time): no restart, whatever the count did (a reset-failed);
--   a new main process and a higher count: count - last count restarts (a lower bound: a reset in
--     between, then more restarts than before, reads as fewer);
--   a new main process and a count that is not higher: the count was reset (a start by hand or by
--     imexguard, which is no automatic restart), and every restart it shows came after: count.
--   the same main process and a higher count: a restart on its way (systemd raises NRestarts when it
--     queues the restart job, service_enter_restart; ExecMainStartTimestamp changes only when the
--     new main process is known, for the recommended Type=forking once the daemon has forked, which
--     may take long): nothing yet, and the record keeps the count it had, so that the observation
--     that sees the new process counts these restarts once (not the whole count, as after a reset).
-- The restarts of one observation are dated at the new main process's start (the last of them).
--
-- Every restart starts a new IMEX instance: its peers drop every memory import of the old one at
-- once (docs/design.md, "IMEX facts"), so a flapping unit breaks its jobs over and over even where
-- each instance comes up READY. `health` makes it this node's outcome `unit-flapping`, `status`
-- shows the count, the metrics count the restarts (imexguard_unit_restarts_total).
local cjson = require("cjson")

local M = {}

--- The outcome of a flapping unit (imexguard.outcomes).
M.OUTCOME = "unit-flapping"

--- Largest record read (bytes).
M.MAX_BYTES = 65536

--- Restarts kept in the record at most (the oldest go first).
M.MAX_EVENTS = 256

--- What every report of a restart says (one fact, one place).
M.NEW_INSTANCE = "each restart is a new IMEX instance, and its peers drop every memory import of the old one"

--- Path of the record.
-- @param settings table validated settings (state_dir)
-- @return string path
function M.path(settings)
  return settings.state_dir .. "/unit-restarts.json"
end

-- A decimal string of microseconds as an integer, or nil.
local function us(v)
  if type(v) == "string" and v:match("^%d+$") and #v <= 18 then return math.tointeger(tonumber(v)) end
  if math.type(v) == "integer" and v >= 0 then return v end
  return nil
end

--- Read the record.
-- @param host table the primitives (read)
-- @param settings table validated settings
-- @return table record {unit, n_restarts, main_start_us, total, events = {{t_us, n}...}}, or nil (no
--   record yet, or one that is not readable as such: the next observation starts a new one), and
--   on a record that does not parse a second value naming the file
function M.load(host, settings)
  local path = M.path(settings)
  local text, err, code = host.read(path, M.MAX_BYTES)
  if not text then
    if code == "ENOENT" then return nil end
    return nil, string.format("%s unreadable (%s)", path, tostring(err))
  end
  local ok, t = pcall(cjson.decode, text)
  if not ok or type(t) ~= "table" then t = {} end
  -- lua-cjson reads every number as a float
  local n, total = math.tointeger(t.n_restarts), math.tointeger(t.total)
  if not (n and total and us(t.main_start_us)) or type(t.unit) ~= "string" or type(t.events) ~= "table" then
    return nil, string.format("%s is not a record of the unit's restarts", path)
  end
  local rec = { unit = t.unit, n_restarts = n, main_start_us = us(t.main_start_us), total = total,
    events = {} }
  for _, e in ipairs(t.events) do
    local at, k = type(e) == "table" and us(e[1]), type(e) == "table" and math.tointeger(e[2])
    if at and k and k > 0 then rec.events[#rec.events + 1] = { at, k } end
  end
  return rec
end

--- The record's text (one line of JSON; microseconds as decimal strings, as the state file keeps
-- them: lua-cjson writes 14 significant digits).
-- @param rec table record
-- @return string
function M.encode(rec)
  local ev = {}
  for i, e in ipairs(rec.events) do ev[i] = string.format('["%d",%d]', e[1], e[2]) end
  return string.format('{"unit":%s,"n_restarts":%d,"main_start_us":"%d","total":%d,"events":[%s]}\n',
    cjson.encode(rec.unit), rec.n_restarts, rec.main_start_us, rec.total, table.concat(ev, ","))
end

-- How many automatic restarts happened between the record and the unit now (the module's rules).
local function restarts_since(rec, n, start_us)
  if start_us == rec.main_start_us then return 0 end -- the same process: no restart (a reset-failed)
  if n > rec.n_restarts then return n - rec.n_restarts end
  return n -- the count was reset by a start that was no automatic restart
end

--- The record after one observation of the unit (pure: nothing is read or written).
-- @param rec table|nil the record (M.load), nil when there is none
-- @param unit string the unit's name (settings.unit): a record of another unit starts again
-- @param props table the unit's properties (host.unit: n_restarts, exec_main_start_us)
-- @param now_us integer wall clock, microseconds
-- @param window number seconds: restarts older than this are dropped from the record's events
-- @return table the new record (nil when props carry no NRestarts: not a service, or an older
--   systemd), integer the restarts this observation found
function M.observe(rec, unit, props, now_us, window)
  local n = props and math.tointeger(props.n_restarts)
  local start = props and math.tointeger(props.exec_main_start_us)
  if not n or not start then return rec, 0 end
  local new = { unit = unit, n_restarts = n, main_start_us = start, total = 0, events = {} }
  local found = 0
  if rec and rec.unit == unit then
    found = restarts_since(rec, n, start)
    new.total = rec.total + found
    local oldest = now_us - math.floor(window * 1e6)
    for _, e in ipairs(rec.events) do
      if e[1] >= oldest then new.events[#new.events + 1] = e end
    end
    if found > 0 then new.events[#new.events + 1] = { start, found } end
    -- a restart queued, its process not known yet: counted when it is (the module's rules)
    if start == rec.main_start_us and n > rec.n_restarts then new.n_restarts = rec.n_restarts end
    while #new.events > M.MAX_EVENTS do table.remove(new.events, 1) end
  end
  return new, found
end

--- The restarts of the record within the window.
-- @param rec table|nil record
-- @param now_us integer wall clock, microseconds
-- @param window number seconds
-- @return integer
function M.count(rec, now_us, window)
  local c, oldest = 0, now_us - math.floor(window * 1e6)
  for _, e in ipairs(rec and rec.events or {}) do
    if e[1] >= oldest then c = c + e[2] end
  end
  return c
end

-- The window in words: "10 min", "90 s".
local function window_text(window)
  if window >= 60 and window % 60 == 0 then return string.format("%d min", window // 60) end
  return string.format("%g s", window)
end

--- The judgement of a record: flapping when at least `flapping_restarts` restarts fell in the last
-- `flapping_window` seconds.
-- @param rec table|nil record
-- @param settings table validated settings (unit, flapping_restarts, flapping_window)
-- @param now_us integer wall clock, microseconds
-- @return table {flapping = boolean, count = integer, window = seconds, threshold = integer,
--   total = integer, text = one line (the unit, the count, the window, the rule and what a restart
--   does), short = the same for the status line of the unit's restarts (without the unit's name)}
function M.judge(rec, settings, now_us)
  local window, threshold = settings.flapping_window, settings.flapping_restarts
  local c = M.count(rec, now_us, window)
  local r = { flapping = c >= threshold, count = c, window = window, threshold = threshold,
    total = rec and rec.total or 0 }
  r.text = string.format("%s restarted %d time%s in the last %s (flapping from %d: flapping_restarts in "
    .. "flapping_window = %g s); %s", settings.unit, c, c == 1 and "" or "s", window_text(window), threshold,
    window, M.NEW_INSTANCE)
  r.short = string.format("%d by systemd in the last %s (flapping from %d)%s", c, window_text(window),
    threshold, c > 0 and "; a restart is a new instance: its peers drop every import" or "")
  return r
end

--- A judgement (M.judge's result, ctx.flapping) on status' line "restarts": "(not counted)" without
-- one, else its short text, "flapping: " first when it flaps.
-- @param r table|nil
-- @return string
function M.line(r)
  if type(r) ~= "table" then return "(not counted)" end
  return (r.flapping and "flapping: " or "") .. tostring(r.short)
end

--- A judgement as status' JSON key "restarts" (docs/json.md): {flapping, restarts, window, threshold,
-- total}, or nil.
-- @param r table|nil
-- @return table|nil an imexguard.json object
function M.json(r)
  if type(r) ~= "table" then return nil end
  return require("imexguard.json").object():set("flapping", r.flapping):set("restarts", r.count)
    :set("window", r.window):set("threshold", r.threshold):set("total", r.total)
end

--- Observe the unit and judge it, without saving (health, status: the record is saved after the
-- run, runrecord.save_signals).
-- @param host table the primitives (read, wallclock)
-- @param settings table validated settings
-- @param props table|nil the unit's properties (host.unit)
-- @return table M.judge's result, or nil without props or NRestarts
function M.verdict(host, settings, props)
  if not (props and props.n_restarts) then return nil end
  local now_us = math.floor(host.wallclock() * 1e6)
  local rec = M.observe(M.load(host, settings), settings.unit, props, now_us, settings.flapping_window)
  return M.judge(rec, settings, now_us)
end

--- Observe the unit and save the record when it changed (after a run; a write that fails is
-- returned, never raised).
-- @param host table the primitives (read, write_atomic, wallclock)
-- @param settings table validated settings
-- @param props table the unit's properties (host.unit)
-- @return table|nil M.judge's result (nil without NRestarts); on a failed write also the write's
--   message and code ("ENOENT": no state_dir)
function M.record(host, settings, props)
  local now_us = math.floor(host.wallclock() * 1e6)
  local old = M.load(host, settings)
  local rec = M.observe(old, settings.unit, props, now_us, settings.flapping_window)
  if not rec then return nil end
  local text = M.encode(rec)
  local verdict = M.judge(rec, settings, now_us)
  if not old or M.encode(old) ~= text then
    local ok, err, code = host.write_atomic(M.path(settings), text, tonumber("644", 8))
    if not ok then return verdict, err, code end
  end
  return verdict
end

return M
