-- SPDX-License-Identifier: Apache-2.0
--- Step 5 of the built-in policy, "assess the daemon" (is it stale?; docs/design.md, "Decision model of
-- the default policy"; cases C06, C17, C21): under the lock, changing nothing, is the running daemon
-- current for the job's list, or must it be started, restarted or waited for? Step 5a lets the unit
-- settle; then the stages in order: the unit's state, a pending list change, what the daemon was
-- started with (the state file's record, else mtimes), and the ctl's node map, whose call may start
-- early (the overlap, step 5 of docs/design.md). `plan` runs it too.
local base = require "imexguard.steps.base"
local applies = require "imexguard.steps.applies"
-- Loaded when first used (imexguard.lazy).
local lazy = require "imexguard.lazy"
local progress = lazy "imexguard.progress"
local health = lazy "imexguard.health"
local verdict = lazy "imexguard.verdict"

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
      return fail("service-failed", "node %s: %s still %s after %g s (wait-timeout)", node_name(ctx),
        s.unit, a, s.start_timeout)
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
-- with: those bytes decide, the mtimes do not (a `touch`, or config management rewriting identical
-- bytes, is no reason to restart). (b) Fallback when the invocation is unknown to the state file:
-- a file the daemon reads at start was written at or after its start.
-- @return string reason why the daemon is stale, or nil
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
  for _, path in ipairs({ info.nodes_file, config }) do
    local fst = host.stat(path)
    if fst and fst.mtime_us and fst.mtime_us >= started then
      return string.format("%s changed after the daemon started", path)
    end
  end
  return nil
end

--- Stage "ctl" of assess: the ctl proves another node map; an unusable answer proves nothing (C06).
-- The daemon's identity of the domain is its ordered ID -> host map (a node's ID is its line in
-- the list the daemon started with): "same nodes, another order" is stale (C21), a host set never
-- decides. A running daemon's list always holds this node (else it refuses to start), so an answer
-- that lacks this node describes no running daemon: it proves nothing (the health wait judges it).
-- Sets a.action ("restart" stays, or "none"), a.reason, a.order (verdict.compare_map's kind) and
-- a.answer (kept for the first health poll).
-- @param probe table|nil the ctl already started (M.start_probe): its answer; nil: health.probe now
local function stage_ctl(ctx, want, a, probe)
  local ans
  if probe then ans = probe:answer() else ans = health.probe(ctx, nil, want.config_path, want.cfg) end
  a.answer = ans
  if not ans.mesh then
    a.action, a.reason = "none", "daemon current by its start time; ctl unusable: " .. tostring(ans.err)
    return
  end
  -- the list the daemon must run: the job's, or the domain's slot list (membership by slots)
  local cmp = verdict.compare_map(ans.mesh, want.node_list or want.addrs, want.self)
  a.order = cmp.kind
  if cmp.kind == "self-absent" then
    a.action = "none"
    a.reason = "daemon current by its start time; the ctl does not list this node " .. want.self
  elseif cmp.kind == "same" then
    a.action, a.reason = "none", "daemon current"
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
  local proc, err, code = ctx.host.spawn(health.ctl_argv(s, config, cfg),
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
--   outside imexguard, or an older state file), config.cfg or the list was modified at or after
--   the daemon's start (mtime); or a usable ctl answer lists other hosts. The stages, in order:
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
--   (the list the daemon would run after the action), changed = opts.changed}, or nil, outcome, message
function M.assess_daemon(ctx, info, want, st, opts)
  local early = info and info.unit
  local early_reason, started
  if may_reach_ctl(ctx, early, opts) then
    early_reason = stage_started_with(ctx, info, want, st, early)
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
  if same then
    a.reason = early_reason
  else
    a.reason = stage_started_with(ctx, info, want, st, props)
  end
  if a.reason then return a end
  stage_ctl(ctx, want, a, same and probe or nil)
  return a
end

return M
