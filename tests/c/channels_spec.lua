-- SPDX-License-Identifier: Apache-2.0
-- IMEX channels against the real kernel: lua/imexguard/channels.lua with the real host module
-- (src/file.c mknod_char, mkdir, stat) on a tmpfs in a private mount namespace; the result is
-- checked with stat(1) (major, minor, mode, owner, type) inside the same namespace.
local H = require("helpers")

-- Runs inside `unshare -m`: mounts a tmpfs on DIR/dev, runs channels.ensure with the settings
-- given as JSON, and prints the result and stat(1) of the channel and its directory.
local SCRIPT = [[
local cjson = require("cjson")
local host = require("imexguard.host")
local S = require("imexguard.settings")
local channels = require("imexguard.channels")
local dev, pre, raw = arg[1], arg[2], cjson.decode(arg[3])
assert(os.execute("mount -t tmpfs -o mode=0755 imexguard-test " .. dev))
if pre ~= "" then assert(os.execute(pre)) end
local settings = assert(S.validate(raw))
local ctx = { settings = settings, host = host }
local ok, outcome, msg = channels.ensure(ctx)
print("result", ok and "ok" or outcome, ok or msg)
local function st(p)
  local f = io.popen("stat -c '%t %T %a %U %F' " .. p .. " 2>/dev/null")
  local s = f:read("l")
  f:close()
  return s or "absent"
end
print("channel", st(settings.imex_channel_dir .. "/channel0"))
print("dir", st(settings.imex_channel_dir))
]]

describe("IMEX channel creation on a real device directory (tmpfs, private mount namespace)", function()
  local dir
  before_each(function()
    dir = H.tmpdir()
    assert(os.execute("mkdir -p " .. H.q(dir .. "/dev")))
    assert(os.execute("cp tests/fixtures/proc/*.txt " .. H.q(dir)))
  end)
  after_each(function() H.rmdir(dir) end)

  -- returns {result = {outcome, message}, channel = "MAJ MIN MODE OWNER TYPE"|"absent", dir = ...}
  local function run(devices, extra, pre)
    local settings = { imex_channels = "channel0", imex_channel_dir = dir .. "/dev/nvidia-caps-imex-channels",
      proc_devices = dir .. "/" .. devices, slurm_conf = dir .. "/slurm.conf" }
    for k, v in pairs(extra or {}) do settings[k] = v end
    local cjson = require("cjson")
    local lua = H.lua_cmd(dir, "ensure", SCRIPT, dir .. "/dev", pre or "", cjson.encode(settings))
    local cmd = "unshare -m --propagation private env LUA_PATH='lua/?.lua;;' "
      .. lua:gsub("^env ", "") .. " 2>&1"
    local out = {}
    for line in H.sh(cmd):gmatch("[^\n]+") do
      local k, v = line:match("^(%a+)\t(.*)$")
      if k then out[k] = v else out.noise = (out.noise or "") .. line .. "\n" end
    end
    assert(out.result, "no result from the namespace: " .. tostring(out.noise))
    return out
  end

  -- a shell command that makes the channel directory and channel0 with this major by hand
  local function mknod(major)
    local d = dir .. "/dev/nvidia-caps-imex-channels"
    return string.format("mkdir -m 0755 %s && mknod -m 0666 %s/channel0 c %d 0", d, d, major)
  end

  it("creates the directory 0755 root and channel0 as c MAJOR 0 with mode 0666", function()
    local r = run("devices-gb200.txt")
    assert.matches("^ok\tIMEX channel: created .*/channel0 %(238:0, mode 0666%)$", r.result)
    -- stat prints the major and minor in hex: 238 = 0xee
    assert.equal("ee 0 666 root character special file", r.channel)
    assert.equal("0 0 755 root directory", r.dir)
  end)

  it("applies the configured mode exactly (no umask)", function()
    local r = run("devices-gb200.txt", { imex_channel_mode = "0600" })
    assert.equal("ee 0 600 root character special file", r.channel)
  end)

  it("a second run finds the channel and changes nothing", function()
    local r = run("devices-gb200.txt", nil, mknod(238))
    assert.matches("^ok\tIMEX channel: .*channel0 present %(238:0%)$", r.result)
    assert.equal("ee 0 666 root character special file", r.channel)
  end)

  it("an existing channel with another major is channel-failed, named, and left as it is", function()
    local r = run("devices-gb200.txt", nil, mknod(237))
    assert.matches("^channel%-failed\t.*channel0 is device 237:0 but .* says "
      .. "nvidia%-caps%-imex%-channels is major 238", r.result)
    assert.equal("ed 0 666 root character special file", r.channel)
  end)

  for _, case in ipairs({
    { "devices-no-imex.txt", "no nvidia%-caps%-imex%-channels line under Character devices" },
    { "devices-block-only.txt", "only under Block devices" },
    { "devices-malformed.txt", "is not 'MAJOR NAME'" },
  }) do
    it("never runs mknod with a guessed major: " .. case[1], function()
      local r = run(case[1])
      assert.matches("^channel%-failed\tIMEX channel: .*" .. case[2], r.result)
      assert.equal("absent", r.channel)
      assert.equal("absent", r.dir)
    end)
  end

  it("with SwitchType=switch/nvidia_imex in slurm.conf creates nothing", function()
    H.write(dir .. "/slurm.conf", "ClusterName=c\nSwitchType=switch/nvidia_imex\n")
    local r = run("devices-gb200.txt")
    assert.matches("^ok\tIMEX channel: not created %(SwitchType=switch/nvidia_imex in ", r.result)
    assert.equal("absent", r.channel)
  end)

  it("refuses a channel directory writable by others", function()
    local r = run("devices-gb200.txt", nil, "mkdir -m 0777 " .. dir .. "/dev/nvidia-caps-imex-channels")
    assert.matches("^channel%-failed\t.*must be root's and not writable by others", r.result)
    assert.equal("absent", r.channel)
  end)
end)
