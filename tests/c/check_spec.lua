-- SPDX-License-Identifier: Apache-2.0
-- `imexguard check POLICY` (src/main.c run_check, lua/imexguard/driver.lua, testing/check.lua): loading
-- in the sandbox with file:line errors, the entry point check, and the standard scenarios run
-- against the test kit's fake host, each reported as one PASS/FAIL/N/A line; exit 0 only when none
-- failed (a scenario the policy never reached is "not applicable", counted apart).
-- Runs the BUILT binary ($IMEXGUARD_BUILD/imexguard) on policies in a private temp dir.
local H = require("helpers")
local cjson = require("cjson")
local final = H.final

-- Run the binary with `env -i` plus `env`; {code, stdout, stderr, elapsed (seconds)}.
local function run(dir, args, env)
  return H.run_imexguard(args, { dir = dir, env = env })
end

-- The scenario lines of stdout: {name = "PASS"|"FAIL"|"SKIP"|"N/A"} and name -> line.
local function verdicts(r)
  local v, lines = {}, {}
  for l in r.stdout:gmatch("[^\n]+") do
    local word, name = l:match("^(%u%u%u%u) ([%w-]+): ")
    if not word then word, name = l:match("^(N/A) ([%w-]+): ") end
    if word then
      v[name], lines[name] = word, l
    end
  end
  return v, lines
end

local SCENARIOS = { "healthy-job", "epilog", "no-nodelist", "bad-hostlist", "systemd-unknown", "ctl-garbage",
  "ctl-hangs", "whole-list", "write-fails", "config-fault" }

describe("imexguard check", function()
  local dir, conf
  local count = 0

  setup(function()
    H.imexguard_bin()
    dir = H.tmpdir()
    conf = dir .. "/empty.conf"
    H.write(conf, "")
  end)

  teardown(function() H.rmdir(dir) end)

  local function policy(text)
    count = count + 1
    local path = string.format("%s/p%d.lua", dir, count)
    H.write(path, text)
    return path
  end

  local function check(path, extra)
    local args = { "--config", conf }
    for _, a in ipairs(extra or {}) do args[#args + 1] = a end
    args[#args + 1] = "check"
    args[#args + 1] = path
    return run(dir, args)
  end

  -- A policy from the default one, with its prolog replaced by `prolog` (Lua source of a function).
  local function default_with(prolog)
    return policy("local D = require('policies.default')\nlocal P = {}\n"
      .. "for k, v in pairs(D) do P[k] = v end\nP.prolog = " .. prolog .. "\nreturn P\n")
  end

  describe("a good policy", function()
    it("the built-in default policy passes every scenario: exit 0, one PASS line each", function()
      local p = policy("return (require('policies.default'))\n")
      local r = check(p)
      assert.equal(0, r.code, r.stdout .. r.stderr)
      local v = verdicts(r)
      for _, name in ipairs(SCENARIOS) do assert.equal("PASS", v[name], name .. "\n" .. r.stdout) end
      assert.matches("^policy " .. p:gsub("%p", "%%%0")
        .. ": entry points prolog, epilog, watch, status, plan, health, registrations, forget, wait, rack\n",
        r.stdout)
      assert.matches("\ncheck: all 10 scenarios passed\n$", r.stdout)
      local f = final(r)
      assert.equal("ok", f.outcome)
      assert.equal("check", f.command)
      assert.equal("policy " .. p
        .. " is valid: prolog, epilog, watch, status, plan, health, registrations, forget, wait, rack; "
        .. "all 10 scenarios passed", f.message)
    end)

    it("a small verify-only site policy written from the API passes", function()
      -- never writes, never restarts: checks the job's list and the domain, returns an outcome
      local p = policy([[
local steps = require("imexguard.steps")
local health = require("imexguard.health")
local P = {}
function P.prolog(ctx)
  local info, o, m = steps.applies(ctx)
  if not info then return o, m end
  local want
  want, o, m = steps.desired(ctx, info)
  if not want then return o, m end
  return health.wait(ctx, want)
end
function P.epilog() return "ok", "nothing to do" end
return P
]])
      local r = check(p)
      assert.equal(0, r.code, r.stdout .. r.stderr)
      assert.equal("ok", final(r).outcome)
    end)

    it("--json prints one object with every scenario", function()
      local r = check(policy("return (require('policies.default'))\n"), { "--json" })
      assert.equal(0, r.code)
      local obj = cjson.decode(r.stdout)
      assert.equal(10, obj.passed)
      assert.equal(0, obj.failed)
      assert.equal(0, obj.not_run)
      assert.same({ "prolog", "epilog", "watch", "status", "plan", "health", "registrations", "forget",
        "wait", "rack" },
        obj.entry_points)
      local names = {}
      for i, s in ipairs(obj.scenarios) do
        names[i] = s.name
        assert.is_true(s.ok)
        assert.is_string(s.title)
      end
      assert.same(SCENARIOS, names)
    end)
  end)

  describe("a policy that never reaches what a scenario tests", function()
    -- The static-domain policy ends in its own bad-input when the node list on disk (another
    -- job's) does not hold the job's nodes: before systemd's second answer and before any write.
    local VACUOUS = { "systemd-unknown", "whole-list", "write-fails" }
    local EXERCISED = { "healthy-job", "epilog", "no-nodelist", "bad-hostlist", "ctl-garbage", "ctl-hangs",
      "config-fault" }

    it("reports those scenarios as not applicable, counted apart, and names the ones that exercised it",
      function()
        local p = policy(H.read("policies/static_domain.lua"))
        local r = check(p)
        assert.equal(0, r.code, r.stdout .. r.stderr)
        local v, lines = verdicts(r)
        for _, name in ipairs(VACUOUS) do
          assert.equal("N/A", v[name], name .. "\n" .. r.stdout)
          assert.matches("not applicable: the policy never got to .* %(it ended in bad%-input", lines[name])
        end
        for _, name in ipairs(EXERCISED) do assert.equal("PASS", v[name], name .. "\n" .. r.stdout) end
        assert.matches("\ncheck: 7 of 10 scenarios passed; 3 not applicable %(the policy never reached what "
          .. "they test%): systemd%-unknown, whole%-list, write%-fails; exercised the policy: "
          .. table.concat(EXERCISED, ", "):gsub("%p", "%%%0") .. "\n$", r.stdout)
        local f = final(r)
        assert.equal("ok", f.outcome)
        assert.matches("; 7 of 10 scenarios passed; 3 not applicable", f.message, 1, true)
        assert.not_matches("all 10 scenarios passed", r.stdout .. f.message, 1, true)
      end)

    it("--json counts them apart and lists the scenarios that exercised the policy", function()
      local r = check(policy(H.read("policies/static_domain.lua")), { "--json" })
      assert.equal(0, r.code, r.stdout .. r.stderr)
      local obj = cjson.decode(r.stdout)
      assert.equal(7, obj.passed)
      assert.equal(3, obj.not_applicable)
      assert.equal(0, obj.failed)
      assert.same(EXERCISED, obj.exercised)
      local na = {}
      for _, s in ipairs(obj.scenarios) do if s.not_applicable then na[#na + 1] = s.name end end
      assert.same(VACUOUS, na)
    end)

    it("the kit's run_all lists them apart from the failures", function()
      local scenarios = require("imexguard.testing.check")
      local static = require("policies.static_domain")
      local rep = scenarios.run_all(static)
      assert.is_true(rep.ok, rep.text)
      assert.same({}, rep.failed)
      assert.same(VACUOUS, rep.not_applicable)
      assert.matches("\nN/A whole%-list: [^\n]*: not applicable: the policy never got to write the node list",
        rep.text)
    end)

    it("a failure still wins over not applicable (write-fails: ok although the list is wrong)", function()
      local r = check(default_with("function() return 'ok', 'fine' end"))
      local v = verdicts(r)
      assert.equal("FAIL", v["write-fails"])
      assert.equal("N/A", v["whole-list"])
      assert.equal(3, r.code)
    end)
  end)

  describe("an unsafe policy", function()
    it("one that restarts on every run fails systemd-unknown and ctl-garbage, saying why", function()
      local p = default_with([[function(ctx)
  ctx.host.unit_job(ctx.settings.unit, "restart", ctx.settings.start_timeout)
  return "ok", "restarted"
end]])
      local r = check(p)
      assert.equal(3, r.code)
      local v, lines = verdicts(r)
      assert.equal("FAIL", v["systemd-unknown"])
      assert.equal("FAIL", v["ctl-garbage"])
      assert.matches("acted on the service: restart nvidia%-imex%.service", lines["ctl-garbage"])
      assert.matches("no answer at all: acted on the service: restart", lines["systemd-unknown"])
      assert.equal("PASS", v["healthy-job"])
      assert.equal("PASS", v["epilog"])
      local f = final(r)
      assert.equal("policy-error", f.outcome)
      assert.equal("err", f.level)
      assert.matches("^policy " .. p:gsub("%p", "%%%0") .. ": %d of 10 scenarios failed: .*systemd%-unknown, "
        .. "ctl%-garbage", f.message)
    end)

    it("one that ignores the job's node list fails no-nodelist and bad-hostlist", function()
      local r = check(default_with("function() return 'ok', 'fine' end"))
      assert.equal(3, r.code)
      local v, lines = verdicts(r)
      assert.equal("FAIL", v["no-nodelist"])
      assert.equal("FAIL", v["bad-hostlist"])
      assert.matches("ended in ok %(fine%) instead of bad%-input", lines["no-nodelist"])
      assert.matches("n%[1%-: ended in ok", lines["bad-hostlist"])
      assert.equal("FAIL", v["write-fails"])
      assert.matches("exit 0%) although the node list is wrong", lines["write-fails"])
    end)

    it("one that writes the node list in pieces fails whole-list", function()
      local r = check(default_with([[function(ctx)
  local path = "/etc/nvidia-imex/nodes_config.cfg"
  ctx.host.write_atomic(path, "")
  ctx.host.write_atomic(path, "10.0.0.1\n10.0.0.2\n")
  return "ok", "written"
end]]))
      local v, lines = verdicts(r)
      assert.equal(3, r.code)
      assert.equal("FAIL", v["whole-list"])
      assert.matches('with "" instead of the whole list', lines["whole-list"], 1, true)
    end)

    it("one that returns something that is not an outcome fails, naming it", function()
      local r = check(default_with("function() return 'fine', 'all good' end"))
      local v, lines = verdicts(r)
      assert.equal(3, r.code)
      assert.equal("FAIL", v["healthy-job"])
      assert.matches('returned "fine" instead of an outcome name', lines["healthy-job"], 1, true)
    end)

    it("one that reads a misspelt setting fails with file:line (ctx.settings is read-only as on a node)",
      function()
        local p = default_with("function(ctx) return 'ok', tostring(ctx.settings.lock_timout) end")
        local r = check(p)
        local _, lines = verdicts(r)
        assert.equal(3, r.code)
        assert.matches("raised an error: " .. p:gsub("%p", "%%%0") .. ":4: ctx.settings: unknown setting "
          .. "'lock_timout'", lines["healthy-job"])
      end)
  end)

  describe("a broken policy", function()
    it("a syntax error is reported with file:line and no scenario runs", function()
      local p = policy("local P = {}\nfunction P.prolog(ctx)\n  return 'ok'\nP.epilog = P.prolog\nreturn P\n")
      local r = check(p)
      assert.equal(3, r.code)
      -- the result once, on stdout (issue 32 item 9: check is a command a person runs)
      assert.equal("imexguard: policy-error: " .. final(r).message .. "\n", r.stdout)
      local f = final(r)
      assert.equal("policy-error", f.outcome)
      assert.matches("^policy " .. p:gsub("%p", "%%%0") .. ":%d+: 'end' expected", f.message)
    end)

    it("a runtime error in prolog is reported with file:line in the scenario's line", function()
      local p = policy("local P = {}\nfunction P.prolog(ctx)\n  local t = nil\n  return t.outcome\nend\n"
        .. "function P.epilog() return 'ok' end\nreturn P\n")
      local r = check(p)
      assert.equal(3, r.code)
      local v, lines = verdicts(r)
      assert.equal("FAIL", v["healthy-job"])
      assert.equal("PASS", v["epilog"])
      assert.matches("raised an error: " .. p:gsub("%p", "%%%0") .. ":4: attempt to index a nil value "
        .. "%(local 't'%)", lines["healthy-job"])
    end)

    it("a runtime error while loading is reported with file:line", function()
      local p = policy("local P = {}\nP.x = undefined_name.y\nreturn P\n")
      local r = check(p)
      assert.equal(3, r.code)
      -- the result once, on stdout (issue 32 item 9: check is a command a person runs)
      assert.equal("imexguard: policy-error: " .. final(r).message .. "\n", r.stdout)
      assert.equal(p .. ":2: undefined global 'undefined_name'", final(r).message)
    end)

    it("a policy without epilog fails the entry point check", function()
      local p = policy("return { prolog = function() return 'ok' end, status = function() end }\n")
      local r = check(p)
      assert.equal(3, r.code)
      -- the result once, on stdout (issue 32 item 9: check is a command a person runs)
      assert.equal("imexguard: policy-error: " .. final(r).message .. "\n", r.stdout)
      assert.equal("policy " .. p .. ": epilog must be a function, is nil", final(r).message)
    end)

    it("a policy whose prolog loops forever fails within the deadline", function()
      local p = policy("local P = {}\nfunction P.prolog(ctx)\n"
        .. "  while true do pcall(function() end) end\nend\n"
        .. "function P.epilog() return 'ok' end\nreturn P\n")
      local r = check(p, { "--deadline", "1" })
      assert.equal(3, r.code)
      assert.is_true(r.elapsed < 3.5, "took " .. r.elapsed .. " s")
      local v, lines = verdicts(r)
      assert.equal("FAIL", v["healthy-job"])
      assert.matches("did not finish within [%d.]+ s of real time %(the run's deadline passed; "
        .. "interrupted at "
        .. p:gsub("%p", "%%%0") .. ":3%)", lines["healthy-job"])
      for i = 2, #SCENARIOS do assert.equal("SKIP", v[SCENARIOS[i]]) end
      local f = final(r)
      assert.equal("policy-error", f.outcome)
      assert.matches("1 of 10 scenarios failed: healthy%-job; 9 not run", f.message)
    end)

    it("each scenario has its own time limit: scenarios before a looping one pass", function()
      local p = policy("local D = require('policies.default')\nreturn { prolog = D.prolog,\n"
        .. "  epilog = function() while true do end end }\n")
      local r = check(p)
      assert.equal(3, r.code)
      assert.is_true(r.elapsed < 8, "took " .. r.elapsed .. " s")
      local v, lines = verdicts(r)
      assert.equal("PASS", v["healthy-job"])
      assert.equal("FAIL", v["epilog"])
      assert.matches("did not finish within 3 s of real time", lines["epilog"])
      assert.equal("SKIP", v["no-nodelist"])
    end)

    it("a policy that loops while loading fails with policy-error (3), not deadline-exceeded", function()
      local p = policy("while true do end\n")
      local r = check(p, { "--deadline", "0.5" })
      assert.equal(3, r.code)
      assert.is_true(r.elapsed < 3, "took " .. r.elapsed .. " s")
      local f = final(r)
      assert.equal("policy-error", f.outcome)
      assert.matches("interrupted at " .. p:gsub("%p", "%%%0") .. ":1", f.message)
    end)
  end)

  describe("isolation", function()
    it("never touches the node: require('imexguard.host') gives the scenario's fake host", function()
      local target = dir .. "/written-by-check"
      local p = default_with(string.format([[function(ctx)
  local host = require("imexguard.host")
  host.write_atomic(%q, "x\n")
  host.unit_job("nvidia-imex.service", "restart", 1)
  return "ok", "did things"
end]], target))
      local r = check(p)
      assert.is_nil(H.read(target))
      local _, lines = verdicts(r)
      -- the fake host recorded the restart: the scenario saw it
      assert.matches("acted on the service: restart nvidia%-imex%.service", lines["ctl-garbage"])
    end)

    it("uses the site's behaviour settings and the kit's world settings", function()
      local site = dir .. "/site.conf"
      H.write(site, 'deadline = 30\nunit = "site-imex.service"\nhealth_timeout = 7\n')
      local p = default_with("function(ctx) return 'ok', ctx.settings.deadline .. ' ' .. ctx.settings.unit"
        .. " .. ' ' .. ctx.settings.health_timeout end")
      local r = run(dir, { "--config", site, "check", p })
      local _, lines = verdicts(r)
      assert.matches("%[ok %(30 nvidia%-imex%.service 7%)%]$", lines["healthy-job"])
    end)

    it("adds the files a policy lists in check_files to every scenario's world", function()
      local function site_policy(with_files)
        return policy("local D = require('policies.default')\nlocal P = {}\n"
          .. "for k, v in pairs(D) do P[k] = v end\n"
          .. "function P.prolog(ctx)\n"
          .. "  if not ctx.host.read('/etc/site/imex-enabled', 100) then\n"
          .. "    return 'bad-input', 'no site file'\n  end\n"
          .. "  return D.prolog(ctx)\nend\n"
          .. (with_files and "P.check_files = { ['/etc/site/imex-enabled'] = 'yes\\n' }\n" or "")
          .. "return P\n")
      end
      local r = check(site_policy(false))
      local v, lines = verdicts(r)
      assert.equal("FAIL", v["healthy-job"])
      assert.matches("ended in bad%-input %(no site file%), exit 2", lines["healthy-job"])
      r = check(site_policy(true))
      assert.equal(0, r.code, r.stdout)
    end)

    it("each scenario gets a fresh policy table (state in the policy does not leak)", function()
      local p = policy([[
local D = require("policies.default")
local runs = 0
local P = {}
for k, v in pairs(D) do P[k] = v end
function P.prolog(ctx)
  runs = runs + 1
  if runs > 1 then error("ran twice in one load") end
  return D.prolog(ctx)
end
return P
]])
      local r = check(p)
      local v = verdicts(r)
      -- systemd-unknown runs the prolog twice within one scenario: it alone fails
      assert.equal("PASS", v["healthy-job"])
      assert.equal("PASS", v["ctl-garbage"])
      assert.equal("FAIL", v["systemd-unknown"])
    end)
  end)

  describe("the worked example of docs/policy-api.md", function()
    it("its spec passes under busted with the kit, and `check` passes its policy", function()
      local doc = assert(H.read("docs/policy-api.md"), "run from the repository root")
      local ex = dir .. "/example"
      assert(os.execute("mkdir -m 0700 " .. H.q(ex)))
      local found = {}
      for name, code in doc:gmatch("<!%-%- file: ([%w_.]+) %-%->\n```lua\n(.-\n)```") do
        H.write(ex .. "/" .. name, code)
        found[#found + 1] = name
      end
      assert.same({ "site.lua", "site_spec.lua" }, found)
      local _, nl = H.read(ex .. "/site.lua"):gsub("\n", "")
      assert.is_true(nl <= 17, "the example policy stays short: " .. nl .. " lines")
      local p = assert(io.popen("busted --lua=lua5.4 --lpath='lua/?.lua' --lpath='lua/?/init.lua' "
        .. H.q(ex .. "/site_spec.lua") .. " 2>&1; echo rc=$?"))
      local out = p:read("a")
      p:close()
      assert.matches("3 successes / 0 failures / 0 errors / 0 pending", out, 1, true)
      assert.matches("rc=0\n$", out)
      local r = check(ex .. "/site.lua")
      assert.equal(0, r.code, r.stdout .. r.stderr)
      assert.matches("check: all 10 scenarios passed", r.stdout, 1, true)
    end)
  end)

  describe("the scenarios from busted (the kit, no binary)", function()
    local scenarios = require("imexguard.testing.check")

    it("run_all reports every scenario of a good policy as passed", function()
      local P = require("policies.default")
      local rep = scenarios.run_all(P)
      assert.is_true(rep.ok, rep.text)
      assert.same({}, rep.failed)
      assert.same(SCENARIOS, scenarios.names())
    end)

    it("run_all names the failing scenarios of an unsafe policy", function()
      local P = { epilog = function() return "ok" end,
        prolog = function(ctx) ctx.host.unit_job("nvidia-imex.service", "restart", 5) return "ok" end }
      local rep = scenarios.run_all(P)
      assert.is_false(rep.ok)
      assert.same({ "no-nodelist", "bad-hostlist", "systemd-unknown", "ctl-garbage", "write-fails",
        "config-fault" }, rep.failed)
      assert.matches("FAIL ctl%-garbage: .*: acted on the service: restart nvidia%-imex%.service", rep.text)
    end)
  end)
end)
