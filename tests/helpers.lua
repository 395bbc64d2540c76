-- SPDX-License-Identifier: Apache-2.0
--- Small shared helpers for the busted specs of the C primitives and of the built binary
-- (tests/c/*_spec.lua).  The build is located through IMEXGUARD_BUILD (default "build"): the
-- module is <build>/lua/imexguard/host.so, the binary <build>/imexguard.  Nothing here touches
-- anything outside temp dirs.
local M = {}

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.q = shell_quote

--- Run a shell command.
-- @tparam string cmd the command (one shell string)
-- @treturn string its stdout, one trailing newline removed
function M.sh(cmd)
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  p:close()
  return (out:gsub("\n$", ""))
end

--- The build directory.
-- @treturn string IMEXGUARD_BUILD (default "build"), made absolute
function M.build_dir()
  local b = os.getenv("IMEXGUARD_BUILD") or "build"
  local abs = M.sh("realpath -m " .. shell_quote(b))
  return abs ~= "" and abs or b
end

--- A LUA_CPATH that finds imexguard.host in the build.
-- @treturn string "<build>/lua/?.so;;"
function M.cpath()
  return M.build_dir() .. "/lua/?.so;;"
end

--- The C module under test (the build's lua/ is put first on package.cpath).
-- @treturn table imexguard.host
function M.host()
  local cp = M.build_dir() .. "/lua/?.so"
  if not package.cpath:find(cp, 1, true) then
    package.cpath = cp .. ";" .. package.cpath
  end
  return require("imexguard.host")
end

--- A fresh temp directory (mktemp -d).
-- @tparam[opt] string base parent directory ("/tmp")
-- @treturn string its path, "BASE/imexguard-test.XXXXXX"
-- @raise when mktemp fails
function M.tmpdir(base)
  local d = M.sh("mktemp -d " .. shell_quote((base or "/tmp") .. "/imexguard-test.XXXXXX"))
  assert(d ~= "", "mktemp failed")
  return d
end

--- Remove a temp directory made by tmpdir (anything else is left alone).
-- @tparam ?string d the directory (nil: nothing to do)
function M.rmdir(d)
  if d and d:match("/imexguard%-test%.[%w]+$") then
    os.execute("rm -rf " .. shell_quote(d))
  end
end

--- Write a whole file (plain io, for fixtures), then set its mode with chmod(1): `mode` is an
-- octal string, default "0644", so the result depends neither on the umask nor on an earlier
-- mode of the file.
-- @tparam string path file
-- @tparam string data new contents
-- @tparam[opt] string mode octal string for chmod(1) ("0644")
-- @raise on any error
function M.write(path, data, mode)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
  assert(os.execute("chmod " .. (mode or "0644") .. " " .. shell_quote(path)))
end

--- Read a whole file.
-- @tparam string path file
-- @treturn ?string its contents, or nil when it cannot be opened
function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

--- Names in a directory, dot files included (without . and ..).
-- @tparam string dir directory
-- @treturn {string,...} the names, sorted
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
-- `deadline_s` seconds (default 10) have passed. The clock is the monotonic one of the module
-- under test; the sleep is sleep(1) (never host.sleep: a spec may have set a global deadline).
-- @tparam function predicate called without arguments
-- @tparam[opt] number deadline_s seconds (10)
-- @tparam[opt] number interval_s seconds between polls (0.01)
-- @return the predicate's truthy value, or nil on timeout
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
-- @treturn integer
function M.mypid()
  local s = M.read("/proc/self/stat")
  return tonumber(s:match("^(%d+)"))
end

--- State letter of a process, from /proc/PID/stat.
-- @tparam integer pid process id
-- @treturn ?string "R", "S", "Z"..., or nil when it does not exist
function M.state(pid)
  local s = M.read("/proc/" .. pid .. "/stat")
  return s and s:match("^%d+ %b() (%a)")
end

--- Is the process alive (exists and is not a zombie)?
-- @tparam integer pid process id
-- @treturn boolean
function M.alive(pid)
  local st = M.state(pid)
  return st ~= nil and st ~= "Z"
end

--- Live (not zombie) processes of a process group.
-- @tparam integer pgid process group id
-- @treturn {integer,...} their pids
function M.group_members(pgid)
  local pids = {}
  for line in M.sh("env -u LD_PRELOAD ps -e -o pid=,pgid=,stat="):gmatch("[^\n]+") do
    local pid, pg, st = line:match("(%d+)%s+(%d+)%s+(%S+)")
    if tonumber(pg) == pgid and not st:match("^Z") then pids[#pids + 1] = tonumber(pid) end
  end
  return pids
end

--- Zombie children of this process.
-- @treturn {integer,...} their pids
function M.zombies()
  local z = {}
  for line in M.sh("env -u LD_PRELOAD ps --ppid " .. M.mypid() .. " -o pid=,stat="):gmatch("[^\n]+") do
    local pid, st = line:match("(%d+)%s+(%S+)")
    if st and st:match("^Z") then z[#z + 1] = tonumber(pid) end
  end
  return z
end

--- Number of open descriptors of this process. The count runs in a shell started by io.popen,
-- whose pipe this process holds: on a busy machine the shell can list our descriptors before
-- popen has closed its own copy of the pipe's write end, one too many. That race only adds, so
-- the least of three counts is the count.
-- @treturn integer
function M.fd_count()
  local n = math.huge
  for _ = 1, 3 do n = math.min(n, tonumber(M.sh("ls /proc/" .. M.mypid() .. "/fd | wc -l"))) end
  return n
end

--- Start a shell command in the background. The process is not our child (the launching shell
-- exits), so it never becomes our zombie.
-- @tparam string cmd the command (run with exec)
-- @tparam[opt] string log file for its stdout and stderr ("/dev/null")
-- @treturn integer its pid
-- @raise when it cannot be started
function M.spawn(cmd, log)
  log = log or "/dev/null"
  local pid = M.sh(string.format("sh -c %s </dev/null >%s 2>&1 & echo $!",
    shell_quote("exec " .. cmd), shell_quote(log)))
  return assert(tonumber(pid), "spawn failed: " .. cmd)
end

--- Write a Lua script and build the command line that runs it with lua5.4 and the module under
-- test on LUA_CPATH. An existing file with other contents is replaced by rename.
-- @tparam string dir directory of the script
-- @tparam string name script name, without ".lua"
-- @tparam string code its source
-- @tparam string ... its arguments (each quoted)
-- @treturn string the command line
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

--- Send a signal to a pid; a gone process is ignored.
-- @tparam ?integer pid process id (nil: nothing to do)
-- @tparam[opt] string sig signal name such as "KILL" ("TERM")
function M.kill(pid, sig)
  if pid then os.execute(string.format("kill -s %s %d 2>/dev/null", sig or "TERM", pid)) end
end

--- Kill a pid with SIGKILL and wait (up to 5 s) until it is gone.
-- @tparam ?integer pid process id (nil: nothing to do)
function M.kill_wait(pid)
  if not pid then return end
  M.kill(pid, "KILL")
  M.wait_until(function() return not M.alive(pid) end, 5)
end

--- The after_each of a test with a temp dir and spawned processes: kill_wait every pid of the
-- list `pids`, then remove `dir`.
-- @tparam ?string dir a directory made by tmpdir
-- @tparam ?{integer,...} pids processes to kill
function M.cleanup(dir, pids)
  for _, pid in ipairs(pids or {}) do M.kill_wait(pid) end
  M.rmdir(dir)
end

--- Absolute path of the built binary.
-- @treturn string <build>/imexguard
-- @raise naming it, when it is not built
function M.imexguard_bin()
  local bin = M.build_dir() .. "/imexguard"
  local f = io.open(bin, "rb")
  assert(f, "the binary " .. bin .. " is not built (set IMEXGUARD_BUILD)")
  f:close()
  return bin
end

--- Run the built binary once: `imexguard ARGS...`, stdin /dev/null, IMEXGUARD_NO_JOURNAL=1 (log
-- lines on stderr only).
-- @tparam {string,...} args its arguments
-- @tparam table opts
--   dir          directory for the captured stdout and stderr files (required; reused by every run)
--   env          table NAME = value of extra environment variables
--   inherit_env  true: keep this process's environment; default: `env -i PATH=/usr/bin:/bin`
--   prefix       a command line put in front, e.g. "setpriv --reuid=65534 ..." (runs as root)
--   bin          path of the binary to run; default: M.imexguard_bin()
-- @treturn table { code = exit status (number), stdout = string, stderr = string,
--   elapsed = wall-clock time of the run in seconds (date +%s%N before and after) }
-- @raise when the shell cannot run it
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
-- MESSAGE", the last such line of r.stderr).
-- @tparam table r a result of run_imexguard
-- @treturn table { level, command, job, outcome, message } (strings)
-- @raise showing stderr, when there is none
function M.final(r)
  local last
  for l in r.stderr:gmatch("[^\n]+") do
    if l:match("^imexguard: %a+: [%a-]+ job=%S+ outcome=") then last = l end
  end
  assert(last, "no final line in stderr:\n" .. r.stderr)
  local level, command, job, outcome, msg =
    last:match("^imexguard: (%a+): ([%a-]+) job=(%S+) outcome=([%w-]+):? ?(.*)$")
  return { level = level, command = command, job = job, outcome = outcome, message = msg }
end

return M
