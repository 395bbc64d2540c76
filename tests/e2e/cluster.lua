-- SPDX-License-Identifier: Apache-2.0
--- The private Slurm cluster of tests/e2e/run, as the end-to-end specs use it (the 22.05 tier,
-- tests/e2e, the 24.11 tier, tests/slurm24, and the 26.05 tier, tests/slurm26): Slurm commands, job
-- submission and waiting, node state and reason, imexguard's log lines per node, the environments
-- the prolog and the health check got, configuration changes applied with `scontrol reconfigure`,
-- and Slurm's output kept as fixtures. Needs the environment of tests/e2e/run.
-- @module tests.e2e.cluster
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

local M = {}

M.root = assert(os.getenv("IMEXGUARD_E2E_ROOT"), "run through tests/e2e/run or tests/slurm2*/run")
M.simroot = os.getenv("IMEXGUARD_E2E_SIMROOT")
M.logdir = os.getenv("IMEXGUARD_E2E_LOG")
--- The Debian root Slurm runs in ("" for this machine's Slurm).
M.chroot = os.getenv("IMEXGUARD_E2E_CHROOT") or ""
--- The prefix of a shell command that runs it where slurmd runs ("chroot ROOT ", or "").
M.in_root = M.chroot ~= "" and ("chroot " .. simdomain.quote(M.chroot) .. " ") or ""
--- Slurm's major version: "22.05", "24.11" or "26.05".
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
  return simdomain.wait_until(M.all_idle, 60, 0.2) and true or false
end

--- Whether the cluster's four nodes are idle and responding, and no other node is there (in every
-- partition: a spec may add partitions over the same nodes).
function M.all_idle()
  local ok, out = M.sh("sinfo -h -N -o '%N %t'")
  if not ok then return false end
  local seen = {}
  for n, s in out:gmatch("(%S+) (%S+)") do
    if s ~= "idle" then return false end
    seen[n] = true
  end
  for _, n in ipairs(M.nodes) do
    if not seen[n] then return false end
    seen[n] = nil
  end
  return next(seen) == nil
end

--- A simulated domain of four nodes in the cluster's simulated root, from scratch (the node
-- directories of an earlier spec removed), each node with SETTINGS (Lua source lines) besides
-- simdomain's; not started.
-- @tparam {string,...} settings extra settings
-- @tparam[opt=4] integer nodes how many (n5 for a dynamic node a spec registers itself)
-- @treturn table the domain (contrib/simdomain.lua)
function M.domain(settings, nodes)
  os.execute("rm -rf " .. simdomain.quote(M.simroot) .. "/n[0-9]*")
  return simdomain.new { nodes = nodes or 4, root = M.simroot, settings = settings }
end

--- The node list on node N as node names (the simulated domain's addresses mapped back), sorted.
-- @tparam table d the domain
-- @treturn {string,...}
function M.list_of(d, n)
  local by = {}
  for name, a in pairs(d.addr) do by[a] = name end
  local t = {}
  for _, a in ipairs(M.lines(d:nodes_file(n))) do t[#t + 1] = by[a] or a end
  table.sort(t)
  return t
end

--- The scontrol setting that finds this cluster (slurmd 22.05 passes no SLURM_CONF to the prolog;
-- 24.11 does, naming the conf-cache on a configless node); scontrol runs where slurmd runs.
function M.scontrol_setting()
  return string.format("scontrol = { %q, %q, %q }", "/usr/bin/env",
    "SLURM_CONF=" .. assert(os.getenv("SLURM_CONF")), "/usr/bin/scontrol")
end

--- Run a shell command, its stdout and stderr apart (Slurm's clients print some errors on stderr
-- and exit 0).
-- @tparam string cmd shell command
-- @treturn string stdout
-- @treturn string stderr
-- @treturn number exit status
function M.run(cmd)
  local err = os.tmpname()
  local p = assert(io.popen(cmd .. " 2>" .. simdomain.quote(err), "r"))
  local out = p:read("a")
  local _, _, status = p:close()
  local e = simdomain.read_file(err) or ""
  os.remove(err)
  return out, e, status
end

--- A KEY=VALUE environment as a table ('#' lines skipped).
function M.parse_env(text)
  local env = {}
  for line in (text or ""):gmatch("[^\n]+") do
    local k, v = line:match("^([%w_]+)=(.*)$")
    if k then env[k] = v end
  end
  return env
end

--- The environment a prolog or epilog of JOB got on node N (tests/e2e/run's wrappers save it).
-- @tparam string hook "prolog" or "epilog"
-- @treturn string|nil the saved text (`env` output), nil when that hook has not run
function M.env_text(hook, n, job)
  return simdomain.read_file(string.format("%s/env-%s-%s-%s.txt", M.logdir, hook, n, job))
end

--- The environment of node N's last health check run (every run saves it).
function M.health_env_text(n)
  return simdomain.read_file(M.logdir .. "/env-health-" .. n .. ".txt")
end

--- A fixture under tests/fixtures/slurm/: its text. With IMEXGUARD_UPDATE_FIXTURES=1 in the
-- environment, TEXT (the live output, after HEADER when given) is written there first: the way the
-- fixtures are made and refreshed from the real daemons (review the diff).
-- @tparam string name file name
-- @tparam[opt] string text what Slurm printed (nil: only read the fixture)
-- @tparam[opt] string header '#' lines saying where it comes from
-- @treturn string the fixture's text
function M.fixture(name, text, header)
  local path = "tests/fixtures/slurm/" .. name
  if text and os.getenv("IMEXGUARD_UPDATE_FIXTURES") == "1" then
    simdomain.write_file(path, (header or "") .. text)
  end
  return assert(simdomain.read_file(path), "no fixture " .. path)
end

local function daemon_pids()
  local t = {}
  for _, d in ipairs { "slurmctld", "slurmd-n1", "slurmd-n2", "slurmd-n3", "slurmd-n4" } do
    t[d] = (simdomain.read_file(M.root .. "/run/" .. d .. ".pid") or ""):match("%d+")
  end
  return t
end

local function alive(pid)
  return pid and os.execute("kill -0 " .. pid .. " 2>/dev/null") == true
end

--- `scontrol reconfigure`, and wait until it has taken effect: from Slurm 23.11 slurmctld and every
-- slurmd start again as new processes (new PIDs in their pid files; the configless nodes fetch the
-- new files), and the four nodes are back idle.
-- @treturn boolean whether it did within 60 s
-- @treturn string why not: scontrol's answer or the end of slurmctld's log
function M.apply_config()
  local before = daemon_pids()
  local ok, out = M.sh("scontrol reconfigure")
  if not ok then return false, out end
  local restarted = simdomain.wait_until(function()
    for d, pid in pairs(daemon_pids()) do
      if pid == before[d] or not alive(pid) then return false end
    end
    return M.all_idle()
  end, 60, 0.2)
  if restarted then return true end
  local _, log = M.sh("tail -n 15 " .. simdomain.quote(M.logdir .. "/slurmctld.log"))
  return false, "the daemons did not restart with the new configuration:\n" .. log
end

--- Change files of the cluster's configuration (beside slurm.conf) and apply them (apply_config).
-- @tparam table files file name -> new text, a function from the old text ("" when none) to the
-- new, or false to remove the file
-- @treturn function restore: puts every file back as it was and applies that (returns as
-- apply_config); given also when the change failed
-- @treturn boolean whether the change took effect (apply_config)
-- @treturn string why not
function M.reconfigure(files)
  local saved = {}
  for name, text in pairs(files) do
    local path = M.root .. "/" .. name
    saved[name] = simdomain.read_file(path) or false
    if type(text) == "function" then text = text(saved[name] or "") end
    if text then simdomain.write_file(path, text) else os.remove(path) end
  end
  local function restore()
    for name, text in pairs(saved) do
      local path = M.root .. "/" .. name
      if text then simdomain.write_file(path, text) else os.remove(path) end
    end
    return M.apply_config()
  end
  return restore, M.apply_config()
end

--- Install (TEXT, a sh script) or remove (nil) the spec's own step that every prolog or epilog runs
-- before imexguard (tests/e2e/run's hooks/HOOK).
function M.hook(hook, text)
  local path = M.root .. "/hooks/" .. hook
  if not text then
    os.remove(path)
    return
  end
  simdomain.write_file(path, "#!/bin/sh\n" .. text .. "\n")
  assert(os.execute("chmod 0755 " .. simdomain.quote(path)))
end

return M
