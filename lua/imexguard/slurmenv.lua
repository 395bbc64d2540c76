-- SPDX-License-Identifier: Apache-2.0
--- The job as the Slurm prolog/epilog environment describes it (field case C11 of
-- docs/design.md, "Field cases").
--
-- Pure Lua, no side effects: every function takes the environment as a table of strings
-- (`ctx.env`). Sources: Slurm's prolog/epilog documentation (slurm.conf(5), "Prolog and Epilog
-- Guide") and the captured 22.05 prolog environment in tests/fixtures/slurm/prolog-env-22.05.txt,
-- which has `SLURM_NODELIST` and `SLURM_JOBID` but no `SLURM_JOB_NODELIST`; later releases add
-- `SLURM_JOB_NODELIST` and `SLURM_JOB_OVERSUBSCRIBE`, and 26.05 `SLURM_JOB_EXCLUSIVE`
-- (tests/fixtures/slurm/prolog-env-24.11.txt, prolog-env-26.05.txt; every value by partition and
-- sbatch option: tests/slurm24/env_spec.lua, field case C49).
-- @module imexguard.slurmenv
local trim = require("imexguard.text").trim

local M = {}

-- The value of a variable with surrounding whitespace removed, or nil when unset/blank.
local function value(env, key)
  local v = env[key]
  if type(v) ~= "string" then
    return nil
  end
  v = trim(v)
  if v == "" then
    return nil
  end
  return v
end

local function check_env(env, fname)
  if type(env) ~= "table" then
    error("slurmenv." .. fname .. ": expected the environment table, got " .. type(env), 3)
  end
end

--- The job's node list expression.
-- Prefers `SLURM_JOB_NODELIST`, falls back to `SLURM_NODELIST` (the only one in the 22.05
-- prolog). Surrounding whitespace is removed; a blank value counts as unset.
-- @tparam table env the environment (name -> string)
-- @treturn[1] string the hostlist expression (not yet expanded: see imexguard.hostlist)
-- @treturn[1] string the variable it came from
-- @treturn[1] string|nil a warning when both are set and differ, or when `SLURM_JOB_NODELIST`
--   is set but blank (the caller logs it)
-- @treturn[2] nil
-- @treturn[2] string error naming both variables when neither holds a node list
-- @raise when env is not a table
function M.nodelist(env)
  check_env(env, "nodelist")
  local job, legacy = value(env, "SLURM_JOB_NODELIST"), value(env, "SLURM_NODELIST")
  if job then
    local warning
    if legacy and legacy ~= job then
      warning = string.format("SLURM_JOB_NODELIST='%s' and SLURM_NODELIST='%s' differ; "
        .. "using SLURM_JOB_NODELIST", job, legacy)
    end
    return job, "SLURM_JOB_NODELIST", warning
  end
  if legacy then
    local warning
    if env.SLURM_JOB_NODELIST ~= nil then
      warning = string.format("SLURM_JOB_NODELIST is blank; using SLURM_NODELIST='%s'", legacy)
    end
    return legacy, "SLURM_NODELIST", warning
  end
  local function value_text(key)
    local v = env[key]
    return v == nil and "unset" or string.format("'%s'", tostring(v))
  end
  return nil, string.format("no job node list in the environment: SLURM_JOB_NODELIST is %s, "
    .. "SLURM_NODELIST is %s", value_text("SLURM_JOB_NODELIST"), value_text("SLURM_NODELIST"))
end

--- slurmd's own slurm.conf, as it puts it into the prolog's and epilog's environment
-- (`SLURM_CONF`; in configless mode the conf-cache under its spool, linked from /run/slurm/conf).
-- @tparam table env the environment (name -> string)
-- @treturn string|nil the path (whitespace-trimmed), nil when unset or blank (not run by slurmd)
-- @raise when env is not a table
function M.slurm_conf(env)
  check_env(env, "slurm_conf")
  return value(env, "SLURM_CONF")
end

--- What each value of `SLURM_JOB_OVERSUBSCRIBE` says about the job's nodes (C49): Slurm 26.05 sets
-- only NO, YES and OK (CPUs not shared / shared / the partition lets the job share them) and says
-- the node's exclusivity in `SLURM_JOB_EXCLUSIVE`; before 26.05 this variable alone carried it: NO
-- a whole node, USER, MCS and TOPO a node exclusive to the user, the MCS label, the topology segment.
-- value -> the exclusivity it meant before 26.05 ("no": others' jobs may share the node).
M.OVERSUBSCRIBE = { NO = "node", YES = "no", OK = "no", USER = "user", MCS = "mcs", TOPO = "topo" }
--- Slurm 26.05's `SLURM_JOB_EXCLUSIVE` (`--exclusive[=user|mcs|topo]`, the partition's Exclusive= or
-- OverSubscribe=EXCLUSIVE): value -> the exclusivity ("no": others' jobs may share the node).
M.EXCLUSIVE = { NO = "no", NODE = "node", USER = "user", MCS = "mcs", TOPO = "topo" }

--- What the job asked for about sharing its nodes (C49), from `SLURM_JOB_EXCLUSIVE` when it is set
-- (Slurm 26.05+), else from `SLURM_JOB_OVERSUBSCRIBE` (its meaning before 26.05, where NO is a
-- whole node; on 26.05 NO only means CPUs not oversubscribed).
-- @tparam table env the environment (name -> string)
-- @treturn table `{oversubscribe = value or nil, exclusive_var = SLURM_JOB_EXCLUSIVE's value or nil,
--   exclusive = "node" | "user" | "mcs" | "topo" | "no" (others' jobs may share the node) | nil (not
--   said: neither variable, Slurm 22.05), unknown = {"VAR=value", ...} (values no release sets; the
--   exclusivity is then nil when it came from that variable)}`
-- @raise when env is not a table
function M.sharing(env)
  check_env(env, "sharing")
  local over, excl = value(env, "SLURM_JOB_OVERSUBSCRIBE"), value(env, "SLURM_JOB_EXCLUSIVE")
  local r = { oversubscribe = over, exclusive_var = excl, unknown = {} }
  if over and not M.OVERSUBSCRIBE[over] then
    r.unknown[#r.unknown + 1] = "SLURM_JOB_OVERSUBSCRIBE=" .. over
  end
  if excl and not M.EXCLUSIVE[excl] then r.unknown[#r.unknown + 1] = "SLURM_JOB_EXCLUSIVE=" .. excl end
  if excl then
    r.exclusive = M.EXCLUSIVE[excl]
  elseif over then
    r.exclusive = M.OVERSUBSCRIBE[over]
  end
  return r
end

--- The job's identity from the environment.
-- Values are the environment's strings (whitespace-trimmed), nil when unset or blank.
-- @tparam table env the environment (name -> string)
-- @treturn table `{id = SLURM_JOB_ID or SLURM_JOBID, nodename = SLURMD_NODENAME,
--   user = SLURM_JOB_USER, uid = SLURM_JOB_UID, partition = SLURM_JOB_PARTITION,
--   oversubscribe = SLURM_JOB_OVERSUBSCRIBE, exclusive = SLURM_JOB_EXCLUSIVE (26.05+),
--   nodelist = expression or nil, nodelist_source = variable name or nil}`
-- @raise when env is not a table
function M.job(env)
  check_env(env, "job")
  local nodelist, source = M.nodelist(env)
  return {
    id = value(env, "SLURM_JOB_ID") or value(env, "SLURM_JOBID"),
    nodename = value(env, "SLURMD_NODENAME"),
    user = value(env, "SLURM_JOB_USER"),
    uid = value(env, "SLURM_JOB_UID"),
    partition = value(env, "SLURM_JOB_PARTITION"),
    oversubscribe = value(env, "SLURM_JOB_OVERSUBSCRIBE"),
    exclusive = value(env, "SLURM_JOB_EXCLUSIVE"),
    nodelist = nodelist,
    nodelist_source = nodelist and source or nil,
  }
end

return M
