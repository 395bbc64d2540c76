--- The fake host's commands (src/run.c's primitive `run`): every argv is taken as a call of
-- nvidia-imex-ctl, answered from a script or, by default, from the running daemon's node list.
-- Also the ctl answers the kit names (UNREACHABLE, UNCONFIGURED, HANG) and render_domain, which
-- prints a described domain as `nvidia-imex-ctl -N -j` does. Test infrastructure of imexguard.testing.
local cjson = require "cjson"

local M = {}

--- Ctl answer of an unreachable local daemon (tests/fixtures/ctl/errors.txt, exit 1).
M.UNREACHABLE = { status = 1, stdout = "Query Status returned error code: 14 - failed to connect to all "
  .. "addresses; last error: UNKNOWN: ipv6:%5B::%5D:50005: Address family not supported by protocol\n" }
--- Ctl answer when the node configuration file cannot be read (exit 255).
M.UNCONFIGURED = { status = 255, stdout = "Failed to read node configuration file\n" }
--- A ctl that never answers.
M.HANG = { hang = true }

--- Render a described domain as `nvidia-imex-ctl -N -j` prints it (objects keyed by decimal ids).
-- @param d table {status = "UP"|... (default: derived), timestamp = string, nodes = list of
--   {host =, status = "READY" (default), version =, connections = {[host] = status}}}; a missing
--   connection is CONNECTED when both ends are READY, else INVALID (each node lists itself too)
-- @return string JSON text
function M.render_domain(d)
  local nodes, all_up, any_up = {}, true, false
  for i, n in ipairs(d.nodes) do
    local st = n.status or "READY"
    local conns = {}
    for j, p in ipairs(d.nodes) do
      local pst = p.status or "READY"
      local c = n.connections and n.connections[p.host]
        or ((st == "READY" and pst == "READY") and "CONNECTED" or "INVALID")
      if c ~= "CONNECTED" then all_up = false end
      conns[tostring(j - 1)] = { host = p.host, status = c, changed = false }
    end
    if st == "READY" then any_up = true else all_up = false end
    nodes[tostring(i - 1)] = { status = st, host = n.host, connections = conns, changed = false,
      version = n.version or "570.172.08" }
  end
  local status = d.status or (all_up and "UP" or (any_up and "DEGRADED" or "DOWN"))
  return cjson.encode({ nodes = nodes, timestamp = d.timestamp or "8/8/2025 17:38:02.641", status = status })
    .. "\n"
end

--- Answer with every host READY and connected.
-- @param hosts list of addresses
-- @return answer {domain = described domain}
function M.up(hosts)
  local nodes = {}
  for i, hst in ipairs(hosts) do nodes[i] = { host = hst } end
  return { domain = { nodes = nodes } }
end

--- SIGUSR1's number as host.unit_kill takes it (imexguard.nudge.SIGUSR1).
local SIGUSR1 = 10

--- A ctl (a function for the option `ctl`) for a domain where one peer restarted and this node's
-- daemon waits on its reconnect back-off (docs/design.md, "IMEX facts", The daemon): every node
-- READY, the other links CONNECTED, this node's link to the restarted peer `status` until the
-- back-off fires, `backoff` seconds after the first call; a SIGUSR1 of this node's unit
-- (host.unit_kill(unit, 10) that succeeded, the nudge) makes this node's daemon reconnect at once, so
-- from the next call on the link is CONNECTED (with `reconnect = false` the signal changes nothing).
-- @param o table|nil {hosts = list of addresses in the node list's order, this node first
--   (default 10.0.0.1 .. 10.0.0.4), peer = the restarted peer (default the last host), from = the
--   node whose link to it waits (default this node: the first host; another one to show a lagging
--   link this node cannot nudge), backoff = seconds (default: never), status = that link
--   (default "RECOVERING"), theirs = the peer's link back (default "CONNECTED"), self_status,
--   peer_status = the status of `from` and of the peer (default "READY"), reconnect = boolean
--   (default true)}
-- @return function(n, argv, h) -> answer
function M.restarted_peer(o)
  o = o or {}
  local hosts = o.hosts or { "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4" }
  local me, peer = o.from or hosts[1], o.peer or hosts[#hosts]
  local first
  local function nudged(h)
    if o.reconnect == false then return false end
    for _, k in ipairs(h.kills) do
      if k.sent and k.signal == SIGUSR1 then return true end
    end
    return false
  end
  return function(_, _, h)
    first = first or h.now()
    local up = h.now() - first >= (o.backoff or math.huge) or nudged(h)
    local nodes = {}
    for i, host in ipairs(hosts) do
      local n = { host = host, status = host == peer and (o.peer_status or "READY")
        or host == me and (o.self_status or "READY") or "READY", connections = {} }
      for _, other in ipairs(hosts) do n.connections[other] = "CONNECTED" end
      nodes[i] = n
    end
    for _, n in ipairs(nodes) do
      if n.host == me and not up then n.connections[peer] = o.status or "RECOVERING" end
      if n.host == peer then n.connections[me] = o.theirs or "CONNECTED" end
    end
    return { domain = { nodes = nodes } }
  end
end

--- Add the run primitive to a fake host.
-- @param h table the fake host (gets run)
-- @param w table the host's shared world (needs rec, remaining, spend, unit, daemon_nodes)
-- @param opts table testing.host options (ctl = "auto" | list of answers | function(n, argv, h);
--   unhealthy = {[address] = status} for the auto answer)
function M.install(h, w, opts)
  local ctl = opts.ctl or "auto"
  local n = 0
  local unhealthy = opts.unhealthy or {}
  local function answer(argv)
    n = n + 1
    if type(ctl) == "function" then return ctl(n, argv, h) end
    if type(ctl) == "table" then return ctl[math.min(n, #ctl)] end
    if w.unit.active_state == "active" and #w.daemon_nodes > 0 then
      local nodes = {}
      for i, a in ipairs(w.daemon_nodes) do
        nodes[i] = { host = a, status = unhealthy[a] or unhealthy["*"] }
      end
      return { domain = { nodes = nodes } }
    end
    return M.UNREACHABLE
  end
  function h.run(argv, o)
    assert(type(argv) == "table" and type(o) == "table" and o.timeout, "run(argv, {timeout=...})")
    w.rec("run", argv)
    h.runs[#h.runs + 1] = argv
    local a = answer(argv)
    if type(a) == "string" then a = { stdout = a, status = 0 } end
    if a.exec_error then return nil, argv[1] .. ": cannot execute", a.exec_error end
    if a.hang then
      local t = math.min(o.timeout, w.remaining())
      local code = w.spend(o.timeout) or "timeout"
      return nil, string.format("%s: no answer within %g s", argv[1], t), code,
        { status = nil, signal = 15, stdout = "", stderr = "", truncated = false, elapsed = t }
    end
    w.spend(a.elapsed or 0.01)
    local out = a.stdout or (a.domain and M.render_domain(a.domain)) or ""
    return { status = a.status or 0, stdout = out, stderr = a.stderr or "", truncated = false,
      elapsed = a.elapsed or 0.01 }
  end
end

return M
