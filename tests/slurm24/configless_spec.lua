-- SPDX-License-Identifier: Apache-2.0
-- Slurm configless, 24.11 and later (tests/slurm24/run, tests/slurm26/run:
-- SlurmctldParameters=enable_configless; n3 and n4 run `slurmd --conf-server`): slurmd keeps the
-- configuration in its spool's conf-cache and names it in the prolog's SLURM_CONF, and
-- SwitchType=switch/nvidia_imex is only in the Included switch.conf. With imex_channels = "channel0"
-- and no slurm_conf setting, the prolog must find the plugin there and make no shared channel 0 (C38).
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

describe("Slurm " .. cluster.slurm .. " configless, SwitchType in an Included file", function()
  local d
  local top = os.getenv("PWD")
  local chan0 = cluster.chroot .. "/dev/nvidia-caps-imex-channels/channel0"

  setup(function()
    d = cluster.domain { "health_timeout = 8", 'imex_channels = "channel0"',
      string.format("proc_devices = %q", top .. "/tests/fixtures/proc/devices-gb200.txt") }
    for _, n in ipairs(cluster.nodes) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    os.remove(chan0) -- a wrong channel 0 would outlive this spec
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("the configless nodes' prolog reads the conf-cache's Include and makes no channel 0", function()
    -- the premise: the conf-cache holds slurm.conf and the Included switch.conf
    local cache = cluster.root .. "/spool/n3/conf-cache"
    assert.truthy((simdomain.read_file(cache .. "/slurm.conf") or ""):match("\nInclude switch%.conf\n"))
    assert.truthy((simdomain.read_file(cache .. "/switch.conf") or ""):match("switch/nvidia_imex"))
    local id = cluster.sbatch("-N2 -w n[3-4]", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id))
    for _, n in ipairs { "n3", "n4" } do
      assert.are.same({ "ok" }, cluster.outcomes(n, id), cluster.log_of(n))
      assert.truthy(cluster.log_of(n):find("switch/nvidia_imex", 1, true), cluster.log_of(n))
    end
    assert.is_false(cluster.exists(chan0), "no shared channel 0 under switch/nvidia_imex")
  end)
end)
