-- SPDX-License-Identifier: Apache-2.0
--- The fake host's clock (src/clock.c's primitives): a virtual monotonic clock that only moves when
-- a primitive spends time, a wall clock that follows it from base.WALL0, and the run's
-- deadline. Test infrastructure of imexguard.testing.
local base = require "imexguard.testing.base"

local M = {}

--- Add the clock primitives to a fake host.
-- @param h table the fake host (gets now, wallclock, remaining, sleep, set_deadline, advance)
-- @param w table the host's shared world (gets wall, wall_us, remaining, spend, advance_to; needs rec)
-- @param opts table testing.host options (clock = monotonic start in seconds (1000), deadline =
--   seconds of budget (120))
function M.install(h, w, opts)
  local mono = opts.clock or 1000
  local mono0 = mono
  local deadline_at = mono + (opts.deadline or 120)
  function w.wall() return base.WALL0 + (mono - mono0) end
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
end

return M
