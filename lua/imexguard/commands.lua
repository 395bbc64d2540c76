-- SPDX-License-Identifier: Apache-2.0
--- The commands of imexguard: the one source of these facts. The build generates the C side from
-- this file (src/embed.lua: the command table that src/cli.c accepts and the usage text's list),
-- man/gen.lua the man page's COMMANDS section, and the driver (driver.lua) reads it for the entry
-- points a policy has, the commands that change nothing and those that the metrics record.
-- A command added here appears in --help, the man page and the driver without another edit.
local M = {}

--- The commands in the order --help lists them. Each entry:
-- name: the word on the command line;
-- arg: the one argument it takes (nil: none), as the usage text names it;
-- json: true when --json changes its output (any other command refuses --json: a usage error);
-- verbosity: true when it takes -q (one line) and -v (more detail); any other refuses them;
-- entry: "required" (every policy has this entry point), "optional" (a policy file without it
--   uses the built-in policy's), or nil (the host runs the command itself: no entry point);
-- dry_run: true when it changes nothing (the host's side effects are recorders, driver.lua);
-- metrics: true when its runs are recorded in the metrics file (setting metrics_dir);
-- signals: true when its runs update what the GPU health stack reads after the outcome: the node
--   condition "IMEX expected here" (imexguard.expected) and the unit's restart count
--   (imexguard.flapping), both in state_dir (imexguard.runrecord.save_signals);
-- deadline: seconds, the budget when --deadline gives none and it is below the setting
--   `deadline` (nil: the setting);
-- short: the short option that runs it instead of the name (`imexguard -t`, as `sshd -t`);
-- options: the command's own options beyond those every command takes, a list of long option
--   names among M.OPTIONS (any other command refuses them: a usage error);
-- reason_line: true when a non-zero exit always prints one line 'imexguard: OUTCOME: cause' on
--   stdout (src/main.c prints it when the run printed nothing: a settings or policy error, the
--   deadline), what a health check or a configuration test reads;
-- signals_only: true when its host may not change anything but send a signal to the unit's
--   process (host.unit_kill): every other side effect raises (driver.lua), so that it never writes,
--   locks or restarts anything whatever its policy does;
-- interactive: true when a person runs it and reads its result on stdout (a report, or the reason
--   line): its final log line goes to the journal only, so the result is printed once (on stderr
--   only when the journal does not take it: off, or no journald). The commands Slurm runs (prolog,
--   epilog, and health through health.sh or NHC) keep the line on stderr: slurmd may log it;
-- help: what it does, one or more sentences (the usage text wraps them).
M.list = {
  { name = "prolog", entry = "required", metrics = true, signals = true,
    help = "make this node's IMEX domain match the job (Slurm Prolog)" },
  { name = "epilog", entry = "required", metrics = true, signals = true,
    help = "the job ended (Slurm Epilog)" },
  -- the prolog's watcher (lua/imexguard/watch.lua, docs/design.md "Convergence in Slurm's order"):
  -- the prolog starts it as a transient unit; run by hand it watches the job of the environment
  { name = "watch", entry = "optional", signals_only = true,
    help = "the prolog's watcher, started by it as a transient unit of systemd: until the job's epilog or "
      .. "the job's peers can no longer restart for it (deadline + watch_skew), nudge this node's IMEX "
      .. "daemon "
      .. "(SIGUSR1) when its link to a peer of the job that came back as a new instance stays down; never "
      .. "restarts or writes anything" },
  { name = "status", interactive = true, json = true, verbosity = true, entry = "optional", metrics = true,
    reason_line = true,
    help = "show this node's IMEX (unit, last prolog and epilog, registered jobs, node lock) and the "
      .. "domain, with a diagnosis per unhealthy node" },
  { name = "plan", interactive = true, json = true, entry = "optional", dry_run = true,
    options = { "job", "nodelist" },
    help = "what prolog would do, without doing it" },
  -- 10 s: a periodic health check must end well within Slurm's HealthCheckInterval and NHC's
  -- `check_cmd_status -t 10`
  { name = "health", entry = "optional", dry_run = true, metrics = true, signals = true, deadline = 10,
    reason_line = true,
    help = "check this node's IMEX, changing nothing (Slurm HealthCheckProgram, LBNL NHC): exit 0 "
      .. "healthy or not applicable, else one line 'imexguard: OUTCOME: cause' on stdout" },
  -- the job registry by hand (docs/design.md "The state file and the job registry"): what an
  -- admin needs when an epilog never ran (slurmd crashed) and a registration blocks the next job
  { name = "registrations", interactive = true, json = true, verbosity = true, entry = "optional",
    dry_run = true,
    help = "list the jobs registered on this node (the job registry): job, hosts, since when" },
  { name = "forget", interactive = true, arg = "JOBID", entry = "optional", reason_line = true,
    metrics = true, signals = true,
    help = "remove job JOBID's registration from this node's registry, under the node lock, and say "
      .. "what was removed; IMEX is left as it is (for a job whose epilog never ran)" },
  -- a barrier for job scripts and step prologs that must not start before the job's IMEX domain is
  -- whole (imexguard.barrier); its budget is --timeout (else health_timeout) and a little more
  { name = "wait", entry = "optional", dry_run = true, reason_line = true, options = { "job", "timeout" },
    help = "wait until every node of the job (--job N, else SLURM_JOB_ID) in this node's IMEX domain is "
      .. "CONNECTED to every other, changing nothing: exit 0, else the missing links named after --timeout "
      .. "seconds (default health_timeout)" },
  -- one screen for one NVLink domain (imexguard.rack): every node's digest from Slurm's Extra
  -- (setting slurm_extra), Slurm's state and reason, and this node's ctl answer
  { name = "rack", interactive = true, json = true, entry = "optional", dry_run = true,
    help = "show this node's NVLink domain at a glance, changing nothing: the findings first (IDs claimed "
      .. "twice or by nobody, node lists that differ, nodes that see each other differently, daemons "
      .. "restarted outside imexguard, drained nodes), then each node's list, ID, daemon, last run and "
      .. "last error (Slurm's Extra, slurm_extra) and Slurm's state" },
  { name = "check", interactive = true, arg = "POLICY", json = true,
    help = "compile a policy in the sandbox, run standard scenarios" },
  -- the names and letters of sshd -t / nginx -t (test the configuration) and sshd -T / nginx -T
  -- (show the effective one); `show-config` as `scontrol show config`
  { name = "config-test", interactive = true, short = "t", dry_run = true, reason_line = true,
    help = "test the settings (imexguard.conf, --set), that the policy loads, and every file a prolog "
      .. "reads (slurm.conf and its Includes, the topology files, the address map, config.cfg, the ctl), "
      .. "changing nothing: one line per finding, 'FILE:LINE: error|warning|info: ...', then 'FILE: ok ...' "
      .. "(exit 0), or 'imexguard: OUTCOME: cause' for the first error (--strict: also for the first "
      .. "warning); settings-error names the file, line and key" },
  { name = "show-config", interactive = true, short = "T", json = true,
    help = "print every setting, its value and where it came from (default, FILE:LINE, --set, "
      .. "--deadline, --policy), as a settings file" },
  { name = "version",
    help = "print the version" },
}

--- The options that only some commands take (their `options`): long option name -> what it gives,
-- for the usage text. The C side (src/cli.c) parses each; this table says who may use it.
M.OPTIONS = {
  { "job", "ID", "the job id (plan: instead of SLURM_JOB_ID; wait: the job to wait for)" },
  { "nodelist", "LIST", "the job's hostlist, e.g. n[01-04] (instead of SLURM_JOB_NODELIST): a plan "
    .. "without a job" },
  { "timeout", "SECONDS", "how long to wait at most (default: the setting health_timeout)" },
}

--- Command name -> its entry of M.list.
M.by_name = {}
for _, c in ipairs(M.list) do M.by_name[c.name] = c end

--- The names of the commands whose entry matches: `M.names("entry")` lists the policy entry
-- points, `M.names("dry_run")` the commands that change nothing.
-- @param field string|nil a field of the entries (nil: every command)
-- @return table list of names, in M.list order
function M.names(field)
  local t = {}
  for _, c in ipairs(M.list) do
    if field == nil or c[field] then t[#t + 1] = c.name end
  end
  return t
end

--- The names of the commands that take option `name` (their `options`).
-- @param name string a long option name of M.OPTIONS
-- @return table list of command names, in M.list order
function M.taking(name)
  local t = {}
  for _, c in ipairs(M.list) do
    for _, o in ipairs(c.options or {}) do
      if o == name then t[#t + 1] = c.name end
    end
  end
  return t
end

return M
