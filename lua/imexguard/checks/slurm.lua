-- SPDX-License-Identifier: Apache-2.0
--- config-test's check of Slurm's side (imexguard.configtest; issue 32 item 2, field case C53):
-- slurm.conf found where slurmd has it (imexguard.slurmconf: SLURM_CONF, the setting slurm_conf,
-- the configless cache; Includes followed) and the lines that decide whether a prolog can do its
-- job. Facts (slurm.conf(5), Slurm 22.05 to 26.05):
--   * PrologFlags=Alloc runs the prolog on every allocated node at allocation; without it only
--     where a step starts. Contain implies Alloc, X11 implies Contain and Alloc. DeferBatch:
--     slurmctld launches the batch script once the prolog is done on ALL allocated nodes; with
--     Alloc alone, once the batch node's prolog is done, before the other nodes' IMEX domains are
--     up. (Slurm 26.05: DeferBatch implies Alloc; Google's GB300 blueprint sets
--     Alloc,DeferBatch,NoHold.)
--   * PrologEpilogTimeout: slurmd kills a prolog that runs longer (default: wait indefinitely), then
--     drains the node and requeues the job, before imexguard's deadline names the step. Slurm 26.05's
--     PrologTimeout, when set, is the prolog's instead (its default: PrologEpilogTimeout).
--   * BatchStartTimeout (default 10 s): a batch job whose launch, prolog included, takes longer may be
--     declared missing and requeued (Slurm 26.05 warns about it itself).
--   * SwitchType=switch/nvidia_imex hands each job its own IMEX channel: the setting imex_channels =
--     "channel0" then makes none (never a shared channel beside the plugin).
-- The prolog itself reads slurm.conf only for the channel (imex_channels = "channel0"): a
-- slurm.conf that cannot be read is an error there (slurm-conf-unreadable), a warning otherwise.
local slurmconf = require("imexguard.slurmconf")
local slurmenv = require("imexguard.slurmenv")
local source_of = require("imexguard.checks.settings").source_of

local M = {}

--- BatchStartTimeout when slurm.conf does not set it (seconds, slurm.conf(5)).
M.BATCH_START_TIMEOUT_DEFAULT = 10

-- The value of a key with its place: value, file, line (nil when not set).
local function get(conf, key)
  local v, where = slurmconf.get(conf, key)
  if v == nil then return nil end
  return v, where.file, where.line
end

-- Where slurm.conf was looked for and what was found: a finding. With the channel step (the one
-- that reads slurm.conf in a prolog), an unreadable file is the prolog's outcome.
local function locate(ctx)
  local channel = ctx.settings.imex_channels == "channel0"
  local env_conf = slurmenv.slurm_conf(ctx.env or {})
  local conf, err = slurmconf.load(ctx)
  if conf then return conf end
  local level = channel and "error" or "warning"
  local effect = channel and "the prolog (imex_channels = \"channel0\") ends slurm-conf-unreadable"
    or "Slurm's PrologFlags and timeouts are not checked"
  if err then
    local missing = env_conf and err:find("ENOENT", 1, true)
    return nil, { level = level, outcome = channel and "slurm-conf-unreadable" or nil, file = env_conf,
      message = (missing and ("SLURM_CONF=" .. env_conf .. " names a file that does not exist: ") or "")
        .. err .. "; " .. effect }
  end
  return nil, { level = level, outcome = channel and "slurm-conf-unreadable" or nil,
    message = string.format("no slurm.conf found (SLURM_CONF is not set; neither %s, the setting slurm_conf, "
      .. "nor the configless %s exists); %s", ctx.settings.slurm_conf, slurmconf.CONFIGLESS, effect) }
end

-- The set of a comma list's words, lower case.
local function flags(value)
  local set = {}
  for w in tostring(value or ""):gmatch("[^,%s]+") do set[w:lower()] = true end
  return set
end

--- The PrologFlags that imply Alloc (slurm.conf(5): Contain sets it, X11 sets Contain and Alloc;
-- Slurm 26.05: also DeferBatch, NoHold, ForceRequeueOnFail and RunInJob).
M.IMPLY_ALLOC = { "alloc", "contain", "x11", "deferbatch", "nohold", "forcerequeueonfail", "runinjob" }

--- PrologFlags: Alloc (or a flag that implies it, M.IMPLY_ALLOC), and DeferBatch.
function M.prolog_flags(_, conf)
  local v, file, line = get(conf, "PrologFlags")
  local f = flags(v)
  local out = {}
  local shown = v and ("PrologFlags=" .. v) or "PrologFlags is not set"
  local alloc = false
  for _, name in ipairs(M.IMPLY_ALLOC) do alloc = alloc or f[name] == true end
  if not alloc then
    out[#out + 1] = { level = "warning", file = file or conf.path, line = line,
      message = shown .. ": without Alloc the prolog runs only on nodes where a job step starts, so the "
        .. "job's other nodes keep a stale IMEX node list; set PrologFlags=Alloc,DeferBatch" }
  elseif not f.deferbatch then
    out[#out + 1] = { level = "warning", file = file or conf.path, line = line,
      message = shown .. ": without DeferBatch a batch script starts once the batch node's prolog is "
        .. "done, before the other nodes' IMEX domains are up; add DeferBatch (PrologFlags=Alloc,DeferBatch; "
        .. "Slurm 26.05: DeferBatch implies Alloc)" }
  end
  return out
end

-- A timeout of slurm.conf against the deadline: a warning naming both when it is set (or, with
-- `default`, unset) and not above the deadline.
local function timeout(ctx, conf, key, default, effect)
  local v, file, line = get(conf, key)
  local n = tonumber(v or default)
  local deadline = ctx.settings.deadline
  if not n or n > deadline then return nil end
  local shown = v and string.format("%s=%s", key, v) or string.format("%s (not set: Slurm's default, %d s)",
    key, default)
  return { level = "warning", file = file or conf.path, line = line,
    message = string.format("%s is not above imexguard's deadline = %g s %s: %s; set %s above the deadline "
      .. "(e.g. %s=%d) or lower the deadline", shown, deadline, source_of(ctx, "deadline"), effect, key, key,
      math.max(2 * math.ceil(deadline), 180)) }
end

--- PrologTimeout, else PrologEpilogTimeout (unset: Slurm waits indefinitely), and BatchStartTimeout
-- (unset: 10 s) against the setting deadline (C53): each named with both values when it is not above it.
function M.timeouts(ctx, conf)
  local out = {}
  -- PrologTimeout (Slurm 26.05), when set, is the prolog's; PrologEpilogTimeout is then not used for it
  local key = get(conf, "PrologTimeout") and "PrologTimeout" or "PrologEpilogTimeout"
  out[#out + 1] = timeout(ctx, conf, key, nil, "slurmd kills the prolog first, drains the "
    .. "node and requeues the job, and no outcome names the step")
  out[#out + 1] = timeout(ctx, conf, "BatchStartTimeout", M.BATCH_START_TIMEOUT_DEFAULT, "a batch job whose "
    .. "prolog runs longer can be declared missing and requeued")
  return out
end

--- imex_channels = "channel0" beside SwitchType=switch/nvidia_imex: the setting does nothing (the
-- plugin hands out the channels and the prolog never makes a shared one beside it).
function M.channels(ctx, conf)
  local v, file, line = get(conf, "SwitchType")
  if ctx.settings.imex_channels ~= "channel0" or not v or v:lower() ~= "switch/nvidia_imex" then return {} end
  return { { level = "warning", file = file, line = line,
    message = string.format("SwitchType=%s hands each job its own IMEX channel, so imex_channels = "
      .. "\"channel0\" %s makes none (never a shared channel beside the plugin): remove the setting",
      v, source_of(ctx, "imex_channels")) } }
end

--- config-test's check "slurm.conf": which slurm.conf (and Includes) was read, PrologFlags, the
-- timeouts against the deadline, imex_channels beside switch/nvidia_imex.
-- @param ctx table the run's context (settings, env, host)
-- @return list of findings (imexguard.configtest)
function M.findings(ctx)
  local conf, problem = locate(ctx)
  if not conf then return { problem } end
  local includes = {}
  for i = 2, #conf.files do includes[#includes + 1] = conf.files[i] end
  local out = { { level = "info", file = conf.path,
    message = string.format("slurm.conf read (%s)%s", conf.source,
      #includes > 0 and (", with Include " .. table.concat(includes, ", ")) or "") } }
  for _, fn in ipairs({ M.prolog_flags, M.timeouts, M.channels }) do
    for _, f in ipairs(fn(ctx, conf)) do out[#out + 1] = f end
  end
  return out
end

return M
