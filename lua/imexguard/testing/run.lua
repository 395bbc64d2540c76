-- SPDX-License-Identifier: Apache-2.0
--- The fake host's commands (src/run.c's primitives `run` and `spawn`), scripted by program (C40 of
-- docs/design.md): the ctl (`nvidia-imex-ctl`, or any argv with its query `-N`), `nvidia-smi` and
-- `scontrol` each have their own script and a default; the option `commands` scripts these or any
-- other program; a command nobody scripted raises an error naming it. Also the ctl answers the kit
-- names (UNREACHABLE, NO_IPV6, UNCONFIGURED, HANG), render_mesh, which prints a described mesh as
-- `nvidia-imex-ctl -N -j` does; nvidia-smi's answers are imexguard.testing.gpus'. Test
-- infrastructure of imexguard.testing.
local cjson = require("cjson")

local M = {}

-- The nvidia-smi answers (imexguard.testing.gpus: gpus, FABRIC_*, NVML_MISMATCH, ABSENT).
local gpus = require("imexguard.testing.gpus")

--- Ctl answer of an unreachable local daemon (exit 1): nothing listens where the ctl dials, [::]:50005
-- on a host with IPv6 (the form of tests/fixtures/ctl/errors.txt with the errno of a refused
-- connection, as the simulator's ctl prints it).
M.UNREACHABLE = { status = 1, stdout = "Query Status returned error code: 14 - failed to connect to all "
  .. "addresses; last error: UNKNOWN: ipv6:%5B::%5D:50005: Connection refused\n" }
--- Ctl answer on a host without IPv6 when the ctl dials [::] (C44: IMEX_CMD_BIND_INTERFACE_IP empty
-- and only `-c` given; tests/fixtures/ctl/errors.txt, exit 1): the daemon itself may be fine.
M.NO_IPV6 = { status = 1, stdout = "Query Status returned error code: 14 - failed to connect to all "
  .. "addresses; last error: UNKNOWN: ipv6:%5B::%5D:50005: Address family not supported by protocol\n" }
--- Ctl answer when the node configuration file cannot be read (exit 255).
M.UNCONFIGURED = { status = 255, stdout = "Failed to read node configuration file\n" }
--- A ctl that never answers.
M.HANG = { hang = true }

--- The daemon version of a described node that names none: a driver of the r580 branch, which
-- acts on SIGUSR1 (imexguard.nudge.version_allows with the default floor).
M.VERSION = "580.95.05"

--- Render a described mesh as `nvidia-imex-ctl -N -j` prints it (objects keyed by decimal ids).
-- @param d table {status = "UP"|... (default: derived), timestamp = string, nodes = list of
--   {host =, status = "READY" (default), version =, connections = {[host] = status}}}; a missing
--   connection is CONNECTED when both ends are READY, else INVALID (each node lists itself too)
-- @return string JSON text
function M.render_mesh(d)
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
      version = n.version or M.VERSION }
  end
  local status = d.status or (all_up and "UP" or (any_up and "DEGRADED" or "DOWN"))
  return cjson.encode({ nodes = nodes, timestamp = d.timestamp or "8/8/2025 17:38:02.641", status = status })
    .. "\n"
end

--- Answer with every host READY and connected.
-- @param hosts list of addresses
-- @return answer {mesh = described mesh}
function M.up(hosts)
  local nodes = {}
  for i, hst in ipairs(hosts) do nodes[i] = { host = hst } end
  return { mesh = { nodes = nodes } }
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
    return { mesh = { nodes = nodes } }
  end
end

-- The basename of a program path.
local function basename(p)
  return tostring(p):match("([^/]*)$")
end

-- An answer from a script: a function(n, argv, h), a list of answers consumed per call (the last one
-- repeats), or one answer (a string, or a table with stdout, status, hang, mesh or exec_error).
local function scripted(script, n, argv, h)
  if type(script) == "function" then return script(n, argv, h) end
  if type(script) == "table" and script[1] ~= nil then return script[math.min(n, #script)] end
  return script
end

--- The program a command runs, for its script: the key of opts.commands that is its argv[1] or that
-- path's basename, else "nvidia-smi", "scontrol" or "nvidia-imex-ctl" by basename (the ctl also by
-- its query `-N`, nvidia-smi by its `-q -x` or `--query-gpu=`, whatever wrapper the settings `ctl` and
-- `nvidia_smi` name), else nil (unscripted).
-- @param argv list of strings
-- @param commands table|nil opts.commands
-- @return string|nil key
function M.program(argv, commands)
  local name = basename(argv[1])
  if commands then
    if commands[argv[1]] ~= nil then return argv[1] end
    if commands[name] ~= nil then return name end
  end
  if name == "nvidia-smi" or name == "scontrol" or name == "nvidia-imex-ctl" then return name end
  for _, a in ipairs(argv) do
    if a == "-N" then return "nvidia-imex-ctl" end
    if a:find("^%-%-query%-gpu=") then return "nvidia-smi" end
  end
  if M.is_smi_query(argv) then return "nvidia-smi" end
  return nil
end

--- Is argv nvidia-smi's query of the fabric check (`-q -x` after any wrapper: imexguard.smi.QUERY)?
-- @param argv list of strings
-- @return boolean
function M.is_smi_query(argv)
  local q, x = false, false
  for _, a in ipairs(argv) do
    q = q or a == "-q" or a == "--query"
    x = x or a == "-x" or a == "--xml-format"
  end
  return q and x
end

-- The answerer of a host's commands: function(argv) -> the scripted answer of this command (its
-- program's n-th call: opts.commands, nvidia_smi, scontrol, ctl; see M.install), raising on an
-- unscripted command.
local function answerer(h, w, opts)
  local ctl = opts.ctl or "auto"
  local counts = {}
  local unhealthy = opts.unhealthy or {}
  local function ctl_answer(n, argv)
    if ctl ~= "auto" then return scripted(ctl, n, argv, h) end
    if w.unit.active_state == "active" and #w.daemon_nodes > 0 then
      local nodes = {}
      for i, a in ipairs(w.daemon_nodes) do
        nodes[i] = { host = a, status = unhealthy[a] or unhealthy["*"] }
      end
      return { mesh = { nodes = nodes } }
    end
    return M.UNREACHABLE
  end
  return function(argv)
    local prog = M.program(argv, opts.commands)
    -- the default nvidia-smi answers the fabric check's query (-q -x) only; another query is the
    -- policy's to script
    if prog == "nvidia-smi" and opts.nvidia_smi == nil and not (opts.commands and opts.commands[prog]) then
      if not M.is_smi_query(argv) then prog = nil end
    end
    if not prog then
      error(string.format("testing: unscripted command %q (argv: %s): script it with the host option "
        .. "commands = {[%q] = answers} (imexguard check: the policy's check_commands)", tostring(argv[1]),
        table.concat(argv, " "), basename(argv[1])), 0)
    end
    counts[prog] = (counts[prog] or 0) + 1
    local n = counts[prog]
    if opts.commands and opts.commands[prog] ~= nil then return scripted(opts.commands[prog], n, argv, h) end
    if prog == "nvidia-smi" then return scripted(opts.nvidia_smi or gpus.gpus(), n, argv, h) end
    if prog == "scontrol" then return scripted(opts.scontrol or { status = 0, stdout = "" }, n, argv, h) end
    return ctl_answer(n, argv)
  end
end

-- A started command's results (host.run's), once spend(t) let its t seconds pass (spend returns
-- "deadline" when the run's budget cut them short); budget: the seconds left at its start.
local function finish(argv, o, a, spend, budget)
  if a.hang then
    local t = math.min(o.timeout, budget)
    local code = spend(o.timeout) or "timeout"
    return nil, string.format("%s: no answer within %g s", argv[1], t), code,
      { status = nil, signal = 15, stdout = "", stderr = "", truncated = false, elapsed = t }
  end
  spend(a.elapsed or 0.01)
  if a.domain ~= nil then error("testing.host: a ctl answer's 'domain' is called 'mesh' now", 0) end
  local out = a.stdout or (a.mesh and M.render_mesh(a.mesh)) or ""
  return { status = a.status or 0, stdout = out, stderr = a.stderr or "", truncated = a.truncated == true,
    elapsed = a.elapsed or 0.01 }
end

-- host.spawn over start(argv, o) (a command starts: checked, recorded, answered): see M.install.
local function spawner(h, w, start)
  return function(argv, o)
    local a = start(argv, o)
    if a.exec_error then return nil, argv[1] .. ": cannot execute", a.exec_error end
    local rec = { argv = argv, pid = 20000 + #h.runs, started = h.now() }
    h.spawns[#h.spawns + 1] = rec
    local budget = w.remaining()
    -- the command's time runs from its start: its wait spends what is left of it
    local function spend(t) return w.spend(math.max(0, rec.started + t - h.now())) end
    local p = {}
    function p.wait()
      assert(not rec.waited and not rec.killed, "process:wait(): already waited for or closed")
      w.rec("wait", argv)
      local r = table.pack(finish(argv, o, a, spend, budget))
      rec.waited = h.now()
      return table.unpack(r, 1, r.n)
    end
    function p.pid() return rec.pid end
    function p.close()
      if not rec.waited and not rec.killed then rec.killed = h.now() end
      return true
    end
    return setmetatable(p, { __close = p.close })
  end
end

--- Add the run and spawn primitives to a fake host.
-- A command's answer is decided when it starts (the daemon answers the ctl as it is then) and takes
-- its `elapsed` seconds (0.01 by default; a hang: the whole timeout) of the fake clock from its
-- start: host.run spends them at once; a spawned command runs while the clock moves on, and its
-- wait spends only what is left of them. Both record the command as a run (h.calls "run", h.runs):
-- h.count("run") counts the commands, whichever primitive started them; h.runs_of(program) lists
-- the argv of one program's (its M.program key).
-- @param h table the fake host (gets run, spawn and the recording h.spawns: per spawned command
--   {argv =, pid =, started = h.now() at the start, waited = h.now() at the end of its wait or nil,
--   killed = h.now() when closed unwaited or nil}; a wait is also in h.calls as {"wait", argv})
-- @param w table the host's shared world (needs rec, remaining, spend, unit, daemon_nodes)
-- @param opts table testing.host options (ctl = "auto" | list of answers | function(n, argv, h);
--   unhealthy = {[address] = status} for the auto answer; nvidia_smi = a script (default
--   imexguard.testing.gpus.gpus(): 4 GPUs registered in one partition, for the fabric check's
--   `-q -x` only: another nvidia-smi command is unscripted); scontrol = a script (default: exit 0,
--   no output); commands = {[program path or basename] = script}: any program, before the others)
function M.install(h, w, opts)
  local answer = answerer(h, w, opts)
  function h.runs_of(prog)
    local out = {}
    for _, argv in ipairs(h.runs) do
      if M.program(argv, opts.commands) == prog then out[#out + 1] = argv end
    end
    return out
  end
  -- A command starts: checked, recorded, answered.
  local function start(argv, o)
    assert(type(argv) == "table" and type(o) == "table" and o.timeout, "run(argv, {timeout=...})")
    w.rec("run", argv)
    h.runs[#h.runs + 1] = argv
    local a = answer(argv)
    if type(a) == "string" then a = { stdout = a, status = 0 } end
    return a
  end
  function h.run(argv, o)
    local a = start(argv, o)
    if a.exec_error then return nil, argv[1] .. ": cannot execute", a.exec_error end
    return finish(argv, o, a, w.spend, w.remaining())
  end
  h.spawns = h.spawns or {}
  h.spawn = spawner(h, w, start)
end

return M
