-- SPDX-License-Identifier: Apache-2.0
-- The GPUs' NVLink fabric (field case C31 of docs/design.md) on the simulator under a real systemd
-- user manager (tests/with-systemd; contrib/simdomain.lua): each node's nvidia-smi is the
-- simulator's (contrib/imexsim/nvidia-smi), answering from the node's `gpus` file. The imexguard
-- binary runs the prologs and health checks of 2-node jobs; a node whose GPUs are not on the fabric
-- is at fault (exit 16) and its peer is not blamed. Every unit is stopped in after_each.
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
