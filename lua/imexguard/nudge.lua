-- SPDX-License-Identifier: Apache-2.0
--- The nudge of the health wait: never wait on a reconnect back-off.
--
-- After a peer restarts, an IMEX daemon reconnects to it with a back-off: 0.5 s growing to 3 s per
-- NVIDIA's developers, and a 595 daemon was seen waiting 15, 31, 62, 125 s (docs/design.md, "IMEX
-- facts the code relies on", The daemon). `SIGUSR1` (driver 580+) makes a daemon restart its
-- outgoing connections at once, at most once per 5 s, without a new instance, so its peers need no
-- clean-up; NVIDIA's Kubernetes DRA driver sends it to running daemons as a matter of course.
--
-- So while the health wait polls (imexguard.health.wait), a nudger watches each answer: when this
-- node's daemon is READY and its link to a READY peer of the job's domain (want.addrs) has not been
-- CONNECTED for `nudge_after` seconds, it sends SIGUSR1 to the unit's main process through systemd
-- (host.unit_kill: never a restart, never another process), at most once per INTERVAL + SLACK. A
-- dry run (plan, health) records the nudge and sends nothing. A failed unit_kill is a warning and
-- never changes the outcome. The setting `nudge = false` turns it off. The driver counts the
-- nudges sent (imexguard.driver: the final line's `nudges=N`, the metric imexguard_nudges_total).
-- Pure apart from ctx.host (unit_kill, log); the caller passes the times (seconds, host.now()).
local one_line = require("imexguard.text").one_line

local M = {}

--- SIGUSR1's number on x86-64 and arm64 (signal(7); the Linux architectures of GB200 nodes),
-- which host.unit_kill takes as a number.
M.SIGUSR1 = 10
--- Seconds: the daemon restarts its outgoing connections on SIGUSR1 at most once per 5 s (NVIDIA,
-- driver 580+; a signal within that time does nothing).
M.INTERVAL = 5
--- Seconds added to INTERVAL between two nudges of one run: the daemon measures the 5 s between
-- the signals' arrivals, which systemd's delivery can bring closer than between our sends.
M.SLACK = 0.25
--- Seconds: the most the D-Bus call of one nudge may take (within the run's budget); the signal is
-- queued by systemd, nothing waits for the daemon.
M.KILL_TIMEOUT = 2
--- The setting that holds the SIGUSR1 version floor (C48), and its default: NVIDIA documents
-- SIGUSR1 (restart the outgoing connections) from driver r580 (570.158.01 added host names in the
-- node list, which is not the same thing).
M.FLOOR_SETTING = "sigusr1_min_version"
M.DEFAULT_FLOOR = "580"

-- The numbers of a version string ("580.95.05-sim" -> {580, 95, 5}), or nil when it does not start
-- with a digit (nil, "", "N/A").
local function numbers(version)
  if type(version) ~= "string" or not version:match("^%d") then return nil end
  local t = {}
  for part in version:match("^[%d.]+"):gmatch("%d+") do t[#t + 1] = tonumber(part) end
  return t
end

--- May imexguard send SIGUSR1 to a daemon of this version? Every SIGUSR1 imexguard sends (the
-- nudge of the health wait, the watcher) asks this first (case C48 of docs/design.md). SIGUSR1's
-- default action ends a process: a daemon without a handler dies, and its restart is a new
-- instance whose peers drop every import of the running jobs, the very thing a nudge avoids. So a
-- daemon older than the floor is never signalled, and neither is one whose version is unknown (the
-- ctl's `version` missing, "" or not a number: nothing says it has the handler; the cost of not
-- nudging is a wait on the daemon's own reconnect back-off, the cost of a wrong nudge a dead daemon
-- under running jobs).
-- @param version string|nil the daemon's version as the ctl's answer gives it ("580.65.06")
-- @param settings table|nil the run's settings: `sigusr1_min_version` (a version string such as
--   "580" or "570.158.01", compared number by number over the floor's numbers; default "580")
-- @return true, or false and a reason (one line naming the version and the floor)
function M.version_allows(version, settings)
  local floor = settings and settings[M.FLOOR_SETTING] or M.DEFAULT_FLOOR
  local want = numbers(floor) or numbers(M.DEFAULT_FLOOR)
  local have = numbers(version)
  if not have then
    return false, string.format("the daemon's version is unknown (%s): SIGUSR1 might end it (%s %s)",
      version == nil and "the ctl shows none" or string.format("%q", version), M.FLOOR_SETTING, floor)
  end
  for i, min in ipairs(want) do
    local n = have[i] or 0
    if n > min then return true end
    if n < min then
      return false, string.format("the daemon's version %s is older than %s %s: SIGUSR1 might end it",
        version, M.FLOOR_SETTING, floor)
    end
  end
  return true
end

--- A link status that a reconnect cannot clear: the two daemons run different node lists
-- (NVIDIA: until all of them restart with one list).
M.MISMATCH = "NODE_MAP_MISMATCH"

--- The peers this node waits on in one parsed answer: those of `addrs` (the job's nodes, in
-- order) that are READY while this node's link to them is not CONNECTED, when this node is READY.
-- A pair in a node-map mismatch is left out (a reconnect meets the same list again, or a stale
-- block that only a restart of both ends clears: C32, verdict.stale_mismatch, which the prolog
-- answers with a restart, never a nudge) unless the
-- peer shows itself CONNECTED to this node: then it restarted with this node's list and the
-- mismatch is this node's stale view of it, kept until its back-off fires.
-- @param mesh table|nil a parsed mesh (ctl.parse_mesh); nil: none
-- @param addrs table list of the job's addresses
-- @param self_host string this node's address
-- @return list of {host =, status = this node's link status ("absent" when it lists none)}; {}
--   when this node is absent from the answer or not READY
function M.lagging(mesh, addrs, self_host)
  local me = mesh and mesh.by_host and mesh.by_host[self_host]
  if not me or me.status ~= "READY" then return {} end
  local out = {}
  for _, h in ipairs(addrs) do
    local p = mesh.by_host[h]
    if h ~= self_host and p and p.status == "READY" then
      local mine, theirs = me.connections[h], p.connections and p.connections[self_host]
      local mismatch = mine == M.MISMATCH or theirs == M.MISMATCH
      if mine ~= "CONNECTED" and not (mismatch and theirs ~= "CONNECTED") then
        out[#out + 1] = { host = h, status = tostring(mine or "absent") }
      end
    end
  end
  return out
end

local Nudger = {}
Nudger.__index = Nudger

--- A nudger for one health wait.
-- @param ctx table policy context (host, settings: nudge, nudge_after, unit; dry_run; planned)
-- @param want table {addrs, self, names = {[address] = Slurm name} or nil}
-- @param label function|nil label(host, names) -> "host (name)" for the log (default: the host)
-- @return nudger (fields: sent = nudges sent, recorded = nudges a dry run recorded, refused = true
--   once this node's daemon was found too old for SIGUSR1: no nudge in this wait)
function M.new(ctx, want, label)
  local s = ctx.settings
  -- ctx.usr1_at: when this run (or, in slots mode, the state file) last signalled the daemon
  -- (imexguard.steps.slots): the daemon ignores a signal within 5 s of it
  return setmetatable({ ctx = ctx, want = want, label = label or function(h) return tostring(h) end,
    on = s.nudge == true, after = s.nudge_after, since = {}, last = rawget(ctx, "usr1_at"), sent = 0,
    recorded = 0 }, Nudger)
end

--- Look at one answer of the wait at time `now`, and nudge when it is due.
-- @param answer table from health.probe ({mesh =} or {err =, kind =}: an unusable answer
--   changes nothing)
-- @param now number seconds: when the answer came
-- @param timeout number|nil seconds for host.unit_kill (default KILL_TIMEOUT)
-- @return true when it nudged (or a dry run recorded a nudge), else false
function Nudger:observe(answer, now, timeout)
  if not self.on or not answer.mesh then return false end
  local since, waited = {}, {}
  for _, l in ipairs(M.lagging(answer.mesh, self.want.addrs or {}, self.want.self)) do
    since[l.host] = self.since[l.host] or now
    l.lag = now - since[l.host]
    if l.lag >= self.after then waited[#waited + 1] = l end
  end
  self.since = since -- a peer connected again, or no longer READY, starts over
  if #waited == 0 or (self.last and now - self.last < M.INTERVAL + M.SLACK) then return false end
  local version = answer.mesh.by_host[self.want.self].version
  local allowed, why = M.version_allows(version, self.ctx.settings)
  if not allowed then
    if not self.refused then
      self.refused = true
      self.ctx.host.log("info", one_line("no nudge: " .. why))
    end
    return false
  end
  self:send(waited, now, timeout or M.KILL_TIMEOUT)
  return true
end

--- Seconds from `now` until a nudge falls due (the earliest lagging peer reaches nudge_after and
-- the throttle allows one), so that the wait polls then; nil when none is pending.
-- @param now number seconds
-- @return number (> 0) or nil
function Nudger:due(now)
  if not self.on or self.refused then return nil end
  local t
  for _, s in pairs(self.since) do
    if not t or s + self.after < t then t = s + self.after end
  end
  if not t then return nil end
  if self.last then t = math.max(t, self.last + M.INTERVAL + M.SLACK) end
  return math.max(t - now, 0.001)
end

--- Send (or, in a dry run, record) one nudge for the peers `waited` ({host, status, lag}).
function Nudger:send(waited, now, timeout)
  local ctx, h = self.ctx, self.ctx.host
  local unit = ctx.settings.unit
  self.last = now
  local peers = {}
  for i, l in ipairs(waited) do
    peers[i] = string.format("%s %s for %.1f s", self.label(l.host, self.want.names), l.status, l.lag)
  end
  local what = string.format("SIGUSR1 to %s's main process (its daemon restarts its outgoing connections "
    .. "now, no new instance)", unit)
  local why = string.format("this node READY; waited on %d READY peer(s) not connected from this node for "
    .. "%g s or more: %s", #waited, self.after, table.concat(peers, ", "))
  if ctx.dry_run then
    self.recorded = self.recorded + 1
    if type(ctx.planned) == "table" then
      ctx.planned[#ctx.planned + 1] = string.format("unit_kill(%q, %d)", unit, M.SIGUSR1)
    end
    h.log("notice", one_line("dry run: would nudge: " .. what .. "; " .. why))
    return
  end
  local ok, err, code = h.unit_kill(unit, M.SIGUSR1, timeout)
  if ok then
    self.sent = self.sent + 1
    rawset(ctx, "usr1_at", now)
    h.log("info", one_line("nudge: " .. what .. "; " .. why))
  else
    h.log("warning", one_line(string.format("nudge failed: %s: %s (%s); %s", what, tostring(err),
      tostring(code), why)))
  end
end

return M
