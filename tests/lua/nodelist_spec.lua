-- SPDX-License-Identifier: Apache-2.0
-- Specs for imexguard.nodelist (field cases C04, C05 of docs/design.md, "Field cases").
local nodelist = require("imexguard.nodelist")
local text = require("imexguard.text")

describe("nodelist.format (C04)", function()
  it("writes one entry per line, LF, final newline, in the given order", function()
    assert.equal("10.0.0.3\n10.0.0.1\n10.0.0.2\n", nodelist.format({ "10.0.0.3", "10.0.0.1", "10.0.0.2" }))
    assert.equal("10.0.0.1\n", nodelist.format({ "10.0.0.1" }))
  end)

  it("gives the same bytes for the same list whatever the order of construction", function()
    local a = { "10.0.0.10", "10.0.0.9", "10.0.0.1" }
    local b = {}
    for i = #a, 1, -1 do
      table.insert(b, 1, a[i])
    end
    assert.equal(nodelist.format(a), nodelist.format(b))
    -- never sorted: a lexical sort would put .1 before .10, a numeric one .9 first
    assert.equal("10.0.0.10\n10.0.0.9\n10.0.0.1\n", nodelist.format(a))
  end)

  it("refuses an empty list and blank or spaced entries", function()
    assert.is_nil(nodelist.format({}))
    local s, err = nodelist.format({ "10.0.0.1", "" })
    assert.is_nil(s)
    assert.truthy(err:find("entry 2", 1, true))
    s, err = nodelist.format({ "10.0.0.1 10.0.0.2" })
    assert.is_nil(s)
    assert.truthy(err:find("'10.0.0.1 10.0.0.2'", 1, true))
    assert.is_nil(nodelist.format({ "10.0.0.1\n" }))
  end)

  it("raises on misuse", function()
    assert.has_error(function() nodelist.format("10.0.0.1") end)
    assert.has_error(function() nodelist.format({ 1 }) end)
  end)
end)

describe("nodelist.parse", function()
  it("reads entries, skipping blanks and comments, trimming spaces and CR", function()
    assert.same({ "10.0.0.1", "10.0.0.2", "host-3" },
      nodelist.parse("# IMEX nodes\n10.0.0.1\n\n  10.0.0.2  \r\n   # indented comment\nhost-3"))
  end)

  it("round-trips format", function()
    local list = { "192.168.103.159", "192.168.107.187" }
    assert.same(list, nodelist.parse(nodelist.format(list)))
  end)

  it("gives an empty list for an empty file", function()
    assert.same({}, nodelist.parse(""))
    assert.same({}, nodelist.parse("\n# only a comment\n"))
  end)

  it("rejects an entry with inner spaces, naming the line", function()
    local list, err = nodelist.parse("10.0.0.1\n10.0.0.2 10.0.0.3\n")
    assert.is_nil(list)
    assert.truthy(err:find("line 2", 1, true))
    assert.truthy(err:find("'10.0.0.2 10.0.0.3'", 1, true))
  end)
end)

describe("nodelist.is_ipv4", function()
  for _, s in ipairs({ "0.0.0.0", "10.0.0.1", "255.255.255.255", "192.168.103.159", "1.2.3.4" }) do
    it("accepts " .. s, function()
      assert.is_true(nodelist.is_ipv4(s))
    end)
  end
  for _, s in ipairs({ "010.0.0.1", "10.0.0.01", "256.0.0.1", "10.0.0", "10.0.0.1.2", "10.0.0.1 ",
    " 10.0.0.1",
    "::1", "fe80::1", "node1", "", "10.0.0.-1", "1e1.0.0.1", "0x1.0.0.1", "10..0.1", "1000.0.0.1" }) do
    it("rejects '" .. s .. "'", function()
      assert.is_false(nodelist.is_ipv4(s))
    end)
  end
  it("rejects non-strings", function()
    assert.is_false(nodelist.is_ipv4(nil))
    assert.is_false(nodelist.is_ipv4(10))
  end)
end)

describe("nodelist.check (C05)", function()
  local good = { "10.0.0.1", "10.0.0.2", "10.0.0.3" }
  local names = { "n1", "n2", "n3" }

  it("accepts a good list with this node in it", function()
    assert.is_true(nodelist.check(good, { self = "10.0.0.2", names = names }))
    assert.is_true(nodelist.check(good))
    assert.is_true(nodelist.check(good, { self = { "192.168.0.1", "10.0.0.3" } }))
  end)

  local function fails(addrs, opts, ...)
    local ok, err = nodelist.check(addrs, opts)
    assert.is_nil(ok)
    assert.is_string(err)
    assert.is_nil(err:find("\n"))
    for _, want in ipairs({ ... }) do
      assert.truthy(err:find(want, 1, true), "'" .. want .. "' not in: " .. err)
    end
  end

  it("names a host name and its node", function()
    fails({ "10.0.0.1", "n2", "10.0.0.3" }, { names = names }, "entry 2 'n2'", "(node n2)", "host name")
  end)

  it("names an IPv6 address", function()
    fails({ "fd00::2", "10.0.0.1" }, { names = { "n2", "n1" } }, "entry 1 'fd00::2'", "(node n2)", "IPv6")
  end)

  it("refuses 127.0.1.1 and all of 127/8 unless allow_loopback", function()
    fails({ "10.0.0.1", "127.0.1.1" }, { names = names }, "entry 2 '127.0.1.1'", "(node n2)", "loopback")
    fails({ "127.0.0.1" }, nil, "loopback")
    fails({ "127.255.255.254" }, nil, "loopback")
    assert.is_true(nodelist.check({ "127.0.1.1", "127.0.1.2" },
      { allow_loopback = true, self = "127.0.1.2" }))
  end)

  it("never accepts 0.0.0.0, 255.255.255.255 or multicast, even with allow_loopback", function()
    fails({ "0.0.0.0" }, { allow_loopback = true }, "'0.0.0.0'")
    fails({ "255.255.255.255" }, { allow_loopback = true }, "'255.255.255.255'", "broadcast")
    fails({ "224.0.0.1" }, { allow_loopback = true }, "multicast")
  end)

  it("names both positions of a duplicate", function()
    fails({ "10.0.0.1", "10.0.0.2", "10.0.0.1" }, { names = names }, "entry 3 '10.0.0.1' (node n3)",
      "duplicates entry 1 (node n1)")
    fails({ "10.0.0.1", "10.0.0.1" }, nil, "entry 2", "duplicates entry 1")
  end)

  it("refuses a list without this node's address", function()
    fails(good, { self = "10.0.0.9" }, "10.0.0.9", "not in the node list")
    fails(good, { self = { "10.0.0.8", "10.0.0.9" } }, "10.0.0.8/10.0.0.9")
  end)

  it("refuses an empty list", function()
    fails({}, { self = "10.0.0.1" }, "empty")
  end)

  it("raises on misuse", function()
    assert.has_error(function() nodelist.check(nil) end)
    assert.has_error(function() nodelist.check({ {} }) end)
    assert.has_error(function() nodelist.check(good, "10.0.0.1") end)
  end)
end)

describe("nodelist.equal", function()
  it("compares entries in order", function()
    assert.is_true(nodelist.equal({ "a", "b" }, { "a", "b" }))
    assert.is_true(nodelist.equal({}, {}))
    assert.is_false(nodelist.equal({ "a", "b" }, { "b", "a" }))
    assert.is_false(nodelist.equal({ "a" }, { "a", "b" }))
    assert.is_false(nodelist.equal({ "a", "b" }, { "a" }))
  end)
end)

describe("text.trim and long lines (bench/lua_scale.lua)", function()
  it("drops leading and trailing white space, keeps the inside", function()
    assert.equal("", text.trim(""))
    assert.equal("", text.trim(" \t\r\n\v\f"))
    assert.equal("a b", text.trim("\t a b \r"))
    assert.equal("10.0.0.1", text.trim("10.0.0.1"))
    assert.equal("x", text.trim("x  "))
    assert.equal("x", text.trim("  x"))
  end)

  it("refuses a line with a long run of blanks inside in linear time", function()
    local t0 = os.clock()
    local ok, err = nodelist.parse("10.0.0.1\n10.0.0.2" .. string.rep(" ", 200000) .. "x\n")
    assert.is_true(os.clock() - t0 < 0.5, "parse took " .. os.clock() - t0 .. " s")
    assert.is_nil(ok)
    assert.truthy(err:find("node list line 2:", 1, true), err)
  end)
end)

describe("nodelist.lines", function()
  it("gives the entries of bytes imexguard wrote, in file order, as they are", function()
    local bytes = nodelist.format({ "10.0.0.3", "10.0.0.1" })
    assert.same({ "10.0.0.3", "10.0.0.1" }, nodelist.lines(bytes))
    assert.same({}, nodelist.lines(""))
    assert.same({}, nodelist.lines(nil)) -- no list (a file that is not there)
    -- no trimming and no comments: what parse does for a file a person wrote
    assert.same({ " a", "# b" }, nodelist.lines(" a\n\n# b"))
  end)
end)
