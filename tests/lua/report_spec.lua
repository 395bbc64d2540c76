-- Specs of imexguard.report: the plan and status reports of the default policy.
local report = require "imexguard.report"
local testing = require "imexguard.testing"
local cjson = require "cjson"

describe("report", function()
  it("diff: lines only the old list has, lines only the new one has", function()
    local removed, added = report.diff("10.0.0.1\n10.0.0.2\n", "10.0.0.1\n10.0.0.3\n")
    assert.same({ "10.0.0.2" }, removed)
    assert.same({ "10.0.0.3" }, added)
    removed, added = report.diff(nil, "10.0.0.1\n")
    assert.same({}, removed)
    assert.same({ "10.0.0.1" }, added)
  end)

  it("status_plain: outcome and message, as text or JSON", function()
    assert.equal("skipped: IMEX not installed\n",
      report.status_plain("skipped", "IMEX not installed", false))
    local doc = cjson.decode(report.status_plain("skipped", "m", true))
    assert.same({ outcome = "skipped", message = "m" }, doc)
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
