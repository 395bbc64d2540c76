-- SPDX-License-Identifier: Apache-2.0
-- The command runner (src/run.c) through its Lua binding.
local H = require("helpers")
local host = H.host()

-- Each test's temp dir and the pids it leaves to kill (set up by scratch() in each describe).
local dir, strays
local function scratch()
  before_each(function()
    dir = H.tmpdir()
    strays = {}
  end)
  after_each(function()
    host.set_deadline(0)
    for _, pid in ipairs(strays) do H.kill_wait(pid) end
    H.rmdir(dir)
  end)
end

describe("host.run", function()
  scratch()

  it("returns exit status, signal, stdout and stderr separately", function()
    local r = assert(host.run({ "sh", "-c", "echo out; echo err >&2; exit 7" }, { timeout = 5 }))
    assert.equal(7, r.status)
    assert.is_nil(r.signal)
    assert.equal("out\n", r.stdout)
    assert.equal("err\n", r.stderr)
    assert.is_false(r.truncated)
    assert.is_true(r.elapsed >= 0 and r.elapsed < 2)
    r = assert(host.run({ "sh", "-c", "kill -9 $$" }, { timeout = 5 }))
    assert.is_nil(r.status)
    assert.equal(9, r.signal)
    r = assert(host.run({ "true" }, { timeout = 5 }))
    assert.equal(0, r.status)
    assert.equal("", r.stdout)
  end)

  it("passes argv without a shell and gives the child /dev/null as stdin", function()
    local r = assert(host.run({ "printf", "%s|", "a b", "$HOME", "'" }, { timeout = 5 }))
    assert.equal("a b|$HOME|'|", r.stdout)
    r = assert(host.run({ "cat" }, { timeout = 5 }))
    assert.equal(0, r.status)
    assert.equal("", r.stdout)
  end)

  it("caps each stream at max_output and keeps draining so the child finishes", function()
    local r = assert(host.run({ "sh", "-c", "head -c 300000 /dev/zero; head -c 10 /dev/zero >&2" },
      { timeout = 10, max_output = 1000 }))
    assert.equal(0, r.status)
    assert.equal(1000, #r.stdout)
    assert.equal(10, #r.stderr)
    assert.is_true(r.truncated)
    r = assert(host.run({ "head", "-c", "2000000", "/dev/zero" }, { timeout = 10 }))
    assert.equal(1024 * 1024, #r.stdout) -- default cap 1 MiB
    assert.is_true(r.truncated)
    r = assert(host.run({ "head", "-c", "2000000", "/dev/zero" },
      { timeout = 10, max_output = 4000000 }))
    assert.equal(2000000, #r.stdout)
    assert.is_false(r.truncated)
  end)

  it("kills a command that ignores SIGTERM at its timeout, with its whole process group", function()
    local t0 = host.now()
    local r0, msg, code, r = host.run({ "sh", "-c", "trap '' TERM; echo $$; sleep 30; echo late" },
      { timeout = 0.5 })
    local took = host.now() - t0
    assert.is_nil(r0)
    assert.equal("timeout", code)
    assert.equal("sh timed out after 0.5 s", msg)
    assert.is_table(r)
    local pgid = tonumber(r.stdout:match("^(%d+)"))
    assert.truthy(pgid)
    strays[#strays + 1] = pgid
    assert.equal(9, r.signal) -- SIGTERM was ignored, SIGKILL ended it
    assert.is_true(took < 0.5 + 1, "took " .. took)
    assert.is_true(r.elapsed >= 0.5)
    assert.same({}, H.group_members(pgid))
    assert.same({}, H.zombies())
  end)

  it("does not wait for a grandchild that keeps the pipe open after the command exits", function()
    -- same process group: killed when the command exits
    local t0 = host.now()
    local r = assert(host.run({ "sh", "-c", "sleep 30 & echo $!; exit 3" }, { timeout = 10 }))
    assert.is_true(host.now() - t0 < 1, "took " .. (host.now() - t0))
    assert.equal(3, r.status)
    local gc = tonumber(r.stdout:match("^(%d+)"))
    strays[#strays + 1] = gc
    assert.truthy(H.wait_until(function() return not H.alive(gc) end, 5))
    -- a grandchild that left the group (setsid, like a daemon) holds the pipe: bounded drain
    t0 = host.now()
    -- (the command exits only once the grandchild has left its group: no race with the kill)
    local f = dir .. "/gc.pid"
    r = assert(host.run({ "sh", "-c", "setsid sh -c 'echo $$ > \"$0\"; exec sleep 30' \"$0\" & " ..
      "while [ ! -s \"$0\" ]; do sleep 0.01; done; cat \"$0\"; echo bye", f }, { timeout = 10 }))
    local took = host.now() - t0
    gc = tonumber(r.stdout:match("^(%d+)"))
    strays[#strays + 1] = gc
    -- run.c drains for EXIT_DRAIN (0.2 s) after the exit, never for the grandchild's 30 s; the
    -- command itself (three shells and a 10 ms poll) took up to 0.9 s under ASan beside two CPU
    -- hogs on 2 cores: 3 s keeps a margin and still fails a wait for the grandchild
    assert.is_true(took < 3, "took " .. took)
    assert.equal(0, r.status)
    assert.matches("bye\n$", r.stdout)
    assert.is_true(H.alive(gc)) -- not ours to kill: it left the group
  end)

  it("reports a program that cannot be executed", function()
    local r, msg, code = host.run({ "/nonexistent/imex-ctl", "-q" }, { timeout = 5 })
    assert.is_nil(r)
    assert.equal("ENOENT", code)
    assert.matches("/nonexistent/imex-ctl", msg, 1, true)
    r, msg, code = host.run({ "no-such-program-imexguard" }, { timeout = 5 })
    assert.is_nil(r)
    assert.equal("ENOENT", code)
    assert.matches("no-such-program-imexguard", msg, 1, true)
    H.write(dir .. "/noexec", "#!/bin/sh\n")
    r, msg, code = host.run({ dir .. "/noexec" }, { timeout = 5 })
    assert.is_nil(r)
    assert.equal("EACCES", code)
    assert.matches(dir .. "/noexec", msg, 1, true)
    assert.same({}, H.zombies())
  end)

  it("is bounded by the run's deadline (code deadline)", function()
    host.set_deadline(0.5)
    local t0 = host.now()
    local r, msg, code, res = host.run({ "sleep", "5" }, { timeout = 10 })
    local took = host.now() - t0
    assert.is_nil(r)
    assert.equal("deadline", code)
    assert.matches("deadline", msg)
    assert.equal(15, res.signal)
    assert.is_true(took < 1, "took " .. took)
  end)

  it("gives the child no descriptor but stdin, stdout and stderr (not even the node lock)", function()
    local l = assert(host.lock(dir .. "/lock", 1, "x"))
    local r = assert(host.run({ "sh", "-c", "ls /proc/$$/fd" }, { timeout = 5 }))
    l:unlock()
    assert.equal("0\n1\n2\n", r.stdout)
  end)

  it("raises on misuse", function()
    assert.error(function() host.run({}, { timeout = 1 }) end)
    assert.error(function() host.run({ "true" }, {}) end)
    assert.error(function() host.run({ "true" }) end)
    assert.error(function() host.run({ "true", 5 }, { timeout = 1 }) end)
    assert.error(function() host.run({ "true" }, { timeout = 1, max_output = -1 }) end)
    assert.error(function() host.run("true", { timeout = 1 }) end)
  end)

  it("leaks no descriptors and leaves no zombies", function()
    local before = H.fd_count()
    for _ = 1, 5 do
      assert(host.run({ "sh", "-c", "echo x; echo y >&2" }, { timeout = 5 }))
      host.run({ "no-such-program-imexguard" }, { timeout = 5 })
      host.run({ "sleep", "5" }, { timeout = 0.05 })
      assert(host.run({ "sh", "-c", "sleep 5 & exit 0" }, { timeout = 5 }))
    end
    assert.equal(before, H.fd_count())
    assert.same({}, H.zombies())
  end)
end)

describe("host.spawn", function()
  scratch()

  -- The pid of the command's process group leader that wrote it to `file` (its $$).
  local function pid_in(file)
    return H.wait_until(function() return tonumber(H.read(file) or "") end, 5)
  end

  it("returns at once; the command runs meanwhile; wait gives what host.run gives", function()
    local t0 = host.now()
    local p = assert(host.spawn({ "sh", "-c", "sleep 0.3; echo out; echo err >&2; exit 7" },
      { timeout = 5 }))
    assert.is_true(host.now() - t0 < 0.2, "spawn took " .. (host.now() - t0))
    assert.matches("^imexguard.process", tostring(p))
    os.execute("sleep 0.3") -- the caller's own work, while the command runs
    local t1 = host.now()
    local r = assert(p:wait())
    assert.is_true(host.now() - t1 < 0.25, "the wait did not overlap: " .. (host.now() - t1))
    assert.equal(7, r.status)
    assert.is_nil(r.signal)
    assert.equal("out\n", r.stdout)
    assert.equal("err\n", r.stderr)
    assert.is_false(r.truncated)
    assert.is_true(r.elapsed >= 0.3 and r.elapsed < 2, "elapsed " .. r.elapsed) -- from the start
    assert.same({}, H.zombies())
  end)

  it("runs several commands at once", function()
    local t0 = host.now()
    local a = assert(host.spawn({ "sleep", "0.4" }, { timeout = 5 }))
    local b = assert(host.spawn({ "sh", "-c", "sleep 0.4; echo b" }, { timeout = 5 }))
    assert.equal(0, assert(a:wait()).status)
    assert.equal("b\n", assert(b:wait()).stdout)
    local took = host.now() - t0
    assert.is_true(took < 0.75, "took " .. took .. " s: the commands did not run at once")
  end)

  it("gives the child no descriptor but 0, 1 and 2, not another command's pipes nor the lock", function()
    local l = assert(host.lock(dir .. "/lock", 1, "x"))
    local other = assert(host.spawn({ "sleep", "5" }, { timeout = 10 }))
    local r = assert(host.spawn({ "sh", "-c", "ls /proc/$$/fd" }, { timeout = 5 })):wait()
    other:close()
    l:unlock()
    assert.equal("0\n1\n2\n", r.stdout)
  end)

  it("counts the timeout from the start: a wait that begins late kills the group at once", function()
    local f = dir .. "/pid"
    local p = assert(host.spawn({ "sh", "-c", "echo $$ > \"$0\"; trap '' TERM; sleep 30", f },
      { timeout = 0.3 }))
    local pgid = pid_in(f)
    strays[#strays + 1] = pgid
    os.execute("sleep 0.5")
    local t0 = host.now()
    local r0, msg, code, r = p:wait()
    local took = host.now() - t0
    assert.is_nil(r0)
    assert.equal("timeout", code)
    assert.equal("sh timed out after 0.3 s", msg)
    assert.equal(9, r.signal) -- TERM ignored: SIGKILL after the grace
    assert.is_true(took < 1, "took " .. took)
    assert.is_true(r.elapsed >= 0.5)
    assert.same({}, H.group_members(pgid))
    assert.same({}, H.zombies())
  end)

  it("is bounded by the run's deadline at its start (code deadline)", function()
    host.set_deadline(0.3)
    local p = assert(host.spawn({ "sleep", "5" }, { timeout = 10 }))
    host.set_deadline(0) -- the bound was taken at the start
    local t0 = host.now()
    local r, msg, code, res = p:wait()
    assert.is_nil(r)
    assert.equal("deadline", code)
    assert.matches("deadline", msg)
    assert.equal(15, res.signal)
    assert.is_true(host.now() - t0 < 1)
  end)

  it("caps each stream at max_output; the command waits on its full pipe until the wait drains it", function()
    local p = assert(host.spawn({ "sh", "-c", "head -c 300000 /dev/zero; head -c 10 /dev/zero >&2" },
      { timeout = 10, max_output = 1000 }))
    os.execute("sleep 0.1")
    local r = assert(p:wait())
    assert.equal(0, r.status)
    assert.equal(1000, #r.stdout)
    assert.equal(10, #r.stderr)
    assert.is_true(r.truncated)
  end)

  it("kills and reaps a process closed without a wait, with its whole group", function()
    local f = dir .. "/pid"
    local p = assert(host.spawn({ "sh", "-c", "echo $$ > \"$0\"; sleep 30 & sleep 30", f }, { timeout = 60 }))
    local pgid = pid_in(f)
    strays[#strays + 1] = pgid
    assert.equal(pgid, p:pid())
    assert.truthy(H.wait_until(function() return #H.group_members(pgid) >= 3 end, 5)) -- sh and two sleeps
    assert.is_true(p:close())
    assert.same({}, H.group_members(pgid))
    assert.same({}, H.zombies())
    assert.is_true(p:close()) -- idempotent
    assert.error(function() p:wait() end)
  end)

  it("kills and reaps a to-be-closed process left without a wait, also when an error unwinds", function()
    local f = dir .. "/pid"
    local pgid
    local ok = pcall(function()
      local p <close> = assert(host.spawn({ "sh", "-c", "echo $$ > \"$0\"; exec sleep 30", f },
        { timeout = 60 }))
      pgid = pid_in(f)
      assert.equal(pgid, p:pid())
      strays[#strays + 1] = pgid
      error("a step failed")
    end)
    assert.is_false(ok)
    assert.same({}, H.group_members(pgid))
    assert.same({}, H.zombies())
  end)

  it("kills and reaps a dropped process when it is collected", function()
    local f = dir .. "/pid"
    local before = H.fd_count()
    -- in a function of its own: a value left in this function's stack frame is never collected
    local function drop()
      assert(host.spawn({ "sh", "-c", "echo $$ > \"$0\"; exec sleep 30", f }, { timeout = 60 }))
    end
    drop()
    local pgid = pid_in(f)
    strays[#strays + 1] = pgid
    collectgarbage()
    collectgarbage()
    assert.same({}, H.group_members(pgid))
    assert.same({}, H.zombies())
    assert.equal(before, H.fd_count())
  end)

  it("waits once: a second wait raises; close after a wait changes nothing", function()
    local p = assert(host.spawn({ "true" }, { timeout = 5 }))
    assert.equal(0, assert(p:wait()).status)
    assert.error(function() p:wait() end)
    assert.is_true(p:close())
  end)

  it("reports a program that cannot be executed, leaving nothing behind", function()
    local before = H.fd_count()
    local p, msg, code = host.spawn({ "/nonexistent/imex-ctl", "-q" }, { timeout = 5 })
    assert.is_nil(p)
    assert.equal("ENOENT", code)
    assert.matches("/nonexistent/imex-ctl", msg, 1, true)
    assert.equal(before, H.fd_count())
    assert.same({}, H.zombies())
  end)

  it("raises on misuse", function()
    assert.error(function() host.spawn({}, { timeout = 1 }) end)
    assert.error(function() host.spawn({ "true" }, {}) end)
    assert.error(function() host.spawn({ "true" }) end)
    assert.error(function() host.spawn({ "true", 5 }, { timeout = 1 }) end)
    assert.error(function() host.spawn({ "true" }, { timeout = 1, max_output = -1 }) end)
    assert.error(function() host.spawn("true", { timeout = 1 }) end)
    assert.error(function() host.spawn({ "true" }, { timeout = 0 / 0 }) end)
  end)

  it("leaks no descriptors and leaves no zombies", function()
    local before = H.fd_count()
    for _ = 1, 5 do
      assert(assert(host.spawn({ "sh", "-c", "echo x; echo y >&2" }, { timeout = 5 })):wait())
      host.spawn({ "no-such-program-imexguard" }, { timeout = 5 })
      assert(host.spawn({ "sleep", "5" }, { timeout = 0.05 })):wait()
      assert(host.spawn({ "sleep", "5" }, { timeout = 5 })):close()
      assert(assert(host.spawn({ "sh", "-c", "sleep 5 & exit 0" }, { timeout = 5 })):wait())
    end
    collectgarbage()
    assert.equal(before, H.fd_count())
    assert.same({}, H.zombies())
  end)
end)
