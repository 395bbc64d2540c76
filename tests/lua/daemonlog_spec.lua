-- SPDX-License-Identifier: Apache-2.0
-- lua/imexguard/daemonlog.lua (C50): the daemon's own last error line after a failed start, from the
-- unit's journal or LOG_FILE_NAME, bounded by a mark taken before the start, and who holds the
-- node's one IMEX session for NV_ERR_IN_USE; against the test kit's host.
local daemonlog = require("imexguard.daemonlog")
local imexcfg = require("imexguard.imexcfg")
local testing = require("imexguard.testing")

local LOG = "/var/log/nvidia-imex.log"
local IN_USE = "[Dec 01 2026 10:00:01.123] [ERROR] [tid 77] Failed to allocate Imex session, status: "
  .. "NV_ERR_IN_USE"
local CFG = assert(imexcfg.parse(testing.CONFIG_TEXT))
local INVOCATION = "0123456789abcdef0123456789abcdef"

-- A journal entry of the unit's invocation.
local function entry(message, priority)
  return { message = message, priority = priority,
    fields = { _SYSTEMD_UNIT = testing.UNIT, _SYSTEMD_INVOCATION_ID = INVOCATION } }
end

describe("daemonlog.is_error", function()
  it("a level tag [ERROR], [FATAL] or [CRITICAL], or a journal priority of err or worse", function()
    assert.is_true(daemonlog.is_error("[ERROR] [tid 39] No matching network interface found"))
    assert.is_true(daemonlog.is_error("[x] [FATAL] boom"))
    assert.is_true(daemonlog.is_error("plain words", 3))
    assert.is_true(daemonlog.is_error("plain words", 0))
    assert.is_false(daemonlog.is_error("[INFO] [tid 141] Attempting connection", 6))
    assert.is_false(daemonlog.is_error("an error in lower case"))
  end)
end)

describe("daemonlog.last_error", function()
  local props = { invocation_id = INVOCATION, exec_main_start_us = 0 }

  it("the journal of the unit's invocation first: its last error line, not its last line", function()
    local h = testing.host{ journal = { entry("[INFO] starting"), entry(IN_USE), entry("[INFO] exiting") } }
    local said = daemonlog.last_error(testing.ctx{ host = h }, nil, props, CFG)
    assert.same({ line = IN_USE, error = true, source = "journal" }, said)
    -- matched on the unit and this invocation (the system manager)
    local call
    for _, c in ipairs(h.calls) do if c[1] == "journal_read" then call = c end end
    assert.same({ "_SYSTEMD_UNIT=" .. testing.UNIT, "_SYSTEMD_INVOCATION_ID=" .. INVOCATION }, call[2])
    -- another invocation's lines are not this start's
    h = testing.host{ journal = { { message = IN_USE, fields = { _SYSTEMD_UNIT = testing.UNIT,
      _SYSTEMD_INVOCATION_ID = string.rep("f", 32) } } } }
    assert.is_nil(daemonlog.last_error(testing.ctx{ host = h }, nil, props, CFG))
  end)

  it("on another bus (a user manager) the unit is matched as a user unit", function()
    local h = testing.host{ journal = { { message = IN_USE,
      fields = { _SYSTEMD_USER_UNIT = testing.UNIT } } } }
    local ctx = testing.ctx{ host = h, settings = { bus = "user" } }
    assert.equal(IN_USE, daemonlog.last_error(ctx, nil, props, CFG).line)
  end)

  it("else LOG_FILE_NAME: only what the daemon appended since the mark; the last line when no error",
    function()
    local h = testing.host{ files = { [LOG] = "[ERROR] an old start's error\n[INFO] old\n" } }
    local ctx = testing.ctx{ host = h }
    local mark = daemonlog.mark(ctx, CFG)
    assert.equal(LOG, mark.log)
    assert.is_nil(daemonlog.last_error(ctx, mark, props))
    h.set_file(LOG, h.file(LOG) .. "[INFO] starting\n" .. IN_USE .. "\n[INFO] exiting\n\n")
    assert.same({ line = IN_USE, error = true, source = LOG }, daemonlog.last_error(ctx, mark, props))
    h.set_file(LOG, h.file(LOG) .. "[INFO] more\n")
    local m2 = daemonlog.mark(ctx, CFG)
    h.set_file(LOG, h.file(LOG) .. "[INFO] the last words\n")
    assert.same({ line = "[INFO] the last words", error = false, source = LOG },
      daemonlog.last_error(ctx, m2, props))
    -- LOG_FILE_NAME of config.cfg
    local cfg = assert(imexcfg.parse("LOG_FILE_NAME=/var/log/site-imex.log\n"))
    assert.equal("/var/log/site-imex.log", daemonlog.mark(ctx, cfg).log)
    assert.is_nil(daemonlog.mark(ctx, assert(imexcfg.parse("LOG_FILE_NAME=\n"))).log)
  end)

  it("an error line of the log beats a journal that has only other lines", function()
    local h = testing.host{ journal = { entry("[INFO] exiting") }, files = { [LOG] = IN_USE .. "\n" } }
    local said = daemonlog.last_error(testing.ctx{ host = h }, { log = LOG }, props)
    assert.same({ line = IN_USE, error = true, source = LOG }, said)
    h = testing.host{ journal = { entry("[INFO] exiting") }, files = { [LOG] = "[INFO] fine\n" } }
    said = daemonlog.last_error(testing.ctx{ host = h }, { log = LOG }, props)
    assert.same({ line = "[INFO] exiting", error = false, source = "journal" }, said)
  end)

  it("without a mark, the log counts only when written since the unit's last start", function()
    local h = testing.host{ files = { [LOG] = { data = IN_USE .. "\n", mtime_us = 1000 } } }
    local ctx = testing.ctx{ host = h }
    assert.is_nil(daemonlog.last_error(ctx, nil, { exec_main_start_us = 2000 }, CFG))
    assert.equal(IN_USE, daemonlog.last_error(ctx, nil, { exec_main_start_us = 500 }, CFG).line)
  end)

  it("a journal that cannot be read, or a host without the primitives, proves nothing", function()
    local h = testing.host{ journal = "EACCES", files = { [LOG] = IN_USE .. "\n" } }
    assert.equal(LOG, daemonlog.last_error(testing.ctx{ host = h }, { log = LOG }, props).source)
    h.journal_read, h.read_tail = nil, nil
    assert.is_nil(daemonlog.last_error(testing.ctx{ host = h }, { log = LOG }, props))
  end)
end)

describe("daemonlog.session_holder", function()
  local CAP = daemonlog.CAPABILITY

  it("the fabric-imex-mgmt capability device's holders, labelled a guess", function()
    local dev = "/dev/nvidia-caps/nvidia-cap5"
    local h = testing.host{ files = {
      [CAP] = "DeviceFileMinor: 5\nDeviceFileMode: 256\nDeviceFileModify: 1\n",
      [dev] = "", ["/proc/4242/cgroup"] = "0::/system.slice/docker-ab12.scope\n" },
      file_holders = { [dev] = { { pid = 4242, comm = "nvidia-imex",
        cmdline = "nvidia-imex -c /etc/imex.cfg" } } } }
    local s = daemonlog.session_holder(testing.ctx{ host = h })
    assert.equal("the IMEX session is held by pid 4242 (nvidia-imex -c /etc/imex.cfg; cgroup "
      .. "/system.slice/docker-ab12.scope), which keeps /dev/nvidia-caps/nvidia-cap5 open (the "
      .. "fabric-imex-mgmt capability device, which a daemon holding the session keeps open: a guess); "
      .. "one daemon per node holds it: stop the other one", s)
  end)

  it("the setting imex_session_file instead; more than two holders are counted", function()
    local list = {}
    for i = 1, 4 do list[i] = { pid = 100 + i, comm = "imexsim", cmdline = "imexsim -c /c" .. i } end
    local h = testing.host{ files = { ["/s"] = "" }, file_holders = { ["/s"] = list } }
    local s = daemonlog.session_holder(testing.ctx{ host = h, settings = { imex_session_file = "/s" } })
    assert.matches("held by pid 101 (imexsim -c /c1), pid 102 (imexsim -c /c2), 2 more, which keeps /s "
      .. "open (setting imex_session_file)", s, 1, true)
  end)

  it("says why the holder is not known: nobody visible, no capability file, no minor, a failed read",
    function()
    local h = testing.host{ files = { ["/s"] = "" } }
    local ctx = testing.ctx{ host = h, settings = { imex_session_file = "/s" } }
    assert.matches("no process visible here keeps /s open %(setting imex_session_file%): the holder runs in "
      .. "another PID namespace", daemonlog.session_holder(ctx))
    assert.equal(1, select(2, daemonlog.session_holder(testing.ctx{ host = testing.host() })
      :gsub("^who holds it is not known here %(" .. CAP:gsub("%p", "%%%0") .. ": ", "")))
    h = testing.host{ files = { [CAP] = "nothing useful\n" } }
    assert.matches("names no DeviceFileMinor", daemonlog.session_holder(testing.ctx{ host = h }))
    h = testing.host{ files = { ["/s"] = "" }, file_holders = { ["/s"] = "EACCES" } }
    assert.matches("^who holds it is not known here %(file holders of /s: EACCES%)",
      daemonlog.session_holder(testing.ctx{ host = h, settings = { imex_session_file = "/s" } }))
  end)
end)

describe("daemonlog.explain", function()
  it("quotes the line with its source, its start and end kept; NV_ERR_IN_USE adds the holder", function()
    local h = testing.host{ journal = { entry(IN_USE) }, files = { ["/s"] = "" },
      file_holders = { ["/s"] = { { pid = 9, comm = "imexsim", cmdline = "imexsim -c /other.cfg" } } } }
    local ctx = testing.ctx{ host = h, settings = { imex_session_file = "/s" } }
    local s = daemonlog.explain(ctx, nil, { invocation_id = INVOCATION })
    assert.equal("; the daemon's last error line (journal of nvidia-imex.service): '" .. IN_USE
      .. "'; the IMEX session is held by pid 9 (imexsim -c /other.cfg), which keeps /s open (setting "
      .. "imex_session_file); one daemon per node holds it: stop the other one", s)
    local long = "[ERROR] " .. string.rep("x", 500) .. " the cause at the end"
    h = testing.host{ journal = { entry(long .. "\nsecond line") } }
    s = daemonlog.explain(testing.ctx{ host = h }, nil, { invocation_id = INVOCATION })
    assert.matches("'%[ERROR%] x+ %.%.%. x+ the cause at the end second line'$", s)
    assert.is_true(#s < 400)
    assert.equal("", daemonlog.explain(testing.ctx{ host = testing.host() }, nil, {}, CFG))
  end)
end)
