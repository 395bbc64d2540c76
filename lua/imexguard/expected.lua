-- SPDX-License-Identifier: Apache-2.0
--- "IMEX expected here": whether this node's IMEX daemon and its domain are expected to be healthy
-- now, and why, for the GPU health stack around imexguard (DCGM's IMEX health watch, NVIDIA's
-- NVSentinel, a site's own checks), which cannot tell by itself: a node whose prolog skipped IMEX,
-- an idle node whose daemon still runs the last job's list while its peers moved on, and one whose
-- daemon a site policy stopped after the last job all look broken to a check that only asks
-- nvidia-imex-ctl (docs/design.md, "The GPU health stack").
--
-- imexguard alone knows: the registry (a job registered here uses IMEX), the unit (installed,
-- enabled) and the policy (a static domain-wide daemon is expected at all times). Every prolog,
-- epilog, health and forget run (and status) derives the condition from what it saw, after its outcome
-- (imexguard.runrecord.save_signals), and keeps it in two places:
--   state_dir/condition.json: one line of JSON (M.render), replaced atomically and only when it
--     changed, for a node-problem detector or a health stack's gate;
--   the metric imexguard_imex_expected{reason} (1 or 0) in the metrics file (metrics_dir).
-- The reason is one of a fixed set (M.REASONS); a value that is unknown counts as expected, so a
-- health stack that gates its IMEX check on this never stops judging a node on a guess.
local cjson = require("cjson")

local M = {}

--- The reasons, in the order the docs list them: {name, expected (boolean), meaning}. The metric's
-- label takes only these values.
M.REASONS = {
  { "job-registered", true, "a job is registered on this node: its prolog made the node list right "
    .. "and the job uses IMEX" },
  { "static-domain", true, "the policy runs a static domain-wide daemon from boot (static_domain): "
    .. "expected at all times" },
  { "unit-unknown", true, "systemd did not answer: not known, so counted as expected" },
  { "registry-unknown", true, "the state file cannot be read: a job may be registered, so counted as "
    .. "expected" },
  { "idle", false, "no job is registered: the daemon is as the last job left it (running with that "
    .. "job's node list, or stopped by a policy such as stop_on_last_epilog); the next prolog makes it "
    .. "right" },
  { "not-installed", false, "the unit is not installed" },
  { "unit-disabled", false, "the unit is installed but not enabled, and manage_disabled_unit is off" },
  { "not-applicable", false, "IMEX does not apply here for another reason (no config.cfg, a node in no "
    .. "IMEX domain, a site policy's applies)" },
}

--- Reason name -> expected (boolean).
M.EXPECTED = {}
for _, r in ipairs(M.REASONS) do M.EXPECTED[r[1]] = r[2] end

-- The reasons that say IMEX does not apply to the node: only a run that asked the unit changes them.
local NOT_APPLICABLE = { ["not-installed"] = true, ["unit-disabled"] = true, ["not-applicable"] = true }

--- Largest condition file read (bytes).
M.MAX_BYTES = 65536

--- Path of the condition file.
-- @param settings table validated settings (state_dir)
-- @return string
function M.path(settings)
  return settings.state_dir .. "/condition.json"
end

-- systemd UnitFileState values under which the unit starts (imexguard.steps.applies' ENABLED).
local ENABLED = { enabled = true, ["enabled-runtime"] = true, static = true, indirect = true,
  generated = true, alias = true, linked = true, ["linked-runtime"] = true, transient = true }

--- Why IMEX does not apply, from the unit's properties of a run whose outcome was `skipped`.
-- @param props table|nil the unit's properties (host.unit)
-- @param settings table validated settings (manage_disabled_unit)
-- @return string a reason of M.REASONS
function M.skip_reason(props, settings)
  if props and props.load_state ~= "loaded" then return "not-installed" end
  if props and not ENABLED[props.unit_file_state]
    and not (props.unit_file_state == "disabled" and settings.manage_disabled_unit) then
    return "unit-disabled"
  end
  return "not-applicable"
end

--- The reason from what a run saw (pure).
-- @param f table facts: outcome (the run's), props (the unit's properties the run read last, or nil
--   when it read none: an epilog), jobs (the registry's entries, or nil when the state file cannot be
--   read), static (the policy runs a static domain: policy field imex_always_expected), previous (the
--   reason of the condition file, or nil)
-- @param settings table validated settings
-- @return string reason, boolean expected
function M.derive(f, settings)
  local reason
  if f.outcome == "skipped" and f.props then
    reason = M.skip_reason(f.props, settings)
  elseif f.outcome == "unit-unknown" then
    reason = "unit-unknown"
  elseif not f.props and f.previous and NOT_APPLICABLE[f.previous] then
    reason = f.previous -- a run that did not ask the unit (the epilog) knows no better
  elseif f.props and f.props.load_state ~= "loaded" then
    reason = "not-installed"
  elseif f.jobs == nil then
    reason = "registry-unknown"
  elseif #f.jobs > 0 then
    reason = "job-registered"
  elseif f.static then
    reason = "static-domain"
  else
    reason = "idle"
  end
  return reason, M.EXPECTED[reason]
end

--- Read the condition file.
-- @param host table the primitives (read)
-- @param settings table validated settings
-- @return table {text = the file's bytes, reason, since (Unix seconds)} or nil when there is none or
--   it is not one
function M.load(host, settings)
  local text = host.read(M.path(settings), M.MAX_BYTES)
  if not text then return nil end
  local ok, t = pcall(cjson.decode, text)
  if not ok or type(t) ~= "table" or M.EXPECTED[t.reason] == nil then return { text = text } end
  return { text = text, reason = t.reason, since = t.since_unix, unit = t.unit,
    jobs = type(t.jobs) == "table" and t.jobs or nil, flapping = t.flapping }
end

-- Does the old condition (M.load) say what `c` says (M.render's fields but since)? Then the file
-- is left as it is without rendering it (the fast path's prolog: nothing changed).
local function same(old, c)
  if not old or old.reason ~= c.reason or old.unit ~= c.unit or not old.jobs or #old.jobs ~= #c.jobs then
    return false
  end
  for i, id in ipairs(c.jobs) do
    if old.jobs[i] ~= id then return false end
  end
  local a, b = old.flapping, c.flap
  if type(a) ~= "table" or not b then return a == cjson.null and b == nil end
  return a.flapping == b.flapping and a.restarts == b.count and a.window == b.window
    and a.threshold == b.threshold
end

--- The condition file's text: one line of JSON, keys in this order (docs/json.md, "The node
-- condition"): schema, expected, reason, since (ISO 8601, when this reason began), since_unix,
-- unit, jobs (the registered job ids), flapping (null without a count; else {flapping, restarts,
-- window, threshold}).
-- @param c table {expected, reason, since (Unix seconds), unit, jobs (list of ids), flap (imexguard.
--   flapping.judge's result or nil)}
-- @return string
function M.render(c)
  local json = require("imexguard.json")
  local flap = c.flap and json.object():set("flapping", c.flap.flapping):set("restarts", c.flap.count)
    :set("window", c.flap.window):set("threshold", c.flap.threshold) or nil
  return json.encode(json.object():set("schema", json.SCHEMA):set("expected", c.expected)
    :set("reason", c.reason):set("since", json.time(c.since)):set("since_unix", math.floor(c.since))
    :set("unit", c.unit):set("jobs", json.array(c.jobs)):set("flapping", flap))
end

--- Derive the condition after a run and replace the file when its text changed.
-- @param host table the primitives (read, write_atomic, wallclock)
-- @param settings table validated settings
-- @param f table facts (M.derive's), plus flap (imexguard.flapping.judge's result or nil)
-- @return table {expected, reason} (what the metric shows); on a failed write also the write's message
--   and code ("ENOENT": no state_dir)
function M.record(host, settings, f)
  local old = M.load(host, settings)
  f.previous = old and old.reason
  local reason, expected = M.derive(f, settings)
  local since = (old and old.reason == reason and old.since) or math.floor(host.wallclock())
  local ids = {}
  for i, e in ipairs(f.jobs or {}) do ids[i] = e.id end
  local c = { expected = expected, reason = reason, since = since, unit = settings.unit, jobs = ids,
    flap = f.flap }
  local res = { expected = expected, reason = reason }
  if same(old, c) then return res end
  local text = M.render(c)
  if old and old.text == text then return res end
  local ok, err, code = host.write_atomic(M.path(settings), text, tonumber("644", 8))
  if not ok then return res, err, code end
  return res
end

return M
