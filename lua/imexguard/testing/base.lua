-- SPDX-License-Identifier: Apache-2.0
--- The test kit's common part (imexguard.testing re-exports it): the paths, file contents and
-- settings of the kit's default node, and small helpers shared by the fake host's primitive
-- groups (imexguard.testing.clock, .files, .lock, .unit, .run, .net, .xml) and the scenarios
-- (imexguard.testing.scenario). Test infrastructure; no io.
local M = {}

M.UNIT = "nvidia-imex.service"
M.CONFIG = "/etc/nvidia-imex/config.cfg"
M.NODES = "/etc/nvidia-imex/nodes_config.cfg"
M.STATE = "/run/imexguard/state.json"
--- The kernel's boot ID file (setting boot_id_file) and the fake host's boot ID in it.
M.BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
M.BOOT_ID = "0b2c6f1e-5d7a-4c3e-9f10-6a8b2d4e1c01"
--- The kernel's IPv6 address table (setting proc_if_inet6): the fake host has IPv6 unless a spec
-- removes it (files = {[testing.IF_INET6] = false}: a host without IPv6, C44).
M.IF_INET6 = "/proc/net/if_inet6"
M.IF_INET6_TEXT = "00000000000000000000000000000001 01 80 10 80       lo\n"
--- Wall-clock time (seconds since the epoch) at the fake host's start.
M.WALL0 = 1700000000

M.CONFIG_TEXT = table.concat({
  "# nvidia-imex config (package defaults)",
  "DAEMONIZE=1",
  "SERVER_PORT=50000",
  "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg",
  "IMEX_CMD_ENABLED=1",
  "IMEX_CMD_PORT=50005",
  "IMEX_CMD_BIND_INTERFACE_IP=",
  "BIND_INTERFACE_IP=",
  "IMEX_WAIT_FOR_QUORUM=RECOVERY",
  "",
}, "\n")

--- Default settings (docs: settings the default policy reads), used when imexguard.settings is absent.
M.DEFAULT_SETTINGS = {
  deadline = 120, unit = M.UNIT, imex_config = M.CONFIG, ctl = "/usr/bin/nvidia-imex-ctl",
  ctl_timeout = 5, state_dir = "/run/imexguard", address_source = "dns", resolve_timeout = 2,
  allow_loopback = false, start_timeout = 30, health_timeout = 60,
  poll_interval = 0.25, on_peer_fault = "warn", restart_under_jobs = false,
}

--- A shallow copy.
-- @param t table
-- @return table
function M.copy(t)
  local r = {}
  for k, v in pairs(t) do r[k] = v end
  return r
end

--- Settings: defaults filled in (through imexguard.settings when it exists), overrides applied,
-- wrapped read-only as the binary does (settings.readonly(v, "ctx.settings", settings.by_name)):
-- assigning, or reading a name that is not a setting (a typo), raises.
-- @param over table setting overrides
-- @return settings table; raises (at the kit's caller) on invalid settings
function M.settings(over)
  local ok, S = pcall(require, "imexguard.settings")
  if ok and type(S) == "table" and type(S.validate) == "function" then
    local v, err = S.validate(over)
    if v == nil then error("testing.ctx: invalid settings: " .. tostring(err), 3) end
    if type(S.readonly) == "function" then return S.readonly(v, "ctx.settings", S.by_name) end
    return v
  end
  local merged = M.copy(M.DEFAULT_SETTINGS)
  for k, v in pairs(over) do merged[k] = v end
  return merged
end

return M
