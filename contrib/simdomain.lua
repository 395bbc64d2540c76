-- SPDX-License-Identifier: Apache-2.0
--- A simulated IMEX domain under a systemd user manager: the demo's and the integration tests' stage.
-- Test and demo infrastructure (plain Lua 5.4 with io/os; not loaded by imexguard itself).
-- It expects to run inside tests/with-systemd, which exports IMEXGUARD_TEST_BUS and
-- IMEXGUARD_TEST_UNIT_DIR for a private `systemd --user` in a private mount namespace.
--
--   local simdomain = require("simdomain")
--   local d = simdomain.new{ nodes = 4, build = "build" }
--   d:write_node_list("n1", {"n3", "n4"})      -- a stale list for node n1
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
-- @tparam function pred called without arguments
-- @tparam number timeout seconds
-- @tparam[opt] number interval seconds between polls (0.05)
-- @return pred's truthy value, or nil after the timeout
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

--- A random third octet for 127.0.<net>.0/24, seeded from the clock and a fresh temp name.
-- @treturn integer 10..249
function M.random_net()
  local _, t = capture("mktemp -u XXXXXXXX")
  local seed = os.time()
  for i = 1, #t do seed = (seed * 31 + t:byte(i)) % 2147483647 end
  math.randomseed(seed)
  return math.random(10, 249)
end

--- Create a domain of `opts.nodes` simulated nodes n1..nN on 127.0.<net>.1..N.
-- Needs tests/with-systemd (raises without IMEXGUARD_TEST_BUS or IMEXGUARD_TEST_UNIT_DIR).
-- @tparam[opt] table opts `nodes` (4); `build`: build directory (imexsim, nvidia-imex-ctl, imexguard;
--   default IMEXGUARD_BUILD, else build/); `net`: third octet (random); `prefix`: unit name prefix
--   ("imexsim"); `root`: directory to use (default: a new temp dir); `server_port`, `cmd_port`
--   (50000, 50005); `extra_cfg`: lines for every config.cfg; `settings`: extra imexguard settings
--   (Lua source lines) for every node; `fabric`: true to give every node the simulator's nvidia-smi
--   (contrib/imexsim/nvidia-smi, setting nvidia_smi) answering from the node's file `gpus`
--   (M:set_gpus; without one, nvidia-smi fails as on a node without the driver) and checking the
--   node's stand-in for /proc/driver/nvidia/version (M:set_kernel_driver); without it the nodes
--   have no GPUs: fabric_check = "off"
--   `racks`: nodes per NVLink rack ({4, 4}: M:lay_out_racks;
--   replaces `nodes`)
-- @treturn table the domain (methods below)
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
  self.names, self.addr, self.strays, self.dropins = {}, {}, {}, {}
  local map = {}
  if opts.racks then self:lay_out_racks(opts.racks) end
  for i = 1, self.n do
    local name = "n" .. i
    self.names[i] = name
    self.addr[name] = self.addr[name] or string.format("127.0.%d.%d", self.net, i)
    map[#map + 1] = name .. " " .. self.addr[name]
  end
  write_file(self.root .. "/addresses", table.concat(map, "\n") .. "\n")
  for _, name in ipairs(self.names) do
    self:write_node_files(name, opts)
  end
  self:install_unit()
  return self
end

--- Stage of `M.new` with `racks`: NVLink racks (IMEX domains, docs/design.md C29) of the given
-- sizes. Rack r's nodes continue the numbering n1..nN and have the addresses 127.<r>.<net>.<k> (k:
-- 1-based within the rack), so that each rack is an address range of its own; Slurm's block
-- topology of the racks (`BlockName=rack<r> Nodes=...`) is written to topology.conf beside an
-- (empty) slurm.conf in the domain's root, which run_all names in SLURM_CONF as slurmd does.
-- self.racks = {{names of rack 1}, ...}, self.rack = {[name] = r}.
-- @tparam {integer,...} sizes nodes per rack
function M:lay_out_racks(sizes)
  self.racks, self.rack = {}, {}
  local lines, i = { "# NVLink racks of the simulated domain: one IMEX domain each" }, 0
  for r, size in ipairs(sizes) do
    local rack = {}
    for k = 1, size do
      i = i + 1
      local name = "n" .. i
      rack[k], self.rack[name] = name, r
      self.addr[name] = string.format("127.%d.%d.%d", r, self.net, k)
    end
    self.racks[r] = rack
    lines[#lines + 1] = string.format("BlockName=rack%d Nodes=n[%d-%d]", r, i - size + 1, i)
  end
  self.n = i
  lines[#lines + 1] = "BlockSizes=" .. sizes[1]
  self.slurm_conf = self.root .. "/slurm.conf"
  write_file(self.slurm_conf, "# the simulated cluster: imexguard reads topology.conf beside it\n")
  write_file(self.root .. "/topology.conf", table.concat(lines, "\n") .. "\n")
end

--- Stage of `M.new`: write one node's directory: state/, config.cfg and imexguard.conf.
-- @tparam string name node name ("n1")
-- @tparam table opts `M.new`'s options (`server_port`, `cmd_port`, `extra_cfg`, `settings`)
function M:write_node_files(name, opts)
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
    -- Where a daemon started by hand (M:start_stray) is found; the unit's daemon writes it too.
    "IMEXSIM_PID_FILE=" .. dir .. "/imex.pid",
    -- The instance's start and the mismatches it remembers (M:daemon_state; C52).
    "IMEXSIM_STATE_FILE=" .. dir .. "/imex.state",
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
  if opts.fabric then
    settings[#settings + 1] = string.format("nvidia_smi = { %q, \"--state\", %q, \"--proc-version\", %q }",
      abspath(self.src_dir()) .. "/imexsim/nvidia-smi", dir .. "/gpus", self:driver_version_file(name))
    settings[#settings + 1] = string.format("driver_version_file = %q", self:driver_version_file(name))
  else
    settings[#settings + 1] = 'fabric_check = "off"' -- simulated nodes have no GPUs
  end
  for _, l in ipairs(opts.settings or {}) do settings[#settings + 1] = l end
  write_file(dir .. "/imexguard.conf", table.concat(settings, "\n") .. "\n")
end

--- Stage of `M.new`: install the template unit (contrib/imexsim/imexsim@.service.in; one instance
-- per node) in the manager's unit directory and reload the manager.
function M:install_unit()
  local tmpl = assert(read_file(self.src_dir() .. "/imexsim/imexsim@.service.in"))
  tmpl = tmpl:gsub("@IMEXSIM@", self.build .. "/imexsim"):gsub("@SIMROOT@", self.root)
  os.execute("mkdir -p " .. sh_quote(self.unit_dir))
  write_file(self.unit_dir .. "/" .. self.prefix .. "@.service", tmpl)
  assert(self:systemctl("daemon-reload"))
end

--- Fast peer reconnects (ms), so that a test domain's mesh settles within a second or two.
M.FAST_RECONNECT = { "IMEXSIM_RECONNECT_MS=100", "IMEXSIM_RECONNECT_MAX_MS=400" }

--- config.cfg lines of the simulator's earlier rule for node-map mismatches: a pair recovers once
-- either end restarts with a matching list (IMEXSIM_MISMATCH_CLEARS=one; its default keeps the block
-- until both ends restarted, C32). For specs about something else that restart one end only.
M.MISMATCH_CLEARS_ONE = { "IMEXSIM_MISMATCH_CLEARS=one" }

--- A new domain of `n` nodes (not started) with fast reconnects, whose node files all list every
-- node in order: the usual start of a test.
-- @tparam integer n number of nodes
-- @tparam[opt] {string,...} extra_cfg more config.cfg lines of every node
-- @treturn table the domain
function M.in_order(n, extra_cfg)
  local cfg = {}
  for _, l in ipairs(M.FAST_RECONNECT) do cfg[#cfg + 1] = l end
  for _, l in ipairs(extra_cfg or {}) do cfg[#cfg + 1] = l end
  local d = M.new { nodes = n, extra_cfg = cfg }
  for _, name in ipairs(d.names) do d:write_node_list(name, d.names) end
  return d
end

--- Directory of contrib/ (this file's directory).
-- @treturn string the directory, as this file was loaded (relative or absolute)
function M.src_dir()
  local src = debug.getinfo(1, "S").source:sub(2)
  return src:match("^(.*)/[^/]*$") or "."
end

--- A node's unit name.
-- @tparam string name node name ("n1")
-- @treturn string e.g. "imexsim@n1.service"
function M:unit(name) return self.prefix .. "@" .. name .. ".service" end

--- A node's directory (config.cfg, nodes_config.cfg, imex.log, state/).
-- @tparam string name node name
-- @treturn string absolute path
function M:dir(name) return self.root .. "/" .. name end

--- A node's imexguard settings file.
-- @tparam string name node name
-- @treturn string absolute path
function M:config(name) return self:dir(name) .. "/imexguard.conf" end

--- systemctl --user against the private manager (callable as a method or a function).
-- @param _ ignored (the domain, when called as a method)
-- @tparam string ... systemctl's arguments, each quoted for the shell
-- @treturn boolean whether systemctl exited 0
-- @treturn string its stdout and stderr
function M.systemctl(_, ...)
  local args = {}
  for _, a in ipairs({ ... }) do args[#args + 1] = sh_quote(a) end
  local ok, out = capture("systemctl --user --no-pager " .. table.concat(args, " "))
  return ok, out
end

--- Write a node's nodes_config.cfg directly (a stale list left by an earlier job).
-- @tparam string name node name
-- @tparam {string,...} list node names of this domain (written as their addresses) or addresses
function M:write_node_list(name, list)
  local lines = {}
  for _, n in ipairs(list) do lines[#lines + 1] = self.addr[n] or n end
  write_file(self:dir(name) .. "/nodes_config.cfg", table.concat(lines, "\n") .. "\n")
end

--- Write the GPUs the simulator's nvidia-smi reports for a node (M.new's `fabric`): the lines of
-- its file `gpus` (the format is in contrib/imexsim/nvidia-smi: "0, Completed, Success, UUID,
-- CLIQUE", a timed transition "...; until EPOCH: ...", "hang", "exit CODE TEXT").
-- @tparam string name node name
-- @tparam table lines list of strings
function M:set_gpus(name, lines)
  write_file(self:dir(name) .. "/gpus", table.concat(lines, "\n") .. "\n")
end

--- The GPU lines of a node of one kind, for M:set_gpus (contrib/imexsim/nvidia-smi's format).
-- @tparam string kind "rack" (a tray of an NVLink rack: registered in partition UUID.CLIQUE),
--   "hgx" (NVLink inside the node only: Completed, Success, CliqueId 0, a zero ClusterUUID, C41),
--   "hgx-starting" (an HGX board whose GPUs are Not Started: Fabric Manager not running or in
--   partition mode, C41; its platformInfo names no rack slot, no partition_assigned) or "none" (no
--   NVSwitch: every field N/A)
-- @tparam[opt] integer n GPUs (4)
-- @tparam[opt] string uuid the ClusterUUID of "rack" (M.CLUSTER_UUID)
-- @tparam[opt] integer clique the CliqueId of "rack" (32766)
-- @treturn {string,...} lines
function M.gpu_lines(kind, n, uuid, clique)
  local fields = ({
    rack = string.format("Completed, Success, %s, %d", uuid or M.CLUSTER_UUID, clique or 32766),
    hgx = "Completed, Success, 00000000-0000-0000-0000-000000000000, 0",
    ["hgx-starting"] = "Not Started, N/A, N/A, N/A",
    none = "N/A, N/A, N/A, N/A" })[kind]
  assert(fields, "gpu_lines: unknown kind " .. tostring(kind))
  local lines = {}
  for i = 0, (n or 4) - 1 do lines[#lines + 1] = i .. ", " .. fields end
  if kind == "hgx-starting" then
    lines[#lines + 1] = "platform chassis_serial_number=, slot_number=N/A, tray_index=N/A"
    lines[#lines + 1] = "health * partition_assigned=-"
  end
  return lines
end
--- The ClusterUUID of M.gpu_lines("rack").
M.CLUSTER_UUID = "9c6f5af3-53bf-49b5-a436-b66766c413c3"

--- A node's stand-in for /proc/driver/nvidia/version: the loaded kernel module's version, which
-- the simulator's nvidia-smi compares with its `driver` line (C43: NVML fails on a mismatch).
-- @tparam string name node name
-- @treturn string its path
function M:driver_version_file(name) return self:dir(name) .. "/nvidia-driver-version" end

--- Load a kernel module of `version` on a node (write its stand-in for /proc/driver/nvidia/version,
-- in the open modules' layout), or unload it (nil: the file is removed; nvidia-smi then checks
-- nothing).
-- @tparam string name node name
-- @tparam ?string version e.g. "580.95.05"
function M:set_kernel_driver(name, version)
  local path = self:driver_version_file(name)
  if not version then
    os.remove(path)
    return
  end
  write_file(path, string.format("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  "
    .. "Release Build  (imexsim@localhost)  Thu Jan  1 00:00:00 UTC 2026\n"
    .. "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", version))
end

--- A node's nodes_config.cfg.
-- @tparam string name node name
-- @treturn ?string its bytes, or nil when it cannot be read
function M:nodes_file(name) return read_file(self:dir(name) .. "/nodes_config.cfg") end

--- A unit property (systemctl show -p NAME --value).
-- @tparam string name node name
-- @tparam string prop property name ("ActiveState", "InvocationID")
-- @treturn ?string its value without trailing whitespace, or nil when systemctl fails
function M:prop(name, prop)
  local ok, out = self:systemctl("show", "-p", prop, "--value", self:unit(name))
  if not ok then return nil end
  return (out:gsub("%s+$", ""))
end

--- The invocation ID of a node's unit.
-- @tparam string name node name
-- @treturn ?string the ID ("" when the unit never ran), or nil when systemctl fails
function M:invocation(name) return self:prop(name, "InvocationID") end

--- Enable and start every node's unit (or those named), as nvidia-imex is on a real node.
-- @tparam[opt] {string,...} names node names (default: every node)
-- @return true, or nil and a message naming the node with systemctl's output
function M:start(names)
  for _, name in ipairs(names or self.names) do
    local ok, out = self:systemctl("enable", "--now", self:unit(name))
    if not ok then return nil, name .. ": " .. out end
  end
  return true
end

--- Stop and disable every unit of the domain (ignores units that are not running), and every
-- daemon started by hand (M:start_stray).
-- @return nothing
function M:stop()
  -- One systemctl call for all units (a 72-node domain: one call instead of 144, each a few
  -- hundred ms on a loaded machine); unit by unit when the call fails (e.g. a unit file removed).
  if not self:each_unit("disable", "--now") then
    for _, name in ipairs(self.names) do self:systemctl("disable", "--now", self:unit(name)) end
  end
  -- systemctl resets each unit it can and fails for the others (a stopped unit that systemd
  -- already unloaded is "not loaded"): nothing to do about those.
  self:each_unit("reset-failed")
  self:stop_strays()
end

--- systemctl --user VERB [OPTIONS...] on the units of `names` (default every node) in one call:
-- systemd runs the jobs in parallel.
-- @tparam string verb e.g. "start", "disable", "reset-failed"
-- @tparam[opt] string option e.g. "--now"
-- @tparam[opt] {string,...} names node names
-- @treturn boolean whether systemctl exited 0
-- @treturn string its output
function M:each_unit(verb, option, names)
  local args = { verb }
  if option then args[#args + 1] = option end
  for _, n in ipairs(names or self.names) do args[#args + 1] = self:unit(n) end
  return self:systemctl(table.unpack(args))
end

--- Stop the domain, then remove its directory, unit file and drop-ins.
-- @return nothing
function M:destroy()
  self:stop()
  os.remove(self.unit_dir .. "/" .. self.prefix .. "@.service")
  for path in pairs(self.dropins) do
    os.remove(path)
    os.remove((path:gsub("/[^/]*$", "")))
  end
  self:systemctl("daemon-reload")
  os.execute("rm -rf " .. sh_quote(self.root))
end

--- Set keys of a node's config.cfg (or of the config file at `path`): each key of `keys` replaces
-- its line (or is appended); a value `false` removes the key. Like the real daemon, a running
-- simulated daemon reads its config only when it starts.
-- @param name node name ("n1")
-- @param keys table KEY -> value (string, number or false)
-- @param path optional config file (default the node's config.cfg)
function M:configure(name, keys, path)
  path = path or (self:dir(name) .. "/config.cfg")
  local lines, seen = {}, {}
  for line in (read_file(path) or ""):gmatch("[^\n]+") do
    local k = line:match("^%s*([%w_]+)%s*=")
    if k and keys[k] ~= nil then
      seen[k] = true
      if keys[k] ~= false then lines[#lines + 1] = k .. "=" .. tostring(keys[k]) end
    else
      lines[#lines + 1] = line
    end
  end
  local new = {}
  for k, v in pairs(keys) do
    if not seen[k] and v ~= false then new[#new + 1] = k .. "=" .. tostring(v) end
  end
  table.sort(new)
  for _, l in ipairs(new) do lines[#lines + 1] = l end
  write_file(path, table.concat(lines, "\n") .. "\n")
end

--- Write a drop-in for one node's unit (`<unit>.d/50-simdomain.conf`, replacing an earlier one of
-- this helper) and reload the manager. Options of systemd.unit(5) and systemd.service(5), e.g.
-- `{ Unit = { StartLimitBurst = 3, StartLimitIntervalSec = 20 },
--    Service = { Restart = "on-failure", RestartSec = "100ms" } }`. A list value writes the
-- option once per element, in order (`ExecStart = { "", "/bin/x -c y" }` resets, then sets).
-- @param name node name
-- @param sections table section name -> { option -> value or list of values }
-- @return true, or nil and systemctl's output
function M:unit_options(name, sections)
  local dir = self.unit_dir .. "/" .. self:unit(name) .. ".d"
  os.execute("mkdir -p " .. sh_quote(dir))
  local text = { "# written by contrib/simdomain.lua (test and demo infrastructure)" }
  local snames = {}
  for sname in pairs(sections) do snames[#snames + 1] = sname end
  table.sort(snames)
  for _, sname in ipairs(snames) do
    text[#text + 1] = "[" .. sname .. "]"
    local opts = {}
    for k in pairs(sections[sname]) do opts[#opts + 1] = k end
    table.sort(opts)
    for _, k in ipairs(opts) do
      local v = sections[sname][k]
      for _, one in ipairs(type(v) == "table" and v or { v }) do
        text[#text + 1] = k .. "=" .. tostring(one)
      end
    end
  end
  local path = dir .. "/50-simdomain.conf"
  write_file(path, table.concat(text, "\n") .. "\n")
  self.dropins[path] = true
  local ok, out = self:systemctl("daemon-reload")
  if not ok then return nil, out end
  return true
end

--- Give a node's unit another config: copy the node's config.cfg to `path` with `keys` applied
-- (M:configure), and make the unit's ExecStart `imexsim -c PATH` through a drop-in, as a site
-- whose unit names its own config. The node's config.cfg stays where it was and is not read by
-- the daemon. Takes effect at the unit's next start.
-- @param name node name
-- @param path the other config file (its directory is created)
-- @param keys optional keys to set in it, e.g. `{ IMEX_NODE_CONFIG_FILE = other_nodes_file }`
-- @return path, or nil and systemctl's output
function M:use_config(name, path, keys)
  os.execute("mkdir -p " .. sh_quote((path:gsub("/[^/]*$", ""))))
  write_file(path, assert(read_file(self:dir(name) .. "/config.cfg")))
  self:configure(name, keys or {}, path)
  local ok, out = self:unit_options(name, {
    Service = { ExecStart = { "", self.build .. "/imexsim -c " .. path } },
  })
  if not ok then return nil, out end
  return path
end

--- Start node `name`'s simulated daemon by hand, outside its unit (an admin debugging IMEX):
-- `imexsim -c CONFIG` in a transient scope of the user manager (`systemd-run --user --scope`, as a
-- command typed in a login session runs in the session's scope), which forks (DAEMONIZE=1). It
-- holds the node's ports, so the unit cannot start meanwhile. M:stop_strays (also run by stop and
-- destroy) kills it by PID; the manager's own shutdown stops the scope if a test never got there.
-- @param name node name
-- @param config optional config file (default the node's config.cfg; it must set IMEXSIM_PID_FILE
--   to the node's imex.pid, as the node's own config does)
-- @return the daemon's PID and its scope's name, or nil and the start's output
function M:start_stray(name, config)
  local pidfile = self:dir(name) .. "/imex.pid"
  os.remove(pidfile)
  local scope = string.format("%s-stray-%s-%s-%d.scope", self.prefix, name,
    self.root:match("([^/.]+)$"), #self.strays + 1)
  local ok, out = capture("systemd-run --user --quiet --collect --scope --unit=" .. sh_quote(scope)
    .. " " .. sh_quote(self.build .. "/imexsim") .. " -c "
    .. sh_quote(config or (self:dir(name) .. "/config.cfg")))
  local pid = tonumber((read_file(pidfile) or ""):match("%d+"))
  if not ok or not pid then return nil, out end
  self.strays[#self.strays + 1] = pid
  return pid, scope
end

--- Is process `pid` alive (and not a zombie)?
local function alive(pid)
  local stat = read_file("/proc/" .. pid .. "/stat")
  return stat ~= nil and stat:match("^%d+ %b() (%a)") ~= "Z"
end
M.alive = alive

--- Stop every daemon started by M:start_stray, by PID: SIGTERM, up to 5 s, then SIGKILL.
-- @return nothing
function M:stop_strays()
  for _, pid in ipairs(self.strays) do
    if alive(pid) then
      os.execute("kill -TERM " .. pid .. " 2>/dev/null")
      if not M.wait_until(function() return not alive(pid) end, 5) then
        os.execute("kill -KILL " .. pid .. " 2>/dev/null")
      end
    end
  end
  self.strays = {}
end

--- The Slurm prolog environment of a job on a node: the real 22.05 variables
-- (tests/fixtures/slurm/prolog-env-22.05.txt) with this job's values.
-- @tparam number|string job job id
-- @tparam string nodelist hostlist expression (SLURM_NODELIST)
-- @tparam string nodename SLURMD_NODENAME
-- @tparam[opt] integer nnodes SLURM_JOB_NUM_NODES (1)
-- @treturn table variable name -> string
function M.prolog_env(job, nodelist, nodename, nnodes)
  return {
    SLURMD_NODENAME = nodename, SLURM_CLUSTER_NAME = "sim", SLURM_JOBID = tostring(job),
    SLURM_JOB_ID = tostring(job), SLURM_JOB_NUM_NODES = tostring(nnodes or 1),
    SLURM_JOB_PARTITION = "p", SLURM_JOB_RESTART_COUNT = "0", SLURM_JOB_UID = "0",
    SLURM_JOB_GID = "0", SLURM_JOB_USER = "root", SLURM_NODELIST = nodelist,
    SLURM_SCRIPT_CONTEXT = "prolog_slurmd", SLURM_UID = "0", PATH = "/usr/sbin:/usr/bin:/sbin:/bin",
  }
end

--- Run `imexguard COMMAND` for a job on every node named (default: the job's nodes) at once, as
-- Slurm starts the prologs of a job; `delays` starts some later (Slurm's skew: up to a second or
-- more apart on a large allocation). A delay is the input of the run, not a synchronisation.
-- @tparam table opts `job` (id), `nodelist` (hostlist expression), `names` (nodes to run on),
--   `command` ("prolog"), `env` (extra or replaced variables; false removes), `args` (extra
--   imexguard arguments, one shell string), `delays` ({[name] = seconds} after the others start)
-- @treturn table { [name] = {status = exit code, output = stderr+stdout text, outcome = name,
--   started = wall-clock seconds when its imexguard started, ended = when it exited} }
function M:run_all(opts)
  local names = opts.names or self.names
  local procs = {}
  for _, name in ipairs(names) do
    local env = M.prolog_env(opts.job, opts.nodelist, name, #names)
    env.SLURM_CONF = self.slurm_conf
    for k, v in pairs(opts.env or {}) do env[k] = v or nil end
    local assign = {}
    for k, v in pairs(env) do assign[#assign + 1] = k .. "=" .. sh_quote(v) end
    table.sort(assign)
    local out = self:dir(name) .. "/last-" .. (opts.command or "prolog") .. ".out"
    local delay = (opts.delays or {})[name]
    local cmd = string.format("%st0=$(date +%%s.%%N); env -i %s %s --config %s %s %s >%s 2>&1; "
      .. "echo $? $t0 $(date +%%s.%%N)", delay and string.format("sleep %g; ", delay) or "",
      table.concat(assign, " "), sh_quote(self.build .. "/imexguard"), sh_quote(self:config(name)),
      opts.args or "", opts.command or "prolog", sh_quote(out))
    procs[name] = { pipe = assert(io.popen(cmd, "r")), out = out }
  end
  local results = {}
  for name, p in pairs(procs) do
    local status, t0, t1 = p.pipe:read("a"):match("(%d+) (%S+) (%S+)")
    p.pipe:close()
    local text = read_file(p.out) or ""
    results[name] = { status = tonumber(status), output = text, outcome = text:match("outcome=([%w%-]+)"),
      started = tonumber(t0), ended = tonumber(t1) }
  end
  return results
end

--- run_all with command "prolog".
-- @tparam table opts as for run_all (its `command` is set)
-- @treturn table as run_all's
function M:prologs(opts)
  opts.command = "prolog"
  return self:run_all(opts)
end

--- run_all with command "epilog": the job ends and Slurm runs the epilog on each of its nodes.
-- @tparam table opts as for run_all (its `command` is set)
-- @treturn table as run_all's
function M:epilogs(opts)
  opts.command = "epilog"
  return self:run_all(opts)
end

--- The simulated daemon's state file of a node (contrib/imexsim: IMEXSIM_STATE_FILE, which M.new sets
-- to NODE/imex.state): its lines as a table, with `started` (the instance's start, wall-clock
-- seconds) and `blocks` ({[peer id] = wall-clock seconds since when it remembers a node-map mismatch
-- with that peer}) decoded. nil while there is none (the daemon is not running).
-- @tparam string name node name
-- @treturn ?table
function M:daemon_state(name)
  local text = read_file(self:dir(name) .. "/imex.state")
  if not text then return nil end
  local t = {}
  for k, v in text:gmatch("([%w_]+)=([^\n]*)") do t[k] = v end
  t.started = tonumber(t.started) and tonumber(t.started) / 1000
  local blocks = {}
  for id, ms in (t.blocks or ""):gmatch("(%d+)@(%d+)") do blocks[tonumber(id)] = tonumber(ms) / 1000 end
  t.blocks = blocks
  return t
end

--- How often node `name`'s simulated daemon has started: every start appends one line with
-- "starting" to its log (contrib/imexsim).
-- @tparam string name node name
-- @treturn integer the number of starts (0 while there is no log)
function M:starts(name)
  local log = read_file(self:dir(name) .. "/imex.log") or ""
  local n = 0
  for line in log:gmatch("[^\n]+") do
    if line:find("imexsim %S+ starting") then n = n + 1 end
  end
  return n
end

--- Run `nvidia-imex-ctl -c CONFIG ARGS` for a node.
-- @param name node name
-- @param args the ctl's arguments as one shell string ("-q", "-N -t 300")
-- @param config optional config file (default the node's config.cfg)
-- @return its stdout and stderr, and its exit status (number)
function M:ctl(name, args, config)
  local _, out, status = capture(sh_quote(self.build .. "/nvidia-imex-ctl") .. " -c " ..
    sh_quote(config or (self:dir(name) .. "/config.cfg")) .. " " .. args)
  return out, status
end

--- `nvidia-imex-ctl -N -j` of a node, decoded.
-- @tparam string name node name
-- @tparam[opt] string config config file (default the node's config.cfg)
-- @treturn[1] table the decoded JSON
-- @return[2] nil
-- @treturn[2] string the ctl's output (not JSON, or no cjson module)
function M:ctl_json(name, config)
  local out = self:ctl(name, "-N -j", config)
  local ok, cjson = pcall(require, "cjson")
  if not ok then return nil, out end
  local okd, v = pcall(cjson.decode, out)
  if okd and type(v) == "table" then return v end
  return nil, out
end

return M
