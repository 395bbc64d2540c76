-- SPDX-License-Identifier: Apache-2.0
--- Domain health: query `nvidia-imex-ctl -N -j`, wait for health by polling, blame the right node
-- (the staleness probe and the health wait; field cases C06, C13, C20, C21, C22 of docs/design.md).
-- The status table that shows a mesh is imexguard.report's.
local ctl = require("imexguard.ctl")
local verdict = require("imexguard.verdict")
local imexcfg = require("imexguard.imexcfg")
local cmdtarget = require("imexguard.cmdtarget")
local one_line = require("imexguard.text").one_line
local settings_schema = require("imexguard.settings")
local pace = require("imexguard.pace")
local nudge = require("imexguard.nudge")
local progress_of = require("imexguard.progress")

local M = {}

--- Largest ctl output kept (bytes per stream). `-N -j` grows as n^2: every node lists its connection
-- to every node, about 100 bytes each as the daemon indents it (tests/fixtures/ctl/up-2node-570.json),
-- so 1 MiB ends at about 100 nodes and 576 nodes print 33 MB. A longer answer is cut, hence not JSON,
-- hence "malformed". The buffer grows with what the ctl prints (run.c), not to this cap.
M.MAX_OUTPUT = 64 * 1024 * 1024
--- Seconds kept back from the run's budget so that a timed-out wait still ends in a named outcome.
M.MARGIN = 0.5
--- Consecutive polls with the same configuration-fault verdict after which `wait` stops early.
M.CONFIG_FAULT_POLLS = 3
--- Outcome of an established configuration fault (C22): exit 14, or 0 with on_config_fault =
-- "warn" (imexguard.outcomes).
M.CONFIG_FAULT_OUTCOME = "config-fault"
--- Outcome of a stale node-map mismatch (C32, verdict "stale-mismatch"): exit 19. The prolog
-- restarts its own daemon once where it may (default policy, Policy:wait_converged); this outcome
-- is what remains, with the remedy, on every node of the pair.
M.STALE_MISMATCH_OUTCOME = "stuck-mismatch"

--- argv of `nvidia-imex-ctl -c CONFIG -N -j` from the settings, or with the target of
-- imexguard.cmdtarget.args instead of `-c CONFIG`: `-u SOCKET` when the daemon's command service
-- listens on a unix socket only (C37), `-i ADDRESS PORT` on a host without IPv6 whose config.cfg
-- leaves IMEX_CMD_BIND_INTERFACE_IP empty (C44: `-c` alone would dial [::]).
-- @param settings table (ctl: string or list of strings; imex_config)
-- @param config string|nil the daemon's config.cfg (steps.daemon_config: from the unit's
--   ExecStart, C28); default settings.imex_config
-- @param cfg table|nil that config, parsed (imexcfg.parse); nil: `-c`
-- @param ipv6 boolean|nil whether the host has IPv6 (cmdtarget.ipv6_for; nil: unknown, as yes)
-- @return list of strings
function M.ctl_argv(settings, config, cfg, ipv6)
  local argv = cmdtarget.args(cfg, config or settings.imex_config, ipv6)
  argv[#argv + 1], argv[#argv + 2] = "-N", "-j"
  return settings_schema.command_argv(settings.ctl, argv)
end

--- Run the ctl once and parse its answer.
-- @param ctx table policy context
-- @param timeout number|nil seconds (default settings.ctl_timeout)
-- @param config string|nil the daemon's config.cfg for the ctl's `-c` (default settings.imex_config)
-- @param cfg table|nil that config, parsed: a command service on a unix socket only is reached with
--   `-u` (M.ctl_argv)
-- @return answer table: {mesh = mesh} when parsed, else {err = one-line message, kind =
--   "unreachable"|"unconfigured"|"malformed"|"timeout"|"deadline"|"exec"} (kinds of ctl.parse_mesh,
--   or of the run: hang, budget, cannot execute)
function M.probe(ctx, timeout, config, cfg)
  local s = ctx.settings
  timeout = timeout or s.ctl_timeout
  local argv = M.ctl_argv(s, config, cfg, cmdtarget.ipv6_for(ctx, cfg))
  local res, err, code = ctx.host.run(argv, { timeout = timeout, max_output = M.MAX_OUTPUT })
  if not res then
    if code == "timeout" then
      return { kind = "timeout",
        err = string.format("%s -N -j hung: no answer within %g s", argv[1], timeout) }
    elseif code == "deadline" then
      return { kind = "deadline", err = string.format("%s -N -j: the run's deadline passed", argv[1]) }
    end
    return { kind = "exec", err = string.format("%s cannot run: %s (%s)", argv[1], one_line(err or "?"),
      tostring(code)) }
  end
  local mesh, perr, kind = ctl.parse_mesh(res.stdout or "", res.status)
  if not mesh then
    if kind == "unconfigured" then perr = M.unconfigured_hint(ctx, perr) end
    return { kind = kind or "malformed", err = one_line(perr) }
  end
  ctx.mesh_seen = mesh -- the node states this run saw (the driver's metrics)
  return { mesh = mesh }
end

--- The ctl's "not configured" (exit 255, "Failed to read node configuration file") of a run that is
-- not root: the ctl could not read its configuration, which a permission error causes as well as
-- a missing file; the message then says so and to run as root instead of only "not configured".
-- @param ctx table policy context (host.euid)
-- @param msg string ctl.parse_mesh's message
-- @return string
function M.unconfigured_hint(ctx, msg)
  local euid = type(ctx.host.euid) == "function" and ctx.host.euid() or 0
  if euid == 0 then return msg end
  return string.format("%s; running as uid %d, the ctl may be unable to read its configuration: run as root",
    msg, euid)
end

--- Set of hosts of a mesh (table host -> true) and its size.
-- A set alone never decides anything: a node's ID is its line in the daemon's list, so the same
-- hosts in another order are another node map (C21). Compare with `verdict.compare_map`.
-- @param mesh table parsed mesh (ctl.parse_mesh)
-- @return table {[host] = true}, integer number of distinct hosts
function M.host_set(mesh)
  local set, n = {}, 0
  for _, node in ipairs(mesh.nodes) do
    if not set[node.host] then n = n + 1 end
    set[node.host] = true
  end
  return set, n
end

--- Label "host (slurm-name)" when the name is known (messages and the status table).
-- @param host string|nil an address
-- @param names table|nil {[address] = Slurm node name}
-- @return string
function M.label(host, names)
  local n = names and host and names[host]
  if n and n ~= host then return string.format("%s (%s)", host, n) end
  return tostring(host)
end

--- The hosts of a list for a person: their Slurm names compressed as Slurm writes them
-- ("gb[05,07]") when every one has a name, else their addresses compressed ("10.0.0.[5,7]").
-- @param hosts list of addresses
-- @param names table|nil {[address] = Slurm name}
-- @return string
function M.hosts_ranged(hosts, names)
  local hostlist = require("imexguard.hostlist") -- only on a fault: the healthy paths do not load it
  local shown = {}
  for i, h in ipairs(hosts) do
    local n = names and names[h]
    if not n then return hostlist.text_sorted(hosts) end
    shown[i] = n
  end
  return hostlist.text_sorted(shown)
end

--- The faulty peers of a verdict, one part per reason: "gb[05,07]: status UNAVAILABLE" (hosts as
-- M.hosts_ranged), in the order the reasons first appear; this node (self) is left out.
-- @param faulty list|nil {host =, reason =} (verdict.judge's faulty)
-- @param self string|nil this node's address
-- @param names table|nil {[address] = Slurm name}
-- @return list of strings
function M.group_faults(faulty, self, names)
  local order, by = {}, {}
  for _, f in ipairs(faulty or {}) do
    if f.host ~= self then
      local r = tostring(f.reason)
      if not by[r] then by[r] = {}; order[#order + 1] = r end
      by[r][#by[r] + 1] = f.host
    end
  end
  local parts = {}
  for i, r in ipairs(order) do parts[i] = M.hosts_ranged(by[r], names) .. ": " .. r end
  return parts
end

--- Does this node's config.cfg disable the command service (IMEX_CMD_ENABLED not 1, imexcfg.lint)?
-- Then the ctl can never reach the local daemon: an "unreachable" answer is a configuration fault.
-- @param want table {cfg = parsed config.cfg or nil, config_path, addrs, ips (the addresses where
--   addrs holds slot names: membership by slots)}
-- @return boolean
local function command_service_off(want)
  if type(want.cfg) ~= "table" or #(want.addrs or {}) < 2 then return false end
  for _, f in ipairs(M.config_lint(want.cfg, want.config_path, want.ips or want.addrs)) do
    if f.level == "error" and f.key == "IMEX_CMD_ENABLED" and not f.repeated then return true end
  end
  return false
end

--- Did the ctl fail to reach the local daemon? "unreachable", or the placeholder document it
-- prints instead (tests/fixtures/ctl/down-unconfigured.json: only host 0.0.0.0, DOWN).
-- @param answer table from probe
-- @return boolean
function M.no_local_daemon(answer)
  if answer.kind == "unreachable" then return true end
  local d = answer.mesh
  if not d or d.status ~= "DOWN" or #d.nodes == 0 then return false end
  for _, n in ipairs(d.nodes) do
    if n.host ~= "0.0.0.0" then return false end
  end
  return true
end

--- Reason this node is at fault, or nil when it is not.
local function local_reason(v, self)
  for _, f in ipairs(v.faulty or {}) do
    if f.host == self then return tostring(f.reason) end
  end
  if v.local_fault then
    if type(v.local_fault) == "string" then return v.local_fault end
    return v.summary or ("domain " .. tostring(v.status))
  end
  return nil
end

--- The findings of imexcfg.lint for this node's config.cfg, without the loopback bind findings
-- whose address is one of the domain's own (possible only with allow_loopback: the simulator and
-- tests, where every node's address is a loopback address).
-- @param cfg table parsed config.cfg
-- @param path string|nil its path (named in the findings)
-- @param addrs list|nil the domain's addresses (the node list)
-- @return list of findings (imexcfg.lint's tables)
function M.config_lint(cfg, path, addrs)
  local own = {}
  for _, a in ipairs(addrs or {}) do own[a] = true end
  local out = {}
  for _, f in ipairs(imexcfg.lint(cfg, path)) do
    local bind = f.key == "IMEX_CMD_BIND_INTERFACE_IP" or f.key == "BIND_INTERFACE_IP"
    if not (bind and own[f.value]) then out[#out + 1] = f end
  end
  return out
end

--- Likely causes of a configuration fault, this node's own config.cfg findings first.
-- @param cfg table|nil parsed config.cfg of this node (imexcfg.parse)
-- @param path string|nil its path (named in the findings)
-- @param addrs list|nil the domain's addresses (see config_lint)
-- @return list of one-line strings
function M.config_fault_causes(cfg, path, addrs)
  local causes = {}
  if type(cfg) == "table" then
    for _, f in ipairs(M.config_lint(cfg, path, addrs)) do
      if f.level == "error" and (f.key:match("^IMEX_CMD_") or f.key == "BIND_INTERFACE_IP") then
        causes[#causes + 1] = "here: " .. f.text
      end
    end
  end
  for _, c in ipairs(verdict.CONFIG_FAULT_CAUSES) do causes[#causes + 1] = c end
  return causes
end

-- The sorted peers of a configuration fault as one string, computed once per verdict (keyed by its
-- config_fault table, which a verdict never changes): each poll looks back over the last `polls`
-- verdicts, so without this every verdict's peers would be sorted again at each of those polls.
local peer_keys = setmetatable({}, { __mode = "k" })
local function peers_key(cf)
  local k = peer_keys[cf]
  if k then return k end
  local peers = {}
  for j, h in ipairs(cf.peers or {}) do peers[j] = h end
  table.sort(peers)
  k = table.concat(peers, " ")
  peer_keys[cf] = k
  return k
end

-- The sorted peers of a stale node-map mismatch, as peers_key's (C32).
local function stale_key(v)
  return v and v.verdict == "stale-mismatch" and v.stale_mismatch and peers_key(v.stale_mismatch) or nil
end

--- The remedy of a stale node-map mismatch, one line: which nodes to restart together.
-- @param ctx table policy context (settings.unit)
-- @param want table {self, names}
-- @param v table a "stale-mismatch" verdict
-- @return string
function M.stale_remedy(ctx, want, v)
  -- sorted, so that both ends of a link print the same remedy
  local hosts = { want.self }
  for _, h in ipairs(v.stale_mismatch.peers) do hosts[#hosts + 1] = h end
  table.sort(hosts)
  local nodes = {}
  for i, h in ipairs(hosts) do nodes[i] = M.label(h, want.names) end
  return string.format("restart %s on %s together, when no job uses IMEX there (systemctl restart %s; "
    .. "IMEX keeps a node-map mismatch until both ends of the link restart with one list, a SIGUSR1 does "
    .. "not clear it)", ctx.settings.unit, table.concat(nodes, " and "), ctx.settings.unit)
end

--- Is a configuration fault established? True when the last `polls` verdicts are all
-- "config-fault" naming the same peers (C22: recognised after a few polls, not the whole health
-- timeout; one inconsistent or unusable poll restarts the count).
-- @param history list of verdicts, oldest first (verdict.judge's tables; nil or false for an
--   unusable answer); use `n` for a list with holes
-- @param polls integer|nil consecutive polls needed (default CONFIG_FAULT_POLLS, at least 1)
-- @param n integer|nil length of history (default #history)
-- @return boolean, and the last verdict when true
function M.config_fault_established(history, polls, n)
  polls = math.max(1, math.tointeger(polls or M.CONFIG_FAULT_POLLS) or M.CONFIG_FAULT_POLLS)
  n = n or #history
  if n < polls then return false end
  local key
  for i = n - polls + 1, n do
    local v = history[i]
    if type(v) ~= "table" or v.verdict ~= "config-fault" or not v.config_fault then return false end
    local k = peers_key(v.config_fault)
    if key and k ~= key then return false end
    key = k
  end
  return true, history[n]
end

--- Outcome and message for an unhealthy verdict (C20: blame the right node; C22: a configuration
-- fault blames nobody, names its likely causes, and is CONFIG_FAULT_OUTCOME).
-- @param ctx table policy context
-- @param want table {self, names = {[addr] = slurm name}, cfg = parsed config.cfg or nil,
--   config_path = its path or nil (both optional: this node's findings are then named first)}
-- @param v table verdict
-- @param waited number seconds waited (for the message)
-- @return outcome, message
function M.blame(ctx, want, v, waited)
  local me = M.label(want.self, want.names)
  local why = local_reason(v, want.self)
  local after = waited and string.format(" after %.1f s", waited) or ""
  if not why and v.verdict == "stale-mismatch" then
    -- C32: the same outcome and remedy on both ends; neither blames the other
    local peers = {}
    for i, h in ipairs(v.stale_mismatch.peers) do peers[i] = M.label(h, want.names) end
    local msg = one_line(string.format("this node %s: stale node-map mismatch%s with %s: both ends run the "
      .. "job's node list, yet the link shows NODE_MAP_MISMATCH; %s (domain %s)", me, after,
      table.concat(peers, ", "), M.stale_remedy(ctx, want, v), tostring(v.status)))
    ctx.host.log("err", msg)
    return M.STALE_MISMATCH_OUTCOME, msg
  end
  if not why and v.verdict == "config-fault" then
    local cf = v.config_fault or {}
    local seen = cf.command_off
      and ("the ctl cannot reach this node's daemon (" .. tostring(v.summary) .. ")")
      or string.format("READY and connected to %d peers that show UNAVAILABLE (node status travels over the "
        .. "command port, IMEX_CMD_PORT)", #(cf.peers or {}))
    local causes = cf.address_family and { "here: " .. cmdtarget.af_cause(want.cfg, want.config_path) }
      or M.config_fault_causes(want.cfg, want.config_path, want.addrs)
    local msg = one_line(string.format("this node %s: configuration fault%s, not a peer "
      .. "fault: %s; likely causes: %s (domain %s)", me, after, seen, table.concat(causes, "; "),
      tostring(v.status)))
    -- loud also when on_config_fault = "warn" makes the outcome exit 0
    ctx.host.log("err", msg)
    return M.CONFIG_FAULT_OUTCOME, msg
  end
  if why then
    return "domain-unhealthy", one_line(string.format("this node %s is not healthy%s: %s", me, after, why))
  end
  local peers = M.group_faults(v.faulty, want.self, want.names)
  if #peers > 0 then
    local msg = one_line(string.format("this node %s is healthy, peers are not%s: %s (domain %s)", me, after,
      table.concat(peers, "; "), tostring(v.status)))
    ctx.host.log(ctx.settings.on_peer_fault == "fail" and "err" or "warning", msg)
    return "peers-unhealthy", msg
  end
  return "domain-unhealthy", one_line(string.format("this node %s: domain not healthy%s: %s", me, after,
    tostring(v.summary or v.status)))
end

--- How far a ctl answer is on the way UP, for the pace and the debug log: "[R ready, C/L
-- connected] " (nodes READY, links CONNECTED of all the nodes' links), "" for an unusable answer.
-- While connections come up one by one the verdict's summary often stays the same; these counts
-- move with each of them.
local function progress(answer)
  local nodes = answer.mesh and answer.mesh.nodes
  if not nodes then return "" end
  local ready, connected, links = 0, 0, 0
  for _, n in ipairs(nodes) do
    if n.status == "READY" then ready = ready + 1 end
    for _, l in ipairs(n.links or {}) do
      links = links + 1
      if l.status == "CONNECTED" then connected = connected + 1 end
    end
  end
  return string.format("[%d ready, %d/%d connected] ", ready, connected, links)
end

-- The health wait (M.wait) is one loop: poll, let each watcher look at the poll, stop when one says
-- so, sleep until the earliest time a watcher wants the next poll. A poll is {answer = probe's,
-- verdict = the judge's (nil: the answer proves nothing), seen = what the debug and progress lines
-- show, asked = when the ctl was asked (nil for the answer in hand), n = its number}. A watcher is
-- {observe = function(poll, now) -> true to end the wait, due = function(now) -> seconds until it
-- wants a poll, or nil}; one per concern of the wait, as imexguard.nudge's nudger is.

-- The verdict of an answer when config.cfg disables the command service (IMEX_CMD_ENABLED=0) and
-- the ctl could not reach the local daemon: no poll can ever succeed (C22), counted like the
-- READY/UNAVAILABLE signature; nil otherwise.
local function command_off_verdict(answer, want)
  if not (M.no_local_daemon(answer) and command_service_off(want)) then return nil end
  return { verdict = "config-fault", healthy = false, status = "DOWN", faulty = {},
    summary = answer.err or "no local daemon in its answer: only host 0.0.0.0",
    config_fault = { peers = {}, command_off = true } }
end

-- The verdict of an answer that shows the ctl dialing an address family this kernel lacks (C44:
-- error 14 "Address family not supported by protocol", cmdtarget.af_unsupported; the answer of -N, or
-- of M.query_error's -q when -N printed the placeholder document): no poll can ever succeed, so it is
-- a configuration fault at the first poll (at_once); nil otherwise.
local function address_family_verdict(answer)
  if not cmdtarget.af_unsupported(answer) then return nil end
  return { verdict = "config-fault", healthy = false, status = "DOWN", faulty = {}, summary = answer.err,
    config_fault = { peers = {}, command_off = true, address_family = true, at_once = true } }
end

--- Why the ctl cannot reach the local daemon, asked with `-q` (C44): an unreachable daemon's `-N`
-- answer may be the placeholder document (only host 0.0.0.0, DOWN), which says nothing, while `-q`
-- prints the ctl's error. Asked only where config.cfg's command service listens on every interface
-- (the case where a ctl given -c dials [::]).
-- @param ctx table policy context
-- @param want table {cfg, config_path}
-- @return table|nil {kind =, err =} of ctl.parse_query's failure, or nil (not asked, the ctl could
--   not run, or it answered a state)
function M.query_error(ctx, want)
  if not cmdtarget.all_interfaces_port(want.cfg) then return nil end
  local s, h = ctx.settings, ctx.host
  local argv = cmdtarget.args(want.cfg, want.config_path or s.imex_config, cmdtarget.ipv6_for(ctx, want.cfg))
  argv[#argv + 1] = "-q"
  local res = h.run(settings_schema.command_argv(s.ctl, argv),
    { timeout = math.min(s.ctl_timeout, math.max(h.remaining() - M.MARGIN, 0.05)), max_output = 65536 })
  if not res then return nil end
  local state, err, kind = ctl.parse_query((res.stdout or "") .. (res.stderr or ""), res.status)
  if state then return nil end
  return { kind = kind, err = one_line(err) }
end

local Poller = {}
Poller.__index = Poller

-- The polling of one wait: asks the ctl (or takes the answer in hand), judges each answer, keeps
-- what the outcome needs (the last usable verdict, the last error) and sleeps within the window.
local function new_poller(ctx, want, first, judge)
  local h, s = ctx.host, ctx.settings
  local start = h.now()
  return setmetatable({ ctx = ctx, want = want, judge = judge or verdict.judge, answer = first, polls = 0,
    start = start, window = math.min(s.health_timeout, math.max(h.remaining() - M.MARGIN, 0)) }, Poller)
end

-- The next poll (see above).
function Poller:poll()
  local ctx, want, h = self.ctx, self.want, self.ctx.host
  local answer, asked = self.answer, nil
  self.answer = nil
  if not answer then
    asked = h.now()
    -- The ctl's own timeout, bounded by the budget (a wait may overrun health_timeout by one call).
    answer = M.probe(ctx, math.min(ctx.settings.ctl_timeout, math.max(h.remaining() - M.MARGIN, 0.05)),
      want.config_path, want.cfg)
  end
  self.polls = self.polls + 1
  local v = self.judge(answer, want)
  local seen = progress(answer) .. one_line(tostring(v and (v.summary or v.status) or answer.err))
  local af = address_family_verdict(answer)
  if not af and answer.mesh and not self.queried and M.no_local_daemon(answer) then
    -- C44: the placeholder says nothing; -q says why, once per wait
    self.queried = true
    local q = M.query_error(ctx, want)
    af = q and address_family_verdict(q)
  end
  v = af or command_off_verdict(answer, want) or v
  if v then self.last_v = v else self.last_err = answer.err end
  return { answer = answer, verdict = v, seen = seen, asked = asked, n = self.polls }
end

-- Sleep until the earliest time a watcher wants the next poll, within the wait's window; false when
-- the window is spent or the run's deadline cut the sleep short.
function Poller:sleep(watchers)
  local h = self.ctx.host
  local left = self.window - (h.now() - self.start)
  if left <= 0 then return false end
  local now, delay = h.now(), nil
  for _, w in ipairs(watchers) do
    local due = w.due and w.due(now)
    if due and (not delay or due < delay) then delay = due end
  end
  return h.sleep(math.min(delay, left)) and true or false
end

-- The wait's outcome, message and polls once it stopped: "ok" on a healthy verdict, else the last
-- usable verdict blamed, else "ctl-unusable".
function Poller:outcome()
  local v, polls, want = self.last_v, self.polls, self.want
  if v and v.healthy then
    return "ok", v.healthy_message or string.format("domain %s, %d nodes healthy", tostring(v.status),
      #want.addrs), polls
  end
  local waited = self.ctx.host.now() - self.start
  if v then
    local o, m = M.blame(self.ctx, want, v, waited)
    return o, m, polls
  end
  return "ctl-unusable", one_line(string.format("no usable answer from the ctl in %.1f s (%d tries): %s",
    waited, polls, tostring(self.last_err))), polls
end

-- The pace (imexguard.pace): each answer of the ctl feeds it; it says when the next poll is due.
local function pace_watcher(p)
  return {
    observe = function(poll, now)
      if poll.asked then p:polled(poll.asked, now, poll.seen) end
    end,
    due = function(now) return p:delay(now) end,
  }
end

-- The wait's log lines (imexguard.progress): a debug line when what the poll saw changed, the
-- progress at info every few seconds.
local function progress_watcher(told, start)
  return {
    observe = function(poll, now)
      told:debug(string.format("health poll %d at %.3f s: %s", poll.n, now - start, poll.seen), poll.seen)
      told:tick(poll.seen)
    end,
  }
end

-- The answer itself ends the wait: a healthy verdict, or the run's deadline passed during the call.
local function answer_watcher()
  return {
    observe = function(poll)
      return (poll.verdict and poll.verdict.healthy) or poll.answer.kind == "deadline"
    end,
  }
end

-- The nudge (imexguard.nudge): when it signals the daemon, the pace expects a change.
local function nudge_watcher(ctx, want, p)
  local h, nudger = ctx.host, nudge.new(ctx, want, M.label)
  return {
    observe = function(poll, now)
      -- the daemon's own time to nudge, bounded by the budget as the ctl call is
      local timeout = math.min(nudge.KILL_TIMEOUT, math.max(h.remaining() - M.MARGIN, 0.05))
      if nudger:observe(poll.answer, now, timeout) then
        p:expect_change(h.now()) -- its links come up within milliseconds of the signal
      end
    end,
    due = function(now) return nudger:due(now) end, -- before the pace's next poll: poll then
  }
end

-- C22: the same configuration fault over config_fault_polls polls spanning at least that many
-- poll intervals less one (polls come quicker after a change: a fresh start looks the same for a
-- moment); the time counts from the first poll naming the same peers, as
-- config_fault_established's count.
local function config_fault_watcher(ctx, want)
  local polls, interval = want.config_fault_polls or M.CONFIG_FAULT_POLLS, ctx.settings.poll_interval
  local history, since, peers = {}, nil, nil
  return {
    observe = function(poll, now)
      local v = poll.verdict
      if v and v.config_fault and v.config_fault.at_once then return true end
      history[poll.n] = v or false
      local key = v and v.verdict == "config-fault" and v.config_fault and peers_key(v.config_fault)
      if key ~= peers then since, peers = key and now, key end
      return M.config_fault_established(history, polls, poll.n) and now - since >= (polls - 1) * interval
    end,
  }
end

-- C32: the same stale node-map mismatch over as many polls as a configuration fault and for
-- stale_mismatch_after seconds: waiting does not clear it (never with want.stale_wait).
local function stale_watcher(ctx, want)
  local polls, after = want.config_fault_polls or M.CONFIG_FAULT_POLLS, ctx.settings.stale_mismatch_after or 3
  local since, peers, count = nil, nil, 0
  return {
    observe = function(poll, now)
      local key = stale_key(poll.verdict)
      if key ~= peers then since, peers, count = key and now, key, 0 end
      count = key and count + 1 or 0
      return key and not want.stale_wait and count >= polls and now - since >= after
    end,
  }
end

-- The watchers of one wait, in the order they look at each poll.
local function watchers_of(ctx, want, poller)
  local p = pace.new(ctx.settings.poll_interval, poller.start)
  local told = progress_of.new(ctx.host, string.format("the domain's health (%d nodes)", #want.addrs),
    poller.window)
  return { pace_watcher(p), progress_watcher(told, poller.start), answer_watcher(),
    nudge_watcher(ctx, want, p), config_fault_watcher(ctx, want), stale_watcher(ctx, want) }
end

--- Wait for the domain to be healthy (step 8): poll the ctl, paced by imexguard.pace (soon after
-- an answer changed, less often while it stays the same, never more often on average than every
-- poll_interval), until healthy or health_timeout (bounded by the run's budget minus MARGIN)
-- passes, or a configuration fault is established (`config_fault_established` over
-- want.config_fault_polls, default CONFIG_FAULT_POLLS, consecutive polls spanning at least that
-- many poll_intervals less one: C22; with IMEX_CMD_ENABLED=0 in want.cfg and a job of several
-- nodes, an answer "local daemon unreachable" counts as that signature; an answer whose error says
-- the ctl dialed an address family the kernel lacks, C44, is one at the first poll), or a stale node-map
-- mismatch (verdict "stale-mismatch", C32) is seen naming the same peers over as many polls spanning
-- the setting stale_mismatch_after: it ends in STALE_MISMATCH_OUTCOME (blame); with want.stale_wait
-- (this node already did its part: P:wait_converged after its one restart) it waits the whole wait
-- for the other end's restart instead, and ends so only then. A poll is logged at
-- debug level with its time since the start of the wait when what it saw changed, and the wait's
-- progress at info every few seconds (imexguard.progress). With the setting `nudge` (default on),
-- every answer also goes to an imexguard.nudge nudger: when this node is READY and its link to a
-- READY peer of want.addrs has not been CONNECTED for `nudge_after` seconds, it sends SIGUSR1 to
-- the unit's main process (the daemon restarts its outgoing connections instead of waiting for its
-- reconnect back-off), at most once per 5 s; the wait polls when a nudge falls due and soon after
-- one. A nudge never changes the outcome. Each of these concerns is one watcher of the loop (above).
-- @param ctx table policy context
-- @param want table {addrs, self, names, cfg, config_path, config_fault_polls, node_list} (the
--   last four optional: see blame, config_fault_established and verdict.judge's want.node_list)
-- @param first table|nil an answer already in hand (from the staleness probe): used as poll 1
-- @param judge function|nil judge(answer, want) -> verdict | nil: the verdict on one answer of
--   `probe` (default verdict.judge). A verdict is a table shaped as verdict.judge's: `healthy` ends the
--   wait in "ok" (its message is the verdict's `healthy_message` when set, else "domain STATUS, N
--   nodes healthy"); `verdict`, `config_fault`, `summary` and `status` count towards an established
--   configuration fault and the debug line; the last verdict is blamed (M.blame: `faulty`,
--   `local_fault`, `verdict`, `summary`, `status`). nil: the answer proves nothing (unusable; the
--   wait ends "ctl-unusable" when no answer was usable). It must not raise on an answer of probe.
-- @return outcome, message, polls (number of answers examined)
function M.wait(ctx, want, first, judge)
  local h = ctx.host
  local poller = new_poller(ctx, want, first, judge)
  local watchers = watchers_of(ctx, want, poller)
  repeat
    local poll = poller:poll()
    for _, w in ipairs(watchers) do
      if w.observe(poll, h.now()) then return poller:outcome() end
    end
  until not poller:sleep(watchers)
  return poller:outcome()
end

return M
