-- SPDX-License-Identifier: Apache-2.0
--- The standard scenarios of `imexguard check POLICY` (imexguard.testing.check): situations every
-- sane policy must handle, run against the test kit's fake host (imexguard.testing). Each scenario
-- runs the policy's prolog (or epilog) one or more times in a scripted world and judges what it
-- returned and what it did (writes, systemd jobs) — never how it did it. The binary runs them on a
-- node (`imexguard check`, one scenario per driver call), always against the fake host: the
-- node's own primitives are never given to the policy. Also the report of a check run (tally,
-- summary, JSON).
--
-- "config-fault" (field case C22 of docs/design.md) lints nothing itself: it gives the policy a
-- config.cfg whose command port is bound to loopback and the mesh such a config produces, and
-- judges the outcome.
--
-- The world is the kit's default (docs/policy-api.md "The test kit: imexguard.testing"): job 101 on
-- n[1-2], this node n1 = 10.0.0.1, n2 = 10.0.0.2, unit nvidia-imex.service loaded, enabled and
-- active, /etc/nvidia-imex/nodes_config.cfg already listing the job's nodes, the ctl answering UP.
-- The site's settings are used for everything that is behaviour or timing (deadline, timeouts,
-- poll_interval, on_peer_fault, restart_under_jobs, allow_loopback...); the settings that name
-- things on the node (unit, bus, files, ctl, state_dir, address source, policy) take the kit's
-- values, so that a check on a workstation needs none of the node's files. A policy that needs files
-- of its own (a site's map file...) lists them in its table as `check_files = {[path] = contents}`;
-- they are added to every scenario's world (the scenario's own files win).
-- Commands are scripted by argv (imexguard.testing.run, C40): the ctl answers as each scenario says,
-- nvidia-smi as a healthy GB200 tray (4 GPUs registered in one NVLink partition), scontrol with exit
-- 0; a policy that runs another program (or nvidia-smi with another query) scripts it in its table as
-- `check_commands = {[program path or basename] = answer | list of answers | function(n, argv, h)}`
-- (added to every scenario's world; the scenario's own scripts win). A command nobody scripted
-- raises "testing: unscripted command ..." naming it: the scenario fails with that message.
--
-- Use from busted (a site's own spec):
--   local scenarios = require("imexguard.testing.check")
--   local policy = require("mypolicy")   -- (not inline: require returns a second value)
--   local report = scenarios.run_all(policy)
--   assert.is_true(report.ok, report.text)
-- The binary (`imexguard check`) calls run_one per scenario with a wall-clock limit of its own,
-- and makes its report with tally, summary and report_json.
local testing = require("imexguard.testing")
local outcomes = require("imexguard.outcomes")
local one_line = require("imexguard.text").one_line
local matches = require("imexguard.text").matches
local expect = require("imexguard.expect")

local M = {}

-- The budget of a scenario when neither the scenario nor the site's settings give one: the
-- setting `deadline`'s default (imexguard.settings' schema).
local DEFAULT_DEADLINE = require("imexguard.settings").by_name.deadline.default

--- Settings that name things on the node: the scenarios replace them by the kit's defaults.
M.WORLD_SETTINGS = { "unit", "bus", "imex_config", "nodes_file", "ctl", "state_dir", "address_source",
  "address_map", "policy", "nvidia_smi", "scontrol", "topology_file", "boot_id_file" }
--- Settings the scenarios' world fixes: the job n[1-2] is one IMEX domain (no domain map: the
-- scenarios judge the node list of one domain; with the static list as the domain map, the static
-- policy would take the other job's list on disk for another rack's).
M.WORLD_FIXED = { domain_map = "none" }

--- The job's node list (n[1-2]) as the policy must write it.
M.WANT = "10.0.0.1\n10.0.0.2\n"
--- A different node list: the one the daemon runs in the scenarios that change the list.
M.OTHER = "10.0.0.1\n10.0.0.3\n"
--- Simulated budget (seconds) of the second run of "ctl-hangs": shorter than the default
-- policy's own waits, so only a policy that watches host.remaining() ends in time.
M.SHORT_BUDGET = 10

-- ---- helpers ---------------------------------------------------------------------------------

local function copy(t)
  local r = {}
  for k, v in pairs(t or {}) do r[k] = v end
  return r
end

-- The host that `require("imexguard.host")` gives while a scenario runs (see host_proxy).
local current

--- A table that forwards every field to the fake host of the scenario that is running (a
-- default fake host outside scenarios). `imexguard check` preloads it as "imexguard.host", so a
-- policy that requires the primitives instead of using ctx.host reaches the fake host too and
-- never the node.
function M.host_proxy()
  return setmetatable({}, {
    __index = function(_, k)
      current = current or testing.host()
      return current[k]
    end,
    __newindex = function(_, k)
      error("imexguard.host is read-only (assignment to '" .. tostring(k) .. "')", 2)
    end,
  })
end

-- A read-only view (assignments raise; with `known`, reading an unknown key raises), as the
-- binary gives ctx.settings and ctx.env. Uses imexguard.settings' readonly when present.
local function readonly(t, what, known)
  local ok, S = pcall(require, "imexguard.settings")
  if ok and type(S) == "table" and S.readonly then return S.readonly(t, what, known and S.by_name) end
  return t
end

--- Settings overrides for testing.ctx: the site's settings without the WORLD_SETTINGS, with the
-- WORLD_FIXED ones.
-- @param site table|nil validated settings (nil: all defaults)
-- @return table
function M.settings_over(site)
  local over = copy(site)
  for _, k in ipairs(M.WORLD_SETTINGS) do over[k] = nil end
  for k, v in pairs(M.WORLD_FIXED) do over[k] = v end
  return over
end

--- Run one entry point of a policy in a scripted world.
-- @param policy table the policy (entry points)
-- @param o table {command = "prolog"|"epilog", host = testing.host options, env = environment
--   (default: the kit's job 101 on n[1-2]), settings = validated site settings or nil}
-- @return table {outcome, message, err (string when it raised or returned garbage), h = fake
--   host, start = the fake clock at the start, budget = seconds, ctx}
function M.call(policy, o)
  local hopts = copy(o.host)
  -- files the policy needs in a test world (policy.check_files), under the scenario's own files
  if type(rawget(policy, "check_files")) == "table" then
    local files = copy(policy.check_files)
    for k, v in pairs(hopts.files or {}) do files[k] = v end
    hopts.files = files
  end
  -- commands the policy runs beyond the ctl, nvidia-smi and scontrol (policy.check_commands)
  if type(rawget(policy, "check_commands")) == "table" then
    local cmds = copy(policy.check_commands)
    for k, v in pairs(hopts.commands or {}) do cmds[k] = v end
    hopts.commands = cmds
  end
  local over = M.settings_over(o.settings)
  local budget = hopts.deadline or over.deadline or DEFAULT_DEADLINE
  hopts.deadline = budget
  local h = testing.host(hopts)
  local env = o.env or { SLURM_JOB_ID = "101", SLURM_JOB_NODELIST = "n[1-2]", SLURMD_NODENAME = "n1",
    SLURM_JOB_USER = "alice" }
  local ctx = testing.ctx({ host = h, env = env, settings = over, command = o.command or "prolog" })
  -- read-only as in the binary (testing.ctx may already have wrapped them: a view has a
  -- protected metatable, a plain table none)
  if getmetatable(ctx.settings) == nil then ctx.settings = readonly(ctx.settings, "ctx.settings", true) end
  if getmetatable(ctx.env) == nil then ctx.env = readonly(ctx.env, "ctx.env") end
  local r = { h = h, start = h.now(), budget = budget, ctx = ctx }
  local fn = policy[ctx.command]
  if type(fn) ~= "function" then
    r.err = string.format("the policy has no %s function", ctx.command)
    return r
  end
  current = h
  local res = table.pack(pcall(fn, ctx))
  current = nil
  if not res[1] then
    r.err = "raised an error: " .. one_line(res[2])
    return r
  end
  local name, message = res[2], res[3]
  if type(name) ~= "string" or not outcomes.codes[name] then
    r.err = string.format("returned %s instead of an outcome name",
      type(name) == "string" and string.format("%q", name) or tostring(name))
    return r
  end
  if message ~= nil and type(message) ~= "string" then
    r.err = string.format("returned a %s as its message (a string is expected)", type(message))
    return r
  end
  r.outcome, r.message = name, message or ""
  r.code = outcomes.exit_code(name, ctx.settings)
  return r
end

-- "outcome (message)" for reports.
local function said(r)
  local m = r.message or ""
  if #m > 160 then m = m:sub(1, 157) .. "..." end
  return m ~= "" and string.format("%s (%s)", r.outcome, m) or r.outcome
end

-- Service actions the policy took: systemd jobs and signals, as strings.
local function actions(h)
  local list = {}
  for _, j in ipairs(h.jobs) do list[#list + 1] = string.format("%s %s", j.verb, j.unit) end
  for _, c in ipairs(h.calls) do
    if c[1] == "unit_kill" then list[#list + 1] = string.format("kill %s signal %s", c[2], tostring(c[3])) end
  end
  return list
end

-- The failure (string) of a run that must not have touched the service, or nil.
local function no_restart(r)
  local a = actions(r.h)
  if #a > 0 then return "acted on the service: " .. table.concat(a, ", ") .. " (then " .. said(r) .. ")" end
  return nil
end

-- The failure of a run that must not have written anything, or nil.
local function no_write(r)
  if #r.h.writes > 0 then
    local paths = {}
    for _, w in ipairs(r.h.writes) do paths[#paths + 1] = w.path end
    return "wrote " .. table.concat(paths, ", ") .. " (then " .. said(r) .. ")"
  end
  return nil
end

-- The failure of a run that must end in a known outcome, or nil.
local function known(r)
  return r.err
end

-- ---- reached: whether a run exercised what a scenario tests -------------------------------
-- A scenario passes only when the policy met the situation it sets up; one that ended before
-- (in its own bad-input, say) is "not applicable", told from what the fake host recorded.

-- Calls of primitive `name` (with `arg` as first argument when given) the run made.
local function calls(r, name, arg)
  local n = 0
  for _, c in ipairs(r.h.calls) do
    if c[1] == name and (arg == nil or c[2] == arg) then n = n + 1 end
  end
  return n
end

-- Calls of the systemd primitives (unit, unit_job, unit_reset_failed, unit_kill) the run made.
local function systemd_calls(r)
  local n = 0
  for _, c in ipairs(r.h.calls) do
    if tostring(c[1]):find("^unit") then n = n + 1 end
  end
  return n
end

--- Why a run did not reach what a scenario tests (a string), or nil when it did.
-- @param r table a call() result
-- @param need string what the run had to do, as a phrase ("ask systemd twice")
-- @param ok boolean whether it did
-- @return string|nil
local function unreached(r, need, ok)
  if ok then return nil end
  return string.format("the policy never got to %s (it ended in %s)", need, said(r))
end

-- A scenario run in several variants: one(v) for each v of `variants` returns its run, or nil and
-- why it fails, and its "not applicable" (unreached). The first failure ends the scenario; else
-- it passes with the last run's detail and the first variant's "not applicable".
local function each_variant(variants, one)
  local last, na
  for _, v in ipairs(variants) do
    local r, why, unreached_why = one(v)
    if not r then return why end
    na, last = na or unreached_why, r
  end
  return nil, said(last), na
end

-- ---- the scenarios ---------------------------------------------------------------------------
-- Each: name, title (what a sane policy does), run(policy, settings) -> nil (pass) | why (fail),
-- an optional detail string (what it ended in) as the second result, and as the third, when the
-- policy never reached the situation the scenario sets up, why it is not applicable.

local function garbage_ctl(n)
  local answers = {
    { stdout = "Nodes From\\To  0  1\n   0         C  C\nDomain State: UP\n", status = 0 },
    { stdout = '{"nodes": {"0": {"status": "READY", "host": "10.0.0.1", "conn', status = 0 },
    { stdout = '{"nodes": [], "status": "UP"}\n', status = 0 },
    { stdout = "", status = 0 },
    { stdout = "\0\1\2 not json at all", status = 0 },
  }
  return answers[(n - 1) % #answers + 1]
end

local function repeat_list(v, n)
  local t = {}
  for i = 1, n do t[i] = v end
  return t
end

M.list = {
  {
    name = "healthy-job",
    title = "a normal job on a healthy, current domain ends in a known outcome with exit 0",
    run = function(policy, settings)
      local r = M.call(policy, { settings = settings })
      if r.err then return r.err end
      if r.code ~= 0 then
        return "ended in " .. said(r) .. ", exit " .. r.code .. ": it would drain a healthy node"
      end
      return nil, said(r)
    end,
  },
  {
    name = "epilog",
    title = "the epilog of a normal job ends in a known outcome",
    run = function(policy, settings)
      local r = M.call(policy, { command = "epilog", settings = settings })
      if r.err then return r.err end
      return nil, said(r)
    end,
  },
  {
    name = "no-nodelist",
    title = "SLURM_JOB_NODELIST and SLURM_NODELIST unset or empty: bad-input, no write, no restart",
    run = function(policy, settings)
      for _, env in ipairs({
        { SLURM_JOB_ID = "101", SLURMD_NODENAME = "n1" },
        { SLURM_JOB_ID = "101", SLURMD_NODENAME = "n1", SLURM_JOB_NODELIST = "", SLURM_NODELIST = "" },
      }) do
        -- the list on disk is another job's: a policy that acts on a guess would rewrite it
        local r = M.call(policy, { env = env, settings = settings,
          host = { files = { [testing.NODES] = M.OTHER } } })
        local why = known(r) or no_write(r) or no_restart(r)
        if why then return why end
        if r.outcome ~= "bad-input" then return "ended in " .. said(r) .. " instead of bad-input" end
      end
      return nil, "bad-input"
    end,
  },
  {
    name = "bad-hostlist",
    title = "a malformed hostlist (n[1-, n[3-1]): bad-input, no write, no restart",
    run = function(policy, settings)
      for _, list in ipairs({ "n[1-", "n[3-1]" }) do
        local r = M.call(policy, { settings = settings,
          env = { SLURM_JOB_ID = "101", SLURM_JOB_NODELIST = list, SLURMD_NODENAME = "n1" },
          host = { files = { [testing.NODES] = M.OTHER } } })
        local why = known(r) or no_write(r) or no_restart(r)
        if why then return list .. ": " .. why end
        if r.outcome ~= "bad-input" then
          return list .. ": ended in " .. said(r) .. " instead of bad-input"
        end
      end
      return nil, "bad-input"
    end,
  },
  {
    name = "systemd-unknown",
    title = "systemd does not answer (timeout, D-Bus error): never a restart",
    run = function(policy, settings)
      -- The daemon runs another list, so a restart is tempting; but its state is unknown.
      -- reach: the systemd call at which the failure starts
      local worlds = {
        { what = "no answer at all", script = repeat_list("timeout", 200), reach = 1 },
        { what = "an answer, then D-Bus errors", script = { {}, table.unpack(repeat_list("bus", 200)) },
          reach = 2 },
      }
      return each_variant(worlds, function(w)
        local r = M.call(policy, { settings = settings, host = { unit_script = w.script,
          files = { [testing.NODES] = M.OTHER } } })
        local why = known(r) or no_restart(r)
        if why then return nil, w.what .. ": " .. why end
        local call = w.what .. " (systemd call " .. w.reach .. ")"
        return r, nil, unreached(r, call, systemd_calls(r) >= w.reach)
      end)
    end,
  },
  {
    name = "ctl-garbage",
    title = "garbage from nvidia-imex-ctl (text, cut JSON, nodes as an array, empty): never a restart",
    run = function(policy, settings)
      local r = M.call(policy, { settings = settings, host = { ctl = garbage_ctl } })
      local why = known(r) or no_restart(r)
      if why then return why end
      return nil, said(r), unreached(r, "run nvidia-imex-ctl", #r.h.runs > 0)
    end,
  },
  {
    name = "ctl-hangs",
    title = "nvidia-imex-ctl never answers: the policy ends within the run's budget",
    run = function(policy, settings)
      return each_variant({ false, M.SHORT_BUDGET }, function(budget)
        local r = M.call(policy, { settings = settings, host = { ctl = { testing.HANG },
          deadline = budget or nil } })
        local what = string.format("budget %g s: ", r.budget)
        if r.err then return nil, what .. r.err end
        local used = r.h.now() - r.start
        if used > r.budget + 1e-6 then
          return nil, string.format("%sused %.1f s of simulated time (then %s)", what, used, said(r))
        end
        return r, nil, unreached(r, "run nvidia-imex-ctl", #r.h.runs > 0)
      end)
    end,
  },
  {
    name = "whole-list",
    title = "a changed node list is only ever written whole (write_atomic, the job's list in hostlist order)",
    run = function(policy, settings)
      local r = M.call(policy, { settings = settings, host = { files = { [testing.NODES] = M.OTHER } } })
      if r.err then return r.err end
      for _, w in ipairs(r.h.writes) do
        if w.path == testing.NODES and w.data ~= M.WANT then
          return string.format("wrote %s with %q instead of the whole list %q", w.path, w.data, M.WANT)
        end
      end
      return nil, said(r), unreached(r, "write the node list " .. testing.NODES,
        calls(r, "write_atomic", testing.NODES) > 0)
    end,
  },
  {
    name = "write-fails",
    title = "the node list cannot be written (ENOSPC): no restart, and not a success",
    run = function(policy, settings)
      local r = M.call(policy, { settings = settings, host = { files = { [testing.NODES] = M.OTHER },
        fail = { [testing.NODES] = { write = "ENOSPC" } } } })
      local why = known(r) or no_restart(r)
      if why then return why end
      if r.code == 0 then return "ended in " .. said(r) .. " (exit 0) although the node list is wrong" end
      return nil, said(r), unreached(r, "write the node list " .. testing.NODES,
        calls(r, "write_atomic", testing.NODES) > 0)
    end,
  },
  {
    name = "config-fault",
    title = "a configuration fault (command port bound to loopback: this node READY and connected, its "
      .. "peer UNAVAILABLE): never ok, never blames the peer, never restarts",
    run = function(policy, settings)
      local cfg = testing.CONFIG_TEXT:gsub("IMEX_CMD_BIND_INTERFACE_IP=[^\n]*",
        "IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1")
      local answer = { mesh = { status = "DEGRADED", nodes = {
        { host = "10.0.0.1", connections = { ["10.0.0.1"] = "CONNECTED", ["10.0.0.2"] = "CONNECTED" } },
        { host = "10.0.0.2", status = "UNAVAILABLE" } } } }
      local r = M.call(policy, { settings = settings, host = { files = { [testing.CONFIG] = cfg },
        ctl = { answer } } })
      local why = known(r) or no_restart(r)
      if why then return why end
      if r.outcome == "ok" then
        return "ended in " .. said(r) .. " on a domain whose nodes cannot see each other"
      end
      if r.outcome == "peers-unhealthy" then
        return "ended in " .. said(r) .. ": blamed the peer for this node's configuration fault"
      end
      return nil, said(r), unreached(r, "run nvidia-imex-ctl", #r.h.runs > 0)
    end,
  },
}

M.by_name = {}
for _, s in ipairs(M.list) do M.by_name[s.name] = s end

--- Names of the scenarios, in order.
-- @return list of strings
function M.names()
  local t = {}
  for i, s in ipairs(M.list) do t[i] = s.name end
  return t
end

--- Run one scenario.
-- @param policy table the policy
-- @param name string a scenario name (see names())
-- @param settings table|nil validated site settings
-- @return table {name, title, ok = boolean (false only for a failure), why = string (when not
--   ok, or why it is not applicable), detail = string|nil, not_applicable = true when the policy
--   never reached what the scenario tests (ok stays true: it is not a failure, nor a pass)}
function M.run_one(policy, name, settings)
  local s = M.by_name[name]
  if not s then error("no scenario named '" .. tostring(name) .. "'", 2) end
  local why, detail, na = s.run(policy, settings)
  if why == nil and na then
    return { name = s.name, title = s.title, ok = true, not_applicable = true, why = one_line(na),
      detail = detail }
  end
  return { name = s.name, title = s.title, ok = why == nil, why = why and one_line(why), detail = detail }
end

--- One report line: "PASS name: title", "N/A name: title: why" or "FAIL name: title: why".
-- @param res table a run_one result
-- @return string
function M.format(res)
  if res.not_applicable then
    return one_line(string.format("N/A %s: %s: not applicable: %s", res.name, res.title, res.why))
  end
  if res.ok then
    return one_line(string.format("PASS %s: %s%s", res.name, res.title,
      res.detail and (" [" .. res.detail .. "]") or ""))
  end
  return one_line(string.format("FAIL %s: %s: %s", res.name, res.title, tostring(res.why)))
end

--- Run every scenario (from busted; the binary runs them one by one under its deadline).
-- @param policy table the policy
-- @param settings table|nil validated settings
-- @return table {ok = boolean, results = list of run_one results, failed = list of names,
--   not_applicable = list of names, text = the report lines joined}
function M.run_all(policy, settings)
  expect(policy, "table", "scenarios.run_all: the policy must be a table, got %s", type(policy))
  if settings ~= nil and type(settings) ~= "table" then
    error("scenarios.run_all: settings must be a table or nil, got " .. type(settings), 2)
  end
  local results, lines = {}, {}
  for _, name in ipairs(M.names()) do
    local res = M.run_one(policy, name, settings)
    results[#results + 1] = res
    lines[#lines + 1] = M.format(res)
  end
  local t = M.tally(results)
  return { ok = t.failed == 0, results = results, failed = t.failed_names, not_applicable = t.na_names,
    text = table.concat(lines, "\n") }
end

-- ---- the report of a check run (the binary's `check`: imexguard.driver's check_end) -----------

--- Counts and name lists of the results.
-- @param results list of run_one results (and the binary's {not_run = true} for a scenario it
--   could not run)
-- @return table {passed, failed, not_run, not_applicable (counts), failed_names, na_names,
--   exercised (the names of the scenarios that ran and reached what they test)}
function M.tally(results)
  local t = { passed = 0, failed = 0, not_run = 0, not_applicable = 0, failed_names = {}, na_names = {},
    exercised = {} }
  for _, res in ipairs(results) do
    if res.not_run then t.not_run = t.not_run + 1
    elseif not res.ok then
      t.failed = t.failed + 1
      t.failed_names[#t.failed_names + 1] = res.name
    elseif res.not_applicable then
      t.not_applicable = t.not_applicable + 1
      t.na_names[#t.na_names + 1] = res.name
    else t.passed = t.passed + 1 end
    if not res.not_run and not res.not_applicable then t.exercised[#t.exercised + 1] = res.name end
  end
  return t
end

--- The summary of a check run: "all N scenarios passed", "P of N scenarios passed; ... not
-- applicable ...", or "F of N scenarios failed: names; ... not run (why)".
-- @param t table M.tally's
-- @param total integer the number of scenarios
-- @param interrupted boolean the deadline interrupt ended a scenario (the others were not run)
-- @return string the line for stdout, string the final line's message (the same text)
function M.summary(t, total, interrupted)
  local na = ""
  if t.not_applicable > 0 then
    na = string.format("; %d not applicable (the policy never reached what they test): %s", t.not_applicable,
      table.concat(t.na_names, ", "))
  end
  if t.failed + t.not_run == 0 then
    local head = t.not_applicable == 0 and string.format("all %d scenarios passed", total)
      or string.format("%d of %d scenarios passed%s; exercised the policy: %s", t.passed, total, na,
        table.concat(t.exercised, ", "))
    return head, head
  end
  local skipped = ""
  if t.not_run > 0 then
    skipped = string.format("; %d not run (%s)", t.not_run, interrupted
      and "the deadline interrupt ended the check" or "the run's budget was spent")
  end
  local failed = table.concat(t.failed_names, ", ")
  if #failed > 590 then failed = failed:sub(1, 587) .. "..." end
  local head = string.format("%d of %d scenarios failed: %s%s", t.failed, total, failed, skipped)
  return head .. na, head .. na
end

--- The check report as JSON (docs/json.md, "check"): ordered keys, arrays as arrays.
-- @param r table {policy = path, entries = "prolog, epilog, ...", results = list, tally = M.tally's,
--   outcome, exit_code, message}
-- @return string the JSON text
function M.report_json(r)
  local json = require("imexguard.json")
  local e = matches(r.entries, "[^, ]+")
  local scenarios = {}
  for i, res in ipairs(r.results) do
    local verdict = res.not_run and "not-run" or (not res.ok and "fail") or (res.not_applicable and "n/a")
      or "pass"
    scenarios[i] = json.object():set("name", res.name):set("title", res.title):set("result", verdict)
      :set("ok", res.ok == true):set("not_applicable", res.not_applicable == true):set("why", res.why)
      :set("detail", res.detail)
  end
  local t = r.tally
  return json.encode(json.report("check"):set("ok", r.exit_code == 0):set("outcome", r.outcome)
    :set("exit_code", r.exit_code):set("message", r.message):set("policy", r.policy)
    :set("entry_points", json.array(e)):set("scenarios", json.array(scenarios)):set("passed", t.passed)
    :set("failed", t.failed):set("not_run", t.not_run):set("not_applicable", t.not_applicable)
    :set("exercised", json.array(t.exercised)))
end

return M
