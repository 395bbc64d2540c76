-- SPDX-License-Identifier: Apache-2.0
--- Step 1 of the built-in policy, "applies?" (docs/design.md, "Decision model of the default
-- policy"; cases C17, C23, C28, C34): before the lock, changing nothing, does IMEX apply to this
-- node, and which files does its daemon read? The unit's properties (a failed query is "unknown",
-- never "inactive"), whether it is installed and enabled (or managed per job), its config.cfg (the
-- `-c` of its ExecStart) and the node list file that config names. Step 5a queries the unit here too.
local base = require("imexguard.steps.base")
local one_line = require("imexguard.text").one_line
-- Loaded when first used (imexguard.lazy): a unit query alone (step 5a) needs no config.cfg.
local lazy = require("imexguard.lazy")
local imexcfg = lazy("imexguard.imexcfg")

local fail, by_code, node_name = base.fail, base.by_code, base.node_name

local M = {}

--- Default node list file when neither the setting nor config.cfg names one (NVIDIA's default).
M.DEFAULT_NODES_FILE = "/etc/nvidia-imex/nodes_config.cfg"

-- systemd UnitFileState values under which the unit starts at boot or with its dependencies.
local ENABLED = {
  ["enabled"] = true, ["enabled-runtime"] = true, ["static"] = true, ["indirect"] = true,
  ["generated"] = true, ["alias"] = true, ["linked"] = true, ["linked-runtime"] = true,
  ["transient"] = true,
}

--- Query the unit's properties; a failed query is "unknown", never "inactive" (C17).
-- @return props, or nil, "unit-unknown"|"deadline-exceeded", message
function M.query_unit(ctx)
  local unit = ctx.settings.unit
  local props, err, code = ctx.host.unit(unit)
  if not props then
    return fail(by_code(code, "unit-unknown"), "node %s: state of %s unknown (%s: %s%s); nothing restarted",
      node_name(ctx), unit, tostring(code), tostring(err), base.root_hint(ctx.host, code, err))
  end
  return props
end

--- The config.cfg the daemon reads (C28): the `-c PATH` of the unit's ExecStart (systemd's
-- ExecStart property, host.unit's exec_start: the first entry's argv), else NVIDIA's default
-- /etc/nvidia-imex/config.cfg when the ExecStart runs nvidia-imex without `-c` (another program
-- without `-c`, a wrapper, is not known to read it: the setting imex_config stands), and when the
-- host gives no ExecStart. A setting that names another config than the unit's (an
-- imex_config other than its default) is a disagreement: imexguard would read, and write the node
-- list named by, a file the daemon does not read.
-- @param ctx table policy context
-- @param props table the unit's properties (host.unit)
-- @return path string, source string ("unit ExecStart" | "unit ExecStart (no -c: NVIDIA's default)"
--   | "setting imex_config"), or nil, "config-mismatch"|"bad-input", message naming both paths
function M.daemon_config(ctx, props)
  local s = ctx.settings
  local exec = type(props) == "table" and props.exec_start
  local first = type(exec) == "table" and exec[1]
  if type(first) ~= "table" then return s.imex_config, "setting imex_config" end
  local argv = type(first.argv) == "table" and #first.argv > 0 and first.argv or { first.path }
  local ok, path, from_c = pcall(imexcfg.config_path, argv)
  if not ok or not path then
    return fail("bad-input", "node %s: %s: cannot tell which config.cfg the daemon reads: %s; nothing "
      .. "changed", node_name(ctx), s.unit, tostring(ok and from_c or path))
  end
  -- without -c, only nvidia-imex itself is known to read NVIDIA's default; a wrapper (a script, the
  -- simulator) may pass its own config: the setting then stands
  local prog = tostring(argv[1] or first.path or ""):match("([^/]*)$")
  if not from_c and prog ~= "nvidia-imex" then
    return s.imex_config, "setting imex_config (" .. prog .. " in ExecStart has no -c)"
  end
  if s.imex_config ~= path and s.imex_config ~= imexcfg.DEFAULT_PATH then
    return fail("config-mismatch", "node %s: setting imex_config=%s, but %s's ExecStart makes the daemon "
      .. "read %s; nothing changed (remove the setting, or point the unit at that file)", node_name(ctx),
      s.imex_config, s.unit, path)
  end
  return path, from_c and "unit ExecStart" or "unit ExecStart (no -c: NVIDIA's default)"
end

--- The node list the daemon reads: IMEX_NODE_CONFIG_FILE of its config.cfg (else NVIDIA's default).
-- A nodes_file setting naming another file is a disagreement (C28): the daemon would never read
-- the list imexguard writes.
-- @return path, or nil, "config-mismatch"|"bad-input", message
local function daemon_nodes_file(ctx, cfg, config)
  local s = ctx.settings
  local v, unknown = imexcfg.get(cfg, "IMEX_NODE_CONFIG_FILE")
  if unknown then -- C34: the node list the daemon reads is unknown, so no list can be written for it
    return fail("bad-input", "IMEX config %s: %s; nothing changed (keep one IMEX_NODE_CONFIG_FILE line)",
      config, unknown)
  end
  local nodes_file = (v and v ~= "") and v or M.DEFAULT_NODES_FILE
  -- the daemon's working directory is not ours: a relative path would name another file
  if nodes_file:sub(1, 1) ~= "/" then
    return fail("bad-input", "IMEX config %s: IMEX_NODE_CONFIG_FILE=%s is not an absolute path; nothing "
      .. "changed", config, nodes_file)
  end
  if s.nodes_file and s.nodes_file ~= nodes_file then
    return fail("config-mismatch", "node %s: setting nodes_file=%s, but the daemon reads the node list %s "
      .. "(IMEX_NODE_CONFIG_FILE of %s); nothing changed (remove the setting, or change config.cfg)",
      node_name(ctx), s.nodes_file, nodes_file, config)
  end
  return nodes_file
end

--- C34: log the keys config.cfg sets more than once (imexcfg.lint's repeat findings, at warning):
-- the same value is harmless; different values leave the key's value unknown, and each step that
-- needs it says so (the node list: bad-input; the command port: its owner is not checked).
-- @param ctx table policy context
-- @param cfg table parsed config.cfg
-- @param config string its path
function M.log_repeats(ctx, cfg, config)
  for _, f in ipairs(imexcfg.lint(cfg, config)) do
    if f.repeated then ctx.host.log("warning", one_line(f.text)) end
  end
end

--- Step 1: does IMEX apply to this node?
-- @return info {unit = props, cfg = {KEY = value}, config = path of the daemon's config.cfg,
--   config_source = where that path came from, nodes_file = path, bind = BIND_INTERFACE_IP or nil,
--   managed_disabled = boolean (a disabled unit managed per job: M.disabled_unit)}, or nil,
--   outcome, message ("skipped" when IMEX does not apply: unit not installed, not enabled, no
--   config.cfg; "config-mismatch" when a setting names another config or node list than the
--   daemon's: see daemon_config)
function M.applies(ctx)
  local s, host = ctx.settings, ctx.host
  local props, o, m = M.query_unit(ctx)
  if not props then return nil, o, m end
  if props.load_state ~= "loaded" then
    return fail("skipped", "IMEX not installed on this node: %s load state %s", s.unit,
      tostring(props.load_state))
  end
  local managed_disabled = false
  if not ENABLED[props.unit_file_state] then
    local o2, m2 = M.disabled_unit(ctx, props)
    if o2 then return nil, o2, m2 end
    managed_disabled = true
  end
  local config, source, cm = M.daemon_config(ctx, props)
  if not config then return nil, source, cm end
  local text, err, code = host.read(config, base.MAX_FILE)
  if not text then
    if code == "ENOENT" then return fail("skipped", "not an IMEX node: %s does not exist", config) end
    return fail(by_code(code, "bad-input"), "IMEX config %s unreadable: %s", config, tostring(err))
  end
  local cfg, perr = imexcfg.parse(text)
  if not cfg then return fail("bad-input", "IMEX config %s: %s", config, tostring(perr)) end
  M.log_repeats(ctx, cfg, config)
  local nodes_file
  nodes_file, o, m = daemon_nodes_file(ctx, cfg, config)
  if not nodes_file then return nil, o, m end
  local bind = cfg.BIND_INTERFACE_IP -- nil when set with different values (C34): found by address
  return { unit = props, cfg = cfg, config = config, config_source = source, nodes_file = nodes_file,
    bind = (bind ~= "" and bind) or nil, managed_disabled = managed_disabled }
end

--- Steps 0 and 1 as a policy runs them (its prolog, `imexguard wait`): the job id checked
-- (base.check_job_id), then the policy's P:applies (its applies hook, else M.applies).
-- @param policy table the policy
-- @return id, info, or nil, outcome, message
function M.applies_to_job(policy, ctx)
  local id, o, m = base.check_job_id(ctx)
  if not id then return nil, o, m end
  local info
  info, o, m = policy:applies(ctx)
  if not info then return nil, o, m end
  return id, info
end

--- A unit that is installed but not enabled (C23: some node images ship it disabled on purpose, for
-- a per-job tool to start). With the setting manage_disabled_unit = true a "disabled" unit (not a
-- masked one: systemd refuses to start it) is managed per job
-- (started when a job needs it; never enabled: the image's choice stays). Without it the node is
-- skipped; when config.cfg exists (IMEX is configured here) the skip is logged as a warning naming
-- the setting, since every job on the node then runs without IMEX.
-- @param ctx table policy context
-- @param props table the unit's properties (unit_file_state: systemd's UnitFileState)
-- @return nil (manage it), or "skipped", message
function M.disabled_unit(ctx, props)
  local s, host = ctx.settings, ctx.host
  local what = string.format("%s is %s", s.unit, tostring(props.unit_file_state))
  if props.unit_file_state == "disabled" and base.setting(ctx, "manage_disabled_unit", false) then
    host.log("info", one_line(string.format("node %s: %s; managed per job (manage_disabled_unit), "
      .. "never enabled", node_name(ctx), what)))
    return nil
  end
  local msg = "IMEX not enabled on this node: " .. what
  local config = M.daemon_config(ctx, props) or s.imex_config
  if host.stat(config) then
    msg = string.format("node %s: IMEX is configured (%s exists) but %s: skipped, jobs here run without "
      .. "IMEX; set manage_disabled_unit = true to start the unit per job, or enable it", node_name(ctx),
      config, what)
    host.log("warning", one_line(msg))
  end
  return "skipped", one_line(msg)
end

return M
