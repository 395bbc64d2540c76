-- SPDX-License-Identifier: Apache-2.0
--- Site policy: nodes shared by several jobs at once (partitions with OverSubscribe, or jobs that
-- do not ask for --exclusive; Slurm sets SLURM_JOB_OVERSUBSCRIBE to YES, OK or TOPO for a job that
-- may share, NO otherwise, and older releases do not set it). Everything is the default policy
-- (policies/default.lua), whose step 6 already never restarts an ACTIVE daemon while another job is
-- registered on this node, whatever its list (a restart drops every import of the running daemon:
-- docs/design.md, "IMEX facts the code relies on"), and never rewrites the list or starts the
-- daemon under a job with another list. This policy adds two things:
--   1. The setting restart_under_jobs does not relax the first rule here: on a shared node a
--      restart under other jobs is never allowed (use the default policy for that). A job that
--      needs a restart while others run ends in "conflict" (nothing written, nothing restarted)
--      and runs once they are gone. Starting a daemon that is not running (inactive, failed)
--      follows the default rule.
--   2. Bookkeeping: the job's SLURM_JOB_OVERSUBSCRIBE value is kept in its registry entry
--      ("shared"), so that a conflict message tells an admin which jobs shared the node.
local default = require "policies.default"
-- the rooms of imexguard.steps it uses (the index would load every room); step 6's when a prolog
-- first needs it (imexguard.lazy: the epilog never does)
local base = require "imexguard.steps.base"
local other_jobs = require("imexguard.lazy") "imexguard.steps.other_jobs"
local text = require "imexguard.text"
local registry = require "imexguard.registry"

--- Values Slurm sets in SLURM_JOB_OVERSUBSCRIBE (docs/design.md, "IMEX facts", Slurm); anything
-- else is logged.
local SHARING = { NO = true, YES = true, OK = true, TOPO = true }

local function sharing(ctx)
  local v = ctx.env and ctx.env.SLURM_JOB_OVERSUBSCRIBE
  if v == nil or v == "" then return "unset" end
  return v
end

return default.extend{
  -- Accept every job; an unknown sharing value is logged, never refused (a refusal drains the node).
  admit = function(ctx)
    local v = sharing(ctx)
    if v ~= "unset" and not SHARING[v] then
      ctx.host.log("warning", text.one_line(string.format("job %s: unknown SLURM_JOB_OVERSUBSCRIBE=%s, "
        .. "treated as shared", base.job_id(ctx), v)))
    end
    return true
  end,

  may_restart = function(ctx, st, assessment)
    if assessment.action == "restart" then
      local others = registry.others(st, base.job_id(ctx))
      if #others > 0 then
        local why = "the running daemon (shared node)"
        return false, other_jobs.conflict_message(ctx, assessment, others, why), others
      end
    end
    return other_jobs.may_restart(ctx, st, assessment)
  end,

  register_extra = function(ctx)
    return { shared = sharing(ctx) }
  end,
}
