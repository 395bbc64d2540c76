-- SPDX-License-Identifier: Apache-2.0
-- imexguard.pace: when the health wait polls next.
local pace = require("imexguard.pace")

describe("imexguard.pace", function()
  it("polls a tenth of poll_interval after a change while the bucket holds a token", function()
    local p = pace.new(0.25, 0)
    p.tokens = 3
    p:polled(1, 1, "a")
    assert.near(0.025, p:delay(1), 1e-9)
  end)

  it("spaces polls out while the answer stays the same, up to twice poll_interval", function()
    local p = pace.new(0.25, 0)
    p:polled(0, 0, "a")
    local t, gaps = 0, {}
    for i = 1, 30 do
      t = t + p:delay(t)
      p:polled(t, t, "a")
      gaps[i] = p:delay(t)
    end
    for i = 2, #gaps do assert.is_true(gaps[i] >= gaps[i - 1] - 1e-9) end
    assert.near(0.5, gaps[#gaps], 1e-9)
  end)

  it("never polls more often than poll_interval + the mean ctl call, plus BURST", function()
    local rng = 12345
    local function random() rng = (rng * 1103515245 + 12345) % 2147483648 return rng / 2147483648 end
    for _, change in ipairs { 0, 0.3, 1 } do
      local p = pace.new(0.1, 0)
      local t, calls, took = 0, 0, 0.02
      while t < 60 do
        t = t + p:delay(t)
        local started = t
        t = t + took
        calls = calls + 1
        p:polled(started, t, random() < change and random() or "same")
        -- over every prefix [0, t] of the wait
        assert.is_true(calls <= 1 + pace.BURST + t / (0.1 + took), "calls " .. calls .. " at " .. t)
      end
      if change == 1 then assert.is_true(calls >= 60 / (0.1 + took) - 1) end
    end
  end)

  it("counts the ctl call's own time in the refill period", function()
    local p = pace.new(0.1, 0)
    p:polled(0, 0.05, "a")
    assert.near(0.15, p:period(), 1e-9)
    -- half a token left (the start's token, half a token refilled during the call, one spent):
    -- the other half takes half a period
    assert.near(0.075, p:delay(0.05), 1e-9)
  end)
end)

describe("imexguard.pace: expect_change", function()
  it("after a nudge the next poll is due a tenth of poll_interval later, as after a change", function()
    local p = pace.new(0.25, 0)
    p.tokens = 3
    p:polled(0, 0, "a")
    for t = 1, 4 do p:polled(t, t, "a") end
    assert.near(0.5, p:delay(4), 1e-9) -- unchanged for 4 s: twice poll_interval
    p:expect_change(4)
    assert.near(0.025, p:delay(4), 1e-9)
    -- the same answer after it: the gap grows again from the nudge, not from the last change
    p:polled(4.1, 4.1, "a")
    assert.near(0.05, p:delay(4.1), 1e-9)
  end)

  it("the bucket still bounds the polls", function()
    local p = pace.new(0.25, 0)
    p:polled(0, 0, "a")
    p:expect_change(0)
    assert.is_true(p:delay(0) >= 0.25 - 1e-9) -- the one token is spent
  end)
end)
