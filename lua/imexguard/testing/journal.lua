-- SPDX-License-Identifier: Apache-2.0
--- The fake host's journal (src/journal.c's primitive): journal_read over a list of entries, matched
-- as sd-journal matches (the values of one field OR'ed, different fields AND'ed), newest kept,
-- oldest first, bounded by since_us and max_entries. Test infrastructure of imexguard.testing.
local base = require("imexguard.testing.base")

local M = {}

-- Does an entry's fields satisfy the matches ("FIELD=value" strings)?
local function matches(fields, list)
  local want = {}
  for _, m in ipairs(list) do
    local k, v = m:match("^([^=]+)=(.*)$")
    want[k] = want[k] or {}
    want[k][v] = true
  end
  for k, values in pairs(want) do
    if not (fields[k] and values[fields[k]]) then return false end
  end
  return true
end

--- Add journal_read to a fake host.
-- @param h table the fake host (gets journal_read)
-- @param w table the host's shared world (gets journal_add; needs rec, wall_us)
-- @param opts table testing.host options: journal = list of entries {message =, priority =, pid =,
--   identifier =, realtime_us = (default: the host's start), fields = {FIELD = value} (what the
--   matches see: _SYSTEMD_UNIT, _SYSTEMD_INVOCATION_ID...)}, or a code ("EACCES": every call fails
--   with it), or function(matches, opts) answering the call; default: an empty journal. A unit job
--   adds the entries of its script's `journal` (imexguard.testing.unit) through w.journal_add.
function M.install(h, w, opts)
  local script = opts.journal
  local entries = {}
  --- Append an entry (realtime_us defaults to now on the fake wall clock).
  function w.journal_add(e)
    local c = base.copy(e)
    c.realtime_us = c.realtime_us or w.wall_us()
    c.fields = c.fields or {}
    entries[#entries + 1] = c
  end
  if type(script) == "table" then
    for _, e in ipairs(script) do
      w.journal_add(e)
      entries[#entries].realtime_us = e.realtime_us or (w.wall_us() - 60e6)
    end
  end
  function h.journal_read(list, o)
    w.rec("journal_read", list, o)
    if type(script) == "function" then return script(list, o) end
    if type(script) == "string" then return nil, "journal: cannot open the journal: " .. script, script end
    o = o or {}
    local since, max = o.since_us or 0, o.max_entries or 20
    local out = {}
    for i = #entries, 1, -1 do
      local e = entries[i]
      if #out >= max or e.realtime_us < since then break end
      if matches(e.fields, list) then
        table.insert(out, 1, { message = e.message or "", realtime_us = e.realtime_us, priority = e.priority,
          pid = e.pid, identifier = e.identifier })
      end
    end
    return out
  end
end

return M
