-- SPDX-License-Identifier: Apache-2.0
-- Specs of the shared-nodes site policy: never restart a running daemon while another job is
-- registered, whatever its list; otherwise the default policy.
local testing = require("imexguard.testing")
local P = require("shared_nodes")

describe("shared_nodes policy", function()
  it("is the default policy with its own rule (extend)", function()
    assert.is_function(P.prolog)
    assert.is_function(P.epilog)
    assert.is_function(P.plan)
    assert.is_function(P.status)
    assert.is_function(P.hooks.may_restart)
  end)

  it("a shared job next to a running job with the same list: ok, no restart, both registered", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n2" },
      jobs = { { id = 100, nodes = { "n1", "n2" }, shared = "YES" } } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]", oversubscribe = "YES" }
    assert.equal("ok", outcome)
    assert.matches("current", message)
    assert.equal(0, s:restarts())
    assert.same({ "100", "101" }, s:registered())
    assert.equal("YES", s:registrations()[2].shared)
  end)

  it("a stale daemon with the same list is NOT restarted under another job: conflict", function()
    -- config.cfg changed after the daemon started: the default would restart (same list, allowed)
    local s = testing.scenario{ policy = P, jobs = { { id = 100, nodes = "n[1-2]", shared = "OK" } },
      files = { [testing.CONFIG] = { data = testing.CONFIG_TEXT, mtime_us = testing.WALL0 * 1e6 } } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]", oversubscribe = "OK" }
    assert.equal("conflict", outcome)
    assert.matches("job 100 %(10.0.0.%[1%-2%], shared OK, registered 10m00s ago%)", message)
    assert.matches("shared node", message)
    assert.equal(0, s:restarts())
    assert.same({ "100" }, s:registered())
    -- the default policy refuses it too, but lets restart_under_jobs = true allow it; this one does not
    local under = { restart_under_jobs = true }
    local d = testing.scenario{ policy = require("default"), jobs = { { id = 100, nodes = "n[1-2]" } },
      settings = under,
      files = { [testing.CONFIG] = { data = testing.CONFIG_TEXT, mtime_us = testing.WALL0 * 1e6 } } }
    assert.equal("ok", (d:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.equal(1, d:restarts())
    s = testing.scenario{ policy = P, jobs = { { id = 100, nodes = "n[1-2]", shared = "OK" } },
      settings = under,
      files = { [testing.CONFIG] = { data = testing.CONFIG_TEXT, mtime_us = testing.WALL0 * 1e6 } } }
    assert.equal("conflict", (s:prolog{ job = 101, nodelist = "n[1-2]", oversubscribe = "OK" }))
    assert.equal(0, s:restarts())
  end)

  it("restart_under_jobs does not relax the rule", function()
    local s = testing.scenario{ policy = P, jobs = { [100] = { "n1", "n3" } }, file = { "n1", "n3" },
      settings = { restart_under_jobs = true } }
    assert.equal("conflict", (s:prolog{ job = 101, nodelist = "n[1-2]", oversubscribe = "TOPO" }))
    assert.same({}, s:writes())
    assert.equal(0, s:restarts())
  end)

  it("alone on the node a job may change the list (restart)", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n3" } }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]", oversubscribe = "YES" }))
    assert.equal(1, s:restarts())
    assert.same({ "n1", "n2" }, s:daemon())
  end)

  it("a dead daemon is started when the other jobs have the same list", function()
    local s = testing.scenario{ policy = P, unit = "failed", jobs = { [100] = "n[1-2]" } }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.same({ "start" }, s:unit_jobs())
  end)

  it("an unknown SLURM_JOB_OVERSUBSCRIBE is logged, not refused", function()
    local s = testing.scenario{ policy = P }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]", oversubscribe = "MAYBE" }))
    assert.matches("unknown SLURM_JOB_OVERSUBSCRIBE=MAYBE", s:logs("warning")[1])
    assert.equal("MAYBE", s:registrations()[1].shared)
  end)

  it("Slurm 26.05: records both variables and what they mean, and a conflict names them (C49)", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n2" } }
    local outcome, message = s:prolog{ job = 100, nodelist = "n[1-2]", oversubscribe = "OK",
      env = { SLURM_JOB_EXCLUSIVE = "USER" } }
    assert.equal("ok", outcome, message)
    local e = s:registrations()[1]
    assert.same({ "OK", "USER", "user" }, { e.shared, e.exclusive, e.asked })
    assert.matches("job 100 asked for an exclusive node: user (SLURM_JOB_OVERSUBSCRIBE=OK, "
      .. "SLURM_JOB_EXCLUSIVE=USER)", table.concat(s:logs("info"), "\n"), 1, true)
    -- 26.05's NO with EXCLUSIVE=NO is a shared node, not a whole one (24.11's NO alone was)
    local t = testing.scenario{ policy = P, file = { "n1", "n2" } }
    assert.equal("ok", (t:prolog{ job = 101, nodelist = "n[1-2]", oversubscribe = "NO",
      env = { SLURM_JOB_EXCLUSIVE = "NO" } }))
    assert.same({ "NO", "NO", "no" }, { t:registrations()[1].shared, t:registrations()[1].exclusive,
      t:registrations()[1].asked })
    local old = testing.scenario{ policy = P, file = { "n1", "n2" } }
    assert.equal("ok", (old:prolog{ job = 102, nodelist = "n[1-2]", oversubscribe = "NO" }))
    assert.same({ "NO", "node" }, { old:registrations()[1].shared, old:registrations()[1].asked })
    assert.is_nil(old:registrations()[1].exclusive)
    -- a later job that needs a restart: the conflict names what job 100 asked for
    local c = testing.scenario{ policy = P, jobs = { { id = 100, nodes = "n[1-2]", shared = "OK",
      exclusive = "USER" } },
      files = { [testing.CONFIG] = { data = testing.CONFIG_TEXT, mtime_us = testing.WALL0 * 1e6 } } }
    outcome, message = c:prolog{ job = 103, nodelist = "n[1-2]", oversubscribe = "OK",
      env = { SLURM_JOB_EXCLUSIVE = "USER" } }
    assert.equal("conflict", outcome)
    assert.matches("job 100 (10.0.0.[1-2], shared OK, exclusive USER, registered", message, 1, true)
  end)

  it("an unknown SLURM_JOB_EXCLUSIVE is logged, not refused", function()
    local s = testing.scenario{ policy = P }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]", oversubscribe = "NO",
      env = { SLURM_JOB_EXCLUSIVE = "RACK" } }))
    assert.matches("unknown SLURM_JOB_EXCLUSIVE=RACK", s:logs("warning")[1])
    assert.equal("unknown", s:registrations()[1].asked)
  end)

  it("the last job's epilog unregisters it and leaves IMEX running", function()
    local s = testing.scenario{ policy = P, jobs = { [100] = "n[1-2]" } }
    local outcome, message = s:epilog{ job = 100 }
    assert.equal("ok", outcome)
    assert.matches("left running", message)
    assert.same({}, s:registered())
    assert.equal(0, s:stops())
  end)
end)
