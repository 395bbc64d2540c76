-- SPDX-License-Identifier: Apache-2.0
--- `config-test` (-t, as `sshd -t`): every file a prolog will read, read the way the prolog reads it,
-- each fault named with its file and line before Slurm runs a prolog (issue 32, items 1-2; field
-- case C53). The framework: the list of checks, running them, the report and the outcome. The
-- checks themselves live where their facts live (imexguard.checks.*, or a module of their own).
--
-- A check is a function of ctx (the run's context, as a policy gets it: settings, env, host with
-- the dry-run recorders, `config_file` = {path, text, sources, absent}) returning a list of
-- findings: `{level = "error"|"warning"|"info", file = PATH|nil, line = N|nil, message = "...",
-- outcome = NAME|nil}`. "error": a prolog would fail on it (outcome: what it would end in, default
-- bad-input); "warning": a prolog runs but something is wrong or risky (`--strict` makes warnings
-- fail too); "info": what was found and read (which slurm.conf, which topology file), so that an
-- admin sees what was tested. A check that raises is an error finding naming the check.
-- To add a check: a row in M.CHECKS naming the module and its function.
local one_line = require("imexguard.text").one_line

local M = {}

--- The checks, in the order they run and report: {name, module, fn}; `fn` is the module's function
-- of ctx that returns the findings.
M.CHECKS = {
  { name = "settings", module = "imexguard.checks.settings", fn = "findings" },
  { name = "slurm.conf", module = "imexguard.checks.slurm", fn = "findings" },
  { name = "IMEX", module = "imexguard.checks.imex", fn = "findings" },
  { name = "domain map", module = "imexguard.checks.maps", fn = "domain_map" },
  { name = "address map", module = "imexguard.checks.maps", fn = "address_map" },
  { name = "membership", module = "imexguard.steps.slots", fn = "findings" },
}

--- The levels, most severe first.
M.LEVELS = { "error", "warning", "info" }

--- The outcome of an error (or, with --strict, a warning) that names none: the prolog would find
-- its input unusable.
M.DEFAULT_OUTCOME = "bad-input"

-- A finding made whole: level checked, message one line, the check named.
local function finding(f, check)
  local level = type(f) == "table" and f.level
  if level ~= "error" and level ~= "warning" and level ~= "info" then
    return { level = "error", check = check, message = string.format("check %s returned a finding of "
      .. "level %s (error, warning or info expected)", check, tostring(level)) }
  end
  return { level = level, check = check, file = type(f.file) == "string" and f.file or nil,
    line = math.tointeger(f.line), message = one_line(tostring(f.message)), outcome = f.outcome }
end

--- Run the checks: each check's findings, in check order. A check's module that does not load or a
-- function that raises is one error finding naming the check.
-- @param ctx table the run's context (see the top of this file)
-- @param checks list|nil {name, module, fn} (default M.CHECKS)
-- @return list of findings, each with `check` = the check's name
function M.run(ctx, checks)
  local out = {}
  for _, c in ipairs(checks or M.CHECKS) do
    local ok, list = pcall(function() return require(c.module)[c.fn](ctx) end)
    if not ok then
      out[#out + 1] = { level = "error", check = c.name,
        message = one_line(string.format("check %s (%s.%s) failed: %s", c.name, c.module, c.fn,
          tostring(list))) }
    else
      for _, f in ipairs(type(list) == "table" and list or {}) do out[#out + 1] = finding(f, c.name) end
    end
  end
  return out
end

--- The number of findings of each level.
-- @param findings list
-- @return table {error = N, warning = N, info = N}
function M.count(findings)
  local n = { error = 0, warning = 0, info = 0 }
  for _, f in ipairs(findings) do n[f.level] = n[f.level] + 1 end
  return n
end

--- One finding as a line, compiler style: "FILE:LINE: LEVEL: message" ("FILE: LEVEL: ..." without a
-- line, "LEVEL: ..." without a file).
-- @param f table a finding
-- @return string
function M.line_of(f)
  local where = f.file and (f.file .. (f.line and (":" .. f.line) or "") .. ": ") or ""
  return where .. f.level .. ": " .. f.message
end

-- "N errors", "1 warning"...
local function plural(n, word)
  return string.format("%d %s%s", n, word, n == 1 and "" or "s")
end

--- The outcome of a config-test: the outcome of the first error (its own, else DEFAULT_OUTCOME);
-- with `strict` and no error, of the first warning; else "ok".
-- @param findings list
-- @param strict boolean
-- @return string outcome, table|nil the finding that decided it
function M.outcome(findings, strict)
  for _, level in ipairs({ "error", strict and "warning" or nil }) do
    for _, f in ipairs(findings) do
      if f.level == level then return f.outcome or M.DEFAULT_OUTCOME, f end
    end
  end
  return "ok", nil
end

--- The report of a config-test: one line per finding (errors, then warnings, then what was read,
-- each in check order), then the verdict: `ok_line` (the settings file and the policy that loads)
-- with the warnings counted, or `imexguard: OUTCOME: FIRST (and N more ...)` for a failure, the
-- line a health check or a script reads last.
-- @param findings list
-- @param ok_line string "FILE: ok; policy P loads (...)"
-- @param strict boolean warnings fail
-- @return string outcome, string message (the verdict without "imexguard: OUTCOME: "), string output
function M.report(findings, ok_line, strict)
  local lines = {}
  for _, level in ipairs(M.LEVELS) do
    for _, f in ipairs(findings) do
      if f.level == level then lines[#lines + 1] = M.line_of(f) end
    end
  end
  local n = M.count(findings)
  local outcome, first = M.outcome(findings, strict)
  local message
  if first then
    local rest = {}
    if n.error > (first.level == "error" and 1 or 0) then
      rest[#rest + 1] = plural(n.error - (first.level == "error" and 1 or 0), "more error")
    end
    if n.warning > (first.level == "warning" and 1 or 0) then
      rest[#rest + 1] = plural(n.warning - (first.level == "warning" and 1 or 0),
        first.level == "warning" and "more warning" or "warning")
    end
    local where = first.file and (first.file .. (first.line and (":" .. first.line) or "") .. ": ") or ""
    local more = #rest > 0 and (" (and " .. table.concat(rest, ", ") .. ")") or ""
    message = one_line(where .. first.message .. more
      .. (first.level == "warning" and "; warnings fail with --strict" or ""))
    lines[#lines + 1] = "imexguard: " .. outcome .. ": " .. message
  else
    message = one_line(ok_line .. (n.warning > 0 and ("; " .. plural(n.warning, "warning")) or ""))
    lines[#lines + 1] = message
  end
  return outcome, message, table.concat(lines, "\n") .. "\n"
end

return M
