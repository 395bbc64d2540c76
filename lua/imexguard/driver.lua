--- The host's own Lua: what src/main.c asks of the library before and after a policy runs
-- (settings, the host table with recorders for `plan`, ctx, checking a policy's entry points and
-- outcome, the scenarios of `check`). Runs in the sandbox like every module; main.c requires it
-- as "imexguard.driver" and calls its functions by name.
local D = {}
local S = require 'imexguard.settings'
local outcomes = require 'imexguard.outcomes'
-- settings: load the file text (nil: defaults), apply --set, validate
function D.settings(text, path, sets)
  local raw, err = {}
  if text then
    raw, err = S.load(text, '@' .. path)
    if not raw then return nil, 'settings file ' .. err end
    -- a bad value in the file is the file's fault, whatever --set says
    local ok; ok, err = S.validate(raw)
    if not ok then return nil, 'settings file ' .. path .. ': ' .. err end
  end
  raw, err = S.apply_overrides(raw, sets)
  if not raw then return nil, err end
  local t; t, err = S.validate(raw)
  if not t then return nil, '--set: ' .. err end
  return t
end

-- the host table: the primitives, or for a dry run recorders in place of side effects
local RECORDED = {
  'write_atomic', 'mknod_char', 'mkdir', 'lock', 'unit_job', 'unit_reset_failed', 'unit_kill',
}
-- a recorded lock: an object that unlocks (nothing was locked, no lock file was made)
local function fake_lock()
  return { unlock = function() return true end, inode = function() return 0, 0 end }
end

local function show(v)
  if type(v) == 'string' then
    if #v > 60 or v:find('\n') then return '<' .. #v .. ' bytes>' end
    return string.format('%q', v)
  end
  if type(v) == 'number' and math.type(v) == 'integer' and v >= 0 and v < 4096 then
    return string.format('%d', v)
  end
  return tostring(v)
end

function D.host(real, dry_run)
  local planned = {}

  if not dry_run then return real, planned end
  local h = {}
  for k, v in pairs(real) do h[k] = v end
  for _, name in ipairs(RECORDED) do
    if real[name] then
      h[name] = function(...)
        local a, parts = table.pack(...), {}
        for i = 1, a.n do parts[i] = show(a[i]) end
        local line = name .. '(' .. table.concat(parts, ', ') .. ')'
        planned[#planned + 1] = line
        if real.log then real.log('notice', 'dry run: would call ' .. line) end
        if name == 'unit_job' then return 'done' end
        if name == 'lock' then return fake_lock() end
        return true
      end
    end
  end
  return h, planned
end

-- the job from the environment: imexguard.slurmenv when present
function D.job(env, has_slurmenv)
  if has_slurmenv then
    local job = require('imexguard.slurmenv').job(env)
    if type(job) == 'table' then return job end
  end
  return { id = env.SLURM_JOB_ID or env.SLURM_JOBID,
    nodelist = env.SLURM_JOB_NODELIST or env.SLURM_NODELIST,
    nodename = env.SLURMD_NODENAME, user = env.SLURM_JOB_USER }
end

function D.ctx(command, settings, host, env, has_slurmenv, dry_run, json, planned)
  return {
    command = command, host = host,
    settings = S.readonly(settings, 'ctx.settings', S.by_name),
    env = S.readonly(env, 'ctx.env'),
    job = D.job(env, has_slurmenv),
    dry_run = dry_run, json = json, planned = planned,
  }
end

-- check a loaded policy: a table with functions prolog and epilog (status, plan optional)
function D.check(p)
  if type(p) ~= 'table' then return nil, 'must return a table of entry points, returned ' .. type(p) end
  local have = {}
  for _, name in ipairs({ 'prolog', 'epilog', 'status', 'plan' }) do
    local f = p[name]
    if type(f) == 'function' then have[#have + 1] = name
    elseif f ~= nil or name == 'prolog' or name == 'epilog' then
      return nil, string.format('%s must be a function, is %s', name, type(f))
    end
  end
  return table.concat(have, ', ')
end

-- the entry point's results -> exit code, outcome, message | nil, error message
local function one_line(s)
  s = s:gsub('[\r\n]+', ' ')
  if #s > 1000 then s = s:sub(1, 1000) .. '...' end
  return s
end

function D.result(what, settings, name, message)
  if type(name) ~= 'string' or not outcomes.codes[name] then
    local got = type(name) == 'string' and string.format('%q', name) or tostring(name)
    return nil, string.format('%s returned %s instead of an outcome name', what, got)
  end
  if message ~= nil and type(message) ~= 'string' then
    return nil, string.format('%s returned a %s as its message (a string is expected)', what, type(message))
  end
  return outcomes.exit_code(name, settings), name, one_line(message or '')
end

function D.code(name, settings) return outcomes.exit_code(name, settings) end
-- check: the scenarios module and a proxy preloaded as imexguard.host
function D.scenarios()
  local sc = require 'imexguard.scenarios'
  return sc, sc.host_proxy(), sc.names()
end

-- check: one scenario -> result table and its report line
function D.scenario(sc, policy, name, settings)
  local res = sc.run_one(policy, name, settings)
  return res, sc.format(res)
end

-- check: a result made in C (failed outside run_one) -> result table and report line
function D.scenario_failed(sc, name, why, verdict)
  local s = sc.by_name[name] or { title = '' }
  local res = { name = name, title = s.title, ok = false, why = why, not_run = verdict == 'SKIP' }
  if verdict == 'SKIP' then
    return res, string.format('SKIP %s: %s: %s', name, s.title, why)
  end
  return res, sc.format(res)
end

function D.check_json(path, entries, results)
  local passed, failed, not_run = 0, 0, 0
  for _, res in ipairs(results) do
    if res.ok then passed = passed + 1
    elseif res.not_run then not_run = not_run + 1 else failed = failed + 1 end
  end
  local e = {}
  for w in entries:gmatch('[^, ]+') do e[#e + 1] = w end
  local cjson = require 'cjson'
  return cjson.encode({ policy = path, entry_points = setmetatable(e, cjson.array_mt),
    scenarios = setmetatable(results, cjson.array_mt), passed = passed, failed = failed,
    not_run = not_run }) .. '\n'
end

-- a report (third value of an entry point) as text for stdout: a table is encoded as JSON
function D.output(v)
  if type(v) == 'table' then return require('cjson').encode(v) .. '\n' end
  if type(v) == 'string' then return v end
  return nil
end
return D
