-- SPDX-License-Identifier: Apache-2.0
--- The run, told in Lua: the sequence of an imexguard run (settings, the host table or the
-- recorders of a dry run, the policy, ctx, the entry point, its outcome and exit code; the standard
-- scenarios of `check`, one call each). src/main.c keeps the edges (arguments, sandbox, deadline,
-- watchdog, signals, the final line, the exit) and calls this module through a tiny fixed
-- protocol (src/driver.c), like Slurm's job_submit/lua or lsyncd's runner: each call passes one
-- table, `run`, and returns one table, the answer. What the commands print that no policy runs is
-- elsewhere: show-config's and config-test's text (imexguard.showconfig), the records of a finished
-- run (imexguard.runrecord), the check report (imexguard.testing.check).
--
-- `run` is made once per run by src/driver.c (ig_driver_open) and lives for the whole run; the
-- driver keeps its state in it. driver.c sets: command, config (path), config_explicit, policy
-- (path or nil), arg (the command's argument, or nil) and check_path (the same: check's POLICY),
-- sets (list of "KEY=VALUE"), deadline_arg (string or nil), job_arg and nodelist_arg (plan's --job
-- and --nodelist, or nil), json, verbosity (integer: -q negative, -v positive), env (the
-- environment), lua_dir (--lua-dir or IMEXGUARD_LUA_DIR, or nil), exe (this binary's absolute
-- path, or nil), and `c`, the host's own functions: c.read_trusted(path, what) -> text | nil, msg,
-- code (the trust check of src/trust.c), c.has_module(name) -> boolean, c.preload(name, value)
-- (what require(name) returns from now on), c.set_job(id) (the job id of the final line and of the
-- watchdog's line). During `check`, main.c sets run.why and run.verdict ("SKIP" or "FAIL") before
-- check_failed, and run.interrupted once the deadline interrupt ended a scenario.
--
-- An answer with a field `outcome` ends the run: main.c writes `output` (a string, may be nil) to
-- stdout and logs the final line with `outcome`, `code` (the exit code) and `message`. Any other
-- answer may carry `output` too. A call that raises ends the run in policy-error (or
-- deadline-exceeded when the deadline interrupt fired), with the traceback logged at debug.
--
-- Calls, in order: settings, then prepare, invoke, finish (a command with an entry point) or
-- check_begin, check_next and check_scenario or check_failed per scenario, check_end (check).
-- The commands and their facts (entry point, dry run, metrics, default budget) are
-- imexguard.commands': this module derives its tables from it.
--
-- After the outcome is known, D.finish also sets the drain reason of a failed prolog
-- (imexguard.drain, setting drain_reason), records the last prolog and epilog for `status` and the
-- run in the Prometheus textfile (imexguard.runrecord; setting metrics_dir, the commands of
-- D.METRICS). None changes the outcome: each failure is a log line.
local S = require('imexguard.settings')
local commands = require('imexguard.commands')
local outcomes = require('imexguard.outcomes')
local runhost = require('imexguard.runhost')
local one_line = require('imexguard.text').one_line -- at most text.MAX_LINE bytes: the final line carries it

local D = {}

--- The built-in policy.
D.DEFAULT_POLICY = 'policies.default'

-- The set {[name] = true} of the commands whose field `field` is set in imexguard.commands.
local function commands_with(field)
  local set = {}
  for _, name in ipairs(commands.names(field)) do set[name] = true end
  return set
end

--- The budget of `health` in seconds when --deadline does not give one (imexguard.commands'
-- `deadline` of health; D.settings applies any command's `deadline` the same way).
D.HEALTH_DEADLINE = commands.by_name.health.deadline

--- Commands that change nothing: the host's side effects are recorders (D.host).
D.DRY_RUN = commands_with('dry_run')

--- Commands whose runs are recorded in the metrics file.
D.METRICS = commands_with('metrics')

--- Commands that take --timeout (imexguard.commands' `options`): their budget follows it.
D.TIMEOUT = {}
for _, name in ipairs(commands.taking('timeout')) do D.TIMEOUT[name] = true end

--- Commands whose runs update the node condition and the unit's restart count (imexguard.commands'
-- `signals`: runrecord.save_signals).
D.SIGNALS = commands_with('signals')
--- Commands whose host may only signal the unit (D.signals_only_host).
D.SIGNALS_ONLY = commands_with('signals_only')

-- Commands whose last run is recorded for `status` (imexguard.state.LAST; the driver does not
-- load that module on every run: driver_spec checks that they agree).
local state_last = { prolog = true, epilog = true }
D.LAST = state_last

-- With --json, a run that ends without a report prints the error object (imexguard.json,
-- docs/json.md): a JSON reader gets JSON on every path.
local function json_output(run, outcome, code, message, output)
  if output ~= nil or not run.json then return output end
  return require('imexguard.json').error_report(run.command, outcome, code, message)
end

-- The answer that ends the run with `outcome`.
local function ends(run, outcome, message, output)
  local code = outcomes.exit_code(outcome, run.settings)
  return { outcome = outcome, code = code, message = message,
    output = json_output(run, outcome, code, message, output) }
end

-- ---- settings ------------------------------------------------------------------------------

-- The settings file's text (nil: all defaults), or nil, error message.
local function settings_text(run)
  local text, err, code = run.c.read_trusted(run.config, 'settings file')
  if text then return text end
  if code == 'ENOENT' and not run.config_explicit then -- optional default file
    run.config_absent = true
    return nil
  end
  return false, err
end

-- "PATH:LINE" of the key in the settings file's text: the line whose value counts, the last that
-- assigns it (S.lines_of); with `others`, " (also line N: the last counts)" names the lines before
-- it. PATH alone when the key is not found as written.
local function where(text, path, key, others)
  local lines = key and S.lines_of(text, key) or {}
  if #lines == 0 then return path end
  local also = ''
  if others and #lines > 1 then
    also = string.format(' (also line%s %s: the last counts)', #lines > 2 and 's' or '',
      table.concat(lines, ', ', 1, #lines - 1))
  end
  return path .. ':' .. lines[#lines] .. also
end

--- Validated settings from the file text (nil: defaults) and the --set overrides, and where each
-- came from (the view of `show-config`).
-- @param text string|nil the settings file's text
-- @param path string its path (messages)
-- @param sets table list of "KEY=VALUE"
-- @return table settings, table sources {[name] = "default" | "PATH:LINE" | "--set"}; or nil,
--   error message (one line: the file and line, or --set, and the key)
function D.load_settings(text, path, sets)
  local raw, err = {}
  local sources = {}
  if text then
    raw, err = S.load(text, '@' .. path)
    if not raw then return nil, 'settings file ' .. err end
    -- a bad value in the file is the file's fault, whatever --set says
    local ok; ok, err = S.validate(raw)
    if not ok then return nil, 'settings file ' .. where(text, path, S.key_of(err)) .. ': ' .. err end
    for k in pairs(raw) do sources[k] = where(text, path, k, true) end
  end
  raw, err = S.apply_overrides(raw, sets)
  if not raw then return nil, err end
  for _, item in ipairs(sets or {}) do
    local key = tostring(item):match('^%s*([%w_]+)%s*=') or tostring(item):match('^%s*(policy_settings)%.')
    if key then sources[key] = '--set' end
  end
  local t; t, err = S.validate(raw)
  if not t then return nil, '--set: ' .. err end
  for _, e in ipairs(S.schema) do sources[e.name] = sources[e.name] or 'default' end
  return t, sources
end

--- Call 1: read and validate the settings (file, --set, --deadline); run.settings and
-- run.sources (where each came from). A settings file that is missing (when named by --config),
-- unreadable, refused by the trust check or wrong, and a wrong --set, end the run in
-- settings-error before anything else runs: nothing changed.
-- @param run table the run
-- @return table {deadline = seconds, bus, log_level, log_journal, memory_limit = MiB} for main.c
-- to apply, or an end
function D.settings(run)
  local text, err = settings_text(run)
  if text == false then return D.settings_error(run, err) end
  local sets = {}
  for i, s in ipairs(run.sets or {}) do sets[i] = s end
  -- --deadline wins over the file and --set
  if run.deadline_arg then sets[#sets + 1] = 'deadline=' .. run.deadline_arg end
  local t, sources = D.load_settings(text, run.config, sets)
  if not t then return D.settings_error(run, sources or 'settings: invalid') end
  if run.deadline_arg then sources.deadline = '--deadline' end
  if run.policy then sources.policy = '--policy' end
  -- a command's own budget (imexguard.commands: health's 10 s) when --deadline gives none
  local budget = commands.by_name[run.command] and commands.by_name[run.command].deadline
  if budget and not run.deadline_arg then
    t.deadline = math.min(t.deadline, budget)
  end
  -- a command with --timeout (wait): its budget is the wait and imexguard.barrier's margin
  if D.TIMEOUT[run.command] and not run.deadline_arg then
    t.deadline = (tonumber(run.timeout_arg) or t.health_timeout) + require('imexguard.barrier').MARGIN
  end
  run.settings, run.sources, run.settings_text = t, sources, text or nil
  local host = require('imexguard.host')
  run.started = host.now and host.now() -- monotonic seconds, for the metrics' run duration
  return { deadline = t.deadline, bus = t.bus, log_level = t.log_level, log_journal = t.log_journal,
    memory_limit = t.memory_limit }
end

--- The end of a run whose settings are wrong: settings-error, the message naming the file, line
-- and key (or --set). (main.c prints the one reason line of `health` and `config-test`.)
-- @param run table the run
-- @param err string the error
-- @return table the end
function D.settings_error(run, err)
  return ends(run, 'settings-error', one_line(err))
end

-- ---- the host table and the policy ------------------------------------------------------------

-- the host table: the primitives, or for a dry run recorders in place of side effects
local RECORDED = runhost.SIDE_EFFECTS -- the primitives with side effects
-- a recorded lock: an object that unlocks (nothing was locked, no lock file was made)
local function fake_lock()
  return { unlock = function() return true end, inode = function() return 0, 0 end }
end

-- One argument of a recorded call as `plan` lists it: a short string quoted, a long one as its
-- size, a small non-negative integer in decimal (a mode, a signal), anything else as tostring.
local function arg_text(v)
  if type(v) == 'string' then
    if #v > 60 or v:find('\n') then return '<' .. #v .. ' bytes>' end
    return string.format('%q', v)
  end
  if type(v) == 'number' and math.type(v) == 'integer' and v >= 0 and v < 4096 then
    return string.format('%d', v)
  end
  return tostring(v)
end

--- The host table of a run: the primitives, or for a dry run recorders of the side effects.
-- @param real table the primitives (imexguard.host)
-- @param dry_run boolean
-- @return table host, table list of the recorded calls (strings)
function D.host(real, dry_run)
  local planned = {}
  if not dry_run then return real, planned end
  local h = {}
  for k, v in pairs(real) do h[k] = v end
  for _, name in ipairs(RECORDED) do
    if real[name] then
      h[name] = function(...)
        local a, parts = table.pack(...), {}
        for i = 1, a.n do parts[i] = arg_text(a[i]) end
        local line = name .. '(' .. table.concat(parts, ', ') .. ')'
        planned[#planned + 1] = line
        if real.log then real.log('notice', 'dry run: would call ' .. line) end
        if name == 'unit_job' then return 'done' end
        if name == 'lock' then return fake_lock() end
        if name == 'remove_temps' then return {} end
        return true
      end
    end
  end
  return h, planned
end

--- How to run imexguard again with this run's settings file, policy, Lua directory and --set
-- options (the prolog's watcher, imexguard.watch): {exe = this binary's absolute path (nil when
-- unknown), options = the arguments before a command, a list of strings}. --deadline is left
-- out: the new run has a budget of its own.
-- @param run table the run
-- @return table
function D.invocation(run)
  local o = {}
  if run.config_explicit or not run.config_absent then o[#o + 1] = '--config'; o[#o + 1] = run.config end
  if run.policy then o[#o + 1] = '--policy'; o[#o + 1] = run.policy end
  if run.lua_dir then o[#o + 1] = '--lua-dir'; o[#o + 1] = run.lua_dir end
  for _, s in ipairs(run.sets or {}) do o[#o + 1] = '--set'; o[#o + 1] = s end
  return { exe = run.exe, options = o }
end

--- The job from the environment: imexguard.slurmenv when present.
-- @param env table the environment
-- @param has_slurmenv boolean whether the module imexguard.slurmenv exists
-- @return table {id, nodelist, nodename, user}
function D.job(env, has_slurmenv)
  if has_slurmenv then
    local job = require('imexguard.slurmenv').job(env)
    if type(job) == 'table' then return job end
  end
  return { id = env.SLURM_JOB_ID or env.SLURM_JOBID,
    nodelist = env.SLURM_JOB_NODELIST or env.SLURM_NODELIST,
    nodename = env.SLURMD_NODENAME, user = env.SLURM_JOB_USER }
end

--- The environment with the job of `plan --job N --nodelist LIST` (a plan without a job: no Slurm
-- environment needed): SLURM_JOB_ID/SLURM_JOBID = N, SLURM_JOB_NODELIST/SLURM_NODELIST = LIST, as
-- slurmd gives a prolog.
-- @param env table the environment
-- @param job string|nil --job
-- @param nodelist string|nil --nodelist
-- @return table env itself when neither is given, else a copy with them
function D.job_env(env, job, nodelist)
  if not job and not nodelist then return env end
  local e = {}
  for k, v in pairs(env) do e[k] = v end
  if job then e.SLURM_JOB_ID, e.SLURM_JOBID = job, job end
  if nodelist then e.SLURM_JOB_NODELIST, e.SLURM_NODELIST = nodelist, nodelist end
  return e
end

--- Check a loaded policy: a table of entry points (imexguard.commands: a `required` one must be a
-- function, an `optional` one a function or nil).
-- @param p any what the policy's chunk returned
-- @return string the entry points it has, in imexguard.commands' order ("prolog, epilog, ..."),
--   or nil, error message
function D.check(p)
  if type(p) ~= 'table' then return nil, 'must return a table of entry points, returned ' .. type(p) end
  local have = {}
  for _, c in ipairs(commands.list) do
    local f = c.entry and p[c.name]
    if type(f) == 'function' then have[#have + 1] = c.name
    elseif c.entry and (f ~= nil or c.entry == 'required') then
      return nil, string.format('%s must be a function, is %s', c.name, type(f))
    end
  end
  return table.concat(have, ', ')
end

-- The compiled chunk of the policy file at `path` (read through the trust check, chunkname
-- "@path" so errors name file:line) and, third, its text; or nil, error message.
local function policy_chunk(run, path)
  local text, err = run.c.read_trusted(path, 'policy')
  if not text then return nil, err end
  local chunk, cerr = load(text, '@' .. path, 't')
  if not chunk then return nil, 'policy ' .. tostring(cerr) end
  return chunk, nil, text
end

--- An error raised while a policy file's chunk ran, made to name the policy file and line. A
-- policy that ends in `return P.extend{ typo = f }` makes a tail call: Lua drops the chunk's frame
-- before extend runs (Lua 5.4 manual, 3.4.10: a tail call erases any debug information about the
-- calling function), so extend's `error(msg, 2)` names the frame below, this driver's call of the
-- chunk (or, under pcall, no position at all). Such a message gets the policy file's line: the
-- line that names the key the message quotes ('typo'), else for a message naming this driver the
-- chunk's last `return`; a message without a position (error(msg, 0)) gets the file alone.
-- @param err any the error value
-- @param path string the policy file
-- @param text string its contents
-- @return any the error value, a string naming path:line where it named this driver
function D.policy_error(err, path, text)
  if type(err) ~= 'string' then return err end
  -- named this driver, or no position at all (the frame below the chunk is pcall, a C function)
  local named_driver = err:match('^[^\n]-imexguard/driver%.lua:%d+: (.*)$')
  local rest = named_driver or (not err:match('^[^%s:]+:%d+: ') and err)
  if not rest then return err end
  local line
  local key = rest:match("'([%a_][%w_]*)'")
  if key then line = S.locate(text, key) end
  if not line and named_driver then
    local n = 0
    for l in (text .. '\n'):gmatch('([^\n]*)\n') do
      n = n + 1
      if l:match('^%s*return[%s({]') then line = n end
    end
  end
  -- error(msg, 0) of the policy itself, a key not found: the file without a line (never a guess)
  return line and string.format('%s:%d: %s', path, line, rest) or string.format('%s: %s', path, rest)
end

-- Run a policy file's chunk: what it returns, errors made to name the policy file (D.policy_error).
local function run_chunk(chunk, path, text)
  local ok, p = pcall(chunk)
  if not ok then error(D.policy_error(p, path, text), 0) end
  return p
end

-- The policy table (path nil: the built-in policy) with its entry points checked, or nil, error
-- message. Runtime errors of the policy's chunk raise (the host names file:line).
local function load_policy(run, path)
  local p
  if path == nil then
    if not run.c.has_module(D.DEFAULT_POLICY) then
      return nil, 'the built-in policy ' .. D.DEFAULT_POLICY .. ' is not in this binary'
    end
    p = require(D.DEFAULT_POLICY)
  else
    local chunk, err, text = policy_chunk(run, path)
    if not chunk then return nil, err end
    p = run_chunk(chunk, path, text)
  end
  local entries, err = D.check(p)
  if not entries then return nil, string.format('policy %s: %s', path or D.DEFAULT_POLICY, err) end
  return p, entries
end

-- The entry point for run.command: policy[command]; an optional one (imexguard.commands) falls
-- back to the built-in policy's. Returns the function, or nil, error message.
local function entry_point(run, policy, path)
  local name = run.command
  local fn = policy[name]
  local optional = commands.by_name[name] and commands.by_name[name].entry == 'optional'
  if type(fn) ~= 'function' and path ~= nil and optional then
    local default, err = load_policy(run, nil)
    if not default then return nil, err end
    fn = default[name]
  end
  if type(fn) ~= 'function' then
    return nil, string.format("policy %s has no function '%s'", path or D.DEFAULT_POLICY, name)
  end
  return fn
end

--- The policy's own settings (imexguard.policysettings, issue 32 item 7): run.settings.policy_settings
-- checked against what the policy declares (P.settings) and filled with its defaults. A wrong value
-- or an unknown name is the settings file's fault (settings-error naming the file and line, or
-- --set); a wrong declaration is the policy's (policy-error).
-- @param run table the run (settings, sources, settings_text, config)
-- @param policy table the loaded policy
-- @param path string|nil the policy's path (nil: the built-in one)
-- @return true, or nil, outcome, message
function D.policy_settings(run, policy, path)
  local ok, outcome, err = require('imexguard.policysettings').apply(policy, run.settings)
  if ok then return true end
  if outcome == 'policy-error' then
    return nil, outcome, one_line(string.format('policy %s: %s', path or D.DEFAULT_POLICY, err))
  end
  local src = run.sources and run.sources.policy_settings
  local where_ = src == '--set' and '--set' or ('settings file ' .. where(run.settings_text, run.config,
    'policy_settings'))
  return nil, outcome, one_line(where_ .. ': ' .. err)
end

--- Call 2 (a command with an entry point, imexguard.commands): the host table, the policy, its
-- entry point and ctx.
-- @param run table the run (after settings)
-- @return table {} or an end
function D.prepare(run)
  if D.HOST_COMMANDS[run.command] then return D.HOST_COMMANDS[run.command](run) end
  local dry_run = D.DRY_RUN[run.command] == true
  local real = require('imexguard.host')
  run.real_host = real
  local host, planned = D.host(real, dry_run)
  if not dry_run then host = runhost.counting(real, run) end
  if D.SIGNALS_ONLY[run.command] then host = runhost.signals_only(host, run.command) end
  host = runhost.watching(host, run)
  if dry_run then run.c.preload('imexguard.host', host) end -- require sees the recorders too
  local path = run.policy or run.settings.policy
  local policy, err = load_policy(run, path)
  if not policy then return ends(run, 'policy-error', err) end
  local psok, po, pm = D.policy_settings(run, policy, path)
  if not psok then return ends(run, po, pm) end
  -- a policy that keeps a daemon running at all times (static_domain): IMEX is expected when idle
  local sok, static = pcall(function() return policy.imex_always_expected end)
  run.static = sok and static == true
  local fn; fn, err = entry_point(run, policy, path)
  if not fn then return ends(run, 'policy-error', err) end
  local env = D.job_env(run.env, run.job_arg, run.nodelist_arg)
  local ctx = {
    command = run.command, host = host,
    settings = S.readonly(run.settings, 'ctx.settings', S.by_name),
    env = S.readonly(env, 'ctx.env'),
    job = D.job(env, run.c.has_module('imexguard.slurmenv')),
    dry_run = dry_run, json = run.json, planned = planned,
    verbosity = run.verbosity or 0, arg = run.arg, invocation = D.invocation(run),
    timeout = tonumber(run.timeout_arg), job_given = run.job_arg ~= nil,
    imex_always_expected = run.static,
  }
  local id = ctx.job.id
  if type(id) == 'string' or type(id) == 'number' then run.c.set_job(tostring(id)) end
  run.entry, run.ctx = fn, ctx
  run.what = string.format('policy %s: %s', path or D.DEFAULT_POLICY, run.command)
  return {}
end

-- ---- config-test and show-config (the host runs them: no entry point) ----------------------

--- `config-test` (after D.settings passed): the policy loads with its entry points (with the
-- dry-run recorders as imexguard.host: nothing changes), then every check of imexguard.configtest
-- reads what a prolog will read (slurm.conf, the maps, config.cfg...) and names each fault with its
-- file and line. Prints the findings and then the verdict: "FILE: ok; policy P loads (entry
-- points)" (imexguard.showconfig.test_line) with the warnings counted, or "imexguard: OUTCOME: ..."
-- for the first error (with run.strict, `--strict`, for the first warning too); policy-error when
-- the policy does not load (main.c prints its reason line).
-- @param run table the run
-- @return table the end
function D.config_test(run)
  local host = D.host(require('imexguard.host'), true)
  run.c.preload('imexguard.host', host)
  local path = run.policy or run.settings.policy
  local policy, entries = load_policy(run, path)
  if not policy then return ends(run, 'policy-error', entries) end
  local psok, po, pm = D.policy_settings(run, policy, path)
  if not psok then return ends(run, po, pm) end
  local line = require('imexguard.showconfig').test_line(run, path or D.DEFAULT_POLICY, policy, entries)
  local ctx = { command = run.command, host = host, dry_run = true, job = {}, policy = policy,
    settings = S.readonly(run.settings, 'ctx.settings', S.by_name), env = S.readonly(run.env, 'ctx.env'),
    config_file = { path = run.config, text = run.settings_text, sources = run.sources,
      absent = run.config_absent } }
  local configtest = require('imexguard.configtest')
  local outcome, message, out = configtest.report(configtest.run(ctx), line, run.strict)
  return ends(run, outcome, message, out)
end

--- `show-config` (after D.settings): every setting, its value and where it came from, as a
-- settings file or JSON (imexguard.showconfig.settings_report). Ends ok.
-- @param run table the run
-- @return table the end
function D.show_config(run)
  local ctx = { host = require('imexguard.host'), env = run.env,
    settings = S.readonly(run.settings, 'ctx.settings', S.by_name) }
  run.effective = require('imexguard.showconfig').effective(ctx)
  -- the policy's own settings (P.settings) with their defaults, as a run gets them
  run.c.preload('imexguard.host', (D.host(require('imexguard.host'), true)))
  local path = run.policy or run.settings.policy
  local ok, policy, perr = pcall(load_policy, run, path)
  if ok and policy then
    run.policy_schema = require('imexguard.policysettings').schema_of(policy)
    local psok, po, pm = D.policy_settings(run, policy, path)
    if not psok then return ends(run, po, pm) end
  else
    run.policy_unloaded = one_line(tostring(ok and perr or policy))
  end
  local message, out = require('imexguard.showconfig').settings_report(run)
  return ends(run, 'ok', message, out)
end

--- The commands the host runs itself after the settings (no entry point), by name.
D.HOST_COMMANDS = { ['config-test'] = D.config_test, ['show-config'] = D.show_config }

--- Call 3: the entry point (under the deadline's count hook; an error raises through).
-- @param run table the run (after prepare)
-- @return table {}
function D.invoke(run)
  run.results = table.pack(run.entry(run.ctx))
  return {}
end

-- The entry point's results -> exit code, outcome, message | nil, error message.
local function result(what, settings, name, message)
  if type(name) ~= 'string' or not outcomes.codes[name] then
    local got = type(name) == 'string' and string.format('%q', name) or tostring(name)
    return nil, string.format('%s returned %s instead of an outcome name', what, got)
  end
  if message ~= nil and type(message) ~= 'string' then
    return nil, string.format('%s returned a %s as its message (a string is expected)', what, type(message))
  end
  return outcomes.exit_code(name, settings), name, one_line(message or '')
end

-- A report (third value of an entry point) as text for stdout: a table is encoded as JSON.
local function output(v)
  if type(v) == 'table' then return require('cjson').encode(v) .. '\n' end
  if type(v) == 'string' then return v end
  return nil
end

--- Call 4 (host bookkeeping, the count hook suspended): the outcome, exit code and output.
-- @param run table the run (after invoke)
-- @return table the end {outcome, code, message, output}
function D.finish(run)
  local r = run.results
  local code, name, message = result(run.what, run.settings, r[1], r[2])
  if not code then
    D.after(run, 'policy-error', outcomes.exit_code('policy-error'), name)
    return ends(run, 'policy-error', name)
  end
  local ok, out = pcall(output, r[3])
  D.after(run, name, code, message)
  return { outcome = name, code = code, message = D.counts(run, message),
    output = json_output(run, name, code, message, ok and out or nil) }
end

--- The final line's message with the run's counts that no message carries by itself: `; nudges=N`
-- when the health wait nudged the daemon (run.nudges > 0, imexguard.runhost.counting), kept whole when the
-- message is cut to text.MAX_LINE.
-- @param run table the run
-- @param message string the entry point's message (one line)
-- @return string
function D.counts(run, message)
  local n = run.nudges or 0
  if n == 0 then return message end
  local tail = string.format('%snudges=%d', message == '' and '' or '; ', n)
  return one_line(message, require('imexguard.text').MAX_LINE - #tail - 3) .. tail -- 3: one_line's "..."
end

-- Log a failure of the bookkeeping after the outcome (it never changes the outcome).
local function after_failed(run, what, err)
  local host = run.real_host
  if host and host.log then host.log('warning', one_line(what .. ' failed: ' .. tostring(err))) end
end

--- After the outcome (host bookkeeping, in D.finish): the drain reason of a failed prolog
-- (imexguard.drain), the last-run record and the metrics (imexguard.runrecord). Failures are
-- logged, never raised.
-- @param run table the run (after invoke)
-- @param outcome string the outcome
-- @param code integer its exit code
-- @param message string the run's message
function D.after(run, outcome, code, message)
  local host = run.real_host
  if not host then return end
  if run.command == 'prolog' and code ~= 0 and run.settings.drain_reason then
    local base = { host = host, settings = run.settings, env = run.env }
    local ok, err = pcall(require('imexguard.drain').set, base, outcome, message)
    if not ok then after_failed(run, 'drain reason', err) end
  end
  if state_last[run.command] and not D.DRY_RUN[run.command] then
    local save_last = require('imexguard.runrecord').save_last
    local ok, saved, err = pcall(save_last, run, host, outcome, code, D.counts(run, message))
    if not (ok and saved) then after_failed(run, 'last run record', ok and err or saved) end
  end
  if D.SIGNALS[run.command] then
    local ok, err = pcall(require('imexguard.runrecord').save_signals, run, host, outcome)
    if not ok or err then after_failed(run, 'node condition', err) end
  end
  if D.SIGNALS[run.command] and run.settings.slurm_extra then
    local ok, err = pcall(require('imexguard.runrecord').save_digest, run, host, outcome, code)
    if not ok or err then after_failed(run, "the digest in Slurm's Extra", err) end
  end
  if D.METRICS[run.command] and run.settings.metrics_dir then
    local ok, err = pcall(require('imexguard.runrecord').save_metrics, run, host, outcome, code)
    if not ok then after_failed(run, 'metrics', err) end
  end
end

-- ---- check ------------------------------------------------------------------------------------

--- check, call 2: the scenarios, the fake host preloaded as imexguard.host, the policy compiled
-- and checked once (each scenario then runs a fresh policy table from the same chunk).
-- @param run table the run (after settings)
-- @return table {output = the entry points line} or an end
function D.check_begin(run)
  local sc = require('imexguard.testing.check')
  -- a policy that requires the primitives reaches the fake host, never the node
  run.c.preload('imexguard.host', sc.host_proxy())
  local path = run.check_path
  local chunk, err, text = policy_chunk(run, path)
  if not chunk then return ends(run, 'policy-error', err) end
  local p = run_chunk(chunk, path, text)
  local entries; entries, err = D.check(p)
  if not entries then return ends(run, 'policy-error', string.format('policy %s: %s', path, err)) end
  local psok, po, pm = D.policy_settings(run, p, path)
  if not psok then return ends(run, po, pm) end
  run.check = { sc = sc, chunk = chunk, entries = entries, names = sc.names(), i = 0, results = {} }
  return { output = not run.json and string.format('policy %s: entry points %s\n', path, entries) or nil }
end

--- check: the next scenario (host bookkeeping).
-- @param run table the run
-- @return table {name = the scenario} or {done = true}
function D.check_next(run)
  local c = run.check
  c.i = c.i + 1
  if c.i > #c.names then return { done = true } end
  run.stage = nil
  return { name = c.names[c.i] }
end

-- Record a scenario's result; the answer prints its report line.
local function record(run, res, line)
  run.check.results[run.check.i] = res
  return { output = not run.json and line .. '\n' or nil }
end

--- check: run the current scenario against a fresh policy table (under the deadline's count
-- hook: main.c gives each scenario a deadline of its own). run.stage names what ran when it raised.
-- @param run table the run
-- @return table {output = its report line}
function D.check_scenario(run)
  local c = run.check
  run.stage = 'loading the policy again'
  local policy = c.chunk()
  run.stage = 'the scenario'
  local res = c.sc.run_one(policy, c.names[c.i], run.settings)
  return record(run, res, c.sc.format(res))
end

--- check: the current scenario failed outside run_one (it raised, or the deadline) or was not
-- run (run.verdict "SKIP"); run.why says why (set by main.c).
-- @param run table the run
-- @return table {output = its report line}
function D.check_failed(run)
  local c = run.check
  local name = c.names[c.i]
  local s = c.sc.by_name[name] or { title = '' }
  local skip = run.verdict == 'SKIP'
  local res = { name = name, title = s.title, ok = false, why = run.why, not_run = skip }
  if skip then return record(run, res, string.format('SKIP %s: %s: %s', name, s.title, run.why)) end
  return record(run, res, c.sc.format(res))
end

--- check, last call (host bookkeeping): the summary, the JSON report, the outcome.
-- @param run table the run
-- @return table the end: ok when no scenario failed or was not run, else policy-error
function D.check_end(run)
  local c = run.check
  local t = c.sc.tally(c.results)
  local line, msg = c.sc.summary(t, #c.names, run.interrupted)
  local outcome, message = 'policy-error', string.format('policy %s: %s', run.check_path, msg)
  if t.failed + t.not_run == 0 then
    outcome, message = 'ok', string.format('policy %s is valid: %s; %s', run.check_path, c.entries, msg)
  end
  local out = run.json and c.sc.report_json{ policy = run.check_path, entries = c.entries,
    results = c.results, tally = t, outcome = outcome, exit_code = outcomes.exit_code(outcome, run.settings),
    message = message } or 'check: ' .. line .. '\n'
  return ends(run, outcome, message, out)
end

return D
