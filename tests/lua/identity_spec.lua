-- SPDX-License-Identifier: Apache-2.0
-- Field cases C21, C22 and C28 of docs/design.md below the policy: the daemon's config from the
-- unit (steps.daemon_config, C28), the ordered node map in staleness (steps.assess_daemon, C21),
-- config-fault's exit code and setting (C22), config.cfg findings for plan/status
-- (report.config_findings) and check's "config-fault" scenario.
local testing = require("imexguard.testing")
local steps = require("imexguard.steps")
local outcomes = require("imexguard.outcomes")
local report = require("imexguard.report")
local scenarios = require("imexguard.testing.check")
local S = require("imexguard.settings")
local imexcfg = require("imexguard.imexcfg")

local function ctx_with(unit, settings)
  local h = testing.host{ unit = unit }
  return testing.ctx{ host = h, settings = settings }, h
end

local function exec(argv) return { exec_start = { { path = argv[1], argv = argv } } } end

describe("steps.daemon_config (C28)", function()
  it("takes -c PATH from the unit's ExecStart", function()
    local ctx = ctx_with()
    local p, src = steps.daemon_config(ctx, { exec_start = { { path = "/usr/bin/nvidia-imex",
      argv = { "/usr/bin/nvidia-imex", "-c", "/opt/x.cfg" } } } })
    assert.equal("/opt/x.cfg", p)
    assert.equal("unit ExecStart", src)
  end)

  it("no -c: NVIDIA's default path; no ExecStart from the host: the setting", function()
    local ctx = ctx_with()
    assert.equal(imexcfg.DEFAULT_PATH, (steps.daemon_config(ctx, exec({ "/usr/bin/nvidia-imex" }))))
    local c2 = ctx_with(nil, { imex_config = "/srv/imex.cfg" })
    local p, src = steps.daemon_config(c2, {})
    assert.equal("/srv/imex.cfg", p)
    assert.equal("setting imex_config", src)
    assert.equal("/srv/imex.cfg", (steps.daemon_config(c2, { exec_start = {} })))
  end)

  it("an ExecStart with only a path (no argv) is the program without -c", function()
    local ctx = ctx_with()
    local props = { exec_start = { { path = "/usr/bin/nvidia-imex" } } }
    assert.equal(imexcfg.DEFAULT_PATH, (steps.daemon_config(ctx, props)))
  end)

  it("another program without -c (a wrapper) is not known to read the default: the setting stands", function()
    local ctx = ctx_with(nil, { imex_config = "/srv/imex.cfg" })
    local p, src = steps.daemon_config(ctx, exec({ "/usr/local/sbin/start-imex" }))
    assert.equal("/srv/imex.cfg", p)
    assert.truthy(src:find("start-imex in ExecStart has no -c", 1, true), src)
    -- nvidia-imex itself without -c reads the default: the setting disagrees
    local q, o = steps.daemon_config(ctx, exec({ "/opt/nvidia/bin/nvidia-imex" }))
    assert.is_nil(q)
    assert.equal("config-mismatch", o)
  end)

  it("imex_config set to another path than the unit's: config-mismatch naming both", function()
    local ctx = ctx_with(nil, { imex_config = "/srv/imex.cfg" })
    local p, o, m = steps.daemon_config(ctx, exec({ "/usr/bin/nvidia-imex", "-c", "/opt/x.cfg" }))
    assert.is_nil(p)
    assert.equal("config-mismatch", o)
    assert.truthy(m:find("imex_config=/srv/imex.cfg", 1, true) and m:find("/opt/x.cfg", 1, true), m)
    -- the same path is agreement
    assert.equal("/srv/imex.cfg", (steps.daemon_config(ctx, exec({ "/usr/bin/nvidia-imex", "-c",
      "/srv/imex.cfg" }))))
  end)

  it("the setting at its default follows the unit", function()
    local ctx = ctx_with()
    local argv = { "/usr/bin/nvidia-imex", "-c", "/opt/x.cfg" }
    assert.equal("/opt/x.cfg", (steps.daemon_config(ctx, exec(argv))))
  end)

  it("-c twice: bad-input naming the ExecStart", function()
    local ctx = ctx_with()
    local p, o, m = steps.daemon_config(ctx, exec({ "/usr/bin/nvidia-imex", "-c", "/a", "-c", "/b" }))
    assert.is_nil(p)
    assert.equal("bad-input", o)
    assert.truthy(m:find("ExecStart: -c given twice", 1, true), m)
  end)
end)

describe("steps.assess_daemon compares ordered node maps (C21)", function()
  local function assess(order, file)
    local nodes = {}
    for i, hst in ipairs(order) do nodes[i] = { host = hst } end
    local h = testing.host{ files = { [testing.NODES] = file }, ctl = { { mesh = { nodes = nodes } } } }
    local ctx = testing.ctx{ host = h, env = { SLURM_JOB_ID = "7", SLURM_JOB_NODELIST = "n[1-3]",
      SLURMD_NODENAME = "n1" } }
    local info = assert(steps.applies(ctx))
    local want = assert(steps.desired(ctx, info))
    return assert(steps.assess_daemon(ctx, info, want, {}, { changed = false, wait = true }))
  end
  local F = "10.0.0.1\n10.0.0.2\n10.0.0.3\n"

  it("same order: current", function()
    local v = assess({ "10.0.0.1", "10.0.0.2", "10.0.0.3" }, F)
    assert.equal("none", v.action)
    assert.equal("same", v.order)
  end)

  it("same hosts, another order: restart, reason names it", function()
    local v = assess({ "10.0.0.3", "10.0.0.1", "10.0.0.2" }, F)
    assert.equal("restart", v.action)
    assert.equal("reordered", v.order)
    assert.truthy(v.reason:find("same nodes, another order", 1, true), v.reason)
    assert.is_nil(v.answer)
  end)

  it("other hosts: restart", function()
    local v = assess({ "10.0.0.1", "10.0.0.2", "10.0.0.4" }, F)
    assert.equal("restart", v.action)
    assert.equal("different", v.order)
  end)
end)

describe("config-fault outcome and setting (C22)", function()
  it("exits 14 by default, 0 with on_config_fault = \"warn\"; config-mismatch exits 15", function()
    assert.equal(14, outcomes.exit_code("config-fault", assert(S.validate({}))))
    assert.equal(0, outcomes.exit_code("config-fault", assert(S.validate({ on_config_fault = "warn" }))))
    assert.equal(14, outcomes.exit_code("config-fault"))
    assert.equal(15, outcomes.exit_code("config-mismatch", assert(S.validate({ on_config_fault = "warn" }))))
    assert.truthy(outcomes.usage("", 200):find('config-fault 14 (0 with on_config_fault = "warn")', 1, true))
  end)

  it("on_config_fault accepts fail and warn only", function()
    assert.equal("fail", assert(S.validate({})).on_config_fault)
    local t, err = S.validate({ on_config_fault = "ignore" })
    assert.is_nil(t)
    assert.truthy(err:find("on_config_fault", 1, true), err)
  end)
end)

describe("report.config_findings", function()
  it("lists config.cfg's errors with the daemon's config path; nothing for a clean or unknown config",
    function()
    local cfg = assert(imexcfg.parse("IMEX_CMD_ENABLED=0\nSERVER_PORT=1\nIMEX_CMD_PORT=2\n"))
    local f = report.config_findings({ cfg = cfg, config = "/opt/x.cfg" })
    assert.equal(1, #f)
    assert.truthy(f[1]:find("^/opt/x.cfg: IMEX_CMD_ENABLED=0"), f[1])
    assert.is_true(report.config_fault_found({ cfg = cfg, config = "/opt/x.cfg" }))
    assert.same({}, report.config_findings(nil))
    local clean = assert(imexcfg.parse(testing.CONFIG_TEXT))
    assert.same({}, report.config_findings({ cfg = clean }))
    assert.is_false(report.config_fault_found({ cfg = clean }))
  end)
end)

describe("health.config_lint", function()
  it("a loopback bind to one of the domain's own addresses (the simulator) is not a finding", function()
    local cfg = assert(imexcfg.parse("IMEX_CMD_BIND_INTERFACE_IP=127.0.9.1\nSERVER_PORT=1\n"
      .. "IMEX_CMD_PORT=2\n"))
    assert.equal(1, #report.config_findings({ cfg = cfg }))
    assert.equal(1, #report.config_findings({ cfg = cfg }, { "127.0.9.2", "127.0.9.3" }))
    assert.same({}, report.config_findings({ cfg = cfg }, { "127.0.9.1", "127.0.9.2" }))
  end)
end)

describe("check's config-fault scenario", function()
  local function policy(outcome)
    return { prolog = function() return outcome, "m" end, epilog = function() return "ok", "m" end }
  end

  it("fails a policy that says ok or blames the peer, passes one that names the fault", function()
    assert.is_false(scenarios.run_one(policy("ok"), "config-fault").ok)
    local r = scenarios.run_one(policy("peers-unhealthy"), "config-fault")
    assert.is_false(r.ok)
    assert.truthy(r.why:find("blamed the peer", 1, true), r.why)
    assert.is_true(scenarios.run_one(policy("config-fault"), "config-fault").ok)
  end)

  it("the default policy passes it, ending config-fault", function()
    local r = scenarios.run_one(require("policies.default"), "config-fault")
    assert.is_true(r.ok, r.why)
    assert.truthy(r.detail:find("^config%-fault"), r.detail)
  end)
end)
