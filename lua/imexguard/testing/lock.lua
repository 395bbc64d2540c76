-- SPDX-License-Identifier: Apache-2.0
--- The fake host's node lock (src/lock.c's primitives): lock and lock_holder, with a scripted
-- holder that may let go at a given time. Test infrastructure of imexguard.testing.
local base = require("imexguard.testing.base")

local M = {}

--- Add the lock primitives to a fake host.
-- @param h table the fake host (gets lock, lock_holder)
-- @param w table the host's shared world (needs rec, failing, missing_parent, remaining, spend,
--   advance_to, wall)
-- @param opts table testing.host options (lock = nil (free) or the holder {pid, owner, since,
--   release_at = monotonic seconds when it lets go, nil: never})
function M.install(h, w, opts)
  local holder = opts.lock and base.copy(opts.lock) or nil
  local pid = 5000
  --- Wait for a holder: nil when it let go in time, else the primitive's failure.
  local function wait_holder(path, timeout)
    if holder.release_at and holder.release_at <= h.now() + math.min(timeout, w.remaining()) then
      w.advance_to(holder.release_at)
      holder = nil
      return nil
    end
    local code = (w.remaining() < timeout) and "deadline" or "timeout"
    w.spend(math.min(timeout, w.remaining()))
    return { nil, string.format("lock %s: timed out after %g s", path, timeout), code, base.copy(holder) }
  end
  function h.lock(path, timeout, owner)
    w.rec("lock", path, timeout, owner)
    local lf = w.failing(path, "lock")
    if lf then return nil, string.format("lock %s: %s", path, lf), lf end
    local gone = w.missing_parent(path)
    if gone then return nil, string.format("lock %s: %s: No such file or directory", path, gone), "ENOENT" end
    if holder then
      local failed = wait_holder(path, timeout)
      if failed then return table.unpack(failed, 1, 4) end
    end
    pid = pid + 1
    local entry = { owner = owner, released = false, path = path }
    h.locks[#h.locks + 1] = entry
    holder = { pid = pid, owner = owner, since = w.wall() }
    local lk = {}
    function lk.unlock()
      if not entry.released then
        entry.released = true
        holder = nil
        w.rec("unlock", path)
      end
      return true
    end
    function lk.inode() return 1, 4711 end
    return lk
  end
  function h.lock_holder(path)
    w.rec("lock_holder", path)
    return holder and base.copy(holder) or nil
  end
end

return M
