-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.text: the one one_line helper of the Lua side.
local text = require("imexguard.text")
local steps = require("imexguard.steps")

describe("text.one_line", function()
  it("folds each run of CR/LF into one space and drops trailing space", function()
    assert.equal("a b c", text.one_line("a\r\nb\n\nc\n"))
    assert.equal("x", text.one_line("x \n"))
    assert.equal("nil", text.one_line(nil))
    assert.equal("42", text.one_line(42))
  end)

  it("caps the length at MAX_LINE bytes (1000), marking the cut with ...", function()
    assert.equal(1000, text.MAX_LINE)
    local long = string.rep("x", 1500)
    assert.equal(string.rep("x", 1000) .. "...", text.one_line(long))
    assert.equal(string.rep("x", 1000), text.one_line(string.rep("x", 1000)))
    assert.equal("abc...", text.one_line("abcdef", 3))
  end)

  it("is the helper steps exports", function()
    assert.equal(text.one_line, steps.one_line)
  end)
end)

describe("text.quote", function()
  it("quotes like %q but writes a newline as \\n, so the result is one line", function()
    assert.equal([["a\nb"]], text.quote("a\nb"))
    assert.equal([["\n\n"]], text.quote("\n\n"))
    assert.equal([["a\\\n"]], text.quote("a\\\n")) -- a backslash, then a newline
    assert.equal([["x\13\0\"y"]], text.quote("x\r\0\"y"))
  end)

  it("caps the length like one_line", function()
    assert.equal('"abc...', text.quote("abcdef", 4))
  end)
end)

describe("text.excerpt", function()
  it("cuts a value at EXCERPT_MAX bytes, then writes each control character as \\ddd, unquoted", function()
    assert.equal("12a", text.excerpt("12a"))
    assert.equal("7", text.excerpt(7))
    assert.equal("a\\010b\\013\\000", text.excerpt("a\nb\r\0"))
    assert.equal(string.rep("x", text.EXCERPT_MAX) .. "...", text.excerpt(string.rep("x", 100)))
    -- the cut comes first: an escape is never cut in half
    assert.equal(string.rep("x", text.EXCERPT_MAX - 1) .. "\\010...",
      text.excerpt(string.rep("x", text.EXCERPT_MAX - 1) .. "\n\n\n"))
  end)
end)

describe("text.ends", function()
  it("keeps a value whole up to max bytes, one line, runs of white space as one space", function()
    assert.equal("a b c", text.ends("  a\n\tb   c \n"))
    assert.equal(string.rep("x", 240), text.ends(string.rep("x", 240)))
    assert.equal("a\\001b", text.ends("a\1b"))
  end)

  it("cuts a longer value in the middle, keeping its start and its end (C44: the cause is at the end)",
    function()
    local line = "Query Status returned error code: 14 - failed to connect to all addresses; last error: "
      .. "UNKNOWN: ipv6:%5B::%5D:50005: Address family not supported by protocol"
    local cut = text.ends(line, 100)
    assert.equal(100, #cut)
    assert.matches("^Query Status returned error cod %.%.%. ", cut) -- a third: the start
    assert.matches(" %.%.%. .*Address family not supported by protocol$", cut)
    assert.equal(20, #text.ends(string.rep("y", 50), 3)) -- at least 20
  end)
end)

describe("text.columns", function()
  it("pads every cell but a row's last to its column's widest, joined by two spaces", function()
    assert.same({ "ID  HOST        STATE", "1   node-a.lan  UP", "12  b           DOWN here" },
      text.columns { { "ID", "HOST", "STATE" }, { "1", "node-a.lan", "UP" }, { "12", "b", "DOWN here" } })
  end)

  it("appends to the lines given, and a shorter row keeps its own last cell unpadded", function()
    local out = { "head" }
    assert.equal(out, text.columns({ { "A", "BB", "C" }, { "aaa", "b" } }, out))
    assert.same({ "head", "A    BB  C", "aaa  b" }, out)
  end)
end)

describe("text.matches", function()
  it("lists every match of the pattern in order; nil or no match gives an empty list", function()
    assert.same({ "10.0.0.1", " 10.0.0.2 " }, text.matches("10.0.0.1\n\n 10.0.0.2 \n", "[^\n]+"))
    assert.same({ "a", "b", "c" }, text.matches(" a\tb  c\n", "%S+"))
    assert.same({}, text.matches(nil, "%S+"))
    assert.same({}, text.matches("   ", "%S+"))
    assert.same({ "12" }, text.matches(12, "%d+"))
  end)
end)
