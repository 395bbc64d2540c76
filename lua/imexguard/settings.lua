-- SPDX-License-Identifier: Apache-2.0
--- Settings: the schema of /etc/imexguard/imexguard.conf, its defaults, loading and validation.
-- A settings file holds values only (luacheckrc style): top-level assignments such as
-- `unit = "nvidia-imex.service"`, or a single `return { unit = "..." }`. It is evaluated in an
-- EMPTY environment: no functions, no library, and reading a name that was not assigned above is
-- an error (so `unit = nvidia` is caught instead of silently meaning nil).
-- The driver runs (imexguard.driver, its settings call): t = load(text, "@path"); t =
-- apply_overrides(t, sets); t = validate(t).
local textlib = require("imexguard.text")

local M = {}

-- The log levels (syslog's names of priorities 7..3), the one list of them: the C host's is
-- generated from it (src/embed.lua: ig_log_levels; host.log accepts these names).
local LEVELS = { "debug", "info", "notice", "warning", "err" }

--- The schema, in the order the example file documents it. Each entry: name, default (nil when
-- unset), kind ("number" > 0, "string" (with `pattern`: a Lua pattern it must match, `want` saying
-- what in words), "path" (absolute), "boolean", "enum" with values, "bus",
-- "argv", "mode" (permission bits as an octal string, e.g. "0660"; read with tonumber(v, 8))), optional,
-- and a one-line doc with units.
M.schema = {
  { name = "deadline", default = 90, kind = "number",
    doc = "seconds: the whole run's budget; every step and the policy stop when it runs out" },
  { name = "unit", default = "nvidia-imex.service", kind = "string",
    doc = "the systemd unit of the IMEX daemon" },
  { name = "bus", default = "system", kind = "bus",
    doc = "\"system\" (/run/systemd/private as root), \"user\", or a D-Bus address \"unix:path=...\"" },
  { name = "imex_config", default = "/etc/nvidia-imex/config.cfg", kind = "path",
    doc = "path of nvidia-imex's config.cfg" },
  { name = "nodes_file", default = nil, kind = "path", optional = true,
    doc = "path of the node list (default: IMEX_NODE_CONFIG_FILE from imex_config)" },
  { name = "ctl", default = "/usr/bin/nvidia-imex-ctl", kind = "argv",
    doc = "nvidia-imex-ctl: a path, or a list of strings used as the argv prefix" },
  { name = "ctl_timeout", default = 5, kind = "number",
    doc = "seconds: timeout of one nvidia-imex-ctl call" },
  { name = "state_dir", default = "/run/imexguard", kind = "path",
    doc = "directory of the node lock and the state file (registered jobs, last write)" },
  { name = "boot_id_file", default = "/proc/sys/kernel/random/boot_id", kind = "path",
    doc = "the kernel's boot ID (Linux random(4)); a job registration of another boot is dropped, "
      .. "its job ended with that boot (a state_dir that outlives a reboot)" },
  { name = "address_source", default = "dns", kind = "enum", values = { "dns", "map" },
    doc = "how node names become IPv4 addresses: \"dns\" (the resolver) or \"map\" (address_map)" },
  { name = "address_map", default = nil, kind = "path", optional = true,
    doc = "path of the address map (\"name address [domain]\" per line, '#' comments), used when "
      .. "address_source = \"map\"; the optional third column is the node's IMEX domain (domain_map)" },
  { name = "domain_map", default = "auto", kind = "enum",
    values = { "auto", "none", "topology", "tree", "address_map", "static" },
    doc = "where IMEX domains (one per NVLink rack or partition) are defined; a job gets one node list "
      .. "per domain, and its nodes in no domain are left out: \"topology\" (Slurm's block topology, "
      .. "topology.yaml or topology.conf beside slurm.conf; with several topologies the job's partition's "
      .. "decides), \"tree\" (each leaf switch of Slurm's tree topology is one rack), \"address_map\" (its "
      .. "third column), \"static\" (the static list, static policy only), \"none\" (the whole job is one "
      .. "domain), or \"auto\" (the first of topology, address_map, static that defines domains, else none; "
      .. "a tree is never taken for racks, and said so)" },
  { name = "topology_file", default = nil, kind = "path", optional = true,
    doc = "path of Slurm's topology.conf or topology.yaml (*.yaml) with the blocks (default: beside the "
      .. "slurm.conf that SLURM_CONF names, else in /etc/slurm)" },
  -- Slurm advises prologs not to call slurmctld: asked only where the files cannot answer
  { name = "slurmctld_topology", default = "auto", kind = "enum", values = { "auto", "always", "off" },
    doc = "ask slurmctld for the topology as it is now (one `scontrol show topology [NAME]` per run, "
      .. "within 5 s), for nodes Slurm 25.11+ places in blocks or switches at run time (scontrol update "
      .. "NodeName=... Topology=, slurmd --conf \"Topology=...\"), which no file lists: \"auto\" (only when "
      .. "the topology file places no domain for a node of the job), \"always\" (every run: nodes moved at "
      .. "run time from the block the file gives them), \"off\" (never: the files alone)" },
  { name = "membership", default = "list", kind = "enum", values = { "list", "slots" },
    doc = "how a job's nodes become the daemon's domain: \"list\" (the node list is the job's nodes: a "
      .. "new list restarts the daemon) or \"slots\" (the node list names every node of the IMEX domain "
      .. "once, NODE.imexguard.invalid; a job only switches its nodes' names from the sentinel 127.0.0.2 to "
      .. "their addresses in slot_hosts and signals the daemon, SIGUSR1; needs a domain map, the drop-in "
      .. "contrib/slots/imexguard-slots.conf and a daemon that acts on SIGUSR1)" },
  { name = "slot_hosts", default = "/run/imexguard/hosts", kind = "path",
    doc = "membership = \"slots\": the private hosts file that the drop-in binds over the unit's /etc/hosts "
      .. "(the name map; written by imexguard only, under the node lock)" },
  { name = "resolve_timeout", default = 2, kind = "number",
    doc = "seconds: timeout of one name resolution" },
  { name = "allow_loopback", default = false, kind = "boolean",
    doc = "accept 127.0.0.0/8 addresses in the node list (tests and the simulator only)" },
  { name = "lock_timeout", default = nil, kind = "number", optional = true,
    doc = "seconds: how long a run waits for the node lock held by another run; unset: the run's whole "
      .. "budget less 5 s (a prolog queued behind a whole run ahead, which holds the lock at most its own "
      .. "deadline, still gets it; the kernel frees the lock of a holder that died); the epilog waits up to "
      .. "its whole budget less 2 s when that is longer" },
  { name = "start_timeout", default = 30, kind = "number",
    doc = "seconds: how long to wait for systemd's start/restart job of the unit" },
  { name = "health_timeout", default = 60, kind = "number",
    doc = "seconds: how long to poll the domain for health after a (re)start" },
  { name = "poll_interval", default = 0.25, kind = "number",
    doc = "seconds: the health polls' average spacing (sooner after a change, up to twice as far "
      .. "apart while nothing changes)" },
  { name = "nudge", default = true, kind = "boolean",
    doc = "during the health wait, when this node's daemon is READY and its link to a READY peer of the "
      .. "job stays down for nudge_after seconds, send it SIGUSR1 through systemd (it restarts its "
      .. "outgoing connections instead of waiting for its reconnect back-off; at most once per 5 s, "
      .. "never a restart)" },
  { name = "nudge_after", default = 1, kind = "number",
    doc = "seconds: how long this node's link to a READY peer may stay down before the nudge (twice the "
      .. "daemon's first reconnect back-off, 0.5 s, so that a link its own first retry brings up is "
      .. "left alone)" },
  { name = "watch", default = true, kind = "boolean",
    doc = "a prolog that ends ok on a node of a multi-node IMEX domain leaves a watcher (imexguard watch, a "
      .. "transient unit of systemd): until the job's epilog, or deadline + watch_skew seconds, it nudges "
      .. "this node's daemon when a peer of the job restarts after this prolog returned (the convergence "
      .. "does not depend on which prolog returns first; needs nudge; never a restart)" },
  { name = "watch_skew", default = 10, kind = "number",
    doc = "seconds: how much later than this node's prolog Slurm may start a prolog of the same job on a "
      .. "peer (a node that is still booting starts it later); the watcher lives deadline + watch_skew "
      .. "seconds, after which no peer can restart its daemon for the job" },
  { name = "watch_interval", default = 1, kind = "number",
    doc = "seconds: how often the watcher asks the ctl (-N -j) while nothing is due; a nudge falls due "
      .. "nudge_after seconds after it first saw a link down" },
  { name = "sigusr1_min_version", default = "580", kind = "string", pattern = "^%d+[%.%d]*$",
    want = "a driver version such as \"580\" or \"570.158.01\"",
    doc = "the oldest IMEX daemon (driver version, as the ctl shows it) that imexguard sends SIGUSR1 (the "
      .. "nudge, the watcher): NVIDIA documents the signal from r580; a daemon without a handler dies of "
      .. "it and comes back as a new instance, dropping every import of the running jobs (C48); a daemon "
      .. "whose version the ctl does not show is never signalled. Lower it only for a driver known to "
      .. "handle SIGUSR1" },
  { name = "stale_mismatch_after", default = 3, kind = "number",
    doc = "seconds: how long the health wait sees a stale node-map mismatch (both ends of a link run the "
      .. "job's node list, the link shows NODE_MAP_MISMATCH on both ends: IMEX keeps it until both ends "
      .. "restart) before the prolog restarts its daemon once to clear it, or ends stuck-mismatch (C32); "
      .. "time for the peers' own prologs to restart daemons still on another list" },
  { name = "fabric_check", default = "auto", kind = "enum", values = { "auto", "off" },
    doc = "the GPUs' NVLink fabric (nvidia-smi -q -x: each GPU's registration, ClusterUUID, CliqueId and "
      .. "fabric health): \"auto\" (checked by the prolog's health step, health, status and plan; GPUs "
      .. "that report N/A, or all registered with a zero ClusterUUID, have no multi-node NVLink and are "
      .. "not checked) or \"off\"" },
  { name = "nvidia_smi", default = "/usr/bin/nvidia-smi", kind = "argv",
    doc = "nvidia-smi, used for the fabric check: a path, or a list of strings used as the argv prefix; "
      .. "run with -q -x appended" },
  { name = "fabric_timeout", default = 30, kind = "number",
    doc = "seconds: how long the prolog waits for GPUs whose fabric registration is Not Started or "
      .. "In Progress (after a reboot or a partition change) before it is a fabric-fault" },
  { name = "on_fabric_unknown", default = "skip", kind = "enum", values = { "skip", "fail" },
    doc = "when the fabric registration cannot be read (nvidia-smi absent, hung or unparsable): "
      .. "\"skip\" (not checked, logged at warning) or \"fail\" (outcome fabric-unknown, exit 17); NVML "
      .. "failing on a driver/library version mismatch is driver-mismatch (exit 21) either way" },
  { name = "driver_version_file", default = "/proc/driver/nvidia/version", kind = "path",
    doc = "the loaded NVIDIA kernel module's version (its NVRM line), named beside NVML's library version "
      .. "when nvidia-smi reports a driver/library version mismatch (driver-mismatch)" },
  { name = "on_peer_fault", default = "warn", kind = "enum", values = { "warn", "fail" },
    doc = "when only peers are unhealthy: \"warn\" (exit 0) or \"fail\" (exit 12, drains this node)" },
  { name = "restart_under_jobs", default = false, kind = "boolean",
    doc = "allow restarting IMEX while another registered job uses a different node list" },
  { name = "registration_max_age", default = nil, kind = "number", optional = true,
    doc = "seconds: forget job registrations older than this (a job whose epilog never ran); unset: never" },
  { name = "log_journal", default = true, kind = "boolean",
    doc = "also send log entries to the systemd journal (stderr lines are always written)" },
  { name = "log_level", default = "info", kind = "enum", values = LEVELS,
    doc = "lowest level written to stderr: \"" .. table.concat(LEVELS, "\", \"", 1, #LEVELS - 1)
      .. "\" or \"" .. LEVELS[#LEVELS] .. "\"" },
  { name = "policy", default = nil, kind = "path", optional = true,
    doc = "path of the policy file (default: the built-in policy; --policy overrides)" },
  { name = "imex_channels", default = "off", kind = "enum", values = { "off", "channel0" },
    doc = "IMEX channel the prolog creates: \"off\" (none: a shared channel is the site's decision) or "
      .. "\"channel0\" (one shared channel 0, created when missing; never with "
      .. "SwitchType=switch/nvidia_imex)" },
  { name = "imex_channel_dir", default = "/dev/nvidia-caps-imex-channels", kind = "path",
    doc = "directory of the IMEX channel devices (created 0755 when missing)" },
  { name = "imex_channel_mode", default = "0666", kind = "mode",
    doc = "permission bits of a created channel, an octal string such as \"0666\"" },
  { name = "proc_devices", default = "/proc/devices", kind = "path",
    doc = "the kernel's device list; the channel major comes from its Character devices section" },
  { name = "slurm_conf", default = "/etc/slurm/slurm.conf", kind = "path",
    doc = "Slurm's slurm.conf, read (never Slurm's controller) for SwitchType=switch/nvidia_imex, with its "
      .. "Include files; SLURM_CONF of the prolog's environment (slurmd's own file, the conf-cache when "
      .. "configless) comes first, /run/slurm/conf/slurm.conf when this file does not exist" },
  -- off by default (docs/policy-api.md "The drain reason"): Slurm drains the node anyway; the
  -- reason is the site's (NHC and resume scripts own it), and the call needs scontrol and a
  -- reachable slurmctld on every node
  { name = "drain_reason", default = false, kind = "boolean",
    doc = "on a non-zero prolog outcome, set this node's Slurm reason to \"imexguard: OUTCOME: cause\"" },
  { name = "scontrol", default = "/usr/bin/scontrol", kind = "argv",
    doc = "scontrol, used for drain_reason, slurmctld_topology, slurm_extra and rack: a path, or a list of "
      .. "strings used as the argv prefix" },
  -- off by default as drain_reason: Extra may be the site's, and the call needs scontrol and a
  -- reachable slurmctld on every node (imexguard.digest)
  { name = "slurm_extra", default = false, kind = "boolean",
    doc = "keep a short digest of this node's IMEX (its node list's hash, its ID, its daemon's instance, "
      .. "its last outcome and error) in its Slurm node's Extra field, under the key \"imexguard\" of a "
      .. "JSON object, written by prolog, epilog, health and forget only when it changed: what "
      .. "`imexguard rack` reads for every node" },
  { name = "metrics_dir", default = nil, kind = "path", optional = true,
    doc = "directory of node_exporter's textfile collector; imexguard.prom is written there "
      .. "(unset: no metrics)" },
  { name = "reset_failed_retry", default = true, kind = "boolean",
    doc = "after a start/restart job of the unit fails with Result start-limit-hit, run one "
      .. "reset-failed and one more start in the same run (false: never reset-failed, the admin does)" },
  { name = "manage_disabled_unit", default = false, kind = "boolean",
    doc = "start a disabled (but installed) unit per job instead of skipping the node; it is never enabled" },
  { name = "flapping_restarts", default = 3, kind = "number", min = 1, unit = "restarts",
    doc = "restarts of the unit by systemd itself (its Restart=, counted from NRestarts) within "
      .. "flapping_window that make it flapping: health ends unit-flapping (exit 23), status and the "
      .. "metrics show it (each restart is a new IMEX instance: its peers drop every import)" },
  { name = "flapping_window", default = 600, kind = "number",
    doc = "seconds: the window in which flapping_restarts restarts of the unit make it flapping" },
  { name = "conflict_wait", default = 5, kind = "number",
    doc = "seconds: how long a prolog in conflict with a registered job waits (without the node lock) "
      .. "for that job's epilog before it answers conflict" },
  { name = "memory_limit", default = 256, kind = "number", min = 16, unit = "MiB",
    doc = "MiB: memory limit of the Lua state (policy and library); past it the run ends in "
      .. "policy-error \"memory limit of N MiB reached\" (the settings file runs under the default); "
      .. "a ctl answer grows with the square of the domain: parsing one peaks near 45 MiB at 288 nodes "
      .. "and 170 MiB at 576" },
  { name = "on_config_fault", default = "fail", kind = "enum", values = { "fail", "warn" },
    doc = "when this node is READY and connected but every peer shows UNAVAILABLE (their command port "
      .. "cannot be reached: a configuration fault): \"fail\" (outcome config-fault, exit 14, drains "
      .. "the node) or \"warn\" (exit 0, logged at level err)" },
  { name = "policy_settings", default = nil, kind = "table", optional = true,
    doc = "the site policy's own settings, a table { NAME = value, ... } of the settings the policy "
      .. "declares in its `settings` list (docs/policy-api.md \"Policy settings\"); checked against that "
      .. "list when the policy loads (unknown names and wrong values are settings errors), read as "
      .. "ctx.settings.policy_settings.NAME; --set policy_settings.NAME=VALUE" },
  { name = "proc_if_inet6", default = "/proc/net/if_inet6", kind = "path",
    doc = "the kernel's IPv6 address table; when it is absent or lists no ::1 (IPv6 disabled by sysctl) the "
      .. "host has no IPv6 for a ctl dialing [::], and where config.cfg "
      .. "leaves IMEX_CMD_BIND_INTERFACE_IP empty nvidia-imex-ctl is given -i ADDRESS PORT (with only -c "
      .. "it would dial [::] and fail)" },
  { name = "imex_session_file", default = nil, kind = "path", optional = true,
    doc = "a file that the daemon holding this node's one IMEX session keeps open, to name that process "
      .. "when a start fails with NV_ERR_IN_USE (unset: /dev/nvidia-caps/nvidia-capN, N from "
      .. "/proc/driver/nvidia/capabilities/fabric-imex-mgmt, the fabric-imex-mgmt capability device)" },
}

--- name -> schema entry.
M.by_name = {}
for _, e in ipairs(M.schema) do
  M.by_name[e.name] = e
end

-- The value of a refused setting, for a one-line message.
local function describe(v)
  if type(v) == "string" then
    return "string " .. textlib.quote(v, 200)
  end
  return textlib.one_line(type(v) .. " " .. tostring(v), 200)
end

local function is_in(list, v)
  for _, x in ipairs(list) do
    if x == v then
      return true
    end
  end
  return false
end

-- Check one value against its schema entry: returns the (copied) value | nil, err naming the key.
local function check(e, v)
  local bad = function(want)
    return nil, string.format("setting '%s' must be %s, got %s", e.name, want, describe(v))
  end
  if e.kind == "number" then
    return M.check_number(e, v, bad)
  elseif e.kind == "table" then
    return M.check_table(e, v, bad)
  elseif e.kind == "string" then
    if type(v) ~= "string" or v == "" or (e.pattern and not v:match(e.pattern)) then
      return bad(e.want or "a non-empty string")
    end
    return v
  elseif e.kind == "path" then
    if type(v) ~= "string" or v:sub(1, 1) ~= "/" then
      return bad("an absolute path")
    end
    return v
  elseif e.kind == "boolean" then
    if type(v) ~= "boolean" then
      return bad("true or false")
    end
    return v
  elseif e.kind == "enum" then
    if type(v) ~= "string" or not is_in(e.values, v) then
      return bad("one of \"" .. table.concat(e.values, "\", \"") .. "\"")
    end
    return v
  elseif e.kind == "mode" then
    if type(v) ~= "string" or not v:match("^0?[0-7][0-7][0-7]$") then
      return bad("an octal string such as \"0666\"")
    end
    return v
  elseif e.kind == "bus" then
    if type(v) ~= "string" or not (v == "system" or v == "user" or v:match("^unix:.")) then
      return bad("\"system\", \"user\" or a D-Bus address \"unix:...\"")
    end
    return v
  elseif e.kind == "argv" then
    if type(v) == "string" and v ~= "" then
      return v
    end
    if type(v) ~= "table" or #v == 0 then
      return bad("a path or a non-empty list of strings")
    end
    local copy = {}
    for k, x in pairs(v) do
      if math.type(k) ~= "integer" or k < 1 or k > #v or type(x) ~= "string" or x == "" then
        return bad("a path or a non-empty list of strings")
      end
      copy[k] = x
    end
    return copy
  end
  error("settings schema: unknown kind " .. tostring(e.kind))
end

--- A value of kind "number": above 0, or within the entry's min and max where it has them (a
-- policy's hour: min 0, max 23). Returns it, or bad's error naming the range and the unit.
function M.check_number(e, v, bad)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge or (e.min == nil and v <= 0)
    or (e.min and v < e.min) or (e.max and v > e.max) then
    local unit = e.unit or "seconds"
    if e.min and e.max then return bad(string.format("a number from %g to %g (%s)", e.min, e.max, unit)) end
    return bad(e.min and string.format("a number >= %g (%s)", e.min, unit) or "a number > 0 (" .. unit .. ")")
  end
  return v
end

--- A value of kind "table" (policy_settings): string keys that are names, each value a string, a
-- number, a boolean or a list of those (the policy's own schema checks them further,
-- imexguard.policysettings). Returns a copy, or bad's error.
function M.check_table(_, v, bad)
  if type(v) ~= "table" then return bad("a table { NAME = value, ... }") end
  local copy = {}
  for k, x in pairs(v) do
    if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then
      return bad("a table whose keys are names (got key " .. describe(k) .. ")")
    end
    if type(x) == "table" then
      local list = {}
      for i, y in pairs(x) do
        if math.type(i) ~= "integer" or i < 1 or i > #x or (type(y) ~= "string" and type(y) ~= "number"
          and type(y) ~= "boolean") then
          return bad(string.format("a table whose values are strings, numbers, booleans or lists of them (%s "
            .. "is not)", k))
        end
        list[i] = y
      end
      x = list
    elseif type(x) ~= "string" and type(x) ~= "number" and type(x) ~= "boolean" then
      return bad(string.format("a table whose values are strings, numbers, booleans or lists of them (%s is "
        .. "%s)", k, type(x)))
    end
    copy[k] = x
  end
  return copy
end

--- Check one value against a schema entry (an entry of M.schema, or of a policy's declared
-- settings: imexguard.policysettings).
-- @param e table {name, kind, values, min, max, unit}
-- @param v any the value
-- @return the (copied) value, or nil, error naming the key ("setting 'NAME' must be ...")
function M.check_value(e, v)
  return check(e, v)
end

--- The defaults, as a fresh table (unset optional settings are absent).
-- @return table
function M.defaults()
  local t = {}
  for _, e in ipairs(M.schema) do
    t[e.name] = e.default
  end
  return t
end

--- Evaluate the text of a settings file in an empty environment.
-- @param text string the file's contents
-- @param chunkname string|nil "@/etc/imexguard/imexguard.conf" (errors then carry path:line)
-- @return table of raw (not yet validated) settings | nil, err (one line, with path:line)
function M.load(text, chunkname)
  if type(text) ~= "string" then
    return nil, "settings: text must be a string, got " .. type(text)
  end
  local env = {}
  setmetatable(env, {
    __index = function(_, k)
      error(string.format("undefined name '%s' (a settings file holds only values, quote strings)",
        tostring(k)), 2)
    end,
  })
  local fn, err = load(text, chunkname or "=settings", "t", env)
  if not fn then
    return nil, M.eof_line(err, text)
  end
  local ok, ret = pcall(fn)
  if not ok then
    return nil, tostring(ret):match("^[^\n]*")
  end
  local name = chunkname and chunkname:gsub("^[@=]", "") or "settings"
  setmetatable(env, nil)
  if ret == nil then
    return env
  end
  if type(ret) ~= "table" then
    return nil, string.format("%s: must return a table of settings, returned %s", name, type(ret))
  end
  if next(env) ~= nil then
    return nil, string.format("%s: both assigns settings and returns a table: use one style", name)
  end
  return ret
end

--- A syntax error that Lua reports "near <eof>" on the line after the last one (a file that ends
-- with a newline has its end of file on an empty line of its own: `unit = ` on line 2 of a two-line
-- file is "line 3: unexpected symbol near <eof>"): named on the last line that holds anything, where
-- the admin must look. Any other error is returned as it is.
-- @param err string load's error ("NAME:LINE: message")
-- @param text string the file's contents
-- @return string the error
function M.eof_line(err, text)
  local head, n, rest = tostring(err):match("^(.-):(%d+):( .*near <eof>.*)$")
  if not head or type(text) ~= "string" then return err end
  local last, i = nil, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    i = i + 1
    if line:find("%S") then last = i end
  end
  if last and last < tonumber(n) then return string.format("%s:%d:%s", head, last, rest) end
  return err
end

--- Every line of a settings file's text that assigns `key` (`key = ...` at the start of a line, or
-- `key = ...` after `{`, `,` or `;` in a returned table), in file order. A settings file holds
-- values only (M.load), so when a key is assigned more than once the LAST assignment counts (Lua
-- assigns in order; in a table constructor, too, the last field of a key wins).
-- @param text string the file's contents
-- @param key string a setting's name
-- @return list of line numbers (1-based; empty when the key is not found as written)
function M.lines_of(text, key)
  local out = {}
  if type(text) ~= "string" or type(key) ~= "string" or not key:match("^[%a_][%w_]*$") then
    return out
  end
  local n = 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local code = line:gsub("%-%-.*$", "")
    if code:match("^%s*" .. key .. "%s*=[^=]") or code:match("[{,;]%s*" .. key .. "%s*=[^=]")
      or code:match("^%s*" .. key .. "%s*=%s*$") then
      out[#out + 1] = n
    end
  end
  return out
end

--- The first line of a settings file's text that assigns `key` (M.lines_of), e.g. the line of a
-- key an error names; the line whose value counts is the last one (M.lines_of).
-- @param text string the file's contents
-- @param key string a setting's name
-- @return integer line number (1-based), or nil when the key is not found as written
function M.locate(text, key)
  return M.lines_of(text, key)[1]
end

--- The settings a file assigns more than once: the last assignment counts (M.lines_of), which is
-- seldom what an admin who appended a line meant; `config-test` names each one, `show-config`
-- gives the last line as the source.
-- @param text string the file's contents
-- @return list of {key = name, lines = {line numbers}} in the schema's order
function M.repeats(text)
  local out = {}
  for _, e in ipairs(M.schema) do
    local lines = M.lines_of(text, e.name)
    if #lines > 1 then out[#out + 1] = { key = e.name, lines = lines } end
  end
  return out
end

--- The key a validate() or apply_overrides() error names ("setting 'x' must be...",
-- "unknown setting 'x'"), or nil.
-- @param err string the error message
-- @return string|nil
function M.key_of(err)
  return tostring(err):match("setting '([%w_]+)'")
end

--- Check a table of settings and fill in the defaults.
-- Unknown keys, wrong types and values outside an enum are errors naming the key.
-- @param t table raw settings (as from load)
-- @return table a filled copy | nil, err
function M.validate(t)
  if type(t) ~= "table" then
    return nil, "settings must be a table, got " .. type(t)
  end
  local out = {}
  for k in pairs(t) do
    if type(k) ~= "string" or not M.by_name[k] then
      return nil, string.format("unknown setting '%s'", tostring(k))
    end
  end
  for _, e in ipairs(M.schema) do
    local v = t[e.name]
    if v == nil then
      out[e.name] = e.default
    else
      local value, err = check(e, v)
      if value == nil then
        return nil, err
      end
      out[e.name] = value
    end
  end
  return out
end

local BOOLEANS = { ["true"] = true, yes = true, on = true, ["1"] = true,
  ["false"] = false, no = false, off = false, ["0"] = false }

--- Parse one "--set" value string by the key's kind.
-- @return value | nil, err ; an empty value unsets an optional setting (returns M.UNSET)
M.UNSET = setmetatable({}, { __tostring = function() return "(unset)" end })
local function parse_value(e, s)
  if s == "" and e.optional then
    return M.UNSET
  end
  if e.kind == "number" then
    local n = tonumber(s)
    if not n then
      return nil, string.format("--set %s: '%s' is not a number", e.name, s)
    end
    return n
  elseif e.kind == "boolean" then
    local b = BOOLEANS[s:lower()]
    if b == nil then
      return nil, string.format("--set %s: '%s' is not a boolean (true/false, yes/no, on/off, 1/0)",
        e.name, s)
    end
    return b
  elseif e.kind == "argv" then
    local words = textlib.matches(s, "%S+")
    if #words == 1 then
      return words[1]
    end
    return words
  end
  return s
end

--- A value given as text (--set) read by a schema entry's kind (parse_value; an empty text unsets an
-- optional entry: M.UNSET).
-- @return value, or nil, error
function M.parse_text(e, s)
  return parse_value(e, s)
end

--- Apply "key=value" overrides (from `--set`) to a raw settings table.
-- Values are parsed by the key's kind: numbers, booleans (true/false/yes/no/on/off/1/0),
-- ctl as whitespace-separated words (one word: a path), strings as is; an empty value unsets an
-- optional setting. The result still goes through validate().
-- @param t table raw settings (not modified)
-- @param list table list of strings "key=value"
-- @return table a new raw table | nil, err naming the key
function M.apply_overrides(t, list)
  local out = {}
  for k, v in pairs(t or {}) do
    out[k] = v
  end
  for _, item in ipairs(list or {}) do
    local sub, subvalue = tostring(item):match("^%s*policy_settings%.([%a_][%w_]*)%s*=(.*)$")
    if sub then -- a policy's own setting: text, read by the kind the policy declares
      local ps = {}
      for k, x in pairs(type(out.policy_settings) == "table" and out.policy_settings or {}) do ps[k] = x end
      ps[sub] = subvalue
      out.policy_settings = ps
      goto next_item
    end
    local key, value = tostring(item):match("^%s*([%w_]+)%s*=(.*)$")
    if not key then
      return nil, string.format("--set expects KEY=VALUE, got '%s'", tostring(item))
    end
    local e = M.by_name[key]
    if not e then
      return nil, string.format("--set: unknown setting '%s'", key)
    end
    local v, err = parse_value(e, value)
    if v == nil then
      return nil, err
    end
    if v == M.UNSET then
      v = nil
    end
    out[key] = v
    ::next_item::
  end
  return out
end

--- A read-only view of a table (nested tables are viewed read-only too): assigning raises, and
-- with `known` (a set of keys) reading a key outside it raises "unknown setting" (typos in a
-- policy are caught instead of reading nil). pairs, ipairs and # work on the view.
-- The host gives policies ctx.settings = readonly(settings, "ctx.settings", M.by_name).
-- @param t table the table to view
-- @param what string|nil name used in errors (default "settings")
-- @param known table|nil set of readable keys
-- @return table the view
function M.readonly(t, what, known)
  what = what or "settings"
  local function wrap(v)
    if type(v) == "table" then
      return M.readonly(v, what)
    end
    return v
  end
  local proxy = {}
  return setmetatable(proxy, {
    __index = function(_, k)
      if known and not known[k] then
        error(string.format("%s: unknown setting '%s'", what, tostring(k)), 2)
      end
      return wrap(t[k])
    end,
    __newindex = function(_, k)
      error(string.format("%s is read-only (assignment to '%s')", what, tostring(k)), 2)
    end,
    __pairs = function()
      return function(_, k)
        local nk, nv = next(t, k)
        return nk, wrap(nv)
      end, proxy, nil
    end,
    __len = function()
      return #t
    end,
    __metatable = false,
  })
end

--- The argv of a command setting (`ctl`, `scontrol`, `nvidia_smi`): the setting is a path, or a list
-- of strings used as the argv prefix (e.g. a wrapper and its arguments); `args` follow it.
-- @param value string|table the setting's value
-- @param args table list of strings appended
-- @return table a new list of strings
function M.command_argv(value, args)
  local argv = {}
  if type(value) == "table" then
    for _, a in ipairs(value) do argv[#argv + 1] = a end
  else
    argv[1] = value
  end
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return argv
end

return M
