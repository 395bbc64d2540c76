-- SPDX-License-Identifier: Apache-2.0
-- Specs for imexguard.hostlist (field case C12 of docs/design.md), with a differential test against
-- Slurm's own expander (`scontrol show hostnames`, which needs no controller: only a readable
-- slurm.conf).
local hostlist = require("imexguard.hostlist")

local function sh_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

describe("hostlist.expand", function()
  local cases = {
    { "node-[09-10]", { "node-09", "node-10" } },
    { "host[001,003-004,006]", { "host001", "host003", "host004", "host006" } },
    { "a[1-2],b[3-4]", { "a1", "a2", "b3", "b4" } },
    { "rack[1-2]-node[01-02]", { "rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02" } },
    -- Slurm's recursion: last bracket fastest, then the others from the second-to-last backwards.
    { "n[1-2]-[3-4]-[5-6]",
      { "n1-3-5", "n1-3-6", "n2-3-5", "n2-3-6", "n1-4-5", "n1-4-6", "n2-4-5", "n2-4-6" } },
    { "node-[3,1,2]", { "node-3", "node-1", "node-2" } },
    { "n[9-11]", { "n9", "n10", "n11" } },
    { "n[098-101]", { "n098", "n099", "n100", "n101" } },
    { "n[1-003]", { "n1", "n2", "n3" } },
    { "n[001-3]", { "n001", "n002", "n003" } },
    { "n[1-2],n[2-3]", { "n1", "n2", "n2", "n3" } },
    { "n1,n1", { "n1", "n1" } },
    { "n[1-3,2]", { "n1", "n2", "n3", "n2" } },
    { "[1-2]", { "1", "2" } },
    { "n[1]-[2]", { "n1-2" } },
    { "n[0-0]", { "n0" } },
    { "a.b[1-2],c", { "a.b1", "a.b2", "c" } },
    { "n1", { "n1" } },
  }
  for _, c in ipairs(cases) do
    it("expands " .. c[1], function()
      assert.same(c[2], hostlist.expand(c[1]))
    end)
  end

  local bad = {
    "", "node[1-", "node[3-1]", "node[]", "node[a-b]", "node]", "node[1-2", "n[[1]]", "a,,b", "n[1-2],",
    ",a", "n[1,,2]", "n[-1]", "n[1-]", "n[1--2]", "n[1-3]x", "n[1-2].dom", "a b", " a", "n[ 1-2]",
    "n[+1]", "n[0-65536]", "n[99999999999999999999]", "n[1:2]", "a]b", "a[1]b]",
    -- a name ending in more than 18 digits: Slurm overflows the number (n18446744073709551615)
    "n99999999999999999999", "n1234567890123456789", "a,99999999999999999999", "x-0000000000000000001",
  }
  for _, expr in ipairs(bad) do
    it("rejects '" .. expr .. "' with an error naming it", function()
      local list, err = hostlist.expand(expr)
      assert.is_nil(list)
      assert.is_string(err)
      assert.truthy(err:find("'" .. expr .. "'", 1, true), err)
      assert.is_nil(err:find("\n"))
    end)
  end

  it("allows one range of exactly MAX_RANGE names (Slurm's limit)", function()
    local list = hostlist.expand("n[0-65535]")
    assert.equal(65536, #list)
    assert.equal("n65535", list[65536])
  end)

  it("caps the total number of names", function()
    local list, err = hostlist.expand("n[0-300],m[0-65535]")
    assert.is_nil(list)
    assert.truthy(err:find("more than 65536 names", 1, true))
    assert.is_nil(hostlist.expand("a[0-999]-b[0-999]"))
  end)

  it("raises on a non-string argument", function()
    assert.has_error(function() hostlist.expand(nil) end)
    assert.has_error(function() hostlist.expand({}) end)
  end)
end)

describe("hostlist.compress", function()
  it("writes compact ranges keeping the order", function()
    assert.equal("node-[09-10]", hostlist.compress({ "node-09", "node-10" }))
    assert.equal("host[001,003-004,006]", hostlist.compress({ "host001", "host003", "host004", "host006" }))
    assert.equal("n[3,1-2]", hostlist.compress({ "n3", "n1", "n2" }))
    assert.equal("n[9-10],m1,n11", hostlist.compress({ "n9", "n10", "m1", "n11" }))
    assert.equal("a,b", hostlist.compress({ "a", "b" }))
    assert.equal("", hostlist.compress({}))
  end)

  it("keeps widths that a range cannot express as separate items", function()
    assert.equal("n[9,010]", hostlist.compress({ "n9", "n010" }))
    assert.same({ "n9", "n010" }, hostlist.expand(hostlist.compress({ "n9", "n010" })))
  end)

  it("round-trips through expand", function()
    for _, expr in ipairs({ "rack[1-2]-node[01-02]", "n[1-3,2],x,n[098-101]", "a1,a1,a01,a001,b" }) do
      local list = hostlist.expand(expr)
      assert.same(list, hostlist.expand(hostlist.compress(list)))
    end
  end)

  it("refuses names a hostlist cannot hold", function()
    local s, err = hostlist.compress({ "ok1", "bad,name" })
    assert.is_nil(s)
    assert.truthy(err:find("bad,name", 1, true))
    s, err = hostlist.compress({ "ok1", "n1234567890123456789" })
    assert.is_nil(s)
    assert.truthy(err:find("n1234567890123456789", 1, true))
  end)

  it("keeps a name ending in 18 digits, and digits before a bracket or inside the name", function()
    assert.same({ "n123456789012345678" }, hostlist.expand("n123456789012345678"))
    assert.same({ "n12345678901234567890x" }, hostlist.expand("n12345678901234567890x"))
    assert.same({ "n12345678901234567891", "n12345678901234567892" },
      hostlist.expand("n1234567890123456789[1-2]"))
    assert.equal("n123456789012345678", hostlist.compress({ "n123456789012345678" }))
  end)
end)

-- Deterministic generator of hostlist expressions: paddings, ranges crossing powers of ten,
-- lists, several brackets per group, several groups, literal names, duplicates.
local function generator(seed)
  local state = seed
  local function rnd(n) -- 1..n, a small LCG so the sequence is the same on every run
    state = (state * 1103515245 + 12345) % 2147483648
    return state % n + 1
  end
  local prefixes = { "n", "node-", "gpu", "rack1-n", "a.b-", "x_y", "" }
  local function number()
    local width = rnd(4)
    local base = ({ 0, 7, 95, 998, 9 })[rnd(5)]
    local v = base + rnd(6) - 1
    local s = tostring(v)
    if rnd(2) == 1 and #s < width then
      s = string.rep("0", width - #s) .. s
    end
    return s, v
  end
  local function range_item()
    local lo_s, lo = number()
    if rnd(3) == 1 then
      return lo_s
    end
    local hi = lo + rnd(14) - 1
    local hi_s = tostring(hi)
    if rnd(4) == 1 then
      hi_s = "0" .. hi_s
    end
    return lo_s .. "-" .. hi_s
  end
  local function bracket()
    local items = {}
    for i = 1, rnd(3) do
      items[i] = range_item()
    end
    return "[" .. table.concat(items, ",") .. "]"
  end
  local function group()
    local kind = rnd(6)
    if kind == 1 then
      local s = number()
      return prefixes[rnd(#prefixes - 1)] .. s
    end
    local nb = kind == 2 and rnd(3) or 1
    local parts = { prefixes[rnd(#prefixes)] }
    for b = 1, nb do
      parts[#parts + 1] = bracket()
      if b < nb then
        parts[#parts + 1] = ({ "-", "", "r", "0", "-s" })[rnd(5)]
      end
    end
    return table.concat(parts)
  end
  local function invalid()
    return ({ "n[5-3]", "n[]", "n[a]", "n[1-2]x", "n[3-1,2]", "n[1,b-2]" })[rnd(6)]
  end
  return function()
    local groups = {}
    for i = 1, rnd(4) do
      groups[i] = group()
    end
    if rnd(15) == 1 then
      groups[#groups + 1] = invalid()
    end
    return table.concat(groups, ",")
  end
end

describe("hostlist.ranged", function()
  -- Expected values are what Slurm 22.05's `scontrol show hostlistsorted` prints for the same
  -- names (recorded; that command sorts but keeps duplicates, and orders mixed zero padding its
  -- own way: those two differences are the cases after these).
  local slurm = {
    { "gb10,gb3,gb9,gb1,gb2", "gb[1-3,9-10]" },
    { "r2n1,r10n1,r1n2,r1n1", "r1n[1-2],r2n1,r10n1" },
    { "n9,n10", "n[9-10]" },
    { "tux1,tux2,tux3,tux5", "tux[1-3,5]" },
    { "rack1-node01,rack1-node02,rack2-node01", "rack1-node[01-02],rack2-node01" },
    { "n1,n01", "n[1,01]" },
    { "10.0.0.10,10.0.0.3,10.0.0.4", "10.0.0.[3-4,10]" },
  }
  local function split(s)
    local t = {}
    for x in s:gmatch("[^,]+") do t[#t + 1] = x end
    return t
  end

  it("writes what scontrol show hostlistsorted writes", function()
    for _, c in ipairs(slurm) do
      assert.equal(c[2], hostlist.ranged(split(c[1])), c[1])
    end
  end)

  it("compresses a rack of 18 nodes in any order to one bracket", function()
    local names = assert(hostlist.expand("gb[01-18]"))
    local shuffled = {}
    for i = #names, 1, -1 do shuffled[#shuffled + 1] = names[i] end
    table.insert(shuffled, 1, table.remove(shuffled, 9))
    assert.equal("gb[01-18]", hostlist.ranged(shuffled))
    assert.equal("gb[03-18]", hostlist.ranged(assert(hostlist.expand("gb[18,03-17]"))))
  end)

  it("drops duplicates and puts numbers in numeric order, not text order", function()
    assert.equal("10.0.0.[3-4,10]", hostlist.ranged({ "10.0.0.10", "10.0.0.3", "10.0.0.4", "10.0.0.3" }))
    assert.same({ "n3", "n10" }, hostlist.sort({ "n10", "n3", "n10" }))
    assert.same({ "a", "a1", "b" }, hostlist.sort({ "b", "a1", "a" }))
  end)

  it("writes several prefixes as several brackets, each expanding back", function()
    local names = { "gpu2", "cpu01", "gpu1", "cpu02", "login", "gpu3" }
    local s = hostlist.ranged(names)
    assert.equal("cpu[01-02],gpu[1-3],login", s)
    assert.same(hostlist.sort(names), hostlist.expand(s))
  end)

  it("names what cannot be written; text_sorted falls back to the sorted names", function()
    assert.is_nil((hostlist.ranged({ "a,b" })))
    assert.equal("(x),n[1-2]", hostlist.text_sorted({ "n2", "n1", "(x)" }))
    assert.equal("a,b,n3", hostlist.text_sorted({ "n3", "a,b" }))
  end)

  it("text_in_order keeps the list's order (a domain's nodes in the job's order), as compress does",
    function()
    assert.equal("n[3,1-2]", hostlist.text_in_order({ "n3", "n1", "n2" }))
    assert.equal("n[1-2]", hostlist.text_sorted({ "n2", "n1" }))
    assert.equal("n[2,1]", hostlist.text_in_order({ "n2", "n1" }))
    assert.equal("gb2,cpu1,gb[1,3]", hostlist.text_in_order({ "gb2", "cpu1", "gb1", "gb3" }))
    assert.equal("n3,a,b", hostlist.text_in_order({ "n3", "a,b" }))
    assert.equal("", hostlist.text_in_order({}))
  end)
end)

describe("hostlist.expand against scontrol show hostnames", function()
  local dir, conf, exprs_file

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -m 700 " .. sh_quote(dir)))
    conf = dir .. "/slurm.conf"
    local f = assert(io.open(conf, "w"))
    -- A minimal configuration: scontrol only parses it; no controller is contacted.
    f:write("ClusterName=hostlistspec\nSlurmctldHost=localhost\nNodeName=x\nPartitionName=p Nodes=x\n")
    f:close()
    exprs_file = dir .. "/exprs"
  end)

  teardown(function()
    if dir then
      os.remove(conf)
      os.remove(exprs_file)
      os.remove(dir)
    end
  end)

  -- Run scontrol once over every expression; returns {expr -> list | false (invalid)}.
  local function slurm_expand(exprs)
    local f = assert(io.open(exprs_file, "w"))
    f:write(table.concat(exprs, "\n"), "\n")
    f:close()
    local cmd = "SLURM_CONF=" .. sh_quote(conf) .. " sh -c " .. sh_quote(
      'command -v scontrol >/dev/null || { echo "NO-SCONTROL"; exit 0; }; '
        .. 'while IFS= read -r e; do scontrol show hostnames "$e" 2>&1; echo "@@END $?"; done'
    ) .. " < " .. sh_quote(exprs_file)
    local p = assert(io.popen(cmd, "r"))
    local out = p:read("a")
    p:close()
    assert.is_nil(out:find("NO-SCONTROL", 1, true),
      "scontrol is not installed: the differential test cannot run")
    local results, cur, i = {}, {}, 1
    for line in out:gmatch("([^\n]*)\n") do
      local rc = line:match("^@@END (%d+)$")
      if rc then
        assert.equal("0", rc,
          "scontrol failed on '" .. tostring(exprs[i]) .. "': " .. table.concat(cur, " | "))
        local invalid = false
        for _, l in ipairs(cur) do
          if l:find("Invalid hostlist", 1, true) then
            invalid = true
          end
        end
        results[i] = not invalid and cur
        cur, i = {}, i + 1
      elseif not line:find("^scontrol: error:") then
        cur[#cur + 1] = line
      end
    end
    assert.equal(#exprs, i - 1, "scontrol answered " .. (i - 1) .. " of " .. #exprs .. " expressions")
    return results
  end

  it("agrees on the C12 cases and on 400 generated expressions", function()
    local exprs = {
      "node-[09-10]", "host[001,003-004,006]", "rack[1-2]-node[01-02]", "a[1-2],b[3-4]", "n1,n1",
      "n[1-2]-[3-4]-[5-6]", "n[1-2]-[3-4]-[5-6]-[7-8]", "n[3,1,2]", "node[3-1]", "node[]", "node[a-b]",
      "n[1-3]x", "n[098-101]", "n[1-003]", "n[001-3]", "n01,n001,n1,n0", "[1-2]", "007",
    }
    local gen = generator(20250811)
    local valid, invalid = 0, 0
    for _ = 1, 400 do
      exprs[#exprs + 1] = gen()
    end
    local want = slurm_expand(exprs)
    for i, expr in ipairs(exprs) do
      local got, err = hostlist.expand(expr)
      if want[i] then
        valid = valid + 1
        assert.same(want[i], got, "expand('" .. expr .. "'): " .. tostring(err))
      else
        invalid = invalid + 1
        assert.is_nil(got, "Slurm rejects '" .. expr .. "' but expand accepted it")
      end
    end
    -- The generator must exercise both sides, or the comparison proves little.
    assert.is_true(valid > 300, "valid expressions compared: " .. valid)
    assert.is_true(invalid > 10, "invalid expressions compared: " .. invalid)
  end)
end)

describe("hostlist on long names (bench/lua_scale.lua)", function()
  it("judges a name ending in a long run of digits in linear time", function()
    local long = "n" .. string.rep("1", 100000) .. "x" .. string.rep("2", 100000) .. "y"
    local t0 = os.clock()
    assert.same({ long }, hostlist.expand(long))
    assert.equal(long, hostlist.compress({ long }))
    local ok, err = hostlist.expand(long .. "," .. string.rep("3", 100000))
    assert.is_nil(ok)
    assert.truthy(err:find("ends in more than 18 digits", 1, true))
    assert.is_nil((hostlist.compress({ string.rep("3", 100000) })))
    assert.is_true(os.clock() - t0 < 0.5, "took " .. os.clock() - t0 .. " s")
  end)

  it("compresses names with and without a number", function()
    assert.equal("gpu[01-03],login,n7", hostlist.compress({ "gpu01", "gpu02", "gpu03", "login", "n7" }))
    assert.equal("42", hostlist.compress({ "42" }))
  end)
end)
