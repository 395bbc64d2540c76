-- SPDX-License-Identifier: Apache-2.0
-- Specs of host.port_owner (src/proc.c): the process listening on a TCP port, against real
-- listeners: one a systemd unit's main process (tests/systemd/units/ig-listen.service), one
-- started by hand outside any unit (field case C27 of docs/design.md: a stray daemon on the command port).
-- Run under tests/with-systemd (private network namespace: the fixed ports are ours).
-- Every answer is asked twice: from sock_diag (NETLINK_SOCK_DIAG, the normal path) and from
-- /proc/net/tcp (the fallback where the kernel or a container refuses sock_diag, forced through the
-- module's test hook luaopen_imexguard_proc_testing), and both must agree.
local build = os.getenv("IMEXGUARD_BUILD")
if build then
  package.cpath = build .. "/lua/?.so;" .. package.cpath
end

local BUS = os.getenv("IMEXGUARD_TEST_BUS")
local UNIT_DIR = os.getenv("IMEXGUARD_TEST_UNIT_DIR")

if not (BUS and UNIT_DIR) then
  describe("host.port_owner", function()
    pending("needs a private network namespace and systemd: run under tests/with-systemd")
  end)
  return
end

local host = require("imexguard.host")

local UNIT_PORT = 47311 -- ig-listen.service
local STRAY_PORT = 47312
local V6_PORT = 47313
local OTHER_PORT = 47314

-- The test hooks of src/proc.c, from the same shared object as imexguard.host (so the same state):
-- procfs_only(flag) and last_source().
local hooks = assert(package.loadlib(assert(package.searchpath("imexguard.host", package.cpath)),
  "luaopen_imexguard_proc_testing"))()

local function sh(cmd)
  return os.execute(cmd) == true
end

local function capture(cmd)
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  f:close()
  return out
end

-- Poll `cond` every 20 ms until it returns a true value or `timeout` seconds pass.
local function wait_for(what, timeout, cond)
  local limit = host.now() + timeout
  while true do
    local v = cond()
    if v then return v end
    if host.now() >= limit then error("timed out after " .. timeout .. " s waiting for " .. what, 2) end
    host.sleep(0.02)
  end
end

-- Whether process `pid` is gone (exited: no /proc entry, or a zombie, which holds no socket).
local function gone(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return true end
  local stat = f:read("a") or ""
  f:close()
  return stat:match("^%d+ %b() (%a)") == "Z"
end

-- Stop a listener started by listener() and wait (10 s at most) until it is gone, so the next
-- test can bind its port.
local function stop(pid)
  if not pid then return end
  sh("kill " .. pid .. " 2>/dev/null")
  wait_for("pid " .. pid .. " to exit", 10, function() return gone(pid) end)
end

-- Start a python3 listener on `addr`:`port` (family "4" or "6") outside systemd, named by its
-- last argument; returns its pid (stopped by the caller with stop()).
local function listener(family, addr, port, tag)
  local prog = "import socket, sys, time; s = socket.socket(socket.AF_INET" ..
    (family == "6" and "6" or "") .. "); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); " ..
    "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); time.sleep(3600)"
  return tonumber(capture(string.format(
    "/usr/bin/python3 -c '%s' %s %d %s >/dev/null 2>&1 & echo $!", prog, addr, port, tag)))
end

-- Start a listener on 127.0.0.1:`port` that forks after listen(): two processes hold the socket,
-- as a forked daemon's do; the child writes its pid to the file `pidfile`.  Returns the parent's
-- pid (stopped by the caller with stop(), as is the child).
local function forked_listener(port, pidfile)
  local prog = "import socket, sys, os, time; s = socket.socket(); " ..
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\", int(sys.argv[1]))); " ..
    "s.listen(); child = os.fork(); " ..
    "child or open(sys.argv[2] + \".tmp\", \"w\").write(str(os.getpid())); " ..
    "child or os.rename(sys.argv[2] + \".tmp\", sys.argv[2]); time.sleep(3600)"
  return tonumber(capture(string.format(
    "/usr/bin/python3 -c '%s' %d %s >/dev/null 2>&1 & echo $!", prog, port, pidfile)))
end

-- The pid written in file `path`, or nil while it does not exist.
local function read_pid(path)
  local f = io.open(path)
  if not f then return nil end
  local pid = tonumber(f:read("a"))
  f:close()
  return pid
end

-- host.port_owner(...) answered from sock_diag, after checking that the /proc/net/tcp fallback
-- answers the same (the same process, address and inode, or the same error code).
local function owner(...)
  hooks.procfs_only(true)
  local p, perr, pcode = host.port_owner(...)
  assert.equal("/proc/net/tcp", hooks.last_source())
  hooks.procfs_only(false)
  local o, err, code = host.port_owner(...)
  assert.equal("sock_diag", hooks.last_source())
  if o and p then
    assert.same(p, o)
  else
    assert.equal(pcode, code, tostring(err) .. " / " .. tostring(perr))
    if err then
      assert.matches("(sock_diag)", err, 1, true)
      assert.matches("(/proc/net/tcp)", perr, 1, true)
    end
  end
  return o, err, code
end

-- Wait (10 s at most) until something listens on `port` for `address`, then owner(port, nil,
-- address, hint).
local function up(port, address, hint)
  wait_for("a listener on " .. port, 10, function() return host.port_owner(port, nil, address) end)
  return owner(port, nil, address, hint)
end

describe("host.port_owner", function()
  before_each(function() host.set_deadline(0) end)
  after_each(function()
    host.set_deadline(0)
    hooks.procfs_only(false)
  end)

  it("names the unit's main process listening on the port", function()
    local f = assert(io.open(UNIT_DIR .. "/ig-listen.service", "w"))
    f:write(assert(io.open("tests/systemd/units/ig-listen.service")):read("a"))
    f:close()
    assert.is_true(sh("systemctl --user daemon-reload && systemctl --user start ig-listen.service"))
    finally(function() sh("systemctl --user stop ig-listen.service") end)
    assert.is_true(host.unit_set_bus(BUS))
    local o = up(UNIT_PORT)
    local p = assert(host.unit("ig-listen.service"))
    assert.equal(p.main_pid, o.pid)
    assert.equal("python3", o.comm)
    assert.matches("^/usr/bin/python3 %-c import socket", o.cmdline)
    assert.equal("127.0.0.1", o.address)
    assert.is_true(o.inode > 0)
  end)

  it("names a process started by hand (pid and command line), not a unit's", function()
    local pid = listener("4", "127.0.0.1", STRAY_PORT, "ig-stray-daemon")
    finally(function() stop(pid) end)
    local o = up(STRAY_PORT)
    assert.equal(pid, o.pid)
    assert.matches("ig%-stray%-daemon$", o.cmdline)
    assert.not_matches("\n", o.cmdline)
  end)

  it("finds an IPv6 listener (/proc/net/tcp6), which also takes IPv4 on ::", function()
    local pid = listener("6", "::", V6_PORT, "ig-v6")
    finally(function() stop(pid) end)
    local o = up(V6_PORT)
    assert.equal(pid, o.pid)
    assert.equal("::", o.address)
  end)

  it("with an address, names the listener that takes connections to it (one port, several daemons)",
    function()
      -- the simulator's case: one daemon per loopback address, all on the same command port
      local a = listener("4", "127.0.0.2", STRAY_PORT, "ig-on-2")
      local b = listener("4", "127.0.0.3", STRAY_PORT, "ig-on-3")
      local w
      -- one finally per test (a second call replaces the first): it stops all three
      finally(function() stop(a); stop(b); stop(w) end)
      for _, want in ipairs({ { "127.0.0.2", a }, { "127.0.0.3", b } }) do
        local o = up(STRAY_PORT, want[1])
        assert.equal(want[2], o.pid)
        assert.equal(want[1], o.address)
      end
      local o, err, code = owner(STRAY_PORT, nil, "127.0.0.4")
      assert.is_nil(o)
      assert.equal("none", code)
      assert.matches("for 127%.0%.0%.4", err)
      -- a wildcard listener takes connections to every address
      w = listener("6", "::", V6_PORT, "ig-any")
      o = up(V6_PORT, "127.0.0.9")
      assert.equal(w, o.pid)
    end)

  it("answers none when nothing listens, naming the port", function()
    local o, err, code = owner(47399)
    assert.is_nil(o)
    assert.equal("none", code)
    assert.matches("47399", err)
    assert.equal("none", select(3, owner(47399, math.huge))) -- no deadline: a receive timeout all the same
  end)

  it("is bounded by the run's deadline", function()
    local pid = listener("4", "127.0.0.1", STRAY_PORT, "ig-stray-daemon")
    finally(function() stop(pid) end)
    wait_for("a listener on " .. STRAY_PORT, 10, function() return host.port_owner(STRAY_PORT) end)
    host.set_deadline(1e-6)
    wait_for("the deadline to pass", 1, function() return host.remaining() == 0 end)
    local o, err, code = host.port_owner(STRAY_PORT, 5)
    assert.is_nil(o)
    assert.equal("deadline", code)
    assert.matches(tostring(STRAY_PORT), err)
  end)

  it("rejects what is not a port or a timeout", function()
    assert.has_error(function() host.port_owner(0) end)
    assert.has_error(function() host.port_owner(65536) end)
    assert.has_error(function() host.port_owner("x") end)
    assert.has_error(function() host.port_owner(50005, -1) end)
    assert.has_error(function() host.port_owner(50005, nil, nil, -1) end)
    assert.has_error(function() host.port_owner(50005, nil, nil, "x") end)
  end)

  it("with a pid hint, names the hinted holder of the socket (a forked daemon: two holders)", function()
    local dir = capture("mktemp -d"):gsub("%s+$", "")
    local parent, child
    finally(function()
      stop(child); stop(parent)
      sh("rm -rf " .. dir)
    end)
    parent = forked_listener(OTHER_PORT, dir .. "/child")
    child = wait_for("the forked listener's child", 10, function() return read_pid(dir .. "/child") end)
    local any = up(OTHER_PORT)
    assert.is_true(any.pid == parent or any.pid == child, tostring(any.pid))
    for _, pid in ipairs({ parent, child }) do
      local o = owner(OTHER_PORT, nil, "127.0.0.1", pid)
      assert.equal(pid, o.pid)
      assert.equal(any.inode, o.inode)
      assert.equal("127.0.0.1", o.address)
      assert.equal(any.cmdline, o.cmdline)
    end
  end)

  it("with a wrong pid hint (another process, a dead pid, 0), still names the real owner", function()
    local pid = listener("4", "127.0.0.1", STRAY_PORT, "ig-stray-daemon")
    local other = listener("4", "127.0.0.1", OTHER_PORT, "ig-other")
    local v6
    finally(function() stop(pid); stop(other); stop(v6) end)
    up(OTHER_PORT)
    up(STRAY_PORT)
    local dead = tonumber(capture("sh -c 'echo $$'"))
    assert.is_false(sh("kill -0 " .. dead .. " 2>/dev/null"))
    for _, hint in ipairs({ other, dead, 0 }) do
      local o = owner(STRAY_PORT, nil, nil, hint)
      assert.equal(pid, o.pid)
      assert.matches("ig%-stray%-daemon$", o.cmdline)
    end
    -- an IPv6 listener with the hint right
    v6 = listener("6", "::1", V6_PORT, "ig-v6-hinted")
    local o = up(V6_PORT, nil, v6)
    assert.equal(v6, o.pid)
    assert.equal("::1", o.address)
  end)

  it("falls back to /proc/net/tcp for every answer when sock_diag is not used", function()
    local pid = listener("6", "::", V6_PORT, "ig-fallback")
    finally(function() stop(pid) end)
    wait_for("a listener on " .. V6_PORT, 10, function() return host.port_owner(V6_PORT) end)
    hooks.procfs_only(true)
    local o = host.port_owner(V6_PORT, nil, "127.0.0.1", pid)
    assert.equal("/proc/net/tcp", hooks.last_source())
    assert.equal(pid, o.pid)
    assert.equal("::", o.address)
    local _, err, code = host.port_owner(47399)
    assert.equal("none", code)
    assert.matches("(/proc/net/tcp)", err, 1, true)
    hooks.procfs_only(false)
    assert.equal(pid, host.port_owner(V6_PORT).pid)
    assert.equal("sock_diag", hooks.last_source())
  end)
end)
