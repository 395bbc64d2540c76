-- SPDX-License-Identifier: Apache-2.0
--- The default imexguard policy: a policy table whose methods are the steps of its decision model
-- (docs/policy-api.md "The built-in policy"; docs/design.md "Decision model of the default
-- policy", case ids Cnn: its "Field cases"). The steps in the order a prolog runs them, with the
-- design's step numbers (a room of imexguard.steps does the work of each):
--   0  job id              base.check_job_id                        SLURM_JOB_ID, decimal
--   1  applies?            P:applies(ctx)                           unit installed and enabled, config.cfg
--   1b channel             P:ensure_channel(ctx)                    channel 0 when imex_channels says so
--   2  desired list        P:desired(ctx, info)                     this node's IMEX domain of the job (C29),
--                                                                   addresses (P:lookup), then P:admit
--   3  lock                P:lock(ctx)                              the node lock; under it:
--   3a leftovers           housekeeping.remove_temps                temp files of killed writes (C39)
--      state file          P:load_state(ctx)                        the registry, earlier runs' left out
--   4a current list        nodes_file.read_node_list                the node list file's bytes
--   5  assess the daemon   P:assess_daemon(ctx, info, want, st, o)  none, start, restart or wait, and why
--   with nothing to change (the same list, action none):
--   8  wait for health     P:wait_converged(ctx, want, a, st, info) P:wait_healthy (P:check_fabric, C31,
--                                                                   then the ctl), C32's one restart
--   10 watcher             P:leave_watcher(ctx, want)               once the wait exits 0 (C51)
--      port owner          P:check_port_owner(ctx, info, props)     the command port is the unit's (C27)
--   9  register            P:register(ctx, st, want, extra)         the job's entry (P:register_extra)
--   else a change:
--   6  other jobs          P:may_restart(ctx, st, assessment)       the job registry decides
--   9a register first      registration.begin_change                the entry and the change, saved
--   4b write               P:write_node_list(ctx, info, want, st)   the list, atomically, when it differs
--   7  restart             P:restart(ctx, want, assessment, st, info)  the unit's start or restart job
--   8, port owner          P:wait_converged, P:check_port_owner     as above
--   9b end                 change:finish(outcome)                   the entry kept on exit 0, else removed
-- The prolog decides before it acts: nothing is written or started before P:may_restart agrees,
-- the job is registered (saved) before the change, and a non-zero outcome unregisters it again; an
-- unreadable or corrupt state file is a conflict and a registry that cannot be saved write-failed,
-- nothing changed. A conflict with a registered job is decided again after waiting up to
-- conflict_wait seconds WITHOUT the node lock (a late epilog, C24).
-- The epilog unregisters the job under the lock (P:unregister); IMEX is left running unless
-- P:after_unregister acts.
-- The entry points are ENTRY_POINTS below; the inspection commands' methods (status, health, plan,
-- registrations, forget) are imexguard.inspect's, which this table falls back to. Entry points
-- return outcome, message [, report]: report (string) is printed verbatim on stdout.
--
-- A site policy extends this one (docs/policy-api.md, "The built-in policy and its steps"; examples,
-- each with a spec: policies/shared_nodes.lua, stop_on_last_epilog.lua, static_domain.lua) with
-- * hooks, plain functions given to P.extend(hooks) (HOOKS below, each described at its method),
--   which returns a new policy table with the same entry points (and its own extend);
-- * methods: assign a method of the table P.extend() returns (`function P:assess_daemon(ctx, ...)`):
--   the entry points call every step as a method, so the override is used; the default step is
--   `default.assess_daemon(self, ctx, ...)`. Old method names still work (RENAMED below).
local base = require("imexguard.steps.base")
local outcomes = require("imexguard.outcomes")
local text = require("imexguard.text")
-- Loaded when first used (imexguard.lazy): the epilog loads of the steps' rooms only the node lock
-- and the housekeeping; the prolog and epilog never load imexguard.inspect nor the reports.
local lazy = require("imexguard.lazy")
local applies, desired, node_lock, housekeeping = lazy("imexguard.steps.applies", "imexguard.steps.desired",
  "imexguard.steps.node_lock", "imexguard.steps.housekeeping")
local nodes_file, staleness, other_jobs, registration = lazy("imexguard.steps.nodes_file",
  "imexguard.steps.staleness", "imexguard.steps.other_jobs", "imexguard.steps.registration")
local restart, slots, converge = lazy("imexguard.steps.restart", "imexguard.steps.slots",
  "imexguard.steps.converge")
local state, registry, addresses, channels = lazy("imexguard.state", "imexguard.registry",
  "imexguard.addresses", "imexguard.channels")
local fabric, inspect, lastgood, watch = lazy("imexguard.fabric", "imexguard.inspect", "imexguard.lastgood",
  "imexguard.watch")

local HOOKS = { applies = true, lookup = true, admit = true, may_restart = true, register_extra = true,
  after_unregister = true }

--- The entry points: each command of imexguard.commands that has one (its `entry`) -> the method
-- that runs it. Every policy built here has them as plain functions of ctx (P.prolog(ctx) runs
-- P:run_prolog(ctx), the policy's own method: a site's override is used). run_prolog and
-- run_epilog are below; the others are imexguard.inspect's.
local ENTRY_POINTS = { prolog = "run_prolog", epilog = "run_epilog", status = "run_status", plan = "run_plan",
  health = "run_health", registrations = "run_registrations", forget = "run_forget", wait = "run_wait",
  rack = "run_rack", watch = "run_watch" }

--- The names of ENTRY_POINTS in imexguard.commands' order, checked against it when this file
-- loads: a command with an entry point and no method here, or a method for a command without an
-- entry point, is an error of the build, never a run without the command.
local ENTRY_NAMES = (function()
  local commands = require("imexguard.commands")
  local names = commands.names("entry")
  for _, name in ipairs(names) do
    if not ENTRY_POINTS[name] then
      error("policies/default.lua: ENTRY_POINTS has no method for the command '" .. name .. "'")
    end
  end
  for name in pairs(ENTRY_POINTS) do
    local c = commands.by_name[name]
    if not (c and c.entry) then
      error("policies/default.lua: ENTRY_POINTS names '" .. name .. "', no command with an entry point")
    end
  end
  return names
end)()

--- Old name -> new name of methods (docs/policy-api.md, "Old names"): on every policy built here,
-- reading an old name gives the method of the new one and assigning one (`function P:stale`)
-- assigns the new one, so a site policy written for the old names runs unchanged.
local RENAMED = {
  stale = "assess_daemon", write = "write_node_list", port_is_units = "check_port_owner",
  fabric = "check_fabric", channel = "ensure_channel",
}

--- The methods of the default policy (the decision model), shared by every policy built from it;
-- a name not found here is an old name (RENAMED) or imexguard.inspect's (the inspection commands
-- and their steps).
local Policy = setmetatable({ RENAMED = RENAMED }, { __index = function(t, name)
  if RENAMED[name] then return t[RENAMED[name]] end
  return inspect[name]
end })

--- Is IMEX expected on this node while no job is registered (imexguard.expected: reason
-- "static-domain")? false: the next prolog makes the per-job daemon right ("idle"); true: a policy
-- whose daemon runs at all times (static_domain.lua). A field: the driver reads it after the outcome.
Policy.imex_always_expected = false

-- ---------------------------------------------------------------------------------------------
-- The decision model, step by step.

--- Applies? The applies hook, else steps.applies: IMEX is installed and enabled on this node (or
-- disabled and managed per job with manage_disabled_unit) and config.cfg exists.
-- @return info {unit, cfg, nodes_file, bind, managed_disabled}, or nil, outcome ("skipped" when IMEX
--   does not apply), message
function Policy:applies(ctx)
  if self.hooks.applies then return self.hooks.applies(ctx) end
  return applies.applies(ctx)
end

--- The address source of the desired list: the lookup hook, else the settings (DNS or address map).
-- @return list of addresses (hostlist order), or nil, message naming the node, code
function Policy:lookup(ctx, names)
  if self.hooks.lookup then return self.hooks.lookup(ctx, names) end
  return addresses.lookup(ctx.host, ctx.settings, names)
end

--- An extra check of the job before the lock: the admit hook (default: every job is admitted).
-- @return true, or nil, outcome, message
function Policy:admit(ctx, info, want)
  if self.hooks.admit then return self.hooks.admit(ctx, info, want) end
  return true
end

--- Desired list: the job's hostlist as addresses (P:lookup), checked, then P:admit.
-- @return want (see steps.desired), or nil, outcome, message
function Policy:desired(ctx, info)
  local function lookup(c, names) return self:lookup(c, names) end
  local want, o, m = desired.desired(ctx, info, { lookup = lookup })
  if not want then return nil, o, m end
  local ok
  ok, o, m = self:admit(ctx, info, want)
  if not ok then return nil, o, m end
  if slots.enabled(ctx) then return slots.want(ctx, want) end -- membership by slots
  return want
end

--- Lock: take the node lock (steps.lock).
-- @return guard (`local g <close> = guard`), or nil, outcome, message
function Policy:lock(ctx) -- luacheck: no self
  return node_lock.lock(ctx)
end

--- Under the lock: the state file, without the registration of an interrupted prolog.
-- @return st, or nil, "conflict", message (unreadable or corrupt: the registry is unknown)
function Policy:load_state(ctx) -- luacheck: no self
  local st, err = state.load(ctx.host, ctx.settings)
  if not st then return nil, housekeeping.registry_unknown(ctx, err) end
  housekeeping.drop_other_boots(ctx, st)
  housekeeping.drop_interrupted(ctx, st)
  return st
end

--- Assess the daemon: must it be started, restarted, waited for, or is it current (steps.assess_daemon)?
-- @return assessment, or nil, outcome, message
function Policy:assess_daemon(ctx, info, want, st, opts) -- luacheck: no self
  local a, o, m = staleness.assess_daemon(ctx, info, want, st, opts)
  if a and want.slots then slots.assess(ctx, want, a) end -- the name map (membership by slots)
  return a, o, m
end

--- Respect other jobs: may the list be rewritten or the daemon (re)started under the registered
-- jobs? The may_restart hook, else steps.may_restart. A refusal naming the registered jobs that
-- block is `conflict` (waited for, C24); any other is the policy's own rule: `refused` (exit 22).
-- @return true, or false, message, list of the blocking registry entries (or nil)
function Policy:may_restart(ctx, st, assessment)
  local f = self.hooks.may_restart or other_jobs.may_restart
  return f(ctx, st, assessment)
end

--- Write: the node list, atomically, recorded in the state file (steps.write_node_list).
-- @return true, or nil, outcome, message
function Policy:write_node_list(ctx, info, want, st) -- luacheck: no self
  return nodes_file.write_node_list(ctx, info, want, st)
end

--- Restart: (re)start the unit and record what it runs (steps.restart).
-- @param info table|nil from applies (a start is refused while another process holds the command port)
-- @return true, props, or nil, outcome, message
function Policy:restart(ctx, want, assessment, st, info)
  if want.slots then -- the name map built first (membership by slots)
    return slots.restart(ctx, want, assessment, st, info, function(c, names) return self:lookup(c, names) end)
  end
  return restart.restart(ctx, want, assessment, st, info)
end

--- Fabric (step 8a): the GPUs' NVLink fabric (fabric.check, C31, C41-C43: its result, or nil,
-- outcome, message; sets ctx.fabric) in the partition want.domain (else ctx.domain) names.
-- @param wait boolean wait while a GPU is registering (the prolog); false: one read (status, plan)
function Policy:check_fabric(ctx, want, wait) -- luacheck: no self
  return fabric.check(ctx, { wait = wait, domain = (want and want.domain) or rawget(ctx, "domain") })
end

--- Wait for health (step 8): P:check_fabric, then the ctl (steps.wait_healthy).
-- @return outcome, message
function Policy:wait_healthy(ctx, want, assessment)
  return converge.wait_healthy(self, ctx, want, assessment)
end

--- Wait for health, converge (C32, C52) and leave the watcher (steps.wait_converged).
-- @return outcome, message, restarted (true when this run restarted the daemon to converge)
function Policy:wait_converged(ctx, want, assessment, st, info)
  return converge.wait_converged(self, ctx, want, assessment, st, info)
end

--- P:wait_converged's wait and its one restart (C32, C52), without the watcher (steps.converge).
function Policy:converge(ctx, want, assessment, st, info)
  return converge.converge(self, ctx, want, assessment, st, info)
end

--- Port owner: before a healthy answer counts, the command port is the unit's (steps.check_port_owner, C27).
-- @return true, or nil, "service-failed", message naming the process on the port
function Policy:check_port_owner(ctx, info, props) -- luacheck: no self
  return restart.check_port_owner(ctx, info, props)
end

--- Register: the fields of the job's registry entry beyond the default ones (register_extra hook).
-- @return table (a fresh one, the caller may change it)
function Policy:register_extra(ctx, want)
  local extra = {}
  if want.slots then extra.slots = table.concat(want.addrs, " ") end -- the job's slots in force
  if self.hooks.register_extra then
    for k, x in pairs(self.hooks.register_extra(ctx, want) or {}) do extra[k] = x end
  end
  return extra
end

--- Register: the job's entry, saved in the state file (steps.register).
-- @return entry, or nil, message, code
function Policy:register(ctx, st, want, extra) -- luacheck: no self
  return registration.register(ctx, st, want, extra)
end

--- The epilog after the job's entry was removed and saved: the after_unregister hook.
-- @return nil (the default result), or outcome, message
function Policy:after_unregister(ctx, st, entry, remaining)
  if self.hooks.after_unregister then return self.hooks.after_unregister(ctx, st, entry, remaining) end
  return nil
end

-- ---------------------------------------------------------------------------------------------
-- The prolog.

--- The decisions before the lock, which change nothing: job id, applies?, desired list.
-- @return info, want, or nil, outcome, message
function Policy:prepare(ctx)
  local id, info, m = applies.applies_to_job(self, ctx)
  if not id then return nil, info, m end
  local ch, o
  ch, o, m = self:ensure_channel(ctx)
  if not ch then return nil, o, m end
  info.channel = ch
  local want
  want, o, m = self:desired(ctx, info)
  if not want then return nil, o, m end
  return info, want
end

--- Nothing to change: wait for health, then register the job (only when the outcome exits 0). A daemon
-- imexguard did not start that the ctl proved current (assessment.adopt, C51) is recorded with what it runs.
function Policy:keep(ctx, st, want, assessment, extra, info)
  if assessment.adopt then state.record_start(st, assessment.adopt) end
  if want.slots then -- the job's slots into the name map (membership by slots)
    local ok, o, m = slots.apply(ctx, st, want, info)
    if not ok then return o, m end
  end
  local outcome, msg, restarted = self:wait_converged(ctx, want, assessment, st, info)
  local adopted = assessment.adopt and not restarted and " (" .. assessment.reason .. ")" or ""
  msg = msg .. "; node list unchanged, " .. ctx.settings.unit .. (restarted and " restarted" or " current")
    .. adopted
  if outcomes.exit_code(outcome, ctx.settings) ~= 0 then return outcome, text.one_line(msg) end
  local unit = restarted and ctx.host.unit(ctx.settings.unit) or assessment.unit
  local pok, po, pm = self:check_port_owner(ctx, info, unit)
  if not pok then return po, pm end
  if extra.invocation_id == nil then extra.invocation_id = unit and unit.invocation_id or "" end
  local entry, err, code = self:register(ctx, st, want, extra)
  if entry then
    msg = msg .. "; job " .. entry.id .. " registered"
  elseif err then
    return base.by_code(code, "write-failed"), text.one_line(string.format(
      "node %s: %s (a job the registry does not know is unprotected); %s", base.node_name(ctx), err, msg))
  end
  return outcome, text.one_line(msg)
end

--- A change, allowed by P:may_restart: register the job first (steps.begin_change), then write the
-- list when it differs, (re)start, wait for health; a non-zero outcome unregisters the job again.
function Policy:change(ctx, info, want, st, assessment, extra, changed)
  local change, o, m = registration.begin_change(ctx, st, want, extra)
  if not change then return o, m end
  local ch <close> = change -- luacheck: ignore ch (unregisters when a step raises)
  local function finish(outcome, msg)
    return outcome, text.one_line(msg .. "; " .. change:finish(outcome))
  end
  if changed then
    local ok
    ok, o, m = self:write_node_list(ctx, info, want, st)
    if not ok then return finish(o, m) end
  end
  local rok, props, rm = self:restart(ctx, want, assessment, st, info)
  if not rok then return finish(props, rm) end
  local done = string.format("%s, %s %sed (%s)", changed and "node list rewritten" or "node list unchanged",
    ctx.settings.unit, assessment.action, assessment.reason)
  local outcome, msg, restarted = self:wait_converged(ctx, want, assessment, st, info)
  if restarted then props = nil end
  if outcomes.exit_code(outcome, ctx.settings) == 0 then
    local pok, po, pm = self:check_port_owner(ctx, info, props or ctx.host.unit(ctx.settings.unit))
    if not pok then return finish(po, pm) end
  end
  return finish(outcome, msg .. "; " .. done)
end

--- The prolog under the node lock: the decision comes first (with a registered job on another node
-- list the file must stay as it is), so nothing is written before P:may_restart agrees.
function Policy:locked_prolog(ctx, info, want)
  housekeeping.remove_temps(ctx, info) -- C39
  local st, o, m = self:load_state(ctx)
  if not st then return o, m end
  local old, rerr = nodes_file.read_node_list(ctx, info)
  if rerr then ctx.host.log("warning", rerr) end
  local changed = old ~= want.bytes
  local a
  a, o, m = self:assess_daemon(ctx, info, want, st,
    { changed = changed, wait = true, write_pending = changed })
  if not a then return o, m end
  local extra = self:register_extra(ctx, want)
  -- membership by slots: a prolog that ends non-zero takes its job's slots out of the map again
  local function settled(outcome, msg)
    if not want.slots then return outcome, msg end
    return slots.settle(ctx, st, want, outcome, msg)
  end
  if not changed and a.action == "none" then return settled(self:keep(ctx, st, want, a, extra, info)) end
  local allowed, why, blocking = self:may_restart(ctx, st, a)
  if not allowed then
    -- a refusal that names no registered job is the policy's own rule (issue 32 item 6)
    if not other_jobs.blocked(blocking) then return "refused", other_jobs.refused_message(ctx, a, why) end
    -- the conflict names why the daemon is stale too ("same nodes, another order", C21)
    if a.action ~= "none" then why = why .. "; " .. a.action .. " needed: " .. a.reason end
    return "conflict", text.one_line(why), { registry = other_jobs.registry_key(st) }
  end
  return settled(self:change(ctx, info, want, st, a, extra, changed))
end

--- One decision under the node lock (taken and released here).
-- @return outcome, message, retry ({registry = key} when a registered job refused the change)
function Policy:decide_locked(ctx, info, want)
  local guard, o, m = self:lock(ctx)
  if not guard then return o, m end
  local lk <close> = guard -- luacheck: ignore lk (released on every path, also when a step raises)
  return self:locked_prolog(ctx, info, want)
end

--- Step 10, the watcher (watch.start, C51; steps.wait_converged leaves it): `imexguard watch`, a
-- transient service that nudges this node's daemon when a peer restarts after this prolog returned.
-- @return string a note for the message, or nil (no watcher; or its start failed: a warning)
function Policy:leave_watcher(ctx, want) -- luacheck: no self
  return watch.start(ctx, want)
end

--- Entry point `watch`: the prolog's watcher (step 10) of the job's IMEX domain (steps.watch_job).
function Policy:run_watch(ctx)
  return converge.watch_job(self, ctx)
end

--- Entry point `prolog`. A conflict with a registered job (C24: a late epilog) is decided again
-- after steps.wait_registry (up to conflict_wait seconds in all, within the deadline, WITHOUT the
-- node lock so that the epilog can take it); a job that stays registered is still `conflict`.
function Policy:run_prolog(ctx)
  local info, want, m = self:prepare(ctx)
  if not info then return want, m end
  -- nvidia-smi runs while the lock is taken and systemd and the ctl are asked (P:check_fabric waits for it)
  local fq <close> = fabric.start(ctx) -- luacheck: ignore fq (killed unless waited for)
  -- at most half the run's remaining budget: the change itself (start, health wait) needs the rest
  local wait = math.min(base.setting(ctx, "conflict_wait", 0), ctx.host.remaining() / 2)
  local until_t = ctx.host.now() + wait
  while true do
    local o, msg, retry = self:decide_locked(ctx, info, want)
    if not retry then
      -- issue 32 item 1: the domain map this prolog used, for when the file breaks
      local map = rawget(ctx, "domain_map")
      if map and outcomes.exit_code(o, ctx.settings) == 0 then lastgood.save(ctx, map) end
      return o, self:channel_note(info, msg)
    end
    ctx.host.log("info", text.one_line(string.format("conflict_wait: waiting up to %g s for the registry "
      .. "to change, without the node lock: %s", math.max(0, until_t - ctx.host.now()), msg)))
    local changed = other_jobs.wait_registry(ctx, retry.registry, until_t)
    if not changed then
      return o, text.one_line(string.format("%s (after waiting %g s for the registry to change: "
        .. "conflict_wait; or set registration_max_age)", msg, wait))
    end
  end
end

-- ---------------------------------------------------------------------------------------------
-- The epilog.

--- The epilog's result for a job that is not registered here.
local function not_registered(ctx, id)
  return "ok", string.format("job %s was not registered on node %s: nothing to do, %s left as it is", id,
    base.node_name(ctx), ctx.settings.unit)
end

--- Save the state file after job `id`'s entry was removed (the epilog, forget).
-- @return nil when saved, else the outcome (write-failed, or the write's own: a full disk) and a
--   one-line message
function Policy:save_unregistered(ctx, st, id) -- luacheck: no self
  local s = ctx.settings
  local ok, err, code = state.save(ctx.host, s, st)
  if ok then return nil end
  return base.by_code(code, "write-failed"), text.one_line(string.format(
    "node %s: job %s could not be unregistered, state file %s not written: %s", base.node_name(ctx), id,
    state.path(s), tostring(err)))
end

--- Does this node's daemon run a slot list (membership by slots), whatever the setting says now (a
-- rack switched back to lists)? The setting, else the daemon's bytes (state file) naming a slot
-- (slots.SUFFIX; default_slots_spec checks they agree): a list-mode epilog loads no slots module.
local SLOT_SUFFIX = ".imexguard.invalid\n"
local function runs_slots(ctx, st)
  if base.setting(ctx, "membership", "list") == "slots" then return true end
  return type(st.running_nodes) == "string" and st.running_nodes:find(SLOT_SUFFIX, 1, true) ~= nil
end

--- Under the node lock: remove the job's entry, save the state file, then P:after_unregister.
function Policy:unregister(ctx, id)
  local s, node = ctx.settings, base.node_name(ctx)
  housekeeping.remove_temps(ctx) -- C39
  local st, serr = state.load(ctx.host, s)
  if not st then return housekeeping.registry_unknown(ctx, serr) end
  housekeeping.drop_other_boots(ctx, st)
  local entry = registry.unregister(st, id)
  if not entry then return not_registered(ctx, id) end
  local failed, fm = self:save_unregistered(ctx, st, id)
  if failed then return failed, fm end
  if runs_slots(ctx, st) then -- the job's slots out of the name map (membership by slots)
    local so, sm = slots.unmap(ctx, st, id)
    if so then return so, sm end
  end
  local remaining = registry.jobs(st)
  local ho, hm = self:after_unregister(ctx, st, entry, remaining)
  if ho then return ho, hm end
  local rest = #remaining == 0 and "no other job registered"
    or ("still registered: job " .. registry.ids(remaining))
  return "ok", string.format("job %s unregistered on node %s (%s); %s left running", id, node, rest, s.unit)
end

--- Entry point `epilog`: unregister the job under the node lock; IMEX is left running. A job not
-- registered here (its prolog failed or never ran, or IMEX does not apply) is "ok" without the lock
-- (a job's own prolog has finished before its epilog starts: its entry cannot appear meanwhile).
function Policy:run_epilog(ctx)
  local id, o, m = base.check_job_id(ctx)
  if not id then return o, m end
  local peek, perr = state.load(ctx.host, ctx.settings)
  if not peek then return housekeeping.registry_unknown(ctx, perr) end
  if not registry.find(peek, id) then return not_registered(ctx, id) end
  local guard
  guard, o, m = self:lock(ctx)
  if not guard then return o, m end
  local lk <close> = guard -- luacheck: ignore lk
  return self:unregister(ctx, id)
end

-- ---------------------------------------------------------------------------------------------
-- The IMEX channel (imexguard.channels): step 1b, and the line the prolog adds for it.

--- Channel: after applies?, independent of the node list: make channel 0 exist when the setting
-- imex_channels says so (channels.ensure; in `plan` mkdir and mknod_char are recorders).
-- @return message (one line, also logged at info), or nil, "channel-failed", message
function Policy:ensure_channel(ctx) -- luacheck: no self
  local msg, o, m = channels.ensure(ctx)
  if not msg then return nil, o, m end
  ctx.host.log("info", msg)
  return msg
end

--- The final message with the channel step's line (info.channel, info from applies or nil) added
-- when it created (or would create) one (channels.created).
-- @return string one line
function Policy:channel_note(info, msg) -- luacheck: no self
  local ch = info and info.channel
  if ch and channels.created(ch) then return text.one_line(msg .. "; " .. ch) end
  return msg
end

-- ---------------------------------------------------------------------------------------------
-- Building policies.

--- A policy table: `parent`'s methods, the given hooks, and entry points bound to the new table.
local function new(parent, hooks)
  -- parent: the table whose methods this one has until assigned (RENAMED: old names of methods)
  local P = setmetatable({ hooks = hooks }, { parent = parent,
    __index = function(t, k)
      if RENAMED[k] then return t[RENAMED[k]] end
      return parent[k]
    end,
    __newindex = function(t, k, v) rawset(t, RENAMED[k] or k, v) end,
  })
  for _, name in ipairs(ENTRY_NAMES) do
    local method = ENTRY_POINTS[name]
    P[name] = function(ctx) return P[method](P, ctx) end
  end
  --- A policy like this one with some hooks replaced (see the top of this file); its methods are
  -- this policy's until assigned.
  -- @param over table|nil {hook name = function}; unknown names raise (typos are caught)
  -- @return policy table (the entry points of imexguard.commands, extend, hooks, and the methods)
  function P.extend(over)
    local merged = {}
    for k, f in pairs(hooks) do merged[k] = f end
    for k, f in pairs(over or {}) do
      if not HOOKS[k] then error("policy extend: unknown hook '" .. tostring(k) .. "'", 2) end
      if type(f) ~= "function" then error("policy extend: hook '" .. k .. "' must be a function", 2) end
      merged[k] = f
    end
    return new(P, merged)
  end
  return P
end

return new(Policy, {})
