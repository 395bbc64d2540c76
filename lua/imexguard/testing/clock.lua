-- SPDX-License-Identifier: Apache-2.0
--- The fake host's clock (src/clock.c's primitives): a virtual monotonic clock that only moves when
-- a primitive spends time, a wall clock that follows it from base.WALL0 (or the option wallclock;
-- settable), the local time in a fixed zone (options utc_offset, zone), and the run's deadline.
-- Test infrastructure of imexguard.testing.
local base = require("imexguard.testing.base")

local M = {}

-- Days since 1970-01-01 of a civil date (H. Hinnant's days_from_civil; proleptic Gregorian).
local function days_from_civil(y, m, d)
  y = m <= 2 and y - 1 or y
  local era = y // 400
  local yoe = y - era * 400
  local doy = (153 * (m > 2 and m - 3 or m + 9) + 2) // 5 + d - 1
  return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
end

-- The civil date of a day number (days since 1970-01-01): year, month, day.
local function civil_from_days(z)
  z = z + 719468
  local era = z // 146097
  local doe = z - era * 146097
  local yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
  local doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
  local mp = (5 * doy + 2) // 153
  local d = doy - (153 * mp + 2) // 5 + 1
  local m = mp < 10 and mp + 3 or mp - 9
  return yoe + era * 400 + (m <= 2 and 1 or 0), m, d
end

--- host.localtime's table for `t` seconds since the epoch in a fixed zone (no daylight saving):
-- what the real primitive (src/clock.c, localtime_r) gives with TZ set to that zone.
-- @param t number seconds since the epoch
-- @param offset integer seconds east of UTC
-- @param zone string its abbreviation
-- @return table {year, month, day, hour, min, sec, wday (1 = Sunday), yday, isdst, utc_offset, zone}
function M.localtime(t, offset, zone)
  local s = math.floor(t) + offset
  local days, rest = s // 86400, s % 86400
  local y, m, d = civil_from_days(days)
  return { year = y, month = m, day = d, hour = rest // 3600, min = rest % 3600 // 60, sec = rest % 60,
    wday = (days + 4) % 7 + 1, yday = days - days_from_civil(y, 1, 1) + 1, isdst = false,
    utc_offset = offset, zone = zone }
end

--- Add the clock primitives to a fake host.
-- @param h table the fake host (gets now, wallclock, localtime, remaining, sleep, set_deadline,
--   advance, set_wallclock)
-- @param w table the host's shared world (gets wall, wall_us, remaining, spend, advance_to; needs rec)
-- @param opts table testing.host options (clock = monotonic start in seconds (1000), deadline =
--   seconds of budget (120), wallclock = the wall clock at the start, seconds since the epoch
--   (base.WALL0), utc_offset = the local time zone's offset in seconds east of UTC (0), zone = its
--   abbreviation ("UTC"))
function M.install(h, w, opts)
  local mono = opts.clock or 1000
  local mono0 = mono
  local deadline_at = mono + (opts.deadline or 120)
  local wall0 = opts.wallclock or base.WALL0
  local offset, zone = math.tointeger(opts.utc_offset or 0), opts.zone or "UTC"
  assert(offset, "testing.host: utc_offset must be an integer number of seconds")
  function w.wall() return wall0 + (mono - mono0) end
  function w.wall_us() return math.floor(w.wall() * 1e6) end
  function w.remaining() return math.max(0, deadline_at - mono) end
  --- Spend up to `t` seconds; returns "deadline" when the budget cut it short, else nil.
  function w.spend(t)
    if mono + t > deadline_at then
      mono = deadline_at
      return "deadline"
    end
    mono = mono + t
    return nil
  end
  --- Move the clock forward to monotonic time `t` (never back).
  function w.advance_to(t) mono = math.max(mono, t) end

  function h.now() return mono end
  function h.wallclock() return w.wall() end
  function h.localtime(t)
    if t ~= nil and (type(t) ~= "number" or t ~= t or t == math.huge or t == -math.huge) then
      error("bad argument #1 to 'localtime' (seconds must be a finite number)", 2)
    end
    return M.localtime(t or w.wall(), offset, zone)
  end
  function h.remaining() return w.remaining() end
  function h.sleep(t)
    w.rec("sleep", t)
    h.sleeps[#h.sleeps + 1] = t
    if w.spend(t) then return nil, "sleep cut short by the run's deadline", "deadline" end
    return true
  end
  function h.set_deadline(t) deadline_at = mono + t; return true end
  --- Let `t` seconds pass (a helper, not a primitive: ignores the deadline).
  function h.advance(t) mono = mono + t end
  --- Set the wall clock to `t` seconds since the epoch now (a helper, not a primitive; the
  -- monotonic clock does not move: a clock step, as NTP or an admin's `date` makes one).
  function h.set_wallclock(t) wall0 = t - (mono - mono0) end
end

return M
