-- SPDX-License-Identifier: Apache-2.0
-- IMEX channels (lua/imexguard/channels.lua): the major comes from the Character devices section of
-- /proc/devices only, never guessed; switch/nvidia_imex in slurm.conf turns creation off.
local channels = require("imexguard.channels")
local testing = require("imexguard.testing")

local function fixture(name)
  local f = assert(io.open("tests/fixtures/proc/" .. name))
  local t = f:read("a")
  f:close()
  return t
end

describe("channels.major", function()
  it("reads the imex-channels line of Character devices (leading spaces are the format)", function()
    assert.equal(238, channels.major(fixture("devices-gb200.txt"), "/proc/devices"))
    assert.equal(7, channels.major("Character devices:\n  7 nvidia-caps-imex-channels\n", "P"))
  end)

  it("never takes the major of nvidia-caps or of a longer name", function()
    local text = "Character devices:\n237 nvidia-caps\n240 nvidia-caps-imex-channels-x\n"
    local m, err = channels.major(text, "P")
    assert.is_nil(m)
    assert.matches("no nvidia%-caps%-imex%-channels line under Character devices", err)
  end)

  it("names a missing line", function()
    local m, err = channels.major(fixture("devices-no-imex.txt"), "/proc/devices")
    assert.is_nil(m)
    assert.matches("^/proc/devices: no nvidia%-caps%-imex%-channels line", err)
  end)

  it("refuses the name found only under Block devices", function()
    local m, err = channels.major(fixture("devices-block-only.txt"), "/x/devices")
    assert.is_nil(m)
    assert.matches("^/x/devices: .*only under Block devices", err)
  end)

  it("names a malformed line instead of guessing", function()
    local m, err = channels.major(fixture("devices-malformed.txt"), "/proc/devices")
    assert.is_nil(m)
    assert.matches('line 3: "23x nvidia%-caps%-imex%-channels"', err)
  end)

  it("refuses two majors for the channel device, and a major out of range", function()
    assert.matches("listed 2 times", select(2, channels.major(
      "Character devices:\n238 nvidia-caps-imex-channels\n239 nvidia-caps-imex-channels\n", "P")))
    local huge = "Character devices:\n5000 nvidia-caps-imex-channels\n"
    assert.matches("out of range", select(2, channels.major(huge, "P")))
  end)

  it("refuses text without sections (an empty or foreign file)", function()
    assert.matches("no 'Character devices:' section", select(2, channels.major("", "P")))
    local bare = "238 nvidia-caps-imex-channels\n"
    assert.matches("not 'MAJOR NAME' in a section", select(2, channels.major(bare, "P")))
  end)
end)

describe("channels.switch_type", function()
  it("reads SwitchType case-insensitively, ignoring comments; the last one wins", function()
    assert.equal("switch/nvidia_imex", channels.switch_type("ClusterName=x\nSwitchType=switch/nvidia_imex\n"))
    local spaced = "switchtype = switch/nvidia_imex # per-job channels\n"
    assert.equal("switch/nvidia_imex", channels.switch_type(spaced))
    assert.is_nil(channels.switch_type("#SwitchType=switch/nvidia_imex\nClusterName=x\n"))
    local twice = "SwitchType=switch/nvidia_imex\nSwitchType=switch/none\n"
    assert.equal("switch/none", channels.switch_type(twice))
    assert.is_true(channels.slurm_manages("Switch/NVIDIA_IMEX"))
    assert.is_false(channels.slurm_manages("switch/none"))
    assert.is_false(channels.slurm_manages(nil))
  end)
end)

describe("channels.ensure with the fake host", function()
  local function ctx(mode, files)
    local f = { ["/proc/devices"] = fixture("devices-gb200.txt") }
    for k, v in pairs(files or {}) do f[k] = v end
    local h = testing.host { files = f }
    return testing.ctx { host = h, settings = { imex_channels = mode } }, h
  end

  it("off: reads nothing and creates nothing", function()
    local c, h = ctx("off")
    assert.matches("not created", channels.ensure(c))
    assert.equal(0, h.count("mknod_char"))
    assert.equal(0, h.count("read"))
  end)

  it("channel0 with switch/nvidia_imex in slurm.conf: creates nothing and says why", function()
    local c, h = ctx("channel0", { ["/etc/slurm/slurm.conf"] = "SwitchType=switch/nvidia_imex\n" })
    local msg = channels.ensure(c)
    assert.matches("not created %(SwitchType=switch/nvidia_imex in /etc/slurm/slurm.conf", msg)
    assert.equal(0, h.count("mknod_char"))
  end)

  it("channel0 with a missing line is channel-failed and nothing is created", function()
    local c, h = ctx("channel0", { ["/proc/devices"] = fixture("devices-no-imex.txt") })
    local ok, outcome, msg = channels.ensure(c)
    assert.is_nil(ok)
    assert.equal("channel-failed", outcome)
    assert.matches("/proc/devices: no nvidia%-caps%-imex%-channels", msg)
    assert.equal(0, h.count("mknod_char"))
    assert.equal(0, h.count("mkdir"))
  end)

  it("channel0 creates the channel with the major of /proc/devices and the configured mode", function()
    local c, h = ctx("channel0")
    local msg = channels.ensure(c)
    assert.matches("created /dev/nvidia%-caps%-imex%-channels/channel0 %(238:0, mode 0666%)", msg)
    local call
    for _, cl in ipairs(h.calls) do if cl[1] == "mknod_char" then call = cl end end
    assert.same({ "mknod_char", "/dev/nvidia-caps-imex-channels/channel0", 238, 0 }, call)
  end)
end)
