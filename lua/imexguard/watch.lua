-- SPDX-License-Identifier: Apache-2.0
--- The watcher: convergence that does not depend on which prolog of a job returns first (case C51;
-- docs/design.md, "Convergence in Slurm's order").
--
-- Slurm starts every prolog of a job at once. A node whose daemon is current sees the domain UP
-- and returns in milliseconds; a peer that must restart its daemon (its list or config.cfg
-- changed) does so afterwards. The restarted daemon is a new instance: its own links come up at
-- once, but each survivor's link to it only when the survivor's reconnect loop retries (0.5-3 s
-- per NVIDIA, 15 s and more where packets are dropped), or at once on SIGUSR1 to the survivor's
-- daemon. The survivor's prolog, which would nudge it (imexguard.nudge), is gone, and signalling
-- the restarted node does nothing for the survivors: the restarted node's prolog would wait for
-- their back-off.
--
-- So a prolog that ends ok on a node of a multi-node IMEX domain leaves a watcher: `imexguard
-- watch` (imexguard.commands), started as a transient service of systemd (host.unit_start_transient,
-- sent without waiting for systemd's answer, after the node lock is released: nothing the fast path
-- waits for). The watcher asks the ctl every `watch_interval` seconds and gives each answer to a
-- nudger (imexguard.nudge: this node READY, its link to a READY peer of the job down for
-- `nudge_after` seconds -> SIGUSR1 through systemd, at most once per 5 s, never below the SIGUSR1
-- version floor). Its life: until the job's epilog unregisters the job (it reads the registry
-- before every poll), or until no peer can restart its daemon for this job any more: a peer's
-- prolog starts at most `watch_skew` seconds after this one and restarts within its `deadline`,
-- so the watcher's budget is deadline + watch_skew (its --deadline), and systemd stops it
-- RUNTIME_SLACK seconds later whatever happens (RuntimeMaxSec). It never restarts or writes
-- anything: the host of `watch` refuses every side effect but host.unit_kill (driver.lua,
-- signals_only), and the nudger sends only SIGUSR1 to the unit's main process.
local base = require("imexguard.steps.base")
local one_line = require("imexguard.text").one_line
-- Loaded when first used (imexguard.lazy): the prolog uses start only.
local lazy = require("imexguard.lazy")
local nudge, health, state, registry =
  lazy("imexguard.nudge", "imexguard.health", "imexguard.state", "imexguard.registry")

local M = {}

--- The watcher's service is PREFIX .. job id .. "-" .. node name .. ".service": one per job and node
-- (the node's name keeps the watchers of the nodes a simulation runs under one manager apart, and
-- names the node in a journal gathered from many).
M.PREFIX = "imexguard-watch-"
--- Seconds after the watcher's own deadline at which systemd stops it (RuntimeMaxSec): past the
-- watchdog's 2 s (docs/design.md, "The deadline"), so that it always ends by itself first.
M.RUNTIME_SLACK = 5
--- Seconds of its budget the watcher keeps for its last ctl call and its final line.
M.MARGIN = 1
--- Environment variables the watcher gets from the prolog (name prefixes): the job (Slurm's)
-- and imexguard's own; nothing else of slurmd's environment.
M.ENV_PREFIXES = { "SLURM", "IMEXGUARD_" }

--- The name of job `id`'s watcher service on node `node`.
-- @param id string the job id (decimal)
-- @param node string this node's name (SLURMD_NODENAME); characters a unit name cannot hold
--   (systemd.unit(5): ASCII letters, digits, ":", "-", "_", ".", "\\") become "_"
-- @return string e.g. "imexguard-watch-101-gb01.service"
function M.unit_name(id, node)
  return M.PREFIX .. tostring(id) .. "-" .. tostring(node):gsub("[^%w_.:-]", "_") .. ".service"
end

--- Does this prolog leave a watcher, and if not why not? Only when its outcome exits 0 (the
-- caller's), the settings `watch` and `nudge` are on, this node's IMEX domain has other nodes, the
-- job has a decimal id, the binary's path is known (ctx.invocation.exe) and the ctl's last answer
-- shows this node's daemon at or above the SIGUSR1 version floor (nudge.version_allows: a daemon
-- that may not be signalled is not watched).
-- @param ctx table policy context (settings, invocation, mesh_seen: the run's last parsed mesh)
-- @param want table the desired list (addrs, self)
-- @return true, or false and a reason (one line)
function M.wanted(ctx, want)
  local s = ctx.settings
  if not (s.watch and s.nudge) then return false, "settings watch or nudge off" end
  if #(want.addrs or {}) < 2 then return false, "this node is alone in its IMEX domain" end
  local id = base.job_id(ctx)
  if not tostring(id):match(base.JOB_ID_PATTERN) then return false, "the job has no id" end
  if not (ctx.invocation and ctx.invocation.exe) then return false, "the path of imexguard is unknown" end
  local mesh = rawget(ctx, "mesh_seen")
  local me = mesh and mesh.by_host and mesh.by_host[want.self]
  return nudge.version_allows(me and me.version, s)
end

--- The watcher's transient service for job `id`: imexguard again, with this run's settings file,
-- policy and --set options (ctx.invocation), `--deadline` deadline + watch_skew and the command
-- `watch`, in the job's environment (M.ENV_PREFIXES), stopped by systemd RUNTIME_SLACK seconds after
-- that deadline.
-- @return table spec for host.unit_start_transient (wait = false)
function M.spec(ctx, id)
  local s, inv = ctx.settings, ctx.invocation
  local budget = s.deadline + s.watch_skew
  local argv = { inv.exe }
  for _, o in ipairs(inv.options or {}) do argv[#argv + 1] = o end
  argv[#argv + 1] = "--deadline"
  argv[#argv + 1] = string.format("%g", budget)
  argv[#argv + 1] = "watch"
  local names = {}
  for k in pairs(ctx.env or {}) do
    for _, p in ipairs(M.ENV_PREFIXES) do
      if k:sub(1, #p) == p then names[#names + 1] = k end
    end
  end
  table.sort(names)
  local env = {}
  for i, k in ipairs(names) do env[i] = k .. "=" .. ctx.env[k] end
  return { argv = argv, environment = env, runtime_max = budget + M.RUNTIME_SLACK, wait = false,
    description = string.format("imexguard watcher of job %s: nudges %s after a peer's restart "
      .. "(%g s at most)", id, s.unit, budget) }
end

--- Leave the watcher (the prolog, after an outcome that exits 0 and once the node lock is released):
-- start its service without waiting for systemd's answer. A failure is a warning: the prolog's
-- outcome stands.
-- @param ctx table policy context
-- @param want table the desired list
-- @return string a note for the prolog's message, or nil when no watcher is wanted (M.wanted)
function M.start(ctx, want)
  local ok, why = M.wanted(ctx, want)
  if not ok then
    ctx.host.log("debug", one_line("no watcher: " .. tostring(why)))
    return nil
  end
  local id = base.job_id(ctx)
  local name = M.unit_name(id, base.node_name(ctx))
  local sent, err = ctx.host.unit_start_transient(name, M.spec(ctx, id))
  if not sent then
    ctx.host.log("warning", one_line(string.format("watcher %s not started: %s", name, tostring(err))))
    return nil
  end
  return "watcher " .. name .. " started"
end

-- Is job `id` still registered on this node? true while the state file cannot be read (the
-- watcher's life is bounded anyway).
local function registered(ctx, id)
  local st = state.load(ctx.host, ctx.settings)
  return not st or registry.find(st, id) ~= nil
end

--- The watch (entry point `watch`): it first waits `watch_interval` seconds (the prolog that
-- started it has just seen the domain healthy; a watcher whose job ends meanwhile costs no more
-- than its start), then, until the job is no longer registered here or the budget less MARGIN is
-- spent, asks the ctl every `watch_interval` seconds (sooner when a nudge falls due) and nudges
-- this node's daemon as the health wait does (imexguard.nudge). Ends at once when the job is not
-- registered, when `target` fails, or when an answer shows this node's daemon below the SIGUSR1
-- floor (a watcher that may never nudge has nothing to do).
-- @param ctx table policy context (host with unit_kill only among side effects)
-- @param target function() -> want (addrs, self, names, config_path, cfg) | nil, outcome, message:
--   the job's domain as the prolog found it, asked once, at the first poll
-- @return outcome, message ("ok": the job's end or the time's, and the polls)
function M.run(ctx, target)
  local h, s = ctx.host, ctx.settings
  local id, t0, polls = base.job_id(ctx), h.now(), 0
  local want, nudger, o, m
  local why = "its time is up: no peer can restart for the job any more"
  while h.remaining() > M.MARGIN do
    if not registered(ctx, id) then
      why = "the job is no longer registered (its epilog ran)"
      break
    end
    if polls == 0 and h.now() - t0 < s.watch_interval then
      if not h.sleep(math.min(s.watch_interval, h.remaining() - M.MARGIN)) then break end
    else
      if not want then
        want, o, m = target()
        if not want then return o, m end
        nudger = nudge.new(ctx, want, health.label)
      end
      local refused = M.poll(ctx, want, nudger)
      polls = polls + 1
      if refused then
        why = "no nudge: " .. refused
        break
      end
      local delay, due = s.watch_interval, nudger:due(h.now())
      if due and due < delay then delay = due end
      local left = h.remaining() - M.MARGIN
      if left <= 0 or not h.sleep(math.min(delay, left)) then break end
    end
  end
  -- the driver adds the nudges sent (`; nudges=N`)
  return "ok", one_line(string.format("watcher of job %s on node %s ended after %.1f s and %d polls: %s", id,
    base.node_name(ctx), h.now() - t0, polls, why))
end

--- One poll of the watch: ask the ctl and give the answer to the nudger.
-- The version is judged only where this node's daemon answered for itself (READY): a daemon the
-- ctl could not reach this once is shown UNAVAILABLE with an empty version (the real ctl's layout,
-- tests/fixtures/ctl/c22-config-fault-4node.json), which says nothing of its version; taking that
-- for an unknown version ended the watch for good on one busy poll.
-- @return nil, or why no nudge may ever be sent (this node's daemon below the SIGUSR1 floor)
function M.poll(ctx, want, nudger)
  local h, s = ctx.host, ctx.settings
  local bound = math.min(s.ctl_timeout, math.max(h.remaining() - M.MARGIN, 0.05))
  local answer = health.probe(ctx, bound, want.config_path, want.cfg)
  local me = answer.mesh and answer.mesh.by_host[want.self]
  if me and me.status == "READY" then
    local allowed, refused = nudge.version_allows(me.version, s)
    if not allowed then return refused end
  end
  nudger:observe(answer, h.now(), math.min(nudge.KILL_TIMEOUT, bound))
  return nil
end

return M
