-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy: plan (docs/design.md, "Decision model of the default
-- policy"; Cnn: its "Field cases") against the fake host. A field case whose tests drive
-- several entry points has a describe of the same name in each policies/default_*_spec.lua;
-- what these files share is tests/default_policy_helper.lua.

local testing = require("imexguard.testing")
local cjson = require("cjson")
local P = require("default")
local H = require("default_policy_helper")

local NODES, CONFIG = testing.NODES, testing.CONFIG
local env, run, assert_one_line, assert_untouched = H.env, H.run, H.assert_one_line, H.assert_untouched

describe("default policy plan", function()
  it("reports the diff and the restart, with no side effect at all", function()
    local h = testing.host()
    local outcome, message, report = run(h, { command = "plan", dry_run = true, env = env("n[1,3]") })
    assert.equal("ok", outcome)
    assert_one_line(message)
    assert.matches("would rewrite", message)
    assert.matches("restart", message)
    assert.matches("%- 10.0.0.2", report)
    assert.matches("%+ 10.0.0.3", report)
    assert.matches("restart: yes", report)
    assert.same({}, h.writes)
    assert.same({}, h.jobs)
    assert.equal(0, h.count("lock"))
    assert.equal(0, h.count("sleep"))
    assert.equal(0, h.count("unit_reset_failed"))
  end)

  it("never nudges (a dry run): a peer restarted and this node's link to it waits on its back-off", function()
    local h = testing.host{ ctl = testing.restarted_peer{ hosts = { "10.0.0.1", "10.0.0.2" } } }
    local outcome = run(h, { command = "plan", dry_run = true })
    assert.equal("ok", outcome)
    assert.equal(0, h.count("unit_kill"))
    assert.same({}, h.kills)
    assert.same({}, h.jobs)
  end)

  it("nothing to do when the daemon is current", function()
    local h = testing.host()
    local outcome, message, report = run(h, { command = "plan", dry_run = true })
    assert.equal("ok", outcome)
    assert.matches("nothing to do", message)
    assert.matches("restart: no", report)
    assert.matches("domain now: UP", report)
    assert.same({}, h.writes)
  end)

  it("inactive unit: would start; activating: would wait, without waiting", function()
    local h = testing.host{ unit = { active_state = "inactive" } }
    local _, message = run(h, { command = "plan", dry_run = true })
    assert.matches("would start", message)
    h = testing.host{ unit = { active_state = "activating" } }
    local _, _, report = run(h, { command = "plan", dry_run = true })
    assert.matches("would wait", report)
    assert.equal(0, h.count("sleep"))
  end)

  it("JSON report", function()
    local h = testing.host()
    local _, _, report = run(h, { command = "plan", dry_run = true, json = true, env = env("n[1,3]") })
    local j = cjson.decode(report)
    assert.is_true(j.changed)
    assert.equal("restart", j.action)
    assert.same({ "10.0.0.2" }, j.removed)
    assert.same({ "10.0.0.3" }, j.added)
    assert.equal("n3", j.nodes[2].name)
  end)

  it("bad input is reported as in prolog", function()
    local h = testing.host()
    local outcome = run(h, { command = "plan", env = env("n[") })
    assert.equal("bad-input", outcome)
    assert_untouched(h)
  end)
end)

describe("default policy job registry (C08, scenario style)", function()
  local given = H.registry.given

  it("plan reports the conflict without any side effect", function()
    local s = given()
    local outcome, message, report = s:plan{ job = 101, nodelist = "n[1-2]" }
    assert.equal("conflict", outcome)
    assert.matches("job 100", message)
    assert.matches("registered jobs: 100", report)
    assert.same({}, s.host.writes)
    assert.equal(0, s.host.count("lock"))
  end)
end)

-- Unit lifecycle faults are named when they happen (C26 start limit, C27 a stray
-- daemon on the command port).
describe("default policy: unit lifecycle faults (C26, C27)", function()
  local given, STRAY = H.lifecycle.given, H.lifecycle.STRAY

  it("plan names the stray process as the prolog would, and changes nothing", function()
    local s = given{ unit = "inactive", host = { port_owner = STRAY } }
    local outcome, message = s:plan{ job = 107, nodelist = "n[1-2]" }
    assert.equal("service-failed", outcome)
    assert.matches("pid 31337", message)
    assert.same({}, s:unit_jobs())
    assert.same({}, s:writes())
  end)
end)

describe("default policy: the IMEX channel step (after applies?, before the node list)", function()
  local c = H.channel
  local CONF, CH, PD, chost = c.CONF, c.CH, c.PD, c.chost

  it("plan through the driver's recorders: 'would create ... c 238 0', mkdir, mknod_char recorded", function()
    local D = require("imexguard.driver")
    local h = chost()
    local host, planned = D.host(h, true)
    local outcome, message, report = P.plan(testing.ctx{ host = host, settings = CH, command = "plan",
      dry_run = true })
    assert.equal("ok", outcome)
    assert.matches("IMEX channel: would create " .. PD .. "/channel0 c 238 0 %(mode 0666%)", message)
    assert.matches("IMEX channel: would create", report)
    assert.equal(0, h.count("mknod_char"))
    assert.equal(0, h.count("mkdir"))
    local all = table.concat(planned, "\n")
    assert.matches('mkdir%("' .. PD .. '", 493%)', all)
    assert.matches('mknod_char%("' .. PD .. '/channel0", 238, 0, 438%)', all)
  end)

  it("plan with SwitchType=switch/nvidia_imex: off, and says so", function()
    local h = chost({ [CONF] = "SwitchType=switch/nvidia_imex\n" })
    local _, _, report = run(h, { command = "plan", dry_run = true, settings = CH })
    assert.matches("IMEX channel: off: SwitchType=switch/nvidia_imex in /etc/slurm/slurm.conf", report)
    assert.equal(0, h.count("mknod_char"))
  end)

  it("plan --json carries the channel line", function()
    local h = chost()
    local _, _, report = run(h, { command = "plan", dry_run = true, json = true, settings = CH })
    assert.matches("would create", cjson.decode(report).channel)
  end)
end)

-- C21, C22, C28: ordered identity, the unit's own config, configuration faults.
describe("default policy: ordered identity, the unit's config, configuration faults", function()
  local A, B, C, host3 = H.identity.A, H.identity.B, H.identity.C, H.identity.host3

  describe("C21: same nodes, another order", function()
    it("plan names it", function()
      local h = host3({ A, C, B })
      local o, m, rep = run(h, { command = "plan", env = env("n[1-3]"), dry_run = true })
      assert.equal("ok", o, m)
      assert.truthy(m:find("would restart", 1, true) and m:find("same nodes, another order", 1, true), m)
      assert.truthy(rep:find("restart: yes", 1, true), rep)
    end)
  end)

  describe("C28: the daemon's config comes from the unit's ExecStart", function()
    local SITE, site_cfg, IMEX = H.identity.SITE, H.identity.site_cfg, H.identity.IMEX
    local unit_with = H.identity.unit_with

    it("plan shows where the config path came from", function()
      local h = testing.host{ unit = unit_with({ IMEX, "-c", SITE }),
        files = { [SITE] = site_cfg } }
      local _, _, rep = run(h, { command = "plan", dry_run = true })
      assert.truthy(rep:find("config: " .. SITE .. " (from the unit ExecStart)", 1, true), rep)
    end)
  end)

  describe("C22: a configuration fault is not a peer fault", function()
    local loop_cfg = H.identity.loop_cfg

    it("plan and status flag a loopback command bind, or IMEX_CMD_ENABLED=0, before any job runs", function()
      local off_cfg = testing.CONFIG_TEXT:gsub("IMEX_CMD_ENABLED=1", "IMEX_CMD_ENABLED=0")
      for _, cfg in ipairs({ loop_cfg, off_cfg }) do
        local key = cfg == loop_cfg and "IMEX_CMD_BIND_INTERFACE_IP" or "IMEX_CMD_ENABLED=0"
        local h = testing.host{ files = { [CONFIG] = cfg } }
        local o, m, rep = run(h, { command = "plan", dry_run = true })
        assert.equal("config-fault", o, m)
        assert.truthy(m:find(key, 1, true), m)
        assert.truthy(rep:find("config fault: " .. CONFIG .. ": " .. key, 1, true), rep)
        local so, sm, srep = run(testing.host{ files = { [CONFIG] = cfg } }, { command = "status" })
        assert.equal("ok", so) -- the kit's ctl answers UP; the finding is flagged all the same
        assert.truthy(sm:find(key, 1, true), sm)
        assert.truthy(srep:find("config fault: " .. CONFIG, 1, true), srep)
      end
    end)

    it("a one-node job with a loopback command bind has no peer to miss: plan is ok", function()
      local h = testing.host{ files = { [CONFIG] = loop_cfg, [NODES] = "10.0.0.1\n" } }
      local o, m = run(h, { command = "plan", dry_run = true, env = env("n1") })
      assert.equal("ok", o, m)
    end)
  end)
end)
