-- SPDX-License-Identifier: Apache-2.0
-- Specs of the park-on-last-epilog site policy: when the last registered job ends, IMEX runs on
-- this node alone (an idle node's domain is its own: UP for a health check that asks the ctl).
local testing = require("imexguard.testing")
local P = require("park_on_last_epilog")

describe("park_on_last_epilog policy", function()
  it("the last registered job's epilog writes this node alone and restarts the unit", function()
    local s = testing.scenario{ policy = P, jobs = { [100] = "n[1-2]" }, file = { "n1", "n2" } }
    local outcome, message = s:epilog{ job = 100 }
    assert.equal("ok", outcome, message)
    assert.matches("parked on this node alone %(10%.0%.0%.1%)", message)
    assert.same({ "restart" }, s:unit_jobs())
    assert.same({ "n1" }, s:daemon())
    assert.same({}, s:registered())
  end)

  it("another job still registered: IMEX left as it is", function()
    local s = testing.scenario{ policy = P, jobs = { [100] = "n[1-2]", [101] = "n[1-2]" },
      file = { "n1", "n2" } }
    local outcome, message = s:epilog{ job = 100 }
    assert.equal("ok", outcome)
    assert.matches("still registered: job 101", message)
    assert.same({}, s:unit_jobs())
    assert.same({}, s:writes())
  end)

  it("already parked: nothing written, nothing restarted", function()
    local s = testing.scenario{ policy = P, jobs = { [100] = "n1" }, file = { "n1" } }
    local outcome, message = s:epilog{ job = 100 }
    assert.equal("ok", outcome)
    assert.matches("already parked", message)
    assert.same({}, s:unit_jobs())
  end)

  it("the next job's prolog restarts the parked daemon with its own list", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n2" } }
    assert.equal("ok", (s:prolog{ job = 100, nodelist = "n[1-2]" }))
    assert.equal("ok", (s:epilog{ job = 100 }))
    assert.same({ "n1" }, s:daemon())
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.same({ "n1", "n2" }, s:daemon())
  end)
end)
