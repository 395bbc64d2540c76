-- SPDX-License-Identifier: Apache-2.0
-- Specs of the fake host (imexguard.testing): it must behave like docs/policy-api.md says.
local testing = require("imexguard.testing")
local ctl = require("imexguard.ctl")

-- The ctl's query as the default policy runs it (the kit tells the ctl from other programs by argv).
local CTL = { "/usr/bin/nvidia-imex-ctl", "-c", testing.CONFIG, "-N", "-j" }

describe("testing.host", function()
  it("files: read, stat with mtime from the virtual clock, atomic write, injected failures", function()
    local h = testing.host{ fail = { ["/x/full"] = { write = "ENOSPC" } }, files = { ["/x/full"] = "old\n" } }
    assert.equal("10.0.0.1\n10.0.0.2\n", h.read(testing.NODES, 1024))
    local _, _, code = h.read("/nope", 10)
    assert.equal("ENOENT", code)
    _, _, code = h.read(testing.NODES, 3)
    assert.equal("EFBIG", code)
    h.advance(10)
    assert.is_true(h.write_atomic("/x/new", "data"))
    local st = h.stat("/x/new")
    assert.equal("file", st.type)
    assert.equal(4, st.size)
    assert.near(h.wallclock() * 1e6, st.mtime_us, 1e4)
    local ok, msg
    ok, msg, code = h.write_atomic("/x/full", "new\n")
    assert.is_nil(ok)
    assert.is_string(msg)
    assert.equal("ENOSPC", code)
    assert.equal("old\n", h.file("/x/full"))
    assert.same({ { path = "/x/new", data = "data" } }, h.writes)
  end)

  it("unit: properties, scripted query failures, restart gives a new invocation", function()
    local h = testing.host{ unit_script = { "timeout", { active_state = "activating" } } }
    local p, _, code = h.unit(testing.UNIT)
    assert.is_nil(p)
    assert.equal("timeout", code)
    assert.equal("activating", h.unit(testing.UNIT).active_state)
    local before = h.unit(testing.UNIT)
    h.set_file(testing.NODES, "10.0.0.1\n10.0.0.3\n")
    assert.equal("done", h.unit_job(testing.UNIT, "restart", 30))
    local after = h.unit(testing.UNIT)
    assert.equal("active", after.active_state)
    assert.not_equal(before.invocation_id, after.invocation_id)
    assert.equal(32, #after.invocation_id)
    assert.near(h.wallclock() * 1e6, after.exec_main_start_us, 1)
    assert.same({ "10.0.0.1", "10.0.0.3" }, h.daemon_nodes())
    assert.same({ { unit = testing.UNIT, verb = "restart", result = "done" } }, h.jobs)
    assert.equal("not-found", h.unit("other.service").load_state)
  end)

  it("unit jobs: failed and wait-timeout", function()
    local h = testing.host{ restart = { { result = "failed" }, { result = "wait-timeout" } } }
    local r, _, code = h.unit_job(testing.UNIT, "restart", 30)
    assert.is_nil(r)
    assert.equal("failed", code)
    assert.equal("failed", h.unit(testing.UNIT).active_state)
    local t0 = h.now()
    r, _, code = h.unit_job(testing.UNIT, "start", 30)
    assert.is_nil(r)
    assert.equal("wait-timeout", code)
    assert.near(30, h.now() - t0, 1e-9)
  end)

  it("a unit that is not installed; a job on it is a D-Bus error", function()
    local h = testing.host{ unit = false }
    assert.equal("not-found", h.unit(testing.UNIT).load_state)
    local r, _, code = h.unit_job(testing.UNIT, "start", 30)
    assert.is_nil(r)
    assert.equal("bus", code)
  end)

  it("unit jobs: start-limit-hit (job failed, Result start-limit-hit), a daemon that dies at once", function()
    local h = testing.host{ restart = { { result = "failed", unit_result = "start-limit-hit" },
      { active_state = "failed", unit_result = "exit-code", invocation_id = string.rep("e", 32) } } }
    local r, _, code = h.unit_job(testing.UNIT, "restart", 30)
    assert.is_nil(r)
    assert.equal("failed", code)
    local p = h.unit(testing.UNIT)
    assert.equal("failed", p.active_state)
    assert.equal("start-limit-hit", p.result)
    assert.equal("done", h.unit_job(testing.UNIT, "start", 30))
    p = h.unit(testing.UNIT)
    assert.equal("failed", p.active_state)
    assert.equal("exit-code", p.result)
    assert.equal(string.rep("e", 32), p.invocation_id)
    assert.equal(0, p.main_pid)
  end)

  it("unit jobs: start of an active unit and try-restart of an inactive one change nothing", function()
    local h = testing.host()
    local id = h.unit(testing.UNIT).invocation_id
    assert.equal("done", h.unit_job(testing.UNIT, "start", 30))
    assert.equal(id, h.unit(testing.UNIT).invocation_id)
    assert.equal("done", h.unit_job(testing.UNIT, "try-restart", 30))
    local id2 = h.unit(testing.UNIT).invocation_id
    assert.not_equal(id, id2)
    h.unit_job(testing.UNIT, "stop", 30)
    assert.equal("done", h.unit_job(testing.UNIT, "try-restart", 30))
    assert.equal("inactive", h.unit(testing.UNIT).active_state)
  end)

  it("mkdir: existing directory ok, absent directories (reboot) block writes and locks until made", function()
    local h = testing.host{ fresh_boot = true, files = { ["/etc/f"] = "x" } }
    local ok, _, code = h.write_atomic("/run/imexguard/state.json", "{}")
    assert.is_nil(ok)
    assert.equal("ENOENT", code)
    local lk
    lk, _, code = h.lock("/run/imexguard/lock", 1, "job=1")
    assert.is_nil(lk)
    assert.equal("ENOENT", code)
    assert.is_true(h.mkdir("/run/imexguard", 493))
    assert.is_true(h.mkdir("/run/imexguard", 493))
    assert.same({ { path = "/run/imexguard", mode = 493, created = true },
      { path = "/run/imexguard", mode = 493, created = false } }, h.mkdirs)
    assert.is_true(h.write_atomic("/run/imexguard/state.json", "{}"))
    assert.is_truthy(h.lock("/run/imexguard/lock", 1, "job=1"))
    ok, _, code = h.mkdir("/etc/f", 493)
    assert.is_nil(ok)
    assert.equal("ENOTDIR", code)
    h = testing.host{ absent_dirs = { "/a" } }
    ok, _, code = h.mkdir("/a/b", 493)
    assert.is_nil(ok)
    assert.equal("ENOENT", code)
    assert.has_error(function() h.mkdir("/a", "0755") end)
  end)

  it("clear forgets recordings but keeps files and the unit", function()
    local h = testing.host()
    h.write_atomic("/x", "1")
    h.unit_job(testing.UNIT, "stop", 30)
    h.clear()
    assert.same({}, h.writes)
    assert.same({}, h.jobs)
    assert.same({}, h.calls)
    assert.equal("1", h.file("/x"))
    assert.equal("inactive", h.unit(testing.UNIT).active_state)
  end)

  it("ctl: a queue whose last answer repeats; rendered domains parse to what was described", function()
    local h = testing.host{ ctl = { "garbage", { mesh = { nodes = { { host = "10.0.0.1" },
      { host = "10.0.0.2", status = "UNAVAILABLE" } } } } } }
    local argv = CTL
    assert.equal("garbage", h.run(argv, { timeout = 5 }).stdout)
    for _ = 1, 2 do
      local res = h.run(argv, { timeout = 5 })
      assert.equal(0, res.status)
      local d = assert(ctl.parse_mesh(res.stdout, res.status))
      assert.equal("DEGRADED", d.status)
      assert.equal("READY", d.by_host["10.0.0.1"].status)
      assert.equal("UNAVAILABLE", d.by_host["10.0.0.2"].status)
      assert.equal("INVALID", d.by_host["10.0.0.1"].connections["10.0.0.2"])
      assert.equal("CONNECTED", d.by_host["10.0.0.1"].connections["10.0.0.1"])
    end
    assert.equal(3, h.count("run"))
    assert.same(argv, h.runs[3])
  end)

  it("ctl: auto with unhealthy nodes (or every node with '*')", function()
    local h = testing.host{ unhealthy = { ["10.0.0.2"] = "UNAVAILABLE" } }
    local d = assert(ctl.parse_mesh(h.run(CTL, { timeout = 5 }).stdout, 0))
    assert.equal("DEGRADED", d.status)
    assert.equal("UNAVAILABLE", d.by_host["10.0.0.2"].status)
    h = testing.host{ unhealthy = { ["*"] = "UNAVAILABLE" } }
    d = assert(ctl.parse_mesh(h.run(CTL, { timeout = 5 }).stdout, 0))
    assert.equal("DOWN", d.status)
  end)

  it("ctl: auto follows the unit and what the daemon was started with", function()
    local h = testing.host()
    local d = assert(ctl.parse_mesh(h.run(CTL, { timeout = 5 }).stdout, 0))
    assert.equal("UP", d.status)
    assert.equal(2, #d.nodes)
    h.unit_job(testing.UNIT, "stop", 30)
    local res = h.run(CTL, { timeout = 5 })
    local _, _, kind = ctl.parse_mesh(res.stdout, res.status)
    assert.equal("unreachable", kind)
  end)

  it("ctl: a hang spends its timeout and reports timeout (or deadline)", function()
    local h = testing.host{ deadline = 7, ctl = { testing.HANG } }
    local t0 = h.now()
    local r, _, code, res = h.run(CTL, { timeout = 5 })
    assert.is_nil(r)
    assert.equal("timeout", code)
    assert.equal(15, res.signal)
    assert.near(5, h.now() - t0, 1e-9)
    r, _, code = h.run(CTL, { timeout = 5 })
    assert.is_nil(r)
    assert.equal("deadline", code)
    assert.equal(0, h.remaining())
  end)

  it("spawn: a command that runs while the clock moves; its wait spends what is left of its time", function()
    local h = testing.host{ ctl = { { stdout = "answer", elapsed = 0.5 } } }
    local t0 = h.now()
    local p = assert(h.spawn(CTL, { timeout = 5 }))
    assert.equal(t0, h.now()) -- returns at once
    assert.equal(1, h.count("run")) -- a command run, whichever primitive started it
    assert.same(CTL, h.runs[1])
    h.sleep(0.2) -- the policy's own work meanwhile
    local r = assert(p:wait())
    assert.equal("answer", r.stdout)
    assert.equal(0, r.status)
    assert.near(0.5, h.now() - t0, 1e-9) -- 0.5 from the start, not 0.2 + 0.5
    assert.equal(t0, h.spawns[1].started)
    assert.equal(h.now(), h.spawns[1].waited)
    assert.is_nil(h.spawns[1].killed)
    assert.same({ "run", "sleep", "wait" }, (function()
      local names = {}
      for _, c in ipairs(h.calls) do names[#names + 1] = c[1] end
      return names
    end)())
    -- a wait after the command's end spends nothing
    p = assert(h.spawn(CTL, { timeout = 5 }))
    h.sleep(1)
    local t1 = h.now()
    assert(p:wait())
    assert.equal(t1, h.now())
  end)

  it("spawn: a hang times out counted from the start; the budget at the start bounds it", function()
    local h = testing.host{ deadline = 7, ctl = { testing.HANG } }
    local t0 = h.now()
    local p = assert(h.spawn(CTL, { timeout = 5 }))
    h.sleep(2)
    local r, msg, code, res = p:wait()
    assert.is_nil(r)
    assert.equal("timeout", code)
    assert.matches("no answer within 5 s", msg)
    assert.equal(15, res.signal)
    assert.near(5, h.now() - t0, 1e-9)
    p = assert(h.spawn(CTL, { timeout = 5 }))
    r, msg, code = p:wait()
    assert.is_nil(r)
    assert.equal("deadline", code)
    assert.matches("no answer within 2 s", msg) -- what was left of the budget
    assert.equal(0, h.remaining())
  end)

  it("spawn: a program that cannot run fails at the start; close kills a command never waited for", function()
    local h = testing.host{ ctl = { { exec_error = "ENOENT" }, "x" } }
    local p, msg, code = h.spawn({ "/no/nvidia-imex-ctl", "-N", "-j" }, { timeout = 5 })
    assert.is_nil(p)
    assert.equal("ENOENT", code)
    assert.matches("/no/nvidia-imex-ctl", msg, 1, true)
    assert.same({}, h.spawns)
    local t0 = h.now()
    do
      local q <close> = assert(h.spawn(CTL, { timeout = 5 })) -- luacheck: ignore q
    end
    assert.equal(t0, h.spawns[1].killed)
    assert.is_nil(h.spawns[1].waited)
    assert.equal(t0, h.now()) -- killed, not waited for
    p = assert(h.spawn(CTL, { timeout = 5 }))
    assert.is_true(p:close())
    assert.has_error(function() p:wait() end)
    p = assert(h.spawn(CTL, { timeout = 5 }))
    assert(p:wait())
    assert.has_error(function() p:wait() end)
    assert.is_true(p:close())
    assert.is_nil(h.spawns[3].killed)
    assert.has_error(function() h.spawn(CTL) end)
  end)

  it("clock: sleep advances it and stops at the deadline", function()
    local h = testing.host{ deadline = 1 }
    local t0 = h.now()
    assert.is_true(h.sleep(0.25))
    assert.near(0.25, h.now() - t0, 1e-9)
    assert.near(0.75, h.remaining(), 1e-9)
    local ok, _, code = h.sleep(5)
    assert.is_nil(ok)
    assert.equal("deadline", code)
    assert.near(1, h.now() - t0, 1e-9)
    assert.same({ 0.25, 5 }, h.sleeps)
  end)

  it("lock: free, held by another (timeout with holder), released in time, held by ourselves", function()
    local h = testing.host{ lock = { pid = 9, owner = "job=7", release_at = 1030 } }
    local lk, _, code, holder = h.lock("/run/imexguard/lock", 10, "job=1")
    assert.is_nil(lk)
    assert.equal("timeout", code)
    assert.same({ pid = 9, owner = "job=7", release_at = 1030 }, holder)
    assert.near(1010, h.now(), 1e-9)
    lk = assert(h.lock("/run/imexguard/lock", 60, "job=1"))
    assert.near(1030, h.now(), 1e-9)
    assert.equal("job=1", h.lock_holder("/run/imexguard/lock").owner)
    local lk2, _, code2 = h.lock("/run/imexguard/lock", 1, "job=2")
    assert.is_nil(lk2)
    assert.equal("timeout", code2)
    lk:unlock()
    assert.is_nil(h.lock_holder("/run/imexguard/lock"))
    assert.is_true(h.locks[1].released)
  end)

  it("resolve: map, timeout, unknown name", function()
    local h = testing.host{ resolve = { slow = "timeout" } }
    assert.same({ "10.0.0.3" }, h.resolve("n3", 2))
    local t0 = h.now()
    local r, _, code = h.resolve("slow", 2)
    assert.is_nil(r)
    assert.equal("timeout", code)
    assert.near(2, h.now() - t0, 1e-9)
    r = h.resolve("nobody", 2)
    assert.is_nil(r)
  end)

  it("records every primitive call in order", function()
    local h = testing.host()
    h.unit(testing.UNIT)
    h.read(testing.CONFIG, 100)
    h.write_atomic("/a", "b")
    local names = {}
    for _, c in ipairs(h.calls) do names[#names + 1] = c[1] end
    assert.same({ "unit", "read", "write_atomic" }, names)
  end)
end)

describe("testing.ctx", function()
  it("fills validated default settings and the job", function()
    local ctx = testing.ctx{ settings = { on_peer_fault = "fail" } }
    assert.equal("nvidia-imex.service", ctx.settings.unit)
    assert.equal(0.25, ctx.settings.poll_interval)
    assert.equal("fail", ctx.settings.on_peer_fault)
    assert.equal("101", ctx.job.id)
    assert.equal("n1", ctx.job.nodename)
    assert.equal("n[1-2]", ctx.job.nodelist)
  end)

  it("rejects invalid settings", function()
    assert.has_error(function() testing.ctx{ settings = { on_peer_fault = "explode" } } end)
  end)

  it("settings are read-only and a typo raises, as in the binary", function()
    local ctx = testing.ctx()
    assert.has_error(function() return ctx.settings.lock_timout end,
      "ctx.settings: unknown setting 'lock_timout'")
    assert.has_error(function() ctx.settings.unit = "x" end)
    assert.is_nil(ctx.settings.nodes_file) -- a known optional setting reads nil
  end)

  it("parse_env reads a Slurm environment fixture", function()
    local f = assert(io.open("tests/fixtures/slurm/prolog-env-22.05.txt"))
    local env = testing.parse_env(f:read("a"))
    f:close()
    assert.equal("n[1-3]", env.SLURM_NODELIST)
    assert.equal("n2", env.SLURMD_NODENAME)
  end)
end)

describe("testing.scenario", function()
  local P = require("default")

  it("given node, nodes, file, unit, jobs: the world is set up as described", function()
    local s = testing.scenario{ policy = P, node = "n2", file = { "n1", "n2", "n3" }, unit = "inactive",
      jobs = { { id = 100, nodes = "n[1-3]", age = 60, shared = "YES" } } }
    assert.equal("10.0.0.1\n10.0.0.2\n10.0.0.3\n", s:file())
    assert.same({ "n1", "n2", "n3" }, s:file_nodes())
    assert.equal("inactive", s:unit().active_state)
    assert.equal("n2", s.host.hostname())
    assert.same({ "10.0.0.2", "127.0.0.1" }, s.host.local_addresses())
    local regs = s:registrations()
    assert.equal(1, #regs)
    assert.equal("100", regs[1].id)
    assert.equal("YES", regs[1].shared)
    assert.equal((testing.WALL0 - 60) * 1e6, regs[1].registered_us)
  end)

  it("when the prolog runs, then outcome and side effects are recorded per scenario", function()
    local s = testing.scenario{ policy = P, file = { "n1", "n3" } }
    local outcome, message, _, ctx = s:prolog{ job = 101, nodelist = "n[1-2]", oversubscribe = "YES" }
    assert.equal("ok", outcome)
    assert.is_string(message)
    assert.equal("YES", ctx.env.SLURM_JOB_OVERSUBSCRIBE)
    assert.equal("n[1-2]", ctx.env.SLURM_JOB_NODELIST)
    assert.same({ "10.0.0.1\n10.0.0.2\n" }, s:writes())
    assert.equal(1, s:restarts())
    assert.same({ "restart" }, s:unit_jobs())
    assert.same({ "n1", "n2" }, s:daemon())
    assert.same({ "101" }, s:registered())
    assert.equal("prolog", s.last.command)
    s:clear()
    assert.same({}, s:writes())
    assert.equal(0, s:restarts())
    assert.same({ "101" }, s:registered())
  end)

  it("unit shorthands and tables; domain shorthands", function()
    assert.equal("skipped", (testing.scenario{ policy = P, unit = "missing" }:prolog{ nodelist = "n[1-2]" }))
    assert.equal("skipped", (testing.scenario{ policy = P, unit = "disabled" }:prolog{ nodelist = "n[1-2]" }))
    local s = testing.scenario{ policy = P, unit = { state = "failed", result = "start-limit-hit" } }
    assert.equal("start-limit-hit", s:unit().result)
    assert.equal("ok", (s:prolog{ nodelist = "n[1-2]" }))
    assert.same({ "start" }, s:unit_jobs())
    assert.equal("ctl-unusable", (testing.scenario{ policy = P, mesh = "garbage" }:prolog{
      nodelist = "n[1-2]" }))
    assert.equal("domain-unhealthy", (testing.scenario{ policy = P, mesh = "unreachable" }:prolog{
      nodelist = "n[1-2]" }))
    s = testing.scenario{ policy = P, mesh = { nodes = { { host = "n1" },
      { host = "n2", status = "UNAVAILABLE" } } } }
    local outcome, message = s:prolog{ nodelist = "n[1-2]" }
    assert.equal("peers-unhealthy", outcome)
    assert.matches("peers are not after [%d.]+ s: n2: status UNAVAILABLE", message)
  end)

  it("the virtual clock: a run's deadline applies and waits cost simulated time only", function()
    local s = testing.scenario{ policy = P, mesh = "down", deadline = 20 }
    local t0 = s.host.now()
    assert.equal("domain-unhealthy", (s:prolog{ nodelist = "n[1-2]" }))
    assert.is_true(s.host.now() - t0 <= 20)
    assert.is_true(s.host.remaining() > 0)
    local t1 = s.host.now()
    s:advance(5)
    assert.near(t1 + 5, s.host.now(), 1e-9)
  end)

  it("per-run settings and env overrides; a settings typo in a policy raises", function()
    local s = testing.scenario{ policy = { prolog = function(ctx)
      return "ok", tostring(ctx.settings.lock_timout)
    end } }
    assert.has_error(function() s:prolog{} end)
    s = testing.scenario{ policy = { prolog = function(ctx)
      return "ok", ctx.settings.on_peer_fault .. " " .. tostring(ctx.env.SLURM_JOB_NODELIST)
    end }, settings = { on_peer_fault = "fail" } }
    local _, m = s:prolog{ nodelist = "n1", env = { SLURM_JOB_NODELIST = false } }
    assert.equal("fail nil", m)
    _, m = s:prolog{ nodelist = "n1", settings = { on_peer_fault = "warn" } }
    assert.equal("warn n1", m)
  end)

  it("a policy without the entry point is an error naming it", function()
    local s = testing.scenario{ policy = { prolog = function() return "ok" end } }
    assert.has_error(function() s:epilog{} end, "testing.scenario: the policy has no epilog")
  end)

  it("the default policy is the default", function()
    local s = testing.scenario{}
    assert.equal("ok", (s:prolog{ nodelist = "n[1-2]" }))
  end)
end)

describe("testing: commands scripted by argv (C40)", function()
  local fabric = require("imexguard.fabric")
  local smi = require("imexguard.smi")
  local fabricjudge = require("imexguard.fabricjudge")
  local host = require("imexguard.host")
  local SMI = { "/usr/bin/nvidia-smi", smi.QUERY[1], smi.QUERY[2] }
  -- the checked GPUs of an answer of `nvidia-smi -q -x`
  local function gpus_of(out) return smi.fabric_gpus(assert(smi.parse(host, out))) end

  it("the ctl, nvidia-smi and scontrol each have their own script and count", function()
    local h = testing.host{ ctl = { "garbage" }, nvidia_smi = { testing.gpus(2), testing.FABRIC_NONE },
      scontrol = { status = 1, stderr = "refused" } }
    assert.equal("garbage", h.run(CTL, { timeout = 5 }).stdout)
    local g = assert(gpus_of(h.run(SMI, { timeout = 5 }).stdout))
    assert.equal(2, #g)
    assert.equal("garbage", h.run(CTL, { timeout = 5 }).stdout)
    assert.is_true(assert(gpus_of(h.run(SMI, { timeout = 5 }).stdout))[1].na)
    assert.equal(1, h.run({ "/usr/bin/scontrol", "update" }, { timeout = 5 }).status)
    assert.equal(2, #h.runs_of("nvidia-imex-ctl"))
    assert.equal(2, #h.runs_of("nvidia-smi"))
    assert.equal(1, #h.runs_of("scontrol"))
  end)

  it("defaults: nvidia-smi a healthy 4-GPU tray in the kit's partition, scontrol exit 0", function()
    local h = testing.host()
    local v = fabricjudge.judge(assert(gpus_of(h.run(SMI, { timeout = 5 }).stdout)))
    assert.equal("healthy", v.kind)
    assert.equal(4, #v.gpus)
    assert.equal(testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID, v.partition.id)
    local r = h.run({ "/opt/slurm/bin/scontrol", "-Q", "update" }, { timeout = 5 })
    assert.equal(0, r.status)
    assert.equal("", r.stdout)
  end)

  it("wrappers: the ctl by its -N, nvidia-smi by its -q -x or --query-gpu=", function()
    local h = testing.host{ ctl = { "c" }, nvidia_smi = { "s", "t" } }
    assert.equal("c", h.run({ "/opt/sim/ctl", "--node", "1", "-N", "-j" }, { timeout = 5 }).stdout)
    assert.equal("s", h.run({ "/opt/wrap", "gpu", smi.QUERY[1], smi.QUERY[2] }, { timeout = 5 }).stdout)
    assert.equal("t", h.run({ "/opt/wrap", "gpu", "--query-gpu=index" }, { timeout = 5 }).stdout)
  end)

  it("commands = {...} scripts any program, by path or basename, before the others", function()
    local h = testing.host{ commands = { ["/opt/site/check-ib"] = { stdout = "ib ok\n" },
      ["nvidia-smi"] = function(n, argv) return { stdout = n .. " " .. argv[2] } end } }
    assert.equal("ib ok\n", h.run({ "/opt/site/check-ib" }, { timeout = 5 }).stdout)
    assert.equal("1 -q", h.run({ "/usr/bin/nvidia-smi", "-q" }, { timeout = 5 }).stdout)
    assert.equal("2 -L", h.run({ "nvidia-smi", "-L" }, { timeout = 5 }).stdout)
  end)

  it("an unscripted command raises an error naming it (run and spawn)", function()
    local h = testing.host()
    local ok, err = pcall(h.run, { "/opt/site/check-ib", "--port", "1" }, { timeout = 5 })
    assert.is_false(ok)
    assert.matches('unscripted command "/opt/site/check-ib"', err, 1, true)
    assert.matches("--port 1", err, 1, true)
    assert.matches('commands = {["check-ib"]', err, 1, true)
    ok, err = pcall(h.spawn, { "/bin/true" }, { timeout = 5 })
    assert.is_false(ok)
    assert.matches("/bin/true", err, 1, true)
    -- the default nvidia-smi answers the fabric query only
    ok, err = pcall(h.run, { "/usr/bin/nvidia-smi", "-q" }, { timeout = 5 })
    assert.is_false(ok)
    assert.matches('unscripted command "/usr/bin/nvidia-smi" (argv: /usr/bin/nvidia-smi -q)', err, 1, true)
  end)

  for _, d in ipairs({ "hang", "unreachable", "unconfigured", "garbage" }) do
    it("scenario{mesh = \"" .. d .. "\"} scripts one answer, repeated for every ctl call", function()
      local s = testing.scenario{ policy = { prolog = function() return "ok" end }, mesh = d }
      local first = table.pack(s.host.run(CTL, { timeout = 1 }))
      for _ = 1, 3 do
        local again = table.pack(s.host.run(CTL, { timeout = 1 }))
        assert.equal(first.n, again.n)
        if first[1] then
          assert.equal(first[1].stdout, again[1].stdout)
          assert.equal(first[1].status, again[1].status)
        else
          assert.equal(first[3], again[3])
        end
      end
      assert.is_nil(((first[1] or {}).stdout or ""):find("testing.scenario", 1, true))
    end)
  end

  it("check: a site policy that runs nvidia-smi passes the healthy world (the default tray)", function()
    local check = require("imexguard.testing.check")
    local default = require("policies.default")
    local P = default.extend{ admit = function(ctx)
      local r = ctx.host.run(fabric.argv(ctx.settings), { timeout = 5 })
      local doc = r and smi.parse(ctx.host, r.stdout)
      local g = doc and smi.fabric_gpus(doc)
      if not g or fabricjudge.judge(g).kind ~= "healthy" then
        return nil, "fabric-fault", "GPUs not registered"
      end
      return true
    end }
    local res = check.run_one(P, "healthy-job")
    assert.is_true(res.ok, res.why)
    assert.is_nil(res.not_applicable)
  end)

  it("check: a command the policy does not script fails the scenario, naming it; check_commands scripts it",
    function()
      local check = require("imexguard.testing.check")
      local P = require("policies.default").extend{ admit = function(ctx)
        local r = ctx.host.run({ "/opt/site/check-ib" }, { timeout = 5 })
        if r.stdout ~= "ok\n" then return nil, "bad-input", "IB down" end
        return true
      end }
      local res = check.run_one(P, "healthy-job")
      assert.is_false(res.ok)
      assert.matches("unscripted command \"/opt/site/check-ib\"", res.why, 1, true)
      P.check_commands = { ["check-ib"] = { stdout = "ok\n" } }
      res = check.run_one(P, "healthy-job")
      assert.is_true(res.ok, res.why)
    end)
end)

describe("testing: the wall clock and the local time (issue 32 item 7)", function()
  it("wallclock starts at WALL0 or the option wallclock, follows the monotonic clock, can be set", function()
    local h = testing.host{}
    assert.equal(testing.WALL0, h.wallclock())
    h = testing.host{ wallclock = 1767225600 }
    assert.equal(1767225600, h.wallclock())
    h.sleep(30)
    assert.equal(1767225630, h.wallclock())
    local mono = h.now()
    h.set_wallclock(1767261600)
    assert.equal(1767261600, h.wallclock())
    assert.equal(mono, h.now()) -- a clock step: the monotonic clock does not move
  end)

  it("localtime: the wall clock's local time in the zone of the options utc_offset and zone", function()
    local h = testing.host{ wallclock = 1767225600 + 9 * 3600 + 30 * 60, utc_offset = 3600, zone = "CET" }
    local t = h.localtime()
    assert.same({ 2026, 1, 1, 10, 30, 0, 5, 1, false, 3600, "CET" }, { t.year, t.month, t.day, t.hour, t.min,
      t.sec, t.wday, t.yday, t.isdst, t.utc_offset, t.zone })
    t = testing.host{}.localtime(0)
    assert.same({ 1970, 1, 1, 0, 5, "UTC" }, { t.year, t.month, t.day, t.hour, t.wday, t.zone })
    assert.has_error(function() h.localtime(0 / 0) end)
  end)
end)

describe("testing: one module per primitive group, one public API", function()
  local GROUPS = {
    ["testing.clock"] = { "now", "wallclock", "localtime", "remaining", "sleep", "set_deadline" },
    ["testing.files"] = { "read", "read_tail", "stat", "write_atomic", "remove_temps", "mkdir", "dir_exists",
      "mknod_char" },
    ["testing.lock"] = { "lock", "lock_holder" },
    ["testing.unit"] = { "unit", "unit_job", "unit_reset_failed", "unit_kill" },
    ["testing.run"] = { "run" },
    ["testing.net"] = { "log", "hostname", "euid", "local_addresses", "resolve", "port_owner", "socket_owner",
      "file_holders" },
    ["testing.journal"] = { "journal_read" },
  }

  for name, prims in pairs(GROUPS) do
    it(name .. " adds its primitives to a host; its name passes the sandbox's module-name rule", function()
      -- src/sandbox.c valid_lib_name: "imexguard." then words of letters, digits and '_' joined by
      -- single dots
      assert.matches("^[%w_]+%.[%w_]+$", name)
      local group = require("imexguard." .. name)
      local h, w = { calls = {}, sleeps = {}, writes = {}, mkdirs = {}, jobs = {}, runs = {}, locks = {},
        logs = {} }, {}
      function w.rec() end
      if name ~= "testing.clock" then require("imexguard.testing.clock").install(h, w, {}) end
      if name == "testing.unit" or name == "testing.run" then
        require("imexguard.testing.files").install(h, w, {})
      end
      if name == "testing.run" then require("imexguard.testing.unit").install(h, w, {}) end
      if name == "testing.lock" then require("imexguard.testing.files").install(h, w, {}) end
      group.install(h, w, {})
      for _, p in ipairs(prims) do assert.is_function(h[p], name .. " " .. p) end
    end)
  end

  it("imexguard.testing keeps its public API", function()
    for _, f in ipairs({ "host", "ctx", "scenario", "parse_env", "render_mesh", "up", "restarted_peer" }) do
      assert.is_function(testing[f], f)
    end
    for _, k in ipairs({ "UNIT", "CONFIG", "NODES", "STATE", "CONFIG_TEXT" }) do
      assert.is_string(testing[k], k)
    end
    for _, k in ipairs({ "UNREACHABLE", "UNCONFIGURED", "HANG", "DEFAULT_SETTINGS", "DEFAULT_NODES" }) do
      assert.is_table(testing[k], k)
    end
    assert.equal(1700000000, testing.WALL0)
    local h = testing.host()
    for _, prims in pairs(GROUPS) do
      for _, p in ipairs(prims) do assert.is_function(h[p], p) end
    end
    for _, f in ipairs({ "count", "file", "set_file", "advance", "daemon_nodes", "clear" }) do
      assert.is_function(h[f], f)
    end
    assert.is_table(h.unit_props)
  end)
end)

describe("testing: host.xml_parse", function()
  it("is the real primitive (a pure function), recorded with its input's name", function()
    local h = testing.host()
    local root = assert(h.xml_parse('<nvidia_smi_log><gpu id="0"/></nvidia_smi_log>', "nvidia-smi -q -x"))
    assert.equal("nvidia_smi_log", root.tag)
    assert.equal("0", root[1].attr.id)
    local r, err, code = h.xml_parse("<a>", "cut")
    assert.same({ nil, "xml" }, { r, code })
    assert.matches("^cut: the document ends early", err)
    assert.same({ { "xml_parse", "nvidia-smi -q -x" }, { "xml_parse", "cut" } }, h.calls)
  end)

  it("a spec may answer it (option xml_parse)", function()
    local h = testing.host{ xml_parse = function(_, name)
      return nil, name .. ": out of memory", "ENOMEM"
    end }
    assert.same({ nil, "x: out of memory", "ENOMEM" }, { h.xml_parse("<a/>", "x") })
  end)
end)
