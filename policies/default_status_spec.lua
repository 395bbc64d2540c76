-- Specs of the default policy: status (docs/design.md, "Decision model of the default
-- policy"; Cnn: its "Field cases") against the fake host. A field case whose tests drive
-- several entry points has a describe of the same name in each policies/default_*_spec.lua;
-- what these files share is tests/default_policy_helper.lua.

local testing = require "imexguard.testing"
local cjson = require "cjson"
local P = require "default"
local H = require "default_policy_helper"

local NODES, CONFIG = testing.NODES, testing.CONFIG
local run, assert_one_line = H.run, H.assert_one_line

describe("default policy status", function()
  it("prints one line per node with a diagnosis, and the domain state", function()
    local degraded = { domain = { nodes = { { host = "10.0.0.1" },
      { host = "10.0.0.2", status = "UNAVAILABLE" }, { host = "10.0.0.3" } } } }
    local h = testing.host{ ctl = { degraded } }
    local outcome, message, report = run(h, { command = "status" })
    assert.equal("peers-unhealthy", outcome)
    assert_one_line(message)
    local lines = {}
    for l in report:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.matches("^Domain DEGRADED", lines[1])
    assert.matches("^ID", lines[2])
    assert.matches("^0%*%s+10.0.0.1", lines[3])
    assert.matches("^1%s+10.0.0.2.*UNAVAILABLE.*status UNAVAILABLE", lines[4])
    assert.matches("^2%s+10.0.0.3", lines[5])
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
    assert.matches("^skipped: ", report)
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
        local s = testing.scenario{ policy = P, file = { "n1", "n2" }, unit = state, domain = UP2,
          host = { port_owner = "none" } }
        local outcome, message = s:status{}
        assert.equal("service-failed", outcome, state)
        assert.matches("nvidia%-imex.service is " .. state, message)
        -- a stopped unit is said to be stopped; no other process is blamed (C27 names one when it listens)
        assert.not_matches("not the unit's daemon", message, 1, true)
        assert.matches(state == "inactive" and "the unit is stopped" or "the unit failed", message, 1, true)
      end
    end)

    it("without a job, speaks of this node's node list file, not the job's node list", function()
      local degraded = { domain = { nodes = { { host = "10.0.0.1" }, { host = "10.0.0.2" },
        { host = "10.0.0.9", status = "UNAVAILABLE" } } } }
      local h = testing.host{ ctl = { degraded } }
      local _, message, report = run(h, { command = "status" })
      assert.not_matches("job's", message .. report, 1, true)
      assert.matches("not in this node's node list file", message .. report, 1, true)
    end)

    it("names the stray process on the command port", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n2" }, unit = "inactive", domain = UP2,
        host = { port_owner = STRAY } }
      local outcome, message = s:status{}
      assert.equal("service-failed", outcome)
      assert.matches("pid 31337 %(/usr/bin/nvidia%-imex", message)
    end)

    it("ok for an active unit whose main process holds the port", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n2" }, domain = UP2 }
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
