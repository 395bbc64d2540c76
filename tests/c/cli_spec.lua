-- The imexguard command line (src/main.c): usage errors, --help/--version, settings (file, --set,
-- --deadline), the context given to the policy, check, status, plan, and the final log line.
-- Runs the BUILT binary ($IMEXGUARD_BUILD/imexguard) on policies in a private temp dir.
local BUILD = os.getenv("IMEXGUARD_BUILD") or "build"
local BIN = BUILD .. "/imexguard"

local function sh_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function write_file(path, text, mode)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  assert(os.execute("chmod " .. (mode or "0644") .. " " .. sh_quote(path)))
end

-- Run the binary with args (list) and extra environment; {code, stdout, stderr, elapsed}.
-- env: the binary runs with `env -i` plus these variables (a controlled environment).
local function run(dir, args, env)
  local parts = { "env", "-i", "PATH=/usr/bin:/bin", "IMEXGUARD_NO_JOURNAL=1" }
  for k, v in pairs(env or {}) do parts[#parts + 1] = sh_quote(k .. "=" .. v) end
  parts[#parts + 1] = sh_quote(BIN)
  for _, a in ipairs(args) do parts[#parts + 1] = sh_quote(a) end
  local out, err = dir .. "/stdout", dir .. "/stderr"
  local cmd = string.format("s=$(date +%%s%%N); %s </dev/null >%s 2>%s; rc=$?; e=$(date +%%s%%N); "
    .. "echo $rc $(( (e - s) / 1000 ))", table.concat(parts, " "), sh_quote(out), sh_quote(err))
  local p = assert(io.popen(cmd))
  local line = p:read("l")
  p:close()
  local code, us = line:match("^(%d+) (%d+)$")
  return { code = tonumber(code), stdout = read_file(out) or "", stderr = read_file(err) or "",
    elapsed = tonumber(us) / 1e6 }
end

-- The final line's parts: level, command, job, outcome, message.
local function final(r)
  local last
  for l in r.stderr:gmatch("[^\n]+") do
    if l:match("^imexguard: %a+: %a+ job=%S+ outcome=") then last = l end
  end
  assert(last, "no final line in stderr:\n" .. r.stderr)
  local level, command, job, outcome, msg =
    last:match("^imexguard: (%a+): (%a+) job=(%S+) outcome=([%w-]+):? ?(.*)$")
  return { level = level, command = command, job = job, outcome = outcome, message = msg }
end

describe("imexguard command line", function()
  local dir

  setup(function()
    local p = assert(io.popen("mktemp -d /tmp/igcli.XXXXXX"))
    dir = p:read("l")
    p:close()
    assert(os.execute("chmod 0700 " .. sh_quote(dir)))
    assert(io.open(BIN, "rb"), "the binary " .. BIN .. " is not built (set IMEXGUARD_BUILD)"):close()
    write_file(dir .. "/empty.conf", "")
  end)

  teardown(function()
    if dir then os.execute("rm -rf " .. sh_quote(dir)) end
  end)

  local count = 0
  local function file(text, ext)
    count = count + 1
    local path = string.format("%s/f%d.%s", dir, count, ext or "lua")
    write_file(path, text)
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
        "--json", "policy-error 3", "deadline-exceeded 10", "exits 1" }) do
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
      assert.equal("policy-error", f.outcome)
      assert.equal(3, r.code)
      assert.equal("err", f.level)
      assert.matches(want, f.message, 1, true)
      assert.not_matches("POLICY RAN", r.stderr)
      return conf, f
    end

    it("refuses an unknown key, naming it and the file; the policy does not run", function()
      local conf, f = refused('deadline = 30\nlock_timout = 5\n', "unknown setting 'lock_timout'")
      assert.equal("settings file " .. conf .. ": unknown setting 'lock_timout'", f.message)
    end)

    it("refuses a wrong type, naming the key", function()
      refused('deadline = "30"\n', "setting 'deadline' must be a number > 0 (seconds), got string \"30\"")
      refused('on_peer_fault = "drain"\n', "setting 'on_peer_fault' must be one of")
    end)

    it("refuses code in the settings file, with file:line", function()
      local conf = refused('unit = "a"\nstate_dir = os.getenv("HOME")\n', "undefined name 'os'")
      local r = run(dir, { "--config", conf, "--policy", echo_policy("'x'"), "prolog" })
      assert.matches(conf .. ":2: undefined name 'os'", final(r).message, 1, true)
    end)

    it("refuses a missing explicit settings file, naming it", function()
      local r = run(dir, { "--config", dir .. "/missing.conf", "--policy", echo_policy("'x'"), "prolog" })
      assert.equal(3, r.code)
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
      assert.equal(3, r.code)
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

    local loop = "local P = {}\nfunction P.prolog(ctx) while true do end end\nP.epilog = P.prolog\nreturn P\n"

    it("uses the deadline setting as the run's budget", function()
      local conf = file("deadline = 0.4\n", "conf")
      local r = run(dir, { "--config", conf, "--policy", file(loop), "prolog" })
      assert.equal("deadline-exceeded", final(r).outcome)
      assert.is_true(r.elapsed >= 0.4 and r.elapsed < 1.4, "took " .. r.elapsed)
    end)

    it("--deadline wins over the setting and shows in ctx.settings", function()
      local conf = file("deadline = 60\n", "conf")
      local r = run(dir, { "--config", conf, "--deadline", "0.4", "--policy", file(loop), "prolog" })
      assert.equal("deadline-exceeded", final(r).outcome)
      assert.equal(10, r.code)
      assert.is_true(r.elapsed < 1.4, "took " .. r.elapsed)
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
  return "ok", "would restart", table.concat(ctx.planned, "\n") .. "\n" .. tostring(ctx.dry_run)
    .. " " .. tostring(ok) .. " " .. tostring(done) .. "\n"
end
return P
]]

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
      assert.is_nil(read_file(target))
      assert.equal('write_atomic("' .. target .. '", <9 bytes>)\n'
        .. 'unit_job("nvidia-imex.service", "restart", 5)\ntrue true done\n', r.stdout)
    end)
  end)

  describe("check", function()
    it("accepts a valid policy and names its entry points", function()
      local p = file("return { prolog = function() end, epilog = function() end, status = function() end }")
      local r = run(dir, { "--config", dir .. "/empty.conf", "check", p })
      assert.equal(0, r.code)
      assert.equal("policy " .. p .. " is valid: prolog, epilog, status", final(r).message)
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
      write_file(d .. "/imexguard/extra.lua", "return { hello = 'from lua-dir' }")
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
