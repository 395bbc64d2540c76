-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy (and the static one where the rule applies) for what the daemon's host
-- gives (docs/design.md, "Field cases"): C44, an IPv4-only host whose config.cfg leaves
-- IMEX_CMD_BIND_INTERFACE_IP empty (the ctl given only -c dials [::] and fails with error 14), and
-- C50, a start that fails because another daemon holds the node's one IMEX session: every
-- service-failed quotes the daemon's own last error line and names who holds the session. Against the
-- test kit's fake host; the same cases under a real systemd with the simulator are in
-- tests/sim/daemon_spec.lua.
local testing = require("imexguard.testing")
local outcomes = require("imexguard.outcomes")
local cjson = require("cjson")
local H = require("default_policy_helper")
local static = require("static_domain")

local run = H.run
local CONFIG, NO_V6 = testing.CONFIG, { [testing.IF_INET6] = false }
local LOG = "/var/log/nvidia-imex.log"
local IN_USE = "[Dec 01 2026 10:00:01.123] [ERROR] [tid 77] Failed to allocate Imex session, status: "
  .. "NV_ERR_IN_USE"
local CAP, DEV = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt", "/dev/nvidia-caps/nvidia-cap5"

-- The ctl of an IPv4-only host: given -c alone (an empty IMEX_CMD_BIND_INTERFACE_IP) it dials [::]
-- and fails as the real one does; given -i it reaches the daemon, whose domain is UP.
local function v4_only_ctl(_, argv)
  for _, a in ipairs(argv) do
    if a == "-i" then return testing.up({ "10.0.0.1", "10.0.0.2" }) end
  end
  return testing.NO_IPV6
end

-- The ctl's argv of every call (its target and query).
local function ctl_calls(h)
  local out = {}
  for i, argv in ipairs(h.runs_of("nvidia-imex-ctl")) do out[i] = table.concat(argv, " ", 2) end
  return out
end

describe("C44: an IPv4-only host, IMEX_CMD_BIND_INTERFACE_IP empty", function()
  it("the prolog asks the daemon with -i 127.0.0.1 PORT and is ok at once (it never waits for a dead "
    .. "daemon)", function()
    local h = testing.host{ files = NO_V6, ctl = v4_only_ctl }
    local t0 = h.now()
    local o, m = run(h)
    assert.equal("ok", o, m)
    assert.is_true(h.now() - t0 < 1, "not after a wait")
    local calls = ctl_calls(h)
    assert.is_true(#calls >= 1)
    for _, c in ipairs(calls) do assert.equal("-c " .. CONFIG .. " -i 127.0.0.1 50005 -N -j", c) end
  end)

  it("with BIND_INTERFACE_IP set, the daemon is asked there; a restart's health wait too", function()
    local cfg = testing.CONFIG_TEXT:gsub("\nBIND_INTERFACE_IP=\n", "\nBIND_INTERFACE_IP=10.0.0.1\n")
    assert.matches("\nIMEX_CMD_BIND_INTERFACE_IP=\n", cfg)
    local h = testing.host{ files = { [testing.IF_INET6] = false, [CONFIG] = cfg },
      unit = { active_state = "inactive" }, ctl = v4_only_ctl }
    local o, m = run(h)
    assert.equal("ok", o, m)
    assert.equal(1, #h.jobs)
    for _, c in ipairs(ctl_calls(h)) do assert.equal("-c " .. CONFIG .. " -i 10.0.0.1 50005 -N -j", c) end
  end)

  it("IPv6 disabled by sysctl (net.ipv6.conf.all.disable_ipv6 = 1): the address table is there but "
    .. "lists no ::1, where a ctl given -c connects ([::] is the loopback): asked with -i, ok at once",
  function()
    -- the table of such a host: empty, or only other interfaces' addresses (checked on a kernel:
    -- connect to [::] then fails 'Cannot assign requested address')
    for _, table_text in ipairs({ "", "fe800000000000000000000000000001 02 40 20 80     eth0\n" }) do
      local h = testing.host{ files = { [testing.IF_INET6] = table_text }, ctl = v4_only_ctl }
      local t0 = h.now()
      local o, m = run(h)
      assert.equal("ok", o, m)
      assert.is_true(h.now() - t0 < 1, "not after a wait")
      for _, c in ipairs(ctl_calls(h)) do assert.equal("-c " .. CONFIG .. " -i 127.0.0.1 50005 -N -j", c) end
    end
  end)

  it("error 14 on [::] 'Cannot assign requested address' (no ::1: IPv6 disabled) is the same "
    .. "configuration fault at the first poll", function()
    local no_loopback6 = { status = 1, stdout = "Query Status returned error code: 14 - failed to connect to "
      .. "all addresses; last error: UNKNOWN: ipv6:%5B::%5D:50005: Failed to connect to remote host: Cannot "
      .. "assign requested address\n" }
    local h = testing.host{ ctl = { no_loopback6 } }
    local t0 = h.now()
    local o, m = run(h)
    assert.equal("config-fault", o, m)
    assert.is_true(h.now() - t0 < 2, "at the first poll, not after health_timeout")
    assert.matches("ipv6:%5B::%5D:50005: Failed to connect to remote host: Cannot assign requested address",
      m, 1, true)
    assert.matches("IMEX_CMD_BIND_INTERFACE_IP is empty (all interfaces), so nvidia-imex-ctl dials [::]",
      m, 1, true)
  end)

  it("a host with IPv6 keeps -c; the file is read once per run", function()
    local h = testing.host{}
    assert.equal("ok", (run(h)))
    for _, c in ipairs(ctl_calls(h)) do assert.equal("-c " .. CONFIG .. " -N -j", c) end
    local reads = 0
    for _, c in ipairs(h.calls) do
      if c[1] == "read" and c[2] == testing.IF_INET6 then reads = reads + 1 end
    end
    assert.equal(1, reads)
  end)

  it("error 14 'Address family not supported by protocol' is a configuration fault at the first poll, "
    .. "naming IMEX_CMD_BIND_INTERFACE_IP and keeping the ctl's words", function()
    -- the host's IPv6 file says yes, yet the kernel refuses the family: the ctl's answer decides
    for _, unit in ipairs({ {}, { active_state = "inactive" } }) do
      local h = testing.host{ unit = unit, ctl = { testing.NO_IPV6 } }
      local t0 = h.now()
      local o, m = run(h)
      assert.equal("config-fault", o, m)
      assert.equal(14, outcomes.exit_code(o))
      assert.is_true(h.now() - t0 < 2, "at the first poll, not after health_timeout")
      assert.equal(1, #ctl_calls(h)) -- one ctl call (the staleness probe's, or the first poll after a start)
      assert.matches("ipv6:%5B::%5D:50005: Address family not supported by protocol')", m, 1, true)
      assert.matches("IMEX_CMD_BIND_INTERFACE_IP is empty (all interfaces), so nvidia-imex-ctl dials [::]",
        m, 1, true)
      assert.matches("not a peer fault", m)
      H.assert_one_line(m)
    end
    local h = testing.host{ ctl = { testing.NO_IPV6 } }
    local o = run(h, { settings = { on_config_fault = "warn" } })
    assert.equal(0, outcomes.exit_code(o, testing.ctx{ settings = { on_config_fault = "warn" } }.settings))
  end)

  it("the same when -N prints the placeholder of an unreachable daemon: -q, asked once, says why",
    function()
    local placeholder = { mesh = { status = "DOWN",
      nodes = { { host = "0.0.0.0", status = "UNAVAILABLE" } } } }
    local h = testing.host{ ctl = function(_, argv)
      return argv[#argv] == "-q" and testing.NO_IPV6 or placeholder
    end }
    local t0 = h.now()
    local o, m = run(h)
    assert.equal("config-fault", o, m)
    assert.is_true(h.now() - t0 < 2, "at the first poll")
    assert.same({ "-c " .. CONFIG .. " -N -j", "-c " .. CONFIG .. " -q" }, ctl_calls(h))
    assert.matches("nvidia-imex-ctl -q: local IMEX daemon unreachable (exit 1, 'Query Status returned error "
      .. "code: 14 - failed to connect to all addresses; last error: UNKNOWN: ipv6:%5B::%5D:50005: Address "
      .. "family not supported by protocol')", m, 1, true)
    -- a daemon that is only down: -q says so, and the wait goes on (blamed on this node at its end)
    h = testing.host{ ctl = function(_, argv)
      return argv[#argv] == "-q" and testing.UNREACHABLE or placeholder
    end }
    o, m = run(h)
    assert.equal("domain-unhealthy", o, m)
    local q = 0
    for _, c in ipairs(ctl_calls(h)) do if c:match("%-q$") then q = q + 1 end end
    assert.equal(1, q)
  end)

  it("plan flags it (text and --json config_warnings), changing nothing", function()
    local h = testing.host{ files = NO_V6, ctl = v4_only_ctl }
    local o, m, report = run(h, { command = "plan", dry_run = true })
    assert.equal("ok", o, m)
    assert.matches("\nconfig warning: " .. CONFIG .. ": IMEX_CMD_BIND_INTERFACE_IP is empty and this host "
      .. "has no IPv6", report, 1, true)
    H.assert_untouched(h)
    local _, _, js = run(testing.host{ files = NO_V6, ctl = v4_only_ctl }, { command = "plan", dry_run = true,
      json = true })
    local doc = cjson.decode(js)
    assert.equal(1, #doc.config_warnings)
    assert.matches("imexguard asks the daemon with -i 127.0.0.1 50005", doc.config_warnings[1], 1, true)
    assert.same({}, doc.config_findings)
    assert.is_false(doc.config_fault)
    -- a host with IPv6: none
    _, _, js = run(testing.host{}, { command = "plan", dry_run = true, json = true })
    assert.same({}, cjson.decode(js).config_warnings)
  end)

  it("status and health reach the daemon with -i and are ok; status says the warning", function()
    local files = H.registered()
    files[testing.IF_INET6] = false
    local h = testing.host{ files = files, ctl = v4_only_ctl }
    local o, m, report = run(h, { command = "status" })
    assert.equal("ok", o, m)
    assert.matches("\nconfig warning: " .. CONFIG .. ": IMEX_CMD_BIND_INTERFACE_IP is empty", report, 1, true)
    local _, _, js = run(h, { command = "status", json = true })
    assert.equal(1, #cjson.decode(js).config_warnings)
    o, m = run(h, { command = "health" })
    assert.equal("ok", o, m)
    for _, c in ipairs(ctl_calls(h)) do assert.equal("-c " .. CONFIG .. " -i 127.0.0.1 50005 -N -j", c) end
  end)

  it("the static policy asks with -i too, and its plan names the warning", function()
    local h = testing.host{ files = NO_V6, ctl = v4_only_ctl }
    local o, m = static.prolog(testing.ctx{ host = h })
    assert.equal("ok", o, m)
    for _, c in ipairs(ctl_calls(h)) do assert.equal("-c " .. CONFIG .. " -i 127.0.0.1 50005 -N -j", c) end
    h = testing.host{ files = NO_V6, ctl = v4_only_ctl }
    o, m = static.plan(testing.ctx{ host = h, command = "plan" })
    assert.equal("ok", o, m)
    assert.matches("config warning: " .. CONFIG .. ": IMEX_CMD_BIND_INTERFACE_IP is empty and this host has "
      .. "no IPv6", m, 1, true)
  end)
end)

describe("C50: one IMEX session per driver; every service-failed quotes the daemon", function()
  -- A node whose unit is stopped; its start fails (exit-code) after the daemon said `said`.
  local function failing_start(said, extra)
    local o = { unit = { active_state = "inactive" }, restart = { result = "failed", journal = said.journal,
      appends = said.appends } }
    for k, v in pairs(extra or {}) do o[k] = v end
    return testing.host(o)
  end

  it("the daemon's error line from its journal, and the process holding the session (the "
    .. "fabric-imex-mgmt capability device's holder, labelled a guess)", function()
    local h = failing_start({ journal = { { message = "[INFO] starting" }, { message = IN_USE },
      { message = "[INFO] exiting" } } }, { files = { [CAP] = "DeviceFileMinor: 5\n", [DEV] = "" },
      file_holders = { [DEV] = { { pid = 4242, comm = "nvidia-imex",
        cmdline = "nvidia-imex -c /ctr/config.cfg" } } } })
    local o, m = run(h)
    assert.equal("service-failed", o, m)
    assert.equal(7, outcomes.exit_code(o))
    assert.matches("systemd start of nvidia.imex.service failed", m)
    assert.matches("the daemon's last error line (journal of nvidia-imex.service): '" .. IN_USE .. "'", m, 1,
      true)
    assert.matches("the IMEX session is held by pid 4242 (nvidia-imex -c /ctr/config.cfg), which keeps "
      .. DEV .. " open (the fabric-imex-mgmt capability device, which a daemon holding the session keeps "
      .. "open: a guess)", m, 1, true)
    H.assert_one_line(m)
  end)

  it("NV_ERR_IN_USE followed by another error line (the daemon's exit): the session's line is quoted, "
    .. "the cause, and its holder named; from the journal and from LOG_FILE_NAME", function()
    local EXIT = "[Dec 01 2026 10:00:01.130] [ERROR] [tid 77] IMEX daemon initialization failed, exiting"
    local holder = { files = { [CAP] = "DeviceFileMinor: 5\n", [DEV] = "" },
      file_holders = { [DEV] = { { pid = 4242, comm = "nvidia-imex",
        cmdline = "nvidia-imex -c /ctr/c.cfg" } } } }
    local h = failing_start({ journal = { { message = IN_USE }, { message = EXIT } } }, holder)
    local o, m = run(h)
    assert.equal("service-failed", o, m)
    assert.matches("the daemon's last error line (journal of nvidia-imex.service): '" .. IN_USE .. "'", m, 1,
      true)
    assert.matches("the IMEX session is held by pid 4242 (nvidia-imex -c /ctr/c.cfg)", m, 1, true)
    holder.files[LOG] = ""
    h = failing_start({ appends = { [LOG] = IN_USE .. "\n" .. EXIT .. "\n" } }, holder)
    o, m = run(h)
    assert.equal("service-failed", o, m)
    assert.matches("the daemon's last error line (" .. LOG .. "): '" .. IN_USE .. "'", m, 1, true)
    assert.matches("the IMEX session is held by pid 4242", m, 1, true)
  end)

  it("LOG_FILE_NAME when the journal has nothing: only what this start appended; the setting "
    .. "imex_session_file names the file the holder keeps open", function()
    local h = failing_start({ appends = { [LOG] = "[INFO] starting\n" .. IN_USE .. "\n" } },
      { files = { [LOG] = "[ERROR] a week-old error\n", ["/run/sim/session"] = "" },
        file_holders = { ["/run/sim/session"] = { { pid = 77, comm = "imexsim",
          cmdline = "imexsim -c /o.cfg" } } } })
    local o, m = run(h, { settings = { imex_session_file = "/run/sim/session" } })
    assert.equal("service-failed", o, m)
    assert.matches("the daemon's last error line (" .. LOG .. "): '" .. IN_USE .. "'", m, 1, true)
    assert.is_nil(m:find("week-old", 1, true))
    assert.matches("held by pid 77 (imexsim -c /o.cfg), which keeps /run/sim/session open (setting "
      .. "imex_session_file)", m, 1, true)
  end)

  it("another start failure quotes its line, without a holder; nothing said, nothing quoted", function()
    local line = "[ERROR] [tid 39] No matching network interface found for any IP addresses in the node "
      .. "configuration file"
    local h = failing_start({ journal = { { message = line } } })
    local o, m = run(h)
    assert.equal("service-failed", o, m)
    assert.matches("'" .. line .. "'", m, 1, true)
    assert.is_nil(m:find("session", 1, true))
    h = failing_start({})
    o, m = run(h)
    assert.equal("service-failed", o, m)
    assert.is_nil(m:find("last error line", 1, true))
    assert.equal(0, h.count("file_holders"))
  end)

  it("a daemon that dies right after a start that succeeded is quoted too", function()
    local h = testing.host{ unit = { active_state = "inactive" },
      restart = { active_state = "failed", appends = { [LOG] = IN_USE .. "\n" } } }
    local o, m = run(h)
    assert.equal("service-failed", o, m)
    assert.matches("is failed right after start", m)
    assert.matches("'" .. IN_USE .. "'", m, 1, true)
  end)

  it("after start-limit-hit, the retry's failure quotes what the daemon said", function()
    local h = testing.host{ unit = { active_state = "inactive" }, restart = {
      { result = "failed", unit_result = "start-limit-hit" },
      { result = "failed", journal = { { message = IN_USE } } } } }
    local o, m = run(h)
    assert.equal("service-failed", o, m)
    assert.matches("after reset-failed", m, 1, true)
    assert.matches("'" .. IN_USE .. "'", m, 1, true)
  end)

  it("a unit that stays activating past start_timeout is quoted with what its daemon said since its start",
    function()
    local started = testing.WALL0 * 1e6 - 10e6
    local inv = "0123456789abcdef0123456789abcdef"
    local h = testing.host{ unit = { active_state = "activating", exec_main_start_us = started,
      invocation_id = inv },
      files = { [LOG] = { data = "[ERROR] before this start\n", mtime_us = started - 1 } },
      journal = { { message = "[ERROR] [tid 5] Waiting for the fabric manager", realtime_us = started + 1,
        fields = { _SYSTEMD_UNIT = testing.UNIT, _SYSTEMD_INVOCATION_ID = inv } } } }
    local o, m = run(h)
    assert.equal("service-failed", o, m)
    assert.matches("still activating after 30 s (wait-timeout); the daemon's last error line (journal of "
      .. "nvidia-imex.service): '[ERROR] [tid 5] Waiting for the fabric manager'", m, 1, true)
  end)

  it("status and health of a failed unit quote its daemon's last error line", function()
    local inv = "0123456789abcdef0123456789abcdef"
    local h = testing.host{ unit = { active_state = "failed", result = "exit-code", main_pid = 0,
      invocation_id = inv }, ctl = { testing.UNREACHABLE },
      journal = { { message = IN_USE,
        fields = { _SYSTEMD_UNIT = testing.UNIT, _SYSTEMD_INVOCATION_ID = inv } } } }
    for _, command in ipairs({ "status", "health" }) do
      local o, m = run(h, { command = command })
      assert.equal("service-failed", o, m)
      assert.matches("nvidia%-imex%.service is failed", m)
      assert.matches("the daemon's last error line (journal of nvidia-imex.service): '" .. IN_USE .. "'", m,
        1, true)
    end
  end)

  it("the static policy names a failed unit with its daemon's line (it never starts it)", function()
    local inv = "0123456789abcdef0123456789abcdef"
    local h = testing.host{ unit = { active_state = "failed", result = "exit-code", main_pid = 0,
      invocation_id = inv },
      journal = { { message = IN_USE,
        fields = { _SYSTEMD_UNIT = testing.UNIT, _SYSTEMD_INVOCATION_ID = inv } } } }
    local o, m = static.prolog(testing.ctx{ host = h })
    assert.equal("domain-unhealthy", o, m)
    assert.matches("never starts it; the daemon's last error line", m)
    assert.matches(IN_USE, m, 1, true)
    assert.same({}, h.jobs)
  end)
end)
