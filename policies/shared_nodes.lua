-- SPDX-License-Identifier: Apache-2.0
--- Site policy: nodes shared by several jobs at once (partitions with OverSubscribe, or jobs that
-- do not ask for --exclusive). What a job asked for is in its prolog's environment
-- (imexguard.slurmenv.sharing; field case C49): Slurm 26.05 sets SLURM_JOB_OVERSUBSCRIBE (NO, YES,
-- OK: whether its CPUs may be shared) and SLURM_JOB_EXCLUSIVE (NO, NODE, USER, MCS, TOPO: whether
-- other jobs may run on its nodes); before 26.05 SLURM_JOB_OVERSUBSCRIBE alone said both (NO a
-- whole node; USER, MCS, TOPO; YES, OK shared), and 22.05 sets neither. Everything is the default
-- policy (policies/default.lua), whose step 6 already never restarts an ACTIVE daemon while another
-- job is registered on this node, whatever its list (a restart drops every import of the running
-- daemon: docs/design.md, "IMEX facts the code relies on"), and never rewrites the list or starts
-- the daemon under a job with another list. This policy adds two things:
--   1. The setting restart_under_jobs does not relax the first rule here: on a shared node a
--      restart under other jobs is never allowed (use the default policy for that). A job that
--      needs a restart while others run ends in "conflict" (nothing written, nothing restarted)
--      and runs once they are gone. Starting a daemon that is not running (inactive, failed)
--      follows the default rule.
--   2. Bookkeeping: what the job asked for is kept in its registry entry (`shared`: the
--      SLURM_JOB_OVERSUBSCRIBE value or "unset"; `exclusive`: SLURM_JOB_EXCLUSIVE's, 26.05+;
--      `asked`: what the two mean together, "node", "user", "mcs", "topo", "no" (shared) or
--      "unknown"), logged once (info), and named in a conflict message, so that an admin sees
--      which jobs shared the node and what each asked for.
local default = require("policies.default")
-- the rooms of imexguard.steps it uses (the index would load every room); step 6's when a prolog
-- first needs it (imexguard.lazy: the epilog never does)
local base = require("imexguard.steps.base")
local other_jobs = require("imexguard.lazy") "imexguard.steps.other_jobs"
local text = require("imexguard.text")
local registry = require("imexguard.registry")
local slurmenv = require("imexguard.slurmenv")

-- What the job asked for, as its registry entry keeps it.
local function asked(ctx)
  local sh = slurmenv.sharing(ctx.env or {})
  return { shared = sh.oversubscribe or "unset", exclusive = sh.exclusive_var,
    asked = sh.exclusive or "unknown" }, sh
end

return default.extend{
  -- Accept every job; a value no Slurm release sets is logged, never refused (a refusal drains
  -- the node).
  admit = function(ctx)
    local rec, sh = asked(ctx)
    for _, u in ipairs(sh.unknown) do
      ctx.host.log("warning", text.one_line(string.format("job %s: unknown %s, treated as shared",
        base.job_id(ctx), u)))
    end
    ctx.host.log("info", text.one_line(string.format("job %s asked for %s (SLURM_JOB_OVERSUBSCRIBE=%s%s)",
      base.job_id(ctx), rec.asked == "no" and "a shared node" or rec.asked == "unknown" and "nothing known"
      or ("an exclusive node: " .. rec.asked), rec.shared,
      rec.exclusive and (", SLURM_JOB_EXCLUSIVE=" .. rec.exclusive) or "")))
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
    return (asked(ctx))
  end,
}
