--- Small shared helpers for the busted specs of the C primitives and of the built binary
-- (tests/c/*_spec.lua).  The build is located through IMEXGUARD_BUILD (default "build"): the
-- module is <build>/lua/imexguard/host.so, the binary <build>/imexguard.  Nothing here touches
-- anything outside temp dirs.
local M = {}

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.q = shell_quote

--- Run a shell command and return its stdout (string, trailing newline removed).
function M.sh(cmd)
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  p:close()
  return (out:gsub("\n$", ""))
end

--- Absolute build directory (IMEXGUARD_BUILD or "build").
function M.build_dir()
  local b = os.getenv("IMEXGUARD_BUILD") or "build"
  local abs = M.sh("realpath -m " .. shell_quote(b))
  return abs ~= "" and abs or b
end

--- LUA_CPATH value that finds imexguard.host in the build.
function M.cpath()
  return M.build_dir() .. "/lua/?.so;;"
end

--- The C module under test.
function M.host()
  local cp = M.build_dir() .. "/lua/?.so"
  if not package.cpath:find(cp, 1, true) then
    package.cpath = cp .. ";" .. package.cpath
  end
  return require "imexguard.host"
end

--- A fresh temp directory (mktemp -d); `base` defaults to /tmp.
function M.tmpdir(base)
  local d = M.sh("mktemp -d " .. shell_quote((base or "/tmp") .. "/imexguard-test.XXXXXX"))
  assert(d ~= "", "mktemp failed")
  return d
end

--- Remove a temp directory made by tmpdir (refuses anything else).
function M.rmdir(d)
  if d and d:match("/imexguard%-test%.[%w]+$") then
    os.execute("rm -rf " .. shell_quote(d))
  end
end

--- Write a whole file (plain io, for fixtures), then set its mode with chmod(1): `mode` is an
-- octal string, default "0644", so the result depends neither on the umask nor on an earlier
-- mode of the file.  Returns nothing; raises on any error.
function M.write(path, data, mode)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
  assert(os.execute("chmod " .. (mode or "0644") .. " " .. shell_quote(path)))
end

--- Read a whole file, or nil.
function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

--- Names in a directory, dot files included, sorted (without . and ..).
function M.ls(dir)
  local names = {}
  for name in M.sh("ls -A1 " .. shell_quote(dir)):gmatch("[^\n]+") do
    names[#names + 1] = name
  end
  table.sort(names)
  return names
end

local clock
local function now()
  clock = clock or M.host()
  return clock.now()
end

--- Poll `predicate` every `interval_s` (default 0.01 s) until it returns a true value or
-- `deadline_s` seconds (default 10) have passed.  Returns the predicate's value, or nil.
-- The sleep is a bounded nanosleep on the monotonic clock (never host.sleep: a spec may have
-- set a global deadline).
function M.wait_until(predicate, deadline_s, interval_s)
  local limit = now() + (deadline_s or 10)
  interval_s = interval_s or 0.01
  while true do
    local v = predicate()
    if v then return v end
    if now() >= limit then return nil end
    os.execute(string.format("sleep %.3f", interval_s))
  end
end

--- Our own pid (the Lua process), from /proc/self/stat.
function M.mypid()
  local s = M.read("/proc/self/stat")
  return tonumber(s:match("^(%d+)"))
end

--- State letter of a process ("R", "S", "Z"...), or nil when it does not exist.
function M.state(pid)
  local s = M.read("/proc/" .. pid .. "/stat")
  return s and s:match("^%d+ %b() (%a)")
end

--- Is the process alive (exists and is not a zombie)?
function M.alive(pid)
  local st = M.state(pid)
  return st ~= nil and st ~= "Z"
end

--- Pids of live processes whose process group is `pgid`.
function M.group_members(pgid)
  local pids = {}
  for line in M.sh("env -u LD_PRELOAD ps -e -o pid=,pgid=,stat="):gmatch("[^\n]+") do
    local pid, pg, st = line:match("(%d+)%s+(%d+)%s+(%S+)")
    if tonumber(pg) == pgid and not st:match("^Z") then pids[#pids + 1] = tonumber(pid) end
  end
  return pids
end

--- Zombie children of this process.
function M.zombies()
  local z = {}
  for line in M.sh("env -u LD_PRELOAD ps --ppid " .. M.mypid() .. " -o pid=,stat="):gmatch("[^\n]+") do
    local pid, st = line:match("(%d+)%s+(%S+)")
    if st and st:match("^Z") then z[#z + 1] = tonumber(pid) end
  end
  return z
end

--- Number of open descriptors of this process.
function M.fd_count()
  return tonumber(M.sh("ls /proc/" .. M.mypid() .. "/fd | wc -l"))
end

--- Start `cmd` (a shell command) in the background, stdout/stderr to `log` (default /dev/null).
-- Returns its pid.  The process is not our child (the launching shell exits), so it never
-- becomes our zombie.
function M.spawn(cmd, log)
  log = log or "/dev/null"
  local pid = M.sh(string.format("sh -c %s </dev/null >%s 2>&1 & echo $!",
    shell_quote("exec " .. cmd), shell_quote(log)))
  return assert(tonumber(pid), "spawn failed: " .. cmd)
end

--- Write `code` into dir/name.lua and return a command line that runs it with lua5.4 and the
-- module under test on LUA_CPATH; extra arguments are quoted.
function M.lua_cmd(dir, name, code, ...)
  local file = dir .. "/" .. name .. ".lua"
  if M.read(file) ~= code then
    -- replace, never rewrite in place: a worker started earlier may be reading it right now
    M.write(file .. ".new", code)
    assert(os.rename(file .. ".new", file))
  end
  local args = { "env", "LUA_CPATH=" .. shell_quote(M.cpath()), "lua5.4", shell_quote(file) }
  for _, a in ipairs({ ... }) do args[#args + 1] = shell_quote(a) end
  return table.concat(args, " ")
end

--- Send a signal (name such as "KILL", default "TERM") to a pid; ignore a gone process.
function M.kill(pid, sig)
  if pid then os.execute(string.format("kill -s %s %d 2>/dev/null", sig or "TERM", pid)) end
end

--- Kill a pid with SIGKILL and wait (up to 5 s) until it is gone.
function M.kill_wait(pid)
  if not pid then return end
  M.kill(pid, "KILL")
  M.wait_until(function() return not M.alive(pid) end, 5)
end

--- The after_each of a test with a temp dir and spawned processes: kill_wait every pid of the
-- list `pids` (may be nil), then remove `dir` (made by tmpdir).
function M.cleanup(dir, pids)
  for _, pid in ipairs(pids or {}) do M.kill_wait(pid) end
  M.rmdir(dir)
end

--- Absolute path of the built binary, <build>/imexguard; raises, naming it, when it is not built.
function M.imexguard_bin()
  local bin = M.build_dir() .. "/imexguard"
  local f = io.open(bin, "rb")
  assert(f, "the binary " .. bin .. " is not built (set IMEXGUARD_BUILD)")
  f:close()
  return bin
end

--- Run the built binary once: `imexguard ARGS...` (args: list of strings), stdin /dev/null,
-- IMEXGUARD_NO_JOURNAL=1 (log lines on stderr only).
-- opts (table):
--   dir          directory for the captured stdout and stderr files (required; reused by every run)
--   env          table NAME = value of extra environment variables
--   inherit_env  true: keep this process's environment; default: `env -i PATH=/usr/bin:/bin`
--   prefix       a command line put in front, e.g. "setpriv --reuid=65534 ..." (runs as root)
--   bin          path of the binary to run; default: M.imexguard_bin()
-- Returns { code = exit status (number), stdout = string, stderr = string,
--           elapsed = wall-clock time of the run in seconds (date +%s%N before and after) }.
function M.run_imexguard(args, opts)
  local parts = { opts.prefix or "", "env" }
  if not opts.inherit_env then
    parts[#parts + 1] = "-i"
    parts[#parts + 1] = "PATH=/usr/bin:/bin"
  end
  parts[#parts + 1] = "IMEXGUARD_NO_JOURNAL=1"
  for k, v in pairs(opts.env or {}) do parts[#parts + 1] = shell_quote(k .. "=" .. v) end
  parts[#parts + 1] = shell_quote(opts.bin or M.imexguard_bin())
  for _, a in ipairs(args) do parts[#parts + 1] = shell_quote(a) end
  local out, err = opts.dir .. "/stdout", opts.dir .. "/stderr"
  local cmd = string.format("s=$(date +%%s%%N); %s </dev/null >%s 2>%s; rc=$?; e=$(date +%%s%%N); "
    .. "echo $rc $(( (e - s) / 1000 ))", table.concat(parts, " "), shell_quote(out), shell_quote(err))
  local line = M.sh(cmd)
  local code, us = line:match("^(%d+) (%d+)$")
  assert(code, "cannot run " .. cmd .. ": " .. line)
  return { code = tonumber(code), stdout = M.read(out) or "", stderr = M.read(err) or "",
    elapsed = tonumber(us) / 1e6 }
end

--- The final log line of a run of the binary ("imexguard: LEVEL: COMMAND job=ID outcome=NAME:
-- MESSAGE", the last such line of r.stderr) as { level, command, job, outcome, message }.
-- Raises, showing stderr, when there is none.
function M.final(r)
  local last
  for l in r.stderr:gmatch("[^\n]+") do
    if l:match("^imexguard: %a+: %a+ job=%S+ outcome=") then last = l end
  end
  assert(last, "no final line in stderr:\n" .. r.stderr)
  local level, command, job, outcome, msg =
    last:match("^imexguard: (%a+): (%a+) job=(%S+) outcome=([%w-]+):? ?(.*)$")
  return { level = level, command = command, job = job, outcome = outcome, message = msg }
end

return M
