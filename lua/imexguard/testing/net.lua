-- SPDX-License-Identifier: Apache-2.0
--- The fake host's log and network primitives (src/log.c, src/net.c): log (recorded), hostname,
-- local_addresses, resolve (a scripted resolver), port_owner (who listens on a TCP port),
-- socket_owner (on a unix socket) and file_holders (who has a file open, src/proc.c).
-- Test infrastructure of imexguard.testing.
local base = require("imexguard.testing.base")

local M = {}

--- The resolver's default answers: n1..n4 -> 10.0.0.1..4.
local function default_resolve()
  return { n1 = { "10.0.0.1" }, n2 = { "10.0.0.2" }, n3 = { "10.0.0.3" }, n4 = { "10.0.0.4" } }
end

--- Add the log and network primitives to a fake host.
-- @param h table the fake host (gets log, hostname, euid, local_addresses, resolve)
-- @param w table the host's shared world (needs rec, spend)
-- @param opts table testing.host options (resolve = {[name] = {addresses} | "timeout" | code |
--   function(name)}, local_addresses, hostname, euid (default 0: root),
--   port_owner = {pid, comm, cmdline} (a process
--   other than the unit listening on every port: a stray daemon, field case C27 of
--   docs/design.md) | function(port, timeout, address, pid) | "none" (nothing listens); default:
--   the unit's main process while it is active, else nothing; each call is recorded as
--   {"port_owner", port, timeout, address, pid}, the pid being the caller's hint); socket_owner the
--   same for a unix socket (option socket_owner, recorded as {"socket_owner", path, timeout, pid});
--   file_holders = {[path] = list of {pid, comm, cmdline} | code}: who has that file open (default:
--   nobody, ENOENT for a path that is not among the host's files)
function M.install(h, w, opts)
  local resolve = default_resolve()
  for k, v in pairs(opts.resolve or {}) do resolve[k] = v end
  function h.log(level, message, fields)
    h.logs[#h.logs + 1] = { level, message, fields }
  end
  function h.local_addresses()
    w.rec("local_addresses")
    return base.copy(opts.local_addresses or { "10.0.0.1", "127.0.0.1" })
  end
  function h.resolve(name, timeout)
    w.rec("resolve", name, timeout)
    local r = resolve[name]
    if type(r) == "function" then r = r(name) end
    if r == "timeout" then
      local code = w.spend(timeout) or "timeout"
      return nil, string.format("resolving %s: no answer within %g s", name, timeout), code
    end
    if type(r) == "string" then return nil, "resolving " .. name .. ": " .. r, r end
    if not r then return nil, "resolving " .. name .. ": Name or service not known", "EAI_NONAME" end
    return base.copy(r)
  end
  function h.hostname() return opts.hostname or "n1" end
  function h.euid() return opts.euid or 0 end
  -- the owner of a listener: scripted (opts[key]), else the unit's main process while it is active
  local function owner(key, ...)
    local o = opts[key]
    if type(o) == "function" then return o(...) end
    if type(o) == "table" then return base.copy(o) end
    local unit = w.unit
    if o == nil and unit and unit.active_state == "active" and (unit.main_pid or 0) > 0 then
      return { pid = unit.main_pid, comm = "nvidia-imex",
        cmdline = "/usr/bin/nvidia-imex -c " .. base.CONFIG }
    end
    return nil, "no listener", "none"
  end
  function h.port_owner(port, timeout, address, pid)
    w.rec("port_owner", port, timeout, address, pid)
    return owner("port_owner", port, timeout, address, pid)
  end
  function h.socket_owner(path, timeout, pid)
    w.rec("socket_owner", path, timeout, pid)
    return owner("socket_owner", path, timeout, pid)
  end
  function h.file_holders(path, timeout)
    w.rec("file_holders", path, timeout)
    local o = (opts.file_holders or {})[path]
    if type(o) == "string" then return nil, "file holders of " .. path .. ": " .. o, o end
    if type(o) == "table" then
      local list = {}
      for i, p in ipairs(o) do list[i] = base.copy(p) end
      return list
    end
    if not (w.files and w.files[path]) then
      return nil, "file holders of " .. path .. ": No such file or directory", "ENOENT"
    end
    return {}
  end
end

return M
