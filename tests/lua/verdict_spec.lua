-- SPDX-License-Identifier: Apache-2.0
-- Specs for imexguard.verdict, the verdict on a parsed ctl answer (field cases C20, C21, C22 of
-- docs/design.md, "Field cases"), over the fixtures in tests/fixtures/ctl; the parsers: ctl_spec.lua.
local cjson = require("cjson")
local ctl = require("imexguard.ctl")
local verdict = require("imexguard.verdict")
local answers = require("ctl_answers")

-- verdict.judge of a parsed mesh for `expected` (want.addrs) and `self`; opts.node_list: want's.
local function judge(mesh, expected, self, opts)
  return verdict.judge({ mesh = mesh }, { addrs = expected, self = self,
    node_list = opts and opts.node_list })
end

local FIX = "tests/fixtures/ctl/"

local function read(name)
  local f = assert(io.open(FIX .. name, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function deepcopy(t)
  if type(t) ~= "table" then
    return t
  end
  local c = {}
  for k, v in pairs(t) do
    c[k] = deepcopy(v)
  end
  return c
end

local A, B = "192.168.103.159", "192.168.107.187"

describe("verdict.judge", function()
  local up = cjson.decode(read("up-2node-570.json"))

  local function mesh(doc)
    return assert(ctl.parse_mesh(cjson.encode(doc), 0))
  end

  it("UP 2-node: healthy", function()
    local v = judge(mesh(up), { A, B }, A)
    assert.is_true(v.healthy)
    assert.equal("UP", v.status)
    assert.is_false(v.local_fault)
    assert.is_false(v.mismatch)
    assert.same({}, v.faulty)
    assert.same({}, v.missing)
    assert.same({}, v.extra)
    assert.truthy(v.summary:find("UP", 1, true))
  end)

  it("compares the ordered node map, never host sets alone (C21)", function()
    local v = judge(mesh(up), { B, A }, B)
    assert.is_false(v.healthy)
    assert.is_true(v.local_fault)
    assert.equal("local-fault", v.verdict)
    assert.equal("reordered", v.order.kind)
    assert.truthy(v.summary:find("same nodes, another order", 1, true), v.summary)
  end)

  it("DEGRADED with one UNAVAILABLE peer: names the peer, not a local fault", function()
    local doc = deepcopy(up)
    doc.status = "DEGRADED"
    doc.nodes["1"].status = "UNAVAILABLE"
    doc.nodes["0"].connections["1"].status = "INVALID"
    for _, c in pairs(doc.nodes["1"].connections) do
      c.status = "INVALID"
    end
    local v = judge(mesh(doc), { A, B }, A)
    assert.is_false(v.healthy)
    assert.is_false(v.local_fault)
    assert.same({ { host = B, reason = "status UNAVAILABLE" } }, v.faulty)
    assert.truthy(v.summary:find(B, 1, true))
    assert.truthy(v.summary:find("DEGRADED", 1, true))
  end)

  it("a READY peer this node cannot reach is named with the connection state", function()
    local doc = deepcopy(up)
    doc.status = "DEGRADED"
    doc.nodes["0"].connections["1"].status = "NEVER_CONNECTED"
    local v = judge(mesh(doc), { A, B }, A)
    assert.is_false(v.healthy)
    assert.is_false(v.local_fault)
    assert.same({ { host = B, reason = "connection from this node NEVER_CONNECTED" } }, v.faulty)
  end)

  it("self UNAVAILABLE: local fault", function()
    local doc = deepcopy(up)
    doc.status = "DEGRADED"
    doc.nodes["0"].status = "UNAVAILABLE"
    local v = judge(mesh(doc), { A, B }, A)
    assert.is_false(v.healthy)
    assert.is_true(v.local_fault)
    assert.same({}, v.faulty)
    assert.truthy(v.summary:find("UNAVAILABLE", 1, true))
  end)

  it("DOWN unconfigured: local fault (this node absent), node map mismatch", function()
    local d = assert(ctl.parse_mesh(read("down-unconfigured.json"), 0))
    local v = judge(d, { A, B }, A)
    assert.is_false(v.healthy)
    assert.is_true(v.local_fault)
    assert.is_true(v.mismatch)
    assert.same({ A, B }, v.missing)
    assert.same({ "0.0.0.0" }, v.extra)
    assert.truthy(v.summary:find("DOWN", 1, true))
  end)

  it("an expected host missing: mismatch naming it, not healthy", function()
    local C = "192.168.1.3"
    local v = judge(mesh(up), { A, C, B }, A)
    assert.is_false(v.healthy)
    assert.is_false(v.local_fault)
    assert.is_true(v.mismatch)
    assert.same({ C }, v.missing)
    assert.same({}, v.extra)
    assert.truthy(v.summary:find(C, 1, true))
  end)

  it("an extra host (a domain-wide node list): mismatch, yet healthy for the job", function()
    local v = judge(mesh(up), { A }, A)
    assert.is_true(v.healthy)
    assert.is_true(v.mismatch)
    assert.same({ B }, v.extra)
  end)

  -- A 4-node domain: nodes 1..4 at 10.0.0.1..4, all READY and CONNECTED unless edited.
  local function four(edit)
    local doc = { status = "UP", timestamp = "t", nodes = {} }
    for i = 0, 3 do
      local conns = {}
      for j = 0, 3 do
        conns[tostring(j)] = { host = "10.0.0." .. (j + 1), status = "CONNECTED", changed = false }
      end
      doc.nodes[tostring(i)] = { status = "READY", host = "10.0.0." .. (i + 1), connections = conns,
        version = "580" }
    end
    edit(doc)
    return mesh(doc)
  end
  local hosts4 = { "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4" }

  it("self cut off from a majority of peers that are connected to each other: local fault", function()
    local d = four(function(doc)
      doc.status = "DEGRADED"
      for j = 1, 3 do
        doc.nodes["0"].connections[tostring(j)].status = "INVALID"
        doc.nodes[tostring(j)].connections["0"].status = "INVALID"
      end
    end)
    local v = judge(d, hosts4, "10.0.0.1")
    assert.is_true(v.local_fault)
    assert.same({}, v.faulty)
    assert.truthy(v.summary:find("3 of 3", 1, true))
  end)

  it("broken links when the peers are broken among themselves too: peers named, no local fault", function()
    local d = four(function(doc)
      doc.status = "DEGRADED"
      for j = 1, 3 do
        doc.nodes["0"].connections[tostring(j)].status = "INVALID"
      end
      doc.nodes["1"].connections["2"].status = "INVALID"
    end)
    local v = judge(d, hosts4, "10.0.0.1")
    assert.is_false(v.local_fault)
    assert.equal(3, #v.faulty)
  end)

  it("one broken link of three: the peer is named", function()
    local d = four(function(doc)
      doc.status = "DEGRADED"
      doc.nodes["0"].connections["3"].status = "RECOVERING"
    end)
    local v = judge(d, hosts4, "10.0.0.1")
    assert.is_false(v.local_fault)
    assert.same({ { host = "10.0.0.4", reason = "connection from this node RECOVERING" } }, v.faulty)
  end)

  it("C20: four situations give four distinguishable verdicts", function()
    local function classify(q_out, q_status, n_out, n_status)
      local state, _, qkind = ctl.parse_query(q_out, q_status)
      local d, _, kind = ctl.parse_mesh(n_out, n_status)
      if not d then
        return "ctl:" .. kind .. (state and "" or ("/q:" .. qkind))
      end
      local v = judge(d, { A, B }, A)
      if v.healthy then
        return "healthy"
      elseif v.local_fault then
        return "local-fault" .. (state == "READY" and "" or "/q:" .. tostring(state))
      end
      return "peers:" .. v.faulty[1].host
    end
    local degraded = deepcopy(up)
    degraded.status = "DEGRADED"
    degraded.nodes["1"].status = "UNAVAILABLE"
    degraded.nodes["0"].connections["1"].status = "INVALID" -- a peer whose daemon is down
    local down_self = deepcopy(up)
    down_self.status = "DOWN"
    down_self.nodes["0"].status = "UNAVAILABLE"
    down_self.nodes["1"].status = "UNAVAILABLE"
    local verdicts = {
      classify("", 255, "Failed to read node configuration file\n", 255), -- service disabled
      classify("WAITING_FOR_PEERS\n", 0, cjson.encode(down_self), 0), -- active, not READY, DOWN
      classify("READY\n", 0, cjson.encode(degraded), 0), -- DEGRADED, one UNAVAILABLE peer
      classify("READY\n", 0, read("up-2node-570.json"), 0), -- UP
    }
    assert.same({ "ctl:unconfigured/q:unconfigured", "local-fault/q:WAITING_FOR_PEERS", "peers:" .. B,
      "healthy" }, verdicts)
  end)

  it("raises on misuse", function()
    assert.has_error(function() judge(nil, {}, A) end)
    assert.has_error(function() judge(mesh(up), nil, A) end)
    assert.has_error(function() judge(mesh(up), {}, nil) end)
  end)
end)

-- A domain answer from an ordered node map (hosts by id, from 0). o.views[host]: that node's own
-- ordered list (default: the map); o.status[host]: node status (READY); o.links[host][peer]:
-- connection status (CONNECTED between READY nodes, else INVALID); o.domain: top-level status.
local function build(map, o)
  o = o or {}
  local doc = { status = o.domain or "UP", timestamp = "t", nodes = {} }
  for id, host in ipairs(map) do
    local st = (o.status or {})[host] or "READY"
    local conns = {}
    for j, peer in ipairs((o.views or {})[host] or map) do
      local pst = (o.status or {})[peer] or "READY"
      local c = ((o.links or {})[host] or {})[peer]
        or ((st == "READY" and pst == "READY") and "CONNECTED" or "INVALID")
      conns[tostring(j - 1)] = { host = peer, status = c, changed = false }
    end
    doc.nodes[tostring(id - 1)] = { status = st, host = host, connections = conns, version = "580" }
  end
  return assert(ctl.parse_mesh(cjson.encode(doc), 0))
end

local function hosts(n)
  local t = {}
  for i = 1, n do t[i] = "10.0.1." .. i end
  return t
end

describe("verdict.node_map", function()
  it("maps each id to its host, in the daemon's order", function()
    local map, n = verdict.node_map(build({ "10.0.0.6", "10.0.0.5", "10.0.0.7" }))
    assert.same({ [0] = "10.0.0.6", [1] = "10.0.0.5", [2] = "10.0.0.7" }, map)
    assert.equal(3, n)
  end)

  it("keeps ids as the answer gives them (text form too)", function()
    local d = assert(ctl.parse_text(read("up-18node-text.txt")))
    local map, n = verdict.node_map(d)
    assert.equal(18, n)
    assert.equal("172.31.48.81", map[0])
    assert.equal("172.31.56.47", map[17])
  end)

  it("raises on misuse", function()
    assert.has_error(function() verdict.node_map({}) end)
  end)
end)

describe("verdict.compare_map (C21)", function()
  local J = { "10.0.0.5", "10.0.0.6", "10.0.0.7" }

  it("same: ids and hosts match", function()
    local r = verdict.compare_map(build(J), J, "10.0.0.6")
    assert.equal("same", r.kind)
    assert.equal(1, r.self_id)
    assert.equal(1, r.job_self_id)
    assert.same({}, r.moved)
    assert.truthy(r.summary:find("matches", 1, true))
  end)

  it("C21: the daemon runs {.6 .5 .7}, the job {.5 .6 .7}: same nodes, another order, ids 0 and 1", function()
    local d = assert(ctl.parse_mesh(read("c21-reordered-self.json"), 0))
    local r = verdict.compare_map(d, J, "10.0.0.6")
    assert.equal("reordered", r.kind)
    assert.same({ { id = 0, daemon = "10.0.0.6", job = "10.0.0.5" },
      { id = 1, daemon = "10.0.0.5", job = "10.0.0.6" } }, r.moved)
    assert.same({}, r.missing)
    assert.same({}, r.extra)
    assert.equal(0, r.self_id)
    assert.equal(1, r.job_self_id)
    assert.equal("same nodes, another order: ids 0, 1 differ (the daemon runs 0=10.0.0.6 1=10.0.0.5; "
      .. "the node list has 0=10.0.0.5 1=10.0.0.6)", r.summary)
  end)

  it("4 nodes, two ids swapped (the last two)", function()
    local h = hosts(4)
    local r = verdict.compare_map(build({ h[1], h[2], h[4], h[3] }), h, h[1])
    assert.equal("reordered", r.kind)
    assert.same({ 2, 3 }, { r.moved[1].id, r.moved[2].id })
    assert.equal(2, #r.moved)
  end)

  it("18 nodes rotated by one: every id differs, the summary stays one bounded line", function()
    local h = hosts(18)
    local rot = {}
    for i = 1, 18 do rot[i] = h[i % 18 + 1] end
    local r = verdict.compare_map(build(rot), h, h[5])
    assert.equal("reordered", r.kind)
    assert.equal(18, #r.moved)
    assert.equal(3, r.self_id)
    assert.equal(4, r.job_self_id)
    assert.is_nil(r.summary:find("\n"))
    assert.truthy(r.summary:find("and 12 more", 1, true), r.summary)
    assert.is_true(#r.summary < 400)
  end)

  it("18 nodes, same order: same", function()
    local h = hosts(18)
    assert.equal("same", verdict.compare_map(build(h), h, h[18]).kind)
  end)

  it("different set: missing and extra hosts named", function()
    local r = verdict.compare_map(build({ "10.0.0.5", "10.0.0.6", "10.0.0.9" }), J, "10.0.0.5")
    assert.equal("different", r.kind)
    assert.same({ "10.0.0.7" }, r.missing)
    assert.same({ "10.0.0.9" }, r.extra)
    assert.truthy(r.summary:find("missing 10.0.0.7; extra 10.0.0.9", 1, true), r.summary)
  end)

  it("a domain-wide list holding the job's nodes and more: different (extra), not reordered", function()
    local r = verdict.compare_map(build({ "10.0.0.9", "10.0.0.5", "10.0.0.6", "10.0.0.7" }), J, "10.0.0.5")
    assert.equal("different", r.kind)
    assert.same({}, r.missing)
    assert.same({ "10.0.0.9" }, r.extra)
  end)

  it("a duplicate host under two ids: different, naming the host and both ids (not malformed)", function()
    local d = build({ "10.0.0.5", "10.0.0.6", "10.0.0.5" })
    assert.same({ { host = "10.0.0.5", ids = { 0, 2 } } }, d.duplicates)
    assert.equal(0, d.by_host["10.0.0.5"].id)
    local r = verdict.compare_map(d, J, "10.0.0.6")
    assert.equal("different", r.kind)
    assert.same({ "10.0.0.7" }, r.missing)
    assert.truthy(r.summary:find("host 10.0.0.5 under ids 0 and 2", 1, true), r.summary)
    -- same set size and hosts as a 3-entry job list with .5 twice is still never "same"
    local r2 = verdict.compare_map(build({ "10.0.0.5", "10.0.0.6", "10.0.0.5" }), { "10.0.0.5", "10.0.0.6" },
      "10.0.0.5")
    assert.equal("different", r2.kind)
  end)

  it("ids with a gap (0, 1, 3): different, naming the ids", function()
    local text = cjson.encode({ status = "UP", nodes = {
      ["0"] = { status = "READY", host = "10.0.0.5", connections = {} },
      ["1"] = { status = "READY", host = "10.0.0.6", connections = {} },
      ["3"] = { status = "READY", host = "10.0.0.7", connections = {} } } })
    local r = verdict.compare_map(assert(ctl.parse_mesh(text, 0)), J, "10.0.0.5")
    assert.equal("different", r.kind)
    assert.same({ { id = 2, job = "10.0.0.7" }, { id = 3, daemon = "10.0.0.7" } }, r.moved)
    assert.truthy(r.summary:find("ids differ", 1, true), r.summary)
  end)

  it("an answer without this node proves nothing: self-absent, even when the rest matches", function()
    local r = verdict.compare_map(build({ "10.0.0.5", "10.0.0.6" }), J, "10.0.0.7")
    assert.equal("self-absent", r.kind)
    assert.is_nil(r.self_id)
    assert.truthy(r.summary:find("proves nothing", 1, true))
    local unconf = assert(ctl.parse_mesh(read("down-unconfigured.json"), 0))
    assert.equal("self-absent", verdict.compare_map(unconf, J, "10.0.0.5").kind)
  end)

  it("raises on misuse, and on a host twice in the job's list", function()
    assert.has_error(function() verdict.compare_map(nil, J, "a") end)
    assert.has_error(function() verdict.compare_map(build(J), nil, "a") end)
    assert.has_error(function() verdict.compare_map(build(J), J, nil) end)
    assert.has_error(function() verdict.compare_map(build(J), { "10.0.0.5", "10.0.0.5" }, "10.0.0.5") end)
  end)
end)

describe("verdict.map_faults", function()
  local J = { "10.0.0.5", "10.0.0.6", "10.0.0.7" }

  it("every view agrees: no findings (fixtures too)", function()
    assert.same({}, verdict.map_faults(build(J)))
    assert.same({}, verdict.map_faults(assert(ctl.parse_mesh(read("up-2node-570.json"), 0))))
    assert.same({}, verdict.map_faults(assert(ctl.parse_text(read("up-18node-text.txt")))))
  end)

  it("C21 seen from a peer: the stale view (ids 0 and 1 swapped) is flagged, the others not", function()
    local d = assert(ctl.parse_mesh(read("c21-reordered-peer.json"), 0))
    local m = verdict.map_faults(d)
    assert.equal(1, #m)
    assert.equal(1, m[1].id)
    assert.equal("10.0.0.6", m[1].host)
    assert.same({ "other-host", "other-host" }, { m[1].findings[1].kind, m[1].findings[2].kind })
    assert.equal("node map mismatch: its id 0 is 10.0.0.6, the node map's id 0 is 10.0.0.5, its id 1 is "
      .. "10.0.0.5, the node map's id 1 is 10.0.0.6", m[1].text)
  end)

  it("names connections to an id or a host absent from the node map", function()
    local d = build(J, { views = { ["10.0.0.7"] = { "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8" },
      ["10.0.0.6"] = { "10.0.0.5", "10.0.0.9", "10.0.0.7" } } })
    local m = verdict.map_faults(d)
    assert.equal(2, #m)
    assert.equal("unknown-host", m[1].findings[1].kind)
    assert.equal("10.0.0.9", m[1].findings[1].host)
    assert.truthy(m[1].text:find("host 10.0.0.9 (id 1), a host absent from the node map", 1, true), m[1].text)
    assert.equal("unknown-id", m[2].findings[1].kind)
    assert.equal(3, m[2].findings[1].id)
    assert.truthy(m[2].text:find("id 3 (10.0.0.8), an id absent", 1, true), m[2].text)
  end)

  it("a node listing one host under two ids in its connections is flagged, not malformed", function()
    local d = build(J, { views = { ["10.0.0.5"] = { "10.0.0.5", "10.0.0.6", "10.0.0.5" } } })
    local m = verdict.map_faults(d)
    assert.equal(1, #m)
    assert.equal(0, m[1].id)
    assert.same({ kind = "other-host", id = 2, host = "10.0.0.5",
      text = "its id 2 is 10.0.0.5, the node map's id 2 is 10.0.0.7" }, m[1].findings[1])
  end)

  it("a !M! cell of the text form is a finding of the node whose row shows it", function()
    local text = "Nodes:\nNode #0 - 10.0.0.1 - READY - Version: 580.1\n"
      .. "Node #1 - 10.0.0.2 - READY - Version: 580.1\n\n"
      .. " Nodes From\\To  0   1\n       0        C   !M!\n       1        C   C\n\nDomain State: DEGRADED\n"
    local m = verdict.map_faults(assert(ctl.parse_text(text)))
    assert.equal(1, #m)
    assert.equal(0, m[1].id)
    assert.equal("mismatch", m[1].findings[1].kind)
  end)
end)

describe("verdict.judge: ordered identity and configuration faults", function()
  local J = { "10.0.0.5", "10.0.0.6", "10.0.0.7" }

  it("C21 on the stale node: a local fault named 'same nodes, another order', no peer blamed", function()
    local d = assert(ctl.parse_mesh(read("c21-reordered-self.json"), 0))
    local v = judge(d, J, "10.0.0.6")
    assert.is_false(v.healthy)
    assert.is_true(v.local_fault)
    assert.equal("local-fault", v.verdict)
    assert.equal("reordered", v.order.kind)
    assert.equal(0, v.self_id)
    assert.same({}, v.faulty)
    assert.truthy(v.summary:find("same nodes, another order", 1, true), v.summary)
  end)

  it("same nodes, another order but UP and connected everywhere: still not healthy", function()
    local h = hosts(4)
    local v = judge(build({ h[2], h[1], h[3], h[4] }), h, h[1])
    assert.is_false(v.healthy)
    assert.is_true(v.local_fault)
    assert.is_false(v.mismatch)
  end)

  it("C21 on a peer with the job's order: the stale node is blamed for its node map", function()
    local d = assert(ctl.parse_mesh(read("c21-reordered-peer.json"), 0))
    local v = judge(d, J, "10.0.0.5")
    assert.is_false(v.healthy)
    assert.is_false(v.local_fault)
    assert.equal("peer-fault", v.verdict)
    assert.equal("same", v.order.kind)
    assert.equal(1, #v.faulty)
    assert.equal("10.0.0.6", v.faulty[1].host)
    assert.truthy(v.faulty[1].reason:find("^node map mismatch"), v.faulty[1].reason)
  end)

  it("this node's own view differing from the map is a local fault", function()
    local d = build(J, { views = { ["10.0.0.5"] = { "10.0.0.6", "10.0.0.5", "10.0.0.7" } } })
    local v = judge(d, J, "10.0.0.5")
    assert.is_true(v.local_fault)
    assert.truthy(v.summary:find("node map mismatch", 1, true), v.summary)
  end)

  it("a NODE_MAP_MISMATCH link is two-sided: this node's map is the list's, so the peer is blamed", function()
    -- the simulator's layout: every row keyed by the local ids, the mismatch shown on both ends
    local mm = { ["10.0.0.5"] = { ["10.0.0.6"] = "NODE_MAP_MISMATCH" },
      ["10.0.0.6"] = { ["10.0.0.5"] = "NODE_MAP_MISMATCH", ["10.0.0.7"] = "NODE_MAP_MISMATCH" },
      ["10.0.0.7"] = { ["10.0.0.6"] = "NODE_MAP_MISMATCH" } }
    -- C32: where the peer's row names every host of the list under the list's ids, both ends run
    -- the list as far as the answer shows: a stale block, nobody blamed
    local st = judge(build(J, { links = mm, domain = "DEGRADED" }), J, "10.0.0.5")
    assert.equal("stale-mismatch", st.verdict)
    assert.same({ "10.0.0.6" }, st.stale_mismatch.peers)
    assert.same({}, st.faulty)
    -- the peer's own view in another order (its own ids, as the real ctl's rows are keyed): blamed
    local v = judge(build(J, { links = mm, domain = "DEGRADED",
      views = { ["10.0.0.6"] = { "10.0.0.6", "10.0.0.5", "10.0.0.7" } } }), J, "10.0.0.5")
    assert.is_false(v.local_fault)
    assert.equal("peer-fault", v.verdict)
    assert.equal(1, #v.faulty)
    assert.equal("10.0.0.6", v.faulty[1].host)
    assert.truthy(v.faulty[1].reason:find("node map mismatch", 1, true), v.faulty[1].reason)
    -- only this node's link shows it: the peer is still the one named
    local one = judge(build(J, { links = { ["10.0.0.5"] = { ["10.0.0.7"] = "NODE_MAP_MISMATCH" } },
      domain = "DEGRADED" }), J, "10.0.0.5")
    assert.same({ { host = "10.0.0.7",
      reason = "node map mismatch with this node, whose map is the node list's" } }, one.faulty)
    -- the stale node itself (its map another order) is a local fault
    local stale = build({ "10.0.0.6", "10.0.0.5", "10.0.0.7" }, { links = mm, domain = "DEGRADED" })
    assert.is_true(judge(stale, J, "10.0.0.6").local_fault)
  end)

  it("a READY, UP peer whose connections name an unknown id is not healthy", function()
    local d = build(J, { views = { ["10.0.0.7"] = { "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8" } } })
    local v = judge(d, J, "10.0.0.5")
    assert.is_false(v.healthy)
    assert.same({ "10.0.0.7" }, { v.faulty[1].host })
    assert.truthy(v.faulty[1].reason:find("id 3", 1, true))
  end)

  it("a duplicate host under two ids in this node's answer: local fault", function()
    local v = judge(build({ "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.5" }), J, "10.0.0.6")
    assert.is_true(v.local_fault)
    assert.truthy(v.summary:find("under ids 0 and 3", 1, true), v.summary)
  end)

  it("opts.node_list: the daemon's list is a static file, not the job's (order from the file)", function()
    local rack = { "10.0.0.7", "10.0.0.5", "10.0.0.6" }
    local d = build(rack)
    assert.is_true(judge(d, J, "10.0.0.5").local_fault) -- the job's order is not the daemon's
    local v = judge(d, J, "10.0.0.5", { node_list = rack })
    assert.is_true(v.healthy)
    assert.equal("same", v.order.kind)
    local stale = judge(d, J, "10.0.0.5", { node_list = { "10.0.0.5", "10.0.0.6", "10.0.0.7" } })
    assert.equal("reordered", stale.order.kind)
    assert.is_true(stale.local_fault)
    local unordered = judge(d, J, "10.0.0.5", { node_list = false })
    assert.is_true(unordered.healthy)
    assert.is_nil(unordered.order)
    -- without an order to compare, each node's view is still checked
    local bad = build(rack, { views = { ["10.0.0.6"] = { "10.0.0.5", "10.0.0.7", "10.0.0.6" } } })
    assert.equal("10.0.0.6", judge(bad, J, "10.0.0.5", { node_list = false }).faulty[1].host)
    assert.has_error(function() judge(d, J, "10.0.0.5", { node_list = "x" }) end)
  end)

  it("a domain-wide list (extra hosts, another order) stays healthy for the job", function()
    local v = judge(build({ "10.0.0.9", "10.0.0.7", "10.0.0.5", "10.0.0.6" }), J, "10.0.0.5")
    assert.is_true(v.healthy)
    assert.equal("healthy", v.verdict)
    assert.equal("different", v.order.kind)
  end)

  it("C22, 4 nodes (fixture): config-fault, nobody blamed, causes named", function()
    local d = assert(ctl.parse_mesh(read("c22-config-fault-4node.json"), 0))
    local v = judge(d, { "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4" }, "10.0.0.1")
    assert.is_false(v.healthy)
    assert.is_false(v.local_fault)
    assert.equal("config-fault", v.verdict)
    assert.same({}, v.faulty)
    assert.same({ "10.0.0.2", "10.0.0.3", "10.0.0.4" }, v.config_fault.peers)
    assert.same(verdict.CONFIG_FAULT_CAUSES, v.config_fault.causes)
    for _, word in ipairs({ "configuration fault, not a peer fault", "IMEX_CMD_PORT", "firewalled",
      "IMEX_CMD_BIND_INTERFACE_IP", "loopback", "IMEX_CMD_ENABLED=0", "differs between the nodes" }) do
      assert.truthy(v.summary:find(word, 1, true), word)
    end
  end)

  local function cmd_unreachable(n, self_index)
    local h = hosts(n)
    local self = h[self_index or 1]
    local status, links = {}, { [self] = {} }
    for _, x in ipairs(h) do
      if x ~= self then status[x] = "UNAVAILABLE" end
      links[self][x] = "CONNECTED"
    end
    return build(h, { status = status, links = links, domain = "DEGRADED" }), h, self
  end

  it("C22 with 1 peer: config-fault", function()
    local d, h, self = cmd_unreachable(2)
    local v = judge(d, h, self)
    assert.equal("config-fault", v.verdict)
    assert.same({ h[2] }, v.config_fault.peers)
    assert.same({}, v.faulty)
  end)

  it("C22 with 17 peers (an 18-node rack), this node in the middle: config-fault", function()
    local d, h, self = cmd_unreachable(18, 9)
    local v = judge(d, h, self)
    assert.equal("config-fault", v.verdict)
    assert.equal(17, #v.config_fault.peers)
    assert.same({}, v.faulty)
    assert.is_false(v.local_fault)
  end)

  it("a real peer fault (this node's connection to the peer not CONNECTED) is not a config fault", function()
    local h = hosts(4)
    local d = build(h, { status = { [h[3]] = "UNAVAILABLE" }, domain = "DEGRADED" })
    local v = judge(d, h, h[1])
    assert.equal("peer-fault", v.verdict)
    assert.is_nil(v.config_fault)
    assert.same({ { host = h[3], reason = "status UNAVAILABLE" } }, v.faulty)
    -- every peer down, every link INVALID: still peers (a config fault needs CONNECTED links)
    local all = build({ h[1], h[2] }, { status = { [h[2]] = "UNAVAILABLE" }, domain = "DEGRADED" })
    assert.equal("peer-fault", judge(all, { h[1], h[2] }, h[1]).verdict)
  end)

  it("only some peers show the signature: those are named with the command-port reason", function()
    local h = hosts(4)
    local d = build(h, { status = { [h[2]] = "UNAVAILABLE", [h[3]] = "UNAVAILABLE" },
      links = { [h[1]] = { [h[2]] = "CONNECTED" } }, domain = "DEGRADED" })
    local v = judge(d, h, h[1])
    assert.equal("peer-fault", v.verdict)
    assert.equal(2, #v.faulty)
    assert.truthy(v.faulty[1].reason:find("command port (IMEX_CMD_PORT) is unreachable", 1, true))
    assert.equal("status UNAVAILABLE", v.faulty[2].reason)
  end)

  it("this node not READY is a local fault even when its links look CONNECTED", function()
    local d, h, self = cmd_unreachable(4)
    d.by_host[self].status = "WAITING_FOR_PEERS"
    local v = judge(d, h, self)
    assert.equal("local-fault", v.verdict)
  end)

  it("every verdict has a name", function()
    local up = assert(ctl.parse_mesh(read("up-2node-570.json"), 0))
    assert.equal("healthy", judge(up, { A, B }, A).verdict)
    assert.equal("local-fault", judge(up, { A, B }, "10.9.9.9").verdict)
    assert.equal("unhealthy", judge(up, { A, B, "10.0.0.99" }, A).verdict)
  end)
end)

-- Scale (bench/lua_scale.lua): the id comparison stays linear, whatever the ids.
describe("verdict.compare_map by id", function()
  local answer, ids_of = answers.dense, answers.ids_of

  it("compares a map holding id 999999999 without counting up to it", function()
    local d = assert(ctl.parse_mesh(answer({ 0, 1, 999999999 }), 0))
    local t0 = os.clock()
    local r = verdict.compare_map(d, { "10.1.0.0", "10.1.0.1", "10.1.0.2" }, "10.1.0.0")
    assert.is_true(os.clock() - t0 < 0.5, "compare_map took " .. os.clock() - t0 .. " s")
    assert.equal("different", r.kind)
    assert.same({ { id = 2, job = "10.1.0.2" }, { id = 999999999, daemon = d.nodes[3].host } }, r.moved)
  end)

  it("orders the ids above the node list of a hand-made domain", function()
    local d = { status = "UP", nodes = { { id = 9, host = "h9" }, { id = 0, host = "h0" },
      { id = 5, host = "h5" },
      { id = 9, host = "h9" } }, by_host = {} }
    for _, n in ipairs(d.nodes) do d.by_host[n.host] = n end
    local r = verdict.compare_map(d, { "h0", "h1" }, "h0")
    assert.same({ 1, 5, 9 }, ids_of(r.moved))
  end)
end)

describe("verdict.names_list", function()
  it("is true when the node's view names every other host of the list, none INVALID", function()
    local p = { host = "a", connections = { a = "CONNECTED", b = "CONNECTED", c = "DISCONNECTED" } }
    assert.is_true(verdict.names_list(p, { "a", "b", "c" }))
    assert.is_true(verdict.names_list(p, { "b" }))
    assert.is_true(verdict.names_list({ host = "a" }, { "a" })) -- itself need not be named
  end)

  it("is false when a host of the list is INVALID or absent from the view (another list)", function()
    local p = { host = "a", connections = { b = "CONNECTED", c = "INVALID" } }
    assert.is_false(verdict.names_list(p, { "a", "b", "c" }))
    assert.is_false(verdict.names_list(p, { "a", "b", "d" }))
    assert.is_false(verdict.names_list({ host = "a" }, { "a", "b" }))
  end)
end)
