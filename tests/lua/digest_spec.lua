-- SPDX-License-Identifier: Apache-2.0
-- imexguard.digest: the node's digest in Slurm's Extra (slurm_extra) on the kit's fake host: its
-- facts, its text, Extra merged as a JSON object and never over a site's string, written only when
-- it changed, and `scontrol show node` read back (its real 22.05 layout: tests/fixtures/slurm).
local digest = require("imexguard.digest")
local testing = require("imexguard.testing")
local cjson = require("cjson")

local S = { state_dir = "/run/imexguard", scontrol = "/usr/bin/scontrol" }

local function fixture(name)
  local f = assert(io.open("tests/fixtures/" .. name, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

describe("imexguard.digest", function()
  it("hash: FNV-1a, 32 bits, 8 hex digits", function()
    assert.equal("811c9dc5", digest.hash(""))
    assert.equal("e40c292c", digest.hash("a"))
    assert.equal("bf9cf968", digest.hash("foobar"))
  end)

  it("encode: one line, the keys in order, t only when asked", function()
    local d = { v = 1, a = "10.0.0.1", l = "deadbeef", n = 2, p = 0, m = 0, o = "ok", t = 7 }
    assert.equal('{"v":1,"a":"10.0.0.1","l":"deadbeef","n":2,"p":0,"m":0,"o":"ok"}', digest.encode(d))
    assert.matches(',"t":7}$', digest.encode(d, true))
  end)

  it("from_extra: the digest of a JSON object; a site's string is foreign; none is none", function()
    local d, foreign = digest.from_extra('{"imexguard":{"v":1,"l":"aa","n":3},"site":"x"}')
    assert.same({ v = 1, l = "aa", n = 3 }, d)
    assert.is_false(foreign)
    d, foreign = digest.from_extra("owned by the site")
    assert.is_nil(d)
    assert.is_true(foreign)
    assert.is_nil((digest.from_extra("(null)")))
    assert.is_nil((digest.from_extra("")))
    assert.is_true(select(2, digest.from_extra("[1,2]")))
  end)

  it("merged_extra: the digest under 'imexguard', the site's keys kept; a site's string refused", function()
    local v = assert(digest.merged_extra('{"site":"rack 7","imexguard":{"v":0}}', { v = 1, o = "ok" }))
    local t = cjson.decode(v)
    assert.equal("rack 7", t.site)
    assert.same({ v = 1, o = "ok" }, t.imexguard)
    assert.is_nil(v:find("\n"))
    local none, err = digest.merged_extra("owned by the site", { v = 1 })
    assert.is_nil(none)
    assert.matches("not a JSON object", err)
    assert.truthy(digest.merged_extra(nil, { v = 1 }))
  end)

  it("parse_show: Slurm 22.05's `scontrol show node` (State=, Reason= [user@time], Extra=)", function()
    local nodes = digest.parse_show(fixture("slurm/show-node-extra-22.05.txt"))
    assert.equal(4, #nodes)
    assert.same({ "n1", "n2", "n3", "n4" }, { nodes[1].name, nodes[2].name, nodes[3].name, nodes[4].name })
    local n2 = nodes[2]
    assert.equal("IDLE+DRAIN", n2.state)
    assert.equal("maint e2e", n2.reason)
    assert.matches("^root@", n2.reason_by)
    local d = digest.from_extra(n2.extra)
    assert.equal("10.0.0.3", d.a)
    assert.is_nil(nodes[3].extra)
  end)

  describe("build and publish on the kit's host", function()
    local CFG = "BIND_INTERFACE_IP=10.0.0.1\nIMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n"
      .. "LOG_FILE_NAME=/var/log/nvidia-imex.log\n"
    local function host(o)
      o = o or {}
      o.files = o.files or { ["/etc/nvidia-imex/config.cfg"] = CFG,
        ["/etc/nvidia-imex/nodes_config.cfg"] = "10.0.0.2\n10.0.0.1\n" }
      return testing.host(o)
    end

    it("build: the list's hash, size and this node's line; its ID from the mesh; the daemon; the outcome",
      function()
      local h = host()
      local mesh = { by_host = { ["10.0.0.1"] = { id = 1 } } }
      local props = { invocation_id = "0123456789abcdef0123456789abcdef",
        exec_main_start_us = 1700000000123456,
        active_state = "active" }
      local d = digest.build(h, { config = "/etc/nvidia-imex/config.cfg", props = props, mesh = mesh,
        st = { invocation_id = "ffff" }, jobs = { { id = "7", invocation_id = "aaaa" } }, command = "prolog",
        outcome = "ok", ok = true })
      assert.same({ v = 1, a = "10.0.0.1", l = digest.hash("10.0.0.2\n10.0.0.1\n"), n = 2, p = 1, m = 1,
        i = "01234567", s = 1700000000, u = "active", h = true, x = "7", o = "ok" }, d)
      -- a failed run: its command and outcome, and the daemon's last [ERROR] line from its log's end
      h = host{ commands = { tail = { status = 0, stdout = "[INFO] a\n[ERROR] [tid 9] No matching network "
        .. "interface found\n[INFO] b\n" } } }
      d = digest.build(h, { config = "/etc/nvidia-imex/config.cfg", props = props, command = "health",
        outcome = "domain-unhealthy", ok = false, with_error = true, previous = { m = 5, i = "01234567" } })
      assert.equal("health", d.c)
      assert.equal("domain-unhealthy", d.o)
      assert.equal("[ERROR] [tid 9] No matching network interface found", d.e)
      assert.equal(5, d.m) -- no answer this run, the same daemon: the ID it had
    end)

    local function show(extra)
      return { status = 0, stdout = "NodeName=n1 Arch=x86_64\n   State=IDLE ThreadsPerCore=1\n"
        .. (extra and ("   Extra=" .. extra .. "\n") or "") }
    end

    it("publish: once per change (show, then update), nothing when the same digest comes again", function()
      local h = host{ scontrol = { show(nil), { status = 0 }, show('{"imexguard":{"v":1}}'),
        { status = 0 } } }
      local d = { v = 1, l = "aa", o = "ok" }
      assert.is_true(digest.publish(h, S, "n1", d))
      assert.equal(2, #h.runs_of("scontrol"))
      local upd = h.runs_of("scontrol")[2]
      assert.matches('^Extra={"imexguard":{"v":1,"l":"aa","o":"ok","t":%d+}}$', upd[#upd])
      assert.is_false(digest.publish(h, S, "n1", { v = 1, l = "aa", o = "ok" }))
      assert.equal(2, #h.runs_of("scontrol"))
      assert.is_true(digest.publish(h, S, "n1", { v = 1, l = "bb", o = "ok" }))
      assert.equal(4, #h.runs_of("scontrol"))
    end)

    it("publish: a site's string in Extra is left alone, and not asked again for M.RETRY seconds", function()
      local h = host{ scontrol = function() return show("owned by the site") end, deadline = 3600 }
      local ok, err = digest.publish(h, S, "n1", { v = 1, o = "ok" })
      assert.is_nil(ok)
      assert.matches("left as it is", err)
      assert.equal(1, #h.runs_of("scontrol")) -- the show; no update
      assert.is_false(digest.publish(h, S, "n1", { v = 1, o = "ok" }))
      assert.equal(1, #h.runs_of("scontrol"))
      h.advance(digest.RETRY + 1)
      digest.publish(h, S, "n1", { v = 1, o = "ok" })
      assert.equal(2, #h.runs_of("scontrol"))
    end)
  end)
end)
