-- SPDX-License-Identifier: Apache-2.0
-- Clock and deadline (src/clock.c) through the Lua binding.
local H = require("helpers")
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

describe("host.localtime (issue 32 item 7: the local time a policy has without os.date)", function()
  local dir
  setup(function() dir = H.tmpdir() end)
  teardown(function() H.rmdir(dir) end)

  -- host.localtime(t) in a process whose TZ is `tz` (POSIX zone strings: no tzdata needed), as
  -- "year month day hour min sec wday yday isdst utc_offset zone".
  local function localtime(tz, t)
    local cmd = H.lua_cmd(dir, "localtime", [[
      local h = require("imexguard.host")
      local t = h.localtime(tonumber(arg[1]))
      print(t.year, t.month, t.day, t.hour, t.min, t.sec, t.wday, t.yday, t.isdst, t.utc_offset, t.zone)
    ]], tostring(t))
    return (H.sh("TZ=" .. tz .. " " .. cmd):gsub("\t", " "))
  end

  it("honours TZ: the same instant in UTC, at UTC+5 and in summer time (isdst)", function()
    local t = 1767225600 -- 2026-01-01T00:00:00Z, a Thursday
    assert.equal("2026 1 1 0 0 0 5 1 false 0 UTC", localtime("UTC0", t))
    assert.equal("2026 1 1 5 0 0 5 1 false 18000 XYZ", localtime("XYZ-5", t))
    assert.equal("2025 12 31 19 0 0 4 365 false -18000 EST", localtime("EST5EDT,M3.2.0,M11.1.0", t))
    -- 2026-07-01T12:00:00Z in central Europe: 14:00, summer time
    assert.equal("2026 7 1 14 0 0 4 182 true 7200 CEST", localtime("CET-1CEST,M3.5.0,M10.5.0/3", 1782907200))
  end)

  it("defaults to now; refuses what it cannot represent", function()
    local t = host.localtime()
    assert.is_true(math.abs(t.year - tonumber(os.date("%Y"))) <= 1)
    local v, msg, code = host.localtime(1e300)
    assert.is_nil(v)
    assert.equal("EOVERFLOW", code)
    assert.matches("not a representable time", msg)
    assert.has_error(function() host.localtime(0 / 0) end)
    assert.has_error(function() host.localtime(math.huge) end)
  end)

  it("the test kit's fake localtime agrees with the primitive (fixed zones, 2000 instants)", function()
    local clock = require("imexguard.testing.clock")
    local cmd = H.lua_cmd(dir, "many", [[
      local h = require("imexguard.host")
      local seed = tonumber(arg[1])
      for i = 1, 2000 do
        local t = (seed * i * 7919) % 9000000000 - 2000000000
        local x = h.localtime(t)
        print(t, x.year, x.month, x.day, x.hour, x.min, x.sec, x.wday, x.yday)
      end
    ]], "12345")
    for tz, off in pairs({ ["UTC0"] = 0, ["XYZ-5"] = 18000, ["ABC+9:30"] = -34200 }) do
      local out = H.sh("TZ=" .. tz .. " " .. cmd)
      local n = 0
      for line in out:gmatch("[^\n]+") do
        local f = {}
        for w in line:gmatch("%S+") do f[#f + 1] = tonumber(w) end
        local k = clock.localtime(f[1], off, "Z")
        assert.same({ f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9] },
          { k.year, k.month, k.day, k.hour, k.min, k.sec, k.wday, k.yday }, tz .. " at " .. f[1])
        n = n + 1
      end
      assert.equal(2000, n)
    end
  end)
end)
