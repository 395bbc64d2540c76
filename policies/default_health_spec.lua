-- Specs of the default policy: health (docs/design.md, "Decision model of the default
-- policy"; Cnn: its "Field cases") against the fake host. A field case whose tests drive
-- several entry points has a describe of the same name in each policies/default_*_spec.lua;
-- what these files share is tests/default_policy_helper.lua.

local outcomes = require "imexguard.outcomes"
local testing = require "imexguard.testing"
local H = require "default_policy_helper"

local fixture, DEGRADED, run = H.fixture, H.DEGRADED, H.run
local assert_one_line, assert_untouched = H.assert_one_line, H.assert_untouched

describe("default policy: health (HealthCheckProgram, NHC)", function()
  it("healthy: ok, no report, nothing changed", function()
    local h = testing.host()
    local outcome, _, report = run(h, { command = "health", dry_run = true })
    assert.equal("ok", outcome)
    assert.is_nil(report)
    assert_untouched(h)
  end)

  it("this node not READY: domain-unhealthy with one line 'imexguard: OUTCOME: cause'", function()
    local h = testing.host{ ctl = { { domain = { nodes = { { host = "10.0.0.1", status = "UNAVAILABLE" },
      { host = "10.0.0.2" } } } } } }
    local outcome, message, report = run(h, { command = "health", dry_run = true })
    assert.equal("domain-unhealthy", outcome)
    assert.matches("^imexguard: domain%-unhealthy: .*\n$", report)
    assert.equal(1, select(2, report:gsub("\n", "")))
    assert_one_line(message)
    assert_untouched(h)
  end)

  it("never nudges (a dry run): this node's link to a restarted peer waits on its back-off", function()
    local h = testing.host{ ctl = testing.restarted_peer{ hosts = { "10.0.0.1", "10.0.0.2" } } }
    local outcome, message = run(h, { command = "health", dry_run = true })
    assert.equal("ok", outcome)
    assert.matches("this node healthy", message)
    assert.equal(0, h.count("unit_kill"))
    assert.same({}, h.kills)
    assert_untouched(h)
  end)

  it("only a peer unhealthy: ok for this node (a peer drains itself)", function()
    local h = testing.host{ ctl = { DEGRADED } }
    local outcome, message = run(h, { command = "health", dry_run = true })
    assert.equal("ok", outcome)
    assert.matches("this node healthy", message)
  end)

  it("unit missing: skipped (not applicable), exit 0", function()
    local h = testing.host{ unit = false }
    local outcome, message, report = run(h, { command = "health", dry_run = true })
    assert.equal("skipped", outcome)
    assert.equal(0, outcomes.exit_code(outcome))
    assert.matches("^not applicable", message)
    assert.is_nil(report)
  end)

  it("channel0 configured but the channel is missing: channel-failed", function()
    local h = testing.host{ files = { ["/proc/devices"] = fixture("proc/devices-gb200.txt") } }
    local outcome, _, report = run(h, { command = "health", dry_run = true,
      settings = { imex_channels = "channel0" } })
    assert.equal("channel-failed", outcome)
    assert.matches("^imexguard: channel%-failed: IMEX channel: .*channel0 missing", report)
  end)

  it("C38: channel0 and an Include of slurm.conf that cannot be read: slurm-conf-unreadable", function()
    local h = testing.host{ files = { ["/proc/devices"] = fixture("proc/devices-gb200.txt"),
      ["/etc/slurm/slurm.conf"] = "Include /etc/slurm/switch.conf\n" } }
    local outcome, _, report = run(h, { command = "health", dry_run = true,
      settings = { imex_channels = "channel0" } })
    assert.equal("slurm-conf-unreadable", outcome)
    assert.equal(20, outcomes.exit_code(outcome))
    assert.matches("^imexguard: slurm%-conf%-unreadable: IMEX channel: .*/etc/slurm/switch.conf unreadable",
      report)
    assert_untouched(h)
  end)
end)
