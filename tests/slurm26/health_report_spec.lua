-- SPDX-License-Identifier: Apache-2.0
-- Slurm 26.05's SlurmctldParameters=health_check_report (tests/slurm26/run sets it): slurmctld
-- sends its verdict with each health check request, and slurmd hands it to the HealthCheckProgram
-- as SLURM_NODE_IS_HEALTHY: "yes", or "no" for a node that is down, drained, failed or in a
-- maintenance reservation. Without the parameter (26.05's default) the variable is not set, as it is
-- not in the run at slurmd's start (no verdict yet). tests/e2e/run's health check wrapper saves each
-- run's environment (log/env-health-NODE.txt).
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

describe("Slurm 26.05 health_check_report", function()
  -- The environment of NODE's next health check run whose environment satisfies OK (a table).
  local function next_run(n, ok)
    os.remove(cluster.logdir .. "/env-health-" .. n .. ".txt")
    local env
    simdomain.wait_until(function()
      env = cluster.parse_env(cluster.health_env_text(n))
      return env.SLURMD_NODENAME == n and ok(env)
    end, 30, 0.2)
    return env
  end

  teardown(function()
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("an idle node's health check gets SLURM_NODE_IS_HEALTHY=yes", function()
    local env = next_run("n2", function() return true end)
    assert.are.equal("yes", env.SLURM_NODE_IS_HEALTHY)
  end)

  it("a drained node's gets no, and yes again once resumed", function()
    local ok, out = cluster.sh("scontrol update NodeName=n2 State=DRAIN Reason=health_report_spec")
    assert(ok, out)
    local env = next_run("n2", function(e) return e.SLURM_NODE_IS_HEALTHY ~= "yes" end)
    assert.are.equal("no", env.SLURM_NODE_IS_HEALTHY)
    -- the other nodes are judged each on its own
    assert.are.equal("yes", next_run("n3", function() return true end).SLURM_NODE_IS_HEALTHY)
    ok, out = cluster.sh("scontrol update NodeName=n2 State=RESUME")
    assert(ok, out)
    env = next_run("n2", function(e) return e.SLURM_NODE_IS_HEALTHY ~= "no" end)
    assert.are.equal("yes", env.SLURM_NODE_IS_HEALTHY)
  end)

  it("without health_check_report the variable is not set", function()
    local restore, ok, err = cluster.reconfigure {
      ["slurm.conf"] = function(text) return (text:gsub(",health_check_report", "")) end,
    }
    local _, conf = cluster.sh("scontrol show config")
    -- two runs after the restart: the one at slurmd's start never has a verdict
    next_run("n1", function() return true end)
    local env = next_run("n1", function() return true end)
    assert(restore())
    assert(ok, err)
    assert.is_nil(conf:match("health_check_report"), "the parameter is gone")
    assert.are.equal("n1", env.SLURMD_NODENAME)
    assert.is_nil(env.SLURM_NODE_IS_HEALTHY)
  end)
end)
