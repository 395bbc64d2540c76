-- SPDX-License-Identifier: Apache-2.0
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
    local h = testing.host{ ctl = { { mesh = { nodes = { { host = "10.0.0.1", status = "UNAVAILABLE" },
      { host = "10.0.0.2" } } } } } }
    local outcome, message, report = run(h, { command = "health", dry_run = true })
    assert.equal("domain-unhealthy", outcome)
    assert.matches("^imexguard: domain%-unhealthy: .*\n$", report)
    assert.equal(1, select(2, report:gsub("\n", "")))
    assert_one_line(message)
    assert_untouched(h)
  end)

  it("never nudges (a dry run): this node's link to a restarted peer waits on its back-off", function()
    local h = testing.host{ ctl = testing.restarted_peer{ hosts = { "10.0.0.1", "10.0.0.2" } },
      files = H.registered() }
    local outcome, message = run(h, { command = "health", dry_run = true })
    assert.equal("ok", outcome)
    assert.matches("this node healthy", message)
    assert.equal(0, h.count("unit_kill"))
    assert.same({}, h.kills)
    assert_untouched(h)
  end)

  it("only a peer unhealthy: ok for this node (a peer drains itself)", function()
    local h = testing.host{ ctl = { DEGRADED }, files = H.registered() }
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

describe("C33: an idle node's health", function()
  -- An 18-node rack (10.0.0.1 .. 10.0.0.18) after a job on nodes 1-16: their daemons now run the
  -- 16-node list, so from node 17 (whose daemon still runs all 18, no job registered) its links to
  -- them show NODE_MAP_MISMATCH, and their rows show 17 and 18 INVALID (hosts their lists lack: the
  -- simulator's ctl, IMEXSIM_CTL_CONNECTIONS=local); nodes 17 and 18 are connected to each other.
  local RACK = {}
  for i = 1, 18 do RACK[i] = "10.0.0." .. i end
  local function rack(self_status)
    local nodes = {}
    for i, a in ipairs(RACK) do
      local c = {}
      for j, b in ipairs(RACK) do
        if (i <= 16) ~= (j <= 16) then c[b] = i <= 16 and "INVALID" or "NODE_MAP_MISMATCH" end
      end
      nodes[i] = { host = a, connections = c, status = i == 17 and self_status or nil }
    end
    return { mesh = { nodes = nodes } }
  end
  local function host(o)
    local files = { [testing.NODES] = table.concat(RACK, "\n") .. "\n" }
    for k, v in pairs(o.files or {}) do files[k] = v end
    return testing.host{ ctl = { rack(o.self_status) }, files = files, local_addresses = { "10.0.0.17" } }
  end

  it("after a sub-rack job, an idle node's health is ok (exit 0) and says why; status too", function()
    local outcome, message, report = run(host{}, { command = "health", dry_run = true })
    assert.equal("ok", outcome, message)
    assert.equal(0, outcomes.exit_code(outcome))
    assert.is_nil(report) -- nothing for NHC to drain on
    assert.matches("no job registered, judged on what it owns", message)
    assert.matches("links to peers not judged %(1 of 17 connected%)", message)
    local so, sm = run(host{}, { command = "status" })
    assert.equal("ok", so, sm)
    assert.matches("no job registered", sm)
  end)

  it("an idle node whose daemon is not READY still fails", function()
    local outcome, message, report = run(host{ self_status = "WAITING_FOR_PEERS" },
      { command = "health", dry_run = true })
    assert.equal("domain-unhealthy", outcome, message)
    assert.matches("not READY", message)
    assert.matches("^imexguard: domain%-unhealthy: ", report)
  end)

  it("an idle node whose unit is not active still fails (the answer is not the unit's)", function()
    local h = host{}
    h.unit_props.active_state, h.unit_props.sub_state = "failed", "failed"
    local outcome, message = run(h, { command = "health", dry_run = true })
    assert.equal("service-failed", outcome, message)
  end)

  it("an idle node whose unit was stopped (stop_on_last_epilog, a per-job unit) and nothing answers: ok; "
    .. "with a job registered it fails", function()
    local function stopped(files)
      local h = testing.host{ ctl = { { stdout = "", status = 1, stderr = "connection refused" } },
        files = files }
      h.unit_props.active_state, h.unit_props.sub_state = "inactive", "dead"
      return h
    end
    local outcome, message = run(stopped(), { command = "health", dry_run = true })
    assert.equal("ok", outcome, message)
    assert.matches("inactive and no job is registered here", message, 1, true)
    outcome = run(stopped(H.registered(RACK)), { command = "health", dry_run = true })
    assert.is_true(outcomes.exit_code(outcome) ~= 0, outcome)
  end)

  it("the same when the ctl prints its placeholder for a daemon it cannot reach (0.0.0.0 DOWN, exit 0: "
    .. "tests/fixtures/ctl/down-unconfigured.json): ok, not service-failed", function()
    local placeholder = { stdout = H.fixture("ctl/down-unconfigured.json"), status = 0 }
    local function stopped(files)
      local h = testing.host{ ctl = { placeholder }, files = files }
      h.unit_props.active_state, h.unit_props.sub_state = "inactive", "dead"
      return h
    end
    local outcome, message = run(stopped(), { command = "health", dry_run = true })
    assert.equal("ok", outcome, message)
    assert.matches("inactive and no job is registered here", message, 1, true)
    outcome = run(stopped(H.registered(RACK)), { command = "health", dry_run = true })
    assert.equal("service-failed", outcome)
    -- a policy whose daemon runs at all times (static_domain: imex_always_expected): a stopped one fails
    outcome = run(stopped(), { command = "health", dry_run = true, imex_always_expected = true })
    assert.equal("service-failed", outcome)
  end)

  it("a node with a registered job is judged on that job's nodes: cut off from them, it fails", function()
    local outcome, message = run(host{ files = H.registered(RACK) }, { command = "health", dry_run = true })
    assert.equal("domain-unhealthy", outcome, message)
    assert.matches("cut off", message)
  end)
end)
