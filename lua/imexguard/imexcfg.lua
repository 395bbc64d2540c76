--- NVIDIA IMEX `config.cfg`: parse, package defaults, lookup with defaults, lint, and the config
-- path of a unit's ExecStart.
--
-- Pure Lua, no side effects. Source: NVIDIA IMEX guide and the config.cfg shipped with the
-- nvidia-imex package (`KEY=VALUE` lines, `#` comments), and the unit NVIDIA recommends
-- (`ExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg`).
-- @module imexguard.imexcfg
local trim = require("imexguard.text").trim

local M = {}

-- NVIDIA's package defaults (NVIDIA IMEX guide, the config.cfg of the nvidia-imex package).
local DEFAULTS = {
  SERVER_PORT = "50000",
  IMEX_NODE_CONFIG_FILE = "/etc/nvidia-imex/nodes_config.cfg",
  IMEX_CMD_ENABLED = "1",
  IMEX_CMD_PORT = "50005",
  IMEX_CMD_BIND_INTERFACE_IP = "",
  BIND_INTERFACE_IP = "",
  IMEX_WAIT_FOR_QUORUM = "RECOVERY",
  IMEX_NODE_DISCONNECTED_GRACE_TIME = "-1",
  DAEMONIZE = "1",
  LOG_FILE_NAME = "/var/log/nvidia-imex.log",
}

--- Parse the text of a config.cfg.
-- Lines are `KEY=VALUE`; whitespace around the key and around the value is trimmed (a CR of a
-- CRLF file too); the value may be empty; everything after the first `=` is the value. Blank
-- lines and lines whose first non-blank character is `#` are ignored. A key is
-- `[A-Za-z_][A-Za-z0-9_]*`. A key given twice is an error: which one the daemon uses is not
-- documented, and imexguard does not guess.
-- @tparam string text file contents
-- @treturn[1] table `{KEY = "value"}` (strings only)
-- @treturn[2] nil
-- @treturn[2] string error naming the line number and the line
-- @raise when text is not a string
function M.parse(text)
  if type(text) ~= "string" then
    error("imexcfg.parse: expected a string, got " .. type(text), 2)
  end
  local cfg, where, lineno = {}, {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    lineno = lineno + 1
    local body = trim(line)
    if body ~= "" and body:sub(1, 1) ~= "#" then
      local key, value = body:match("^([^=]*)=(.*)$")
      if not key then
        return nil, string.format("config.cfg line %d: no '=' in '%s'", lineno, body)
      end
      key = trim(key)
      if not key:match("^[%a_][%w_]*$") then
        return nil, string.format("config.cfg line %d: bad key '%s'", lineno, key)
      end
      if where[key] then
        return nil, string.format("config.cfg line %d: %s is already set on line %d", lineno, key, where[key])
      end
      cfg[key], where[key] = trim(value), lineno
    end
  end
  return cfg
end

--- NVIDIA's package defaults, a fresh table on every call.
-- @treturn table `{KEY = "value"}`: SERVER_PORT=50000, IMEX_CMD_PORT=50005,
--   IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg, IMEX_CMD_ENABLED=1,
--   IMEX_CMD_BIND_INTERFACE_IP="", BIND_INTERFACE_IP="", IMEX_WAIT_FOR_QUORUM=RECOVERY,
--   IMEX_NODE_DISCONNECTED_GRACE_TIME=-1, DAEMONIZE=1, LOG_FILE_NAME=/var/log/nvidia-imex.log
function M.defaults()
  local t = {}
  for k, v in pairs(DEFAULTS) do
    t[k] = v
  end
  return t
end

--- A value of a parsed config, else NVIDIA's default.
-- A key present in cfg wins even when its value is empty (an empty `BIND_INTERFACE_IP` means
-- "choose automatically", the same as the default).
-- @tparam table|nil cfg result of `parse` (nil: defaults only)
-- @tparam string key
-- @treturn string|nil the value, nil when neither cfg nor the defaults have it
-- @raise when key is not a string
function M.get(cfg, key)
  if type(key) ~= "string" then
    error("imexcfg.get: key must be a string", 2)
  end
  if cfg ~= nil and cfg[key] ~= nil then
    return cfg[key]
  end
  return DEFAULTS[key]
end

--- A port number from a parsed config (SERVER_PORT, IMEX_CMD_PORT), else the default.
-- @tparam table|nil cfg result of `parse`
-- @tparam string key
-- @treturn[1] integer 1-65535
-- @treturn[2] nil
-- @treturn[2] string error naming the key and its value
function M.port(cfg, key)
  local v = M.get(cfg, key)
  local n = v and v:match("^%d+$") and math.tointeger(tonumber(v))
  if not n or n < 1 or n > 65535 then
    return nil, string.format("config.cfg: %s='%s' is not a port number", key, tostring(v))
  end
  return n
end

--- Where the daemon and the ctl read their config when no `-c` is given (NVIDIA IMEX guide).
M.DEFAULT_PATH = "/etc/nvidia-imex/config.cfg"

-- True when an address is a loopback address (127.0.0.0/8, ::1, localhost).
local function loopback(v)
  local a = v:lower():match("^%[?(.-)%]?$")
  return a:match("^127%.%d+%.%d+%.%d+$") ~= nil or a:match("^::ffff:127%.%d+%.%d+%.%d+$") ~= nil
    or a == "::1" or a == "0:0:0:0:0:0:0:1" or a == "localhost"
end

-- Findings about the command service and the ports (see lint).
local function lint_ports(cfg, add)
  local cmd = cfg.IMEX_CMD_BIND_INTERFACE_IP
  if cmd and cmd ~= "" and loopback(cmd) then
    add("IMEX_CMD_BIND_INTERFACE_IP", "error", "IMEX_CMD_BIND_INTERFACE_IP=%s is a loopback address: the "
      .. "other nodes cannot reach this node's command port and show it UNAVAILABLE", cmd)
  end
  local bind = cfg.BIND_INTERFACE_IP
  if bind and bind ~= "" and loopback(bind) then
    add("BIND_INTERFACE_IP", "error", "BIND_INTERFACE_IP=%s is a loopback address: the other nodes cannot "
      .. "connect to this node's daemon", bind)
  end
  local enabled = cfg.IMEX_CMD_ENABLED
  if enabled == "0" then
    add("IMEX_CMD_ENABLED", "error", "IMEX_CMD_ENABLED=0 disables the command service: the ctl cannot query "
      .. "this node and the other nodes show it UNAVAILABLE")
  elseif enabled ~= nil and enabled ~= "1" then
    add("IMEX_CMD_ENABLED", "error", "IMEX_CMD_ENABLED='%s' is neither 0 nor 1", enabled)
  end
  local ports = {}
  for _, key in ipairs({ "SERVER_PORT", "IMEX_CMD_PORT" }) do
    local v = cfg[key]
    if v == nil or v == "" then
      add(key, "warning", "%s is not set: the daemon uses %s, and every node of the domain must use the "
        .. "same port", key, DEFAULTS[key])
    else
      local n = M.port(cfg, key)
      if n then ports[key] = n else add(key, "error", "%s='%s' is not a port number (1-65535)", key, v) end
    end
  end
  if ports.SERVER_PORT and ports.SERVER_PORT == ports.IMEX_CMD_PORT then
    add("IMEX_CMD_PORT", "error", "IMEX_CMD_PORT=%d is also SERVER_PORT: the two services need two ports",
      ports.IMEX_CMD_PORT)
  end
end

--- Lint a parsed config.cfg before any job runs (field case C22 of docs/design.md: a configuration
-- fault shows as peers UNAVAILABLE, and must be named before it is mistaken for faulty peers).
-- Errors: `IMEX_CMD_BIND_INTERFACE_IP` or `BIND_INTERFACE_IP` a loopback address (127.0.0.0/8,
-- ::1, localhost); `IMEX_CMD_ENABLED=0` or neither 0 nor 1; `SERVER_PORT` or `IMEX_CMD_PORT` not a
-- port number, or both the same; `IMEX_NODE_CONFIG_FILE` not an absolute path (the daemon's
-- working directory is not the admin's). Warnings: `SERVER_PORT` or `IMEX_CMD_PORT` missing or
-- empty (the daemon's default applies, which every node must share).
-- @tparam table cfg result of `parse`
-- @tparam[opt] string path the file's path, named in every finding (default `DEFAULT_PATH`)
-- @treturn table list of findings in a fixed key order, empty when the config is clean:
--   `{ {key = string, value = string|nil, level = "error"|"warning", text = one line "PATH: ..."}, ... }`
-- @raise when cfg is not a table or path is not a string
function M.lint(cfg, path)
  if type(cfg) ~= "table" then
    error("imexcfg.lint: cfg must be a parsed config.cfg", 2)
  end
  if path ~= nil and type(path) ~= "string" then
    error("imexcfg.lint: path must be a string", 2)
  end
  path = path or M.DEFAULT_PATH
  local out = {}
  local function add(key, level, fmt, ...)
    out[#out + 1] = { key = key, value = cfg[key], level = level,
      text = (path .. ": " .. string.format(fmt, ...)):gsub("[\r\n]+", " ") }
  end
  lint_ports(cfg, add)
  local nodes = cfg.IMEX_NODE_CONFIG_FILE
  if nodes and nodes ~= "" and nodes:sub(1, 1) ~= "/" then
    add("IMEX_NODE_CONFIG_FILE", "error", "IMEX_NODE_CONFIG_FILE=%s is not an absolute path: the daemon "
      .. "would read another file", nodes)
  end
  return out
end

--- The config path of a unit's ExecStart argv: the value of `-c PATH` (or `-cPATH`), else
-- `DEFAULT_PATH` (what nvidia-imex reads without `-c`, NVIDIA IMEX guide). The argv is systemd's
-- (`ExecStart` property: argv[1] is the program as the unit names it, and is not searched).
-- @tparam {string,...} argv the command line, program first
-- @treturn[1] string the config path (absolute)
-- @treturn[1] boolean true when it came from `-c`, false for the default
-- @treturn[2] nil
-- @treturn[2] string one-line error naming the ExecStart argument: `-c` without a value (last, or
--   followed by an option or an empty string), `-c` given twice, a relative path, or a value with
--   white space (a shell wrapper's `-c` command line)
-- @raise when argv is not a list of strings
function M.config_path(argv)
  if type(argv) ~= "table" then
    error("imexcfg.config_path: argv must be a list of strings", 2)
  end
  for i, a in ipairs(argv) do
    if type(a) ~= "string" then error("imexcfg.config_path: argv[" .. i .. "] is not a string", 2) end
  end
  local found
  local i = 2
  while i <= #argv do
    local a, value = argv[i], nil
    if a == "-c" then
      value = argv[i + 1]
      if value == nil or value == "" or value:sub(1, 1) == "-" then
        return nil, string.format("ExecStart: -c without a value (%s)", table.concat(argv, " "))
      end
      i = i + 1
    elseif a:match("^%-c.") then
      value = a:sub(3)
    end
    if value then
      if found then
        return nil, string.format("ExecStart: -c given twice (%s and %s)", found, value)
      end
      if value:sub(1, 1) ~= "/" then
        return nil, string.format("ExecStart: -c %s is not an absolute path", value)
      end
      -- a shell's -c takes a command line (`sh -c "nvidia-imex -c /x"`): not a config path
      if value:find("%s") then
        return nil, string.format("ExecStart: -c '%s' is a command line, not a config path", value)
      end
      found = value
    end
    i = i + 1
  end
  if found then return found, true end
  return M.DEFAULT_PATH, false
end

return M
