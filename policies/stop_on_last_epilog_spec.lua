-- SPDX-License-Identifier: Apache-2.0
-- Specs of the stop-on-last-epilog site policy: IMEX stops when the last registered job ends.
local testing = require("imexguard.testing")
local P = require("stop_on_last_epilog")

describe("stop_on_last_epilog policy", function()
  it("the last registered job's epilog stops the unit", function()
    local s = testing.scenario{ policy = P, jobs = { [100] = "n[1-2]" } }
    local outcome, message = s:epilog{ job = 100 }
    assert.equal("ok", outcome)
    assert.matches("last job using IMEX", message)
    assert.matches("stopped", message)
    assert.same({ "stop" }, s:unit_jobs())
    assert.equal("inactive", s:unit().active_state)
    assert.same({}, s:registered())
  end)

  it("another job still registered: IMEX left running", function()
    local s = testing.scenario{ policy = P, jobs = { [100] = "n[1-2]", [101] = "n[1-2]" } }
    local outcome, message = s:epilog{ job = 100 }
    assert.equal("ok", outcome)
    assert.matches("still registered: job 101", message)
    assert.same({}, s:unit_jobs())
    assert.same({ "101" }, s:registered())
  end)

  it("a job that was never registered stops nothing", function()
    local s = testing.scenario{ policy = P }
    assert.equal("ok", (s:epilog{ job = 100 }))
    assert.same({}, s:unit_jobs())
  end)

  it("prolog as default: the next job starts the stopped daemon again", function()
    local s = testing.scenario{ policy = P }
    assert.equal("ok", (s:prolog{ job = 100, nodelist = "n[1-2]" }))
    assert.equal("ok", (s:epilog{ job = 100 }))
    assert.equal("inactive", s:unit().active_state)
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1,3]" }
    assert.equal("ok", outcome)
    assert.matches("started", message)
    assert.same({ "stop", "start" }, s:unit_jobs())
    assert.same({ "n1", "n3" }, s:daemon())
  end)

  it("a stop that fails: service-failed naming the result (the node drains)", function()
    local s = testing.scenario{ policy = P, jobs = { [100] = "n[1-2]" }, restart = { result = "timeout" } }
    local outcome, message = s:epilog{ job = 100 }
    assert.equal("service-failed", outcome)
    assert.matches("stopping nvidia%-imex%.service failed: timeout", message)
    assert.same({}, s:registered()) -- the job itself is gone either way
  end)
end)

describe("stop_on_last_epilog policy: a method override of the default policy", function()
  local default = require("policies.default")

  it("replaces after_unregister only; every other step is the default's", function()
    assert.are_not.equal(default.after_unregister, P.after_unregister)
    for _, step in ipairs({ "applies", "desired", "lock", "write", "stale", "may_restart", "restart",
      "wait_healthy", "register" }) do
      assert.equal(default[step], P[step], step)
    end
    assert.same({}, P.hooks)
  end)

  it("a policy extended from it keeps the override (its epilog still stops the unit)", function()
    local child = P.extend{ register_extra = function() return { site = "x" } end }
    local s = testing.scenario{ policy = child, jobs = { [100] = "n[1-2]" } }
    assert.equal("ok", (s:epilog{ job = 100 }))
    assert.same({ "stop" }, s:unit_jobs())
  end)
end)
