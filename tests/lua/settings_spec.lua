-- SPDX-License-Identifier: Apache-2.0
-- lua/imexguard/settings.lua: schema, loading in an empty env, validation, --set overrides, and
-- the example file documenting every setting.
local S = require("imexguard.settings")

describe("imexguard.settings", function()
  describe("defaults and validate", function()
    it("fills every default into a copy", function()
      local t = assert(S.validate({}))
      assert.same({
        deadline = 90, unit = "nvidia-imex.service", bus = "system",
        imex_config = "/etc/nvidia-imex/config.cfg", ctl = "/usr/bin/nvidia-imex-ctl",
        ctl_timeout = 5, state_dir = "/run/imexguard",
        boot_id_file = "/proc/sys/kernel/random/boot_id", address_source = "dns", resolve_timeout = 2,
        domain_map = "auto", slurmctld_topology = "auto", membership = "list",
        slot_hosts = "/run/imexguard/hosts",
        allow_loopback = false, start_timeout = 30, health_timeout = 60,
        poll_interval = 0.25, nudge = true, nudge_after = 1, stale_mismatch_after = 3,
        watch = true, watch_skew = 10, watch_interval = 1, sigusr1_min_version = "580",
        on_peer_fault = "warn",
        restart_under_jobs = false, fabric_check = "auto", nvidia_smi = "/usr/bin/nvidia-smi",
        fabric_timeout = 30, on_fabric_unknown = "skip", driver_version_file = "/proc/driver/nvidia/version",
        log_journal = true, log_level = "info",
        imex_channels = "off", imex_channel_dir = "/dev/nvidia-caps-imex-channels",
        imex_channel_mode = "0666",
        proc_devices = "/proc/devices", slurm_conf = "/etc/slurm/slurm.conf", drain_reason = false,
        scontrol = "/usr/bin/scontrol", slurm_extra = false, reset_failed_retry = true,
        manage_disabled_unit = false,
        flapping_restarts = 3, flapping_window = 600,
        conflict_wait = 5, memory_limit = 256, on_config_fault = "fail",
        proc_if_inet6 = "/proc/net/if_inet6",
      }, t)
      assert.is_nil(t.metrics_dir)
      assert.is_nil(t.nodes_file)
      assert.is_nil(t.address_map)
      assert.is_nil(t.policy)
      assert.is_nil(t.imex_session_file)
      assert.same(t, S.defaults())
    end)

    it("keeps given values and does not modify its input", function()
      local raw = { deadline = 20, ctl = { "/usr/bin/sudo", "nvidia-imex-ctl" }, bus = "unix:path=/x",
        nodes_file = "/tmp/n.cfg", log_level = "debug", allow_loopback = true }
      local t = assert(S.validate(raw))
      assert.equal(20, t.deadline)
      assert.same({ "/usr/bin/sudo", "nvidia-imex-ctl" }, t.ctl)
      assert.are_not.equal(raw.ctl, t.ctl)
      assert.equal("unix:path=/x", t.bus)
      assert.equal("/tmp/n.cfg", t.nodes_file)
      assert.is_true(t.allow_loopback)
      assert.equal("debug", t.log_level)
      t.deadline = 1
      assert.equal(20, raw.deadline)
      assert.is_nil(raw.unit)
    end)

    it("refuses unknown keys, naming them", function()
      local t, err = S.validate({ deadlin = 5 })
      assert.is_nil(t)
      assert.equal("unknown setting 'deadlin'", err)
      assert.equal("unknown setting '1'", select(2, S.validate({ 5 })))
    end)

    local bad = {
      { "deadline", "90", "must be a number > 0" },
      { "deadline", 0, "must be a number > 0" },
      { "deadline", -1, "must be a number > 0" },
      { "deadline", 0 / 0, "must be a number > 0" },
      { "deadline", math.huge, "must be a number > 0" },
      { "poll_interval", false, "must be a number > 0" },
      { "unit", 5, "must be a non%-empty string" },
      { "unit", "", "must be a non%-empty string" },
      { "allow_loopback", "yes", "must be true or false" },
      { "on_peer_fault", "drain", "must be one of \"warn\", \"fail\"" },
      { "address_source", "ldap", "must be one of \"dns\", \"map\"" },
      { "log_level", "warn", "must be one of \"debug\", \"info\", \"notice\", \"warning\", \"err\"" },
      { "bus", "session", "must be \"system\", \"user\" or a D%-Bus address" },
      { "ctl", {}, "must be a path or a non%-empty list of strings" },
      { "ctl", { "a", 5 }, "must be a path or a non%-empty list of strings" },
      { "ctl", { x = "a" }, "must be a path or a non%-empty list of strings" },
      { "nodes_file", true, "must be an absolute path" },
      { "state_dir", "run/imexguard", "must be an absolute path" },
      { "imex_config", "", "must be an absolute path" },
      { "address_map", "./hosts", "must be an absolute path" },
    }
    for _, case in ipairs(bad) do
      local key, value, want = case[1], case[2], case[3]
      it(string.format("refuses %s = %s", key, tostring(value)), function()
        local t, err = S.validate({ [key] = value })
        assert.is_nil(t)
        assert.matches("^setting '" .. key .. "' " .. want, err)
      end)
    end

    it("names a refused multi-line value on one line, its newlines escaped", function()
      for _, v in ipairs({ "a\nb", "\n\n", "x\r\ny\n" }) do
        local t, err = S.validate({ bus = v })
        assert.is_nil(t)
        assert.is_nil(err:find("[\r\n]"), err)
        assert.matches("^setting 'bus' must be ", err)
      end
      assert.truthy(select(2, S.validate({ bus = "a\nb" })):find([[got string "a\nb"]], 1, true))
    end)

    it("refuses a non-table", function()
      assert.equal("settings must be a table, got string", select(2, S.validate("x")))
    end)
  end)

  describe("load", function()
    it("reads top-level assignments", function()
      local t = assert(S.load('unit = "imex.service"\ndeadline = 30\nctl = { "/a", "-x" }\n', "@c.conf"))
      assert.same({ unit = "imex.service", deadline = 30, ctl = { "/a", "-x" } }, t)
      assert.is_nil(getmetatable(t))
    end)

    it("reads a returned table", function()
      assert.same({ deadline = 5 }, assert(S.load("return { deadline = 5 }", "@c.conf")))
    end)

    it("reads an empty or comment-only file as no settings", function()
      assert.same({}, assert(S.load("", "@c.conf")))
      assert.same({}, assert(S.load("-- deadline = 90\n", "@c.conf")))
    end)

    it("allows reading a name assigned above", function()
      assert.same({ lock_timeout = 10, start_timeout = 10 },
        assert(S.load("lock_timeout = 10\nstart_timeout = lock_timeout\n", "@c.conf")))
    end)

    it("offers no functions: a call or an unassigned name is an error with file:line", function()
      local t, err = S.load('unit = "a"\nstate_dir = os.getenv("HOME")\n', "@/etc/c.conf")
      assert.is_nil(t)
      assert.matches("^/etc/c.conf:2: undefined name 'os'", err)
      assert.matches("^/etc/c.conf:1: undefined name 'print'",
        select(2, S.load('print("x")', "@/etc/c.conf")))
      assert.matches("^/etc/c.conf:1: undefined name 'nvidia'",
        select(2, S.load("unit = nvidia", "@/etc/c.conf")))
    end)

    it("reports a syntax error with file:line", function()
      local t, err = S.load("deadline = 5\nunit = = 'x'\n", "@/etc/c.conf")
      assert.is_nil(t)
      assert.matches("^/etc/c.conf:2:", err)
    end)

    it("refuses a non-table return and mixing both styles", function()
      assert.equal("c.conf: must return a table of settings, returned number",
        select(2, S.load("return 5", "@c.conf")))
      assert.equal("c.conf: both assigns settings and returns a table: use one style",
        select(2, S.load("deadline = 1\nreturn { unit = 'x' }", "@c.conf")))
    end)

    it("refuses a non-string text", function()
      assert.is_nil((S.load(nil)))
    end)
  end)

  describe("apply_overrides", function()
    it("parses values by the schema's kind and does not modify its input", function()
      local raw = { deadline = 10, unit = "a" }
      local t = assert(S.apply_overrides(raw, {
        "deadline=2.5", "allow_loopback=yes", "log_journal=0", "unit=b.service",
        "ctl=/usr/bin/sudo /usr/bin/nvidia-imex-ctl", "bus=unix:path=/run/x=y",
      }))
      assert.same({ deadline = 2.5, allow_loopback = true, log_journal = false, unit = "b.service",
        ctl = { "/usr/bin/sudo", "/usr/bin/nvidia-imex-ctl" }, bus = "unix:path=/run/x=y" }, t)
      assert.same({ deadline = 10, unit = "a" }, raw)
      assert.equal("/x", assert(S.apply_overrides({}, { "ctl=/x" })).ctl)
    end)

    it("unsets an optional setting with an empty value", function()
      local t = assert(S.apply_overrides({ nodes_file = "/n" }, { "nodes_file=" }))
      assert.is_nil(t.nodes_file)
    end)

    it("names the key of a bad override", function()
      assert.equal("--set: unknown setting 'dead'", select(2, S.apply_overrides({}, { "dead=1" })))
      assert.equal("--set deadline: 'soon' is not a number",
        select(2, S.apply_overrides({}, { "deadline=soon" })))
      assert.equal("--set allow_loopback: 'maybe' is not a boolean (true/false, yes/no, on/off, 1/0)",
        select(2, S.apply_overrides({}, { "allow_loopback=maybe" })))
      assert.equal("--set expects KEY=VALUE, got 'deadline'",
        select(2, S.apply_overrides({}, { "deadline" })))
    end)

    it("leaves enum and range checks to validate", function()
      local t = assert(S.apply_overrides({}, { "log_level=loud" }))
      assert.matches("^setting 'log_level' must be one of", select(2, S.validate(t)))
      t = assert(S.apply_overrides({}, { "deadline=-3" }))
      assert.matches("^setting 'deadline' must be a number > 0", select(2, S.validate(t)))
    end)
  end)

  describe("readonly", function()
    it("reads through, refuses assignment and unknown keys, iterates", function()
      local t = assert(S.validate({ ctl = { "/a", "-b" } }))
      local ro = S.readonly(t, "ctx.settings", S.by_name)
      assert.equal("nvidia-imex.service", ro.unit)
      assert.is_nil(ro.nodes_file)
      assert.equal("-b", ro.ctl[2])
      assert.equal(2, #ro.ctl)
      assert.has_error(function() ro.unit = "x" end, "ctx.settings is read-only (assignment to 'unit')")
      assert.has_error(function() ro.ctl[1] = "x" end, "ctx.settings is read-only (assignment to '1')")
      assert.has_error(function() return ro.unitt end, "ctx.settings: unknown setting 'unitt'")
      local keys = {}
      for k in pairs(ro) do keys[#keys + 1] = k end
      local unset = 0
      for _, e in ipairs(S.schema) do
        if e.default == nil then unset = unset + 1 end
      end
      assert.is_true(unset >= 3) -- nodes_file, address_map, policy, ... have no default
      assert.equal(#S.schema - unset, #keys)
      local seen = {}
      for i, v in ipairs(ro.ctl) do seen[i] = v end
      assert.same({ "/a", "-b" }, seen)
      assert.is_false(getmetatable(ro))
      assert.equal("nvidia-imex.service", t.unit)
    end)
  end)

  describe("contrib/imexguard.conf.example", function()
    local f = assert(io.open("contrib/imexguard.conf.example"))
    local text = f:read("a")
    f:close()

    it("loads as all defaults (everything commented out)", function()
      local raw = assert(S.load(text, "@contrib/imexguard.conf.example"))
      assert.same({}, raw)
    end)

    it("documents every setting with its default", function()
      for _, e in ipairs(S.schema) do
        local line = text:match("\n%-%- " .. e.name .. " = ([^\n]*)")
        assert(line, "setting " .. e.name .. " is not documented")
        if e.default ~= nil then
          local value = assert(load("return " .. line))()
          assert.same(e.default, assert(S.validate({ [e.name] = value }))[e.name], e.name)
        end
        -- uncommented, the documented value itself is valid
        local raw = assert(S.load(e.name .. " = " .. line, "@example"))
        assert(S.validate(raw))
      end
    end)

    it("reads a mode as an octal string, never as a decimal number", function()
      assert.equal("0660", assert(S.validate({ imex_channel_mode = "0660" })).imex_channel_mode)
      assert.equal("600", assert(S.validate({ imex_channel_mode = "600" })).imex_channel_mode)
      -- validating validated settings changes nothing (check and the kit validate again)
      local t = assert(S.validate({}))
      assert.same(t, assert(S.validate(t)))
      local bad, err = S.validate({ imex_channel_mode = 666 })
      assert.is_nil(bad)
      assert.matches("setting 'imex_channel_mode' must be an octal string", err)
      assert.is_nil((S.validate({ imex_channel_mode = "0999" })))
    end)

    it("has a one-line doc with the unit for every setting", function()
      for _, e in ipairs(S.schema) do
        assert.is_string(e.doc)
        assert.not_matches("\n", e.doc)
        if e.kind == "number" then assert.matches("^" .. (e.unit or "seconds"), e.doc, nil, false) end
      end
    end)
  end)
  describe("memory_limit (the allocator limit of the Lua state)", function()
    it("defaults to 256 MiB and takes a number of MiB from 16 up", function()
      assert.equal(256, assert(S.validate({})).memory_limit)
      assert.equal(64, assert(S.validate({ memory_limit = 64 })).memory_limit)
      assert.equal(16, assert(S.validate({ memory_limit = 16 })).memory_limit)
      local raw = assert(S.apply_overrides({}, { "memory_limit=1024" }))
      assert.equal(1024, assert(S.validate(raw)).memory_limit)
    end)

    it("refuses a limit below 16 MiB or not a number, naming the setting and the unit", function()
      for _, v in ipairs({ 15, 0, -1, 0 / 0, math.huge, "64" }) do
        local t, err = S.validate({ memory_limit = v })
        assert.is_nil(t, tostring(v))
        assert.matches("setting 'memory_limit' must be a number >= 16 (MiB)", err, 1, true)
      end
    end)
  end)

  describe("unit lifecycle settings (start limit, disabled unit, late epilog)", function()
    it("default: one retry after start-limit-hit, a disabled unit skipped, a 5 s conflict wait", function()
      local t = assert(S.validate({}))
      assert.is_true(t.reset_failed_retry)
      assert.is_false(t.manage_disabled_unit)
      assert.equal(5, t.conflict_wait)
    end)

    it("reject bad values naming the setting", function()
      local t, err = S.validate({ conflict_wait = -1 })
      assert.is_nil(t)
      assert.matches("conflict_wait", err)
      t, err = S.validate({ manage_disabled_unit = "yes" })
      assert.is_nil(t)
      assert.matches("manage_disabled_unit", err)
      t, err = S.validate({ reset_failed_retry = 1 })
      assert.is_nil(t)
      assert.matches("reset_failed_retry", err)
    end)
  end)

  describe("command_argv (the ctl and scontrol settings)", function()
    it("puts a path first and a list as the argv prefix, then the arguments, in a new list", function()
      assert.same({ "/usr/bin/nvidia-imex-ctl", "-N", "-j" },
        S.command_argv("/usr/bin/nvidia-imex-ctl", { "-N", "-j" }))
      local prefix = { "/usr/bin/timeout", "3", "/usr/bin/scontrol" }
      local argv = S.command_argv(prefix, { "update", "State=DRAIN" })
      assert.same({ "/usr/bin/timeout", "3", "/usr/bin/scontrol", "update", "State=DRAIN" }, argv)
      assert.equal(3, #prefix)
    end)
  end)
end)
