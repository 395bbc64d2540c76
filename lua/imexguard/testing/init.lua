-- SPDX-License-Identifier: Apache-2.0
--- A fake host for policy specs (busted) and for `imexguard check` (testing.check, which the binary
-- runs on a node): the primitives of docs/policy-api.md, scripted, never the node's own.
--
--   local testing = require("imexguard.testing")
--   local h = testing.host{ ... }              -- options below
--   local ctx = testing.ctx{ host = h, env = {...}, settings = {...} }
--   local outcome, message = policy.prolog(ctx)
--   assert.same({}, h.writes); assert.equal(0, #h.jobs); assert.equal(1, h.count("run"))
--
-- Options of testing.host (all optional; the defaults are a healthy 2-node job n[1-2] on n1):
--   files            {[path] = string | {data = string, mtime_us = number} | false (absent)}, merged
--                    over the defaults (config.cfg and nodes_config.cfg listing 10.0.0.1, 10.0.0.2,
--                    /proc/sys/kernel/random/boot_id holding testing.BOOT_ID, /proc/net/if_inet6:
--                    the host has IPv6; testing.IF_INET6 = false for one without)
--   fail             {[path] = {read =, write =, stat =, mkdir =, lock = code}}: that operation fails
--                    with the errno name (e.g. write = "ENOSPC": the old file stays intact, and the
--                    message says so as src/file.c's does; lock = "ENOSPC" on state_dir/lock: the
--                    lock file cannot be created, as on a full or read-only state directory)
--   unit             property overrides of nvidia-imex.service, or false for a unit that is not
--                    installed (load_state "not-found"); default: loaded, enabled, active, running,
--                    started half an hour ago (after the files were written)
--   unit_script      list consumed one per host.unit call: "timeout"/"bus"/... (the query fails
--                    with that code) or a table of property overrides applied before answering
--   unit_kill        how host.unit_kill(name, signal, timeout) ends: nil (true; "bus" NoSuchProcess
--                    while the unit has no main process, as systemd answers), a code ("bus",
--                    "timeout"...: every call fails with it) or function(name, signal, timeout)
--   unit_start_transient  how host.unit_start_transient(name, spec, timeout) ends: nil (true), a code
--                    or function(name, spec, timeout)
--   restart          how unit jobs end: {result = "done"|"failed"|"wait-timeout"|code,
--                    duration = seconds (0.5), unit_result = the unit's Result after a job that did
--                    not end "done" (default "exit-code"; e.g. "start-limit-hit"), active_state =
--                    the unit's state right after a "done" start/restart (default "active"; e.g.
--                    "failed": the daemon died at once), invocation_id = the new InvocationID,
--                    journal = entries its daemon logs, appends = {[path] = text} it writes (C50;
--                    see journal below)}, or a list of those consumed per job (then every job ends
--                    "done")
--   ctl              what nvidia-imex-ctl answers (its basename, or any argv with `-N`, whatever
--                    wrapper the setting ctl names): "auto" (default: UP with the hosts the daemon
--                    was started with when the unit is active, else the "unreachable" answer), a
--                    list of answers consumed per call (the last one repeats), or function(n, argv,
--                    h) -> answer. An answer is a string (stdout, exit 0), {stdout =, status =},
--                    {hang = true}, {mesh = described mesh (see render_mesh,
--                    imexguard.testing.run)} or {exec_error = "ENOENT"};
--                    testing.restarted_peer{...} is such a function for a peer that restarted while
--                    this node's daemon waits on its reconnect back-off (or on a nudge, SIGUSR1)
--   nvidia_smi       what nvidia-smi answers (any argv whose program is nvidia-smi): an answer, a list
--                    consumed per call (the last repeats) or function(n, argv, h); default
--                    testing.gpus(): the `-q -x` document of 4 GPUs Completed, Success, in the
--                    partition testing.CLUSTER_UUID . testing.CLIQUE_ID, fabric Health Healthy (a
--                    healthy GB200 tray, so a policy that checks the fabric passes in the default
--                    world), for imexguard.fabric's query (-q -x) only (another nvidia-smi command is
--                    unscripted); testing.gpus{{state =, status =, cluster_uuid =, clique_id =,
--                    health = {...}, platform = {...}}, ...} (imexguard.testing.gpus),
--                    testing.FABRIC_NONE (all N/A), testing.FABRIC_HGX (8 GPUs, zero ClusterUUID:
--                    C41), testing.NVML_MISMATCH (NVML cannot start: C43), testing.ABSENT (not
--                    installed), testing.HANG
--   scontrol         what scontrol answers (same forms; default exit 0, no output)
--   commands         {[program path or basename] = script}: any program, before the ones above; a
--                    command no script covers (not the ctl, nvidia-smi, scontrol or a key here) raises
--                    "testing: unscripted command ..." naming it (C40)
--   daemon_nodes     the list the running daemon was started with (default: the nodes file)
--   unhealthy        {[address] = node status} for the "auto" ctl: those daemon nodes are listed with
--                    that status (e.g. "UNAVAILABLE"), the others READY; key "*": every node
--   absent_dirs      list of directories that do not exist (e.g. {"/run/imexguard"} after a reboot):
--                    writing or locking a path under one fails with ENOENT until host.mkdir makes it
--   fresh_boot       true: absent_dirs defaults to {"/run/imexguard"} (the state dir is on a tmpfs)
--   resolve          {[name] = {addresses} | "timeout" | code} merged over n1..n4 -> 10.0.0.1..4
--   local_addresses  list (default {"10.0.0.1", "127.0.0.1"}); hostname (default "n1")
--   lock             nil (free) or the holder {pid =, owner =, since =, release_at = monotonic
--                    seconds when the holder lets go (nil: never)}
--   deadline         seconds of budget (default 120); clock = monotonic start (default 1000)
--   xml_parse        function(text, name, limits) answering host.xml_parse; default: the real
--                    primitive (a pure function; under busted it needs the built C module)
--   journal          the journal host.journal_read reads (imexguard.testing.journal): a list of
--                    entries {message, priority, fields = {FIELD = value}}, a code, or a function;
--                    default empty. A job of `restart` with `journal = {entries}` adds them as its
--                    daemon's (C50), and with `appends = {[path] = text}` appends to those files
--   file_holders     {[path] = list of {pid, comm, cmdline} | code}: host.file_holders (who keeps a
--                    file open: the IMEX session's holder, C50); default nobody
--
-- Recorded for assertions: h.calls (every primitive call in order: {name, args...}), h.writes
-- ({path =, data =}), h.jobs ({unit =, verb =, result =}), h.runs (argv lists of the commands run,
-- by host.run or host.spawn: h.count("run") counts both; h.runs_of("nvidia-smi"): one program's),
-- h.spawns (the commands host.spawn started: {argv =, pid =, started =, waited =, killed =}, times
-- on the fake clock; a spawned command's time runs from its start, so its wait spends only what is left: see
-- imexguard.testing.run), h.logs ({level, message}), h.sleeps (seconds), h.locks ({owner =,
-- released = boolean}), h.mkdirs ({path =, mode =, created = boolean}), h.kills ({unit =,
-- signal =, timeout =, at = monotonic seconds, sent = boolean}: host.unit_kill), h.transients
-- ({name =, spec =, at = monotonic seconds}: host.unit_start_transient, the prolog's watcher).
-- Helpers (plain functions): h.count(name), h.file(path), h.set_file(path, data), h.advance(seconds),
-- h.unit_props (the live unit table), h.now(), h.daemon_nodes(), h.clear() (forget the
-- recordings, keep files, unit and clock).
--
-- Scenarios (a site spec reads given / when / then; options and methods in imexguard.testing.scenario):
--   local s = testing.scenario{ policy = P, node = "n1", nodes = {n1 = "10.0.0.1", n2 = "10.0.0.2"},
--     mesh = "up", file = {"n1", "n2"}, unit = "active", jobs = {{id = 100, nodes = {"n1", "n3"}}} }
--   local outcome, msg = s:prolog{ job = 101, nodelist = "n[1-2]" }
--   assert.same({}, s:writes()); assert.equal(0, s:restarts()); assert.same({"100"}, s:registered())
-- This module is test infrastructure; it uses no io (specs read fixtures themselves). The kit is
-- the folder lua/imexguard/testing/, apart from the modules that run on a node. The fake host is
-- built from one module per primitive group, as src/ is split by file: imexguard.testing.clock
-- (clock.c), .files (file.c), .lock (lock.c), .unit (unit.c), .run (run.c: the ctl), .net (log.c,
-- net.c, proc.c's file_holders), .xml (xml.c: the real primitive), .journal (journal.c); the
-- scenarios are in imexguard.testing.scenario and
-- the constants and settings in imexguard.testing.base. Require only this module: its API is the
-- kit's. (The standard scenarios of `imexguard check`, built on it, are imexguard.testing.check.)
local base = require("imexguard.testing.base")
local clock = require("imexguard.testing.clock")
local files = require("imexguard.testing.files")
local lock = require("imexguard.testing.lock")
local unit = require("imexguard.testing.unit")
local run = require("imexguard.testing.run")
local net = require("imexguard.testing.net")
local xml = require("imexguard.testing.xml")
local journal = require("imexguard.testing.journal")
local scenario = require("imexguard.testing.scenario")

local M = {}

M.UNIT, M.CONFIG, M.NODES, M.STATE, M.WALL0 = base.UNIT, base.CONFIG, base.NODES, base.STATE, base.WALL0
M.BOOT_ID, M.BOOT_ID_FILE, M.IF_INET6 = base.BOOT_ID, base.BOOT_ID_FILE, base.IF_INET6
M.CONFIG_TEXT, M.DEFAULT_SETTINGS = base.CONFIG_TEXT, base.DEFAULT_SETTINGS
M.UNREACHABLE, M.UNCONFIGURED, M.HANG, M.NO_IPV6 = run.UNREACHABLE, run.UNCONFIGURED, run.HANG, run.NO_IPV6
M.render_mesh, M.up, M.restarted_peer = run.render_mesh, run.up, run.restarted_peer
local gpus = require("imexguard.testing.gpus")
M.gpus, M.FABRIC_NONE, M.FABRIC_HGX, M.ABSENT = gpus.gpus, gpus.FABRIC_NONE, gpus.FABRIC_HGX, gpus.ABSENT
M.NVML_MISMATCH = gpus.NVML_MISMATCH
M.CLUSTER_UUID, M.CLIQUE_ID = gpus.CLUSTER_UUID, gpus.CLIQUE_ID
--- The binary and the settings file of the run a policy context describes (ctx.invocation: what the
-- prolog's watcher runs again).
M.EXE, M.SETTINGS_FILE = "/usr/sbin/imexguard", "/etc/imexguard/imexguard.conf"
--- Addresses of the default nodes n1..n4.
M.DEFAULT_NODES = { n1 = "10.0.0.1", n2 = "10.0.0.2", n3 = "10.0.0.3", n4 = "10.0.0.4" }

--- The recordings of a fake host (lists, emptied by h.clear()).
local RECORDINGS = { "calls", "writes", "jobs", "runs", "spawns", "logs", "sleeps", "locks", "mkdirs",
  "kills", "transients" }

--- Build a fake host (options: see the top of this file).
-- @param opts table|nil
-- @return host table: the primitives, the recordings and the helpers
function M.host(opts)
  opts = opts or {}
  local h = {}
  for _, k in ipairs(RECORDINGS) do h[k] = {} end
  -- the state the primitive groups share (clock, files, unit, daemon's node list)
  local w = {}
  function w.rec(name, ...) h.calls[#h.calls + 1] = { name, ... } end
  clock.install(h, w, opts)
  files.install(h, w, opts)
  unit.install(h, w, opts)
  run.install(h, w, opts)
  lock.install(h, w, opts)
  net.install(h, w, opts)
  xml.install(h, w, opts)
  journal.install(h, w, opts)
  function h.count(name)
    local n = 0
    for _, c in ipairs(h.calls) do if c[1] == name then n = n + 1 end end
    return n
  end
  function h.clear()
    for _, k in ipairs(RECORDINGS) do h[k] = {} end
  end
  return h
end

--- Build a policy context around a fake host.
-- @param o table {host = fake host (default testing.host()), env = environment (default job 101 on
--   n[1-2], node n1), settings = overrides, command = "prolog", json = boolean, dry_run = boolean,
--   verbosity = -1 (-q) | 0 | 1 (-v), arg = the command's argument (forget's JOBID), timeout = wait's
--   --timeout (seconds), job_given = boolean (--job was given), imex_always_expected = boolean (the
--   policy's field of that name, as the driver passes it), invocation =
--   how to run imexguard again (default {exe = M.EXE, options = {"--config", M.SETTINGS_FILE}})}
-- @return ctx table as the host passes it to a policy
function M.ctx(o)
  o = o or {}
  local env = o.env or { SLURM_JOB_ID = "101", SLURM_JOB_NODELIST = "n[1-2]", SLURMD_NODENAME = "n1",
    SLURM_JOB_USER = "alice" }
  local job
  local ok, slurmenv = pcall(require, "imexguard.slurmenv")
  if ok and type(slurmenv) == "table" and slurmenv.job then job = slurmenv.job(env) end
  job = job or { id = env.SLURM_JOB_ID or env.SLURM_JOBID, nodename = env.SLURMD_NODENAME,
    user = env.SLURM_JOB_USER }
  if job.nodelist == nil then
    job.nodelist = (env.SLURM_JOB_NODELIST ~= "" and env.SLURM_JOB_NODELIST) or env.SLURM_NODELIST
  end
  return { command = o.command or "prolog", host = o.host or M.host(),
    settings = base.settings(o.settings or {}),
    env = env, job = job, json = o.json or false, dry_run = o.dry_run or false, verbosity = o.verbosity or 0,
    arg = o.arg, timeout = o.timeout, job_given = o.job_given or false,
    imex_always_expected = o.imex_always_expected or false,
    invocation = o.invocation or { exe = M.EXE, options = { "--config", M.SETTINGS_FILE } } }
end

--- Build a scenario (see imexguard.testing.scenario for the options and methods).
-- @param o table|nil scenario options
-- @return scenario object
function M.scenario(o)
  return scenario.new(M, o)
end

--- Parse a KEY=VALUE environment fixture (tests/fixtures/slurm/*.txt; '#' comments).
-- @param text string
-- @return table environment
function M.parse_env(text)
  local env = {}
  for line in text:gmatch("[^\n]+") do
    local k, v = line:match("^([%w_]+)=(.*)$")
    if k then env[k] = v end
  end
  return env
end

return M
