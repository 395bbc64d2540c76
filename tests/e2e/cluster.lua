-- SPDX-License-Identifier: Apache-2.0
--- The private Slurm cluster of tests/e2e/run, as the end-to-end specs use it (the 22.05 tier,
-- tests/e2e, and the 24.11 tier, tests/slurm24): Slurm commands, job submission and waiting, node
-- state and reason, and imexguard's log lines per node. Needs the environment of tests/e2e/run.
-- @module tests.e2e.cluster
package.path = "contrib/?.lua;" .. package.path
local simdomain = require "simdomain"

local M = {}

M.root = assert(os.getenv("IMEXGUARD_E2E_ROOT"), "run through tests/e2e/run or tests/slurm24/run")
M.simroot = os.getenv("IMEXGUARD_E2E_SIMROOT")
M.logdir = os.getenv("IMEXGUARD_E2E_LOG")
--- The Debian root Slurm runs in ("" for this machine's Slurm).
M.chroot = os.getenv("IMEXGUARD_E2E_CHROOT") or ""
--- The prefix of a shell command that runs it where slurmd runs ("chroot ROOT ", or "").
M.in_root = M.chroot ~= "" and ("chroot " .. simdomain.quote(M.chroot) .. " ") or ""
--- Slurm's major version, "22.05" or "24.11".
M.slurm = os.getenv("IMEXGUARD_E2E_SLURM") or ""
M.nodes = { "n1", "n2", "n3", "n4" }

--- Run a shell command (Slurm's clients come first in PATH).
-- @tparam string cmd shell command
-- @treturn boolean whether it exited 0
-- @treturn string its stdout and stderr
function M.sh(cmd)
  local ok, out = simdomain.capture(cmd)
  return ok, out
end

--- A node's state as sinfo prints it (%T: "idle", "drained", ...).
function M.node_state(n)
  local _, out = M.sh("sinfo -h -n " .. n .. " -o %T")
  return (out:gsub("%s+$", ""))
end

--- A node's Reason= in `scontrol show node` ("" when none).
function M.node_reason(n)
  local _, out = M.sh("scontrol show node " .. n)
  return out:match("Reason=([^\n]*)") or ""
end

--- Submit a batch job with sbatch ARGS running SCRIPT (sh) in the cluster's directory.
-- @treturn string the job id
function M.sbatch(args, script)
  local q = simdomain.quote
  local path = M.root .. "/job-" .. tostring(math.random(1e9)) .. ".sh"
  simdomain.write_file(path, "#!/bin/sh\n" .. script .. "\n")
  local ok, out = M.sh("sbatch --parsable -D " .. q(M.root) .. " -o " .. q(M.root .. "/slurm-%j.out") .. " "
    .. args .. " " .. q(path))
  assert(ok, out)
  return assert(out:match("^(%d+)"), out)
end

--- Wait until a job has left the queue (completed, failed or requeued and held: a failed prolog
-- requeues the job held, "PENDING" with a Reason naming the hold, which is returned at once, as is
-- a job pending for drained or down nodes).
-- @tparam string id job id
-- @tparam[opt=90] number timeout seconds
-- @treturn string|nil its JobState (nil once purged)
function M.wait_job(id, timeout)
  local state
  simdomain.wait_until(function()
    local _, out = M.sh("scontrol show job " .. id)
    state = out:match("JobState=(%S+)")
    if not state then return true end -- purged: completed long ago
    -- held, or waiting for nodes that are drained or down: no change without an admin
    local why = (out:match("Reason=(%S+)") or ""):lower()
    if state == "PENDING" and (why:match("held") or why:match("drain") or why:match("reqnodenotavail")) then
      return true
    end
    return state ~= "PENDING" and state ~= "RUNNING" and state ~= "CONFIGURING"
      and state ~= "COMPLETING"
  end, timeout or 90, 0.2)
  return state
end

--- A batch job's output file (sbatch -o), "" when none.
function M.job_output(id)
  return simdomain.read_file(M.root .. "/slurm-" .. id .. ".out") or ""
end

--- Whether PATH exists (any type; "DIR/." for a directory).
function M.exists(path)
  return os.execute("test -e " .. simdomain.quote(path)) == true
end

--- imexguard's stderr lines of node N (prolog, epilog, health), as one string.
function M.log_of(n)
  return simdomain.read_file(M.logdir .. "/imexguard-" .. n .. ".log") or ""
end

--- The prolog outcomes of job JOB on node N, in order.
-- @treturn {string,...}
function M.outcomes(n, job)
  local t = {}
  for line in M.log_of(n):gmatch("[^\n]+") do
    local j, o = line:match("prolog job=(%d+) outcome=([%w%-]+)")
    if j == tostring(job) then t[#t + 1] = o end
  end
  return t
end

--- The sorted lines of a nodes_config.cfg's text.
function M.lines(text)
  local t = {}
  for l in (text or ""):gmatch("[^\n]+") do t[#t + 1] = l end
  table.sort(t)
  return t
end

--- Back to four idle nodes with no job: cancel every job, wait for the queue to empty, resume the
-- drained and down nodes, wait until all four are idle (a spec's teardown, so that the next spec
-- starts from a known cluster whatever this one left).
-- @treturn boolean whether the cluster is idle again
function M.reset()
  M.sh("scancel --user=root")
  simdomain.wait_until(function()
    local ok, out = M.sh("squeue -h -o %i")
    return ok and out:match("^%s*$")
  end, 60, 0.2)
  for _, n in ipairs(M.nodes) do
    local s = M.node_state(n)
    if s:match("drain") or s:match("down") or s:match("fail") then
      M.sh("scontrol update nodename=" .. n .. " state=resume")
    end
  end
  return simdomain.wait_until(function()
    local _, out = M.sh("sinfo -h -o '%t %D'")
    return out:gsub("%s+$", "") == "idle 4"
  end, 60, 0.2) and true or false
end

--- A simulated domain of four nodes in the cluster's simulated root, from scratch (the node
-- directories of an earlier spec removed), each node with SETTINGS (Lua source lines) besides
-- simdomain's; not started.
-- @tparam {string,...} settings extra settings
-- @treturn table the domain (contrib/simdomain.lua)
function M.domain(settings)
  os.execute("rm -rf " .. simdomain.quote(M.simroot) .. "/n[0-9]*")
  return simdomain.new { nodes = 4, root = M.simroot, settings = settings }
end

--- The scontrol setting that finds this cluster (slurmd 22.05 passes no SLURM_CONF to the prolog;
-- 24.11 does, naming the conf-cache on a configless node); scontrol runs where slurmd runs.
function M.scontrol_setting()
  return string.format("scontrol = { %q, %q, %q }", "/usr/bin/env",
    "SLURM_CONF=" .. assert(os.getenv("SLURM_CONF")), "/usr/bin/scontrol")
end

return M
