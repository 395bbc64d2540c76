-- SPDX-License-Identifier: Apache-2.0
--- config-test's check of the settings themselves (imexguard.configtest; issue 32, items 2-3): what
-- validation alone lets through but a run would regret. A key assigned twice (the last counts), a
-- health_timeout the deadline cuts short, a state_dir whose parent is missing (the prolog creates one
-- directory, never a tree: write-failed on every node), a metrics_dir that does not exist.
local S = require("imexguard.settings")

local M = {}

-- The settings file and the line whose value counts for `key` (the last that assigns it), or the
-- file alone, or nil when the value is not the file's.
local function place(ctx, key)
  local file = ctx.config_file
  if not file or not file.text then return nil end
  local source = file.sources and file.sources[key]
  if type(source) ~= "string" or source:sub(1, #file.path) ~= file.path then return nil end
  local lines = S.lines_of(file.text, key)
  return file.path, lines[#lines]
end

-- Where a value came from, for a message: "(FILE:LINE)", "(default)", "(--set)".
local function source_of(ctx, key)
  local src = ctx.config_file and ctx.config_file.sources and ctx.config_file.sources[key]
  return "(" .. (src and (src:match("^(.-) %(also") or src) or "default") .. ")"
end
M.source_of = source_of

--- The keys the settings file assigns more than once (S.repeats): a warning on the line that
-- counts, naming the others.
function M.repeats(ctx)
  local file, out = ctx.config_file, {}
  if not file or not file.text then return out end
  for _, r in ipairs(S.repeats(file.text)) do
    local last = r.lines[#r.lines]
    out[#out + 1] = { level = "warning", file = file.path, line = last,
      message = string.format("setting '%s' is assigned %d times (lines %s): the last, line %d, counts; "
        .. "remove the others", r.key, #r.lines, table.concat(r.lines, ", "), last) }
  end
  return out
end

--- Timeouts that cannot both hold: health_timeout above the deadline (the health wait, which
-- follows a start, is cut by the deadline: deadline-exceeded instead of the wait's own outcome).
function M.timeouts(ctx)
  local s, out = ctx.settings, {}
  if s.health_timeout > s.deadline then
    local file, line = place(ctx, "health_timeout")
    out[#out + 1] = { level = "warning", file = file, line = line,
      message = string.format("health_timeout = %g s %s is above deadline = %g s %s: the deadline ends the "
        .. "health wait first (deadline-exceeded, not the wait's own outcome); lower health_timeout below "
        .. "the deadline", s.health_timeout, source_of(ctx, "health_timeout"), s.deadline,
        source_of(ctx, "deadline")) }
  end
  return out
end

--- Directories a run writes into: state_dir is created without its parents (a misspelt path fails
-- instead of making a tree), so a missing parent fails every prolog (write-failed); metrics_dir is
-- never created (node_exporter's directory).
function M.directories(ctx)
  local s, host, out = ctx.settings, ctx.host, {}
  local parent = s.state_dir:match("^(.*)/[^/]+/*$")
  parent = (parent == nil or parent == "") and "/" or parent
  local st = host.stat(s.state_dir)
  if not st then
    local pst = host.stat(parent)
    if not pst or pst.type ~= "dir" then
      local file, line = place(ctx, "state_dir")
      out[#out + 1] = { level = "error", outcome = "write-failed", file = file, line = line,
        message = string.format("state_dir = %q: its parent %s is not a directory, and a prolog creates only "
          .. "the last component: every prolog would end write-failed", s.state_dir, parent) }
    end
  elseif st.type ~= "dir" then
    local file, line = place(ctx, "state_dir")
    out[#out + 1] = { level = "error", outcome = "write-failed", file = file, line = line,
      message = string.format("state_dir = %q is not a directory (%s)", s.state_dir, tostring(st.type)) }
  end
  if s.metrics_dir then
    local mst = host.stat(s.metrics_dir)
    if not mst or mst.type ~= "dir" then
      local file, line = place(ctx, "metrics_dir")
      out[#out + 1] = { level = "warning", file = file, line = line,
        message = string.format("metrics_dir = %q is not a directory: no run can write its metrics (it is "
          .. "never created: node_exporter's textfile directory)", s.metrics_dir) }
    end
  end
  return out
end

--- config-test's check "settings": M.repeats, M.timeouts, M.directories.
-- @param ctx table the run's context (settings, host, config_file = {path, text, sources})
-- @return list of findings (imexguard.configtest)
function M.findings(ctx)
  local out = {}
  for _, fn in ipairs({ M.repeats, M.timeouts, M.directories }) do
    for _, f in ipairs(fn(ctx)) do out[#out + 1] = f end
  end
  return out
end

return M
