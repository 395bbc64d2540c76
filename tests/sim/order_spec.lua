-- SPDX-License-Identifier: Apache-2.0
-- Convergence in Slurm's order (issue 29; field cases C51 and C52 of docs/design.md) under the real
-- systemd user manager (tests/with-systemd; contrib/simdomain.lua, one imexsim@NODE.service per
-- node). Slurm starts every prolog of a job at once (simdomain's run_all), up to a second apart on a
-- large allocation (run_all's `delays`): each case runs both ways.
-- * C51, identity: a daemon imexguard did not start, whose node list file was rewritten with the same
--   bytes after its start, is current when the ctl shows it running the job's ordered list: no
--   restart (and it is adopted: the next rewrite is decided by content).
-- * C51, order: one node must restart (its config.cfg changed) while its peers are current and
--   return at once; the peers' daemons reconnect to the new instance only after a 20 s back-off.
--   The watcher each peer's prolog left nudges them: the restarted node's prolog returns within a
--   few seconds of its daemon's start, nothing else restarts, and the watchers end with the job.
-- * C52: in C32's job 3 the node whose list changed restarts once; only the older end, which
--   remembers the mismatch, restarts to clear it.
-- Every wait polls a condition with a deadline; prologs are stopped by their end; the domain is
-- destroyed in after_each.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

-- Poll fn() until it returns a truthy value or `timeout` seconds pass.
local wait_until = simdomain.wait_until

-- Starts of every node's daemon (the simulator's log).
local function starts(d)
  local t = {}
  for _, n in ipairs(d.names) do t[n] = d:starts(n) end
  return t
end

-- Lines of node `name`'s imex.log containing `text` (plain).
local function log_count(d, name, text)
  local n = 0
  for line in (simdomain.read_file(d:dir(name) .. "/imex.log") or ""):gmatch("[^\n]+") do
    if line:find(text, 1, true) then n = n + 1 end
  end
  return n
end

-- What a failed convergence case shows: every node's prolog output and its daemon's log of
-- connections and signals.
local function diagnosis(d, res)
  local out = {}
  for _, n in ipairs(d.names) do
    out[#out + 1] = "== " .. n .. "'s prolog: " .. (res[n] and res[n].output or "(none)")
    for line in (simdomain.read_file(d:dir(n) .. "/imex.log") or ""):gmatch("[^\n]+") do
      if line:find("SIGUSR1", 1, true) or line:find("onnect", 1, true) or line:find("restarted", 1, true)
        or line:find("BYE", 1, true) or line:find("goodbye", 1, true) then
        out[#out + 1] = n .. " imex.log: " .. line
      end
    end
  end
  local _, units = d:systemctl("list-units", "--all", "--plain", "--no-legend", "imexguard-watch-*")
  out[#out + 1] = "watchers: " .. units
  return table.concat(out, "\n")
end

-- Every result ok (exit 0), else fail naming the node and its output.
local function all_ok(res)
  for name, r in pairs(res) do
    assert.are.equal(0, r.status, name .. ": " .. r.output)
    assert.are.equal("ok", r.outcome, name .. ": " .. r.output)
  end
end

-- Is the domain UP as node `name` sees it?
local function up(d, name)
  local t = d:ctl_json(name or "n1")
  return t and t.status == "UP"
end

-- The job's watcher services (one per node) that are loaded in the manager (every simulated node's
-- prolog starts its own under the one manager; imexguard.watch names them by job and node).
local function watchers(d, job)
  local _, out = d:systemctl("list-units", "--plain", "--no-legend",
    "imexguard-watch-" .. job .. "-*.service")
  local n = 0
  for _ in out:gmatch("imexguard%-watch%-%d+%-[%w_.:-]+%.service") do n = n + 1 end
  return n
end

describe("convergence in Slurm's order under systemd", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  describe("C51: identity beats mtime", function()
    -- Every daemon started by systemd (not by imexguard: no record of what it runs), the domain UP;
    -- a configuration tool rewrites n2's node list with the same bytes after its daemon started.
    local function rewritten()
      d = simdomain.in_order(3)
      assert(d:start())
      assert.truthy(wait_until(function() return up(d) end, 30), "the domain never came UP")
      local before = d:nodes_file("n2")
      d:write_node_list("n2", d.names)
      assert.are.equal(before, d:nodes_file("n2"))
    end

    for _, case in ipairs({ { "at once" }, { "n2 a second after the others", { n2 = 1 } },
      { "n2 a second before the others", { n1 = 1, n3 = 1 } } }) do
      it(case[1] .. ": no daemon restarts; n2's daemon is adopted, so a second rewrite is decided by content",
        function()
          rewritten()
          local before, inv = starts(d), d:invocation("n2")
          local res = d:prologs{ job = 1, nodelist = "n[1-3]", delays = case[2] }
          all_ok(res)
          assert.are.same(before, starts(d))
          assert.are.equal(inv, d:invocation("n2"))
          assert.truthy(res.n2.output:find("the ctl shows it running the job's ordered list", 1, true),
            res.n2.output)
          local st = simdomain.read_file(d:dir("n2") .. "/state/state.json")
          assert.truthy(st:find('"invocation_id":"' .. inv .. '"', 1, true), st)
          d:epilogs{ job = 1, nodelist = "n[1-3]" }
          -- the same bytes again: content decides now, no doubt, no restart
          d:write_node_list("n2", d.names)
          res = d:prologs{ job = 2, nodelist = "n[1-3]", delays = case[2] }
          all_ok(res)
          assert.are.same(before, starts(d))
          assert.is_nil(res.n2.output:find("ordered list", 1, true), res.n2.output)
          assert.truthy(up(d))
        end)
    end

    it("a config.cfg rewritten after a foreign daemon's start still restarts it (what it read is unknown)",
      function()
        rewritten()
        d:configure("n2", { IMEXSIM_HOSTNAME = "n2-renamed" })
        local before = starts(d)
        local res = d:prologs{ job = 1, nodelist = "n[1-3]" }
        all_ok(res)
        assert.are.equal(before.n2 + 1, d:starts("n2"))
        assert.truthy(res.n2.output:find("config.cfg changed after the daemon started", 1, true),
          res.n2.output)
      end)
  end)

  describe("C51: the order in which prologs return does not matter (the watcher)", function()
    -- The daemons reconnect to a lost peer only after 20 s (doubling): what a field back-off of
    -- 15 s and more looks like (docs/design.md, "IMEX facts"), long enough to see.
    local BACKOFF_MS = 20000
    local EXTRA = { "IMEXSIM_RECONNECT_MS=" .. BACKOFF_MS, "IMEXSIM_RECONNECT_FACTOR=2",
      "IMEXSIM_RECONNECT_MAX_MS=120000" }

    -- One job on n[1-3] whose n3 must restart (its config.cfg changed), the prologs started as
    -- `delays` says; checks every outcome, the one start, the nudges and the watchers' end; returns
    -- the results and the restarted daemon's start (wall-clock seconds).
    local function job(id, delays)
      d:configure("n3", { IMEXSIM_HOSTNAME = "n3-job" .. id })
      local before, usr1 = starts(d), {}
      for _, n in ipairs(d.names) do usr1[n] = log_count(d, n, "SIGUSR1: restarting outgoing connections") end
      local res = d:prologs{ job = id, nodelist = "n[1-3]", delays = delays }
      all_ok(res)
      local started = assert(d:daemon_state("n3")).started
      local seen = string.format("n3's prolog ended %.2f s after its daemon's start", res.n3.ended - started)
      if res.n3.ended - started >= 8 then
        error(seen .. " (the back-off is 20 s): " .. res.n3.output .. "\n" .. diagnosis(d, res), 0)
      end
      -- n3 restarted once, nothing else; the current nodes' daemons were nudged (by their watchers:
      -- their prologs had returned before n3's restart)
      assert.are.equal(before.n3 + 1, d:starts("n3"))
      for _, n in ipairs({ "n1", "n2" }) do
        assert.are.equal(before[n], d:starts(n), n .. " restarted")
        local unit = "imexguard-watch-" .. id .. "-" .. n .. ".service"
        assert.truthy(res[n].output:find("watcher " .. unit .. " started", 1, true), res[n].output)
        assert.is_true(log_count(d, n, "SIGUSR1: restarting outgoing connections") > usr1[n],
          n .. " not nudged")
      end
      assert.truthy(up(d), "the domain is not UP after the prologs")
      -- the watchers end with the job: the epilog unregisters it, each watcher sees that at its next poll
      assert.are.equal(3, watchers(d, id), "not one watcher of job " .. id .. " per node")
      d:epilogs{ job = id, nodelist = "n[1-3]" }
      assert.truthy(wait_until(function() return watchers(d, id) == 0 end, 10), "a watcher outlived the job")
      return res, started
    end

    -- A 3-node domain with that back-off, UP, with no watcher left. n3's daemon takes half a second
    -- to stop (ExecStop runs before systemd's SIGTERM, systemd.service(5)), as a daemon that
    -- releases its imports does: started at once, the current nodes' prologs have surely returned
    -- when its restart breaks their links.
    local function domain()
      d = simdomain.new{ nodes = 3, extra_cfg = EXTRA }
      for _, name in ipairs(d.names) do d:write_node_list(name, d.names) end
      assert(d:unit_options("n3", { Service = { ExecStop = "/bin/sleep 0.5" } }))
      assert(d:start())
      -- The units start one by one: the first daemons' attempts to the later ones fail and wait
      -- 20 s. A first job's prologs bring the mesh UP (their nudges); its watchers end with it.
      all_ok(d:prologs{ job = 1, nodelist = "n[1-3]" })
      d:epilogs{ job = 1, nodelist = "n[1-3]" }
      assert.truthy(wait_until(function() return up(d) end, 30), "the domain never came UP")
      assert.truthy(wait_until(function() return watchers(d, 1) == 0 end, 10), "job 1's watchers outlived it")
    end

    it("at once: every prolog back within a few seconds of the restarted daemon's start, one restart, the "
      .. "watchers gone after the epilog", function()
      domain()
      job(2)
    end)

    it("the restarting node a second after the others: the same", function()
      domain()
      job(2, { n3 = 1 })
    end)
  end)

  describe("C52: only the older end restarts for a remembered mismatch", function()
    -- C32 up to job 3: n1 and n2 ran {n1, n2} (job 1); job 2 restarted n2 with {n2, n3} while n1
    -- idled; n1 now remembers a mismatch with n2 (the simulator's default: the block stays until both
    -- ends run new instances).
    local function c32(opts)
      d = simdomain.new(opts)
      d:write_node_list("n1", { "n1", "n2" })
      d:write_node_list("n2", { "n1", "n2" })
      d:write_node_list("n3", { "n3" })
      if opts.fabric then
        for _, n in ipairs(d.names) do d:set_gpus(n, simdomain.gpu_lines("rack")) end
      end
      assert(d:start())
      assert.truthy(wait_until(function() return up(d) end, 30), "job 1's domain never UP")
      all_ok(d:prologs{ job = 2, nodelist = "n[2-3]", names = { "n2", "n3" } })
      d:epilogs{ job = 2, nodelist = "n[2-3]", names = { "n2", "n3" } }
      assert.truthy(wait_until(function()
        local s = d:daemon_state("n1")
        return s and s.blocks[1] ~= nil
      end, 10), "n1 never remembered the mismatch with n2's {n2, n3}")
    end

    -- Job 3 on n[1-2]: n2 restarts once (its list), n1 once (the older end); both ok; the block is
    -- gone. n2's new instance started after the mismatch began (the state file's timeline).
    local function job3(delays)
      local before = starts(d)
      local since = d:daemon_state("n1").blocks[1]
      local res = d:prologs{ job = 3, nodelist = "n[1-2]", names = { "n1", "n2" }, delays = delays }
      all_ok(res)
      assert.are.equal(before.n2 + 1, d:starts("n2"), "n2 restarted more than once: " .. res.n2.output)
      assert.are.equal(before.n1 + 1, d:starts("n1"), res.n1.output)
      assert.truthy(res.n1.output:find("restarted once to clear a stale node-map mismatch", 1, true),
        res.n1.output)
      local s2 = d:daemon_state("n2")
      assert.is_true(s2.started > since, "n2's instance is older than the mismatch")
      assert.truthy(up(d))
      assert.are.same({}, d:daemon_state("n1").blocks)
    end

    it("at once, n1's GPUs still registering (its health wait starts 2 to 3 s later)", function()
      c32{ nodes = 3, extra_cfg = simdomain.FAST_RECONNECT, fabric = true }
      local until_t, slow = os.time() + 3, {}
      for i, l in ipairs(simdomain.gpu_lines("rack")) do
        slow[i] = string.format("%d, In Progress, N/A, N/A, N/A; until %d: %s", i - 1, until_t,
          l:match("^%d+, (.*)$"))
      end
      d:set_gpus("n1", slow)
      job3()
    end)

    it("n1 a second after n2", function()
      c32{ nodes = 3, extra_cfg = simdomain.FAST_RECONNECT }
      job3({ n1 = 1 })
    end)
  end)
end)
