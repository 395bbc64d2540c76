-- SPDX-License-Identifier: Apache-2.0
-- The node lock (src/lock.c) through its Lua binding, with real contending processes (field case
-- C01 of docs/design.md, "Field cases").
local H = require("helpers")
local host = H.host()

-- A worker process: takes the lock through the module and appends what happened to a record
-- file: "enter pid=.. ino=.. t=..", "exit pid=.. ino=.. t=..", or "fail pid=.. code=.. ...".
-- arg: lockpath timeout owner hold record [release_file]
-- hold: seconds to keep the lock (the simulated slow restart), or, when release_file is given,
-- keep it until that file exists (polled every 10 ms, at most 20 s).
local WORKER = [[
local h = require("imexguard.host")
local path, timeout, owner, hold, rec, release = arg[1], tonumber(arg[2]), arg[3],
  tonumber(arg[4]), arg[5], arg[6]
local f = io.open("/proc/self/stat"); local pid = tonumber(f:read("a"):match("^(%d+)")); f:close()
local function log(s) local o = io.open(rec, "a"); o:write(s, "\n"); o:close() end
log(string.format("start pid=%d t=%.6f", pid, h.now()))
local t0 = h.now()
local l, msg, code, holder = h.lock(path, timeout, owner)
if not l then
  log(string.format("fail pid=%d code=%s waited=%.6f hpid=%s howner=%s msg=%s", pid, code,
    h.now() - t0, tostring(holder and holder.pid), tostring(holder and holder.owner), msg))
  os.exit(0)
end
local _, ino = l:inode()
log(string.format("enter pid=%d ino=%d t=%.6f", pid, ino, h.now()))
if release then
  local limit = h.now() + 20
  while h.now() < limit do
    local r = io.open(release); if r then r:close(); break end
    h.sleep(0.01)
  end
else
  h.sleep(hold)
end
log(string.format("exit pid=%d ino=%d t=%.6f", pid, ino, h.now()))
l:unlock()
]]

-- Is pid blocked in flock(2)?  /proc/locks lists blocked waiters as "N: -> FLOCK ... pid ...".
local function waiting_in_flock(pid)
  for line in (H.read("/proc/locks") or ""):gmatch("[^\n]+") do
    if line:match("%->%s+FLOCK%s+ADVISORY%s+WRITE%s+" .. pid .. "%s") then return true end
  end
end

local function records(file)
  local out = {}
  for line in (H.read(file) or ""):gmatch("[^\n]+") do
    local kind = line:match("^(%a+)")
    local r = { kind = kind, line = line }
    for k, v in line:gmatch("(%w+)=(%S+)") do r[k] = tonumber(v) or v end
    if kind == "fail" then r.msg = line:match("msg=(.*)$") end
    out[#out + 1] = r
  end
  return out
end

local function find(recs, kind, pid)
  for _, r in ipairs(recs) do
    if r.kind == kind and r.pid == pid then return r end
  end
end

-- Critical sections [enter, exit] of every pid, sorted by enter; asserts they never overlap.
local function assert_no_overlap(recs)
  local sections = {}
  for _, r in ipairs(recs) do
    if r.kind == "enter" then
      local e = assert(find(recs, "exit", r.pid), "no exit for pid " .. r.pid)
      sections[#sections + 1] = { pid = r.pid, enter = r.t, exit = e.t, ino = r.ino }
    end
  end
  table.sort(sections, function(a, b) return a.enter < b.enter end)
  for i = 2, #sections do
    assert.is_true(sections[i].enter >= sections[i - 1].exit,
      string.format("pid %d entered at %.6f before pid %d left at %.6f", sections[i].pid,
        sections[i].enter, sections[i - 1].pid, sections[i - 1].exit))
  end
  return sections
end

-- A holder in a hand-over: takes the lock, leaves a record naming another process (the previous
-- holder's, which unlock keeps), writes "<pid>\n" to ready, then after `delay` seconds writes its
-- own record and holds the lock until killed. arg: lockpath ready delay
local HANDOVER = [[
local h = require("imexguard.host")
local path, ready, delay = arg[1], arg[2], tonumber(arg[3])
local f = io.open("/proc/self/stat"); local pid = tonumber(f:read("a"):match("^(%d+)")); f:close()
local l = assert(h.lock(path, 10, "ignored"))
local function put(s) local o = assert(io.open(path, "r+")); o:write(s); o:close() end
put("pid=1 owner=previous since=1\n")
local r = assert(io.open(ready .. ".new", "w")); r:write(pid, "\n"); r:close()
assert(os.rename(ready .. ".new", ready))
h.sleep(delay)
put(string.format("pid=%d owner=job=9 since=%d\n", pid, math.floor(h.wallclock())))
h.sleep(60)
l:unlock()
]]

describe("host.lock during a hand-over (the record is not yet the holder's)", function()
  local dir, pids
  before_each(function() dir, pids = H.tmpdir(), {} end)
  after_each(function() H.cleanup(dir, pids) end)

  -- Start a HANDOVER holder; returns its pid once it holds the lock.
  local function holder(delay)
    local ready = dir .. "/ready"
    pids[#pids + 1] = H.spawn(H.lua_cmd(dir, "handover", HANDOVER, dir .. "/l", ready, delay),
      dir .. "/worker.log")
    assert.truthy(H.wait_until(function() return H.read(ready) end, 10, 0.001), H.read(dir .. "/worker.log"))
    return tonumber(H.read(ready):match("%d+"))
  end

  it("a timeout names the holder once its record is written, never the previous holder", function()
    local pid = holder(0.03)
    local l, msg, code, who = host.lock(dir .. "/l", 0, "job=2")
    assert.is_nil(l)
    assert.equal("timeout", code)
    -- normally the record (owner job=9); under heavy load past 50 ms the pid alone
    assert.equal(pid, who.pid, msg)
    assert.matches("pid " .. pid, msg, 1, true)
    assert.is_nil(msg:find("previous", 1, true))
  end)

  it("a holder that writes no record is named by its pid from /proc/locks", function()
    local pid = holder(60)
    local t0 = host.now()
    local l, msg, code, who = host.lock(dir .. "/l", 0, "job=2")
    assert.is_nil(l)
    assert.equal("timeout", code)
    assert.same({ pid = pid }, who)
    assert.matches("held by pid " .. pid .. " (no holder record)", msg, 1, true)
    assert.is_true(host.now() - t0 < 1, "took " .. (host.now() - t0)) -- 50 ms of re-reading
  end)
end)

describe("host.lock between processes", function()
  local dir, pids
  before_each(function() dir, pids = H.tmpdir(), {} end)
  after_each(function() H.cleanup(dir, pids) end)

  -- what the workers recorded and printed, for failure messages
  local function story(rec)
    return "record:\n" .. tostring(H.read(rec)) .. "\nworker.log:\n" .. tostring(H.read(dir .. "/worker.log"))
  end

  local function worker(...)
    local pid = H.spawn(H.lua_cmd(dir, "worker", WORKER, ...), dir .. "/worker.log")
    pids[#pids + 1] = pid
    return pid
  end

  it("C01: a waiter times out naming the holder; a later one gets it; no overlap, same inode",
    function()
      -- P1 holds the lock (a slow restart) until we release it; P2 waits 0.5 s and gives up;
      -- P3 arrives while P1 still holds it and gets it after P1 leaves.
      local lock, rec, release = dir .. "/imex.lock", dir .. "/record", dir .. "/release"
      local p1 = worker(lock, "5", "job=101", "0", rec, release)
      assert.truthy(H.wait_until(function() return find(records(rec), "enter", p1) end, 10), story(rec))
      local ino0 = host.stat(lock).ino

      local p2 = worker(lock, "0.5", "job=102", "0", rec)
      local fail = H.wait_until(function() return find(records(rec), "fail", p2) end, 20)
      assert.truthy(fail, "P2 never gave up; " .. story(rec))
      assert.equal("timeout", fail.code)
      assert.equal(p1, fail.hpid)
      assert.equal("job=101", fail.howner)
      assert.matches(lock, fail.msg, 1, true)
      assert.matches("pid " .. p1, fail.msg, 1, true)
      assert.matches("job=101", fail.msg, 1, true)
      assert.is_true(fail.waited >= 0.5 and fail.waited < 0.5 + 0.25, "waited " .. fail.waited)

      local p3 = worker(lock, "20", "job=103", "0.2", rec)
      assert.truthy(H.wait_until(function() return waiting_in_flock(p3) end, 20), story(rec))
      assert.is_nil(find(records(rec), "exit", p1))
      H.write(release, "")
      assert.truthy(H.wait_until(function() return find(records(rec), "exit", p3) end, 20), story(rec))

      local recs = records(rec)
      local sections = assert_no_overlap(recs)
      assert.equal(2, #sections)
      assert.equal(p1, sections[1].pid)
      assert.equal(p3, sections[2].pid)
      assert.is_true(sections[2].enter >= find(recs, "exit", p1).t)
      -- never deleted or renamed: one inode throughout, still named by the path
      assert.equal(ino0, sections[1].ino)
      assert.equal(ino0, sections[2].ino)
      assert.equal(ino0, host.stat(lock).ino)
      assert.same({ "imex.lock", "record", "release", "worker.log", "worker.lua" }, H.ls(dir))
    end)

  it("serializes many contending processes", function()
    local lock, rec = dir .. "/imex.lock", dir .. "/record"
    local n = 6
    for i = 1, n do worker(lock, "20", "job=" .. i, "0.05", rec) end
    assert.truthy(H.wait_until(function()
      local c = 0
      for _, r in ipairs(records(rec)) do if r.kind == "exit" then c = c + 1 end end
      return c == n
    end, 60), story(rec))
    local sections = assert_no_overlap(records(rec))
    assert.equal(n, #sections)
    for _, s in ipairs(sections) do assert.equal(host.stat(lock).ino, s.ino) end
  end)

  it("retries when the path is replaced while it waits: ends up locking the inode the path names",
    function()
      local lock, rec, release = dir .. "/imex.lock", dir .. "/record", dir .. "/release"
      local p1 = worker(lock, "5", "job=201", "0", rec, release)
      assert.truthy(H.wait_until(function() return find(records(rec), "enter", p1) end, 10), story(rec))
      local old_ino = host.stat(lock).ino
      local p2 = worker(lock, "10", "job=202", "0.1", rec)
      -- P2 is blocked in flock on the old inode once /proc/locks shows its waiter entry
      assert.truthy(H.wait_until(function() return waiting_in_flock(p2) end, 20),
        "P2 never waited in flock; " .. story(rec))
      -- someone replaces the lock file (what a "recovery" script does)
      H.write(dir .. "/new.lock", "")
      assert.is_true(os.rename(dir .. "/new.lock", lock))
      local new_ino = host.stat(lock).ino
      assert.are_not.equal(old_ino, new_ino)
      H.write(release, "")
      local e = H.wait_until(function() return find(records(rec), "exit", p2) end, 10)
      assert.truthy(e, "P2 never got the lock; " .. story(rec))
      assert.equal(new_ino, e.ino)
      assert.equal(old_ino, find(records(rec), "enter", p1).ino)
      assert.is_nil(find(records(rec), "fail", p2))
    end)
end)

describe("host.lock in one process", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function()
    host.set_deadline(0)
    H.rmdir(dir)
  end)

  it("creates the file 0644, records the holder, and unlock is idempotent", function()
    local path = dir .. "/l"
    local l = assert(host.lock(path, 1, "job=7"))
    local st = host.stat(path)
    assert.equal("file", st.type)
    assert.equal(tonumber("644", 8), st.mode)
    local rec = H.read(path)
    local pid, owner, since = rec:match("^pid=(%d+) owner=(%S+) since=(%d+)\n$")
    assert.equal(H.mypid(), tonumber(pid))
    assert.equal("job=7", owner)
    assert.is_true(math.abs(tonumber(since) - host.wallclock()) < 5)
    local dev, ino = l:inode()
    assert.equal(st.ino, ino)
    assert.equal(st.dev, dev)
    local h = host.lock_holder(path)
    assert.same({ pid = H.mypid(), owner = "job=7", since = tonumber(since) }, h)
    assert.is_true(l:unlock())
    assert.is_true(l:unlock())
    assert.is_nil(host.lock_holder(path))
    assert.equal(rec, H.read(path)) -- kept for the next holder to overwrite (no empty hand-over)
    assert.equal(ino, host.stat(path).ino) -- still there, same inode
  end)

  it("times out within a small bound of the requested timeout, naming the holder", function()
    local path = dir .. "/l"
    local l1 = assert(host.lock(path, 1, "job=1 first"))
    for _, timeout in ipairs({ 0.2, 0.6 }) do
      local t0 = host.now()
      local l2, msg, code, holder = host.lock(path, timeout, "job=2")
      local took = host.now() - t0
      assert.is_nil(l2)
      assert.equal("timeout", code)
      assert.is_true(took >= timeout and took < timeout + 0.1, "took " .. took)
      assert.same({ pid = H.mypid(), owner = "job=1 first", since = holder.since }, holder)
      assert.matches("pid " .. H.mypid(), msg, 1, true)
      assert.matches("job=1 first", msg, 1, true)
      assert.matches(string.format("%.1f s", timeout), msg, 1, true)
    end
    -- timeout 0: one attempt, no wait
    local t0 = host.now()
    local l3, _, code = host.lock(path, 0, "x")
    assert.is_nil(l3)
    assert.equal("timeout", code)
    assert.is_true(host.now() - t0 < 0.05)
    l1:unlock()
    assert.truthy(host.lock(path, 0, "x")):unlock()
  end)

  it("is bounded by the run's deadline (code deadline)", function()
    local path = dir .. "/l"
    local l1 = assert(host.lock(path, 1, "job=1"))
    host.set_deadline(0.3)
    local t0 = host.now()
    local l2, msg, code = host.lock(path, 10, "job=2")
    local took = host.now() - t0
    assert.is_nil(l2)
    assert.equal("deadline", code)
    assert.matches("deadline", msg)
    assert.is_true(took < 0.45, "took " .. took)
    l1:unlock()
  end)

  it("releases on close and on garbage collection", function()
    local path = dir .. "/l"
    do
      local l <close> = assert(host.lock(path, 1, "a"))
      assert.is_table(host.lock_holder(path))
      assert.truthy(l)
    end
    assert.is_nil(host.lock_holder(path))
    assert.truthy(host.lock(path, 1, "b")) -- the object is dropped at once
    assert.is_table(host.lock_holder(path))
    collectgarbage()
    collectgarbage()
    assert.is_nil(host.lock_holder(path))
  end)

  it("reports errors as nil, msg, code and raises on misuse", function()
    local l, msg, code = host.lock(dir .. "/missing/l", 1, "x")
    assert.is_nil(l)
    assert.equal("ENOENT", code)
    assert.matches(dir .. "/missing/l", msg, 1, true)
    H.write(dir .. "/target", "")
    assert.is_true(os.execute("ln -s target " .. H.q(dir .. "/link")))
    l, msg, code = host.lock(dir .. "/link", 1, "x")
    assert.is_nil(l)
    assert.equal("ELOOP", code)
    assert.matches(dir .. "/link", msg, 1, true)
    assert.equal("", H.read(dir .. "/target"))
    assert.error(function() host.lock(dir .. "/l") end)
    assert.error(function() host.lock({}, 1, "x") end)
    assert.is_nil(host.lock_holder(dir .. "/nope"))
  end)

  it("leaks no descriptors", function()
    local path = dir .. "/l"
    local before = H.fd_count()
    for _ = 1, 20 do
      local l = assert(host.lock(path, 1, "x"))
      assert.is_nil(host.lock(path, 0.02, "y"))
      host.lock_holder(path)
      l:unlock()
    end
    assert.equal(before, H.fd_count())
  end)
end)
