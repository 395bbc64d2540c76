-- SPDX-License-Identifier: Apache-2.0
-- Integration: the prolog's fast path on a simulated 2-node domain under a real systemd user
-- manager (tests/with-systemd): the staleness probe's ctl runs during the unit query under the lock
-- (host.spawn, docs/design.md step 5), and --timing accounts for every part of the run.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

-- The --timing lines of a run's output: name -> {ms =, calls =}.
local function timing(output)
  local t = {}
  for name, ms, rest in output:gmatch("timing: (%S+) ([%d.]+) %S+([^\n]*)") do
    t[name] = { ms = tonumber(ms), calls = tonumber(rest:match("(%d+) calls?")) }
  end
  return t
end

describe("the fast path on a simulated domain under systemd", function()
  local d

  setup(function()
    d = simdomain.new { nodes = 2 }
    d:write_node_list("n1", { "n1", "n2" })
    d:write_node_list("n2", { "n1", "n2" })
    assert(d:start())
    -- the first job makes the state files know the running daemons
    for n, r in pairs(d:prologs { job = 1, nodelist = "n[1-2]" }) do
      assert.are.equal("ok", r.outcome, n .. ": " .. r.output)
    end
  end)

  teardown(function()
    if d then d:destroy() end
  end)

  it("starts the ctl before the unit query under the lock, waits after: one ctl, no restart", function()
    local inv = d:invocation("n1")
    local r = d:prologs { job = 2, nodelist = "n[1-2]", names = { "n1" }, args = "--timing" }
    r = r.n1
    assert.are.equal(0, r.status, r.output)
    assert.are.equal("ok", r.outcome, r.output)
    assert.matches("node list unchanged", r.output)
    assert.are.equal(inv, d:invocation("n1"))
    local t = timing(r.output)
    assert.are.equal(1, t["host.spawn"] and t["host.spawn"].calls, r.output)
    assert.are.equal(1, t["host.spawn:wait"] and t["host.spawn:wait"].calls, r.output)
    assert.is_nil(t["host.run"], r.output) -- the ctl is the only command of the fast path
    assert.are.equal(2, t["host.unit"].calls)
    -- the D-Bus connection: a part of the first unit query's time, not counted twice
    assert.are.equal(1, t["bus.connect"].calls)
    assert.is_true(t["bus.connect"].ms <= t["host.unit"].ms, r.output)
    local phases, slots = 0, 0
    for _, p in ipairs { "lua-state", "load-driver", "settings", "prepare", "invoke", "finish", "close" } do
      phases = phases + t[p].ms
    end
    for name, x in pairs(t) do
      if x.calls and name ~= "bus.connect" then slots = slots + x.ms end
    end
    assert.near(t.total.ms, phases, 0.01)
    -- in-lua is what the driver's phases spent outside every slot (lua-state and close hold none)
    assert.near(phases - t["lua-state"].ms - t.close.ms - slots, t["in-lua"].ms, 0.05)
  end)
end)
