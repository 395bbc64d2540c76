-- SPDX-License-Identifier: Apache-2.0
-- lua/imexguard/cmdtarget.lua: where nvidia-imex-ctl reaches the daemon (C37 socket, C44 IPv4-only
-- hosts), the answer that shows the target is wrong, and the finding of plan, status and -t.
local cmdtarget = require("imexguard.cmdtarget")
local imexcfg = require("imexguard.imexcfg")
local testing = require("imexguard.testing")

local function cfg(lines)
  return assert(imexcfg.parse(table.concat(lines, "\n") .. "\n"))
end

-- the line of ::1 in the kernel's IPv6 address table (/proc/net/if_inet6, proc(5))
local LO6 = "00000000000000000000000000000001 01 80 10 80       lo\n"

local DEFAULT = cfg({ "IMEX_CMD_PORT=50005", "IMEX_CMD_ENABLED=1", "IMEX_CMD_BIND_INTERFACE_IP=",
  "BIND_INTERFACE_IP=" })

describe("cmdtarget.args: the ctl's target", function()
  it("-c CONFIG where the host has IPv6 or it is unknown (the ctl reads its target there)", function()
    assert.same({ "-c", "/c" }, cmdtarget.args(DEFAULT, "/c", true))
    assert.same({ "-c", "/c" }, cmdtarget.args(DEFAULT, "/c", nil))
    assert.same({ "-c", "/c" }, cmdtarget.args(nil, "/c", false))
  end)

  it("C44: -c CONFIG -i 127.0.0.1 PORT on a host without IPv6 when the command service binds every "
    .. "interface; BIND_INTERFACE_IP when config.cfg sets it; the configured port", function()
    assert.same({ "-c", "/c", "-i", "127.0.0.1", "50005" }, cmdtarget.args(DEFAULT, "/c", false))
    -- the key absent is NVIDIA's default (empty) too
    assert.same({ "-c", "/c", "-i", "127.0.0.1", "50005" },
      cmdtarget.args(cfg({ "SERVER_PORT=50000" }), "/c", false))
    assert.same({ "-c", "/c", "-i", "10.0.0.7", "50105" }, cmdtarget.args(cfg({ "IMEX_CMD_PORT=50105",
      "BIND_INTERFACE_IP=10.0.0.7", "IMEX_CMD_BIND_INTERFACE_IP=" }), "/c", false))
    -- a BIND_INTERFACE_IP that is no IPv4 address is not dialed
    assert.same({ "-c", "/c", "-i", "127.0.0.1", "50005" },
      cmdtarget.args(cfg({ "BIND_INTERFACE_IP=gb01" }), "/c", false))
  end)

  it("keeps -c where the ctl dials an address config.cfg names, or the bind is unknown (C34)", function()
    assert.same({ "-c", "/c" }, cmdtarget.args(cfg({ "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.7" }), "/c", false))
    local twice = cfg({ "IMEX_CMD_BIND_INTERFACE_IP=", "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.7" })
    assert.same({ "-c", "/c" }, cmdtarget.args(twice, "/c", false))
  end)

  it("C37: -u SOCKET for a command service on a unix socket only, whatever the host", function()
    local sock = cfg({ "IMEX_CMD_UNIX_DOMAIN_PATH=/run/imex/cmd.sock" })
    assert.same({ "-u", "/run/imex/cmd.sock" }, cmdtarget.args(sock, "/c", false))
    assert.same({ "-u", "/run/imex/cmd.sock" }, cmdtarget.args(sock, "/c", true))
    -- a TCP port too: the port, as above
    local both = cfg({ "IMEX_CMD_UNIX_DOMAIN_PATH=/run/imex/cmd.sock", "IMEX_CMD_PORT=50005" })
    assert.same({ "-c", "/c", "-i", "127.0.0.1", "50005" }, cmdtarget.args(both, "/c", false))
  end)
end)

describe("cmdtarget.has_ipv6 and ipv6_for", function()
  it("reads the setting's file once per host: ::1 listed yes, absent no, another error unknown", function()
    local h = testing.host()
    local ctx = testing.ctx{ host = h }
    assert.is_true(cmdtarget.has_ipv6(ctx))
    assert.is_true(cmdtarget.has_ipv6(ctx))
    assert.equal(1, h.count("read"))
    h = testing.host{ files = { [testing.IF_INET6] = false } }
    assert.is_false(cmdtarget.has_ipv6(testing.ctx{ host = h }))
    h = testing.host{ fail = { [testing.IF_INET6] = { read = "EACCES" } } }
    ctx = testing.ctx{ host = h }
    assert.is_nil(cmdtarget.has_ipv6(ctx))
    assert.is_nil(cmdtarget.has_ipv6(ctx))
    assert.equal(1, h.count("read"))
    h = testing.host{ files = { ["/x/inet6"] = LO6 } }
    assert.is_true(cmdtarget.has_ipv6(testing.ctx{ host = h, settings = { proc_if_inet6 = "/x/inet6" } }))
  end)

  it("C44: IPv6 disabled by sysctl (disable_ipv6 = 1): the table is there without ::1, which a ctl "
    .. "dialing [::] connects to: no IPv6", function()
    for _, text in ipairs({ "", "fe800000000000000000000000000001 02 40 20 80     eth0\n",
      "fd000000000000000000000000000001 02 80 00 80     eth0\n" }) do
      local h = testing.host{ files = { [testing.IF_INET6] = text } }
      assert.is_false(cmdtarget.has_ipv6(testing.ctx{ host = h }), text)
    end
    local both = "fe800000000000000000000000000001 02 40 20 80     eth0\n" .. LO6
    local h = testing.host{ files = { [testing.IF_INET6] = both } }
    assert.is_true(cmdtarget.has_ipv6(testing.ctx{ host = h }))
  end)

  it("ipv6_for reads the host only where the config binds every interface with a TCP port", function()
    local h = testing.host()
    local ctx = testing.ctx{ host = h }
    assert.is_nil(cmdtarget.ipv6_for(ctx, cfg({ "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.1" })))
    assert.is_nil(cmdtarget.ipv6_for(ctx, nil))
    assert.equal(0, h.count("stat"))
    assert.is_true(cmdtarget.ipv6_for(ctx, DEFAULT))
  end)
end)

describe("cmdtarget: the ctl's error 14 on a host without IPv6", function()
  it("af_unsupported knows the answer by its words, only an unreachable one", function()
    assert.is_true(cmdtarget.af_unsupported({ kind = "unreachable",
      err = "nvidia-imex-ctl -N -j: local IMEX daemon unreachable (exit 1, '... ipv6:%5B::%5D:50005: "
        .. "Address family not supported by protocol')" }))
    assert.is_false(cmdtarget.af_unsupported({ kind = "unreachable", err = "... Connection refused" }))
    -- IPv6 disabled by sysctl: [::] has no ::1 to reach
    assert.is_true(cmdtarget.af_unsupported({ kind = "unreachable", err = "... last error: UNKNOWN: "
      .. "ipv6:%5B::%5D:50005: Failed to connect to remote host: Cannot assign requested address" }))
    assert.is_true(cmdtarget.af_unsupported({ kind = "unreachable",
      err = "... ipv6:%5B::%5D:50005: Network is unreachable" }))
    -- the same errno on another target says nothing about [::]
    assert.is_false(cmdtarget.af_unsupported({ kind = "unreachable",
      err = "... ipv4:10.0.0.7:50005: Network is unreachable" }))
    assert.is_false(cmdtarget.af_unsupported({ kind = "malformed",
      err = "Address family not supported by protocol" }))
    assert.is_false(cmdtarget.af_unsupported({ mesh = {} }))
    assert.is_false(cmdtarget.af_unsupported(nil))
  end)

  it("af_cause names IMEX_CMD_BIND_INTERFACE_IP, its value and the remedy", function()
    local cause = cmdtarget.af_cause(DEFAULT, "/c")
    assert.matches("^/c: IMEX_CMD_BIND_INTERFACE_IP is empty %(all interfaces%), so nvidia%-imex%-ctl "
      .. "dials %[::%]", cause)
    assert.matches("set IMEX_CMD_BIND_INTERFACE_IP to this node's IPv4 address", cause)
    assert.matches("IMEX_CMD_BIND_INTERFACE_IP is fd00::7,",
      cmdtarget.af_cause(cfg({ "IMEX_CMD_BIND_INTERFACE_IP=fd00::7" }), "/c"), 1, true)
  end)
end)

describe("cmdtarget.findings (plan, status, imexguard -t)", function()
  local text = "# imex\nSERVER_PORT=50000\nIMEX_CMD_PORT=50005\nIMEX_CMD_BIND_INTERFACE_IP=\n"

  it("a warning with file and line on a host without IPv6 whose command service binds every interface",
    function()
    local h = testing.host{ files = { [testing.IF_INET6] = false } }
    local f = cmdtarget.findings(testing.ctx{ host = h }, assert(imexcfg.parse(text)), "/etc/imex.cfg")
    assert.equal(1, #f)
    assert.equal("warning", f[1].level)
    assert.equal("/etc/imex.cfg", f[1].file)
    assert.equal(4, f[1].line)
    assert.matches("^/etc/imex.cfg: IMEX_CMD_BIND_INTERFACE_IP is empty and this host has no IPv6 "
      .. "%(/proc/net/if_inet6 is absent or lists no ::1%)", f[1].message)
    assert.matches("dials [::]:50005 and fails (error 14, Address family not supported by protocol, or "
      .. "Cannot assign requested address where IPv6 is disabled); imexguard asks the daemon with -i "
      .. "127.0.0.1 50005", f[1].message, 1, true)
    assert.is_nil(f[1].message:find("\n"))
    -- the key absent: no line to name
    f = cmdtarget.findings(testing.ctx{ host = h }, assert(imexcfg.parse("SERVER_PORT=50000\n")))
    assert.equal(1, #f)
    assert.is_nil(f[1].line)
    assert.matches("^/etc/nvidia%-imex/config.cfg: ", f[1].message)
  end)

  it("none with IPv6, with a bind address, with a socket only, or without a config", function()
    local ctx = testing.ctx{ host = testing.host() }
    assert.same({}, cmdtarget.findings(ctx, assert(imexcfg.parse(text)), "/c"))
    local no6 = testing.ctx{ host = testing.host{ files = { [testing.IF_INET6] = false } } }
    assert.same({}, cmdtarget.findings(no6, cfg({ "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.1" }), "/c"))
    assert.same({}, cmdtarget.findings(no6, cfg({ "IMEX_CMD_UNIX_DOMAIN_PATH=/run/x.sock" }), "/c"))
    assert.same({}, cmdtarget.findings(no6, nil, "/c"))
  end)
end)
