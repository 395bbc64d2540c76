--- Outcomes of a run: name -> exit code, and the rule for peers-unhealthy. The one source of
-- these facts: the build generates the C side from this file (src/embed.lua writes
-- ig_outcome_code and the usage text's list into build/embedded.c).
-- Slurm drains a node on any non-zero prolog exit (slurmd: "Prolog error"), so only outcomes
-- where this node is at fault, or where going on would break another job, are non-zero.
local M = {}

--- The outcomes in the order the usage text lists them: {name, exit code}.
M.list = {
  { "ok", 0 },
  { "skipped", 0 },
  { "peers-unhealthy", 0 },
  { "bad-input", 2 },
  { "policy-error", 3 },
  { "lock-timeout", 4 },
  { "conflict", 5 },
  { "unit-unknown", 6 },
  { "service-failed", 7 },
  { "ctl-unusable", 8 },
  { "domain-unhealthy", 9 },
  { "deadline-exceeded", 10 },
  { "write-failed", 11 },
  -- 12 is peers-unhealthy with on_peer_fault = "fail" (PEERS_UNHEALTHY_FAIL below)
  { "channel-failed", 13 },
  { "config-fault", 14 },
  { "config-mismatch", 15 },
}

--- Outcome name -> exit code.
M.codes = {}
for _, o in ipairs(M.list) do M.codes[o[1]] = o[2] end

--- Exit code of peers-unhealthy when the setting on_peer_fault is "fail".
M.PEERS_UNHEALTHY_FAIL = 12

--- Exit code of a command line that cannot run or an internal error (not an outcome).
M.USAGE_EXIT = 1

--- A setting the settings table may not have (reading an unknown key of the read-only view raises).
local function setting(settings, name)
  local ok, v = pcall(function() return settings[name] end)
  return ok and v or nil
end

--- Exit code for an outcome name.
-- `config-fault` (C22: this node READY and connected, its peers UNAVAILABLE because the command
-- port cannot be reached) exits 13 by default: a job on a domain whose nodes cannot see each
-- other fails anyway, and Slurm's drain (with drain_reason: "imexguard: config-fault: ...") tells
-- the admin to fix config.cfg once and resume the nodes. With on_config_fault = "warn" it exits 0
-- (the run logs the fault at level err). `config-mismatch` (C28: a setting names another config
-- or node list than the one the unit's daemon reads) always exits 14.
-- @param name string outcome name
-- @param settings table|nil validated settings (on_peer_fault, on_config_fault)
-- @return integer exit code, or nil when the name is not an outcome
function M.exit_code(name, settings)
  if name == "peers-unhealthy" and settings and settings.on_peer_fault == "fail" then
    return M.PEERS_UNHEALTHY_FAIL
  end
  if name == "config-fault" and settings and setting(settings, "on_config_fault") == "warn" then
    return 0
  end
  return M.codes[name]
end

--- The list of outcomes and exit codes for `imexguard --help` (and the README).
-- @param indent string put before each line
-- @param width integer the longest line, in characters
-- @return string lines, each ending in a newline
function M.usage(indent, width)
  local items = {}
  for i, o in ipairs(M.list) do
    local item = o[1] .. " " .. o[2]
    if o[1] == "peers-unhealthy" then
      item = item .. ' (' .. M.PEERS_UNHEALTHY_FAIL .. ' with on_peer_fault = "fail")'
    elseif o[1] == "config-fault" then
      item = item .. ' (0 with on_config_fault = "warn")'
    end
    items[#items + 1] = item .. (i < #M.list and "," or ";")
  end
  items[#items + 1] = "a bad command line or an internal error exits " .. M.USAGE_EXIT .. "."
  local lines, line = {}, indent
  for _, item in ipairs(items) do
    for word in item:gmatch("%S+") do
      if #line + 1 + #word > width and line ~= indent then
        lines[#lines + 1] = line
        line = indent
      end
      line = line == indent and line .. word or line .. " " .. word
    end
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n") .. "\n"
end

return M
