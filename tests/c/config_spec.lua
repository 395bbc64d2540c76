-- SPDX-License-Identifier: Apache-2.0
-- The configuration commands and the errors of the settings (issue "An operator's tool", point 1):
-- settings-error (exit 18) naming the file, line and key; `config-test` / `-t` (sshd -t, nginx -t);
-- `show-config` / `-T` (sshd -T, scontrol show config) with each setting's source; `health` and
-- `config-test` print one reason line on stdout for every non-zero exit; --lua-dir and
-- IMEXGUARD_LUA_DIR failures exit 1 as usage errors and name their source; `plan --job
-- --nodelist`; a policy error lost to a tail call names the policy file and line.
-- Runs the BUILT binary ($IMEXGUARD_BUILD/imexguard) in a private temp dir.
local H = require("helpers")
local final = H.final
local cjson = require("cjson")

local function run(dir, args, env)
  return H.run_imexguard(args, { dir = dir, env = env })
end

describe("imexguard configuration commands", function()
  local dir
  local count = 0
  local function file(text, ext)
    count = count + 1
    local path = string.format("%s/f%d.%s", dir, count, ext or "lua")
    H.write(path, text)
    return path
  end
  local POLICY = "local P = {}\nfunction P.prolog() print('POLICY RAN') return 'ok', 'ran' end\n"
    .. "P.epilog = P.prolog\nreturn P\n"

  -- A node whose files config-test finds clean: slurm.conf with the flags and timeouts it wants, a
  -- config.cfg, a ctl that exists, a state_dir, and no systemd to ask (the machine's is not touched).
  local clean
  setup(function()
    H.imexguard_bin()
    dir = H.tmpdir()
    H.write(dir .. "/empty.conf", "")
    H.write(dir .. "/slurm.conf",
      "PrologFlags=Alloc,DeferBatch\nPrologEpilogTimeout=180\nBatchStartTimeout=180\n")
    H.write(dir .. "/config.cfg", "SERVER_PORT=50000\nIMEX_CMD_PORT=50005\n")
    assert(os.execute("mkdir -p " .. dir .. "/state"))
    clean = 'slurm_conf = "' .. dir .. '/slurm.conf"\nimex_config = "' .. dir .. '/config.cfg"\n'
      .. 'ctl = "/bin/true"\nstate_dir = "' .. dir .. '/state"\nbus = "unix:path=' .. dir .. '/no-bus"\n'
  end)
  teardown(function() H.rmdir(dir) end)

  describe("config-test and -t", function()
    it("exits 0, its last line 'FILE: ok' naming the policy that loads, after what it read", function()
      local conf = file('unit = "x.service"\n' .. clean, "conf")
      local p = file(POLICY)
      for _, args in ipairs({ { "config-test" }, { "-t" } }) do
        local a = { "--config", conf, "--policy", p }
        for _, x in ipairs(args) do a[#a + 1] = x end
        local r = run(dir, a)
        assert.equal(0, r.code, r.stderr)
        -- the commands it leaves to the built-in policy are named
        local last = "\n" .. conf .. ": ok; policy " .. p .. " loads (prolog, epilog); built-in watch, "
          .. "status, plan, health, registrations, forget, wait, rack\n"
        assert.equal(last, r.stdout:sub(-#last))
        assert.not_matches("warning", r.stdout) -- a clean node: what was read, no warning
        assert.matches(dir .. "/slurm.conf: info: slurm.conf read (setting slurm_conf)", r.stdout, 1, true)
        assert.equal("config-test", final(r).command)
        assert.not_matches("POLICY RAN", r.stderr) -- loaded, no entry point run
      end
    end)

    it("a typo in the file: settings-error 18, one line naming file:line and the key", function()
      local conf = file('deadline = 30\n-- a comment\nlock_timout = 5\n', "conf")
      local r = run(dir, { "--config", conf, "-t" })
      assert.equal(18, r.code)
      assert.equal("imexguard: settings-error: settings file " .. conf
        .. ":3: unknown setting 'lock_timout'\n",
        r.stdout)
      assert.equal("settings-error", final(r).outcome)
    end)

    it("a syntax error and a bad --set are settings errors too", function()
      local conf = file('unit = "a"\nstate_dir = /run/x\n', "conf")
      local r = run(dir, { "--config", conf, "-t" })
      assert.equal(18, r.code)
      assert.matches("^imexguard: settings%-error: settings file " .. conf:gsub("%p", "%%%0") .. ":2: ",
        r.stdout)
      r = run(dir, { "--config", dir .. "/empty.conf", "--set", "health_timeout=long", "-t" })
      assert.equal(18, r.code)
      assert.equal("imexguard: settings-error: --set health_timeout: 'long' is not a number\n", r.stdout)
    end)

    it("a policy that does not load: policy-error 3, its reason line on stdout", function()
      local p = file("local P = {}\nP.prolog = 1\nreturn P\n")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "-t" })
      assert.equal(3, r.code)
      assert.equal("imexguard: policy-error: policy " .. p .. ": prolog must be a function, is number\n",
        r.stdout)
    end)

    it("-t takes no COMMAND and no second short command", function()
      local r = run(dir, { "-t", "prolog" })
      assert.equal(1, r.code)
      assert.matches("unexpected argument 'prolog' (-t is the command config-test)", r.stderr, 1, true)
      r = run(dir, { "-t", "-T" })
      assert.equal(1, r.code)
      assert.matches("give one command", r.stderr, 1, true)
    end)
  end)

  describe("show-config and -T", function()
    it("prints every setting with its value and source: default, FILE:LINE, --set, --deadline, --policy",
      function()
        local conf = file('unit = "file.service"\n\nlock_timeout = 200\n', "conf")
        local p = file(POLICY)
        local r = run(dir, { "--config", conf, "--set", "health_timeout=30", "--deadline", "50",
          "--policy", p, "-T" })
        assert.equal(0, r.code, r.stderr)
        local out = r.stdout
        assert.matches('\nunit = "file.service" %-%- ' .. conf:gsub("%p", "%%%0") .. ':1\n', out)
        assert.matches('\nlock_timeout = 200 %-%- ' .. conf:gsub("%p", "%%%0") .. ':3\n', out)
        assert.matches('\nhealth_timeout = 30 %-%- %-%-set\n', out)
        assert.matches('\ndeadline = 50 %-%- %-%-deadline\n', out)
        assert.matches('\npolicy = "' .. p:gsub("%p", "%%%0") .. '" %-%- %-%-policy\n', out)
        assert.matches('\nstart_timeout = 30 %-%- default\n', out)
        assert.matches('\n%-%- nodes_file unset %(default%)\n', out)
        -- every setting of the schema, once
        local S = require("imexguard.settings")
        for _, e in ipairs(S.schema) do
          local _, n = out:gsub("\n%-?%-? ?" .. e.name .. " [=u]", "")
          assert.equal(1, n, e.name)
        end
        -- the text is a valid settings file with the same values
        local t = assert(S.validate(assert(S.load(out, "=show-config"))))
        assert.equal(200, t.lock_timeout)
        assert.equal("file.service", t.unit)
      end)

    it("--json: a list of {name, value, source}", function()
      local conf = file('ctl = { "/bin/echo", "ctl" }\n', "conf")
      local r = run(dir, { "--config", conf, "show-config", "--json" })
      assert.equal(0, r.code, r.stderr)
      local obj = cjson.decode(r.stdout)
      -- docs/json.md: schema first, then command and ok, keys in one order in every run
      assert.matches('^{"schema":1,"command":"show%-config","ok":true,"config":', r.stdout)
      assert.matches('{"name":"deadline","value":90,"source":"default","effective":null,"why":null}',
        r.stdout, 1, true)
      assert.equal(conf, obj.config)
      local by = {}
      for _, s in ipairs(obj.settings) do by[s.name] = s end
      assert.same({ "/bin/echo", "ctl" }, by.ctl.value)
      assert.equal(conf .. ":1", by.ctl.source)
      assert.equal(cjson.null, by.nodes_file.value)
      assert.equal("default", by.deadline.source)
    end)

    it("a bad file is settings-error, said once on stdout (the journal off: also the final line on stderr)",
      function()
      local conf = file('colour = "blue"\n', "conf")
      local r = run(dir, { "--config", conf, "-T" })
      assert.equal(18, r.code)
      assert.equal("imexguard: settings-error: settings file " .. conf .. ":1: unknown setting 'colour'\n",
        r.stdout)
      assert.equal("settings file " .. conf .. ":1: unknown setting 'colour'", final(r).message)
    end)
  end)

  describe("health's reason line", function()
    it("is printed on stdout for a settings error, a policy error and the deadline", function()
      local conf = file('deadline = "soon"\n', "conf")
      local r = run(dir, { "--config", conf, "health" })
      assert.equal(18, r.code)
      assert.matches("^imexguard: settings%-error: settings file [^\n]+:1: setting 'deadline'[^\n]*\n$",
        r.stdout)
      local p = file("local P = {}\nP.prolog = function() end\nP.epilog = P.prolog\n"
        .. "function P.health() error('boom') end\nreturn P\n")
      r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "health" })
      assert.equal(3, r.code)
      assert.matches("^imexguard: policy%-error: [^\n]*boom\n$", r.stdout)
      p = file("local P = {}\nP.prolog = function() end\nP.epilog = P.prolog\n"
        .. "function P.health() while true do end end\nreturn P\n")
      r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "--deadline", "0.3", "health" })
      assert.equal(10, r.code)
      assert.matches("^imexguard: deadline%-exceeded: [^\n]+\n$", r.stdout)
    end)

    it("is printed for a usage error too (a bad --set, a bad --lua-dir), exit 1", function()
      local r = run(dir, { "health", "--set", "health_timeout" })
      assert.equal(1, r.code)
      assert.equal("imexguard: error: --set: expected KEY=VALUE, got 'health_timeout'\n", r.stdout)
      r = run(dir, { "--lua-dir", dir .. "/nope", "health" })
      assert.equal(1, r.code)
      assert.equal("imexguard: error: --lua-dir " .. dir .. "/nope: not a directory\n", r.stdout)
      r = run(dir, { "status", "--set", "x" }) -- status too: pdsh ... status -q shows why
      assert.equal("imexguard: error: --set: expected KEY=VALUE, got 'x'\n", r.stdout)
      r = run(dir, { "epilog", "--set", "x" }) -- Slurm's prolog and epilog: stderr only
      assert.equal("", r.stdout)
    end)

    it("follows the grammar of a drain reason: a long cause cut at 200 bytes with '...', never inside a "
      .. "UTF-8 sequence, the whole line within drain.MAX_REASON", function()
      local drain = require("imexguard.drain")
      local p = file("local P = {}\nP.prolog = function() end\nP.epilog = P.prolog\n"
        .. "function P.health() error('" .. string.rep("\195\188", 150) .. "', 0) end\nreturn P\n")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "health" })
      assert.equal(3, r.code)
      local line = r.stdout:match("^([^\n]*)\n$")
      assert.truthy(line, r.stdout)
      assert.truthy(#line <= drain.MAX_REASON, line)
      assert.matches("%.%.%.$", line)
      assert.truthy(utf8.len(line), "cut inside a UTF-8 sequence: " .. line)
      assert.equal("policy-error", (drain.parse(line)))
      local long = string.rep("x", 400)
      r = run(dir, { "health", "--set", long })
      assert.equal(1, r.code)
      line = r.stdout:match("^([^\n]*)\n$")
      assert.truthy(#line <= drain.MAX_REASON, line)
      assert.matches("%.%.%.$", line)
      assert.equal("error", (drain.parse(line)))
    end)

    it("is not doubled when the policy printed its own", function()
      local p = file("local P = {}\nP.prolog = function() end\nP.epilog = P.prolog\n"
        .. "function P.health()\n"
        .. "  return 'domain-unhealthy', 'n1 down', 'imexguard: domain-unhealthy: n1 down\\n'\nend\n"
        .. "return P\n")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "health" })
      assert.equal(9, r.code)
      assert.equal("imexguard: domain-unhealthy: n1 down\n", r.stdout)
    end)
  end)

  describe("--lua-dir and IMEXGUARD_LUA_DIR", function()
    it("a missing or relative directory is a usage error (exit 1) naming the option or the variable",
      function()
      local r = run(dir, { "--lua-dir", dir .. "/nope", "status" })
      assert.equal(1, r.code)
      assert.matches("imexguard: --lua-dir " .. dir .. "/nope: not a directory\nTry 'imexguard --help'.",
        r.stderr, 1, true)
      r = run(dir, { "status" }, { IMEXGUARD_LUA_DIR = "relative" })
      assert.equal(1, r.code)
      assert.matches("imexguard: IMEXGUARD_LUA_DIR relative: must be an absolute directory", r.stderr, 1,
        true)
      r = run(dir, { "status" }, { IMEXGUARD_LUA_DIR = dir .. "/nope" })
      assert.equal(1, r.code)
      assert.matches("imexguard: IMEXGUARD_LUA_DIR " .. dir .. "/nope: not a directory", r.stderr, 1, true)
    end)

    it("a library that does not load from it exits 1 too, naming where it came from", function()
      local d = dir .. "/badlib"
      assert(os.execute("mkdir -p " .. d .. "/imexguard && chmod 0755 " .. d .. " " .. d .. "/imexguard"))
      H.write(d .. "/imexguard/driver.lua", "return {\n")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--lua-dir", d, "health" })
      assert.equal(1, r.code)
      assert.matches("imexguard's Lua library from --lua-dir: ", final(r).message, 1, true)
      assert.matches("^imexguard: error: imexguard's Lua library", r.stdout)
    end)
  end)

  describe("plan --job --nodelist", function()
    it("fill in the job id and hostlist: no Slurm environment needed", function()
      local p = file("local P = {}\nP.prolog = function() end\nP.epilog = P.prolog\n"
        .. "function P.plan(ctx) return 'ok', tostring(ctx.job.id) .. ' ' .. tostring(ctx.job.nodelist) end\n"
        .. "return P\n")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "plan", "--job", "42",
        "--nodelist", "n[01-04]" })
      assert.equal(0, r.code, r.stderr)
      local f = final(r)
      assert.equal("42 n[01-04]", f.message)
      assert.equal("42", f.job)
    end)

    it("are refused for any other command (commands.lua's options: plan --job --nodelist, wait --job "
      .. "--timeout)", function()
      local r = run(dir, { "prolog", "--job", "42" })
      assert.equal(1, r.code)
      assert.matches("imexguard: --job is not an option of prolog", r.stderr, 1, true)
      r = run(dir, { "status", "--nodelist", "n1" })
      assert.equal(1, r.code)
      assert.matches("imexguard: --nodelist is not an option of status", r.stderr, 1, true)
      r = run(dir, { "wait", "--nodelist", "n1" })
      assert.equal(1, r.code)
      assert.matches("imexguard: --nodelist is not an option of wait", r.stderr, 1, true)
      r = run(dir, { "plan", "--timeout", "3" })
      assert.equal(1, r.code)
      assert.matches("imexguard: --timeout is not an option of plan", r.stderr, 1, true)
      r = run(dir, { "wait", "--timeout", "soon" })
      assert.equal(1, r.code)
      assert.matches("imexguard: --timeout: 'soon' is not a number of seconds > 0", r.stderr, 1, true)
      assert.equal("imexguard: error: --timeout: 'soon' is not a number of seconds > 0\n", r.stdout)
    end)

    it("wait --job N --timeout S: the job and the wait reach the policy; the budget is S and 2 s more",
      function()
      local p = file("local P = {}\nP.prolog = function() end\nP.epilog = P.prolog\n"
        .. "function P.wait(ctx) return 'ok', tostring(ctx.job.id) .. ' ' .. tostring(ctx.timeout) .. ' '"
        .. " .. tostring(ctx.job_given) .. string.format(' %.0f', ctx.host.remaining()) end\n"
        .. "return P\n")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "wait", "--job", "42",
        "--timeout", "7" })
      assert.equal(0, r.code, r.stderr)
      assert.equal("42 7 true 9", final(r).message)
    end)
  end)

  describe("a policy error lost to a tail call", function()
    it("names the policy file and line, not the driver", function()
      local p = file("local P = require('policies.default')\n\n-- site hooks\nreturn P.extend{\n"
        .. "  wait_helthy = function() end,\n}\n")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "-t" })
      assert.equal(3, r.code)
      local f = final(r)
      assert.equal(p .. ":5: policy extend: unknown hook 'wait_helthy'", f.message)
      assert.not_matches("driver.lua", r.stdout .. r.stderr, 1, true)
    end)

    it("keeps the position of an error the policy's own frame raised", function()
      local p = file("local P = require('policies.default')\nlocal x = nil\nreturn P.extend{ x.y }\n")
      local r = run(dir, { "--config", dir .. "/empty.conf", "--policy", p, "-t" })
      assert.equal(3, r.code)
      assert.matches(p .. ":3: attempt to index", final(r).message, 1, true)
    end)
  end)
end)
