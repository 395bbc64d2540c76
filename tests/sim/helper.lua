-- SPDX-License-Identifier: Apache-2.0
-- Test helper for the IMEX simulator (contrib/imexsim): simulated domains of daemons on a random
-- 127.X.Y.0/24 subnet with a random port base, each node in its own temp dir, every process
-- stopped by PID in cleanup(). The build is found through IMEXGUARD_BUILD (default "build").
local cjson = require("cjson")
local system = require("system")

local M = {}

local build = os.getenv("IMEXGUARD_BUILD") or "build"
if build:sub(1, 1) ~= "/" then
  build = (os.getenv("PWD") or ".") .. "/" .. build
end
M.build = build
M.imex = build .. "/nvidia-imex"
M.ctl = build .. "/nvidia-imex-ctl"

--- Quote one shell word.
-- @param s the word (converted with tostring)
-- @treturn string it in single quotes
local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.q = q

--- Run a shell command.
-- @tparam string cmd the command (one shell string)
-- @tparam[opt] boolean merge true: stderr too in the output (else it is discarded)
-- @treturn string its stdout (and stderr with merge)
-- @treturn integer its exit status
function M.run(cmd, merge)
  local p = assert(io.popen(cmd .. (merge and " 2>&1" or " 2>/dev/null") .. "; echo \"__rc=$?\""))
  local out = p:read("a")
  p:close()
  local body, rc = out:match("^(.*)__rc=(%d+)\n$")
  return body, tonumber(rc)
end

--- A whole file.
-- @tparam string path file
-- @treturn ?string its contents, or nil when it cannot be opened
function M.read(path)
  local f = io.open(path, "r")
  if not f then
    return nil
  end
  local s = f:read("a")
  f:close()
  return s
end

--- Replace a file's contents (not atomically).
-- @tparam string path file
-- @tparam string text new contents
-- @raise when the file cannot be opened
function M.write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

--- Poll fn() until it returns a truthy value or `timeout` seconds pass.
-- @tparam function fn called without arguments
-- @tparam[opt] number timeout seconds (10)
-- @tparam[opt] number interval seconds between polls (0.05)
-- @return fn's truthy value, or nil and fn's last (falsy) value on timeout
function M.wait_for(fn, timeout, interval)
  local deadline = system.monotime() + (timeout or 10)
  local last
  repeat
    last = fn()
    if last then
      return last
    end
    system.sleep(interval or 0.05)
  until system.monotime() > deadline
  return nil, last
end

--- Is the process alive (and not a zombie)?
-- @tparam integer pid process id
-- @treturn boolean
function M.alive(pid)
  local stat = M.read("/proc/" .. pid .. "/stat")
  if not stat then
    return false
  end
  return stat:match("^%d+ %b() (%a)") ~= "Z"
end

--- A fixture file of tests/fixtures/ctl.
-- @tparam string name its file name ("up-2node-570.json")
-- @treturn string its contents
-- @raise when it cannot be read
function M.fixture(name)
  local text = M.read("tests/fixtures/ctl/" .. name)
  assert(text, "fixture " .. name)
  return text
end

--- Compare the JSON shape of `actual` with `expected`: same keys and value types at every level.
-- Objects keyed by decimal strings (nodes, connections) are maps: every entry must have the shape
-- of the fixture's first entry.
-- @param actual decoded JSON under test
-- @param expected decoded JSON of a fixture
-- @tparam[opt] string path where in the document ("$", the root)
-- @treturn boolean true when the shapes agree
-- @treturn ?string otherwise the path of the first difference and what differs
function M.same_shape(actual, expected, path)
  path = path or "$"
  if type(actual) ~= type(expected) then
    return false, path .. ": " .. type(actual) .. " instead of " .. type(expected)
  end
  if type(expected) ~= "table" then
    return true
  end
  local ekey = next(expected)
  if type(ekey) == "string" and ekey:match("^%d+$") then
    if next(actual) == nil then
      return false, path .. ": empty map"
    end
    for k, v in pairs(actual) do
      if type(k) ~= "string" or not k:match("^%d+$") then
        return false, path .. ": key " .. tostring(k) .. " is not a decimal string"
      end
      local ok, err = M.same_shape(v, expected[ekey], path .. "." .. k)
      if not ok then
        return false, err
      end
    end
    return true
  end
  for k, v in pairs(expected) do
    if actual[k] == nil then
      return false, path .. ": missing " .. k
    end
    local ok, err = M.same_shape(actual[k], v, path .. "." .. k)
    if not ok then
      return false, err
    end
  end
  for k in pairs(actual) do
    if expected[k] == nil then
      return false, path .. ": extra key " .. tostring(k)
    end
  end
  return true
end

local Domain = {}
Domain.__index = Domain

-- The domains made by M.domain and not yet cleaned up, for M.cleanup_domains.
local live = {}

--- A new simulated domain of n nodes (not started). Node i (1-based here; IMEX ID i-1) has the
-- address 127.X.Y.i and its own directory with config.cfg and nodes_config.cfg. The domain is
-- stopped and removed by M.cleanup_domains (or its own cleanup()).
-- @tparam integer n number of nodes
-- @treturn table the domain (methods below)
function M.domain(n)
  local out = assert(M.run("mktemp -d /tmp/imexsim-test.XXXXXX"))
  local d = setmetatable({
    dir = out:gsub("%s+$", ""),
    net = string.format("127.%d.%d.", math.random(16, 250), math.random(0, 255)),
    port = math.random(20000, 59000),
    n = n,
    pids = {},
    all_pids = {},
  }, Domain)
  live[#live + 1] = d
  d.cmd_port = d.port + 5
  d.addrs = {}
  for i = 1, n do
    d.addrs[i] = d.net .. i
    assert(os.execute("mkdir -p " .. q(d:path(i))))
  end
  for i = 1, n do
    d:set_nodes(i, d.addrs)
    d:configure(i)
  end
  return d
end

--- Node i's directory, or a file in it.
-- @tparam integer i node index (1-based)
-- @tparam[opt] string file a file name in that directory
-- @treturn string absolute path
function Domain:path(i, file)
  return self.dir .. "/node" .. i .. (file and ("/" .. file) or "")
end

--- Write node i's node file: the list of addresses, one a line.
-- @tparam integer i node index
-- @tparam {string,...} list addresses in node list order
function Domain:set_nodes(i, list)
  M.write(self:path(i, "nodes_config.cfg"), table.concat(list, "\n") .. "\n")
end

--- Write node i's config.cfg (ports, addresses and files of this domain, fast reconnects).
-- @tparam integer i node index
-- @tparam[opt] table extra further KEY -> value (they win over the defaults)
function Domain:configure(i, extra)
  local keys = {
    SERVER_PORT = self.port,
    IMEX_CMD_PORT = self.cmd_port,
    IMEX_CMD_ENABLED = 1,
    BIND_INTERFACE_IP = self.addrs[i],
    IMEX_CMD_BIND_INTERFACE_IP = self.addrs[i],
    IMEX_NODE_CONFIG_FILE = self:path(i, "nodes_config.cfg"),
    DAEMONIZE = 1,
    LOG_FILE_NAME = self:path(i, "imex.log"),
    IMEXSIM_PID_FILE = self:path(i, "imex.pid"),
    IMEXSIM_STATE_FILE = self:path(i, "state"),
    IMEXSIM_RECONNECT_MS = 100,
    IMEXSIM_RECONNECT_MAX_MS = 400,
  }
  for k, v in pairs(extra or {}) do
    keys[k] = v
  end
  local lines = { "# imexsim test config" }
  for k, v in pairs(keys) do
    lines[#lines + 1] = k .. "=" .. tostring(v)
  end
  M.write(self:path(i, "config.cfg"), table.concat(lines, "\n") .. "\n")
end

--- Start node i's daemon (DAEMONIZE=1: returns once the parent exited); on success the daemon's
-- PID is recorded for cleanup().
-- @tparam integer i node index
-- @treturn integer the start's exit status
-- @treturn string its output (stdout and stderr)
function Domain:start(i)
  local out, rc = M.run(q(M.imex) .. " -c " .. q(self:path(i, "config.cfg")), true)
  local pid = tonumber(M.read(self:path(i, "imex.pid")) or "")
  if rc == 0 and pid then
    self.pids[i] = pid
    self.all_pids[#self.all_pids + 1] = pid
  end
  return rc, out
end

--- Start node i in the foreground mode (DAEMONIZE=0 in its config) as a background job of a shell;
-- the daemon writes its own PID file. Waits up to 5 s for its state file to say READY.
-- @tparam integer i node index
-- @treturn ?integer the daemon's PID (recorded for cleanup()), or nil when it is not READY in time
function Domain:start_foreground(i)
  os.remove(self:path(i, "state"))
  os.execute(q(M.imex) .. " -c " .. q(self:path(i, "config.cfg")) .. " >/dev/null 2>&1 &")
  local st = M.wait_for(function()
    local s = self:state(i)
    return s and s.state == "READY" and s
  end, 5)
  if not st then
    return nil
  end
  local pid = tonumber(st.pid)
  self.pids[i] = pid
  self.all_pids[#self.all_pids + 1] = pid
  return pid
end

--- Start every node's daemon (Domain:start).
-- @raise when one does not start, naming the node and its output
function Domain:start_all()
  for i = 1, self.n do
    local rc, out = self:start(i)
    assert(rc == 0, "node " .. i .. " did not start: " .. tostring(out))
  end
end

--- Send a signal to node i's daemon and wait up to 5 s until it is gone.
-- @tparam integer i node index
-- @tparam[opt] string sig signal name for kill(1) ("TERM")
-- @treturn boolean true when it is gone (or was not running)
function Domain:stop(i, sig)
  local pid = self.pids[i]
  if not pid then
    return true
  end
  os.execute("kill -" .. (sig or "TERM") .. " " .. pid .. " 2>/dev/null")
  local gone = M.wait_for(function()
    return not M.alive(pid)
  end, 5)
  if gone then
    self.pids[i] = nil
  end
  return gone and true or false
end

--- Node i's state file (written by the simulated daemon).
-- @tparam integer i node index
-- @treturn ?table its KEY=value lines (pid, instance, state, node_id, address), or nil when absent
function Domain:state(i)
  local text = M.read(self:path(i, "state"))
  if not text then
    return nil
  end
  local t = {}
  for k, v in text:gmatch("([%w_]+)=([^\n]*)") do
    t[k] = v
  end
  return t
end

--- Run the ctl with node i's config.
-- @tparam integer i node index
-- @tparam string args the ctl's arguments (one shell string)
-- @treturn string its stdout
-- @treturn integer its exit status
function Domain:ctl(i, args)
  return M.run(q(M.ctl) .. " -c " .. q(self:path(i, "config.cfg")) .. " " .. args)
end

--- `ctl -N -j` of node i, decoded.
-- @tparam integer i node index
-- @tparam[opt] string extra further arguments, e.g. "-t 300"
-- @treturn[1] table the decoded JSON
-- @return[2] nil
-- @treturn[2] string the raw output
function Domain:domain_json(i, extra)
  local out = self:ctl(i, "-N -j" .. (extra and (" " .. extra) or ""))
  local ok, t = pcall(cjson.decode, out or "")
  if ok and type(t) == "table" then
    return t
  end
  return nil, out
end

--- Wait until node i's ctl reports a domain status.
-- @tparam integer i node index
-- @tparam string want "UP", "DEGRADED" or "DOWN"
-- @tparam[opt] number timeout seconds (10)
-- @treturn ?table the decoded JSON, or nil on timeout
function Domain:wait_status(i, want, timeout)
  return M.wait_for(function()
    local t = self:domain_json(i)
    return t and t.status == want and t
  end, timeout or 10)
end

--- Node i's log file.
-- @tparam integer i node index
-- @treturn string its contents ("" while there is none)
function Domain:log(i)
  return M.read(self:path(i, "imex.log")) or ""
end

--- How often a plain text occurs in node i's log.
-- @tparam integer i node index
-- @tparam string needle the text (no pattern)
-- @treturn integer the count
function Domain:log_count(i, needle)
  local n, pos = 0, 1
  local text = self:log(i)
  while true do
    local s, e = text:find(needle, pos, true)
    if not s then
      return n
    end
    n, pos = n + 1, e + 1
  end
end

--- Send a signal to node i's daemon.
-- @tparam integer i node index (it must be running)
-- @tparam string sig signal name for kill(1), e.g. "USR1"
function Domain:signal(i, sig)
  assert(self.pids[i], "node " .. i .. " is not running")
  assert(os.execute("kill -" .. sig .. " " .. self.pids[i]))
end

--- The time of a daemon log line "[YYYY-MM-DD HH:MM:SS.mmm] ...".
-- @tparam string line one line of a node's log
-- @treturn ?integer milliseconds since midnight, or nil when the line has no time stamp
function M.log_ms(line)
  local hh, mm, ss, ms = line:match("^%[%d+%-%d+%-%d+ (%d+):(%d+):(%d+)%.(%d+)%]")
  if not hh then
    return nil
  end
  return ((tonumber(hh) * 60 + tonumber(mm)) * 60 + tonumber(ss)) * 1000 + tonumber(ms)
end

--- Stop every process this domain started, by PID (TERM, then KILL after 3 s), and remove its
-- directory.
function Domain:cleanup()
  for _, pid in ipairs(self.all_pids) do
    if M.alive(pid) then
      os.execute("kill -TERM " .. pid .. " 2>/dev/null")
      if not M.wait_for(function()
        return not M.alive(pid)
      end, 3) then
        os.execute("kill -KILL " .. pid .. " 2>/dev/null")
      end
    end
  end
  os.execute("rm -rf " .. q(self.dir))
  for k = #live, 1, -1 do
    if live[k] == self then
      table.remove(live, k)
    end
  end
end

--- The after_each of every sim spec: clean up (stop by PID, remove) every domain made since.
function M.cleanup_domains()
  while #live > 0 do
    live[#live]:cleanup()
  end
end

return M
