-- SPDX-License-Identifier: Apache-2.0
--- Soak check 3: lock overlap. Many processes take the node lock (host.lock) in contended rounds;
-- an overlap detector records (pid, inode, enter, exit) of every critical section on the monotonic
-- clock and a shared counter is incremented read-modify-write inside it (a lost update is an
-- overlap too). Probes that try the lock with timeout 0 while it is held must name the holder
-- (pid and owner) on every timeout.
local util = require("soakutil")

local M = {}

-- A worker: arg = lockpath counter rounds record owner-prefix hold (seconds inside the section).
local WORKER = [[
local h = require("imexguard.host")
local path, counter, rounds, rec, prefix = arg[1], arg[2], tonumber(arg[3]), arg[4], arg[5]
local hold = tonumber(arg[6]) or 0
local f = io.open("/proc/self/stat"); local pid = tonumber(f:read("a"):match("^(%d+)")); f:close()
local out = assert(io.open(rec, "w"))
for r = 1, rounds do
  local l, msg, code = h.lock(path, 30, prefix .. " round=" .. r)
  if not l then out:write(string.format("fail pid=%d code=%s msg=%s\n", pid, tostring(code), msg)); break end
  local _, ino = l:inode()
  local t_in = h.now()
  local c = io.open(counter, "r+"); local v = tonumber(c:read("a")) or 0
  c:seek("set"); c:write(string.format("%012d", v + 1)); c:close()
  if hold > 0 then h.sleep(hold) end
  local t_out = h.now()
  out:write(string.format("section pid=%d ino=%d enter=%.9f exit=%.9f\n", pid, ino, t_in, t_out))
  l:unlock()
end
out:close()
]]

-- A prober: tries the lock with timeout arg[4] seconds until arg[2] exists; counts timeouts and
-- how many named the holder (pid in the holder table and the message, owner "worker=...").
local PROBER = [[
local h = require("imexguard.host")
local path, stop, rec, timeout = arg[1], arg[2], arg[3], tonumber(arg[4])
local tries, timeouts, named, unnamed, got, first = 0, 0, 0, 0, 0, nil
while true do
  tries = tries + 1
  local l, msg, code, holder = h.lock(path, timeout, "prober")
  if l then got = got + 1; l:unlock()
  elseif code == "timeout" then
    timeouts = timeouts + 1
    if holder and math.type(holder.pid) == "integer" and holder.pid > 0
      and type(holder.owner) == "string" and holder.owner:match("^worker")
      and msg:find(tostring(holder.pid), 1, true) then
      named = named + 1
    else unnamed = unnamed + 1; first = first or msg end
  else first = first or ("unexpected " .. tostring(code) .. ": " .. tostring(msg)) ; unnamed = unnamed + 1 end
  if tries % 16 == 0 then local s = io.open(stop); if s then s:close(); break end end
end
local o = io.open(rec, "w")
o:write(string.format("tries=%d timeouts=%d named=%d unnamed=%d got=%d\n", tries, timeouts, named,
  unnamed, got))
if first then o:write("first=", first, "\n") end
o:close()
]]

local function sections(text, into, fails)
  for line in text:gmatch("[^\n]+") do
    if line:match("^section") then
      local pid, ino, a, b = line:match("pid=(%d+) ino=(%d+) enter=(%S+) exit=(%S+)")
      into[#into + 1] = { pid = tonumber(pid), ino = tonumber(ino), enter = tonumber(a), exit = tonumber(b) }
    else
      fails[#fails + 1] = line
    end
  end
end

-- Sort by enter; count sections entered before the previous one left, and distinct inodes.
local function overlaps(secs)
  table.sort(secs, function(a, b) return a.enter < b.enter end)
  local n, first, inodes = 0, nil, {}
  local last_exit, last_pid = -math.huge, nil
  for _, s in ipairs(secs) do
    inodes[s.ino] = true
    if s.enter < last_exit then
      n = n + 1
      first = first or string.format("pid %d entered at %.9f before pid %d left at %.9f", s.pid, s.enter,
        last_pid, last_exit)
    end
    if s.exit > last_exit then last_exit, last_pid = s.exit, s.pid end
  end
  local k = 0
  for _ in pairs(inodes) do k = k + 1 end
  return n, first, k
end

-- One phase: `procs` workers x `rounds` sections holding `hold` s, a prober with `probe` s.
-- Returns the sections' summary and the prober's counts.
local function phase(procs, rounds, hold, probe, timeout)
  local dir = util.tmpdir("lock")
  local path, counter, stop = dir .. "/lock", dir .. "/counter", dir .. "/stop"
  util.write(counter, string.format("%012d", 0))
  local pids = {}
  local prober = util.spawn_lua(PROBER, { path, stop, dir .. "/prober.rec", probe })
  for k = 1, procs do
    pids[k] = util.spawn_lua(WORKER,
      { path, counter, rounds, dir .. "/w" .. k .. ".rec", "worker=" .. k, hold }, dir .. "/w" .. k .. ".err")
  end
  local done = util.wait_for(function()
    for _, pid in ipairs(pids) do if util.alive(pid) then return false end end
    return true
  end, timeout, 0.05)
  util.write(stop, "")
  util.wait_for(function() return not util.alive(prober) end, 10)
  for _, pid in ipairs(pids) do util.kill(pid) end
  util.kill(prober)
  local r = { secs = {}, fails = {}, done = done, total = procs * rounds }
  for k = 1, procs do sections(util.read(dir .. "/w" .. k .. ".rec") or "", r.secs, r.fails) end
  r.overlaps, r.first, r.inodes = overlaps(r.secs)
  r.count = tonumber(util.read(counter)) or -1
  r.ok = done and #r.secs == r.total and r.count == r.total and r.overlaps == 0 and r.inodes == 1
    and #r.fails == 0
  local p = util.read(dir .. "/prober.rec") or ""
  for k, v in p:gmatch("(%a+)=(%d+)") do r[k] = tonumber(v) end
  r.first_unnamed = p:match("first=([^\n]*)")
  util.rmdir(dir)
  return r
end

local function report(tap, what, r, procs, rounds)
  tap(r.ok, string.format("lock overlap%s: %d processes x %d rounds = %d critical sections (%d recorded), "
    .. "%d overlaps, counter %d, %d inode(s)", what, procs, rounds, r.total, #r.secs, r.overlaps, r.count,
    r.inodes))
  if r.first then util.note(r.first) end
  for _, f in ipairs(r.fails) do util.note("worker: " .. f) end
end

--- Run the check.
-- @param tap function(ok, text)
-- @param long boolean the long form (8 processes x 250 rounds; short: 6 x 50)
function M.run(tap, long)
  -- 1. Fast hand-overs (no hold) with a prober trying once (timeout 0).
  local procs, rounds = long and 8 or 6, long and 250 or 50
  local r = phase(procs, rounds, 0, 0, long and 600 or 120)
  report(tap, "", r, procs, rounds)
  -- The record stays until the next holder overwrites it, and a timed-out try re-reads it until it
  -- is the holder's that /proc/locks lists (src/lock.c): every timeout names a holder.
  tap(r.unnamed == 0 and (r.timeouts or 0) > 0, string.format("lock holder named on a timeout-0 try "
    .. "at hand-overs: %s tries, %s timeouts, %s named, %s unnamed",
    tostring(r.tries), tostring(r.timeouts), tostring(r.named), tostring(r.unnamed)))
  if r.first_unnamed then util.note("first unnamed: " .. r.first_unnamed) end
  -- 2. Holders inside their section for 20 ms, a prober waiting 5 ms: a timeout names the holder
  -- (pid and owner "worker=K").
  local p2, r2n = 3, long and 100 or 20
  local q = phase(p2, r2n, 0.02, 0.005, 120)
  report(tap, " (holding 20 ms)", q, p2, r2n)
  tap((q.timeouts or 0) > 0 and (q.named or 0) > 0 and q.unnamed == 0,
    string.format("lock holder named on timeout: %s tries of 5 ms, %s timeouts, %s named (pid and owner), "
      .. "%s unnamed", tostring(q.tries), tostring(q.timeouts), tostring(q.named), tostring(q.unnamed)))
  if q.first_unnamed then util.note("first unnamed: " .. q.first_unnamed) end
end

return M
