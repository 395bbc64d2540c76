-- SPDX-License-Identifier: Apache-2.0
--- The progress of a long wait, told at level info every few seconds, as systemd tells a slow
-- start ("A start job is running for nvidia-imex.service (15s / 1min 30s)"): what is awaited, the
-- time waited and the time it may take in all. The waits of a run (the health wait, the node lock,
-- the conflict wait, systemd's start job; src/unit.c tells that one the same way, IG_PROGRESS_EVERY)
-- are otherwise silent at info, and their debug lines are written only when what they saw changed,
-- not once per poll.
--
-- Pure Lua: the caller passes the host (now, log). No side effect but host.log.
-- @module imexguard.progress
local one_line = require("imexguard.text").one_line

local M = {}

--- Seconds between two progress lines of one wait (src/unit.c: IG_PROGRESS_EVERY, the same).
M.EVERY = 5

--- A duration as systemd writes it: "15s", "1min 30s", "2min" (whole seconds, rounded down), and
-- "0.5s" below one second.
-- @param s number seconds (>= 0)
-- @return string
function M.duration(s)
  s = math.max(0, tonumber(s) or 0)
  if s < 1 and s > 0 then return string.format("%.1fs", s) end
  s = math.floor(s)
  if s < 60 then return string.format("%ds", s) end
  local m, r = s // 60, s % 60
  return r == 0 and string.format("%dmin", m) or string.format("%dmin %ds", m, r)
end

local Wait = {}
Wait.__index = Wait

--- A wait that tells its progress.
-- @param host table the primitives (now, log)
-- @param what string what is awaited ("the domain's health (3 nodes)", "node lock /run/imexguard/lock")
-- @param total number seconds the wait may take in all (its timeout, bounded by the budget)
-- @return object with :tick(detail) and :debug(line)
function M.new(host, what, total)
  local now = host.now()
  return setmetatable({ host = host, what = what, total = total, start = now, next = now + M.EVERY },
    Wait)
end

--- The progress line: "waiting for WHAT (15s / 1min 30s)" and ": DETAIL" when given.
-- @param detail string|nil what the wait saw last
-- @return string
function Wait:line(detail)
  local line = string.format("waiting for %s (%s / %s)", self.what, M.duration(self.host.now() - self.start),
    M.duration(self.total))
  if detail and detail ~= "" then line = line .. ": " .. detail end
  return one_line(line)
end

--- Call once per poll: logs the progress line at info once EVERY seconds have passed since the
-- start or the last line.
-- @param detail string|nil what the wait saw last (appended to the line)
-- @return boolean true when a line was logged
function Wait:tick(detail)
  local now = self.host.now()
  if now < self.next then return false end
  self.next = now + M.EVERY
  self.host.log("info", self:line(detail))
  return true
end

--- Log `line` at debug, but not again while `key` stays the same (the polls of a wait that sees
-- the same answer: one line, not one per poll).
-- @param line string
-- @param key string|nil what decides that two lines are the same (default: the line itself; a
--   line that carries a poll count or a time passes what it saw)
-- @return boolean true when logged
function Wait:debug(line, key)
  key = key or line
  if key == self.last_debug then return false end
  self.last_debug = key
  self.host.log("debug", line)
  return true
end

return M
