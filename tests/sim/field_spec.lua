-- SPDX-License-Identifier: Apache-2.0
-- The field's faults (field cases C21, C22, C26, C27, C28 of docs/design.md, "Field cases"),
-- produced by the simulator under a real systemd user manager (tests/with-systemd;
-- contrib/simdomain.lua, one imexsim@NODE.service per node): a daemon started with another order, a
-- unit whose ExecStart names another config, a command port unreachable for remote clients, a stray
-- daemon outside the unit, a unit that hits its start limit. Each test asserts what
-- `nvidia-imex-ctl -N -j`, `-N` and `-q` show. Every wait polls with a deadline; every unit and
-- hand-started daemon is stopped (by PID for the latter) in after_each.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

-- A new domain of n nodes whose node files all list every node in order (not started).
local domain = simdomain.in_order

-- Status of the pair from -> to (0-based IDs) in a decoded -N -j, or nil.
local function pair(t, from, to)
  local node = t and t.nodes and t.nodes[tostring(from)]
  local c = node and node.connections[tostring(to)]
  return c and c.status
end

-- The IDs -> hosts of a decoded -N -j, as a list of hosts in ID order ({} when none).
local function hosts(t)
  local out = {}
  for id = 0, 255 do
    local node = t and t.nodes and t.nodes[tostring(id)]
    if not node then break end
    out[#out + 1] = node.host
  end
  return out
end

-- The letters of row `k` (0-based ID) of the -N text matrix ("C   !M! C"), or nil.
local function matrix_row(text, k)
  return text:match("\n" .. string.format("%8d        ", k) .. "([^\n]*)\n")
end

-- The "Node #k - ADDR - STATE" line of the -N text, as address and state, or nil.
local function text_node(text, k)
  return text:match("\nNode #" .. k .. " +%- (%S+) +%- (%u[%u_]*)")
end

describe("imexsim under systemd: the field's faults", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  -- Wait until `name`'s ctl -N -j satisfies pred(t); returns t or nil and the last answer.
  local function wait_json(name, pred, timeout, config)
    local last
    local t = simdomain.wait_until(function()
      last = d:ctl_json(name, config)
      return last and pred(last) and last
    end, timeout or 10)
    return t, last
  end

  describe("a daemon started with another order (same hosts)", function()
    it("has the IDs of its own file; its peers show !M!; its ctl keeps its IDs after the file "
      .. "is rewritten; one list everywhere after its restart: UP", function()
      d = domain(3)
      local a = d.addr
      d:write_node_list("n2", { "n2", "n1", "n3" })
      -- this spec is about the IDs each side shows; the old rule of the simulator lets n2's restart
      -- alone clear the mismatch (its default keeps it until both ends restart: C32, imexsim_spec)
      for _, n in ipairs({ "n1", "n2", "n3" }) do d:configure(n, { IMEXSIM_MISMATCH_CLEARS = "one" }) end
      assert(d:start())
      -- n1 holds n1, n2, n3: n2 is ID 1 there; the pairs with n2 are mismatched both ways.
      local t = wait_json("n1", function(j)
        return pair(j, 0, 1) == "NODE_MAP_MISMATCH" and pair(j, 1, 0) == "NODE_MAP_MISMATCH"
          and pair(j, 2, 1) == "NODE_MAP_MISMATCH" and pair(j, 1, 2) == "NODE_MAP_MISMATCH"
          and pair(j, 0, 2) == "CONNECTED"
          and pair(j, 2, 0) == "CONNECTED"
      end)
      assert.truthy(t, "n1 never showed the mismatch")
      assert.are.same({ a.n1, a.n2, a.n3 }, hosts(t))
      for id = 0, 2 do assert.are.equal("READY", t.nodes[tostring(id)].status) end
      assert.are.equal("CONNECTED", pair(t, 1, 1))
      assert.are.equal("DEGRADED", t.status)
      -- n2's own ctl: its own IDs (n2 is 0, n1 is 1), every peer mismatched.
      local t2 = assert(d:ctl_json("n2"))
      assert.are.same({ a.n2, a.n1, a.n3 }, hosts(t2))
      assert.are.equal("CONNECTED", pair(t2, 0, 0))
      assert.are.equal("NODE_MAP_MISMATCH", pair(t2, 0, 1))
      assert.are.equal("NODE_MAP_MISMATCH", pair(t2, 0, 2))
      assert.are.equal("DEGRADED", t2.status)
      -- The file is rewritten to the job's order (its mtime kept old, as by `cp -p`): the running
      -- daemon does not re-read it, and its ctl still shows the daemon's own IDs.
      d:write_node_list("n2", { "n1", "n2", "n3" })
      os.execute("touch -d '2000-01-01' " .. simdomain.quote(d:dir("n2") .. "/nodes_config.cfg"))
      t2 = assert(d:ctl_json("n2"))
      assert.are.same({ a.n2, a.n1, a.n3 }, hosts(t2))
      assert.are.equal("NODE_MAP_MISMATCH", pair(t2, 0, 1))
      local text = d:ctl("n2", "-N")
      assert.are.same({ a.n2, "READY" }, { text_node(text, 0) })
      assert.are.same({ a.n1, "READY" }, { text_node(text, 1) })
      assert.are.equal("C   !M! !M!", matrix_row(text, 0))
      assert.truthy(text:find("\nDomain State: DEGRADED\n", 1, true), text)
      assert.are.equal("READY\n", (d:ctl("n2", "-q")))
      text = d:ctl("n1", "-N")
      assert.are.equal("C   !M! C", matrix_row(text, 0))
      assert.are.equal("!M! C   !M!", matrix_row(text, 1))
      -- A restart reads the rewritten file: one list, one order everywhere.
      assert(d:systemctl("restart", d:unit("n2")))
      t = wait_json("n1", function(j) return j.status == "UP" end)
      assert.truthy(t, "never UP after the restart")
      assert.are.same({ a.n1, a.n2, a.n3 }, hosts(assert(d:ctl_json("n2"))))
    end)
  end)

  it("a peer holding another list: with IMEXSIM_CTL_CONNECTIONS=node, -N -j shows its own table "
    .. "(its IDs, its hosts, those absent from the local list included)", function()
    d = domain(3)
    local a = d.addr
    local absent = a.n1:gsub("%.%d+$", ".99")
    d:write_node_list("n3", { "n3", "n1", "n2", absent })
    assert(d:start())
    -- Default: n3's view under n1's IDs, matched by address; its extra host is not shown.
    local t = wait_json("n1", function(j)
      return pair(j, 2, 0) == "NODE_MAP_MISMATCH" and pair(j, 2, 1) == "NODE_MAP_MISMATCH"
        and pair(j, 0, 2) == "NODE_MAP_MISMATCH" and pair(j, 0, 1) == "CONNECTED"
    end)
    assert.truthy(t)
    assert.are.same({ "0", "1", "2" }, (function()
      local keys = {}
      for k in pairs(t.nodes["2"].connections) do keys[#keys + 1] = k end
      table.sort(keys)
      return keys
    end)())
    assert.are.equal(a.n3, t.nodes["2"].connections["2"].host)
    -- Node n3's own table: 4 entries, keyed by its IDs; ID 3 and host .99 are not in n1's list.
    d:configure("n1", { IMEXSIM_CTL_CONNECTIONS = "node" })
    t = assert(d:ctl_json("n1"))
    local c = t.nodes["2"].connections
    assert.are.same({ a.n3, a.n1, a.n2, absent },
      { c["0"].host, c["1"].host, c["2"].host, c["3"].host })
    assert.are.equal("CONNECTED", c["0"].status)
    assert.are.equal("NODE_MAP_MISMATCH", c["1"].status)
    assert.are.equal("NEVER_CONNECTED", c["3"].status)
    -- n1's own row is unchanged: its IDs are the map's.
    assert.are.equal(a.n2, t.nodes["0"].connections["1"].host)
    assert.are.equal("CONNECTED", pair(t, 0, 1))
    assert.are.equal("DEGRADED", t.status)
  end)

  it("a unit whose ExecStart names another config: the daemon reads only that config and its "
    .. "node file", function()
    d = domain(2)
    local a = d.addr
    local site = d:dir("n1") .. "/site"
    local cfg = site .. "/imex.cfg"
    -- The packaged config's node file lacks n1: a daemon that read it would refuse to start.
    d:write_node_list("n1", { "n2" })
    os.execute("mkdir -p " .. simdomain.quote(site))
    simdomain.write_file(site .. "/nodes.cfg", a.n1 .. "\n" .. a.n2 .. "\n")
    assert(d:use_config("n1", cfg, {
      IMEX_NODE_CONFIG_FILE = site .. "/nodes.cfg",
      LOG_FILE_NAME = site .. "/imex.log",
      IMEXSIM_HOSTNAME = "site-config",
    }))
    assert(d:start())
    assert.are.equal("active", d:prop("n1", "ActiveState"))
    local exec = d:prop("n1", "ExecStart")
    assert.truthy(exec:find("path=" .. d.build .. "/imexsim ;", 1, true), exec)
    assert.truthy(exec:find("argv[]=" .. d.build .. "/imexsim -c " .. cfg .. " ;", 1, true), exec)
    local t = wait_json("n1", function(j) return j.status == "UP" end, 10, cfg)
    assert.truthy(t, "the domain of the site config never came UP")
    assert.are.same({ a.n1, a.n2 }, hosts(t))
    assert(simdomain.wait_until(function()
      local out = d:ctl("n1", "-N -j -H", cfg)
      return out:find('"hostName": "site-config"', 1, true) and out
    end, 5), "the site config's host name is not shown")
    assert.are.equal("READY\n", (d:ctl("n1", "-q", cfg)))
    -- Its log is the site config's; the packaged log file was never written.
    local log = simdomain.read_file(site .. "/imex.log") or ""
    assert.truthy(log:find("starting, config " .. cfg, 1, true), log)
    assert.is_nil(simdomain.read_file(d:dir("n1") .. "/imex.log"))
    -- The packaged config's ctl reads the packaged node file, which n1's daemon never read.
    local text, rc = d:ctl("n1", "-N", d:dir("n1") .. "/config.cfg")
    assert.are.equal(0, rc)
    assert.are.same({ a.n1, "READY" }, { text_node(text, 0) })
  end)

  describe("a command port unreachable for remote clients (the peer port works)", function()
    -- Every node sees itself READY and its peers UNAVAILABLE with INVALID connections; its own
    -- connections are CONNECTED; DEGRADED (docs/design.md, "IMEX facts", The daemon). `self` is the
    -- node's 0-based ID.
    local function assert_config_fault(name, self, n)
      local t, last = wait_json(name, function(j)
        for to = 0, n - 1 do
          if pair(j, self, to) ~= "CONNECTED" then return false end
        end
        return true
      end)
      assert.truthy(t, name .. ": " .. tostring(last))
      for id = 0, n - 1 do
        local node = t.nodes[tostring(id)]
        assert.are.equal(id == self and "READY" or "UNAVAILABLE", node.status, name .. " " .. id)
        if id ~= self then
          assert.are.equal("", node.version)
          assert.are.equal("INVALID", pair(t, id, self))
        end
      end
      assert.are.equal("DEGRADED", t.status)
      local text = d:ctl(name, "-N")
      assert.are.equal(string.rep("C", n, "   "), matrix_row(text, self))
      assert.are.equal("I   I   I", matrix_row(text, (self + 1) % n))
      assert.truthy(text:find("\nDomain State: DEGRADED\n", 1, true), text)
      assert.are.equal("READY\n", (d:ctl(name, "-q")))
    end

    it("IMEX_CMD_BIND_INTERFACE_IP on loopback on every node (127.0.0.1, 127.0.0.2, ...)",
      function()
        d = domain(3)
        for i, name in ipairs(d.names) do
          d:configure(name, { IMEX_CMD_BIND_INTERFACE_IP = "127.0.0." .. i })
        end
        assert(d:start())
        for i, name in ipairs(d.names) do assert_config_fault(name, i - 1, 3) end
        -- A remote client finds nothing on the node's address: the real gRPC refusal.
        local out, rc = d:ctl("n1", "-i " .. d.addr.n2 .. " 50005 -q")
        assert.are_not.equal(0, rc)
        assert.truthy(out:find("error code: 14 - failed to connect to all addresses", 1, true)
          and out:find("Connection refused", 1, true), out)
      end)

    it("IMEXSIM_REFUSE_CMD=remote on every node (a firewall on the command port)", function()
      d = domain(3)
      for _, name in ipairs(d.names) do d:configure(name, { IMEXSIM_REFUSE_CMD = "remote" }) end
      assert(d:start())
      for i, name in ipairs(d.names) do assert_config_fault(name, i - 1, 3) end
    end)

    it("IMEX_CMD_ENABLED=0 on one node: UNAVAILABLE to the others; its own ctl cannot reach it",
      function()
        d = domain(2)
        d:configure("n2", { IMEX_CMD_ENABLED = 0 })
        assert(d:start())
        local t = wait_json("n1", function(j)
          return pair(j, 0, 1) == "CONNECTED" and pair(j, 0, 0) == "CONNECTED"
        end)
        assert.truthy(t)
        assert.are.equal("READY", t.nodes["0"].status)
        assert.are.equal("UNAVAILABLE", t.nodes["1"].status)
        assert.are.equal("INVALID", pair(t, 1, 0))
        assert.are.equal("DEGRADED", t.status)
        local out, rc = d:ctl("n2", "-q")
        assert.are.equal(1, rc)
        assert.truthy(out:find("ipv4:" .. d.addr.n2 .. ":50005: Connection refused", 1, true), out)
        t = assert(d:ctl_json("n2"))
        assert.are.equal("DOWN", t.status)
        assert.are.same({ "0.0.0.0" }, hosts(t))
        assert.are.equal("active", d:prop("n2", "ActiveState"))
      end)
  end)

  it("a stray daemon outside the unit holds the command port: the ctl answers READY while the "
    .. "unit is inactive; the unit cannot start", function()
    d = domain(2)
    assert(d:start({ "n2" }))
    assert(d:systemctl("enable", d:unit("n1")))
    local pid, scope = d:start_stray("n1")
    assert.truthy(pid, scope)
    assert.are.equal("inactive", d:prop("n1", "ActiveState"))
    assert.are.equal("enabled", d:prop("n1", "UnitFileState"))
    assert.are.equal("0", d:prop("n1", "MainPID"))
    assert.are.equal("READY\n", (d:ctl("n1", "-q")))
    local t = wait_json("n1", function(j) return j.status == "UP" end)
    assert.truthy(t, "the stray never meshed with n2")
    assert.truthy(simdomain.read_file("/proc/" .. pid .. "/cmdline"):find("-c\0" .. d:dir("n1")
      .. "/config.cfg", 1, true))
    -- It runs in a scope of its own, not in the unit's control group.
    local cgroup = simdomain.read_file("/proc/" .. pid .. "/cgroup")
    assert.truthy(cgroup:find("/" .. scope, 1, true), cgroup)
    assert.is_nil(cgroup:find(d:unit("n1"), 1, true))
    -- The unit's own daemon finds the ports taken and fails before forking.
    local ok = d:systemctl("start", d:unit("n1"))
    assert.is_false(ok)
    assert.are.equal("failed", d:prop("n1", "ActiveState"))
    assert.are.equal("exit-code", d:prop("n1", "Result"))
    assert.truthy(simdomain.alive(pid))
    assert.are.equal("READY\n", (d:ctl("n1", "-q")))
    d:stop_strays()
    assert.is_false(simdomain.alive(pid))
    local out, rc = d:ctl("n1", "-q")
    assert.are.equal(1, rc, out)
  end)

  describe("a unit that hits its start limit", function()
    -- Enabling a unit reloads the manager, which resets the start counters of loaded units
    -- (systemd 252): every node is enabled before the node under test is started.
    local limit = {
      Unit = { StartLimitBurst = 3, StartLimitIntervalSec = 60 },
      Service = { Restart = "on-failure", RestartSec = "100ms" },
    }

    it("quick restarts of a healthy daemon: the one past StartLimitBurst fails, start-limit-hit",
      function()
        d = domain(2)
        assert(d:unit_options("n1", limit))
        assert.are.equal("3", d:prop("n1", "StartLimitBurst"))
        assert(d:start({ "n2", "n1" }))
        assert(d:systemctl("restart", d:unit("n1")))
        assert(d:systemctl("restart", d:unit("n1")))
        assert.are.equal(3, d:starts("n1"))
        local ok, out = d:systemctl("restart", d:unit("n1"))
        assert.is_false(ok)
        assert.truthy(out:find("attempted too often", 1, true), out)
        assert.are.equal("start-limit-hit", d:prop("n1", "Result"))
        assert.are.equal("failed", d:prop("n1", "ActiveState"))
        assert.are.equal(3, d:starts("n1"))
        local qout, rc = d:ctl("n1", "-q")
        assert.are.equal(1, rc, qout)
        local t = assert(d:ctl_json("n2"))
        assert.are.equal("READY", t.nodes["1"].status)
        assert.are.equal("UNAVAILABLE", t.nodes["0"].status)
        assert.are.equal("DEGRADED", t.status)
        assert.truthy(d:ctl("n2", "-N"):find("\nDomain State: DEGRADED\n", 1, true))
        -- reset-failed clears it.
        assert(d:systemctl("reset-failed", d:unit("n1")))
        assert(d:systemctl("start", d:unit("n1")))
        assert.are.equal("READY\n", (d:ctl("n1", "-q")))
      end)

    it("a daemon that exits soon after its start (IMEXSIM_EXIT_AFTER_MS, Restart=always) is "
      .. "restarted until start-limit-hit", function()
      d = domain(2)
      assert(d:unit_options("n1", {
        Unit = limit.Unit,
        Service = { Restart = "always", RestartSec = "100ms" },
      }))
      d:configure("n1", { IMEXSIM_EXIT_AFTER_MS = 300, IMEXSIM_EXIT_STATUS = 0 })
      assert(d:start({ "n2", "n1" }))
      assert.truthy(simdomain.wait_until(function()
        return d:prop("n1", "Result") == "start-limit-hit"
      end, 10), d:prop("n1", "Result"))
      assert.are.equal("failed", d:prop("n1", "ActiveState"))
      assert.are.equal(3, d:starts("n1"))
      local log = simdomain.read_file(d:dir("n1") .. "/imex.log")
      local _, exits = log:gsub("Exiting with status 0 %(IMEXSIM_EXIT_AFTER_MS%)", "")
      assert.are.equal(3, exits)
      local out, rc = d:ctl("n1", "-q")
      assert.are.equal(1, rc, out)
    end)

    it("a daemon that fails before forking (IMEXSIM_EXIT_AT_START, Restart=on-failure): the "
      .. "restarts stop at StartLimitBurst; Result stays the failure's (exit-code)", function()
      -- systemd 252 keeps the first failure's Result when the start limit refuses a later start:
      -- start-limit-hit shows only when the run before ended in success.
      d = domain(2)
      assert(d:unit_options("n1", limit))
      d:configure("n1", { IMEXSIM_EXIT_AT_START = 1 })
      assert.is_nil((d:start({ "n2", "n1" })))
      assert.truthy(simdomain.wait_until(function()
        return d:prop("n1", "NRestarts") == "3" and d:prop("n1", "ActiveState") == "failed"
      end, 10), d:prop("n1", "NRestarts"))
      assert.are.equal("exit-code", d:prop("n1", "Result"))
      assert.are.equal(3, d:starts("n1"))
      -- A start is refused without running the daemon, until reset-failed.
      assert.is_false((d:systemctl("start", d:unit("n1"))))
      assert.are.equal(3, d:starts("n1"))
      d:configure("n1", { IMEXSIM_EXIT_AT_START = false })
      assert(d:systemctl("reset-failed", d:unit("n1")))
      assert(d:systemctl("start", d:unit("n1")))
      assert.are.equal("READY\n", (d:ctl("n1", "-q")))
    end)
  end)
end)
