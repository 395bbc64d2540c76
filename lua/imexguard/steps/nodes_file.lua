-- SPDX-License-Identifier: Apache-2.0
--- Step 4 of the built-in policy, the node list file (docs/design.md, "Decision model of the
-- default policy"; cases C03, C04): 4a reads its current bytes (under the lock, before the
-- decision; `plan`, `status` and the static policy read it too), 4b writes the desired bytes
-- atomically once the change is decided and registered, and records them in the state file.
local base = require("imexguard.steps.base")
local one_line = require("imexguard.text").one_line
-- Loaded when first used (imexguard.lazy): only a write records anything.
local lazy = require("imexguard.lazy")
local state = lazy("imexguard.state")

local M = {}

--- Step 4a: the node list file's current bytes.
-- @param info table from applies (nodes_file)
-- @return string bytes ("" when the file does not exist), or nil, message when unreadable (the file
--   is then rewritten: an unreadable or oversized list is never right)
function M.read_node_list(ctx, info)
  local text, err, code = ctx.host.read(info.nodes_file, base.MAX_FILE)
  if text then return text end
  if code == "ENOENT" then return "" end
  return nil, string.format("%s unreadable (%s)", info.nodes_file, tostring(err))
end

--- Step 4b: write the node list atomically and record it in the state file (state.record_write).
-- @param info table from applies (nodes_file)
-- @param want table the desired list (bytes)
-- @param st table state (updated in place and saved)
-- @return true, or nil, "write-failed"|"deadline-exceeded", message (the primitive's: it says
--   whether the old file is intact)
function M.write_node_list(ctx, info, want, st)
  local host = ctx.host
  local ok, err, code = host.write_atomic(info.nodes_file, want.bytes, tonumber("644", 8))
  if not ok then
    -- host.write_atomic's message says whether the old file is intact (or, when only the final
    -- directory fsync failed, that it was replaced): it is not repeated here.
    return base.fail(base.by_code(code, "write-failed"), "node %s: writing node list %s failed: %s%s",
      base.node_name(ctx), info.nodes_file, tostring(err), base.root_hint(host, code))
  end
  state.record_write(st, want.bytes, host.wallclock() * 1e6, base.job_id(ctx))
  local sok, serr = state.save(host, ctx.settings, st)
  if not sok then host.log("warning", one_line("state file not updated: " .. tostring(serr))) end
  return true
end

return M
