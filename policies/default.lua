--- The default imexguard policy (design.md "Decision model of the default prolog").
-- prolog: job id -> applies? -> desired list -> node lock -> (under the lock) state file (an
-- unreadable or corrupt one: conflict, nothing changed) -> stale? -> may restart? (job registry:
-- decided BEFORE anything is written) -> when a change is needed: register the job and save the
-- state file FIRST (it cannot be saved: write-failed, nothing changed) -> rewrite the list if it
-- differs -> (re)start -> wait for health -> outcome; a non-zero outcome unregisters the job again.
-- Nothing to change: wait for health, then register the job (it cannot be saved: write-failed).
-- epilog: unregister the job (under the lock); IMEX is left running.
-- plan: the same decisions without any side effect; status: the domain as a table.
-- Entry points return outcome, message [, report]: report (string) is printed verbatim on stdout.
--
-- Site policies reuse this one through P.extend(hooks), which returns a new policy table with the
-- same entry points (and its own extend) where the given hooks replace the default ones:
--   lookup(ctx, names)              -> addresses (same order) | nil, message naming the node, code
--                                      step 2's address source (default: settings, DNS or map)
--   admit(ctx, info, want)          -> true | nil, outcome, message: an extra check of the job
--                                      before the lock (default: none)
--   may_restart(ctx, st, verdict)   -> true | false, message: step 6 (default: steps.may_restart)
--   register_extra(ctx, want)       -> table of extra scalar fields for the registry entry
--   after_unregister(ctx, st, entry, remaining) -> nil (keep the default result) | outcome, message:
--                                      runs in the epilog under the lock after the job's entry was
--                                      removed and the state saved; remaining = the other entries
-- Example: policies/shared_nodes.lua, address_map.lua, stop_on_last_epilog.lua.
local steps = require "imexguard.steps"
local state = require "imexguard.state"
local registry = require "imexguard.registry"
local health = require "imexguard.health"
local addresses = require "imexguard.addresses"
local ctl = require "imexguard.ctl"
local outcomes = require "imexguard.outcomes"
local cjson = require "cjson"

local HOOKS = { lookup = true, admit = true, may_restart = true, register_extra = true,
  after_unregister = true }

local build

build = function(hooks)
  local P = {}
  P.hooks = hooks

  --- Steps 1-2: decisions that need no lock and change nothing.
  -- @return info, want, or nil, outcome, message
  local function prepare(ctx)
    local id, o, m = steps.check_job_id(ctx)
    if not id then return nil, o, m end
    local info
    info, o, m = steps.applies(ctx)
    if not info then return nil, o, m end
    local want
    want, o, m = steps.desired(ctx, info, { lookup = hooks.lookup })
    if not want then return nil, o, m end
    if hooks.admit then
      local ok
      ok, o, m = hooks.admit(ctx, info, want)
      if not ok then return nil, o, m end
    end
    return info, want
  end

  local may_restart = hooks.may_restart or steps.may_restart

  --- Steps 4-9, run under the node lock. The decision comes first: with a registered job on another
  -- node list the file must stay as it is (C08), so nothing is written before may_restart agrees.
  -- Then, before anything changes, the job is registered in the state file (a change under a
  -- registration that could not be saved would leave the job unprotected).
  local function locked(ctx, info, want)
    local host, s = ctx.host, ctx.settings
    local st, serr = state.load(host, s)
    if not st then return steps.registry_unknown(ctx, serr) end
    steps.drop_interrupted(ctx, st)
    local old, rerr = steps.read_nodes(ctx, info)
    if rerr then host.log("warning", rerr) end
    local changed = old ~= want.bytes
    local v, o, m = steps.assess(ctx, info, want, st, { changed = changed, wait = true,
      write_pending = changed })
    if not v then return o, m end
    local extra = {}
    if hooks.register_extra then
      for k, x in pairs(hooks.register_extra(ctx, want) or {}) do extra[k] = x end
    end
    if not changed and v.action == "none" then
      -- Fast path: nothing changes; the job is registered once the domain is healthy.
      local outcome, msg = health.wait(ctx, want, v.answer)
      msg = msg .. "; node list unchanged, " .. s.unit .. " current"
      if outcomes.exit_code(outcome, s) == 0 then
        if extra.invocation_id == nil then extra.invocation_id = v.unit.invocation_id or "" end
        local entry, rerr2, rcode = steps.register(ctx, st, want, extra)
        if entry then
          msg = msg .. "; job " .. entry.id .. " registered"
        elseif rerr2 then
          return rcode == "deadline" and "deadline-exceeded" or "write-failed", steps.one_line(string.format(
            "node %s: %s (a job the registry does not know is unprotected); %s", steps.node_name(ctx), rerr2,
            msg))
        end
      end
      return outcome, steps.one_line(msg)
    end
    -- Step 6: the job registry decides before anything changes.
    local allowed, why = may_restart(ctx, st, v)
    if not allowed then return "conflict", steps.one_line(why) end
    local change
    change, o, m = steps.begin_change(ctx, st, want, extra)
    if not change then return o, m end
    local ch <close> = change -- luacheck: ignore ch (unregisters when a step raises)
    local function finish(outcome, msg)
      return outcome, steps.one_line(msg .. "; " .. change:finish(outcome))
    end
    if changed then
      local ok
      ok, o, m = steps.write_nodes(ctx, info, want, st)
      if not ok then return finish(o, m) end
    end
    local rok, props, rm = steps.restart(ctx, want, v, st)
    if not rok then return finish(props, rm) end
    local done = string.format("%s, %s %sed (%s)", changed and "node list rewritten" or "node list unchanged",
      s.unit, v.action, v.reason)
    local outcome, msg = health.wait(ctx, want, v.answer)
    return finish(outcome, msg .. "; " .. done)
  end

  function P.prolog(ctx)
    local info, want, m = prepare(ctx)
    if not info then return want, m end
    local guard, o
    guard, o, m = steps.lock(ctx)
    if not guard then return o, m end
    local lk <close> = guard -- luacheck: ignore lk (released on every path, also when a step raises)
    return locked(ctx, info, want)
  end

  --- The epilog: unregister the job under the node lock; IMEX is left running (unless the
  -- after_unregister hook acts). A job that is not registered (its prolog failed or never ran
  -- here, or IMEX does not apply) is fine: "ok", without taking the lock.
  function P.epilog(ctx)
    local host, s = ctx.host, ctx.settings
    local id, bo, bm = steps.check_job_id(ctx)
    if not id then return bo, bm end
    local node = steps.node_name(ctx)
    local function not_registered()
      return "ok", string.format("job %s was not registered on node %s: nothing to do, %s left as it is", id,
        node, s.unit)
    end
    -- Fast path without the lock: a job's own prolog has finished before its epilog starts, so an
    -- entry for it cannot appear meanwhile.
    local peek, perr = state.load(host, s)
    if not peek then return steps.registry_unknown(ctx, perr) end
    if not registry.find(peek, id) then return not_registered() end
    local guard, o, m = steps.lock(ctx)
    if not guard then return o, m end
    local lk <close> = guard -- luacheck: ignore lk
    local st, serr = state.load(host, s)
    if not st then return steps.registry_unknown(ctx, serr) end
    local entry = registry.unregister(st, id)
    if not entry then return not_registered() end
    local ok, err, code = state.save(host, s, st)
    if not ok then
      return code == "deadline" and "deadline-exceeded" or "write-failed", steps.one_line(string.format(
        "node %s: job %s could not be unregistered, state file %s not written: %s", node, id,
        state.path(s), tostring(err)))
    end
    local remaining = registry.jobs(st)
    if hooks.after_unregister then
      local ho, hm = hooks.after_unregister(ctx, st, entry, remaining)
      if ho then return ho, hm end
    end
    local rest = #remaining == 0 and "no other job registered"
      or ("still registered: job " .. registry.ids(remaining))
    return "ok", string.format("job %s unregistered on node %s (%s); %s left running", id, node, rest, s.unit)
  end

  --- Lines of a diff between the current and the desired list.
  local function diff(old, new)
    local oldl, newl, inold, innew = {}, {}, {}, {}
    for l in (old or ""):gmatch("[^\n]+") do oldl[#oldl + 1] = l; inold[l] = true end
    for l in new:gmatch("[^\n]+") do newl[#newl + 1] = l; innew[l] = true end
    local removed, added = {}, {}
    for _, l in ipairs(oldl) do if not innew[l] then removed[#removed + 1] = l end end
    for _, l in ipairs(newl) do if not inold[l] then added[#added + 1] = l end end
    return removed, added
  end

  function P.plan(ctx)
    local host, s = ctx.host, ctx.settings
    local info, want, m = prepare(ctx)
    if not info then return want, m end
    local old, rerr = steps.read_nodes(ctx, info)
    local changed = old ~= want.bytes
    local st, serr = state.load(host, s)
    if not st then return steps.registry_unknown(ctx, serr) end
    local v, o
    v, o, m = steps.assess(ctx, info, want, st, { changed = changed, wait = false, write_pending = true })
    if not v then return o, m end
    local removed, added = diff(old, want.bytes)
    local restart = v.action ~= "none"
    local allowed, why = true, nil
    if changed or restart then allowed, why = may_restart(ctx, st, v) end
    local verdict = v.answer and health.verdict(v.answer, want.addrs, want.self)
    local message
    if not allowed then
      message = why
    elseif changed or restart then
      message = string.format("would %s%s%s", changed and ("rewrite " .. info.nodes_file) or "",
        (changed and restart) and " and " or "",
        restart and (v.action .. " " .. s.unit .. " (" .. v.reason .. ")") or "")
    else
      message = "nothing to do: node list unchanged, " .. s.unit .. " current"
    end
    if ctx.json then
      local nodes = {}
      for i, a in ipairs(want.addrs) do
        nodes[i] = { name = want.list[i], address = a, self = a == want.self }
      end
      return allowed and "ok" or "conflict", steps.one_line(message), cjson.encode({
        job = steps.job_id(ctx), source = want.source, hostlist = want.expr, nodes = nodes,
        nodes_file = info.nodes_file, changed = changed, removed = removed, added = added,
        unreadable = rerr, unit_state = v.unit.active_state, action = v.action, reason = v.reason,
        domain = verdict and verdict.status or nil, healthy = verdict and verdict.healthy or nil,
        conflict = not allowed and why or nil, registered = registry.ids(registry.jobs(st)),
      }) .. "\n"
    end
    local r = { string.format("plan for job %s on node %s (nothing is changed)", steps.job_id(ctx),
      steps.node_name(ctx)) }
    r[#r + 1] = string.format("desired node list from %s=%s (%d nodes):", tostring(want.source), want.expr,
      #want.addrs)
    for i, a in ipairs(want.addrs) do
      r[#r + 1] = string.format("  %-16s %s%s", a, want.list[i], a == want.self and "  (this node)" or "")
    end
    if rerr then r[#r + 1] = "current file: " .. rerr end
    if changed then
      r[#r + 1] = info.nodes_file .. ": would be rewritten"
      for _, l in ipairs(removed) do r[#r + 1] = "  - " .. l end
      for _, l in ipairs(added) do r[#r + 1] = "  + " .. l end
      if #removed == 0 and #added == 0 then r[#r + 1] = "  (same addresses, order or format differs)" end
    else
      r[#r + 1] = info.nodes_file .. ": unchanged"
    end
    r[#r + 1] = string.format("unit %s: %s/%s", s.unit, tostring(v.unit.active_state),
      tostring(v.unit.sub_state))
    r[#r + 1] = restart and string.format("%s: yes, %s", v.action, v.reason) or ("restart: no, " .. v.reason)
    local jobs = registry.jobs(st)
    r[#r + 1] = #jobs == 0 and "registered jobs: none" or ("registered jobs: " .. registry.ids(jobs))
    if not allowed then r[#r + 1] = "conflict: " .. why end
    if verdict then
      r[#r + 1] = string.format("domain now: %s (%s)", tostring(verdict.status),
        verdict.healthy and "healthy" or "not healthy")
    end
    return allowed and "ok" or "conflict", steps.one_line(message), table.concat(r, "\n") .. "\n"
  end

  --- Slurm node names by address, from the address map when one is configured.
  local function names_by_address(ctx)
    local s = ctx.settings
    if s.address_source ~= "map" then return {} end
    local map = addresses.load_map(ctx.host, s.address_map)
    local by = {}
    for name, addr in pairs(map or {}) do by[addr] = name end
    return by
  end

  function P.status(ctx)
    local host = ctx.host
    local info, o, m = steps.applies(ctx)
    local function plain(outcome, msg)
      local report = ctx.json and (cjson.encode({ outcome = outcome, message = msg }) .. "\n")
        or (outcome .. ": " .. msg .. "\n")
      return outcome, msg, report
    end
    if not info and o ~= "unit-unknown" then return plain(o, m) end
    local ans = health.probe(ctx)
    if not ans.domain then
      local outcome = ans.kind == "unreachable" and "domain-unhealthy" or "ctl-unusable"
      return plain(outcome, steps.one_line("node " .. steps.node_name(ctx) .. ": " .. tostring(ans.err)))
    end
    local domain = ans.domain
    local expected = {}
    for _, node in ipairs(domain.nodes) do expected[#expected + 1] = node.host end
    local self = info and info.bind
    if not self then
      local locals = {}
      for _, a in ipairs(host.local_addresses() or {}) do locals[a] = true end
      for _, h in ipairs(expected) do
        if locals[h] then self = h break end
      end
    end
    self = self or "(no local address in the domain)"
    local names = names_by_address(ctx)
    names[self] = names[self] or steps.node_name(ctx)
    local v = ctl.health(domain, expected, self)
    local outcome, msg
    if v.healthy then
      outcome, msg = "ok", string.format("domain %s, %d nodes healthy", tostring(domain.status), #expected)
    else
      outcome, msg = health.blame(ctx, { self = self, names = names }, v)
    end
    if not info then msg = msg .. "; unit state unknown: " .. m end
    return outcome, steps.one_line(msg), health.report(domain, v, { self = self, names = names,
      json = ctx.json, outcome = outcome, message = steps.one_line(msg) })
  end

  --- A policy like this one with some hooks replaced (see the top of this file).
  -- @param over table {hook name = function}; unknown names raise (typos are caught)
  -- @return policy table (prolog, epilog, plan, status, extend, hooks)
  function P.extend(over)
    local merged = {}
    for k, f in pairs(hooks) do merged[k] = f end
    for k, f in pairs(over or {}) do
      if not HOOKS[k] then error("policy extend: unknown hook '" .. tostring(k) .. "'", 2) end
      if type(f) ~= "function" then error("policy extend: hook '" .. k .. "' must be a function", 2) end
      merged[k] = f
    end
    return build(merged)
  end

  return P
end

return build({})
