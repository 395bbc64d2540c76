-- SPDX-License-Identifier: Apache-2.0
--- Slurm's slurm.conf where Slurm keeps it (field case C38 of docs/design.md, "Field cases"): find
-- it, read it with its `Include` files, and look up a key as Slurm does. Read-only, never Slurm's
-- controller (Slurm advises prologs not to call commands that reach it).
--
-- Facts (Slurm source, slurm.conf(5)):
--   * slurmd puts `SLURM_CONF` (its real config file) into the prolog's environment; in configless
--     mode that is the conf-cache under its spool (linked from /run/slurm/conf).
--   * `Include FILE` (the keyword in any case) reads FILE in place; a relative FILE is relative to
--     the directory of the including file. A missing Include stops slurmd, so here it is an error.
--   * `Key=Value` pairs, several per line allowed, keys case-insensitive, `#` starts a comment. A
--     key given again overrides the earlier value (the last assignment counts).
--   * A line whose text before its comment ends in an odd number of backslashes (blanks after them
--     allowed) continues on the next line: Slurm drops the backslash and joins the two as they are
--     (parse_config.c, _get_next_line).
--   * `PartitionName=DEFAULT` lines add to the defaults before them, never reset them; a partition
--     named again on a later line is ignored (slurm.conf(5), "PARTITION CONFIGURATION").
-- Not followed (said, never guessed): an Include whose path holds a wildcard or `%` (not expanded
-- here), nesting deeper than MAX_DEPTH, a file that includes itself (a cycle).
-- @module imexguard.slurmconf
local slurmenv = require("imexguard.slurmenv")

local M = {}

--- Largest file read (bytes), per file.
M.MAX_BYTES = 1048576
--- Deepest Include nesting followed (slurm.conf itself is depth 0).
M.MAX_DEPTH = 8
--- Where configless slurmd links its conf-cache (Slurm 22.05+).
M.CONFIGLESS = "/run/slurm/conf/slurm.conf"

--- The directory of a file ("/" for a file at the root, "." for a bare name).
-- @tparam string path
-- @treturn string
function M.dir(path)
  local d = path:match("^(.*)/[^/]*$")
  if d == nil then return "." end
  return d == "" and "/" or d
end

-- A path relative to a directory (an absolute path as it is).
local function join(dir, path)
  if path:sub(1, 1) == "/" then return path end
  return (dir == "/" and "" or dir) .. "/" .. path
end

--- Which slurm.conf this node's slurmd uses, in this order: `SLURM_CONF` of the environment (the
-- prolog's: slurmd's own file), else the setting slurm_conf, else (when that does not exist)
-- the configless link /run/slurm/conf/slurm.conf.
-- @tparam table ctx the run's context (env, settings, host)
-- @treturn[1] string path
-- @treturn[1] string where it came from ("SLURM_CONF", "setting slurm_conf", "configless")
-- @treturn[2] nil when no candidate exists (not SLURM_CONF: a missing SLURM_CONF file is returned,
--   and reading it fails)
function M.locate(ctx)
  local from_env = slurmenv.slurm_conf(ctx.env or {})
  if from_env then return from_env, "SLURM_CONF" end
  local host, s = ctx.host, ctx.settings
  local candidates = { { s.slurm_conf, "setting slurm_conf" }, { M.CONFIGLESS, "configless" } }
  for _, c in ipairs(candidates) do
    local _, _, code = host.stat(c[1])
    if code ~= "ENOENT" then return c[1], c[2] end
  end
  return nil
end

-- Split one line into its key=value pairs (a value in double quotes may hold blanks and '#'; an
-- unquoted '#' starts a comment, "\#" is a literal '#'); `Include x` is {{include = x}}.
local function pairs_of(line)
  -- Slurm strips the comment first: `Include switch.conf # NVLink channels` includes switch.conf
  local inc = (line:gsub("#.*$", "")):match("^%s*[Ii][Nn][Cc][Ll][Uu][Dd][Ee]%s+(.-)%s*$")
  if inc then return { { include = inc } } end
  local out, pos = {}, 1
  while true do
    local s, e, key = line:find("^%s*([%w_]+)%s*=%s*", pos)
    if not s then break end
    local value
    if line:sub(e + 1, e + 1) == '"' then
      local close = line:find('"', e + 2, true) or (#line + 1)
      value, pos = line:sub(e + 2, close - 1), close + 1
    else
      local v, vend = "", e + 1
      while vend <= #line do
        local c = line:sub(vend, vend)
        if c:match("%s") then break end
        if c == "\\" and line:sub(vend + 1, vend + 1) == "#" then
          v, vend = v .. "#", vend + 2
        elseif c == "#" then
          break
        else
          v, vend = v .. c, vend + 1
        end
      end
      value, pos = v, vend
    end
    out[#out + 1] = { key = key, value = value }
    if line:sub(pos, pos) == "#" then break end
  end
  return out
end

-- The text of a physical line before its comment, without the continuation backslash, when it
-- continues on the next line (Slurm: an odd number of backslashes at its end); else nil.
local function continued(line)
  local bs, cut = 0, #line
  for i = 1, #line do
    local c = line:sub(i, i)
    if c == "#" and bs % 2 == 0 then cut = i - 1; break end
    bs = c == "\\" and bs + 1 or 0
  end
  local body = line:sub(1, cut):gsub("%s+$", "")
  local slashes = #body:match("\\*$")
  if slashes % 2 == 0 then return nil end
  return body:sub(1, -2)
end

--- Slurm's logical lines of a file's text (slurm.conf, topology.conf: Slurm's parser joins them
-- for both): an iterator of (line text, number of its first physical line), a line whose text before
-- its comment ends in an odd number of backslashes joined to the next one without the backslash
-- and the comment, nothing put between them.
-- @tparam string text the file's contents
-- @treturn function iterator
function M.logical_lines(text)
  local iter, n = (text .. "\n"):gmatch("([^\n]*)\n"), 0
  return function()
    local line = iter()
    if line == nil then return nil end
    n = n + 1
    local first, joined = n, ""
    local head = continued(line)
    while head do
      joined = joined .. head
      line = iter()
      if line == nil then return joined, first end
      n = n + 1
      head = continued(line)
    end
    return joined .. line, first
  end
end

--- Read slurm.conf and its Includes.
-- @tparam table host the primitives (read, bounded at MAX_BYTES per file)
-- @tparam string path slurm.conf
-- @treturn[1] table `{path = string, files = {path, ...} (in reading order), pairs = {{key = as
--   written, value = string, file = path, line = integer}, ...} (in Slurm's order)}`
-- @treturn[2] nil
-- @treturn[2] string one line naming the file (and the Include line that names it) and what is
--   wrong: unreadable (with the errno name), a wildcard Include, too deep, a cycle
function M.read(host, path)
  local conf = { path = path, files = {}, pairs = {} }
  local open = {}
  local function visit(file, depth, from)
    local where = from and string.format(" (Include on %s line %d)", from.file, from.line) or ""
    if open[file] then return nil, string.format("%s includes itself%s", file, where) end
    if depth > M.MAX_DEPTH then
      return nil, string.format("%s: Include nested deeper than %d%s", file, M.MAX_DEPTH, where)
    end
    local text, err, code = host.read(file, M.MAX_BYTES)
    if not text then
      return nil, string.format("%s unreadable%s: %s", file, where, tostring(code or err))
    end
    open[file] = true
    conf.files[#conf.files + 1] = file
    for line, n in M.logical_lines(text) do
      for _, p in ipairs(pairs_of(line)) do
        if p.include then
          if p.include:find("[%*%?%[%%]") then
            return nil, string.format("%s line %d: Include %s has a wildcard or %%-expansion, which "
              .. "imexguard does not expand", file, n, p.include)
          end
          local ok, ierr = visit(join(M.dir(file), p.include), depth + 1, { file = file, line = n })
          if not ok then return nil, ierr end
        else
          conf.pairs[#conf.pairs + 1] = { key = p.key, value = p.value, file = file, line = n }
        end
      end
    end
    open[file] = nil
    return true
  end
  local ok, err = visit(path, 0, nil)
  if not ok then return nil, err end
  return conf
end

--- A key's value, case-insensitive; the last assignment counts (as in Slurm).
-- @tparam table conf from `read`
-- @tparam string key e.g. "SwitchType"
-- @treturn string|nil the value (nil when not set)
-- @treturn table|nil where: `{file = path, line = integer}`
function M.get(conf, key)
  local want, value, where = key:lower(), nil, nil
  for _, p in ipairs(conf.pairs) do
    if p.key:lower() == want then value, where = p.value, { file = p.file, line = p.line } end
  end
  return value, where
end

--- The partitions of slurm.conf with the topology each binds (Slurm 25.05+: `PartitionName=P ...
-- Topology=NAME`, a topology of topology.yaml; field case C47). A `PartitionName=DEFAULT` line sets
-- the value for the partition lines after it, adding to the DEFAULT lines before it (slurm.conf(5));
-- a partition's own line wins; a partition named again on a later line: that line is ignored (as
-- slurmctld does).
-- @tparam table conf from `read`
-- @treturn table list of `{name = string, topology = string or nil, file = path, line = integer}`
--   (file order; `line` is the partition's line, or the DEFAULT line's where its Topology= comes from)
function M.partitions(conf)
  local out, by_name, default, cur = {}, {}, nil, nil
  for _, p in ipairs(conf.pairs) do
    local key = p.key:lower()
    if key == "partitionname" then
      if p.value:upper() == "DEFAULT" then
        -- adds to the defaults before it: their Topology= stays until this line sets one
        cur = { default = true, file = p.file, line = p.line }
        if default and default.topology ~= nil then
          cur.topology, cur.set_at = default.topology, default.set_at
        end
        default = cur
      else
        cur = { name = p.value, file = p.file, line = p.line, from = default }
        if by_name[p.value] then
          cur = { ignored = true, file = p.file, line = p.line } -- Slurm ignores the repeat
        else
          out[#out + 1], by_name[p.value] = cur, #out + 1
        end
      end
    elseif cur and p.file == cur.file and p.line == cur.line then
      if key == "topology" then
        cur.topology = p.value ~= "" and p.value or false
        if cur.default then cur.set_at = { file = p.file, line = p.line } end
      end
    else
      cur = nil
    end
  end
  for i, p in ipairs(out) do
    local d = p.from
    if p.topology == nil and d and d.topology then
      out[i] = { name = p.name, topology = d.topology, file = d.set_at.file, line = d.set_at.line }
    else
      out[i] = { name = p.name, topology = p.topology or nil, file = p.file, line = p.line }
    end
  end
  return out
end

--- The topology a partition binds (see `partitions`).
-- @tparam table conf from `read`
-- @tparam string name the partition (SLURM_JOB_PARTITION)
-- @treturn string|nil the topology's name (nil: the partition binds none, or is not in slurm.conf)
-- @treturn table|nil where: `{file = path, line = integer}`
function M.partition_topology(conf, name)
  for _, p in ipairs(M.partitions(conf)) do
    if p.name == name and p.topology then return p.topology, { file = p.file, line = p.line } end
  end
  return nil
end

--- Find and read this node's slurm.conf (`locate`, then `read`).
-- @tparam table ctx the run's context
-- @treturn[1] table conf (`read`'s), with `source` (`locate`'s)
-- @treturn[2] nil when no slurm.conf exists (no SLURM_CONF, neither the setting's file nor the
--   configless link)
-- @treturn[3] nil
-- @treturn[3] string one line: what could not be read (see `read`)
function M.load(ctx)
  local path, source = M.locate(ctx)
  if not path then return nil end
  local conf, err = M.read(ctx.host, path)
  if not conf then return nil, string.format("slurm.conf (%s): %s", source, err) end
  conf.source = source
  return conf
end

return M
