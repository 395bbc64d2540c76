-- SPDX-License-Identifier: Apache-2.0
--- The default imexguard policy: a policy table whose methods are the steps of its decision model
-- (docs/policy-api.md "The built-in policy"; docs/design.md "Decision model of the default
-- policy", case ids Cnn: its "Field cases"), in this order:
--   applies?             P:applies(ctx)                      unit installed and enabled (or disabled and
--                                                            manage_disabled_unit), config.cfg
--   channel              P:channel(ctx)                      IMEX channel 0 exists when imex_channels
--                                                            says so (channels.ensure; step 1b)
--   desired list         P:desired(ctx, info)                hostlist -> this node's IMEX domain of
--                                                            the job (steps.domain, C29) -> addresses
--                                                            (P:lookup), P:admit
--   lock                 P:lock(ctx), P:load_state(ctx)      the node lock; under it the state file
--   write                P:write(ctx, info, want, st)        the node list, atomically
--   stale?               P:stale(ctx, info, want, st, opts)  none, start, restart or wait, and why
--   respect other jobs   P:may_restart(ctx, st, verdict)     the job registry decides
--   restart              P:restart(ctx, want, verdict, st, info)  systemd start/restart, waiting for the
--                                                            job; names the unit's Result when it fails
--   wait for health      P:wait_healthy(ctx, want, verdict)  P:fabric: the GPUs' NVLink fabric
--                                                            registration (imexguard.fabric, C31), then
--                                                            poll the ctl until the domain is healthy
--   converge             P:wait_converged(ctx, want, verdict, st, info)  a stale node-map mismatch
--                                                            (C32): restart once where allowed, else
--                                                            stuck-mismatch with the remedy
--   register             P:register(ctx, st, want, extra)    the job's entry in the registry
-- The prolog decides before it acts: under the lock it loads the state file (an unreadable or
-- corrupt one: conflict, nothing changed), asks stale? and then respect other jobs (a registered job
-- on another node list keeps the file as it is), and only then registers the job and saves the
-- state file (it cannot be saved: write-failed, nothing changed), writes the list if it differs,
-- (re)starts and waits for health; a non-zero outcome unregisters the job again. With nothing to
-- change it waits for health, then registers the job (it cannot be saved: write-failed). A healthy
-- domain counts only when the command port is the unit's process (P:port_is_units). A conflict
-- with a registered job is decided again after waiting up to conflict_wait seconds WITHOUT the
-- node lock (a late epilog, C24).
-- The epilog unregisters the job under the lock (P:unregister); IMEX is left running unless
-- P:after_unregister acts. `plan` runs the same decisions without any side effect and renders
-- them with imexguard.report; `status` shows the domain as a table.
-- Entry points (plain functions of ctx, as the binary calls them) return outcome, message
-- [, report]: report (string) is printed verbatim on stdout.
--
-- A site policy extends this one in two ways (examples, each with a spec: policies/shared_nodes.lua,
-- stop_on_last_epilog.lua, static_domain.lua):
-- * hooks, plain functions given to P.extend(hooks), which returns a new policy table with the
--   same entry points (and its own extend) where the given hooks replace the default ones:
--     applies(ctx)                  -> info (as steps.applies) | nil, outcome, message: does IMEX
--                                      apply on this node (default: steps.applies)
--     lookup(ctx, names)            -> addresses (same order) | nil, message naming the node, code:
--                                      the address source (default: settings: DNS or address map);
--                                      names: the job's nodes in this node's IMEX domain (C29)
--     admit(ctx, info, want)        -> true | nil, outcome, message: an extra check of the job
--                                      before the lock (default: none)
--     may_restart(ctx, st, verdict) -> true | false, message (default: steps.may_restart)
--     register_extra(ctx, want)     -> table of extra scalar fields for the registry entry
--     after_unregister(ctx, st, entry, remaining) -> nil (keep the default result) | outcome,
--                                      message: in the epilog, under the lock, after the job's entry
--                                      was removed and the state saved; remaining = the other entries
-- * methods: assign a method of the table P.extend() returns (`function P:stale(ctx, ...)`); the
--   entry points call every step as a method, so the override is used, and it can call the default
--   step as `default.stale(self, ctx, ...)`.
local base = require "imexguard.steps.base"
local outcomes = require "imexguard.outcomes"
local text = require "imexguard.text"
-- Modules loaded when first used (imexguard.lazy): each command loads only those it uses. The
-- epilog needs none of the health wait, addresses, channels or node lists, and of the steps' rooms
-- (imexguard.steps) only the node lock and the housekeeping; only plan and status render reports;
-- only health drains.
local lazy = require "imexguard.lazy"
local applies = lazy "imexguard.steps.applies"
local desired = lazy "imexguard.steps.desired"
local node_lock = lazy "imexguard.steps.node_lock"
local housekeeping = lazy "imexguard.steps.housekeeping"
local nodes_file = lazy "imexguard.steps.nodes_file"
local staleness = lazy "imexguard.steps.staleness"
local other_jobs = lazy "imexguard.steps.other_jobs"
local registration = lazy "imexguard.steps.registration"
local restart = lazy "imexguard.steps.restart"
local state = lazy "imexguard.state"
local registry = lazy "imexguard.registry"
local health = lazy "imexguard.health"
local addresses = lazy "imexguard.addresses"
local channels = lazy "imexguard.channels"
local nodelist = lazy "imexguard.nodelist"
local ctl = lazy "imexguard.ctl"
local report = lazy "imexguard.report"
local drain = lazy "imexguard.drain"
local fabric = lazy "imexguard.fabric"
local json = lazy "imexguard.json"
local domains = lazy "imexguard.domains"

local HOOKS = { applies = true, lookup = true, admit = true, may_restart = true, register_extra = true,
  after_unregister = true }

--- The entry points (the commands of imexguard.commands that have one); each is a plain function
-- of ctx that runs the method "run_" .. name.
local ENTRY_POINTS = require("imexguard.commands").names("entry")

--- The methods of the default policy (the decision model), shared by every policy built from it.
local Policy = {}

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

--- Write: the node list, atomically, recorded in the state file (steps.write_nodes).
-- @return true, or nil, outcome, message
function Policy:write(ctx, info, want, st) -- luacheck: no self
  return nodes_file.write_nodes(ctx, info, want, st)
end

--- Stale? Whether the daemon must be started, restarted, waited for, or is current (steps.assess).
-- @return verdict, or nil, outcome, message
function Policy:stale(ctx, info, want, st, opts) -- luacheck: no self
  return staleness.assess(ctx, info, want, st, opts)
end

--- Respect other jobs: may the list be rewritten or the daemon (re)started under the registered
-- jobs? The may_restart hook, else steps.may_restart.
-- @return true, or false, message
function Policy:may_restart(ctx, st, verdict)
  local f = self.hooks.may_restart or other_jobs.may_restart
  return f(ctx, st, verdict)
end

--- Restart: (re)start the unit and record what it runs (steps.restart).
-- @param info table|nil from applies (a start is refused while another process holds the command port)
-- @return true, props, or nil, outcome, message
function Policy:restart(ctx, want, verdict, st, info) -- luacheck: no self
  return restart.restart(ctx, want, verdict, st, info)
end

--- Before a healthy answer counts: the command port is the unit's (steps.check_port, C27).
-- @return true, or nil, "service-failed", message naming the process on the port
function Policy:port_is_units(ctx, info, props) -- luacheck: no self
  return restart.check_port(ctx, info, props)
end

--- Fabric: the GPUs' NVLink fabric registration (imexguard.fabric.check, C31): every GPU Completed
-- with status Success, a non-zero ClusterUUID, all in one partition, and that partition the one the
-- domain map names when want.domain's name is a fabric identity (fabric.matches). GPUs that report
-- N/A have no multi-node NVLink (nothing checked, said once in the log). Sets ctx.fabric.
-- @param want table|nil the desired list (want.domain: this node's domain from the domain map,
--   {name =, nodes =, source =}, or nil; else ctx.domain when set)
-- @param wait boolean wait up to fabric_timeout while a GPU is registering (the prolog); false: one read
--   (status, health, plan)
-- @return result (fabric.check's), or nil, outcome ("fabric-fault", "fabric-unknown",
--   "deadline-exceeded"), message
function Policy:fabric(ctx, want, wait) -- luacheck: no self
  return fabric.check(ctx, { wait = wait, domain = (want and want.domain) or rawget(ctx, "domain") })
end

--- Wait for health: P:fabric first (waiting while a GPU registers; this node's fabric fault ends the
-- step at once: it outranks a peer's fault, names this node's GPU and blames no peer, and needs no
-- wait on the domain), then poll the ctl until the job's domain is healthy (the verdict's ctl answer
-- is the first poll).
-- @return outcome, message
function Policy:wait_healthy(ctx, want, verdict)
  local r, fo, fm = self:fabric(ctx, want, true)
  if not r then return fo, fm end
  local outcome, msg = health.wait(ctx, want, verdict.answer)
  if r.state == "unknown" or (r.polls or 0) > 1 then msg = msg .. "; fabric: " .. r.message end
  return outcome, text.one_line(msg)
end

--- Wait for health and converge (C32): P:wait_healthy; when it ends in a stale node-map mismatch
-- (both ends of a link run the job's node list, the link still shows NODE_MAP_MISMATCH, and IMEX
-- keeps it until both ends restart), restart this node's daemon once per run where P:may_restart
-- allows a restart under the registered jobs (the rule of every restart), then wait again. Where it
-- may not, wait once more (the other end may hold the block alone and restart); where the mismatch
-- stays after that, or after this node's restart, the outcome stays stuck-mismatch, naming the
-- nodes to restart together. A nudge (SIGUSR1) is no substitute: it does not clear the block.
-- @param verdict table from P:stale (nodes, unit, answer: the first poll)
-- @param st table the state file (the registry; saved by P:restart)
-- @return outcome, message, restarted (true when this run restarted the daemon to converge; called
--   once per run, so that is the one restart)
function Policy:wait_converged(ctx, want, verdict, st, info)
  local outcome, msg = self:wait_healthy(ctx, want, verdict)
  if outcome ~= health.STALE_MISMATCH_OUTCOME then return outcome, msg end
  local v = { action = "restart", nodes = verdict.nodes, unit = verdict.unit, changed = false,
    reason = "a stale node-map mismatch (C32)" }
  local allowed, why = self:may_restart(ctx, st, v)
  if not allowed then
    -- the other end may hold the block alone and restart to clear it: one more round of the wait
    ctx.host.log("warning", text.one_line("node " .. base.node_name(ctx) .. ": may not restart "
      .. ctx.settings.unit .. " to clear a stale node-map mismatch (" .. tostring(why) .. "); waiting once "
      .. "more for the other end's restart"))
    local o2, m2 = self:wait_healthy(ctx, want, {})
    if o2 ~= health.STALE_MISMATCH_OUTCOME then return o2, m2 end
    return o2, text.one_line(m2 .. "; this node may not restart it: " .. tostring(why))
  end
  ctx.host.log("warning", text.one_line("node " .. base.node_name(ctx) .. ": restarting "
    .. ctx.settings.unit .. " once to clear a stale node-map mismatch: " .. msg))
  local rok, props, rm = self:restart(ctx, want, v, st, info)
  if not rok then return props, rm end
  -- this end is new now; the other end's prolog may be restarting its daemon (a slow unit job, a
  -- systemd re-exec): the whole health wait for it, not stale_mismatch_after
  desired.set_stale_wait(want)
  local o2, m2 = self:wait_healthy(ctx, want, {})
  if o2 == health.STALE_MISMATCH_OUTCOME then
    m2 = m2 .. "; this run already restarted " .. ctx.settings.unit .. " once to clear it: the other end "
      .. "must restart too"
  else
    m2 = m2 .. "; " .. ctx.settings.unit .. " restarted once to clear a stale node-map mismatch"
  end
  return o2, text.one_line(m2), true
end

--- Register: the fields of the job's registry entry beyond the default ones (register_extra hook).
-- @return table (a fresh one, the caller may change it)
function Policy:register_extra(ctx, want)
  local extra = {}
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
  local id, o, m = base.check_job_id(ctx)
  if not id then return nil, o, m end
  local info
  info, o, m = self:applies(ctx)
  if not info then return nil, o, m end
  local ch
  ch, o, m = self:channel(ctx)
  if not ch then return nil, o, m end
  info.channel = ch
  local want
  want, o, m = self:desired(ctx, info)
  if not want then return nil, o, m end
  return info, want
end

--- Nothing to change: wait for health, then register the job (only when the outcome exits 0).
function Policy:keep(ctx, st, want, verdict, extra, info)
  local outcome, msg, restarted = self:wait_converged(ctx, want, verdict, st, info)
  msg = msg .. "; node list unchanged, " .. ctx.settings.unit .. (restarted and " restarted" or " current")
  if outcomes.exit_code(outcome, ctx.settings) ~= 0 then return outcome, text.one_line(msg) end
  local unit = restarted and ctx.host.unit(ctx.settings.unit) or verdict.unit
  local pok, po, pm = self:port_is_units(ctx, info, unit)
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
function Policy:change(ctx, info, want, st, verdict, extra, changed)
  local change, o, m = registration.begin_change(ctx, st, want, extra)
  if not change then return o, m end
  local ch <close> = change -- luacheck: ignore ch (unregisters when a step raises)
  local function finish(outcome, msg)
    return outcome, text.one_line(msg .. "; " .. change:finish(outcome))
  end
  if changed then
    local ok
    ok, o, m = self:write(ctx, info, want, st)
    if not ok then return finish(o, m) end
  end
  local rok, props, rm = self:restart(ctx, want, verdict, st, info)
  if not rok then return finish(props, rm) end
  local done = string.format("%s, %s %sed (%s)", changed and "node list rewritten" or "node list unchanged",
    ctx.settings.unit, verdict.action, verdict.reason)
  local outcome, msg, restarted = self:wait_converged(ctx, want, verdict, st, info)
  if restarted then props = nil end
  if outcomes.exit_code(outcome, ctx.settings) == 0 then
    local pok, po, pm = self:port_is_units(ctx, info, props or ctx.host.unit(ctx.settings.unit))
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
  local old, rerr = nodes_file.read_nodes(ctx, info)
  if rerr then ctx.host.log("warning", rerr) end
  local changed = old ~= want.bytes
  local v
  v, o, m = self:stale(ctx, info, want, st, { changed = changed, wait = true, write_pending = changed })
  if not v then return o, m end
  local extra = self:register_extra(ctx, want)
  if not changed and v.action == "none" then return self:keep(ctx, st, want, v, extra, info) end
  local allowed, why = self:may_restart(ctx, st, v)
  if not allowed then
    -- the conflict names why the daemon is stale too ("same nodes, another order", C21)
    if v.action ~= "none" then why = why .. "; " .. v.action .. " needed: " .. v.reason end
    return "conflict", text.one_line(why), { registry = other_jobs.registry_key(st) }
  end
  return self:change(ctx, info, want, st, v, extra, changed)
end

--- One decision under the node lock (taken and released here).
-- @return outcome, message, retry ({registry = key} when a registered job refused the change)
function Policy:decide_locked(ctx, info, want)
  local guard, o, m = self:lock(ctx)
  if not guard then return o, m end
  local lk <close> = guard -- luacheck: ignore lk (released on every path, also when a step raises)
  return self:locked_prolog(ctx, info, want)
end

--- Entry point `prolog`. A conflict with a registered job (C24: typically the previous job's epilog
-- is late) is decided again after steps.wait_registry (up to conflict_wait seconds in all, within
-- the deadline, WITHOUT the node lock so that the epilog can take it); a job that stays registered
-- is still `conflict`, named with how to clear it.
function Policy:run_prolog(ctx)
  local info, want, m = self:prepare(ctx)
  if not info then return want, m end
  -- nvidia-smi runs while the lock is taken and systemd and the ctl are asked (P:fabric waits for it)
  local fq <close> = fabric.start(ctx) -- luacheck: ignore fq (killed unless waited for)
  -- at most half the run's remaining budget: the change itself (start, health wait) needs the rest
  local wait = math.min(base.setting(ctx, "conflict_wait", 0), ctx.host.remaining() / 2)
  local until_t = ctx.host.now() + wait
  while true do
    local o, msg, retry = self:decide_locked(ctx, info, want)
    if not retry then return o, self:channel_note(info, msg) end
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

-- Save the state file after a job's entry was removed (the epilog, forget): nil when saved, else
-- the outcome (write-failed, or the write's own: a full disk) and a one-line message.
local function save_unregistered(ctx, st, node, id)
  local s = ctx.settings
  local ok, err, code = state.save(ctx.host, s, st)
  if ok then return nil end
  return base.by_code(code, "write-failed"), text.one_line(string.format(
    "node %s: job %s could not be unregistered, state file %s not written: %s", node, id,
    state.path(s), tostring(err)))
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
  local failed, fm = save_unregistered(ctx, st, node, id)
  if failed then return failed, fm end
  local remaining = registry.jobs(st)
  local ho, hm = self:after_unregister(ctx, st, entry, remaining)
  if ho then return ho, hm end
  local rest = #remaining == 0 and "no other job registered"
    or ("still registered: job " .. registry.ids(remaining))
  return "ok", string.format("job %s unregistered on node %s (%s); %s left running", id, node, rest, s.unit)
end

--- Entry point `epilog`: unregister the job under the node lock; IMEX is left running. A job that
-- is not registered (its prolog failed or never ran here, or IMEX does not apply) is fine: "ok",
-- without taking the lock (a job's own prolog has finished before its epilog starts, so an entry
-- for it cannot appear meanwhile).
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
-- plan and status.

--- Entry point `plan`: the prolog's decisions without any side effect (imexguard.report renders them).
function Policy:run_plan(ctx)
  local info, want, m = self:prepare(ctx)
  if not info then return want, m end
  local old, rerr = nodes_file.read_nodes(ctx, info)
  local changed = old ~= want.bytes
  local st, serr = state.load(ctx.host, ctx.settings)
  if not st then return housekeeping.registry_unknown(ctx, serr) end
  housekeeping.drop_other_boots(ctx, st)
  local v, o
  v, o, m = self:stale(ctx, info, want, st, { changed = changed, wait = false, write_pending = true })
  if not v then return o, m end
  local allowed, why = true, nil
  if changed or v.action ~= "none" then allowed, why = self:may_restart(ctx, st, v) end
  local f = { ctx = ctx, job = base.job_id(ctx), node = base.node_name(ctx), info = info, want = want,
    st = st, old = old, old_err = rerr, changed = changed, verdict = v, allowed = allowed, why = why,
    domain = v.answer and health.verdict(v.answer, want.addrs, want.self),
    findings = report.config_findings(info, want.addrs),
    config_fault = #want.addrs > 1 and report.config_fault_found(info, want.addrs) }
  local pok, po, pm = self:port_is_units(ctx, info, v.unit)
  if not pok then
    local out = self:channel_report(ctx, info, report.plan(f))
    return po, text.one_line(pm .. "; " .. report.plan_message(f)), out
  end
  local outcome = allowed and (f.config_fault and "config-fault" or "ok") or "conflict"
  local msg = report.plan_message(f)
  local stale = allowed and f.domain and f.domain.stale_mismatch
  if stale then
    -- C32, as P:wait_converged decides it: a restart to converge, where the registry allows one
    local cv = { action = "restart", nodes = v.nodes, unit = v.unit, changed = false }
    local ok, cwhy = true, nil
    if v.action == "none" then ok, cwhy = self:may_restart(ctx, st, cv) end
    local head = "stale node-map mismatch with " .. table.concat(stale.peers, ", ")
    if not ok then
      outcome = health.STALE_MISMATCH_OUTCOME
      msg = string.format("%s; %s; this node may not restart it: %s; %s", msg, head, tostring(cwhy),
        health.stale_remedy(ctx, { self = want.self }, f.domain))
    elseif v.action == "none" then
      msg = msg .. "; " .. head .. ": the prolog would restart " .. ctx.settings.unit .. " once to clear it"
    else
      msg = msg .. "; " .. head .. ": the " .. v.action .. " clears this end"
    end
  end
  local message = self:channel_note(info, text.one_line(msg))
  outcome, message = self:fabric_verdict(ctx, want, outcome, message)
  return outcome, message, self:fabric_report(ctx, self:channel_report(ctx, info, report.plan(f)))
end

--- Slurm node names by address, from the address map when one is configured.
local function names_by_address(ctx)
  local s = ctx.settings
  if s.address_source ~= "map" then return {} end
  local by = {}
  for name, addr in pairs(addresses.load_map(ctx.host, s.address_map) or {}) do by[addr] = name end
  return by
end

--- This node's address in the domain: BIND_INTERFACE_IP, else the first local address it lists.
local function self_address(ctx, info, expected)
  if info and info.bind then return info.bind end
  local locals = {}
  for _, a in ipairs(ctx.host.local_addresses() or {}) do locals[a] = true end
  for _, h in ipairs(expected) do
    if locals[h] then return h end
  end
  return "(no local address in the domain)"
end

--- Status of the unit behind the ctl's answer (C27): an answer is the unit's only when the unit is
-- active and the command port is its process; otherwise `status` is never "ok".
-- @return nil (the unit is fine or unknown), or "service-failed", message naming the unit's state or
--   the process on the command port
function Policy:unit_verdict(ctx, info)
  if not info then return nil end
  local props = ctx.host.unit(ctx.settings.unit) or info.unit
  local ok, o, m = self:port_is_units(ctx, info, props)
  if not ok then return o, m end
  local a = props.active_state
  if a == "active" or a == "reloading" then return nil end
  -- a stopped unit: the ctl's answer (often a placeholder row 0.0.0.0 DOWN) is nobody's; no other
  -- process is blamed (port_is_units above names one when it listens)
  local u = ctx.settings.unit
  local what = a == "failed" and string.format("the unit failed (see journalctl -u %s)", u)
    or (a == "inactive" and "the unit is stopped (a job's prolog starts it; or systemctl start " .. u .. ")")
    or "the unit is not running"
  return "service-failed", string.format("node %s: %s is %s (result %s): %s, so no IMEX daemon of it answers",
    base.node_name(ctx), u, tostring(a), tostring(props.result), what)
end

--- The node list the domain must run, in order (C21: a node's ID is its line in it): the
-- addresses of this node's node list file (nodelist.parse); nil when it cannot be read, is empty
-- or is not a node list (status then judges the domain by its own order, and says so). Host names
-- in it (C35: a static list of rack-slot names) are resolved as the job's nodes are
-- (addresses.resolve_entries); a name that does not resolve stays as written.
-- @return list, names ({[address] = host name of the file}), by_entry ({[name] = address}),
--   unresolved (list of "NAME (why)")
local function ordered_node_list(ctx, info)
  if not info then return nil end
  local list = nodelist.parse(nodes_file.read_nodes(ctx, info) or "")
  if not (list and #list > 0) then return nil end
  local literal = true
  for _, e in ipairs(list) do literal = literal and nodelist.is_ipv4(e) end
  if literal then return list end
  local addrs, names, unresolved = addresses.resolve_entries(ctx.host, ctx.settings, list)
  local by_entry = {}
  for i, e in ipairs(list) do
    if addrs[i] and addrs[i] ~= e then by_entry[e], list[i] = addrs[i], addrs[i] end
  end
  return list, names, by_entry, unresolved
end

--- What `status` and `health` judge this node on (C33): the registered jobs' node list when every
-- registered job has the same one (the job's nodes), false when no job is registered (the node is
-- idle: judged on what it owns), nil when the state file cannot be read or the jobs' lists differ
-- (then the node list file decides, as before).
-- @return list of addresses | false | nil
local function registered_list(ctx)
  local st = state.load(ctx.host, ctx.settings)
  if not st then return nil end
  local jobs = registry.jobs(st)
  if #jobs == 0 then return false end
  for _, e in ipairs(jobs) do
    if e.nodes ~= jobs[1].nodes then return nil end
  end
  local list = nodelist.parse(jobs[1].nodes or "")
  return list and #list > 0 and list or nil
end

--- The facts of this node that `status` shows beside the domain, what `systemctl status` and
-- more would tell an admin: the unit's state and since when, its invocation, the last prolog and
-- epilog (state.load_last), the registered jobs (the state file), the node lock's holder
-- (host.lock_holder: never waits, never holds it), and this node's domain and fabric when a step
-- set ctx.domain ({name, nodes, source}) or ctx.fabric. Reads only; an unreadable part is named
-- in its place, never an error of the run.
-- @return table facts (report.status' opts.facts)
function Policy:node_facts(ctx) -- luacheck: no self
  local host, s = ctx.host, ctx.settings
  local f = { node = base.node_name(ctx), now = host.wallclock(), unit_name = s.unit,
    state_path = state.path(s), last = {} }
  local props, uerr = host.unit(s.unit)
  f.unit = props or { error = text.one_line(tostring(uerr), 200) }
  for _, c in ipairs({ "prolog", "epilog" }) do
    local rec, err = state.load_last(host, s, c)
    f.last[c] = rec or (err and { error = err }) or nil
  end
  local st, serr = state.load(host, s)
  if st then f.jobs = registry.jobs(st) else f.jobs_error = serr end
  local path = s.state_dir .. "/lock"
  f.lock = { path = path }
  if type(host.lock_holder) == "function" then
    local holder, herr = host.lock_holder(path)
    if herr then f.lock.error = tostring(herr) else f.lock.holder = holder end
  end
  f.domain, f.fabric = rawget(ctx, "domain"), rawget(ctx, "fabric")
  return f
end

-- The options of a status report that every path shares: facts (status only: health needs none),
-- verbosity, the exit code.
local function status_opts(self, ctx, outcome)
  return { facts = ctx.command == "status" and self:node_facts(ctx) or nil, verbosity = ctx.verbosity,
    exit_code = outcomes.exit_code(outcome, ctx.settings) }
end

--- Entry point `status`: the node's facts (node_facts), then the domain as a table, with a
-- diagnosis per node. The ctl's ordered node map is compared with this node's node list file (same
-- nodes in another order is a local fault, C21); config.cfg's findings (imexcfg.lint: a command port
-- on loopback, IMEX_CMD_ENABLED=0...) are flagged before any job runs (C22).
function Policy:run_status(ctx)
  local info, o, why = self:applies(ctx)
  if not info and o ~= "unit-unknown" then
    return o, why, self:status_report(ctx, report.status_plain(o, why, ctx.json, status_opts(self, ctx, o)))
  end
  local ans = health.probe(ctx, nil, info and info.config, info and info.cfg)
  -- C33: a stopped (not failed) unit that nothing answers for, with no job registered, is no fault
  -- of the node: the next prolog starts it, and a site may stop it on purpose
  -- (stop_on_last_epilog, a disabled unit managed per job); health must not drain idle nodes for it
  local props = info and info.unit
  if not ans.domain and ans.kind == "unreachable" and props and props.active_state == "inactive"
    and registered_list(ctx) == false then
    local msg = string.format("node %s: %s is inactive and no job is registered here: nothing to judge "
      .. "(the next job's prolog starts it)", base.node_name(ctx), ctx.settings.unit)
    return "ok", msg, self:status_report(ctx, report.status_plain("ok", msg, ctx.json,
      status_opts(self, ctx, "ok")))
  end
  if not ans.domain then
    local outcome = ans.kind == "unreachable" and "domain-unhealthy" or "ctl-unusable"
    local msg = "node " .. base.node_name(ctx) .. ": " .. tostring(ans.err)
    -- config.cfg's findings are the likely cause (IMEX_CMD_ENABLED=0: the ctl cannot reach the daemon, C22)
    local findings = report.config_findings(info, ordered_node_list(ctx, info) or {})
    if #findings > 0 then msg = msg .. "; " .. table.concat(findings, "; ") end
    msg = text.one_line(msg)
    return outcome, msg, self:status_report(ctx,
      report.status_plain(outcome, msg, ctx.json, status_opts(self, ctx, outcome)))
  end
  local expected, entry_names, by_entry, unresolved = ordered_node_list(ctx, info)
  -- C35: the ctl may show the file's host names where the list has their addresses
  local domain = by_entry and ctl.map_hosts(ans.domain, by_entry) or ans.domain
  if domain ~= ans.domain then ans = setmetatable({ domain = domain }, { __index = ans }) end
  local by_file = expected ~= nil
  if not expected then
    expected = {}
    for _, node in ipairs(domain.nodes) do expected[#expected + 1] = node.host end
  end
  local self_addr = self_address(ctx, info, expected)
  local names = names_by_address(ctx)
  for a, n in pairs(entry_names or {}) do
    if not names[a] then
      names[a] = n
    elseif names[a] ~= n then
      names[a] = n .. ", " .. names[a]
    end
  end
  names[self_addr] = names[self_addr] or base.node_name(ctx)
  -- C33: a registered job's nodes are judged; with no job registered, only what this node owns (the
  -- unit, its daemon READY with its own node map, the command port: unit_verdict; config.cfg's
  -- findings below, flagged as for any node: C22), never its links to peers that may run other
  -- jobs' lists now.
  -- Hook: the fabric of this node's GPUs (C31) is one more thing it owns, judged here too.
  local jobs_list = registered_list(ctx)
  local idle = jobs_list == false
  local judged = jobs_list or expected
  local v = health.verdict(ans, judged, self_addr, { node_list = by_file and expected or false,
    own_only = idle, list_name = jobs_list and "the registered job's node list"
      or (by_file and "this node's node list file" or "the daemon's own list") })
  local outcome, msg
  if v.healthy and idle then
    outcome, msg = "ok", string.format("node %s: no job registered, judged on what it owns: %s",
      base.node_name(ctx), tostring(v.summary))
  elseif v.healthy then
    outcome, msg = "ok", string.format("domain %s, %d nodes healthy", tostring(domain.status), #judged)
  else
    outcome, msg = health.blame(ctx, { self = self_addr, names = names, cfg = info and info.cfg,
      config_path = info and info.config }, v)
  end
  if not info then msg = msg .. "; unit state unknown: " .. why end
  if unresolved and #unresolved > 0 then
    msg = string.format("%s; node list %s: names that do not resolve: %s", msg, info.nodes_file,
      table.concat(unresolved, ", "))
  end
  local uo, um = self:unit_verdict(ctx, info)
  if uo then outcome, msg = uo, um .. "; " .. msg end
  local findings = report.config_findings(info, expected)
  if #findings > 0 then msg = msg .. "; " .. findings[1] .. (#findings > 1 and " (and more below)" or "") end
  self:domain_fact(ctx)
  outcome, msg = self:fabric_verdict(ctx, nil, outcome, text.one_line(msg))
  local opts = status_opts(self, ctx, outcome)
  opts.self, opts.names, opts.json, opts.outcome, opts.message = self_addr, names, ctx.json, outcome, msg
  opts.findings, opts.config = findings, info and info.config
  opts.node_list = by_file and info.nodes_file or nil
  return outcome, msg, self:status_report(ctx, report.status(domain, v, opts))
end

--- A status report with the channel's state (P:channel_report), except the one line of -q.
function Policy:status_report(ctx, out)
  if ctx.command ~= "status" then return out end -- health prints its own line
  if ctx.verbosity and ctx.verbosity < 0 then return out end
  return self:channel_report(ctx, nil, out)
end

--- status, health and plan: the fabric read once (P:fabric without waiting) joined to an outcome
-- that exits 0: a fault of this node's GPUs (or fabric-unknown with on_fabric_unknown = "fail")
-- replaces it; GPUs still registering are named in the message, not a fault (the prolog waits for
-- them); an outcome that is already non-zero stays, the fabric is not read.
-- @param want table|nil (want.domain, see P:fabric)
-- @return outcome, message (one line)
function Policy:fabric_verdict(ctx, want, outcome, msg)
  if outcomes.exit_code(outcome, ctx.settings) ~= 0 then return outcome, msg end
  local r, fo, fm = self:fabric(ctx, want, false)
  if not r then return fo, text.one_line(fm .. "; " .. msg) end
  if r.state == "pending" or r.state == "unknown" then msg = msg .. "; fabric: " .. r.message end
  return outcome, text.one_line(msg)
end

--- plan's report (text or JSON) with the fabric's line (ctx.fabric, set by P:fabric): text
-- "fabric: STATE: message", JSON a last field `fabric` = {state, message, partition =
-- "<ClusterUUID>.<CliqueId>" or null} (docs/json.md), null when the fabric was not read (text:
-- unchanged).
-- @param out string the report
-- @return string the report
function Policy:fabric_report(ctx, out) -- luacheck: no self
  local f = ctx.fabric
  if type(out) ~= "string" then return out end
  if ctx.json then
    local body = out:match("^(.*)}%s*$")
    if not body then return out end
    local v = f and json.encode(report.fabric_json(f)):gsub("\n$", "") or "null"
    return body .. ',"fabric":' .. v .. "}\n"
  end
  if not f then return out end
  return out .. "fabric: " .. report.fabric_line(f) .. "\n"
end

-- ---------------------------------------------------------------------------------------------
-- The job registry by hand: registrations and forget.

--- Entry point `registrations`: the jobs registered on this node (reads the state file, takes no
-- lock: the file is replaced atomically, so it is the old or the new registry).
function Policy:run_registrations(ctx) -- luacheck: no self
  local host, s = ctx.host, ctx.settings
  local st, serr = state.load(host, s)
  if not st then return housekeeping.registry_unknown(ctx, serr) end
  local jobs = registry.jobs(st)
  local msg = #jobs == 0 and string.format("node %s: no job registered", base.node_name(ctx))
    or string.format("node %s: %d job%s registered: %s", base.node_name(ctx), #jobs,
      #jobs == 1 and "" or "s",
      registry.ids(jobs))
  local facts = { node = base.node_name(ctx), now = host.wallclock(), jobs = jobs,
    state_path = state.path(s) }
  return "ok", msg, report.registrations(facts, { json = ctx.json, verbosity = ctx.verbosity, outcome = "ok",
    exit_code = 0, message = msg })
end

--- Entry point `forget JOBID` (ctx.arg): remove the job's entry from this node's registry under
-- the node lock, for a job whose epilog never ran (slurmd crashed, the node rebooted without
-- clearing state_dir); IMEX is left as it is and P:after_unregister is not run (that is the
-- epilog's). A job that is not registered is bad-input: nothing removed.
function Policy:run_forget(ctx)
  local id = ctx.arg
  if type(id) ~= "string" or not id:match(base.JOB_ID_PATTERN) or #id > base.JOB_ID_MAX then
    return "bad-input", string.format("forget: %s is not a Slurm job id (digits)",
      text.quote(tostring(id), 80))
  end
  id = id:gsub("^0+(%d)", "%1")
  local s, node = ctx.settings, base.node_name(ctx)
  local guard, o, m = self:lock(ctx)
  if not guard then return o, m end
  local lk <close> = guard -- luacheck: ignore lk
  local st, serr = state.load(ctx.host, s)
  if not st then return housekeeping.registry_unknown(ctx, serr) end
  local entry = registry.unregister(st, id)
  if not entry then
    local jobs = registry.jobs(st)
    return "bad-input",
      string.format("node %s: job %s is not registered here; nothing removed (registered: %s)",
      node, id, #jobs == 0 and "none" or registry.ids(jobs))
  end
  local failed, fm = save_unregistered(ctx, st, node, id)
  if failed then return failed, fm end
  local remaining = registry.jobs(st)
  local age = entry.registered_us and registry.show_age(ctx.host.wallclock() - entry.registered_us / 1e6)
  local msg = text.one_line(string.format("node %s: removed the registration of job %s (%s, registered %s "
    .. "ago); %s; %s left as it is", node, id, registry.entry_hosts(entry), age or "?",
    #remaining == 0 and "no job registered now" or ("still registered: job " .. registry.ids(remaining)),
    s.unit))
  return "ok", msg, msg .. "\n" -- said on stdout too: an admin ran it by hand
end

-- ---------------------------------------------------------------------------------------------
-- The IMEX channel (imexguard.channels) and the node health check.

--- Channel: after applies?, independent of the node list: make channel 0 exist when the setting
-- imex_channels says so (channels.ensure; in `plan` mkdir and mknod_char are recorders).
-- @return message (one line, also logged at info), or nil, "channel-failed", message
function Policy:channel(ctx) -- luacheck: no self
  local msg, o, m = channels.ensure(ctx)
  if not msg then return nil, o, m end
  ctx.host.log("info", msg)
  return msg
end

--- The final message with the channel step's line added when it created (or would create) one.
-- @param info table|nil from applies (info.channel: the line of Policy:channel)
-- @param msg string the message
-- @return string one line
function Policy:channel_note(info, msg) -- luacheck: no self
  local ch = info and info.channel
  if ch and (ch:find("IMEX channel: created", 1, true) or ch:find("IMEX channel: would create", 1, true)) then
    return text.one_line(msg .. "; " .. ch)
  end
  return msg
end

--- status: this node's IMEX domain (imexguard.domains.node_line) as ctx.domain for the node's facts
-- (report.domain_line): {name, kind, source, nodes}, {kind, source} when this node is in none,
-- {error = line} when the map cannot be read, nil without a domain map.
function Policy:domain_fact(ctx) -- luacheck: no self
  local line, dom = domains.node_line(ctx, base.node_name(ctx))
  if dom then
    ctx.domain = dom
  elseif line:find("IMEX domain map: ", 1, true) == 1 then
    ctx.domain = { error = line }
  end
end

--- A report (text or JSON) with the channel's line (`plan`: the step's line; `status`: its state).
-- @param info table|nil from applies (nil: the state is read with channels.state)
-- @param out string the report
-- @return string the report
function Policy:channel_report(ctx, info, out) -- luacheck: no self
  local line = info and info.channel or channels.state(ctx)
  if type(out) ~= "string" then return out end
  if ctx.json then
    -- the last key of the report's object (docs/json.md): `"channel": LINE` before its final "}"
    local head = out:match("^(.*)}\n$")
    if not head then return out end
    return head .. ',"channel":' .. require("cjson").encode(line) .. "}\n"
  end
  return out .. line .. "\n"
end

--- Entry point `health` (Slurm's HealthCheckProgram, LBNL NHC): this node's IMEX as `status` sees
-- it plus the channel's state, changing nothing (the binary runs it with the dry-run recorders).
-- Not applicable (IMEX skipped here) and faults of peers only are "ok"/"skipped" (exit 0: a health
-- check drains this node, and a peer drains itself); a fault of this node is its outcome, with one
-- line `imexguard: OUTCOME: cause` as the report (what NHC and contrib/slurm/health.sh print).
-- @return outcome, message, report (nil when healthy)
function Policy:run_health(ctx)
  local o, m = self:run_status(ctx)
  if o == "skipped" then return "skipped", text.one_line("not applicable: " .. tostring(m)) end
  if o == "peers-unhealthy" then o, m = "ok", "this node healthy; " .. tostring(m) end
  if o == "ok" then
    local line, fault, fo = channels.state(ctx)
    if fault then o, m = fo or "channel-failed", line end
  end
  if outcomes.exit_code(o, ctx.settings) == 0 then return o, text.one_line(m) end
  return o, text.one_line(m), drain.reason(o, m) .. "\n"
end

-- ---------------------------------------------------------------------------------------------
-- Building policies.

--- A policy table: `parent`'s methods, the given hooks, and entry points bound to the new table.
local function new(parent, hooks)
  local P = setmetatable({ hooks = hooks }, { __index = parent })
  for _, name in ipairs(ENTRY_POINTS) do
    local method = "run_" .. name
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
