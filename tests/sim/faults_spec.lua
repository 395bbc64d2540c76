-- SPDX-License-Identifier: Apache-2.0
-- Specs of the simulator's second version (contrib/imexsim): reconnect back-off, restarts as new
-- instances, clean shutdown that tells peers, SIGUSR1, the start-up states, -H, -i, and the fault
-- knobs; the DEGRADED and DOWN cases of docs/design.md ("IMEX facts the code relies on",
-- nvidia-imex-ctl). Every wait polls with a deadline; every daemon is stopped by PID in after_each.
-- Run: tests/run sim, or busted tests/sim (IMEXGUARD_BUILD=<build dir> for another build; default
-- build/).
local h = require("sim.helper")

-- The lines of `text` that contain the plain text `needle`, in order.
local function lines_with(text, needle)
  local out = {}
  for l in text:gmatch("[^\n]+") do
    if l:find(needle, 1, true) then
      out[#out + 1] = l
    end
  end
  return out
end

-- The letters of row `k` (0-based node ID) of the -N text matrix, as one string ("C   C   R").
local function matrix_row(text, k)
  return text:match("\n" .. string.format("%8d        ", k) .. "([^\n]*)\n")
end

-- Status of the pair from -> to (0-based IDs) in a decoded -N -j, or nil.
local function pair(t, from, to)
  local node = t and t.nodes[tostring(from)]
  return node and node.connections[tostring(to)] and node.connections[tostring(to)].status
end

describe("imexsim: back-off, restarts, shutdown, SIGUSR1, start-up states, fault knobs", function()
  local d
  after_each(h.cleanup_domains)

  describe("reconnect back-off", function()
    it("grows by the factor up to the cap, and starts over after a success", function()
      d = h.domain(2)
      d:configure(1, { IMEXSIM_RECONNECT_MS = 100, IMEXSIM_RECONNECT_FACTOR = 2,
        IMEXSIM_RECONNECT_MAX_MS = 400 })
      assert.are.equal(0, (d:start(1))) -- node 2 is not running: every attempt is refused
      local needle = "Next connection attempt for target node 1 - " .. d.addrs[2]
      assert.truthy(h.wait_for(function()
        return #lines_with(d:log(1), needle) >= 5
      end, 5), d:log(1))
      local delays, nexts = {}, lines_with(d:log(1), needle)
      for k = 1, 5 do
        delays[k] = tonumber(nexts[k]:match(" in (%d+) ms$"))
      end
      assert.are.same({ 100, 200, 400, 400, 400 }, delays)
      -- The attempts really are that far apart (log times in ms; lower bounds are exact, the
      -- upper bound is generous for a loaded machine).
      local attempts = lines_with(d:log(1), "Attempting connection for target node 1")
      for k = 1, 4 do
        local gap = h.log_ms(attempts[k + 1]) - h.log_ms(attempts[k])
        assert.is_true(gap >= delays[k] - 1, "gap " .. k .. ": " .. gap)
        assert.is_true(gap < delays[k] + 400, "gap " .. k .. ": " .. gap)
      end

      -- Node 2 comes up: connected, back-off and attempt count reset.
      assert.are.equal(0, (d:start(2)))
      assert.truthy(d:wait_status(1, "UP"))
      local first_instance = d:state(2).instance
      local before = #lines_with(d:log(1), needle)
      -- Node 2 dies uncleanly: node 1 shows RECOVERING until node 2 is back ...
      assert.is_true(d:stop(2, "KILL"))
      local t = h.wait_for(function()
        local j = d:domain_json(1)
        return pair(j, 0, 1) == "RECOVERING" and j
      end, 5)
      assert.truthy(t, "never RECOVERING")
      assert.are.equal("UNAVAILABLE", t.nodes["1"].status)
      assert.are.equal("DEGRADED", t.status)
      assert.truthy(h.wait_for(function()
        return #lines_with(d:log(1), needle) >= before + 2
      end, 5))
      local after = lines_with(d:log(1), needle)
      assert.are.equal("100", after[before + 1]:match(" in (%d+) ms$"))
      assert.are.equal("200", after[before + 2]:match(" in (%d+) ms$"))
      -- ... still RECOVERING (not NEVER_CONNECTED) while it is away, ...
      assert.are.equal("RECOVERING", pair(d:domain_json(1), 0, 1))
      -- ... and CONNECTED to the new instance once it is back.
      assert.are.equal(0, (d:start(2)))
      local second_instance = d:state(2).instance
      assert.are_not.equal(first_instance, second_instance)
      assert.truthy(d:wait_status(1, "UP", 5))
      assert.truthy(h.wait_for(function()
        return d:log(1):find("new instance " .. second_instance .. " (was " .. first_instance
          .. ")", 1, true)
      end, 5))
    end)

    it("rejects a factor below 1 with a one-line error naming the key", function()
      d = h.domain(1)
      d:configure(1, { IMEXSIM_RECONNECT_FACTOR = "0.5" })
      local rc, out = d:start(1)
      assert.are.equal(1, rc)
      assert.truthy(out:find("IMEXSIM_RECONNECT_FACTOR", 1, true), out)
      assert.is_nil(h.read(d:path(1, "imex.pid")))
    end)
  end)

  it("SIGTERM says goodbye: peers show RECOVERING, or DISCONNECTED with the knob; a kill does not",
    function()
      d = h.domain(3)
      d:configure(1, { IMEXSIM_GOODBYE_STATUS = "DISCONNECTED" })
      d:start_all()
      assert.truthy(d:wait_status(1, "UP"))
      assert.is_true(d:stop(3, "KILL")) -- no goodbye
      assert.is_true(d:stop(2, "TERM")) -- goodbye
      local t = h.wait_for(function()
        local j = d:domain_json(1)
        return j and pair(j, 0, 1) == "DISCONNECTED" and pair(j, 0, 2) == "RECOVERING" and j
      end, 5)
      assert.truthy(t, "node 1 never showed D and R")
      assert.are.equal("DEGRADED", t.status)
      assert.truthy(d:log(1):find("Node 1 - " .. d.addrs[2] .. " shut down cleanly: connection "
        .. "DISCONNECTED", 1, true))
      assert.is_nil(d:log(1):find("Node 2 - " .. d.addrs[3] .. " shut down cleanly", 1, true))
      assert.truthy(d:log(2):find("Shutting down (signal received), telling peers", 1, true))
      assert.are.equal("C   D   R", matrix_row(d:ctl(1, "-N"), 0))
      -- The default, IMEXSIM_GOODBYE_STATUS=RECOVERING: node 2 (restarted) sees node 1's goodbye.
      assert.are.equal(0, (d:start(2)))
      assert.truthy(h.wait_for(function()
        local j = d:domain_json(2)
        return j and pair(j, 1, 0) == "CONNECTED" and pair(j, 0, 1) == "CONNECTED"
      end, 5))
      assert.is_true(d:stop(1, "TERM"))
      assert.truthy(h.wait_for(function()
        return pair(d:domain_json(2), 1, 0) == "RECOVERING"
      end, 5))
      assert.truthy(d:log(2):find("Node 0 - " .. d.addrs[1] .. " shut down cleanly: connection "
        .. "RECOVERING", 1, true))
    end)

  it("SIGUSR1 restarts outgoing connections at most once per interval, without re-reading the "
    .. "node list", function()
    d = h.domain(2)
    d:configure(1, { IMEXSIM_USR1_INTERVAL_MS = 1500 })
    d:start_all()
    assert.truthy(d:wait_status(1, "UP"))
    local established = "Connection established to node 1 - " .. d.addrs[2]
    assert.are.equal(1, d:log_count(1, established))
    local before = d:state(1)
    -- A new list on disk: a third node, which the running daemon must not learn about.
    d:set_nodes(1, { d.addrs[1], d.addrs[2], d.net .. "3" })
    d:signal(1, "USR1")
    assert.truthy(h.wait_for(function()
      return d:log_count(1, established) == 2
    end, 5), d:log(1))
    assert.are.equal(1, d:log_count(1, "SIGUSR1: restarting outgoing connections"))
    -- Same node map: the handshake with node 2 (old list) still matches, nothing tried with .3.
    local t = assert(d:domain_json(2))
    assert.are.equal("UP", t.status)
    assert.are.equal("CONNECTED", pair(t, 0, 1))
    assert.is_nil(d:log(1):find("target node 2", 1, true))
    local now = d:state(1)
    assert.are.equal("2", now.nodes)
    assert.are.equal(before.map_hash, now.map_hash)
    assert.are.equal(before.instance, now.instance)
    -- -N shows the daemon's node map (2 entries), not the new file ...
    t = assert(d:domain_json(1, "-t 300"))
    assert.are.equal("CONNECTED", pair(t, 0, 1))
    assert.is_nil(t.nodes["2"])
    -- ... unless the ctl is told to read the file (IMEXSIM_CTL_NODE_LIST=file, the older guess):
    -- 3 entries; the daemon answers for the 2 it knows, .3 is INVALID.
    d:configure(1, { IMEXSIM_CTL_NODE_LIST = "file" })
    t = assert(d:domain_json(1, "-t 300"))
    assert.are.equal("CONNECTED", pair(t, 0, 1))
    assert.are.equal("INVALID", pair(t, 0, 2))
    assert.are.equal("UNAVAILABLE", t.nodes["2"].status)
    -- A second signal within the interval is ignored ...
    d:signal(1, "USR1")
    assert.truthy(h.wait_for(function()
      return d:log(1):find("SIGUSR1 ignored", 1, true)
    end, 5))
    assert.are.equal(1, d:log_count(1, "SIGUSR1: restarting"))
    assert.are.equal(2, d:log_count(1, established))
    -- ... one after it is not (signal again until it is taken; bounded).
    assert.truthy(h.wait_for(function()
      d:signal(1, "USR1")
      return d:log_count(1, "SIGUSR1: restarting") == 2
    end, 5, 0.2))
    local restarts = lines_with(d:log(1), "SIGUSR1: restarting")
    assert.is_true(h.log_ms(restarts[2]) - h.log_ms(restarts[1]) >= 1500)
  end)

  it("IMEXSIM_START_DELAY_MS: -q shows INITIALIZING, then WAITING_FOR_PEERS, then READY", function()
    d = h.domain(1)
    d:configure(1, { IMEXSIM_START_DELAY_MS = 1200 })
    d:start_all()
    local seen = {}
    assert.truthy(h.wait_for(function()
      local out = d:ctl(1, "-q -t 300")
      local state = out and out:match("^(%u[%u_]*)\n$")
      if state and seen[#seen] ~= state then
        seen[#seen + 1] = state
      end
      return state == "READY"
    end, 5, 0.02))
    assert.are.same({ "INITIALIZING", "WAITING_FOR_PEERS", "READY" }, seen)
    assert.are.equal("READY", d:state(1).state)
  end)

  it("IMEXSIM_EXIT_AT_START: the start fails with that status before forking", function()
    d = h.domain(2)
    d:configure(2, { IMEXSIM_EXIT_AT_START = 3 })
    local rc, out = d:start(2)
    assert.are.equal(3, rc)
    assert.truthy(out:find("IMEXSIM_EXIT_AT_START", 1, true), out)
    assert.truthy(d:log(2):find("[ERROR]", 1, true))
    assert.is_nil(h.read(d:path(2, "imex.pid")))
    assert.is_nil(h.read(d:path(2, "state")))
    local _, qrc = d:ctl(2, "-q")
    assert.are.equal(1, qrc)
  end)

  it("IMEXSIM_REFUSE_PEERS: nobody reaches its peer port, its own connections work", function()
    d = h.domain(3)
    d:configure(3, { IMEXSIM_REFUSE_PEERS = 1 })
    d:start_all()
    local t = h.wait_for(function()
      local j = d:domain_json(1)
      return j and pair(j, 0, 1) == "CONNECTED" and pair(j, 2, 0) == "CONNECTED"
        and pair(j, 2, 1) == "CONNECTED" and pair(j, 1, 0) == "CONNECTED" and j
    end, 5)
    assert.truthy(t)
    assert.are.equal("NEVER_CONNECTED", pair(t, 0, 2))
    assert.are.equal("NEVER_CONNECTED", pair(t, 1, 2))
    for id = 0, 2 do
      assert.are.equal("READY", t.nodes[tostring(id)].status)
    end
    assert.are.equal("DEGRADED", t.status)
    local text = d:ctl(1, "-N")
    assert.are.equal("C   C   N", matrix_row(text, 0))
    assert.are.equal("C   C   C", matrix_row(text, 2))
    assert.truthy(d:log(3):find("IMEXSIM_REFUSE_PEERS", 1, true))
  end)

  describe("the DEGRADED and DOWN cases of the ctl", function()
    it("only the peer port reachable between nodes: each sees itself READY, its peer "
      .. "UNAVAILABLE, DEGRADED", function()
      d = h.domain(2)
      d:configure(1, { IMEXSIM_HANG_CMD = "remote" })
      d:configure(2, { IMEXSIM_REFUSE_CMD = "remote" })
      d:start_all()
      for i = 1, 2 do
        local self, other = tostring(i - 1), tostring(2 - i)
        local t = h.wait_for(function()
          local j = d:domain_json(i, "-t 300")
          return j and pair(j, i - 1, 2 - i) == "CONNECTED" and j
        end, 5)
        assert.truthy(t, "node " .. i)
        assert.are.equal("READY", t.nodes[self].status)
        assert.are.equal("UNAVAILABLE", t.nodes[other].status)
        assert.are.equal("", t.nodes[other].version)
        assert.are.equal("INVALID", pair(t, 2 - i, i - 1))
        assert.are.equal("DEGRADED", t.status)
        -- The local ctl still gets answers.
        assert.are.equal("READY\n", (d:ctl(i, "-q -t 300")))
      end
    end)

    it("a command port that hangs for everyone: UNAVAILABLE to the others, -q times out", function()
      d = h.domain(2)
      d:configure(2, { IMEXSIM_HANG_CMD = 1 })
      d:start_all()
      local t = h.wait_for(function()
        local j = d:domain_json(1, "-t 300")
        return j and pair(j, 0, 1) == "CONNECTED" and j
      end, 5)
      assert.truthy(t)
      assert.are.equal("UNAVAILABLE", t.nodes["1"].status)
      assert.are.equal("DEGRADED", t.status)
      local out, rc = d:ctl(2, "-q -t 200")
      assert.are.equal(1, rc)
      assert.truthy(out:find("Deadline Exceeded", 1, true))
    end)

    it("a refused command port (IMEXSIM_REFUSE_CMD=1): UNAVAILABLE; its own ctl sees DOWN", function()
      d = h.domain(2)
      d:configure(2, { IMEXSIM_REFUSE_CMD = 1 })
      d:start_all()
      local t = h.wait_for(function()
        local j = d:domain_json(1)
        return j and pair(j, 0, 1) == "CONNECTED" and j
      end, 5)
      assert.truthy(t)
      assert.are.equal("UNAVAILABLE", t.nodes["1"].status)
      for _, c in pairs(t.nodes["1"].connections) do
        assert.are.equal("INVALID", c.status)
      end
      assert.are.equal("DEGRADED", t.status)
      assert.are.equal("DOWN", assert(d:domain_json(2)).status)
      local _, rc = d:ctl(2, "-q")
      assert.are.equal(1, rc)
    end)

    it("DOWN when no node is READY, though all are running and connected", function()
      d = h.domain(2)
      d:configure(1, { IMEXSIM_NEVER_READY = 1 })
      d:configure(2, { IMEXSIM_NEVER_READY = 1 })
      d:start_all()
      local t = h.wait_for(function()
        local j = d:domain_json(1)
        return j and pair(j, 0, 1) == "CONNECTED" and pair(j, 1, 0) == "CONNECTED" and j
      end, 5)
      assert.truthy(t)
      assert.are.equal("WAITING_FOR_PEERS", t.nodes["0"].status)
      assert.are.equal("WAITING_FOR_PEERS", t.nodes["1"].status)
      assert.are.equal("DOWN", t.status)
      assert.truthy(d:ctl(1, "-N"):find("\nDomain State: DOWN\n", 1, true))
    end)

    it("a node whose daemon is down still appears, UNAVAILABLE with INVALID connections", function()
      d = h.domain(3)
      assert.are.equal(0, (d:start(1)))
      assert.are.equal(0, (d:start(2)))
      local t = h.wait_for(function()
        local j = d:domain_json(1)
        return j and pair(j, 0, 1) == "CONNECTED" and pair(j, 1, 0) == "CONNECTED" and j
      end, 5)
      assert.truthy(t)
      assert.are.equal("UNAVAILABLE", t.nodes["2"].status)
      assert.are.equal(d.addrs[3], t.nodes["2"].host)
      assert.is_false(t.nodes["2"].changed)
      for id, c in pairs(t.nodes["2"].connections) do
        assert.are.equal("INVALID", c.status)
        assert.are.equal(d.addrs[tonumber(id) + 1], c.host)
      end
      assert.are.equal("NEVER_CONNECTED", pair(t, 0, 2))
      assert.are.equal("DEGRADED", t.status)
      assert.are.equal("I   I   I", matrix_row(d:ctl(1, "-N"), 2))
    end)
  end)

  describe("ctl options", function()
    it("-H: host names in -j (570: only with -H; 580: always, empty without) and in the text",
      function()
        d = h.domain(3)
        for i = 1, 3 do -- a 570 daemon: its ctl has the 570 format
          d:configure(i, { IMEXSIM_HOSTNAME = "sim-node-" .. i, IMEXSIM_VERSION = "570.172.08-sim" })
        end
        assert.are.equal(0, (d:start(1)))
        assert.are.equal(0, (d:start(2)))
        assert.truthy(h.wait_for(function()
          return pair(d:domain_json(1), 0, 1) == "CONNECTED"
        end, 5))
        local t = assert(d:domain_json(1, "-H"))
        assert.are.equal("sim-node-1", t.nodes["0"].hostName)
        assert.are.equal("sim-node-2", t.nodes["1"].hostName)
        assert.are.equal("N/A", t.nodes["2"].hostName)
        t = assert(d:domain_json(1))
        assert.is_nil(t.nodes["0"].hostName)
        assert.is_nil(t.nodes["2"].hostName)
        local text = d:ctl(1, "-N -H")
        assert.truthy(text:find("\nNode #0   - " .. string.format("%-16s", d.addrs[1])
          .. "- sim-node-1      - READY                - Version: 570.172.08-sim\n", 1, true), text)
        assert.truthy(text:find("\nNode #2   - " .. string.format("%-16s", d.addrs[3])
          .. "- N/A             - UNAVAILABLE          - Version: \n", 1, true), text)
        assert.is_nil(d:ctl(1, "-N"):find("sim-node-1", 1, true))
        -- The 580 ctl always has the field.
        d:configure(1, { IMEXSIM_HOSTNAME = "sim-node-1", IMEXSIM_VERSION = "570.172.08-sim",
          IMEXSIM_CTL_FORMAT = "580" })
        t = assert(d:domain_json(1))
        assert.are.equal("", t.nodes["0"].hostName)
        assert.are.equal("N/A", t.nodes["2"].hostName)
        t = assert(d:domain_json(1, "-H"))
        assert.are.equal("sim-node-2", t.nodes["1"].hostName)
      end)

    it("-i IP PORT: -q and -N reach the daemon given, not the one of the config", function()
      d = h.domain(2)
      assert.are.equal(0, (d:start(2)))
      -- Node 1's daemon is down; -i points at node 2's.
      local out, rc = d:ctl(1, "-i " .. d.addrs[2] .. " " .. d.cmd_port .. " -q")
      assert.are.equal(0, rc)
      assert.are.equal("READY\n", out)
      out, rc = d:ctl(1, "-i " .. d.addrs[2] .. " " .. d.cmd_port .. " -N -j")
      assert.are.equal(0, rc)
      local t = require("cjson").decode(out)
      local count = 0
      for _ in pairs(t.nodes) do
        count = count + 1
      end
      assert.are.equal(2, count)
      assert.are.equal("READY", t.nodes["1"].status)
      assert.are.equal("UNAVAILABLE", t.nodes["0"].status)
      assert.are.equal("DEGRADED", t.status)
      -- Without -i the local daemon (node 1) is down: the real ctl's DOWN answer.
      t = assert(d:domain_json(1))
      assert.are.equal("DOWN", t.status)
      assert.are.equal("0.0.0.0", t.nodes["0"].host)
      -- A wrong port: the gRPC error naming it, exit 1.
      out, rc = d:ctl(1, "-i " .. d.addrs[2] .. " " .. (d.cmd_port + 1) .. " -q")
      assert.are.equal(1, rc)
      assert.truthy(out:find("ipv4:" .. d.addrs[2] .. ":" .. (d.cmd_port + 1)
        .. ": Connection refused", 1, true), out)
    end)
  end)
end)
