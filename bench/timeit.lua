-- SPDX-License-Identifier: Apache-2.0
--- bench/timeit.lua: time one shell command on the monotonic clock.
-- Usage: lua5.4 bench/timeit.lua BUILD_DIR 'SHELL COMMAND' [DONE_FILE]
-- Prints one line "START END STATUS" (and writes it to DONE_FILE when given, so that a caller can
-- see that the command ended without blocking): START and END are CLOCK_MONOTONIC seconds (imexguard's
-- host.now(), build/lua/imexguard/host.so), taken just before and just after os.execute (which
-- runs the command through /bin/sh -c); STATUS is the command's exit status (128+N for signal N).
-- The Lua start-up happens before START, so several timeit processes started at once measure
-- only their commands; comparable across processes because the clock is system-wide.
local build, cmd, done = arg[1], arg[2], arg[3]
assert(build and cmd, "usage: lua5.4 bench/timeit.lua BUILD_DIR 'SHELL COMMAND' [DONE_FILE]")
package.cpath = build .. "/lua/?.so;" .. package.cpath
local host = require("imexguard.host")

local t0 = host.now()
local ok, how, code = os.execute(cmd)
local t1 = host.now()
local status = (ok and 0) or (how == "signal" and 128 + code) or code or 1
local line = string.format("%.6f %.6f %d\n", t0, t1, status)
if done then
  local f = assert(io.open(done, "w"))
  f:write(line)
  f:close()
end
io.write(line)
