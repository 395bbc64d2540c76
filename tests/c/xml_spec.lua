-- SPDX-License-Identifier: Apache-2.0
-- host.xml_parse (src/xml.c, libexpat) through the Lua binding: the real `nvidia-smi -q -x`
-- captures of tests/fixtures/nvidia-smi/ parsed whole, and every kind of bad input (malformed,
-- truncated at any byte, too deep, too many elements, too large, entity declarations) answered
-- nil, a message naming the input, a code: never a raise, never a crash (the asan tier runs this
-- file under ASan and UBSan). The binary's memory limit holds inside a parse.
local H = require("helpers")
local host = H.host()

local FIXTURES = "tests/fixtures/nvidia-smi/"
local CAPTURES = { "qx-gb200.xml", "qx-gb300.xml", "qx-b200.xml", "qx-h100.xml", "qx-a100.xml" }

local function fixture(name)
  return assert(H.read(FIXTURES .. name), "missing fixture " .. name)
end

-- The elements of a tree, counted recursively.
local function count(e)
  local n = 1
  for _, c in ipairs(e) do n = n + count(c) end
  return n
end

-- The first child of e whose tag is `tag`.
local function child(e, tag)
  for _, c in ipairs(e) do if c.tag == tag then return c end end
end

-- The children of e whose tag is `tag`.
local function children(e, tag)
  local r = {}
  for _, c in ipairs(e) do if c.tag == tag then r[#r + 1] = c end end
  return r
end

-- nil, message, code: the shape of every runtime failure (docs/policy-api.md).
local function fails(code, name, ...)
  local r = table.pack(...)
  assert.is_nil(r[1])
  assert.equal("string", type(r[2]))
  assert.equal(name .. ": ", r[2]:sub(1, #name + 2), r[2])
  assert.is_nil(r[2]:find("\n"), "one line: " .. r[2])
  assert.equal(code, r[3], r[2])
  return r[2]
end

describe("host.xml_parse on the nvidia-smi -q -x captures", function()
  for _, name in ipairs(CAPTURES) do
    it(name .. ": every element, in order, with the capture's values", function()
      local text = fixture(name)
      local root, err = host.xml_parse(text, name)
      assert.is_table(root, err)
      assert.equal("nvidia_smi_log", root.tag)
      -- every start tag of the text is one element of the tree (counted from the text apart)
      local _, tags = text:gsub("<[%a_]", "")
      assert.equal(tags, count(root))
      assert.equal(text:match("<driver_version>([^<]*)</driver_version>"), child(root, "driver_version").text)
      local gpus = children(root, "gpu")
      assert.equal(tonumber(child(root, "attached_gpus").text), #gpus)
      local ids = {}
      for id in text:gmatch('<gpu id="([^"]+)">') do ids[#ids + 1] = id end
      for i, g in ipairs(gpus) do
        assert.equal(ids[i], g.attr.id)
        assert.equal("", g.text, "indentation is not text")
        local fabric = assert(child(g, "fabric"))
        assert.is_string(child(fabric, "state").text)
        assert.is_table(child(fabric, "health"))
      end
    end)
  end

  it("keeps an empty element as the text \"\" and N/A as it is", function()
    local root = assert(host.xml_parse(fixture("qx-b200.xml"), "b200"))
    local info = child(children(root, "gpu")[1], "platformInfo")
    assert.equal("", child(info, "chassis_serial_number").text)
    assert.equal("N/A", child(info, "slot_number").text)
    assert.is_nil(child(info, "no_such_element"))
    local mig = child(children(root, "gpu")[1], "mig_devices")
    assert.equal("None", mig.text, "text between new lines and tabs, trimmed")
  end)

  it("parses the largest capture well within a prolog's budget", function()
    local text = fixture("qx-b200.xml")
    local t0 = host.now()
    for _ = 1, 10 do assert(host.xml_parse(text, "b200")) end
    local each = (host.now() - t0) / 10
    assert.is_true(each < 0.5, string.format("%.3f s per parse", each))
  end)
end)

describe("host.xml_parse: the tree", function()
  it("gives tag, attr, text and the children in document order", function()
    local root = assert(host.xml_parse('<?xml version="1.0" ?>\n<a x="1" y=\'two\'>'
      .. '<b>one</b><!-- a comment --><c/><?pi data?><b k="&amp;">  two  </b></a>', "t"))
    assert.same({ tag = "a", attr = { x = "1", y = "two" }, text = "",
      { tag = "b", attr = {}, text = "one" },
      { tag = "c", attr = {}, text = "" },
      { tag = "b", attr = { k = "&" }, text = "two" } }, root)
  end)

  it("resolves character references, predefined entities and CDATA", function()
    local root = assert(host.xml_parse("<a>&lt;&#65;&#x42;&quot;<![CDATA[<z>&amp;]]></a>", "t"))
    assert.equal('<AB"<z>&amp;', root.text)
  end)

  it("joins the text around child elements (mixed content)", function()
    local root = assert(host.xml_parse("<a> x <b>in</b> y </a>", "t"))
    assert.equal("x  y", root.text)
    assert.equal("in", root[1].text)
  end)

  it("reads the declared encoding (ISO-8859-1 to UTF-8)", function()
    local root = assert(host.xml_parse('<?xml version="1.0" encoding="ISO-8859-1"?><a>\xe9</a>', "t"))
    assert.equal("\xc3\xa9", root.text)
  end)

  it("never reads the DTD a document names (nvidia-smi's nvsmi_device_v13.dtd is not on disk)", function()
    local root = assert(host.xml_parse('<!DOCTYPE a SYSTEM "/nonexistent/x.dtd"><a>1</a>', "t"))
    assert.equal("1", root.text)
  end)
end)

describe("host.xml_parse: skip (elements left out of the tree)", function()
  it("leaves the named elements out wherever they are, with everything inside; the rest is unchanged",
    function()
      local doc = "<a> x <s><b>1</b>in s</s> y <b>2<s/></b><c><s><s>deep</s></s>3</c></a>"
      local root = assert(host.xml_parse(doc, "t", { skip = { "s" } }))
      assert.same({ tag = "a", attr = {}, text = "x  y",
        { tag = "b", attr = {}, text = "2" },
        { tag = "c", attr = {}, text = "3" } }, root)
    end)

  it("the HGX capture without its supported clocks: every other element as without skip", function()
    local text = fixture("qx-b200.xml")
    local full = assert(host.xml_parse(text, "b200"))
    local cut = assert(host.xml_parse(text, "b200", { skip = { "supported_clocks" } }))
    local function strip(e)
      local r = { tag = e.tag, attr = e.attr, text = e.text }
      for _, c in ipairs(e) do
        if c.tag ~= "supported_clocks" then r[#r + 1] = strip(c) end
      end
      return r
    end
    assert.same(strip(full), cut)
    assert.equal(6045, count(full))
    assert.equal(6045 - 3992, count(cut))
  end)

  it("skipped elements still count for max_elements and max_depth, and must be well-formed", function()
    local doc = "<a><s><b/><b/><b/></s><b/></a>"
    assert.is_table(host.xml_parse(doc, "t", { skip = { "s" }, max_elements = 6 }))
    fails("limit", "t", host.xml_parse(doc, "t", { skip = { "s" }, max_elements = 5 }))
    fails("limit", "t", host.xml_parse("<a><s><b><c/></b></s></a>", "t", { skip = { "s" }, max_depth = 3 }))
    fails("xml", "t", host.xml_parse("<a><s><b></s></a>", "t", { skip = { "s" } }))
    local root, err, code = host.xml_parse("<s/>", "t", { skip = { "s" } })
    assert.same({ nil, "xml" }, { root, code })
    assert.matches("no document element", err, 1, true)
  end)

  it("misuse raises: skip not a list of names", function()
    assert.has_error(function() host.xml_parse("<a/>", "x", { skip = "s" }) end)
    assert.has_error(function() host.xml_parse("<a/>", "x", { skip = { 1 } }) end)
    assert.is_table(host.xml_parse("<a/>", "x", { skip = {} }))
  end)
end)

describe("host.xml_parse: bad input is nil, message, code", function()
  it("a truncated capture, cut at any byte: code xml, the message says where and that it ends early",
    function()
      local text = fixture("qx-gb200.xml")
      local cuts = { 1, 2, 10, 21, 22, 60, 61, 62, 63, 64, 100, 255, 1000, 4096, #text // 2, #text - 2,
        #text - 16 }
      for i = 1, 200 do cuts[#cuts + 1] = (i * 7919) % (#text - 1) + 1 end
      for _, n in ipairs(cuts) do
        local msg = fails("xml", "nvidia-smi -q -x", host.xml_parse(text:sub(1, n), "nvidia-smi -q -x"))
        assert.matches("at line %d+, column %d+", msg)
        if n >= 80 then -- from byte 80, the root's start tag: inside the document
          assert.matches("the document ends early (truncated?)", msg, 1, true)
        end
      end
      -- the whole capture less its final new line is still whole
      assert.is_table(host.xml_parse(text:sub(1, #text - 1), "x"))
    end)

  it("malformed documents: expat's reason, line and column", function()
    local cases = {
      { "", "no element found" },
      { "   \n", "no element found" },
      { "<a><b></a>", "mismatched tag" },
      { "<a/><b/>", "junk after document element" },
      { "<a>\xff</a>", "not well-formed (invalid token)" },
      { "<a x='1' x='2'/>", "duplicate attribute" },
      { "<a>&nbsp;</a>", "undefined entity" },
      { "just text", "syntax error" },
      { "<a>\0</a>", "not well-formed (invalid token)" },
    }
    for _, c in ipairs(cases) do
      local msg = fails("xml", "input", host.xml_parse(c[1], "input"))
      assert.matches("^input: not well%-formed XML at line %d+, column %d+: ", msg)
      assert.equal(c[2], msg:match(": ([^:]+)$"), msg)
    end
    local msg = fails("xml", "input", host.xml_parse("<a>\n  <b>\n</a>", "input"))
    assert.matches("at line 3, column 3: mismatched tag", msg, 1, true)
  end)

  it("an entity declaration is refused: no expansion (billion laughs), no external entity", function()
    local laughs = '<?xml version="1.0"?><!DOCTYPE l [<!ENTITY l0 "ha">'
    for i = 1, 9 do
      laughs = laughs .. string.format('<!ENTITY l%d "%s">', i, string.rep("&l" .. (i - 1) .. ";", 10))
    end
    laughs = laughs .. ']><l>&l9;</l>'
    assert.matches("an entity declaration (l0) is refused at line 1", fails("xml", "laughs",
      host.xml_parse(laughs, "laughs")), 1, true)
    local ext = '<!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/passwd">]><a>&e;</a>'
    assert.matches("an entity declaration (e) is refused", fails("xml", "ext", host.xml_parse(ext, "ext")),
      1, true)
    local param = '<!DOCTYPE a [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]><a/>'
    fails("xml", "param", host.xml_parse(param, "param"))
  end)

  it("nesting: 32 levels by default, max_depth otherwise", function()
    local function nest(n) return string.rep("<a>", n) .. string.rep("</a>", n) end
    assert.is_table(host.xml_parse(nest(32), "deep"))
    assert.matches("elements nested deeper than 32 at line 1", fails("limit", "deep",
      host.xml_parse(nest(33), "deep")), 1, true)
    assert.is_table(host.xml_parse(nest(3), "d", { max_depth = 3 }))
    fails("limit", "d", host.xml_parse(nest(4), "d", { max_depth = 3 }))
    -- far past any limit: refused at the limit, not a C stack or Lua stack overflow
    fails("limit", "d", host.xml_parse(nest(200000), "d", { max_bytes = 4 << 20 }))
    assert.is_table(host.xml_parse(nest(10000), "d", { max_depth = 10000 }))
    fails("limit", "d", host.xml_parse(nest(10001), "d", { max_depth = 10000 }))
  end)

  it("element count: 200000 by default, max_elements otherwise", function()
    local many = "<a>" .. string.rep("<b/>", 199999) .. "</a>"
    assert.equal(200000, count(assert(host.xml_parse(many, "many"))))
    assert.matches("more than 200000 elements", fails("limit", "many",
      host.xml_parse(many:gsub("</a>$", "<b/></a>"), "many")), 1, true)
    local gb200 = fixture("qx-gb200.xml")
    fails("limit", "gb200", host.xml_parse(gb200, "gb200", { max_elements = 1000 }))
  end)

  it("size: 8 MiB by default, max_bytes otherwise; checked before parsing", function()
    local big = "<a>" .. string.rep("x", 8 << 20) .. "</a>"
    assert.matches("larger than 8388608 bytes", fails("EFBIG", "big", host.xml_parse(big, "big")), 1, true)
    assert.is_table(host.xml_parse(big, "big", { max_bytes = 9 << 20 }))
    fails("EFBIG", "small", host.xml_parse("<a/>", "small", { max_bytes = 3 }))
    assert.is_table(host.xml_parse("<a/>", "small", { max_bytes = 4 }))
  end)

  it("misuse raises: not a string, no name, a bad limit", function()
    assert.has_error(function() host.xml_parse(nil, "x") end)
    assert.has_error(function() host.xml_parse({}, "x") end)
    assert.has_error(function() host.xml_parse("<a/>") end)
    assert.has_error(function() host.xml_parse("<a/>", "x", "limits") end)
    assert.has_error(function() host.xml_parse("<a/>", "x", { max_depth = 0 }) end)
    assert.has_error(function() host.xml_parse("<a/>", "x", { max_elements = 1.5 }) end)
    assert.has_error(function() host.xml_parse("<a/>", "x", { max_bytes = "big" }) end)
    assert.has_error(function() host.xml_parse("<a/>", "x", { max_bytes = 1 << 40 }) end)
  end)
end)

describe("host.xml_parse in the binary", function()
  local dir
  setup(function()
    H.imexguard_bin()
    dir = H.tmpdir()
    H.write(dir .. "/none.conf", "")
  end)
  teardown(function() H.rmdir(dir) end)

  local function prolog(body, ...)
    H.write(dir .. "/p.lua", "local P = {}\nfunction P.prolog(ctx)\n" .. body
      .. "\nend\nfunction P.epilog() return 'ok' end\nreturn P\n")
    local args = { "--config", dir .. "/none.conf", "--policy", dir .. "/p.lua", ... }
    args[#args + 1] = "prolog"
    return H.run_imexguard(args, { dir = dir, inherit_env = true })
  end

  it("is a primitive of the sandbox's host table", function()
    local path = H.sh("pwd") .. "/" .. FIXTURES .. "qx-gb300.xml"
    local r = prolog(string.format([[
      local text = assert(ctx.host.read(%q, 1 << 20))
      local root = assert(require('imexguard.host').xml_parse(text, 'gb300'))
      return 'ok', root.tag .. ' ' .. #root]], path))
    assert.same({ "ok", "nvidia_smi_log 8" }, { H.final(r).outcome, H.final(r).message })
  end)

  it("the memory limit ends a run inside a parse as policy-error, which pcall cannot catch", function()
    local path = H.sh("pwd") .. "/" .. FIXTURES .. "qx-b200.xml"
    local r = prolog(string.format([[
      local text = assert(ctx.host.read(%q, 1 << 20))
      local keep = {}
      while true do
        local ok, root = pcall(ctx.host.xml_parse, text, 'b200')
        keep[#keep + 1] = ok and root
      end]], path), "--set", "memory_limit=16")
    assert.equal(3, r.code, r.stderr)
    local f = H.final(r)
    assert.equal("policy-error", f.outcome)
    assert.equal("memory limit of 16 MiB reached (the setting memory_limit)", f.message)
  end)
end)
