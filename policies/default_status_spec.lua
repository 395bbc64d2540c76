-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy: status (docs/design.md, "Decision model of the default
-- policy"; Cnn: its "Field cases") against the fake host. A field case whose tests drive
-- several entry points has a describe of the same name in each policies/default_*_spec.lua;
-- what these files share is tests/default_policy_helper.lua.

local testing = require("imexguard.testing")
local cjson = require("cjson")
local P = require("default")
local H = require("default_policy_helper")

local NODES, CONFIG = testing.NODES, testing.CONFIG
local run, assert_one_line = H.run, H.assert_one_line

describe("default policy status", function()
  it("prints one line per node with a diagnosis, and the domain state", function()
    local degraded = { mesh = { nodes = { { host = "10.0.0.1" },
      { host = "10.0.0.2", status = "UNAVAILABLE" }, { host = "10.0.0.3" } } } }
    local h = testing.host{ ctl = { degraded }, files = H.registered() }
    local outcome, message, report = run(h, { command = "status" })
    assert.equal("peers-unhealthy", outcome)
    assert_one_line(message)
    local lines = {}
    for l in report:gmatch("[^\n]+") do lines[#lines + 1] = l end
    local at = 1
    while lines[at] and not lines[at]:match("^IMEX domain ") do at = at + 1 end
    assert.matches("^IMEX domain DEGRADED", lines[at])
    assert.matches("^ID", lines[at + 1])
    assert.matches("^0%*%s+10.0.0.1", lines[at + 2])
    assert.matches("^1%s+10.0.0.2.*UNAVAILABLE.*status UNAVAILABLE", lines[at + 3])
    assert.matches("^2%s+10.0.0.3", lines[at + 4])
    assert.same({}, h.writes)
    assert.same({}, h.jobs)
  end)

  it("names nodes from the address map", function()
    local map = "/etc/imexguard/addresses"
    local h = testing.host{ files = { [map] = "n1 10.0.0.1\nn2 10.0.0.2\n" } }
    local outcome, _, report = run(h, { command = "status",
      settings = { address_source = "map", address_map = map } })
    assert.equal("ok", outcome)
    assert.matches("10.0.0.2%s+n2", report)
  end)

  it("JSON report", function()
    local h = testing.host()
    local outcome, _, report = run(h, { command = "status", json = true })
    assert.equal("ok", outcome)
    local j = cjson.decode(report)
    assert.equal("UP", j.status)
    assert.equal(2, #j.nodes)
    assert.equal("10.0.0.1", j.self)
    assert.equal("ok", j.outcome)
  end)

  it("a disabled unit is skipped", function()
    local h = testing.host{ unit = { unit_file_state = "disabled" }, ctl = { testing.UNCONFIGURED } }
    local outcome, _, report = run(h, { command = "status" })
    assert.equal("skipped", outcome)
    assert.matches("\nskipped: ", report)
    assert.matches("^node %s+n1\nunit %s+nvidia%-imex.service: active %(running%)", report)
  end)

  it("garbage: ctl-unusable", function()
    local h = testing.host{ ctl = { "garbage" } }
    local outcome = run(h, { command = "status" })
    assert.equal("ctl-unusable", outcome)
  end)
end)

-- Unit lifecycle faults are named when they happen (C26 start limit, C27 a stray
-- daemon on the command port).
describe("default policy: unit lifecycle faults (C26, C27)", function()
  local STRAY = H.lifecycle.STRAY

  describe("status", function()
    local UP2 = { nodes = { { host = "n1" }, { host = "n2" } } }
    it("never ok when the unit is not active, even with the ctl answering UP", function()
      for _, state in ipairs({ "inactive", "failed" }) do
        local s = testing.scenario{ policy = P, file = { "n1", "n2" }, unit = state, mesh = UP2,
          host = { port_owner = "none" } }
        local outcome, message = s:status{}
        assert.equal("service-failed", outcome, state)
        assert.matches("nvidia%-imex.service is " .. state, message)
        -- a stopped unit is said to be stopped; no other process is blamed (C27 names one when it listens)
        assert.not_matches("not the unit's daemon", message, 1, true)
        assert.matches(state == "inactive" and "the unit is stopped" or "the unit failed", message, 1, true)
      end
    end)

    it("issue 32 item 8: a stopped unit's report says what its Result means and shows no table the ctl's "
      .. "placeholder answer cannot support", function()
      local placeholder = H.fixture("ctl/down-unconfigured.json")
      for _, c in ipairs({ { "inactive", "success", "stopped cleanly" }, { "failed", "exit-code",
        "exited with a non-zero code" }, { "failed", "core-dump", "dumped core" } }) do
        local s = testing.scenario{ policy = P, file = { "n1", "n2" },
          unit = { state = c[1], result = c[2] }, host = { port_owner = "none", ctl = { placeholder } } }
        local outcome, message, report = s:status{}
        -- a stopped (not failed) unit with no job registered is an idle node's (C33): ok, said so
        assert.equal(c[1] == "inactive" and "ok" or "service-failed", outcome, c[2])
        assert.matches("(Result=" .. c[2] .. ": ", message, 1, true)
        assert.matches(c[3], message, 1, true)
        assert.matches(c[1] == "inactive" and "no job is registered here (Result="
          or "no IMEX daemon of it answers", message, 1, true)
        assert.not_matches("0.0.0.0", report, 1, true) -- no placeholder row, no "extra 0.0.0.0"
        assert.not_matches("\nID ", report, 1, true)
        assert.not_matches("extra", message, 1, true)
      end
    end)

    it("judged on the node list file (registered jobs' lists differ), speaks of this node's node list "
      .. "file, not the job's node list", function()
      local degraded = { mesh = { nodes = { { host = "10.0.0.1" }, { host = "10.0.0.2" },
        { host = "10.0.0.9", status = "UNAVAILABLE" } } } }
      local files = H.registered()
      local st = require("cjson").decode(files[next(files)])
      st.jobs[2] = { id = "101", nodes = "10.0.0.1\n", registered_us = "1699999400000000",
        invocation_id = "" }
      files[next(files)] = require("cjson").encode(st) .. "\n"
      local h = testing.host{ ctl = { degraded }, files = files }
      local _, message, report = run(h, { command = "status" })
      assert.not_matches("job's", message .. report, 1, true)
      assert.matches("not in this node's node list file", message .. report, 1, true)
    end)

    it("names the stray process on the command port", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n2" }, unit = "inactive", mesh = UP2,
        host = { port_owner = STRAY } }
      local outcome, message = s:status{}
      assert.equal("service-failed", outcome)
      assert.matches("pid 31337 %(/usr/bin/nvidia%-imex", message)
    end)

    it("ok for an active unit whose main process holds the port", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n2" }, mesh = UP2 }
      assert.equal("ok", (s:status{}))
    end)
  end)
end)

describe("default policy: the IMEX channel step (after applies?, before the node list)", function()
  local c = H.channel
  local CH, PD, chost = c.CH, c.PD, c.chost

  it("status shows the channel's state (missing, then present)", function()
    local h = chost()
    local _, _, report = run(h, { command = "status", settings = CH })
    assert.matches("IMEX channel: " .. PD .. "/channel0 missing %(major 238%)", report)
    run(h, { settings = CH })
    _, _, report = run(h, { command = "status", settings = CH })
    assert.matches("IMEX channel: " .. PD .. "/channel0 present %(238:0%)", report)
  end)
end)

-- C21, C22, C28: ordered identity, the unit's own config, configuration faults.
describe("default policy: ordered identity, the unit's config, configuration faults", function()
  local A, B, C, host3 = H.identity.A, H.identity.B, H.identity.C, H.identity.host3

  describe("C21: same nodes, another order", function()
    it("status compares with the node list file's order: this node's ID, the mismatch per node", function()
      local h = host3({ B, A, C })
      local o, m, rep = run(h, { command = "status" })
      assert.equal("domain-unhealthy", o, m)
      assert.truthy(m:find("same nodes, another order", 1, true), m)
      assert.truthy(rep:find("this node 10.0.0.1 (n1): ID 1 in the daemon's node map; ID 0 in the node list "
        .. NODES, 1, true), rep)
      for _, col in ipairs({ "ID", "HOST", "NAME", "STATE", "CONNECTIONS", "DIAGNOSIS" }) do
        assert.truthy(rep:find(col, 1, true), col)
      end
      local _, _, js = run(host3({ B, A, C }), { command = "status", json = true })
      local doc = cjson.decode(js)
      assert.equal(1, doc.self_id)
      assert.equal("reordered", doc.order.kind)
      assert.equal(NODES, doc.node_list)
    end)

    it("status of a domain in the node list's order is ok, with this node's ID", function()
      local h = host3({ A, B, C })
      local o, m, rep = run(h, { command = "status" })
      assert.equal("ok", o, m)
      assert.truthy(rep:find("ID 0 in the daemon's node map; ID 0 in the node list", 1, true), rep)
    end)
  end)

  describe("C22: a configuration fault is not a peer fault", function()
    it("status flags IMEX_CMD_ENABLED=0 also when the ctl cannot reach the daemon (its real answer)",
      function()
      local off_cfg = testing.CONFIG_TEXT:gsub("IMEX_CMD_ENABLED=1", "IMEX_CMD_ENABLED=0")
      local h = testing.host{ files = { [CONFIG] = off_cfg }, ctl = { testing.UNREACHABLE } }
      local so, sm, srep = run(h, { command = "status" })
      assert.are_not.equal("ok", so)
      assert.truthy(sm:find("IMEX_CMD_ENABLED=0", 1, true), sm)
      assert.truthy(srep:find("IMEX_CMD_ENABLED=0", 1, true), srep)
    end)
  end)
end)

-- What `systemctl status` shows and more (issue 20, point 5), the rack's output (point 2).
describe("default policy status: the node's facts, -q and -v, a rack", function()
  local STATE = "/run/imexguard/state.json"
  local REGISTERED = '{"jobs": [{"id": "101", "nodes": "10.0.0.1\\n10.0.0.2\\n", "hosts": "n[1-2]", '
    .. '"registered_us": "1699999400000000", "invocation_id": "abc"}]}'

  local function host(o)
    o = o or {}
    o.files = o.files or {}
    o.files[STATE] = o.files[STATE] or REGISTERED
    o.files["/run/imexguard/last-prolog.json"] = '{"command": "prolog", "outcome": "conflict", '
      .. '"exit_code": 5, "job": "102", "ended_us": "1699999900000000", "duration": 0.25, '
      .. '"message": "job 101 (n[1-2], registered 8m20s ago) uses nvidia-imex.service"}'
    return testing.host(o)
  end

  it("shows the unit and since when, its invocation, the last prolog and epilog, the jobs, the lock",
    function()
    local h = host{ unit = { state_change_us = 1699990000000000,
      invocation_id = "0123456789abcdef0123456789abcdef",
      main_pid = 4242 }, lock = { pid = 777, owner = "job=103", since = 1699999990 } }
    local outcome, _, report = run(h, { command = "status" })
    assert.equal("ok", outcome)
    assert.matches("\nunit +nvidia%-imex.service: active %(running%) since 2023%-11%-14T19:26:40Z; "
      .. "invocation 01234567; main PID 4242\n", report)
    assert.matches("\nlast prolog +conflict at 2023%-11%-14T22:11:40Z, job 102, 0.25 s: job 101 "
      .. "%(n%[1%-2%]", report)
    assert.matches("\nlast epilog +none recorded\n", report)
    assert.matches("\njobs +1 registered: 101 %(n%[1%-2%], 10m00s ago%)\n", report)
    assert.matches("\nnode lock +held by pid 777 %(job=103%) since 2023%-11%-14T22:13:10Z\n", report)
    assert.matches("\ndomain +%(not defined%)\nfabric +healthy: 4 GPUs registered with the NVLink fabric, "
      .. "partition ", report)
    -- status reads, it never takes the lock nor writes
    assert.same({}, h.writes)
    assert.equal(0, #h.locks)
  end)

  it("prints the domain of this node when a step set it (ctx.domain) and the fabric it read", function()
    local h = host()
    local ctx = testing.ctx{ host = h, command = "status" }
    ctx.domain = { name = "rack7", nodes = { "gb03", "gb01", "gb02" }, source = "/etc/imexguard/domains" }
    local _, _, report = P.status(ctx)
    assert.matches("\ndomain +rack7 gb%[01%-03%] %(from /etc/imexguard/domains%)\n", report)
    local partition = testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID
    assert.matches("\nfabric +healthy: 4 GPUs registered with the NVLink fabric, partition "
      .. partition:gsub("%p", "%%%0") .. "\n", report)
    ctx.json = true
    local j = cjson.decode((select(3, P.status(ctx))))
    assert.same({ "rack7", "/etc/imexguard/domains" }, { j.domain.name, j.domain.source })
    assert.same({ "healthy", partition }, { j.fabric.state, j.fabric.partition })
  end)

  it("-q: one line without this node's name or time, the same on every node of a healthy domain", function()
    local lines = {}
    for i, node in ipairs({ "n1", "n2" }) do
      local ctx = testing.ctx{ host = host(), command = "status", verbosity = -1,
        env = { SLURMD_NODENAME = node } }
      local _, _, report = P.status(ctx)
      lines[i] = report
    end
    assert.equal(lines[1], lines[2])
    assert.equal("ok: IMEX UP, 2/2 READY; nvidia-imex.service active; jobs 101\n", lines[1])
  end)

  it("a rack of 18 with one node cut off: short rows, hosts compressed in numeric order", function()
    local nodes, map = {}, {}
    for i = 1, 18 do
      local a = "10.0.0." .. i
      nodes[i] = { host = a, status = i == 5 and "UNAVAILABLE" or nil }
      map[#map + 1] = string.format("gb%02d %s", i, a)
    end
    local addrs = {}
    for i, n in ipairs(nodes) do addrs[i] = n.host end
    local files = H.registered(addrs) -- a job on all 18: judged on its nodes (C33)
    files["/etc/imexguard/addresses"] = table.concat(map, "\n") .. "\n"
    local h = testing.host{ ctl = { { mesh = { nodes = nodes } } }, files = files }
    local outcome, message, report = run(h, { command = "status",
      settings = { address_source = "map", address_map = "/etc/imexguard/addresses" } })
    assert.equal("peers-unhealthy", outcome)
    assert.matches(": gb05: status UNAVAILABLE", message)
    for line in report:gmatch("[^\n]+") do
      assert.is_true(#line <= 160, "a line of " .. #line .. " columns: " .. line)
    end
    -- node 5's own row: its links are down, named as one range; the others name gb05 alone
    assert.matches("\n4 +10.0.0.5 +gb05 +UNAVAILABLE +0/18 connected; INVALID gb%[01%-18%] ", report)
    assert.matches("\n5 +10.0.0.6 +gb06 +READY +17/18 connected; INVALID gb05 ", report)
    -- -v: every link with its address
    local _, _, verbose = run(h, { command = "status", verbosity = 1,
      settings = { address_source = "map", address_map = "/etc/imexguard/addresses" } })
    assert.matches("gb09 10.0.0.9 INVALID, gb10 10.0.0.10 INVALID", verbose, 1, true)
  end)
end)

describe("default policy registrations and forget", function()
  local STATE = "/run/imexguard/state.json"
  local TWO = '{"jobs": [{"id": "101", "nodes": "10.0.0.1\\n10.0.0.2\\n", "hosts": "n[1-2]", '
    .. '"registered_us": "1699999400000000", "invocation_id": "abc"}, {"id": "102", "nodes": "10.0.0.1\\n", '
    .. '"registered_us": "1699996400000000", "invocation_id": ""}]}'

  it("registrations lists job, hosts, since when; -q the ids; none is said", function()
    local h = testing.host{ files = { [STATE] = TWO } }
    local outcome, message, report = run(h, { command = "registrations" })
    assert.equal("ok", outcome)
    assert.equal("node n1: 2 jobs registered: 101, 102", message)
    assert.matches("^JOB +HOSTS +REGISTERED +AGE\n101 +n%[1%-2%] +2023%-11%-14T22:03:20Z +10m00s\n"
      .. "102 +10.0.0.1 +2023%-11%-14T21:13:20Z +1h00m\n$", report)
    local _, _, quiet = run(h, { command = "registrations", verbosity = -1 })
    assert.equal("101 102\n", quiet)
    local _, _, none = run(testing.host(), { command = "registrations" })
    assert.equal("no job registered on node n1\n", none)
    assert.same({}, h.writes)
  end)

  it("forget JOBID removes that registration under the node lock and says what it removed", function()
    local h = testing.host{ files = { [STATE] = TWO } }
    local outcome, message = run(h, { command = "forget", arg = "101", env = { SLURMD_NODENAME = "n1" } })
    assert.equal("ok", outcome)
    assert.equal("node n1: removed the registration of job 101 (n[1-2], registered 10m00s ago); still "
      .. "registered: job 102; nvidia-imex.service left as it is", message)
    assert.equal(1, #h.locks)
    local st = cjson.decode(h.file(STATE))
    assert.equal(1, #st.jobs)
    assert.equal("102", st.jobs[1].id)
    assert.same({}, h.jobs) -- the unit is not touched
  end)

  it("forget of a job that is not registered, or not a job id: bad-input, nothing written", function()
    local h = testing.host{ files = { [STATE] = TWO } }
    local outcome, message = run(h, { command = "forget", arg = "7" })
    assert.equal("bad-input", outcome)
    assert.equal("node n1: job 7 is not registered here; nothing removed (registered: 101, 102)", message)
    outcome, message = run(h, { command = "forget", arg = "12x" })
    assert.equal("bad-input", outcome)
    assert.matches('"12x" is not a Slurm job id', message)
    assert.same({}, h.writes)
  end)
end)
