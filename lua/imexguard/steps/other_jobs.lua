-- SPDX-License-Identifier: Apache-2.0
--- Step 6 of the built-in policy, "other jobs" (docs/design.md, "Decision model of the default
-- policy"; cases C08, C24): under the lock, before anything is written, may the daemon be
-- (re)started or the node list rewritten under the jobs the registry holds? The default rule, the
-- conflict message that names the blocking jobs and how to clear a stale one, and the wait for a
-- late epilog without the lock (the registry's identity, polled in the state file).
local base = require("imexguard.steps.base")
local one_line = require("imexguard.text").one_line
-- Loaded when first used (imexguard.lazy).
local lazy = require("imexguard.lazy")
local registry, hostlist, state, progress =
  lazy("imexguard.registry", "imexguard.hostlist", "imexguard.state", "imexguard.progress")

local node_name, job_id = base.node_name, base.job_id

local M = {}

--- Step 6: may the daemon be (re)started, or the node list rewritten, under the other jobs that use
-- IMEX on this node? The default rule (docs/design.md, step 6, case C08), two parts:
--   1. another registered job with a DIFFERENT node list blocks any change (a rewrite, a restart,
--      a start): its peers would drop its imports, or its daemon would come back with a list it
--      cannot use;
--   2. an ACTIVE daemon is never restarted while any other job is registered, whatever its list:
--      a restart drops every import of the running daemon (docs/design.md, "IMEX facts").
--      Starting an inactive or failed daemon under jobs with the same list is allowed (there is
--      nothing to break).
-- The setting restart_under_jobs = true allows both anyway (a warning names the jobs). Call it
-- BEFORE writing the node list: on refusal the file and the unit stay as they are.
-- With the setting registration_max_age (seconds, when the schema has it), older registrations are
-- dropped from `st` first (stale: an epilog that never ran; see imexguard.registry).
-- @param ctx table policy context (ctx.job.id: this job, never in conflict with itself)
-- @param st table state file contents (st.jobs: the registry)
-- @param assessment table from assess_daemon (nodes: the list the daemon would run; action)
-- @return true, or false, message (one line naming the job ids, what to do; the policy then
--   returns "conflict"), and the list of blocking entries
function M.may_restart(ctx, st, assessment)
  local s, host = ctx.settings, ctx.host
  local now_us = host.wallclock() * 1e6
  local stale = registry.prune(st, now_us, base.setting(ctx, "registration_max_age"))
  if #stale > 0 then
    host.log("warning", one_line(string.format("node %s: ignoring stale registration(s) of job %s "
      .. "(older than registration_max_age)", node_name(ctx), registry.ids(stale))))
  end
  local id = job_id(ctx)
  local blocking, why, short = registry.conflicting(st, id, assessment.nodes), "it with another node list",
    "other node list"
  if #blocking == 0 and assessment.action == "restart" then
    blocking = registry.others(st, id)
    why, short = "the running daemon, and a restart drops every import", "same node list, running daemon"
  end
  if #blocking == 0 then return true, nil, blocking end
  if s.restart_under_jobs then
    host.log("warning", one_line(string.format("node %s: %s %s for job %s under job %s (%s), "
      .. "allowed by restart_under_jobs", node_name(ctx), assessment.action, s.unit, id,
      registry.ids(blocking), short)))
    return true, nil, blocking
  end
  return false, M.conflict_message(ctx, assessment, blocking, why), blocking
end

-- This job's hosts for a person: its Slurm node list compressed, else the addresses of `bytes`
-- as a registry entry's without `hosts` (registry.entry_hosts).
local function job_hosts(ctx, bytes)
  local expr = ctx.job and ctx.job.nodelist
  local names = type(expr) == "string" and hostlist.expand(expr)
  return names and hostlist.ranged(names) or registry.entry_hosts({ nodes = bytes })
end

--- Whether a refusal of may_restart names registered jobs that block (its third value, a non-empty
-- list of registry entries): then it is a `conflict`; otherwise the refusal is a policy's own rule,
-- `refused` (issue 32 item 6).
-- @param blocking any may_restart's third value
-- @return boolean
function M.blocked(blocking)
  return type(blocking) == "table" and #blocking > 0
end

--- The message of a refusal by a policy's own rule (outcome `refused`): what this job needed and
-- the policy's reason, nothing about the registry (no registered job is the cause).
-- @param ctx table policy context
-- @param assessment table from assess_daemon (action, changed, reason)
-- @param why string|nil the policy's message
-- @return string one line
function M.refused_message(ctx, assessment, why)
  local unit = ctx.settings.unit
  local what = assessment.action ~= "none" and (assessment.action .. " " .. unit) or ""
  if assessment.changed then what = "rewrite the node list" .. (what ~= "" and (" and " .. what) or "") end
  return one_line(string.format("node %s: the policy refused to %s for job %s%s: %s; nothing written or "
    .. "restarted", node_name(ctx), what ~= "" and what or "change IMEX", job_id(ctx),
    assessment.reason and (" (" .. assessment.reason .. ")") or "", tostring(why or "no reason given")))
end

--- The conflict message, cause first: which jobs block (their hosts compressed as Slurm writes
-- them, how long ago they registered), then what this job would do, then how an admin clears a
-- stale registration (`imexguard forget JOBID`).
-- @param ctx table policy context
-- @param assessment table from assess_daemon (action, nodes, changed)
-- @param entries list registry entries that block
-- @param why string e.g. "it with another node list" (after "uses"/"use"; "it" is the unit)
-- @return string one line
function M.conflict_message(ctx, assessment, entries, why)
  local now_us = ctx.host.wallclock() * 1e6
  local unit = ctx.settings.unit
  local parts = {}
  for i, e in ipairs(entries) do
    parts[i] = string.format("%s (%s, %sregistered %s ago)", e.id, registry.entry_hosts(e),
      (e.shared and ("shared " .. tostring(e.shared) .. ", ") or "")
        .. (e.exclusive and ("exclusive " .. tostring(e.exclusive) .. ", ") or ""),
      registry.age_text((now_us - (e.registered_us or now_us)) / 1e6))
  end
  local what = assessment.action ~= "none" and (assessment.action .. " " .. unit) or ""
  if assessment.changed then what = "rewrite the node list" .. (what ~= "" and (" and " .. what) or "") end
  local one = #entries == 1
  return one_line(string.format("node %s: %s %s %s %s; job %s would %s for %s; nothing written or "
    .. "restarted; if %s no longer runs here: imexguard forget %s", node_name(ctx),
    one and "job" or "jobs", table.concat(parts, ", "), one and "uses" or "use",
    (why:gsub("^it ", unit .. " ")), job_id(ctx), what, job_hosts(ctx, assessment.nodes),
    one and ("job " .. entries[1].id) or "one of them", one and entries[1].id or "JOBID"))
end

--- The registry's identity for M.wait_registry: its job ids and their node lists, in order.
-- @param st table state
-- @return string
function M.registry_key(st)
  local parts = {}
  for i, e in ipairs(registry.jobs(st)) do parts[i] = tostring(e.id) .. "=" .. tostring(e.nodes) end
  return table.concat(parts, ";")
end

--- C24: wait, WITHOUT the node lock, until the registry in the state file differs from `key` (an
-- epilog unregistered its job) or monotonic time `until_t` (host.now seconds) passes or the run's
-- deadline nears (host.sleep fails). Polls every poll_interval seconds; the state file is
-- replaced atomically, so reading it without the lock sees a whole registry.
-- @param ctx table policy context
-- @param key string M.registry_key of the registry that refused the change
-- @param until_t number host.now() time to give up at
-- @return true when the registry changed (decide again), false when the time passed
function M.wait_registry(ctx, key, until_t)
  local host, s = ctx.host, ctx.settings
  local boot = base.boot_id(ctx)
  local told = progress.new(host, "the registered jobs' epilogs (conflict_wait)", until_t - host.now())
  while host.now() < until_t do
    told:tick()
    local ok = host.sleep(math.min(s.poll_interval, until_t - host.now()))
    if not ok then return false end
    local st = state.load(host, s)
    if st then registry.drop_other_boots(st, boot) end -- as the locked run sees it (C36)
    if st and M.registry_key(st) ~= key then return true end
  end
  return false
end

return M
