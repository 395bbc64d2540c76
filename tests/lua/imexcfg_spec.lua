-- SPDX-License-Identifier: Apache-2.0
-- Specs for imexguard.imexcfg (NVIDIA's config.cfg). Case ids (C22, C28) are the field cases of
-- docs/design.md, "Field cases".
local imexcfg = require("imexguard.imexcfg")

-- Shaped like the config.cfg of the nvidia-imex package: comments, blank lines, empty values.
local SAMPLE = [[
# This is the IMEX configuration file.

# Log file name
LOG_FILE_NAME=/var/log/nvidia-imex.log
DAEMONIZE=1
SERVER_PORT=50000
BIND_INTERFACE_IP=
IMEX_CMD_BIND_INTERFACE_IP=
IMEX_CMD_PORT=50005
IMEX_CMD_ENABLED=1
IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
]] .. "  IMEX_WAIT_FOR_QUORUM = NONE  \n"

describe("imexcfg.parse", function()
  it("reads KEY=VALUE lines, skipping comments and blanks", function()
    local cfg = assert(imexcfg.parse(SAMPLE))
    assert.equal("/var/log/nvidia-imex.log", cfg.LOG_FILE_NAME)
    assert.equal("50000", cfg.SERVER_PORT)
    assert.equal("", cfg.BIND_INTERFACE_IP)
    assert.equal("/etc/nvidia-imex/nodes_config.cfg", cfg.IMEX_NODE_CONFIG_FILE)
    assert.equal("NONE", cfg.IMEX_WAIT_FOR_QUORUM)
    assert.equal("-1", cfg.IMEX_NODE_DISCONNECTED_GRACE_TIME)
    local n = 0
    for _ in pairs(cfg) do
      n = n + 1
    end
    assert.equal(10, n)
  end)

  it("keeps '=' inside the value and handles CRLF and a missing final newline", function()
    assert.same({ A = "x=y", B = "2" }, imexcfg.parse("A=x=y\r\nB=2"))
    assert.same({}, imexcfg.parse(""))
  end)

  it("reports a line without '=' by number", function()
    local cfg, err = imexcfg.parse("A=1\n# c\nSERVER_PORT 50000\n")
    assert.is_nil(cfg)
    assert.truthy(err:find("line 3", 1, true))
    assert.truthy(err:find("SERVER_PORT 50000", 1, true))
  end)

  it("reports a bad key by number", function()
    for _, text in ipairs({ "\n=5\n", "\nBAD KEY=1\n", "\n1X=2\n", "\nA-B=3\n" }) do
      local cfg, err = imexcfg.parse(text)
      assert.is_nil(cfg, text)
      assert.truthy(err:find("line 2", 1, true), err)
      assert.truthy(err:find("bad key", 1, true), err)
    end
  end)

  it("C34: a key set twice with the same value is known; with different values unknown, never guessed",
    function()
    local cfg = assert(imexcfg.parse("IMEX_CMD_ENABLED=1\nX=2\nIMEX_CMD_ENABLED = 1\n"))
    assert.same({ IMEX_CMD_ENABLED = "1", X = "2" }, cfg)
    assert.same({ { key = "IMEX_CMD_ENABLED", lines = { 1, 3 }, values = { "1", "1" }, same = true } },
      imexcfg.repeats(cfg))
    assert.is_nil(imexcfg.unknown(cfg, "IMEX_CMD_ENABLED"))
    cfg = assert(imexcfg.parse("IMEX_CMD_PORT=50005\nSERVER_PORT=50000\nIMEX_CMD_PORT=50015\n"))
    assert.same({ SERVER_PORT = "50000" }, cfg)
    local v, why = imexcfg.get(cfg, "IMEX_CMD_PORT")
    assert.is_nil(v) -- not 50005 (the first, and the default), not 50015 (the last)
    assert.matches("line 1: '50005', line 3: '50015'", why, 1, true)
    assert.matches("unknown", why)
    local p, perr = imexcfg.port(cfg, "IMEX_CMD_PORT")
    assert.is_nil(p)
    assert.equal(why, perr)
    assert.equal(50000, imexcfg.port(cfg, "SERVER_PORT"))
    -- three lines, two of them equal: still unknown, all three named
    cfg = assert(imexcfg.parse("A=1\nA=2\nA=1\n"))
    assert.matches("3 times .*line 1: '1', line 2: '2', line 3: '1'", imexcfg.unknown(cfg, "A"))
    assert.same({}, imexcfg.repeats({ A = "1" }))
  end)

  it("raises on misuse", function()
    assert.has_error(function() imexcfg.parse(nil) end)
  end)
end)

describe("imexcfg.defaults and get", function()
  it("has NVIDIA's package defaults", function()
    local d = imexcfg.defaults()
    assert.equal("50000", d.SERVER_PORT)
    assert.equal("50005", d.IMEX_CMD_PORT)
    assert.equal("/etc/nvidia-imex/nodes_config.cfg", d.IMEX_NODE_CONFIG_FILE)
    assert.equal("1", d.IMEX_CMD_ENABLED)
    assert.equal("", d.BIND_INTERFACE_IP)
    assert.equal("RECOVERY", d.IMEX_WAIT_FOR_QUORUM)
  end)

  it("returns a fresh table each time", function()
    local d = imexcfg.defaults()
    d.SERVER_PORT = "1"
    assert.equal("50000", imexcfg.defaults().SERVER_PORT)
    assert.equal("50000", imexcfg.get(nil, "SERVER_PORT"))
  end)

  it("prefers the file, falls back to the default", function()
    local cfg = assert(imexcfg.parse("IMEX_CMD_PORT=6000\nIMEX_NODE_CONFIG_FILE=/tmp/n.cfg\n"
      .. "BIND_INTERFACE_IP=\n"))
    assert.equal("6000", imexcfg.get(cfg, "IMEX_CMD_PORT"))
    assert.equal("/tmp/n.cfg", imexcfg.get(cfg, "IMEX_NODE_CONFIG_FILE"))
    assert.equal("50000", imexcfg.get(cfg, "SERVER_PORT"))
    assert.equal("", imexcfg.get(cfg, "BIND_INTERFACE_IP"))
    assert.is_nil(imexcfg.get(cfg, "NO_SUCH_KEY"))
  end)

  it("reads ports as integers and names a bad one", function()
    local cfg = assert(imexcfg.parse("IMEX_CMD_PORT=6000\nSERVER_PORT=abc\n"))
    assert.equal(6000, imexcfg.port(cfg, "IMEX_CMD_PORT"))
    assert.equal(50005, imexcfg.port(nil, "IMEX_CMD_PORT"))
    local p, err = imexcfg.port(cfg, "SERVER_PORT")
    assert.is_nil(p)
    assert.truthy(err:find("SERVER_PORT='abc'", 1, true))
    assert.is_nil(imexcfg.port({ SERVER_PORT = "70000" }, "SERVER_PORT"))
    assert.is_nil(imexcfg.port({ SERVER_PORT = "0" }, "SERVER_PORT"))
  end)
end)

describe("imexcfg.lint (C22: flagged before any job runs)", function()
  local PATH = "/etc/nvidia-imex/config.cfg"

  -- SAMPLE with one plain substitution.
  local function edit(old, new)
    local i, j = assert(SAMPLE:find(old, 1, true))
    return SAMPLE:sub(1, i - 1) .. new .. SAMPLE:sub(j + 1)
  end

  local function lint(text, path)
    return imexcfg.lint(assert(imexcfg.parse(text)), path)
  end

  local function keys(findings)
    local t = {}
    for i, f in ipairs(findings) do t[i] = f.key .. ":" .. f.level end
    return t
  end

  it("the package's config is clean", function()
    assert.same({}, lint(SAMPLE))
  end)

  for _, addr in ipairs({ "127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "::ffff:127.0.0.1" }) do
    it("flags IMEX_CMD_BIND_INTERFACE_IP=" .. addr .. " (loopback), naming the key and the file", function()
      local f = lint(edit("IMEX_CMD_BIND_INTERFACE_IP=\n", "IMEX_CMD_BIND_INTERFACE_IP=" .. addr .. "\n"),
        "/opt/site/imex.cfg")
      assert.same({ "IMEX_CMD_BIND_INTERFACE_IP:error" }, keys(f))
      assert.equal(addr, f[1].value)
      assert.equal("/opt/site/imex.cfg: IMEX_CMD_BIND_INTERFACE_IP=" .. addr .. " is a loopback address: the "
        .. "other nodes cannot reach this node's command port and show it UNAVAILABLE", f[1].text)
    end)
  end

  it("C34: a repeated key is a warning with the same value, an error naming both lines with different "
    .. "values; never 'not set'", function()
    local f = lint(SAMPLE .. "IMEX_CMD_ENABLED=1\n", "/x.cfg")
    assert.same({ "IMEX_CMD_ENABLED:warning" }, keys(f))
    assert.is_true(f[1].repeated)
    assert.equal("/x.cfg: IMEX_CMD_ENABLED is set 2 times with the same value '1' (lines 10, 14): remove the "
      .. "extra lines", f[1].text)
    f = lint(SAMPLE .. "IMEX_CMD_PORT=50015\n")
    assert.same({ "IMEX_CMD_PORT:error" }, keys(f))
    assert.is_true(f[1].repeated)
    assert.matches("line 9: '50005', line 14: '50015'", f[1].text, 1, true)
    assert.matches("which one nvidia%-imex uses is not documented, so it is unknown; keep one line",
      f[1].text)
    assert.is_nil(f[1].text:find("not set", 1, true))
  end)

  it("C37: a unix socket beside an empty or absent IMEX_CMD_PORT assumes no TCP port", function()
    local sock = "IMEX_CMD_UNIX_DOMAIN_PATH=/run/nvidia-imex/cmd.sock\n"
    for _, text in ipairs({ edit("IMEX_CMD_PORT=50005\n", "IMEX_CMD_PORT=\n") .. sock,
      edit("IMEX_CMD_PORT=50005\n", "") .. sock }) do
      assert.same({}, lint(text))
      assert.same({ enabled = true, socket = "/run/nvidia-imex/cmd.sock" },
        imexcfg.command_service(assert(imexcfg.parse(text))))
    end
    -- without a socket an absent port is the package default (and a warning); both: both
    assert.same({ enabled = true, port = 50005 }, imexcfg.command_service(assert(imexcfg.parse(""))))
    assert.same({ enabled = true, port = 50005, socket = "/s" },
      imexcfg.command_service(assert(imexcfg.parse("IMEX_CMD_PORT=50005\nIMEX_CMD_UNIX_DOMAIN_PATH=/s\n"))))
    assert.same({ "IMEX_CMD_PORT:warning" }, keys(lint(edit("IMEX_CMD_PORT=50005\n", "IMEX_CMD_PORT=\n"))))
    -- the socket's path: absolute; under /etc a unit with ProtectSystem=full cannot create it
    assert.same({ "IMEX_CMD_UNIX_DOMAIN_PATH:error" },
      keys(lint(SAMPLE .. "IMEX_CMD_UNIX_DOMAIN_PATH=cmd.sock\n")))
    local f = lint(SAMPLE .. "IMEX_CMD_UNIX_DOMAIN_PATH=/etc/nvidia-imex/cmd.sock\n")
    assert.same({ "IMEX_CMD_UNIX_DOMAIN_PATH:warning" }, keys(f))
    assert.matches("ProtectSystem=full", f[1].text)
    -- a port that is not a number, or set twice differently: no service, the message says why
    assert.is_nil(imexcfg.command_service(assert(imexcfg.parse("IMEX_CMD_PORT=x\n"))))
    assert.matches("unknown", select(2, imexcfg.command_service(assert(imexcfg.parse("IMEX_CMD_PORT=1\n"
      .. "IMEX_CMD_PORT=2\n")))))
  end)

  it("a routable command address is fine", function()
    assert.same({}, lint(edit("IMEX_CMD_BIND_INTERFACE_IP=\n", "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.1\n")))
    assert.same({}, lint(edit("IMEX_CMD_BIND_INTERFACE_IP=\n", "IMEX_CMD_BIND_INTERFACE_IP=128.0.0.1\n")))
  end)

  it("flags a loopback BIND_INTERFACE_IP", function()
    assert.same({ "BIND_INTERFACE_IP:error" }, keys(lint(edit("\nBIND_INTERFACE_IP=\n",
      "\nBIND_INTERFACE_IP=127.0.0.1\n"))))
  end)

  it("flags IMEX_CMD_ENABLED=0 and a value that is neither 0 nor 1", function()
    local f = lint(edit("IMEX_CMD_ENABLED=1", "IMEX_CMD_ENABLED=0"))
    assert.same({ "IMEX_CMD_ENABLED:error" }, keys(f))
    assert.equal(PATH .. ": IMEX_CMD_ENABLED=0 disables", f[1].text:sub(1, #PATH + 29))
    local g = lint(edit("IMEX_CMD_ENABLED=1", "IMEX_CMD_ENABLED=yes"))
    assert.same({ "IMEX_CMD_ENABLED:error" }, keys(g))
    assert.truthy(g[1].text:find("'yes' is neither 0 nor 1", 1, true))
  end)

  it("flags missing and invalid ports, and one port for both services", function()
    assert.same({ "SERVER_PORT:warning", "IMEX_CMD_PORT:warning" }, keys(lint("DAEMONIZE=1\n")))
    assert.same({ "SERVER_PORT:warning" }, keys(lint(edit("SERVER_PORT=50000", "SERVER_PORT="))))
    local f = lint(edit("IMEX_CMD_PORT=50005", "IMEX_CMD_PORT=5000x"))
    assert.same({ "IMEX_CMD_PORT:error" }, keys(f))
    assert.equal(PATH .. ": IMEX_CMD_PORT='5000x' is not a port number (1-65535)", f[1].text)
    assert.same({ "SERVER_PORT:error" }, keys(lint(edit("SERVER_PORT=50000", "SERVER_PORT=65536"))))
    assert.same({ "IMEX_CMD_PORT:error" }, keys(lint(edit("IMEX_CMD_PORT=50005", "IMEX_CMD_PORT=50000"))))
  end)

  it("flags a relative IMEX_NODE_CONFIG_FILE", function()
    local f = lint(edit("IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg",
      "IMEX_NODE_CONFIG_FILE=nodes_config.cfg"))
    assert.same({ "IMEX_NODE_CONFIG_FILE:error" }, keys(f))
    assert.truthy(f[1].text:find("IMEX_NODE_CONFIG_FILE=nodes_config.cfg is not an absolute path", 1, true))
  end)

  it("lists several findings in a fixed order, each one line", function()
    local f = lint("IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\nIMEX_CMD_ENABLED=0\nIMEX_CMD_PORT=0\n"
      .. "SERVER_PORT=50000\n"
      .. "IMEX_NODE_CONFIG_FILE=./n\n")
    assert.same({ "IMEX_CMD_BIND_INTERFACE_IP:error", "IMEX_CMD_ENABLED:error", "IMEX_CMD_PORT:error",
      "IMEX_NODE_CONFIG_FILE:error" }, keys(f))
    for _, x in ipairs(f) do assert.is_nil(x.text:find("\n")) end
  end)

  it("raises on misuse", function()
    assert.has_error(function() imexcfg.lint(nil) end)
    assert.has_error(function() imexcfg.lint({}, 5) end)
  end)
end)

describe("imexcfg.config_path (C28: the unit's own config)", function()
  it("takes -c PATH from an ExecStart argv", function()
    assert.same({ "/opt/site/imex.cfg", true },
      { imexcfg.config_path({ "/usr/bin/nvidia-imex", "-c", "/opt/site/imex.cfg" }) })
    assert.same({ "/opt/site/imex.cfg", true },
      { imexcfg.config_path({ "nvidia-imex", "-c/opt/site/imex.cfg" }) })
    assert.same({ "/etc/x.cfg", true },
      { imexcfg.config_path({ "nvidia-imex", "-d", "-c", "/etc/x.cfg", "-v" }) })
  end)

  it("gives the default config without -c", function()
    assert.same({ "/etc/nvidia-imex/config.cfg", false }, { imexcfg.config_path({ "/usr/bin/nvidia-imex" }) })
    assert.same({ "/etc/nvidia-imex/config.cfg", false }, { imexcfg.config_path({}) })
    -- the program itself is never read as an option
    assert.same({ "/etc/nvidia-imex/config.cfg", false }, { imexcfg.config_path({ "-c", "/x" }) })
  end)

  it("names -c without a value, -c twice and a relative path", function()
    for _, argv in ipairs({ { "nvidia-imex", "-c" }, { "nvidia-imex", "-c", "" },
      { "nvidia-imex", "-c", "-d" } }) do
      local p, err = imexcfg.config_path(argv)
      assert.is_nil(p)
      assert.truthy(err:find("^ExecStart: %-c without a value"), err)
    end
    local p, err = imexcfg.config_path({ "nvidia-imex", "-c", "/a", "-c", "/b" })
    assert.is_nil(p)
    assert.equal("ExecStart: -c given twice (/a and /b)", err)
    p, err = imexcfg.config_path({ "nvidia-imex", "-c", "site.cfg" })
    assert.is_nil(p)
    assert.equal("ExecStart: -c site.cfg is not an absolute path", err)
    -- a shell wrapper's -c is a command line, never a config path
    p, err = imexcfg.config_path({ "/bin/sh", "-c", "/usr/bin/nvidia-imex -c /opt/site/imex.cfg" })
    assert.is_nil(p)
    assert.equal("ExecStart: -c '/usr/bin/nvidia-imex -c /opt/site/imex.cfg' is a command line, not a "
      .. "config path", err)
  end)

  it("raises on misuse", function()
    assert.has_error(function() imexcfg.config_path("nvidia-imex -c /x") end)
    assert.has_error(function() imexcfg.config_path({ "nvidia-imex", 5 }) end)
  end)
end)

describe("imexcfg.parse of long lines (bench/lua_scale.lua)", function()
  it("trims key and value around long runs of blanks in linear time", function()
    local pad = string.rep(" ", 200000)
    local t0 = os.clock()
    local cfg = assert(imexcfg.parse(pad .. "IMEX_CMD_PORT" .. pad .. "=" .. pad .. "50006" .. pad .. "\r\n"))
    assert.is_true(os.clock() - t0 < 0.5, "parse took " .. os.clock() - t0 .. " s")
    assert.same({ IMEX_CMD_PORT = "50006" }, cfg)
    local ok, err = imexcfg.parse("IMEX CMD" .. pad .. "=1\n")
    assert.is_nil(ok)
    assert.truthy(err:find("bad key 'IMEX CMD'", 1, true), err)
  end)
end)
