-- SPDX-License-Identifier: Apache-2.0
--- Membership by slots (`membership = "slots"`; docs/design.md, "Membership by slots"): the room of
-- the steps that read and write the name map. Before the lock, step 2 makes `want` a slot want
-- (M.want: the domain's slot list, the job's slots). Under the node lock: step 5 finds a daemon that
-- does not read the map it is given stale (M.assess); step 7 builds the map whole before a (re)start
-- and checks the unit binds it (M.restart); a prolog with nothing to restart switches its job's slots
-- in (M.apply) and, when it ends non-zero, out again (M.settle); the epilog and `forget` switch the
-- job's slots out (M.unmap). Every switch of a running daemon is followed by SIGUSR1 (M.signal: the
-- version floor, the daemon's 5 s window), and a removal is waited for until the removed slots no
-- longer have a CONNECTED link from this node (M.verify_removed). The layout of the file and the
-- names are imexguard.slots'.
local base = require("imexguard.steps.base")
local slots = require("imexguard.slots")
local text = require("imexguard.text")
-- Loaded when first used (imexguard.lazy).
local lazy = require("imexguard.lazy")
local desired, restart_room, applies = lazy("imexguard.steps.desired", "imexguard.steps.restart",
  "imexguard.steps.applies")
local state, registry, health, nudge, hostlist = lazy("imexguard.state", "imexguard.registry",
  "imexguard.health", "imexguard.nudge", "imexguard.hostlist")

local fail, node_name, one_line = base.fail, base.node_name, text.one_line

local M = {}

--- Seconds a removal is waited for (two of the daemon's 5 s windows and its first retries), within
-- the run's budget.
M.UNMAP_WAIT = 12

--- Is membership by slots in force (the setting `membership`)?
function M.enabled(ctx)
  return base.setting(ctx, "membership", "list") == "slots"
end

--- The map's path (the setting `slot_hosts`).
function M.path(ctx)
  return base.setting(ctx, "slot_hosts", "/run/imexguard/hosts")
end

-- The domain's member named like a job's node: the same name, else its short form (a host name
-- "gb01.cluster" where the map names Slurm's "gb01": imexguard.domains.domain_of).
local function member_of(by_node, n)
  return by_node[n] or by_node[(tostring(n):match("^[^.]+"))]
end

--- Step 2 in slots mode: `want` of the job's nodes in this node's domain (steps.desired) made a slot
-- want (steps.desired's set_slots): the slot list of the whole domain, the job's slots.
-- @param want table steps.desired's (domain with members)
-- @return want, or nil, "bad-input", message (no domain map, a node name that is no slot name)
function M.want(ctx, want)
  local dom, node = want.domain, node_name(ctx)
  if not (dom and dom.members) then
    return fail("bad-input", "node %s: membership = \"slots\" needs an IMEX domain map (Slurm's block "
      .. "topology or the address map's domain column; setting domain_map), not %s; nothing changed", node,
      dom and dom.source or "none")
  end
  local list, bytes = slots.list(dom.members)
  if not list then
    return fail("bad-input", "node %s: IMEX domain %s: %s; nothing changed", node, tostring(dom.name), bytes)
  end
  local by_node, names = {}, {}
  for i, n in ipairs(dom.members) do by_node[n], names[list[i]] = list[i], n end
  local job, addr_of = {}, {}
  for i, n in ipairs(want.list) do
    local s = member_of(by_node, n)
    job[i], addr_of[s] = s, want.addrs[i]
  end
  local self = member_of(by_node, want.names[want.self])
  desired.set_slots(want, { list = list, bytes = bytes, job = job, self = self, addr_of = addr_of,
    names = names, domain = dom.name })
  return want
end

-- The slots in force for the registered jobs other than `except` (their registry field `slots`).
local function registered(st, except)
  local out = {}
  for _, e in ipairs(registry.jobs(st)) do
    if e.id ~= except then
      for _, s in ipairs(slots.of_field(e.slots)) do out[#out + 1] = s end
    end
  end
  return out
end

--- The map this node's daemon must resolve: its own slot, the registered jobs' slots, and `job`'s.
-- @param st table state (the registry)
-- @param self string this node's slot
-- @param job list|nil the running prolog's job's slots
-- @param except string|nil a job id whose registration does not count (it is being removed)
-- @return set {[slot] = true}
function M.wanted(st, self, job, except)
  return slots.union({ self }, registered(st, except), job)
end

--- The map as it is: the file read and parsed.
-- @return bytes, map (imexguard.slots.parse's), or nil, message, code ("ENOENT": no map yet)
function M.read(ctx)
  local path = M.path(ctx)
  local bytes, err, code = ctx.host.read(path, base.MAX_FILE)
  if not bytes then return nil, string.format("%s unreadable (%s)", path, tostring(err)), code end
  local map, perr = slots.parse(bytes)
  if not map then
    return nil, string.format("%s is not a name map imexguard wrote: %s", path, perr), "layout"
  end
  return bytes, map
end

--- Does the running daemon resolve through the map (its /etc/hosts the inode of slot_hosts: a bind
-- mount holds an inode, docs/design.md)? Read through /proc/MAINPID/root (host.stat).
-- @param props table the unit's properties (main_pid)
-- @return true, false (another file), or nil (unknown: no main process, /proc unreadable), message
function M.bound(ctx, props)
  local pid = type(props) == "table" and tonumber(props.main_pid) or 0
  if not pid or pid <= 0 then return nil, "no main process" end
  local mine, merr = ctx.host.stat(M.path(ctx))
  local theirs, terr = ctx.host.stat(string.format("/proc/%d/root/etc/hosts", pid))
  if not (mine and theirs) then return nil, tostring(merr or terr) end
  return mine.ino == theirs.ino and mine.dev == theirs.dev, nil
end

--- Step 5 in slots mode: a daemon that is current by the stages of steps.assess_daemon is still stale
-- when the map is missing or not the domain's, holds another address for a node of the job, or is not
-- the file the daemon resolves through. Sets a.action = "restart" and a.reason then.
-- @param a table the assessment (changed in place)
function M.assess(ctx, want, a)
  if a.action ~= "none" then return end
  local path, why = M.path(ctx), nil
  local _, map, code = M.read(ctx)
  if not map then
    why = code == "ENOENT" and ("no name map " .. path .. " yet") or map
  else
    for i, s in ipairs(want.slots.list) do
      if map.names[i] ~= s then
        why = path .. " maps other slots than IMEX domain " .. tostring(want.slots.domain)
      end
    end
    if #map.names ~= #want.slots.list then why = path .. " maps other slots than the domain's" end
    for _, s in ipairs(want.addrs) do
      if not why and map.addr[s] ~= want.slots.addr_of[s] then
        why = string.format("%s maps %s to %s, its address is now %s", path, s, tostring(map.addr[s]),
          tostring(want.slots.addr_of[s]))
      end
    end
  end
  if not why and M.bound(ctx, a.unit) == false then
    why = "the daemon's /etc/hosts is not " .. path .. " (started before it was written, or the unit has no "
      .. "drop-in binding it)"
  end
  if why then a.action, a.reason, a.answer = "restart", "membership by slots: " .. why, nil end
end

--- The addresses of every slot of the domain: the job's (want.slots.addr_of) and the others' through
-- `lookup` (the policy's address source).
-- @return {[slot] = address}, or nil, outcome, message
local function all_addresses(ctx, want, lookup)
  local addrs, others = {}, {}
  for s, a in pairs(want.slots.addr_of) do addrs[s] = a end
  for _, s in ipairs(want.slots.list) do
    if not addrs[s] then others[#others + 1] = want.slots.names[s] end
  end
  if #others == 0 then return addrs end
  local found, err, code = lookup(ctx, others)
  if not found then
    return fail(base.by_code(code, "bad-input"), "node %s: membership by slots: the addresses of IMEX domain "
      .. "%s: %s; nothing changed", node_name(ctx), tostring(want.slots.domain), tostring(err))
  end
  for i, n in ipairs(others) do addrs[slots.name(n)] = found[i] end
  return addrs
end

--- Step 7 in slots mode: build the map whole (a new inode, host.write_atomic) for the daemon about
-- to (re)start, then the (re)start (steps.restart), then check that the new daemon resolves through
-- it (the unit's drop-in binds it over /etc/hosts).
-- @param lookup function(ctx, names) -> addresses: the policy's address source
-- @return as steps.restart: true, props, or nil, outcome, message
function M.restart(ctx, want, assessment, st, info, lookup)
  local addrs, o, m = all_addresses(ctx, want, lookup)
  if not addrs then return nil, o, m end
  local on = M.wanted(st, want.self, want.addrs)
  local bytes, berr = slots.build(want.slots.list, addrs, on)
  if not bytes then
    return fail("bad-input", "node %s: membership by slots: %s; nothing changed", node_name(ctx),
      tostring(berr))
  end
  local path = M.path(ctx)
  local ok, err, code = ctx.host.write_atomic(path, bytes, tonumber("644", 8))
  if not ok then
    return fail(base.by_code(code, "write-failed"), "node %s: writing the name map %s failed: %s%s",
      node_name(ctx), path, tostring(err), base.root_hint(ctx.host, code, err))
  end
  ctx.host.log("info", one_line(string.format("membership by slots: name map %s built for IMEX domain %s "
    .. "(%d slots, in force: %s)", path, tostring(want.slots.domain), #want.slots.list, M.in_force_text(on,
    want.slots))))
  local rok, props, rm = restart_room.restart(ctx, want, assessment, st, info)
  if not rok then return nil, props, rm end
  if M.bound(ctx, props) == false then
    return fail("service-failed", "node %s: %s does not resolve through the name map %s: its /etc/hosts is "
      .. "another file; install contrib/slots/imexguard-slots.conf as a drop-in of %s (BindReadOnlyPaths=-%s:"
      .. "/etc/hosts) and run systemctl daemon-reload", node_name(ctx), ctx.settings.unit, path,
      ctx.settings.unit, path)
  end
  return true, props
end

--- The slots of a set for a person: their Slurm names compressed ("gb[01-03]").
-- @param on table set {[slot] = true}
-- @param rec table|nil want.slots (its list gives the order), else the set's names sorted
function M.in_force_text(on, rec)
  local nodes = {}
  local order = rec and rec.list
  if not order then
    order = {}
    for s in pairs(on) do order[#order + 1] = s end
    table.sort(order)
  end
  for _, s in ipairs(order) do
    if on[s] then nodes[#nodes + 1] = slots.node_of(s) or s end
  end
  return #nodes == 0 and "none" or hostlist.text_in_order(nodes)
end

-- ---------------------------------------------------------------------------------------------
-- The switch: SIGUSR1 within the version floor and the daemon's window.

-- This node's daemon in a mesh (its slot's row), from `answer`, the run's last ctl answer
-- (ctx.mesh_seen), else one ctl call now. A row in which the daemon did not answer for itself (not
-- READY: the ctl shows an unreachable node UNAVAILABLE with an empty version) tells nothing of its
-- version: the ctl is asked once more.
local function own_row(ctx, self, answer, info)
  local mesh = answer and answer.mesh or rawget(ctx, "mesh_seen")
  local row = mesh and mesh.by_host and mesh.by_host[self]
  if row and row.status == "READY" then return row end
  local ans = health.probe(ctx, nil, info and info.config, info and info.cfg)
  return ans.mesh and ans.mesh.by_host and ans.mesh.by_host[self] or row, ans
end

-- When imexguard last signalled this daemon instance (this run's ctx.usr1_at, the state file's
-- usr1_at for the same InvocationID), monotonic seconds, or nil.
local function last_signal(ctx, st, props)
  local last = rawget(ctx, "usr1_at")
  if type(st.usr1_at) == "number" and st.usr1_invocation == props.invocation_id then
    last = math.max(last or st.usr1_at, st.usr1_at)
  end
  if last and last > ctx.host.now() then return nil end -- another boot's clock
  return last
end

--- Send SIGUSR1 to the unit's daemon (host.unit_kill through systemd) so that it resolves the
-- changed map: only to a running daemon whose version passes nudge.version_allows (C48), and
-- outside its 5 s window (the daemon ignores a second signal within it: nudge.INTERVAL + SLACK after
-- the last one imexguard sent). Records the time in ctx.usr1_at and the state file (usr1_at,
-- usr1_invocation; saved).
-- @param o table {self = this node's slot, must = wait out the window (a removal) instead of leaving
--   the change to the daemon's retries (an addition), answer = a ctl answer to read the version
--   from, info = applies' (the ctl's config)}
-- @return "sent" | "deferred" (in the window, not must) | "idle" (no running daemon), or nil,
--   "floor" | "failed", message
function M.signal(ctx, st, o)
  local host, s = ctx.host, ctx.settings
  local props = host.unit(s.unit)
  if not props or props.active_state ~= "active" or (tonumber(props.main_pid) or 0) <= 0 then
    return "idle"
  end
  local row = own_row(ctx, o.self, o.answer, o.info)
  local ok, why = nudge.version_allows(row and row.version, s)
  if not ok then return nil, "floor", why end
  local last = last_signal(ctx, st, props)
  local wait = last and (last + nudge.INTERVAL + nudge.SLACK - host.now()) or 0
  if wait > 0 then
    if not o.must then return "deferred" end
    if wait > host.remaining() - 1 or not host.sleep(wait) then
      return nil, "failed", string.format("no time left to wait %.1f s for the daemon's SIGUSR1 window", wait)
    end
  end
  local kok, err, code = host.unit_kill(s.unit, nudge.SIGUSR1, nudge.KILL_TIMEOUT)
  if not kok then
    return nil, "failed", string.format("SIGUSR1 to %s failed: %s (%s)", s.unit, tostring(err),
      tostring(code))
  end
  local now = host.now()
  rawset(ctx, "usr1_at", now)
  st.usr1_at, st.usr1_invocation = now, props.invocation_id
  local sok, serr = state.save(host, s, st)
  if not sok then host.log("warning", one_line("state file not updated: " .. tostring(serr))) end
  return "sent"
end

--- After a removal: poll the ctl until no link of this node's daemon to a removed slot is
-- CONNECTED (the daemon dropped its channels and resolves the sentinel), signalling again when the
-- window allows, up to M.UNMAP_WAIT seconds within the budget.
-- @param o table {self, removed = list of slots, info}
-- @return true, or false, message naming the links that stayed CONNECTED
function M.verify_removed(ctx, st, o)
  local host = ctx.host
  local until_t = host.now() + math.max(0, math.min(M.UNMAP_WAIT, host.remaining() - 1))
  while true do
    local ans = health.probe(ctx, nil, o.info and o.info.config, o.info and o.info.cfg)
    if ans.kind == "unreachable" then return true end -- no daemon: no link
    local row = ans.mesh and ans.mesh.by_host and ans.mesh.by_host[o.self]
    local still = {}
    for _, r in ipairs(row and o.removed or {}) do
      if row.connections[r] == "CONNECTED" then still[#still + 1] = slots.node_of(r) or r end
    end
    if row and #still == 0 then return true end
    if host.now() >= until_t then
      return false, row and ("still CONNECTED to " .. hostlist.text_in_order(still))
        or ("the ctl did not show this node: " .. tostring(ans.err))
    end
    M.signal(ctx, st, { self = o.self, must = false, answer = ans, info = o.info })
    if not host.sleep(math.min(ctx.settings.poll_interval, math.max(0.01, until_t - host.now()))) then
      return false, "the deadline passed"
    end
  end
end

-- ---------------------------------------------------------------------------------------------
-- Switching slots in and out of the map in place.

--- Write the map with the slots of `on` in force (switch bytes only, host.write_in_place) and tell
-- the daemon (M.signal; a removal is waited for, M.verify_removed).
-- @param o table {self = this node's slot, info = applies' or nil, what = "job 101's prolog" (log)}
-- @return changes {added, removed, signal = M.signal's result or nil}, or nil, outcome, message
function M.switch(ctx, st, on, o)
  local host, path = ctx.host, M.path(ctx)
  local bytes, map, code = M.read(ctx)
  if not bytes then
    if code == "ENOENT" then return { added = {}, removed = {} } end -- no map: nothing in force
    return fail("write-failed", "node %s: %s", node_name(ctx), map)
  end
  local new, ch = slots.switch(bytes, map, on)
  if new == bytes and #ch.added == 0 and #ch.removed == 0 then return ch end
  local ok, err, wcode = host.write_in_place(path, new)
  if not ok then
    return fail(base.by_code(wcode, "write-failed"), "node %s: the name map %s not switched: %s%s",
      node_name(ctx), path, tostring(err), base.root_hint(host, wcode, err))
  end
  host.log("info", one_line(string.format("membership by slots: %s: name map %s: in force %s; added %s, "
    .. "removed %s", o.what, path, M.in_force_text(on, { list = map.names }),
    M.in_force_text(slots.union(ch.added)), M.in_force_text(slots.union(ch.removed)))))
  local sig, why, msg = M.signal(ctx, st, { self = o.self, must = #ch.removed > 0, info = o.info })
  ch.signal = sig or why
  if not sig then ch.message = msg end
  if sig == "sent" and #ch.removed > 0 then
    local gone, gmsg = M.verify_removed(ctx, st, { self = o.self, removed = ch.removed, info = o.info })
    if not gone then ch.message = gmsg end
  end
  return ch
end

--- A prolog with nothing to restart: switch the job's slots in before the health wait. A daemon
-- below the SIGUSR1 floor is config-fault (the mode cannot take nodes out of its map later).
-- @return true, or nil, outcome, message
function M.apply(ctx, st, want, info)
  local what = "job " .. base.job_id(ctx) .. "'s prolog"
  local ch, o, m = M.switch(ctx, st, M.wanted(st, want.self, want.addrs), { self = want.self, info = info,
    what = what })
  if not ch then return nil, o, m end
  if ch.signal == "floor" then
    return fail("config-fault", "node %s: membership = \"slots\" cannot run here: %s; set membership = "
      .. "\"list\" for this rack", node_name(ctx), tostring(ch.message))
  end
  if ch.message then ctx.host.log("warning", one_line(what .. ": " .. ch.message)) end
  return true
end

--- After the health wait: a daemon below the SIGUSR1 floor (its version as the last answer shows it)
-- is config-fault, whatever the wait said.
-- @return outcome, message
function M.after_wait(ctx, want, outcome, msg)
  local outcomes = require("imexguard.outcomes")
  if outcomes.exit_code(outcome, ctx.settings) ~= 0 then return outcome, msg end
  local mesh = rawget(ctx, "mesh_seen")
  local row = mesh and mesh.by_host and mesh.by_host[want.self]
  local ok, why = nudge.version_allows(row and row.version, ctx.settings)
  if ok then return outcome, msg end
  return "config-fault", one_line(string.format("node %s: membership = \"slots\" cannot run here: %s; set "
    .. "membership = \"list\" for this rack; %s", node_name(ctx), tostring(why), msg))
end

--- The map without a job: the epilog and `forget` (its entry removed from st), and a prolog that
-- ends non-zero (its job not registered). The slots of the jobs still registered stay in force.
-- Only for a daemon that runs a slot list (the state file's running_nodes) and a map that exists.
-- @param id string the job's id (log)
-- @return nil, or outcome, message (the map could not be written: the job's slots are still in force)
function M.unmap(ctx, st, id)
  local self = slots.name(node_name(ctx))
  if not slots.parse_list(st.running_nodes) then return nil end
  local info = applies.applies(ctx)
  local what = "job " .. tostring(id) .. " ended"
  local ch, o, m = M.switch(ctx, st, M.wanted(st, self), { self = self, info = info or nil, what = what })
  if not ch then return o, m end
  if ch.message then
    ctx.host.log("warning", one_line(string.format("%s: the daemon may keep links to job %s's nodes until "
      .. "they break: %s", what, tostring(id), ch.message)))
  end
  return nil
end

--- The end of a prolog: a nudge of its health wait (ctx.usr1_at) recorded in the state file, so
-- that the next run knows the daemon's window; and when it ends non-zero, its job's slots out of the
-- map again (it is not registered).
-- @return outcome, message (unchanged; a failed switch is added to the message)
function M.settle(ctx, st, want, outcome, msg)
  local outcomes = require("imexguard.outcomes")
  local at = rawget(ctx, "usr1_at")
  if at and at ~= st.usr1_at then
    st.usr1_at, st.usr1_invocation = at, st.invocation_id
    local ok, err = state.save(ctx.host, ctx.settings, st)
    if not ok then ctx.host.log("warning", one_line("state file not updated: " .. tostring(err))) end
  end
  if outcomes.exit_code(outcome, ctx.settings) == 0 then return outcome, msg end
  local id = base.job_id(ctx)
  local ch, _, m = M.switch(ctx, st, M.wanted(st, want.self, nil, id), { self = want.self,
    what = "job " .. id .. "'s prolog failed" })
  if not ch then msg = msg .. "; " .. tostring(m) end
  return outcome, one_line(msg)
end

-- ---------------------------------------------------------------------------------------------
-- What plan and status show.

--- plan: the slot list and what the prolog would do to the map (nothing is changed).
-- @param st table state (the registry)
-- @param want table a slot want (M.want)
-- @param a table the assessment (a restart builds the map anew)
-- @return facts {path, domain, slots = {{slot, node, now = boolean|nil (nil: no map), after =
--   boolean}}, added = list, removed = list, signal = "SIGUSR1" | "none" | "at start"}
function M.plan_facts(ctx, st, want, a)
  local on = M.wanted(st, want.self, want.addrs)
  local _, map = M.read(ctx)
  local f = { path = M.path(ctx), domain = want.slots.domain, slots = {}, added = {}, removed = {} }
  for i, sl in ipairs(want.slots.list) do
    local now = map and map.on and map.on[sl] or false
    if not (map and map.on) then now = nil end
    f.slots[i] = { slot = sl, node = want.slots.names[sl], now = now, after = on[sl] == true }
    if on[sl] and not now then f.added[#f.added + 1] = want.slots.names[sl] end
    if now and not on[sl] then f.removed[#f.removed + 1] = want.slots.names[sl] end
  end
  f.signal = a.action ~= "none" and "at start" or ((#f.added + #f.removed > 0) and "SIGUSR1" or "none")
  return f
end

--- plan's lines of the mode (text).
-- @param f table M.plan_facts'
-- @param r table lines (appended to)
function M.plan_lines(f, r)
  local nodes, after, now = {}, {}, {}
  for _, x in ipairs(f.slots) do
    nodes[#nodes + 1] = x.node
    if x.after then after[#after + 1] = x.node end
    if x.now then now[#now + 1] = x.node end
  end
  r[#r + 1] = string.format("membership: slots: IMEX domain %s's slot list %s (NODE%s), name map %s",
    tostring(f.domain), hostlist.text_in_order(nodes), slots.SUFFIX, f.path)
  local change = {}
  if #f.added > 0 then change[#change + 1] = "+" .. hostlist.text_in_order(f.added) end
  if #f.removed > 0 then change[#change + 1] = "-" .. hostlist.text_in_order(f.removed) end
  r[#r + 1] = string.format("name map: in force now %s; would put in force %s%s; signal: %s",
    #now > 0 and hostlist.text_in_order(now) or "none", hostlist.text_in_order(after),
    #change > 0 and (" (" .. table.concat(change, " ") .. ")") or "", f.signal)
end

--- status: the mode in force and, with slots, the name map's slots in force (reads only).
-- @return fact {mode = "list"|"slots", path = slot_hosts (slots), in_force = list of node names
--   (nil: no map), error = why the map cannot be read (nil)}
function M.fact(ctx)
  if not M.enabled(ctx) then return { mode = "list" } end
  local f = { mode = "slots", path = M.path(ctx) }
  local _, map, code = M.read(ctx)
  if not _ then
    if code ~= "ENOENT" then f.error = map end
    return f
  end
  f.in_force = {}
  for _, sl in ipairs(slots.in_force(map)) do f.in_force[#f.in_force + 1] = slots.node_of(sl) end
  return f
end

--- The fact as status' line.
-- @param f table|nil M.fact's
-- @return string
function M.fact_line(f)
  if type(f) ~= "table" or f.mode ~= "slots" then return "list (a new node list restarts the daemon)" end
  if f.error then return "slots: " .. f.error end
  if not f.in_force then return "slots: no name map " .. f.path .. " yet (the next prolog builds it)" end
  return string.format("slots: name map %s, in force %s; the other slots refuse", f.path,
    #f.in_force > 0 and hostlist.text_in_order(f.in_force) or "none")
end

--- config-test's findings of membership by slots (the -t framework's shape, phase 2 of issue 32):
-- slots with domain_map = "none" cannot work (no domain, no slot list: every prolog ends bad-input).
-- @return list of {level = "error"|"warning", file = nil, line = nil, message = string}
function M.findings(ctx)
  if not M.enabled(ctx) then return {} end
  local out = {}
  if base.setting(ctx, "domain_map", "auto") == "none" then
    out[#out + 1] = { level = "error", message = "membership = \"slots\" needs an IMEX domain map, and "
      .. "domain_map = \"none\" defines none: every prolog would end bad-input" }
  end
  return out
end

return M
