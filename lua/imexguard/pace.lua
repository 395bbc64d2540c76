-- SPDX-License-Identifier: Apache-2.0
--- When the health wait polls the ctl next: soon after the domain's answer changed, less often
-- while it stays the same, and never more often on average than polling every poll_interval.
--
-- A domain comes UP through a run of changing answers (peers restart with the job's node list,
-- the node map mismatches clear, connections come up one by one), so the moment UP is likely is
-- right after a change; an answer that has not changed for a while is unlikely to change at the
-- next instant. The pace spends its polls accordingly:
-- * the next poll is due `gap` seconds after the last answer, where `gap` is half the time the
--   answer has stayed the same, at least FAST of poll_interval and at most SLOW of it;
-- * every poll costs a token from a bucket refilled at one token per (poll_interval + the mean
--   duration of a ctl call): the cadence of polling every poll_interval, which the wait did
--   before. The bucket holds at most BURST tokens and starts with one. So over any stretch of
--   the wait the ctl runs no more often than fixed polling would have run it, plus at most BURST.
-- Pure: the caller passes the times (seconds, the host's monotonic clock).
local M = {}

--- Shortest gap after a change, as a fraction of poll_interval.
M.FAST = 0.1
--- Longest gap while nothing changes, as a multiple of poll_interval.
M.SLOW = 2
--- Tokens the bucket holds at most.
M.BURST = 4

local Pace = {}
Pace.__index = Pace

--- A pace for a wait that starts at `now`.
-- @param interval number seconds: poll_interval (> 0)
-- @param now number seconds: the start of the wait
-- @return pace object
function M.new(interval, now)
  return setmetatable({ interval = interval, t = now, tokens = 1, changed = now, key = nil,
    took = 0, calls = 0 }, Pace)
end

--- Seconds of one refill: poll_interval plus the mean duration of a ctl call so far.
function Pace:period()
  return self.interval + (self.calls > 0 and self.took / self.calls or 0)
end

--- Refill the bucket up to `now`.
function Pace:refill(now)
  self.tokens = math.min(M.BURST, self.tokens + (now - self.t) / self:period())
  self.t = now
end

--- A poll was made: it started at `started` and its answer, in state `key` (any value compared
-- with ==: equal keys mean the same state), came at `now`.
-- @param started number seconds
-- @param now number seconds
-- @param key any the answer's state
function Pace:polled(started, now, key)
  self:refill(now)
  self.tokens = self.tokens - 1
  self.calls, self.took = self.calls + 1, self.took + math.max(0, now - started)
  if key ~= self.key then self.key, self.changed = key, now end
end

--- Something changed at `now` that no answer shows yet (the wait nudged the daemon,
-- imexguard.nudge): the next poll is due FAST of poll_interval after it, as after a change of the
-- answer (the bucket still applies).
-- @param now number seconds
function Pace:expect_change(now)
  self.changed = now
end

--- Seconds from `now` (the last answer) until the next poll is due: the gap, or longer while the
-- bucket has no whole token.
-- @param now number seconds
-- @return number (> 0)
function Pace:delay(now)
  self:refill(now)
  local same = now - self.changed
  local gap = math.min(math.max(same / 2, M.FAST * self.interval), M.SLOW * self.interval)
  local affordable = math.max(0, 1 - self.tokens) * self:period()
  return math.max(gap, affordable)
end

return M
