-- SPDX-License-Identifier: Apache-2.0
-- The simulator's -N -j and -N output, parsed and compared field by field with EVERY real sample
-- of tests/fixtures/ctl: up-2node-570.json, down-unconfigured.json, up-18node-text.txt (an
-- 18-node simulated domain) and up-2node-570-00-text.txt (IMEXSIM_CTL_FORMAT=570.00). The
-- simulated domain is set up to match the sample (node count, version, format), so that after
-- putting the simulated addresses and timestamp into the sample, the two agree exactly.
local cjson = require("cjson")
local h = require("sim.helper")

local TIMESTAMP = "^%d%d?/%d%d?/%d%d%d%d %d%d:%d%d:%d%d%.%d%d%d$"

local function split_lines(text)
  local out = {}
  for l in text:gmatch("([^\n]*)\n") do
    out[#out + 1] = l
  end
  return out
end

-- Parse the text form of -N (both real layouts) into its fields:
-- { legend = {lines}, timestamp, nodes = { {id, host, state, version} }, header = {column IDs},
--   rows = { {id, letters = {...}} }, domain, blank_before_domain }.
local function parse_text(text)
  local lines = split_lines(text)
  local p, i = { legend = {}, nodes = {}, header = {}, rows = {} }, 1
  assert.are.equal("Connectivity Table Legend:", lines[i])
  i = i + 1
  while lines[i] ~= "" do
    p.legend[#p.legend + 1] = assert(lines[i])
    i = i + 1
  end
  i = i + 1
  p.timestamp = lines[i]
  assert.truthy(p.timestamp:match(TIMESTAMP), p.timestamp)
  assert.are.equal("Nodes:", lines[i + 1])
  i = i + 2
  while lines[i] ~= "" do
    local l = assert(lines[i])
    local id, host, rest = l:match("^Node #(%d+) +%- (%S+) +%- (.*)$")
    assert.truthy(id, l)
    local state, version = rest:match("^(%u[%u_]*) +%- Version: (.*)$")
    p.nodes[#p.nodes + 1] = {
      id = tonumber(id),
      host = host,
      state = state or rest,
      version = version, -- nil in the 570.00 layout
    }
    i = i + 1
  end
  i = i + 1
  local header = assert(lines[i]:match("^ Nodes From\\To  (.*)$"), lines[i])
  for col in header:gmatch("%d+") do
    p.header[#p.header + 1] = tonumber(col)
  end
  i = i + 1
  while lines[i] and lines[i]:match("^ +%d+ ") do
    local id, cells = lines[i]:match("^ +(%d+) +(.*)$")
    local row = { id = tonumber(id), letters = {} }
    for letter in cells:gmatch("%S+") do
      row.letters[#row.letters + 1] = letter
    end
    p.rows[#p.rows + 1] = row
    i = i + 1
  end
  p.blank_before_domain = lines[i] == ""
  if p.blank_before_domain then
    i = i + 1
  end
  p.domain = assert(lines[i]:match("^Domain State: (%u+)$"), lines[i])
  assert.are.equal(#lines, i)
  return p
end

-- The sample `text` with each of its node addresses replaced by the simulated one, padded to the
-- same column width (16, the width of the address column), and the timestamp line by `ts`.
local function substitute(text, fixture_hosts, sim_hosts, ts)
  for k, host in ipairs(fixture_hosts) do
    local from = string.format("- %-16s", host)
    local s, e = text:find(from, 1, true)
    assert.truthy(s, host)
    text = text:sub(1, s - 1) .. string.format("- %-16s", sim_hosts[k]) .. text:sub(e + 1)
  end
  return (text:gsub("\n%d%d?/%d%d?/%d%d%d%d %d%d:%d%d:%d%d%.%d%d%d\n", "\n" .. ts .. "\n", 1))
end

-- Replace, in the decoded -N -j `t`, every host of `map` (fixture host -> simulated host).
local function map_hosts(t, map)
  for _, node in pairs(t.nodes) do
    node.host = map[node.host] or node.host
    for _, c in pairs(node.connections) do
      c.host = map[c.host] or c.host
    end
  end
  return t
end

-- The lines of a JSON text with the timestamp value blanked, sorted: the same multiset means the
-- same indentation and field layout (the order of keys inside "connections" may differ: the
-- real ctl printed "1" before "0").
local function json_lines(text)
  local l = split_lines((text:gsub('"timestamp": "[^"]*"', '"timestamp": ""')))
  table.sort(l)
  return l
end

describe("imexsim output against every real sample of tests/fixtures/ctl", function()
  local d
  after_each(h.cleanup_domains)

  it("up-2node-570.json: a 2-node domain on 570.172.08 prints the same document", function()
    local raw_fixture = h.fixture("up-2node-570.json")
    local fixture = cjson.decode(raw_fixture)
    d = h.domain(2)
    for i = 1, 2 do
      d:configure(i, { IMEXSIM_VERSION = "570.172.08" })
    end
    d:start_all()
    local t = assert(d:wait_status(1, "UP"), "never UP")
    local ok, err = h.same_shape(t, fixture)
    assert(ok, err)
    -- Field by field: every value equal once the hosts are the simulated ones.
    local map = { [fixture.nodes["0"].host] = d.addrs[1], [fixture.nodes["1"].host] = d.addrs[2] }
    map_hosts(fixture, map)
    assert.truthy(t.timestamp:match(TIMESTAMP), t.timestamp)
    fixture.timestamp, t.timestamp = nil, nil
    assert.are.same(fixture, t)
    -- Layout: the same lines (indentation, separators), up to the order of keys.
    local raw = d:ctl(1, "-N -j")
    for from, to in pairs(map) do
      raw_fixture = raw_fixture:gsub(from:gsub("%.", "%%."), to)
    end
    assert.are.same(json_lines(raw_fixture), json_lines(raw))
  end)

  it("down-unconfigured.json: the local daemon down prints the same document", function()
    local raw_fixture = h.fixture("down-unconfigured.json")
    local fixture = cjson.decode(raw_fixture)
    d = h.domain(2)
    d:configure(1, { IMEXSIM_CTL_FORMAT = "570" }) -- the sample has no hostName
    assert.are.equal(0, (d:start(2))) -- node 2 up, node 1 (the ctl's) down
    local t = assert(d:domain_json(1))
    local ok, err = h.same_shape(t, fixture)
    assert(ok, err)
    assert.truthy(t.timestamp:match(TIMESTAMP), t.timestamp)
    fixture.timestamp, t.timestamp = nil, nil
    assert.are.same(fixture, t)
    local raw, rc = d:ctl(1, "-N -j")
    assert.are.equal(0, rc)
    assert.are.same(json_lines(raw_fixture), json_lines(raw))
  end)

  it("up-18node-text.txt: an 18-node domain (570.172) prints the same table", function()
    local sample = h.fixture("up-18node-text.txt")
    local want = parse_text(sample)
    assert.are.equal(18, #want.nodes)
    d = h.domain(18)
    for i = 1, 18 do
      d:configure(i, { IMEXSIM_VERSION = "570.172" })
    end
    d:start_all()
    assert.truthy(d:wait_status(1, "UP", 20), "18 nodes never UP")
    local text, rc = d:ctl(7, "-N")
    assert.are.equal(0, rc)
    local got = parse_text(text)
    -- Field by field.
    assert.are.same(want.legend, got.legend)
    assert.are.equal(#want.nodes, #got.nodes)
    for k, node in ipairs(want.nodes) do
      local g = got.nodes[k]
      assert.are.equal(node.id, g.id)
      assert.are.equal(d.addrs[k], g.host)
      assert.are.equal(node.state, g.state)
      assert.are.equal(node.version, g.version)
    end
    assert.are.same(want.header, got.header)
    assert.are.same(want.rows, got.rows)
    assert.are.equal(want.blank_before_domain, got.blank_before_domain)
    assert.are.equal(want.domain, got.domain)
    -- Column by column: the sample with our addresses and timestamp is our output.
    local hosts = {}
    for k, node in ipairs(want.nodes) do
      hosts[k] = node.host
    end
    assert.are.equal(substitute(sample, hosts, d.addrs, got.timestamp), text)
    -- The JSON of the same domain has the real shape, 18 x 18 CONNECTED.
    local t = assert(d:domain_json(12))
    local ok, err = h.same_shape(t, cjson.decode(h.fixture("up-2node-570.json")))
    assert(ok, err)
    local pairs_connected = 0
    for _, node in pairs(t.nodes) do
      assert.are.equal("570.172", node.version)
      for _, c in pairs(node.connections) do
        pairs_connected = pairs_connected + (c.status == "CONNECTED" and 1 or 0)
      end
    end
    assert.are.equal(18 * 18, pairs_connected)
    assert.are.equal("UP", t.status)
  end)

  it("up-2node-570-00-text.txt: IMEXSIM_CTL_FORMAT=570.00 prints the older table", function()
    local sample = h.fixture("up-2node-570-00-text.txt")
    local want = parse_text(sample)
    d = h.domain(2)
    for i = 1, 2 do
      d:configure(i, { IMEXSIM_CTL_FORMAT = "570.00" })
    end
    d:start_all()
    assert.truthy(d:wait_status(1, "UP"))
    local text, rc = d:ctl(2, "-N")
    assert.are.equal(0, rc)
    local got = parse_text(text)
    assert.are.same(want.legend, got.legend)
    assert.are.equal(6, #got.legend)
    for k, node in ipairs(want.nodes) do
      local g = got.nodes[k]
      assert.are.equal(node.id, g.id)
      assert.are.equal(d.addrs[k], g.host)
      assert.are.equal(node.state, g.state)
      assert.is_nil(g.version)
    end
    assert.are.same(want.header, got.header)
    assert.are.same(want.rows, got.rows)
    assert.is_false(got.blank_before_domain)
    assert.are.equal(want.domain, got.domain)
    local hosts = { want.nodes[1].host, want.nodes[2].host }
    assert.are.equal(substitute(sample, hosts, d.addrs, got.timestamp), text)
    -- The same format keeps the JSON of 570 (no hostName without -H).
    local t = assert(d:domain_json(2))
    assert.is_nil(t.nodes["0"].hostName)
  end)

  it("a degraded domain in both text layouts: R and I letters in the right columns", function()
    d = h.domain(3)
    d:start_all()
    assert.truthy(d:wait_status(1, "UP"))
    assert.is_true(d:stop(3, "KILL"))
    assert.truthy(h.wait_for(function()
      local j = d:domain_json(1)
      return j and j.nodes["0"].connections["2"].status == "RECOVERING"
        and j.nodes["1"].connections["2"].status == "RECOVERING"
    end, 5))
    local rows = {
      { id = 0, letters = { "C", "C", "R" } },
      { id = 1, letters = { "C", "C", "R" } },
      { id = 2, letters = { "I", "I", "I" } },
    }
    local got = parse_text((d:ctl(1, "-N")))
    assert.are.same(rows, got.rows)
    assert.are.equal("DEGRADED", got.domain)
    assert.are.equal("UNAVAILABLE", got.nodes[3].state)
    assert.are.equal("", got.nodes[3].version)
    d:configure(1, { IMEXSIM_CTL_FORMAT = "570.00" })
    local text = d:ctl(1, "-N")
    got = parse_text(text)
    assert.are.same(rows, got.rows)
    assert.are.equal("DEGRADED", got.domain)
    assert.truthy(text:find("\n       0        C  C  R\n", 1, true), text)
  end)
end)
