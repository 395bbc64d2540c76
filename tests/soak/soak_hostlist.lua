-- SPDX-License-Identifier: Apache-2.0
--- Soak check 4 (hostlists): imexguard.hostlist.expand against Slurm's own expander,
-- `scontrol show hostnames`, on generated expressions. One scontrol reads every expression as a
-- command on stdin (each followed by a marker command, so its answer can be cut out), with a
-- minimal slurm.conf given through SLURM_CONF in a temp dir (never /etc/slurm; no daemon is asked).
-- Two classes: well-formed expressions of the grammar both accept (Slurm and imexguard must give
-- the same names), and mutated ones (whenever Slurm accepts one, imexguard must refuse it, a
-- documented strictness, or expand it the same; imexguard must never accept what Slurm refuses).
local util = require("soakutil")
local mut = require("soakmut")

local M = {}

local PREFIX = { "n", "node", "gpu-", "r1n", "rack", "a.b", "x_", "nvl72-c", "node0", "h" }

local function num(width)
  local v = math.random(0, math.random(2) == 1 and 20 or 999)
  return width and string.format("%0" .. width .. "d", v) or tostring(v), v
end

-- A bracket "[r1,r2]" of 1-3 values or ranges, at most ~40 names.
local function bracket()
  local parts = {}
  for i = 1, math.random(3) do
    local width = math.random(3) == 1 and math.random(2, 4) or nil
    local lo, v = num(width)
    if math.random(2) == 1 then
      local hi = v + math.random(0, 12)
      parts[i] = lo .. "-" .. (width and string.format("%0" .. width .. "d", hi) or tostring(hi))
    else
      parts[i] = lo
    end
  end
  return "[" .. table.concat(parts, ",") .. "]"
end

--- A well-formed hostlist: 1-4 groups, each a prefix with 0-2 brackets (nothing after the last).
function M.valid()
  local groups = {}
  for g = 1, math.random(4) do
    local s = mut.pick(PREFIX)
    local nb = math.random(0, 2)
    for b = 1, nb do
      s = s .. bracket()
      if b < nb then s = s .. mut.pick({ "-", "s", "-ib", "" }) end
    end
    if nb == 0 then s = s .. num() end
    groups[g] = s
  end
  return table.concat(groups, ",")
end

local GARBAGE = { "[", "]", ",", "-", "[]", "[1-]", "[-1]", "[3-1]", "[a-b]", "x", "0", "00", "[1,,2]",
  "[[1]]",
  ",,", "999999999999999999999", "[1-99999]", ".", "_", "^", "[0-0]", "[01-1]", "[1-01]" }

-- An upper bound of the names an expression could expand to (each group: the product over its
-- brackets of the sizes of their ranges), so that no input asks scontrol for billions of names.
local function size_bound(e)
  local total = 1
  for body in e:gmatch("%[([^%]]*)") do
    local n = 0
    for a, b in body:gmatch("(%d+)%-(%d+)") do
      n = n + math.max(1, (tonumber(b) or 0) - (tonumber(a) or 0) + 1)
    end
    total = total * math.max(n, 1)
  end
  return total
end
M.size_bound = size_bound

--- A mutated hostlist (printable, no space, quote, '=' or '#', which scontrol's own command line
-- would take apart).
function M.garbage()
  local s = M.valid()
  for _ = 1, math.random(3) do
    local i = math.random(0, #s)
    local r = math.random(3)
    if r == 1 then
      s = s:sub(1, i) .. mut.pick(GARBAGE) .. s:sub(i + 1)
    elseif r == 2 then
      s = s:sub(1, i) .. s:sub(i + 2)
    else
      s = s:sub(1, i)
    end
  end
  if s == "" then s = "," end
  -- Slurm 22.05 loops for minutes on a value of more than 18 digits inside a bracket followed by
  -- another bracket (r1n[6,0386999999999999999999999,4][0013]); imexguard refuses such values.
  if size_bound(s) > 20000 or s:find("%[[^%]]*" .. ("%d"):rep(19)) then return M.garbage() end
  return s
end

-- Expand every expression with scontrol; returns a list of {names} or false (refused) per input.
local function slurm_expand(exprs, dir)
  local input = {}
  for k, e in ipairs(exprs) do
    input[#input + 1] = "show hostnames " .. e
    input[#input + 1] = "show hostnames soakmark" .. k
  end
  util.write(dir .. "/in", table.concat(input, "\n") .. "\nquit\n")
  util.write(dir .. "/slurm.conf", "ClusterName=soak\nSlurmctldHost=localhost\n")
  -- scontrol echoes each input line as "scontrol: LINE" through readline; with TERM=dumb or unset
  -- (cron, CI) readline scrolls a long line horizontally ("scontrol: <...]"): fix TERM, and take
  -- every "scontrol: " line that is not an error for an echo
  local out = util.sh(string.format("TERM=xterm SLURM_CONF=%s timeout 300 stdbuf -oL -eL scontrol <%s 2>&1",
    util.q(dir .. "/slurm.conf"), util.q(dir .. "/in")))
  local res, block, k = {}, {}, 1
  for line in out:gmatch("[^\n]*") do
    if line == "soakmark" .. k then
      local names, refused = {}, false
      for _, l in ipairs(block) do
        if l:match("^scontrol: ") or l:match("^Invalid hostlist") then
          refused = refused or l:match("^scontrol: error") ~= nil or l:match("^Invalid hostlist") ~= nil
        elseif l ~= "" then
          names[#names + 1] = l
        end
      end
      res[k] = not refused and names
      block, k = {}, k + 1
    else
      block[#block + 1] = line
    end
  end
  return res, k - 1
end

local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

--- Run the differential check.
-- @param tap function(ok, text)
-- @param n integer expressions (half well-formed, half mutated)
function M.run(tap, n)
  local hostlist = require("imexguard.hostlist")
  local exprs, class = {}, {}
  for i = 1, n do
    if i % 2 == 1 then
      exprs[i], class[i] = M.valid(), "valid"
    else
      exprs[i], class[i] = M.garbage(), "garbage"
    end
  end
  local dir = util.tmpdir("hostlist")
  local slurm, answered = slurm_expand(exprs, dir)
  util.rmdir(dir)
  local c = { same = 0, stricter = 0, both_refuse = 0, bad = 0 }
  local fails = {}
  for i, e in ipairs(exprs) do
    local ok, mine, err = pcall(hostlist.expand, e)
    local s = slurm[i]
    local why
    if not ok then
      why = "raised: " .. tostring(mine)
    elseif mine == nil and type(err) ~= "string" then
      why = "refused without a message"
    elseif s == nil then
      why = "scontrol gave no answer"
    elseif s and mine then
      if same(s, mine) then
        c.same = c.same + 1
      else
        why = string.format("expands differently: slurm {%s}, imexguard {%s}", table.concat(s, " "),
          table.concat(mine, " "))
      end
    elseif s and not mine then
      if class[i] == "valid" then why = "refused a well-formed hostlist Slurm accepts: " .. tostring(err) end
      c.stricter = c.stricter + 1
    elseif mine then
      why = "accepted what Slurm refuses: {" .. table.concat(mine, " ") .. "}"
    else
      c.both_refuse = c.both_refuse + 1
    end
    if why then
      c.bad = c.bad + 1
      if #fails < 3 then
        fails[#fails + 1] = string.format("%s hostlist %s: %s", class[i], util.show(e, 200), why)
      end
    end
  end
  tap(c.bad == 0 and answered == n, string.format("fuzz hostlists vs scontrol show hostnames: %d expressions "
    .. "(%d answered by scontrol), %d expand the same, %d refused by imexguard only (stricter), "
    .. "%d refused by both, %d failed",
    n, answered, c.same, c.stricter, c.both_refuse, c.bad))
  for _, f in ipairs(fails) do util.note("failing input: " .. f) end
end

return M
