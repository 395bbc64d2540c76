-- SPDX-License-Identifier: Apache-2.0
-- Specs of the quiet-hours site policy (docs/policy-api.md, "Your first policy"): no restart of a
-- running daemon during the quiet hours of the local day, with its own settings (policy_settings)
-- and the kit's wall clock and time zone (testing.host's wallclock, utc_offset, zone).
local testing = require("imexguard.testing")
local outcomes = require("imexguard.outcomes")
local P = require("quiet_hours")

-- 2026-01-01 at HH:MM UTC, seconds since the epoch
local function at(hh, mm) return 1767225600 + hh * 3600 + (mm or 0) * 60 end

-- A node whose running daemon has another node list than job 101's: the job needs a restart.
local function node(opts)
  opts = opts or {}
  return testing.scenario{ policy = P, file = opts.file or { "n1", "n3" }, jobs = opts.jobs,
    settings = { policy_settings = opts.quiet },
    host = { wallclock = opts.wallclock, utc_offset = opts.utc_offset or 0, zone = opts.zone } }
end

describe("quiet_hours policy", function()
  it("is the default policy with a may_restart hook and two settings of its own", function()
    assert.is_function(P.prolog)
    assert.is_function(P.hooks.may_restart)
    assert.same({ "quiet_from", "quiet_to" }, { P.settings[1].name, P.settings[2].name })
  end)

  it("inside the quiet hours (10:00 local): refused, exit 22, nothing written or restarted", function()
    local s = node{ wallclock = at(9), utc_offset = 3600, zone = "CET" } -- 10:00 CET
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("refused", outcome)
    assert.equal(22, outcomes.exit_code(outcome))
    assert.matches("quiet hours 08:00-18:00 (policy_settings.quiet_from, quiet_to), now 10:00 CET", message,
      1, true)
    assert.matches("the policy refused to rewrite the node list and restart nvidia-imex.service for job 101",
      message, 1, true)
    assert.not_matches("forget", message, 1, true) -- no registry hint: no registered job is the cause
    assert.same({}, s:writes())
    assert.equal(0, s:restarts())
    assert.same({}, s:registered())
  end)

  it("plan says the same: refused, with the policy's reason", function()
    local s = node{ wallclock = at(12) }
    local outcome, message, report = s:plan{ job = 101, nodelist = "n[1-2]" }
    assert.equal("refused", outcome)
    assert.matches("quiet hours 08:00-18:00", message, 1, true)
    assert.matches("\nrefused: node n1: the policy refused to ", report, 1, true)
  end)

  it("outside them (19:00 local, or 10:00 UTC is 20:00 at UTC+10): the default policy restarts", function()
    local s = node{ wallclock = at(18), utc_offset = 3600 }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.equal(1, s:restarts())
    s = node{ wallclock = at(10), utc_offset = 36000, zone = "AEST" }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
  end)

  it("the kit's wall clock can be set during a scenario: the same node, refused then allowed", function()
    local s = node{ wallclock = at(12) }
    assert.equal("refused", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    s.host.set_wallclock(at(18, 30))
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.equal(1, s:restarts())
  end)

  it("a current list needs no restart: ok at any hour", function()
    local s = node{ file = { "n1", "n2" }, wallclock = at(12) }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.equal(0, s:restarts())
  end)

  it("policy_settings move the hours; from above to spans midnight", function()
    local s = node{ wallclock = at(23), quiet = { quiet_from = 22, quiet_to = 6 } }
    assert.equal("refused", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    s = node{ wallclock = at(12), quiet = { quiet_from = 22, quiet_to = 6 } }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.is_true(P.quiet(0, 22, 6))
    assert.is_false(P.quiet(6, 22, 6))
    assert.is_false(P.quiet(12, 8, 8)) -- equal: no quiet hours
  end)

  it("a registered job with another list is still the registry's conflict, not a refusal", function()
    local s = node{ wallclock = at(12), jobs = { { id = 100, nodes = { "n1", "n3" } } } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("conflict", outcome)
    assert.matches("imexguard forget 100", message, 1, true)
  end)

  it("a wrong or unknown policy setting is refused by the kit as by the binary", function()
    assert.has_error(function()
      node{ quiet = { quiet_from = 25 } }:prolog{ job = 101, nodelist = "n[1-2]" }
    end, "setting 'policy_settings.quiet_from' must be a number from 0 to 23 (hour of the local day), got "
      .. "number 25")
    assert.has_error(function()
      node{ quiet = { quiet_form = 8 } }:prolog{ job = 101, nodelist = "n[1-2]" }
    end, "unknown policy setting 'quiet_form' (the policy declares quiet_from, quiet_to)")
  end)
end)
