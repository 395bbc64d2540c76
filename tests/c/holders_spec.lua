-- SPDX-License-Identifier: Apache-2.0
-- host.file_holders (src/proc.c) through the Lua binding: the processes that have a file open, as
-- /proc/PID/fd shows them (C50: who holds a node's IMEX session: the simulator's daemon keeps its
-- session file open and flock'ed, a real one the fabric-imex-mgmt capability device [guess]).
local H = require("helpers")
local host = H.host()

describe("host.file_holders", function()
  local dir, pids
  before_each(function() dir, pids = H.tmpdir(), {} end)
  after_each(function() H.cleanup(dir, pids) end)

  -- A process that keeps `path` open on descriptor 9 (and flock'ed with lock = true) until killed;
  -- returns its pid once the descriptor is open.
  local function holder(path, lock)
    local cmd = lock and "flock -x 9 && exec sleep 60" or "exec sleep 60"
    local pid = H.spawn(string.format("sh -c %s 9<%s", H.q(cmd), H.q(path)))
    pids[#pids + 1] = pid
    assert(H.wait_until(function()
      local link = H.sh(string.format("readlink /proc/%d/fd/9 2>/dev/null", pid))
      return link == path and H.sh(string.format("cat /proc/%d/comm 2>/dev/null", pid)) == "sleep"
    end, 5), "the holder never opened " .. path)
    return pid
  end

  it("names each process with the file open (pid, comm, cmdline); none is {}", function()
    local f = dir .. "/imex-session"
    H.write(f, "")
    assert.same({}, assert(host.file_holders(f)))
    local a = holder(f, true)
    local got = assert(host.file_holders(f))
    assert.equal(1, #got)
    assert.same({ pid = a, comm = "sleep", cmdline = "sleep 60" }, got[1])
    local b = holder(f)
    got = assert(host.file_holders(f))
    local seen = {}
    for _, x in ipairs(got) do seen[x.pid] = true end
    assert.same({ [a] = true, [b] = true }, seen)
    -- another file of the same name elsewhere is not that file
    H.sh("mkdir " .. H.q(dir .. "/other"))
    H.write(dir .. "/other/imex-session", "")
    assert.same({}, assert(host.file_holders(dir .. "/other/imex-session")))
    -- a symlink names the file it points to
    assert.is_true(os.execute("ln -s imex-session " .. H.q(dir .. "/link")))
    assert.equal(2, #assert(host.file_holders(dir .. "/link")))
  end)

  it("a character device: any node of the same device number counts", function()
    -- a second node of /dev/full's device (1:7, which hardly any process keeps open) in the temp
    -- dir, as a container's /dev has its own node of the capability device
    assert.is_true(os.execute("mknod " .. H.q(dir .. "/full") .. " c 1 7"))
    local pid = holder(dir .. "/full")
    local got = assert(host.file_holders("/dev/full"))
    local found = false
    for _, x in ipairs(got) do if x.pid == pid then found = true end end
    assert.is_true(found)
    assert.is_true(#got <= 16)
  end)

  it("a missing file is its stat error; bounded by the timeout and the deadline; misuse raises", function()
    local r, msg, code = host.file_holders(dir .. "/missing")
    assert.is_nil(r)
    assert.equal("ENOENT", code)
    assert.matches(dir .. "/missing", msg, 1, true)
    H.write(dir .. "/f", "")
    r, msg, code = host.file_holders(dir .. "/f", 0)
    assert.is_nil(r)
    assert.equal("timeout", code)
    assert.matches("not found within 0 s", msg, 1, true)
    host.set_deadline(1e-9)
    r, msg, code = host.file_holders(dir .. "/f", 5)
    host.set_deadline(0)
    assert.is_nil(r)
    assert.equal("deadline", code, msg)
    assert.error(function() host.file_holders("") end)
    assert.error(function() host.file_holders(dir .. "/f", -1) end)
    assert.error(function() host.file_holders() end)
  end)
end)
