-- SPDX-License-Identifier: Apache-2.0
--- The job registry (docs/design.md: step 6, the epilog and "The state file and the job registry";
-- field case C08 there): the jobs whose prolog succeeded on this node and whose epilog has not run
-- yet, kept as `st.jobs` in the state file (imexguard.state). Pure functions on the state table:
-- the caller loads and saves the state file under the node lock (imexguard.steps: node_lock,
-- registration, other_jobs; the epilog).
--
-- An entry: {id = string (SLURM_JOB_ID), nodes = string (the node-list bytes the job runs with,
-- as written to nodes_config.cfg), registered_us = number (wall clock, microseconds since the
-- epoch), invocation_id = string (systemd's InvocationID of the daemon the job was admitted to,
-- "" when unknown), hosts = string (the job's Slurm node names compressed, "gb[03-18]": what
-- messages and `imexguard registrations` show; absent in entries of older versions), boot_id =
-- string (the kernel's boot ID when the job was registered, field case C36; absent in entries of
-- older versions and when it could not be read)}; a policy may add scalar fields (e.g. shared =
-- "YES").
--
-- Stale entries (a job whose epilog never ran, e.g. slurmd crashed) would block restarts for
-- ever. The ways out, in the order an admin meets them:
--   1. state_dir is /run/imexguard, a tmpfs: a reboot (which ends every job) clears the registry.
--      On a state_dir that outlives a reboot (C36), the entries of another boot (their boot_id is
--      not the kernel's /proc/sys/kernel/random/boot_id now) are dropped (M.drop_other_boots).
--   2. `imexguard forget <id>` on the node removes job <id>'s registration by hand, under the
--      node lock, leaving IMEX as it is (`SLURM_JOB_ID=<id> imexguard epilog` does the same and runs
--      the policy's after_unregister); every conflict message names the command.
--   3. A job id registered again (requeue, retried prolog) replaces its old entry.
--   4. Optionally an age limit (M.prune, the setting registration_max_age when the schema has
--      it): entries older than the site's longest job (Slurm's MaxTime) no longer count.
-- The registry is NOT cleared when the unit's invocation ID changes outside imexguard (an admin's
-- `systemctl restart`, Restart=on-failure after a crash): the jobs may still run, and they use
-- whatever daemon is running now, so restarting it again would break them again.
-- Loaded when first used (imexguard.lazy): only the renderings for a person need them.
local lazy = require("imexguard.lazy")
local hostlist, nodelist = lazy("imexguard.hostlist", "imexguard.nodelist")

local M = {}

--- The registry list of a state table (created empty when missing).
-- @param st table state
-- @return list of entries (the same table as st.jobs)
function M.jobs(st)
  if type(st.jobs) ~= "table" then st.jobs = {} end
  return st.jobs
end

--- Find a job's entry.
-- @param st table state
-- @param id string|number job id
-- @return entry, index; or nil when the job is not registered
function M.find(st, id)
  id = tostring(id)
  for i, e in ipairs(M.jobs(st)) do
    if e.id == id then return e, i end
  end
  return nil
end

--- Register a job (an entry of the same id is replaced: requeue or retried prolog).
-- @param st table state (changed in place; the caller saves it)
-- @param id string|number job id
-- @param nodes string node-list bytes the job runs with
-- @param now_us number wall clock, microseconds since the epoch
-- @param extra table|nil more scalar fields (invocation_id, shared, ...)
-- @return entry
function M.register(st, id, nodes, now_us, extra)
  assert(type(nodes) == "string", "registry.register: nodes must be the node-list bytes")
  local e = { id = tostring(id), nodes = nodes, registered_us = math.floor(now_us) }
  for k, v in pairs(extra or {}) do
    if e[k] == nil then e[k] = v end
  end
  local _, i = M.find(st, id)
  local jobs = M.jobs(st)
  if i then jobs[i] = e else jobs[#jobs + 1] = e end
  return e
end

--- Unregister a job.
-- @param st table state (changed in place; the caller saves it)
-- @param id string|number job id
-- @return the removed entry, or nil when the job was not registered
function M.unregister(st, id)
  local e, i = M.find(st, id)
  if not e then return nil end
  table.remove(M.jobs(st), i)
  return e
end

-- The entries of `list` for which keep(entry) is true, in order (a new list).
local function select_entries(list, keep)
  local out = {}
  for _, e in ipairs(list) do
    if keep(e) then out[#out + 1] = e end
  end
  return out
end

--- The entries of every other job.
-- @param st table state
-- @param id string|number|nil this job's id
-- @return list of entries (registration order)
function M.others(st, id)
  id = id ~= nil and tostring(id) or nil
  return select_entries(M.jobs(st), function(e) return e.id ~= id end)
end

--- The other jobs registered with a node list other than `nodes`.
-- @param st table state
-- @param id string|number|nil this job's id
-- @param nodes string node-list bytes
-- @return list of entries
function M.conflicting(st, id, nodes)
  return select_entries(M.others(st, id), function(e) return e.nodes ~= nodes end)
end

-- Remove the entries for which drop(e) is true from st.jobs, keeping the others' order.
-- @return list of the removed entries
local function drop_where(st, drop)
  local removed, keep = {}, {}
  for _, e in ipairs(M.jobs(st)) do
    if drop(e) then removed[#removed + 1] = e else keep[#keep + 1] = e end
  end
  st.jobs = keep
  return removed
end

--- Drop the entries registered during another boot (C36): a reboot ended their jobs. An entry
-- without a boot_id (an older version wrote it, or the boot ID was unreadable) is kept: its boot
-- is unknown, and dropping the registration of a running job would let a restart break it.
-- @param st table state (changed in place)
-- @param boot_id string|nil the kernel's boot ID now; nil or "" (unknown) drops nothing
-- @return list of the removed entries
function M.drop_other_boots(st, boot_id)
  if not boot_id or boot_id == "" then return {} end
  return drop_where(st, function(e)
    return type(e.boot_id) == "string" and e.boot_id ~= "" and e.boot_id ~= boot_id
  end)
end

--- Drop entries older than max_age seconds.
-- @param st table state (changed in place)
-- @param now_us number wall clock, microseconds
-- @param max_age number|nil seconds; nil or <= 0 keeps everything
-- @return list of the removed entries
function M.prune(st, now_us, max_age)
  if not max_age or max_age <= 0 then return {} end
  return drop_where(st, function(e)
    return e.registered_us and now_us - e.registered_us > max_age * 1e6
  end)
end

--- "100, 102" from a list of entries.
-- @tparam {table,...} entries registry entries (only `id` is read)
-- @treturn string their job ids, comma separated, in the given order
function M.ids(entries)
  local ids = {}
  for i, e in ipairs(entries) do ids[i] = e.id end
  return table.concat(ids, ", ")
end

--- "{10.0.0.1 10.0.0.3}" from node-list bytes.
-- @tparam string bytes the node list file's contents (one address per line)
-- @treturn string the addresses in braces, space separated, in file order
function M.nodes_text(bytes)
  return "{" .. table.concat(nodelist.lines(bytes), " ") .. "}"
end

--- The hosts of a registry entry for a person: its `hosts` (the job's Slurm names, compressed:
-- "gb[03-18]", recorded at its registration), else its node list's addresses compressed in
-- numeric order ("10.0.0.[3-18]": an entry registered before `hosts` was recorded).
-- @tparam table e registry entry (`hosts`, `nodes`)
-- @treturn string
function M.entry_hosts(e)
  if type(e.hosts) == "string" and e.hosts ~= "" then return e.hosts end
  return hostlist.text_sorted(nodelist.lines(e.nodes))
end

--- "2h05m" from seconds.
-- @tparam number seconds an age in seconds (negative counts as 0, fractions are dropped)
-- @treturn string the age in its two largest units: `45s`, `3m07s`, `2h05m` or `1d03h`
function M.age_text(seconds)
  seconds = math.max(0, math.floor(seconds))
  if seconds < 60 then return string.format("%ds", seconds) end
  if seconds < 3600 then return string.format("%dm%02ds", seconds // 60, seconds % 60) end
  if seconds < 86400 then return string.format("%dh%02dm", seconds // 3600, seconds % 3600 // 60) end
  return string.format("%dd%02dh", seconds // 86400, seconds % 86400 // 3600)
end

return M
