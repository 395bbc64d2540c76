-- SPDX-License-Identifier: Apache-2.0
--- The test kit's scenarios (imexguard.testing.scenario): given a node and its domain, when an entry
-- point runs for a job, then an outcome and side effects. One scenario is one node whose files,
-- unit, registry and clock persist across the runs, so a sequence (prolog 101, prolog 101' on another
-- list, epilog 100) reads top to bottom. Test infrastructure; no io.
local cjson = require("cjson")
local commands = require("imexguard.commands")
local base = require("imexguard.testing.base")
local run = require("imexguard.testing.run")
local nodelist = require("imexguard.nodelist")

local M = {}
local copy, lines = base.copy, nodelist.lines

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
local MESH_ANSWERS = {
  unreachable = run.UNREACHABLE, hang = run.HANG, unconfigured = run.UNCONFIGURED, garbage = "garbage",
}

local Scenario = {}
Scenario.__index = Scenario

--- testing.host options for a unit shorthand or table (see M.new's `unit`).
local function unit_option(u)
  if u == "missing" or u == false then return false end
  if type(u) == "string" then
    return assert(UNIT_STATES[u], "testing.scenario: unknown unit state '" .. u .. "'")
  end
  if type(u) ~= "table" then return nil end
  local props = {}
  if u.state then
    local b = assert(UNIT_STATES[u.state], "testing.scenario: unknown unit state '" .. u.state .. "'")
    for k, v in pairs(b) do props[k] = v end
  end
  for k, v in pairs(u) do if k ~= "state" then props[k] = v end end
  return props
end

--- Set the testing.host options ctl and unhealthy for a scenario's `mesh` (see M.new).
local function mesh_option(self, d, hopts)
  if d == nil or d == "up" then
    hopts.ctl = "auto"
  elseif d == "down" then
    hopts.unhealthy = { ["*"] = "UNAVAILABLE" }
  elseif type(d) == "string" then
    -- one answer: assert returns its message too, so its call is in parentheses (C40: a list of two
    -- answers, the second the message as stdout, answered every ctl call after the first)
    hopts.ctl = { (assert(MESH_ANSWERS[d], "testing.scenario: unknown mesh '" .. d .. "'")) }
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
    hopts.ctl = { { mesh = { status = d.status, nodes = nodes } } }
  else
    hopts.ctl = d -- a function, or a list of answers
  end
end

--- The state file as the prologs of the registered `jobs` would have left it (see M.new).
local function jobs_file(self, o_jobs)
  local list = {}
  for k, v in pairs(o_jobs) do
    if type(v) == "table" and v.id ~= nil then list[#list + 1] = v
    else list[#list + 1] = { id = k, nodes = v } end
  end
  table.sort(list, function(a, b) return tostring(a.id) < tostring(b.id) end)
  local jobs = {}
  for i, j in ipairs(list) do
    local e = { id = tostring(j.id), nodes = self:bytes(j.nodes),
      registered_us = string.format("%d", math.floor((base.WALL0 - (j.age or 600)) * 1e6)),
      invocation_id = j.invocation_id or "" }
    for k, v in pairs(j) do
      if e[k] == nil and k ~= "age" and (type(v) == "string" or type(v) == "number" or type(v) == "boolean")
      then e[k] = v end
    end
    jobs[i] = e
  end
  return cjson.encode({ jobs = jobs }) .. "\n"
end

--- testing.host options of a scenario: files, resolver, unit, mesh, registry and pass-through options.
local function host_options(self, o)
  local hopts = { files = {}, resolve = {}, hostname = self.node,
    local_addresses = { self:address(self.node), "127.0.0.1" } }
  for name, a in pairs(self.nodes) do hopts.resolve[name] = { a } end
  for k, v in pairs(o.resolve or {}) do hopts.resolve[k] = v end
  for path, v in pairs(o.files or {}) do hopts.files[path] = v end
  if o.file ~= nil then
    hopts.files[self.nodes_path] = (type(o.file) == "table") and self:bytes(o.file) or o.file
    if self.nodes_path ~= base.NODES then
      hopts.daemon_nodes = type(o.file) == "table" and lines(self:bytes(o.file)) or lines(o.file or "")
    end
  end
  hopts.unit = unit_option(o.unit)
  mesh_option(self, o.mesh, hopts)
  for _, k in ipairs({ "restart", "lock", "deadline", "fail", "fresh_boot", "absent_dirs", "clock",
    "unit_script", "nvidia_smi", "scontrol", "commands" }) do
    if o[k] ~= nil then hopts[k] = o[k] end
  end
  if o.unhealthy then hopts.unhealthy = o.unhealthy end
  for k, v in pairs(o.host or {}) do hopts[k] = v end
  if o.jobs then hopts.files[self.state_path] = jobs_file(self, o.jobs) end
  return hopts
end

--- Build a scenario (imexguard.testing.scenario(o) calls M.new(testing, o)).
-- @param kit table the imexguard.testing module (host, ctx, DEFAULT_NODES)
-- @param o table, all optional:
--   policy    the policy table, or a module name (default "policies.default")
--   node      this node's Slurm name (default "n1"): SLURMD_NODENAME, hostname, local address
--   nodes     {[name] = IPv4 address}: the resolver (DNS) answers (default testing.DEFAULT_NODES)
--   file      the node list file now: a list of names or addresses, the bytes, or false (absent);
--             default: the kit's {10.0.0.1, 10.0.0.2}. The running daemon was started with it.
--   unit      "active" (default) | "inactive" | "failed" | "activating" | "deactivating" |
--             "disabled" | "masked" | "missing" (not installed), or a table of unit properties
--             (state = one of the shorthands, plus overrides such as invocation_id, result)
--   mesh      the mesh `nvidia-imex-ctl -N -j` answers (imexguard.ctl): "up" (default: UP with the
--             hosts the daemon runs while the unit is active, else unreachable; follows restarts),
--             "down" (every node UNAVAILABLE), "unreachable", "hang", "unconfigured", "garbage",
--             {unhealthy = {[name or address] = status}} (those nodes in that status),
--             {nodes = {{host = name or address, status =, connections =}}} (a fixed described
--             mesh), a list of answers (consumed per call, the last repeats) or a function
--   jobs      registered jobs: {{id = 100, nodes = {"n1", "n3"} or "n[1,3]", age = seconds
--             (600), shared = ...}, ...} or {[100] = {"n1", "n3"}}
--   settings  setting overrides for every run; restart, lock, deadline, files, fail, resolve,
--             fresh_boot, absent_dirs, unhealthy, nvidia_smi (the GPUs' fabric registration:
--             testing.gpus{...}, testing.FABRIC_NONE, testing.ABSENT, testing.HANG, a list or a
--             function), scontrol, commands (any other program): as testing.host; host: more
--             testing.host options
-- @return scenario object (methods below)
function M.new(kit, o)
  o = o or {}
  -- the option's old name: an error, not a scenario that silently answers "up"
  if o.domain ~= nil then error("testing.scenario: the option 'domain' is called 'mesh' now", 3) end
  local self = setmetatable({ kit = kit }, Scenario)
  self.node = o.node or "n1"
  self.nodes = o.nodes or kit.DEFAULT_NODES
  self.names = {}
  for name, a in pairs(self.nodes) do self.names[a] = name end
  self.settings = o.settings or {}
  local policy = o.policy or "policies.default"
  self.policy = type(policy) == "string" and require(policy) or policy
  local S = base.settings(self.settings)
  self.state_path = S.state_dir .. "/state.json"
  self.nodes_path = S.nodes_file or base.NODES
  self.host = kit.host(host_options(self, o))
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

-- The field `key` of each record of `list`, in order (a new list).
local function field_of(list, key)
  local out = {}
  for i, r in ipairs(list) do out[i] = r[key] end
  return out
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

--- Run an entry point of the policy for a job (ctx.dry_run as the binary sets it: imexguard.commands).
-- @param command string a command with an entry point (imexguard.commands: "prolog", "plan"...)
-- @param a table see Scenario:env; settings = overrides for this run, json = boolean
-- @return outcome, message, report, ctx (whatever the entry point returns, then the ctx)
function Scenario:run(command, a)
  a = a or {}
  local over = {}
  for k, v in pairs(self.settings) do over[k] = v end
  for k, v in pairs(a.settings or {}) do over[k] = v end
  -- the policy's own settings (P.settings), checked and with their defaults, as the binary gives them
  local ps = require("imexguard.policysettings")
  over.policy_settings = assert(ps.validate(assert(ps.schema_of(self.policy)), over.policy_settings))
  local ctx = self.kit.ctx{ host = self.host, env = self:env(a), settings = over, command = command,
    json = a.json, dry_run = (commands.by_name[command] or {}).dry_run == true }
  local f = self.policy[command]
  if type(f) ~= "function" then error("testing.scenario: the policy has no " .. command, 2) end
  local outcome, message, report = f(ctx)
  self.last = { command = command, outcome = outcome, message = message, report = report, ctx = ctx }
  self.runs[#self.runs + 1] = self.last
  return outcome, message, report, ctx
end

-- s:prolog(a), s:epilog(a), s:plan(a)...: one method per entry point of imexguard.commands.
for _, name in ipairs(commands.names("entry")) do
  Scenario[name] = function(self, a) return self:run(name, a) end
end

--- Data written to a path, in order (default: the node list file).
function Scenario:writes(path)
  path = path or self.nodes_path
  local out = {}
  for _, w in ipairs(self.host.writes) do
    if w.path == path then out[#out + 1] = w.data end
  end
  return out
end

-- Number of unit jobs whose verb is in the set `verbs`, whatever their result.
local function jobs_of(self, verbs)
  local n = 0
  for _, j in ipairs(self.host.jobs) do if verbs[j.verb] then n = n + 1 end end
  return n
end

--- Number of unit jobs that (re)start the daemon (start, restart, try-restart), whatever their result.
function Scenario:restarts()
  return jobs_of(self, { start = true, restart = true, ["try-restart"] = true })
end

--- Number of stop jobs.
function Scenario:stops()
  return jobs_of(self, { stop = true })
end

--- Verbs of every unit job, in order ("restart", "stop", ...).
function Scenario:unit_jobs()
  return field_of(self.host.jobs, "verb")
end

--- The registry in the state file now: list of job ids (registration order).
function Scenario:registered()
  return field_of(self:registrations(), "id")
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
  return field_of(self.host.mkdirs, "path")
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

return M
