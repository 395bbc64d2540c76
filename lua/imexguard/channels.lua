-- SPDX-License-Identifier: Apache-2.0
--- IMEX channels: the character device `/dev/nvidia-caps-imex-channels/channel0` that CUDA opens to
-- share memory across the nodes of a domain.
--
-- Facts (NVIDIA IMEX guide, "IMEX channels"): channels are not created by default and do not survive
-- a reboot; a channel is `mknod DIR/channelN c MAJOR N` where MAJOR is the number on the
-- `nvidia-caps-imex-channels` line of the *Character devices* section of `/proc/devices` (it differs
-- between nodes; the major of `nvidia-caps` gives permission errors). Slurm's `switch/nvidia_imex`
-- plugin (SwitchType in slurm.conf, Slurm 24.05+) gives each job a channel of its own in a private
-- mount namespace; with it a prolog must not create a shared channel.
--
-- Modes (setting `imex_channels`):
--   "off"       nothing is created (the default: a shared channel lets every job on the domain
--               import every other job's exported memory, so creating one is the site's decision;
--               the driver option NVreg_CreateImexChannel0=1 or switch/nvidia_imex are the others)
--   "channel0"  one shared channel 0, created when missing
-- Per-job channels are not offered: a per-job minor is isolation only inside a per-job mount
-- namespace, which is what switch/nvidia_imex provides.
--
-- `parse_devices`, `major` and `switch_type` are pure; `ensure` does the side effects through
-- ctx.host (mkdir, stat, mknod_char), so `plan` records them instead.
-- @module imexguard.channels
local trim = require("imexguard.text").trim
local slurmconf = require("imexguard.slurmconf")

local M = {}

M.DEVICE = "nvidia-caps-imex-channels"
M.MAX_DEVICES_BYTES = 65536

--- Parse the text of /proc/devices.
-- The kernel prints two sections, `Character devices:` then `Block devices:`, each line
-- `%3d %s` (a right-aligned major, so leading spaces are normal), separated by a blank line.
-- @tparam string text file contents
-- A name may stand on several lines (the kernel lists `sd` under many block majors).
-- @treturn[1] table `{char = {name = {major, ...}}, block = {name = {major, ...}}}`
-- @treturn[2] nil
-- @treturn[2] string what is wrong (the line number and the line)
function M.parse_devices(text)
  local out = { char = {}, block = {} }
  local section, n, seen = nil, 0, false
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local body = trim(line)
    if body == "Character devices:" then section, seen = out.char, true
    elseif body == "Block devices:" then section, seen = out.block, true
    elseif body ~= "" then
      local major, name = body:match("^(%d+)%s+(%S+)$")
      if not section or not major or #major > 4 then
        return nil, string.format("line %d: %q is not 'MAJOR NAME' in a section", n, body)
      end
      section[name] = section[name] or {}
      table.insert(section[name], tonumber(major))
    end
  end
  if not seen then return nil, "no 'Character devices:' section" end
  return out
end

--- The major number of the IMEX channel device.
-- @tparam string text contents of /proc/devices
-- @tparam string path its path, for messages
-- @treturn[1] integer major (0..4095)
-- @treturn[2] nil
-- @treturn[2] string one line naming the file and what is wrong
function M.major(text, path)
  local dev, err = M.parse_devices(text)
  if not dev then return nil, string.format("%s: %s", path, err) end
  local majors = dev.char[M.DEVICE]
  if majors and #majors > 1 then
    return nil, string.format("%s: %s is listed %d times under Character devices", path, M.DEVICE, #majors)
  end
  local major = majors and majors[1]
  if major and major <= 4095 then return major end
  if major then return nil, string.format("%s: major %d of %s is out of range", path, major, M.DEVICE) end
  if dev.block[M.DEVICE] then
    return nil, string.format("%s: %s is listed only under Block devices (a channel is a character device)",
      path, M.DEVICE)
  end
  return nil, string.format("%s: no %s line under Character devices (is the NVIDIA driver loaded, "
    .. "with IMEX channel support?)", path, M.DEVICE)
end

--- The value of `SwitchType` in the text of one file (slurm.conf(5): `Key=Value`, keys are
-- case-insensitive, `#` starts a comment). `Include` lines are not followed: the prolog's decision
-- reads slurm.conf with its Includes through imexguard.slurmconf (C38).
-- @tparam string text contents of slurm.conf
-- @treturn string|nil the value, or nil when not set
function M.switch_type(text)
  local value
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    local body = line:gsub("#.*", "")
    local key, v = body:match("^%s*([%a]+)%s*=%s*(%S*)")
    if key and key:lower() == "switchtype" then value = v end
  end
  return value
end

--- Whether Slurm's switch/nvidia_imex plugin hands out the channels.
-- @tparam string|nil switch SwitchType value
-- @treturn boolean
function M.slurm_manages(switch)
  return switch ~= nil and switch:lower() == "switch/nvidia_imex"
end

-- Read a file through the host, capped; ENOENT is nil without an error.
local function read(host, path, cap)
  local text, err, code = host.read(path, cap)
  if text then return text end
  if code == "ENOENT" then return nil end
  return nil, err
end

--- What this node should do about its channel: the pure part of `ensure`.
-- Slurm's switch/nvidia_imex is looked up in this node's slurm.conf as slurmd reads it
-- (imexguard.slurmconf: SLURM_CONF, the configless cache, Includes; C38).
-- @tparam table ctx the run's context (settings, host, env)
-- @treturn[1] table `{mode = "off"|"channel0", why = string, major = integer|nil}`
-- @treturn[2] nil
-- @treturn[2] string one line naming the file that is wrong
-- @treturn[2] string|nil the outcome: "slurm-conf-unreadable" when slurm.conf or an Include cannot
--   be read (whether Slurm hands out the channels is then unknown), else nil (channel-failed)
function M.decide(ctx)
  local s, host = ctx.settings, ctx.host
  if s.imex_channels == "off" then return { mode = "off", why = "imex_channels = \"off\"" } end
  local conf, cerr = slurmconf.load(ctx)
  if cerr then
    return nil, "cannot tell whether Slurm manages IMEX channels: " .. cerr, "slurm-conf-unreadable"
  end
  local switch, where
  if conf then switch, where = slurmconf.get(conf, "SwitchType") end
  if M.slurm_manages(switch) then
    return { mode = "off", why = string.format("SwitchType=%s in %s%s: Slurm gives each job its own channel",
      switch, where.file, where.file ~= conf.path and string.format(" line %d, included from %s", where.line,
        conf.path) or "") }
  end
  local devices, derr = read(host, s.proc_devices, M.MAX_DEVICES_BYTES)
  if not devices then return nil, derr or (s.proc_devices .. ": missing") end
  local major, merr = M.major(devices, s.proc_devices)
  if not major then return nil, merr end
  return { mode = "channel0", why = "imex_channels = \"channel0\"", major = major }
end

local function octal(mode) return string.format("%04o", mode) end

-- The channel directory: created 0755 (root) when missing; one writable by others is refused.
local function ensure_dir(host, dir)
  local st = host.stat(dir)
  if not st then
    local ok, err = host.mkdir(dir, tonumber("755", 8))
    if not ok then return nil, err end
    return true, "created " .. dir
  end
  if st.type ~= "dir" then return nil, dir .. " exists and is not a directory" end
  if st.uid ~= 0 or st.mode & tonumber("022", 8) ~= 0 then
    return nil, string.format(
      "%s is owned by uid %d with mode %s: it must be root's and not writable by others",
      dir, st.uid, octal(st.mode))
  end
  return true
end

--- Make channel 0 exist as the right character device (mode "channel0"), or say why not.
-- Side effects only through ctx.host: mkdir (the directory, 0755), mknod_char (the channel, mode
-- setting `imex_channel_mode`). An existing channel with another major is not replaced: jobs would
-- get permission errors from a wrong one, and removing a device node under a running job is not a
-- prolog's call; the message says how to fix it. In a dry run (ctx.dry_run, `plan`) the host's
-- mkdir and mknod_char are recorders and the message says "would create DIR/channel0 c MAJOR 0".
-- @tparam table ctx the run's context
-- @treturn[1] string what was done or found (one line)
-- @treturn[2] nil
-- @treturn[2] string the outcome: "channel-failed", or "slurm-conf-unreadable" (decide's)
-- @treturn[2] string one line naming the path or file
function M.ensure(ctx)
  local d, err, outcome = M.decide(ctx)
  if not d then return nil, outcome or "channel-failed", "IMEX channel: " .. err .. "; nothing changed" end
  if d.mode == "off" then
    if ctx.dry_run then return "IMEX channel: off: " .. d.why end
    return "IMEX channel: not created (" .. d.why .. ")"
  end
  local host, s = ctx.host, ctx.settings
  local dir = s.imex_channel_dir
  local path = dir .. "/channel0"
  local ok, derr = ensure_dir(host, dir)
  if not ok then return nil, "channel-failed", "IMEX channel: " .. derr end
  local st = host.stat(path)
  if st then
    if st.type ~= "char" then
      return nil, "channel-failed",
        string.format("IMEX channel: %s exists and is not a character device", path)
    end
    if st.rdev_major ~= d.major or st.rdev_minor ~= 0 then
      return nil, "channel-failed", string.format(
        "IMEX channel: %s is device %d:%d but %s says %s is major %d: "
        .. "remove it (rm %s) and run the prolog again", path, st.rdev_major, st.rdev_minor, s.proc_devices,
        M.DEVICE, d.major, path)
    end
    return string.format("IMEX channel: %s present (%d:0)", path, d.major)
  end
  local mode = tonumber(s.imex_channel_mode, 8)
  local made, merr = host.mknod_char(path, d.major, 0, mode)
  if not made then return nil, "channel-failed", "IMEX channel: " .. merr end
  if ctx.dry_run then
    return string.format("IMEX channel: would create %s c %d 0 (mode %s)", path, d.major, octal(mode))
  end
  return string.format("IMEX channel: created %s (%d:0, mode %s)", path, d.major, octal(mode))
end

--- Did M.ensure's line say it created the channel (or, in a dry run, would create it)? The
-- prolog's final message then names it (P:channel_note).
-- @param line string M.ensure's line
-- @return boolean
function M.created(line)
  return line:find("IMEX channel: created", 1, true) ~= nil
    or line:find("IMEX channel: would create", 1, true) ~= nil
end

--- The channel's state for `status` and `health`, without changing anything (no mkdir, no mknod).
-- @tparam table ctx the run's context (settings, host)
-- @treturn string one line: "off (why)", "DIR/channel0 present (MAJOR:0)"
-- @treturn boolean|nil true when the state is a fault (the mode is channel0 and the channel is
--   missing, not a character device, has another major, or /proc/devices does not say)
-- @treturn string|nil the outcome of a fault when it is not channel-failed ("slurm-conf-unreadable")
function M.state(ctx)
  local d, err, outcome = M.decide(ctx)
  if not d then return "IMEX channel: " .. err, true, outcome end
  if d.mode == "off" then return "IMEX channel: off (" .. d.why .. ")", nil end
  local path = ctx.settings.imex_channel_dir .. "/channel0"
  local st = ctx.host.stat(path)
  if not st then return string.format("IMEX channel: %s missing (major %d)", path, d.major), true end
  if st.type ~= "char" then return "IMEX channel: " .. path .. " is not a character device", true end
  if st.rdev_major ~= d.major or st.rdev_minor ~= 0 then
    return string.format("IMEX channel: %s is device %s:%s, %s says major %d", path, tostring(st.rdev_major),
      tostring(st.rdev_minor), ctx.settings.proc_devices, d.major), true
  end
  return string.format("IMEX channel: %s present (%d:0)", path, d.major), nil
end

return M
