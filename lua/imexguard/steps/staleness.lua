-- SPDX-License-Identifier: Apache-2.0
--- Step 5 of the built-in policy, "assess the daemon" (is it stale?; docs/design.md, "Decision model of
-- the default policy"; cases C06, C17, C21): under the lock, changing nothing, is the running daemon
-- current for the job's list, or must it be started, restarted or waited for? Step 5a lets the unit
-- settle; then the stages in order: the unit's state, a pending list change, what the daemon was
-- started with (the state file's record, else mtimes), and the ctl's node map, whose call may start
-- early (the overlap, step 5 of docs/design.md). `plan` runs it too.
local base = require("imexguard.steps.base")
local applies = require("imexguard.steps.applies")
-- Loaded when first used (imexguard.lazy).
local lazy = require("imexguard.lazy")
local progress, health, verdict, cmdtarget, daemonlog =
  lazy("imexguard.progress", "imexguard.health", "imexguard.verdict", "imexguard.cmdtarget",
    "imexguard.daemonlog")

local fail, node_name = base.fail, base.node_name

local M = {}

--- Step 5a: the unit's state once it has settled (C17: activating/deactivating means wait).
-- @param wait boolean poll while activating/deactivating (bounded by start_timeout); false: return
--   the unsettled properties at once (plan)
-- @return props, or nil, outcome, message
function M.settle_unit(ctx, wait)
  local s, host = ctx.settings, ctx.host
  local start = host.now()
  local told = progress.new(host, s.unit .. " to settle", s.start_timeout)
  while true do
    local props, o, m = applies.query_unit(ctx)
    if not props then return nil, o, m end
    local a = props.active_state
    if not wait or (a ~= "activating" and a ~= "deactivating") then return props end
    told:tick(a)
    if host.now() - start >= s.start_timeout then
      -- C50: what the daemon said meanwhile (its last error line since its start)
      return fail("service-failed", "node %s: %s still %s after %g s (wait-timeout)%s", node_name(ctx),
        s.unit, a, s.start_timeout, daemonlog.explain(ctx, nil, props))
    end
    local ok = host.sleep(math.min(s.poll_interval, s.start_timeout - (host.now() - start)))
    if not ok then
      return fail("deadline-exceeded", "node %s: deadline passed while %s was %s", node_name(ctx),
        s.unit, a)
    end
  end
end

--- Stage "unit state" of assess: a unit that is not running. Sets a.action and a.reason and returns true for
-- activating/deactivating ("wait"), failed ("start" after reset-failed) and inactive ("start").
-- @param a table the assessment being built (a.unit: settled props)
-- @return true when the unit's state decided the assessment, false for an active (or reloading) unit
local function stage_unit_state(ctx, a)
  local s, props = ctx.settings, a.unit
  local state = props.active_state
  if state == "activating" or state == "deactivating" then
    a.action, a.reason = "wait", string.format("%s is %s; prolog would wait up to %g s", s.unit, state,
      s.start_timeout)
  elseif state == "failed" then
    a.action, a.reset_failed = "start", true
    a.reason = string.format("%s failed (result %s)", s.unit, tostring(props.result))
  elseif state ~= "active" and state ~= "reloading" then
    a.action, a.reason = "start", string.format("%s is %s", s.unit, tostring(state))
  else
    return false
  end
  return true
end

--- Stage "started with" of assess: the files the running daemon was started with. (a) imexguard started this
-- very daemon instance (same invocation ID) and recorded the exact bytes of both files it started
-- with (or adopted it: M.adoption): those bytes decide, the mtimes do not (a `touch`, or config
-- management rewriting identical bytes, is no reason to restart). (b) Fallback when the invocation
-- is unknown to the state file: config.cfg written at or after the daemon's start is a reason (what
-- the daemon read cannot be known); the node list written so is only a doubt (C51): the ctl shows
-- the daemon's ordered node map, which proves its identity or disproves it (stage "ctl").
-- @return string reason why the daemon is stale, or nil; then string doubt (the node list's mtime
--   is at or after the daemon's start: only the ctl can clear it) or nil
local function stage_started_with(ctx, info, want, st, props)
  local s, host = ctx.settings, ctx.host
  local config = info.config or s.imex_config
  local cfg_now = type(st.running_config) == "string" and host.read(config, base.MAX_FILE) or nil
  local same_invocation = type(st.invocation_id) == "string" and st.invocation_id ~= ""
    and st.invocation_id == props.invocation_id
  if same_invocation and type(st.running_nodes) == "string" and st.running_nodes ~= want.bytes then
    return string.format("daemon (invocation %s) was started with another node list", props.invocation_id)
  end
  if same_invocation and type(st.running_nodes) == "string" and cfg_now then
    if cfg_now ~= st.running_config then
      return string.format("%s differs from the one daemon invocation %s was started with", config,
        props.invocation_id)
    end
    return nil
  end
  local started = tonumber(props.exec_main_start_us) or 0
  if started <= 0 then return nil end
  local cst = host.stat(config)
  if cst and cst.mtime_us and cst.mtime_us >= started then
    return string.format("%s changed after the daemon started", config)
  end
  local nst = host.stat(info.nodes_file)
  if nst and nst.mtime_us and nst.mtime_us >= started then
    return nil, string.format("%s changed after the daemon started", info.nodes_file)
  end
  return nil
end

--- The record that adopts a daemon imexguard did not start (stage "started with" (b)) once the
-- ctl proved it runs the job's ordered list: its invocation ID and start with the bytes it is now
-- known to run (the job's list, proven by its node map; config.cfg now, older than its start), for
-- state.record_start, so that the next run decides by content (stage (a)) and a rewrite of the
-- same bytes is no doubt any more. nil when the state file already knows this invocation, or
-- config.cfg cannot be read.
local function adoption(ctx, info, want, st, props)
  if type(props.invocation_id) ~= "string" or props.invocation_id == "" then return nil end
  if st.invocation_id == props.invocation_id and type(st.running_nodes) == "string" then return nil end
  local cfg = ctx.host.read(info.config or ctx.settings.imex_config, base.MAX_FILE)
  if not cfg then return nil end
  return { nodes = want.bytes, config = cfg, invocation_id = props.invocation_id,
    started_us = props.exec_main_start_us, job = base.job_id(ctx) }
end

--- Stage "ctl" of assess: the ctl proves another node map; an unusable answer proves nothing (C06).
-- The daemon's identity of the domain is its ordered ID -> host map (a node's ID is its line in
-- the list the daemon started with): "same nodes, another order" is stale (C21), a host set never
-- decides. A running daemon's list always holds this node (else it refuses to start), so an answer
-- that lacks this node describes no running daemon: it proves nothing (the health wait judges it).
-- With a doubt (stage "started with": the node list was written after the daemon started, C51) an
-- answer that proves nothing leaves the doubt standing: restart, as the mtime alone did before; the
-- job's map proves the daemon current, and it is adopted (a.adopt, see adoption).
-- Sets a.action ("restart" stays, or "none"), a.reason, a.order (verdict.compare_map's kind),
-- a.answer (kept for the first health poll) and a.adopt.
-- @param probe table|nil the ctl already started (M.start_probe): its answer; nil: health.probe now
-- @param doubt string|nil why the node list's identity is in doubt
local function stage_ctl(ctx, info, want, st, a, probe, doubt)
  local ans
  if probe then ans = probe:answer() else ans = health.probe(ctx, nil, want.config_path, want.cfg) end
  a.answer = ans
  -- the list the daemon must run: the job's, or the domain's slot list (membership by slots)
  local cmp = ans.mesh and verdict.compare_map(ans.mesh, want.node_list or want.addrs, want.self)
  a.order = cmp and cmp.kind
  if cmp and cmp.kind == "same" then
    a.action, a.reason = "none", "daemon current"
    if doubt then
      a.reason = "daemon current: the ctl shows it running the job's ordered list (" .. doubt .. ")"
    end
    a.adopt = adoption(ctx, info, want, st, a.unit)
    return
  end
  local unproven = not ans.mesh and ("ctl unusable: " .. tostring(ans.err))
    or (cmp.kind == "self-absent" and "the ctl does not list this node " .. want.self)
  if unproven and doubt then
    a.reason, a.answer = doubt .. " and its node map cannot be known: " .. unproven, nil
  elseif unproven then
    a.action, a.reason = "none", "daemon current by its start time; " .. unproven
  else
    a.reason = "the ctl shows the daemon running another node map than the job's: " .. cmp.summary
    a.answer = nil
  end
end

--- A staleness probe started ahead of its stage (host.spawn): the ctl of health.probe runs while
-- the run does other work. probe:answer() is health.probe's answer, judged by health.probe itself:
-- its one host.run is the started process's wait (the same argv, ctl_timeout and output cap; the
-- timeout counts from the start). Closing a probe that was never answered kills and reaps its ctl.
local Probe = {}
Probe.__index = Probe

--- Start the ctl of health.probe now (host.spawn); its answer comes with probe:answer().
-- @param ctx table policy context
-- @param config string|nil the daemon's config.cfg for the ctl's `-c`, as health.probe's
-- @param cfg table|nil that config, parsed, as health.probe's
-- @return probe (use `local p <close> = probe`; a failed start is answered as health.probe answers a
--   command that cannot run)
function M.start_probe(ctx, config, cfg)
  local s = ctx.settings
  local proc, err, code = ctx.host.spawn(health.ctl_argv(s, config, cfg, cmdtarget.ipv6_for(ctx, cfg)),
    { timeout = s.ctl_timeout, max_output = health.MAX_OUTPUT })
  return setmetatable({ ctx = ctx, config = config, cfg = cfg, proc = proc, err = err, code = code }, Probe)
end

--- Wait for the started ctl: health.probe's answer ({mesh = ...} or {err, kind}).
function Probe:answer()
  local probe, ctx = self, self.ctx
  local function run() -- health.probe's one command: the started one
    if not probe.proc then return nil, probe.err, probe.code end
    return probe.proc:wait()
  end
  local host = setmetatable({ run = run }, { __index = ctx.host })
  -- health.probe records the answer it parsed in ctx.mesh_seen: the view passes writes to ctx
  return health.probe(setmetatable({ host = host }, { __index = ctx, __newindex = ctx }), nil, self.config,
    self.cfg)
end

--- Kill and reap the ctl unless it was waited for (also the probe's __close). Idempotent.
function Probe:close()
  if self.proc then self.proc:close() end
end
Probe.__close = Probe.close

--- Can the unit as step 1 saw it (info.unit, read before the lock) lead to stage "ctl"? Running
-- (active or reloading) with a known InvocationID, and no list change pending (plan).
local function may_reach_ctl(ctx, props, opts)
  if type(ctx.host.spawn) ~= "function" or type(props) ~= "table" then return false end
  if props.active_state ~= "active" and props.active_state ~= "reloading" then return false end
  if opts.changed and opts.write_pending then return false end
  return type(props.invocation_id) == "string" and props.invocation_id ~= ""
end

--- Is `b` the daemon instance `a` described? The same InvocationID (systemd gives every start a new
-- one) and ExecMainStartTimestamp: all that stage "started with" takes from the unit.
local function same_daemon(a, b)
  return a.invocation_id == b.invocation_id and a.exec_main_start_us == b.exec_main_start_us
end

--- Step 5: is the running daemon stale?
-- @param st table state file contents
-- @param opts table {changed = the list file's bytes differ (written now, or would be in plan),
--   wait = wait for activating/deactivating, write_pending = plan (the file is not written)}.
--   An active daemon is stale when: the list changes; or, when the state file recorded this
--   invocation ID with the bytes it was started with (st.running_nodes, st.running_config), those
--   bytes differ from the job's list or from config.cfg now; or, when it did not (a daemon started
--   outside imexguard, or an older state file), config.cfg was modified at or after the daemon's
--   start (mtime), or the list was and the ctl cannot show the daemon's node map (C51: a list
--   rewritten with the same bytes is no reason when the ctl shows the daemon running the job's
--   ordered list); or a usable ctl answer lists another node map. The stages, in order:
--   settle_unit, "unit state" (not running: start or wait), a pending list change, "started with"
--   (the state file's record, else mtimes), "ctl" (the running list as the ctl shows it).
--   The overlap (docs/design.md, step 5): when the unit as step 1 saw it (info.unit) leads to stage
--   "ctl", "started with" is judged on it and the ctl starts before settle_unit's query, so that the
--   two run at once; both are used only when the query shows the same daemon instance (then every
--   stage decides as it did on info.unit). Otherwise the ctl is killed unread and the stages run on
--   the query's properties alone. The ctl thus runs where it ran before, and beyond that only when
--   the unit changed between step 1 and the query (a restart by another run or an admin): then it
--   is a read-only query killed unread.
-- @return assessment {action = "none"|"start"|"restart"|"wait", reset_failed = boolean, reason = string,
--   unit = props, answer = ctl answer or nil (reused as the first health poll), nodes = want.bytes
--   (the list the daemon would run after the action), changed = opts.changed, adopt = a record for
--   state.record_start when the ctl proved a daemon imexguard did not start current (nil
--   otherwise)}, or nil, outcome, message
function M.assess_daemon(ctx, info, want, st, opts)
  local early = info and info.unit
  local early_reason, early_doubt, started
  if may_reach_ctl(ctx, early, opts) then
    early_reason, early_doubt = stage_started_with(ctx, info, want, st, early)
    if not early_reason then started = M.start_probe(ctx, want.config_path, want.cfg) end
  end
  local probe <close> = started -- killed on every path that does not answer it
  local props, o, m = M.settle_unit(ctx, opts.wait)
  if not props then return nil, o, m end
  local a = { unit = props, action = "none", nodes = want.bytes, changed = opts.changed and true or false }
  if stage_unit_state(ctx, a) then return a end
  a.action = "restart"
  if opts.changed and opts.write_pending then
    a.reason = "node list changes; the daemon reads it only at start"
    return a
  end
  local same = may_reach_ctl(ctx, early, opts) and same_daemon(early, props)
  local doubt
  if same then
    a.reason, doubt = early_reason, early_doubt
  else
    a.reason, doubt = stage_started_with(ctx, info, want, st, props)
  end
  if a.reason then return a end
  stage_ctl(ctx, info, want, st, a, same and probe or nil, doubt)
  return a
end

return M
