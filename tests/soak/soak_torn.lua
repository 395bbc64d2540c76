-- SPDX-License-Identifier: Apache-2.0
--- Soak check 2: torn reads. Many atomic rewrites (host.write_atomic) of an 18-line node list (one
-- NVL72 rack) alternate between two lists while another process reads the file as fast as it can:
-- every read must be one list or the other, byte for byte (never empty, short or mixed).
local util = require("soakutil")

local M = {}

local function list(tag, base)
  local lines = {}
  for i = 1, 18 do lines[i] = string.format("10.%d.%d.%d", base, i, i) end
  lines[#lines + 1] = "# " .. tag
  return table.concat(lines, "\n") .. "\n"
end

-- The reader: reads arg[1] until arg[2] exists; prints "reads=N torn=M" and the first torn read.
local READER = [[
local path, stop, a, b = arg[1], arg[2], arg[3], arg[4]
local reads, torn, first = 0, 0, nil
while true do
  local f = io.open(path, "rb")
  if f then
    local s = f:read("a"); f:close()
    reads = reads + 1
    if s ~= a and s ~= b then torn = torn + 1; first = first or s end
  end
  if reads % 64 == 0 then local st = io.open(stop); if st then st:close(); break end end
end
io.write(string.format("reads=%d torn=%d\n", reads, torn))
if first then io.write("first=", (first:gsub("\n", "\\n")), "\n") end
]]

--- Run the check.
-- @param tap function(ok, text)
-- @param long boolean the long form (10,000 rewrites; short: 2,000)
function M.run(tap, long)
  local host = util.host()
  local n = long and 10000 or 1000
  local dir = util.tmpdir("torn")
  local path, stop, out = dir .. "/nodes_config.cfg", dir .. "/stop", dir .. "/reader.out"
  local A, B = list("A", 1), list("B", 2)
  assert(host.write_atomic(path, A))
  local pid = util.spawn_lua(READER, { path, stop, A, B }, out)
  local failed
  for i = 1, n do
    local ok, msg = host.write_atomic(path, i % 2 == 1 and B or A)
    if not ok then failed = failed or msg end
  end
  util.write(stop, "")
  local done = util.wait_for(function() return not util.alive(pid) end, 30)
  if not done then util.kill(pid) end
  local res = util.read(out) or ""
  local reads, torn = res:match("reads=(%d+) torn=(%d+)")
  reads, torn = tonumber(reads), tonumber(torn)
  local left = #util.ls(dir) - 3 -- nodes_config.cfg, stop, reader.out
  local ok = done and failed == nil and reads ~= nil and reads > 0 and torn == 0 and left == 0
  tap(ok, string.format("torn reads: %d rewrites of an 18-line list, %s concurrent reads, %s torn, "
    .. "%d temp files left%s",
    n, tostring(reads), tostring(torn), left, failed and (", write failed: " .. failed) or ""))
  if torn and torn > 0 then util.note("first torn read: " .. (res:match("first=([^\n]*)") or "?")) end
  util.rmdir(dir)
end

return M
