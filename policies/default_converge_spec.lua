-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy: a node-map mismatch that stays (C32 of docs/design.md, "Field
-- cases") in the prolog, plan, status and health, against the fake host. IMEX keeps a node-map
-- mismatch until both ends of the link restart with one list (AWS's PCS guide), so a link whose two
-- ends run the job's ordered list and still show NODE_MAP_MISMATCH is a stale block: the prolog
-- restarts its own daemon once where the registry allows it; otherwise every node of the pair ends
-- stuck-mismatch (exit 19) naming the nodes to restart together.

local testing = require("imexguard.testing")
local outcomes = require("imexguard.outcomes")

-- A ctl for the domain of `hosts` (this node first), every node READY, where the links of
-- `stuck` ({{a, b}, ...}: pairs of addresses) show NODE_MAP_MISMATCH from both ends until the
-- node `a` (this node: `a` = hosts[1]) restarted, i.e. until the fake host ran a restart job when
-- `cleared_by_restart` is true; `others` ({[host] = {[peer] = status}}) sets further links.
local function stale(hosts, stuck, cleared_by_restart, others)
  return function(_, _, h)
    local restarted = false
    for _, j in ipairs(h.jobs) do
      if j.verb == "restart" then restarted = true end
    end
    local nodes = {}
    for i, host in ipairs(hosts) do
      local c = {}
      for _, other in ipairs(hosts) do c[other] = "CONNECTED" end
      nodes[i] = { host = host, connections = c }
    end
    if not (cleared_by_restart and restarted) then
      for _, p in ipairs(stuck) do
        for _, n in ipairs(nodes) do
          if n.host == p[1] then n.connections[p[2]] = "NODE_MAP_MISMATCH" end
          if n.host == p[2] then n.connections[p[1]] = "NODE_MAP_MISMATCH" end
        end
      end
    end
    for _, n in ipairs(nodes) do
      for peer, st in pairs((others or {})[n.host] or {}) do n.connections[peer] = st end
    end
    return { mesh = { nodes = nodes } }
  end
end

local A, B, C = "10.0.0.1", "10.0.0.2", "10.0.0.3"
-- the remedy both ends of the pair n1 - n2 name
local REMEDY = "restart nvidia%-imex%.service on 10%.0%.0%.1 %(n1%) and 10%.0%.0%.2 %(n2%) together"

describe("C32: a node-map mismatch that stays", function()
  describe("prolog", function()
    it("gb01's side: current, the link to n2 stays !M! although both run {n1, n2}: one restart, ok within "
      .. "a few polls, no nudge", function()
      local s = testing.scenario{ file = { "n1", "n2" }, mesh = stale({ A, B }, { { A, B } }, true) }
      local t0 = s.host.now()
      local outcome, message = s:prolog{ job = 103, nodelist = "n[1-2]" }
      assert.equal("ok", outcome, message)
      assert.equal(1, s:restarts())
      assert.same({ "restart" }, s:unit_jobs())
      assert.matches("restarted once to clear a stale node%-map mismatch", message)
      assert.same({}, s.host.kills) -- no SIGUSR1 instead of the restart
      assert.same({}, s:writes()) -- the node list stays
      assert.same({ "103" }, s:registered())
      assert.is_true(s.host.now() - t0 < 5, "took " .. (s.host.now() - t0) .. " s")
    end)

    it("the registry forbids the restart (job 100 uses the daemon): stuck-mismatch, exit 19, naming both "
      .. "nodes to restart together, after two rounds of a few polls", function()
      local s = testing.scenario{ file = { "n1", "n2" }, mesh = stale({ A, B }, { { A, B } }, true),
        jobs = { [100] = { "n1", "n2" } } }
      local t0 = s.host.now()
      local outcome, message = s:prolog{ job = 103, nodelist = "n[1-2]" }
      assert.equal("stuck-mismatch", outcome, message)
      assert.equal(19, outcomes.exit_code(outcome))
      assert.equal(0, s:restarts())
      assert.same({}, s.host.kills)
      assert.matches(REMEDY, message)
      assert.matches("may not restart it: .*job 100", message)
      assert.is_nil(message:find("\n"))
      assert.is_nil(message:find("peers are not", 1, true)) -- nobody blamed
      assert.same({ "100" }, s:registered())
      assert.is_true(s.host.now() - t0 < 8, "took " .. (s.host.now() - t0) .. " s")
    end)

    it("gb02's side (C52): it rewrote its list and restarted, so it is the new end: no second restart, it "
      .. "waits the whole health wait for the older end, then stuck-mismatch with the same remedy", function()
      -- the block is held by n1 (which may not restart): nothing on this node clears it
      local s = testing.scenario{ node = "n2", file = { "n2", "n3" },
        mesh = stale({ A, B }, { { B, A } }, false) }
      local t0 = s.host.now()
      local outcome, message = s:prolog{ job = 103, nodelist = "n[1-2]" }
      assert.equal("stuck-mismatch", outcome, message)
      assert.equal(1, s:restarts()) -- the list change only: a restart of the new end clears nothing
      assert.matches("cannot be the one that holds it: the other end must restart", message)
      assert.matches(REMEDY, message)
      assert.same({}, s:registered()) -- a failed prolog unregisters
      -- not stale_mismatch_after: the whole health wait (60 s) for the older end's restart
      assert.is_true(s.host.now() - t0 >= 59, "took " .. (s.host.now() - t0) .. " s")
    end)

    it("gb02's side (C52): the older end restarts meanwhile: ok, still one restart here", function()
      local f = stale({ A, B }, { { B, A } }, false)
      local first
      local function older_end_restarts(n, argv, h)
        first = first or h.now()
        if h.now() - first > 8 then return testing.up({ A, B }) end
        return f(n, argv, h)
      end
      local s = testing.scenario{ node = "n2", file = { "n2", "n3" }, mesh = older_end_restarts }
      local outcome, message = s:prolog{ job = 103, nodelist = "n[1-2]" }
      assert.equal("ok", outcome, message)
      assert.equal(1, s:restarts())
      assert.same({ "103" }, s:registered())
    end)

    it("the registry forbids the restart, and the other end's restart clears it meanwhile: ok, no restart "
      .. "here", function()
      local first
      local f = stale({ A, B }, { { A, B } }, false)
      local function peer_restarted(n, argv, h)
        -- the other end restarts after this node's first round has seen the stale mismatch (3 s)
        first = first or h.now()
        if h.now() - first > 4 then return testing.up({ A, B }) end
        return f(n, argv, h)
      end
      local s = testing.scenario{ file = { "n1", "n2" }, mesh = peer_restarted,
        jobs = { [100] = { "n1", "n2" } } }
      local outcome, message = s:prolog{ job = 103, nodelist = "n[1-2]" }
      assert.equal("ok", outcome, message)
      assert.equal(0, s:restarts())
      assert.same({}, s.host.kills)
    end)

    it("after its one restart, this node waits the whole health wait for the other end's restart (a slow "
      .. "unit job, a systemd re-exec), not stale_mismatch_after again: ok, one restart", function()
      local f = stale({ A, B }, { { A, B } }, false)
      local restarted_at
      local function peer_late(n, argv, h)
        for _, j in ipairs(h.jobs) do
          if j.verb == "restart" then restarted_at = restarted_at or h.now() end
        end
        -- the other end's new daemon comes 10 s after this node's restart (> stale_mismatch_after)
        if restarted_at and h.now() - restarted_at > 10 then return testing.up({ A, B }) end
        return f(n, argv, h)
      end
      local s = testing.scenario{ file = { "n1", "n2" }, mesh = peer_late }
      local outcome, message = s:prolog{ job = 103, nodelist = "n[1-2]" }
      assert.equal("ok", outcome, message)
      assert.equal(1, s:restarts())
      assert.matches("restarted once to clear a stale node%-map mismatch", message)
    end)

    it("3 nodes, this node stuck with two peers that are connected to each other: one restart, ok", function()
      local s = testing.scenario{ file = { "n1", "n2", "n3" },
        mesh = stale({ A, B, C }, { { A, B }, { A, C } }, true) }
      local outcome, message = s:prolog{ job = 103, nodelist = "n[1-3]" }
      assert.equal("ok", outcome, message)
      assert.equal(1, s:restarts())
    end)

    it("3 nodes, the stuck pair is two peers (n2 - n3): not this node's to clear: no restart, the pair "
      .. "named, this node not drained (peers-unhealthy)", function()
      local s = testing.scenario{ file = { "n1", "n2", "n3" },
        mesh = stale({ A, B, C }, { { B, C } }, false),
        settings = { health_timeout = 5 } }
      local outcome, message, _, ctx = s:prolog{ job = 103, nodelist = "n[1-3]" }
      assert.equal("peers-unhealthy", outcome, message)
      assert.equal(0, outcomes.exit_code(outcome, ctx.settings))
      assert.matches("n2: node map mismatch with 10%.0%.0%.3", message)
      assert.equal(0, s:restarts())
    end)

    it("a real mismatch (the peer runs another list: n1 INVALID in its view) is not stale: no restart here, "
      .. "the peer is named after the whole wait", function()
      local s = testing.scenario{ file = { "n1", "n2" },
        mesh = stale({ A, B }, { { A, B } }, false, { [B] = { [A] = "INVALID" } }),
        settings = { health_timeout = 5 } }
      local outcome, message = s:prolog{ job = 103, nodelist = "n[1-2]" }
      assert.equal("peers-unhealthy", outcome, message)
      assert.equal(0, s:restarts())
    end)
  end)

  describe("plan, status, health: the same judgement", function()
    local function given(jobs)
      return testing.scenario{ file = { "n1", "n2" }, mesh = stale({ A, B }, { { A, B } }, false),
        jobs = jobs }
    end

    it("status: stuck-mismatch naming both nodes, nobody blamed", function()
      local s = given({ [103] = { "n1", "n2" } })
      local outcome, message = s:status{}
      assert.equal("stuck-mismatch", outcome, message)
      assert.matches("together", message)
      assert.is_nil(message:find("peers are not", 1, true))
    end)

    it("health: stuck-mismatch (exit 19), the drain reason names the remedy", function()
      local s = given({ [103] = { "n1", "n2" } })
      local outcome, message, report = s:health{}
      assert.equal("stuck-mismatch", outcome, message)
      assert.matches("^imexguard: stuck%-mismatch: ", report)
      assert.equal(0, s:restarts())
    end)

    it("plan: says the prolog would restart once to converge; with a registered job in the way, "
      .. "stuck-mismatch", function()
      local s = given()
      local outcome, message = s:plan{ job = 103, nodelist = "n[1-2]" }
      assert.equal("ok", outcome, message)
      assert.matches("stale node%-map mismatch", message)
      assert.matches("would restart", message)
      s = given({ [100] = { "n1", "n2" } })
      outcome, message = s:plan{ job = 103, nodelist = "n[1-2]" }
      assert.equal("stuck-mismatch", outcome, message)
      assert.matches("together", message)
      assert.equal(0, s:restarts())
    end)
  end)
end)
