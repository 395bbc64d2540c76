-- SPDX-License-Identifier: Apache-2.0
-- Specs of the IMEX simulator (contrib/imexsim) against the real output in tests/fixtures/ctl/
-- and the behaviour in docs/design.md ("IMEX facts the code relies on"). Run: tests/run sim, or
-- busted tests/sim (IMEXGUARD_BUILD=<build dir> for another build; default build/).
local cjson = require("cjson")
local h = require("sim.helper")

-- The node lines of the text output, the matrix and the rest, checked against the real layout of
-- up-18node-text.txt (legend, blank, timestamp, "Nodes:", node lines, blank, matrix, blank, state).
local function check_text(out, addrs, want_state, letters)
  local fx = {}
  for l in h.fixture("up-18node-text.txt"):gmatch("([^\n]*)\n") do
    fx[#fx + 1] = l
  end
  local lines = {}
  for l in out:gmatch("([^\n]*)\n") do
    lines[#lines + 1] = l
  end
  local n = #addrs
  assert.are.equal(9 + 1 + 2 + n + 1 + 1 + n + 2, #lines)
  for k = 1, 10 do -- legend and the blank line after it: identical to the real one
    assert.are.equal(fx[k], lines[k])
  end
  assert.truthy(lines[11]:match("^%d%d?/%d%d?/%d%d%d%d %d%d:%d%d:%d%d%.%d%d%d$"), lines[11])
  assert.are.equal("Nodes:", lines[12])
  -- Columns: the "- " separators sit where the fixture has them.
  local sep1 = fx[13]:find("- ", 1, true)
  local sep2 = fx[13]:find("- ", sep1 + 2, true)
  local sep3 = fx[13]:find("- V", 1, true)
  for k = 1, n do
    local l = lines[12 + k]
    assert.are.equal(string.format("Node #%d", k - 1), l:sub(1, #("Node #" .. (k - 1))))
    assert.are.equal("- " .. addrs[k], l:sub(sep1, sep1 + 1 + #addrs[k]))
    assert.are.equal("- ", l:sub(sep2, sep2 + 1))
    assert.are.equal("- Version: ", l:sub(sep3, sep3 + 10))
    assert.truthy(l:sub(sep2 + 2, sep3 - 1):match("^%u[%u_]*%s*$"))
  end
  assert.are.equal("", lines[13 + n])
  local header = lines[14 + n]
  assert.are.equal(fx[32]:sub(1, #header), header) -- the fixture's header, cut after n columns
  for k = 1, n do
    local row = lines[14 + n + k]
    assert.are.equal(fx[32 + k]:sub(1, 16), row:sub(1, 16)) -- row label of the same node ID
    if letters then
      assert.are.equal(letters[k], row:sub(17))
    end
  end
  assert.are.equal("", lines[15 + 2 * n])
  assert.are.equal("Domain State: " .. want_state, lines[16 + 2 * n])
end

describe("imexsim", function()
  local d
  after_each(h.cleanup_domains)

  it("brings a 2-node domain UP with the real -N -j shape, -N text layout and -q answer", function()
    d = h.domain(2)
    -- The sample is a 570 ctl's (no hostName): a 570 daemon's ctl prints its format.
    for i = 1, 2 do d:configure(i, { IMEXSIM_VERSION = "570.172.08-sim" }) end
    d:start_all()
    local t = d:wait_status(1, "UP")
    assert.truthy(t, "domain never UP")
    local fixture = cjson.decode(h.fixture("up-2node-570.json"))
    local ok, err = h.same_shape(t, fixture)
    assert(ok, err)
    for id = 0, 1 do
      local node = t.nodes[tostring(id)]
      assert.are.equal("READY", node.status)
      assert.are.equal(d.addrs[id + 1], node.host)
      assert.are.equal("570.172.08-sim", node.version)
      assert.is_true(node.changed)
      for peer = 0, 1 do
        local c = node.connections[tostring(peer)]
        assert.are.equal(d.addrs[peer + 1], c.host)
        assert.are.equal("CONNECTED", c.status)
        assert.is_true(c.changed)
      end
    end
    assert.truthy(t.timestamp:match("^%d%d?/%d%d?/%d%d%d%d %d%d:%d%d:%d%d%.%d%d%d$"))
    -- The same view from the other node.
    assert.are.equal("UP", d:domain_json(2).status)
    -- Indentation: one space per level, as in the fixture.
    local raw = d:ctl(1, "-N -j")
    assert.truthy(raw:match('^{\n "nodes": {\n  "0": {\n   "status": "READY",\n'))
    assert.truthy(raw:match('\n "status": "UP"\n}\n$'))

    local text, rc = d:ctl(1, "-N")
    assert.are.equal(0, rc)
    check_text(text, d.addrs, "UP", { "C   C", "C   C" })

    local q, qrc = d:ctl(2, "-q")
    assert.are.equal(0, qrc)
    assert.are.equal(h.fixture("q-ready.txt"), q)
    -- -i IP PORT reaches the same daemon without a config file.
    q, qrc = h.run(h.q(h.ctl) .. " -i " .. d.addrs[1] .. " " .. d.cmd_port .. " -q")
    assert.are.equal(0, qrc)
    assert.are.equal("READY\n", q)
  end)

  it("brings a 4-node domain UP, every node agreeing", function()
    d = h.domain(4)
    for i = 1, 4 do d:configure(i, { IMEXSIM_CTL_FORMAT = "570" }) end -- the sample's format
    d:start_all()
    local fixture = cjson.decode(h.fixture("up-2node-570.json"))
    for i = 1, 4 do
      local t = d:wait_status(i, "UP")
      assert.truthy(t, "node " .. i .. " never saw UP")
      local ok, err = h.same_shape(t, fixture)
      assert(ok, err)
      local count = 0
      for id, node in pairs(t.nodes) do
        count = count + 1
        assert.are.equal(d.addrs[tonumber(id) + 1], node.host)
        local conns = 0
        for _, c in pairs(node.connections) do
          conns = conns + 1
          assert.are.equal("CONNECTED", c.status)
        end
        assert.are.equal(4, conns)
      end
      assert.are.equal(4, count)
    end
    local text = d:ctl(3, "-N")
    local all_c = "C   C   C   C"
    check_text(text, d.addrs, "UP", { all_c, all_c, all_c, all_c })
    -- Node IDs are line indexes: node 3 (127.X.Y.3) is ID 2.
    assert.are.equal("2", d:state(3).node_id)
  end)

  it("refuses to start when its address is not in the node file (exit 1 before forking)", function()
    d = h.domain(2)
    d:set_nodes(2, { d.addrs[1], d.net .. "99" })
    local rc, out = d:start(2)
    assert.are.equal(1, rc)
    local msg = "No matching network interface found for any IP addresses in the node configuration file"
    assert.truthy(out:find(msg, 1, true), out)
    assert.truthy(h.read(d:path(2, "imex.log")):find("[ERROR]", 1, true))
    assert.truthy(h.read(d:path(2, "imex.log")):find(msg, 1, true))
    assert.is_nil(h.read(d:path(2, "imex.pid")))
    local _, qrc = d:ctl(2, "-q")
    assert.are.equal(1, qrc)
  end)

  it("refuses to start with an unreadable node file or a bad config value", function()
    d = h.domain(1)
    d:configure(1, { IMEX_NODE_CONFIG_FILE = d:path(1, "missing.cfg") })
    local rc, out = d:start(1)
    assert.are.equal(1, rc)
    assert.truthy(out:find("Failed to read node configuration file", 1, true), out)
    d:configure(1, { SERVER_PORT = "fifty" })
    rc, out = d:start(1)
    assert.are.equal(1, rc)
    assert.truthy(out:find("SERVER_PORT", 1, true), out)
    assert.is_nil(h.read(d:path(1, "imex.pid")))
  end)

  it("disables a pair whose node maps differ (!M!), and the domain is not UP", function()
    d = h.domain(2)
    d:set_nodes(2, { d.addrs[2], d.addrs[1] }) -- same set, other order: another node map
    d:start_all()
    local t = h.wait_for(function()
      local j = d:domain_json(1)
      return j and j.nodes["0"].connections["1"].status == "NODE_MAP_MISMATCH"
        and j.nodes["1"].connections["0"].status == "NODE_MAP_MISMATCH" and j
    end)
    assert.truthy(t, "mismatch never shown")
    assert.are.equal("DEGRADED", t.status)
    assert.are.equal("READY", t.nodes["0"].status)
    assert.are.equal("READY", t.nodes["1"].status)
    -- Several more handshakes (100 ms backoff, attempt #5 is logged): still never CONNECTED.
    assert.truthy(h.wait_for(function()
      return h.read(d:path(1, "imex.log")):find("attempt #5", 1, true)
    end))
    local j = d:domain_json(1)
    assert.are.equal("NODE_MAP_MISMATCH", j.nodes["0"].connections["1"].status)
    assert.are.equal("DEGRADED", j.status)
    assert.is_nil(h.read(d:path(1, "imex.log")):find("Connection established", 1, true))
    local text = d:ctl(1, "-N")
    check_text(text, d.addrs, "DEGRADED", { "C   !M!", "!M! C" })
    assert.truthy(h.read(d:path(1, "imex.log")):find("Node map mismatch", 1, true))
    assert.truthy(h.read(d:path(2, "imex.log")):find("Node map mismatch", 1, true))
  end)

  -- C32 (docs/design.md, "Field cases"): job 1 ran n1 and n2 with {n1, n2}; job 2 restarted n2 with
  -- {n2, n3} while n1 idled; job 3 restarts n2 with {n1, n2} again. Each end's daemon records the
  -- mismatch, and AWS's PCS guide says the block stays until the ends restart with one list.
  -- `knob`: the extra config.cfg keys of every node; returns the domain after job 3's restart.
  local function c32(knob)
    d = h.domain(3)
    local a = d.addrs
    for i = 1, 3 do
      d:configure(i, knob)
    end
    d:set_nodes(1, { a[1], a[2] })
    d:set_nodes(2, { a[1], a[2] })
    assert.is_true(d:start(1) == 0 and d:start(2) == 0)
    assert.truthy(d:wait_status(1, "UP"), "job 1 never UP")
    d:set_nodes(2, { a[2], a[3] }) -- job 2 on n2 and n3
    d:set_nodes(3, { a[2], a[3] })
    assert.is_true(d:stop(2))
    assert.is_true(d:start(2) == 0 and d:start(3) == 0)
    assert.truthy(h.wait_for(function()
      local j = d:domain_json(1)
      return j and j.nodes["0"].connections["1"].status == "NODE_MAP_MISMATCH"
    end), "n1 never saw the mismatch with n2's {n2, n3}")
    d:set_nodes(2, { a[1], a[2] }) -- job 3: n2 restarts with n1's list, n1 is current
    assert.is_true(d:stop(2))
    assert.is_true(d:start(2) == 0)
    return d
  end

  -- Both ends' views of the pair n1 - n2 in n1's ctl, or nil.
  local function pair12()
    local j = d:domain_json(1)
    if not (j and j.nodes["1"]) then return nil end
    return j.nodes["0"].connections["1"].status, j.nodes["1"].connections["0"].status, j
  end

  it("keeps a node map mismatch after one end restarts with a matching list (C32), until both did", function()
    c32()
    -- both ends show the stale mismatch, over many handshakes of n2's new instance
    local log0 = d:log_count(2, "Attempting connection for target node 0")
    assert.truthy(h.wait_for(function()
      local x, y = pair12()
      return x == "NODE_MAP_MISMATCH" and y == "NODE_MAP_MISMATCH"
        and d:log_count(2, "Attempting connection for target node 0") >= log0 + 4
    end), "the pair did not stay mismatched on both ends")
    local x, y, j = pair12()
    assert.are.equal("NODE_MAP_MISMATCH", x)
    assert.are.equal("NODE_MAP_MISMATCH", y)
    assert.are.equal("DEGRADED", j.status)
    assert.truthy(d:log(1):find("blocked until both ends restart", 1, true))
    -- SIGUSR1 (a new handshake, no new instance) does not clear it
    d:signal(1, "USR1")
    assert.truthy(h.wait_for(function() return d:log_count(1, "SIGUSR1: restarting") == 1 end))
    local n_att = d:log_count(1, "Attempting connection for target node 1")
    assert.truthy(h.wait_for(function()
      return d:log_count(1, "Attempting connection for target node 1") >= n_att + 2
    end))
    assert.are.equal("NODE_MAP_MISMATCH", (pair12()))
    -- n1's restart too: now both ends are new instances with one list
    assert.is_true(d:stop(1))
    assert.is_true(d:start(1) == 0)
    assert.truthy(d:wait_status(1, "UP"), "never UP after both ends restarted")
  end)

  it("IMEXSIM_MISMATCH_CLEARS=one: the pair recovers once one end restarts with a matching list", function()
    c32({ IMEXSIM_MISMATCH_CLEARS = "one" })
    assert.truthy(d:wait_status(1, "UP"), "never UP after n2's restart with n1's list")
    assert.is_nil(d:log(1):find("blocked until both ends restart", 1, true))
  end)

  it("shows a version mismatch as !V!", function()
    d = h.domain(2)
    d:configure(2, { IMEXSIM_VERSION = "580.65.06-sim" })
    d:start_all()
    local t = h.wait_for(function()
      local j = d:domain_json(1)
      return j and j.nodes["0"].connections["1"].status == "VERSION_MISMATCH" and j
    end)
    assert.truthy(t)
    assert.are.equal("580.65.06-sim", t.nodes["1"].version)
    assert.are.equal("DEGRADED", t.status)
    assert.truthy(d:ctl(1, "-N"):find("\n       0        C   !V!\n", 1, true))
  end)

  it("reports DEGRADED with a killed node UNAVAILABLE and its connections INVALID", function()
    d = h.domain(3)
    d:start_all()
    assert.truthy(d:wait_status(1, "UP"))
    assert.is_true(d:stop(3, "KILL"))
    local t = d:wait_status(1, "DEGRADED")
    assert.truthy(t)
    local dead = t.nodes["2"]
    assert.are.equal("UNAVAILABLE", dead.status)
    assert.are.equal("", dead.version)
    assert.is_false(dead.changed)
    for _, c in pairs(dead.connections) do
      assert.are.equal("INVALID", c.status)
      assert.is_false(c.changed)
    end
    t = h.wait_for(function()
      local j = d:domain_json(2)
      return j and j.nodes["0"].connections["2"].status == "RECOVERING"
        and j.nodes["1"].connections["2"].status == "RECOVERING" and j
    end)
    assert.truthy(t, "peers never saw the connection lost")
    assert.are.equal("CONNECTED", t.nodes["0"].connections["1"].status)
    assert.are.equal("DEGRADED", t.status)
    local text = d:ctl(1, "-N")
    check_text(text, d.addrs, "DEGRADED", { "C   C   R", "C   C   R", "I   I   I" })
    assert.truthy(text:find("Node #2   - " .. d.addrs[3], 1, true))
    assert.truthy(text:find("UNAVAILABLE", 1, true))
  end)

  it("with the local daemon down: -q exits 1 with the gRPC error, -N -j prints DOWN", function()
    d = h.domain(2)
    d:configure(1, { IMEXSIM_CTL_FORMAT = "570" }) -- the unconfigured sample has no hostName
    assert.are.equal(0, d:start(2))
    local out, rc = d:ctl(1, "-q")
    assert.are.equal(1, rc)
    assert.are.equal("Query Status returned error code: 14 - failed to connect to all addresses; "
      .. "last error: UNKNOWN: ipv4:" .. d.addrs[1] .. ":" .. d.cmd_port .. ": Connection refused\n", out)
    local t = assert(d:domain_json(1))
    local fixture = cjson.decode(h.fixture("down-unconfigured.json"))
    local ok, err = h.same_shape(t, fixture)
    assert(ok, err)
    fixture.timestamp, t.timestamp = nil, nil
    assert.are.same(fixture, t)
    out, rc = d:ctl(1, "-N -j")
    assert.truthy(out:find('"status": "DOWN"', 1, true))
    assert.are.equal(0, rc)
    -- Node 2 (up) sees node 1 UNAVAILABLE, NEVER_CONNECTED from its side.
    t = assert(d:domain_json(2))
    assert.are.equal("DEGRADED", t.status)
    assert.are.equal("UNAVAILABLE", t.nodes["0"].status)
    assert.are.equal("NEVER_CONNECTED", t.nodes["1"].connections["0"].status)
  end)

  it("ctl exits 255 when the node file cannot be read", function()
    d = h.domain(1)
    d:configure(1, { IMEX_NODE_CONFIG_FILE = d:path(1, "missing.cfg") })
    for _, args in ipairs({ "-q", "-N -j", "-N" }) do
      local out, rc = d:ctl(1, args)
      assert.are.equal(255, rc)
      assert.truthy(out:find("Failed to read node configuration file", 1, true), out)
    end
    -- A directory is unreadable as a node file even for root.
    d:configure(1, { IMEX_NODE_CONFIG_FILE = d:path(1) })
    local out, rc = d:ctl(1, "-N -j")
    assert.are.equal(255, rc)
    assert.truthy(out:find("Failed to read node configuration file", 1, true))
  end)

  it("restarting a node is a new instance; peers reconnect and the domain is UP again", function()
    d = h.domain(3)
    d:start_all()
    assert.truthy(d:wait_status(1, "UP"))
    local before = d:state(2).instance
    assert.is_true(d:stop(2, "TERM")) -- clean shutdown, exit 0
    assert.is_nil(h.read(d:path(2, "imex.pid")))
    local t = d:wait_status(1, "DEGRADED")
    assert.truthy(t)
    assert.are.equal("UNAVAILABLE", t.nodes["1"].status)
    assert.are.equal(0, (d:start(2)))
    local after = d:state(2).instance
    assert.are_not.equal(before, after)
    assert.truthy(d:wait_status(1, "UP"))
    assert.truthy(d:wait_status(3, "UP"))
    assert.truthy(h.wait_for(function()
      local want = "new instance " .. after .. " (was " .. before .. ")"
      return h.read(d:path(1, "imex.log")):find(want, 1, true)
    end))
  end)

  it("runs in the foreground with DAEMONIZE=0, logs SIGHUP and exits 0 on SIGTERM", function()
    d = h.domain(1)
    d:configure(1, { DAEMONIZE = 0 })
    local pid = d:start_foreground(1)
    assert.truthy(pid)
    assert.are.equal(pid, tonumber(h.read(d:path(1, "imex.pid"))))
    assert.truthy(d:wait_status(1, "UP")) -- a single node is a whole domain
    os.execute("kill -HUP " .. pid)
    assert.truthy(h.wait_for(function()
      return h.read(d:path(1, "imex.log")):find("SIGHUP", 1, true)
    end))
    assert.are.equal("READY\n", (d:ctl(1, "-q")))
    assert.is_true(d:stop(1, "TERM"))
    assert.truthy(h.read(d:path(1, "imex.log")):find("Exiting", 1, true))
  end)
  describe("fault knobs", function()
    it("IMEXSIM_NEVER_READY: -q shows WAITING_FOR_PEERS, the domain is DEGRADED", function()
      d = h.domain(2)
      d:configure(2, { IMEXSIM_NEVER_READY = 1 })
      d:start_all()
      assert.are.equal("WAITING_FOR_PEERS\n", (d:ctl(2, "-q")))
      local t = h.wait_for(function()
        local j = d:domain_json(1)
        return j and j.nodes["0"].connections["1"].status == "CONNECTED" and j
      end)
      assert.truthy(t)
      assert.are.equal("WAITING_FOR_PEERS", t.nodes["1"].status)
      assert.are.equal("DEGRADED", t.status)
      assert.are.equal("READY", d:state(1).state)
      assert.are.equal("WAITING_FOR_PEERS", d:state(2).state)
    end)

    it("IMEXSIM_START_DELAY_MS: INITIALIZING first, READY later", function()
      d = h.domain(1)
      d:configure(1, { IMEXSIM_START_DELAY_MS = 1500 })
      d:start_all()
      assert.are.equal("INITIALIZING\n", (d:ctl(1, "-q")))
      assert.truthy(h.wait_for(function()
        return d:ctl(1, "-q") == "READY\n"
      end, 5))
    end)

    it("IMEXSIM_HANG_CMD: the ctl times out after -t MS, -N shows the node UNAVAILABLE", function()
      d = h.domain(2)
      d:configure(2, { IMEXSIM_HANG_CMD = 1 })
      d:start_all()
      local out, rc = d:ctl(2, "-q -t 200")
      assert.are.equal(1, rc)
      assert.are.equal("Query Status returned error code: 4 - Deadline Exceeded\n", out)
      local t = h.wait_for(function()
        local j = d:domain_json(1)
        return j and j.nodes["0"].connections["1"].status == "CONNECTED" and j
      end)
      assert.truthy(t)
      assert.are.equal("UNAVAILABLE", t.nodes["1"].status)
      assert.are.equal("DEGRADED", t.status)
    end)

    it("IMEXSIM_DROP_PEERS: the pair stays NEVER_CONNECTED", function()
      d = h.domain(3)
      d:configure(1, { IMEXSIM_DROP_PEERS = "2" })
      d:start_all()
      local t = h.wait_for(function()
        local j = d:domain_json(2)
        return j and j.nodes["0"].connections["1"].status == "CONNECTED"
          and j.nodes["1"].connections["0"].status == "CONNECTED" and j
      end)
      assert.truthy(t)
      assert.are.equal("NEVER_CONNECTED", t.nodes["0"].connections["2"].status)
      assert.are.equal("NEVER_CONNECTED", t.nodes["2"].connections["0"].status)
      assert.are.equal("CONNECTED", t.nodes["2"].connections["1"].status)
      assert.are.equal("DEGRADED", t.status)
    end)

    it("IMEXSIM_CRASH_AFTER_MS: the daemon dies uncleanly, peers see RECOVERING", function()
      d = h.domain(2)
      d:configure(2, { IMEXSIM_CRASH_AFTER_MS = 700 })
      d:start_all()
      local pid = d.pids[2]
      assert.truthy(h.wait_for(function()
        return not h.alive(pid)
      end, 5))
      assert.truthy(h.read(d:path(2, "imex.pid")), "a crash leaves its PID file behind")
      local t = h.wait_for(function()
        local j = d:domain_json(1)
        return j and j.nodes["0"].connections["1"].status == "RECOVERING" and j
      end)
      assert.truthy(t)
      assert.are.equal("UNAVAILABLE", t.nodes["1"].status)
    end)
  end)

  it("runs as the daemon when called as imexsim -c CONFIG; one 'starting' log line per start", function()
    d = h.domain(1)
    local out, rc = h.run(h.q(h.build .. "/imexsim") .. " -c " .. h.q(d:path(1, "config.cfg")))
    assert.are.equal(0, rc, out)
    d.pids[1] = tonumber(h.read(d:path(1, "imex.pid")))
    d.all_pids[#d.all_pids + 1] = d.pids[1]
    assert.are.equal("READY\n", (d:ctl(1, "-q")))
    assert.are.equal("READY\n", (h.run(h.q(h.build .. "/imexsim") .. " ctl -c "
      .. h.q(d:path(1, "config.cfg")) .. " -q")))
    assert.is_true(d:stop(1))
    assert.are.equal(0, (d:start(1)))
    local n = 0
    for _ in h.read(d:path(1, "imex.log")):gmatch("[^\n]*starting[^\n]*") do
      n = n + 1
    end
    assert.are.equal(2, n)
  end)

  it("raises its soft open-file limit to what its node list needs (4 per node + 64)", function()
    d = h.domain(1)
    local list = { d.addrs[1] }
    for i = 2, 100 do list[i] = d.net .. i end -- 99 peers that never answer: the size is what counts
    d:set_nodes(1, list)
    local out, rc = h.run("(ulimit -S -n 200 && exec " .. h.q(h.imex) .. " -c "
      .. h.q(d:path(1, "config.cfg")) .. ")", true)
    assert.are.equal(0, rc, out)
    d.pids[1] = tonumber(h.read(d:path(1, "imex.pid")))
    d.all_pids[#d.all_pids + 1] = d.pids[1]
    local soft = h.read("/proc/" .. d.pids[1] .. "/limits"):match("Max open files%s+(%d+)")
    assert.are.equal(4 * 100 + 64, tonumber(soft))
  end)
end)
