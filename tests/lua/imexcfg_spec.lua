-- Specs for imexguard.imexcfg (NVIDIA's config.cfg).
local imexcfg = require "imexguard.imexcfg"

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

  it("refuses a key set twice, naming both lines", function()
    local cfg, err = imexcfg.parse("SERVER_PORT=1\nX=2\nSERVER_PORT=3\n")
    assert.is_nil(cfg)
    assert.truthy(err:find("line 3", 1, true))
    assert.truthy(err:find("line 1", 1, true))
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
