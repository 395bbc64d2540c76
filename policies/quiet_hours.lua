-- SPDX-License-Identifier: Apache-2.0
--- Site policy: no restart of a running IMEX daemon during quiet hours of the site's local time
-- (the worked example of docs/policy-api.md, "Your first policy"). Outside the quiet hours it is
-- the default policy; inside them, a job that needs the running daemon restarted (another node
-- list) is refused with the outcome `refused` (exit 22: Slurm drains this node and requeues the
-- job) and a message that says why, while a job that finds its list current, or a daemon that is
-- stopped and only needs starting, runs as always. The registry's rule (another job using IMEX
-- here) comes first and stays a `conflict`.
-- It shows the three things a first policy needs: a hook of the default policy (may_restart), the
-- local time (host.localtime: the sandbox has no `os`), and settings of its own, declared in
-- P.settings and set in imexguard.conf under `policy_settings`:
--   policy = "/etc/imexguard/quiet_hours.lua"
--   policy_settings = { quiet_from = 8, quiet_to = 18 }   -- 08:00 to 18:00 local time
local default = require("policies.default")
local other_jobs = require("imexguard.steps.other_jobs")

--- Whether `hour` (0-23) is in the quiet hours [from, to) of the local day; `to` below `from`
-- spans midnight (22 to 6); `from` equal to `to`: no quiet hours.
-- @param hour integer
-- @param from integer
-- @param to integer
-- @return boolean
local function quiet(hour, from, to)
  if from == to then return false end
  if from < to then return hour >= from and hour < to end
  return hour >= from or hour < to
end

local P = default.extend{
  --- Step 6 (docs/design.md): the registry's rule first, then the quiet hours for a restart.
  may_restart = function(ctx, st, assessment)
    local ok, why, blocking = other_jobs.may_restart(ctx, st, assessment)
    if not ok then return ok, why, blocking end
    if assessment.action ~= "restart" then return true end -- a start breaks nothing that runs
    local q = ctx.settings.policy_settings
    local now = ctx.host.localtime()
    if quiet(now.hour, q.quiet_from, q.quiet_to) then
      return false, string.format("quiet hours %02d:00-%02d:00 (policy_settings.quiet_from, quiet_to), now "
        .. "%02d:%02d %s: no restart of a running IMEX daemon", q.quiet_from, q.quiet_to, now.hour, now.min,
        now.zone)
    end
    return true
  end,
}

--- The policy's own settings (imexguard.policysettings): checked when it loads, shown by
-- `imexguard show-config`, read as ctx.settings.policy_settings.NAME.
P.settings = {
  { name = "quiet_from", kind = "number", min = 0, max = 23, unit = "hour of the local day", default = 8,
    doc = "the hour (0-23, local time: TZ, else /etc/localtime) the quiet hours start" },
  { name = "quiet_to", kind = "number", min = 0, max = 23, unit = "hour of the local day", default = 18,
    doc = "the hour (0-23) they end; below quiet_from they span midnight; equal: no quiet hours" },
}

P.quiet = quiet -- for its spec

return P
