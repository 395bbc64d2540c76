-- SPDX-License-Identifier: Apache-2.0
-- The imexguard command line (src/main.c, src/cli.c, lua/imexguard/driver.lua): usage errors,
-- --help/--version, settings (file, --set, --deadline), the context given to the policy, check,
-- status, plan, and the final log line.
-- Runs the BUILT binary ($IMEXGUARD_BUILD/imexguard) on policies in a private temp dir.
local H = require("helpers")
local final = H.final

-- A number #defined in a header of src/ (the bounds below follow the code's own constants).
local function define(header, name)
  local v = (H.read("src/" .. header) or ""):match("#define%s+" .. name .. "%s+([%d.]+)")
  return assert(tonumber(v), name .. " not found in src/" .. header)
end

-- Timing bounds of a run that the deadline ends. The code guarantees that the count hook
-- ends a busy policy IG_DEADLINE_GRACE s after the deadline, counted from the start of the run,
-- which precedes the policy's first line. The bound is taken from that first line (the policy logs
-- host.now()) to the return of the harness, so the start of the process (exec, dynamic loading,
-- ASan's set-up: up to 1.9 s under ASan beside two CPU hogs on 2 cores) is not in it, plus
-- EXIT_MARGIN for the end of the process and the harness's shell: measured up to 0.85 s under ASan
-- beside two CPU hogs, so 1.5 s. Which layer ended the run is checked by the message (the hook
-- names the policy's line, the watchdog says "watchdog:"), not by the clock.
local DEADLINE_GRACE = define("sandbox.h", "IG_DEADLINE_GRACE")
local EXIT_MARGIN = 1.5

-- A policy whose prolog and epilog log "start <host.now()>" and then loop forever.
local LOOP = "local P = {}\nfunction P.prolog(ctx) ctx.host.log('notice', string.format('start %.6f', "
  .. "ctx.host.now())) while true do end end\nP.epilog = P.prolog\nreturn P\n"

-- Assert that run r of LOOP (returned at monotonic time t_end) was ended by the count hook in
-- time for `deadline` seconds.
local function ended_by_hook(r, t_end, deadline)
  local f = final(r)
  assert.equal("deadline-exceeded", f.outcome, r.stderr)
  assert.equal(10, r.code)
  assert.not_matches("^watchdog:", f.message)
  assert.is_true(r.elapsed >= deadline, "ended before the deadline: " .. r.elapsed)
  local start = assert(tonumber(r.stderr:match("start (%d+%.%d+)")), r.stderr)
  local took = t_end - start
  local bound = deadline + DEADLINE_GRACE + EXIT_MARGIN
  assert.is_true(took < bound, string.format("%.2f s from the policy's start, bound %.2f s", took, bound))
end

-- Run the binary with args (list) and extra environment; {code, stdout, stderr, elapsed}.
-- env: the binary runs with `env -i` plus these variables (a controlled environment).
local function run(dir, args, env)
  return H.run_imexguard(args, { dir = dir, env = env })
end

describe("imexguard command line", function()
  local dir

  setup(function()
    H.imexguard_bin()
    dir = H.tmpdir()
    H.write(dir .. "/empty.conf", "")
  end)

  teardown(function() H.rmdir(dir) end)

  local count = 0
  local function file(text, ext)
    count = count + 1
    local path = string.format("%s/f%d.%s", dir, count, ext or "lua")
    H.write(path, text)
    return path
  end

  -- A policy whose prolog returns "ok" and a message built by `expr` (Lua, sees ctx).
  local function echo_policy(expr)
    return file("local P = {}\nfunction P.prolog(ctx) return 'ok', " .. expr .. " end\n"
      .. "function P.epilog(ctx) return 'ok', 'epilog ' .. tostring(ctx.job.id) end\nreturn P\n")
  end

  describe("usage", function()
    it("prints the version", function()
      for _, args in ipairs({ { "--version" }, { "-V" }, { "version" } }) do
        local r = run(dir, args)
        assert.equal(0, r.code)
        assert.matches("^imexguard %d+%.%d+%.%d+ %(Lua 5%.4%.%d+%)\n$", r.stdout)
      end
    end)

    it("--help lists commands, options, outcomes and exit codes", function()
      local r = run(dir, { "--help" })
      assert.equal(0, r.code)
      for _, word in ipairs({ "prolog", "epilog", "status", "plan", "check POLICY", "version",
        "--config FILE", "--policy FILE", "--deadline SECONDS", "--set KEY=VALUE", "--lua-dir DIR",
        "--json", "--timing", "policy-error 3", "deadline-exceeded 10", "exits 1", "settings-error 18",
        "config-test, -t", "show-config, -T", "--job ID", "--nodelist LIST", "KEY= unsets" }) do
        assert.matches(word, r.stdout, 1, true)
      end
    end)

    local bad = {
      { {}, "missing COMMAND" },
      { { "start" }, "unknown command 'start'" },
      { { "--frobnicate", "prolog" }, "unknown option '--frobnicate'" },
      { { "prolog", "--deadline" }, "option '--deadline' needs an argument" },
      { { "--deadline", "0", "prolog" }, "--deadline: '0' is not a number of seconds > 0" },
      { { "--deadline", "5s", "prolog" }, "--deadline: '5s' is not a number" },
      { { "--set", "deadline", "prolog" }, "--set: expected KEY=VALUE, got 'deadline'" },
      { { "check" }, "check: missing POLICY" },
      { { "prolog", "extra" }, "unexpected argument 'extra'" },
      { { "--lua-dir", "lua", "prolog" }, "--lua-dir lua: must be an absolute directory" },
    }
    for _, case in ipairs(bad) do
      it("exits 1 with a usage error: " .. table.concat(case[1], " "), function()
        local r = run(dir, case[1])
        assert.equal(1, r.code)
        assert.equal("", r.stdout)
        assert.matches("imexguard: " .. case[2], r.stderr, 1, true)
        assert.matches("Try 'imexguard --help'.", r.stderr, 1, true)
      end)
    end
  end)

  describe("--timing", function()
    -- A policy that sleeps 0.05 s (host.sleep), reads a file twice and decodes JSON once.
    local function timed_policy()
      return file("local cjson = require('cjson')\nlocal P = {}\nfunction P.prolog(ctx)\n"
        .. "  ctx.host.sleep(0.05)\n  ctx.host.read('/proc/self/stat', 4096)\n"
        .. "  ctx.host.read('/proc/self/stat', 4096)\n  cjson.decode('{}')\n  return 'ok', 'timed'\nend\n"
        .. "P.epilog = P.prolog\nreturn P\n")
    end

    it("prints disjoint phases that add up to the total, and each primitive's time and calls", function()
      local conf = dir .. "/empty.conf"
      local r = run(dir, { "--timing", "--config", conf, "--policy", timed_policy(), "prolog" })
      assert.equal(0, r.code, r.stderr)
      local t, calls = {}, {}
      for name, ms, rest in r.stderr:gmatch("timing: (%S+) ([%d.]+) ms([^\n]*)") do
        t[name] = tonumber(ms)
        calls[name] = tonumber(rest:match("(%d+) calls?"))
      end
      local sum = 0
      local phases = { "lua-state", "load-driver", "settings", "prepare", "invoke", "finish", "close" }
      for _, phase in ipairs(phases) do
        assert.is_number(t[phase], phase .. " missing in:\n" .. r.stderr)
        sum = sum + t[phase]
      end
      assert.near(t.total, sum, 0.01)
      assert.is_true(t["host.sleep"] >= 50, r.stderr)
      assert.is_true(t.invoke >= t["host.sleep"], r.stderr)
      assert.equal(1, calls["host.sleep"])
      -- the policy's two, and after the outcome the node condition's (runrecord.save_signals: the
      -- state file and the condition file; no state_dir here, so nothing is written)
      assert.equal(4, calls["host.read"])
      assert.equal(1, calls["cjson.decode"])
      assert.is_true(calls.load >= 2, r.stderr) -- the driver's modules and the policy
      assert.is_number(t["in-lua"])
      local heap = tonumber(r.stderr:match("timing: lua%-heap%-peak (%d+) KiB"))
      assert.is_true(heap and heap > 50 and heap < 256 * 1024, r.stderr)
      -- the final line comes before the timing lines, and a run without --timing prints none
      assert.matches("outcome=ok: timed\n.*timing: ", r.stderr)
      r = run(dir, { "--config", conf, "--policy", timed_policy(), "prolog" })
      assert.equal(0, r.code, r.stderr)
      assert.not_matches("timing:", r.stderr)
    end)

    it("counts the compiling of the policy file in load, not in in-lua", function()
      -- a function of 500000 table entries (never called) takes about 0.1 s to compile
      local big = file("local P = {}\nlocal function _() return {" .. string.rep("0,", 500000) .. "} end\n"
        .. "function P.prolog() return 'ok', 'timed' end\nP.epilog = P.prolog\nreturn P\n")
      local r = run(dir, { "--timing", "--config", dir .. "/empty.conf", "--policy", big, "prolog" })
      assert.equal(0, r.code, r.stderr)
      local t = {}
      for name, ms in r.stderr:gmatch("timing: (%S+) ([%d.]+) ms") do t[name] = tonumber(ms) end
      assert.is_true(t.prepare >= 20, r.stderr)
      assert.is_true(t.load >= 0.5 * t.prepare, r.stderr)
      assert.is_true(t["in-lua"] < 0.5 * t.prepare, r.stderr)
    end)
  end)

  describe("settings", function()
    it("gives the policy validated, read-only settings with defaults", function()
      local conf = file('unit = "imex-test.service"\nctl = { "/bin/echo", "ctl" }\n', "conf")
      local p = echo_policy("ctx.settings.unit .. ' ' .. ctx.settings.deadline .. ' ' .. "
        .. "ctx.settings.ctl[2] .. ' ' .. tostring(ctx.settings.nodes_file)")
      local r = run(dir, { "--config", conf, "--policy", p, "prolog" })
      assert.equal(0, r.code)
      assert.equal("imex-test.service 90 ctl nil", final(r).message)
      p = echo_policy("(function() ctx.settings.unit = 'x' return 'changed' end)()")
      r = run(dir, { "--config", conf, "--policy", p, "prolog" })
      assert.equal("policy-error", final(r).outcome)
      assert.matches("ctx.settings is read%-only", final(r).message)
      p = echo_policy("tostring(ctx.settings.unitt)")
      r = run(dir, { "--config", conf, "--policy", p, "prolog" })
      assert.matches("ctx.settings: unknown setting 'unitt'", final(r).message)
    end)

    it("accepts a settings file that returns a table", function()
      local conf = file('return { unit = "returned.service" }', "conf")
      local r = run(dir, { "--config", conf, "--policy", echo_policy("ctx.settings.unit"), "prolog" })
      assert.equal("returned.service", final(r).message)
    end)

    local function refused(conf_text, want)
      local conf = file(conf_text, "conf")
      local p = file("local P = {}\nfunction P.prolog() print('POLICY RAN') return 'ok', 'ran' end\n"
        .. "P.epilog = P.prolog\nreturn P\n")
      local r = run(dir, { "--config", conf, "--policy", p, "prolog" })
      local f = final(r)
      assert.equal("settings-error", f.outcome)
      assert.equal(18, r.code)
      assert.equal("err", f.level)
      assert.matches(want, f.message, 1, true)
      assert.not_matches("POLICY RAN", r.stderr)
      return conf, f
    end

    it("refuses an unknown key, naming it and the file; the policy does not run", function()
      local conf, f = refused('deadline = 30\nlock_timout = 5\n', "unknown setting 'lock_timout'")
      assert.equal("settings file " .. conf .. ":2: unknown setting 'lock_timout'", f.message)
    end)

    it("refuses a wrong type, naming the key", function()
      refused('deadline = "30"\n', "setting 'deadline' must be a number > 0 (seconds), got string \"30\"")
      local conf, f = refused('unit = "a"\n\n  on_peer_fault = "drain" -- site\n',
        "setting 'on_peer_fault' must be one of")
      assert.matches("^settings file " .. conf:gsub("%p", "%%%0") .. ":3: setting 'on_peer_fault'", f.message)
      conf, f = refused('return {\n  unit = "a",\n  deadline = -1,\n}\n', "setting 'deadline' must be")
      assert.matches("^settings file " .. conf:gsub("%p", "%%%0") .. ":3: ", f.message)
    end)

    it("refuses code in the settings file, with file:line", function()
      local conf = refused('unit = "a"\nstate_dir = os.getenv("HOME")\n', "undefined name 'os'")
      local r = run(dir, { "--config", conf, "--policy", echo_policy("'x'"), "prolog" })
      assert.matches(conf .. ":2: undefined name 'os'", final(r).message, 1, true)
    end)

    it("refuses a missing explicit settings file, naming it", function()
      local r = run(dir, { "--config", dir .. "/missing.conf", "--policy", echo_policy("'x'"), "prolog" })
      assert.equal(18, r.code)
      assert.equal("settings-error", final(r).outcome)
      assert.equal("cannot read settings file " .. dir .. "/missing.conf: No such file or directory",
        final(r).message)
    end)

    it("applies --set overrides over the file, parsed by type", function()
      local conf = file('unit = "file.service"\nlock_timeout = 5\n', "conf")
      local p = echo_policy("ctx.settings.unit .. ' ' .. ctx.settings.lock_timeout .. ' ' .. "
        .. "tostring(ctx.settings.allow_loopback)")
      local r = run(dir, { "--config", conf, "--set", "unit=set.service", "--set", "allow_loopback=true",
        "--policy", p, "prolog" })
      assert.equal("set.service 5 true", final(r).message)
      r = run(dir, { "--config", conf, "--set", "lock_timeout=soon", "--policy", p, "prolog" })
      assert.equal(18, r.code)
      assert.equal("settings-error", final(r).outcome)
      assert.equal("--set lock_timeout: 'soon' is not a number", final(r).message)
      r = run(dir, { "--config", conf, "--set", "colour=blue", "--policy", p, "prolog" })
      assert.equal("--set: unknown setting 'colour'", final(r).message)
    end)

    it("takes the policy path from the settings", function()
      local p = echo_policy("'from settings'")
      local conf = file(string.format("policy = %q\n", p), "conf")
      local r = run(dir, { "--config", conf, "prolog" })
      assert.equal("from settings", final(r).message)
    end)

    it("uses the deadline setting as the run's budget", function()
      local conf = file("deadline = 0.4\n", "conf")
      local r = run(dir, { "--config", conf, "--policy", file(LOOP), "prolog" })
      ended_by_hook(r, H.host().now(), 0.4)
    end)

    it("--deadline wins over the setting and shows in ctx.settings", function()
      local conf = file("deadline = 60\n", "conf")
      local r = run(dir, { "--config", conf, "--deadline", "0.4", "--policy", file(LOOP), "prolog" })
      ended_by_hook(r, H.host().now(), 0.4)
      r = run(dir, { "--config", conf, "--deadline", "7", "--set", "deadline=8", "--policy",
        echo_policy("tostring(ctx.settings.deadline)"), "prolog" })
      assert.equal("7", final(r).message)
    end)
  end)

  describe("context", function()
    it("gives command, job, env and dry_run", function()
      local p = echo_policy("table.concat({ ctx.command, ctx.job.id, tostring(ctx.job.nodelist), "
        .. "tostring(ctx.job.nodename), ctx.env.SLURM_JOB_ID, tostring(ctx.dry_run), "
        .. "tostring(ctx.json), type(ctx.host.now), tostring(ctx.env.NOT_SET) }, ' ')")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "prolog" },
        { SLURM_JOB_ID = "101", SLURM_NODELIST = "n[1-3]", SLURMD_NODENAME = "n2" })
      assert.equal(0, r.code)
      local f = final(r)
      assert.equal("101", f.job)
      assert.equal("prolog", f.command)
      assert.equal("notice", f.level)
      assert.equal("prolog 101 n[1-3] n2 101 false false function nil", f.message)
    end)

    it("makes ctx.env read-only", function()
      local p = echo_policy("(function() ctx.env.PATH = '/tmp' return 'changed' end)()")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "prolog" })
      assert.equal("policy-error", final(r).outcome)
      assert.matches("ctx.env is read%-only", final(r).message)
    end)

    it("calls the epilog entry point", function()
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", echo_policy("'x'"), "epilog" },
        { SLURM_JOBID = "55" })
      local f = final(r)
      assert.equal("epilog", f.command)
      assert.equal("55", f.job)
      assert.equal("epilog 55", f.message)
    end)

    it("keeps the final log line one line whatever the job id holds", function()
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", echo_policy("'x'"), "prolog" },
        { SLURM_JOB_ID = "10 imexguard: notice: prolog job=10\noutcome=ok" })
      local lines = {}
      for l in r.stderr:gmatch("[^\n]+") do lines[#lines + 1] = l end
      assert.equal(1, #lines, r.stderr)
      local f = final(r)
      assert.equal("10_imexguard__notice__prolog_job_10_outcome_ok", f.job)
      assert.equal("ok", f.outcome)
    end)

    it("refuses a policy without the entry point", function()
      local p = file("return { prolog = function() return 'ok' end }")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "epilog" })
      assert.equal(3, r.code)
      assert.equal("policy " .. p .. ": epilog must be a function, is nil", final(r).message)
    end)
  end)

  describe("status and plan", function()
    local policy_text = [[
local P = {}
function P.prolog(ctx) return "ok" end
function P.epilog(ctx) return "ok" end
function P.status(ctx)
  if ctx.json then return "domain-unhealthy", "n3 down", { status = "DEGRADED", nodes = 3 } end
  return "domain-unhealthy", "n3 down", "NODE STATUS\nn3   DOWN\n"
end
function P.plan(ctx)
  local ok = ctx.host.write_atomic(ctx.env.TARGET, "10.0.0.1\n")
  local done = ctx.host.unit_job("nvidia-imex.service", "restart", 5)
  local lk = ctx.host.lock(ctx.env.TARGET .. ".lock", 1, "job=1")
  local unlocked = lk:unlock()
  return "ok", "would restart", table.concat(ctx.planned, "\n") .. "\n" .. tostring(ctx.dry_run)
    .. " " .. tostring(ok) .. " " .. tostring(done) .. " " .. tostring(unlocked) .. " "
    .. tostring(ctx.host.unit_set_bus) .. "\n"
end
return P
]]

    it("--json: an object on every path of a command that has it; a usage error on one that has not",
      function()
      -- no IMEX on this machine: plan ends without a report, and --json still prints an object
      local r = run(dir, { "--config", dir .. "/empty.conf", "--set", "imex_config=" .. dir .. "/none.cfg",
        "plan", "--json" }, { SLURM_JOB_ID = "5", SLURM_JOB_NODELIST = "n[1-", SLURMD_NODENAME = "n1" })
      local obj = require("cjson").decode(r.stdout)
      assert.same({ 1, "plan", final(r).outcome, r.code }, { obj.schema, obj.command, obj.outcome,
        obj.exit_code })
      assert.equal(r.code == 0, obj.ok)
      assert.matches('^{"schema":1,"command":"plan","ok":', r.stdout)
      for _, args in ipairs({ { "prolog", "--json" }, { "health", "--json" }, { "forget", "7", "--json" },
        { "version", "--json" } }) do
        r = run(dir, args)
        assert.equal(1, r.code, table.concat(args, " "))
        -- health and forget print their one reason line on stdout for every non-zero exit (commands.lua)
        local reason_line = args[1] == "health" or args[1] == "forget"
        assert.equal(reason_line and "imexguard: error: --json: " .. args[1] .. " has no JSON output (only "
          .. "status, plan, registrations, rack, check, show-config)\n" or "", r.stdout)
        assert.matches("imexguard: %-%-json: " .. args[1] .. " has no JSON output %(only status, plan, "
          .. "registrations, rack, check, show%-config%)", r.stderr)
      end
      r = run(dir, { "epilog", "-q" })
      assert.equal(1, r.code)
      assert.matches("imexguard: %-q: epilog has no quiet or verbose form %(only status, registrations%)",
        r.stderr)
      r = run(dir, { "forget" })
      assert.equal(1, r.code)
      assert.matches("forget: missing JOBID", r.stderr)
    end)

    it("status prints the policy's report on stdout and exits with the outcome's code", function()
      local p = file(policy_text)
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "status" })
      assert.equal(9, r.code)
      assert.equal("NODE STATUS\nn3   DOWN\n", r.stdout)
      assert.equal("domain-unhealthy", final(r).outcome)
      r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "status", "--json" })
      assert.equal(9, r.code)
      local obj = require("cjson").decode(r.stdout)
      assert.same({ status = "DEGRADED", nodes = 3 }, obj)
    end)

    it("plan runs with recorders instead of side effects", function()
      local p = file(policy_text)
      local target = dir .. "/nodes_config.cfg"
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "plan" }, { TARGET = target })
      assert.equal(0, r.code)
      assert.is_nil(H.read(target))
      assert.is_nil(H.read(target .. ".lock"))
      assert.equal('write_atomic("' .. target .. '", <9 bytes>)\n'
        .. 'unit_job("nvidia-imex.service", "restart", 5)\n'
        .. 'lock("' .. target .. '.lock", 1, "job=1")\n'
        .. 'true true done true nil\n', r.stdout)
    end)
  end)

  describe("plan against a node layout in a temp dir (the built-in policy)", function()
    -- nodes_config.cfg lists 127.0.0.1 and 127.0.0.3; the job wants 127.0.0.1,127.0.0.2.
    local node, env
    local JOB = { SLURM_JOB_ID = "101", SLURM_JOB_NODELIST = "127.0.0.1,127.0.0.2", SLURMD_NODENAME = "n1" }

    setup(function()
      node = dir .. "/node"
      assert(os.execute("mkdir -m 0755 " .. H.q(node) .. " " .. H.q(node .. "/imex") .. " "
        .. H.q(node .. "/state")))
      H.write(node .. "/imex/config.cfg", "IMEX_NODE_CONFIG_FILE=" .. node .. "/imex/nodes_config.cfg\n"
        .. "BIND_INTERFACE_IP=127.0.0.1\nIMEX_CMD_PORT=50005\n")
      H.write(node .. "/imex/nodes_config.cfg", "127.0.0.1\n127.0.0.3\n")
      env = JOB
    end)

    -- Every path under the node dir with its type, inode, size, mode and mtime (ns).
    local function snapshot()
      local p = assert(io.popen("find " .. H.q(node) .. " -printf '%p %y %i %s %m %T@\\n' | sort"))
      local s = p:read("a")
      p:close()
      assert(s:find("nodes_config.cfg", 1, true), "snapshot lists the node list")
      return s
    end

    local function conf(unit, bus)
      return file(string.format("unit = %q\nbus = %q\nimex_config = %q\nstate_dir = %q\n"
        .. "allow_loopback = true\nctl = \"/bin/false\"\n", unit, bus, node .. "/imex/config.cfg",
        node .. "/state"), "conf")
    end

    it("with no systemd to ask, says the unit's state is unknown and writes nothing", function()
      local c = conf("imexguard-test-no-such.service", "unix:path=" .. node .. "/no-bus-here")
      local before = snapshot()
      local r = run(dir, { "--config", c, "plan" }, env)
      assert.equal(before, snapshot())
      assert.equal(6, r.code)
      local f = final(r)
      assert.equal("unit-unknown", f.outcome)
      assert.matches("state of imexguard%-test%-no%-such%.service unknown", f.message)
      assert.matches("no%-bus%-here", f.message)
      assert.matches("nothing restarted", f.message)
      -- no guess: no restart decision either way
      assert.not_matches("restart: no", r.stdout)
      assert.not_matches(": yes,", r.stdout)
      r = run(dir, { "--config", c, "plan", "--json" }, env)
      assert.equal(6, r.code)
      assert.equal(before, snapshot())
    end)

    it("under a private systemd: desired list, diff, restart or not and why; nothing written or restarted",
      function()
        local unit = "imexguard-plan-test.service"
        local bin = H.imexguard_bin()
        local out = dir .. "/plan-out"
        assert(os.execute("mkdir -m 0700 " .. H.q(out)))
        local function plan_cmd(tag, conf_var, extra, nodelist)
          return string.format("env -i PATH=/usr/bin:/bin IMEXGUARD_NO_JOURNAL=1 SLURM_JOB_ID=101 "
            .. "SLURM_JOB_NODELIST=%s SLURMD_NODENAME=n1 %s --config \"$%s\" %s plan "
            .. ">%s/%s.out 2>%s/%s.err; echo $? >%s/%s.rc", nodelist or "127.0.0.1,127.0.0.2", H.q(bin),
            conf_var, extra or "", out, tag, out, tag, out, tag)
        end
        local function show(tag)
          return string.format("systemctl --user show -p ActiveState -p MainPID -p InvocationID %s "
            .. ">%s/%s.unit", unit, out, tag)
        end
        local script = table.concat({
          "set -u",
          string.format("printf '[Unit]\\nDescription=imexguard plan test\\n[Service]\\n"
            .. "ExecStart=/bin/sleep 600\\n' >\"$IMEXGUARD_TEST_UNIT_DIR/%s\"", unit),
          "systemctl --user daemon-reload || exit 1",
          string.format("C=%s/with.conf", out),
          string.format("printf 'unit = \"%s\"\\nbus = \"%%s\"\\nimex_config = \"%s\"\\nstate_dir = \"%s\"\\n"
            .. "allow_loopback = true\\nctl = \"/bin/false\"\\n' \"$IMEXGUARD_TEST_BUS\" >\"$C\"", unit,
            node .. "/imex/config.cfg", node .. "/state"),
          plan_cmd("inactive", "C"),
          show("after-inactive"),
          plan_cmd("notfound", "C", "--set unit=imexguard-plan-nosuch.service"),
          "systemctl --user start " .. unit .. " || exit 1",
          show("started"),
          plan_cmd("changed", "C"),
          plan_cmd("changed-json", "C", "--json"),
          show("after-changed"),
          plan_cmd("same", "C", nil, "127.0.0.1,127.0.0.3"),
          show("after-same"),
          "systemctl --user stop " .. unit,
        }, "\n") .. "\n"
        H.write(out .. "/script.sh", script)
        local before = snapshot()
        local ok = os.execute("tests/with-systemd sh " .. H.q(out .. "/script.sh") .. " >"
          .. H.q(out .. "/harness.log") .. " 2>&1")
        assert.is_true(ok == true, "tests/with-systemd failed:\n"
          .. tostring(H.read(out .. "/harness.log")))
        assert.equal(before, snapshot())
        local function got(tag)
          local base = out .. "/" .. tag
          return H.read(base .. ".out"), H.read(base .. ".err"), tonumber(H.read(base .. ".rc"))
        end

        -- inactive unit: the desired list, the diff, start: yes; the unit is still inactive after
        local o, e, rc = got("inactive")
        assert.equal(0, rc, e)
        local nf = node .. "/imex/nodes_config.cfg"
        assert.equal("plan for job 101 on node n1 (nothing is changed)\n"
          .. "desired node list from SLURM_JOB_NODELIST=127.0.0.1,127.0.0.2 (2 nodes):\n"
          .. "  127.0.0.1        127.0.0.1  (this node)\n"
          .. "  127.0.0.2        127.0.0.2\n"
          .. nf .. ": would be rewritten\n"
          .. "  - 127.0.0.3\n"
          .. "  + 127.0.0.2\n"
          .. "unit " .. unit .. ": inactive/dead\n"
          .. "config: " .. node .. "/imex/config.cfg (from the setting imex_config (sleep in ExecStart has "
          .. "no -c))\n"
          .. "start: yes, " .. unit .. " is inactive\n", o:match("^(.-)registered jobs") or o)
        assert.matches("outcome=ok: would rewrite " .. nf:gsub("%p", "%%%0") .. " and start", e)
        assert.matches("ActiveState=inactive", H.read(out .. "/after-inactive.unit"))

        -- a unit systemd does not know: skipped, said so
        e, rc = select(2, got("notfound"))
        assert.equal(0, rc)
        assert.matches("outcome=skipped: IMEX not installed on this node: "
          .. "imexguard%-plan%-nosuch%.service load state not%-found", e)

        -- active unit, list changes: restart yes and why; the daemon is the same process after
        local started = H.read(out .. "/started.unit")
        assert.matches("ActiveState=active", started)
        o, e, rc = got("changed")
        assert.equal(0, rc, e)
        assert.matches("\nrestart: yes, node list changes; the daemon reads it only at start\n", o)
        assert.matches("\n  %+ 127%.0%.0%.2\n", o)
        local j = require("cjson").decode((got("changed-json")))
        assert.is_true(j.changed)
        assert.equal("restart", j.action)
        assert.same({ "127.0.0.3" }, j.removed)
        assert.same({ "127.0.0.2" }, j.added)
        assert.equal(started, H.read(out .. "/after-changed.unit"))

        -- active unit, the job's list is the file's: restart no and why (the ctl cannot be asked)
        o, e, rc = got("same")
        assert.equal(0, rc, e)
        assert.matches(nf:gsub("%p", "%%%0") .. ": unchanged\n", o)
        assert.matches("\nrestart: no, daemon current by its start time; ctl unusable: ", o)
        assert.matches("outcome=ok: nothing to do", e)
        assert.equal(started, H.read(out .. "/after-same.unit"))
      end)
  end)

  describe("check", function()
    it("accepts a valid policy, names its entry points and runs the scenarios (tests/c/check_spec.lua)",
      function()
        local p = file("local D = require('policies.default')\n"
          .. "return { prolog = D.prolog, epilog = D.epilog, status = D.status }")
        local r = run(dir, { "--config", dir .. "/empty.conf", "check", p })
        assert.equal(0, r.code)
        assert.equal("policy " .. p .. " is valid: prolog, epilog, status; all 10 scenarios passed",
          final(r).message)
        assert.matches("\nPASS healthy%-job: ", r.stdout)
        -- entry points that do nothing are valid entry points, but fail the scenarios
        p = file("return { prolog = function() end, epilog = function() end }")
        r = run(dir, { "--config", dir .. "/empty.conf", "check", p })
        assert.equal(3, r.code)
        assert.matches("FAIL healthy%-job: .*: returned nil instead of an outcome name", r.stdout)
      end)

    it("reports a syntax error with file and line", function()
      local p = file("return {\n  prolog = function() end\n  epilog = 1,\n}\n")
      local r = run(dir, { "--config", dir .. "/empty.conf", "check", p })
      assert.equal(3, r.code)
      assert.matches("^policy " .. p:gsub("%p", "%%%0") .. ":3:", final(r).message)
    end)

    it("reports a runtime error while loading with file and line", function()
      local p = file("local x = nil\nlocal y = x.y\nreturn {}\n")
      local r = run(dir, { "--config", dir .. "/empty.conf", "check", p })
      assert.equal(3, r.code)
      assert.equal(p .. ":2: attempt to index a nil value (local 'x')", final(r).message)
    end)

    it("refuses a policy that is not a table with prolog and epilog functions", function()
      local r = run(dir, { "--config", dir .. "/empty.conf", "check", file("return 5") })
      assert.equal(3, r.code)
      assert.matches("must return a table of entry points, returned number", final(r).message)
      r = run(dir, { "--config", dir .. "/empty.conf", "check", file("return { prolog = function() end }") })
      assert.matches("epilog must be a function, is nil", final(r).message)
      r = run(dir, { "--config", dir .. "/empty.conf", "check",
        file("return { prolog = function() end, epilog = function() end, status = 'yes' }") })
      assert.matches("status must be a function, is string", final(r).message)
    end)

    it("refuses a missing policy file, naming it", function()
      local r = run(dir, { "--config", dir .. "/empty.conf", "check", dir .. "/nope.lua" })
      assert.equal(3, r.code)
      assert.equal("cannot read policy " .. dir .. "/nope.lua: No such file or directory", final(r).message)
    end)
  end)

  describe("--lua-dir", function()
    it("loads imexguard.* from DIR/imexguard/*.lua", function()
      local d = dir .. "/lib"
      assert(os.execute("mkdir -p " .. d .. "/imexguard && chmod 0755 " .. d .. " " .. d .. "/imexguard"))
      H.write(d .. "/imexguard/extra.lua", "return { hello = 'from lua-dir' }")
      local p = echo_policy("require('imexguard.extra').hello")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--lua-dir", d, "--policy", p, "prolog" })
      assert.equal("from lua-dir", final(r).message)
      r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "prolog" }, { IMEXGUARD_LUA_DIR = d })
      assert.equal("from lua-dir", final(r).message)
      r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "prolog" })
      assert.matches("module 'imexguard.extra' not found", final(r).message)
    end)
  end)
end)
