-- SPDX-License-Identifier: Apache-2.0
--- The steps the default policy is built from (docs/design.md, "Decision model of the default
-- policy"; case ids: its "Field cases"). Each step returns its result, or nil, outcome, message
-- (one line naming the node, file, unit or host at fault). The decision steps (applies, desired,
-- read_nodes, assess) have no side effects, so `plan` and `prolog` share them; the acting steps
-- (lock, write_nodes, restart) change the node.
local slurmenv = require "imexguard.slurmenv"
local settings_schema = require "imexguard.settings"
local outcomes = require "imexguard.outcomes"
-- Loaded when first used (imexguard.lazy): the epilog, for one, uses none of the first six.
local lazy = require "imexguard.lazy"
local hostlist = lazy "imexguard.hostlist"
local nodelist = lazy "imexguard.nodelist"
local imexcfg = lazy "imexguard.imexcfg"
local addresses = lazy "imexguard.addresses"
local health = lazy "imexguard.health"
local verdicts = lazy "imexguard.verdict" -- (steps name their verdict tables `verdict`)
local state = lazy "imexguard.state"
local registry = lazy "imexguard.registry"
local domains = lazy "imexguard.domains"
local progress = lazy "imexguard.progress"

local M = {}

--- Largest nodes_config.cfg / config.cfg read (bytes).
M.MAX_FILE = 1024 * 1024
--- Default node list file when neither the setting nor config.cfg names one (NVIDIA's default).
M.DEFAULT_NODES_FILE = "/etc/nvidia-imex/nodes_config.cfg"

-- systemd UnitFileState values under which the unit starts at boot or with its dependencies.
local ENABLED = {
  ["enabled"] = true, ["enabled-runtime"] = true, ["static"] = true, ["indirect"] = true,
  ["generated"] = true, ["alias"] = true, ["linked"] = true, ["linked-runtime"] = true,
  ["transient"] = true,
}

--- Make a message one line (imexguard.text.one_line, kept here for policies that use steps only).
M.one_line = require("imexguard.text").one_line

--- A step's failure: nil, the outcome and a one-line message (string.format of fmt and the rest).
-- @param outcome string
-- @param fmt string format of the message
-- @return nil, outcome, message
function M.fail(outcome, fmt, ...)
  return nil, outcome, M.one_line(string.format(fmt, ...))
end
local fail = M.fail

--- Outcome for a failed primitive: its code "deadline" always means the run's budget ran out.
-- @param code string|nil the primitive's error code
-- @param outcome string the outcome of any other failure
-- @return string "deadline-exceeded" or outcome
function M.by_code(code, outcome)
  if code == "deadline" then return "deadline-exceeded" end
  return outcome
end
local by_code = M.by_code

--- This node's name for messages: SLURMD_NODENAME, else the host name.
function M.node_name(ctx)
  local job = ctx.job or {}
  return job.nodename or (ctx.env and ctx.env.SLURMD_NODENAME) or ctx.host.hostname()
end

--- The job id as a string ("?" when unknown).
function M.job_id(ctx)
  local job = ctx.job or {}
  local id = tostring(job.id or (ctx.env and (ctx.env.SLURM_JOB_ID or ctx.env.SLURM_JOBID)) or "?")
  -- one job, one spelling: "007" (typed by hand) is job 7 (Slurm never writes leading zeros)
  return (id:gsub("^0+(%d)", "%1"))
end

--- Slurm job ids are decimal integers (uint32; array and heterogeneous jobs have numeric ids too).
M.JOB_ID_PATTERN = "^%d+$"
--- Longest job id accepted (digits).
M.JOB_ID_MAX = 20

-- A value shown in a one-line message: control characters escaped, cut at 60 bytes.
local function show(v)
  local t = tostring(v)
  if #t > 60 then t = t:sub(1, 60) .. "..." end
  return (t:gsub("%c", function(c) return string.format("\\%03d", c:byte()) end))
end

--- The job id, checked: SLURM_JOB_ID (else SLURM_JOBID, the 22.05 prolog's name) must be set and a
-- decimal integer. Anything else (unset, empty, spaces, newlines, letters, a sign) is bad input:
-- the id names the job's registration and goes into the final log line.
-- @param ctx table policy context (ctx.env: the raw environment)
-- @return id string, or nil, "bad-input", message naming the variable
function M.check_job_id(ctx)
  local env = ctx.env or {}
  local name, raw = "SLURM_JOB_ID", env.SLURM_JOB_ID
  if raw == nil or raw == "" then
    if env.SLURM_JOBID ~= nil and env.SLURM_JOBID ~= "" then name, raw = "SLURM_JOBID", env.SLURM_JOBID end
  end
  if raw == nil or raw == "" then
    return fail("bad-input", "%s on node %s: no SLURM_JOB_ID in the environment; nothing changed",
      ctx.command or "run", M.node_name(ctx))
  end
  if type(raw) ~= "string" or not raw:match(M.JOB_ID_PATTERN) or #raw > M.JOB_ID_MAX then
    return fail("bad-input", "%s on node %s: %s=\"%s\" is not a Slurm job id (a decimal integer); nothing "
      .. "changed", ctx.command or "run", M.node_name(ctx), name, show(raw))
  end
  return (raw:gsub("^0+(%d)", "%1"))
end

--- Query the unit's properties; a failed query is "unknown", never "inactive" (C17).
-- @return props, or nil, "unit-unknown"|"deadline-exceeded", message
function M.query_unit(ctx)
  local unit = ctx.settings.unit
  local props, err, code = ctx.host.unit(unit)
  if not props then
    return fail(by_code(code, "unit-unknown"), "node %s: state of %s unknown (%s: %s%s); nothing restarted",
      M.node_name(ctx), unit, tostring(code), tostring(err), M.root_hint(ctx.host, code, err))
  end
  return props
end

--- The config.cfg the daemon reads (C28): the `-c PATH` of the unit's ExecStart (systemd's
-- ExecStart property, host.unit's exec_start: the first entry's argv), else NVIDIA's default
-- /etc/nvidia-imex/config.cfg when the ExecStart runs nvidia-imex without `-c` (another program
-- without `-c`, a wrapper, is not known to read it: the setting imex_config stands), and when the
-- host gives no ExecStart. A setting that names another config than the unit's (an
-- imex_config other than its default) is a disagreement: imexguard would read, and write the node
-- list named by, a file the daemon does not read.
-- @param ctx table policy context
-- @param props table the unit's properties (host.unit)
-- @return path string, source string ("unit ExecStart" | "unit ExecStart (no -c: NVIDIA's default)"
--   | "setting imex_config"), or nil, "config-mismatch"|"bad-input", message naming both paths
function M.daemon_config(ctx, props)
  local s = ctx.settings
  local exec = type(props) == "table" and props.exec_start
  local first = type(exec) == "table" and exec[1]
  if type(first) ~= "table" then return s.imex_config, "setting imex_config" end
  local argv = type(first.argv) == "table" and #first.argv > 0 and first.argv or { first.path }
  local ok, path, from_c = pcall(imexcfg.config_path, argv)
  if not ok or not path then
    return fail("bad-input", "node %s: %s: cannot tell which config.cfg the daemon reads: %s; nothing "
      .. "changed", M.node_name(ctx), s.unit, tostring(ok and from_c or path))
  end
  -- without -c, only nvidia-imex itself is known to read NVIDIA's default; a wrapper (a script, the
  -- simulator) may pass its own config: the setting then stands
  local prog = tostring(argv[1] or first.path or ""):match("([^/]*)$")
  if not from_c and prog ~= "nvidia-imex" then
    return s.imex_config, "setting imex_config (" .. prog .. " in ExecStart has no -c)"
  end
  if s.imex_config ~= path and s.imex_config ~= imexcfg.DEFAULT_PATH then
    return fail("config-mismatch", "node %s: setting imex_config=%s, but %s's ExecStart makes the daemon "
      .. "read %s; nothing changed (remove the setting, or point the unit at that file)", M.node_name(ctx),
      s.imex_config, s.unit, path)
  end
  return path, from_c and "unit ExecStart" or "unit ExecStart (no -c: NVIDIA's default)"
end

--- The node list the daemon reads: IMEX_NODE_CONFIG_FILE of its config.cfg (else NVIDIA's default).
-- A nodes_file setting naming another file is a disagreement (C28): the daemon would never read
-- the list imexguard writes.
-- @return path, or nil, "config-mismatch"|"bad-input", message
local function daemon_nodes_file(ctx, cfg, config)
  local s = ctx.settings
  local v, unknown = imexcfg.get(cfg, "IMEX_NODE_CONFIG_FILE")
  if unknown then -- C34: the node list the daemon reads is unknown, so no list can be written for it
    return fail("bad-input", "IMEX config %s: %s; nothing changed (keep one IMEX_NODE_CONFIG_FILE line)",
      config, unknown)
  end
  local nodes_file = (v and v ~= "") and v or M.DEFAULT_NODES_FILE
  -- the daemon's working directory is not ours: a relative path would name another file
  if nodes_file:sub(1, 1) ~= "/" then
    return fail("bad-input", "IMEX config %s: IMEX_NODE_CONFIG_FILE=%s is not an absolute path; nothing "
      .. "changed", config, nodes_file)
  end
  if s.nodes_file and s.nodes_file ~= nodes_file then
    return fail("config-mismatch", "node %s: setting nodes_file=%s, but the daemon reads the node list %s "
      .. "(IMEX_NODE_CONFIG_FILE of %s); nothing changed (remove the setting, or change config.cfg)",
      M.node_name(ctx), s.nodes_file, nodes_file, config)
  end
  return nodes_file
end

--- C34: log the keys config.cfg sets more than once (imexcfg.lint's repeat findings, at warning):
-- the same value is harmless; different values leave the key's value unknown, and each step that
-- needs it says so (the node list: bad-input; the command port: its owner is not checked).
-- @param ctx table policy context
-- @param cfg table parsed config.cfg
-- @param config string its path
function M.log_repeats(ctx, cfg, config)
  for _, f in ipairs(imexcfg.lint(cfg, config)) do
    if f.repeated then ctx.host.log("warning", M.one_line(f.text)) end
  end
end

--- Step 1: does IMEX apply to this node?
-- @return info {unit = props, cfg = {KEY = value}, config = path of the daemon's config.cfg,
--   config_source = where that path came from, nodes_file = path, bind = BIND_INTERFACE_IP or nil},
--   or nil, outcome, message ("skipped" when IMEX does not apply: unit not installed, not enabled,
--   no config.cfg; "config-mismatch" when a setting names another config or node list than the
--   daemon's: see daemon_config)
function M.applies(ctx)
  local s, host = ctx.settings, ctx.host
  local props, o, m = M.query_unit(ctx)
  if not props then return nil, o, m end
  if props.load_state ~= "loaded" then
    return fail("skipped", "IMEX not installed on this node: %s load state %s", s.unit,
      tostring(props.load_state))
  end
  local managed_disabled = false
  if not ENABLED[props.unit_file_state] then
    local o2, m2 = M.disabled_unit(ctx, props)
    if o2 then return nil, o2, m2 end
    managed_disabled = true
  end
  local config, source, cm = M.daemon_config(ctx, props)
  if not config then return nil, source, cm end
  local text, err, code = host.read(config, M.MAX_FILE)
  if not text then
    if code == "ENOENT" then return fail("skipped", "not an IMEX node: %s does not exist", config) end
    return fail(by_code(code, "bad-input"), "IMEX config %s unreadable: %s", config, tostring(err))
  end
  local cfg, perr = imexcfg.parse(text)
  if not cfg then return fail("bad-input", "IMEX config %s: %s", config, tostring(perr)) end
  M.log_repeats(ctx, cfg, config)
  local nodes_file
  nodes_file, o, m = daemon_nodes_file(ctx, cfg, config)
  if not nodes_file then return nil, o, m end
  local bind = cfg.BIND_INTERFACE_IP -- nil when set with different values (C34): found by address
  return { unit = props, cfg = cfg, config = config, config_source = source, nodes_file = nodes_file,
    bind = (bind ~= "" and bind) or nil, managed_disabled = managed_disabled }
end

--- A unit that is installed but not enabled (C23: some node images ship it disabled on purpose, for
-- a per-job tool to start). With the setting manage_disabled_unit = true a "disabled" unit (not a
-- masked one: systemd refuses to start it) is managed per job
-- (started when a job needs it; never enabled: the image's choice stays). Without it the node is
-- skipped; when config.cfg exists (IMEX is configured here) the skip is logged as a warning naming
-- the setting, since every job on the node then runs without IMEX.
-- @param ctx table policy context
-- @param props table the unit's properties (unit_file_state: systemd's UnitFileState)
-- @return nil (manage it), or "skipped", message
function M.disabled_unit(ctx, props)
  local s, host = ctx.settings, ctx.host
  local what = string.format("%s is %s", s.unit, tostring(props.unit_file_state))
  if props.unit_file_state == "disabled" and M.setting(ctx, "manage_disabled_unit", false) then
    host.log("info", M.one_line(string.format("node %s: %s; managed per job (manage_disabled_unit), "
      .. "never enabled", M.node_name(ctx), what)))
    return nil
  end
  local msg = "IMEX not enabled on this node: " .. what
  local config = M.daemon_config(ctx, props) or s.imex_config
  if host.stat(config) then
    msg = string.format("node %s: IMEX is configured (%s exists) but %s: skipped, jobs here run without "
      .. "IMEX; set manage_disabled_unit = true to start the unit per job, or enable it", M.node_name(ctx),
      config, what)
    host.log("warning", M.one_line(msg))
  end
  return "skipped", M.one_line(msg)
end

--- Step 2a: the job's IMEX domain on this node (imexguard.domains; C29, C30): the job's nodes in
-- this node's domain, in the job's hostlist order. The split is logged once (info): the source, this
-- node's domain, the job's nodes in other domains (their own list there) and those left out (in no
-- domain: not IMEX nodes, never waited for). Sets ctx.domain (and returns it).
-- @param ctx table policy context
-- @param names list the job's node names (hostlist order)
-- @param opts table|nil {static = true: the static list is a source (the static policy)}
-- @return domain {name = domain name (nil: no map, or the static list), kind = "topology" |
--   "address_map" | "static" | "none", source = the file or what stands in for it, nodes = the job's
--   nodes in it (hostlist order), left_out = the job's nodes in no domain, others = {{name, nodes}}},
--   or nil, "bad-input" (the map cannot be read or parsed: file and line) | "skipped" (this node is in
--   no domain), message
function M.domain(ctx, names, opts)
  local map, err = domains.load(ctx, opts)
  if not map then return fail("bad-input", "node %s: IMEX domain map: %s; nothing changed", M.node_name(ctx),
    tostring(err)) end
  local node = M.node_name(ctx)
  local dom = { kind = map.kind, source = map.source, nodes = names, left_out = {}, others = {} }
  if map.domains then
    local sp = domains.split(map, names, node)
    if not sp.name then
      local msg = string.format("node %s is in no IMEX domain of %s: not an IMEX node of job %s, skipped "
        .. "(the job's nodes in domains: %d)", node, map.source, M.job_id(ctx), #names - #sp.left_out)
      ctx.host.log("warning", M.one_line(msg))
      return nil, "skipped", M.one_line(msg)
    end
    dom.name, dom.nodes, dom.left_out, dom.others = sp.name, sp.nodes, sp.left_out, sp.others
    ctx.host.log("info", M.one_line(domains.describe(dom, node)))
  elseif map.kind == "none" then
    ctx.host.log("info", M.one_line("IMEX domain: " .. map.source))
  end
  rawset(ctx, "domain", dom)
  return dom
end

--- Step 2: the desired node list: the job's nodes in this node's IMEX domain (M.domain) as addresses.
-- @param opts table|nil {lookup = function(ctx, names) -> list of addresses (same order), or nil,
--   message naming the node, code}: the address source; default: imexguard.addresses.lookup with
--   the settings (DNS, or the address map). A site policy passes its own through the lookup hook.
--   static = true: the static list is a domain source (the static policy narrows want itself).
-- @return want {expr, source, names, addrs, bytes, self, self_index, names_by = {[addr] = name},
--   domain = M.domain's table}, or nil, "bad-input"|"deadline-exceeded"|"skipped", message naming
--   the bad input
function M.desired(ctx, info, opts)
  local s, host = ctx.settings, ctx.host
  local lookup = opts and opts.lookup
  local expr, source, warning = slurmenv.nodelist(ctx.env or {})
  if not expr then return fail("bad-input", "job node list: %s", tostring(source)) end
  if warning then host.log("warning", M.one_line(warning)) end
  local names, herr = hostlist.expand(expr)
  if not names then
    return fail("bad-input", "bad hostlist %s=%q: %s", tostring(source), expr, tostring(herr))
  end
  if #names == 0 then return fail("bad-input", "hostlist %s=%q is empty", tostring(source), expr) end
  local dom, o, m = M.domain(ctx, names, opts)
  if not dom then return nil, o, m end
  names = dom.nodes
  if #names == 0 then
    return fail("bad-input", "node %s: none of the job's nodes (%s=%s) is in its IMEX domain %s (%s)",
      M.node_name(ctx), tostring(source), expr, tostring(dom.name), dom.source)
  end
  local function look(list)
    if lookup then return lookup(ctx, list) end
    return addresses.lookup(host, s, list)
  end
  local addrs, aerr, code = look(names)
  if not addrs and dom.kind == "static" and code ~= "deadline" then
    -- the static list (addresses) is the domain: a node without an address is in no static list,
    -- so it is left out (C30: an address map that omits the CPU nodes), not bad input
    local kept, no_address = {}, {}
    addrs = {}
    for _, n in ipairs(names) do
      local a, _, c = look({ n })
      if a then
        kept[#kept + 1], addrs[#addrs + 1] = n, a[1]
      elseif c == "deadline" then
        return fail("deadline-exceeded", "%s", tostring(aerr))
      else
        no_address[#no_address + 1] = n
      end
    end
    names, dom.nodes, dom.left_out = kept, kept, no_address
  end
  if not addrs then return fail(by_code(code, "bad-input"), "%s", tostring(aerr)) end
  local want, werr = M.want_of(ctx, info, expr, source, names, addrs)
  if not want then return nil, "bad-input", werr end
  want.domain = dom
  return want
end

--- The desired list of the given nodes and their addresses, checked (nodelist.check; this node in it).
-- @param ctx table policy context
-- @param info table from applies (bind)
-- @param expr string the job's hostlist, source string its variable
-- @param names list node names, addrs list their addresses (same order)
-- @return want (see M.desired, without domain), or nil, message
function M.want_of(ctx, info, expr, source, names, addrs)
  local s, host = ctx.settings, ctx.host
  local ok, cerr = nodelist.check(addrs, { allow_loopback = s.allow_loopback, names = names })
  if not ok then
    return nil, M.one_line(string.format("job node list from %s=%s: %s", tostring(source), expr,
      tostring(cerr)))
  end
  local self, idx = addresses.self(host, info.bind, addrs)
  if not self then return nil, M.one_line(string.format("node %s: %s", M.node_name(ctx), tostring(idx))) end
  local by = {}
  for i, a in ipairs(addrs) do by[a] = names[i] end
  return { expr = expr, source = source, names = by, list = names, addrs = addrs, self = self,
    self_index = idx, bytes = nodelist.format(addrs) }
end

--- A held node lock; closing it (to-be-closed variable, or :release()) unlocks it once.
local Guard = {}
Guard.__index = Guard
function Guard:release()
  if self.lock then
    local lk = self.lock
    self.lock = nil
    lk:unlock()
  end
end
Guard.__close = Guard.release

--- A setting the schema may not have yet: its value, or `default` when imexguard.settings does not
-- define it (reading an unknown key of ctx.settings raises, so a policy asks here first).
-- @param ctx table policy context
-- @param name string setting name
-- @param default any
-- @return value
function M.setting(ctx, name, default)
  if not settings_schema.by_name[name] then return default end
  local v = ctx.settings[name]
  if v == nil then return default end
  return v
end

--- Mode of the state directory (0755).
M.STATE_DIR_MODE = tonumber("755", 8)

--- Create a directory, its last component only (host.mkdir: an existing directory is success).
-- The parent must exist: a misspelt setting (state_dir = "/rnu/imexguard") then fails with the
-- parent named instead of creating a whole tree (mkdir without -p, as systemd's
-- RuntimeDirectory= creates one directory under /run). The state directory (/run/imexguard by
-- default) is on a tmpfs: it is gone after a reboot, its parent /run is not.
-- @param host table the primitives (mkdir; a host without it is left alone)
-- @param path string absolute directory
-- @param mode integer permission bits (e.g. 493 = 0755)
-- @return true, or nil, message, code (mkdir's; ENOENT: the message names the missing parent)
function M.ensure_dir(host, path, mode)
  if type(host.mkdir) ~= "function" then return true end
  local ok, err, code = host.mkdir(path, mode)
  if ok then return true end
  if code == "ENOENT" then
    local parent = path:match("^(.+)/[^/]+/*$") or "/"
    return nil, string.format("its parent directory %s does not exist (only the last component is created: "
      .. "is the setting misspelt?)", parent), code
  end
  return nil, err .. M.root_hint(host, code), code
end

-- What a refused D-Bus call of a non-root process says (systemd's polkit check: the bus
-- primitives' code is "bus", the cause is in the message).
local DENIED = { "Access denied", "Permission denied", "Interactive authentication required" }

--- The hint of a permission error: " (running as uid N: run as root)" when the error is EACCES or
-- EPERM (or a D-Bus call refused with "Access denied", "Interactive authentication required") and
-- this process is not root (host.euid), else "". Only where a permission error is the cause: other
-- errors of a non-root run say nothing about root.
-- @param host table the primitives (euid when present)
-- @param code string|nil the error's code
-- @param message string|nil the error's message
-- @return string
function M.root_hint(host, code, message)
  local denied = code == "EACCES" or code == "EPERM"
  for _, d in ipairs(DENIED) do
    denied = denied or (type(message) == "string" and message:find(d, 1, true) ~= nil)
  end
  if not denied then return "" end
  local euid = type(host.euid) == "function" and host.euid() or nil
  if euid == 0 then return "" end
  return euid and string.format(" (running as uid %d: run as root)", euid) or " (run as root)"
end

--- Seconds the epilog keeps of its budget for its own work after waiting for the node lock.
M.EPILOG_RESERVE = 2
--- Seconds a run keeps of its budget after waiting for the node lock when lock_timeout is unset:
-- behind a run ahead that brought the domain up, a prolog needs one ctl check (ctl_timeout, 5 s by
-- default at most) and the state file.
M.LOCK_RESERVE = 5

--- How long a run waits for the node lock: the setting lock_timeout, or when it is unset (the
-- default) the run's whole budget less LOCK_RESERVE; the epilog waits up to its whole budget less
-- EPILOG_RESERVE when that is longer. The holder is a run that started earlier and ends by its
-- own deadline (a dead holder's flock is freed by the kernel), so a fixed wait shorter than a
-- whole run loses to a legitimate one: a prolog may hold the lock for start_timeout +
-- health_timeout (C24 of docs/design.md), and a prolog queued behind it that gave up after 60 s
-- drained its node with lock-timeout. A failed epilog drains a healthy node in Slurm.
-- @tparam table ctx the run's context
-- @treturn number seconds
function M.lock_wait(ctx)
  local t = ctx.settings.lock_timeout
  if t == nil then t = math.max(0.1, ctx.host.remaining() - M.LOCK_RESERVE) end
  if ctx.command == "epilog" then
    t = math.max(t, ctx.host.remaining() - M.EPILOG_RESERVE)
  end
  return t
end

--- "pid N (job=J)" of a lock holder (host.lock's fourth result), or "an unknown process".
-- @param holder table|nil {pid, owner}
-- @return string
function M.lock_holder_text(holder)
  return holder and holder.pid and string.format("pid %s (%s)", tostring(holder.pid),
    tostring(holder.owner or "no holder record")) or "an unknown process"
end

--- host.lock(path, timeout, "job=ID") in steps of at most progress.EVERY seconds, telling the wait's
-- progress at info between them ("waiting for node lock PATH held by pid N (job=J) (10s / 1min
-- 25s)"): a prolog queued behind another run is not silent for a minute.
-- @param ctx table policy context
-- @param path string the lock file
-- @param timeout number seconds in all
-- @return host.lock's results (the last attempt's)
function M.lock_waiting(ctx, path, timeout)
  local host = ctx.host
  local t0 = host.now()
  local told = progress.new(host, "node lock " .. path, timeout)
  while true do
    local left = timeout - (host.now() - t0)
    local step = math.min(left, progress.EVERY)
    local lk, err, code, holder = host.lock(path, step, "job=" .. M.job_id(ctx))
    if lk or code ~= "timeout" or left <= step then return lk, err, code, holder end
    told.what = "node lock " .. path .. " held by " .. M.lock_holder_text(holder)
    told:tick()
  end
end

--- Step 3: take the node lock (state_dir/lock), creating state_dir first (host.mkdir, 0755).
-- @return guard (use `local g <close> = guard`), or nil, outcome, message: "lock-timeout" only when
--   another run held the lock too long (the message names its pid and job); "deadline-exceeded"
--   when the run's budget ran out; "write-failed" when the state directory or the lock file cannot
--   be created or opened (ENOSPC, EROFS, EACCES...: the message names the directory and the error)
function M.lock(ctx)
  local s = ctx.settings
  local path = s.state_dir .. "/lock"
  local dok, derr, dcode = M.ensure_dir(ctx.host, s.state_dir, M.STATE_DIR_MODE)
  if not dok then
    return fail(by_code(dcode, "write-failed"), "node %s: cannot create the state directory %s for node lock "
      .. "%s: %s; nothing changed", M.node_name(ctx), s.state_dir, path, tostring(derr))
  end
  local timeout = M.lock_wait(ctx)
  local lk, err, code, holder = M.lock_waiting(ctx, path, timeout)
  if not lk then
    local who = M.lock_holder_text(holder)
    if code == "timeout" then
      return fail("lock-timeout", "node %s: node lock %s held by %s for more than %g s", M.node_name(ctx),
        path, who, timeout)
    elseif code == "deadline" then
      return fail("deadline-exceeded",
        "node %s: the run's deadline passed waiting for node lock %s held by %s", M.node_name(ctx), path, who)
    end
    return fail("write-failed", "node %s: cannot create or open node lock %s in the state directory %s "
      .. "(%s): %s%s; nothing changed", M.node_name(ctx), path, s.state_dir, tostring(code), tostring(err),
      M.root_hint(ctx.host, code))
  end
  return setmetatable({ lock = lk }, Guard)
end

--- Step 4a: the node list file's current bytes.
-- @return string bytes ("" when the file does not exist), or nil, message when unreadable (the file
--   is then rewritten: an unreadable or oversized list is never right)
function M.read_nodes(ctx, info)
  local text, err, code = ctx.host.read(info.nodes_file, M.MAX_FILE)
  if text then return text end
  if code == "ENOENT" then return "" end
  return nil, string.format("%s unreadable (%s)", info.nodes_file, tostring(err))
end

--- C39: under the node lock, remove the temp files a killed write left next to the state file and
-- the node list (host.remove_temps: only `.<basename>.imexguard.XXXXXX` names of those two files, whose
-- writer is gone; never anything else). Best effort: a failure is logged at debug, like each
-- removal. A host without the primitive (an older kit) removes nothing.
-- @param ctx table policy context
-- @param info table|nil from applies (info.nodes_file); nil: the state file's directory only
-- @return list of the removed paths
function M.remove_temps(ctx, info)
  local host, removed = ctx.host, {}
  if type(host.remove_temps) ~= "function" then return removed end
  local paths = { state.path(ctx.settings) }
  if info and info.nodes_file then paths[#paths + 1] = info.nodes_file end
  for _, path in ipairs(paths) do
    local names, err = host.remove_temps(path)
    local dir = path:match("^(.*)/[^/]*$") or "."
    if type(names) == "table" then
      table.sort(names)
      for _, n in ipairs(names) do
        removed[#removed + 1] = dir .. "/" .. n
        host.log("debug", M.one_line(string.format("removed %s/%s, the temp file of a write of %s that was "
          .. "killed before its rename", dir, n, path)))
      end
    elseif names == nil then
      host.log("debug", M.one_line("leftover temp files not checked: " .. tostring(err)))
    end
  end
  return removed
end

--- Step 4b: write the node list atomically and record it in the state file.
-- @param st table state (updated in place)
-- @return true, or nil, "write-failed"|"deadline-exceeded", message (the primitive's: it says
--   whether the old file is intact)
function M.write_nodes(ctx, info, want, st)
  local host = ctx.host
  local ok, err, code = host.write_atomic(info.nodes_file, want.bytes, tonumber("644", 8))
  if not ok then
    -- host.write_atomic's message says whether the old file is intact (or, when only the final
    -- directory fsync failed, that it was replaced): it is not repeated here.
    return fail(by_code(code, "write-failed"), "node %s: writing node list %s failed: %s%s",
      M.node_name(ctx), info.nodes_file, tostring(err), M.root_hint(host, code))
  end
  st.nodes = want.bytes
  st.written_us = host.wallclock() * 1e6
  st.job = M.job_id(ctx)
  local sok, serr = state.save(host, ctx.settings, st)
  if not sok then host.log("warning", M.one_line("state file not updated: " .. tostring(serr))) end
  return true
end

--- Step 5a: the unit's state once it has settled (C17: activating/deactivating means wait).
-- @param wait boolean poll while activating/deactivating (bounded by start_timeout); false: return
--   the unsettled properties at once (plan)
-- @return props, or nil, outcome, message
function M.settle_unit(ctx, wait)
  local s, host = ctx.settings, ctx.host
  local start = host.now()
  local told = progress.new(host, s.unit .. " to settle", s.start_timeout)
  while true do
    local props, o, m = M.query_unit(ctx)
    if not props then return nil, o, m end
    local a = props.active_state
    if not wait or (a ~= "activating" and a ~= "deactivating") then return props end
    told:tick(a)
    if host.now() - start >= s.start_timeout then
      return fail("service-failed", "node %s: %s still %s after %g s (wait-timeout)", M.node_name(ctx),
        s.unit, a, s.start_timeout)
    end
    local ok = host.sleep(math.min(s.poll_interval, s.start_timeout - (host.now() - start)))
    if not ok then
      return fail("deadline-exceeded", "node %s: deadline passed while %s was %s", M.node_name(ctx),
        s.unit, a)
    end
  end
end

--- Stage "unit state" of assess: a unit that is not running. Sets v.action and v.reason and returns true for
-- activating/deactivating ("wait"), failed ("start" after reset-failed) and inactive ("start").
-- @param v table the verdict being built (v.unit: settled props)
-- @return true when the unit's state decided the verdict, false for an active (or reloading) unit
local function stage_unit_state(ctx, v)
  local s, props = ctx.settings, v.unit
  local a = props.active_state
  if a == "activating" or a == "deactivating" then
    v.action, v.reason = "wait", string.format("%s is %s; prolog would wait up to %g s", s.unit, a,
      s.start_timeout)
  elseif a == "failed" then
    v.action, v.reset_failed = "start", true
    v.reason = string.format("%s failed (result %s)", s.unit, tostring(props.result))
  elseif a ~= "active" and a ~= "reloading" then
    v.action, v.reason = "start", string.format("%s is %s", s.unit, tostring(a))
  else
    return false
  end
  return true
end

--- Stage "started with" of assess: the files the running daemon was started with. (a) imexguard started this
-- very daemon instance (same invocation ID) and recorded the exact bytes of both files it started
-- with: those bytes decide, the mtimes do not (a `touch`, or config management rewriting identical
-- bytes, is no reason to restart). (b) Fallback when the invocation is unknown to the state file:
-- a file the daemon reads at start was written at or after its start.
-- @return string reason why the daemon is stale, or nil
local function stage_started_with(ctx, info, want, st, props)
  local s, host = ctx.settings, ctx.host
  local config = info.config or s.imex_config
  local cfg_now = type(st.running_config) == "string" and host.read(config, M.MAX_FILE) or nil
  local same_invocation = type(st.invocation_id) == "string" and st.invocation_id ~= ""
    and st.invocation_id == props.invocation_id
  if same_invocation and type(st.running_nodes) == "string" and st.running_nodes ~= want.bytes then
    return string.format("daemon (invocation %s) was started with another node list", props.invocation_id)
  end
  if same_invocation and type(st.running_nodes) == "string" and cfg_now then
    if cfg_now ~= st.running_config then
      return string.format("%s differs from the one daemon invocation %s was started with", config,
        props.invocation_id)
    end
    return nil
  end
  local started = tonumber(props.exec_main_start_us) or 0
  if started <= 0 then return nil end
  for _, path in ipairs({ info.nodes_file, config }) do
    local fst = host.stat(path)
    if fst and fst.mtime_us and fst.mtime_us >= started then
      return string.format("%s changed after the daemon started", path)
    end
  end
  return nil
end

--- Stage "ctl" of assess: the ctl proves another node map; an unusable answer proves nothing (C06).
-- The daemon's identity of the domain is its ordered ID -> host map (a node's ID is its line in
-- the list the daemon started with): "same nodes, another order" is stale (C21), a host set never
-- decides. A running daemon's list always holds this node (else it refuses to start), so an answer
-- that lacks this node describes no running daemon: it proves nothing (the health wait judges it).
-- Sets v.action ("restart" stays, or "none"), v.reason, v.order (verdict.compare_map's kind) and
-- v.answer (kept for the first health poll).
-- @param probe table|nil the ctl already started (M.start_probe): its answer; nil: health.probe now
local function stage_ctl(ctx, want, v, probe)
  local ans
  if probe then ans = probe:answer() else ans = health.probe(ctx, nil, want.config_path, want.cfg) end
  v.answer = ans
  if not ans.domain then
    v.action, v.reason = "none", "daemon current by its start time; ctl unusable: " .. tostring(ans.err)
    return
  end
  local cmp = verdicts.compare_map(ans.domain, want.addrs, want.self)
  v.order = cmp.kind
  if cmp.kind == "self-absent" then
    v.action = "none"
    v.reason = "daemon current by its start time; the ctl does not list this node " .. want.self
  elseif cmp.kind == "same" then
    v.action, v.reason = "none", "daemon current"
  else
    v.reason = "the ctl shows the daemon running another node map than the job's: " .. cmp.summary
    v.answer = nil
  end
end

--- A staleness probe started ahead of its stage (host.spawn): the ctl of health.probe runs while
-- the run does other work. probe:answer() is health.probe's answer, judged by health.probe itself:
-- its one host.run is the started process's wait (the same argv, ctl_timeout and output cap; the
-- timeout counts from the start). Closing a probe that was never answered kills and reaps its ctl.
local Probe = {}
Probe.__index = Probe

--- Start the ctl of health.probe now (host.spawn); its answer comes with probe:answer().
-- @param ctx table policy context
-- @param config string|nil the daemon's config.cfg for the ctl's `-c`, as health.probe's
-- @param cfg table|nil that config, parsed, as health.probe's
-- @return probe (use `local p <close> = probe`; a failed start is answered as health.probe answers a
--   command that cannot run)
function M.start_probe(ctx, config, cfg)
  local s = ctx.settings
  local proc, err, code = ctx.host.spawn(health.ctl_argv(s, config, cfg),
    { timeout = s.ctl_timeout, max_output = health.MAX_OUTPUT })
  return setmetatable({ ctx = ctx, config = config, cfg = cfg, proc = proc, err = err, code = code }, Probe)
end

--- Wait for the started ctl: health.probe's answer ({domain = ...} or {err, kind}).
function Probe:answer()
  local probe, ctx = self, self.ctx
  local function run() -- health.probe's one command: the started one
    if not probe.proc then return nil, probe.err, probe.code end
    return probe.proc:wait()
  end
  local host = setmetatable({ run = run }, { __index = ctx.host })
  -- health.probe records the answer it parsed in ctx.domain_seen: the view passes writes to ctx
  return health.probe(setmetatable({ host = host }, { __index = ctx, __newindex = ctx }), nil, self.config,
    self.cfg)
end

--- Kill and reap the ctl unless it was waited for (also the probe's __close). Idempotent.
function Probe:close()
  if self.proc then self.proc:close() end
end
Probe.__close = Probe.close

--- Can the unit as step 1 saw it (info.unit, read before the lock) lead to stage "ctl"? Running
-- (active or reloading) with a known InvocationID, and no list change pending (plan).
local function may_reach_ctl(ctx, props, opts)
  if type(ctx.host.spawn) ~= "function" or type(props) ~= "table" then return false end
  if props.active_state ~= "active" and props.active_state ~= "reloading" then return false end
  if opts.changed and opts.write_pending then return false end
  return type(props.invocation_id) == "string" and props.invocation_id ~= ""
end

--- Is `b` the daemon instance `a` described? The same InvocationID (systemd gives every start a new
-- one) and ExecMainStartTimestamp: all that stage "started with" takes from the unit.
local function same_daemon(a, b)
  return a.invocation_id == b.invocation_id and a.exec_main_start_us == b.exec_main_start_us
end

--- Step 5: is the running daemon stale?
-- @param st table state file contents
-- @param opts table {changed = the list file's bytes differ (written now, or would be in plan),
--   wait = wait for activating/deactivating, write_pending = plan (the file is not written)}.
--   An active daemon is stale when: the list changes; or, when the state file recorded this
--   invocation ID with the bytes it was started with (st.running_nodes, st.running_config), those
--   bytes differ from the job's list or from config.cfg now; or, when it did not (a daemon started
--   outside imexguard, or an older state file), config.cfg or the list was modified at or after
--   the daemon's start (mtime); or a usable ctl answer lists other hosts. The stages, in order:
--   settle_unit, "unit state" (not running: start or wait), a pending list change, "started with"
--   (the state file's record, else mtimes), "ctl" (the running list as the ctl shows it).
--   The overlap (docs/design.md, step 5): when the unit as step 1 saw it (info.unit) leads to stage
--   "ctl", "started with" is judged on it and the ctl starts before settle_unit's query, so that the
--   two run at once; both are used only when the query shows the same daemon instance (then every
--   stage decides as it did on info.unit). Otherwise the ctl is killed unread and the stages run on
--   the query's properties alone. The ctl thus runs where it ran before, and beyond that only when
--   the unit changed between step 1 and the query (a restart by another run or an admin): then it
--   is a read-only query killed unread.
-- @return verdict {action = "none"|"start"|"restart"|"wait", reset_failed = boolean, reason = string,
--   unit = props, answer = ctl answer or nil (reused as the first health poll), nodes = want.bytes
--   (the list the daemon would run after the action), changed = opts.changed}, or nil, outcome, message
function M.assess(ctx, info, want, st, opts)
  local early = info and info.unit
  local early_reason, started
  if may_reach_ctl(ctx, early, opts) then
    early_reason = stage_started_with(ctx, info, want, st, early)
    if not early_reason then started = M.start_probe(ctx, want.config_path, want.cfg) end
  end
  local probe <close> = started -- killed on every path that does not answer it
  local props, o, m = M.settle_unit(ctx, opts.wait)
  if not props then return nil, o, m end
  local v = { unit = props, action = "none", nodes = want.bytes, changed = opts.changed and true or false }
  if stage_unit_state(ctx, v) then return v end
  v.action = "restart"
  if opts.changed and opts.write_pending then
    v.reason = "node list changes; the daemon reads it only at start"
    return v
  end
  local same = may_reach_ctl(ctx, early, opts) and same_daemon(early, props)
  if same then
    v.reason = early_reason
  else
    v.reason = stage_started_with(ctx, info, want, st, props)
  end
  if v.reason then return v end
  stage_ctl(ctx, want, v, same and probe or nil)
  return v
end

--- Step 6: may the daemon be (re)started, or the node list rewritten, under the other jobs that use
-- IMEX on this node? The default rule (docs/design.md, step 6, case C08), two parts:
--   1. another registered job with a DIFFERENT node list blocks any change (a rewrite, a restart,
--      a start): its peers would drop its imports, or its daemon would come back with a list it
--      cannot use;
--   2. an ACTIVE daemon is never restarted while any other job is registered, whatever its list:
--      a restart drops every import of the running daemon (docs/design.md, "IMEX facts").
--      Starting an inactive or failed daemon under jobs with the same list is allowed (there is
--      nothing to break).
-- The setting restart_under_jobs = true allows both anyway (a warning names the jobs). Call it
-- BEFORE writing the node list: on refusal the file and the unit stay as they are.
-- With the setting registration_max_age (seconds, when the schema has it), older registrations are
-- dropped from `st` first (stale: an epilog that never ran; see imexguard.registry).
-- @param ctx table policy context (ctx.job.id: this job, never in conflict with itself)
-- @param st table state file contents (st.jobs: the registry)
-- @param verdict table from assess (nodes: the list the daemon would run; action)
-- @return true, or false, message (one line naming the job ids, what to do; the policy then
--   returns "conflict"), and the list of blocking entries
function M.may_restart(ctx, st, verdict)
  local s, host = ctx.settings, ctx.host
  local now_us = host.wallclock() * 1e6
  local stale = registry.prune(st, now_us, M.setting(ctx, "registration_max_age"))
  if #stale > 0 then
    host.log("warning", M.one_line(string.format("node %s: ignoring stale registration(s) of job %s "
      .. "(older than registration_max_age)", M.node_name(ctx), registry.ids(stale))))
  end
  local id = M.job_id(ctx)
  local blocking, why, short = registry.conflicting(st, id, verdict.nodes), "it with another node list",
    "other node list"
  if #blocking == 0 and verdict.action == "restart" then
    blocking = registry.others(st, id)
    why, short = "the running daemon, and a restart drops every import", "same node list, running daemon"
  end
  if #blocking == 0 then return true, nil, blocking end
  if s.restart_under_jobs then
    host.log("warning", M.one_line(string.format("node %s: %s %s for job %s under job %s (%s), "
      .. "allowed by restart_under_jobs", M.node_name(ctx), verdict.action, s.unit, id,
      registry.ids(blocking), short)))
    return true, nil, blocking
  end
  return false, M.conflict_message(ctx, verdict, blocking, why), blocking
end

-- The addresses of node-list bytes, in file order.
local function lines(bytes)
  local l = {}
  for a in tostring(bytes):gmatch("[^\n]+") do l[#l + 1] = a end
  return l
end

-- The fields of a job's registry entry besides its id, node list and time: the boot it belongs to
-- (C36), the job's hosts compressed for people (`hosts`), then the policy's `extra` (which wins).
local function entry_fields(ctx, want, extra)
  local e = { boot_id = M.boot_id(ctx) }
  if type(want.list) == "table" then e.hosts = hostlist.ranged(want.list) end
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end

-- This job's hosts for a person: its Slurm node list compressed, else the addresses of `bytes`.
local function job_hosts(ctx, bytes)
  local expr = ctx.job and ctx.job.nodelist
  local names = type(expr) == "string" and hostlist.expand(expr)
  local shown = names and hostlist.ranged(names)
  return shown or hostlist.show(lines(bytes))
end

--- The conflict message, cause first: which jobs block (their hosts compressed as Slurm writes
-- them, how long ago they registered), then what this job would do, then how an admin clears a
-- stale registration (`imexguard forget JOBID`).
-- @param ctx table policy context
-- @param verdict table from assess (action, nodes, changed)
-- @param entries list registry entries that block
-- @param why string e.g. "it with another node list" (after "uses"/"use"; "it" is the unit)
-- @return string one line
function M.conflict_message(ctx, verdict, entries, why)
  local now_us = ctx.host.wallclock() * 1e6
  local unit = ctx.settings.unit
  local parts = {}
  for i, e in ipairs(entries) do
    parts[i] = string.format("%s (%s, %sregistered %s ago)", e.id, registry.entry_hosts(e),
      e.shared and ("shared " .. tostring(e.shared) .. ", ") or "",
      registry.show_age((now_us - (e.registered_us or now_us)) / 1e6))
  end
  local what = verdict.action ~= "none" and (verdict.action .. " " .. unit) or ""
  if verdict.changed then what = "rewrite the node list" .. (what ~= "" and (" and " .. what) or "") end
  local one = #entries == 1
  return M.one_line(string.format("node %s: %s %s %s %s; job %s would %s for %s; nothing written or "
    .. "restarted; if %s no longer runs here: imexguard forget %s", M.node_name(ctx),
    one and "job" or "jobs", table.concat(parts, ", "), one and "uses" or "use",
    (why:gsub("^it ", unit .. " ")), M.job_id(ctx), what, job_hosts(ctx, verdict.nodes),
    one and ("job " .. entries[1].id) or "one of them", one and entries[1].id or "JOBID"))
end

--- The registry's identity for M.wait_registry: its job ids and their node lists, in order.
-- @param st table state
-- @return string
function M.registry_key(st)
  local parts = {}
  for i, e in ipairs(registry.jobs(st)) do parts[i] = tostring(e.id) .. "=" .. tostring(e.nodes) end
  return table.concat(parts, ";")
end

--- C24: wait, WITHOUT the node lock, until the registry in the state file differs from `key` (an
-- epilog unregistered its job) or monotonic time `until_t` (host.now seconds) passes or the run's
-- deadline nears (host.sleep fails). Polls every poll_interval seconds; the state file is
-- replaced atomically, so reading it without the lock sees a whole registry.
-- @param ctx table policy context
-- @param key string M.registry_key of the registry that refused the change
-- @param until_t number host.now() time to give up at
-- @return true when the registry changed (decide again), false when the time passed
function M.wait_registry(ctx, key, until_t)
  local host, s = ctx.host, ctx.settings
  local boot = M.boot_id(ctx)
  local told = progress.new(host, "the registered jobs' epilogs (conflict_wait)", until_t - host.now())
  while host.now() < until_t do
    told:tick()
    local ok = host.sleep(math.min(s.poll_interval, until_t - host.now()))
    if not ok then return false end
    local st = state.load(host, s)
    if st then registry.drop_other_boots(st, boot) end -- as the locked run sees it (C36)
    if st and M.registry_key(st) ~= key then return true end
  end
  return false
end

--- Step 9: register this job (prolog succeeded) and save the state file, under the node lock.
-- @param ctx table policy context (job id)
-- @param st table state (changed and saved)
-- @param want table desired list (bytes)
-- @param extra table|nil more fields of the entry (invocation_id is filled from the unit)
-- @return entry, or nil, message (state file not written; the policy ends in write-failed: a job
--   the registry does not know is unprotected), code (host.write_atomic's), or nil when the job has
--   no id (nothing registered, a warning is logged)
function M.register(ctx, st, want, extra)
  local host = ctx.host
  local id = M.job_id(ctx)
  if id == "?" then
    host.log("warning", "job has no SLURM_JOB_ID: not registered")
    return nil
  end
  local e = entry_fields(ctx, want, extra)
  if e.invocation_id == nil or e.invocation_id == "" then
    local props = host.unit(ctx.settings.unit)
    e.invocation_id = props and props.invocation_id or ""
  end
  local entry = registry.register(st, id, want.bytes, host.wallclock() * 1e6, e)
  local ok, err, code = state.save(host, ctx.settings, st)
  if not ok then
    return nil, M.one_line(string.format("state file %s not written, job %s not registered: %s",
      state.path(ctx.settings), id, tostring(err))), code
  end
  return entry
end

--- The message for a state file that cannot be read or is corrupt (state.load failed): the job
-- registry is unknown, so nothing may change and the file must not be overwritten.
-- @param ctx table policy context
-- @param err string state.load's message (names the file and the error)
-- @return "conflict", one-line message (what to do)
function M.registry_unknown(ctx, err)
  return "conflict", M.one_line(string.format("node %s: %s: the job registry is unknown, nothing changed and "
    .. "the file is kept. Inspect it; remove it only when no job uses IMEX on this node (the next "
    .. "prolog then starts a new registry)", M.node_name(ctx), tostring(err)))
end

--- A change in progress (M.begin_change): the job's registration, saved before the change.
local Change = {}
Change.__index = Change

--- Keep the registration (the prolog succeeded), or remove it again (best effort, logged) when the
-- run ends in an outcome with a non-zero exit. Idempotent.
-- @param outcome string the run's outcome
-- @return string note for the run's message ("job 101 registered" / "job 101 unregistered ...")
function Change:finish(outcome)
  if self.finished then return self.note end
  self.finished = true
  local ctx, st = self.ctx, self.st
  local code = outcomes.exit_code(outcome, ctx.settings)
  if code == 0 then
    self.note = "job " .. self.id .. " registered"
    st.deploying_nodes, st.deploying_job, st.deploying_us = nil, nil, nil
    local ok, err = state.save(ctx.host, ctx.settings, st)
    if not ok then
      -- the job stays registered; the next run takes the leftover record for an interrupted prolog
      ctx.host.log("warning", M.one_line(string.format("node %s: state file %s not updated after job %s: %s",
        M.node_name(ctx), state.path(ctx.settings), self.id, tostring(err))))
    end
    return self.note
  end
  registry.unregister(st, self.id)
  st.deploying_nodes, st.deploying_job, st.deploying_us = nil, nil, nil
  local ok, err = state.save(ctx.host, ctx.settings, st)
  if ok then
    self.note = string.format("job %s unregistered (%s)", self.id, tostring(outcome))
  else
    self.note = string.format("job %s could not be unregistered (%s); after it ends: SLURM_JOB_ID=%s "
      .. "imexguard epilog", self.id, tostring(err), self.id)
    ctx.host.log("warning", M.one_line(string.format("node %s: prolog of job %s ended %s but its "
      .. "registration stays in state file %s: %s", M.node_name(ctx), self.id, tostring(outcome),
      state.path(ctx.settings), tostring(err))))
  end
  return self.note
end

-- Leaving the scope without finish (a step raised): unregister, as for a failing outcome.
function Change:__close(err)
  if not self.finished then self:finish(err ~= nil and "policy-error" or "conflict") end
end

--- Under the node lock: a record of a deployment in progress (st.deploying_job) means the prolog
-- that wrote it died before it ended (it held this lock; kill -9, a node crash, slurmd's kill at
-- PrologEpilogTimeout). Slurm fails a job whose prolog did not finish (drain, requeue), so that
-- job does not run here: its registration is dropped, or it would block the next job (conflict).
-- A requeued job registers again in its own prolog. The state is saved with the next registration.
-- @param st table state (changed in place)
-- @return the dropped job id, or nil
function M.drop_interrupted(ctx, st)
  local id = st.deploying_job
  if not id then return nil end
  registry.unregister(st, id)
  st.deploying_nodes, st.deploying_job, st.deploying_us = nil, nil, nil
  ctx.host.log("warning", M.one_line(string.format("node %s: the prolog of job %s was interrupted during "
    .. "a change (its record is still in %s); Slurm does not run a job whose prolog did not finish, so "
    .. "its registration is dropped", M.node_name(ctx), tostring(id), state.path(ctx.settings))))
  return id
end

--- The kernel's boot ID (C36): the first line of the setting boot_id_file (default
-- /proc/sys/kernel/random/boot_id, a UUID that Linux draws anew at each boot: random(4)), read
-- with host.read (at most 64 bytes).
-- @param ctx table policy context
-- @return string boot ID, or nil when it cannot be read or is not one line of [0-9a-f-] (then no
--   registration is tied to a boot and none is dropped; logged at debug)
function M.boot_id(ctx)
  local path = M.setting(ctx, "boot_id_file")
  if not path then return nil end
  local text, err = ctx.host.read(path, 64)
  local id = text and text:match("^([%x%-]+)\n?$")
  if not id then
    ctx.host.log("debug", M.one_line(string.format("boot ID unknown (%s): job registrations are not tied "
      .. "to a boot", text and (path .. " is not a boot ID") or tostring(err))))
    return nil
  end
  return id:lower()
end

--- C36: drop the registrations made during another boot (imexguard.registry.drop_other_boots): a
-- state_dir that outlives a reboot still lists the jobs the reboot ended. Logged at warning, one
-- line naming the jobs; the caller saves the state when it saves it anyway.
-- @param ctx table policy context
-- @param st table state (changed in place)
-- @return list of the removed entries
function M.drop_other_boots(ctx, st)
  local now = M.boot_id(ctx)
  local removed = registry.drop_other_boots(st, now)
  if #removed > 0 then
    ctx.host.log("warning", M.one_line(string.format("node %s: dropping the registration(s) of job %s: made "
      .. "during another boot (boot ID %s, now %s), which ended those jobs", M.node_name(ctx),
      registry.ids(removed), tostring(removed[1].boot_id), now)))
  end
  return removed
end

--- Before a change (rewrite of the node list and/or (re)start of the unit), under the node lock:
-- register the job and record what is about to be deployed (st.deploying_nodes, deploying_job,
-- deploying_us), and save the state file. Nothing on the node has changed yet, so when the save
-- fails the run ends there (write-failed): a change under a registration that was never saved
-- would leave the job unprotected (a later job with another list would restart IMEX under it).
-- @param ctx table policy context
-- @param st table state (changed in place)
-- @param want table desired list (bytes)
-- @param extra table|nil more fields of the entry (invocation_id: "" until the (re)start)
-- @return change object (`local c <close> = change`; c:finish(outcome) keeps the registration on
--   exit 0 and removes it again otherwise; leaving the scope unfinished removes it), or nil,
--   "write-failed"|"deadline-exceeded", message
function M.begin_change(ctx, st, want, extra)
  local host = ctx.host
  local id = M.job_id(ctx)
  local e = entry_fields(ctx, want, extra)
  if e.invocation_id == nil then e.invocation_id = "" end
  local now_us = host.wallclock() * 1e6
  registry.register(st, id, want.bytes, now_us, e)
  st.deploying_nodes, st.deploying_job, st.deploying_us = want.bytes, id, now_us
  local ok, err, code = state.save(host, ctx.settings, st)
  if not ok then
    return fail(by_code(code, "write-failed"), "node %s: state file %s not written: %s; job %s not "
      .. "registered, so nothing was changed (node list not rewritten, %s not restarted)", M.node_name(ctx),
      state.path(ctx.settings), tostring(err), id, ctx.settings.unit)
  end
  return setmetatable({ ctx = ctx, st = st, id = id }, Change)
end

--- Is process `pid` the unit's? Its main PID, or a process in the unit's control group
-- (/proc/PID/cgroup names the unit: the kernel's cgroup v2 path, which systemd names after the unit).
local function unit_process(ctx, pid, props)
  local main = props and tonumber(props.main_pid)
  if main and main > 0 and pid == main then return true end
  local cg = ctx.host.read("/proc/" .. tostring(pid) .. "/cgroup", 65536)
  return cg ~= nil and cg:find("/" .. ctx.settings.unit, 1, true) ~= nil
end

--- C27: something answering on this node's command service (IMEX_CMD_PORT of config.cfg, or the
-- unix socket IMEX_CMD_UNIX_DOMAIN_PATH, C37) that is not the unit's process (a daemon started by
-- hand, a leftover of a crashed unit): the ctl would show ITS state, so nothing may be called
-- healthy, and a start of the unit would fail or run a second daemon. Uses
-- host.port_owner(port, nil, address, main_pid) and host.socket_owner(path, nil, main_pid) ->
-- {pid, comm, cmdline} | nil, msg, code, with the unit's main PID as the hint (its descriptors are
-- read first: every process only when it does not hold the socket); a host without them, or an
-- owner it cannot find, proves nothing (logged at debug). The TCP port is checked only where one is
-- configured (imexcfg.command_service).
-- @param ctx table policy context
-- @param info table from applies (cfg)
-- @param props table|nil the unit's properties (main_pid, active_state)
-- @return true, or nil, "service-failed", message naming the process (pid, command line), the port
--   or socket and the unit
function M.check_port(ctx, info, props)
  local host = ctx.host
  local svc, serr = imexcfg.command_service(info.cfg)
  if not svc then
    host.log("debug", M.one_line("command port owner not checked: " .. tostring(serr)))
    return true
  end
  local main = props and tonumber(props.main_pid)
  local hint = main and main > 0 and main or nil
  if svc.socket and type(host.socket_owner) == "function" then
    local ok, o, m = M.check_owner(ctx, props, "socket " .. svc.socket,
      host.socket_owner(svc.socket, nil, hint))
    if not ok then return nil, o, m end
  end
  if svc.port and type(host.port_owner) == "function" then
    -- the command port's address: IMEX_CMD_BIND_INTERFACE_IP, else BIND_INTERFACE_IP, else any (the
    -- simulator runs one daemon per loopback address on the same port; a node runs one)
    local cmd_ip = info.cfg and info.cfg.IMEX_CMD_BIND_INTERFACE_IP
    if cmd_ip == "" then cmd_ip = nil end
    return M.check_owner(ctx, props, "port " .. svc.port,
      host.port_owner(svc.port, nil, cmd_ip or info.bind, hint))
  end
  return true
end

--- The judgement of M.check_port on one listener of the command service: healthy only when it is
-- the active unit's process.
-- @param ctx table policy context
-- @param props table|nil the unit's properties
-- @param what string "port 50005" or "socket /run/imex/cmd.sock" (for the message)
-- @param owner table|nil host.port_owner's or host.socket_owner's result
-- @param err string|nil its message when nil
-- @param code string|nil its code ("none": nothing listens)
-- @return true, or nil, "service-failed", message
function M.check_owner(ctx, props, what, owner, err, code)
  local host, unit = ctx.host, ctx.settings.unit
  if not owner then
    if code ~= "none" then
      host.log("debug", M.one_line("command " .. what .. " owner unknown: " .. tostring(err)))
    end
    return true
  end
  local pid = tonumber(owner.pid)
  if not pid then return true end
  local active = props and (props.active_state == "active" or props.active_state == "reloading")
  if active and unit_process(ctx, pid, props) then return true end
  local cmd = owner.cmdline
  if type(cmd) == "table" then cmd = table.concat(cmd, " ") end
  return fail("service-failed", "node %s: pid %d (%s) listens on the IMEX command %s but is not the "
    .. "main process of %s (%s, main pid %s): a daemon started by hand or left over; its answers are not "
    .. "the unit's. Stop it (kill %d), then run the prolog again", M.node_name(ctx), pid,
    show(cmd or owner.comm or "?"), what, unit, props and tostring(props.active_state) or "state unknown",
    props and tostring(props.main_pid) or "?", pid)
end

--- What an admin does about a unit Result after a failed start/restart job (systemd.exec(5),
-- systemd.service(5): the unit's Result property says why it failed).
M.RESULT_HINTS = {
  ["start-limit-hit"] = "the unit was started more than StartLimitBurst times within "
    .. "StartLimitIntervalSec (systemd.unit(5)); recover with: systemctl reset-failed %s (then the next "
    .. "prolog starts it), raise StartLimitBurst/StartLimitIntervalSec in the unit, or set "
    .. "reset_failed_retry = true",
  ["exit-code"] = "the daemon exited with an error at start; see journalctl -u %s",
  ["timeout"] = "the daemon did not finish starting within the unit's TimeoutStartSec; see journalctl -u %s",
  ["core-dump"] = "the daemon dumped core at start; see journalctl -u %s and coredumpctl",
  ["signal"] = "the daemon was killed by a signal at start; see journalctl -u %s",
  ["watchdog"] = "the daemon's watchdog expired; see journalctl -u %s",
  ["resources"] = "systemd could not set up the unit (resources); see journalctl -u %s",
}

--- The unit's Result after a failed job, named with its recovery.
-- @param ctx table policy context
-- @return string result (systemd's Result property, "unknown" when the query fails), string text
function M.unit_result(ctx)
  local unit = ctx.settings.unit
  local props = ctx.host.unit(unit)
  local result = props and props.result or "unknown"
  local hint = M.RESULT_HINTS[result]
  local text = "unit Result " .. tostring(result)
  if hint then text = text .. ": " .. string.format(hint, unit) end
  return result, text
end

--- Run one start/restart job; a failed job names the unit's Result. After start-limit-hit, with
-- reset_failed_retry (default true), one reset-failed and one more job "start" (never "restart":
-- a daemon that became current meanwhile is left alone), within the run's deadline; not when this
-- run has already reset the unit (at most one reset-failed and one retry per run, C26).
-- @param verb string "start" or "restart"
-- @param reset_done boolean|nil true: this run already reset-failed the unit before the job
-- @return true, or nil, outcome, message
function M.unit_start_job(ctx, verb, reset_done)
  local s, host = ctx.settings, ctx.host
  local res, err, code = host.unit_job(s.unit, verb, s.start_timeout)
  if res == "done" then return true end
  if code == "deadline" then
    return fail("deadline-exceeded", "node %s: systemd %s of %s: %s", M.node_name(ctx), verb, s.unit,
      tostring(err))
  end
  local result, text = M.unit_result(ctx)
  if result == "start-limit-hit" and not reset_done and M.setting(ctx, "reset_failed_retry", false) then
    local ok, rerr = host.unit_reset_failed(s.unit)
    if ok then
      host.log("warning", M.one_line(string.format("node %s: %s of %s hit the unit's start limit; "
        .. "reset-failed and one more start (reset_failed_retry)", M.node_name(ctx), verb, s.unit)))
      local res2, err2, code2 = host.unit_job(s.unit, "start", s.start_timeout)
      if res2 == "done" then return true end
      local result2, text2 = M.unit_result(ctx)
      return fail(by_code(code2, "service-failed"), "node %s: systemd start of %s after reset-failed "
        .. "(reset_failed_retry) failed too: %s (%s); %s", M.node_name(ctx), s.unit, tostring(code2 or res2),
        tostring(err2), result2 == "unknown" and text or text2)
    end
    text = text .. "; reset-failed failed: " .. tostring(rerr)
  end
  return fail(by_code(code, "service-failed"), "node %s: systemd %s of %s failed (%s): %s%s",
    M.node_name(ctx), verb, s.unit, tostring(code or res), text, M.root_hint(host, code, err))
end

--- Step 7: (re)start the unit and record what it runs: the new invocation ID and the exact bytes of
-- the node list and of config.cfg (read just before the start) it was started with; the job's
-- registry entry (from begin_change) gets the invocation ID. Saving that is best effort (a
-- warning): the job is already registered. The record of the deployment in progress stays until
-- the prolog ends (Change:finish). A failed unit is reset-failed before its start only with
-- reset_failed_retry (it clears the start-limit counter, so it is the site's call). A start is
-- refused when another process holds the command port (M.check_port).
-- @param v table verdict from assess (action "start" or "restart", reset_failed)
-- @param st table state (updated in place and saved)
-- @return true and the new props (nil when systemd did not answer after the job), or nil, outcome,
--   message
function M.restart(ctx, want, v, st, info)
  local s, host = ctx.settings, ctx.host
  if info and v.action == "start" then
    local ok, o, m = M.check_port(ctx, info, v.unit)
    if not ok then return nil, o, m end
  end
  local reset_done = false
  if v.reset_failed and M.setting(ctx, "reset_failed_retry", false) then
    local ok, err = host.unit_reset_failed(s.unit)
    reset_done = true
    if not ok then host.log("warning", M.one_line("reset-failed of " .. s.unit .. ": " .. tostring(err))) end
  end
  local verb = v.action == "restart" and "restart" or "start"
  local cfg_text = host.read(want.config_path or s.imex_config, M.MAX_FILE)
  local jok, jo, jm = M.unit_start_job(ctx, verb, reset_done)
  if not jok then return nil, jo, jm end
  local props = host.unit(s.unit)
  if props and props.active_state ~= "active" and props.active_state ~= "activating"
    and props.active_state ~= "reloading" then
    local _, text = M.unit_result(ctx)
    return fail("service-failed", "node %s: %s is %s right after %s: %s", M.node_name(ctx), s.unit,
      tostring(props.active_state), verb, text)
  end
  st.running_nodes = want.bytes
  st.running_config = cfg_text or nil
  st.invocation_id = props and props.invocation_id or nil
  st.started_us = props and props.exec_main_start_us or nil
  st.job = M.job_id(ctx)
  -- the record of the deployment stays until the prolog has finished (Change:finish): a run killed
  -- during the health wait is an interrupted prolog too
  local entry = registry.find(st, M.job_id(ctx))
  if entry and entry.invocation_id == "" and props and props.invocation_id then
    entry.invocation_id = props.invocation_id
  end
  local ok, serr = state.save(host, s, st)
  if not ok then host.log("warning", M.one_line("state file not updated: " .. tostring(serr))) end
  return true, props
end

return M
