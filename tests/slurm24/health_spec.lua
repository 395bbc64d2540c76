-- SPDX-License-Identifier: Apache-2.0
-- HealthCheckProgram run by the real slurmd 24.11 or later (tests/slurm24/run, tests/slurm26/run:
-- contrib/slurm/health.sh with each node's imexguard, every 2 s, only while
-- $IMEXGUARD_E2E_ROOT/health.on exists; each run appends "health NODE rc=N" to log/health.log). One
-- rack n[1-4]:
--   an idle node after a sub-rack job stays up (C33: judged on what it owns, not on peers that moved
--   on); a broken node is drained with imexguard's reason; once healthy it is resumed (the operator
--   issue: health.sh resumes a node that it drained, never one drained for another reason).
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

describe("HealthCheckProgram under slurmd " .. cluster.slurm, function()
  local d
  local all = cluster.nodes
  local on = cluster.root .. "/health.on"
  local hlog = cluster.logdir .. "/health.log"

  -- Wait until each of NODES has had COUNT more health runs than now.
  local function runs(n)
    local c = 0
    for _ in (simdomain.read_file(hlog) or ""):gmatch("health " .. n .. " rc=") do c = c + 1 end
    return c
  end
  local function more_runs(nodes, count)
    local base = {}
    for _, n in ipairs(nodes) do base[n] = runs(n) end
    return simdomain.wait_until(function()
      for _, n in ipairs(nodes) do
        if runs(n) < base[n] + count then return false end
      end
      return true
    end, 30, 0.2)
  end

  -- Wait until every node's ctl answers UP.
  local function rack_up()
    return simdomain.wait_until(function()
      for _, n in ipairs(all) do
        local j = d:ctl_json(n)
        if not j or j.status ~= "UP" then return false end
      end
      return true
    end, 30, 0.2)
  end

  setup(function()
    -- one IMEX domain over n[1-4] (the tier's blocks are block_spec's)
    d = cluster.domain { "health_timeout = 8", "drain_reason = true", cluster.scontrol_setting(),
      'domain_map = "none"' }
    for _, n in ipairs(all) do d:write_node_list(n, all) end
    assert(d:start())
    assert.truthy(rack_up(), "the rack is UP")
  end)

  teardown(function()
    os.remove(on)
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("idle nodes after a sub-rack job stay up (C33)", function()
    local id = cluster.sbatch("-N2 -w n[1-2]", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id))
    -- n3 and n4: no job, their daemons keep the rack's list while n1 and n2 moved on
    simdomain.write_file(on, "")
    assert.truthy(more_runs({ "n3", "n4" }, 3), "three health runs on n3 and n4")
    for _, n in ipairs { "n3", "n4" } do
      assert.is_nil(cluster.node_state(n):match("drain"), n .. ": " .. cluster.node_state(n) .. " "
        .. cluster.node_reason(n) .. "\n" .. cluster.log_of(n))
    end
    os.remove(on)
  end)

  it("a broken node is drained with imexguard's reason, and resumed once healthy", function()
    assert.is_true(cluster.reset())
    -- the whole rack healthy again (the last test's job moved n1 and n2 to a list of their own)
    -- IMEX keeps a node-map mismatch until both ends restart (C32): stop every daemon, then start
    -- them with one list, as AWS's guide says (a rolling restart leaves the first ones blocked)
    for _, n in ipairs(all) do
      d:write_node_list(n, all)
      assert(d:systemctl("stop", d:unit(n)))
    end
    assert(d:start(all))
    assert.truthy(rack_up(), "the rack is UP")
    -- n4's own fault: its daemon dies (a unit stopped on an idle node is no fault, C33)
    assert(d:systemctl("kill", "--signal=SIGKILL", d:unit("n4")))
    simdomain.write_file(on, "")
    local drained = simdomain.wait_until(function()
      local s = cluster.node_state("n4")
      return s:match("drain") and s
    end, 30, 0.2)
    assert.truthy(drained, "n4 drained, is " .. cluster.node_state("n4"))
    assert.matches("^imexguard: ", cluster.node_reason("n4"))
    -- healthy again: its daemon back; the health check resumes the node it drained
    assert(d:start { "n4" })
    local resumed = simdomain.wait_until(function()
      return cluster.node_state("n4") == "idle"
    end, 30, 0.2)
    os.remove(on)
    assert.truthy(resumed, "n4 resumed, is " .. cluster.node_state("n4") .. " " .. cluster.node_reason("n4"))
  end)
end)
