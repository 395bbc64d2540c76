--- The default imexguard policy (design.md "Decision model of the default prolog").
-- prolog: applies? -> desired list -> node lock -> rewrite the list if it differs -> stale? ->
-- (may restart? job registry, later) -> restart -> wait for health -> outcome.
-- plan: the same decisions without any side effect; status: the domain as a table.
-- Entry points return outcome, message [, report]: report (string) is printed verbatim on stdout.
local steps = require "imexguard.steps"
local state = require "imexguard.state"
local health = require "imexguard.health"
local addresses = require "imexguard.addresses"
local ctl = require "imexguard.ctl"
local cjson = require "cjson"

local P = {}

--- Steps 1-2: decisions that need no lock and change nothing.
-- @return info, want, or nil, outcome, message
local function prepare(ctx)
  local info, o, m = steps.applies(ctx)
  if not info then return nil, o, m end
  local want
  want, o, m = steps.desired(ctx, info)
  if not want then return nil, o, m end
  return info, want
end

--- Steps 4-8, run under the node lock.
local function locked(ctx, info, want)
  local host, s = ctx.host, ctx.settings
  local st, warn = state.load(host, s)
  if warn then host.log("warning", warn) end
  local old, rerr = steps.read_nodes(ctx, info)
  if rerr then host.log("warning", rerr) end
  local changed = old ~= want.bytes
  local ok, o, m
  if changed then
    ok, o, m = steps.write_nodes(ctx, info, want, st)
    if not ok then return o, m end
  end
  local v
  v, o, m = steps.assess(ctx, info, want, st, { changed = changed, wait = true })
  if not v then return o, m end
  local done = changed and "node list rewritten" or "node list unchanged"
  if v.action == "none" then
    done = done .. ", " .. s.unit .. " current"
  else
    -- Step 6: the job registry decides here (steps.may_restart is a stub that allows every restart).
    local allowed, why = steps.may_restart(ctx, st, v)
    if not allowed then return "conflict", steps.one_line(why) end
    ok, o, m = steps.restart(ctx, want, v, st)
    if not ok then return o, m end
    done = string.format("%s, %s %sed (%s)", done, s.unit, v.action, v.reason)
  end
  local outcome, msg = health.wait(ctx, want, v.answer)
  return outcome, steps.one_line(msg .. "; " .. done)
end

function P.prolog(ctx)
  local info, want, m = prepare(ctx)
  if not info then return want, m end
  local guard, o
  guard, o, m = steps.lock(ctx)
  if not guard then return o, m end
  local lk <close> = guard -- luacheck: ignore lk (released on every path, also when a step raises)
  -- Step 9 (later): register the job in the state file here, still under the lock.
  return locked(ctx, info, want)
end

function P.epilog(ctx) -- luacheck: no unused args
  -- The job registry comes later: unregister the job here. IMEX is left running.
  return "ok", "nothing to do"
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
  local st = state.load(host, s)
  local v, o
  v, o, m = steps.assess(ctx, info, want, st, { changed = changed, wait = false, write_pending = true })
  if not v then return o, m end
  local removed, added = diff(old, want.bytes)
  local restart = v.action ~= "none"
  local verdict = v.answer and health.verdict(v.answer, want.addrs, want.self)
  local message
  if changed or restart then
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
    return "ok", steps.one_line(message), cjson.encode({
      job = steps.job_id(ctx), source = want.source, hostlist = want.expr, nodes = nodes,
      nodes_file = info.nodes_file, changed = changed, removed = removed, added = added,
      unreadable = rerr, unit_state = v.unit.active_state, action = v.action, reason = v.reason,
      domain = verdict and verdict.status or nil, healthy = verdict and verdict.healthy or nil,
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
  if verdict then
    r[#r + 1] = string.format("domain now: %s (%s)", tostring(verdict.status),
      verdict.healthy and "healthy" or "not healthy")
  end
  return "ok", steps.one_line(message), table.concat(r, "\n") .. "\n"
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
  return outcome, steps.one_line(msg), health.report(domain, v, { self = self, names = names, json = ctx.json,
    outcome = outcome, message = steps.one_line(msg) })
end

return P
