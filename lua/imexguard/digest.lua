-- SPDX-License-Identifier: Apache-2.0
--- The node's digest: a few facts of this node's IMEX that `imexguard rack` on any node of the
-- domain reads for every node at once, kept in the Slurm node's `Extra` field (setting slurm_extra):
-- no shared storage, no call between nodes, one `scontrol show node` to read them all.
--
-- Slurm's `Extra` is an arbitrary string on the node (scontrol(1), `scontrol update NodeName=X
-- Extra=...`; slurmctld keeps it with the node's state). Checked under the real slurmctld of the
-- Slurm tiers (tests/e2e/rack_spec.lua; docs/design.md, "The rack at a glance"): 22.05, 24.11 and
-- 26.05 take JSON with blanks and 3000 bytes and more; `scontrol show node` prints it on its own
-- line `   Extra=...`; a newline would be kept and break that line, so the digest has none. Sites
-- use `Extra` too (23.02's extra_constraints read it as JSON): the digest is the key "imexguard" of a
-- JSON object, and the other keys of the object are kept; a string that is not a JSON object is
-- the site's and is never overwritten (a warning says so).
--
-- Written after the outcome of a prolog, epilog or health run (imexguard.runrecord), and only when
-- it changed: the run compares it with the copy it keeps in state_dir/extra.json, so a fast-path
-- prolog calls no scontrol (nothing changed); a change costs one `scontrol show node` and one
-- `scontrol update`, each bounded by M.TIMEOUT within the run's deadline. A call that fails is not
-- tried again for M.RETRY seconds with the same digest.
--
-- The digest, one JSON object with short keys (the value of `Extra` stays small):
--   v  its version (M.VERSION)            a  this node's address in the domain
--   d  this node's IMEX domain (the domain map's name), or absent
--   l  the node list file's FNV-1a hash (8 hex digits), n its entries, p this node's line (0-based)
--   m  this node's own ID in its daemon's node map (the ctl's answer the run saw)
--   i  the daemon's invocation (8 hex digits), s its start (Unix seconds), u the unit's ActiveState
--   h  true when that daemon was not started by imexguard (another invocation than the state file's)
--   x  the registered jobs admitted to another daemon instance than the running one (restarted
--      under them: their imports are gone), ids joined by ","
--   o  "ok" when the last run exited 0, else its outcome, and c its command
-- Only facts that change with the daemon or a fault: a fast-path prolog (a new job, the same list,
-- the same daemon, exit 0) leaves the digest as it was, and so calls no scontrol.
--   e  the daemon's last [ERROR] line (its LOG_FILE_NAME), cut to M.MAX_ERROR bytes
--   t  when the digest last changed (Unix seconds; not compared)
local cjson = require("cjson")
local text = require("imexguard.text")

local M = {}

--- The key of the digest in a JSON object `Extra`.
M.KEY = "imexguard"
--- The digest's version (`v`).
M.VERSION = 1
--- Bytes of the daemon's last error line kept.
M.MAX_ERROR = 120
--- Bytes of the daemon's log read from its end for that line.
M.LOG_TAIL = 16384
--- Seconds one scontrol call may take (within the run's remaining budget).
M.TIMEOUT = 2
--- Seconds before a failed write of the same digest is tried again.
M.RETRY = 600
--- The keys in the order the digest is written.
M.KEYS = { "v", "a", "d", "l", "n", "p", "m", "i", "s", "u", "h", "x", "c", "o", "e", "t" }

--- FNV-1a, 32 bits (Fowler, Noll, Vo): a node list's identity in 8 hex digits. Not a secret, not a
-- checksum against tampering: two nodes compare their lists with it.
-- @param s string
-- @return string 8 lowercase hex digits
function M.hash(s)
  local h = 0x811c9dc5
  for i = 1, #s do h = ((h ~ s:byte(i)) * 0x01000193) & 0xffffffff end
  return string.format("%08x", h)
end

--- The digest as text: one line of JSON, keys in M.KEYS order, absent keys left out.
-- @param d table digest
-- @param with_time boolean write `t` too
-- @return string
function M.encode(d, with_time)
  local parts = {}
  for _, k in ipairs(M.KEYS) do
    local v = d[k]
    if v ~= nil and (k ~= "t" or with_time) then
      if math.type(v) == "float" and v == math.floor(v) then v = math.tointeger(v) end
      parts[#parts + 1] = string.format("%q:%s", k, cjson.encode(v))
    end
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

--- A digest from its decoded JSON (Extra's "imexguard" value), keeping only the known keys with
-- plain values.
-- @param t any
-- @return table|nil
function M.from_json(t)
  if type(t) ~= "table" then return nil end
  local d = {}
  for _, k in ipairs(M.KEYS) do
    local v = t[k]
    if type(v) == "number" then v = math.tointeger(v) or v end
    if type(v) == "string" or type(v) == "number" or type(v) == "boolean" then d[k] = v end
  end
  if d.v == nil then return nil end
  return d
end

--- The digest in a Slurm node's Extra, or nil; and whether that Extra is the site's own string (not
-- a JSON object: never overwritten).
-- @param extra string|nil the Extra value ("" or "(null)": none)
-- @return table|nil digest, boolean foreign, table|nil the decoded object
function M.from_extra(extra)
  if extra == nil or extra == "" or extra == "(null)" then return nil, false, nil end
  local ok, t = pcall(cjson.decode, extra)
  if not ok or type(t) ~= "table" or (next(t) ~= nil and #t > 0) then return nil, true, nil end
  return M.from_json(t[M.KEY]), false, t
end

-- The daemon's last [ERROR] line from its log's end (`tail -c`: the log grows without bound).
local function last_error(host, log)
  if type(log) ~= "string" or log == "" then return nil end
  local res = host.run({ "tail", "-c", tostring(M.LOG_TAIL), log }, { timeout = 1, max_output = M.LOG_TAIL })
  if not (res and res.status == 0) then return nil end
  local line
  for l in res.stdout:gmatch("[^\n]+") do
    if l:find("[ERROR]", 1, true) then line = l end
  end
  return line and text.one_line(line, M.MAX_ERROR) or nil
end

-- This node's line in the node list (0-based) and its address: BIND_INTERFACE_IP, else the first
-- local address the list has.
local function own_line(host, lines, bind)
  local locals = {}
  if bind then locals[bind] = true else
    for _, a in ipairs(host.local_addresses() or {}) do locals[a] = true end
  end
  for i, a in ipairs(lines) do
    if locals[a] then return i - 1, a end
  end
  return nil, bind
end

-- The registered jobs admitted to another daemon instance than `inv`, ids joined by ",", or nil.
local function moved_jobs(jobs, inv)
  local moved = {}
  for _, e in ipairs(jobs or {}) do
    if inv and inv ~= "" and e.invocation_id and e.invocation_id ~= "" and e.invocation_id ~= inv then
      moved[#moved + 1] = e.id
    end
  end
  return #moved > 0 and table.concat(moved, ",") or nil
end

--- Build this node's digest from what a run saw (reads config.cfg and the node list; the daemon's
-- log only with f.with_error).
-- @param host table the primitives (read, local_addresses, run)
-- @param f table facts: config (the daemon's config.cfg path), props (the unit's properties), mesh
--   (the ctl's parsed answer the run saw, or nil), domain (this node's domain name, or nil to keep
--   the previous one), st (the state file, or nil), jobs (registry entries, or nil), command,
--   outcome, ok (the run exited 0), previous (the last digest, or nil), with_error (read the
--   daemon's log)
-- @return table digest
function M.build(host, f)
  local prev = f.previous or {}
  local imexcfg = require("imexguard.imexcfg")
  local ctext = f.config and host.read(f.config, 1048576)
  local cfg = ctext and imexcfg.parse(ctext) or {}
  local nodes_path = cfg.IMEX_NODE_CONFIG_FILE ~= "" and cfg.IMEX_NODE_CONFIG_FILE or nil
  local list = host.read(nodes_path or require("imexguard.steps.applies").DEFAULT_NODES_FILE, 1048576)
  local lines = require("imexguard.nodelist").lines(list or "")
  local bind = cfg.BIND_INTERFACE_IP ~= "" and cfg.BIND_INTERFACE_IP or nil
  local pos, addr = own_line(host, lines, bind)
  local props = f.props or {}
  local inv = props.invocation_id or ""
  local d = { v = M.VERSION, a = addr or prev.a, d = f.domain or prev.d, l = list and M.hash(list) or nil,
    n = #lines, p = pos, i = inv ~= "" and inv:sub(1, 8) or nil, u = props.active_state,
    s = props.exec_main_start_us and props.exec_main_start_us > 0 and props.exec_main_start_us // 1000000
      or nil, c = (not f.ok) and f.command or nil, o = f.ok and "ok" or f.outcome }
  local sinv = f.st and f.st.invocation_id
  d.h = (sinv and sinv ~= "" and inv ~= "" and sinv ~= inv) or nil
  d.x = moved_jobs(f.jobs, inv)
  local self = f.mesh and addr and f.mesh.by_host and f.mesh.by_host[addr]
  if self then d.m = self.id elseif prev.i == d.i then d.m = prev.m end
  d.e = f.with_error and last_error(host, cfg.LOG_FILE_NAME) or prev.e
  return d
end

--- The local copy: state_dir/extra.json ({digest, t, failed = Unix seconds of a failed write}).
local function copy_path(settings) return settings.state_dir .. "/extra.json" end

local function load_copy(host, settings)
  local t = host.read(copy_path(settings), 65536)
  local ok, c = pcall(cjson.decode, t or "")
  if not ok or type(c) ~= "table" then return {} end
  return c
end

--- The digest this node last published (its local copy), or nil.
-- @param host table the primitives (read)
-- @param settings table validated settings (state_dir)
-- @return table|nil
function M.previous(host, settings)
  local c = load_copy(host, settings)
  local ok, t = pcall(cjson.decode, type(c.digest) == "string" and c.digest or "")
  return ok and M.from_json(t) or nil
end

-- One scontrol call bounded by M.TIMEOUT within the budget: the result, or nil, message.
local function scontrol(host, settings, args)
  local left = host.remaining()
  if left < 0.2 then return nil, "the run's deadline has passed" end
  local argv = require("imexguard.settings").command_argv(settings.scontrol, args)
  local res, err, code = host.run(argv, { timeout = math.min(M.TIMEOUT, left), max_output = 65536 })
  if not res then return nil, string.format("%s: %s (%s)", argv[1], tostring(err), tostring(code)) end
  if res.status ~= 0 then
    return nil, string.format("%s exited %s: %s", argv[1], tostring(res.status),
      text.one_line(res.stderr or "", 200))
  end
  return res
end

--- The Extra value to write: the node's current Extra with the digest under M.KEY.
-- @return string, or nil, message (the current Extra is the site's own string)
function M.merged_extra(current, d)
  local _, foreign, obj = M.from_extra(current)
  if foreign then
    return nil, "its Extra is not a JSON object (the site's own: left as it is): " .. text.excerpt(current)
  end
  local parts = { string.format("%q:%s", M.KEY, M.encode(d, true)) }
  local keys = {}
  for k in pairs(obj or {}) do if k ~= M.KEY then keys[#keys + 1] = k end end
  table.sort(keys)
  for _, k in ipairs(keys) do parts[#parts + 1] = cjson.encode(k) .. ":" .. cjson.encode(obj[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

--- Publish the digest in the node's Extra when it changed since the last write.
-- @param host table the real primitives
-- @param settings table validated settings (scontrol, state_dir)
-- @param node string the Slurm node name (SLURMD_NODENAME)
-- @param d table the digest (M.build)
-- @return true when written, false when nothing changed, or nil, message
function M.publish(host, settings, node, d)
  local copy = load_copy(host, settings)
  local body = M.encode(d, false)
  local now = math.floor(host.wallclock())
  if copy.digest == body and not copy.failed then return false end
  if copy.digest == body and copy.failed and now - copy.failed < M.RETRY then return false end
  d.t = now
  local res, err = scontrol(host, settings, { "show", "node", node })
  local value
  if res then
    local shown = M.parse_show(res.stdout)[1]
    value, err = M.merged_extra(shown and shown.extra, d)
    if value then
      res, err = scontrol(host, settings, { "update", "NodeName=" .. node, "Extra=" .. value })
    end
  end
  local ok = value and res
  local saved = cjson.encode({ digest = body, t = now, failed = (not ok) and now or nil })
  host.write_atomic(copy_path(settings), saved .. "\n", tonumber("644", 8))
  if not ok then return nil, err end
  return true
end

--- The nodes of `scontrol show node` (Slurm's multi-line form: a record per node, starting with
-- "NodeName=", its Reason= and Extra= each on a line of their own).
-- @param out string scontrol's stdout
-- @return list of {name, state, reason (without " [user@time]"), reason_by, extra (the raw value)}
function M.parse_show(out)
  local nodes, cur = {}, nil
  for line in (out or ""):gmatch("[^\n]+") do
    local name = line:match("^NodeName=(%S+)")
    if name then
      cur = { name = name }
      nodes[#nodes + 1] = cur
    elseif cur then
      local key, value = line:match("^%s+(%u%a*)=(.*)$")
      if key == "Reason" then
        cur.reason, cur.reason_by = value:match("^(.-)%s*%[([^%]]*)%]$")
        cur.reason = cur.reason or value
      elseif key == "Extra" then
        cur.extra = value
      end
      local st = line:match("^%s+State=(%S+)")
      if st then cur.state = st end
    end
  end
  return nodes
end

return M
