-- SPDX-License-Identifier: Apache-2.0
-- When the batch script starts (Slurm 26.05, switch/nvidia_imex, topology/block with blocks
-- b1 = n[1-2], b2 = n[3-4], imexguard as the prolog with domain_map = "auto": one IMEX domain per
-- block). A 4-node job whose prolog on n3 is late (a hook before imexguard waits for the batch
-- script, a few seconds at most): with PrologFlags=Alloc the batch script starts on n1 once n1's
-- prolog is done, while n3's still runs, so b2's domain may not be up yet; with
-- PrologFlags=DeferBatch (which 26.05 completes to Alloc,DeferBatch) it starts only after every
-- node's prolog, with every block's domain UP. README's slurm.conf advice rests on this.
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

describe("Slurm 26.05 PrologFlags and the batch script's start", function()
  local d
  local root = cluster.root

  -- n3's hook: waits up to WAIT seconds for the batch script's mark, then says whether it saw it.
  local function late_n3(wait)
    cluster.hook("prolog", string.format([[
[ "$SLURMD_NODENAME" = n3 ] || exit 0
i=0
while [ $i -lt %d ] && [ ! -e %s/started-$SLURM_JOB_ID ]; do sleep 0.1; i=$((i + 1)); done
if [ -e %s/started-$SLURM_JOB_ID ]; then echo saw; else echo timeout; fi >%s/hook-n3-$SLURM_JOB_ID]],
      wait * 10, root, root, root))
  end

  -- The batch script: marks its start, then notes whether n3's prolog had ended and n3's domain.
  local function batch()
    local id = cluster.sbatch("-N4", string.format([[
touch %s/started-$SLURM_JOB_ID
grep -c "prolog job=$SLURM_JOB_ID outcome=" %s/imexguard-n3.log >%s/n3done-$SLURM_JOB_ID
%s/nvidia-imex-ctl -c %s/n3/config.cfg -N -j >%s/ctl-n3-$SLURM_JOB_ID.json]],
      root, cluster.logdir, root, d.build, cluster.simroot, root))
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id) .. cluster.log_of("n3"))
    return id
  end

  setup(function()
    d = cluster.domain { "health_timeout = 20", 'domain_map = "auto"' }
    for _, n in ipairs(cluster.nodes) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    cluster.hook("prolog", nil)
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("Alloc alone: the batch script starts while n3's prolog still runs", function()
    local _, conf = cluster.sh("scontrol show config")
    assert.truthy(conf:match("\nPrologFlags%s+= Alloc\n"), conf)
    late_n3(30)
    local id = batch()
    assert.are.equal("saw\n", simdomain.read_file(root .. "/hook-n3-" .. id))
    -- n3's prolog goes on after the script: its outcome comes later
    assert.truthy(simdomain.wait_until(function() return cluster.outcomes("n3", id)[1] end, 30, 0.2))
    for _, n in ipairs(cluster.nodes) do
      assert.are.same({ "ok" }, cluster.outcomes(n, id), cluster.log_of(n))
    end
  end)

  it("DeferBatch: it starts after every prolog, with every block's domain UP", function()
    local restore, ok, err = cluster.reconfigure {
      ["slurm.conf"] = function(text)
        return (text:gsub("\nPrologFlags=Alloc\n", "\nPrologFlags=DeferBatch\n"))
      end,
    }
    local _, conf = cluster.sh("scontrol show config")
    local id
    if ok then
      late_n3(3)
      id = batch()
    end
    cluster.hook("prolog", nil)
    assert(restore())
    assert(ok, err)
    assert.truthy(conf:match("\nPrologFlags%s+= Alloc,DeferBatch\n"), "DeferBatch implies Alloc: " .. conf)
    assert.are.equal("timeout\n", simdomain.read_file(root .. "/hook-n3-" .. id))
    assert.are.equal("1\n", simdomain.read_file(root .. "/n3done-" .. id), "n3's prolog had ended")
    local ctl = simdomain.read_file(root .. "/ctl-n3-" .. id .. ".json")
    assert.is_string(ctl, "the batch script wrote n3's domain")
    assert.are.equal("UP", require("cjson").decode(ctl).status)
    for _, n in ipairs(cluster.nodes) do
      assert.are.same({ "ok" }, cluster.outcomes(n, id), cluster.log_of(n))
    end
  end)
end)
