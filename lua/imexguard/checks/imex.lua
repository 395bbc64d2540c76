-- SPDX-License-Identifier: Apache-2.0
--- config-test's check of this node's IMEX side (imexguard.configtest; issue 32 items 1-2): the
-- unit (asked once, read-only), the config.cfg its daemon reads (the `-c` of its ExecStart, C28, as
-- step 1 finds it: imexguard.steps.applies.daemon_config), that file parsed and linted as `plan` and
-- `status` do (imexcfg.parse, imexcfg.lint: C22, C34, C37), and the ctl program. A node where the
-- unit is not installed or config.cfg does not exist is not an IMEX node: every prolog skips there,
-- which is said, not an error; a missing ctl on an IMEX node is (every health wait would end
-- ctl-unusable).
local S = require("imexguard.settings")
local imexcfg = require("imexguard.imexcfg")
local base = require("imexguard.steps.base")
local applies = require("imexguard.steps.applies")

local M = {}

--- Seconds config-test waits for systemd's answer about the unit.
M.UNIT_TIMEOUT = 2

-- The unit's part: props (nil when systemd did not answer), the config path and its source, and
-- findings.
local function unit_part(ctx, out)
  local s = ctx.settings
  local props, err, code = ctx.host.unit(s.unit, M.UNIT_TIMEOUT)
  if not props then
    out[#out + 1] = { level = "info", message = string.format("systemd did not answer about %s (%s: %s): "
      .. "config.cfg is the setting imex_config's, the unit is not checked", s.unit, tostring(code),
      tostring(err)) }
    return nil, s.imex_config, "setting imex_config"
  end
  if props.load_state ~= "loaded" then
    out[#out + 1] = { level = "warning", message = string.format("%s is not installed here (load state %s): "
      .. "every prolog on this node skips (not an IMEX node)", s.unit, tostring(props.load_state)) }
  elseif props.unit_file_state == "disabled" and not s.manage_disabled_unit then
    out[#out + 1] = { level = "warning", message = string.format("%s is disabled: every prolog on this node "
      .. "skips, jobs run without IMEX; set manage_disabled_unit = true to start it per job, or enable it",
      s.unit) }
  end
  local config, source, msg = applies.daemon_config(ctx, props)
  if not config then
    out[#out + 1] = { level = "error", outcome = source, message = msg }
    return props, nil
  end
  return props, config, source
end

-- config.cfg read, parsed and linted: findings with its path and line; true when it exists.
local function config_part(ctx, config, source, out)
  local text, err, code = ctx.host.read(config, base.MAX_FILE)
  if not text then
    if code == "ENOENT" then
      out[#out + 1] = { level = "warning", file = config, message = string.format("config.cfg (%s) does not "
        .. "exist: not an IMEX node, every prolog here skips", source) }
      return false
    end
    out[#out + 1] = { level = "error", file = config, message = "unreadable: " .. tostring(err) }
    return true
  end
  local cfg, perr = imexcfg.parse(text)
  if not cfg then
    out[#out + 1] = { level = "error", file = config, line = tonumber(tostring(perr):match("line (%d+)")),
      message = tostring(perr):gsub("^config%.cfg line %d+: ", "") }
    return true
  end
  out[#out + 1] = { level = "info", file = config, message = "config.cfg read (" .. source .. ")" }
  for _, f in ipairs(imexcfg.lint(cfg, config)) do
    local nodes = f.key == "IMEX_NODE_CONFIG_FILE"
    -- allow_loopback (tests, the simulator): a loopback bind is the node's own address there
    local own = ctx.settings.allow_loopback
      and (f.key == "IMEX_CMD_BIND_INTERFACE_IP" or f.key == "BIND_INTERFACE_IP")
    local level = own and "info" or f.level
    out[#out + 1] = { level = level, file = config, message = f.text:sub(#config + 3),
      outcome = level == "error" and (nodes and "bad-input" or "config-fault") or nil }
  end
  -- C44: the command service on every interface of a host without IPv6 (imexguard asks with -i)
  for _, f in ipairs(require("imexguard.cmdtarget").findings(ctx, cfg, config)) do
    out[#out + 1] = { level = f.level, file = config, line = f.line, message = f.message:sub(#config + 3) }
  end
  return true
end

-- The ctl: an absolute program that does not exist or cannot be executed.
local function ctl_part(ctx, imex_node, out)
  local prog = S.command_argv(ctx.settings.ctl, {})[1]
  if prog:sub(1, 1) ~= "/" then return end -- looked up in PATH by host.run
  local st = ctx.host.stat(prog)
  local why = not st and "does not exist"
    or (st.type ~= "file" and st.type ~= "link" and ("is not a file (" .. tostring(st.type) .. ")"))
    or (st.type == "file" and (st.mode // 64) % 2 == 0 and "is not executable")
  if not why then return end
  out[#out + 1] = { level = imex_node and "error" or "warning", outcome = imex_node and "ctl-unusable" or nil,
    message = string.format("ctl %s %s: %s", prog, why, imex_node
      and "every prolog's health wait would end ctl-unusable (set ctl to nvidia-imex-ctl's path)"
      or "no IMEX here anyway") }
end

--- config-test's check "IMEX": the unit, its config.cfg, the ctl.
-- @param ctx table the run's context (settings, env, host)
-- @return list of findings (imexguard.configtest)
function M.findings(ctx)
  local out = {}
  local props, config, source = unit_part(ctx, out)
  local imex_node = false
  if config then imex_node = config_part(ctx, config, source, out) end
  if props and props.load_state ~= "loaded" then imex_node = false end
  ctl_part(ctx, imex_node, out)
  return out
end

return M
