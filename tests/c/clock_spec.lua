-- SPDX-License-Identifier: Apache-2.0
-- Clock and deadline (src/clock.c) through the Lua binding.
local H = require "helpers"
local host = H.host()

describe("host clock", function()
  after_each(function() host.set_deadline(0) end)

  it("now is monotonic seconds, wallclock is epoch seconds", function()
    local a = host.now()
    local b = host.now()
    assert.is_true(b >= a)
    assert.is_true(math.abs(host.wallclock() - os.time()) < 2)
    assert.equal("float", math.type(host.wallclock())) -- sub-second, not os.time()
  end)

  it("remaining is math.huge without a deadline and counts down with one", function()
    assert.equal(math.huge, host.remaining())
    assert.is_true(host.set_deadline(10))
    local r = host.remaining()
    assert.is_true(r <= 10 and r > 9.5, tostring(r))
    host.set_deadline(0)
    assert.equal(math.huge, host.remaining())
    host.set_deadline(math.huge)
    assert.equal(math.huge, host.remaining())
  end)

  it("sleeps the requested time on the monotonic clock", function()
    local t0 = host.now()
    assert.is_true(host.sleep(0.1))
    local took = host.now() - t0
    assert.is_true(took >= 0.1 and took < 0.3, "took " .. took)
    t0 = host.now()
    assert.is_true(host.sleep(-1))
    assert.is_true(host.sleep(0))
    assert.is_true(host.now() - t0 < 0.05)
  end)

  it("a sleep is cut at the deadline and says so", function()
    host.set_deadline(0.2)
    local t0 = host.now()
    local ok, msg, code = host.sleep(5)
    local took = host.now() - t0
    assert.is_nil(ok)
    assert.equal("deadline", code)
    assert.matches("sleep 5.000 s cut short", msg, 1, true)
    assert.is_true(took >= 0.19 and took < 0.4, "took " .. took)
    assert.equal(0, host.remaining())
    -- once the budget is gone, every sleep returns at once with "deadline"
    t0 = host.now()
    assert.equal("deadline", select(3, host.sleep(1)))
    assert.is_true(host.now() - t0 < 0.05)
  end)

  it("raises on misuse", function()
    assert.error(function() host.sleep("soon") end)
    assert.error(function() host.sleep(0 / 0) end)
    assert.error(function() host.set_deadline() end)
  end)

  it("has a version", function()
    assert.matches("^%d+%.%d+%.%d+", host.version)
  end)
end)
