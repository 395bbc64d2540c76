-- SPDX-License-Identifier: Apache-2.0
-- Specs of the steps the default policy is built from (steps, state, addresses, health); case ids
-- are the field cases of docs/design.md.
local testing = require("imexguard.testing")
local steps = require("imexguard.steps")
local state = require("imexguard.state")
local addresses = require("imexguard.addresses")
local health = require("imexguard.health")
local verdict = require("imexguard.verdict")
local registry = require("imexguard.registry")
local cjson = require("cjson")

describe("state", function()
  it("keeps microsecond timestamps exactly (lua-cjson has 14 digits only)", function()
    local h = testing.host()
    local s = testing.ctx{ host = h }.settings
    local st = { nodes = "10.0.0.1\n", written_us = 1732892345123456, invocation_id = "ab" }
    assert.is_true(state.save(h, s, st))
    assert.equal(testing.STATE, h.writes[1].path)
    assert.equal("1732892345123456", cjson.decode(h.file(testing.STATE)).written_us)
    local back = state.load(h, s)
    assert.equal(1732892345123456, back.written_us)
    assert.equal("10.0.0.1\n", back.nodes)
  end)

  it("keeps the job registry, registered_us exactly; a malformed entry makes the registry unknown", function()
    local h = testing.host()
    local s = testing.ctx{ host = h }.settings
    local st = { nodes = "a\n" }
    registry.register(st, 100, "10.0.0.1\n10.0.0.3\n", 1732892345123456, { invocation_id = "ab" })
    assert.is_true(state.save(h, s, st))
    local raw = cjson.decode(h.file(testing.STATE))
    assert.equal("1732892345123456", raw.jobs[1].registered_us)
    local back = state.load(h, s)
    assert.same({ { id = "100", nodes = "10.0.0.1\n10.0.0.3\n", registered_us = 1732892345123456,
      invocation_id = "ab" } }, back.jobs)
    h.set_file(testing.STATE, '{"jobs": [{"id": "7", "nodes": "x\\n"}, {"id": 8}, "junk"]}')
    local err
    back, err = state.load(h, s)
    assert.is_nil(back)
    assert.matches(testing.STATE, err, 1, true)
    assert.matches("job registration #2 is malformed", err)
  end)

  it("an empty registry is omitted from the file", function()
    local h = testing.host()
    local s = testing.ctx{ host = h }.settings
    assert.is_true(state.save(h, s, { jobs = {}, nodes = "x" }))
    assert.is_nil(cjson.decode(h.file(testing.STATE)).jobs)
  end)

  it("a missing file is empty; a corrupt or unreadable one is an error, never empty", function()
    local h = testing.host()
    local s = testing.ctx{ host = h }.settings
    local st, err = state.load(h, s)
    assert.same({}, st)
    assert.is_nil(err)
    h.set_file(testing.STATE, "{not json")
    st, err = state.load(h, s)
    assert.is_nil(st)
    assert.matches("not valid JSON", err)
    for text, why in pairs({ ['{"jobs":{"a":1}}'] = "'jobs' is not a list",
      ['{"written_us":"soon"}'] = "written_us is not a decimal time",
      ['{"invocation_id":7}'] = "invocation_id is a number",
      ['{"jobs":[{"id":"1","nodes":"a\\n","shared":{}}]}'] = "shared is not a scalar",
      ['{"jobs":[{"id":"","nodes":"a\\n"}]}'] = "malformed" }) do
      h.set_file(testing.STATE, text)
      st, err = state.load(h, s)
      assert.is_nil(st, text)
      assert.matches(why, err, 1, true)
    end
    h.set_file(testing.STATE, '{"jobs":{}}')
    assert.same({ jobs = {} }, state.load(h, s))
    local h2 = testing.host{ fail = { [testing.STATE] = { read = "EIO" } } }
    st, err = state.load(h2, s)
    assert.is_nil(st)
    assert.matches("unreadable %(.*EIO", err)
  end)
end)

describe("addresses", function()
  it("parses a map with comments, and names the bad line", function()
    local m = assert(addresses.parse_map("# c\n\nn1 10.0.0.1  # first\n  n2\t10.0.0.2\n", "/m"))
    assert.same({ n1 = "10.0.0.1", n2 = "10.0.0.2" }, m)
    local r, err = addresses.parse_map("n1 10.0.0.1\nn2\n", "/m")
    assert.is_nil(r)
    assert.matches("/m line 2", err)
    r, err = addresses.parse_map("n1 10.0.0.1\nn1 10.0.0.2\n", "/m")
    assert.is_nil(r)
    assert.matches("n1 listed twice", err)
  end)

  it("dns: the one IPv4 answer; a literal is not resolved", function()
    local h = testing.host{ resolve = { a = { "fd00::1", "10.1.0.9", "10.1.0.9" } } }
    local addrs = addresses.lookup(h, { address_source = "dns", resolve_timeout = 2 }, { "a", "10.2.0.1" })
    assert.same({ "10.1.0.9", "10.2.0.1" }, addrs)
    assert.equal(1, h.count("resolve")) -- a literal is not resolved
  end)

  it("dns: several IPv4 addresses are refused whatever their order (C04)", function()
    local h = testing.host{ resolve = { a = { "10.1.0.9", "10.1.0.1" } } }
    local addrs, err, code = addresses.lookup(h, { address_source = "dns", resolve_timeout = 2 }, { "a" })
    assert.is_nil(addrs)
    assert.is_nil(code)
    assert.matches("node a resolves to 2 IPv4 addresses (10.1.0.9 10.1.0.1)", err, 1, true)
    assert.matches('address_source = "map"', err, 1, true)
  end)

  it("self: BIND_INTERFACE_IP, else the first local address in the list", function()
    local h = testing.host{ local_addresses = { "10.0.0.3", "10.0.0.2" } }
    assert.equal("10.0.0.2", addresses.self(h, nil, { "10.0.0.1", "10.0.0.2", "10.0.0.3" }))
    local a, i = addresses.self(h, "10.0.0.3", { "10.0.0.1", "10.0.0.3" })
    assert.equal("10.0.0.3", a)
    assert.equal(2, i)
    local none, err = addresses.self(h, "", { "10.0.0.1" })
    assert.is_nil(none)
    assert.matches("10.0.0.3 10.0.0.2", err)
  end)
end)

describe("health", function()
  it("ctl argv from a path or an argv prefix", function()
    assert.same({ "/usr/bin/nvidia-imex-ctl", "-c", "/c", "-N", "-j" },
      health.ctl_argv({ ctl = "/usr/bin/nvidia-imex-ctl", imex_config = "/c" }))
    assert.same({ "sim", "ctl", "-c", "/c", "-N", "-j" },
      health.ctl_argv({ ctl = { "sim", "ctl" }, imex_config = "/c" }))
  end)

  it("probe classifies answers", function()
    local h = testing.host{ ctl = { testing.HANG, testing.UNREACHABLE, "x", { exec_error = "ENOENT" } } }
    local ctx = testing.ctx{ host = h }
    assert.equal("timeout", health.probe(ctx).kind)
    assert.equal("unreachable", health.probe(ctx).kind)
    assert.equal("malformed", health.probe(ctx).kind)
    local a = health.probe(ctx)
    assert.equal("exec", a.kind)
    assert.matches("ENOENT", a.err)
  end)

  it("an unreachable local daemon is a local fault; garbage is no verdict", function()
    local w = { addrs = { "10.0.0.1" }, self = "10.0.0.1" }
    local v = verdict.judge({ kind = "unreachable", err = "down" }, w)
    assert.is_truthy(v.local_fault)
    assert.is_false(v.healthy)
    assert.is_nil(verdict.judge({ kind = "malformed", err = "x" }, w))
    assert.is_nil(verdict.judge({ kind = "unconfigured", err = "x" }, w))
  end)
end)

describe("steps", function()
  local function setup(o)
    local h = testing.host(o)
    local ctx = testing.ctx{ host = h }
    local info = assert(steps.applies(ctx))
    local want = assert(steps.desired(ctx, info))
    return h, ctx, info, want
  end

  it("applies: the nodes file from config.cfg, else NVIDIA's default", function()
    local _, _, info = setup{ files = { [testing.CONFIG] = "DAEMONIZE=1\n" } }
    assert.equal("/etc/nvidia-imex/nodes_config.cfg", info.nodes_file)
    assert.is_nil(info.bind)
  end)

  it("desired: bytes, self and names", function()
    local _, _, _, want = setup()
    assert.equal("10.0.0.1\n10.0.0.2\n", want.bytes)
    assert.equal("10.0.0.1", want.self)
    assert.equal("n2", want.names["10.0.0.2"])
  end)

  it("assess: current daemon, one ctl call, the answer kept for the health wait", function()
    local h, ctx, info, want = setup()
    local v = assert(steps.assess_daemon(ctx, info, want, {}, { changed = false, wait = true }))
    assert.equal("none", v.action)
    assert.is_table(v.answer.mesh)
    assert.equal(1, h.count("run"))
  end)

  it("assess: an unusable ctl answer is never a reason to restart", function()
    local _, ctx, info, want = setup{ ctl = { "{" } }
    local v = assert(steps.assess_daemon(ctx, info, want, {}, { changed = false, wait = true }))
    assert.equal("none", v.action)
    assert.matches("ctl unusable", v.reason)
  end)

  it("assess: a pending write in plan means restart without probing", function()
    local h, ctx, info, want = setup()
    local v = assert(steps.assess_daemon(ctx, info, want, {}, { changed = true, write_pending = true }))
    assert.equal("restart", v.action)
    assert.equal(0, h.count("run"))
  end)

  describe("assess: the ctl runs during step 5a's unit query (the overlap, docs/design.md step 5)", function()
    -- A host whose unit queries take `query` seconds of the virtual clock (a real one costs D-Bus
    -- round trips), from the second query on (the first is step 1's, in setup).
    local function slow_unit(h, query)
      local unit, n = h.unit, 0
      h.unit = function(...)
        n = n + 1
        if n > 1 then h.advance(query) end
        return unit(...)
      end
    end
    local function names(h, from)
      local list = {}
      for i = from or 1, #h.calls do list[#list + 1] = h.calls[i][1] end
      return list
    end
    local CURRENT = { changed = false, wait = true }

    it("a current daemon: the ctl starts before the query and is collected after it, once", function()
      local h, ctx, info, want = setup{ ctl = { { mesh = testing.up({ "10.0.0.1", "10.0.0.2" }).mesh,
        elapsed = 0.3 } } }
      slow_unit(h, 0.2)
      local from, t0 = #h.calls + 1, h.now()
      local v = assert(steps.assess_daemon(ctx, info, want, {}, CURRENT))
      assert.equal("none", v.action)
      assert.equal("daemon current", v.reason)
      assert.is_table(v.answer.mesh) -- kept for the first health poll
      assert.same({ "run", "unit", "wait" }, (function()
        local l = {}
        for _, n in ipairs(names(h, from)) do if n ~= "stat" and n ~= "read" then l[#l + 1] = n end end
        return l
      end)())
      assert.equal(1, h.count("run"))
      assert.equal(1, #h.spawns)
      assert.is_nil(h.spawns[1].killed)
      assert.near(0.3, h.now() - t0, 1e-9) -- the 0.2 s query ran inside the ctl's 0.3 s, not after it
      assert.equal(ctx.mesh_seen, v.answer.mesh) -- health.probe's bookkeeping, as without the overlap
    end)

    it("the answer is health.probe's: an unusable one proves nothing, a stale map restarts", function()
      local _, ctx, info, want = setup{ ctl = { "{" } }
      local v = assert(steps.assess_daemon(ctx, info, want, {}, CURRENT))
      assert.equal("none", v.action)
      assert.matches("ctl unusable", v.reason)
      _, ctx, info, want = setup{ ctl = { { mesh = testing.up({ "10.0.0.2", "10.0.0.1" }).mesh } } }
      v = assert(steps.assess_daemon(ctx, info, want, {}, CURRENT))
      assert.equal("restart", v.action)
      assert.equal("reordered", v.order)
      assert.is_nil(v.answer)
      local h
      h, ctx, info, want = setup{ ctl = { { exec_error = "ENOENT" } } }
      v = assert(steps.assess_daemon(ctx, info, want, {}, CURRENT))
      assert.equal("none", v.action)
      assert.matches("cannot run", v.reason)
      assert.equal(1, h.count("run"))
      assert.same({}, h.spawns)
    end)

    it("a hung ctl times out ctl_timeout after its start, the query inside that time", function()
      local h, ctx, info, want = setup{ ctl = { testing.HANG } }
      slow_unit(h, 0.2)
      local t0 = h.now()
      local v = assert(steps.assess_daemon(ctx, info, want, {}, CURRENT))
      assert.equal("none", v.action)
      assert.matches("hung", v.reason)
      assert.near(ctx.settings.ctl_timeout, h.now() - t0, 1e-9)
    end)

    it("never runs the ctl where the stages decide without it", function()
      -- not running at step 1: start, no ctl
      local h, ctx, info, want = setup{ unit = { active_state = "inactive" } }
      local v = assert(steps.assess_daemon(ctx, info, want, {}, CURRENT))
      assert.equal("start", v.action)
      assert.equal(0, h.count("run"))
      -- a list change pending (plan): restart, no ctl
      h, ctx, info, want = setup()
      v = assert(steps.assess_daemon(ctx, info, want, {}, { changed = true, write_pending = true }))
      assert.equal("restart", v.action)
      assert.equal(0, h.count("run"))
      -- the state file knows this daemon was started with another list: restart, no ctl, and the
      -- files are read once (the judgement on step 1's properties is the query's)
      h, ctx, info, want = setup()
      local st = { invocation_id = info.unit.invocation_id, running_nodes = "10.0.0.9\n",
        running_config = testing.CONFIG_TEXT }
      local reads = h.count("read")
      v = assert(steps.assess_daemon(ctx, info, want, st, CURRENT))
      assert.equal("restart", v.action)
      assert.matches("started with another node list", v.reason)
      assert.equal(0, h.count("run"))
      assert.equal(reads + 1, h.count("read"))
      -- a config.cfg modified after the daemon's start (invocation unknown to the state file)
      h, ctx, info, want = setup{ files = { [testing.CONFIG] = { data = testing.CONFIG_TEXT,
        mtime_us = testing.WALL0 * 1e6 } } }
      v = assert(steps.assess_daemon(ctx, info, want, {}, CURRENT))
      assert.equal("restart", v.action)
      assert.matches("changed after the daemon started", v.reason)
      assert.equal(0, h.count("run"))
    end)

    it("a unit restarted between step 1 and the query: the early ctl is killed unread, the stages run on "
      .. "the query", function()
      local h, ctx, info, want = setup{ unit_script = { {}, { invocation_id = "fe" .. string.rep("0", 30),
        exec_main_start_us = testing.WALL0 * 1e6 } },
        ctl = function(n) return { mesh = testing.up({ "10.0.0.1", "10.0.0.2" }).mesh, stdout = nil,
          status = 0, stderr = tostring(n) } end }
      local v = assert(steps.assess_daemon(ctx, info, want, {}, CURRENT))
      assert.equal("none", v.action)
      assert.equal(2, h.count("run")) -- the early one, killed, and the stage's own
      assert.equal(1, #h.spawns)
      assert.is_truthy(h.spawns[1].killed)
      assert.is_nil(h.spawns[1].waited)
      assert.equal(0, h.count("wait"))
    end)

    it("a unit that stopped or cannot be queried under the lock: the early ctl is killed", function()
      local h, ctx, info, want = setup{ unit_script = { {}, { active_state = "deactivating" } } }
      local v = assert(steps.assess_daemon(ctx, info, want, {}, { changed = false, wait = false }))
      assert.equal("wait", v.action)
      assert.is_truthy(h.spawns[1].killed)
      h, ctx, info, want = setup{ unit_script = { {}, "timeout" } }
      local ok, outcome = steps.assess_daemon(ctx, info, want, {}, CURRENT)
      assert.is_nil(ok)
      assert.equal("unit-unknown", outcome)
      assert.is_truthy(h.spawns[1].killed)
    end)

    it("a host without spawn (a site's own): the ctl runs after the query, as before", function()
      local h, ctx, info, want = setup()
      h.spawn = nil
      local from = #h.calls + 1
      local v = assert(steps.assess_daemon(ctx, info, want, {}, CURRENT))
      assert.equal("none", v.action)
      local l = {}
      for _, n in ipairs(names(h, from)) do if n ~= "stat" and n ~= "read" then l[#l + 1] = n end end
      assert.same({ "unit", "run" }, l)
    end)
  end)

  describe("may_restart (step 6, the default rule)", function()
    local function with_jobs(jobs, settings, env)
      local h = testing.host()
      local ctx = testing.ctx{ host = h, settings = settings, env = env }
      local st = {}
      for _, j in ipairs(jobs) do
        registry.register(st, j[1], j[2], (testing.WALL0 - 3600) * 1e6)
      end
      return ctx, st, h
    end
    local A, B = "10.0.0.1\n10.0.0.2\n", "10.0.0.1\n10.0.0.3\n"

    it("no other job: allowed", function()
      local ctx, st = with_jobs({})
      assert.is_true(steps.may_restart(ctx, st, { action = "restart", nodes = A }))
    end)

    it("other jobs with the same list: a start allowed, a restart of the active daemon refused", function()
      local ctx, st = with_jobs({ { 100, A }, { 102, A } })
      assert.is_true(steps.may_restart(ctx, st, { action = "start", nodes = A }))
      local ok, msg, entries = steps.may_restart(ctx, st, { action = "restart", nodes = A })
      assert.is_false(ok)
      assert.equal(2, #entries)
      assert.equal("node n1: jobs 100 (10.0.0.[1-2], registered 1h00m ago), 102 (10.0.0.[1-2], registered "
        .. "1h00m ago) use the running daemon, and a restart drops every import; job 101 would restart "
        .. "nvidia-imex.service for n[1-2]; nothing written or restarted; if one of them no longer runs "
        .. "here: imexguard forget JOBID", msg)
    end)

    it("another job with a different list: refused naming it, its list, age and the cleanup", function()
      local ctx, st = with_jobs({ { 100, A }, { 102, B } })
      local ok, msg, entries = steps.may_restart(ctx, st, { action = "restart", nodes = A, changed = true })
      assert.is_false(ok)
      assert.equal(1, #entries)
      assert.equal("102", entries[1].id)
      assert.equal("node n1: job 102 (10.0.0.[1,3], registered 1h00m ago) uses nvidia-imex.service with "
        .. "another node list; job 101 would rewrite the node list and restart nvidia-imex.service for "
        .. "n[1-2]; nothing written or restarted; if job 102 no longer runs here: imexguard forget 102", msg)
    end)

    it("this job's own entry never conflicts", function()
      local ctx, st = with_jobs({ { 101, B } })
      assert.is_true(steps.may_restart(ctx, st, { action = "restart", nodes = A }))
    end)

    it("restart_under_jobs: allowed with a warning", function()
      local ctx, st, h = with_jobs({ { 100, B } }, { restart_under_jobs = true })
      assert.is_true(steps.may_restart(ctx, st, { action = "restart", nodes = A }))
      assert.equal("warning", h.logs[1][1])
      assert.matches("under job 100", h.logs[1][2])
    end)
  end)

  describe("registry", function()
    it("register replaces the same id, unregister removes, others/conflicting", function()
      local st = {}
      registry.register(st, 100, "a\n", 1e15)
      registry.register(st, "101", "b\n", 2e15, { shared = "YES" })
      registry.register(st, 100, "c\n", 3e15)
      assert.same({ "100", "101" }, { st.jobs[1].id, st.jobs[2].id })
      assert.equal("c\n", st.jobs[1].nodes)
      assert.equal("YES", registry.find(st, 101).shared)
      assert.same({ "101" }, { registry.others(st, 100)[1].id })
      assert.equal(0, #registry.conflicting(st, 100, "b\n"))
      assert.equal("101", registry.unregister(st, 101).id)
      assert.is_nil(registry.unregister(st, 101))
      assert.equal("100", registry.ids(st.jobs))
    end)

    it("prune drops entries older than max_age only", function()
      local st = {}
      registry.register(st, 1, "a\n", 0)
      registry.register(st, 2, "a\n", 9e6)
      assert.same({}, registry.prune(st, 10e6, nil))
      local gone = registry.prune(st, 10e6, 5)
      assert.equal("1", gone[1].id)
      assert.equal("2", registry.ids(st.jobs))
    end)

    it("age_text", function()
      assert.equal("59s", registry.age_text(59))
      assert.equal("2m05s", registry.age_text(125))
      assert.equal("2h05m", registry.age_text(7500))
      assert.equal("3d01h", registry.age_text(3 * 86400 + 3600))
    end)
  end)

  describe("register (step 9)", function()
    it("saves the entry with the job's list, the time and the invocation id", function()
      local h, ctx, _, want = setup()
      local st = {}
      local t = h.wallclock()
      local e = assert(steps.register(ctx, st, want, { invocation_id = "abc" }))
      assert.equal("101", e.id)
      local back = state.load(h, ctx.settings)
      assert.equal(want.bytes, back.jobs[1].nodes)
      assert.equal("abc", back.jobs[1].invocation_id)
      assert.equal(math.floor(t * 1e6), back.jobs[1].registered_us)
    end)

    it("a state file that cannot be written: nil and a message naming the job", function()
      local _, ctx, _, want = setup{ fail = { [testing.STATE] = { write = "ENOSPC" } } }
      local e, err = steps.register(ctx, {}, want)
      assert.is_nil(e)
      assert.matches("job 101 not registered", err)
      assert.matches("ENOSPC", err)
    end)
  end)

  describe("node_name", function()
    it("is Slurm's name (SLURMD_NODENAME of the prolog environment), the kernel's only without it", function()
      local h = testing.host{ hostname = "gb200-rack1-tray3.cluster.local" }
      local ctx = testing.ctx{ host = h, env = { SLURMD_NODENAME = "gb200-n003" } }
      ctx.job = require("imexguard.slurmenv").job(ctx.env)
      assert.equal("gb200-n003", steps.node_name(ctx))
      ctx = testing.ctx{ host = h, env = {} }
      ctx.job = require("imexguard.slurmenv").job(ctx.env)
      assert.equal("gb200-rack1-tray3.cluster.local", steps.node_name(ctx))
    end)
  end)

  describe("ensure_dir", function()
    it("creates the last component only, an existing directory is fine", function()
      local h = testing.host{ absent_dirs = { "/run/a" } }
      assert.is_true(steps.ensure_dir(h, "/run/a", 493))
      assert.is_true(h.dir_exists("/run/a"))
      assert.is_true(steps.ensure_dir(h, "/run/a", 493))
    end)

    it("a missing parent (a misspelt state_dir) creates nothing and names the parent", function()
      local h = testing.host{ absent_dirs = { "/rnu", "/rnu/imexguard" } }
      local ok, err, code = steps.ensure_dir(h, "/rnu/imexguard", 493)
      assert.is_nil(ok)
      assert.equal("ENOENT", code)
      assert.matches("parent directory /rnu does not exist", err, 1, true)
      assert.equal(1, #h.mkdirs)
      assert.is_false(h.dir_exists("/rnu"))
    end)

    it("root_hint: a D-Bus call refused by polkit counts as a permission error", function()
      local h = testing.host{ euid = 1000 }
      assert.equal(" (running as uid 1000: run as root)",
        steps.root_hint(h, "bus", "StartUnit: Interactive authentication required."))
      assert.equal(" (running as uid 1000: run as root)", steps.root_hint(h, "bus", "Access denied"))
      assert.equal("", steps.root_hint(h, "bus", "Connection refused"))
      assert.equal("", steps.root_hint(testing.host{}, "bus", "Access denied"))
    end)

    it("a permission error of a non-root run says to run as root; root's does not", function()
      local h = testing.host{ euid = 1000, fail = { ["/run/x"] = { mkdir = "EACCES" } } }
      local _, err = steps.ensure_dir(h, "/run/x", 493)
      assert.matches("running as uid 1000: run as root", err, 1, true)
      h = testing.host{ fail = { ["/run/x"] = { mkdir = "EACCES" } } }
      _, err = steps.ensure_dir(h, "/run/x", 493)
      assert.not_matches("as root", err, 1, true)
      h = testing.host{ euid = 1000, fail = { ["/run/x"] = { mkdir = "ENOSPC" } } }
      _, err = steps.ensure_dir(h, "/run/x", 493)
      assert.not_matches("as root", err, 1, true)
    end)

    it("a failure is returned with its code", function()
      local h = testing.host{ fail = { ["/run/x"] = { mkdir = "EACCES" } } }
      local ok, err, code = steps.ensure_dir(h, "/run/x", 493)
      assert.is_nil(ok)
      assert.matches("/run/x", err)
      assert.equal("EACCES", code)
    end)
  end)

  it("lock guard releases once", function()
    local h, ctx = setup()
    local g = assert(steps.lock(ctx))
    g:release()
    g:release()
    assert.equal(1, h.count("unlock"))
    do
      local g2 <close> = assert(steps.lock(ctx)) -- luacheck: ignore g2
    end
    assert.equal(2, h.count("unlock"))
  end)
end)

describe("steps.fail and steps.by_code (shared with the policies)", function()
  it("fail: nil, the outcome and the formatted message made one line", function()
    local r = table.pack(steps.fail("bad-input", "job %s: %s", "7", "line\nbreak"))
    assert.equal(3, r.n)
    assert.is_nil(r[1])
    assert.equal("bad-input", r[2])
    assert.equal("job 7: line break", r[3])
  end)

  it("by_code: a primitive's code 'deadline' is deadline-exceeded, any other the given outcome", function()
    assert.equal("deadline-exceeded", steps.by_code("deadline", "write-failed"))
    assert.equal("write-failed", steps.by_code("ENOSPC", "write-failed"))
    assert.equal("service-failed", steps.by_code(nil, "service-failed"))
  end)
end)

describe("conflict_message", function()
  it("names every blocking job, plural grammar, and the cleanup command", function()
    local h = testing.host()
    local ctx = testing.ctx{ host = h }
    local st = {}
    registry.register(st, 1, "10.0.0.1\n", (testing.WALL0 - 60) * 1e6)
    registry.register(st, 2, "10.0.0.3\n", (testing.WALL0 - 30) * 1e6)
    local m = steps.conflict_message(ctx, { action = "start", nodes = "10.0.0.1\n10.0.0.2\n" }, st.jobs,
      "it with another node list")
    assert.equal("node n1: jobs 1 (10.0.0.1, registered 1m00s ago), 2 (10.0.0.3, registered 30s ago) use "
      .. "nvidia-imex.service with another node list; job 101 would start nvidia-imex.service for n[1-2]; "
      .. "nothing written or restarted; if one of them no longer runs here: imexguard forget JOBID", m)
  end)

  it("a rack: the cause first, host names compressed as Slurm writes them, well under a drain reason",
    function()
    local h = testing.host()
    local ctx = testing.ctx{ host = h, env = { SLURM_JOB_ID = "102", SLURM_JOB_NODELIST = "gb[01-18]",
      SLURMD_NODENAME = "gb03" } }
    local st, addrs = {}, {}
    for i = 3, 18 do addrs[#addrs + 1] = "10.0.0." .. i end
    registry.register(st, 101, table.concat(addrs, "\n") .. "\n", (testing.WALL0 - 7500) * 1e6,
      { hosts = "gb[03-18]" })
    local m = steps.conflict_message(ctx, { action = "restart", changed = true, nodes = "x\n" }, st.jobs,
      "it with another node list")
    assert.equal("node gb03: job 101 (gb[03-18], registered 2h05m ago) uses nvidia-imex.service with another "
      .. "node list; job 102 would rewrite the node list and restart nvidia-imex.service for gb[01-18]; "
      .. "nothing written or restarted; if job 101 no longer runs here: imexguard forget 101", m)
    local reason = require("imexguard.drain").reason("conflict", m)
    assert.equal("imexguard: conflict: job 101 (gb[03-18], registered 2h05m ago) uses nvidia-imex.service",
      reason:sub(1, 87))
    assert.is_true(#reason <= 255)
  end)

  it("register records the job's hosts compressed (what messages and registrations show)", function()
    local h = testing.host()
    local ctx = testing.ctx{ host = h }
    local st = {}
    local e = assert(steps.register(ctx, st, { bytes = "10.0.0.2\n10.0.0.1\n", list = { "n2", "n1" } }, {}))
    assert.equal("n[1-2]", e.hosts)
    assert.equal("n[1-2]", registry.entry_hosts(e))
    assert.equal("10.0.0.[1-2]", registry.entry_hosts({ nodes = "10.0.0.2\n10.0.0.1\n" }))
    -- so does the registration before a change (a prolog that rewrites the list or restarts)
    st = {}
    local want = { bytes = "10.0.0.2\n10.0.0.1\n", list = { "n2", "n1" } }
    local c = assert(steps.begin_change(ctx, st, want, {}))
    assert.equal("n[1-2]", require("imexguard.registry").jobs(st)[1].hosts)
    c:finish("ok")
  end)
end)

describe("steps: unit lifecycle (start limit, disabled unit, late epilog)", function()
  it("unit_result names every Result with its recovery; an unknown one is named as it is", function()
    for result, hint in pairs({ ["start-limit-hit"] = "systemctl reset%-failed nvidia%-imex.service",
      ["exit-code"] = "journalctl", ["core-dump"] = "coredumpctl", ["watchdog"] = "watchdog",
      ["oom-kill"] = "^unit Result oom%-kill$" }) do
      local h = testing.host{ unit = { active_state = "failed", result = result } }
      local got, text = steps.unit_result(testing.ctx{ host = h })
      assert.equal(result, got)
      assert.matches(hint, text)
    end
    local h = testing.host{ unit_script = { "bus" } }
    assert.equal("unknown", (steps.unit_result(testing.ctx{ host = h })))
  end)

  it("check_port_owner: the unit's main pid or cgroup passes; anything else is named; no primitive: true",
    function()
      local info = { cfg = { IMEX_CMD_PORT = "50123" } }
      local props = { active_state = "active", main_pid = 77 }
      local function check(owner, files)
        local h = testing.host{ port_owner = owner, files = files }
        return steps.check_port_owner(testing.ctx{ host = h }, info, props), h
      end
      assert.is_true((check({ pid = 77, comm = "nvidia-imex" })))
      local cg = { ["/proc/78/cgroup"] = "0::/system.slice/nvidia-imex.service\n" }
      assert.is_true((check({ pid = 78 }, cg)))
      assert.is_true((check("none")))
      local h = testing.host{ port_owner = { pid = 78, cmdline = { "imex", "-c", "/x\n" } } }
      local ok, o, m = steps.check_port_owner(testing.ctx{ host = h }, info, props)
      assert.is_nil(ok)
      assert.equal("service-failed", o)
      assert.matches("pid 78 %(imex %-c /x\\010%) listens on the IMEX command port 50123", m)
      -- the unit's main pid is the hint: its descriptors are read before every process's
      assert.same({ "port_owner", 50123, nil, nil, 77 }, h.calls[#h.calls - 1])
      h = testing.host{ port_owner = "none" }
      local bound = { cfg = { IMEX_CMD_PORT = "50123", IMEX_CMD_BIND_INTERFACE_IP = "10.0.0.1" } }
      steps.check_port_owner(testing.ctx{ host = h }, bound, { active_state = "inactive", main_pid = 0 })
      assert.same({ "port_owner", 50123, nil, "10.0.0.1" }, h.calls[#h.calls])
      h = testing.host()
      h.port_owner = nil
      assert.is_true(steps.check_port_owner(testing.ctx{ host = h }, info, { active_state = "inactive" }))
    end)

  it("wait_registry returns as soon as the registry changes, false after the time, never past it", function()
    local h = testing.host()
    local ctx = testing.ctx{ host = h }
    local st = {}
    registry.register(st, 300, "10.0.0.1\n", 1, {})
    assert(state.save(h, ctx.settings, st))
    local key = steps.registry_key(st)
    assert.is_false(steps.wait_registry(ctx, key, h.now() + 1))
    local t0 = h.now()
    assert.is_true(t0 >= 1001 and t0 < 1001.1, tostring(t0))
    local sleep = h.sleep
    h.sleep = function(t)
      local r = sleep(t)
      registry.unregister(st, 300)
      assert(state.save(h, ctx.settings, st))
      return r
    end
    assert.is_true(steps.wait_registry(ctx, key, h.now() + 10))
    assert.is_true(h.now() - t0 <= 0.3, "one poll_interval: " .. tostring(h.now() - t0))
  end)
end)
