-- SPDX-License-Identifier: Apache-2.0
--- Shared helpers of the soak tier (tests/soak): TAP lines with counts, shell, files, temp dirs,
-- the C module, helper processes and bounded waits. Nothing here touches anything outside temp dirs.
local M = { passed = 0, failed = 0 }

--- Quote one shell word.
function M.q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- Print one TAP line "ok - text" or "not ok - text" and count it.
-- @param ok boolean the result
-- @param text string what was counted
function M.tap(ok, text)
  text = tostring(text):gsub("\n", " | ")
  if ok then
    M.passed = M.passed + 1
    print("ok - " .. text)
  else
    M.failed = M.failed + 1
    print("not ok - " .. text)
  end
  io.stdout:flush()
end

--- Print a diagnostic "#" line (a failing input, a note).
function M.note(text)
  print("# " .. tostring(text):gsub("\n", "\n# "))
  io.stdout:flush()
end

--- Run a shell command; returns stdout (string) and the exit status (number).
function M.sh(cmd)
  local p = assert(io.popen(cmd .. "; echo \"__rc=$?\"", "r"))
  local out = p:read("a")
  p:close()
  local body, rc = out:match("^(.*)__rc=(%d+)\n$")
  return body or out, tonumber(rc)
end

function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

function M.write(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

--- Absolute build directory (IMEXGUARD_BUILD or "build").
function M.build()
  local b = os.getenv("IMEXGUARD_BUILD") or "build"
  if b:sub(1, 1) ~= "/" then b = (os.getenv("PWD") or ".") .. "/" .. b end
  return b
end

--- The C module imexguard.host of the build.
function M.host()
  local cp = M.build() .. "/lua/?.so"
  if not package.cpath:find(cp, 1, true) then package.cpath = cp .. ";" .. package.cpath end
  return require("imexguard.host")
end

--- Monotonic seconds (the C module's clock).
function M.now()
  return M.host().now()
end

--- A seed from the clock and the kernel's random UUID.
function M.fresh_seed()
  local u = M.read("/proc/sys/kernel/random/uuid") or ""
  local s = os.time()
  for i = 1, #u do s = (s * 31 + u:byte(i)) % 2147483647 end
  return s
end

--- A new temp dir (removed by rmdir).
function M.tmpdir(tag)
  local out = M.sh("mktemp -d /tmp/imexguard-soak-" .. (tag or "x") .. ".XXXXXX")
  return (out:gsub("%s+$", ""))
end

function M.rmdir(dir)
  if dir and dir:match("^/tmp/imexguard%-soak") then os.execute("rm -rf " .. M.q(dir)) end
end

--- Names in dir (ls -A).
function M.ls(dir)
  local out = M.sh("ls -A " .. M.q(dir) .. " 2>/dev/null")
  local t = {}
  for n in out:gmatch("[^\n]+") do t[#t + 1] = n end
  return t
end

--- Start `lua5.4 -e SCRIPT ARGS...` in the background, its stdout and stderr to `out`; returns its pid.
function M.spawn_lua(script, args, out)
  local words = {}
  for _, a in ipairs(args or {}) do words[#words + 1] = M.q(a) end
  local cmd = string.format("LUA_CPATH=%s lua5.4 -e %s /dev/null %s >%s 2>&1 & echo $!",
    M.q(M.build() .. "/lua/?.so;;"), M.q(script), table.concat(words, " "), M.q(out or "/dev/null"))
  local pid = tonumber((M.sh(cmd)))
  return assert(pid, "spawn failed")
end

--- Is the process alive (and not a zombie)?
function M.alive(pid)
  local stat = M.read("/proc/" .. pid .. "/stat")
  return stat ~= nil and stat:match("^%d+ %b() (%a)") ~= "Z"
end

--- Poll fn() every `interval` seconds (default 0.02) until it returns a truthy value or `timeout`
-- seconds pass. Returns that value, or nil on timeout.
function M.wait_for(fn, timeout, interval)
  local h = M.host()
  local deadline = h.now() + timeout
  repeat
    local v = fn()
    if v then return v end
    h.sleep(interval or 0.02)
  until h.now() > deadline
  return nil
end

--- SIGKILL a pid we started when it is still alive.
function M.kill(pid)
  if pid and M.alive(pid) then os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
end

--- A readable rendering of bytes for a failure line: printable ASCII kept, the rest \ddd.
function M.show(s, max)
  s = tostring(s)
  if max and #s > max then s = s:sub(1, max) .. "...(" .. #s .. " bytes)" end
  return (s:gsub("[^\32-\126]", function(c) return string.format("\\%03d", c:byte()) end))
end

return M
