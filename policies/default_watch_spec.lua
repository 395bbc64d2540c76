-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy: the watcher (lua/imexguard/watch.lua; C51 of docs/design.md, "Field
-- cases"; "Convergence in Slurm's order") against the fake host. A prolog that ends ok on a node of
-- a multi-node IMEX domain leaves `imexguard watch` as a transient service (sent without waiting,
-- after the node lock is released); the watch nudges this node's daemon when a peer of the job
-- comes back as a new instance, until the job is unregistered or its time is up, and never changes
-- anything else.

local testing = require("imexguard.testing")
local cjson = require("cjson")
local watch = require("imexguard.watch")
local H = require("default_policy_helper")

local STATE = testing.STATE
local env, run = H.env, H.run

-- The state file with job `id` registered on n1, n2 (as its prolog left it).
local function registered(id)
  return cjson.encode({ jobs = { { id = tostring(id), nodes = "10.0.0.1\n10.0.0.2\n",
    registered_us = "1699999400000000", invocation_id = "" } } }) .. "\n"
end

describe("the watcher (C51)", function()
  describe("the prolog leaves it", function()
    it("fast path of a 2-node domain: one transient service, sent without waiting once the health wait is ok "
      .. "(before the registration, whose time hides systemd's answer); imexguard watch with this run's "
      .. "settings file, a budget of deadline + watch_skew, the job's environment", function()
      local h = testing.host()
      local outcome, message = run(h, { env = env("n[1-2]", { SLURM_CONF = "/etc/slurm/slurm.conf",
        PATH = "/usr/bin" }) })
      assert.equal("ok", outcome, message)
      assert.matches("watcher imexguard%-watch%-101%-n1%.service started", message)
      assert.equal(1, #h.transients)
      local t = h.transients[1]
      assert.equal("imexguard-watch-101-n1.service", t.name)
      assert.same({ testing.EXE, "--config", testing.SETTINGS_FILE, "--deadline", "100", "watch" },
        t.spec.argv)
      assert.same({ "SLURMD_NODENAME=n1", "SLURM_CONF=/etc/slurm/slurm.conf", "SLURM_JOB_ID=101",
        "SLURM_JOB_NODELIST=n[1-2]" }, t.spec.environment)
      assert.equal(105, t.spec.runtime_max)
      assert.is_false(t.spec.wait)
      -- after the ctl's last answer, before the registration is written
      local started, waited, written
      for i, c in ipairs(h.calls) do
        if c[1] == "unit_start_transient" then started = i end
        if c[1] == "wait" then waited = i end
        if c[1] == "write_atomic" and c[2] == STATE then written = written or i end
      end
      assert.is_true(started > waited and started < written,
        string.format("%s %s %s", started, waited, written))
    end)

    it("after a restart too (the restarted node may see a later peer restart): one watcher", function()
      local h = testing.host()
      local outcome, message = run(h, { env = env("n[1,3]") })
      assert.equal("ok", outcome, message)
      assert.equal(1, #h.jobs)
      assert.equal(1, #h.transients)
    end)

    it("none for a node alone in its domain, with watch or nudge off, or a daemon below the SIGUSR1 floor",
      function()
      local h = testing.host{ files = { [testing.NODES] = "10.0.0.1\n" } }
      assert.equal("ok", (run(h, { env = env("n1") })))
      assert.same({}, h.transients)
      for _, s in ipairs({ { watch = false }, { nudge = false } }) do
        h = testing.host()
        assert.equal("ok", (run(h, { settings = s })))
        assert.same({}, h.transients)
      end
      h = testing.host{ ctl = { { mesh = { nodes = { { host = "10.0.0.1", version = "570.172.08" },
        { host = "10.0.0.2", version = "570.172.08" } } } } } }
      local outcome, message = run(h)
      assert.equal("ok", outcome, message)
      assert.same({}, h.transients)
      assert.is_nil(message:find("watcher", 1, true))
    end)

    it("none when the prolog fails (its job is not registered)", function()
      local h = testing.host{ ctl = { H.DEGRADED }, settings = {} }
      local outcome = run(h, { settings = { health_timeout = 2 } })
      assert.equal("peers-unhealthy", outcome) -- exit 0 by default: the watcher is left
      assert.equal(1, #h.transients)
      h = testing.host{ ctl = { H.DEGRADED } }
      outcome = run(h, { settings = { health_timeout = 2, on_peer_fault = "fail" } })
      assert.equal("peers-unhealthy", outcome)
      assert.same({}, h.transients)
    end)

    it("a failed start is a warning: the prolog's outcome stands", function()
      local h = testing.host{ unit_start_transient = "bus" }
      local outcome, message = run(h)
      assert.equal("ok", outcome, message)
      assert.is_nil(message:find("watcher", 1, true))
      local warned = false
      for _, l in ipairs(h.logs) do
        if l[1] == "warning" and l[2]:find("watcher imexguard-watch-101-n1.service not started", 1, true) then
          warned = true
        end
      end
      assert.is_true(warned)
    end)
  end)

  describe("imexguard watch", function()
    -- A watch of job 101 on n1 of n[1-4] whose peer n4 restarted: this node's link to it waits on
    -- a back-off of `backoff` seconds (testing.restarted_peer); o: more host options, settings.
    local function watching(o)
      o = o or {}
      local hopts = { files = { [testing.NODES] = "10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4\n",
        [STATE] = registered(101) }, ctl = testing.restarted_peer{ backoff = o.backoff or 20 } }
      for k, v in pairs(o.host or {}) do hopts[k] = v end
      local h = testing.host(hopts)
      local outcome, message = run(h, { command = "watch", env = env("n[1-4]"), settings = o.settings })
      return outcome, message, h
    end

    it("nudges this node's daemon once when its link to a restarted READY peer stays down nudge_after s, "
      .. "then watches until its time is up; never a restart, never a write", function()
      local outcome, message, h = watching{ host = { deadline = 30 } }
      assert.equal("ok", outcome, message)
      assert.equal(1, #h.kills)
      assert.equal(10, h.kills[1].signal)
      assert.equal(testing.UNIT, h.kills[1].unit)
      assert.same({}, h.jobs)
      assert.same({}, h.writes)
      assert.same({}, h.locks)
      assert.matches("its time is up", message)
      -- polled every watch_interval (1 s) while nothing was due
      local n = #h.runs_of("nvidia-imex-ctl")
      assert.is_true(n >= 25 and n <= 31, tostring(n))
    end)

    it("ends at once when the job is no longer registered (its epilog ran)", function()
      local polls = 0
      local h
      local inner = testing.restarted_peer{ backoff = 1000 }
      local outcome, message
      outcome, message, h = watching{ host = { ctl = function(n, argv, hh)
        polls = polls + 1
        if polls == 3 then hh.set_file(STATE, cjson.encode({ jobs = {} }) .. "\n") end
        return inner(n, argv, hh)
      end } }
      assert.equal("ok", outcome, message)
      assert.matches("no longer registered", message)
      assert.equal(3, polls)
      assert.is_true(h.now() < 1000 + 5, tostring(h.now()))
    end)

    it("ends at once for a job not registered here, and for a daemon below the SIGUSR1 floor", function()
      local outcome, message, h = watching{ host = { files = {
        [testing.NODES] = "10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4\n", [STATE] = registered(7) } } }
      assert.equal("ok", outcome, message)
      assert.matches("no longer registered", message)
      assert.equal(0, #h.runs_of("nvidia-imex-ctl"))
      assert.equal(0, h.count("unit")) -- nothing asked of systemd either
      outcome, message, h = watching{ settings = { sigusr1_min_version = "600" } }
      assert.equal("ok", outcome, message)
      assert.matches("no nudge: the daemon's version 580%.95%.05 is older than sigusr1_min_version 600",
        message)
      assert.same({}, h.kills)
      assert.equal(1, #h.runs_of("nvidia-imex-ctl"))
    end)

    it("a poll in which this node's own daemon did not answer (UNAVAILABLE, an empty version, as the real "
      .. "ctl shows an unreachable node) refuses nothing: the next answers decide, and the nudge is sent",
      function()
      local polls = 0
      local inner = testing.restarted_peer{ backoff = 20 }
      local outcome, message, h = watching{ host = { deadline = 30, ctl = function(n, argv, hh)
        polls = polls + 1
        local a = inner(n, argv, hh)
        if polls == 1 then a.mesh.nodes[1].status, a.mesh.nodes[1].version = "UNAVAILABLE", "" end
        return a
      end } }
      assert.equal("ok", outcome, message)
      assert.is_nil(message:find("no nudge", 1, true), message)
      assert.equal(1, #h.kills)
      assert.equal(10, h.kills[1].signal)
    end)

    it("watch_interval spaces its polls", function()
      local _, _, h = watching{ host = { deadline = 30 }, settings = { watch_interval = 4 } }
      local n = #h.runs_of("nvidia-imex-ctl")
      assert.is_true(n >= 7 and n <= 10, tostring(n))
    end)
  end)

  it("its name, and the budget it gets: deadline + watch_skew, systemd's bound RUNTIME_SLACK later",
    function()
    assert.equal("imexguard-watch-42-gb01.service", watch.unit_name("42", "gb01"))
    assert.equal("imexguard-watch-42-a_b.service", watch.unit_name("42", "a b"))
    local ctx = testing.ctx{ settings = { deadline = 60, watch_skew = 30 } }
    local spec = watch.spec(ctx, "101")
    assert.equal("90", spec.argv[#spec.argv - 1])
    assert.equal(90 + watch.RUNTIME_SLACK, spec.runtime_max)
  end)
end)
