--- NVIDIA IMEX `config.cfg`: parse, package defaults, lookup with defaults.
--
-- Pure Lua, no side effects. Source: NVIDIA IMEX guide and the config.cfg shipped with the
-- nvidia-imex package (`KEY=VALUE` lines, `#` comments), as collected in
-- /work/shared/imex-facts.md ("Files").
-- @module imexguard.imexcfg
local M = {}

-- NVIDIA's package defaults (imex-facts.md, "Files", [doc]).
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
    local body = line:match("^%s*(.-)%s*$")
    if body ~= "" and body:sub(1, 1) ~= "#" then
      local key, value = body:match("^([^=]*)=(.*)$")
      if not key then
        return nil, string.format("config.cfg line %d: no '=' in '%s'", lineno, body)
      end
      key = key:match("^%s*(.-)%s*$")
      if not key:match("^[%a_][%w_]*$") then
        return nil, string.format("config.cfg line %d: bad key '%s'", lineno, key)
      end
      if where[key] then
        return nil, string.format("config.cfg line %d: %s is already set on line %d", lineno, key, where[key])
      end
      cfg[key], where[key] = value:match("^%s*(.-)%s*$"), lineno
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

return M
