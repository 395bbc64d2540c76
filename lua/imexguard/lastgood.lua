-- SPDX-License-Identifier: Apache-2.0
--- The last IMEX domain map that parsed (issue 32 item 1; docs/design.md, "A cluster-wide file that
-- breaks"). The domain map's files (Slurm's topology.conf or topology.yaml, the address map) are
-- shared by the whole cluster: one typo there made every node's next prolog end bad-input, and
-- Slurm drained every node of the cluster at its next job. So each prolog whose map parsed records
-- it under state_dir (a text file, rewritten only when the map changed), and a prolog whose map
-- file breaks after it worked uses that record, for the job's nodes it places the same way as the
-- broken file does where the file can still be read:
--   * the broken file is read again leniently: each line its loader refuses is left out, one at a
--     time (the loader's own error names the file and line), so the nodes of the lines that still
--     parse keep their domain;
--   * every node of the job that the broken file places must be placed in the same domain by the
--     record (or by neither: a node in no domain); a node only the broken lines name is taken from
--     the record; this node must be in the record;
--   * otherwise (this node is not in the record, a node was moved to another domain, no record,
--     the record is of another file): the file's error, bad-input, as before.
-- It is loud: the prolog logs the file's error at err with the record's age, the metrics file has
-- imexguard_domain_map_fallback 1, and `status` names the error and that prologs use the record.
-- A node that rebooted has an empty state_dir (a tmpfs) and no record: it fails with the file's
-- error until the file is fixed. Nodes whose records differ (one saw an edit that another did not)
-- can only disagree where the broken file does not say: the health wait then finds the mismatch.
local one_line = require("imexguard.text").one_line
local lazy = require("imexguard.lazy")
local domains, hostlist = lazy("imexguard.domains", "imexguard.hostlist")

local M = {}

--- The record's name under state_dir.
M.FILE = "domain-map.last"
--- Largest record read (bytes).
M.MAX_BYTES = 4 * 1024 * 1024
--- Lines of a broken file left out at most while reading it leniently.
M.MAX_SKIPPED = 32

--- The record's path.
-- @param settings table (state_dir)
-- @return string
function M.path(settings)
  return settings.state_dir .. "/" .. M.FILE
end

--- A map as the record's text: "kind KIND", "source PATH", then "domain NAME NODE..." per domain,
-- in the map's order (the same map gives the same bytes).
-- @param map table domains.load's map with domains
-- @return string
function M.encode(map)
  local lines = { "# imexguard: the last IMEX domain map that parsed (docs/design.md, \"A cluster-wide "
    .. "file that breaks\")", "kind " .. map.kind, "source " .. map.source }
  for _, d in ipairs(map.domains) do
    lines[#lines + 1] = "domain " .. d.name .. " " .. table.concat(d.nodes, " ")
  end
  return table.concat(lines, "\n") .. "\n"
end

--- A record's text as a map (domains.build's shape: kind, source, domains, of), or nil.
-- @param text string
-- @return table|nil
function M.decode(text)
  local map = { domains = {}, of = {} }
  for line in tostring(text):gmatch("[^\n]+") do
    local k, rest = line:match("^(%a+) (.*)$")
    if k == "kind" or k == "source" then
      map[k] = rest
    elseif k == "domain" then
      local d = { nodes = {} }
      for w in rest:gmatch("%S+") do
        if not d.name then d.name = w else d.nodes[#d.nodes + 1] = w; map.of[w] = d.name end
      end
      map.domains[#map.domains + 1] = d
    end
  end
  if not map.kind or not map.source or #map.domains == 0 then return nil end
  return map
end

--- Record the map of a prolog that succeeded (ctx.domain_map: a map that parsed; not a dry run),
-- after the node lock (state_dir exists): written only when it differs from the record. A failed
-- prolog changes nothing, this record included. A failure to write is a log line only.
-- @param ctx table policy context
-- @param map table|nil domains.load's map (nil, or one without domains: nothing to record)
function M.save(ctx, map)
  if ctx.dry_run or ctx.command ~= "prolog" or type(map) ~= "table" or type(map.domains) ~= "table"
    or #map.domains == 0 then
    return
  end
  local host, path = ctx.host, M.path(ctx.settings)
  local text = M.encode(map)
  if host.read(path, M.MAX_BYTES) == text then return end
  local ok, err = host.write_atomic(path, text, tonumber("644", 8))
  if not ok then
    host.log("warning", one_line("the last domain map that parsed not recorded: " .. tostring(err)))
  end
end

--- The file and line a loader's error names ("PATH line N: ...", "address map PATH line N: ..."),
-- or the file alone ("... PATH unreadable: ..."), or nil.
-- @param err string domains.load's message
-- @return string|nil path, integer|nil line
function M.place(err)
  err = tostring(err)
  local path, n = err:match("(/%S+) line (%d+): ")
  if path then return path, tonumber(n) end
  return err:match("(/%S+) unreadable: "), nil
end

-- ctx with host.read answering `skip[path]`'s lines as blank lines.
local function lenient_ctx(ctx, skip)
  local real = ctx.host
  local host = setmetatable({ read = function(path, max)
    local text, e, c = real.read(path, max)
    if not text or not skip[path] then return text, e, c end
    local out, n = {}, 0
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      n = n + 1
      out[n] = skip[path][n] and "" or line
    end
    return table.concat(out, "\n", 1, math.max(n - 1, 0)) .. "\n"
  end }, { __index = real })
  return setmetatable({ host = host }, { __index = ctx })
end

--- The broken map read leniently: the lines its loader refuses left out one at a time.
-- @return map (possibly without the broken lines' nodes), or nil when no line can be named (an
--   unreadable file: nothing of it can be read)
function M.lenient(ctx, opts, err)
  local skip, n = {}, 0
  while n < M.MAX_SKIPPED do
    local path, line = M.place(err)
    if not (path and line) then return nil end
    skip[path] = skip[path] or {}
    if skip[path][line] then return nil end
    skip[path][line], n = true, n + 1
    local map
    map, err = domains.load(lenient_ctx(ctx, skip), opts)
    if map then return map end
  end
  return nil
end

-- Why the record cannot stand in for the broken file for this job, or nil when it can.
local function disagreement(lenient, record, names, node)
  if not domains.domain_of(record, node) then
    return string.format("this node %s is in none of its domains", node)
  end
  for _, n in ipairs(names) do
    local now = lenient and lenient.domains and domains.domain_of(lenient, n)
    local was = domains.domain_of(record, n)
    if now ~= nil and now ~= was then
      return string.format("node %s is in domain %s there and in %s in the file", n, tostring(was), now)
    end
  end
  return nil
end

--- The domain map of a prolog whose map file broke (see the top of this file).
-- @param ctx table policy context
-- @param err string domains.load's error
-- @param names list the job's node names
-- @param node string this node's name
-- @param opts table|nil domains.load's options
-- @return map (the record's, with `fallback` = one line: the error and the record's age), or nil,
--   message (the file's error, with why the record does not stand in when there is one)
function M.fallback(ctx, err, names, node, opts)
  local host, path = ctx.host, M.path(ctx.settings)
  local text = host.read(path, M.MAX_BYTES)
  local record = text and M.decode(text)
  local broken = M.place(err)
  if not record or record.source ~= broken then return nil, err end
  local why = disagreement(M.lenient(ctx, opts, err), record, names, node)
  if why then
    return nil, string.format("%s (the last map that parsed, %s, cannot stand in: %s)", err, path, why)
  end
  local st = host.stat(path)
  local age = st and st.mtime_us and (host.wallclock() - st.mtime_us / 1e6)
  record.fallback = one_line(string.format("%s; using the last domain map that parsed (%s, recorded %s ago) "
    .. "for job nodes %s, which it places as the file does where the file can be read: fix the file",
    err, path, age and require("imexguard.registry").age_text(age) or "?", hostlist.text_in_order(names)))
  host.log("err", "IMEX domain map: " .. record.fallback)
  return record
end

--- What `status` says about a broken map: the error, and whether a prolog here would use the
-- record (this node in it).
-- @param ctx table policy context
-- @param node string this node's name
-- @return string|nil one line, nil when there is no usable record
function M.status_note(ctx, node)
  local text = ctx.host.read(M.path(ctx.settings), M.MAX_BYTES)
  local record = text and M.decode(text)
  if not record then return nil end
  local d = domains.domain_of(record, node)
  if not d then return nil end
  return string.format("prologs here use the last map that parsed (%s): this node in domain %s, where the "
    .. "broken file does not say otherwise", M.path(ctx.settings), d)
end

return M
