-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy: the epilog (docs/design.md, "Decision model of the default
-- policy"; Cnn: its "Field cases") against the fake host. A field case whose tests drive
-- several entry points has a describe of the same name in each policies/default_*_spec.lua;
-- what these files share is tests/default_policy_helper.lua.

local testing = require("imexguard.testing")
local cjson = require("cjson")
local P = require("default")
local H = require("default_policy_helper")

local STATE = testing.STATE
local env, run, assert_released = H.env, H.run, H.assert_released

describe("default policy epilog", function()
  it("a job that is not registered: ok, says so, takes no lock and writes nothing", function()
    local h = testing.host()
    local outcome, message = run(h, { command = "epilog" })
    assert.equal("ok", outcome)
    assert.equal("job 101 was not registered on node n1: nothing to do, nvidia-imex.service left as it is",
      message)
    assert.same({}, h.writes)
    assert.same({}, h.jobs)
    assert.equal(0, h.count("lock"))
  end)

  it("unregisters the job under the lock and leaves IMEX running", function()
    local h = testing.host()
    assert.equal("ok", (run(h, { env = env("n[1-2]", { SLURM_JOB_ID = "100" }) })))
    assert.equal("ok", (run(h)))
    local outcome, message = run(h, { command = "epilog", env = env("n[1-2]", { SLURM_JOB_ID = "100" }) })
    assert.equal("ok", outcome)
    assert.equal("job 100 unregistered on node n1 (still registered: job 101); "
      .. "nvidia-imex.service left running", message)
    local jobs = cjson.decode(h.file(STATE)).jobs
    assert.equal(1, #jobs)
    assert.equal("101", jobs[1].id)
    assert.same({}, h.jobs)
    assert.equal("active", h.unit_props.active_state)
    assert.equal(3, #h.locks)
    assert_released(h)
  end)

  it("needs no node list; without SLURM_JOB_ID it is bad-input", function()
    local h = testing.host()
    run(h, { env = env("n[1-2]", { SLURM_JOB_ID = "100" }) })
    assert.equal("ok", (run(h, { command = "epilog", env = { SLURM_JOB_ID = "100" } })))
    assert.is_nil(cjson.decode(h.file(STATE)).jobs)
    local outcome, message = run(h, { command = "epilog", env = { SLURMD_NODENAME = "n1" } })
    assert.equal("bad-input", outcome)
    assert.matches("SLURM_JOB_ID", message)
  end)

  it("a state file that cannot be written: write-failed, the job stays registered", function()
    local h = testing.host()
    run(h)
    local h2 = testing.host{ files = { [STATE] = h.file(STATE) }, fail = { [STATE] = { write = "ENOSPC" } } }
    local outcome, message = run(h2, { command = "epilog" })
    assert.equal("write-failed", outcome)
    assert.matches("ENOSPC", message)
    assert.equal("101", cjson.decode(h2.file(STATE)).jobs[1].id)
  end)
end)

-- Defects of the policy layer found by adversarial testing (/tmp/breaker-repro); each spec failed
-- before its fix.
describe("default policy: hardening", function()
  describe("an unreadable or corrupt state file: the registry is unknown", function()
    it("the epilog and plan say the same; the epilog writes nothing", function()
      local h = testing.host{ files = { [STATE] = "{trunc" } }
      local outcome, message = run(h, { command = "epilog" })
      assert.equal("conflict", outcome)
      assert.matches(STATE, message, 1, true)
      assert.same({}, h.writes)
      outcome, message = run(h, { command = "plan", dry_run = true })
      assert.equal("conflict", outcome)
      assert.matches(STATE, message, 1, true)
    end)
  end)

  describe("lock errors other than a timeout", function()
    it("the epilog too", function()
      local h = testing.host{ files = { [STATE] = '{"jobs":[{"id":"101","nodes":"10.0.0.1\\n"}]}' },
        fail = { ["/run/imexguard/lock"] = { lock = "EROFS" } } }
      assert.equal("write-failed", (run(h, { command = "epilog" })))
    end)
  end)

  describe("the job id", function()
    it("one job, one spelling: the epilog of job 7 unregisters a prolog run as 007", function()
      local h = testing.host()
      local jenv = { SLURM_JOB_ID = "007", SLURM_JOB_NODELIST = "n[1-2]", SLURMD_NODENAME = "n1" }
      assert.equal("ok", (run(h, { env = jenv })))
      assert.matches('"id":"7"', h.file(STATE), 1, true)
      jenv.SLURM_JOB_ID = "7"
      assert.equal("ok", (run(h, { command = "epilog", env = jenv })))
      assert.is_nil(h.file(STATE):find('"id":', 1, true), h.file(STATE))
    end)
  end)
end)

-- A late epilog is waited for, not punished (C24).
describe("default policy: a late epilog (C24)", function()
  it("with the default settings, job 300's epilog behind job 301's prolog in its longest "
    .. "legitimate critical section (a start, then the health wait: 75 s) is not a lock-timeout", function()
    -- lock_timeout (60 s) is shorter than start_timeout + health_timeout (90 s) that a prolog may
    -- hold the node lock for; an epilog that fails drains the node in Slurm, a healthy node here
    local s = testing.scenario{ policy = P, file = { "n1", "n3" },
      jobs = { { id = 300, nodes = { "n1", "n3" } } },
      lock = { pid = 4321, owner = "job=301", since = testing.WALL0, release_at = 1075 } }
    local outcome, message = s:epilog{ job = 300 }
    assert.equal("ok", outcome, message)
    assert.same({}, s:registered())
  end)
end)
