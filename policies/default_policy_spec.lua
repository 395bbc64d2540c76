-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy as a whole: its methods, extend and hooks, and what every entry
-- point checks alike (docs/design.md, "Decision model of the default policy"; Cnn: its "Field
-- cases") against the fake host. A field case whose tests drive several entry points has a
-- describe of the same name in each policies/default_*_spec.lua; what these files share is
-- tests/default_policy_helper.lua.

local testing = require("imexguard.testing")
local P = require("default")
local H = require("default_policy_helper")

local run, assert_one_line, assert_untouched = H.run, H.assert_one_line, H.assert_untouched

describe("default policy: a table of methods in the order of its decision model", function()
  it("has every step as a method and plain entry points", function()
    for _, step in ipairs({ "applies", "desired", "lock", "write", "stale", "may_restart", "restart",
      "wait_healthy", "wait_converged", "register", "lookup", "admit", "register_extra",
      "after_unregister" }) do
      assert.is_function(P[step], step)
    end
    for _, e in ipairs({ "prolog", "epilog", "plan", "status", "extend" }) do assert.is_function(P[e], e) end
  end)

  it("has an entry point for every command with one (imexguard.commands), each running the policy's own "
    .. "method; the inspection commands' methods are imexguard.inspect's", function()
    local commands = require("imexguard.commands")
    local inspect = require("imexguard.inspect")
    local site = P.extend()
    for _, name in ipairs(commands.names("entry")) do
      assert.is_function(P[name], name)
      assert.is_function(site[name], name)
    end
    function site.run_status() return "ok", "the site's status" end
    assert.equal("the site's status", select(2, site.status(testing.ctx{ command = "status" })))
    assert.not_equal("the site's status", select(2, P.status(testing.ctx{ command = "status" })))
    local Policy = getmetatable(P).parent
    for name, f in pairs(inspect) do
      assert.equal(f, P[name], name)
      assert.is_nil(rawget(Policy, name), name .. ": a method of both default.lua and imexguard.inspect")
    end
    for _, m in ipairs({ "run_prolog", "run_epilog", "run_status", "run_plan", "run_health",
      "run_registrations", "run_forget" }) do
      assert.is_function(P[m], m)
    end
  end)

  it("will not load when its entry points and imexguard.commands disagree", function()
    local commands = require("imexguard.commands")
    local function load_with(list)
      local fake = { list = list, by_name = {} }
      for _, c in ipairs(list) do fake.by_name[c.name] = c end
      function fake.names(field)
        local t = {}
        for _, c in ipairs(list) do if c[field] then t[#t + 1] = c.name end end
        return t
      end
      package.loaded["imexguard.commands"] = fake
      local ok, err = pcall(assert(loadfile("policies/default.lua")))
      package.loaded["imexguard.commands"] = commands
      return ok, err
    end
    local more = { { name = "frobnicate", entry = "optional" } }
    for i, c in ipairs(commands.list) do more[i + 1] = c end
    local ok, err = load_with(more)
    assert.is_false(ok)
    assert.matches("ENTRY_POINTS has no method for the command 'frobnicate'", err, 1, true)
    local fewer = {}
    for _, c in ipairs(commands.list) do
      if c.name ~= "forget" then fewer[#fewer + 1] = c end
    end
    ok, err = load_with(fewer)
    assert.is_false(ok)
    assert.matches("ENTRY_POINTS names 'forget', no command with an entry point", err, 1, true)
    assert.is_true((load_with(commands.list)))
  end)

  it("an overridden step is used by the entry points; the default step is reachable as P.step(self, ...)",
    function()
      local site = P.extend()
      local asked = 0
      -- a site rule: a daemon the default finds current is restarted all the same
      function site:assess_daemon(ctx, info, want, st, opts)
        asked = asked + 1
        local v, o, m = P.assess_daemon(self, ctx, info, want, st, opts)
        if v and v.action == "none" then v.action, v.reason = "restart", "site rule: always restart" end
        return v, o, m
      end
      local s = testing.scenario{ policy = site }
      local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
      assert.equal("ok", outcome)
      assert.equal(1, asked)
      assert.equal(1, s:restarts())
      assert.matches("site rule: always restart", message, 1, true)
      -- the default itself is unchanged: nothing to do
      local d = testing.scenario{}
      assert.equal("ok", (d:prolog{ job = 101, nodelist = "n[1-2]" }))
      assert.equal(0, d:restarts())
    end)

  it("hooks given to extend are kept by a further extend, and unknown hooks raise", function()
    local a = P.extend{ register_extra = function() return { site = "a" } end }
    local b = a.extend{ admit = function() return true end }
    assert.is_function(b.hooks.register_extra)
    assert.is_function(b.hooks.admit)
    local s = testing.scenario{ policy = b }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.equal("a", s:registrations()[1].site)
    assert.has_error(function() P.extend{ may_restrat = function() end } end,
      "policy extend: unknown hook 'may_restrat'")
  end)

  describe("the old method names (P.RENAMED)", function()
    local OLD = { stale = "assess_daemon", write = "write_node_list", port_is_units = "check_port_owner",
      fabric = "check_fabric", channel = "ensure_channel" }

    it("are exactly these, and each reads as the method of its new name", function()
      assert.same(OLD, P.RENAMED)
      local site = P.extend()
      for old, new in pairs(OLD) do
        assert.is_function(P[new], new)
        assert.equal(P[new], P[old], old)
        assert.equal(P[new], site[old], old)
      end
    end)

    it("an override assigned under an old name is the step the entry points run", function()
      local site = P.extend()
      local asked = 0
      function site:stale(ctx, info, want, st, opts)
        asked = asked + 1
        local v, o, m = P.stale(self, ctx, info, want, st, opts)
        if v and v.action == "none" then v.action, v.reason = "restart", "site rule: always restart" end
        return v, o, m
      end
      assert.equal(site.stale, site.assess_daemon)
      local s = testing.scenario{ policy = site }
      local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
      assert.equal("ok", outcome)
      assert.equal(1, asked)
      assert.equal(1, s:restarts())
      assert.matches("site rule: always restart", message, 1, true)
    end)
  end)
end)

-- Defects of the policy layer found by adversarial testing (/tmp/breaker-repro); each spec failed
-- before its fix.
describe("default policy: hardening", function()
  describe("the job id", function()
    local bad = { { "a newline", "10\nimexguard: notice: prolog job=10 outcome=ok: forged" },
      { "letters", "12a" }, { "spaces", "1 2" }, { "a leading space", " 12" }, { "a negative number", "-3" } }
    for _, c in ipairs(bad) do
      for _, command in ipairs({ "prolog", "epilog", "plan" }) do
        it(command .. ": a job id with " .. c[1] .. " is bad-input naming SLURM_JOB_ID", function()
          local h = testing.host()
          local outcome, message = run(h, { command = command, dry_run = command == "plan",
            env = { SLURM_JOB_ID = c[2], SLURM_JOB_NODELIST = "n[1,3]", SLURMD_NODENAME = "n1" } })
          assert.equal("bad-input", outcome)
          assert_one_line(message)
          assert.matches("SLURM_JOB_ID", message)
          assert_untouched(h)
        end)
      end
    end
  end)
end)

-- Sites that ship the unit disabled (C23).
describe("default policy: a disabled unit (C23)", function()
  it("the applies hook replaces the step: a site policy decides by its own rule", function()
    local site = P.extend{ applies = function(ctx)
      if ctx.env.SLURM_JOB_PARTITION ~= "nvl72" then return nil, "skipped", "not an NVL72 partition" end
      local steps = require("imexguard.steps")
      return steps.applies(ctx)
    end }
    local s = testing.scenario{ policy = site, file = { "n1", "n3" } }
    local outcome, message = s:prolog{ job = 205, nodelist = "n[1-2]", env = { SLURM_JOB_PARTITION = "cpu" } }
    assert.equal("skipped", outcome)
    assert.equal("not an NVL72 partition", message)
    assert.same({}, s:unit_jobs())
    assert.equal("ok", (s:prolog{ job = 206, nodelist = "n[1-2]", env = { SLURM_JOB_PARTITION = "nvl72" } }))
    assert.equal(1, #s:unit_jobs())
  end)
end)
