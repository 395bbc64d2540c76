-- SPDX-License-Identifier: Apache-2.0
-- imexguard's prologs, status and health on what the daemon's host gives, under a real systemd user
-- manager with the simulator (tests/with-systemd; contrib/simdomain.lua, one imexsim@NODE.service
-- per node), every prolog of a job started at once as Slurm starts them:
--   C44, IPv4-only hosts: config.cfg leaves IMEX_CMD_BIND_INTERFACE_IP empty and the ctl given only
--   -c dials [::] and fails with error 14 (IMEXSIM_NO_IPV6); imexguard asks the daemon with -i, or,
--   where it takes the host for one with IPv6, names the configuration fault at the first poll;
--   C50, one IMEX session per driver: a daemon started by hand holds the node's session
--   (IMEXSIM_SESSION_FILE), the unit's start fails NV_ERR_IN_USE, and the prolog's service-failed
--   quotes the daemon's error line from LOG_FILE_NAME (tests/with-systemd runs no journald) and
--   names the holder; any failed start quotes its daemon's last error line.
-- Every wait polls with a deadline; every unit and hand-started daemon is stopped in after_each.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")
local H = require("helpers")
local system = require("system")

-- A path that exists on no machine: the setting proc_if_inet6 pointing there makes imexguard take
-- the host for one without IPv6 (the file's absence is the kernel's word, /proc/net/if_inet6).
local NO_INET6 = "/nonexistent/imexguard-test/if_inet6"
local IN_USE = "Failed to allocate Imex session, status: NV_ERR_IN_USE"

-- Run fn and return its results and the seconds it took.
local function timed(fn)
  local t0 = system.monotime()
  local r = fn()
  return r, system.monotime() - t0
end

-- The final line's message of a run's output ("imexguard: LEVEL: prolog job=N outcome=X: MESSAGE").
local function final(r)
  local last
  for line in (r.output or ""):gmatch("[^\n]+") do
    if line:find(" outcome=", 1, true) then last = line end
  end
  return last or ""
end

-- Run `imexguard COMMAND` on one node (status, health) and return {status, output}.
local function inspect(d, name, command)
  return d:run_all({ names = { name }, job = 0, nodelist = name, command = command })[name]
end

describe("imexguard under systemd: what the daemon's host gives", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  -- A domain of n nodes whose config.cfg leave IMEX_CMD_BIND_INTERFACE_IP empty on hosts without
  -- IPv6 (the simulated daemon then listens on the node's own address, BIND_INTERFACE_IP), every
  -- node's list in order, started and UP; `settings`: imexguard.conf lines of every node.
  local function v4_only(n, settings)
    d = simdomain.new { nodes = n, extra_cfg = simdomain.FAST_RECONNECT, settings = settings }
    for _, name in ipairs(d.names) do
      d:configure(name, { IMEX_CMD_BIND_INTERFACE_IP = "", IMEXSIM_NO_IPV6 = 1 })
      d:write_node_list(name, d.names)
    end
    assert(d:start())
    -- the ctl of n1 asked where its daemon listens, as imexguard will
    assert.truthy(simdomain.wait_until(function()
      local out = d:ctl("n1", "-q") -- -c alone: fails on this host
      local mesh = d:ctl("n1", "-i " .. d.addr.n1 .. " 50005 -N -j")
      return out:find("Address family not supported by protocol", 1, true) and mesh:find('"UP"', 1, true)
    end, 10), "the simulated IPv4-only host is not as expected")
    return d
  end

  it("C44: every prolog of a job (started at once) asks its daemon with -i and is ok within "
    .. "seconds, no daemon restarted; status and health are ok and status names the warning", function()
    v4_only(3, { string.format("proc_if_inet6 = %q", NO_INET6), "health_timeout = 20" })
    local res, took = timed(function() return d:prologs { job = 44, nodelist = "n[1-3]" } end)
    for _, name in ipairs(d.names) do
      assert.equal(0, res[name].status, res[name].output)
      assert.equal("ok", res[name].outcome, res[name].output)
      assert.equal(1, d:starts(name), name .. " restarted")
    end
    assert.is_true(took < 10, string.format("the prologs took %.1f s: they waited for a 'dead' daemon", took))
    local st = inspect(d, "n1", "status")
    assert.equal(0, st.status, st.output)
    assert.matches("config warning: " .. d:dir("n1") .. "/config.cfg: IMEX_CMD_BIND_INTERFACE_IP is empty "
      .. "and this host has no IPv6", st.output, 1, true)
    assert.matches("IMEX domain UP", st.output, 1, true)
    local hl = inspect(d, "n2", "health")
    assert.equal(0, hl.status, hl.output)
  end)

  it("C44: where the host is taken for one with IPv6, the ctl's error 14 is a configuration fault "
    .. "at the first poll on every node, naming IMEX_CMD_BIND_INTERFACE_IP, with the ctl's own words",
  function()
    -- an address table listing ::1: imexguard takes the host for one with IPv6 and gives the ctl -c
    local tmp = H.tmpdir()
    finally(function() H.rmdir(tmp) end)
    H.write(tmp .. "/if_inet6", "00000000000000000000000000000001 01 80 10 80       lo\n")
    v4_only(2, { string.format("proc_if_inet6 = %q", tmp .. "/if_inet6"), "health_timeout = 20" })
    local res, took = timed(function() return d:prologs { job = 45, nodelist = "n[1-2]" } end)
    for _, name in ipairs(d.names) do
      local r = res[name]
      assert.equal(14, r.status, r.output)
      assert.equal("config-fault", r.outcome, r.output)
      local m = final(r)
      assert.matches("ipv6:%5B::%5D:50005: Address family not supported by protocol')", m, 1, true)
      assert.matches("IMEX_CMD_BIND_INTERFACE_IP is empty (all interfaces), so nvidia-imex-ctl dials [::]",
        m, 1, true)
      assert.equal(1, d:starts(name))
    end
    assert.is_true(took < 10, string.format("the prologs took %.1f s, not the first poll", took))
  end)

  -- A 2-node domain in order whose node n1 holds its one IMEX session in a file; a daemon started by
  -- hand on n1 (a container's, with its own config and ports) holds it; n2 is started, n1's unit is
  -- only enabled (the prolog starts it). Returns the holder's pid and the session file.
  local function session_taken(settings)
    d = simdomain.new { nodes = 2, extra_cfg = simdomain.FAST_RECONNECT, settings = settings }
    for _, name in ipairs(d.names) do d:write_node_list(name, d.names) end
    local dir = d:dir("n1")
    local session = dir .. "/imex-session"
    d:configure("n1", { IMEXSIM_SESSION_FILE = session })
    local other = dir .. "/container.cfg"
    simdomain.write_file(other, assert(simdomain.read_file(dir .. "/config.cfg")))
    d:configure("n1", { SERVER_PORT = 50100, IMEX_CMD_PORT = 50105, LOG_FILE_NAME = dir .. "/container.log" },
      other)
    local holder = assert(d:start_stray("n1", other))
    local conf = assert(simdomain.read_file(d:config("n1")))
    simdomain.write_file(d:config("n1"), conf .. string.format("imex_session_file = %q\n", session))
    assert(d:start({ "n2" }))
    assert(d:systemctl("enable", d:unit("n1")))
    return holder, session
  end

  it("C50: a second daemon loses the node's IMEX session: the prolog's service-failed quotes its error "
    .. "line and names the process holding the session; the peer's prolog blames n1 and exits 0; "
    .. "status says it too; once the holder is gone the next job starts the unit", function()
    local holder, session = session_taken({ "health_timeout = 3" })
    local res = d:prologs { job = 50, nodelist = "n[1-2]" }
    local r1 = res.n1
    assert.equal(7, r1.status, r1.output)
    assert.equal("service-failed", r1.outcome, r1.output)
    local m = final(r1)
    assert.matches("the daemon's last error line (" .. d:dir("n1") .. "/imex.log): '", m, 1, true)
    assert.matches(IN_USE .. "'", m, 1, true)
    assert.matches(string.format("the IMEX session is held by pid %d (%s/imexsim -c %s/container.cfg", holder,
      d.build, d:dir("n1")), m, 1, true)
    assert.matches("which keeps " .. session .. " open (setting imex_session_file)", m, 1, true)
    assert.equal(0, res.n2.status, res.n2.output)
    assert.equal("peers-unhealthy", res.n2.outcome, res.n2.output)
    -- status of n1: the unit failed, with the daemon's words
    local st = inspect(d, "n1", "status")
    assert.equal(7, st.status, st.output)
    assert.matches(IN_USE, st.output, 1, true)
    assert.matches("held by pid " .. holder, st.output, 1, true)
    -- the holder gone, the next job's prolog starts the unit (reset-failed first) and is ok
    d:stop_strays()
    res = d:prologs { job = 51, nodelist = "n[1-2]" }
    for _, name in ipairs(d.names) do assert.equal("ok", res[name].outcome, res[name].output) end
  end)

  it("C50: any start that fails quotes its daemon's last error line (IMEXSIM_EXIT_AT_START), only "
    .. "this start's", function()
    d = simdomain.new { nodes = 1, extra_cfg = simdomain.FAST_RECONNECT, settings = { "health_timeout = 3" } }
    d:write_node_list("n1", d.names)
    -- an older error in the log is not this start's
    simdomain.write_file(d:dir("n1") .. "/imex.log",
      "[2026-01-01 00:00:00.000] [ERROR] [tid 1] an old error\n")
    d:configure("n1", { IMEXSIM_EXIT_AT_START = 3 })
    assert(d:systemctl("enable", d:unit("n1")))
    local r = d:prologs({ job = 52, nodelist = "n1" }).n1
    assert.equal("service-failed", r.outcome, r.output)
    local m = final(r)
    assert.matches("Exiting at start with status 3 (IMEXSIM_EXIT_AT_START)'", m, 1, true)
    assert.is_nil(m:find("an old error", 1, true))
    assert.is_nil(m:find("session", 1, true))
  end)
end)
