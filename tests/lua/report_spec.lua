-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.report: the plan and status reports of the default policy, the status table
-- with its node map (C21) and configuration fault (C22) included.
local report = require("imexguard.report")
local testing = require("imexguard.testing")
local ctl = require("imexguard.ctl")
local verdict = require("imexguard.verdict")

-- verdict.judge of a parsed mesh for `expected` (want.addrs) and `self`; opts.node_list: want's.
local function judge(mesh, expected, self, opts)
  return verdict.judge({ mesh = mesh }, { addrs = expected, self = self,
    node_list = opts and opts.node_list })
end
local cjson = require("cjson")

local ctl_answers = require("ctl_answers")

local H = ctl_answers.HOSTS
local cmd_unreachable = ctl_answers.cmd_unreachable

local function find(s, word)
  return s:find(word, 1, true) ~= nil
end

describe("report", function()
  it("diff: lines only the old list has, lines only the new one has", function()
    local removed, added = report.diff("10.0.0.1\n10.0.0.2\n", "10.0.0.1\n10.0.0.3\n")
    assert.same({ "10.0.0.2" }, removed)
    assert.same({ "10.0.0.3" }, added)
    removed, added = report.diff(nil, "10.0.0.1\n")
    assert.same({}, removed)
    assert.same({ "10.0.0.1" }, added)
  end)

  it("status_plain: outcome and message, as text or JSON (the status object, no domain)", function()
    assert.equal("skipped: IMEX not installed\n",
      report.status_plain("skipped", "IMEX not installed", false))
    local doc = cjson.decode(report.status_plain("skipped", "m", true, { exit_code = 0 }))
    assert.same({ 1, "status", true, "skipped", 0, "m" },
      { doc.schema, doc.command, doc.ok, doc.outcome, doc.exit_code, doc.message })
    assert.equal(cjson.null, doc.status)
    assert.same({}, doc.nodes)
    assert.matches('"nodes":%[%]', report.status_plain("skipped", "m", true))
  end)

  it("plan: the default policy's plan report is rendered here (text and JSON)", function()
    local s = testing.scenario{ file = { "n1", "n2" } }
    local outcome, message, text = s:plan{ job = 101, nodelist = "n[1,3]" }
    assert.equal("ok", outcome)
    assert.matches("would rewrite " .. testing.NODES, message, 1, true)
    assert.matches("plan for job 101 on node n1 (nothing is changed)", text, 1, true)
    assert.matches("  - 10.0.0.2\n  + 10.0.0.3\n", text, 1, true)
    local _, _, json = s:plan{ job = 101, nodelist = "n[1,3]", json = true }
    local doc = cjson.decode(json)
    assert.same({ "10.0.0.2" }, doc.removed)
    assert.equal("restart", doc.action)
    assert.same({}, s.host.writes)
  end)
end)

describe("report.status", function()
  it("one row per node, connections summary, diagnosis", function()
    local d = assert(ctl.parse_mesh(testing.render_mesh({ nodes = { { host = "10.0.0.1" },
      { host = "10.0.0.2", status = "UNAVAILABLE" } } }), 0))
    local v = judge(d, { "10.0.0.1", "10.0.0.2" }, "10.0.0.1")
    local r = report.status(d, v, { self = "10.0.0.1", names = { ["10.0.0.2"] = "n2" } })
    assert.matches("0%*%s+10.0.0.1%s+READY%s+1/2 connected; INVALID n2%s+ok", r)
    assert.matches("1%s+10.0.0.2%s+n2%s+UNAVAILABLE", r)
    local j = cjson.decode(report.status(d, v, { self = "10.0.0.1", json = true }))
    assert.equal("DEGRADED", j.status)
    assert.equal("status UNAVAILABLE", j.nodes[2].diagnosis)
  end)

  it("a node outside the expected list that is not READY is not 'ok' (down, unconfigured)", function()
    local f = assert(io.open("tests/fixtures/ctl/down-unconfigured.json"))
    local d = assert(ctl.parse_mesh(f:read("a"), 0))
    f:close()
    local v = judge(d, { "10.0.0.1" }, "10.0.0.1")
    local j = cjson.decode(report.status(d, v, { self = "10.0.0.1", json = true }))
    assert.equal("0.0.0.0", j.nodes[1].host)
    assert.equal("status UNAVAILABLE", j.nodes[1].diagnosis)
  end)
end)

describe("report.status: node map and configuration fault", function()
  it("flags the node whose view of the node map differs (C21 seen from a peer)", function()
    local f = assert(io.open("tests/fixtures/ctl/c21-reordered-peer.json"))
    local d = assert(ctl.parse_mesh(f:read("a"), 0))
    f:close()
    local expected = { "10.0.0.5", "10.0.0.6", "10.0.0.7" }
    local v = judge(d, expected, "10.0.0.5")
    local j = cjson.decode(report.status(d, v, { self = "10.0.0.5", json = true }))
    assert.equal(0, j.self_id)
    assert.equal("peer-fault", j.verdict)
    assert.equal("same", j.order.kind)
    assert.equal("ok", j.nodes[1].map)
    assert.truthy(find(j.nodes[2].map, "node map mismatch: its id 0 is 10.0.0.6"), j.nodes[2].map)
    assert.truthy(find(j.nodes[2].diagnosis, "node map mismatch"), j.nodes[2].diagnosis)
    local text = report.status(d, v, { self = "10.0.0.5" })
    assert.truthy(text:match("\n1%s+10%.0%.0%.6%s+READY%s+[^\n]*node map mismatch"), text)
  end)

  it("the stale node's own report names the order (same nodes, another order)", function()
    local f = assert(io.open("tests/fixtures/ctl/c21-reordered-self.json"))
    local d = assert(ctl.parse_mesh(f:read("a"), 0))
    f:close()
    local v = judge(d, { "10.0.0.5", "10.0.0.6", "10.0.0.7" }, "10.0.0.6")
    local text = report.status(d, v, { self = "10.0.0.6" })
    assert.truthy(text:match("\n0%*%s+10%.0%.0%.6"), text)
    assert.truthy(find(text, "node map: same nodes, another order"), text)
  end)

  it("a configuration fault never shows the peers as faulty", function()
    local d = assert(ctl.parse_mesh(testing.render_mesh(cmd_unreachable(H)), 0))
    local v = judge(d, H, H[1])
    local j = cjson.decode(report.status(d, v, { self = H[1], json = true }))
    assert.equal("config-fault", j.verdict)
    for i = 2, 4 do
      assert.truthy(find(j.nodes[i].diagnosis, "configuration fault"), j.nodes[i].diagnosis)
      assert.is_false(find(j.nodes[i].diagnosis, "status UNAVAILABLE"))
    end
  end)
end)

describe("report.status connections", function()
  it("lists each node's broken connections by host, whether it names every host or a few", function()
    local conns = {}
    for i = 9, 1, -1 do
      conns[tostring(i)] = { host = "10.0.0." .. i, status = i % 3 == 0 and "INVALID" or "CONNECTED" }
    end
    local few = { ["2"] = { host = "10.0.0.9", status = "DISCONNECTED" },
      ["3"] = { host = "10.0.0.10", status = "N" } }
    local d = assert(ctl.parse_mesh(cjson.encode({ status = "DEGRADED", nodes = {
      ["1"] = { status = "READY", host = "10.0.0.1", connections = conns },
      ["2"] = { status = "READY", host = "10.0.0.2", connections = few } } }), 0))
    local out = report.status(d, nil, { self = "10.0.0.1", json = true })
    local rows = cjson.decode(out).nodes
    assert.same({ 6, 9 }, { rows[1].connected, rows[1].links })
    assert.same({ "10.0.0.3", "10.0.0.6", "10.0.0.9" }, { rows[1].down[1].host, rows[1].down[2].host,
      rows[1].down[3].host })
    assert.equal("INVALID", rows[1].down[1].state)
    -- numeric order: .9 before .10
    assert.same({ "10.0.0.9", "10.0.0.10" }, { rows[2].down[1].host, rows[2].down[2].host })
    local text = report.status(d, nil, { self = "10.0.0.1" })
    assert.matches("6/9 connected; INVALID 10.0.0.[3,6,9]", text, 1, true)
    assert.matches("0/2 connected; DISCONNECTED 10.0.0.9; N 10.0.0.10", text, 1, true)
    text = report.status(d, nil, { self = "10.0.0.1", verbosity = 1, names = { ["10.0.0.9"] = "gb09" } })
    assert.matches("0/2 connected; gb09 10.0.0.9 DISCONNECTED, 10.0.0.10 N", text, 1, true)
  end)
end)

describe("report.quiet_line (status -q)", function()
  it("names the domain's nodes that are not READY, by name", function()
    local d = { status = "DEGRADED", nodes = { { host = "10.0.0.1", status = "READY" },
      { host = "10.0.0.2", status = "UNAVAILABLE" } } }
    assert.equal("peers-unhealthy: IMEX DEGRADED, 1/2 READY, not READY: n2\n",
      report.quiet_line("peers-unhealthy", "m", d, nil, { ["10.0.0.2"] = "n2" }))
  end)

  it("a stopped daemon's placeholder row (0.0.0.0 DOWN) is nobody's: the run's message instead", function()
    local d = { status = "DOWN", nodes = { { host = "0.0.0.0", status = "DOWN" } } }
    assert.equal("service-failed: nvidia-imex.service is inactive (result success): the unit is stopped\n",
      report.quiet_line("service-failed", "node n4: nvidia-imex.service is inactive (result success): the "
        .. "unit is stopped", d, nil, {}))
  end)
end)
