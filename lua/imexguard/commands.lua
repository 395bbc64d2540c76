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
-- deadline: seconds, the budget when --deadline gives none and it is below the setting
--   `deadline` (nil: the setting);
-- short: the short option that runs it instead of the name (`imexguard -t`, as `sshd -t`);
-- reason_line: true when a non-zero exit always prints one line 'imexguard: OUTCOME: cause' on
--   stdout (src/main.c prints it when the run printed nothing: a settings or policy error, the
--   deadline), what a health check or a configuration test reads;
-- signals_only: true when its host may not change anything but send a signal to the unit's
--   process (host.unit_kill): every other side effect raises (driver.lua), so that it never writes,
--   locks or restarts anything whatever its policy does;
-- help: what it does, one or more sentences (the usage text wraps them).
M.list = {
  { name = "prolog", entry = "required", metrics = true,
    help = "make this node's IMEX domain match the job (Slurm Prolog)" },
  { name = "epilog", entry = "required", metrics = true,
    help = "the job ended (Slurm Epilog)" },
  -- the prolog's watcher (lua/imexguard/watch.lua, docs/design.md "Convergence in Slurm's order"):
  -- the prolog starts it as a transient unit; run by hand it watches the job of the environment
  { name = "watch", entry = "optional", signals_only = true,
    help = "the prolog's watcher, started by it as a transient unit of systemd: until the job's epilog or "
      .. "the job's peers can no longer restart for it (deadline + watch_skew), nudge this node's IMEX "
      .. "daemon "
      .. "(SIGUSR1) when its link to a peer of the job that came back as a new instance stays down; never "
      .. "restarts or writes anything" },
  { name = "status", json = true, verbosity = true, entry = "optional", metrics = true, reason_line = true,
    help = "show this node's IMEX (unit, last prolog and epilog, registered jobs, node lock) and the "
      .. "domain, with a diagnosis per unhealthy node" },
  { name = "plan", json = true, entry = "optional", dry_run = true,
    help = "what prolog would do, without doing it" },
  -- 10 s: a periodic health check must end well within Slurm's HealthCheckInterval and NHC's
  -- `check_cmd_status -t 10`
  { name = "health", entry = "optional", dry_run = true, metrics = true, deadline = 10, reason_line = true,
    help = "check this node's IMEX, changing nothing (Slurm HealthCheckProgram, LBNL NHC): exit 0 "
      .. "healthy or not applicable, else one line 'imexguard: OUTCOME: cause' on stdout" },
  -- the job registry by hand (docs/design.md "The state file and the job registry"): what an
  -- admin needs when an epilog never ran (slurmd crashed) and a registration blocks the next job
  { name = "registrations", json = true, verbosity = true, entry = "optional", dry_run = true,
    help = "list the jobs registered on this node (the job registry): job, hosts, since when" },
  { name = "forget", arg = "JOBID", entry = "optional", reason_line = true,
    help = "remove job JOBID's registration from this node's registry, under the node lock, and say "
      .. "what was removed; IMEX is left as it is (for a job whose epilog never ran)" },
  { name = "check", arg = "POLICY", json = true,
    help = "compile a policy in the sandbox, run standard scenarios" },
  -- the names and letters of sshd -t / nginx -t (test the configuration) and sshd -T / nginx -T
  -- (show the effective one); `show-config` as `scontrol show config`
  { name = "config-test", short = "t", dry_run = true, reason_line = true,
    help = "test the settings (imexguard.conf, --set) and that the policy loads, changing nothing: exit 0 "
      .. "and one line 'FILE: ok ...' on stdout, else one line 'imexguard: OUTCOME: cause' (settings-error "
      .. "names the file, line and key)" },
  { name = "show-config", short = "T", json = true,
    help = "print every setting, its value and where it came from (default, FILE:LINE, --set, "
      .. "--deadline, --policy), as a settings file" },
  { name = "version",
    help = "print the version" },
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

return M
