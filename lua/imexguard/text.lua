-- SPDX-License-Identifier: Apache-2.0
--- Text helpers shared by the steps, the policies and the kit: a message that goes into one log
-- line (the final line, a journal entry, slurmd's log) must not span lines or grow without bound,
-- and neither may a value from the outside quoted in it. Also the columns of a table for a person
-- (status, rack, the registrations).
local M = {}

--- Longest one-line message kept (bytes, before the "..." that marks a cut); the final log line
-- written by the driver is capped at the same length.
M.MAX_LINE = 1000

--- A string without its trailing white space (the bytes of `%s` in the C locale), in one pass
-- from the end: the pattern `%s+$` rescans a run of blanks inside the string from each of its
-- positions, which is quadratic in the run's length.
-- @tparam string s
-- @treturn string
function M.rtrim(s)
  local e = #s
  local c = s:byte(e)
  while c == 32 or (c and c >= 9 and c <= 13) do
    e = e - 1
    c = s:byte(e)
  end
  return e == #s and s or s:sub(1, e)
end

--- A string without its leading and trailing white space (as rtrim; `^%s*(.-)%s*$` is quadratic
-- in the length of a run of blanks inside the string).
-- @tparam string s
-- @treturn string
function M.trim(s)
  local b = s:match("^%s*()")
  local t = M.rtrim(s)
  return b == 1 and t or t:sub(b)
end

--- A message made one line: each run of CR/LF becomes one space, trailing white space is dropped,
-- and a message longer than `max` bytes is cut and ends in "...".
-- @param s any message (tostring is applied)
-- @param max integer|nil longest result in bytes before the "..." (default M.MAX_LINE)
-- @return string
function M.one_line(s, max)
  local t = M.rtrim((tostring(s):gsub("[\r\n]+", " ")))
  max = max or M.MAX_LINE
  if #t > max then t = t:sub(1, max) .. "..." end
  return t
end

--- A string quoted for a one-line message: Lua's `%q` (control characters as `\ddd`, quotes and
-- backslashes escaped) except that a newline is written `\n` instead of a backslash and a line
-- break, then made one line by `one_line` (so cut at `max` bytes).
-- @param s string the value to quote
-- @param max integer|nil longest result in bytes before the "..." (default M.MAX_LINE)
-- @return string
function M.quote(s, max)
  return M.one_line((string.format("%q", s):gsub("\\\n", "\\n")), max)
end

--- Longest excerpt of a value kept by `excerpt` (bytes, before its "...").
M.EXCERPT_MAX = 60

--- An excerpt of a value from the outside (an environment variable, a line of a command's
-- output, a process's command line) for a one-line message: cut at EXCERPT_MAX bytes with
-- "...", then every control character written `\ddd` (its decimal byte). Not quoted: the caller
-- adds quotes where its message wants them.
-- @param v any value (tostring is applied)
-- @return string
function M.excerpt(v)
  local t = tostring(v)
  if #t > M.EXCERPT_MAX then t = t:sub(1, M.EXCERPT_MAX) .. "..." end
  return (t:gsub("%c", function(c) return string.format("\\%03d", c:byte()) end))
end

--- A long value for a one-line message with both its ends kept: made one line (runs of white space
-- become one space, both ends trimmed), and when longer than `max` bytes cut in the middle, where
-- " ... " marks the cut. For a command's error output, whose cause is often at its end (the ctl's
-- "... ipv6:%5B::%5D:50005: Address family not supported by protocol", C44) and whose start says
-- what failed. Control characters are written as `excerpt` writes them.
-- @param v any value (tostring is applied)
-- @param max integer|nil longest result in bytes, at least 20 (default 240)
-- @return string
function M.ends(v, max)
  max = math.max(20, max or 240)
  local t = M.trim((tostring(v):gsub("%s+", " ")))
  if #t > max then
    local head = (max - 5) // 3
    t = t:sub(1, head) .. " ... " .. t:sub(-(max - 5 - head))
  end
  return (t:gsub("%c", function(c) return string.format("\\%03d", c:byte()) end))
end

--- Every match of a pattern in a string, in order: the lines of bytes ("[^\n]+"), its words ("%S+").
-- @param s string, or nil (none)
-- @param pattern string a Lua pattern without captures
-- @return list of strings
function M.matches(s, pattern)
  local out = {}
  for m in tostring(s or ""):gmatch(pattern) do out[#out + 1] = m end
  return out
end

--- Rows of cells as column-aligned lines (a table for a person): every cell but a row's last is
-- padded with spaces to its column's widest cell (bytes), and a row's cells are joined by two spaces.
-- @param rows list of lists of strings (the head row first, where there is one)
-- @param out list|nil lines to append to (default: a new list)
-- @return list of strings `out`, with one line per row appended
function M.columns(rows, out)
  out = out or {}
  local width = {}
  for _, row in ipairs(rows) do
    for i, c in ipairs(row) do width[i] = math.max(width[i] or 0, #c) end
  end
  for _, row in ipairs(rows) do
    local cells = {}
    for i, c in ipairs(row) do cells[i] = i < #row and (c .. string.rep(" ", width[i] - #c)) or c end
    out[#out + 1] = table.concat(cells, "  ")
  end
  return out
end

return M
