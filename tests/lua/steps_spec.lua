-- Specs of the steps the default policy is built from (steps, state, addresses, health).
local testing = require "imexguard.testing"
local steps = require "imexguard.steps"
local state = require "imexguard.state"
local addresses = require "imexguard.addresses"
local health = require "imexguard.health"
local ctl = require "imexguard.ctl"
local cjson = require "cjson"

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

  it("a missing file is empty; a corrupt one is empty with a warning", function()
    local h = testing.host()
    local s = testing.ctx{ host = h }.settings
    local st, warn = state.load(h, s)
    assert.same({}, st)
    assert.is_nil(warn)
    h.set_file(testing.STATE, "{not json")
    st, warn = state.load(h, s)
    assert.same({}, st)
    assert.matches("not valid JSON", warn)
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

  it("dns: the first IPv4 answer in resolver order", function()
    local h = testing.host{ resolve = { a = { "fd00::1", "10.1.0.9", "10.1.0.1" } } }
    local addrs = addresses.lookup(h, { address_source = "dns", resolve_timeout = 2 }, { "a", "10.2.0.1" })
    assert.same({ "10.1.0.9", "10.2.0.1" }, addrs)
    assert.equal(1, h.count("resolve")) -- a literal is not resolved
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
    local v = health.verdict({ kind = "unreachable", err = "down" }, { "10.0.0.1" }, "10.0.0.1")
    assert.is_truthy(v.local_fault)
    assert.is_false(v.healthy)
    assert.is_nil(health.verdict({ kind = "malformed", err = "x" }, { "10.0.0.1" }, "10.0.0.1"))
    assert.is_nil(health.verdict({ kind = "unconfigured", err = "x" }, { "10.0.0.1" }, "10.0.0.1"))
  end)

  it("report: one row per node, connections summary, diagnosis", function()
    local d = assert(ctl.parse_domain(testing.render_domain({ nodes = { { host = "10.0.0.1" },
      { host = "10.0.0.2", status = "UNAVAILABLE" } } }), 0))
    local v = ctl.health(d, { "10.0.0.1", "10.0.0.2" }, "10.0.0.1")
    local r = health.report(d, v, { self = "10.0.0.1", names = { ["10.0.0.2"] = "n2" } })
    assert.matches("0%*%s+10.0.0.1%s+READY%s+1/2 connected; 10.0.0.2 INVALID%s+ok", r)
    assert.matches("1%s+10.0.0.2%s+n2%s+UNAVAILABLE", r)
    local j = cjson.decode(health.report(d, v, { self = "10.0.0.1", json = true }))
    assert.equal("DEGRADED", j.status)
    assert.equal("status UNAVAILABLE", j.nodes[2].diagnosis)
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
    local v = assert(steps.assess(ctx, info, want, {}, { changed = false, wait = true }))
    assert.equal("none", v.action)
    assert.is_table(v.answer.domain)
    assert.equal(1, h.count("run"))
  end)

  it("assess: an unusable ctl answer is never a reason to restart", function()
    local _, ctx, info, want = setup{ ctl = { "{" } }
    local v = assert(steps.assess(ctx, info, want, {}, { changed = false, wait = true }))
    assert.equal("none", v.action)
    assert.matches("ctl unusable", v.reason)
  end)

  it("assess: a pending write in plan means restart without probing", function()
    local h, ctx, info, want = setup()
    local v = assert(steps.assess(ctx, info, want, {}, { changed = true, write_pending = true }))
    assert.equal("restart", v.action)
    assert.equal(0, h.count("run"))
  end)

  it("may_restart allows every restart until the job registry exists", function()
    local _, ctx = setup()
    assert.is_true(steps.may_restart(ctx, {}))
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
