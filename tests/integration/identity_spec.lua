-- SPDX-License-Identifier: Apache-2.0
-- Integration (field cases C21, C22, C28 of docs/design.md): the prolog, plan and status under a
-- real systemd user manager (tests/with-systemd) on the simulator (contrib/simdomain.lua): a
-- command port bound to loopback or refused for remote clients (C22: every prolog ends config-fault
-- within a few polls, no peer blamed), a daemon started with the same nodes in another order (C21:
-- stale, restarted, named), and a unit whose ExecStart names another config (C28). Every wait polls
-- a condition with a deadline; every domain is destroyed in after_each.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")
local cjson = require("cjson")
local CONFIG_FAULT = require("imexguard.outcomes").exit_code("config-fault") -- one source of exit codes

-- A new domain of n nodes whose node files all list every node in order (not started).
-- These specs restart one end of a node-map mismatch (C21's stale node, a start limit) and are about
-- that end: the simulator's old rule (either end's restart clears the mismatch), not its default
-- (both ends must restart: C32, tests/sim/converge_spec.lua).
local function domain(n) return simdomain.in_order(n, simdomain.MISMATCH_CLEARS_ONE) end

-- Wall-clock seconds with a fraction (date +%s.%N).
local function now()
  local p = io.popen("date +%s.%N")
  local t = tonumber(p:read("a"))
  p:close()
  return t
end

-- Run one command on one node; returns {status, output, outcome}.
local function on(d, name, command, job, nodelist, args)
  return d:run_all({ command = command, job = job, nodelist = nodelist, names = { name }, args = args })[name]
end

-- Wait until node `name`'s ctl shows `pred` (a decoded -N -j), within 10 s.
local function wait_ctl(d, name, pred)
  return simdomain.wait_until(function()
    local t = d:ctl_json(name)
    return t and pred(t) and t
  end, 10)
end

-- Every node READY in its own view with its own row CONNECTED, every peer UNAVAILABLE (C22).
local function settled_fault(d, n)
  for i, name in ipairs(d.names) do
    local ok = wait_ctl(d, name, function(t)
      local me = t.nodes[tostring(i - 1)]
      if not me or me.status ~= "READY" then return false end
      for id = 0, n - 1 do
        if me.connections[tostring(id)].status ~= "CONNECTED" then return false end
      end
      return true
    end)
    assert.truthy(ok, name .. " never showed the configuration-fault state")
  end
end

describe("ordered identity, the unit's config, configuration faults under systemd", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  describe("C22: the command port is unreachable for the other nodes", function()
    local function assert_config_fault(res, took, names, key)
      for _, name in ipairs(names) do
        local r = res[name]
        assert.are.equal("config-fault", r.outcome, name .. ": " .. r.output)
        assert.are.equal(CONFIG_FAULT, r.status, name)
        assert.truthy(r.output:find("not a peer fault", 1, true), r.output)
        assert.is_nil(r.output:find("peers are not", 1, true), r.output)
        assert.is_nil(r.output:find("peers-unhealthy", 1, true), r.output)
        if key then assert.truthy(r.output:find("here: [^;]*" .. key), r.output) end
      end
      -- the default health_timeout is 60 s: a few polls (0.1 s apart) plus the start, not the timeout
      assert.is_true(took < 20, string.format("took %.1f s", took))
    end

    it("IMEX_CMD_BIND_INTERFACE_IP on loopback on every node of three: every prolog ends config-fault "
      .. "within a few polls, no peer blamed; plan and status flag the config before a job", function()
      d = domain(3)
      for i, name in ipairs(d.names) do
        d:configure(name, { IMEX_CMD_BIND_INTERFACE_IP = "127.0.0." .. i })
      end
      assert(d:start())
      settled_fault(d, 3)
      local plan = on(d, "n1", "plan", 40, "n[1-3]")
      assert.are.equal("config-fault", plan.outcome, plan.output)
      assert.are.equal(CONFIG_FAULT, plan.status)
      assert.truthy(plan.output:find("config fault: [^\n]*IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1"), plan.output)
      local t0 = now()
      local res = d:prologs { job = 41, nodelist = "n[1-3]" }
      assert_config_fault(res, now() - t0, d.names, "IMEX_CMD_BIND_INTERFACE_IP=127%.0%.0%.%d")
      local st = on(d, "n2", "status", 41, "n[1-3]")
      assert.are.equal("config-fault", st.outcome, st.output)
      assert.truthy(st.output:find("this node [^\n]*: ID 1 in the daemon's node map; ID 1 in the node list"),
        st.output)
      assert.truthy(st.output:find("config fault: [^\n]*127.0.0.2"), st.output)
    end)

    it("a firewall on the command port (IMEXSIM_REFUSE_CMD=remote), two nodes: config-fault, the generic "
      .. "causes named; with on_config_fault = \"warn\" exit 0", function()
      d = domain(2)
      for _, name in ipairs(d.names) do d:configure(name, { IMEXSIM_REFUSE_CMD = "remote" }) end
      assert(d:start())
      settled_fault(d, 2)
      local t0 = now()
      local res = d:prologs { job = 42, nodelist = "n[1-2]" }
      assert_config_fault(res, now() - t0, d.names)
      assert.truthy(res.n1.output:find("firewalled", 1, true), res.n1.output)
      local warn = on(d, "n1", "prolog", 43, "n[1-2]", "--set on_config_fault=warn")
      assert.are.equal("config-fault", warn.outcome, warn.output)
      assert.are.equal(0, warn.status)
    end)
  end)

  describe("C21: the same nodes in another order", function()
    it("a daemon started with {n2, n1, n3} while the file and the job say {n1, n2, n3}: status names "
      .. "it, the prolog restarts it and says so, then UP", function()
      d = domain(3)
      d:write_node_list("n1", { "n2", "n1", "n3" })
      assert(d:start())
      -- the file is rewritten to the job's order with an old mtime (cp -p): only the ctl can tell
      d:write_node_list("n1", { "n1", "n2", "n3" })
      os.execute("touch -d '2000-01-01' " .. simdomain.quote(d:dir("n1") .. "/nodes_config.cfg"))
      assert(wait_ctl(d, "n1", function(t) return t.nodes["0"].host == d.addr.n2 end))
      local st = on(d, "n1", "status --json", 50, "n[1-3]")
      assert.are.equal("domain-unhealthy", st.outcome, st.output)
      local doc = cjson.decode(st.output:match("(%b{})"))
      assert.are.equal(1, doc.self_id)
      assert.are.equal("reordered", doc.order.kind)
      assert.truthy(doc.message:find("same nodes, another order", 1, true), doc.message)
      local plan = on(d, "n1", "plan", 50, "n[1-3]")
      assert.truthy(plan.output:find("would restart [^\n]*same nodes, another order"), plan.output)
      local before = d:starts("n1")
      local r = on(d, "n1", "prolog", 50, "n[1-3]")
      assert.are.equal("ok", r.outcome, r.output)
      assert.truthy(r.output:find("same nodes, another order", 1, true), r.output)
      assert.are.equal(before + 1, d:starts("n1"))
      -- the others were current: no restart, and the domain is one ordered list now
      local again = d:prologs { job = 51, nodelist = "n[1-3]", names = { "n2", "n3" } }
      for _, name in ipairs({ "n2", "n3" }) do
        assert.are.equal("ok", again[name].outcome, again[name].output)
        assert.are.equal(1, d:starts(name))
      end
    end)
  end)

  describe("C28: the unit's ExecStart names another config", function()
    local function given()
      d = domain(2)
      local site = d:dir("n1") .. "/site"
      os.execute("mkdir -p " .. simdomain.quote(site))
      simdomain.write_file(site .. "/nodes.cfg", d.addr.n1 .. "\n")
      assert(d:use_config("n1", site .. "/imex.cfg", { IMEX_NODE_CONFIG_FILE = site .. "/nodes.cfg",
        LOG_FILE_NAME = site .. "/imex.log" }))
      assert(d:start())
      return site
    end

    it("a setting imex_config naming the packaged config: config-mismatch naming both, nothing changed",
      function()
        local site = given()
        local packaged = d:nodes_file("n1")
        local r = on(d, "n1", "prolog", 60, "n[1-2]")
        assert.are.equal("config-mismatch", r.outcome, r.output)
        assert.are.equal(require("imexguard.outcomes").exit_code("config-mismatch"), r.status)
        assert.truthy(r.output:find(site .. "/imex.cfg", 1, true), r.output)
        assert.truthy(r.output:find(d:dir("n1") .. "/config.cfg", 1, true), r.output)
        assert.are.equal(packaged, d:nodes_file("n1"))
        assert.are.equal(d.addr.n1 .. "\n", simdomain.read_file(site .. "/nodes.cfg"))
      end)

    it("imex_config at its default: the prolog writes the unit's node list and asks the ctl with its -c",
      function()
        local site = given()
        local packaged = d:nodes_file("n1")
        local r = on(d, "n1", "prolog", 61, "n[1-2]", "--set imex_config=/etc/nvidia-imex/config.cfg")
        assert.are.equal("ok", r.outcome, r.output)
        assert.are.equal(d.addr.n1 .. "\n" .. d.addr.n2 .. "\n", simdomain.read_file(site .. "/nodes.cfg"))
        assert.are.equal(packaged, d:nodes_file("n1"))
        local plan = on(d, "n1", "plan", 61, "n[1-2]", "--set imex_config=/etc/nvidia-imex/config.cfg")
        local line = "config: " .. site .. "/imex.cfg (from the unit ExecStart)"
        assert.truthy(plan.output:find(line, 1, true), plan.output)
      end)
  end)
end)
