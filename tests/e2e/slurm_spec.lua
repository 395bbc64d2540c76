-- SPDX-License-Identifier: Apache-2.0
-- End to end under a real Slurm (tests/e2e/run: munged, slurmctld, four slurmd -N nK with
-- PrologFlags=Alloc and Prolog=/Epilog= running build/imexguard), each Slurm node mapped to one
-- simulated IMEX node of contrib/imexsim under the private systemd user manager. Both end-to-end
-- tiers run it: e2e under Debian 12's Slurm 22.05, slurm24 under Debian 13's 24.11 (tests/slurm24).
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")
local cjson = require("cjson")
local cluster = require("tests.e2e.cluster")

local q = simdomain.quote
local root, simroot, logdir = cluster.root, cluster.simroot, cluster.logdir
local sh, node_state, node_reason = cluster.sh, cluster.node_state, cluster.node_reason
local sbatch, wait_job, log_of, outcomes = cluster.sbatch, cluster.wait_job, cluster.log_of, cluster.outcomes

describe("imexguard as the Slurm prolog", function()
  local d
  local all = { "n1", "n2", "n3", "n4" }

  setup(function()
    -- drain_reason: a failed prolog drains its node with imexguard's reason; scontrol finds this
    -- private cluster through SLURM_CONF (slurmd does not pass it to the prolog)
    local scontrol = cluster.scontrol_setting()
    -- the simulator's old rule for node-map mismatches (either end's restart clears one): these specs
    -- count the restarts of a list change; with its default (C32: both ends must restart) a job's
    -- prologs that restart at once may see a stale mismatch and restart once more
    d = simdomain.new { nodes = 4, root = simroot, extra_cfg = simdomain.MISMATCH_CLEARS_ONE,
      -- one IMEX domain over n[1-4] (the Slurm 24.11 tier's topology.conf has two blocks, which
      -- tests/slurm24/block_spec.lua and tests/e2e/domains_spec.lua judge)
      settings = { "health_timeout = 8", "drain_reason = true", scontrol, 'domain_map = "none"' } }
    for _, n in ipairs(all) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("a 4-node job: every prolog succeeds and a step reads UP from the ctl", function()
    local id = sbatch("-N4", "srun -N4 sh -c '" .. d.build .. "/nvidia-imex-ctl -c " .. simroot
      .. "/$SLURMD_NODENAME/config.cfg -N -j > " .. root .. "/ctl-$SLURM_JOB_ID-$SLURMD_NODENAME.json'")
    assert.are.equal("COMPLETED", wait_job(id), cluster.job_output(id) .. cluster.log_of("n1"))
    for _, n in ipairs(all) do
      assert.are.same({ "ok" }, outcomes(n, id))
      local text = simdomain.read_file(root .. "/ctl-" .. id .. "-" .. n .. ".json")
      assert.is_string(text, "the step wrote the ctl's answer on " .. n)
      local dom = cjson.decode(text)
      assert.are.equal("UP", dom.status)
      assert.are.equal("idle", node_state(n))
    end
  end)

  it("then a 2-node job: only the daemons whose list changed restart", function()
    local before = {}
    for _, n in ipairs(all) do before[n] = d:starts(n) end
    local id = sbatch("-N2 -w n[1-2]", "true")
    assert.are.equal("COMPLETED", wait_job(id))
    assert.are.same({ "ok" }, outcomes("n1", id))
    assert.are.same({ "ok" }, outcomes("n2", id))
    assert.are.equal(before.n1 + 1, d:starts("n1"))
    assert.are.equal(before.n2 + 1, d:starts("n2"))
    assert.are.equal(before.n3, d:starts("n3"))
    assert.are.equal(before.n4, d:starts("n4"))
    assert.truthy(log_of("n1"):match("restart"), "the log says why n1 restarted")
  end)

  it("two 2-node jobs at once on disjoint nodes: both healthy, no cross-talk", function()
    local a = sbatch("-N2 -w n[1-2]", "sleep 1")
    local b = sbatch("-N2 -w n[3-4]", "sleep 1")
    assert.are.equal("COMPLETED", wait_job(a))
    assert.are.equal("COMPLETED", wait_job(b))
    assert.are.equal(d:nodes_file("n1"), d:nodes_file("n2"))
    assert.are.equal(d:nodes_file("n3"), d:nodes_file("n4"))
    assert.are.equal(d.addr.n1 .. "\n" .. d.addr.n2 .. "\n", d:nodes_file("n1"))
    assert.are.equal(d.addr.n3 .. "\n" .. d.addr.n4 .. "\n", d:nodes_file("n3"))
    for _, n in ipairs(all) do assert.are.equal("UP", (assert(d:ctl_json(n))).status) end
  end)

  it("a node whose daemon never becomes READY is drained with imexguard's reason, its peers are not",
    function()
    -- n4's simulated daemon comes up but never reaches READY (fault knob of contrib/imexsim).
    local cfg = d:dir("n4") .. "/config.cfg"
    simdomain.write_file(cfg, simdomain.read_file(cfg) .. "IMEXSIM_NEVER_READY=1\n")
    d:write_node_list("n4", { "n4" }) -- stale: forces a restart that reads the knob
    local id = sbatch("-N2 -w n[3-4]", "true")
    local drained = simdomain.wait_until(function()
      local s = node_state("n4")
      return (s == "drained" or s == "draining") and s
    end, 90, 0.2)
    assert.truthy(drained, "n4 must be drained, is " .. node_state("n4"))
    assert.truthy(log_of("n4"):match("outcome=domain%-unhealthy"), log_of("n4"))
    -- sinfo -R shows imexguard's reason, not Slurm's own "Prolog error" (drain_reason), also after
    -- slurmctld has handled the prolog's failure (its log line, "Prolog launch failure" or
    -- "Requeuing JobId", comes after our update_node line)
    local function ctld_handled()
      local log = simdomain.read_file(logdir .. "/slurmctld.log") or ""
      return log:find("Prolog launch failure, JobId=" .. id .. "\n", 1, true)
        or log:find("Requeuing JobId=" .. id .. "\n", 1, true)
    end
    assert.truthy(simdomain.wait_until(ctld_handled, 30, 0.2), "slurmctld handled the prolog failure")
    local reason
    simdomain.wait_until(function()
      local _, out = sh("sinfo -R -h -n n4 -o '%E'")
      reason = out:gsub("%s+$", "")
      return reason:match("^imexguard: ")
    end, 20, 0.2)
    assert.matches("^imexguard: domain%-unhealthy: ", reason)
    assert.matches("^imexguard: domain%-unhealthy: ", node_reason("n4"))
    assert.truthy(log_of("n4"):find("drained with reason: imexguard: domain-unhealthy", 1, true),
      log_of("n4"))
    local s3 = node_state("n3")
    assert.is_nil(s3:match("drain"), "n3 must not be drained: " .. s3)
    sh("scancel " .. id)
    simdomain.write_file(cfg, (simdomain.read_file(cfg):gsub("IMEXSIM_NEVER_READY=1\n", "")))
    sh("scontrol update nodename=n4 state=resume")
  end)

  it("a prolog environment without a node list: bad-input and nothing rewritten", function()
    -- Slurm always sets SLURM_NODELIST; run the installed prolog wrapper as slurmd would, minus it.
    local before_file, before_inv = d:nodes_file("n1"), d:invocation("n1")
    local ok, out = sh(cluster.in_root .. "env -i SLURMD_NODENAME=n1 SLURM_JOB_ID=999 "
      .. "SLURM_SCRIPT_CONTEXT=prolog_slurmd " .. q(root .. "/prolog.sh") .. "; echo rc=$?")
    assert.is_true(ok)
    assert.truthy(out:match("rc=2"), out)
    assert.truthy(log_of("n1"):match("job=999 outcome=bad%-input"), log_of("n1"))
    assert.are.equal(before_file, d:nodes_file("n1"))
    assert.are.equal(before_inv, d:invocation("n1"))
  end)
end)
