-- SPDX-License-Identifier: Apache-2.0
--- Where nvidia-imex-ctl reaches the daemon's command service: `-c CONFIG` (the ctl reads the
-- address and port there), `-u SOCKET` (C37: the service on a unix socket only), or `-i ADDRESS
-- PORT` on a host without IPv6 whose config.cfg leaves IMEX_CMD_BIND_INTERFACE_IP empty (C44: the
-- ctl given only `-c` then dials `[::]:IMEX_CMD_PORT` and fails with error 14 "Address family not
-- supported by protocol", while the daemon, listening on every interface, answers at 127.0.0.1 or
-- at its BIND_INTERFACE_IP). Also the ctl's answer that shows such a fault, and the finding that
-- `plan`, `status` and `imexguard -t` report (imexguard.imexcfg has the config's other findings).
-- Facts: docs/design.md, "IMEX facts the code relies on" (nvidia-imex-ctl, More daemon and ctl facts).
local imexcfg = require("imexguard.imexcfg")

local M = {}

--- The words of the ctl's error when it dials an address family the kernel lacks (EAFNOSUPPORT,
-- strerror(3)); seen in tests/fixtures/ctl/errors.txt.
M.AF_TEXT = "Address family not supported by protocol"
--- The address the ctl is given with `-i` when the command service listens on every interface and
-- config.cfg names no BIND_INTERFACE_IP: IPv4 loopback, which every interface's listener takes.
M.LOOPBACK = "127.0.0.1"

-- Per run (weak keys: the run's settings table, which every view of its ctx shares): whether the
-- host has IPv6, read once.
local ipv6_of = setmetatable({}, { __mode = "k" })

--- The loopback address ::1 as a line of the kernel's IPv6 address table starts (proc(5): 32 hex
-- digits, then the interface's index, prefix length, scope, flags and name).
M.LOOPBACK6 = "00000000000000000000000000000001"

--- Can a ctl dial [::] on this host? Linux connects the unspecified address to the loopback ::1
-- (tcp_v6_connect), so it can exactly when the kernel's IPv6 address table (the file of the setting
-- proc_if_inet6, default /proc/net/if_inet6, proc(5)) lists ::1. A kernel without IPv6
-- (ipv6.disable=1, or built without it) has no such file; one whose interfaces have IPv6 disabled
-- (sysctl net.ipv6.conf.all.disable_ipv6 = 1, the other common IPv4-only host) has the file
-- without ::1, and a connect to [::] fails "Cannot assign requested address". Read once per run.
-- @param ctx table policy context (host.read, settings.proc_if_inet6)
-- @return true, false (no IPv6 on the loopback), or nil (unknown: the read failed otherwise, or no
--   setting)
function M.has_ipv6(ctx)
  local h, key = ctx.host, ctx.settings
  local known = ipv6_of[key]
  if known ~= nil then
    if known == "unknown" then return nil end
    return known
  end
  local ok, path = pcall(function() return ctx.settings.proc_if_inet6 end)
  local v = nil
  if ok and type(path) == "string" then
    local text, _, code = h.read(path, 1024 * 1024)
    if text then
      v = false
      for line in text:gmatch("[^\n]+") do
        if line:sub(1, #M.LOOPBACK6) == M.LOOPBACK6 then v = true end
      end
    elseif code == "ENOENT" then
      v = false
    end
  end
  if v == nil then ipv6_of[key] = "unknown" else ipv6_of[key] = v end
  return v
end

--- Does config.cfg leave the command service on every interface with a TCP port (the case C44 is
-- about)? IMEX_CMD_BIND_INTERFACE_IP empty or absent (NVIDIA's default), known (C34: a key set
-- with different values is unknown, never guessed), and a TCP command port configured (C37).
-- @param cfg table|nil parsed config.cfg (nil: not known)
-- @return integer|nil the command port when so, else nil
function M.all_interfaces_port(cfg)
  if type(cfg) ~= "table" then return nil end
  local bind, unknown = imexcfg.get(cfg, "IMEX_CMD_BIND_INTERFACE_IP")
  if unknown or bind ~= "" then return nil end
  local svc = imexcfg.command_service(cfg)
  return svc and svc.port or nil
end

--- The address the ctl is given with `-i` (see M.args): BIND_INTERFACE_IP when config.cfg sets it
-- to an IPv4 address (the daemon's own address, which a listener on every interface takes), else
-- M.LOOPBACK.
-- @param cfg table parsed config.cfg
-- @return string
function M.address(cfg)
  local bind = cfg.BIND_INTERFACE_IP
  if type(bind) == "string" and bind:match("^%d+%.%d+%.%d+%.%d+$") then return bind end
  return M.LOOPBACK
end

--- The ctl's arguments that name its target, before the query's own (`-N -j`, `-q`).
-- @param cfg table|nil parsed config.cfg (nil: `-c`)
-- @param config string its path
-- @param ipv6 boolean|nil whether the host has IPv6 (M.has_ipv6; nil: unknown, taken as yes)
-- @return list of strings: {"-u", SOCKET} for a command service on a unix socket only (C37:
--   whether `-c` alone makes the ctl use the socket is not known); {"-c", config, "-i", ADDRESS,
--   PORT} when the service listens on every interface and the host has no IPv6 (C44: `-i` names
--   the address; the ctl reads a config whether or not `-c` is given, its default path otherwise,
--   so the daemon's own is named: the node list of `-N` in the simulator's model, and whatever
--   else the real ctl takes from it [guess]); else {"-c", config} (where it works the ctl reads its
--   target from the config, as an admin's ctl does)
function M.args(cfg, config, ipv6)
  local svc = type(cfg) == "table" and imexcfg.command_service(cfg)
  if svc and svc.socket and not svc.port then return { "-u", svc.socket } end
  local port = ipv6 == false and M.all_interfaces_port(cfg)
  if port then return { "-c", config, "-i", M.address(cfg), tostring(port) } end
  return { "-c", config }
end

--- The host fact M.args needs for this config: M.has_ipv6, read only where it matters (a command
-- service on every interface with a TCP port).
-- @param ctx table policy context
-- @param cfg table|nil parsed config.cfg
-- @return boolean|nil
function M.ipv6_for(ctx, cfg)
  if not M.all_interfaces_port(cfg) then return nil end
  return M.has_ipv6(ctx)
end

--- The errors of a ctl that dialed [::] on a host whose loopback has no IPv6 address (IPv6 disabled
-- by sysctl: connect(2) gives EADDRNOTAVAIL, or ENETUNREACH without a route; strerror(3)).
M.NO_LOOPBACK6_TEXTS = { "Cannot assign requested address", "Network is unreachable" }
--- How the ctl (gRPC) names the target [::] in its error (tests/fixtures/ctl/errors.txt).
M.ANY6_TARGET = "ipv6:%5B::%5D:"

--- Is a ctl answer the C44 failure: it could not reach the local daemon because it dialed IPv6 where
-- the host has none: the kernel has no such address family (M.AF_TEXT), or the target [::] has no
-- loopback ::1 to reach (M.NO_LOOPBACK6_TEXTS)?
-- @param answer table a ctl answer (health.probe's: {mesh =} or {err =, kind =})
-- @return boolean
function M.af_unsupported(answer)
  if not (type(answer) == "table" and answer.kind == "unreachable" and type(answer.err) == "string") then
    return false
  end
  local err = answer.err
  if err:find(M.AF_TEXT, 1, true) then return true end
  if not err:find(M.ANY6_TARGET, 1, true) then return false end
  for _, t in ipairs(M.NO_LOOPBACK6_TEXTS) do
    if err:find(t, 1, true) then return true end
  end
  return false
end

--- The configuration fault behind an answer of M.af_unsupported, one line naming the key.
-- @param cfg table|nil parsed config.cfg
-- @param path string|nil its path
-- @return string
function M.af_cause(cfg, path)
  local bind = type(cfg) == "table" and cfg.IMEX_CMD_BIND_INTERFACE_IP
  local now = (bind == nil or bind == "") and "is empty (all interfaces), so nvidia-imex-ctl dials [::]"
    or ("is " .. bind)
  return string.format("%s: IMEX_CMD_BIND_INTERFACE_IP %s, which this host cannot reach (no IPv6, or IPv6 "
    .. "disabled: no ::1); set IMEX_CMD_BIND_INTERFACE_IP to this node's IPv4 address",
    path or imexcfg.DEFAULT_PATH, now)
end

--- The finding of C44, for `plan`, `status` and `imexguard -t`: config.cfg leaves
-- IMEX_CMD_BIND_INTERFACE_IP empty (the command service on every interface) on a host without IPv6,
-- so that a ctl given only `-c` (an admin's, a health check's such as DCGM's IMEX watch) cannot
-- reach the daemon. imexguard itself asks with `-i` (M.args), hence a warning, not an error.
-- @param ctx table policy context (host.stat, settings.proc_if_inet6)
-- @param cfg table|nil parsed config.cfg (nil: no finding)
-- @param path string|nil its path (default imexcfg.DEFAULT_PATH)
-- @return list of findings `{ {level = "warning", file = path, line = N|nil (the key's first line;
--   nil when the key is absent), message = one line "PATH: ..."} }`, empty when none
function M.findings(ctx, cfg, path)
  local port = M.all_interfaces_port(cfg)
  if not port or M.has_ipv6(ctx) ~= false then return {} end
  path = path or imexcfg.DEFAULT_PATH
  local inet6 = ctx.settings.proc_if_inet6
  return { {
    level = "warning", file = path, line = imexcfg.line_of(cfg, "IMEX_CMD_BIND_INTERFACE_IP"),
    message = string.format("%s: IMEX_CMD_BIND_INTERFACE_IP is empty and this host has no IPv6 (%s is "
      .. "absent or lists no ::1): nvidia-imex-ctl given only -c dials [::]:%d and fails (error 14, %s, or "
      .. "%s where IPv6 is disabled); imexguard asks the daemon with -i %s %d, other tools do not (an "
      .. "admin's ctl, DCGM's IMEX health watch): set IMEX_CMD_BIND_INTERFACE_IP to this node's address",
      path, inet6, port, M.AF_TEXT, M.NO_LOOPBACK6_TEXTS[1], M.address(cfg), port),
  } }
end

return M
