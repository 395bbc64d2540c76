-- SPDX-License-Identifier: Apache-2.0
-- Slurm's switch/nvidia_imex, 24.11 and later (tests/slurm24/run, tests/slurm26/run: SwitchType in an
-- Included switch.conf, SwitchParameters=imex_dev_major=238, active without a driver on the root's own
-- /dev): under the static policy (policies/static_domain.lua), imexguard never makes a shared channel
-- 0, even with imex_channels = "channel0" and a /proc/devices that names the channel major; a step of
-- the job sees the one channel the plugin made for the job (channel 1 and up; 0 is never handed out),
-- in the step's own mount namespace.
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

describe("Slurm " .. cluster.slurm .. " switch/nvidia_imex under the static policy", function()
  local d
  local all = cluster.nodes
  local top = os.getenv("PWD")
  local chan_dir = cluster.chroot .. "/dev/nvidia-caps-imex-channels"

  setup(function()
    d = cluster.domain { "health_timeout = 8",
      string.format("policy = %q", top .. "/policies/static_domain.lua"),
      'imex_channels = "channel0"',
      string.format("proc_devices = %q", top .. "/tests/fixtures/proc/devices-gb200.txt"),
      string.format("slurm_conf = %q", assert(os.getenv("SLURM_CONF"))) }
    -- the static list: the whole rack, written once
    for _, n in ipairs(all) do d:write_node_list(n, all) end
    assert(d:start())
  end)

  teardown(function()
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("no shared channel 0; each step sees the job's own channel", function()
    local before = {}
    for _, n in ipairs(all) do before[n] = d:starts(n) end
    local out = cluster.root .. "/chan-%s-%s"
    local id = cluster.sbatch("-N4", "srun -N4 sh -c 'ls /dev/nvidia-caps-imex-channels > "
      .. out:format("$SLURM_JOB_ID", "$SLURMD_NODENAME") .. "'")
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id))
    local channel
    for _, n in ipairs(all) do
      assert.are.same({ "ok" }, cluster.outcomes(n, id), cluster.log_of(n))
      local seen = simdomain.read_file(out:format(id, n))
      assert.is_string(seen, "the step wrote what it sees on " .. n)
      local ch = seen:match("^channel(%d+)\n$")
      assert.truthy(ch, "one channel in the step on " .. n .. ": " .. seen)
      assert.is_true(tonumber(ch) >= 1, "the plugin's channel, not channel 0")
      channel = channel or ch
      assert.are.equal(channel, ch, "one channel for the whole job")
      -- static: nothing rewritten, nothing restarted
      assert.are.equal(before[n], d:starts(n))
    end
    -- outside the steps: the plugin's empty directory, and no channel 0 from imexguard
    assert.is_true(cluster.exists(chan_dir .. "/."), chan_dir .. " is a directory")
    assert.is_false(cluster.exists(chan_dir .. "/channel0"), "no shared channel 0")
  end)
end)
