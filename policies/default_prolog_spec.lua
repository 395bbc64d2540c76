-- SPDX-License-Identifier: Apache-2.0
-- Specs of the default policy: the prolog (docs/design.md, "Decision model of the default
-- policy"; Cnn: its "Field cases") against the fake host. A field case whose tests drive
-- several entry points has a describe of the same name in each policies/default_*_spec.lua;
-- what these files share is tests/default_policy_helper.lua.

local testing = require("imexguard.testing")
local outcomes = require("imexguard.outcomes")
local cjson = require("cjson")
local pace = require("imexguard.pace")
local steps = require("imexguard.steps")
local P = require("default")
local H = require("default_policy_helper")

local NODES, CONFIG, STATE = testing.NODES, testing.CONFIG, testing.STATE
local fixture, DEGRADED, env, run = H.fixture, H.DEGRADED, H.env, H.run
local assert_one_line, assert_untouched, assert_released = H.assert_one_line, H.assert_untouched,
  H.assert_released
local paths, list_writes = H.paths, H.list_writes

describe("default policy prolog", function()
  describe("fast path (nothing to do)", function()
    it("writes nothing, restarts nothing, calls the ctl exactly once", function()
      local h = testing.host()
      local outcome, message = run(h)
      assert.equal("ok", outcome)
      assert_one_line(message)
      assert.matches("current", message)
      assert.same({ STATE }, paths(h)) -- only the state file: the job is registered
      assert.same({ { id = "101", nodes = "10.0.0.1\n10.0.0.2\n" } }, (function()
        local j = cjson.decode(h.file(STATE)).jobs
        return { { id = j[1].id, nodes = j[1].nodes } }
      end)())
      assert.same({}, h.jobs)
      assert.equal(1, #h.runs_of("nvidia-imex-ctl"))
      assert.equal(0, h.count("sleep"))
      assert.equal(1, #h.locks)
      assert_released(h)
    end)

    it("works with the real 2-node fixture", function()
      local h = testing.host{
        files = { [NODES] = "192.168.103.159\n192.168.107.187\n" },
        resolve = { n1 = { "192.168.103.159" }, n2 = { "192.168.107.187" } },
        local_addresses = { "192.168.103.159" },
        ctl = { fixture("ctl/up-2node-570.json") },
      }
      local outcome = run(h)
      assert.equal("ok", outcome)
      assert.same({ STATE }, paths(h))
      assert.same({}, h.jobs)
      assert.equal(1, #h.runs_of("nvidia-imex-ctl"))
    end)

    it("runs the ctl while systemd is asked for the unit under the lock (the overlap)", function()
      local h = testing.host()
      local outcome = run(h)
      assert.equal("ok", outcome)
      local order = {}
      for _, c in ipairs(h.calls) do
        local n = c[1]
        if n == "unit" or n == "run" or n == "wait" or n == "lock" then order[#order + 1] = n end
      end
      -- step 1's query, nvidia-smi started (the fabric check's early query), the lock, the ctl
      -- started, step 5a's query, the ctl's answer, then nvidia-smi's (the fabric check, step 8a)
      assert.same({ "unit", "run", "lock", "run", "unit", "wait", "wait" }, order)
      assert.same({ "/usr/bin/nvidia-smi" }, { h.runs[1][1] })
      assert.equal(2, #h.spawns)
      for _, sp in ipairs(h.spawns) do
        assert.is_truthy(sp.waited)
        assert.is_nil(sp.killed)
      end
    end)

    it("runs the configured ctl argv with -c config.cfg -N -j", function()
      local h = testing.host()
      run(h, { settings = { ctl = { "/opt/sim/ctl", "--node", "1" } } })
      assert.same({ "/opt/sim/ctl", "--node", "1", "-c", CONFIG, "-N", "-j" },
        h.runs_of("nvidia-imex-ctl")[1])
    end)
  end)

  describe("step 1: applies?", function()
    it("unit query failure is unit-unknown, never a restart (C17)", function()
      local h = testing.host{ unit_script = { "timeout" } }
      local outcome, message = run(h)
      assert.equal("unit-unknown", outcome)
      assert.matches("nvidia%-imex%.service", message)
      assert_untouched(h)
      assert.equal(0, h.count("run"))
    end)

    it("a unit that is not installed is skipped", function()
      local h = testing.host{ unit = false }
      local outcome, message = run(h)
      assert.equal("skipped", outcome)
      assert.matches("not installed", message)
      assert_untouched(h)
    end)

    it("a disabled unit with a ctl that exits 255 is skipped, not degraded (C20)", function()
      local h = testing.host{ unit = { unit_file_state = "disabled", active_state = "inactive" },
        ctl = { testing.UNCONFIGURED } }
      local outcome, message = run(h)
      assert.equal("skipped", outcome)
      assert.matches("IMEX is configured %(/etc/nvidia%-imex/config.cfg exists%) but nvidia%-imex.service is "
        .. "disabled: skipped", message)
      assert.matches("manage_disabled_unit = true", message)
      assert.equal(0, outcomes.exit_code(outcome))
      assert_untouched(h)
      assert.equal(0, h.count("run"))
    end)

    it("a masked unit is skipped", function()
      local h = testing.host{ unit = { unit_file_state = "masked" } }
      assert.equal("skipped", (run(h)))
    end)

    it("a static unit applies", function()
      local h = testing.host{ unit = { unit_file_state = "static" } }
      assert.equal("ok", (run(h)))
    end)

    it("no config.cfg: not an IMEX node", function()
      local h = testing.host{ files = { [CONFIG] = false } }
      local outcome, message = run(h)
      assert.equal("skipped", outcome)
      assert.matches("not an IMEX node", message)
      assert_untouched(h)
    end)

    it("an unreadable config.cfg is bad-input naming it", function()
      local h = testing.host{ fail = { [CONFIG] = { read = "EACCES" } } }
      local outcome, message = run(h)
      assert.equal("bad-input", outcome)
      assert.matches(CONFIG, message, 1, true)
      assert_untouched(h)
    end)
  end)

  describe("step 2: the desired list", function()
    it("uses SLURM_NODELIST when it is the only variable (22.05 prolog, C11)", function()
      local e = testing.parse_env(fixture("slurm/prolog-env-22.05.txt"))
      assert.is_nil(e.SLURM_JOB_NODELIST)
      local h = testing.host{ local_addresses = { "10.0.0.2" }, hostname = "n2" }
      local outcome = run(h, { env = e })
      assert.equal("ok", outcome)
      assert.equal("10.0.0.1\n10.0.0.2\n10.0.0.3\n", list_writes(h)[1].data)
      assert.equal(NODES, list_writes(h)[1].path)
    end)

    it("prefers SLURM_JOB_NODELIST and logs the disagreement (C11)", function()
      local h = testing.host()
      local outcome = run(h, { env = env("n[1,3]", { SLURM_NODELIST = "n[1-2]" }) })
      assert.equal("ok", outcome)
      assert.equal("10.0.0.1\n10.0.0.3\n", h.file(NODES))
      local warned = false
      for _, l in ipairs(h.logs) do
        if l[1] == "warning" and l[2]:find("SLURM_NODELIST", 1, true) then warned = true end
      end
      assert.is_true(warned)
    end)

    for _, case in ipairs({
      { "neither variable", { SLURM_JOB_ID = "101" } },
      { "empty variables", { SLURM_JOB_ID = "101", SLURM_JOB_NODELIST = "", SLURM_NODELIST = "" } },
    }) do
      it("bad-input when there is no node list: " .. case[1] .. " (C11)", function()
        local h = testing.host()
        local outcome, message = run(h, { env = case[2] })
        assert.equal("bad-input", outcome)
        assert.matches("SLURM_JOB_NODELIST", message)
        assert_untouched(h)
      end)
    end

    it("a malformed hostlist is bad-input naming the expression (C12)", function()
      local h = testing.host()
      local outcome, message = run(h, { env = env("n[1-") })
      assert.equal("bad-input", outcome)
      assert.matches("n[1-", message, 1, true)
      assert_untouched(h)
    end)

    it("keeps the hostlist's order (C04)", function()
      local h = testing.host()
      assert.equal("ok", (run(h, { env = env("n[2,1]") })))
      assert.equal("10.0.0.2\n10.0.0.1\n", h.file(NODES))
    end)

    it("takes the IPv4 answer of the resolver, other families ignored", function()
      local h = testing.host{ resolve = { n2 = { "fd00::2", "10.0.0.2" } } }
      assert.equal("ok", (run(h)))
      assert.same({ STATE }, paths(h)) -- 10.0.0.1, 10.0.0.2: the file already holds them
    end)

    it("a slow name service is bad-input naming the node and the timeout (C13)", function()
      local h = testing.host{ resolve = { n2 = "timeout" } }
      local t0 = h.now()
      local outcome, message = run(h)
      assert.equal("bad-input", outcome)
      assert.matches("n2", message)
      assert.matches("2 s", message)
      assert.near(2, h.now() - t0, 0.01)
      assert_untouched(h)
    end)

    describe("bad entries are rejected by name, nothing written or restarted (C05)", function()
      local map = "/etc/imexguard/addresses"
      local use_map = { address_source = "map", address_map = map }
      local cases = {
        { "host name", use_map, "n1 10.0.0.1\nn2 node-b\n", nil, "node%-b" },
        { "IPv6", use_map, "n1 10.0.0.1\nn2 fd00::2\n", nil, "fd00::2" },
        { "127.0.1.1 for the local name", {}, nil, { n1 = { "127.0.1.1" } }, "127.0.1.1" },
        { "duplicate", {}, nil, { n2 = { "10.0.0.1" } }, "10.0.0.1" },
        { "no IPv4 answer", {}, nil, { n2 = { "fd00::2" } }, "n2" },
        { "name missing from the map", use_map, "n1 10.0.0.1\n", nil, "n2" },
      }
      for _, c in ipairs(cases) do
        it(c[1], function()
          local files = {}
          if c[3] then files[map] = c[3] end
          local h = testing.host{ files = files, resolve = c[4] }
          local outcome, message = run(h, { settings = c[2] })
          assert.equal("bad-input", outcome)
          assert_one_line(message)
          assert.matches(c[5], message)
          assert_untouched(h)
          assert.equal("10.0.0.1\n10.0.0.2\n", h.file(NODES))
        end)
      end

      it("missing self: no local address in the list", function()
        local h = testing.host{ local_addresses = { "10.0.0.9" } }
        local outcome, message = run(h)
        assert.equal("bad-input", outcome)
        assert.matches("10.0.0.9", message)
        assert.matches("n1", message)
        assert_untouched(h)
      end)

      it("missing self: BIND_INTERFACE_IP not in the list", function()
        local h = testing.host{ files = { [CONFIG] = testing.CONFIG_TEXT:gsub("BIND_INTERFACE_IP=\n",
          "BIND_INTERFACE_IP=10.0.0.7\n") } }
        local outcome, message = run(h)
        assert.equal("bad-input", outcome)
        assert.matches("BIND_INTERFACE_IP 10.0.0.7", message)
        assert_untouched(h)
      end)

      it("loopback is accepted with allow_loopback", function()
        local h = testing.host{ resolve = { n1 = { "127.0.0.11" }, n2 = { "127.0.0.12" } },
          local_addresses = { "127.0.0.11" } }
        local outcome = run(h, { settings = { allow_loopback = true } })
        assert.equal("ok", outcome)
        assert.equal("127.0.0.11\n127.0.0.12\n", h.file(NODES))
      end)
    end)

    it("the map source maps names through the file", function()
      local map = "/etc/imexguard/addresses"
      local h = testing.host{ files = { [map] = "# site map\nn1 10.0.0.1\nn2 10.0.0.2\nn3 10.0.0.3\n" },
        resolve = { n1 = "timeout", n2 = "timeout", n3 = "timeout" } }
      assert.equal("ok", (run(h, { env = env("n[1,3]"), settings = { address_source = "map",
        address_map = map } })))
      assert.equal("10.0.0.1\n10.0.0.3\n", h.file(NODES))
      assert.equal(0, h.count("resolve"))
    end)
  end)

  describe("step 3: the node lock", function()
    it("held by another run: lock-timeout naming its pid and job, nothing changed", function()
      local h = testing.host{ lock = { pid = 777, owner = "job=100", since = testing.WALL0 } }
      local t0 = h.now()
      local outcome, message = run(h, { env = env("n[1,3]"), settings = { lock_timeout = 60 } })
      assert.equal("lock-timeout", outcome)
      assert.matches("pid 777", message)
      assert.matches("job=100", message)
      assert.near(60, h.now() - t0, 0.01)
      assert.same({}, h.writes)
      assert.same({}, h.jobs)
    end)

    it("lock_timeout unset (the default): waits the whole budget less steps.LOCK_RESERVE", function()
      local h = testing.host{ lock = { pid = 777, owner = "job=100", since = testing.WALL0 } }
      local t0, budget = h.now(), h.remaining()
      local outcome = run(h, { env = env("n[1,3]") })
      assert.equal("lock-timeout", outcome)
      assert.near(budget - steps.LOCK_RESERVE, h.now() - t0, 0.01)
    end)

    it("lock_timeout unset: a prolog queued behind a whole prolog ahead (a start and the full health "
      .. "wait, 90 s) gets the lock and ends ok", function()
      local h = testing.host{ deadline = 120,
        lock = { pid = 777, owner = "job=100", release_at = 1000 + 95 } }
      assert.equal("ok", (run(h)))
      assert.is_true(h.now() >= 1095)
      -- the wait tells its progress at info every few seconds, naming the holder and the time left
      local told = {}
      for _, l in ipairs(h.logs) do
        if l[1] == "info" and l[2]:match("^waiting for node lock ") then told[#told + 1] = l[2] end
      end
      assert.is_true(#told >= 90 // 5 - 1, #told .. " progress lines")
      assert.matches(
        "^waiting for node lock /run/imexguard/lock held by pid 777 %(job=100%) %(%d+s / 1min 55s%)$",
        told[1])
    end)

    it("the budget running out while waiting is deadline-exceeded", function()
      local h = testing.host{ deadline = 10, lock = { pid = 777, owner = "job=100" } }
      local outcome, message = run(h, { settings = { lock_timeout = 60 } })
      assert.equal("deadline-exceeded", outcome)
      assert.matches("pid 777", message)
    end)

    it("waits for a holder that lets go in time", function()
      local h = testing.host{ lock = { pid = 777, owner = "job=100", release_at = 1003 } }
      assert.equal("ok", (run(h)))
      assert.is_true(h.now() >= 1003)
    end)

    it("is released on failure paths and when a step raises", function()
      local h = testing.host{ fail = { [NODES] = { write = "ENOSPC" } } }
      assert.equal("write-failed", (run(h, { env = env("n[1,3]") })))
      assert_released(h)
      h = testing.host{ ctl = function() error("boom") end }
      local ok = pcall(run, h)
      assert.is_false(ok)
      assert.equal(1, #h.locks)
      assert_released(h)
    end)
  end)

  describe("step 4: the node list file", function()
    it("rewrites a different list and records it in the state file", function()
      local h = testing.host()
      local outcome = run(h, { env = env("n[1,3]") })
      assert.equal("ok", outcome)
      -- the registration (before any change), the list, the state after the write, after the restart,
      -- and at the end of the prolog (the record of the deployment in progress removed)
      assert.same({ STATE, NODES, STATE, STATE, STATE }, paths(h))
      assert.equal("10.0.0.1\n10.0.0.3\n", h.writes[2].data)
      local st = cjson.decode(h.file(STATE))
      assert.equal("10.0.0.1\n10.0.0.3\n", st.nodes)
      assert.equal("10.0.0.1\n10.0.0.3\n", st.running_nodes)
      assert.equal(h.unit_props.invocation_id, st.invocation_id)
      assert.equal(string.format("%d", h.unit_props.exec_main_start_us), st.started_us)
      assert.is_string(st.written_us)
      assert.equal("101", st.job)
    end)

    it("ENOSPC: write-failed, old file intact, nothing restarted", function()
      local h = testing.host{ fail = { [NODES] = { write = "ENOSPC" } } }
      local outcome, message = run(h, { env = env("n[1,3]") })
      assert.equal("write-failed", outcome)
      assert.matches("ENOSPC", message)
      assert.matches(NODES, message, 1, true)
      assert.equal("10.0.0.1\n10.0.0.2\n", h.file(NODES))
      assert.same({}, h.jobs)
    end)

    it("a missing file is written", function()
      local h = testing.host{ files = { [NODES] = false }, daemon_nodes = { "10.0.0.1", "10.0.0.2" } }
      assert.equal("ok", (run(h)))
      assert.equal("10.0.0.1\n10.0.0.2\n", h.file(NODES))
      assert.equal(1, #h.jobs)
    end)

    it("follows IMEX_NODE_CONFIG_FILE of config.cfg; a nodes_file setting naming another file is "
      .. "config-mismatch (C28)", function()
      local other = "/etc/other/nodes.cfg"
      local cfg = testing.CONFIG_TEXT:gsub("IMEX_NODE_CONFIG_FILE=[^\n]*", "IMEX_NODE_CONFIG_FILE=" .. other)
      local h = testing.host{ files = { [CONFIG] = cfg } }
      run(h)
      assert.equal(other, list_writes(h)[1].path)
      h = testing.host{ files = { [CONFIG] = cfg } }
      run(h, { settings = { nodes_file = other } })
      assert.equal(other, list_writes(h)[1].path)
      h = testing.host{ files = { [CONFIG] = cfg } }
      local o, m = run(h, { settings = { nodes_file = "/srv/n.cfg" } })
      assert.equal("config-mismatch", o)
      assert.truthy(m:find("nodes_file=/srv/n.cfg", 1, true) and m:find(other, 1, true), m)
      assert_untouched(h)
    end)

    it("refuses a relative IMEX_NODE_CONFIG_FILE: bad-input naming the key, nothing changed", function()
      local cfg = testing.CONFIG_TEXT:gsub("IMEX_NODE_CONFIG_FILE=[^\n]*",
        "IMEX_NODE_CONFIG_FILE=nodes_config.cfg")
      local h = testing.host{ files = { [CONFIG] = cfg } }
      local outcome, message = run(h)
      assert.equal("bad-input", outcome)
      assert.matches("IMEX_NODE_CONFIG_FILE=nodes_config.cfg is not an absolute path", message, 1, true)
      assert.same({}, h.writes)
      assert.same({}, h.jobs)
    end)
  end)

  describe("step 5: is the daemon stale?", function()
    -- C51: a daemon imexguard did not start, whose node list file was rewritten (same bytes) after
    -- its start: the mtime is a doubt that the ctl's ordered node map clears or confirms
    local function rewritten(o)
      o = o or {}
      o.files = { [NODES] = { data = "10.0.0.1\n10.0.0.2\n", mtime_us = testing.WALL0 * 1e6 - 60e6 } }
      o.unit = { exec_main_start_us = testing.WALL0 * 1e6 - 120e6 }
      return testing.host(o)
    end

    it("(a) the list file rewritten after the daemon started, the ctl shows the job's ordered map: current, "
      .. "no restart; the daemon is adopted (C51)", function()
      local h = rewritten()
      local outcome, message = run(h)
      assert.equal("ok", outcome, message)
      assert.same({}, h.jobs)
      assert.matches("ctl shows it running the job's ordered list", message)
      assert.same({ STATE }, paths(h)) -- the adoption is saved with the registration
      local st = cjson.decode(h.file(STATE))
      assert.equal(h.unit_props.invocation_id, st.invocation_id)
      assert.equal("10.0.0.1\n10.0.0.2\n", st.running_nodes)
      assert.equal(testing.CONFIG_TEXT, st.running_config)
      assert.equal(1, #h.runs_of("nvidia-imex-ctl"))
      -- the next job decides by content: the ctl unusable now proves nothing, no restart
      local h2 = rewritten{ ctl = { testing.UNREACHABLE, testing.up({ "10.0.0.1", "10.0.0.2" }) } }
      h2.set_file(STATE, h.file(STATE))
      h2.unit_props.invocation_id = h.unit_props.invocation_id
      outcome, message = run(h2, { env = env("n[1-2]", { SLURM_JOB_ID = "102" }) })
      assert.equal("ok", outcome, message)
      assert.same({}, h2.jobs)
    end)

    it("(a) the list file rewritten after the daemon started, the ctl unusable: the doubt stands, restart "
      .. "without a write", function()
      local h = rewritten{ ctl = { testing.UNREACHABLE, testing.up({ "10.0.0.1", "10.0.0.2" }) } }
      local outcome, message = run(h)
      assert.equal("ok", outcome, message)
      -- the registration before the restart, the state after it, the end of the prolog
      assert.same({ STATE, STATE, STATE }, paths(h))
      assert.equal(1, #h.jobs)
      assert.equal("restart", h.jobs[1].verb)
      assert.matches("changed after the daemon started and its node map cannot be known", message)
    end)

    it("(a) the list file rewritten after the daemon started, the ctl shows another order: restart (C21)",
      function()
      local h = rewritten{ daemon_nodes = { "10.0.0.2", "10.0.0.1" } }
      local outcome, message = run(h)
      assert.equal("ok", outcome, message)
      assert.equal(1, #h.jobs)
      assert.matches("another node map", message)
    end)

    it("(a) config.cfg changed after the daemon started: restart", function()
      local h = testing.host{ files = { [CONFIG] = { data = testing.CONFIG_TEXT,
        mtime_us = testing.WALL0 * 1e6 } } }
      assert.equal("ok", (run(h)))
      assert.equal(1, #h.jobs)
    end)

    it("(b) the state file says this invocation runs another list: restart", function()
      local h = testing.host()
      h.set_file(STATE, cjson.encode({ invocation_id = h.unit_props.invocation_id,
        running_nodes = "10.0.0.1\n10.0.0.3\n" }), testing.WALL0 * 1e6 - 3600e6)
      local outcome, message = run(h)
      assert.equal("ok", outcome)
      assert.equal(1, #h.jobs)
      assert.matches("another node list", message)
      -- only the state file: registration, after the restart, the end of the prolog
      assert.same({ STATE, STATE, STATE }, paths(h))
    end)

    it("(b) a record of an older invocation is not a reason", function()
      local h = testing.host()
      h.set_file(STATE, cjson.encode({ invocation_id = "0123", running_nodes = "10.0.0.1\n10.0.0.3\n" }),
        testing.WALL0 * 1e6 - 3600e6)
      assert.equal("ok", (run(h)))
      assert.same({}, h.jobs)
    end)

    it("(c) the ctl proves another list: restart", function()
      local h = testing.host{ daemon_nodes = { "10.0.0.1", "10.0.0.3" } }
      local outcome, message = run(h)
      assert.equal("ok", outcome)
      assert.equal(1, #h.jobs)
      assert.matches("the ctl shows", message)
      assert.same({ "10.0.0.1", "10.0.0.2" }, h.daemon_nodes())
    end)

    it("unit query failing after the write: unit-unknown, no restart (C17)", function()
      local h = testing.host{ unit_script = { {}, "timeout" } }
      local outcome, message = run(h, { env = env("n[1,3]") })
      assert.equal("unit-unknown", outcome)
      assert.matches("unknown", message)
      assert.same({}, h.jobs)
      assert_released(h)
    end)

    it("activating: waits until it settles, then decides (C17)", function()
      local h = testing.host{ unit_script = { {}, { active_state = "activating" }, {},
        { active_state = "active" } } }
      local outcome = run(h)
      assert.equal("ok", outcome)
      assert.same({}, h.jobs)
      assert.equal(2, h.count("sleep"))
      for _, s in ipairs(h.sleeps) do assert.is_true(s <= 0.25) end
    end)

    it("activating forever: service-failed after start_timeout, no restart", function()
      local h = testing.host{ unit = { active_state = "activating" } }
      local t0 = h.now()
      local outcome, message = run(h)
      assert.equal("service-failed", outcome)
      assert.matches("activating", message)
      assert.same({}, h.jobs)
      assert.near(30, h.now() - t0, 0.3)
    end)

    it("inactive: start (C17)", function()
      local h = testing.host{ unit = { active_state = "inactive", sub_state = "dead" } }
      local outcome = run(h)
      assert.equal("ok", outcome)
      assert.same({ { unit = testing.UNIT, verb = "start", result = "done" } }, h.jobs)
    end)

    it("failed: reset-failed, then start", function()
      local h = testing.host{ unit = { active_state = "failed", result = "exit-code" } }
      assert.equal("ok", (run(h)))
      assert.equal(1, h.count("unit_reset_failed"))
      assert.equal("start", h.jobs[1].verb)
    end)
  end)

  describe("step 7: restart", function()
    it("a failed job is service-failed with systemd's result", function()
      local h = testing.host{ restart = { result = "failed" } }
      local outcome, message = run(h, { env = env("n[1,3]") })
      assert.equal("service-failed", outcome)
      assert.matches("failed", message)
      assert.matches("restart", message)
      assert.equal(0, h.count("sleep"))
    end)

    it("a job that outlives our wait is service-failed naming wait-timeout (C13)", function()
      local h = testing.host{ restart = { result = "wait-timeout" } }
      local outcome, message = run(h, { env = env("n[1,3]") })
      assert.equal("service-failed", outcome)
      assert.matches("wait%-timeout", message)
    end)

    it("polls soon after the restart, then no sooner than the bucket allows (imexguard.pace)", function()
      local down = { mesh = { nodes = { { host = "10.0.0.1" },
        { host = "10.0.0.3", status = "UNAVAILABLE" } } } }
      local h = testing.host{ ctl = { testing.UNREACHABLE, down, testing.up({ "10.0.0.1", "10.0.0.3" }) } }
      local outcome, message = run(h, { env = env("n[1,3]") })
      assert.equal("ok", outcome)
      assert.matches("restarted", message)
      assert.equal(3, #h.runs_of("nvidia-imex-ctl"))
      -- the first poll at once after the restart (the bucket's one token), then one whenever the
      -- bucket has a token again: every poll_interval + one ctl call (0.01 s here), as fixed
      -- polling every poll_interval did, although each answer was new
      assert.equal(2, #h.sleeps)
      assert.near(0.25, h.sleeps[1], 1e-3)
      assert.near(0.25, h.sleeps[2], 1e-3)
    end)
  end)

  describe("step 8: health and blame (C20)", function()
    it("active, DOWN, this node UNAVAILABLE: domain-unhealthy naming this node", function()
      local down = { mesh = { nodes = { { host = "10.0.0.1", status = "UNAVAILABLE" },
        { host = "10.0.0.2", status = "UNAVAILABLE" } } } }
      local h = testing.host{ ctl = { down } }
      local t0 = h.now()
      local outcome, message = run(h)
      assert.equal("domain-unhealthy", outcome)
      assert.equal(9, outcomes.exit_code(outcome))
      assert.matches("this node 10.0.0.1 %(n1%)", message)
      assert.matches("UNAVAILABLE", message)
      assert.same({}, h.jobs)
      assert.is_true(h.now() - t0 >= 60 and h.now() - t0 < 61)
      -- an answer that stays the same is polled at most every 2 poll_intervals, and never more
      -- often on average than every poll_interval (imexguard.pace)
      for _, s in ipairs(h.sleeps) do assert.is_true(s <= 0.5 + 1e-9) end
      assert.is_true(h.count("run") <= 1 + 60 / 0.25 + pace.BURST)
      assert.is_true(h.count("run") >= 60 / 0.5)
    end)

    it("local daemon unreachable is a local fault", function()
      local h = testing.host{ ctl = { testing.UNREACHABLE } }
      local outcome, message = run(h)
      assert.equal("domain-unhealthy", outcome)
      assert.matches("unreachable", message)
    end)

    it("DEGRADED with one UNAVAILABLE peer: peers-unhealthy naming it, exit 0", function()
      local h = testing.host{ ctl = { DEGRADED } }
      local outcome, message, _, ctx = run(h)
      assert.equal("peers-unhealthy", outcome)
      assert.matches("peers are not after [%d.]+ s: n2: status UNAVAILABLE", message)
      assert.is_nil(message:find("10.0.0.1 (n1):", 1, true))
      assert.equal(0, outcomes.exit_code(outcome, ctx.settings))
      assert.same({}, h.jobs)
    end)

    it("DEGRADED with one UNAVAILABLE peer and on_peer_fault=fail: exit 12", function()
      local h = testing.host{ ctl = { DEGRADED } }
      local outcome, _, _, ctx = run(h, { settings = { on_peer_fault = "fail" } })
      assert.equal("peers-unhealthy", outcome)
      assert.equal(12, outcomes.exit_code(outcome, ctx.settings))
    end)

    it("UP: ok", function()
      local h = testing.host{ ctl = { testing.up({ "10.0.0.1", "10.0.0.2" }) } }
      assert.equal("ok", (run(h)))
    end)

    it("a wait cut by the run's budget still ends in a named outcome before the deadline", function()
      local h = testing.host{ deadline = 20, ctl = { DEGRADED } }
      local outcome = run(h)
      assert.equal("peers-unhealthy", outcome)
      assert.is_true(h.remaining() > 0)
    end)
  end)

  describe("step 8: the nudge (a peer restarted; this node waits on its reconnect back-off)", function()
    local JOB = { "10.0.0.1", "10.0.0.2" }

    it("nothing to change, peer n2 restarted: one SIGUSR1 to the unit, never a restart, ok soon", function()
      local h = testing.host{ ctl = testing.restarted_peer{ hosts = JOB, backoff = 15 } }
      local t0 = h.now()
      local outcome, message = run(h)
      assert.equal("ok", outcome, message)
      assert.equal(1, #h.kills)
      assert.same({ testing.UNIT, 10, true }, { h.kills[1].unit, h.kills[1].signal, h.kills[1].sent })
      assert.same({}, h.jobs) -- no start, no restart
      assert.same({ STATE }, paths(h)) -- the registration only
      assert.is_true(h.now() - t0 < 2, "waited " .. (h.now() - t0) .. " s")
      assert_released(h)
    end)

    it("nudge = false: no signal, the prolog waits for the back-off (15 s)", function()
      local h = testing.host{ ctl = testing.restarted_peer{ hosts = JOB, backoff = 15 } }
      local t0 = h.now()
      local outcome = run(h, { settings = { nudge = false } })
      assert.equal("ok", outcome)
      assert.equal(0, h.count("unit_kill"))
      assert.same({}, h.jobs)
      assert.is_true(h.now() - t0 >= 15)
    end)

    it("this node restarted: its own links are up, a peer's link to it waits: no nudge here", function()
      -- the restarted daemon connects out at once; n2's link to it waits on n2's back-off, which
      -- n2's own prolog nudges: this node has nothing to nudge, and waits for UP
      local h = testing.host{ ctl = testing.restarted_peer{ hosts = JOB, from = "10.0.0.2", peer = "10.0.0.1",
        backoff = 3 } }
      local t0 = h.now()
      local outcome = run(h)
      assert.equal("ok", outcome)
      assert.equal(0, h.count("unit_kill"))
      assert.is_true(h.now() - t0 >= 3)
    end)
  end)

  describe("garbage from the ctl never causes a restart (C06)", function()
    local up = fixture("ctl/up-2node-570.json")
    local cases = {
      { "text table, exit 0", fixture("ctl/up-2node-570-00-text.txt") },
      { "nodes as an array", '{"nodes": [{"host": "10.0.0.1", "status": "READY"}], "status": "UP"}' },
      { "empty nodes", '{"nodes": {}, "status": "UP"}' },
      { "no top-level status",
        '{"nodes": {"0": {"host": "10.0.0.1", "status": "READY", "connections": {}}}}' },
      { "cut off", up:sub(1, #up // 2) },
      { "empty output, exit 255", { stdout = "", status = 255 } },
      { "a grep would match", '"status": "UP"' },
    }
    for _, c in ipairs(cases) do
      it(c[1], function()
        local h = testing.host{ ctl = { c[2] } }
        local outcome, message = run(h)
        assert.equal("ctl-unusable", outcome)
        assert_one_line(message)
        assert.same({}, h.jobs)
        assert.same({}, h.writes)
        assert.is_true(h.count("run") > 1)
      end)
    end

    it("an unconfigured DOWN answer (0.0.0.0) from an active unit is not a proof", function()
      local h = testing.host{ ctl = { fixture("ctl/down-unconfigured.json") } }
      local outcome, message = run(h)
      assert.equal("domain-unhealthy", outcome)
      assert.matches("10.0.0.1", message)
      assert.same({}, h.jobs)
    end)
  end)

  it("a ctl that hangs is named, the run stays inside its budget (C13)", function()
    local h = testing.host{ ctl = { testing.HANG } }
    local t0 = h.now()
    local outcome, message = run(h)
    assert.equal("ctl-unusable", outcome)
    assert.matches("hung", message)
    assert.matches("5 s", message)
    assert.same({}, h.jobs)
    -- the staleness probe (5 s), health_timeout (60 s), at most one more call (5 s)
    assert.is_true(h.now() - t0 >= 60 and h.now() - t0 <= 60 + 2 * 5 + 0.1)
    assert.is_true(h.remaining() > 0)
  end)

  describe("C02: concurrent prologs, one restart per real change", function()
    -- The file holds {.1,.2}; job 101 wants {.1,.3}, job 102 wants {.1,.2}. With the lock, the runs
    -- are serialised; the writes and restarts are those of the serial order.
    local function nodes_writes(h)
      local n = 0
      for _, w in ipairs(h.writes) do if w.path == NODES then n = n + 1 end end
      return n
    end

    -- restart_under_jobs = true: the registry does not refuse, only the lock serialises.
    local under = { restart_under_jobs = true }

    it("101 then 102: two real changes, two writes, two restarts", function()
      local h = testing.host()
      assert.equal("ok", (run(h, { env = env("n[1,3]"), settings = under })))
      assert.equal("ok", (run(h, { env = env("n[1-2]", { SLURM_JOB_ID = "102" }), settings = under })))
      assert.equal(2, nodes_writes(h))
      assert.equal(2, #h.jobs)
      assert.equal("10.0.0.1\n10.0.0.2\n", h.file(NODES))
      assert.same({ "10.0.0.1", "10.0.0.2" }, h.daemon_nodes())
    end)

    it("101 then 102 under the default rule: 102 is a conflict with 101, one write, one restart", function()
      local h = testing.host()
      assert.equal("ok", (run(h, { env = env("n[1,3]") })))
      local outcome, message = run(h, { env = env("n[1-2]", { SLURM_JOB_ID = "102" }) })
      assert.equal("conflict", outcome)
      assert.matches("job 101", message)
      assert.equal(1, nodes_writes(h))
      assert.equal(1, #h.jobs)
      assert.equal("10.0.0.1\n10.0.0.3\n", h.file(NODES))
    end)

    it("101, its epilog, then 102: two writes, two restarts", function()
      local h = testing.host()
      assert.equal("ok", (run(h, { env = env("n[1,3]") })))
      assert.equal("ok", (run(h, { env = env("n[1,3]"), command = "epilog" })))
      assert.equal("ok", (run(h, { env = env("n[1-2]", { SLURM_JOB_ID = "102" }) })))
      assert.equal(2, nodes_writes(h))
      assert.equal(2, #h.jobs)
    end)

    it("102 then 101: one real change, one write, one restart", function()
      local h = testing.host()
      assert.equal("ok", (run(h, { env = env("n[1-2]", { SLURM_JOB_ID = "102" }), settings = under })))
      assert.equal(0, nodes_writes(h))
      assert.same({}, h.jobs)
      assert.equal("ok", (run(h, { env = env("n[1,3]"), settings = under })))
      assert.equal(1, nodes_writes(h))
      assert.equal(1, #h.jobs)
      assert.same({ "10.0.0.1", "10.0.0.3" }, h.daemon_nodes())
    end)

    it("the same change twice: one write, one restart", function()
      local h = testing.host()
      run(h, { env = env("n[1,3]") })
      run(h, { env = env("n[1,3]", { SLURM_JOB_ID = "103" }) })
      assert.equal(1, nodes_writes(h))
      assert.equal(1, #h.jobs)
    end)

    it("101 arriving while 102 holds the lock too long changes nothing", function()
      local h = testing.host{ lock = { pid = 4321, owner = "job=102" } }
      local outcome, message = run(h, { env = env("n[1,3]") })
      assert.equal("lock-timeout", outcome)
      assert.matches("job=102", message)
      assert.equal(0, nodes_writes(h))
      assert.same({}, h.jobs)
    end)

    it("101 waiting for 102's lock decides after it, from the file 102 left", function()
      local h = testing.host{ lock = { pid = 4321, owner = "job=102", release_at = 1010 } }
      -- 102 (the holder) leaves {.1,.2}: unchanged. 101 then rewrites once and restarts once.
      assert.equal("ok", (run(h, { env = env("n[1,3]") })))
      assert.equal(1, nodes_writes(h))
      assert.equal(1, #h.jobs)
      assert.is_true(h.now() >= 1010)
    end)
  end)
end)

describe("default policy job registry (C08, scenario style)", function()
  local given = H.registry.given

  it("C08: a different list is a conflict naming job 100; same list ok; 100's epilog leaves IMEX", function()
    local s = given()
    local invocation = s:unit().invocation_id
    -- job 101 wants {.1,.2}: refused, nothing written, nothing restarted
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("conflict", outcome)
    assert.equal(5, outcomes.exit_code(outcome))
    assert.matches("job 100 %(", message)
    assert.matches("10.0.0.[1,3]", message, 1, true)
    assert.matches("imexguard forget 100", message)
    assert.is_nil(message:find("\n"))
    assert.same({}, s:writes())
    assert.same({}, s:writes(STATE))
    assert.equal(0, s:restarts())
    assert.same({ "n1", "n3" }, s:file_nodes())
    assert.same({ "100" }, s:registered())
    local n, released = s:locks()
    assert.equal(1, n)
    assert.is_true(released)
    -- job 101 (again) wants {.1,.3}: ok without a restart, registered next to 100
    outcome, message = s:prolog{ job = 101, nodelist = "n[1,3]" }
    assert.equal("ok", outcome)
    assert.matches("current", message)
    assert.equal(0, s:restarts())
    assert.same({}, s:writes())
    assert.same({ "100", "101" }, s:registered())
    -- job 100's epilog while 101 runs: ok, IMEX running (same instance), 101 still registered
    outcome, message = s:epilog{ job = 100 }
    assert.equal("ok", outcome)
    assert.matches("left running", message)
    assert.same({ "101" }, s:registered())
    assert.same({}, s:unit_jobs())
    assert.equal("active", s:unit().active_state)
    assert.equal(invocation, s:unit().invocation_id)
    assert.same({ "n1", "n3" }, s:daemon())
  end)

  it("refuses a start of a stopped daemon with another list too", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n3" }, unit = "inactive",
      jobs = { [100] = { "n1", "n3" } } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("conflict", outcome)
    assert.matches("start nvidia%-imex%.service", message)
    assert.same({}, s:writes())
    assert.equal(0, s:restarts())
  end)

  it("restart_under_jobs = true lets the restart happen, with a warning naming job 100", function()
    local s = given()
    local outcome = s:prolog{ job = 101, nodelist = "n[1-2]", settings = { restart_under_jobs = true } }
    assert.equal("ok", outcome)
    assert.same({ "10.0.0.1\n10.0.0.2\n" }, s:writes())
    assert.equal(1, s:restarts())
    assert.same({ "n1", "n2" }, s:daemon())
    assert.matches("under job 100", s:logs("warning")[1])
    assert.same({ "100", "101" }, s:registered())
  end)

  it("the job's own registration (requeue) never conflicts and is replaced", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n3" }, jobs = { [101] = { "n1", "n3" } } }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.equal(1, s:restarts())
    local regs = s:registrations()
    assert.equal(1, #regs)
    assert.equal("10.0.0.1\n10.0.0.2\n", regs[1].nodes)
    assert.equal(s:unit().invocation_id, regs[1].invocation_id)
  end)

  it("a failed prolog registers nothing", function()
    local s = testing.scenario{ policy = P, mesh = "down" }
    assert.equal("domain-unhealthy", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.same({}, s:registered())
  end)

  it("peers-unhealthy registers the job (the job runs)", function()
    local s = testing.scenario{ policy = P, mesh = { unhealthy = { n2 = "UNAVAILABLE" } } }
    assert.equal("peers-unhealthy", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.same({ "101" }, s:registered())
  end)

  describe("C36: a state directory that outlives a reboot (registrations tied to the boot ID)", function()
    local OLD = "6d1f0c2a-0000-4000-8000-000000000001"
    local function given_boot(jobs, o)
      o = o or {}
      return testing.scenario{ policy = P, file = { "n1", "n3" }, jobs = jobs, files = o.files,
        settings = o.settings }
    end

    it("job 100 of another boot is dropped with a warning naming it; the restart goes ahead", function()
      local s = given_boot({ { id = 100, nodes = { "n1", "n3" }, boot_id = OLD } })
      local outcome = s:prolog{ job = 101, nodelist = "n[1-2]" }
      assert.equal("ok", outcome)
      assert.equal(1, s:restarts())
      assert.same({ "101" }, s:registered())
      assert.equal(testing.BOOT_ID, s:registrations()[1].boot_id)
      local w = s:logs("warning")
      assert.equal(1, #w)
      assert.matches("job 100", w[1])
      assert.matches("another boot", w[1])
      assert.matches(OLD, w[1], 1, true)
    end)

    it("this boot's job 100 still blocks; an entry without a boot ID (older version) is kept", function()
      for _, e in ipairs({ { id = 100, nodes = { "n1", "n3" }, boot_id = testing.BOOT_ID },
        { id = 100, nodes = { "n1", "n3" } } }) do
        local s = given_boot({ e })
        assert.equal("conflict", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
        assert.same({ "100" }, s:registered())
        assert.equal(0, s:restarts())
      end
    end)

    it("an unreadable boot ID drops nothing and registers without one", function()
      local s = given_boot({ { id = 100, nodes = { "n1", "n3" }, boot_id = OLD } },
        { files = { [testing.BOOT_ID_FILE] = false } })
      assert.equal("conflict", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
      assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1,3]" }))
      assert.same({ "100", "101" }, s:registered())
      assert.is_nil(s:registrations()[2].boot_id)
    end)

    it("the path is the setting boot_id_file; the epilog drops the other boot's entries too", function()
      local s = given_boot({ { id = 100, nodes = { "n1", "n3" }, boot_id = OLD },
        { id = 102, nodes = { "n1", "n3" }, boot_id = "abc-1" } },
        { files = { ["/tmp/boot_id"] = "abc-1\n" }, settings = { boot_id_file = "/tmp/boot_id" } })
      assert.equal("ok", (s:epilog{ job = 102 }))
      assert.same({}, s:registered())
      assert.matches("job 100", s:logs("warning")[1])
    end)

    it("plan does not count another boot's job as a conflict", function()
      local s = given_boot({ { id = 100, nodes = { "n1", "n3" }, boot_id = OLD } })
      assert.equal("ok", (s:plan{ job = 101, nodelist = "n[1-2]" }))
      assert.same({ "100" }, s:registered()) -- plan changes nothing
    end)
  end)

  describe("C34: a key repeated in config.cfg", function()
    local function cfg_with(extra) return { [CONFIG] = testing.CONFIG_TEXT .. extra } end

    it("the same value twice: prolog, plan, status and health go on, the repeat is a warning", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n3" },
        files = cfg_with("IMEX_CMD_ENABLED=1\n") }
      assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
      assert.equal(1, s:restarts())
      assert.matches("IMEX_CMD_ENABLED is set 2 times with the same value '1' %(lines 5, 10%)",
        s:logs("warning")[1])
      assert.equal("ok", (s:plan{ job = 102, nodelist = "n[1-2]" }))
      assert.equal("ok", (s:status{}))
      assert.equal("ok", (s:health{}))
    end)

    it("two command ports: prolog ok, its port owner unchecked (said at debug); plan and status name both "
      .. "lines and that the daemon's choice is unknown", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n3" },
        files = cfg_with("IMEX_CMD_PORT=50015\n") }
      assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
      assert.matches("line 6: '50005', line 10: '50015'", s:logs("warning")[1], 1, true)
      assert.matches("command port owner not checked: .*IMEX_CMD_PORT", table.concat(s:logs("debug"), "\n"))
      for _, cmd in ipairs({ "plan", "status" }) do
        local o, m, report = s:run(cmd, { job = 102, nodelist = "n[1-2]" })
        assert.equal("ok", o, cmd) -- a repeat is not a configuration fault
        local shown = cmd == "plan" and report or m
        assert.matches("line 6: '50005', line 10: '50015'", shown, 1, true)
        assert.matches("is unknown", shown)
      end
    end)

    it("two node list files: bad-input naming both lines, nothing written or restarted", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n3" },
        files = cfg_with("IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/other.cfg\n") }
      local outcome, msg = s:prolog{ job = 101, nodelist = "n[1-2]" }
      assert.equal("bad-input", outcome)
      assert.matches("line 4: '/etc/nvidia%-imex/nodes_config.cfg', line 10: '/etc/nvidia%-imex/other.cfg'",
        msg)
      assert.matches("unknown", msg)
      assert.same({}, s:writes())
      assert.equal(0, s:restarts())
    end)
  end)

  describe("C39: temp files a killed write left behind", function()
    local LEFT = { "/run/imexguard/.state.json.imexguard.AbC123",
      "/etc/nvidia-imex/.nodes_config.cfg.imexguard.x9Y8z7" }
    local ALIKE = { "/run/imexguard/.foo.imexguard.AbC123", "/run/imexguard/.state.json.bak",
      "/etc/nvidia-imex/.config.cfg.imexguard.AbC123", "/etc/nvidia-imex/.nodes_config.cfg.imexguard.AbC1234",
      "/tmp/.state.json.imexguard.AbC123", "/etc/nvidia-imex/.nodes_config.cfg.x9Y8z7" }
    local function given_left()
      local files = {}
      for _, p in ipairs(LEFT) do files[p] = "partial" end
      for _, p in ipairs(ALIKE) do files[p] = "someone else's" end
      return testing.scenario{ policy = P, files = files }
    end

    it("the prolog removes both, under the lock, says so at debug, and keeps the look-alikes", function()
      local s = given_left()
      assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
      for _, p in ipairs(LEFT) do assert.is_nil(s.host.file(p), p) end
      for _, p in ipairs(ALIKE) do assert.equal("someone else's", s.host.file(p), p) end
      local debug = table.concat(s:logs("debug"), "\n")
      for _, p in ipairs(LEFT) do assert.matches("removed " .. p, debug, 1, true) end
      local order = {}
      for _, c in ipairs(s.host.calls) do
        if c[1] == "lock" or c[1] == "remove_temps" then order[#order + 1] = c[1] end
      end
      assert.same({ "lock", "remove_temps", "remove_temps" }, order)
    end)

    it("the epilog removes the state file's; plan removes nothing", function()
      local s = given_left()
      s:plan{ job = 101, nodelist = "n[1-2]" }
      for _, p in ipairs(LEFT) do assert.equal("partial", s.host.file(p), p) end
      s = testing.scenario{ policy = P, jobs = { [100] = { "n1", "n2" } },
        files = { [LEFT[1]] = "partial", [ALIKE[1]] = "x" } }
      assert.equal("ok", (s:epilog{ job = 100 }))
      assert.is_nil(s.host.file(LEFT[1]))
      assert.equal("x", s.host.file(ALIKE[1]))
    end)
  end)

  it("after a reboot the state directory is created before the lock", function()
    local s = testing.scenario{ policy = P, fresh_boot = true }
    assert.is_false(s.host.dir_exists("/run/imexguard"))
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.same({ "/run/imexguard" }, s:mkdirs())
    assert.equal(tonumber("755", 8), s.host.mkdirs[1].mode)
    assert.is_true(s.host.mkdirs[1].created)
    assert.same({ "101" }, s:registered())
    -- mkdir comes before the lock
    local order = {}
    for _, c in ipairs(s.host.calls) do
      if c[1] == "mkdir" or c[1] == "lock" then order[#order + 1] = c[1] end
    end
    assert.same({ "mkdir", "lock" }, order)
  end)

  it("a state directory that cannot be created: write-failed naming it, nothing changed", function()
    local s = testing.scenario{ policy = P, fresh_boot = true, file = { "n1", "n3" },
      fail = { ["/run/imexguard"] = { mkdir = "EROFS" } } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("write-failed", outcome)
    assert.matches("/run/imexguard", message)
    assert.matches("EROFS", message)
    assert.same({}, s:writes())
    assert.equal(0, s:restarts())
  end)

  it("start-limit-hit: service-failed naming the result; the job is not registered", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n3" }, settings = { reset_failed_retry = false },
      restart = { result = "failed", unit_result = "start-limit-hit" } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("service-failed", outcome)
    assert.matches("restart", message)
    assert.equal("start-limit-hit", s:unit().result)
    assert.same({}, s:registered())
  end)
end)

-- Defects of the policy layer found by adversarial testing (/tmp/breaker-repro); each spec failed
-- before its fix.
describe("default policy: hardening", function()
  describe("C04: a name with several IPv4 addresses", function()
    -- Round-robin DNS or glibc's sorting by local subnet (RFC 6724 rule 9) give each node its own
    -- order, so "the first answer" would differ between the nodes of one job.
    for _, order in ipairs({ { "10.0.0.3", "10.9.0.3" }, { "10.9.0.3", "10.0.0.3" } }) do
      it("is bad-input naming the name and its addresses, suggesting address_source = \"map\" ("
        .. order[1] .. " first)", function()
        local h = testing.host{ resolve = { n3 = order }, files = { [NODES] = "10.0.0.9\n" } }
        local outcome, message = run(h, { env = env("n[1-3]") })
        assert.equal("bad-input", outcome)
        assert_one_line(message)
        assert.matches("n3", message)
        assert.matches("10.0.0.3", message, 1, true)
        assert.matches("10.9.0.3", message, 1, true)
        assert.matches('address_source = "map"', message, 1, true)
        assert_untouched(h)
        assert.equal("10.0.0.9\n", h.file(NODES))
      end)
    end

    it("the same address twice in an answer is one address", function()
      local h = testing.host{ resolve = { n2 = { "10.0.0.2", "10.0.0.2" } } }
      assert.equal("ok", (run(h)))
    end)
  end)

  describe("registration before any change", function()
    it("an interrupted prolog (its deployment record left behind) does not block the next job", function()
      -- job 200's prolog registered {.1,.3} and died (kill -9) before it ended: Slurm does not run it
      local left = "10.0.0.1\n10.0.0.3\n"
      local h = testing.host{ files = { [STATE] = cjson.encode({ deploying_job = "200",
        deploying_nodes = left, deploying_us = "1700000000000000", jobs = { { id = "200", nodes = left,
        registered_us = "1700000000000000" } } }), [NODES] = left } }
      local outcome, message = run(h) -- job 101 wants {.1,.2}
      assert.equal("ok", outcome, message)
      assert.equal("10.0.0.1\n10.0.0.2\n", h.file(NODES))
      local st = cjson.decode(h.file(STATE))
      assert.is_nil(st.deploying_job)
      assert.equal(1, #st.jobs)
      assert.equal("101", st.jobs[1].id)
      local warned = false
      for _, l in ipairs(h.logs) do
        if tostring(l[2]):find("prolog of job 200 was interrupted", 1, true) then warned = true end
      end
      assert.is_true(warned, "the dropped registration is logged")
    end)

    it("without a deployment record a registered job with another list still refuses (C08)", function()
      local left = "10.0.0.1\n10.0.0.3\n"
      local h = testing.host{ files = { [STATE] = cjson.encode({ jobs = { { id = "200", nodes = left,
        registered_us = "1700000000000000" } } }), [NODES] = left } }
      assert.equal("conflict", (run(h)))
      assert.equal(left, h.file(NODES))
    end)

    it("the state file is saved with the job registered before the list is rewritten", function()
      local h = testing.host()
      assert.equal("ok", (run(h, { env = env("n[1,3]") })))
      assert.equal(STATE, h.writes[1].path)
      local first = cjson.decode(h.writes[1].data)
      assert.equal("101", first.jobs[1].id)
      assert.equal("10.0.0.1\n10.0.0.3\n", first.jobs[1].nodes)
      assert.equal("10.0.0.1\n10.0.0.3\n", first.deploying_nodes)
      assert.equal("101", first.deploying_job)
      assert.equal(NODES, h.writes[2].path)
      -- once the daemon runs, the record of the deployment is gone and the entry names the daemon
      local st = cjson.decode(h.file(STATE))
      assert.is_nil(st.deploying_nodes)
      assert.equal(h.unit_props.invocation_id, st.jobs[1].invocation_id)
    end)

    it("a state file that cannot be written: write-failed, nothing rewritten or restarted", function()
      local h = testing.host{ fail = { [STATE] = { write = "ENOSPC" } } }
      local outcome, message = run(h, { env = env("n[1,3]") })
      assert.equal("write-failed", outcome)
      assert_one_line(message)
      assert.matches(STATE, message, 1, true)
      assert.matches("ENOSPC", message)
      assert.matches("not registered", message)
      assert.same({}, h.writes)
      assert.same({}, h.jobs)
      assert.equal("10.0.0.1\n10.0.0.2\n", h.file(NODES))
      assert_released(h)
    end)

    it("fast path: a registration that cannot be saved is write-failed (exit 11)", function()
      local h = testing.host{ fail = { [STATE] = { write = "ENOSPC" } } }
      local outcome, message = run(h)
      assert.equal("write-failed", outcome)
      assert.equal(11, outcomes.exit_code(outcome))
      assert.matches("job 101 not registered", message)
      assert.matches("ENOSPC", message)
      assert.same({}, h.jobs)
    end)

    it("a prolog that fails after the change unregisters the job again", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n3" }, mesh = "down" }
      local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
      assert.equal("domain-unhealthy", outcome)
      assert.equal(1, s:restarts())
      assert.same({}, s:registered())
      assert.matches("job 101 unregistered", message)
      -- the next job with another list is not blocked by the failed one
      s:clear()
      assert.equal("domain-unhealthy", (s:prolog{ job = 102, nodelist = "n[1,3]" }))
      assert.equal(1, s:restarts())
    end)

    it("a failed restart unregisters the job (service-failed)", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n3" }, restart = { result = "failed" } }
      assert.equal("service-failed", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
      assert.same({}, s:registered())
    end)

    it("a failing outcome on the fast path registers nothing (on_peer_fault = fail, exit 12)", function()
      local s = testing.scenario{ policy = P, mesh = { unhealthy = { n2 = "UNAVAILABLE" } },
        settings = { on_peer_fault = "fail" } }
      assert.equal("peers-unhealthy", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
      assert.same({}, s:registered())
    end)

    it("a step that raises after the registration unregisters the job", function()
      local h = testing.host{ ctl = function() error("boom") end }
      local ok = pcall(run, h, { env = env("n[1,3]") })
      assert.is_false(ok)
      assert.equal(1, #h.jobs)
      assert.is_nil(cjson.decode(h.file(STATE)).jobs)
      assert_released(h)
    end)
  end)

  describe("an unreadable or corrupt state file: the registry is unknown", function()
    local good = '{"jobs":[{"id":"100","nodes":"10.0.0.1\\n10.0.0.3\\n",'
      .. '"registered_us":"1700000000000000"}]}\n'
    local cases = {
      { "truncated JSON", good:sub(1, 40) },
      { "empty file", "" },
      { "EIO", good, { read = "EIO" } },
      { "jobs is not a list", '{"jobs":"100"}' },
      { "a malformed entry next to a good one",
        '{"jobs":[{"id":"100","nodes":"10.0.0.1\\n10.0.0.3\\n"},{"id":7}]}' },
      { "an entry with a wrong type", '{"jobs":[{"id":"100","nodes":5}]}' },
      { "a top-level field with a wrong type", '{"running_nodes":{"a":1}}' },
      { "not an object", '[1,2]' },
    }
    for _, c in ipairs(cases) do
      it(c[1] .. ": conflict naming the file, nothing changed, the file kept", function()
        local h = testing.host{ files = { [NODES] = "10.0.0.1\n10.0.0.3\n", [STATE] = c[2] },
          fail = c[3] and { [STATE] = c[3] } or nil }
        local outcome, message = run(h)
        assert.equal("conflict", outcome)
        assert_one_line(message)
        assert.matches(STATE, message, 1, true)
        assert.matches("nothing changed", message)
        assert.matches("no job uses IMEX", message)
        assert.same({}, h.writes)
        assert.same({}, h.jobs)
        assert.equal(c[2], h.file(STATE))
        assert_released(h)
      end)
    end
  end)

  describe("restart under a running job by mtime alone", function()
    it("a daemon imexguard started is current while its invocation and bytes are the same (touch)",
      function()
        local s = testing.scenario{ policy = P, file = { "n1", "n3" } }
        assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
        assert.equal(1, s:restarts())
        local st = cjson.decode(s.host.file(STATE))
        assert.equal(s:unit().invocation_id, st.invocation_id)
        assert.equal("10.0.0.1\n10.0.0.2\n", st.running_nodes)
        assert.equal(testing.CONFIG_TEXT, st.running_config)
        assert.equal("ok", (s:epilog{ job = 101 }))
        -- config management rewrites both files with identical bytes
        s:advance(60)
        s.host.set_file(CONFIG, testing.CONFIG_TEXT)
        s.host.set_file(NODES, "10.0.0.1\n10.0.0.2\n")
        s:clear()
        local outcome, message = s:prolog{ job = 102, nodelist = "n[1-2]" }
        assert.equal("ok", outcome)
        assert.matches("current", message)
        assert.equal(0, s:restarts())
      end)

    it("the same invocation with other config.cfg bytes is stale", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n3" } }
      assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
      assert.equal("ok", (s:epilog{ job = 101 }))
      s.host.set_file(CONFIG, testing.CONFIG_TEXT .. "# edited\n", 0) -- an old mtime: bytes decide
      s:clear()
      local outcome, message = s:prolog{ job = 102, nodelist = "n[1-2]" }
      assert.equal("ok", outcome)
      assert.equal(1, s:restarts())
      assert.matches("config.cfg", message)
    end)

    it("an active daemon is never restarted under another job with the SAME list (t_touch)", function()
      local s = testing.scenario{ policy = P, jobs = { [100] = "n[1-2]" },
        files = { [CONFIG] = { data = testing.CONFIG_TEXT, mtime_us = testing.WALL0 * 1e6 } } }
      local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
      assert.equal("conflict", outcome)
      assert_one_line(message)
      assert.matches("job 100", message)
      assert.matches("imexguard forget 100", message)
      assert.equal(0, s:restarts())
      assert.same({}, s:writes())
      assert.same({ "100" }, s:registered())
    end)

    it("restart_under_jobs = true allows it, with a warning", function()
      local s = testing.scenario{ policy = P, jobs = { [100] = "n[1-2]" },
        settings = { restart_under_jobs = true },
        files = { [CONFIG] = { data = testing.CONFIG_TEXT, mtime_us = testing.WALL0 * 1e6 } } }
      assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
      assert.equal(1, s:restarts())
      assert.matches("under job 100", s:logs("warning")[1])
    end)

    it("starting a failed daemon under a job with the same list is allowed", function()
      local s = testing.scenario{ policy = P, unit = "failed", jobs = { [100] = "n[1-2]" } }
      assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
      assert.same({ "start" }, s:unit_jobs())
    end)
  end)

  describe("lock errors other than a timeout", function()
    for _, code in ipairs({ "ENOSPC", "EROFS", "EACCES" }) do
      it(code .. " creating the lock file: write-failed naming the state directory", function()
        local h = testing.host{ fail = { ["/run/imexguard/lock"] = { lock = code } } }
        local outcome, message = run(h, { env = env("n[1,3]") })
        assert.equal("write-failed", outcome)
        assert_one_line(message)
        assert.matches("/run/imexguard", message, 1, true)
        assert.matches(code, message)
        assert.is_nil(message:find("held by", 1, true))
        assert.same({}, h.writes)
        assert.same({}, h.jobs)
      end)
    end
  end)

  describe("the job id", function()
    it("a prolog without SLURM_JOB_ID is bad-input, nothing changed", function()
      local h = testing.host()
      local outcome, message = run(h, { env = { SLURM_JOB_NODELIST = "n[1,3]", SLURMD_NODENAME = "n1" } })
      assert.equal("bad-input", outcome)
      assert.matches("SLURM_JOB_ID", message)
      assert_untouched(h)
    end)

    it("SLURM_JOBID (22.05) is checked and named when it is the only one", function()
      local h = testing.host()
      local outcome, message = run(h, { env = { SLURM_JOBID = "x1", SLURM_NODELIST = "n[1-2]" } })
      assert.equal("bad-input", outcome)
      assert.matches("SLURM_JOBID", message)
    end)
  end)

  it("a failed write says 'old file intact' once (the primitive says it)", function()
    local h = testing.host{ fail = { [NODES] = { write = "ENOSPC" } } }
    local outcome, message = run(h, { env = env("n[1,3]") })
    assert.equal("write-failed", outcome)
    local _, n = message:gsub("old file intact", "")
    assert.equal(1, n)
  end)
end)

-- Unit lifecycle faults are named when they happen (C26 start limit, C27 a stray
-- daemon on the command port).
describe("default policy: unit lifecycle faults (C26, C27)", function()
  local HIT = { result = "failed", unit_result = "start-limit-hit" }
  local given, STRAY = H.lifecycle.given, H.lifecycle.STRAY
  local function verbs(s) return s:unit_jobs() end

  it("start-limit-hit by default: one reset-failed, one retry with start, ok in the same run", function()
    local s = given{ restart = { HIT, {} } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("ok", outcome, message)
    assert.same({ "restart", "start" }, verbs(s))
    assert.equal(1, s.host.count("unit_reset_failed"))
    assert.same({ "101" }, s:registered())
    assert.matches("start limit", s:logs("warning")[1])
    assert.matches("reset_failed_retry", s:logs("warning")[1])
  end)

  it("start-limit-hit again after the retry: service-failed naming the Result and the recovery, no third job",
    function()
      local s = given{ restart = { HIT, HIT, {} } }
      local outcome, message = s:prolog{ job = 102, nodelist = "n[1-2]" }
      assert.equal("service-failed", outcome)
      assert.equal(7, outcomes.exit_code(outcome))
      assert.matches("start%-limit%-hit", message)
      assert.matches("systemctl reset%-failed nvidia%-imex.service", message)
      assert.matches("StartLimitBurst", message)
      assert.matches("StartLimitIntervalSec", message)
      assert.same({ "restart", "start" }, verbs(s))
      assert.equal(1, s.host.count("unit_reset_failed"))
      assert.same({}, s:registered())
      assert_one_line(message)
    end)

  it("reset_failed_retry = false: no reset-failed, no retry; the message names the setting", function()
    local s = given{ restart = { HIT, {} }, settings = { reset_failed_retry = false } }
    local outcome, message = s:prolog{ job = 103, nodelist = "n[1-2]" }
    assert.equal("service-failed", outcome)
    assert.matches("unit Result start%-limit%-hit", message)
    assert.matches("reset_failed_retry = true", message)
    assert.same({ "restart" }, verbs(s))
    assert.equal(0, s.host.count("unit_reset_failed"))
  end)

  for _, r in ipairs({ { "exit-code", "journalctl %-u nvidia%-imex.service" }, { "core-dump", "coredumpctl" },
    { "timeout", "TimeoutStartSec" }, { "signal", "signal" } }) do
    it("a start that fails with Result " .. r[1] .. " is named, with no reset-failed and no retry", function()
      local s = given{ unit = "inactive", restart = { { result = "failed", unit_result = r[1] }, {} } }
      local outcome, message = s:prolog{ job = 104, nodelist = "n[1-2]" }
      assert.equal("service-failed", outcome)
      local result = r[1]:gsub("%-", "%%-")
      assert.matches("systemd start of nvidia%-imex.service failed %(failed%): unit Result " .. result,
        message)
      assert.matches(r[2], message)
      assert.same({ "start" }, verbs(s))
      assert.equal(0, s.host.count("unit_reset_failed"))
    end)
  end

  it("a failed unit is reset-failed before its start only when reset_failed_retry allows", function()
    local s = given{ unit = { state = "failed", result = "start-limit-hit" }, restart = { {} } }
    assert.equal("ok", (s:prolog{ job = 105, nodelist = "n[1-2]" }))
    assert.equal(1, s.host.count("unit_reset_failed"))
    local s2 = given{ unit = { state = "failed", result = "start-limit-hit" }, restart = { HIT },
      settings = { reset_failed_retry = false } }
    local outcome, message = s2:prolog{ job = 105, nodelist = "n[1-2]" }
    assert.equal("service-failed", outcome)
    assert.matches("start%-limit%-hit", message)
    assert.equal(0, s2.host.count("unit_reset_failed"))
  end)

  it("a failed unit reset before its start that hits the start limit again gets no second "
    .. "reset-failed: at most one reset-failed and one retry per run", function()
    local s = given{ unit = { state = "failed", result = "start-limit-hit" }, restart = { HIT, {} } }
    local outcome, message = s:prolog{ job = 107, nodelist = "n[1-2]" }
    assert.equal(1, s.host.count("unit_reset_failed"))
    assert.same({ "start" }, verbs(s))
    assert.equal("service-failed", outcome, message)
    assert.matches("start%-limit%-hit", message)
  end)

  it("a current daemon is never restarted, whatever its last Result says", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n2" }, unit = { result = "start-limit-hit" },
      restart = { HIT } }
    assert.equal("ok", (s:prolog{ job = 106, nodelist = "n[1-2]" }))
    assert.same({}, s:unit_jobs())
    assert.equal(0, s.host.count("unit_reset_failed"))
  end)

  it("C27: unit inactive, a daemon started by hand on the command port: no start, service-failed naming it",
    function()
      local s = given{ unit = "inactive", host = { port_owner = STRAY } }
      local outcome, message = s:prolog{ job = 107, nodelist = "n[1-2]" }
      assert.equal("service-failed", outcome)
      assert.matches("pid 31337 %(/usr/bin/nvidia%-imex %-c /tmp/debug.cfg%)", message)
      assert.matches("command port 50005", message)
      assert.matches("kill 31337", message)
      assert.same({}, s:unit_jobs())
      assert.same({}, s:registered())
    end)

  it("an active unit whose daemon is not the one on the command port is never healthy", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n2" }, host = { port_owner = STRAY } }
    local outcome, message = s:prolog{ job = 108, nodelist = "n[1-2]" }
    assert.equal("service-failed", outcome)
    assert.matches("pid 31337", message)
    assert.matches("not the main process of nvidia%-imex.service", message)
    assert.same({}, s:registered())
  end)

  it("a listener in the unit's control group (not its main pid) is the unit's", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n2" },
      host = { port_owner = { pid = 4300, comm = "nvidia-imex", cmdline = "nvidia-imex" } },
      files = { ["/proc/4300/cgroup"] = "0::/system.slice/nvidia-imex.service\n" } }
    assert.equal("ok", (s:prolog{ job = 109, nodelist = "n[1-2]" }))
  end)
end)

-- C37: the command service on a unix socket (NVIDIA's Kubernetes host-managed guide).
describe("default policy: the command service on a unix socket (C37)", function()
  local SOCK = "/run/nvidia-imex/cmd.sock"
  local STRAY = H.lifecycle.STRAY
  local function cfg(port_line)
    local t = testing.CONFIG_TEXT:gsub("IMEX_CMD_PORT=50005\n", port_line or "")
    return { [CONFIG] = t .. "IMEX_CMD_UNIX_DOMAIN_PATH=" .. SOCK .. "\n" }
  end
  local function calls(s, name)
    local out = {}
    for _, c in ipairs(s.host.calls) do if c[1] == name then out[#out + 1] = c end end
    return out
  end

  for _, case in ipairs({ { "IMEX_CMD_PORT left empty", "IMEX_CMD_PORT=\n" },
    { "no IMEX_CMD_PORT line", nil } }) do
    it(case[1] .. ": the ctl is called with -u SOCKET, the socket's owner is checked, no TCP port assumed",
      function()
        local s = testing.scenario{ policy = P, file = { "n1", "n3" }, files = cfg(case[2]) }
        assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
        assert.equal(1, s:restarts())
        local argv = s.host.runs[#s.host.runs]
        assert.same({ "/usr/bin/nvidia-imex-ctl", "-u", SOCK, "-N", "-j" }, argv)
        for _, a in ipairs(s.host.runs) do assert.is_nil(table.concat(a, " "):find(" -c ", 1, true)) end
        assert.equal(0, #calls(s, "port_owner"))
        local so = calls(s, "socket_owner")
        assert.is_true(#so > 0)
        assert.equal(SOCK, so[1][2])
        assert.equal(s:unit().main_pid, so[#so][4])
        -- plan and status: no finding about a TCP port that is not configured
        local o, m, report = s:plan{ job = 102, nodelist = "n[1-2]" }
        assert.equal("ok", o, m)
        assert.is_nil(report:find("IMEX_CMD_PORT", 1, true))
        o, m = s:status{}
        assert.equal("ok", o, m)
        assert.is_nil(m:find("IMEX_CMD_PORT", 1, true))
      end)
  end

  it("a stray daemon on the socket: service-failed naming it and the socket", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n2" }, files = cfg("IMEX_CMD_PORT=\n"),
      host = { socket_owner = STRAY } }
    local outcome, message = s:prolog{ job = 108, nodelist = "n[1-2]" }
    assert.equal("service-failed", outcome)
    assert.matches("pid 31337 %(/usr/bin/nvidia%-imex %-c /tmp/debug.cfg%)", message)
    assert.matches("command socket " .. SOCK:gsub("%-", "%%-"), message)
    assert.equal("service-failed", (s:status{}))
  end)

  it("a TCP port too: the ctl keeps -c (the port is known to work); both listeners are checked", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n3" }, files = cfg("IMEX_CMD_PORT=50005\n") }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.same({ "/usr/bin/nvidia-imex-ctl", "-c", CONFIG, "-N", "-j" }, s.host.runs[#s.host.runs])
    assert.is_true(#calls(s, "port_owner") > 0)
    assert.is_true(#calls(s, "socket_owner") > 0)
  end)
end)

-- Sites that ship the unit disabled (C23).
describe("default policy: a disabled unit (C23)", function()
  it("skipped by default, with a warning naming manage_disabled_unit when config.cfg exists", function()
    local s = testing.scenario{ policy = P, unit = "disabled" }
    local outcome, message = s:prolog{ job = 201, nodelist = "n[1-2]" }
    assert.equal("skipped", outcome)
    assert.matches("manage_disabled_unit", message)
    assert.matches("manage_disabled_unit", s:logs("warning")[1])
    assert.same({}, s:unit_jobs())
  end)

  it("without config.cfg the skip is no warning", function()
    local s = testing.scenario{ policy = P, unit = "disabled", files = { [CONFIG] = false } }
    assert.equal("skipped", (s:prolog{ job = 202, nodelist = "n[1-2]" }))
    assert.same({}, s:logs("warning"))
  end)

  it("manage_disabled_unit = true: started per job (start, never enable), ok; plan says start", function()
    local failed = { state = "disabled", active_state = "failed", result = "exit-code" }
    for _, u in ipairs({ "disabled", failed }) do
      local s = testing.scenario{ policy = P, unit = u, file = { "n1", "n3" },
        settings = { manage_disabled_unit = true } }
      local o, _, report = s:plan{ job = 203, nodelist = "n[1-2]" }
      assert.equal("ok", o)
      assert.matches("start", report)
      local outcome, message = s:prolog{ job = 203, nodelist = "n[1-2]" }
      assert.equal("ok", outcome, message)
      assert.same({ "start" }, s:unit_jobs())
      assert.equal("active", s:unit().active_state)
      assert.equal("disabled", s:unit().unit_file_state)
      assert.same({ "n1", "n2" }, s:file_nodes())
    end
  end)

  it("a masked unit stays skipped with manage_disabled_unit (it cannot be started)", function()
    local s = testing.scenario{ policy = P, unit = "masked", settings = { manage_disabled_unit = true } }
    assert.equal("skipped", (s:prolog{ job = 204, nodelist = "n[1-2]" }))
  end)

end)

-- A late epilog is waited for, not punished (C24).
describe("default policy: a late epilog (C24)", function()
  local function given(o)
    o = o or {}
    return testing.scenario{ policy = P, file = { "n1", "n3" }, settings = o.settings, deadline = o.deadline,
      jobs = { { id = 300, nodes = { "n1", "n3" } } } }
  end

  it("job 300's epilog 0.5 s into job 301's prolog: 301 waits without the lock, then ok", function()
    local s = given()
    local h = s.host
    local sleep, epilog = h.sleep, nil
    h.sleep = function(t)
      local ok, e, c = sleep(t)
      if not epilog and h.now() >= 1000.5 then epilog = { s:epilog{ job = 300 } } end
      return ok, e, c
    end
    local outcome, message = s:prolog{ job = 301, nodelist = "n[1-2]" }
    assert.equal("ok", epilog[1], epilog[2]) -- the epilog got the lock: the prolog did not hold it
    assert.equal("ok", outcome, message)
    assert.same({ "301" }, s:registered())
    assert.same({ "n1", "n2" }, s:file_nodes())
    assert.equal(1, s:restarts())
    assert.is_true(h.now() < 1000 + 5, "decided again once the registry changed, not after conflict_wait")
    local n, released = s:locks()
    assert.equal(3, n) -- prolog, epilog, prolog again
    assert.is_true(released)
  end)

  it("a job that stays registered: conflict after conflict_wait, named with how to clear it", function()
    local s = given{ settings = { conflict_wait = 3 } }
    local outcome, message = s:prolog{ job = 302, nodelist = "n[1-2]" }
    assert.equal("conflict", outcome)
    assert.matches("imexguard forget 300", message)
    assert.matches("after waiting 3 s", message)
    assert.matches("conflict_wait", message)
    assert.matches("registration_max_age", message)
    assert.same({}, s:writes())
    assert.equal(0, s:restarts())
    assert.is_true(s.host.now() >= 1003 and s.host.now() < 1003.5)
    assert.same({ "300" }, s:registered())
  end)

  it("the wait is at most half the run's remaining budget", function()
    local s = given{ settings = { conflict_wait = 60 }, deadline = 10 }
    local outcome = s:prolog{ job = 303, nodelist = "n[1-2]" }
    assert.equal("conflict", outcome)
    assert.is_true(s.host.now() >= 1004.9 and s.host.now() <= 1005.01, tostring(s.host.now()))
  end)

  it("a corrupt state file is no conflict to wait for: at once", function()
    local s = testing.scenario{ policy = P, files = { [STATE] = "{not json" } }
    local outcome = s:prolog{ job = 304, nodelist = "n[1-2]" }
    assert.equal("conflict", outcome)
    assert.same({}, s.host.sleeps)
  end)
end)

describe("default policy: the IMEX channel step (after applies?, before the node list)", function()
  local c = H.channel
  local DIR, DEV, CH, PD, chost = c.DIR, c.DEV, c.CH, c.PD, c.chost

  it("channel0: the prolog creates DIR (0755) and channel0 as c 238 0 with mode 0666", function()
    local h = chost()
    local outcome, message = run(h, { settings = CH })
    assert.equal("ok", outcome)
    assert.matches("IMEX channel: created " .. PD .. "/channel0 %(238:0, mode 0666%)", message)
    local st = h.stat(DIR .. "/channel0")
    assert.equal("char", st.type)
    assert.equal(238, st.rdev_major)
    assert.equal(0, st.rdev_minor)
    assert.equal(tonumber("666", 8), st.mode)
    assert.equal(tonumber("755", 8), h.mkdirs[1].mode)
    assert.equal(DIR, h.mkdirs[1].path)
  end)

  it("runs even when the node list is unchanged, and a second prolog finds it present", function()
    local h = chost()
    run(h, { settings = CH })
    h.clear()
    local outcome, message = run(h, { settings = CH })
    assert.equal("ok", outcome)
    assert.equal(0, h.count("mknod_char"))
    assert.is_nil(message:find("IMEX channel", 1, true))
  end)

  it("off (the default): no mknod, no mkdir of the channel directory", function()
    local h = chost()
    assert.equal("ok", (run(h)))
    assert.equal(0, h.count("mknod_char"))
    for _, m in ipairs(h.mkdirs) do assert.not_equal(DIR, m.path) end
  end)

  it("a /proc/devices without the IMEX line: channel-failed (exit 13), nothing written", function()
    local h = testing.host{ files = { [DEV] = fixture("proc/devices-no-imex.txt") } }
    local outcome, message = run(h, { settings = CH, env = env("n[1,3]") })
    assert.equal("channel-failed", outcome)
    assert.equal(13, outcomes.exit_code(outcome))
    assert.matches("^IMEX channel: /proc/devices: no nvidia%-caps%-imex%-channels line", message)
    assert.equal(0, h.count("mknod_char"))
    assert.same({}, h.writes)
    assert.same({}, h.jobs)
  end)

  describe("C38: slurm.conf where Slurm keeps it", function()
    local CACHE = "/var/spool/slurmd/conf-cache"
    local function senv(extra)
      local e = env("n[1-2]", { SLURM_CONF = CACHE .. "/slurm.conf" })
      for k, v in pairs(extra or {}) do e[k] = v end
      return e
    end

    it("configless, SwitchType only in an Included switch.conf: no channel is made", function()
      local h = chost({ [CACHE .. "/slurm.conf"] = "ClusterName=c\nInclude switch.conf\n",
        [CACHE .. "/switch.conf"] = "SwitchType=switch/nvidia_imex\n" })
      assert.equal("ok", (run(h, { settings = CH, env = senv() })))
      assert.equal(0, h.count("mknod_char"))
      for _, m in ipairs(h.mkdirs) do assert.not_equal(DIR, m.path) end
      -- /etc/slurm/slurm.conf (the setting) was never read: SLURM_CONF is slurmd's own file
      for _, call in ipairs(h.calls) do assert.not_equal("/etc/slurm/slurm.conf", call[2]) end
      -- the plan says where it found the plugin
      local _, _, report = run(h, { settings = CH, env = senv(), command = "plan" })
      assert.matches("SwitchType=switch/nvidia_imex in " .. CACHE:gsub("%-", "%%-") .. "/switch.conf line 1, "
        .. "included from " .. CACHE:gsub("%-", "%%-") .. "/slurm.conf", report)
    end)

    it("an Include that cannot be read: slurm-conf-unreadable (exit 20), nothing changed", function()
      for _, fail in ipairs({ false, true }) do -- switch.conf missing; there but not readable
        local files = { ["/proc/devices"] = fixture("proc/devices-gb200.txt"),
          [NODES] = "10.0.0.1\n10.0.0.3\n", [CACHE .. "/slurm.conf"] = "Include switch.conf\n" }
        if fail then files[CACHE .. "/switch.conf"] = "x" end
        local h = testing.host{ files = files,
          fail = fail and { [CACHE .. "/switch.conf"] = { read = "EACCES" } } or nil }
        local outcome, message = run(h, { settings = CH, env = senv() })
        assert.equal("slurm-conf-unreadable", outcome)
        assert.equal(20, outcomes.exit_code(outcome))
        assert.matches(CACHE:gsub("%-", "%%-")
          .. "/switch.conf unreadable %(Include on .*slurm.conf line 1%)", message)
        assert.matches("nothing changed", message)
        assert.equal(0, h.count("mknod_char"))
        assert.same({}, h.writes)
        assert.same({}, h.jobs)
        assert.equal(0, h.count("lock"))
      end
    end)

    it("a SLURM_CONF that is missing is unreadable; with imex_channels off nothing is read", function()
      local h = chost({ ["/etc/slurm/slurm.conf"] = "SwitchType=switch/none\n" })
      assert.equal("slurm-conf-unreadable", (run(h, { settings = CH, env = senv() })))
      assert.equal("ok", (run(h, { env = senv() })))
    end)
  end)

  it("IMEX does not apply: skipped before the channel step", function()
    local h = testing.host{ unit = false, files = { [DEV] = fixture("proc/devices-gb200.txt") } }
    assert.equal("skipped", (run(h, { settings = CH })))
    assert.equal(0, h.count("mknod_char"))
  end)
end)

-- C21, C22, C28: ordered identity, the unit's own config, configuration faults.
describe("default policy: ordered identity, the unit's config, configuration faults", function()
  local T3, A, B, C = H.identity.T3, H.identity.A, H.identity.B, H.identity.C
  local mesh_of, host3, unit_with = H.identity.mesh_of, H.identity.host3, H.identity.unit_with

  -- This node READY and CONNECTED to every peer, the peers UNAVAILABLE (C22's signature).
  local function config_fault_mesh(hosts)
    local conns = {}
    for _, h in ipairs(hosts) do conns[h] = "CONNECTED" end
    local nodes = { { host = hosts[1], connections = conns } }
    for i = 2, #hosts do nodes[i] = { host = hosts[i], status = "UNAVAILABLE" } end
    return { mesh = { status = "DEGRADED", nodes = nodes } }
  end

  describe("C21: same nodes, another order", function()
    it("is stale: restart, and the message says 'same nodes, another order'", function()
      -- file and job {1, 2, 3}, older than the daemon's start; the daemon runs {2, 1, 3}
      local h = host3({ B, A, C }, mesh_of({ A, B, C }))
      local o, m = run(h, { env = env("n[1-3]") })
      assert.equal("ok", o, m)
      assert.equal(1, #h.jobs)
      assert.equal("restart", h.jobs[1].verb)
      assert.truthy(m:find("same nodes, another order", 1, true), m)
      assert.same({}, list_writes(h)) -- the file was already right
    end)

    it("a rotation of four nodes, and a swap of the last two, are stale too", function()
      for _, order in ipairs({ { "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.1" },
        { "10.0.0.1", "10.0.0.2", "10.0.0.4", "10.0.0.3" } }) do
        local h = testing.host{ files = { [NODES] = "10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4\n" },
          ctl = { mesh_of(order), mesh_of({ "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4" }) } }
        local o, m = run(h, { env = env("n[1-4]") })
        assert.equal("ok", o, m)
        assert.equal(1, #h.jobs, table.concat(order, " "))
        assert.truthy(m:find("same nodes, another order", 1, true), m)
      end
    end)

    it("the same order is current: no restart", function()
      local h = host3({ A, B, C })
      local o, m = run(h, { env = env("n[1-3]") })
      assert.equal("ok", o, m)
      assert.same({}, h.jobs)
    end)

    it("a registered job keeps the daemon: conflict, and the message names the other order", function()
      local s = testing.scenario{ policy = P, file = { "n1", "n2", "n3" },
        jobs = { { id = 100, nodes = "n[1-3]" } }, mesh = { mesh_of({ C, B, A }) } }
      local o, m = s:prolog{ job = 101, nodelist = "n[1-3]" }
      assert.equal("conflict", o, m)
      assert.truthy(m:find("same nodes, another order", 1, true), m)
      assert.equal(0, s:restarts())
      local po, pm, prep = s:plan{ job = 101, nodelist = "n[1-3]" }
      assert.equal("conflict", po)
      assert.truthy(pm:find("same nodes, another order", 1, true), pm)
      assert.truthy(prep:find("same nodes, another order", 1, true), prep)
    end)
  end)

  describe("C28: the daemon's config comes from the unit's ExecStart", function()
    local SITE, SITE_NODES, site_cfg, IMEX = H.identity.SITE, H.identity.SITE_NODES, H.identity.site_cfg,
      H.identity.IMEX

    it("-c PATH: config.cfg, its node list and the ctl's -c follow the unit, not the packaged file",
      function()
      local h = testing.host{ unit = unit_with({ "/usr/bin/nvidia-imex", "-c", SITE }),
        files = { [SITE] = site_cfg, [SITE_NODES] = "10.0.0.1\n10.0.0.3\n" } }
      local o, m = run(h)
      assert.equal("ok", o, m)
      assert.equal(1, #list_writes(h))
      assert.equal(SITE_NODES, list_writes(h)[1].path)
      assert.equal("10.0.0.1\n10.0.0.2\n", h.file(SITE_NODES))
      assert.equal("10.0.0.1\n10.0.0.2\n", h.file(NODES)) -- the packaged list is not touched
      assert.is_true(#h.runs_of("nvidia-imex-ctl") > 0)
      for _, argv in ipairs(h.runs_of("nvidia-imex-ctl")) do
        local c
        for i, a in ipairs(argv) do if a == "-c" then c = argv[i + 1] end end
        assert.equal(SITE, c)
      end
    end)

    it("a shell wrapper (sh -c 'nvidia-imex -c PATH') is bad-input naming the unit, never "
      .. "skipped as 'not an IMEX node'", function()
      -- the shell's -c is a command line, not the daemon's config: read as a path it named no file,
      -- and the prolog ended "skipped" (exit 0): every job on the node ran without IMEX
      local h = testing.host{ unit = unit_with({ "/bin/sh", "-c", IMEX .. " -c " .. SITE }),
        files = { [SITE] = site_cfg } }
      local o, m = run(h)
      assert.equal("bad-input", o, m)
      assert.truthy(m:find("cannot tell which config.cfg", 1, true), m)
      assert.same({}, list_writes(h))
      assert.same({}, h.jobs)
    end)

    it("-cPATH in one argument, and no -c at all (NVIDIA's default path)", function()
      local h = testing.host{ unit = unit_with({ "/usr/bin/nvidia-imex", "-c" .. SITE }),
        files = { [SITE] = site_cfg } }
      assert.equal("ok", (run(h)))
      assert.equal("10.0.0.1\n10.0.0.2\n", h.file(SITE_NODES))
      h = testing.host{ unit = unit_with({ "/usr/bin/nvidia-imex" }), files = { [SITE] = site_cfg } }
      assert.equal("ok", (run(h)))
      assert.is_nil(h.file(SITE_NODES))
    end)

    it("a setting imex_config naming another config than the unit's: config-mismatch naming both, "
      .. "nothing changed", function()
      local h = testing.host{ unit = unit_with({ "/usr/bin/nvidia-imex", "-c", SITE }),
        files = { [SITE] = site_cfg, ["/etc/site/other.cfg"] = testing.CONFIG_TEXT } }
      local o, m = run(h, { settings = { imex_config = "/etc/site/other.cfg" } })
      assert.equal("config-mismatch", o)
      assert.equal(15, outcomes.exit_code(o))
      assert.truthy(m:find("/etc/site/other.cfg", 1, true) and m:find(SITE, 1, true), m)
      assert_one_line(m)
      assert_untouched(h)
      local po = run(testing.host{ unit = unit_with({ "/usr/bin/nvidia-imex", "-c", SITE }),
        files = { [SITE] = site_cfg } }, { command = "plan", dry_run = true,
        settings = { imex_config = "/etc/site/other.cfg" } })
      assert.equal("config-mismatch", po)
    end)

    it("a nodes_file setting other than the unit config's node list: config-mismatch", function()
      local h = testing.host{ unit = unit_with({ IMEX, "-c", SITE }),
        files = { [SITE] = site_cfg } }
      local o, m = run(h, { settings = { nodes_file = NODES } })
      assert.equal("config-mismatch", o)
      assert.truthy(m:find(SITE_NODES, 1, true) and m:find("nodes_file=" .. NODES, 1, true), m)
      assert_untouched(h)
    end)

    it("an ExecStart whose -c has no value, or a relative path: bad-input naming the ExecStart", function()
      for _, argv in ipairs({ { IMEX, "-c" }, { IMEX, "-c", "imex.cfg" } }) do
        local h = testing.host{ unit = unit_with(argv) }
        local o, m = run(h)
        assert.equal("bad-input", o)
        assert.truthy(m:find("ExecStart", 1, true), m)
        assert_untouched(h)
      end
    end)
  end)

  describe("C22: a configuration fault is not a peer fault", function()
    local loop_cfg = H.identity.loop_cfg

    it("4 nodes, this one READY and connected, three peers UNAVAILABLE: config-fault after a few polls, "
      .. "no peer blamed, exit 14", function()
      local hosts = { "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4" }
      local h = testing.host{ files = { [NODES] = table.concat(hosts, "\n") .. "\n", [CONFIG] = loop_cfg },
        ctl = { config_fault_mesh(hosts) } }
      local start = h.now()
      local o, m = run(h, { env = env("n[1-4]") })
      assert.equal("config-fault", o, m)
      assert.equal(14, outcomes.exit_code(o, testing.ctx{ host = h }.settings))
      assert.truthy(h.now() - start < 5, "stopped early: " .. (h.now() - start))
      assert.truthy(#h.runs_of("nvidia-imex-ctl") <= 4, #h.runs)
      assert.truthy(m:find("not a peer fault", 1, true), m)
      assert.truthy(m:find("IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1", 1, true), m)
      assert.is_nil(m:find("peers are not", 1, true))
      assert.same({}, h.jobs)
    end)

    it("on_config_fault = \"warn\": exit 0, logged at level err", function()
      local hosts = { "10.0.0.1", "10.0.0.2" }
      local h = testing.host{ ctl = { config_fault_mesh(hosts) } }
      local o, m, _, ctx = run(h, { settings = { on_config_fault = "warn" } })
      assert.equal("config-fault", o, m)
      assert.equal(0, outcomes.exit_code(o, ctx.settings))
      local errs = 0
      for _, l in ipairs(h.logs) do
        if l[1] == "err" and l[2]:find("configuration fault", 1, true) then errs = errs + 1 end
      end
      assert.equal(1, errs)
    end)

    it("a real peer fault (one peer UNAVAILABLE and not connected) is still peers-unhealthy", function()
      local h = testing.host{ files = { [NODES] = T3 }, ctl = { { mesh = { nodes = { { host = "10.0.0.1" },
        { host = "10.0.0.2" }, { host = "10.0.0.3", status = "UNAVAILABLE" } } } } } }
      local o, m = run(h, { env = env("n[1-3]") })
      assert.equal("peers-unhealthy", o, m)
    end)

    it("IMEX_CMD_ENABLED=0 (the ctl cannot reach this node's daemon): the prolog ends config-fault "
      .. "naming it, not domain-unhealthy after the full health_timeout", function()
      local off_cfg = testing.CONFIG_TEXT:gsub("IMEX_CMD_ENABLED=1", "IMEX_CMD_ENABLED=0")
      local h = testing.host{ files = { [CONFIG] = off_cfg }, ctl = { testing.UNREACHABLE } }
      local t0 = h.now()
      local o, m = run(h)
      assert.equal("config-fault", o, m) -- what `plan` says the prolog would end in
      assert.truthy(m:find("IMEX_CMD_ENABLED=0", 1, true), m)
      assert.is_true(h.now() - t0 < 30, "recognised early, not after the full health_timeout")
      -- the same when the ctl prints its placeholder document (only host 0.0.0.0, DOWN) instead
      h = testing.host{ files = { [CONFIG] = off_cfg },
        ctl = { { mesh = { status = "DOWN", nodes = { { host = "0.0.0.0", status = "UNAVAILABLE" } } } } } }
      t0 = h.now()
      o, m = run(h)
      assert.equal("config-fault", o, m)
      assert.truthy(m:find("IMEX_CMD_ENABLED=0", 1, true), m)
      assert.is_true(h.now() - t0 < 30, "recognised early, not after the full health_timeout")
    end)
  end)
end)
