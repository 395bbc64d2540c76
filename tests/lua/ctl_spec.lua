-- SPDX-License-Identifier: Apache-2.0
-- Specs for imexguard.ctl, the parsers (field cases C06, C20, C21 of docs/design.md, "Field cases")
-- over every fixture in tests/fixtures/ctl; the verdict on a parsed answer: verdict_spec.lua.
local cjson = require("cjson")
local ctl = require("imexguard.ctl")
local verdict = require("imexguard.verdict")

-- verdict.judge of a parsed mesh for `expected` (want.addrs) and `self`; opts.node_list: want's.
local function judge(mesh, expected, self, opts)
  return verdict.judge({ mesh = mesh }, { addrs = expected, self = self,
    node_list = opts and opts.node_list })
end
local answers = require("ctl_answers")

local FIX = "tests/fixtures/ctl/"

local function read(name)
  local f = assert(io.open(FIX .. name, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- Assert a parse error of the given kind with a one-line message.
local function fails(kind, ok, err, got_kind)
  assert.is_nil(ok, "expected an error, got a result")
  assert.is_string(err)
  assert.is_nil(err:find("\n"), err)
  assert.equal(kind, got_kind, err)
end

local A, B = "192.168.103.159", "192.168.107.187"

describe("ctl fixtures", function()
  it("covers every file in tests/fixtures/ctl", function()
    local p = assert(io.popen("ls " .. FIX))
    local names = {}
    for name in p:lines() do
      names[#names + 1] = name
    end
    p:close()
    table.sort(names)
    -- If a fixture is added, add its spec here.
    assert.same({ "README.md", "c21-reordered-peer.json", "c21-reordered-self.json",
      "c22-config-fault-4node.json", "down-unconfigured.json", "errors.txt", "q-ready.txt",
      "up-18node-text.txt", "up-2node-570-00-text.txt", "up-2node-570.json" }, names)
  end)
end)

describe("ctl.parse_query", function()
  it("reads q-ready.txt", function()
    assert.equal("READY", ctl.parse_query(read("q-ready.txt"), 0))
  end)

  it("knows every local state", function()
    for _, s in ipairs({ "INITIALIZING", "STARTING_AUTH_SERVER", "WAITING_FOR_PEERS", "WAITING_FOR_RECOVERY",
      "INIT_GPU", "READY", "SHUTTING_DOWN", "UNAVAILABLE" }) do
      assert.equal(s, ctl.parse_query(s .. "\n", 0))
    end
  end)

  it("calls anything else with exit 0 malformed", function()
    local outs = { "", "\n", "ready\n", "READY READY\n", "READY\nextra\n", "UP\n", '{"status":"READY"}' }
    for _, out in ipairs(outs) do
      fails("malformed", ctl.parse_query(out, 0))
    end
  end)

  it("reads exit 255 with no output as unconfigured and a killed ctl as unreachable", function()
    fails("unconfigured", ctl.parse_query("", 255))
    fails("unreachable", ctl.parse_query("", nil))
    fails("unreachable", ctl.parse_query("READY\n", 2))
  end)

  it("raises on misuse", function()
    assert.has_error(function() ctl.parse_query(1, 0) end)
    assert.has_error(function() ctl.parse_query("READY", "0") end)
  end)
end)

describe("ctl with errors.txt", function()
  -- Each case is a comment line, possibly naming "exit status N", followed by one output line.
  local cases = {}
  local status
  for line in read("errors.txt"):gmatch("([^\n]*)\n") do
    if line:find("^#") then
      status = tonumber(line:match("exit status (%d+)"))
    elseif line ~= "" then
      cases[#cases + 1] = { out = line .. "\n", status = status }
    end
  end

  it("has the four cases", function()
    assert.equal(4, #cases)
    assert.equal(1, cases[1].status)
    assert.equal(255, cases[2].status)
  end)

  it("reads 'failed to connect' with exit 1 as unreachable", function()
    fails("unreachable", ctl.parse_query(cases[1].out, cases[1].status))
    fails("unreachable", ctl.parse_mesh(cases[1].out, cases[1].status))
    -- even if the exit status were lost
    fails("unreachable", ctl.parse_query(cases[1].out, 0))
  end)

  it("C44: keeps the end of the ctl's message, where its cause is", function()
    for _, parse in ipairs({ ctl.parse_query, ctl.parse_mesh }) do
      local _, msg = parse(cases[1].out, cases[1].status)
      assert.matches("ipv6:%5B::%5D:50005: Address family not supported by protocol')", msg, 1, true)
      -- a longer answer is cut in its middle
      local _, long = parse("Query Status returned error code: 14 - " .. string.rep("z", 400)
        .. " the cause\n", 1)
      assert.matches("Query Status returned error code: 14 %- z+ %.%.%. z+ the cause'%)$", long)
      assert.is_true(#long < ctl.EXCERPT_MAX + 80)
    end
  end)

  it("reads 'Failed to read node configuration file' as unconfigured, by text or by exit 255", function()
    for _, st in ipairs({ 255, 0, 1 }) do
      fails("unconfigured", ctl.parse_query(cases[2].out, st))
      fails("unconfigured", ctl.parse_mesh(cases[2].out, st))
    end
    local _, err = ctl.parse_mesh(cases[2].out, 255)
    assert.truthy(err:find("not configured", 1, true))
  end)

  it("calls daemon log lines printed with exit 0 malformed, never a state or a domain", function()
    for i = 3, 4 do
      fails("malformed", ctl.parse_query(cases[i].out, 0))
      fails("malformed", ctl.parse_mesh(cases[i].out, 0))
    end
  end)
end)

describe("ctl.parse_mesh (C06)", function()
  local up = read("up-2node-570.json")

  it("reads the UP 2-node fixture", function()
    local d = assert(ctl.parse_mesh(up, 0))
    assert.equal("UP", d.status)
    assert.equal("8/8/2025 17:38:02.641", d.timestamp)
    assert.equal(2, #d.nodes)
    assert.same({ id = 0, host = A, status = "READY", version = "570.172.08",
      connections = { [A] = "CONNECTED", [B] = "CONNECTED" },
      links = { { id = 0, host = A, status = "CONNECTED" }, { id = 1, host = B, status = "CONNECTED" } } },
      d.nodes[1])
    assert.same({}, d.duplicates)
    assert.equal(1, d.nodes[2].id)
    assert.equal(B, d.nodes[2].host)
    assert.equal(d.nodes[2], d.by_host[B])
    assert.equal(d.nodes[1], d.by_host[A])
  end)

  it("gives the same domain for the same JSON compacted on one line", function()
    local compact = cjson.encode(cjson.decode(up))
    assert.is_nil(compact:find("\n"))
    assert.same(ctl.parse_mesh(up, 0), ctl.parse_mesh(compact, 0))
  end)

  it("sorts nodes by id when \"1\" comes before \"0\"", function()
    local text = [[{"status":"UP","timestamp":"t","nodes":{
      "1":{"status":"READY","host":"10.0.0.2","version":"580.1","hostName":"",
           "connections":{"1":{"host":"10.0.0.2","status":"CONNECTED"},
                          "0":{"host":"10.0.0.1","status":"CONNECTED"}}},
      "0":{"status":"READY","host":"10.0.0.1",
           "connections":{"0":{"host":"10.0.0.1","status":"CONNECTED"},
                          "1":{"host":"10.0.0.2","status":"CONNECTED"}}},
      "10":{"status":"READY","host":"10.0.0.11","connections":{}}}}]]
    local d = assert(ctl.parse_mesh(text, 0))
    assert.same({ 0, 1, 10 }, { d.nodes[1].id, d.nodes[2].id, d.nodes[3].id })
    assert.equal("10.0.0.1", d.nodes[1].host)
    assert.is_nil(d.nodes[1].version)
    assert.equal("", d.nodes[2].hostname)
  end)

  it("reads the DOWN unconfigured fixture as a (DOWN) domain", function()
    local d = assert(ctl.parse_mesh(read("down-unconfigured.json"), 0))
    assert.equal("DOWN", d.status)
    assert.equal(1, #d.nodes)
    assert.equal("0.0.0.0", d.nodes[1].host)
    assert.equal("UNAVAILABLE", d.nodes[1].status)
    assert.equal("", d.nodes[1].version)
    assert.same({ ["0.0.0.0"] = "INVALID" }, d.nodes[1].connections)
  end)

  local function edited(fn)
    local doc = cjson.decode(up)
    fn(doc)
    return cjson.encode(doc)
  end

  local variants = {
    ["nodes as an array"] = edited(function(d) d.nodes = { d.nodes["0"], d.nodes["1"] } end),
    ['"nodes": {}'] = up:gsub('"nodes": %b{}', '"nodes": {}'),
    ["no top-level status"] = edited(function(d) d.status = nil end),
    ["status null"] = up:gsub('"status": "UP"', '"status": null'),
    ["unknown domain status"] = edited(function(d) d.status = "OK" end),
    ["status as a number"] = edited(function(d) d.status = 1 end),
    ["nodes keyed by names"] = edited(function(d) d.nodes = { a = d.nodes["0"] } end),
    ["nodes a string"] = edited(function(d) d.nodes = "0,1" end),
    ["no nodes key"] = edited(function(d) d.nodes = nil end),
    ["a node missing host"] = edited(function(d) d.nodes["1"].host = nil end),
    ["a node with a numeric status"] = edited(function(d) d.nodes["1"].status = 5 end),
    ["a node without connections"] = edited(function(d) d.nodes["0"].connections = nil end),
    ["connections as an array"] = edited(function(d)
      d.nodes["0"].connections = { d.nodes["0"].connections["0"], d.nodes["0"].connections["1"] }
    end),
    ["a connection without status"] = edited(function(d) d.nodes["0"].connections["1"].status = nil end),
    ["a node that is not an object"] = edited(function(d) d.nodes["1"] = "READY" end),
    ["a numeric version"] = edited(function(d) d.nodes["1"].version = 570 end),
    ["top-level array"] = "[1,2]",
    ["a bare string"] = '"UP"',
    ["trailing garbage"] = up .. "x",
    ["grep bait"] = 'garbage "status": "UP" garbage',
  }
  for name, text in pairs(variants) do
    it("calls " .. name .. " malformed", function()
      fails("malformed", ctl.parse_mesh(text, 0))
    end)
  end

  it("calls empty output malformed with exit 0, unconfigured with exit 255", function()
    fails("malformed", ctl.parse_mesh("", 0))
    fails("malformed", ctl.parse_mesh(nil, 0))
    fails("unconfigured", ctl.parse_mesh("", 255))
  end)

  it("calls the text table with exit 0 malformed, never guessing", function()
    for _, name in ipairs({ "up-2node-570-00-text.txt", "up-18node-text.txt" }) do
      local d, err, kind = ctl.parse_mesh(read(name), 0)
      fails("malformed", d, err, kind)
      assert.truthy(err:find("text table", 1, true))
    end
  end)

  it("calls JSON cut at every 7th byte malformed, never a domain", function()
    for _, name in ipairs({ "up-2node-570.json", "down-unconfigured.json" }) do
      local text = read(name)
      local last = text:find("}%s*$") -- the closing brace: any shorter prefix is incomplete
      local n = 0
      for cut = 0, last - 1, 7 do
        fails("malformed", ctl.parse_mesh(text:sub(1, cut), 0))
        n = n + 1
      end
      assert.is_true(n > 40, name .. ": " .. n .. " cuts")
    end
  end)

  it("reads a non-zero exit as unreachable even with JSON on stdout", function()
    fails("unreachable", ctl.parse_mesh(up, 1))
    fails("unreachable", ctl.parse_mesh("", nil))
  end)

  it("keeps a malformed message one line when it quotes a raw field", function()
    for _, status in ipairs({ "\n\n", "UP\r\nDOWN", "a\nb" }) do
      local d, err, kind = ctl.parse_mesh(cjson.encode({ status = status, nodes = {} }), 0)
      fails("malformed", d, err, kind)
      assert.is_nil(err:find("[\r\n]"), err)
    end
  end)

  it("raises on misuse", function()
    assert.has_error(function() ctl.parse_mesh({}, 0) end)
  end)
end)

describe("ctl.parse_text", function()
  it("reads the 570.00 2-node text (6-line legend, no versions)", function()
    local d = assert(ctl.parse_text(read("up-2node-570-00-text.txt")))
    assert.equal("UP", d.status)
    assert.equal("3/25/2025 10:42:08.082", d.timestamp)
    assert.equal(2, #d.nodes)
    assert.same({ id = 1, host = "10.136.206.48", status = "READY",
      connections = { ["10.136.206.47"] = "CONNECTED", ["10.136.206.48"] = "CONNECTED" },
      links = { { id = 0, host = "10.136.206.47", status = "CONNECTED" },
        { id = 1, host = "10.136.206.48", status = "CONNECTED" } } }, d.nodes[2])
    assert.same({ [0] = { [0] = "C", [1] = "C" }, [1] = { [0] = "C", [1] = "C" } }, d.matrix)
  end)

  it("reads the 18-node text (8-line legend, versions)", function()
    local d = assert(ctl.parse_text(read("up-18node-text.txt")))
    assert.equal("UP", d.status)
    assert.equal(18, #d.nodes)
    assert.equal(17, d.nodes[18].id)
    assert.equal("172.31.56.47", d.nodes[18].host)
    assert.equal("570.172", d.nodes[18].version)
    assert.equal("CONNECTED", d.nodes[5].connections["172.31.56.47"])
    assert.equal("C", d.matrix[17][0])
    local expected = {}
    for _, n in ipairs(d.nodes) do
      expected[#expected + 1] = n.host
    end
    assert.is_true(judge(d, expected, "172.31.48.81").healthy)
  end)

  it("reads mismatch and never-connected letters", function()
    local text = "Nodes:\nNode #0 - 10.0.0.1 - READY - Version: 580.1\n"
      .. "Node #1 - 10.0.0.2 - READY - Version: 580.1\n\n"
      .. " Nodes From\\To  0   1\n       0        C   !M!\n       1        N   C\n\nDomain State: DEGRADED\n"
    local d = assert(ctl.parse_text(text))
    assert.equal("DEGRADED", d.status)
    assert.equal("NODE_MAP_MISMATCH", d.nodes[1].connections["10.0.0.2"])
    assert.equal("NEVER_CONNECTED", d.nodes[2].connections["10.0.0.1"])
  end)

  it("calls incomplete or foreign text malformed", function()
    local full = read("up-2node-570-00-text.txt")
    for _, text in ipairs({
      "", read("up-2node-570.json"), full:gsub("Domain State: UP", "Domain State: FINE"),
      full:gsub("Domain State: UP\n", ""), full:gsub("       1        C  C\n", ""),
      full:gsub("       1        C  C", "       1        C  X"),
      full:gsub("       1        C  C", "       1        C"),
      (full:gsub("Node #1[^\n]*\n", "")),
    }) do
      fails("malformed", ctl.parse_text(text))
    end
  end)

  it("calls a node, matrix row or column id of more than 9 digits malformed, never raising", function()
    local big = "99999999999999999999" -- beyond 2^63: no integer
    local full = read("up-2node-570-00-text.txt")
    for _, text in ipairs({
      "Nodes:\nNode #" .. big .. " - 10.0.0.1 - READY\nDomain State: UP\n",
      (full:gsub("Node #1 ", "Node #" .. big .. " ")),
      (full:gsub("       1        C  C\n", "       " .. big .. "        C  C\n")),
      (full:gsub("       1        C  C\n", "       " .. big .. "        C\n")),
      (full:gsub("(Nodes From\\To%s+0%s+)1", "%1" .. big)),
      (full:gsub("Node #1 ", "Node #1234567890 ")),
    }) do
      local ok, d, err, kind = pcall(ctl.parse_text, text)
      assert.is_true(ok, tostring(d))
      fails("malformed", d, err, kind)
    end
  end)
end)


-- Scale (bench/lua_scale.lua): the ordering by id stays linear, whatever the ids (the id comparison:
-- verdict_spec.lua).
describe("ctl ordering by id", function()
  local answer, ids_of = answers.dense, answers.ids_of

  it("orders dense and sparse ids, nodes and links", function()
    for _, ids in ipairs({ { 3, 0, 2, 1 }, { 5, 900000000, 7, 0 }, { 1, 3, 5, 7, 9 } }) do
      local d = assert(ctl.parse_mesh(answer(ids), 0))
      local sorted = { table.unpack(ids) }
      table.sort(sorted)
      assert.same(sorted, ids_of(d.nodes))
      for _, n in ipairs(d.nodes) do assert.same(sorted, ids_of(n.links)) end
    end
  end)

  it("calls a node or connection id given twice (\"1\" and \"01\") malformed, naming the lowest", function()
    local text = [[{"status":"UP","nodes":{
      "0":{"status":"READY","host":"10.0.0.1","connections":{"0":{"host":"10.0.0.1","status":"CONNECTED"}}},
      "3":{"status":"READY","host":"10.0.0.4","connections":{"0":{"host":"10.0.0.1","status":"CONNECTED"}}},
      "03":{"status":"READY","host":"10.0.0.5","connections":{"0":{"host":"10.0.0.1","status":"CONNECTED"}}},
      "1":{"status":"READY","host":"10.0.0.2","connections":{"0":{"host":"10.0.0.1","status":"CONNECTED"}}},
      "01":{"status":"READY","host":"10.0.0.3","connections":{"0":{"host":"10.0.0.1","status":"CONNECTED"}}}
    }}]]
    local ok, err, kind = ctl.parse_mesh(text, 0)
    fails("malformed", ok, err, kind)
    assert.truthy(err:find("node id 1 appears twice", 1, true), err)
    text = [[{"status":"UP","nodes":{"0":{"status":"READY","host":"10.0.0.1","connections":{
      "2":{"host":"10.0.0.3","status":"CONNECTED"},"002":{"host":"10.0.0.3","status":"CONNECTED"},
      "0":{"host":"10.0.0.1","status":"CONNECTED"},"00":{"host":"10.0.0.1","status":"CONNECTED"}}}}}]]
    ok, err, kind = ctl.parse_mesh(text, 0)
    fails("malformed", ok, err, kind)
    assert.truthy(err:find("connections of node 0 list id 0 twice", 1, true), err)
  end)

  it("reads a text answer with a long run of blanks inside a line in linear time", function()
    local note = "Nodes:\nnote" .. string.rep(" ", 200000) .. "x"
    local text = read("up-2node-570-00-text.txt"):gsub("Nodes:", note, 1)
    local t0 = os.clock()
    local d = assert(ctl.parse_text(text))
    assert.is_true(os.clock() - t0 < 0.5, "parse_text took " .. os.clock() - t0 .. " s")
    assert.equal(2, #d.nodes)
  end)
end)

describe("ctl.map_hosts (C35: the ctl showing a node list's host names)", function()
  it("renames nodes, connections and links, and rebuilds by_host; an empty map changes nothing", function()
    local d = assert(ctl.parse_mesh(read("up-2node-570.json"), 0))
    assert.equal(d, ctl.map_hosts(d, {}))
    local h0, h1 = d.nodes[1].host, d.nodes[2].host
    local m = ctl.map_hosts(d, { [h0] = "10.9.9.1" })
    assert.equal("10.9.9.1", m.nodes[1].host)
    assert.equal(h1, m.nodes[2].host)
    assert.equal(m.nodes[1], m.by_host["10.9.9.1"])
    assert.is_nil(m.by_host[h0])
    assert.is_not_nil(m.nodes[2].connections["10.9.9.1"])
    assert.is_nil(m.nodes[2].connections[h0])
    for _, l in ipairs(m.nodes[2].links) do assert.not_equal(h0, l.host) end
    assert.equal(d.status, m.status)
    assert.equal(h0, d.nodes[1].host) -- the original is untouched
  end)

  it("map_answer_hosts: an answer with its domain mapped, its other fields kept; else the answer itself",
    function()
      local d = assert(ctl.parse_mesh(read("up-2node-570.json"), 0))
      local h0 = d.nodes[1].host
      local answer = { mesh = d, kind = "ok", raw = "..." }
      assert.equal(answer, ctl.map_answer_hosts(answer, nil))
      assert.equal(answer, ctl.map_answer_hosts(answer, {}))
      local none = { kind = "unreachable", err = "connection refused" }
      assert.equal(none, ctl.map_answer_hosts(none, { [h0] = "10.9.9.1" }))
      local m = ctl.map_answer_hosts(answer, { [h0] = "10.9.9.1" })
      assert.not_equal(answer, m)
      assert.equal("10.9.9.1", m.mesh.nodes[1].host)
      assert.equal("ok", m.kind)
      assert.equal("...", m.raw)
      assert.equal(d, answer.mesh) -- the original is untouched
    end)
end)
