-- SPDX-License-Identifier: Apache-2.0
--- Move the paragraph macro scdoc emits before the end of an indented block (.P .RE) after it,
-- then drop the paragraph macros that do nothing (right after .TH, .SH, .RS or .P, or right before
-- .SH, .P, .RE or the end), so that `mandoc -T lint -W warning` reports nothing.
-- Usage: scdoc < PAGE.scd | lua5.4 man/tidy.lua > PAGE
local lines = {}
for l in io.lines() do
  lines[#lines + 1] = l
end
for i = 1, #lines - 1 do
  if lines[i] == ".P" and lines[i + 1] == ".RE" then
    lines[i], lines[i + 1] = ".RE", ".P"
  end
end
local NOOP_AFTER = { ["TH"] = true, ["SH"] = true, ["RS"] = true, ["P"] = true }
local NOOP_BEFORE = { ["SH"] = true, ["P"] = true, ["RE"] = true }
local out = {}
for i, l in ipairs(lines) do
  local keep = true
  if l == ".P" then
    local prev = (out[#out] or ""):match("^%.(%u+)")
    local nxt = lines[i + 1] and lines[i + 1]:match("^%.(%u+)")
    keep = not (NOOP_AFTER[prev] or lines[i + 1] == nil or NOOP_BEFORE[nxt])
  end
  if keep then
    out[#out + 1] = l
  end
end
io.write(table.concat(out, "\n"), "\n")
