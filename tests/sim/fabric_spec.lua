-- SPDX-License-Identifier: Apache-2.0
-- The GPUs' NVLink fabric (field cases C31, C41, C42, C43 of docs/design.md) on the simulator under a
-- real systemd user manager (tests/with-systemd; contrib/simdomain.lua): each node's nvidia-smi is
-- the simulator's (contrib/imexsim/nvidia-smi), answering `-q -x` from the node's `gpus` file and
-- failing as NVML does when the node's stand-in for /proc/driver/nvidia/version names another
-- driver. The imexguard binary runs the prologs (every prolog of a job at once, as Slurm starts
-- them) and health checks of 2-node jobs; a node whose GPUs are not on the fabric, or whose NVML
-- cannot start, is at fault (exit 16, 21) and its peer is not blamed; an HGX node (no multi-node
-- NVLink) and a degraded fabric run the job. Every unit is stopped in after_each.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

local U = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
local V = "dc6e40c4-d722-4357-9ba6-5291dd461278"
local ZERO = "00000000-0000-0000-0000-000000000000"

-- A tray of 4 GPUs registered in partition U.32766; `over` = {[index] = line after "i, "}.
local function tray(over)
  local lines = {}
  for i = 0, 3 do
    lines[#lines + 1] = i .. ", " .. ((over or {})[i] or ("Completed, Success, " .. U .. ", 32766"))
  end
  return lines
end

local function count(text, needle)
  local n, at = 0, 1
  while true do
    local s, e = text:find(needle, at, true)
    if not s then return n end
    n, at = n + 1, e + 1
  end
end

describe("imexsim under systemd: the NVLink fabric (C31)", function()
  local d

  local function domain(settings)
    d = simdomain.new({ nodes = 2, fabric = true, extra_cfg = simdomain.FAST_RECONNECT, settings = settings })
    d:set_gpus("n1", tray())
    d:set_gpus("n2", tray())
    d:write_node_list("n1", { "n1", "n2" })
    d:write_node_list("n2", { "n1", "n2" })
    assert(d:start())
    return d
  end

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  it("(a) GPU 2 In Progress for 3 s, then Completed: the prolog waits and ends ok on both nodes", function()
    domain()
    d:set_gpus("n1", tray({ [2] = string.format("In Progress, N/A, N/A, N/A; until %d: Completed, Success, "
      .. "%s, 32766", os.time() + 3, U) }))
    local t0 = os.time()
    local r = d:prologs({ job = 11, nodelist = "n[1-2]" })
    assert.equal(0, r.n1.status, r.n1.output)
    assert.equal("ok", r.n1.outcome, r.n1.output)
    assert.matches("after waiting", r.n1.output, 1, true)
    assert.is_true(os.time() - t0 >= 2, "n1 waited for GPU 2")
    assert.equal(0, r.n2.status, r.n2.output)
  end)

  it("(a') GPU 2 In Progress past fabric_timeout: fabric-fault (16) naming GPU 2 on n1 only", function()
    domain({ "fabric_timeout = 1" })
    d:set_gpus("n1", tray({ [2] = "In Progress, N/A, N/A, N/A" }))
    local r = d:prologs({ job = 12, nodelist = "n[1-2]" })
    assert.equal(16, r.n1.status, r.n1.output)
    assert.equal("fabric-fault", r.n1.outcome)
    assert.matches("GPU 2 In Progress", r.n1.output, 1, true)
    assert.equal(0, r.n2.status, r.n2.output)
  end)

  it("(b) n1's GPU 1 Completed, Insufficient Resources: n1 fabric-fault, n2 ok (not blamed)", function()
    domain()
    d:set_gpus("n1", tray({ [1] = "Completed, Insufficient Resources, " .. ZERO .. ", 0" }))
    local r = d:prologs({ job = 13, nodelist = "n[1-2]" })
    assert.equal(16, r.n1.status, r.n1.output)
    assert.matches("GPU 1:", r.n1.output, 1, true)
    assert.matches("Insufficient Resources", r.n1.output, 1, true)
    assert.equal(0, r.n2.status, r.n2.output)
    assert.equal("ok", r.n2.outcome, r.n2.output)
    -- the health check says the same, changing nothing
    local h = d:run_all({ job = 13, nodelist = "n[1-2]", command = "health", names = { "n1" } })
    assert.equal(16, h.n1.status, h.n1.output)
    assert.matches("imexguard: fabric-fault: ", h.n1.output, 1, true)
  end)

  it("(c) n2's GPU 3 in another CliqueId, or another ClusterUUID: n2 fabric-fault naming GPU 3", function()
    domain()
    d:set_gpus("n2", tray({ [3] = "Completed, Success, " .. U .. ", 4026" }))
    local r = d:prologs({ job = 14, nodelist = "n[1-2]" })
    assert.equal(0, r.n1.status, r.n1.output)
    assert.equal(16, r.n2.status, r.n2.output)
    assert.matches("GPU 3:", r.n2.output, 1, true)
    assert.matches("CliqueId 4026", r.n2.output, 1, true)
    d:set_gpus("n2", tray({ [3] = "Completed, Success, " .. V .. ", 32766" }))
    r = d:prologs({ job = 15, nodelist = "n[1-2]", names = { "n2" } })
    assert.equal(16, r.n2.status, r.n2.output)
    assert.matches(V, r.n2.output, 1, true)
  end)

  it("(d) every GPU N/A: no fabric check, said once; ok", function()
    domain()
    local na = {}
    for i = 0, 3 do na[#na + 1] = i .. ", N/A, N/A, N/A, N/A" end
    d:set_gpus("n1", na)
    d:set_gpus("n2", na)
    local r = d:prologs({ job = 16, nodelist = "n[1-2]" })
    for _, n in ipairs({ "n1", "n2" }) do
      assert.equal(0, r[n].status, r[n].output)
      assert.equal(1, count(r[n].output, "no multi-node NVLink"), r[n].output)
    end
  end)

  it("(e) nvidia-smi absent, failing or hanging: skipped with a warning; fabric-unknown (17) with "
    .. "on_fabric_unknown = fail, never a hang", function()
      domain()
      -- absent (a path that does not exist) and failing (no driver: the file is missing, exit 9)
      local r = d:prologs({ job = 17, nodelist = "n[1-2]",
        args = "--set nvidia_smi=/nonexistent/nvidia-smi" })
      assert.equal(0, r.n1.status, r.n1.output)
      assert.matches("warning: .*fabric registration unknown", r.n1.output)
      os.remove(d:dir("n2") .. "/gpus")
      r = d:prologs({ job = 18, nodelist = "n[1-2]", args = "--set on_fabric_unknown=fail" })
      assert.equal(0, r.n1.status, r.n1.output)
      assert.equal(17, r.n2.status, r.n2.output)
      assert.matches("exited 9", r.n2.output, 1, true)
      -- hanging: one call, cut at its 10 s timeout, then the named outcome
      d:set_gpus("n2", { "hang" })
      local t0 = os.time()
      r = d:prologs({ job = 19, nodelist = "n[1-2]", names = { "n2" },
        args = "--set on_fabric_unknown=fail" })
      assert.equal(17, r.n2.status, r.n2.output)
      assert.matches("hung", r.n2.output, 1, true)
      assert.is_true(os.time() - t0 <= 15)
    end)
end)

describe("imexsim under systemd: HGX nodes, the fabric's health, NVML (C41, C42, C43)", function()
  local d

  local function domain(settings)
    d = simdomain.new({ nodes = 2, fabric = true, extra_cfg = simdomain.FAST_RECONNECT, settings = settings })
    d:set_gpus("n1", tray())
    d:set_gpus("n2", tray())
    d:write_node_list("n1", { "n1", "n2" })
    d:write_node_list("n2", { "n1", "n2" })
    assert(d:start())
    return d
  end

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  it("C41: two HGX boards (8 GPUs, zero ClusterUUID): ok on both, no fabric check said once each; health "
    .. "and status ok", function()
      domain()
      d:set_gpus("n1", simdomain.gpu_lines("hgx", 8))
      d:set_gpus("n2", simdomain.gpu_lines("hgx", 8))
      local r = d:prologs({ job = 41, nodelist = "n[1-2]" })
      for _, n in ipairs({ "n1", "n2" }) do
        assert.equal(0, r[n].status, r[n].output)
        assert.equal("ok", r[n].outcome, r[n].output)
        assert.equal(1, count(r[n].output, "no multi-node NVLink"), r[n].output)
      end
      local h = d:run_all({ job = 41, nodelist = "n[1-2]", command = "health" })
      assert.equal(0, h.n1.status, h.n1.output)
      h = d:run_all({ job = 41, nodelist = "n[1-2]", command = "status", names = { "n2" } })
      assert.equal(0, h.n2.status, h.n2.output)
      assert.matches("fabric +none: no multi%-node NVLink: all 8 GPUs registered with a zero ClusterUUID",
        h.n2.output)
    end)

  it("C41: an HGX board whose GPUs stay Not Started is not waited for; a zero ClusterUUID beside "
    .. "non-zero ones is n2's fabric-fault only", function()
      domain({ "fabric_timeout = 20" })
      d:set_gpus("n1", simdomain.gpu_lines("hgx-starting", 8))
      d:set_gpus("n2", tray({ [3] = "Completed, Success, " .. ZERO .. ", 0" }))
      local t0 = os.time()
      local r = d:prologs({ job = 42, nodelist = "n[1-2]" })
      assert.equal(0, r.n1.status, r.n1.output)
      assert.matches("not waited for: GPU 0 Not Started", r.n1.output, 1, true)
      assert.is_true(os.time() - t0 < 15, "n1 did not wait fabric_timeout")
      assert.equal(16, r.n2.status, r.n2.output)
      assert.matches("GPU 3:", r.n2.output, 1, true)
      assert.matches("zero ClusterUUID beside GPUs 0-2", r.n2.output, 1, true)
    end)

  it("C42: n1's GPU 1 Summary Unhealthy, Route Unhealthy True while registered: n1 fabric-fault naming "
    .. "the GPU and the fields, n2 ok (not blamed); health says the same", function()
      domain()
      local lines = tray()
      lines[#lines + 1] = "health 1 summary=Unhealthy, route_unhealthy=True"
      d:set_gpus("n1", lines)
      local r = d:prologs({ job = 43, nodelist = "n[1-2]" })
      assert.equal(16, r.n1.status, r.n1.output)
      assert.matches("GPU 1: fabric health Summary Unhealthy, Route Unhealthy True", r.n1.output, 1, true)
      assert.equal(0, r.n2.status, r.n2.output)
      assert.equal("ok", r.n2.outcome, r.n2.output)
      local h = d:run_all({ job = 43, nodelist = "n[1-2]", command = "health", names = { "n1" } })
      assert.equal(16, h.n1.status, h.n1.output)
      assert.matches("imexguard: fabric%-fault: .*GPU 1: fabric health Summary Unhealthy", h.n1.output)
    end)

  it("C42: an incorrect configuration is a fault; Limited Capacity and Degraded bandwidth run the job, "
    .. "named in the final line", function()
      domain()
      local bad = tray()
      bad[#bad + 1] = "health 0 incorrect_configuration=Insufficient NVLinks"
      d:set_gpus("n1", bad)
      local slow = tray()
      slow[#slow + 1] = "health 2 summary=Limited Capacity, bandwidth=Degraded"
      d:set_gpus("n2", slow)
      local r = d:prologs({ job = 44, nodelist = "n[1-2]" })
      assert.equal(16, r.n1.status, r.n1.output)
      assert.matches("GPU 0: fabric health Incorrect Configuration Insufficient NVLinks", r.n1.output, 1,
        true)
      assert.equal(0, r.n2.status, r.n2.output)
      assert.matches("outcome=ok: .*; degraded: GPU 2 Summary Limited Capacity, GPU 2 Bandwidth Degraded",
        r.n2.output)
    end)

  it("C43: n1's driver updated without a reboot (NVML mismatch): driver-mismatch (21) naming both "
    .. "versions with on_fabric_unknown = skip; n2 ok; status and health the same", function()
      domain()
      d:set_kernel_driver("n1", "580.95.05") -- the library (the `driver` line) is 580.105.08
      d:set_kernel_driver("n2", "580.105.08")
      local r = d:prologs({ job = 45, nodelist = "n[1-2]" })
      assert.equal(21, r.n1.status, r.n1.output)
      assert.equal("driver-mismatch", r.n1.outcome, r.n1.output)
      assert.matches("kernel module 580.95.05", r.n1.output, 1, true)
      assert.matches("NVML library 580.105", r.n1.output, 1, true)
      assert.equal(0, r.n2.status, r.n2.output)
      for _, cmd in ipairs({ "health", "status" }) do
        local h = d:run_all({ job = 45, nodelist = "n[1-2]", command = cmd, names = { "n1" } })
        assert.equal(21, h.n1.status, cmd .. ": " .. h.n1.output)
      end
    end)
end)
