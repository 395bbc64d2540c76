--- A fake host for policy specs (busted): the primitives of docs/policy-api.md, scripted.
--
--   local testing = require "imexguard.testing"
--   local h = testing.host{ ... }              -- options below
--   local ctx = testing.ctx{ host = h, env = {...}, settings = {...} }
--   local outcome, message = policy.prolog(ctx)
--   assert.same({}, h.writes); assert.equal(0, #h.jobs); assert.equal(1, h.count("run"))
--
-- Options of testing.host (all optional; the defaults are a healthy 2-node job n[1-2] on n1):
--   files            {[path] = string | {data = string, mtime_us = number} | false (absent)}, merged
--                    over the defaults (config.cfg and nodes_config.cfg listing 10.0.0.1, 10.0.0.2)
--   fail             {[path] = {read =, write =, stat =, mkdir =, lock = code}}: that operation fails
--                    with the errno name (e.g. write = "ENOSPC": the old file stays intact, and the
--                    message says so as src/file.c's does; lock = "ENOSPC" on state_dir/lock: the
--                    lock file cannot be created, as on a full or read-only state directory)
--   unit             property overrides of nvidia-imex.service, or false for a unit that is not
--                    installed (load_state "not-found"); default: loaded, enabled, active, running,
--                    started half an hour ago (after the files were written)
--   unit_script      list consumed one per host.unit call: "timeout"/"bus"/... (the query fails
--                    with that code) or a table of property overrides applied before answering
--   restart          how unit jobs end: {result = "done"|"failed"|"wait-timeout"|code,
--                    duration = seconds (0.5), unit_result = the unit's Result after a job that did
--                    not end "done" (default "exit-code"; e.g. "start-limit-hit"), active_state =
--                    the unit's state right after a "done" start/restart (default "active"; e.g.
--                    "failed": the daemon died at once), invocation_id = the new InvocationID},
--                    or a list of those consumed per job (then every job ends "done")
--   ctl              "auto" (default: UP with the hosts the daemon was started with when the unit
--                    is active, else the "unreachable" answer), a list of answers consumed per call
--                    (the last one repeats), or function(n, argv, h) -> answer. An answer is a
--                    string (stdout, exit 0), {stdout =, status =}, {hang = true},
--                    {domain = described domain (see render_domain)} or {exec_error = "ENOENT"}
--   daemon_nodes     the list the running daemon was started with (default: the nodes file)
--   unhealthy        {[address] = node status} for the "auto" ctl: those daemon nodes are listed with
--                    that status (e.g. "UNAVAILABLE"), the others READY; key "*": every node
--   absent_dirs      list of directories that do not exist (e.g. {"/run/imexguard"} after a reboot):
--                    writing or locking a path under one fails with ENOENT until host.mkdir makes it
--   fresh_boot       true: absent_dirs defaults to {"/run/imexguard"} (the state dir is on a tmpfs)
--   resolve          {[name] = {addresses} | "timeout" | code} merged over n1..n4 -> 10.0.0.1..4
--   local_addresses  list (default {"10.0.0.1", "127.0.0.1"}); hostname (default "n1")
--   lock             nil (free) or the holder {pid =, owner =, since =, release_at = monotonic
--                    seconds when the holder lets go (nil: never)}
--   deadline         seconds of budget (default 120); clock = monotonic start (default 1000)
--
-- Recorded for assertions: h.calls (every primitive call in order: {name, args...}), h.writes
-- ({path =, data =}), h.jobs ({unit =, verb =, result =}), h.runs (argv lists), h.logs ({level,
-- message}), h.sleeps (seconds), h.locks ({owner =, released = boolean}), h.mkdirs ({path =,
-- mode =, created = boolean}). Helpers (plain functions): h.count(name), h.file(path),
-- h.set_file(path, data), h.advance(seconds), h.unit_props (the live unit table), h.now(),
-- h.daemon_nodes(), h.clear() (forget the recordings, keep files, unit and clock).
--
-- Scenarios (a site spec reads given / when / then; see M.scenario below):
--   local s = testing.scenario{ policy = P, node = "n1", nodes = {n1 = "10.0.0.1", n2 = "10.0.0.2"},
--     domain = "up", file = {"n1", "n2"}, unit = "active", jobs = {{id = 100, nodes = {"n1", "n3"}}} }
--   local outcome, msg = s:prolog{ job = 101, nodelist = "n[1-2]" }
--   assert.same({}, s:writes()); assert.equal(0, s:restarts()); assert.same({"100"}, s:registered())
-- This module is test infrastructure; it uses no io (specs read fixtures themselves).
local cjson = require "cjson"

local M = {}

M.UNIT = "nvidia-imex.service"
M.CONFIG = "/etc/nvidia-imex/config.cfg"
M.NODES = "/etc/nvidia-imex/nodes_config.cfg"
M.STATE = "/run/imexguard/state.json"
M.WALL0 = 1700000000

M.CONFIG_TEXT = table.concat({
  "# nvidia-imex config (package defaults)",
  "DAEMONIZE=1",
  "SERVER_PORT=50000",
  "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg",
  "IMEX_CMD_ENABLED=1",
  "IMEX_CMD_PORT=50005",
  "IMEX_CMD_BIND_INTERFACE_IP=",
  "BIND_INTERFACE_IP=",
  "IMEX_WAIT_FOR_QUORUM=RECOVERY",
  "",
}, "\n")

--- Ctl answer of an unreachable local daemon (fixtures/ctl/errors.txt, exit 1).
M.UNREACHABLE = { status = 1, stdout = "Query Status returned error code: 14 - failed to connect to all "
  .. "addresses; last error: UNKNOWN: ipv6:%5B::%5D:50005: Address family not supported by protocol\n" }
--- Ctl answer when the node configuration file cannot be read (exit 255).
M.UNCONFIGURED = { status = 255, stdout = "Failed to read node configuration file\n" }
--- A ctl that never answers.
M.HANG = { hang = true }

--- Default settings (docs: settings the default policy reads), used when imexguard.settings is absent.
M.DEFAULT_SETTINGS = {
  deadline = 120, unit = M.UNIT, imex_config = M.CONFIG, ctl = "/usr/bin/nvidia-imex-ctl",
  ctl_timeout = 5, state_dir = "/run/imexguard", address_source = "dns", resolve_timeout = 2,
  allow_loopback = false, lock_timeout = 60, start_timeout = 30, health_timeout = 60,
  poll_interval = 0.25, on_peer_fault = "warn", restart_under_jobs = false,
}

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
function M.up(hosts)
  local nodes = {}
  for i, hst in ipairs(hosts) do nodes[i] = { host = hst } end
  return { domain = { nodes = nodes } }
end

local function copy(t)
  local r = {}
  for k, v in pairs(t) do r[k] = v end
  return r
end

local function lines(text)
  local out = {}
  for l in (text or ""):gmatch("[^\n]+") do out[#out + 1] = l end
  return out
end

--- Build a fake host (options: see the top of this file).
function M.host(opts)
  opts = opts or {}
  local h = { calls = {}, writes = {}, jobs = {}, runs = {}, logs = {}, sleeps = {}, locks = {}, mkdirs = {} }
  local mono = opts.clock or 1000
  local mono0 = mono
  local deadline_at = mono + (opts.deadline or 120)
  local function wall() return M.WALL0 + (mono - mono0) end
  local function wall_us() return math.floor(wall() * 1e6) end
  local function rec(name, ...) h.calls[#h.calls + 1] = { name, ... } end
  local function remaining() return math.max(0, deadline_at - mono) end
  --- Spend up to `t` seconds; returns the code when the budget cut it short.
  local function spend(t)
    if mono + t > deadline_at then
      mono = deadline_at
      return "deadline"
    end
    mono = mono + t
    return nil
  end

  -- files
  local files, ino = {}, 100
  local function put(path, data, mtime_us)
    ino = ino + 1
    files[path] = { data = data, mtime_us = mtime_us or wall_us(), ino = ino }
  end
  local old = wall_us() - 3600e6
  put(M.CONFIG, M.CONFIG_TEXT, old)
  put(M.NODES, "10.0.0.1\n10.0.0.2\n", old)
  for path, v in pairs(opts.files or {}) do
    if v == false then files[path] = nil
    elseif type(v) == "table" then put(path, v.data, v.mtime_us or old)
    else put(path, v, old) end
  end
  local fail = opts.fail or {}
  local function failing(path, op)
    local f = fail[path]
    return f and f[op]
  end
  -- directories that do not exist (everything else is taken to exist)
  local absent = {}
  for _, d in ipairs(opts.absent_dirs or (opts.fresh_boot and { "/run/imexguard" }) or {}) do
    absent[(d:gsub("/+$", ""))] = true
  end
  --- The missing directory above path (nil when every parent exists).
  local function missing_parent(path)
    local dir = path:match("^(.*)/[^/]*$")
    while dir and dir ~= "" do
      if absent[dir] then return dir end
      dir = dir:match("^(.*)/[^/]*$")
    end
    return nil
  end

  -- unit
  local serial = 0
  local function new_invocation()
    serial = serial + 1
    return string.format("%032x", 0xabc000 + serial)
  end
  local unit
  if opts.unit == false then
    unit = { load_state = "not-found", unit_file_state = "", active_state = "inactive", sub_state = "dead",
      result = "success", main_pid = 0, invocation_id = "", exec_main_start_us = 0, active_enter_us = 0 }
  else
    unit = { load_state = "loaded", unit_file_state = "enabled", active_state = "active",
      sub_state = "running",
      result = "success", main_pid = 4242, invocation_id = new_invocation(),
      exec_main_start_us = wall_us() - 1800e6, active_enter_us = wall_us() - 1800e6 }
    for k, v in pairs(opts.unit or {}) do unit[k] = v end
  end
  h.unit_props = unit
  local unit_script = opts.unit_script and copy(opts.unit_script) or {}
  local daemon_nodes = opts.daemon_nodes or (files[M.NODES] and lines(files[M.NODES].data)) or {}
  local restart_script = opts.restart
  if restart_script and restart_script[1] == nil and next(restart_script) ~= nil then
    restart_script = { restart_script }
  end
  restart_script = restart_script and copy(restart_script) or {}

  -- ctl
  local ctl = opts.ctl or "auto"
  local ctl_n = 0
  local unhealthy = opts.unhealthy or {}

  -- resolver
  local resolve = { n1 = { "10.0.0.1" }, n2 = { "10.0.0.2" }, n3 = { "10.0.0.3" }, n4 = { "10.0.0.4" } }
  for k, v in pairs(opts.resolve or {}) do resolve[k] = v end
  local lock_holder = opts.lock and copy(opts.lock) or nil
  local pid = 5000

  -- helpers (not primitives)
  function h.count(name)
    local n = 0
    for _, c in ipairs(h.calls) do if c[1] == name then n = n + 1 end end
    return n
  end
  function h.file(path) return files[path] and files[path].data end
  function h.set_file(path, data, mtime_us) put(path, data, mtime_us) end
  function h.advance(t) mono = mono + t end
  function h.daemon_nodes() return daemon_nodes end
  function h.clear()
    for _, k in ipairs({ "calls", "writes", "jobs", "runs", "logs", "sleeps", "locks", "mkdirs" }) do
      h[k] = {}
    end
  end

  -- Clock
  function h.now() return mono end
  function h.wallclock() return wall() end
  function h.remaining() return remaining() end
  function h.sleep(t)
    rec("sleep", t)
    h.sleeps[#h.sleeps + 1] = t
    if spend(t) then return nil, "sleep cut short by the run's deadline", "deadline" end
    return true
  end
  function h.set_deadline(t) deadline_at = mono + t; return true end

  -- Lock
  function h.lock(path, timeout, owner)
    rec("lock", path, timeout, owner)
    local lf = failing(path, "lock")
    if lf then return nil, string.format("lock %s: %s", path, lf), lf end
    local gone = missing_parent(path)
    if gone then return nil, string.format("lock %s: %s: No such file or directory", path, gone), "ENOENT" end
    if lock_holder then
      if lock_holder.release_at and lock_holder.release_at <= mono + math.min(timeout, remaining()) then
        mono = math.max(mono, lock_holder.release_at)
        lock_holder = nil
      else
        local code = (remaining() < timeout) and "deadline" or "timeout"
        spend(math.min(timeout, remaining()))
        return nil, string.format("lock %s: timed out after %g s", path, timeout), code, copy(lock_holder)
      end
    end
    pid = pid + 1
    local entry = { owner = owner, released = false, path = path }
    h.locks[#h.locks + 1] = entry
    lock_holder = { pid = pid, owner = owner, since = wall() }
    local lk = {}
    function lk.unlock()
      if not entry.released then
        entry.released = true
        lock_holder = nil
        rec("unlock", path)
      end
      return true
    end
    function lk.inode() return 1, 4711 end
    return lk
  end
  function h.lock_holder(path)
    rec("lock_holder", path)
    return lock_holder and copy(lock_holder) or nil
  end

  -- Files
  function h.read(path, max_bytes)
    rec("read", path)
    local f = failing(path, "read")
    if f then return nil, path .. ": " .. f, f end
    local e = files[path]
    if not e then return nil, path .. ": No such file or directory", "ENOENT" end
    if max_bytes and #e.data > max_bytes then return nil, path .. ": larger than " .. max_bytes, "EFBIG" end
    return e.data
  end
  function h.stat(path)
    rec("stat", path)
    local f = failing(path, "stat")
    if f then return nil, path .. ": " .. f, f end
    local e = files[path]
    if not e then return nil, path .. ": No such file or directory", "ENOENT" end
    return { type = e.type or "file", size = #e.data, mode = e.mode or tonumber("644", 8), uid = 0, gid = 0,
      ino = e.ino, dev = 1, mtime_us = e.mtime_us }
  end
  function h.write_atomic(path, data, mode)
    rec("write_atomic", path)
    local f = failing(path, "write")
    if f then return nil, string.format("write %s: write: %s (old file intact)", path, f), f end
    local gone = missing_parent(path)
    if gone then return nil, path .. ": directory " .. gone .. " does not exist", "ENOENT" end
    spend(0.001)
    put(path, data)
    files[path].mode = mode
    h.writes[#h.writes + 1] = { path = path, data = data }
    return true
  end
  --- host.mkdir(path [, mode]) -> true | nil, msg, code, as src/file.c: an existing directory is
  -- success; a missing parent is ENOENT; an existing file is ENOTDIR; mode defaults to 0755.
  function h.mkdir(path, mode)
    mode = mode == nil and 493 or mode
    assert(type(path) == "string" and math.type(mode) == "integer", "mkdir(path [, integer mode])")
    rec("mkdir", path, mode)
    path = path:gsub("/+$", "")
    local f = failing(path, "mkdir")
    if f then return nil, "mkdir " .. path .. ": " .. f, f end
    local entry = { path = path, mode = mode, created = false }
    h.mkdirs[#h.mkdirs + 1] = entry
    if files[path] then return nil, "mkdir " .. path .. ": exists and is not a directory", "ENOTDIR" end
    local gone = missing_parent(path)
    if gone then
      return nil, "mkdir " .. path .. ": No such file or directory (" .. gone .. ")", "ENOENT"
    end
    if absent[path] then
      absent[path] = nil
      entry.created = true
    end
    return true
  end
  function h.dir_exists(path)
    path = path:gsub("/+$", "")
    return not absent[path] and not missing_parent(path .. "/x")
  end

  function h.mknod_char(path, major, minor, mode)
    rec("mknod_char", path, major, minor)
    put(path, "")
    files[path].type, files[path].mode = "char", mode
    return true
  end

  -- Commands (every argv is taken as a ctl call)
  local function ctl_answer(argv)
    ctl_n = ctl_n + 1
    if type(ctl) == "function" then return ctl(ctl_n, argv, h) end
    if type(ctl) == "table" then return ctl[math.min(ctl_n, #ctl)] end
    if unit.active_state == "active" and #daemon_nodes > 0 then
      local nodes = {}
      for i, a in ipairs(daemon_nodes) do nodes[i] = { host = a, status = unhealthy[a] or unhealthy["*"] } end
      return { domain = { nodes = nodes } }
    end
    return M.UNREACHABLE
  end
  function h.run(argv, o)
    assert(type(argv) == "table" and type(o) == "table" and o.timeout, "run(argv, {timeout=...})")
    rec("run", argv)
    h.runs[#h.runs + 1] = argv
    local a = ctl_answer(argv)
    if type(a) == "string" then a = { stdout = a, status = 0 } end
    if a.exec_error then return nil, argv[1] .. ": cannot execute", a.exec_error end
    if a.hang then
      local t = math.min(o.timeout, remaining())
      local code = spend(o.timeout) or "timeout"
      return nil, string.format("%s: no answer within %g s", argv[1], t), code,
        { status = nil, signal = 15, stdout = "", stderr = "", truncated = false, elapsed = t }
    end
    spend(a.elapsed or 0.01)
    local out = a.stdout or (a.domain and M.render_domain(a.domain)) or ""
    return { status = a.status or 0, stdout = out, stderr = a.stderr or "", truncated = false,
      elapsed = a.elapsed or 0.01 }
  end

  -- systemd
  function h.unit(name)
    rec("unit", name)
    local step = table.remove(unit_script, 1)
    if type(step) == "string" then return nil, "unit " .. name .. ": query " .. step, step end
    if type(step) == "table" then for k, v in pairs(step) do unit[k] = v end end
    if name ~= M.UNIT and not opts.any_unit then
      return { load_state = "not-found", unit_file_state = "", active_state = "inactive", sub_state = "dead",
        result = "success", main_pid = 0, invocation_id = "", exec_main_start_us = 0, active_enter_us = 0 }
    end
    return copy(unit)
  end
  function h.unit_job(name, verb, timeout)
    rec("unit_job", name, verb, timeout)
    if unit.load_state ~= "loaded" then
      h.jobs[#h.jobs + 1] = { unit = name, verb = verb, result = "bus" }
      return nil, string.format("%s %s: Unit %s not found.", verb, name, name), "bus"
    end
    local r = table.remove(restart_script, 1) or {}
    local result = r.result or "done"
    local job = { unit = name, verb = verb, result = result }
    h.jobs[#h.jobs + 1] = job
    if result == "wait-timeout" then
      local code = spend(timeout) and "deadline" or "wait-timeout"
      job.result = code
      return nil, string.format("%s %s: no JobRemoved within %g s", verb, name, timeout), code
    end
    if spend(r.duration or 0.5) then
      job.result = "deadline"
      return nil, verb .. " " .. name .. ": the run's deadline passed", "deadline"
    end
    if result ~= "done" then
      unit.active_state, unit.sub_state, unit.result = "failed", "failed", r.unit_result or "exit-code"
      return nil, string.format("job %s %s finished with result %s", verb, name, result), result
    end
    local starts = verb == "restart" or (verb == "start" and unit.active_state ~= "active")
      or (verb == "try-restart" and unit.active_state == "active")
    if verb == "stop" then
      unit.active_state, unit.sub_state, unit.main_pid = "inactive", "dead", 0
    elseif starts then
      unit.active_state, unit.sub_state, unit.result = "active", "running", "success"
      unit.invocation_id = r.invocation_id or new_invocation()
      unit.exec_main_start_us, unit.active_enter_us = wall_us(), wall_us()
      unit.main_pid = unit.main_pid + 1
      daemon_nodes = files[M.NODES] and lines(files[M.NODES].data) or {}
      if r.active_state and r.active_state ~= "active" then
        unit.active_state, unit.sub_state = r.active_state, r.active_state == "failed" and "failed" or "dead"
        unit.result = r.unit_result or (r.active_state == "failed" and "exit-code" or "success")
        if r.active_state ~= "activating" then unit.main_pid = 0 end
      end
    end
    return "done"
  end
  function h.unit_reset_failed(name)
    rec("unit_reset_failed", name)
    if unit.active_state == "failed" then unit.active_state, unit.result = "inactive", "success" end
    return true
  end
  function h.unit_kill(name, signal)
    rec("unit_kill", name, signal)
    return true
  end

  -- Log and network
  function h.log(level, message, fields)
    h.logs[#h.logs + 1] = { level, message, fields }
  end
  function h.local_addresses()
    rec("local_addresses")
    return copy(opts.local_addresses or { "10.0.0.1", "127.0.0.1" })
  end
  function h.resolve(name, timeout)
    rec("resolve", name, timeout)
    local r = resolve[name]
    if type(r) == "function" then r = r(name) end
    if r == "timeout" then
      local code = spend(timeout) or "timeout"
      return nil, string.format("resolving %s: no answer within %g s", name, timeout), code
    end
    if type(r) == "string" then return nil, "resolving " .. name .. ": " .. r, r end
    if not r then return nil, "resolving " .. name .. ": Name or service not known", "EAI_NONAME" end
    return copy(r)
  end
  function h.hostname() return opts.hostname or "n1" end

  return h
end

--- Settings: defaults filled in (through imexguard.settings when it exists), overrides applied,
-- wrapped read-only as the binary does (settings.readonly(v, "ctx.settings", settings.by_name)):
-- assigning, or reading a name that is not a setting (a typo), raises.
local function make_settings(over)
  local ok, S = pcall(require, "imexguard.settings")
  if ok and type(S) == "table" and type(S.validate) == "function" then
    local v, err = S.validate(over)
    if v == nil then error("testing.ctx: invalid settings: " .. tostring(err), 3) end
    if type(S.readonly) == "function" then return S.readonly(v, "ctx.settings", S.by_name) end
    return v
  end
  local merged = copy(M.DEFAULT_SETTINGS)
  for k, v in pairs(over) do merged[k] = v end
  return merged
end

--- Build a policy context around a fake host.
-- @param o table {host = fake host (default testing.host()), env = environment (default job 101 on
--   n[1-2], node n1), settings = overrides, command = "prolog", json = boolean, dry_run = boolean}
-- @return ctx table as the host passes it to a policy
function M.ctx(o)
  o = o or {}
  local env = o.env or { SLURM_JOB_ID = "101", SLURM_JOB_NODELIST = "n[1-2]", SLURMD_NODENAME = "n1",
    SLURM_JOB_USER = "alice" }
  local job
  local ok, slurmenv = pcall(require, "imexguard.slurmenv")
  if ok and type(slurmenv) == "table" and slurmenv.job then job = slurmenv.job(env) end
  job = job or { id = env.SLURM_JOB_ID or env.SLURM_JOBID, nodename = env.SLURMD_NODENAME,
    user = env.SLURM_JOB_USER }
  if job.nodelist == nil then
    job.nodelist = (env.SLURM_JOB_NODELIST ~= "" and env.SLURM_JOB_NODELIST) or env.SLURM_NODELIST
  end
  return { command = o.command or "prolog", host = o.host or M.host(),
    settings = make_settings(o.settings or {}),
    env = env, job = job, json = o.json or false, dry_run = o.dry_run or false }
end

-- ---------------------------------------------------------------------------------------------
-- Scenarios: given a node and its domain, when an entry point runs for a job, then an outcome
-- and side effects. One scenario is one node whose files, unit, registry and clock persist across
-- the runs, so a sequence (C08: prolog 101, prolog 101', epilog 100) reads top to bottom.

--- Addresses of the default nodes n1..n4.
M.DEFAULT_NODES = { n1 = "10.0.0.1", n2 = "10.0.0.2", n3 = "10.0.0.3", n4 = "10.0.0.4" }

-- unit shorthands -> property overrides (false: not installed)
local UNIT_STATES = {
  active = {},
  inactive = { active_state = "inactive", sub_state = "dead", main_pid = 0 },
  failed = { active_state = "failed", sub_state = "failed", result = "exit-code", main_pid = 0 },
  activating = { active_state = "activating", sub_state = "start" },
  deactivating = { active_state = "deactivating", sub_state = "stop-sigterm" },
  disabled = { unit_file_state = "disabled", active_state = "inactive", sub_state = "dead", main_pid = 0 },
  masked = { unit_file_state = "masked", active_state = "inactive", sub_state = "dead", main_pid = 0 },
}

-- fixed ctl answers by name
local DOMAIN_ANSWERS = {
  unreachable = M.UNREACHABLE, hang = M.HANG, unconfigured = M.UNCONFIGURED, garbage = "garbage",
}

local Scenario = {}
Scenario.__index = Scenario

--- Build a scenario.
-- @param o table, all optional:
--   policy    the policy table, or a module name (default "policies.default")
--   node      this node's Slurm name (default "n1"): SLURMD_NODENAME, hostname, local address
--   nodes     {[name] = IPv4 address}: the resolver (DNS) answers (default M.DEFAULT_NODES)
--   file      the node list file now: a list of names or addresses, the bytes, or false (absent);
--             default: the kit's {10.0.0.1, 10.0.0.2}. The running daemon was started with it.
--   unit      "active" (default) | "inactive" | "failed" | "activating" | "deactivating" |
--             "disabled" | "masked" | "missing" (not installed), or a table of unit properties
--             (state = one of the shorthands, plus overrides such as invocation_id, result)
--   domain    what `nvidia-imex-ctl -N -j` answers: "up" (default: UP with the hosts the daemon
--             runs while the unit is active, else unreachable; follows restarts), "down" (every
--             node UNAVAILABLE), "unreachable", "hang", "unconfigured", "garbage",
--             {unhealthy = {[name or address] = status}} (those nodes in that status),
--             {nodes = {{host = name or address, status =, connections =}}} (a fixed described
--             domain), a list of answers (consumed per call, the last repeats) or a function
--   jobs      registered jobs: {{id = 100, nodes = {"n1", "n3"} or "n[1,3]", age = seconds
--             (600), shared = ...}, ...} or {[100] = {"n1", "n3"}}
--   settings  setting overrides for every run; restart, lock, deadline, files, fail, resolve,
--             fresh_boot, absent_dirs, unhealthy: as testing.host; host: more testing.host options
-- @return scenario object (methods below)
function M.scenario(o)
  o = o or {}
  local self = setmetatable({}, Scenario)
  self.node = o.node or "n1"
  self.nodes = o.nodes or M.DEFAULT_NODES
  self.names = {}
  for name, a in pairs(self.nodes) do self.names[a] = name end
  self.settings = o.settings or {}
  local policy = o.policy or "policies.default"
  self.policy = type(policy) == "string" and require(policy) or policy
  local S = make_settings(self.settings)
  self.state_path = S.state_dir .. "/state.json"
  self.nodes_path = S.nodes_file or M.NODES

  local hopts = { files = {}, resolve = {}, hostname = self.node,
    local_addresses = { self:address(self.node), "127.0.0.1" } }
  for name, a in pairs(self.nodes) do hopts.resolve[name] = { a } end
  for k, v in pairs(o.resolve or {}) do hopts.resolve[k] = v end
  for path, v in pairs(o.files or {}) do hopts.files[path] = v end
  if o.file ~= nil then
    hopts.files[self.nodes_path] = (type(o.file) == "table") and self:bytes(o.file) or o.file
    if self.nodes_path ~= M.NODES then
      hopts.daemon_nodes = type(o.file) == "table" and lines(self:bytes(o.file)) or lines(o.file or "")
    end
  end
  -- unit
  local u = o.unit
  if u == "missing" or u == false then
    hopts.unit = false
  elseif type(u) == "string" then
    hopts.unit = assert(UNIT_STATES[u], "testing.scenario: unknown unit state '" .. u .. "'")
  elseif type(u) == "table" then
    local props = {}
    if u.state then
      local base = assert(UNIT_STATES[u.state], "testing.scenario: unknown unit state '" .. u.state .. "'")
      for k, v in pairs(base) do props[k] = v end
    end
    for k, v in pairs(u) do if k ~= "state" then props[k] = v end end
    hopts.unit = props
  end
  -- domain
  local d = o.domain
  if d == nil or d == "up" then
    hopts.ctl = "auto"
  elseif d == "down" then
    hopts.unhealthy = { ["*"] = "UNAVAILABLE" }
  elseif type(d) == "string" then
    hopts.ctl = { assert(DOMAIN_ANSWERS[d], "testing.scenario: unknown domain '" .. d .. "'") }
  elseif type(d) == "function" then
    hopts.ctl = d
  elseif type(d) == "table" and d.unhealthy then
    hopts.unhealthy = {}
    for k, v in pairs(d.unhealthy) do hopts.unhealthy[self:address(k)] = v end
  elseif type(d) == "table" and d.nodes then
    local nodes = {}
    for i, n in ipairs(d.nodes) do
      local c = {}
      for peer, st in pairs(n.connections or {}) do c[self:address(peer)] = st end
      nodes[i] = { host = self:address(n.host), status = n.status, version = n.version,
        connections = n.connections and c or nil }
    end
    hopts.ctl = { { domain = { status = d.status, nodes = nodes } } }
  else
    hopts.ctl = d
  end
  for _, k in ipairs({ "restart", "lock", "deadline", "fail", "fresh_boot", "absent_dirs", "clock",
    "unit_script" }) do
    if o[k] ~= nil then hopts[k] = o[k] end
  end
  if o.unhealthy then hopts.unhealthy = o.unhealthy end
  for k, v in pairs(o.host or {}) do hopts[k] = v end
  -- registered jobs: the state file as a prolog of each would have left it
  if o.jobs then
    local list = {}
    for k, v in pairs(o.jobs) do
      if type(v) == "table" and v.id ~= nil then list[#list + 1] = v
      else list[#list + 1] = { id = k, nodes = v } end
    end
    table.sort(list, function(a, b) return tostring(a.id) < tostring(b.id) end)
    local jobs = {}
    for i, j in ipairs(list) do
      local e = { id = tostring(j.id), nodes = self:bytes(j.nodes),
        registered_us = string.format("%d", math.floor((M.WALL0 - (j.age or 600)) * 1e6)),
        invocation_id = j.invocation_id or "" }
      for k, v in pairs(j) do
        if e[k] == nil and k ~= "age" and (type(v) == "string" or type(v) == "number" or type(v) == "boolean")
        then e[k] = v end
      end
      jobs[i] = e
    end
    hopts.files[self.state_path] = cjson.encode({ jobs = jobs }) .. "\n"
  end
  self.host = M.host(hopts)
  self.runs = {}
  return self
end

--- Address of a node name (a literal address is returned as is).
function Scenario:address(x)
  return self.nodes[x] or x
end

--- Node-list bytes of a list of names/addresses or a hostlist expression.
function Scenario:bytes(list)
  if type(list) == "string" then
    if list:find("\n") then return list end
    list = assert(require("imexguard.hostlist").expand(list))
  end
  local out = {}
  for i, x in ipairs(list) do out[i] = self:address(x) end
  return table.concat(out, "\n") .. "\n"
end

local function to_names(self, addrs)
  local out = {}
  for i, a in ipairs(addrs) do out[i] = self.names[a] or a end
  return out
end

--- The environment of a run.
-- @param a table {job = id (101), nodelist = hostlist expression, or nodes = list of names,
--   oversubscribe = SLURM_JOB_OVERSUBSCRIBE, user =, env = more variables (false unsets)}
function Scenario:env(a)
  local e = { SLURM_JOB_ID = tostring(a.job or 101), SLURMD_NODENAME = self.node,
    SLURM_JOB_USER = a.user or "alice" }
  local nl = a.nodelist or (a.nodes and table.concat(a.nodes, ","))
  if nl then e.SLURM_JOB_NODELIST = nl end
  if a.oversubscribe then e.SLURM_JOB_OVERSUBSCRIBE = a.oversubscribe end
  for k, v in pairs(a.env or {}) do e[k] = v or nil end
  return e
end

--- Run an entry point of the policy for a job.
-- @param command string "prolog" | "epilog" | "plan" | "status"
-- @param a table see Scenario:env; settings = overrides for this run, json = boolean
-- @return outcome, message, report, ctx (whatever the entry point returns, then the ctx)
function Scenario:run(command, a)
  a = a or {}
  local over = {}
  for k, v in pairs(self.settings) do over[k] = v end
  for k, v in pairs(a.settings or {}) do over[k] = v end
  local ctx = M.ctx{ host = self.host, env = self:env(a), settings = over, command = command,
    json = a.json, dry_run = command == "plan" }
  local f = self.policy[command]
  if type(f) ~= "function" then error("testing.scenario: the policy has no " .. command, 2) end
  local outcome, message, report = f(ctx)
  self.last = { command = command, outcome = outcome, message = message, report = report, ctx = ctx }
  self.runs[#self.runs + 1] = self.last
  return outcome, message, report, ctx
end

function Scenario:prolog(a) return self:run("prolog", a) end
function Scenario:epilog(a) return self:run("epilog", a) end
function Scenario:plan(a) return self:run("plan", a) end
function Scenario:status(a) return self:run("status", a) end

--- Data written to a path, in order (default: the node list file).
function Scenario:writes(path)
  path = path or self.nodes_path
  local out = {}
  for _, w in ipairs(self.host.writes) do
    if w.path == path then out[#out + 1] = w.data end
  end
  return out
end

--- Number of unit jobs that (re)start the daemon (start, restart, try-restart), whatever their result.
function Scenario:restarts()
  local n = 0
  for _, j in ipairs(self.host.jobs) do
    if j.verb == "start" or j.verb == "restart" or j.verb == "try-restart" then n = n + 1 end
  end
  return n
end

--- Number of stop jobs.
function Scenario:stops()
  local n = 0
  for _, j in ipairs(self.host.jobs) do if j.verb == "stop" then n = n + 1 end end
  return n
end

--- Verbs of every unit job, in order ("restart", "stop", ...).
function Scenario:unit_jobs()
  local out = {}
  for i, j in ipairs(self.host.jobs) do out[i] = j.verb end
  return out
end

--- The registry in the state file now: list of job ids (registration order).
function Scenario:registered()
  local out = {}
  for i, e in ipairs(self:registrations()) do out[i] = e.id end
  return out
end

--- The registry entries in the state file now (as imexguard.state loads them; a state file it
-- refuses raises, naming the file).
function Scenario:registrations()
  local st, err = require("imexguard.state").load(self.host, { state_dir = self.state_path:match("^(.*)/") })
  if not st then error("testing.scenario: " .. tostring(err), 2) end
  return st.jobs or {}
end

--- The node list file now: bytes, or nil when absent.
function Scenario:file()
  return self.host.file(self.nodes_path)
end

--- The node list file now as node names (addresses without a name are kept).
function Scenario:file_nodes()
  return to_names(self, lines(self:file()))
end

--- The hosts the running daemon was started with, as node names.
function Scenario:daemon()
  return to_names(self, self.host.daemon_nodes())
end

--- The unit's properties now (a copy).
function Scenario:unit()
  return copy(self.host.unit_props)
end

--- Messages logged at a level (all levels when nil).
function Scenario:logs(level)
  local out = {}
  for _, l in ipairs(self.host.logs) do
    if level == nil or l[1] == level then out[#out + 1] = l[2] end
  end
  return out
end

--- Paths given to host.mkdir, in order.
function Scenario:mkdirs()
  local out = {}
  for i, m in ipairs(self.host.mkdirs) do out[i] = m.path end
  return out
end

--- Number of node locks taken, and whether every one was released.
function Scenario:locks()
  local released = true
  for _, l in ipairs(self.host.locks) do released = released and l.released end
  return #self.host.locks, released
end

--- Forget the recordings (writes, unit jobs, calls, logs...), keep files, unit, registry, clock.
function Scenario:clear()
  self.host.clear()
end

--- Let time pass (virtual clock).
function Scenario:advance(seconds)
  self.host.advance(seconds)
end

--- Parse a KEY=VALUE environment fixture (tests/fixtures/slurm/*.txt; '#' comments).
-- @param text string
-- @return table environment
function M.parse_env(text)
  local env = {}
  for line in text:gmatch("[^\n]+") do
    local k, v = line:match("^([%w_]+)=(.*)$")
    if k then env[k] = v end
  end
  return env
end

return M
