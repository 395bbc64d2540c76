-- SPDX-License-Identifier: Apache-2.0
-- Network primitives (src/net.c): loopback only; the slow resolver runs in a private mount
-- namespace whose resolv.conf points at a loopback socket that never answers.
local H = require("helpers")
local host = H.host()

describe("host network primitives", function()
  local dir, pid
  before_each(function() dir = H.tmpdir() end)
  after_each(function()
    H.kill_wait(pid)
    pid = nil
    host.set_deadline(0)
    H.rmdir(dir)
  end)

  it("local_addresses lists IPv4 addresses once each, loopback included", function()
    local addrs = assert(host.local_addresses())
    local seen = {}
    for _, a in ipairs(addrs) do
      assert.matches("^%d+%.%d+%.%d+%.%d+$", a)
      assert.is_nil(seen[a], "duplicate " .. a)
      seen[a] = true
    end
    assert.is_true(seen["127.0.0.1"])
  end)

  it("resolve gives IPv4 addresses of localhost and literals", function()
    local addrs = assert(host.resolve("localhost", 2))
    assert.equal("127.0.0.1", addrs[1])
    for _, a in ipairs(addrs) do assert.matches("^%d+%.%d+%.%d+%.%d+$", a) end
    assert.same({ "127.0.0.5" }, host.resolve("127.0.0.5", 1))
  end)

  it("rejects an empty name and raises on misuse", function()
    local r, msg, code = host.resolve("", 1)
    assert.is_nil(r)
    assert.equal("EINVAL", code)
    assert.matches('""', msg, 1, true)
    assert.equal("EINVAL", select(3, host.resolve(string.rep("a", 300), 1)))
    assert.error(function() host.resolve("localhost") end)
    assert.error(function() host.resolve(nil, 1) end)
  end)

  it("hostname is the kernel's node name", function()
    assert.equal(H.sh("uname -n"), host.hostname())
  end)

  it("euid is this process's effective user id", function()
    assert.equal(tonumber(H.sh("id -u")), host.euid())
    assert.equal("integer", math.type(host.euid()))
  end)

  it("a resolver that never answers costs the timeout (or the deadline), not more", function()
    local ns = dir .. "/ns"
    -- a silent name server on a loopback address of its own (Lua 5.4 seeds math.random per
    -- process), so concurrent runs of this spec on one machine never share it
    local addr = string.format("127.%d.%d.%d", math.random(100, 199), math.random(1, 254),
      math.random(1, 254))
    pid = H.spawn("perl -e 'use Socket; socket(S, PF_INET, SOCK_DGRAM, 0) or die; " ..
      "bind(S, pack_sockaddr_in(53, inet_aton(\"" .. addr .. "\"))) or die \"bind: $!\"; " ..
      "open(F, \">" .. ns .. "\"); close(F); sleep 60'", dir .. "/ns.log")
    assert.truthy(H.wait_until(function() return H.read(ns) end, 10), H.read(dir .. "/ns.log"))
    H.write(dir .. "/resolv.conf", "nameserver " .. addr .. "\noptions timeout:30 attempts:1\n")
    H.write(dir .. "/nsswitch.conf", "hosts: dns\n")
    local probe = H.lua_cmd(dir, "probe", [[
      local h = require("imexguard.host")
      local t0 = h.now()
      local r, msg, code = h.resolve("slow.imexguard.test", 0.5)
      print(string.format("%s %s %.3f %s", tostring(r), code, h.now() - t0, msg))
      h.set_deadline(0.3)
      t0 = h.now()
      r, msg, code = h.resolve("slow2.imexguard.test", 10)
      print(string.format("%s %s %.3f %s", tostring(r), code, h.now() - t0, msg))
    ]])
    local out = H.sh("unshare -m sh -c " .. H.q(string.format(
      "mount --bind %s /etc/resolv.conf && mount --bind %s /etc/nsswitch.conf && %s",
      H.q(dir .. "/resolv.conf"), H.q(dir .. "/nsswitch.conf"), probe)) .. " 2>&1")
    local l1, l2 = out:match("([^\n]*)\n([^\n]*)")
    assert.truthy(l1, out)
    local code1, t1 = l1:match("^nil (%S+) (%S+)")
    assert.equal("timeout", code1, out)
    assert.is_true(tonumber(t1) >= 0.5 and tonumber(t1) < 0.8, out)
    assert.matches("resolve slow.imexguard.test: no answer within 0.5 s", l1, 1, true)
    local code2, t2 = l2:match("^nil (%S+) (%S+)")
    assert.equal("deadline", code2, out)
    assert.is_true(tonumber(t2) < 0.5, out)
  end)

  it("lookups that fail at once or are abandoned never crash the process when the module unloads", function()
    -- A name server that refuses at once (nothing listens on 127.0.0.77:53): every lookup fails
    -- fast; the last one is abandoned at the deadline. Then lua_close unloads the module while
    -- glibc may still hold the requests: the process must exit normally, every time.
    H.write(dir .. "/resolv.conf", "nameserver 127.0.0.77\noptions timeout:1 attempts:1\n")
    H.write(dir .. "/nsswitch.conf", "hosts: dns\n")
    local probe = H.lua_cmd(dir, "unload", [[
      local h = require("imexguard.host")
      for _, n in ipairs({ "a.imexguard.test", "b.imexguard.test", "c.imexguard.test" }) do
        h.resolve(n, 1.5)
      end
      h.set_deadline(0.2)
      h.resolve("d.imexguard.test", 5)
    ]])
    local out = H.sh("unshare -m sh -c " .. H.q(string.format(
      "mount --bind %s /etc/resolv.conf && mount --bind %s /etc/nsswitch.conf && " ..
      "bad=0; for i in $(seq 20); do %s >/dev/null 2>&1 || bad=$((bad+1)); done; echo abnormal=$bad",
      H.q(dir .. "/resolv.conf"), H.q(dir .. "/nsswitch.conf"), probe)) .. " 2>&1")
    assert.matches("abnormal=0", out, 1, true)
  end)
end)
