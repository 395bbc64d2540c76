-- SPDX-License-Identifier: Apache-2.0
--- Prometheus metrics in node_exporter's textfile collector format.
--
-- node_exporter (--collector.textfile.directory) reads every `*.prom` file of a directory on each
-- scrape; a file must be replaced atomically or a scrape can see it half written (node_exporter's
-- README, "Textfile Collector"). imexguard writes `DIR/imexguard.prom` with host.write_atomic.
-- The format is Prometheus' text exposition format 0.0.4: `# HELP`, `# TYPE`, then
-- `name{label="value"} number` lines; label values escape `\`, `"` and newline.
--
-- Counters survive between runs by being read back from the previous file (a file that does not
-- parse starts them from zero, with a warning). The update runs under its own lock
-- (`state_dir/metrics.lock`, 1 s) so that two runs ending at once do not lose a count; a run that
-- cannot take it skips the update with a log line (metrics never change an outcome).
-- @module imexguard.metrics
local M = {}

M.FILE = "imexguard.prom"
M.MAX_BYTES = 1048576
M.LOCK_TIMEOUT = 1 -- seconds

--- The metric families: type, help text and labels (the man page's METRICS section is generated
-- from this table, man/gen.lua).
local HELP = {
  imexguard_runs_total = { "counter", "Runs of imexguard by command and outcome.", "command, outcome" },
  imexguard_restarts_total = { "counter", "Starts and restarts of the IMEX unit done by imexguard.", "" },
  imexguard_nudges_total = { "counter",
    "SIGUSR1 sent by imexguard's health wait to the IMEX daemon: restart its outgoing connections now.", "" },
  imexguard_run_duration_seconds = { "summary", "Wall time of runs by command, in seconds.", "command" },
  imexguard_last_run_timestamp_seconds = { "gauge", "When the last run of the command ended (Unix time).",
    "command" },
  imexguard_last_outcome = { "gauge", "1 for the outcome of the last run of the command.",
    "command, outcome" },
  imexguard_last_exit_code = { "gauge", "Exit code of the last run of the command.", "command" },
  imexguard_domain_node_status = { "gauge",
    "1 for the status of each IMEX node as the last run that asked nvidia-imex-ctl saw it, 0 for its "
      .. "other statuses (id, host, status).", "id, host, status" },
  imexguard_fabric_gpu = { "gauge",
    "1 for each GPU as the last run that read the NVLink fabric saw it (gpu, state, status, partition, "
      .. "health: its fabric Health Summary).", "gpu, state, status, partition, health" },
  imexguard_build_info = { "gauge", "1, with the version of imexguard that wrote this file.", "version" },
  imexguard_domain_map_fallback = { "gauge",
    "1 when the last run of the command found the IMEX domain map's file broken and the last map that parsed "
      .. "stood in (the log and status name the file's error), else 0.", "command" },
  imexguard_imex_expected = { "gauge",
    "1 when IMEX is expected to be healthy on this node (a job registered, a static domain), 0 when not "
      .. "(idle, not an IMEX node), as the last prolog, epilog, health or forget run derived it; the reason "
      .. "is one of a fixed set (imexguard(8), NODE CONDITION).", "reason" },
  imexguard_unit_restarts_total = { "counter",
    "Restarts of the IMEX unit by systemd itself (Restart=), counted from its NRestarts by prolog, epilog "
      .. "and health runs; each restart is a new IMEX instance, and its peers drop every memory import of "
      .. "the old one.", "" },
  imexguard_unit_flapping = { "gauge",
    "1 while the IMEX unit restarted flapping_restarts times or more within flapping_window (health ends "
      .. "unit-flapping).", "" },
  imexguard_membership = { "gauge",
    "1 for the membership mode in force at the last run (setting membership), 0 for the other.",
    "mode" },
  imexguard_slot_map_writes_total = { "counter",
    "Writes in place of the name map of membership = \"slots\" (a job's slots switched in or out).", "" },
}
local ORDER = { "imexguard_build_info", "imexguard_runs_total", "imexguard_restarts_total",
  "imexguard_nudges_total", "imexguard_slot_map_writes_total", "imexguard_membership",
  "imexguard_run_duration_seconds", "imexguard_last_run_timestamp_seconds", "imexguard_last_outcome",
  "imexguard_last_exit_code", "imexguard_domain_node_status", "imexguard_fabric_gpu",
  "imexguard_domain_map_fallback", "imexguard_imex_expected", "imexguard_unit_restarts_total",
  "imexguard_unit_flapping" }
--- Family name -> { type, help, labels (comma-separated, "" for none) }.
M.HELP = HELP
--- The family names in the file's order.
M.ORDER = ORDER

local function escape(v)
  return (tostring(v):gsub("[\\\"\n]", { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }))
end

local function unescape(v)
  return (v:gsub("\\(.)", { ["\\"] = "\\", ['"'] = '"', n = "\n" }))
end

--- The label set of a sample as its canonical text (`a="x",b="y"`, keys sorted).
-- @tparam table labels `{key = value}`
-- @treturn string
function M.labels(labels)
  local keys, parts = {}, {}
  for k in pairs(labels) do keys[#keys + 1] = k end
  table.sort(keys)
  for i, k in ipairs(keys) do parts[i] = string.format('%s="%s"', k, escape(labels[k])) end
  return table.concat(parts, ",")
end

local function number(v)
  if v ~= v then return "NaN" end
  if v == math.huge then return "+Inf" end
  if v == -math.huge then return "-Inf" end
  if math.type(v) == "integer" then return string.format("%d", v) end
  return string.format("%.17g", v)
end

-- `a="x",b="y\"z"` -> {a = "x", b = 'y"z'}, or nil when it does not scan
local function parse_labels(text)
  local out, pos = {}, 1
  while pos <= #text do
    local k, q = text:match("^([%a_][%w_]*)=()\"", pos)
    if not k then return nil end
    local i, buf = q + 1, {}
    while true do
      local c = text:sub(i, i)
      if c == "" then return nil end
      if c == '"' then break end
      if c == "\\" then c = text:sub(i, i + 1); i = i + 1 end
      buf[#buf + 1] = c
      i = i + 1
    end
    out[k] = unescape(table.concat(buf))
    pos = i + 1
    if text:sub(pos, pos) == "," then pos = pos + 1 end
  end
  return out
end

--- Parse the samples of a previous file (only the lines this module writes).
-- @tparam string text
-- @treturn[1] table `{["name{labels}"] = number}`
-- @treturn[2] nil
-- @treturn[2] string the first line that does not parse
function M.parse(text)
  local samples, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if line ~= "" and line:sub(1, 1) ~= "#" then
      local name, rest = line:match("^([%a_:][%w_:]*)(.*)$")
      local labels, value = (rest or ""):match("^{(.*)}%s+(%S+)$")
      if not labels then labels, value = "", (rest or ""):match("^%s+(%S+)$") end
      local num = value and tonumber(value)
      if not name or not num then return nil, string.format("line %d: %q", n, line) end
      local parsed = parse_labels(labels)
      if not parsed then return nil, string.format("line %d: %q", n, line) end
      samples[name .. "{" .. M.labels(parsed) .. "}"] = num
    end
  end
  return samples
end

local function family(name)
  return name:gsub("_sum$", ""):gsub("_count$", "")
end

-- The membership mode in force (run.membership) as a state set: 1 for it, 0 for the other.
local function membership_samples(samples, run, key)
  if not run.membership then return end
  for _, mode in ipairs({ "list", "slots" }) do
    samples[key("imexguard_membership", { mode = mode })] = mode == run.membership and 1 or 0
  end
end

-- The GPUs' fabric registration of a run (run.gpus) as samples, replacing the earlier run's.
local function fabric_samples(samples, gpus, key)
  for k in pairs(samples) do
    if k:find("^imexguard_fabric_gpu{") then samples[k] = nil end
  end
  for _, g in ipairs(gpus) do
    samples[key("imexguard_fabric_gpu", { gpu = g.gpu, state = g.state, status = g.status,
      partition = g.partition, health = g.health or "N/A" })] = 1
  end
end

--- Update the samples for one finished run. Every series a query may name is present, 0 when
-- nothing happened (Prometheus' naming practices: a series that appears only once something
-- happens makes rate() and absent() lie): the run counts of every command that records metrics
-- (imexguard.commands) by every outcome (imexguard.outcomes), the last outcome of the command
-- as a state set (1 for the outcome, 0 for the others), each node's status likewise (the
-- statuses of imexguard.ctl.STATES), and `imexguard_build_info{version} 1`.
-- @tparam table samples from `parse` (changed in place)
-- @tparam table run `{command, outcome, exit_code (integer), duration (seconds), ended (Unix
--   seconds), restarts (integer, optional), nudges (integer, optional: SIGUSR1 sent by the health
--   wait, imexguard.nudge), nodes (optional list of {id, host, status}), gpus (optional list of
--   {gpu, state, status, partition, health}: the fabric the run read, imexguard.fabric),
--   version (string, optional: imexguard's version, host.version), map_writes (integer, optional:
--   the name map's writes in place, membership by slots), membership (string, optional: the
--   setting), domain_map_fallback (boolean: the last domain map that parsed stood in,
--   imexguard.lastgood), expected, flap (M.update_signals' fields: not read here)}`
-- @treturn table samples
function M.update(samples, run)
  local function key(name, labels) return name .. "{" .. M.labels(labels) .. "}" end
  local function add(name, labels, v)
    local k = key(name, labels)
    samples[k] = (samples[k] or 0) + v
  end
  local cmd = { command = run.command }
  local names = {}
  for _, o in ipairs(require("imexguard.outcomes").list) do names[#names + 1] = o[1] end
  for _, c in ipairs(require("imexguard.commands").names("metrics")) do
    for _, o in ipairs(names) do add("imexguard_runs_total", { command = c, outcome = o }, 0) end
  end
  if run.version then
    for k in pairs(samples) do
      if k:find("^imexguard_build_info{") then samples[k] = nil end
    end
    samples[key("imexguard_build_info", { version = run.version })] = 1
  end
  add("imexguard_runs_total", { command = run.command, outcome = run.outcome }, 1)
  add("imexguard_restarts_total", {}, run.restarts or 0)
  add("imexguard_nudges_total", {}, run.nudges or 0)
  add("imexguard_slot_map_writes_total", {}, run.map_writes or 0)
  membership_samples(samples, run, key)
  add("imexguard_run_duration_seconds_sum", cmd, run.duration)
  add("imexguard_run_duration_seconds_count", cmd, 1)
  samples[key("imexguard_last_run_timestamp_seconds", cmd)] = run.ended
  samples[key("imexguard_last_exit_code", cmd)] = run.exit_code
  local prefix = "imexguard_last_outcome{" .. M.labels(cmd):gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")
  for k in pairs(samples) do
    if k:find("^" .. prefix) then samples[k] = nil end
  end
  for _, o in ipairs(names) do
    samples[key("imexguard_last_outcome", { command = run.command, outcome = o })] = 0
  end
  samples[key("imexguard_last_outcome", { command = run.command, outcome = run.outcome })] = 1
  samples[key("imexguard_domain_map_fallback", cmd)] = run.domain_map_fallback and 1 or 0
  if run.nodes then
    for k in pairs(samples) do
      if k:find("^imexguard_domain_node_status{") then samples[k] = nil end
    end
    local states = {}
    for st in pairs(require("imexguard.ctl").STATES) do states[#states + 1] = st end
    for _, node in ipairs(run.nodes) do
      for _, st in ipairs(states) do
        samples[key("imexguard_domain_node_status", { id = node.id, host = node.host, status = st })] = 0
      end
      local labels = { id = node.id, host = node.host, status = node.status }
      samples[key("imexguard_domain_node_status", labels)] = 1
    end
  end
  if run.gpus then fabric_samples(samples, run.gpus, key) end
  return samples
end

--- Update the samples of the node condition and of the unit's restarts (a run that derived them:
-- imexguard.runrecord.save_signals); the others keep the last values. The condition is one series,
-- its reason the label (the old reason's series goes); the restarts are the record's total, set, not
-- added (the record in state_dir is their one count).
-- @tparam table samples (changed in place)
-- @tparam table run see `update` (expected, flap)
-- @treturn table samples
function M.update_signals(samples, run)
  if run.expected then
    for k in pairs(samples) do
      if k:find("^imexguard_imex_expected{") then samples[k] = nil end
    end
    samples["imexguard_imex_expected{" .. M.labels({ reason = run.expected.reason }) .. "}"] =
      run.expected.expected and 1 or 0
  end
  if run.flap then
    samples["imexguard_unit_restarts_total{}"] = run.flap.total
    samples["imexguard_unit_flapping{}"] = run.flap.flapping and 1 or 0
  end
  return samples
end

--- The file's text for a set of samples, grouped by metric family with HELP and TYPE lines.
-- @tparam table samples
-- @treturn string
function M.render(samples)
  local by = {}
  for k, v in pairs(samples) do
    local name = k:match("^([^{]+)")
    local fam = family(name)
    by[fam] = by[fam] or {}
    by[fam][#by[fam] + 1] = { k:gsub("{}$", ""), v }
  end
  local out = {}
  for _, fam in ipairs(ORDER) do
    if by[fam] then
      out[#out + 1] = string.format("# HELP %s %s\n# TYPE %s %s\n", fam, HELP[fam][2], fam, HELP[fam][1])
      table.sort(by[fam], function(a, b) return a[1] < b[1] end)
      for _, s in ipairs(by[fam]) do out[#out + 1] = s[1] .. " " .. number(s[2]) .. "\n" end
    end
  end
  return table.concat(out)
end

--- Record one finished run in `settings.metrics_dir/imexguard.prom` (no-op when the setting is
-- unset). Never raises for a runtime failure and never changes the run's outcome: failures are logged.
-- @tparam table ctx the run's context (settings, host)
-- @tparam table run see `update`
-- @treturn boolean true when the file was written
function M.record(ctx, run)
  local host, s = ctx.host, ctx.settings
  if not s.metrics_dir then return false end
  local lock, lerr = host.lock(s.state_dir .. "/metrics.lock", M.LOCK_TIMEOUT, "metrics")
  if not lock then
    host.log("warning", "metrics not updated: " .. tostring(lerr))
    return false
  end
  local path = s.metrics_dir .. "/" .. M.FILE
  local samples = {}
  local old, _, code = host.read(path, M.MAX_BYTES)
  if old then
    local parsed, perr = M.parse(old)
    if parsed then samples = parsed
    else
      host.log("warning", string.format("metrics: %s does not parse (%s): counters start from zero",
        path, perr))
    end
  elseif code ~= "ENOENT" then
    host.log("warning", "metrics: cannot read " .. path .. ": counters start from zero")
  end
  local text = M.render(M.update_signals(M.update(samples, run), run))
  local ok, werr = host.write_atomic(path, text, tonumber("644", 8))
  lock:unlock()
  if not ok then host.log("warning", "metrics not written: " .. tostring(werr)) end
  return ok == true
end

return M
