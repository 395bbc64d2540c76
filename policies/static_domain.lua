-- SPDX-License-Identifier: Apache-2.0
--- Site policy: a static IMEX domain. The daemon is started at boot with a fixed node list (the
-- whole rack, written once by the admin or the image), and Slurm's switch/nvidia_imex plugin hands
-- each job its IMEX channel. imexguard then never rewrites nodes_config.cfg and never starts,
-- restarts or stops the unit; the prolog only verifies, with the default policy's steps:
--   1. IMEX applies (steps.applies: unit installed and enabled, config.cfg present);
--   2. the job's node list in this node's IMEX domain (steps.desired: the domain map, hostlist ->
--      addresses, checked, this node in it). The domain map (setting domain_map, imexguard.domains)
--      is Slurm's block topology or the address map's domain column when the site has one, else
--      the static list itself: the job's nodes in it are this node's domain, the others belong to
--      another rack (their own static list) or are no IMEX nodes, and are left out (C29, C30);
--   3. every node of the job in this node's domain is in the static list, else bad-input naming
--      the nodes that are not (with domain_map = "none": every node of the job); entries may be
--      host names (C35: driver 570.158.01+), resolved as the job's nodes are (address_source); a
--      name that does not resolve is named (a warning, and in the bad-input);
--   4. the unit is active (activating: wait, bounded by start_timeout), else domain-unhealthy:
--      this node's daemon is down and imexguard will not start it (a failed unit: with its daemon's
--      last error line, and who holds the IMEX session for NV_ERR_IN_USE, C50);
--   5. this node's GPUs on the NVLink fabric, as the built-in policy checks them (its
--      P:check_fabric, waiting while a GPU registers: C31, C41-C43): a fault of this node's GPUs,
--      or NVML that cannot start, ends the prolog before the health wait; a degraded fabric is
--      named in the final line;
--   6. the job's nodes are healthy: the default's health wait (health.wait), with a judge of its
--      own over the JOB'S nodes only (this node READY, every other job node present, READY and
--      connected from here); nodes of the rack outside the job do not hold the job up (they are
--      named).
-- Outcomes are the default's (peers-unhealthy follows on_peer_fault). No lock, no state file, no
-- job registry: nothing on the node changes. The epilog has nothing to do. status is the
-- default's; plan reports the same checks without waiting.
-- With membership = "slots" (docs/design.md, "Membership by slots") the static list is the domain's
-- slot list (NODE.imexguard.invalid, the admin's, written once), its names the nodes' through the
-- address source; the daemon still starts at boot and is never restarted here, and the job's nodes
-- are switched into its name map: under the node lock, the prolog puts the job's slots in force
-- (building the map when there is none: the unit must then be restarted once by the site to bind
-- it) and signals the daemon, the health wait is per job, and the epilog puts them back on the
-- sentinel. Nodes are taken to be exclusive (no registry: the epilog keeps only this node's slot).
local steps = require("imexguard.steps")
local text = require("imexguard.text")
local health = require("imexguard.health")
local nodelist = require("imexguard.nodelist")
local hostlist = require("imexguard.lazy")("imexguard.hostlist") -- only to name the nodes (a log line)
local daemonlog = require("imexguard.lazy")("imexguard.daemonlog") -- only for a failed unit
local addresses = require("imexguard.addresses")
local ctl = require("imexguard.ctl")
local cmdtarget = require("imexguard.cmdtarget")
local verdict = require("imexguard.verdict")
local default = require("policies.default")
local lazy = require("imexguard.lazy")
local slots_room, slotnames, state = -- the first two for membership = "slots"
  lazy("imexguard.steps.slots", "imexguard.slots", "imexguard.state")

local P = {}

--- The daemon runs at all times, from boot: IMEX is expected on this node also while no job runs
-- (the node condition's reason "static-domain", imexguard.expected).
P.imex_always_expected = true

local fail = steps.fail

-- Step 2 with the static list as the domain map (C29): the job's nodes in it (in_domain: its
-- addresses) are this node's domain, the others are another rack's (their own static list) or no
-- IMEX node's; neither is waited for. want carries the static list (node_list, by_entry:
-- steps.set_node_list), which the narrowed want keeps (steps.narrow).
-- @return the narrowed want, or nil, outcome, message
local function narrow(ctx, info, want, in_domain, node)
  local names, addrs, left = {}, {}, {}
  for _, n in ipairs(want.domain.left_out) do left[#left + 1] = n end -- no address (steps.desired)
  for i, a in ipairs(want.addrs) do
    if in_domain[a] then
      names[#names + 1], addrs[#addrs + 1] = want.list[i], a
    else
      left[#left + 1] = want.list[i]
    end
  end
  local dom = want.domain
  local narrowed, werr = steps.narrow(ctx, info, want, names, addrs)
  if not narrowed then return fail("bad-input", "%s; nothing changed", werr) end
  dom.source, dom.nodes, dom.left_out = info.nodes_file, names, left
  ctx.host.log("info", text.one_line(string.format("IMEX domain of node %s: the static node list %s: %s%s",
    node, info.nodes_file, hostlist.text_in_order(names), #left > 0 and ("; the job's nodes outside it "
    .. "(another domain, or no IMEX node; not waited for): " .. hostlist.text_in_order(left)) or "")))
  return narrowed
end

-- Step 3: the job's nodes (of this node's domain) that are not in the static list (in_domain: its
-- addresses; count: its entries; bad: the names that do not resolve, as a note).
-- @return true when every one is in it, else nil, "bad-input", message naming them
local function all_in_list(ctx, info, want, in_domain, node, count, bad)
  local outside = {}
  for i, a in ipairs(want.addrs) do
    if not in_domain[a] then outside[#outside + 1] = string.format("%s (%s)", want.list[i], a) end
  end
  if #outside == 0 then return true end
  return fail("bad-input", "job %s: node%s %s not in the static IMEX domain of node %s (%s, %d nodes%s); "
    .. "nothing changed", steps.job_id(ctx), #outside > 1 and "s" or "", table.concat(outside, ", ")
    .. (#outside > 1 and " are" or " is"), node, info.nodes_file, count, bad)
end

-- Step 4: the unit's properties once it settled; with wait, the unit must be active (this policy
-- never starts it); a failed one is named with its daemon's last error line (C50). cfg: config.cfg.
-- @return props, or nil, outcome, message
local function unit_up(ctx, wait, node, cfg)
  local props, o, m = steps.settle_unit(ctx, wait)
  if not props then return nil, o, m end
  local a = props.active_state
  if wait and a ~= "active" and a ~= "reloading" then
    -- C50: a failed unit quotes its daemon's last error line (and who holds the IMEX session)
    local said = a == "failed" and daemonlog.explain(ctx, nil, props, cfg) or ""
    return fail("domain-unhealthy", "node %s: %s is %s (result %s); the static domain is started at boot, "
      .. "this policy never starts it%s", node, ctx.settings.unit, tostring(a), tostring(props.result), said)
  end
  return props
end

-- Membership by slots: the static list's slot names as their nodes' addresses (the address source),
-- as addresses.resolve_list returns them: resolved (a name stays where it has none), by_entry
-- ({[slot] = address}), unresolved ("NAME (why)").
local function slot_addresses(ctx, static)
  local resolved, by_entry, unresolved = {}, {}, {}
  for i, e in ipairs(static) do
    local node = slotnames.node_of(e)
    local a, err
    if node then a, err = addresses.lookup(ctx.host, ctx.settings, { node }) end
    resolved[i] = a and a[1] or e
    if a then
      by_entry[e] = a[1]
    else
      local why = node and tostring(err)
        or ("not a slot name NODE" .. slotnames.SUFFIX .. ": membership = \"slots\" needs the slot list")
      unresolved[#unresolved + 1] = string.format("%s (%s)", e, why)
    end
  end
  return resolved, by_entry, unresolved
end

--- Steps 1-4. @return info, want, props, or nil, outcome, message
local function verify(ctx, wait)
  local info, o, m = steps.applies(ctx)
  if not info then return nil, o, m end
  local want
  want, o, m = steps.desired(ctx, info, { static = true })
  if not want then return nil, o, m end
  local node = steps.node_name(ctx)
  local bytes, rerr = steps.read_node_list(ctx, info)
  if not bytes then return fail("domain-unhealthy", "node %s: static node list %s", node, tostring(rerr)) end
  local static, perr = nodelist.parse(bytes)
  if not static then return fail("domain-unhealthy", "node %s: static node list %s: %s", node,
    info.nodes_file, tostring(perr)) end
  if #static == 0 then
    return fail("domain-unhealthy", "node %s: static node list %s is missing or empty", node, info.nodes_file)
  end
  -- C35: host names in the static list, resolved as the job's nodes are (slot names: their nodes')
  local resolved, _, by_entry, unresolved
  if slots_room.enabled(ctx) then
    resolved, by_entry, unresolved = slot_addresses(ctx, static)
    if #unresolved > 0 then
      return fail("bad-input", "node %s: static node list %s: %s; nothing changed", node, info.nodes_file,
        table.concat(unresolved, ", "))
    end
  else
    resolved, _, by_entry, unresolved = addresses.resolve_list(ctx.host, ctx.settings, static)
  end
  local bad = #unresolved > 0 and ("; names that do not resolve: " .. table.concat(unresolved, ", ")) or ""
  if bad ~= "" then
    ctx.host.log("warning", text.one_line(string.format("node %s: static node list %s%s", node,
      info.nodes_file, bad)))
  end
  local seen = {}
  for i, e in ipairs(static) do
    -- two entries of one address (C35: two names of one tray): the daemon's list is ambiguous
    if seen[resolved[i]] then
      return fail("bad-input", "node %s: static node list %s: %s and %s are both %s; nothing changed", node,
        info.nodes_file, static[seen[resolved[i]]], e, resolved[i])
    end
    seen[resolved[i]] = i
  end
  steps.set_node_list(want, resolved, by_entry) -- the daemon runs the static list, in its order
  local in_domain = {}
  for _, a in ipairs(resolved) do in_domain[a] = true end
  -- a name of the list that does not resolve may be a node of the job: nothing is narrowed then,
  -- every node of the job must be in the resolved list (bad-input naming the names, below)
  if want.domain.kind == "static" and bad == "" then
    want, o, m = narrow(ctx, info, want, in_domain, node)
    if not want then return nil, o, m end
  end
  local inside, props
  inside, o, m = all_in_list(ctx, info, want, in_domain, node, #static, bad)
  if not inside then return nil, o, m end
  props, o, m = unit_up(ctx, wait, node, info.cfg)
  if not props then return nil, o, m end
  if slots_room.enabled(ctx) then want.per_job, want.static_names = true, static end -- readiness per job
  return info, want, props
end

-- Membership by slots, under the node lock: the map with this node's slot and `job`'s in force
-- (built when missing, from the static list: its names and their addresses; switched in place
-- otherwise, and the daemon signalled: steps.slots). A daemon that does not resolve through the map
-- is this node's fault: it must be restarted once by the site to bind it.
-- @param job list|nil the job's node names
-- @return true, or nil, outcome, message
local function switch_map(ctx, want, props, job, info)
  local node, path = steps.node_name(ctx), slots_room.path(ctx)
  local st = state.load(ctx.host, ctx.settings) or {}
  local self = slotnames.name(node)
  local list = {}
  for i, n in ipairs(job or {}) do list[i] = slotnames.name(n) end
  local on = slotnames.union({ self }, list)
  local _, _, code = slots_room.read(ctx)
  if code == "ENOENT" and want then
    local addr_of = {}
    for i, e in ipairs(want.static_names) do addr_of[e] = want.node_list[i] end
    local bytes, berr = slotnames.build(want.static_names, addr_of, on)
    if not bytes then return fail("bad-input", "node %s: static slot list: %s", node, tostring(berr)) end
    local ok, err, wcode = ctx.host.write_atomic(path, bytes, tonumber("644", 8))
    if not ok then
      return fail(steps.by_code(wcode, "write-failed"), "node %s: name map %s: %s", node, path, err)
    end
  end
  if slots_room.bound(ctx, props) == false then
    return fail("domain-unhealthy", "node %s: %s does not resolve through the name map %s (started before it "
      .. "existed, or without the drop-in contrib/slots/imexguard-slots.conf): restart it once; this policy "
      .. "never restarts it", node, ctx.settings.unit, path)
  end
  local ch, o, m = slots_room.switch(ctx, st, on, { self = self, info = info,
    what = "job " .. steps.job_id(ctx) .. (job and "'s prolog" or " ended") })
  if not ch then return nil, o, m end
  if ch.signal == "floor" then
    return fail("config-fault", "node %s: membership = \"slots\" cannot run here: %s", node,
      tostring(ch.message))
  end
  if ch.message then ctx.host.log("warning", text.one_line(ch.message)) end
  return true
end

--- The verdict over the job's nodes only (nodes of the domain outside the job are ignored): the
-- judge of health.wait (its contract there).
local function judge(answer, want)
  -- C35: the ctl may show a host name of the static list where the job has its address
  answer = ctl.map_answer_hosts(answer, want.by_entry)
  -- the daemon runs the static list (its order, not the job's); a configuration fault blames nobody
  local v = verdict.judge(answer, want)
  if not v or v.local_fault or v.verdict == "config-fault" then return v end
  local job = {}
  for _, a in ipairs(want.addrs) do job[a] = true end
  local faulty, outside = {}, {}
  for _, f in ipairs(v.faulty) do
    if job[f.host] then faulty[#faulty + 1] = f else outside[#outside + 1] = f.host end
  end
  local r = { status = v.status, local_fault = false, faulty = faulty, summary = v.summary,
    outside = outside }
  r.healthy = #v.missing == 0 and #faulty == 0
  if r.healthy then
    local note = #outside > 0 and string.format(" (outside the job: %s not healthy)",
      table.concat(outside, " ")) or ""
    r.healthy_message = string.format("the job's %d nodes are healthy in the static domain %s%s", #want.addrs,
      tostring(v.status), note)
  end
  return r
end

--- The prolog: verify (steps 1-4 of the header) and wait for the job's nodes to be healthy;
-- nothing is written, started or restarted.
-- @tparam table ctx the run's context (docs/policy-api.md, "The context table `ctx`")
-- @treturn string outcome (`ok`, or the failing check's outcome)
-- @treturn string one-line message
function P.prolog(ctx)
  local info, want, props = verify(ctx, true)
  if not info then return want, props end
  local r, fo, fm = default.check_fabric(default, ctx, want, true)
  if not r then return fo, fm end
  local fabric_note = (r.state == "unknown" or r.state == "degraded" or (r.polls or 0) > 1)
    and ("; fabric: " .. r.message) or ""
  if slots_room.enabled(ctx) then
    local guard, o, gm = steps.lock(ctx)
    if not guard then return o, gm end
    local lk <close> = guard -- luacheck: ignore lk
    local ok, so, sm = switch_map(ctx, want, props, want.list, info)
    if not ok then return so, sm end
    local outcome, msg = health.wait(ctx, want, nil, judge)
    if require("imexguard.outcomes").exit_code(outcome, ctx.settings) ~= 0 then
      switch_map(ctx, nil, props, nil, info) -- the job's slots out again
    end
    return outcome, text.one_line(msg .. fabric_note .. "; static domain with slots: the job's nodes "
      .. "switched into the name map, nothing rewritten or restarted")
  end
  local outcome, msg = health.wait(ctx, want, nil, judge)
  return outcome, text.one_line(msg .. fabric_note .. "; static domain: nothing rewritten or restarted")
end

--- The epilog: nothing to do on a static domain.
-- @tparam table ctx the run's context
-- @treturn string outcome `ok`
-- @treturn string one-line message naming the job and the node
function P.epilog(ctx)
  if slots_room.enabled(ctx) then
    local guard, o, gm = steps.lock(ctx)
    if not guard then return o, gm end
    local lk <close> = guard -- luacheck: ignore lk
    local ok, so, sm = switch_map(ctx, nil, ctx.host.unit(ctx.settings.unit), nil, nil)
    if not ok then return so, sm end
    return "ok", string.format("job %s: static domain with slots: node %s's name map back to its own slot",
      steps.job_id(ctx), steps.node_name(ctx))
  end
  return "ok", string.format("job %s: static domain, nothing to do on node %s", steps.job_id(ctx),
    steps.node_name(ctx))
end

--- Plan: the prolog's checks without waiting, one ctl answer with config.cfg's warning of C44, and
-- one read of the fabric (the built-in policy's fabric_verdict: a fault of this node's GPUs replaces
-- ok); changes nothing.
-- @tparam table ctx the run's context
-- @treturn string outcome (`ok`, or the failing check's outcome)
-- @treturn string one-line message
-- @treturn[opt] string the report printed on stdout (the message and a newline)
function P.plan(ctx)
  local info, want, props = verify(ctx, false)
  if not info then return want, props end
  local answer = health.probe(ctx, nil, info.config, info.cfg)
  local v = judge(answer, want)
  local now = answer.mesh and answer.mesh.status or answer.err
  local msg = string.format("static domain: would verify only (job's %d nodes in %s; %s %s; domain now %s%s)",
    #want.addrs, info.nodes_file, ctx.settings.unit, tostring(props.active_state), tostring(now),
    v and (v.healthy and ", job's nodes healthy" or ", job's nodes not healthy") or "")
  -- C44: a command service on every interface of a host without IPv6 (the prolog asks with -i)
  for _, f in ipairs(cmdtarget.findings(ctx, info.cfg, info.config)) do
    msg = msg .. "; config warning: " .. f.message
  end
  local outcome
  outcome, msg = default.fabric_verdict(default, ctx, want, "ok", text.one_line(msg))
  return outcome, msg, default.fabric_report(default, ctx, msg .. "\n")
end

P.status = default.status

return P
