-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy with membership = "slots" (issue 30; docs/design.md, "Membership by
-- slots"), on the test kit's fake host: the slot list written once per domain, the name map built
-- before the daemon's first start and switched in place per job, SIGUSR1 within the daemon's window
-- and the version floor, readiness per job, the epilog's unmap, the failure modes.
local testing = require("imexguard.testing")
local slots = require("imexguard.slots")

local NODES = {}
for i = 1, 6 do NODES[string.format("gb%02d", i)] = string.format("10.0.1.%d", i) end
local TOPO = "/etc/slurm/topology.conf"
local RACK = "BlockName=b1 Nodes=gb[01-06]\nBlockSizes=6\n"
local MAP = "/run/imexguard/hosts"
local SETTINGS = { membership = "slots" }

local function slot(n) return n .. slots.SUFFIX end

-- The ctl of a node running a slot list: this node's view (the kit's `ctl` option): its own slot
-- and the slots its map puts in force READY and connected, every other slot (the sentinel)
-- UNAVAILABLE; unreachable while the unit is not active. `o.version` (default "580.95.05"),
-- `o.down`: {[node] = true} nodes whose daemon is down.
local function slots_ctl(o)
  o = o or {}
  return function(_, _, h)
    if h.unit_props.active_state ~= "active" then return testing.UNREACHABLE end
    local map = slots.parse(h.file(MAP) or "") or { on = {} }
    local nodes = {}
    for i, s in ipairs(h.daemon_nodes()) do
      local up = (map.on[s] or s == slot(h.hostname())) and not (o.down or {})[slots.node_of(s)]
      nodes[i] = { host = s, status = up and "READY" or "UNAVAILABLE",
        version = up and (o.version or "580.95.05") or "" }
    end
    return { mesh = { nodes = nodes } }
  end
end

local function scenario(o)
  o = o or {}
  local files = { [TOPO] = o.topology or RACK }
  for k, v in pairs(o.files or {}) do files[k] = v end
  local settings = {}
  for k, v in pairs(SETTINGS) do settings[k] = v end
  for k, v in pairs(o.settings or {}) do settings[k] = v end
  return testing.scenario{ node = o.node or "gb01", nodes = NODES, files = files, file = o.file or false,
    unit = o.unit or "inactive", settings = settings, mesh = o.ctl or slots_ctl(o), jobs = o.jobs,
    policy = o.policy, fail = o.fail }
end

-- The slots in force in the fake host's map, as node names (file order).
local function in_force(s)
  local map = assert(slots.parse(assert(s.host.file(MAP), "no map")))
  local out = {}
  for _, x in ipairs(slots.in_force(map)) do out[#out + 1] = slots.node_of(x) end
  return out
end

local function usr1s(s)
  local n = 0
  for _, k in ipairs(s.host.kills) do if k.sent and k.signal == 10 then n = n + 1 end end
  return n
end

local function in_place(s)
  local n = 0
  for _, w in ipairs(s.host.writes) do if w.path == MAP and w.in_place then n = n + 1 end end
  return n
end

-- The node list file: the domain's slot list (its order), whatever the job.
local LIST = table.concat({ slot("gb01"), slot("gb02"), slot("gb03"), slot("gb04"), slot("gb05"),
  slot("gb06") }, "\n") .. "\n"

describe("default policy, membership = \"slots\"", function()
  it("the first job starts the daemon with the domain's slot list and a map of its own slots; "
    .. "a later job switches its slots in place and signals, never restarting", function()
    local s = scenario()
    local outcome, msg = s:prolog{ job = 101, nodelist = "gb[01-03]" }
    assert.equal("ok", outcome, msg)
    assert.equal(LIST, s:file())
    assert.equal(1, s:restarts())
    assert.same({ "gb01", "gb02", "gb03" }, in_force(s))
    assert.equal(0, usr1s(s)) -- a fresh daemon resolved everything at its start
    assert.matches("the job's 3 nodes READY and connected to each other", msg)
    local reg = s:registrations()[1]
    assert.equal(LIST, reg.nodes)
    assert.equal(table.concat({ slot("gb01"), slot("gb02"), slot("gb03") }, " "), reg.slots)
    -- the epilog: the job's other slots back to the sentinel, the daemon told, the links checked
    outcome, msg = s:epilog{ job = 101 }
    assert.equal("ok", outcome, msg)
    assert.same({ "gb01" }, in_force(s))
    assert.equal(1, usr1s(s))
    assert.equal(1, in_place(s))
    -- another job of other nodes of the rack: no restart, its slots in, one signal
    s.host.clear()
    s:advance(10)
    outcome, msg = s:prolog{ job = 102, nodelist = "gb[01,05-06]" }
    assert.equal("ok", outcome, msg)
    assert.equal(0, s:restarts())
    assert.equal(0, #s:writes()) -- the node list file stays: the same slot list
    assert.same({ "gb01", "gb05", "gb06" }, in_force(s))
    assert.equal(1, in_place(s))
    assert.equal(1, usr1s(s))
  end)

  it("the order is the domain's, not the job's: the same node list bytes for every job", function()
    local s = scenario()
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "gb03,gb01,gb02" }))
    assert.equal(LIST, s:file())
    local t = scenario{ node = "gb03" }
    assert.equal("ok", (t:prolog{ job = 101, nodelist = "gb03,gb01,gb02" }))
    assert.equal(s:file(), t:file())
  end)

  it("a removal waits for the daemon's 5 s window (a signal within it is ignored) and is checked "
    .. "in the ctl; an addition within it is left to the daemon's retries", function()
    local s = scenario()
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "gb[01-02]" }))
    assert.equal("ok", (s:epilog{ job = 101 })) -- signal 1, at t
    s.host.clear()
    assert.equal("ok", (s:prolog{ job = 102, nodelist = "gb[01,03]" })) -- within the window
    assert.equal(0, usr1s(s))
    assert.same({ "gb01", "gb03" }, in_force(s))
    local before = s.host.now()
    assert.equal("ok", (s:epilog{ job = 102 }))
    assert.equal(1, usr1s(s))
    local k = s.host.kills[#s.host.kills]
    assert.is_true(k.at >= before) -- it waited for the window to pass before signalling
    local slept = 0
    for _, x in ipairs(s.host.sleeps) do slept = slept + x end
    assert.is_true(slept > 0)
    assert.same({ "gb01" }, in_force(s))
  end)

  it("two jobs on a shared node: the union is in force, the epilog of one keeps the other's slots",
    function()
    local s = scenario()
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "gb[01-02]" }))
    s:advance(10)
    assert.equal("ok", (s:prolog{ job = 102, nodelist = "gb[01,04]" }))
    assert.same({ "gb01", "gb02", "gb04" }, in_force(s))
    s:advance(10)
    assert.equal("ok", (s:epilog{ job = 101 }))
    assert.same({ "gb01", "gb04" }, in_force(s))
    assert.same({ "102" }, s:registered())
  end)

  it("a prolog that ends non-zero takes its slots out again (its job is not registered)", function()
    local s = scenario{ down = { gb03 = true }, settings = { health_timeout = 2, on_peer_fault = "fail" } }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "gb[01-02]" }))
    assert.equal("ok", (s:epilog{ job = 101 }))
    s:advance(10)
    local outcome, msg = s:prolog{ job = 102, nodelist = "gb[01,03]" }
    assert.equal("peers-unhealthy", outcome, msg)
    assert.same({ "gb01" }, in_force(s))
    assert.same({}, s:registered())
  end)

  it("a daemon below the SIGUSR1 floor: config-fault, never signalled, its slots out again", function()
    local s = scenario{ version = "570.172.08" }
    local outcome, msg = s:prolog{ job = 101, nodelist = "gb[01-02]" }
    assert.equal("config-fault", outcome, msg)
    assert.matches("older than sigusr1_min_version 580", msg, 1, true)
    assert.equal(0, usr1s(s))
    assert.same({ "gb01" }, in_force(s))
    assert.same({}, s:registered())
    -- a running one: the switch is refused before any signal
    s.host.clear()
    outcome, msg = s:prolog{ job = 102, nodelist = "gb[01-02]" }
    assert.equal("config-fault", outcome, msg)
    assert.equal(0, usr1s(s))
  end)

  it("the switch asks the ctl once more when the answer it has shows this node's daemon unreachable "
    .. "(UNAVAILABLE, an empty version: one busy poll says nothing of its version): it signals", function()
    local h = testing.host()
    local ctx = testing.ctx{ host = h, settings = SETTINGS }
    local busy = { mesh = { by_host = { ["10.0.0.1"] = { host = "10.0.0.1", status = "UNAVAILABLE",
      version = "" } } } }
    local switch = require("imexguard.steps.slots")
    local r, kind, why = switch.signal(ctx, {}, { self = "10.0.0.1", answer = busy })
    assert.equal("sent", r, tostring(kind) .. ": " .. tostring(why))
    assert.equal(1, #h.runs_of("nvidia-imex-ctl"))
    assert.equal(1, #h.kills)
    assert.equal(10, h.kills[1].signal)
  end)

  it("needs a domain map: without one bad-input, nothing written", function()
    local s = scenario{ topology = false, files = { [TOPO] = false } }
    local outcome, msg = s:prolog{ job = 101, nodelist = "gb[01-02]" }
    assert.equal("bad-input", outcome)
    assert.matches("needs an IMEX domain map", msg)
    assert.same({}, s.host.writes)
    assert.equal(0, s:restarts())
  end)

  it("a node name that cannot be a slot name is bad-input naming it", function()
    local s = scenario{ topology = "BlockName=b1 Nodes=gb01,gb+2\n" }
    local outcome, msg = s:prolog{ job = 101, nodelist = "gb01" }
    assert.equal("bad-input", outcome)
    assert.matches("cannot be a slot name", msg)
  end)

  it("stale: a daemon that does not resolve through the map (another /etc/hosts), a map of another "
    .. "domain or another address; plan says so and the prolog restarts once", function()
    local map = slots.build(slots.list({ "gb01", "gb02", "gb03", "gb04", "gb05", "gb06" }),
      { [slot("gb01")] = "10.0.1.1", [slot("gb02")] = "10.0.1.2", [slot("gb03")] = "10.0.1.3",
        [slot("gb04")] = "10.0.1.4", [slot("gb05")] = "10.0.1.5", [slot("gb06")] = "10.0.1.6" },
      { [slot("gb01")] = true })
    -- the daemon's /etc/hosts is another file than the map (no drop-in when it started)
    local s = scenario{ unit = "active", file = LIST,
      files = { [MAP] = map, ["/proc/4242/root/etc/hosts"] = "x" } }
    local outcome, msg = s:plan{ job = 101, nodelist = "gb[01-02]" }
    assert.equal("ok", outcome, msg)
    assert.matches("restart .*the daemon's /etc/hosts is not " .. MAP, msg)
    outcome, msg = s:prolog{ job = 101, nodelist = "gb[01-02]" }
    assert.equal("ok", outcome, msg)
    assert.equal(1, s:restarts())
    -- an address that changed: the map maps gb02 elsewhere
    local t = scenario{ unit = "active", file = LIST, files = { [MAP] = map:gsub("10.0.1.2 ", "10.0.9.2 ") } }
    msg = select(2, t:plan{ job = 101, nodelist = "gb[01-02]" })
    assert.matches("maps " .. slot("gb02") .. " to 10.0.9.2, its address is now 10.0.1.2", msg, 1, true)
    -- with the map right and the daemon reading it: nothing to restart
    local u = scenario{ unit = "active", file = LIST, files = { [MAP] = map } }
    assert.equal("ok", (u:prolog{ job = 101, nodelist = "gb[01-02]" }))
    assert.equal(0, u:restarts())
  end)

  it("after a start, a daemon whose /etc/hosts is not the map: service-failed naming the drop-in",
    function()
    -- the fake unit's first start gives main PID 1
    local s = scenario{ files = { ["/proc/1/root/etc/hosts"] = "127.0.0.1 localhost\n" } }
    local outcome, msg = s:prolog{ job = 101, nodelist = "gb[01-02]" }
    assert.equal("service-failed", outcome, msg)
    assert.matches("imexguard%-slots%.conf", msg)
    assert.same({}, s:registered())
  end)

  it("the map cannot be written: write-failed, the daemon not started", function()
    local s = scenario{ fail = { [MAP] = { write = "ENOSPC" } } }
    local outcome, msg = s:prolog{ job = 101, nodelist = "gb[01-02]" }
    assert.equal("write-failed", outcome, msg)
    assert.matches(MAP, msg, 1, true)
    assert.equal(0, s:restarts())
  end)

  it("a rack switched back to lists: the epilog of a job that ran with slots still takes its slots "
    .. "out of the map (the daemon runs the slot list until its next start)", function()
    local s = scenario()
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "gb[01-03]" }))
    assert.equal("ok", (s:epilog{ job = 101, settings = { membership = "list" } }))
    assert.same({ "gb01" }, in_force(s))
    assert.equal(1, usr1s(s))
  end)

  it("status and health judge each registered job on its own nodes; say the mode and the slots in force",
    function()
    local s = scenario{ down = { gb06 = true } }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "gb[01-03]" }))
    local outcome, msg, report = s:status{}
    assert.equal("ok", outcome, msg)
    assert.matches("membership by slots: job 101 ready", msg)
    assert.matches("membership +slots: name map " .. MAP .. ", in force gb%[01%-03%]", report)
    assert.equal("ok", (s:health{}))
    -- a second job on this node whose peer is down: that job is not ready, named
    s:advance(10)
    local t = scenario{ down = { gb05 = true }, settings = { health_timeout = 2 } }
    assert.equal("ok", (t:prolog{ job = 101, nodelist = "gb[01-02]" }))
    t:advance(10)
    assert.equal("peers-unhealthy", (t:prolog{ job = 102, nodelist = "gb[01,05]" })) -- exit 0: registered
    outcome, msg = t:status{}
    assert.equal("peers-unhealthy", outcome, msg)
    assert.matches("^job 102: this node gb01.imexguard.invalid %(gb01%) is healthy, peers are not: gb05", msg)
    assert.equal("ok", (t:health{})) -- a peer's fault drains the peer
  end)

  it("wait (issue 31 item 5): the job's own slots CONNECTED is ok, the domain's other slots (the sentinel) "
    .. "wait for nothing; a peer of the job down is named", function()
    local s = scenario{ down = { gb05 = true } }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "gb[01-03]" }))
    local outcome, msg = s:wait{ job = 101, settings = { health_timeout = 2 } }
    assert.equal("ok", outcome, msg)
    assert.matches("^job 101: 3 nodes of this node's IMEX domain, every link CONNECTED %(6 links%)", msg)
    -- the environment's own job, not registered here: its slots from SLURM_JOB_NODELIST, the same
    outcome, msg = s:wait{ job = 104, nodelist = "gb[01-02]", settings = { health_timeout = 2 } }
    assert.equal("ok", outcome, msg)
    assert.matches("^job 104: 2 nodes", msg)
    local t = scenario{ down = { gb05 = true }, settings = { health_timeout = 2 } }
    t:advance(10)
    assert.equal("peers-unhealthy", (t:prolog{ job = 102, nodelist = "gb[01,05]" }))
    outcome, msg = t:wait{ job = 102 }
    assert.equal("domain-unhealthy", outcome, msg)
    assert.matches(slot("gb05") .. " UNAVAILABLE", msg, 1, true)
    assert.is_nil(msg:find(slot("gb04"), 1, true), msg)
  end)

  it("plan shows the slot list and the slots the prolog would put in force", function()
    local s = scenario()
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "gb[01-02]" }))
    assert.equal("ok", (s:epilog{ job = 101 }))
    local outcome, msg, report = s:plan{ job = 102, nodelist = "gb[01,03]" }
    assert.equal("ok", outcome, msg)
    assert.matches("membership: slots", report)
    assert.matches("would put in force gb%[01,03%]", report)
    assert.same({ "gb01" }, in_force(s)) -- nothing changed
  end)

  describe("the static policy", function()
    local static = require("static_domain")
    local function built(on)
      local set = {}
      for _, n in ipairs(on) do set[slot(n)] = true end
      local addrs = {}
      for n, a in pairs(NODES) do addrs[slot(n)] = a end
      return slots.build(slots.list({ "gb01", "gb02", "gb03", "gb04", "gb05", "gb06" }), addrs, set)
    end

    it("verifies the static slot list, switches the job's slots into the map and back, never restarts",
      function()
      local s = scenario{ policy = static, unit = "active", file = LIST,
        files = { [MAP] = built({ "gb01" }) } }
      local outcome, msg = s:prolog{ job = 101, nodelist = "gb[01-02]" }
      assert.equal("ok", outcome, msg)
      assert.matches("the job's 2 nodes", msg)
      assert.same({ "gb01", "gb02" }, in_force(s))
      assert.equal(0, s:restarts())
      assert.equal(1, usr1s(s))
      s:advance(10)
      outcome, msg = s:epilog{ job = 101 }
      assert.equal("ok", outcome, msg)
      assert.same({ "gb01" }, in_force(s))
      assert.equal(2, usr1s(s))
      assert.equal(LIST, s:file()) -- never rewritten
    end)

    it("a static list that is not a slot list is named; a daemon that does not read the map is this "
      .. "node's fault (the site restarts it once)", function()
      local s = scenario{ policy = static, unit = "active", file = { "gb01", "gb02" },
        files = { [MAP] = built({ "gb01" }) } }
      local outcome, msg = s:prolog{ job = 101, nodelist = "gb[01-02]" }
      assert.equal("bad-input", outcome, msg)
      assert.matches("not a slot name", msg)
      local t = scenario{ policy = static, unit = "active", file = LIST,
        files = { [MAP] = built({ "gb01" }), ["/proc/4242/root/etc/hosts"] = "x" } }
      outcome, msg = t:prolog{ job = 101, nodelist = "gb[01-02]" }
      assert.equal("domain-unhealthy", outcome, msg)
      assert.matches("restart it once; this policy never restarts it", msg)
    end)
  end)
end)
