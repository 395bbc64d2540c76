-- SPDX-License-Identifier: Apache-2.0
-- Specs of membership by slots' pure parts (docs/design.md, "Membership by slots"): the slot names
-- and list (imexguard.slots), the name map's layout and its switch bytes (every mix of two versions
-- maps each slot to its node or the sentinel, never to another address), readiness per job
-- (verdict.judge with per_job) and the SIGUSR1 floor (nudge.version_allows).
local slots = require("imexguard.slots")
local verdict = require("imexguard.verdict")
local nudge = require("imexguard.nudge")
local ctl = require("imexguard.ctl")
local testing = require("imexguard.testing")

local NODES = { "gb01", "gb02", "gb03", "gb04" }
local ADDR = {}
for i, n in ipairs(NODES) do ADDR[slots.name(n)] = "10.0.1." .. (10 + i * 3) end

local function set(list)
  local t = {}
  for _, n in ipairs(list) do t[slots.name(n)] = true end
  return t
end

describe("imexguard.slots: names and the slot list", function()
  it("a slot is named after its node under the reserved .invalid (RFC 6761) and back", function()
    assert.equal("gb01.imexguard.invalid", slots.name("gb01"))
    assert.equal("gb01", slots.node_of("gb01.imexguard.invalid"))
    assert.is_nil(slots.node_of("gb01"))
    assert.is_nil(slots.node_of(".imexguard.invalid"))
    assert.is_nil(slots.node_of("10.0.0.1"))
  end)

  it("the list keeps the domain's order, one name a line; a name that cannot be one is named", function()
    local names, bytes = slots.list({ "gb03", "gb01", "gb02" })
    assert.same({ slots.name("gb03"), slots.name("gb01"), slots.name("gb02") }, names)
    assert.equal("gb03.imexguard.invalid\ngb01.imexguard.invalid\ngb02.imexguard.invalid\n", bytes)
    assert.same(names, slots.parse_list(bytes))
    assert.is_nil(slots.parse_list("10.0.0.1\n10.0.0.2\n")) -- a list of addresses
    assert.is_nil(slots.parse_list("gb01.imexguard.invalid\n10.0.0.2\n"))
    local ok, err = slots.list({ "gb01", "gb 2" })
    assert.is_nil(ok)
    assert.matches('"gb 2" cannot be a slot name', err)
    assert.is_nil((slots.list({ "-gb" })))
    assert.is_nil((slots.list({ "gb#1" })))
  end)

  it("the registry field round-trips", function()
    local l = { slots.name("gb01"), slots.name("gb02") }
    assert.same(l, slots.of_field(slots.field(l)))
    assert.same({}, slots.of_field(nil))
  end)
end)

describe("imexguard.slots: the name map", function()
  local names = slots.list(NODES)

  it("two lines per slot, the switch byte first; parse reads back who is in force", function()
    local bytes = assert(slots.build(names, ADDR, set({ "gb01", "gb03" })))
    assert.matches("^# imexguard", bytes)
    assert.matches("\n 10.0.1.13 gb01.imexguard.invalid\n#127.0.0.2 gb01.imexguard.invalid\n", bytes, 1, true)
    assert.matches("\n#10.0.1.16 gb02.imexguard.invalid\n 127.0.0.2 gb02.imexguard.invalid\n", bytes, 1, true)
    local map = assert(slots.parse(bytes))
    assert.same(names, map.names)
    assert.same({ slots.name("gb01"), slots.name("gb03") }, slots.in_force(map))
    assert.is_true(map.sentinel[slots.name("gb02")])
  end)

  it("a slot without a usable address, or at the sentinel, is refused", function()
    local a = {}
    for k, v in pairs(ADDR) do a[k] = v end
    a[slots.name("gb02")] = nil
    assert.matches("gb02.imexguard.invalid has no usable address", select(2, slots.build(names, a, {})))
    a[slots.name("gb02")] = slots.SENTINEL
    assert.is_nil((slots.build(names, a, {})))
  end)

  it("parse refuses a file it did not write: an edited line, a missing sentinel, a line out of place",
    function()
    local bytes = assert(slots.build(names, ADDR, set({ "gb01" })))
    assert.is_nil((slots.parse(bytes:gsub(" 127%.0%.0%.2 gb02", " 127.0.0.3 gb02"))))
    assert.is_nil((slots.parse(bytes:gsub("#127%.0%.0%.2 gb01%.imexguard%.invalid\n", ""))))
    assert.is_nil((slots.parse(bytes .. "10.9.9.9 extra\n")))
    assert.is_nil((slots.parse(bytes:sub(1, -2)))) -- no final newline
    assert.matches("line %d+", select(2, slots.parse(bytes .. "# a comment after the slots\n")))
  end)

  it("a switch changes switch bytes only: same size, same addresses, the changes named", function()
    local old = assert(slots.build(names, ADDR, set({ "gb01", "gb02" })))
    local map = assert(slots.parse(old))
    local new, ch = slots.switch(old, map, set({ "gb01", "gb04" }))
    assert.equal(#old, #new)
    assert.same({ slots.name("gb04") }, ch.added)
    assert.same({ slots.name("gb02") }, ch.removed)
    for i = 1, #old do
      local a, b = old:sub(i, i), new:sub(i, i)
      if a ~= b then assert.is_true((a == " " or a == "#") and (b == " " or b == "#")) end
    end
    assert.same({ slots.name("gb01"), slots.name("gb04") }, slots.in_force(assert(slots.parse(new))))
    local same, none = slots.switch(new, assert(slots.parse(new)), set({ "gb01", "gb04" }))
    assert.equal(new, same)
    assert.same({ added = {}, removed = {} }, none)
  end)

  it("every mix of two versions (a lookup racing the write) maps each slot to its own node, the "
    .. "sentinel, or both: never to another address", function()
    local old = assert(slots.build(names, ADDR, set({ "gb01", "gb02" })))
    local new = slots.switch(old, assert(slots.parse(old)), set({ "gb03", "gb04" }))
    local diff = {}
    for i = 1, #old do
      if old:byte(i) ~= new:byte(i) then diff[#diff + 1] = i end
    end
    assert.equal(8, #diff) -- two switch bytes per slot that changed
    for mask = 0, (1 << #diff) - 1 do
      local b = { old:byte(1, -1) }
      for k, i in ipairs(diff) do
        if mask & (1 << (k - 1)) ~= 0 then b[i] = new:byte(i) end
      end
      -- what glibc's files source reads: the lines without '#', each an address and a name
      for line in string.char(table.unpack(b)):gmatch("[^\n]+") do
        local addr, name = line:match("^%s*([%d.]+)%s+(%S+)$")
        if addr then assert.is_true(addr == ADDR[name] or addr == slots.SENTINEL, line) end
      end
    end
  end)
end)

describe("verdict.judge per job (membership by slots)", function()
  local S = {}
  for i, n in ipairs(NODES) do S[i] = slots.name(n) end
  -- the ctl's answer of gb01 while job gb[01-02] runs: gb03, gb04 on the sentinel (UNAVAILABLE)
  local function answer(o)
    o = o or {}
    local nodes = {
      { host = S[1], connections = { [S[3]] = "RECOVERING", [S[4]] = "NEVER_CONNECTED" } },
      { host = S[2], connections = o.peer or {} },
      { host = S[3], status = "UNAVAILABLE", version = "" },
      { host = S[4], status = "UNAVAILABLE", version = "" },
    }
    for i, n in ipairs(nodes) do
      if i <= 2 then n.version = "580.95.05" end
    end
    return { mesh = assert(ctl.parse_mesh(testing.render_mesh({ status = "DEGRADED", nodes = nodes }), 0)) }
  end

  it("the job's nodes READY and connected to each other: healthy, whatever the domain's status", function()
    local v = verdict.judge(answer(), { addrs = { S[1], S[2] }, self = S[1], node_list = S, per_job = true })
    assert.is_true(v.healthy, v.summary)
    assert.equal("DEGRADED", v.status)
    assert.matches("the job's 2 nodes READY and connected to each other", v.healthy_message)
    -- the same answer judged for the whole domain, as list mode does: not healthy
    local whole = verdict.judge(answer(), { addrs = S, self = S[1] })
    assert.is_false(whole.healthy)
  end)

  it("a link between two peers of the job that is down names the peer; this node is not blamed", function()
    local a = answer({ peer = { [S[3]] = "RECOVERING" } }) -- outside the job: ignored
    local v = verdict.judge(a, { addrs = { S[1], S[2] }, self = S[1], node_list = S, per_job = true })
    assert.is_true(v.healthy, v.summary)
    -- a job of three: gb02's link to gb03 down
    local nodes = { { host = S[1] }, { host = S[2], connections = { [S[3]] = "RECOVERING" } },
      { host = S[3] }, { host = S[4], status = "UNAVAILABLE", version = "" } }
    local mesh = assert(ctl.parse_mesh(testing.render_mesh({ nodes = nodes }), 0))
    v = verdict.judge({ mesh = mesh }, { addrs = { S[1], S[2], S[3] }, self = S[1], node_list = S,
      per_job = true })
    assert.is_false(v.healthy)
    assert.is_false(v.local_fault)
    assert.equal("peer-fault", v.verdict)
    assert.same({ { host = S[2], reason = "connection to " .. S[3] .. " RECOVERING" } }, v.faulty)
  end)
end)

describe("nudge.version_allows: the SIGUSR1 floor (C48)", function()
  it("r580 and later; below, or unknown, refused with the reason", function()
    assert.is_true(nudge.version_allows("580.95.05", {}))
    assert.is_true(nudge.version_allows("595.1", nil))
    assert.is_true(nudge.version_allows("580", nil))
    local ok, why = nudge.version_allows("570.172.08", nil)
    assert.is_false(ok)
    assert.matches("570.172.08 is older than sigusr1_min_version 580", why, 1, true)
    assert.is_false((nudge.version_allows(nil)))
    assert.matches("unknown", select(2, nudge.version_allows("")))
  end)
end)

describe("steps.slots.findings: what config-test says about the mode", function()
  local room = require("imexguard.steps.slots")
  it("slots without a domain map is an error; list mode has none", function()
    local f = room.findings(testing.ctx{ settings = { membership = "slots", domain_map = "none" } })
    assert.equal(1, #f)
    assert.equal("error", f[1].level)
    assert.matches("needs an IMEX domain map", f[1].message)
    assert.same({}, room.findings(testing.ctx{ settings = { domain_map = "none" } }))
    assert.same({}, room.findings(testing.ctx{ settings = { membership = "slots" } }))
  end)
end)
