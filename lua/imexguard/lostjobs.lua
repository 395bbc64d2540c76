-- SPDX-License-Identifier: Apache-2.0
--- A registration whose epilog never ran here (issue 32 item 4): `status` and `health` judge a node
-- with a registered job on that job's nodes (C33), so when the job's epilog never ran on this node
-- (slurmd crashed, the node rebooted without clearing state_dir) while its other nodes moved on to
-- another job with their own node list, this node looks cut off from peers that are connected to
-- each other, and a health check would drain it and every node like it. The pattern: the peers of
-- the registered list that this node's links do not reach are READY, CONNECTED to each other, and
-- run another node list (their view names this node INVALID or absent, or a node-map mismatch with
-- it). Recognised, Slurm is asked whether each registered job still exists (`scontrol -o show job
-- ID`, the setting scontrol, only then: one call per registered job, and only when a registration
-- decides the outcome). A job Slurm no longer has, or has in an ended state, is dropped from the
-- judgement with a log line (nothing is written: status and health change nothing; `imexguard
-- forget ID` removes the registration); where Slurm cannot say, the judgement says so with that
-- same hint. Either way the node is then judged on what it owns, as an idle node (C33).
local S = require("imexguard.settings")
local verdict = require("imexguard.verdict")
local one_line = require("imexguard.text").one_line

local M = {}

--- Seconds one `scontrol show job` may take (within the run's budget).
M.SCONTROL_TIMEOUT = 5

--- Slurm job states of a job that has ended (squeue(1), "JOB STATE CODES"): its allocation, and
-- IMEX's use of this node with it, are over.
M.ENDED = { COMPLETED = true, CANCELLED = true, FAILED = true, TIMEOUT = true, NODE_FAIL = true,
  PREEMPTED = true, BOOT_FAIL = true, DEADLINE = true, OUT_OF_MEMORY = true, REVOKED = true,
  SPECIAL_EXIT = true }

--- The peers of `list` that moved on to another node list: those this node's links do not reach
-- (not CONNECTED), when every one of them is READY, visibly runs another list (its view names a
-- host of `list` INVALID or not at all: not verdict.names_list) and is CONNECTED to every other of
-- them.
-- @param mesh table the ctl's answer (ctl.parse_mesh)
-- @param list list the registered job's addresses
-- @param self_host string this node's address
-- @return list of addresses (list order), or nil when the pattern does not hold (or no peer is cut)
function M.moved_on(mesh, list, self_host)
  local self = mesh.by_host[self_host]
  if not self or self.status ~= "READY" then return nil end
  local cut = {}
  for _, h in ipairs(list) do
    local p = mesh.by_host[h]
    if h ~= self_host and p and self.connections[h] ~= "CONNECTED" then cut[#cut + 1] = p end
  end
  if #cut == 0 then return nil end
  for _, a in ipairs(cut) do
    if a.status ~= "READY" or verdict.names_list(a, list) then return nil end
    for _, b in ipairs(cut) do
      if a ~= b and a.connections[b.host] ~= "CONNECTED" then return nil end
    end
  end
  local hosts = {}
  for i, p in ipairs(cut) do hosts[i] = p.host end
  return hosts
end

--- Ask Slurm about one job: `scontrol -o show job ID`.
-- @param ctx table policy context (settings.scontrol, host.run)
-- @param id string the job id
-- @return "ended" | "exists" | "unknown", string what Slurm said (one line)
function M.ask(ctx, id)
  local h = ctx.host
  local timeout = math.min(M.SCONTROL_TIMEOUT, math.max(h.remaining() - 0.5, 0.05))
  local argv = S.command_argv(ctx.settings.scontrol, { "-o", "show", "job", tostring(id) })
  local res, err, code = h.run(argv, { timeout = timeout })
  if not res then
    return "unknown", one_line(string.format("%s: %s (%s)", argv[1], tostring(err), tostring(code)), 200)
  end
  local out = (res.stdout or "") .. (res.stderr or "")
  if res.status ~= 0 and out:find("Invalid job id", 1, true) then
    return "ended", "Slurm no longer knows it (Invalid job id)"
  end
  local state = res.status == 0 and out:match("JobState=(%S+)")
  if not state then
    return "unknown", one_line(string.format("%s -o show job %s exited %s: %s", argv[1], id,
      tostring(res.status), out ~= "" and out or "no answer"), 200)
  end
  if M.ENDED[state] then return "ended", "JobState=" .. state end
  return "exists", "JobState=" .. state
end

--- Recognise a lost epilog behind an unhealthy verdict on the registered job's list, and decide.
-- @param ctx table policy context
-- @param mesh table the ctl's answer
-- @param list list the registered job's addresses (the list the verdict judged)
-- @param self_host string this node's address
-- @param jobs list the registered entries ({id, ...})
-- @param names table|nil {[address] = Slurm name} (messages)
-- @return nil (not the pattern, or Slurm still has a registered job: the verdict stands), or
--   {note = one line for the judgement's message, moved = {addresses}, dropped = true when every
--   registered job has ended (judge on what this node owns), false when Slurm could not say for
--   one of them (the verdict stands, the note says so with the forget hint)}
function M.recognise(ctx, mesh, list, self_host, jobs, names)
  local moved = M.moved_on(mesh, list, self_host)
  if not moved or #jobs == 0 then return nil end
  local hosts = require("imexguard.health").hosts_ranged(moved, names)
  local ended, unknown = {}, {}
  for _, e in ipairs(jobs) do
    local what, said = M.ask(ctx, e.id)
    if what == "exists" then
      ctx.host.log("info", one_line(string.format("%s left job %s's node list, but Slurm still has job %s "
        .. "(%s): judged on its nodes", hosts, e.id, e.id, said)))
      return nil
    end
    local t = what == "ended" and ended or unknown
    t[#t + 1] = string.format("%s (%s)", e.id, said)
  end
  local forget = {}
  for i, e in ipairs(jobs) do forget[i] = "imexguard forget " .. tostring(e.id) end
  local moved_text = hosts .. " moved on to another node list (READY, connected to each other)"
  local note
  if #unknown == 0 then
    note = one_line(string.format("job %s ended, its epilog never ran here; %s: not judged on that "
      .. "registration (%s removes it)", table.concat(ended, ", "), moved_text, table.concat(forget, "; ")))
  else
    -- the hint first: a drain reason keeps 255 bytes, the cause first
    note = one_line(string.format("%s; if the registered job no longer runs here: %s (Slurm could not say "
      .. "whether job %s still runs)", moved_text, table.concat(forget, "; "), table.concat(unknown, ", ")))
  end
  ctx.host.log("warning", note)
  return { note = note, moved = moved, dropped = #unknown == 0 }
end

return M
