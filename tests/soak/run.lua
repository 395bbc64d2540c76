-- SPDX-License-Identifier: Apache-2.0
--- The soak tier: counted evidence for imexguard's promises under fault injection and fuzzing.
--
--   lua5.4 tests/soak/run.lua [--long] [--only NAME,...]   (inside tests/with-systemd)
--
-- Each check prints one TAP line with what it counted, e.g.
-- "ok - torn reads: 10000 rewrites, 53211 reads, 0 torn". The short form (the default, run by
-- `make check` through `tests/run soak`) uses small counts; `--long` (`make soak`) the full
-- counts. Randomness comes from one seeded PRNG: the seed is printed ("# seed N") and
-- IMEXGUARD_SOAK_SEED=N replays a run; a failing input is printed as a "#" line.
-- The build is found through IMEXGUARD_BUILD (default "build"). Ends with "N passed, N failed".
package.path = "tests/soak/?.lua;lua/?.lua;lua/?/init.lua;tests/?.lua;contrib/?.lua;" .. package.path

local util = require("soakutil")

local long, only = false, nil
local i = 1
while arg[i] do
  if arg[i] == "--long" then
    long = true
  elseif arg[i] == "--only" and arg[i + 1] then
    only = {}
    for name in arg[i + 1]:gmatch("[^,]+") do only[name] = true end
    i = i + 1
  else
    io.stderr:write("usage: lua5.4 tests/soak/run.lua [--long] [--only torn,lock,fuzz,faults,kill]\n")
    os.exit(2)
  end
  i = i + 1
end

local seed = tonumber(os.getenv("IMEXGUARD_SOAK_SEED") or "") or util.fresh_seed()
math.randomseed(seed)
print(string.format("# soak %s form, seed %d (replay: IMEXGUARD_SOAK_SEED=%d)", long and "long" or "short",
  seed, seed))

local modules = { "torn", "lock", "fuzz", "faults", "kill" }
local t0 = util.now()
for _, name in ipairs(modules) do
  if not only or only[name] then
    local m = require("soak_" .. name)
    local t = util.now()
    local ok, err = xpcall(m.run, debug.traceback, util.tap, long)
    if not ok then util.tap(false, name .. ": raised: " .. tostring(err)) end
    print(string.format("# %s: %.1f s", name, util.now() - t))
  end
end
print(string.format("# soak: %.1f s", util.now() - t0))
print(string.format("%d passed, %d failed", util.passed, util.failed))
os.exit(util.failed == 0 and 0 or 1)
