-- SPDX-License-Identifier: Apache-2.0
--- Step 3 of the built-in policy, "node lock" (docs/design.md, "Decision model of the default
-- policy"; cases C01, C02, C24): the lock under which every run of this node reads, decides,
-- writes and restarts: state_dir/lock, the state directory created first; how long a run waits
-- for it (the prolog and the epilog differ) and the progress of that wait; a guard that releases
-- it on every path.
local base = require("imexguard.steps.base")
-- Loaded when first used (imexguard.lazy).
local lazy = require("imexguard.lazy")
local progress = lazy("imexguard.progress")

local fail, node_name = base.fail, base.node_name

local M = {}

--- Mode of the state directory (0755).
M.STATE_DIR_MODE = tonumber("755", 8)

--- Create a directory, its last component only (host.mkdir: an existing directory is success).
-- The parent must exist: a misspelt setting (state_dir = "/rnu/imexguard") then fails with the
-- parent named instead of creating a whole tree (mkdir without -p, as systemd's
-- RuntimeDirectory= creates one directory under /run). The state directory (/run/imexguard by
-- default) is on a tmpfs: it is gone after a reboot, its parent /run is not.
-- @param host table the primitives (mkdir; a host without it is left alone)
-- @param path string absolute directory
-- @param mode integer permission bits (e.g. 493 = 0755)
-- @return true, or nil, message, code (mkdir's; ENOENT: the message names the missing parent)
function M.ensure_dir(host, path, mode)
  if type(host.mkdir) ~= "function" then return true end
  local ok, err, code = host.mkdir(path, mode)
  if ok then return true end
  if code == "ENOENT" then
    local parent = path:match("^(.+)/[^/]+/*$") or "/"
    return nil, string.format("its parent directory %s does not exist (only the last component is created: "
      .. "is the setting misspelt?)", parent), code
  end
  return nil, err .. base.root_hint(host, code), code
end

--- Seconds the epilog keeps of its budget for its own work after waiting for the node lock.
M.EPILOG_RESERVE = 2
--- Seconds a run keeps of its budget after waiting for the node lock when lock_timeout is unset:
-- behind a run ahead that brought the domain up, a prolog needs one ctl check (ctl_timeout, 5 s by
-- default at most) and the state file.
M.LOCK_RESERVE = 5

--- How long a run waits for the node lock: the setting lock_timeout, or when it is unset (the
-- default) the run's whole budget less LOCK_RESERVE; the epilog waits up to its whole budget less
-- EPILOG_RESERVE when that is longer. The holder is a run that started earlier and ends by its
-- own deadline (a dead holder's flock is freed by the kernel), so a fixed wait shorter than a
-- whole run loses to a legitimate one: a prolog may hold the lock for start_timeout +
-- health_timeout (C24 of docs/design.md), and a prolog queued behind it that gave up after 60 s
-- drained its node with lock-timeout. A failed epilog drains a healthy node in Slurm.
-- @tparam table ctx the run's context
-- @treturn number seconds
function M.lock_wait(ctx)
  local t = ctx.settings.lock_timeout
  if t == nil then t = math.max(0.1, ctx.host.remaining() - M.LOCK_RESERVE) end
  if ctx.command == "epilog" then
    t = math.max(t, ctx.host.remaining() - M.EPILOG_RESERVE)
  end
  return t
end

--- "pid N (job=J)" of a lock holder (host.lock's fourth result), or "an unknown process".
-- @param holder table|nil {pid, owner}
-- @return string
function M.lock_holder_text(holder)
  return holder and holder.pid and string.format("pid %s (%s)", tostring(holder.pid),
    tostring(holder.owner or "no holder record")) or "an unknown process"
end

--- host.lock(path, timeout, "job=ID") in steps of at most progress.EVERY seconds, telling the wait's
-- progress at info between them ("waiting for node lock PATH held by pid N (job=J) (10s / 1min
-- 25s)"): a prolog queued behind another run is not silent for a minute.
-- @param ctx table policy context
-- @param path string the lock file
-- @param timeout number seconds in all
-- @return host.lock's results (the last attempt's)
function M.lock_waiting(ctx, path, timeout)
  local host = ctx.host
  local t0 = host.now()
  local told = progress.new(host, "node lock " .. path, timeout)
  while true do
    local left = timeout - (host.now() - t0)
    local step = math.min(left, progress.EVERY)
    local lk, err, code, holder = host.lock(path, step, "job=" .. base.job_id(ctx))
    if lk or code ~= "timeout" or left <= step then return lk, err, code, holder end
    told.what = "node lock " .. path .. " held by " .. M.lock_holder_text(holder)
    told:tick()
  end
end

--- A held node lock; closing it (to-be-closed variable, or :release()) unlocks it once.
local Guard = {}
Guard.__index = Guard
function Guard:release()
  if self.lock then
    local lk = self.lock
    self.lock = nil
    lk:unlock()
  end
end
Guard.__close = Guard.release

--- Step 3: take the node lock (state_dir/lock), creating state_dir first (host.mkdir, 0755).
-- @return guard (use `local g <close> = guard`), or nil, outcome, message: "lock-timeout" only when
--   another run held the lock too long (the message names its pid and job); "deadline-exceeded"
--   when the run's budget ran out; "write-failed" when the state directory or the lock file cannot
--   be created or opened (ENOSPC, EROFS, EACCES...: the message names the directory and the error)
function M.lock(ctx)
  local s = ctx.settings
  local path = s.state_dir .. "/lock"
  local dok, derr, dcode = M.ensure_dir(ctx.host, s.state_dir, M.STATE_DIR_MODE)
  if not dok then
    return fail(base.by_code(dcode, "write-failed"), "node %s: cannot create the state directory %s for "
      .. "node lock %s: %s; nothing changed", node_name(ctx), s.state_dir, path, tostring(derr))
  end
  local timeout = M.lock_wait(ctx)
  local lk, err, code, holder = M.lock_waiting(ctx, path, timeout)
  if not lk then
    local who = M.lock_holder_text(holder)
    if code == "timeout" then
      return fail("lock-timeout", "node %s: node lock %s held by %s for more than %g s", node_name(ctx),
        path, who, timeout)
    elseif code == "deadline" then
      return fail("deadline-exceeded",
        "node %s: the run's deadline passed waiting for node lock %s held by %s", node_name(ctx), path, who)
    end
    return fail("write-failed", "node %s: cannot create or open node lock %s in the state directory %s "
      .. "(%s): %s%s; nothing changed", node_name(ctx), path, s.state_dir, tostring(code), tostring(err),
      base.root_hint(ctx.host, code))
  end
  return setmetatable({ lock = lk }, Guard)
end

return M
