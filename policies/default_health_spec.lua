-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy: health (docs/design.md, "Decision model of the default
-- policy"; Cnn: its "Field cases") against the fake host. A field case whose tests drive
-- several entry points has a describe of the same name in each policies/default_*_spec.lua;
-- what these files share is tests/default_policy_helper.lua.

local outcomes = require("imexguard.outcomes")
local testing = require("imexguard.testing")
local H = require("default_policy_helper")

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
    return testing.host{ ctl = { rack(o.self_status) }, files = files, local_addresses = { "10.0.0.17" },
      scontrol = o.scontrol }
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

  -- issue 32 item 4: job 100's epilog never ran on node 17; nodes 1-16 moved on with their own list
  describe("a lost epilog (issue 32 item 4): Slurm is asked once whether the registered job exists",
    function()
    local function health_with(scontrol)
      local h = host{ files = H.registered(RACK), scontrol = scontrol }
      local outcome, message, report = run(h, { command = "health", dry_run = true })
      return outcome, message, report, h
    end

    it("Slurm no longer knows the job: dropped from the judgement with a log line; healthy, exit 0",
      function()
      local outcome, message, report, h = health_with{ status = 1,
        stderr = "slurm_load_jobs error: Invalid job id specified\n" }
      assert.equal("ok", outcome, message)
      assert.is_nil(report)
      assert.matches("job 100 (Slurm no longer knows it (Invalid job id)) ended, its epilog never ran here; "
        .. "10.0.0.[1-16] moved on to another node list (READY, connected to each other)", message, 1, true)
      assert.matches("imexguard forget 100", message, 1, true)
      assert.matches("judged on what it owns", message, 1, true)
      assert.same({ { "/usr/bin/scontrol", "-o", "show", "job", "100" } }, h.runs_of("scontrol"))
      local logged = false
      for _, l in ipairs(h.logs) do
        logged = logged or (l[1] == "warning" and l[2]:find("job 100", 1, true))
      end
      assert.truthy(logged)
      assert.same({}, h.writes) -- nothing written: the registration stays for forget or the next epilog
    end)

    it("the job has ended but Slurm still shows it (JobState=COMPLETED): dropped too", function()
      local outcome, message = health_with{ status = 0, stdout = "JobId=100 JobName=x JobState=COMPLETED "
        .. "Reason=None\n" }
      assert.equal("ok", outcome, message)
      assert.matches("job 100 (JobState=COMPLETED) ended", message, 1, true)
    end)

    it("Slurm still runs it: the verdict stands (cut off)", function()
      local outcome, message = health_with{ status = 0, stdout = "JobId=100 JobState=RUNNING\n" }
      assert.equal("domain-unhealthy", outcome, message)
      assert.not_matches("forget", message, 1, true)
    end)

    it("Slurm cannot say: the verdict stands, and the message says so with the forget hint", function()
      local outcome, message, report = health_with{ status = 1, stderr = "slurm_load_jobs error: Unable to "
        .. "contact slurm controller (connect failure)\n" }
      assert.equal("domain-unhealthy", outcome, message)
      assert.matches("if the registered job no longer runs here: imexguard forget 100 (Slurm could not say "
        .. "whether job 100 (", message, 1, true)
      assert.matches("imexguard forget 100", report, 1, true)
      assert.matches("cut off", message, 1, true)
    end)

    it("an unhealthy verdict of another kind asks Slurm nothing", function()
      local _, _, _, h = health_with(nil)
      assert.equal(1, #h.runs_of("scontrol")) -- the pattern: one call
      local idle = host{ self_status = "WAITING_FOR_PEERS", files = H.registered(RACK) }
      run(idle, { command = "health", dry_run = true })
      assert.same({}, idle.runs_of("scontrol"))
    end)
  end)
end)

-- issue 32 item 5: right after this node's daemon (re)started, its peers reconnect on their own
-- back-off: the domain is DEGRADED and this node looks cut off, with no faulty node to name.
describe("a daemon started seconds ago (issue 32 item 5): starting, not faulty", function()
  local A, B, C = "10.0.0.1", "10.0.0.2", "10.0.0.3"
  local NODES = table.concat({ A, B, C }, "\n") .. "\n"
  -- this node READY, its links to both peers RECOVERING; the peers connected to each other
  local RECONNECTING = { mesh = { nodes = {
    { host = A, connections = { [B] = "RECOVERING", [C] = "RECOVERING" } },
    { host = B, connections = { [A] = "RECOVERING" } },
    { host = C, connections = { [A] = "RECOVERING" } } } } }
  local UP = { mesh = { nodes = { { host = A }, { host = B }, { host = C } } } }
  local function node(answers, age, extra)
    -- a job registered on the three nodes: judged on its nodes (a node without one is judged on
    -- what it owns, C33, and passes anyway)
    local files = H.registered({ A, B, C })
    files[testing.NODES] = NODES
    -- the budget of `health` (10 s, imexguard.commands), as the binary gives it
    local h = testing.host{ ctl = answers, files = files, local_addresses = { A }, deadline = 10 }
    for k, v in pairs(extra or {}) do h.unit_props[k] = v end
    h.unit_props.exec_main_start_us = math.floor((h.wallclock() - age) * 1e6)
    return h
  end

  it("health waits within its budget: the peers connect, ok, exit 0, the daemon's age said", function()
    local h = node({ RECONNECTING, RECONNECTING, UP }, 3)
    local outcome, message, report = run(h, { command = "health", dry_run = true })
    assert.equal("ok", outcome, message)
    assert.is_nil(report)
    assert.matches("started 3 s before this check", message, 1, true)
    assert.is_true(#h.runs_of("nvidia-imex-ctl") >= 2) -- polled, not judged on the first answer
  end)

  it("health: still reconnecting when its budget ends: starting, with its age, exit 0 (no drain)", function()
    local h = node({ RECONNECTING }, 5)
    local outcome, message, report = run(h, { command = "health", dry_run = true })
    assert.equal("ok", outcome, message)
    assert.is_nil(report)
    assert.matches("^starting: nvidia%-imex%.service started 1%d s ago, less than health_timeout %(60 s%)",
      message)
    assert.matches("cut off", message, 1, true)
  end)

  it("status does not wait: starting, with its age", function()
    local h = node({ RECONNECTING }, 4)
    local outcome, message = run(h, { command = "status" })
    assert.equal("ok", outcome, message)
    assert.matches("^starting: nvidia%-imex%.service started 4 s ago", message)
    assert.equal(1, #h.runs_of("nvidia-imex-ctl"))
  end)

  it("a young daemon still not READY when health's wait ends fails at once (never READY drains now)",
    function()
      local waiting = { mesh = { nodes = { { host = A, status = "WAITING_FOR_PEERS" }, { host = B },
        { host = C } } } }
      local h = node({ waiting }, 2)
      local outcome, message = run(h, { command = "health", dry_run = true })
      assert.equal("domain-unhealthy", outcome, message)
      assert.matches("not READY", message, 1, true)
      assert.is_true(#h.runs_of("nvidia-imex-ctl") >= 2) -- it was waited for first
      local so = run(node({ waiting }, 2), { command = "status" })
      assert.equal("domain-unhealthy", so)
    end)

  it("an older daemon in the same state is cut off, as always: domain-unhealthy", function()
    local h = node({ RECONNECTING }, 300)
    local outcome, message = run(h, { command = "health", dry_run = true })
    assert.equal("domain-unhealthy", outcome, message)
    assert.matches("cut off", message, 1, true)
  end)

  it("a young daemon whose node map is not the list's is judged as always", function()
    local reordered = { mesh = { nodes = { { host = B }, { host = A }, { host = C } } } }
    local h = node({ reordered }, 3)
    local outcome, message = run(h, { command = "health", dry_run = true })
    assert.equal("domain-unhealthy", outcome, message)
    assert.not_matches("starting", message, 1, true)
  end)
end)
