-- SPDX-License-Identifier: Apache-2.0
-- Files (src/file.c) through the Lua binding: read cap, a growing file's end (C50), stat, atomic
-- replace (field case C03 of docs/design.md, "Field cases"), the same-size write in place
-- ("Membership by slots"), mknod.
local H = require("helpers")
local host = H.host()

-- An 18-line node list (one NVL72 rack) with a marker so torn reads are detectable.
local function list(tag, base)
  local lines = {}
  for i = 1, 18 do lines[i] = string.format("10.%d.%d.%d", base, i, i) end
  lines[#lines + 1] = "# " .. tag
  return table.concat(lines, "\n") .. "\n"
end
local A, B = list("A", 1), list("B", 2)

local function temps(dir)
  local t = {}
  for _, n in ipairs(H.ls(dir)) do
    if n:match("^%..*%.[%w][%w][%w][%w][%w][%w]$") then t[#t + 1] = n end
  end
  return t
end

describe("host.read and host.stat", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() H.rmdir(dir) end)

  it("reads up to the cap and reports EFBIG beyond it", function()
    H.write(dir .. "/f", "0123456789")
    assert.equal("0123456789", host.read(dir .. "/f", 10))
    assert.equal("0123456789", host.read(dir .. "/f", 1000))
    local s, msg, code = host.read(dir .. "/f", 9)
    assert.is_nil(s)
    assert.equal("EFBIG", code)
    assert.matches(dir .. "/f", msg, 1, true)
    assert.equal("", host.read(dir .. "/empty-" .. (H.write(dir .. "/empty-", "") or ""), 0))
    -- /proc files report size 0 but have content
    assert.matches("^%d+", host.read("/proc/self/stat", 4096))
    assert.equal("EFBIG", select(3, host.read("/proc/self/maps", 10)))
  end)

  it("names missing files, directories and non-regular files", function()
    local s, msg, code = host.read(dir .. "/missing", 10)
    assert.is_nil(s)
    assert.equal("ENOENT", code)
    assert.matches(dir .. "/missing", msg, 1, true)
    assert.equal("EISDIR", select(3, host.read(dir, 10)))
    assert.is_true(os.execute("mkfifo " .. H.q(dir .. "/fifo")))
    assert.equal("EINVAL", select(3, host.read(dir .. "/fifo", 10))) -- does not block
    assert.error(function() host.read(dir .. "/f") end)
    assert.error(function() host.read(dir .. "/f", -1) end)
  end)

  it("follows symlinks when reading", function()
    H.write(dir .. "/target", "x\n")
    assert.is_true(os.execute("ln -s target " .. H.q(dir .. "/link")))
    assert.equal("x\n", host.read(dir .. "/link", 10))
  end)

  it("stat describes files, dirs, links (lstat) with mtime in microseconds", function()
    H.write(dir .. "/f", "abc")
    os.execute("chmod 640 " .. H.q(dir .. "/f") .. " && touch -d @1700000000.123456 " .. H.q(dir .. "/f"))
    local st = host.stat(dir .. "/f")
    assert.equal("file", st.type)
    assert.equal(3, st.size)
    assert.equal(tonumber("640", 8), st.mode)
    assert.equal(1700000000123456, st.mtime_us)
    assert.equal(tonumber(H.sh("stat -c %i " .. H.q(dir .. "/f"))), st.ino)
    assert.equal(0, st.uid)
    assert.equal(1, st.nlink)
    assert.equal("dir", host.stat(dir).type)
    assert.is_true(os.execute("ln -s f " .. H.q(dir .. "/l")))
    assert.equal("link", host.stat(dir .. "/l").type)
    assert.equal("char", host.stat("/dev/null").type)
    assert.equal(1, host.stat("/dev/null").rdev_major)
    assert.equal(3, host.stat("/dev/null").rdev_minor)
    local s, msg, code = host.stat(dir .. "/none")
    assert.is_nil(s)
    assert.equal("ENOENT", code)
    assert.matches(dir .. "/none", msg, 1, true)
  end)
end)

describe("host.read_tail (C50: what a daemon appended to its log)", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() H.rmdir(dir) end)

  it("the last max_bytes bytes, the size and where they start; from a size seen earlier only what was "
    .. "appended since", function()
    H.write(dir .. "/log", "one\ntwo\nthree\n")
    assert.same({ "three\n", 14, 8 }, { host.read_tail(dir .. "/log", 6) })
    assert.same({ "one\ntwo\nthree\n", 14, 0 }, { host.read_tail(dir .. "/log", 100) })
    assert.same({ "", 14, 14 }, { host.read_tail(dir .. "/log", 0) })
    -- appended after a size of 8 was seen: only that, even with room for more
    assert.same({ "three\n", 14, 8 }, { host.read_tail(dir .. "/log", 100, 8) })
    -- from beyond the end: the file was truncated or replaced since; its end as without from
    assert.same({ "two\nthree\n", 14, 4 }, { host.read_tail(dir .. "/log", 10, 99) })
    -- from within the file but before the last max_bytes: the cap wins
    assert.same({ "ree\n", 14, 10 }, { host.read_tail(dir .. "/log", 4, 2) })
    -- symlinks are followed
    assert.is_true(os.execute("ln -s log " .. H.q(dir .. "/link")))
    assert.equal("three\n", (host.read_tail(dir .. "/link", 6)))
  end)

  it("names missing files, directories and non-regular files; misuse raises", function()
    local s, msg, code = host.read_tail(dir .. "/missing", 10)
    assert.is_nil(s)
    assert.equal("ENOENT", code)
    assert.matches(dir .. "/missing", msg, 1, true)
    assert.equal("EISDIR", select(3, host.read_tail(dir, 10)))
    assert.is_true(os.execute("mkfifo " .. H.q(dir .. "/fifo")))
    assert.equal("EINVAL", select(3, host.read_tail(dir .. "/fifo", 10))) -- does not block
    assert.error(function() host.read_tail(dir .. "/log") end)
    assert.error(function() host.read_tail(dir .. "/log", -1) end)
    assert.error(function() host.read_tail(dir .. "/log", 64 * 1024 * 1024 + 1) end)
    assert.error(function() host.read_tail(dir .. "/log", 10, -1) end)
  end)
end)

describe("host.write_atomic", function()
  local dir, pids
  before_each(function() dir, pids = H.tmpdir(), {} end)
  after_each(function() H.cleanup(dir, pids) end)

  it("replaces the file with the exact mode, leaving no temp file", function()
    local p = dir .. "/nodes_config.cfg"
    assert.is_true(host.write_atomic(p, A))
    assert.equal(A, H.read(p))
    assert.equal(tonumber("644", 8), host.stat(p).mode)
    local ino = host.stat(p).ino
    assert.is_true(host.write_atomic(p, B, tonumber("600", 8)))
    assert.equal(B, H.read(p))
    assert.equal(tonumber("600", 8), host.stat(p).mode)
    assert.are_not.equal(ino, host.stat(p).ino) -- a new inode, the old one never modified
    -- the umask does not apply
    local cmd = H.lua_cmd(dir, "umask", [[
      local h = require("imexguard.host"); assert(h.write_atomic(arg[1], "x", tonumber("666", 8)))]],
      dir .. "/u")
    assert.is_true(os.execute("umask 077 && " .. cmd))
    assert.equal(tonumber("666", 8), host.stat(dir .. "/u").mode)
    assert.same({ "nodes_config.cfg", "u", "umask.lua" }, H.ls(dir))
  end)

  it("replaces a symlink at path by a file, not its target", function()
    H.write(dir .. "/target", "old")
    assert.is_true(os.execute("ln -s target " .. H.q(dir .. "/link")))
    assert.is_true(host.write_atomic(dir .. "/link", "new"))
    assert.equal("file", host.stat(dir .. "/link").type)
    assert.equal("old", H.read(dir .. "/target"))
  end)

  it("fails without touching anything for a missing directory or a bad path", function()
    local ok, msg, code = host.write_atomic(dir .. "/no/such", "x")
    assert.is_nil(ok)
    assert.equal("ENOENT", code)
    assert.matches(dir .. "/no/such", msg, 1, true)
    assert.equal("EINVAL", select(3, host.write_atomic(dir .. "/", "x")))
    assert.equal("EINVAL", select(3, host.write_atomic("", "x")))
    assert.error(function() host.write_atomic(dir .. "/x", "x", 99999) end)
    assert.error(function() host.write_atomic(dir .. "/x") end)
    assert.same({}, H.ls(dir))
  end)

  it("C03: a concurrent reader only ever sees one whole content (3000 rewrites)", function()
    local shm = H.tmpdir("/dev/shm") -- fsync is free on tmpfs: the loop is about rename only
    local ok, err = pcall(function()
      local p = shm .. "/nodes_config.cfg"
      assert.is_true(host.write_atomic(p, A))
      local stop, out = shm .. "/stop", shm .. "/reader.out"
      local reader = H.lua_cmd(shm, "reader", [[
        local h = require("imexguard.host")
        local path, A, B, stop, out = arg[1], arg[2], arg[3], arg[4], arg[5]
        local a, b, bad, reads, badsample = 0, 0, 0, 0, ""
        local ready = io.open(out .. ".ready", "w"); ready:close()
        while not io.open(stop) do
          for _ = 1, 50 do
            local s, _, code = h.read(path, 65536)
            reads = reads + 1
            if s == A then a = a + 1 elseif s == B then b = b + 1
            else bad = bad + 1; badsample = tostring(s or code) end
          end
        end
        local f = io.open(out .. ".tmp", "w")
        f:write(string.format("reads=%d a=%d b=%d bad=%d\n%s", reads, a, b, bad, badsample))
        f:close(); os.rename(out .. ".tmp", out)
      ]], p, A, B, stop, out)
      pids[#pids + 1] = H.spawn(reader, shm .. "/reader.log")
      assert.truthy(H.wait_until(function() return H.read(out .. ".ready") end, 10))
      for i = 1, 3000 do
        assert.is_true(host.write_atomic(p, i % 2 == 0 and A or B))
      end
      H.write(stop, "")
      local res = H.wait_until(function() return H.read(out) end, 10)
      assert.truthy(res, "reader did not finish: " .. tostring(H.read(shm .. "/reader.log")))
      local reads, a, b, bad = res:match("reads=(%d+) a=(%d+) b=(%d+) bad=(%d+)")
      assert.equal("0", bad, res)
      assert.is_true(tonumber(a) > 0 and tonumber(b) > 0, res)
      assert.is_true(tonumber(reads) > 100, res)
      assert.same({}, temps(shm))
    end)
    H.rmdir(shm)
    assert(ok, err)
  end)

  it("C03: kill -9 of a writer mid-loop leaves a whole file; the next write removes leftovers",
    function()
      local p = dir .. "/nodes_config.cfg"
      -- 256 KiB contents so that a kill is likely to land inside a write
      local big = {}
      for i = 1, 2 do big[i] = (i == 1 and A or B) .. string.rep("#", 256 * 1024) .. "\n" end
      H.write(dir .. "/A", big[1])
      H.write(dir .. "/B", big[2])
      local writer = H.lua_cmd(dir, "writer", [[
        local h = require("imexguard.host")
        local p = arg[1]
        local c = { io.open(arg[2]):read("a"), io.open(arg[3]):read("a") }
        local i = 0
        while true do
          i = i + 1
          assert(h.write_atomic(p, c[i % 2 + 1]))
          if i == 20 then io.open(arg[4], "w"):close() end
        end
      ]], p, dir .. "/A", dir .. "/B", dir .. "/twenty")
      local pid = H.spawn(writer, dir .. "/writer.log")
      pids[#pids + 1] = pid
      assert.truthy(H.wait_until(function() return H.read(dir .. "/twenty") end, 20),
        H.read(dir .. "/writer.log"))
      H.kill(pid, "KILL")
      assert.truthy(H.wait_until(function() return not H.alive(pid) end, 5))
      local s = H.read(p)
      assert.is_true(s == big[1] or s == big[2], "torn file of " .. #s .. " bytes")
      -- a leftover can only exist if the kill landed between naming and renaming the temp file;
      -- whatever is left, the next successful write removes it (its writer's flock is gone)
      assert.is_true(#temps(dir) <= 1)
      assert.is_true(host.write_atomic(p, A))
      assert.same({}, temps(dir))
      assert.equal(A, H.read(p))
    end)

  it("removes stale temp files of dead writers but not those of a live one", function()
    local p = dir .. "/nodes_config.cfg"
    H.write(dir .. "/.nodes_config.cfg.imexguard.AbC123", "stale")
    H.write(dir .. "/.nodes_config.cfg.imexguard.Live99", "live")
    H.write(dir .. "/.other.cfg.imexguard.AbC123", "not ours")
    H.write(dir .. "/.nodes_config.cfg.AbC123", "rsync's temp file") -- another tool's, same shape
    -- a live writer holds flock on its temp file (the node lock primitive does just that)
    local live = assert(host.lock(dir .. "/.nodes_config.cfg.imexguard.Live99", 1, "writer"))
    assert.is_true(host.write_atomic(p, A))
    assert.same({ ".nodes_config.cfg.AbC123", ".nodes_config.cfg.imexguard.Live99",
      ".other.cfg.imexguard.AbC123", "nodes_config.cfg" }, H.ls(dir))
    live:unlock()
  end)

  it("C39: remove_temps removes only its own leftovers of that file, and names them", function()
    local p = dir .. "/state.json"
    H.write(p, "{}\n")
    H.write(dir .. "/.state.json.imexguard.AbC123", "killed writer") -- a real leftover
    H.write(dir .. "/.state.json.imexguard.Live99", "live")
    -- look-alikes: another file's, another tool's (rsync's .NAME.XXXXXX, an admin's .NAME.backup),
    -- a wrong length or character
    for _, n in ipairs({ ".foo.imexguard.AbC123", ".state.json.imexguard.AbC12",
      ".state.json.imexguard.AbC1234", ".state.json.imexguard.Ab-123", "state.json.imexguard.AbC123",
      ".state.json.AbC123", ".state.json.backup", ".nodes_config.cfg.imexguard.AbC123" }) do
      H.write(dir .. "/" .. n, "look-alike")
    end
    assert.is_true(os.execute("mkdir " .. H.q(dir .. "/.state.json.imexguard.Dir123")))
    local live = assert(host.lock(dir .. "/.state.json.imexguard.Live99", 1, "writer"))
    assert.same({ ".state.json.imexguard.AbC123" }, assert(host.remove_temps(p)))
    assert.same({ ".foo.imexguard.AbC123", ".nodes_config.cfg.imexguard.AbC123", ".state.json.AbC123",
      ".state.json.backup", ".state.json.imexguard.Ab-123", ".state.json.imexguard.AbC12",
      ".state.json.imexguard.AbC1234", ".state.json.imexguard.Dir123", ".state.json.imexguard.Live99",
      "state.json", "state.json.imexguard.AbC123" }, H.ls(dir))
    assert.same({}, host.remove_temps(p)) -- nothing left of its own: an empty list
    live:unlock()
    assert.same({ ".state.json.imexguard.Live99" }, host.remove_temps(p)) -- its writer is gone
    -- the file itself need not exist; the directory must
    assert.same({}, host.remove_temps(dir .. "/nodes.cfg"))
    local r, msg, code = host.remove_temps(dir .. "/missing/state.json")
    assert.is_nil(r)
    assert.equal("ENOENT", code)
    assert.matches(dir .. "/missing/state.json", msg, 1, true)
    assert.equal("EINVAL", select(3, host.remove_temps(dir .. "/")))
  end)

  local function in_tmpfs(setup, code)
    -- a private mount namespace with a 64 KiB tmpfs on dir: the real file systems are untouched
    local cmd = H.lua_cmd(dir, "probe", code, dir .. "/mnt")
    os.execute("mkdir " .. H.q(dir .. "/mnt"))
    local sh = string.format("mount -t tmpfs -o size=64k tmpfs %s && %s && %s",
      H.q(dir .. "/mnt"), setup:gsub("MNT", H.q(dir .. "/mnt")), cmd)
    return H.sh("unshare -m sh -c " .. H.q(sh) .. " 2>&1")
  end

  local PROBE = [[
    local h = require("imexguard.host")
    local d = arg[1]
    local old = io.open(d .. "/nodes_config.cfg"):read("a")
    local ok, msg, code = h.write_atomic(d .. "/nodes_config.cfg", string.rep("x", 200 * 1024))
    local p = io.popen("ls -A " .. d); local names = p:read("a"):gsub("\n", " "); p:close()
    local now = io.open(d .. "/nodes_config.cfg"):read("a")
    print(string.format("ok=%s code=%s intact=%s names=%s", tostring(ok), tostring(code),
      tostring(now == old), names))
    print("msg=" .. tostring(msg))
  ]]

  it("C03: ENOSPC leaves the old file byte for byte and no temp file", function()
    local out = in_tmpfs("printf '%s' " .. H.q(A) .. " > MNT/nodes_config.cfg", PROBE)
    assert.equal("ok=nil code=ENOSPC intact=true names=nodes_config.cfg ", out:match("[^\n]*"))
    assert.matches("msg=write " .. dir .. "/mnt/nodes_config.cfg", out, 1, true)
    assert.matches("old file intact", out, 1, true)
  end)

  it("EROFS on a read-only file system leaves the old file", function()
    local out = in_tmpfs("printf '%s' " .. H.q(A) .. " > MNT/nodes_config.cfg && mount -o remount,ro MNT",
      PROBE)
    assert.equal("ok=nil code=EROFS intact=true names=nodes_config.cfg ", out:match("[^\n]*"))
  end)
end)

describe("host.write_in_place", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() H.rmdir(dir) end)

  it("overwrites the same inode (a bind mount sees it), and refuses any other size, a symlink, "
    .. "a missing file and a directory without writing", function()
    local p = dir .. "/hosts"
    H.write(p, " 10.0.0.1 a\n#127.0.0.2 a\n")
    local before = assert(host.stat(p))
    assert.is_true(host.write_in_place(p, "#10.0.0.1 a\n 127.0.0.2 a\n"))
    assert.equal("#10.0.0.1 a\n 127.0.0.2 a\n", H.read(p))
    local after = assert(host.stat(p))
    assert.equal(before.ino, after.ino) -- the inode a bind mount holds
    assert.equal(before.mode, after.mode)
    -- another size: nothing written, the size named
    local ok, msg, code = host.write_in_place(p, "x")
    assert.is_nil(ok)
    assert.equal("EINVAL", code)
    assert.matches("holds 25 bytes, not 1: nothing written", msg, 1, true)
    assert.equal("#10.0.0.1 a\n 127.0.0.2 a\n", H.read(p))
    assert.equal("EINVAL", select(3, host.write_in_place(p, H.read(p) .. "more")))
    -- a symlink is refused (O_NOFOLLOW), its target untouched
    H.sh("ln -s " .. p .. " " .. dir .. "/link")
    assert.equal("ELOOP", select(3, host.write_in_place(dir .. "/link", "#10.0.0.1 a\n 127.0.0.2 a\n")))
    assert.equal("ENOENT", select(3, host.write_in_place(dir .. "/none", "x")))
    assert.is_nil(H.read(dir .. "/none")) -- never created
    assert.equal("EISDIR", select(3, host.write_in_place(dir, "x")))
    assert.error(function() host.write_in_place(p) end)
  end)

  it("a concurrent reader sees only bytes of the old or the new content at every offset, the size "
    .. "never changes (2000 rewrites of two contents that differ in switch bytes only)", function()
    local shm = H.tmpdir("/dev/shm")
    local pids = {}
    local ok, err = pcall(function()
      local p = shm .. "/hosts"
      local function content(on)
        local l = {}
        for k = 1, 40 do
          l[#l + 1] = string.format("%s10.0.%d.%d s%d\n%s127.0.0.2 s%d\n", on and " " or "#", k, k, k,
            on and "#" or " ", k)
        end
        return table.concat(l)
      end
      local X, Y = content(true), content(false)
      H.write(p, X)
      local stop, out = shm .. "/stop", shm .. "/reader.out"
      local reader = H.lua_cmd(shm, "reader", [[
        local h = require("imexguard.host")
        local path, X, Y, stop, out = arg[1], arg[2], arg[3], arg[4], arg[5]
        local reads, bad, sample = 0, 0, ""
        local ready = io.open(out .. ".ready", "w"); ready:close()
        while not io.open(stop) do
          for _ = 1, 50 do
            local s = h.read(path, 65536)
            reads = reads + 1
            local good = s and #s == #X
            for i = 1, good and #s or 0 do
              local c = s:byte(i)
              if c ~= X:byte(i) and c ~= Y:byte(i) then good = false; break end
            end
            if not good then bad = bad + 1; sample = tostring(s) end
          end
        end
        local f = io.open(out .. ".tmp", "w")
        f:write(string.format("reads=%d bad=%d\n%s", reads, bad, sample))
        f:close(); os.rename(out .. ".tmp", out)
      ]], p, X, Y, stop, out)
      pids[#pids + 1] = H.spawn(reader, shm .. "/reader.log")
      assert.truthy(H.wait_until(function() return H.read(out .. ".ready") end, 10))
      for i = 1, 2000 do assert.is_true(host.write_in_place(p, i % 2 == 0 and X or Y)) end
      H.write(stop, "")
      local res = H.wait_until(function() return H.read(out) end, 10)
      assert.truthy(res, "reader did not finish: " .. tostring(H.read(shm .. "/reader.log")))
      assert.equal("0", res:match("bad=(%d+)"), res)
      assert.is_true(tonumber(res:match("reads=(%d+)")) > 100, res)
    end)
    H.cleanup(shm, pids)
    assert(ok, err)
  end)
end)

describe("host.mknod_char", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() H.rmdir(dir) end)

  it("creates a character device with exact numbers and mode, idempotently", function()
    local p = dir .. "/channel0"
    assert.is_true(host.mknod_char(p, 1, 3))
    local st = host.stat(p)
    assert.equal("char", st.type)
    assert.equal(1, st.rdev_major)
    assert.equal(3, st.rdev_minor)
    assert.equal(tonumber("666", 8), st.mode)
    assert.is_true(host.mknod_char(p, 1, 3)) -- already there
    local ok, msg, code = host.mknod_char(p, 1, 5)
    assert.is_nil(ok)
    assert.equal("EEXIST", code)
    assert.matches(p, msg, 1, true)
    assert.is_true(host.mknod_char(dir .. "/c1", 1, 3, tonumber("600", 8)))
    assert.equal(tonumber("600", 8), host.stat(dir .. "/c1").mode)
    assert.equal("ENOENT", select(3, host.mknod_char(dir .. "/no/c", 1, 3)))
    assert.error(function() host.mknod_char(p, -1, 0) end)
    assert.error(function() host.mknod_char(p, 1) end)
  end)
end)
