-- SPDX-License-Identifier: Apache-2.0
--- The drain reason: Slurm drains a node whose prolog exits non-zero with the reason "Prolog error"
-- (slurmd reports the failure, slurmctld drains the node), which tells the admin nothing. With the
-- setting `drain_reason`, the prolog drains its own node first with a reason that says why:
--
--     scontrol update NodeName=$SLURMD_NODENAME State=DRAIN Reason="imexguard: OUTCOME: cause"
--
-- slurmctld keeps the reason of a node that is already draining when the prolog failure drains it
-- again, so `sinfo -R` shows this reason, not "Prolog error" (checked by tests/e2e under a real
-- slurmctld). Setting the Reason without State=DRAIN is refused by scontrol ("Reason" only goes with
-- DOWN, DRAIN or FAIL). The call is bounded by its own short timeout within the run's deadline, runs
-- no shell, and a Slurm that does not answer is skipped with a log line: the outcome never changes.
-- @module imexguard.drain
local settings_schema = require("imexguard.settings")
local outcomes = require("imexguard.outcomes")
local rtrim = require("imexguard.text").rtrim

local M = {}

--- Bytes of the reason at most: slurmdbd keeps a node's reason in the `reason` column of its
-- event table, a MySQL `tinytext` (255 bytes; Slurm's accounting_storage/mysql), which is what
-- `sacctmgr show event` and the node's history show. slurmctld itself takes any length.
M.MAX_REASON = 255
--- Characters of the reason `sinfo -R` shows by default (its format "%20E %9u %19H %N"): the
-- prefix and the outcome fill them, so the outcome comes right after the prefix and the cause
-- right after it; `sinfo -R -o "%80E %N"` shows more.
M.SINFO_WIDTH = 20
--- The reason's prefix: the drains of imexguard (prolog, health check) start with it, so that an
-- admin or a resume script (`sinfo -R`, NHC's own "NHC:") can tell them from others.
M.PREFIX = "imexguard: "
--- What separates the outcome from the cause.
M.SEPARATOR = ": "
--- What ends a cause that was cut to fit MAX_REASON.
M.CUT_MARK = "..."
--- The word in place of an outcome when the command line itself was wrong or imexguard failed
-- inside (exit 1, no outcome: src/main.c's reason line, contrib/slurm/health.sh's own).
M.NO_OUTCOME = "error"

-- The outcome names a reason may carry: every outcome of imexguard.outcomes, then M.NO_OUTCOME.
local function reason_outcomes()
  local names = {}
  for _, o in ipairs(outcomes.list) do names[#names + 1] = o[1] end
  names[#names + 1] = M.NO_OUTCOME
  return names
end

--- The grammar of every reason imexguard sets (the prolog with drain_reason, `health`'s line that
-- health.sh and NHC drain with), as one POSIX extended regular expression (grep -E; also Python's
-- re and Go's regexp): the prefix, an outcome name (imexguard.outcomes) or "error", the separator.
-- The cause follows: one line, no control characters, the run's message without its "node NAME: ",
-- cut (with M.CUT_MARK) so that the whole reason is at most MAX_REASON bytes. scontrol shows a
-- reason with " [USER@TIME]" after it; sinfo -R without. contrib/slurm/health.sh has the same
-- expression (tests/lua/drain_spec.lua compares them); imexguard(8), DRAIN REASONS, prints it.
M.REGEX = "^" .. M.PREFIX .. "(" .. table.concat(reason_outcomes(), "|") .. ")" .. M.SEPARATOR

--- A reason taken apart by the grammar (M.REGEX), in Lua: the outcome and the cause, and whether
-- the cause was cut.
-- @tparam string|nil reason as Slurm keeps it (scontrol's " [USER@TIME]" removed or not)
-- @treturn string|nil outcome (nil: not one of imexguard's reasons)
-- @treturn string|nil cause
-- @treturn boolean|nil cut
function M.parse(reason)
  if type(reason) ~= "string" or reason:sub(1, #M.PREFIX) ~= M.PREFIX then return nil end
  local rest = reason:sub(#M.PREFIX + 1)
  for _, name in ipairs(reason_outcomes()) do
    if rest:sub(1, #name + #M.SEPARATOR) == name .. M.SEPARATOR then
      local cause = rest:sub(#name + #M.SEPARATOR + 1):gsub(" %[[^%]]*@[^%]]*%]$", "")
      return name, cause, cause:sub(-#M.CUT_MARK) == M.CUT_MARK
    end
  end
  return nil
end

--- Seconds the scontrol call may take at most (within the run's remaining budget).
M.TIMEOUT = 5
--- Seconds of the run's budget that must be left to try at all.
M.MIN_LEFT = 0.2

-- The cause for a node's reason: one line, without the "node NAME: " that starts most messages
-- (Slurm shows the reason next to the node's name).
local function cause_of(cause)
  local c = rtrim((tostring(cause or ""):gsub("[%c]+", " ")))
  return (c:gsub("^node [^%s:]+: ", "", 1))
end

-- s cut to at most max bytes, cleanly: at the last clause ("; "), else the last ", ", else the
-- last blank that leaves at least half of it, then "..."; never inside a UTF-8 sequence.
local function cut(s, max)
  if #s <= max then return s end
  local room = max - 3
  local head = s:sub(1, room)
  local at
  for _, sep in ipairs({ "; ", ", ", " " }) do
    local i, last = 0, nil
    while true do
      i = head:find(sep, i + 1, true)
      if not i then break end
      last = i
    end
    if last and last > room / 2 then at = last - 1; break end
  end
  head = rtrim(head:sub(1, at or room)):gsub("[\128-\255]*$", "")
  return head .. M.CUT_MARK
end

--- The reason text: `imexguard: OUTCOME: cause`, one line, at most MAX_REASON bytes. The cause is
-- the run's message without its leading "node NAME: " (Slurm shows the node), cut at a clause
-- boundary with "..." when it is too long: the messages put their cause first and the detail (host
-- lists, what to do) after it.
-- @tparam string outcome the outcome's name
-- @tparam string|nil cause the run's message
-- @treturn string
function M.reason(outcome, cause)
  return cut(string.format("%s%s: %s", M.PREFIX, tostring(outcome), cause_of(cause)), M.MAX_REASON)
end

--- Is a Slurm reason one that imexguard set (starts with M.PREFIX)?
-- @tparam string|nil reason
-- @treturn boolean
function M.ours(reason)
  return type(reason) == "string" and reason:sub(1, #M.PREFIX) == M.PREFIX
end

--- The argv of the scontrol call (settings.scontrol is a path or an argv prefix).
-- @tparam table settings validated settings (scontrol)
-- @tparam string node the Slurm node name (SLURMD_NODENAME)
-- @tparam string reason from M.reason
-- @treturn table list of strings
function M.argv(settings, node, reason)
  return settings_schema.command_argv(settings.scontrol,
    { "update", "NodeName=" .. node, "State=DRAIN", "Reason=" .. reason })
end

--- Drain this node with the reason of a non-zero prolog outcome (setting drain_reason).
-- @tparam table ctx the run's context (settings, host, env: SLURMD_NODENAME)
-- @tparam string outcome the outcome's name
-- @tparam string message the run's message
-- @treturn boolean true when scontrol accepted it; false when skipped or refused (logged)
function M.set(ctx, outcome, message)
  local host, s = ctx.host, ctx.settings
  if not s.drain_reason then return false end
  local node = ctx.env and ctx.env.SLURMD_NODENAME
  if type(node) ~= "string" or not node:match("^[%w][%w._-]*$") then
    host.log("warning", "drain reason not set: SLURMD_NODENAME is missing or not a node name")
    return false
  end
  local left = host.remaining()
  if left < M.MIN_LEFT then
    host.log("warning", "drain reason not set: the run's deadline has passed")
    return false
  end
  local reason = M.reason(outcome, message)
  local argv = M.argv(s, node, reason)
  local res, err, code = host.run(argv, { timeout = math.min(M.TIMEOUT, left), max_output = 4096 })
  if not res then
    host.log("warning", string.format("drain reason not set: %s did not answer (%s: %s)", argv[1],
      tostring(code), (tostring(err):gsub("%c+", " "))))
    return false
  end
  if res.status ~= 0 then
    host.log("warning", string.format("drain reason not set: %s exited %s: %s", argv[1],
      tostring(res.status or ("signal " .. tostring(res.signal))),
      ((res.stderr or ""):gsub("%c+", " "):sub(1, 300))))
    return false
  end
  host.log("notice", "node " .. node .. " drained with reason: " .. reason)
  return true
end

return M
