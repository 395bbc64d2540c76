-- SPDX-License-Identifier: Apache-2.0
-- contrib/slurm/health.sh with Slurm 26.05's verdict (SlurmctldParameters=health_check_report:
-- SLURM_NODE_IS_HEALTHY in the health check's environment), under the real slurmd: a node slurmctld
-- calls healthy ("yes") costs no scontrol call when imexguard agrees, and is drained at once when it
-- does not; a node it calls unhealthy ("no": drained, down) is still asked for its reason, so that
-- only imexguard's own drains are resumed and an admin's reason is kept. Every scontrol call of
-- health.sh is logged by the tier (log/scontrol-health.log, "NODE ARGS...").
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

describe("Slurm 26.05: health.sh and slurmctld's verdict", function()
  local d
  local on = cluster.root .. "/health.on"
  local hlog = cluster.logdir .. "/health.log"
  local slog = cluster.logdir .. "/scontrol-health.log"

  -- The health runs of node N so far.
  local function runs(n)
    local c = 0
    for _ in (simdomain.read_file(hlog) or ""):gmatch("health " .. n .. " rc=") do c = c + 1 end
    return c
  end

  -- Wait for COUNT more health runs on each of NODES.
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

  -- health.sh's scontrol calls for node N since the log was emptied, in order.
  local function calls(n)
    local t = {}
    for line in (simdomain.read_file(slog) or ""):gmatch("[^\n]+") do
      local node, args = line:match("^(%S+) (.*)$")
      if node == n then t[#t + 1] = args end
    end
    return t
  end

  setup(function()
    d = cluster.domain { "health_timeout = 8", 'domain_map = "none"' }
    for _, n in ipairs(cluster.nodes) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    os.remove(on)
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("healthy nodes slurmctld calls healthy: not one scontrol call", function()
    os.remove(slog)
    local before = #(simdomain.read_file(hlog) or "")
    simdomain.write_file(on, "")
    assert.truthy(more_runs(cluster.nodes, 3), "three health runs on every node")
    os.remove(on)
    assert.are.equal("yes", cluster.parse_env(cluster.health_env_text("n1")).SLURM_NODE_IS_HEALTHY)
    assert.is_nil(simdomain.read_file(slog), simdomain.read_file(slog))
    local runs_here = (simdomain.read_file(hlog) or ""):sub(before + 1)
    assert.is_nil(runs_here:match("rc=[1-9]"), runs_here)
  end)

  it("an admin's drain: the reason is read and kept, also while imexguard finds a fault", function()
    local ok, out = cluster.sh("scontrol update NodeName=n2 State=DRAIN Reason=admin_verdict_spec")
    assert(ok, out)
    os.remove(slog)
    simdomain.write_file(on, "")
    assert.truthy(more_runs({ "n2" }, 2))
    -- a fault of n2's own: its daemon dies (a unit stopped on an idle node is no fault, C33)
    assert(d:systemctl("kill", "--signal=SIGKILL", d:unit("n2")))
    assert.truthy(more_runs({ "n2" }, 2))
    os.remove(on)
    local got = calls("n2")
    assert.is_true(#got >= 4, table.concat(got, "\n"))
    for _, c in ipairs(got) do assert.are.equal("show node n2", c) end
    assert.matches("^admin_verdict_spec", cluster.node_reason("n2"))
  end)

  it("slurmctld says yes, imexguard a fault: drained at once; fixed: resumed after reading its reason",
    function()
    -- n2's own fault: its daemon, started again, dies (a unit stopped on an idle node is no fault, C33)
    assert(d:start { "n2" })
    assert(d:systemctl("kill", "--signal=SIGKILL", d:unit("n2")))
    local ok, out = cluster.sh("scontrol update NodeName=n2 State=RESUME")
    assert(ok, out)
    assert.truthy(simdomain.wait_until(function() return cluster.node_state("n2") == "idle" end, 30, 0.2))
    os.remove(slog)
    simdomain.write_file(on, "")
    local drained = simdomain.wait_until(function() return cluster.node_state("n2"):match("drain") end, 30,
      0.2)
    local first = calls("n2")[1]
    assert(d:start { "n2" })
    local resumed = simdomain.wait_until(function() return cluster.node_state("n2") == "idle" end, 30, 0.2)
    os.remove(on)
    assert.truthy(drained, cluster.node_state("n2"))
    assert.matches("^update NodeName=n2 State=DRAIN Reason=imexguard: ", first)
    assert.truthy(resumed, cluster.node_state("n2") .. " " .. cluster.node_reason("n2"))
    local got = calls("n2")
    assert.are.same({ "show node n2", "update NodeName=n2 State=RESUME" }, { got[#got - 1], got[#got] })
  end)
end)
