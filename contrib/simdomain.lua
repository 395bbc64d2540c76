--- A simulated IMEX domain under a systemd user manager: the demo's and the integration tests' stage.
-- Test and demo infrastructure (plain Lua 5.4 with io/os; not loaded by imexguard itself).
-- It expects to run inside tests/with-systemd, which exports IMEXGUARD_TEST_BUS and
-- IMEXGUARD_TEST_UNIT_DIR for a private `systemd --user` in a private mount namespace.
--
--   local simdomain = require "simdomain"
--   local d = simdomain.new{ nodes = 4, build = "build" }
--   d:write_nodes("n1", {"n3", "n4"})      -- a stale list for node n1
--   d:start()                             -- every node's unit, waits for active
--   local results = d:prologs{ job = 1, nodelist = "n[1-4]" }   -- all nodes at once
--   d:stop()                              -- units, the manager stays (with-systemd stops it)
local M = {}
M.__index = M

local function sh_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.quote = sh_quote

--- Run a shell command; returns ok (boolean), its stdout, and its exit status.
local function capture(cmd)
  local p = assert(io.popen(cmd .. " 2>&1", "r"))
  local out = p:read("a")
  local ok, _, status = p:close()
  return ok == true, out, status
end
M.capture = capture

local function write_file(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end
M.write_file = write_file

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
M.read_file = read_file

local function abspath(p)
  if p:sub(1, 1) == "/" then return p end
  local _, cwd = capture("pwd")
  return (cwd:gsub("%s+$", "")) .. "/" .. p
end

-- A monotonic clock: imexguard's own module when it is on the cpath, else whole seconds.
local okhost, host = pcall(require, "imexguard.host")
local now = okhost and host.now or os.time

--- Poll `pred` every `interval` seconds until it returns a truthy value or `timeout` seconds pass.
-- Returns the value, or nil after the timeout.
function M.wait_until(pred, timeout, interval)
  interval = interval or 0.05
  local deadline = now() + timeout
  while true do
    local v = pred()
    if v then return v end
    if now() > deadline then return nil end
    os.execute("sleep " .. interval)
  end
end

--- A random third octet for 127.0.<net>.0/24 (10..249), seeded from the clock and a fresh temp name.
function M.random_net()
  local _, t = capture("mktemp -u XXXXXXXX")
  local seed = os.time()
  for i = 1, #t do seed = (seed * 31 + t:byte(i)) % 2147483647 end
  math.randomseed(seed)
  return math.random(10, 249)
end

--- Create a domain of `opts.nodes` simulated nodes n1..nN on 127.0.<net>.1..N.
-- opts.build: build directory (imexsim, nvidia-imex-ctl, imexguard); opts.net: third octet;
-- opts.root: directory to use (default: a new temp dir); opts.extra_cfg: lines for every config.cfg;
-- opts.settings: extra imexguard settings (Lua source lines) for every node.
function M.new(opts)
  opts = opts or {}
  local self = setmetatable({}, M)
  self.n = opts.nodes or 4
  self.build = abspath(opts.build or os.getenv("IMEXGUARD_BUILD") or "build")
  -- The third octet of the domain's loopback addresses: random unless given, so that a demo, a
  -- benchmark and a test run at the same time on one machine do not share addresses and ports.
  self.net = opts.net or M.random_net()
  self.prefix = opts.prefix or "imexsim"
  self.bus = assert(os.getenv("IMEXGUARD_TEST_BUS"), "run inside tests/with-systemd")
  self.unit_dir = assert(os.getenv("IMEXGUARD_TEST_UNIT_DIR"), "run inside tests/with-systemd")
  if opts.root then
    self.root = opts.root
    os.execute("mkdir -p " .. sh_quote(self.root))
  else
    local _, out = capture("mktemp -d /tmp/imexsim.XXXXXX")
    self.root = out:gsub("%s+$", "")
  end
  self.names, self.addr = {}, {}
  local map = {}
  for i = 1, self.n do
    local name = "n" .. i
    self.names[i] = name
    self.addr[name] = string.format("127.0.%d.%d", self.net, i)
    map[#map + 1] = name .. " " .. self.addr[name]
  end
  write_file(self.root .. "/addresses", table.concat(map, "\n") .. "\n")
  for _, name in ipairs(self.names) do
    local dir = self.root .. "/" .. name
    os.execute("mkdir -p " .. sh_quote(dir .. "/state"))
    local cfg = {
      "# imexsim node " .. name,
      "SERVER_PORT=" .. (opts.server_port or 50000),
      "IMEX_CMD_PORT=" .. (opts.cmd_port or 50005),
      "IMEX_CMD_ENABLED=1",
      "BIND_INTERFACE_IP=" .. self.addr[name],
      "IMEX_CMD_BIND_INTERFACE_IP=" .. self.addr[name],
      "IMEX_NODE_CONFIG_FILE=" .. dir .. "/nodes_config.cfg",
      "IMEX_WAIT_FOR_QUORUM=RECOVERY",
      "DAEMONIZE=1",
      "LOG_FILE_NAME=" .. dir .. "/imex.log",
    }
    for _, l in ipairs(opts.extra_cfg or {}) do cfg[#cfg + 1] = l end
    write_file(dir .. "/config.cfg", table.concat(cfg, "\n") .. "\n")
    local settings = {
      string.format("unit = %q", self:unit(name)),
      string.format("bus = %q", self.bus),
      string.format("imex_config = %q", dir .. "/config.cfg"),
      string.format("ctl = %q", self.build .. "/nvidia-imex-ctl"),
      string.format("state_dir = %q", dir .. "/state"),
      'address_source = "map"',
      string.format("address_map = %q", self.root .. "/addresses"),
      "allow_loopback = true",
      "log_journal = false",
      "poll_interval = 0.1",
    }
    for _, l in ipairs(opts.settings or {}) do settings[#settings + 1] = l end
    write_file(dir .. "/imexguard.conf", table.concat(settings, "\n") .. "\n")
  end
  -- The template unit, one instance per node (contrib/imexsim/imexsim@.service.in).
  local tmpl = assert(read_file(self.src_dir() .. "/imexsim/imexsim@.service.in"))
  tmpl = tmpl:gsub("@IMEXSIM@", self.build .. "/imexsim"):gsub("@SIMROOT@", self.root)
  os.execute("mkdir -p " .. sh_quote(self.unit_dir))
  write_file(self.unit_dir .. "/" .. self.prefix .. "@.service", tmpl)
  assert(self:systemctl("daemon-reload"))
  return self
end

--- Directory of contrib/ (this file's directory).
function M.src_dir()
  local src = debug.getinfo(1, "S").source:sub(2)
  return src:match("^(.*)/[^/]*$") or "."
end

function M:unit(name) return self.prefix .. "@" .. name .. ".service" end
function M:dir(name) return self.root .. "/" .. name end
function M:config(name) return self:dir(name) .. "/imexguard.conf" end

--- systemctl --user against the private manager; returns ok, output.
function M.systemctl(_, ...)
  local args = {}
  for _, a in ipairs({ ... }) do args[#args + 1] = sh_quote(a) end
  local ok, out = capture("systemctl --user --no-pager " .. table.concat(args, " "))
  return ok, out
end

--- Write a node's nodes_config.cfg directly (a stale list left by an earlier job).
function M:write_nodes(name, list)
  local lines = {}
  for _, n in ipairs(list) do lines[#lines + 1] = self.addr[n] or n end
  write_file(self:dir(name) .. "/nodes_config.cfg", table.concat(lines, "\n") .. "\n")
end

function M:nodes_file(name) return read_file(self:dir(name) .. "/nodes_config.cfg") end

--- A unit property (systemctl show -p NAME --value).
function M:prop(name, prop)
  local ok, out = self:systemctl("show", "-p", prop, "--value", self:unit(name))
  if not ok then return nil end
  return (out:gsub("%s+$", ""))
end

function M:invocation(name) return self:prop(name, "InvocationID") end

--- Enable and start every node's unit (or those named), as nvidia-imex is on a real node.
function M:start(names)
  for _, name in ipairs(names or self.names) do
    local ok, out = self:systemctl("enable", "--now", self:unit(name))
    if not ok then return nil, name .. ": " .. out end
  end
  return true
end

--- Stop and disable every unit of the domain (ignores units that are not running).
function M:stop()
  for _, name in ipairs(self.names) do self:systemctl("disable", "--now", self:unit(name)) end
  for _, name in ipairs(self.names) do self:systemctl("reset-failed", self:unit(name)) end
end

--- Remove the domain's directory and unit file (after stop).
function M:destroy()
  self:stop()
  os.remove(self.unit_dir .. "/" .. self.prefix .. "@.service")
  self:systemctl("daemon-reload")
  os.execute("rm -rf " .. sh_quote(self.root))
end

--- The Slurm prolog environment of a job on a node: the real 22.05 variables
-- (tests/fixtures/slurm/prolog-env-22.05.txt) with this job's values.
function M.prolog_env(job, nodelist, nodename, nnodes)
  return {
    SLURMD_NODENAME = nodename, SLURM_CLUSTER_NAME = "sim", SLURM_JOBID = tostring(job),
    SLURM_JOB_ID = tostring(job), SLURM_JOB_NUM_NODES = tostring(nnodes or 1),
    SLURM_JOB_PARTITION = "p", SLURM_JOB_RESTART_COUNT = "0", SLURM_JOB_UID = "0",
    SLURM_JOB_GID = "0", SLURM_JOB_USER = "root", SLURM_NODELIST = nodelist,
    SLURM_SCRIPT_CONTEXT = "prolog_slurmd", SLURM_UID = "0", PATH = "/usr/sbin:/usr/bin:/sbin:/bin",
  }
end

--- Run `imexguard COMMAND` for a job on every node named (default: the job's nodes) at once.
-- opts: job (id), nodelist (hostlist expression), names (nodes to run on), command ("prolog"),
-- env (extra or replaced variables; false removes), args (extra imexguard arguments).
-- Returns { [name] = {status = exit code, output = stderr+stdout text, outcome = name} }.
function M:run_all(opts)
  local names = opts.names or self.names
  local procs = {}
  for _, name in ipairs(names) do
    local env = M.prolog_env(opts.job, opts.nodelist, name, #names)
    for k, v in pairs(opts.env or {}) do env[k] = v or nil end
    local assign = {}
    for k, v in pairs(env) do assign[#assign + 1] = k .. "=" .. sh_quote(v) end
    table.sort(assign)
    local out = self:dir(name) .. "/last-" .. (opts.command or "prolog") .. ".out"
    local cmd = string.format("env -i %s %s --config %s %s %s >%s 2>&1; echo $?",
      table.concat(assign, " "), sh_quote(self.build .. "/imexguard"), sh_quote(self:config(name)),
      opts.args or "", opts.command or "prolog", sh_quote(out))
    procs[name] = { pipe = assert(io.popen(cmd, "r")), out = out }
  end
  local results = {}
  for name, p in pairs(procs) do
    local status = tonumber(p.pipe:read("a"):match("%d+"))
    p.pipe:close()
    local text = read_file(p.out) or ""
    results[name] = { status = status, output = text, outcome = text:match("outcome=([%w%-]+)") }
  end
  return results
end

--- run_all with command "prolog" (opts as for run_all).
function M:prologs(opts)
  opts.command = "prolog"
  return self:run_all(opts)
end

--- run_all with command "epilog": the job ends and Slurm runs the epilog on each of its nodes.
function M:epilogs(opts)
  opts.command = "epilog"
  return self:run_all(opts)
end

--- How often node `name`'s simulated daemon has started: every start appends one line with
-- "starting" to its log (contrib/imexsim). Returns a number (0 while there is no log).
function M:starts(name)
  local log = read_file(self:dir(name) .. "/imex.log") or ""
  local n = 0
  for line in log:gmatch("[^\n]+") do
    if line:find("imexsim %S+ starting") then n = n + 1 end
  end
  return n
end

--- `nvidia-imex-ctl -N -j` of a node, decoded (or nil, output).
function M:ctl_json(name)
  local _, out = capture(sh_quote(self.build .. "/nvidia-imex-ctl") .. " -c " ..
    sh_quote(self:dir(name) .. "/config.cfg") .. " -N -j")
  local ok, cjson = pcall(require, "cjson")
  if not ok then return nil, out end
  local okd, v = pcall(cjson.decode, out)
  if okd and type(v) == "table" then return v end
  return nil, out
end

return M
