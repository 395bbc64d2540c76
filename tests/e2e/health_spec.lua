-- SPDX-License-Identifier: Apache-2.0
-- contrib/slurm/health.sh (Slurm's HealthCheckProgram) against a real slurmctld (tests/e2e/run):
-- the real `scontrol show node` output is read, an unhealthy node is drained with imexguard's line
-- as its reason (`sinfo -R`), resumed once healthy, and a node an admin drained stays drained.
-- `imexguard health` is a stand-in here (a script that prints a line and exits as told): what the
-- real one answers is shown by the integration tier and the demo; this is about Slurm's side.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

local q = simdomain.quote
local root = assert(os.getenv("IMEXGUARD_E2E_ROOT"), "run through tests/e2e/run")

local function sh(cmd)
  local ok, out = simdomain.capture(cmd)
  return ok, out
end

local function state(n)
  local _, out = sh("sinfo -h -n " .. n .. " -o %T")
  return (out:gsub("%s+$", ""))
end

local function reason(n)
  local _, out = sh("sinfo -h -R -n " .. n .. " -o %E")
  return (out:gsub("%s+$", ""))
end

--- Run health.sh on node `n` with a stand-in `imexguard health` that exits `rc` after printing
-- `line` (nil: nothing); returns health.sh's exit status.
local function health_sh(n, rc, line)
  local ig = root .. "/fake-imexguard-health"
  simdomain.write_file(ig, "#!/bin/sh\n" .. (line and ("echo " .. q(line) .. "\n") or "")
    .. "exit " .. rc .. "\n")
  os.execute("chmod 0755 " .. q(ig))
  local _, _, status = simdomain.capture(string.format("env SLURMD_NODENAME=%s IMEXGUARD=%s "
    .. "sh contrib/slurm/health.sh", n, q(ig)))
  return status
end

describe("contrib/slurm/health.sh under a real slurmctld", function()
  teardown(function()
    -- leave the cluster as the other specs expect it: four idle nodes, no job
    assert.is_true(require("tests.e2e.cluster").reset(), "the cluster did not come back to 4 idle nodes")
  end)

  it("drains an unhealthy node with imexguard's line, resumes it once healthy", function()
    assert.equal("idle", state("n3"))
    local line = "imexguard: domain-unhealthy: this node n3 is not healthy (e2e)"
    assert.equal(9, health_sh("n3", 9, line))
    assert.truthy(simdomain.wait_until(function() return state("n3"):match("drain") end, 30, 0.2),
      state("n3"))
    assert.equal(line, reason("n3"))
    assert.equal(0, health_sh("n3", 0))
    assert.truthy(simdomain.wait_until(function() return state("n3") == "idle" end, 30, 0.2), state("n3"))
    assert.equal("", reason("n3"))
  end)

  it("leaves a node drained by the admin as it is, healthy or not", function()
    assert(sh("scontrol update nodename=n3 state=drain reason='maintenance: e2e'"))
    assert.truthy(simdomain.wait_until(function() return state("n3"):match("drain") end, 30, 0.2))
    assert.equal(0, health_sh("n3", 0))
    assert.equal(9, health_sh("n3", 9, "imexguard: domain-unhealthy: x"))
    assert.matches("drain", state("n3"))
    assert.equal("maintenance: e2e", reason("n3"))
  end)
end)
