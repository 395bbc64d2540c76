-- SPDX-License-Identifier: Apache-2.0
--- What every step of the built-in policy shares (docs/design.md, "Decision model of the default
-- policy"; case ids: its "Field cases"): the shape of a step's result (its value, or nil, outcome,
-- one-line message naming the node, file, unit or host at fault), the outcome of a primitive that
-- ran out of the run's budget, the hint of a permission error, a setting the schema may not have;
-- and who runs: this node's name, the job's id (step 0, checked) and the kernel's boot (C36).
-- The other rooms of imexguard.steps (lua/imexguard/steps/) build on it; the epilog loads it too.
local settings_schema = require("imexguard.settings")
local text = require("imexguard.text")

local one_line = text.one_line

local M = {}

--- Largest nodes_config.cfg / config.cfg read (bytes).
M.MAX_FILE = 1024 * 1024

--- A step's failure: nil, the outcome and a one-line message (string.format of fmt and the rest).
-- @param outcome string
-- @param fmt string format of the message
-- @return nil, outcome, message
function M.fail(outcome, fmt, ...)
  return nil, outcome, one_line(string.format(fmt, ...))
end

--- Outcome for a failed primitive: its code "deadline" always means the run's budget ran out.
-- @param code string|nil the primitive's error code
-- @param outcome string the outcome of any other failure
-- @return string "deadline-exceeded" or outcome
function M.by_code(code, outcome)
  if code == "deadline" then return "deadline-exceeded" end
  return outcome
end

-- What a refused D-Bus call of a non-root process says (systemd's polkit check: the bus
-- primitives' code is "bus", the cause is in the message).
local DENIED = { "Access denied", "Permission denied", "Interactive authentication required" }

--- The hint of a permission error: " (running as uid N: run as root)" when the error is EACCES or
-- EPERM (or a D-Bus call refused with "Access denied", "Interactive authentication required") and
-- this process is not root (host.euid), else "". Only where a permission error is the cause: other
-- errors of a non-root run say nothing about root.
-- @param host table the primitives (euid when present)
-- @param code string|nil the error's code
-- @param message string|nil the error's message
-- @return string
function M.root_hint(host, code, message)
  local denied = code == "EACCES" or code == "EPERM"
  for _, d in ipairs(DENIED) do
    denied = denied or (type(message) == "string" and message:find(d, 1, true) ~= nil)
  end
  if not denied then return "" end
  local euid = type(host.euid) == "function" and host.euid() or nil
  if euid == 0 then return "" end
  return euid and string.format(" (running as uid %d: run as root)", euid) or " (run as root)"
end

--- A setting the schema may not have yet: its value, or `default` when imexguard.settings does not
-- define it (reading an unknown key of ctx.settings raises, so a policy asks here first).
-- @param ctx table policy context
-- @param name string setting name
-- @param default any
-- @return value
function M.setting(ctx, name, default)
  if not settings_schema.by_name[name] then return default end
  local v = ctx.settings[name]
  if v == nil then return default end
  return v
end

--- This node's name for messages: SLURMD_NODENAME, else the host name.
function M.node_name(ctx)
  local job = ctx.job or {}
  return job.nodename or (ctx.env and ctx.env.SLURMD_NODENAME) or ctx.host.hostname()
end

--- The job id as a string ("?" when unknown).
function M.job_id(ctx)
  local job = ctx.job or {}
  local id = tostring(job.id or (ctx.env and (ctx.env.SLURM_JOB_ID or ctx.env.SLURM_JOBID)) or "?")
  -- one job, one spelling: "007" (typed by hand) is job 7 (Slurm never writes leading zeros)
  return (id:gsub("^0+(%d)", "%1"))
end

--- Slurm job ids are decimal integers (uint32; array and heterogeneous jobs have numeric ids too).
M.JOB_ID_PATTERN = "^%d+$"
--- Longest job id accepted (digits).
M.JOB_ID_MAX = 20

--- Step 0: the job id, checked: SLURM_JOB_ID (else SLURM_JOBID, the 22.05 prolog's name) must be
-- set and a decimal integer. Anything else (unset, empty, spaces, newlines, letters, a sign) is bad
-- input: the id names the job's registration and goes into the final log line.
-- @param ctx table policy context (ctx.env: the raw environment)
-- @return id string, or nil, "bad-input", message naming the variable
function M.check_job_id(ctx)
  local env = ctx.env or {}
  local name, raw = "SLURM_JOB_ID", env.SLURM_JOB_ID
  if raw == nil or raw == "" then
    if env.SLURM_JOBID ~= nil and env.SLURM_JOBID ~= "" then name, raw = "SLURM_JOBID", env.SLURM_JOBID end
  end
  if raw == nil or raw == "" then
    return M.fail("bad-input", "%s on node %s: no SLURM_JOB_ID in the environment; nothing changed",
      ctx.command or "run", M.node_name(ctx))
  end
  if type(raw) ~= "string" or not raw:match(M.JOB_ID_PATTERN) or #raw > M.JOB_ID_MAX then
    return M.fail("bad-input", "%s on node %s: %s=\"%s\" is not a Slurm job id (a decimal integer); nothing "
      .. "changed", ctx.command or "run", M.node_name(ctx), name, text.excerpt(raw))
  end
  return (raw:gsub("^0+(%d)", "%1"))
end

--- The kernel's boot ID (C36): the first line of the setting boot_id_file (default
-- /proc/sys/kernel/random/boot_id, a UUID that Linux draws anew at each boot: random(4)), read
-- with host.read (at most 64 bytes).
-- @param ctx table policy context
-- @return string boot ID, or nil when it cannot be read or is not one line of [0-9a-f-] (then no
--   registration is tied to a boot and none is dropped; logged at debug)
function M.boot_id(ctx)
  local path = M.setting(ctx, "boot_id_file")
  if not path then return nil end
  local t, err = ctx.host.read(path, 64)
  local id = t and t:match("^([%x%-]+)\n?$")
  if not id then
    ctx.host.log("debug", one_line(string.format("boot ID unknown (%s): job registrations are not tied "
      .. "to a boot", t and (path .. " is not a boot ID") or tostring(err))))
    return nil
  end
  return id:lower()
end

return M
