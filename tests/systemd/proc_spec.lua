-- Specs of host.port_owner (src/proc.c): the process listening on a TCP port, against real
-- listeners: one a systemd unit's main process (tests/systemd/units/ig-listen.service), one
-- started by hand outside any unit (field case C27 of docs/design.md: a stray daemon on the command port).
-- Run under tests/with-systemd (private network namespace: the fixed ports are ours).
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

local host = require "imexguard.host"

local UNIT_PORT = 47311 -- ig-listen.service
local STRAY_PORT = 47312
local V6_PORT = 47313

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

-- Start a python3 listener on `addr`:`port` (family "4" or "6") outside systemd, named by its
-- last argument; returns its pid (stopped by the caller with stop()).
local function listener(family, addr, port, tag)
  local prog = "import socket, sys, time; s = socket.socket(socket.AF_INET" ..
    (family == "6" and "6" or "") .. "); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); " ..
    "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); time.sleep(3600)"
  return tonumber(capture(string.format(
    "/usr/bin/python3 -c '%s' %s %d %s >/dev/null 2>&1 & echo $!", prog, addr, port, tag)))
end

local function stop(pid)
  if pid then sh("kill " .. pid .. " 2>/dev/null") end
end

describe("host.port_owner", function()
  before_each(function() host.set_deadline(0) end)
  after_each(function() host.set_deadline(0) end)

  it("names the unit's main process listening on the port", function()
    local f = assert(io.open(UNIT_DIR .. "/ig-listen.service", "w"))
    f:write(assert(io.open("tests/systemd/units/ig-listen.service")):read("a"))
    f:close()
    assert.is_true(sh("systemctl --user daemon-reload && systemctl --user start ig-listen.service"))
    finally(function() sh("systemctl --user stop ig-listen.service") end)
    assert.is_true(host.unit_set_bus(BUS))
    local o = wait_for("a listener on " .. UNIT_PORT, 10, function() return host.port_owner(UNIT_PORT) end)
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
    local o = wait_for("a listener on " .. STRAY_PORT, 10, function() return host.port_owner(STRAY_PORT) end)
    assert.equal(pid, o.pid)
    assert.matches("ig%-stray%-daemon$", o.cmdline)
    assert.not_matches("\n", o.cmdline)
  end)

  it("finds an IPv6 listener (/proc/net/tcp6), which also takes IPv4 on ::", function()
    local pid = listener("6", "::", V6_PORT, "ig-v6")
    finally(function() stop(pid) end)
    local o = wait_for("a listener on " .. V6_PORT, 10, function() return host.port_owner(V6_PORT) end)
    assert.equal(pid, o.pid)
    assert.equal("::", o.address)
  end)

  it("with an address, names the listener that takes connections to it (one port, several daemons)",
    function()
      -- the simulator's case: one daemon per loopback address, all on the same command port
      local a = listener("4", "127.0.0.2", STRAY_PORT, "ig-on-2")
      local b = listener("4", "127.0.0.3", STRAY_PORT, "ig-on-3")
      finally(function() stop(a); stop(b) end)
      for _, want in ipairs({ { "127.0.0.2", a }, { "127.0.0.3", b } }) do
        local o = wait_for(want[1], 10, function() return host.port_owner(STRAY_PORT, nil, want[1]) end)
        assert.equal(want[2], o.pid)
        assert.equal(want[1], o.address)
      end
      local o, err, code = host.port_owner(STRAY_PORT, nil, "127.0.0.4")
      assert.is_nil(o)
      assert.equal("none", code)
      assert.matches("for 127%.0%.0%.4", err)
      -- a wildcard listener takes connections to every address
      local w = listener("6", "::", V6_PORT, "ig-any")
      finally(function() stop(w) end)
      o = wait_for("the wildcard", 10, function() return host.port_owner(V6_PORT, nil, "127.0.0.9") end)
      assert.equal(w, o.pid)
    end)

  it("answers none when nothing listens, naming the port", function()
    local o, err, code = host.port_owner(47399)
    assert.is_nil(o)
    assert.equal("none", code)
    assert.matches("47399", err)
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
  end)
end)
