-- SPDX-License-Identifier: Apache-2.0
--- NVIDIA IMEX `config.cfg`: parse, package defaults, lookup with defaults, lint, and the config
-- path of a unit's ExecStart.
--
-- Pure Lua, no side effects. Source: NVIDIA IMEX guide and the config.cfg shipped with the
-- nvidia-imex package (`KEY=VALUE` lines, `#` comments), and the unit NVIDIA recommends
-- (`ExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg`).
-- @module imexguard.imexcfg
local trim = require("imexguard.text").trim
local expect = require("imexguard.expect")

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

-- The repeated keys of each parsed config (weak keys: a config's record goes with it): cfg ->
-- list of {key, lines = {line numbers}, values = {value per line}, same = boolean}.
local REPEATS = setmetatable({}, { __mode = "k" })
-- The line number where each key of a parsed config is first set (weak keys, as REPEATS): cfg ->
-- {[key] = line}.
local FIRST_LINES = setmetatable({}, { __mode = "k" })

--- Parse the text of a config.cfg.
-- Lines are `KEY=VALUE`; whitespace around the key and around the value is trimmed (a CR of a
-- CRLF file too); the value may be empty; everything after the first `=` is the value. Blank
-- lines and lines whose first non-blank character is `#` are ignored. A key is
-- `[A-Za-z_][A-Za-z0-9_]*`.
-- A key given more than once (field case C34: a vendor guide's line appended to a file that had
-- it) is not an error: with the same value every time the value is known (`M.repeats` lists it,
-- `M.lint` warns); with different values which one the daemon uses is not documented, so the key
-- is left out of the table and `M.get` / `M.port` answer nil and a message naming every line
-- (never the first, the last or the default: a guess).
-- @tparam string text file contents
-- @treturn[1] table `{KEY = "value"}` (strings only; a key with different values is absent)
-- @treturn[2] nil
-- @treturn[2] string error naming the line number and the line
-- @raise when text is not a string
function M.parse(text)
  expect(text, "string", "imexcfg.parse: expected a string, got %s", type(text))
  local cfg, seen, order, lineno = {}, {}, {}, 0
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
      value = trim(value)
      local r = seen[key]
      if not r then
        r = { key = key, lines = {}, values = {}, same = true }
        seen[key], order[#order + 1] = r, r
        cfg[key] = value
      elseif value ~= r.values[1] then
        r.same, cfg[key] = false, nil
      end
      r.lines[#r.lines + 1], r.values[#r.values + 1] = lineno, value
    end
  end
  local repeats = {}
  for _, r in ipairs(order) do
    if #r.lines > 1 then repeats[#repeats + 1] = r end
  end
  REPEATS[cfg] = repeats
  local first = {}
  for _, r in ipairs(order) do first[r.key] = r.lines[1] end
  FIRST_LINES[cfg] = first
  return cfg
end

--- The line where a parsed config first sets a key (for findings with file:line).
-- @tparam table cfg result of `parse` (another table: none)
-- @tparam string key
-- @treturn integer|nil the 1-based line number, nil when the key is not set there
function M.line_of(cfg, key)
  local first = FIRST_LINES[cfg]
  return first and first[key] or nil
end

--- The keys a parsed config sets more than once (C34), in the order of their first line.
-- @tparam table cfg result of `parse` (another table: none)
-- @treturn table list of `{key = string, lines = {integer,...}, values = {string,...} (one per
--   line), same = boolean (every value equal)}`
function M.repeats(cfg)
  return REPEATS[cfg] or {}
end

-- "line 6: 50005, line 12: 50015" of a repeat record.
local function lines_of(r)
  local parts = {}
  for i, n in ipairs(r.lines) do parts[i] = string.format("line %d: '%s'", n, r.values[i]) end
  return table.concat(parts, ", ")
end

--- Whether a key's value is unknown because the config sets it more than once with different
-- values (C34).
-- @tparam table|nil cfg result of `parse`
-- @tparam string key
-- @treturn string|nil one line naming the key and every line with its value, and that which one the
--   daemon uses is unknown; nil when the value is known (set once, the same each time, or not set)
function M.unknown(cfg, key)
  for _, r in ipairs(M.repeats(cfg)) do
    if r.key == key and not r.same then
      return string.format("config.cfg sets %s %d times with different values (%s): which one "
        .. "nvidia-imex uses is not documented, so it is unknown", key, #r.lines, lines_of(r))
    end
  end
  return nil
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
-- "choose automatically", the same as the default). A key set with different values (C34) is
-- unknown: nil and `M.unknown`'s message, never the default.
-- @tparam table|nil cfg result of `parse` (nil: defaults only)
-- @tparam string key
-- @treturn string|nil the value, nil when neither cfg nor the defaults have it or it is unknown
-- @treturn string|nil when unknown: the message naming the lines
-- @raise when key is not a string
function M.get(cfg, key)
  expect(key, "string", "imexcfg.get: key must be a string")
  if cfg ~= nil and cfg[key] ~= nil then
    return cfg[key]
  end
  local unknown = M.unknown(cfg, key)
  if unknown then return nil, unknown end
  return DEFAULTS[key]
end

--- A port number from a parsed config (SERVER_PORT, IMEX_CMD_PORT), else the default.
-- @tparam table|nil cfg result of `parse`
-- @tparam string key
-- @treturn[1] integer 1-65535
-- @treturn[2] nil
-- @treturn[2] string error naming the key and its value, or `M.unknown`'s message
function M.port(cfg, key)
  local v, unknown = M.get(cfg, key)
  if unknown then return nil, unknown end
  local n = v and v:match("^%d+$") and math.tointeger(tonumber(v))
  if not n or n < 1 or n > 65535 then
    return nil, string.format("config.cfg: %s='%s' is not a port number", key, tostring(v))
  end
  return n
end

--- The daemon's command service (C37): a TCP port and/or a unix socket. `IMEX_CMD_ENABLED=1`
-- needs `IMEX_CMD_PORT` and/or `IMEX_CMD_UNIX_DOMAIN_PATH` (the config.cfg template of NVIDIA's
-- DRA driver). A TCP port is assumed only where one is configured: `IMEX_CMD_PORT` set, or, without
-- a socket path, the package default 50005. With a socket path and no `IMEX_CMD_PORT` line whether
-- the daemon also listens on 50005 is not documented: no port is assumed.
-- @tparam table|nil cfg result of `parse`
-- @treturn[1] table `{enabled = boolean, port = integer|nil, socket = string|nil}`
-- @treturn[2] nil
-- @treturn[2] string one line: the port is not a number, or a key is unknown (C34)
function M.command_service(cfg)
  local socket, serr = M.get(cfg, "IMEX_CMD_UNIX_DOMAIN_PATH")
  if serr then return nil, serr end
  if socket == "" then socket = nil end
  local enabled, eerr = M.get(cfg, "IMEX_CMD_ENABLED")
  if eerr then return nil, eerr end
  local unknown = M.unknown(cfg, "IMEX_CMD_PORT")
  if unknown then return nil, unknown end
  local v = cfg and cfg.IMEX_CMD_PORT
  local port
  if v == nil or v == "" then
    -- without a socket the daemon's default applies (lint warns: every node must share it)
    port = not socket and math.tointeger(tonumber(DEFAULTS.IMEX_CMD_PORT)) or nil
  else
    local perr
    port, perr = M.port(cfg, "IMEX_CMD_PORT")
    if not port then return nil, perr end
  end
  return { enabled = enabled == "1", port = port, socket = socket }
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
  local socket = cfg.IMEX_CMD_UNIX_DOMAIN_PATH
  if socket == "" then socket = nil end
  if socket and socket:sub(1, 1) ~= "/" then
    add("IMEX_CMD_UNIX_DOMAIN_PATH", "error", "IMEX_CMD_UNIX_DOMAIN_PATH=%s is not an absolute path", socket)
  elseif socket and socket:match("^/etc/") then
    add("IMEX_CMD_UNIX_DOMAIN_PATH", "warning", "IMEX_CMD_UNIX_DOMAIN_PATH=%s is under /etc: a unit with "
      .. "ProtectSystem=full cannot create it there", socket)
  end
  local ports = {}
  for _, key in ipairs({ "SERVER_PORT", "IMEX_CMD_PORT" }) do
    local v = cfg[key]
    -- a key set with different values is named by lint's repeat finding, not "not set" (C34); a
    -- command port left empty or out beside a unix socket is not assumed (C37)
    if M.unknown(cfg, key) then v = false end
    if key == "IMEX_CMD_PORT" and socket and (v == nil or v == "") then v = false end
    if v == nil or v == "" then
      add(key, "warning", "%s is not set: the daemon uses %s, and every node of the domain must use the "
        .. "same port", key, DEFAULTS[key])
    elseif v then
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
-- empty (the daemon's default applies, which every node must share), except `IMEX_CMD_PORT` beside
-- `IMEX_CMD_UNIX_DOMAIN_PATH` (C37: no TCP port is assumed); `IMEX_CMD_UNIX_DOMAIN_PATH` not absolute
-- (error) or under /etc (warning: ProtectSystem=full). Repeated keys (C34), first:
-- with the same value a warning, with different values an error naming every line ("which one
-- the daemon uses is unknown"); both findings have `repeated = true`.
-- @tparam table cfg result of `parse`
-- @tparam[opt] string path the file's path, named in every finding (default `DEFAULT_PATH`)
-- @treturn table list of findings in a fixed key order, empty when the config is clean:
--   `{ {key = string, value = string|nil, level = "error"|"warning", text = one line "PATH: ...",
--   repeated = true|nil}, ... }`
-- @raise when cfg is not a table or path is not a string
function M.lint(cfg, path)
  expect(cfg, "table", "imexcfg.lint: cfg must be a parsed config.cfg")
  if path ~= nil and type(path) ~= "string" then
    error("imexcfg.lint: path must be a string", 2)
  end
  path = path or M.DEFAULT_PATH
  local out = {}
  local function add(key, level, fmt, ...)
    out[#out + 1] = { key = key, value = cfg[key], level = level,
      text = (path .. ": " .. string.format(fmt, ...)):gsub("[\r\n]+", " ") }
  end
  for _, r in ipairs(M.repeats(cfg)) do
    local f
    if r.same then
      add(r.key, "warning", "%s is set %d times with the same value '%s' (lines %s): remove the extra lines",
        r.key, #r.lines, r.values[1], table.concat(r.lines, ", "))
      f = out[#out]
    else
      out[#out + 1] = { key = r.key, level = "error", text = (path .. ": " .. M.unknown(cfg, r.key)
        .. "; keep one line"):gsub("[\r\n]+", " ") }
      f = out[#out]
    end
    f.repeated = true
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
  expect(argv, "table", "imexcfg.config_path: argv must be a list of strings")
  for i, a in ipairs(argv) do expect(a, "string", "imexcfg.config_path: argv[%d] is not a string", i) end
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
