-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.driver, the run told in Lua: its protocol functions called as src/main.c calls
-- them, on a run table whose host functions (`run.c`) are fakes and whose primitives are the test
-- kit's fake host (imexguard.testing), preloaded as imexguard.host: no binary, no node. The binary's
-- side of the protocol (the final line, the exit code, the deadline) is in tests/c (cli_spec,
-- check_spec, sandbox_spec).
local D = require("imexguard.driver")
local S = require("imexguard.settings")
local commands = require("imexguard.commands")
local testing = require("imexguard.testing")
local cjson = require("cjson")

local CONFIG = "/etc/imexguard/imexguard.conf"
local ENV = { SLURM_JOB_ID = "101", SLURM_JOB_NODELIST = "n[1-2]", SLURMD_NODENAME = "n1",
  SLURM_JOB_USER = "alice" }

local function f() end

-- The set {[name] = true} of a list of names.
local function set(list)
  local t = {}
  for _, name in ipairs(list) do t[name] = true end
  return t
end

-- A run table as main.c makes it (o: command, policy, sets, deadline_arg, json, config_explicit,
-- env, files = {[path] = text} that c.read_trusted reads), and what its host functions saw:
-- `seen.preloaded` ({[name] = value}) and `seen.jobs` (the ids given to c.set_job).
local function new_run(o)
  o = o or {}
  local files = o.files or {}
  local seen = { preloaded = {}, jobs = {} }
  local run = { command = o.command or "prolog", config = CONFIG, config_explicit = o.config_explicit,
    policy = o.policy, sets = o.sets, deadline_arg = o.deadline_arg, json = o.json, env = o.env or ENV,
    check_path = o.check_path }
  run.c = {
    read_trusted = function(path, what)
      if files[path] then return files[path] end
      return nil, string.format("cannot read %s %s: No such file or directory", what, path), "ENOENT"
    end,
    has_module = function(name) return name == D.DEFAULT_POLICY or name == "imexguard.slurmenv" end,
    preload = function(name, value) seen.preloaded[name] = value end,
    set_job = function(id) seen.jobs[#seen.jobs + 1] = id end,
  }
  return run, seen
end

-- A policy file's text whose entry points are the given Lua bodies ({prolog = "return 'ok', 'x'"}).
local function policy_text(bodies)
  local out = { "local P = {}" }
  for name, body in pairs(bodies) do
    out[#out + 1] = string.format("function P.%s(ctx) %s end", name, body)
  end
  out[#out + 1] = "return P"
  return table.concat(out, "\n")
end

describe("driver", function()
  local saved, h

  -- imexguard.host is the kit's fake host in every test (the busted C module would touch the node)
  before_each(function()
    saved = package.loaded["imexguard.host"]
    h = testing.host()
    package.loaded["imexguard.host"] = h
  end)

  after_each(function()
    package.loaded["imexguard.host"] = saved
  end)

  describe("the tables derived from commands.lua", function()
    it("DRY_RUN: plan, health, registrations and config-test change nothing, as commands.lua says", function()
      assert.same({ plan = true, health = true, registrations = true, wait = true, rack = true,
        ["config-test"] = true },
        D.DRY_RUN)
      assert.same(set(commands.names("dry_run")), D.DRY_RUN)
    end)

    it("METRICS: prolog, epilog, status, health and forget are recorded, as commands.lua says", function()
      assert.same({ prolog = true, epilog = true, status = true, health = true, forget = true }, D.METRICS)
      assert.same(set(commands.names("metrics")), D.METRICS)
    end)

    it("HEALTH_DEADLINE: health's `deadline`, 10 s", function()
      assert.equal(10, D.HEALTH_DEADLINE)
      assert.equal(commands.by_name.health.deadline, D.HEALTH_DEADLINE)
    end)

    it("a command added to commands.lua appears in the driver without another edit", function()
      local added = { name = "drill", entry = "optional", dry_run = true, metrics = true, deadline = 3,
        help = "a command of this spec" }
      table.insert(commands.list, added)
      commands.by_name.drill = added
      package.loaded["imexguard.driver"] = nil
      finally(function()
        table.remove(commands.list)
        commands.by_name.drill = nil
        package.loaded["imexguard.driver"] = D
      end)
      local D2 = require("imexguard.driver")
      assert.is_true(D2.DRY_RUN.drill)
      assert.is_true(D2.METRICS.drill)
      assert.equal("prolog, epilog, drill", D2.check({ prolog = f, epilog = f, drill = f }))
      assert.equal("prolog, epilog", D2.check({ prolog = f, epilog = f }))
      assert.same({ nil, "drill must be a function, is string" },
        { D2.check({ prolog = f, epilog = f, drill = "x" }) })
      local run = new_run{ command = "drill" }
      assert.equal(3, D2.settings(run).deadline)
    end)
  end)

  describe("check: a policy's entry points", function()
    it("a table with the required entry points (commands.lua), listed in its order", function()
      assert.equal("prolog, epilog", D.check({ prolog = f, epilog = f }))
      assert.equal("prolog, epilog, status, health",
        D.check({ health = f, status = f, epilog = f, prolog = f }))
      assert.equal("prolog, epilog, status, plan, health",
        D.check({ prolog = f, epilog = f, status = f, plan = f, health = f }))
    end)

    it("refuses anything but a table", function()
      assert.same({ nil, "must return a table of entry points, returned number" }, { D.check(5) })
      assert.same({ nil, "must return a table of entry points, returned nil" }, { D.check(nil) })
    end)

    it("each required entry point must be a function", function()
      for _, name in ipairs({ "prolog", "epilog" }) do
        assert.equal("required", commands.by_name[name].entry)
        local p = { prolog = f, epilog = f }
        p[name] = nil
        assert.same({ nil, name .. " must be a function, is nil" }, { D.check(p) })
        p[name] = true
        assert.same({ nil, name .. " must be a function, is boolean" }, { D.check(p) })
      end
    end)

    it("an optional entry point may be absent, never something else than a function", function()
      for _, name in ipairs({ "status", "plan", "health" }) do
        assert.equal("optional", commands.by_name[name].entry)
        assert.same({ nil, name .. " must be a function, is string" },
          { D.check({ prolog = f, epilog = f, [name] = "yes" }) })
      end
    end)

    it("a command without an entry point (check, version) is not one: its field is not checked", function()
      assert.equal("prolog, epilog", D.check({ prolog = f, epilog = f, check = 5, version = "1" }))
    end)
  end)

  describe("policy_error: an error of a policy file's chunk names that file", function()
    local TEXT = "local P = require('policies.default')\n\nreturn P.extend{\n  wait_helthy = f,\n}\n"
    it("a message naming the driver (a tail call erased the chunk's frame): the line of the quoted key",
      function()
      assert.equal("/p.lua:4: policy extend: unknown hook 'wait_helthy'", D.policy_error(
        "lua/imexguard/driver.lua:300: policy extend: unknown hook 'wait_helthy'", "/p.lua", TEXT))
    end)
    it("naming the driver, no key found: the line of the last return", function()
      assert.equal("/p.lua:3: boom",
        D.policy_error("/x/lua/imexguard/driver.lua:9: boom", "/p.lua", TEXT))
    end)
    it("no position (under pcall, or error(msg, 0)): the key's line, else the file alone", function()
      assert.equal("/p.lua:4: unknown hook 'wait_helthy'",
        D.policy_error("unknown hook 'wait_helthy'", "/p.lua", TEXT))
      assert.equal("/p.lua: boom", D.policy_error("boom", "/p.lua", TEXT))
    end)
    it("a message with a position of its own, or not a string, is kept", function()
      assert.equal("/p.lua:2: x", D.policy_error("/p.lua:2: x", "/p.lua", TEXT))
      assert.equal("/lib/m.lua:7: y", D.policy_error("/lib/m.lua:7: y", "/p.lua", TEXT))
      local t = {}
      assert.equal(t, D.policy_error(t, "/p.lua", TEXT))
    end)
  end)

  describe("load_settings", function()
    it("no file: the defaults", function()
      assert.same(assert(S.validate({})), assert(D.load_settings(nil, CONFIG, {})))
    end)

    it("the file, then --set over it", function()
      assert.equal(30, D.load_settings("deadline = 30", CONFIG, {}).deadline)
      local t = D.load_settings("deadline = 30\nlock_timeout = 7", CONFIG, { "deadline=20" })
      assert.equal(20, t.deadline)
      assert.equal(7, t.lock_timeout)
    end)

    it("a bad file names the file (with its line), whatever --set says", function()
      assert.same({ nil, "settings file " .. CONFIG .. ":1: unexpected symbol near <eof>" },
        { D.load_settings("deadline = ", CONFIG, {}) })
      local _, err = D.load_settings('deadline = "x"', CONFIG, { "deadline=5" })
      assert.equal("settings file " .. CONFIG .. ":1: setting 'deadline' must be a number > 0 (seconds), "
        .. 'got string "x"', err)
    end)

    it("a bad --set names --set", function()
      assert.same({ nil, "--set: setting 'deadline' must be a number > 0 (seconds), got number -1" },
        { D.load_settings(nil, CONFIG, { "deadline=-1" }) })
      local t, err = D.load_settings(nil, CONFIG, { "nope=1" })
      assert.is_nil(t)
      assert.matches("^%-%-set: unknown setting 'nope'", err)
    end)
  end)

  describe("settings (call 1)", function()
    it("no settings file: the defaults; main.c gets what C applies; run.settings and run.started", function()
      local run = new_run()
      h.advance(5)
      local a = D.settings(run)
      assert.same({ deadline = 90, bus = "system", log_level = "info", log_journal = true,
        memory_limit = 256 }, a)
      assert.equal(S.by_name.deadline.default, run.settings.deadline)
      assert.equal(h.now(), run.started)
    end)

    it("a --config that cannot be read ends the run in settings-error, naming it", function()
      local a = D.settings(new_run{ config_explicit = true })
      assert.equal("settings-error", a.outcome)
      assert.equal(18, a.code)
      assert.equal("cannot read settings file " .. CONFIG .. ": No such file or directory", a.message)
    end)

    it("--deadline wins over the file and --set", function()
      local files = { [CONFIG] = "deadline = 30\nbus = 'user'\nmemory_limit = 64" }
      local a = D.settings(new_run{ files = files })
      assert.same({ 30, "user", 64 }, { a.deadline, a.bus, a.memory_limit })
      assert.equal(20, D.settings(new_run{ files = files, sets = { "deadline=20" } }).deadline)
      local run = new_run{ files = files, sets = { "deadline=20" }, deadline_arg = "15" }
      assert.equal(15, D.settings(run).deadline)
    end)

    it("an invalid file ends the run in settings-error, naming the file, line and key", function()
      local a = D.settings(new_run{ files = { [CONFIG] = "unit = 'x'\n\ndedline = 3" } })
      assert.equal("settings-error", a.outcome)
      assert.equal(18, a.code)
      assert.equal("settings file " .. CONFIG .. ":3: unknown setting 'dedline'", a.message)
    end)

    it("run.sources: where each setting came from (show-config)", function()
      local files = { [CONFIG] = "unit = 'x'\nreturn nil" }
      local run = new_run{ files = files, sets = { "ctl=/bin/true" }, deadline_arg = "15" }
      D.settings(run)
      assert.equal(CONFIG .. ":1", run.sources.unit)
      assert.equal("--set", run.sources.ctl)
      assert.equal("--deadline", run.sources.deadline)
      assert.equal("default", run.sources.state_dir)
    end)

    it("health's budget: at most 10 s unless --deadline gives one; other commands: the setting", function()
      assert.equal(10, D.settings(new_run{ command = "health" }).deadline)
      local run = new_run{ command = "health", files = { [CONFIG] = "deadline = 5" } }
      assert.equal(5, D.settings(run).deadline)
      assert.equal(5, run.settings.deadline)
      assert.equal(40, D.settings(new_run{ command = "health", deadline_arg = "40" }).deadline)
      for _, cmd in ipairs({ "prolog", "epilog", "status", "plan", "check" }) do
        assert.equal(90, D.settings(new_run{ command = cmd }).deadline, cmd)
      end
    end)
  end)

  describe("host: the recorders of a dry run", function()
    it("not a dry run: the primitives themselves", function()
      local host, planned = D.host(h, false)
      assert.equal(h, host)
      assert.same({}, planned)
    end)

    it("records every side effect instead of making it, with a log line each", function()
      local host, planned = D.host(h, true)
      assert.are_not.equal(h, host)
      assert.is_true(host.write_atomic(testing.NODES, "10.0.0.1\n10.0.0.2\n", 420))
      assert.equal("done", host.unit_job(testing.UNIT, "restart", 30))
      assert.is_true(host.unit_reset_failed(testing.UNIT))
      assert.is_true(host.unit_kill(testing.UNIT, "main", 15))
      assert.is_true(host.mkdir("/run/imexguard", 493))
      assert.is_true(host.mknod_char("/dev/nvidia-caps-imex-channels/channel0", 509, 0, 438))
      local lock = host.lock("/run/imexguard/lock", 5, "job=101")
      assert.is_true(lock:unlock())
      assert.same({ 0, 0 }, { lock:inode() })
      assert.same({
        'write_atomic("' .. testing.NODES .. '", <18 bytes>, 420)',
        'unit_job("nvidia-imex.service", "restart", 30)',
        'unit_reset_failed("nvidia-imex.service")',
        'unit_kill("nvidia-imex.service", "main", 15)',
        'mkdir("/run/imexguard", 493)',
        'mknod_char("/dev/nvidia-caps-imex-channels/channel0", 509, 0, 438)',
        'lock("/run/imexguard/lock", 5, "job=101")',
      }, planned)
      -- nothing happened on the (fake) node
      assert.same({}, h.writes)
      assert.same({}, h.jobs)
      assert.same({}, h.mkdirs)
      assert.same({}, h.locks)
      assert.equal(0, h.count("unit_reset_failed") + h.count("unit_kill") + h.count("mknod_char"))
      local notices = 0
      for _, l in ipairs(h.logs) do
        if l[1] == "notice" and l[2]:find("^dry run: would call ") then notices = notices + 1 end
      end
      assert.equal(#planned, notices)
    end)

    it("the primitives without side effects are the real ones; the real table is not changed", function()
      local host = D.host(h, true)
      assert.equal(h.read, host.read)
      assert.equal(h.unit, host.unit)
      assert.equal(h.run, host.run)
      assert.are_not.equal(h.write_atomic, host.write_atomic)
      host.write_atomic("/x", "y")
      assert.equal(0, h.count("write_atomic"))
    end)

    it("a primitive the host lacks stays absent", function()
      local host = D.host({ now = h.now }, true)
      assert.is_nil(host.write_atomic)
      assert.equal(h.now, host.now)
    end)
  end)

  describe("the watcher's run: a host that only signals, and how to run imexguard again", function()
    it("SIGNALS_ONLY: watch, as commands.lua says", function()
      assert.same({ watch = true }, D.SIGNALS_ONLY)
      assert.same(set(commands.names("signals_only")), D.SIGNALS_ONLY)
    end)

    it("the host of watch refuses every side effect but unit_kill, naming it; reads and the ctl work",
      function()
      local host = require("imexguard.runhost").signals_only(h, "watch")
      for _, name in ipairs({ "write_atomic", "remove_temps", "mknod_char", "mkdir", "lock", "unit_job",
        "unit_reset_failed", "unit_start_transient" }) do
        local ok, err = pcall(host[name], "x")
        assert.is_false(ok, name)
        assert.matches("imexguard watch changes nothing but sends signals: host%." .. name .. " refused", err)
      end
      assert.is_true(host.unit_kill(testing.UNIT, 10))
      assert.equal(1, #h.kills)
      assert.is_table(host.unit(testing.UNIT))
      assert.equal(h.now(), host.now())
      assert.same({}, h.writes)
      assert.same({}, h.jobs)
    end)

    it("prepare gives watch that host, and every command ctx.invocation", function()
      local run = new_run{ command = "watch", config_explicit = true, sets = { "poll_interval=0.1" },
        files = { [CONFIG] = "" } }
      run.exe, run.lua_dir = "/usr/sbin/imexguard", "/srv/lua"
      D.settings(run)
      D.prepare(run)
      assert.has_error(function() run.ctx.host.write_atomic("/x", "y") end)
      assert.same({ exe = "/usr/sbin/imexguard", options = { "--config", CONFIG, "--lua-dir", "/srv/lua",
        "--set", "poll_interval=0.1" } }, run.ctx.invocation)
    end)

    it("invocation: --config only when the file is named or exists, --policy, --lua-dir, each --set; "
      .. "never --deadline", function()
      assert.same({ exe = "/x", options = { "--config", CONFIG } },
        D.invocation({ exe = "/x", config = CONFIG, deadline_arg = "30" }))
      assert.same({ options = {} }, D.invocation({ config = CONFIG, config_absent = true }))
      assert.same({ options = { "--config", CONFIG, "--policy", "/p.lua", "--set", "a=1", "--set", "b=2" } },
        D.invocation({ config = CONFIG, config_explicit = true, config_absent = true, policy = "/p.lua",
          sets = { "a=1", "b=2" } }))
    end)
  end)

  describe("prepare, invoke, finish (calls 2 to 4)", function()
    -- settings, prepare, invoke, finish in order; returns the last answer (or the first end)
    local function go(run)
      local a = D.settings(run)
      if a.outcome then return a end
      a = D.prepare(run)
      if a.outcome then return a end
      assert.same({}, D.invoke(run))
      return D.finish(run)
    end

    local SITE = "/etc/imexguard/site.lua"

    it("a policy file's prolog: ctx as the binary builds it, its outcome and exit code", function()
      local text = policy_text{ prolog = "P.ctx = ctx; return 'ok', 'done\\nhere'", epilog = "return 'ok'" }
      local run, seen = new_run{ policy = SITE, files = { [SITE] = text } }
      local a = go(run)
      assert.same({ outcome = "ok", code = 0, message = "done here" }, a)
      local ctx = run.ctx
      assert.equal("prolog", ctx.command)
      assert.is_false(ctx.dry_run)
      assert.equal("101", ctx.job.id)
      assert.equal("n[1-2]", ctx.job.nodelist)
      assert.same({ "101" }, seen.jobs)
      assert.same({}, ctx.planned)
      assert.equal(90, ctx.settings.deadline)
      assert.has_error(function() ctx.settings.deadline = 1 end)
      assert.has_error(function() return ctx.settings.dedline end)
      assert.has_error(function() ctx.env.SLURM_JOB_ID = "7" end)
      assert.is_nil(seen.preloaded["imexguard.host"])
      assert.equal("policy " .. SITE .. ": prolog", run.what)
    end)

    it("not a dry run: the host counts the unit's (re)starts (the metrics') and is read-only", function()
      local text = policy_text{ prolog = "ctx.host.unit_job('nvidia-imex.service', 'restart', 5); "
        .. "ctx.host.unit_job('nvidia-imex.service', 'stop', 5); return 'ok'", epilog = "return 'ok'" }
      local run = new_run{ policy = SITE, files = { [SITE] = text } }
      assert.equal("ok", go(run).outcome)
      assert.equal(1, run.restarts)
      assert.equal(2, #h.jobs)
      assert.has_error(function() run.ctx.host.unit_job = f end)
    end)

    it("the built-in policy when none is given", function()
      local run = new_run()
      assert.equal("ok", go(run).outcome)
      assert.equal(require("policies.default").prolog, run.entry)
      assert.equal("policy " .. D.DEFAULT_POLICY .. ": prolog", run.what)
    end)

    it("an optional entry point the policy lacks is the built-in policy's; a required one: error", function()
      local text = policy_text{ prolog = "return 'ok'", epilog = "return 'ok'" }
      for _, cmd in ipairs({ "status", "plan", "health" }) do
        local run = new_run{ command = cmd, policy = SITE, files = { [SITE] = text } }
        D.settings(run)
        assert.same({}, D.prepare(run))
        assert.equal(require("policies.default")[cmd], run.entry, cmd)
      end
      local run = new_run{ policy = SITE, files = { [SITE] = policy_text{ epilog = "return 'ok'" } } }
      local a = go(run)
      assert.equal("policy-error", a.outcome)
      assert.equal("policy " .. SITE .. ": prolog must be a function, is nil", a.message)
    end)

    it("a policy file that cannot be read or compiled: policy-error naming it", function()
      local a = go(new_run{ policy = SITE })
      assert.same({ "policy-error", "cannot read policy " .. SITE .. ": No such file or directory" },
        { a.outcome, a.message })
      a = go(new_run{ policy = SITE, files = { [SITE] = "return {" } })
      assert.equal("policy-error", a.outcome)
      assert.matches("^policy " .. SITE:gsub("%p", "%%%0") .. ":1: ", a.message)
    end)

    it("plan, a dry run: the recorders, also as require('imexguard.host'); ctx.planned lists them", function()
      local text = policy_text{ prolog = "return 'ok'", epilog = "return 'ok'",
        plan = "ctx.host.write_atomic('/etc/x', 'a'); return 'ok', 'planned', 'report\\n'" }
      local run, seen = new_run{ command = "plan", policy = SITE, files = { [SITE] = text } }
      local a = go(run)
      assert.same({ outcome = "ok", code = 0, message = "planned", output = "report\n" }, a)
      assert.is_true(run.ctx.dry_run)
      assert.equal(run.ctx.host, seen.preloaded["imexguard.host"])
      assert.same({ 'write_atomic("/etc/x", "a")' }, run.ctx.planned)
      assert.same({}, h.writes)
    end)

    it("health, a dry run too: the built-in entry point under the recorders", function()
      local run, seen = new_run{ command = "health" }
      local a = go(run)
      assert.equal("ok", a.outcome)
      assert.is_true(run.ctx.dry_run)
      assert.equal(run.ctx.host, seen.preloaded["imexguard.host"])
    end)

    it("finish: a table report is JSON; a result that is not an outcome is policy-error", function()
      local text = policy_text{ prolog = "return 'ok', 'm', { a = 1 }", epilog = "return 'nope', 'm'",
        status = "return 'ok', 5" }
      local run = new_run{ policy = SITE, files = { [SITE] = text } }
      local a = go(run)
      assert.same({ a = 1 }, cjson.decode(a.output))
      a = go(new_run{ command = "epilog", policy = SITE, files = { [SITE] = text } })
      assert.same({ outcome = "policy-error", code = 3,
        message = 'policy ' .. SITE .. ': epilog returned "nope" instead of an outcome name' }, a)
      a = go(new_run{ command = "status", policy = SITE, files = { [SITE] = text } })
      assert.equal("policy-error", a.outcome)
      assert.equal("policy " .. SITE .. ": status returned a number as its message (a string is expected)",
        a.message)
    end)

    it("finish: the exit code follows the settings (on_peer_fault)", function()
      local text = policy_text{ prolog = "return 'peers-unhealthy', 'n2'", epilog = "return 'ok'" }
      assert.equal(0, go(new_run{ policy = SITE, files = { [SITE] = text } }).code)
      local a = go(new_run{ policy = SITE, files = { [SITE] = text }, sets = { "on_peer_fault=fail" } })
      assert.equal(12, a.code)
    end)

    it("after the outcome: the commands of METRICS are recorded in metrics_dir, the others not", function()
      local text = policy_text{ prolog = "return 'ok'", epilog = "return 'ok'", status = "return 'ok'",
        plan = "return 'ok'" }
      local prom = "/var/lib/prometheus/node-exporter/imexguard.prom"
      for _, cmd in ipairs({ "prolog", "epilog", "status", "plan" }) do
        h = testing.host()
        package.loaded["imexguard.host"] = h
        local run = new_run{ command = cmd, policy = SITE, files = { [SITE] = text },
          sets = { "metrics_dir=/var/lib/prometheus/node-exporter" } }
        assert.equal("ok", go(run).outcome)
        local written = h.file(prom)
        if D.METRICS[cmd] then
          assert.matches('command="' .. cmd .. '"', written, 1, true)
        else
          assert.is_nil(written, cmd)
        end
      end
    end)
  end)

  describe("the last prolog and epilog (imexguard.state.save_last, shown by status)", function()
    local SITE = "/etc/imexguard/site.lua"
    local function go(run)
      local a = D.settings(run)
      if a.outcome then return a end
      a = D.prepare(run)
      if a.outcome then return a end
      D.invoke(run)
      return D.finish(run)
    end

    it("each prolog and epilog records its outcome, exit code, job and time; plan and status not", function()
      assert.same(require("imexguard.state").LAST, D.LAST)
      local text = policy_text{ prolog = "return 'conflict', 'job 1 holds it'",
        epilog = "return 'ok', 'gone'",
        status = "return 'ok'", plan = "return 'ok'" }
      h = testing.host()
      package.loaded["imexguard.host"] = h
      h.mkdir("/run/imexguard", 493)
      for _, cmd in ipairs({ "prolog", "epilog", "status", "plan" }) do
        local run = new_run{ command = cmd, policy = SITE, files = { [SITE] = text } }
        go(run)
      end
      local st = require("imexguard.state")
      local settings = { state_dir = "/run/imexguard" }
      local p = assert(st.load_last(h, settings, "prolog"))
      assert.same({ "prolog", "conflict", 5, "job 1 holds it" }, { p.command, p.outcome, p.exit_code,
        p.message })
      assert.is_true(p.ended_us >= 1.6e15 and p.ended_us <= h.wallclock() * 1e6)
      local e = assert(st.load_last(h, settings, "epilog"))
      assert.same({ "ok", 0 }, { e.outcome, e.exit_code })
      assert.is_nil(h.file("/run/imexguard/last-status.json"))
      assert.is_nil(h.file("/run/imexguard/last-plan.json"))
    end)
  end)

  it("the built-in prolog's fabric in the metrics: a gauge per GPU with its Health Summary (C42)", function()
    h = testing.host{ nvidia_smi = testing.gpus({ {}, { health = { summary = "Limited Capacity" } } }) }
    package.loaded["imexguard.host"] = h
    local run = new_run{ sets = { "metrics_dir=/var/lib/prometheus/node-exporter" } }
    local a = D.settings(run)
    assert.is_nil(a.outcome)
    assert.is_nil(D.prepare(run).outcome)
    D.invoke(run)
    a = D.finish(run)
    assert.equal("ok", a.outcome)
    assert.matches("degraded: GPU 1 Summary Limited Capacity", a.message, 1, true)
    local prom = h.file("/var/lib/prometheus/node-exporter/imexguard.prom")
    local part = testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID
    assert.matches('imexguard_fabric_gpu{gpu="1",health="Limited Capacity",partition="' .. part
      .. '",state="Completed",status="Success"} 1', prom, 1, true)
    assert.matches('imexguard_fabric_gpu{gpu="0",health="Healthy",', prom, 1, true)
  end)

  describe("the nudges (imexguard.nudge): counted by the host, in the final line and the metrics", function()
    local JOB = { "10.0.0.1", "10.0.0.2" }
    local PROM = "/var/lib/prometheus/node-exporter/imexguard.prom"
    local SITE = "/etc/imexguard/site.lua"

    local function go(run)
      local a = D.settings(run)
      if a.outcome then return a end
      a = D.prepare(run)
      if a.outcome then return a end
      D.invoke(run)
      return D.finish(run)
    end

    -- the built-in prolog on n1 while peer n2 restarted (testing.restarted_peer), with metrics
    local function prolog(hopts, sets)
      hopts.ctl = testing.restarted_peer{ hosts = JOB, backoff = 15 }
      h = testing.host(hopts)
      package.loaded["imexguard.host"] = h
      local list = { "metrics_dir=/var/lib/prometheus/node-exporter" }
      for _, x in ipairs(sets or {}) do list[#list + 1] = x end
      local run = new_run{ sets = list }
      return go(run), run
    end

    it("a prolog that nudged: run.nudges, '; nudges=1' ending the final line, the metric", function()
      local a, run = prolog({})
      assert.equal("ok", a.outcome)
      assert.equal(1, #h.kills)
      assert.equal(1, run.nudges)
      assert.equal(0, run.restarts)
      assert.matches("; nudges=1$", a.message)
      assert.matches("\nimexguard_nudges_total 1\n", h.file(PROM))
      assert.matches("\nimexguard_restarts_total 0\n", h.file(PROM))
      -- counters add up over runs
      local a2 = go(new_run{ sets = { "metrics_dir=/var/lib/prometheus/node-exporter" } })
      assert.equal("ok", a2.outcome)
      assert.not_matches("nudges=", a2.message) -- the domain is UP now: nothing to nudge
      assert.matches("\nimexguard_nudges_total 1\n", h.file(PROM))
    end)

    it("membership by slots: the name map's writes in place counted, the mode in the metrics", function()
      local slots = require("imexguard.slots")
      local names = slots.list({ "n1", "n2" })
      local map = slots.build(names, { [names[1]] = "10.0.0.1", [names[2]] = "10.0.0.2" },
        { [names[1]] = true })
      h = testing.host{ files = { ["/run/imexguard/hosts"] = map } }
      package.loaded["imexguard.host"] = h
      local run = new_run{ sets = { "metrics_dir=/var/lib/prometheus/node-exporter", "membership=slots" } }
      D.settings(run)
      local host = require("imexguard.runhost").counting(h, run)
      assert.is_true(host.write_in_place("/run/imexguard/hosts", map))
      assert.is_nil((host.write_in_place("/run/imexguard/hosts", "short"))) -- refused: not counted
      assert.equal(1, run.map_writes)
      local a = go(new_run{ sets = { "metrics_dir=/var/lib/prometheus/node-exporter", "membership=slots" } })
      assert.matches("\nimexguard_membership{mode=\"slots\"} 1\n", h.file(PROM), 1, true)
      assert.matches("\nimexguard_membership{mode=\"list\"} 0\n", h.file(PROM), 1, true)
      assert.matches("\nimexguard_slot_map_writes_total 0\n", h.file(PROM), 1, true)
      assert.is_string(a.outcome)
    end)

    it("no nudge (nudge = false) or a failed one: not counted, the final line says nothing", function()
      for _, case in ipairs({ { {}, { "nudge=false" } }, { { unit_kill = "bus" }, {} } }) do
        local a, run = prolog(case[1], case[2])
        assert.equal("ok", a.outcome)
        assert.equal(0, run.nudges)
        assert.not_matches("nudges=", a.message)
        assert.matches("\nimexguard_nudges_total 0\n", h.file(PROM))
      end
    end)

    it("only SIGUSR1 that systemd delivered counts (the nudge's signal)", function()
      assert.equal(require("imexguard.nudge").SIGUSR1, require("imexguard.runhost").SIGUSR1)
      local text = policy_text{ prolog = "ctx.host.unit_kill('nvidia-imex.service', 15); "
        .. "ctx.host.unit_kill('nvidia-imex.service', 10); ctx.host.unit_kill('nvidia-imex.service', 10); "
        .. "return 'ok', 'done'", epilog = "return 'ok'" }
      local run = new_run{ policy = SITE, files = { [SITE] = text } }
      local a = go(run)
      assert.equal(2, run.nudges)
      assert.equal("done; nudges=2", a.message)
    end)

    it("a dry run (health) that waits: nothing sent, the nudge in ctx.planned, none counted", function()
      h = testing.host{ ctl = testing.restarted_peer{ hosts = JOB, backoff = 4 } }
      package.loaded["imexguard.host"] = h
      local text = policy_text{ prolog = "return 'ok'", epilog = "return 'ok'",
        health = "local o, m = require('imexguard.health').wait(ctx, { addrs = { '10.0.0.1', '10.0.0.2' }, "
          .. "self = '10.0.0.1' }); return o, m" }
      local run = new_run{ command = "health", policy = SITE, files = { [SITE] = text } }
      local a = go(run)
      assert.equal("ok", a.outcome)
      assert.equal(0, h.count("unit_kill"))
      assert.same({ 'unit_kill("nvidia-imex.service", 10)' }, run.ctx.planned)
      assert.is_nil(run.nudges)
      assert.not_matches("nudges=", a.message)
    end)

    it("counts: a message cut to one line keeps its '; nudges=N' whole", function()
      local text = require("imexguard.text")
      assert.equal("m", D.counts({ nudges = 0 }, "m"))
      assert.equal("m", D.counts({}, "m"))
      assert.equal("nudges=3", D.counts({ nudges = 3 }, ""))
      local long = D.counts({ nudges = 12 }, string.rep("x", 2000))
      assert.matches("%.%.%.; nudges=12$", long)
      assert.is_true(#long <= text.MAX_LINE + 3 + #"; nudges=12")
    end)
  end)

  describe("check (the calls of `imexguard check`)", function()
    local P = "/etc/imexguard/site.lua"

    it("the built-in policy passes every standard scenario", function()
      local run, seen = new_run{ command = "check", check_path = P,
        files = { [P] = "return require('policies.default')" } }
      D.settings(run)
      local a = D.check_begin(run)
      assert.equal("policy " .. P .. ": entry points prolog, epilog, watch, status, plan, health, "
        .. "registrations, forget, wait, rack\n", a.output)
      assert.is_table(seen.preloaded["imexguard.host"])
      local names = require("imexguard.testing.check").names()
      local n = 0
      while true do
        local nx = D.check_next(run)
        if nx.done then break end
        n = n + 1
        assert.equal(names[n], nx.name)
        assert.matches("^PASS " .. nx.name:gsub("%p", "%%%0") .. ": ", D.check_scenario(run).output)
      end
      assert.equal(#names, n)
      local e = D.check_end(run)
      assert.equal("ok", e.outcome)
      assert.equal(0, e.code)
      assert.equal(string.format("policy %s is valid: prolog, epilog, watch, status, plan, health, "
        .. "registrations, forget, wait, rack; all %d scenarios passed", P, #names), e.message)
      assert.equal(string.format("check: all %d scenarios passed\n", #names), e.output)
    end)

    it("--json: one ordered object (docs/json.md, check); a policy that cannot load: the outcome object",
      function()
      local run = new_run{ command = "check", check_path = P, json = true,
        files = { [P] = "return require('policies.default')" } }
      D.settings(run)
      assert.is_nil(D.check_begin(run).output)
      while not D.check_next(run).done do D.check_scenario(run) end
      local e = D.check_end(run)
      assert.matches('^{"schema":1,"command":"check","ok":true,"outcome":"ok","exit_code":0,'
        .. '"message":"policy [^"]+","policy":"[^"]+","entry_points":%["prolog","epilog","watch","status",'
        .. '"plan","health","registrations","forget","wait","rack"%],"scenarios":%[{"name":"healthy%-job",'
        .. '"title":"[^"]+",'
        .. '"result":"pass","ok":true,"not_applicable":false,"why":null,"detail":"[^"]*"}', e.output)
      assert.matches(',"passed":10,"failed":0,"not_run":0,"not_applicable":0,"exercised":%[[^%]]+%]}\n$',
        e.output)
      run = new_run{ command = "check", check_path = P, json = true, files = { [P] = "return 5" } }
      D.settings(run)
      e = D.check_begin(run)
      assert.equal("policy-error", e.outcome)
      assert.equal('{"schema":1,"command":"check","ok":false,"outcome":"policy-error","exit_code":3,'
        .. '"message":' .. cjson.encode(e.message) .. '}\n', e.output)
    end)

    it("a scenario that failed outside run_one and the ones not run: policy-error naming them", function()
      local run = new_run{ command = "check", check_path = P,
        files = { [P] = "return require('policies.default')" } }
      D.settings(run)
      D.check_begin(run)
      local first = D.check_next(run).name
      run.why = "the deadline interrupt"
      assert.matches("^FAIL " .. first:gsub("%p", "%%%0") .. ": .*: the deadline interrupt\n$",
        D.check_failed(run).output)
      local skipped = 0
      while not D.check_next(run).done do
        run.verdict, run.why = "SKIP", "the budget was spent"
        assert.matches("^SKIP ", D.check_failed(run).output)
        skipped = skipped + 1
      end
      local e = D.check_end(run)
      assert.equal("policy-error", e.outcome)
      assert.equal(string.format("policy %s: 1 of %d scenarios failed: %s; %d not run (the run's budget was "
        .. "spent)", P, skipped + 1, first, skipped), e.message)
    end)

    it("a policy that is not one ends the check before any scenario", function()
      local run = new_run{ command = "check", check_path = P, files = { [P] = "return { prolog = 1 }" } }
      D.settings(run)
      local a = D.check_begin(run)
      assert.equal("policy-error", a.outcome)
      assert.equal("policy " .. P .. ": prolog must be a function, is number", a.message)
    end)
  end)
end)
