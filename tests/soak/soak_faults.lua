-- SPDX-License-Identifier: Apache-2.0
--- Soak check 5: faults of the environment, each on a 2-node simulated domain under the private
-- systemd of tests/with-systemd: a SIGSTOPped systemd manager, a ctl that hangs, a ctl that floods
-- its output, a full (small tmpfs) and a read-only state directory, a settings file that loops and
-- one that allocates without end. Each prolog must end inside its budget (deadline + 2.5 s: the
-- interrupt and the watchdog) with its named outcome, the node list byte for byte unchanged and
-- imexsim@n1 not restarted (same invocation ID); a ctl's processes must be gone afterwards.
local util = require("soakutil")

local M = {}

local GRACE = 2.5 -- seconds past the deadline a run may take (the watchdog fires at 2 s)

-- The pid of the systemd --user manager of this tests/with-systemd (its XDG_RUNTIME_DIR is ours).
local function manager_pid()
  local xdg = assert(os.getenv("XDG_RUNTIME_DIR"), "XDG_RUNTIME_DIR of tests/with-systemd")
  for _, name in ipairs(util.ls("/proc")) do
    if name:match("^%d+$") then
      local cmd = util.read("/proc/" .. name .. "/cmdline") or ""
      local env = util.read("/proc/" .. name .. "/environ") or ""
      if cmd:match("systemd%z%-%-user") and env:find("XDG_RUNTIME_DIR=" .. xdg .. "\0", 1, true) then
        return tonumber(name)
      end
    end
  end
end

-- Run one prolog on n1 and check it. f = {name, job nodelist, outcome (a set), deadline, args,
-- before(d, scratch) (may return a cleanup function)}. Returns true, or false and the failure.
local function fault(d, f, scratch)
  local h = util.host()
  local undo
  local ok, err = pcall(function()
    local list, inv = d:nodes_file("n1"), d:invocation("n1")
    undo = f.before and f.before(d, scratch)
    local t = h.now()
    local r = d:prologs { job = f.job or 7, nodelist = f.nodelist or "n[1-2]", names = { "n1" },
      args = "--deadline " .. f.deadline .. " " .. (f.args or "") }.n1
    local took = h.now() - t
    -- Nothing lost: the state file (and its registry) on the faulty file system still parses.
    local st, serr = require("imexguard.state").load(h, { state_dir = d:dir("n1") .. "/state" })
    if undo then undo(); undo = nil end
    if not st then error("the state file does not parse: " .. tostring(serr), 0) end
    local why
    if not f.outcome[r.outcome or ""] then
      why = "ended " .. tostring(r.outcome)
    elseif took > f.deadline + GRACE then
      why = string.format("took %.1f s, budget %g s", took, f.deadline)
    elseif d:nodes_file("n1") ~= list then
      why = "the node list changed"
    elseif d:invocation("n1") ~= inv then
      why = "imexsim@n1 was restarted"
    elseif f.after then
      why = f.after(d, scratch, r)
    end
    f.took, f.got = took, r.outcome
    if why then error(why .. ": " .. util.show(r.output, 300), 0) end
  end)
  if undo then pcall(undo) end
  d:epilogs { job = f.job or 7, nodelist = f.nodelist or "n[1-2]", names = { "n1" } }
  return ok, err
end

-- A ctl script in scratch that records its pid, then runs `body` (sh).
local function ctl_script(scratch, name, body)
  local path = scratch .. "/" .. name
  util.write(path, "#!/bin/sh\necho $$ >>" .. scratch .. "/" .. name .. ".pids\n" .. body .. "\n")
  os.execute("chmod 0755 " .. util.q(path))
  return path
end

-- Every pid a ctl script recorded is gone (host.run kills the child's process group).
local function ctl_gone(name)
  return function(_, scratch)
    local pids = util.read(scratch .. "/" .. name .. ".pids") or ""
    if pids == "" then return "the ctl never ran" end
    for pid in pids:gmatch("%d+") do
      if util.alive(pid) then return "ctl pid " .. pid .. " outlived the run" end
    end
  end
end

-- A small tmpfs over n1's state directory (this mount namespace only), keeping its files.
local function small_state_fs(d, scratch, opts)
  local dir = d:dir("n1") .. "/state"
  os.execute("cp -a " .. util.q(dir) .. "/. " .. util.q(scratch .. "/state-copy"))
  assert(os.execute("mount -t tmpfs -o size=64k tmpfs " .. util.q(dir)), "mount a tmpfs on " .. dir)
  os.execute("cp -a " .. util.q(scratch .. "/state-copy") .. "/. " .. util.q(dir))
  if opts.fill then os.execute("dd if=/dev/zero of=" .. util.q(dir .. "/fill") .. " bs=4k 2>/dev/null") end
  if opts.readonly then assert(os.execute("mount -o remount,ro " .. util.q(dir)), "remount read-only") end
  return function() os.execute("umount " .. util.q(dir)) end
end

-- Replace n1's settings file by its text plus `extra` (restored by the returned function).
local function settings_plus(extra)
  return function(d)
    local path = d:config("n1")
    local orig = util.read(path)
    util.write(path, orig .. extra .. "\n")
    return function() util.write(path, orig) end
  end
end

local FAULTS = {
  { name = "SIGSTOPped systemd manager", outcome = { ["unit-unknown"] = true }, deadline = 15,
    before = function()
      local pid = assert(manager_pid(), "the systemd --user manager of tests/with-systemd")
      os.execute("kill -STOP " .. pid)
      return function() os.execute("kill -CONT " .. pid) end
    end },
  { name = "ctl that hangs", outcome = { ["ctl-unusable"] = true }, deadline = 10, nodelist = "n1",
    args = "--set ctl_timeout=1 --set health_timeout=3 --set ctl=@SCRATCH@/ctl-hang",
    before = function(_, s) ctl_script(s, "ctl-hang", "exec sleep 600") end, after = ctl_gone("ctl-hang") },
  { name = "ctl that floods its output", outcome = { ["ctl-unusable"] = true }, deadline = 10,
    nodelist = "n1",
    args = "--set ctl_timeout=1 --set health_timeout=3 --set ctl=@SCRATCH@/ctl-flood",
    before = function(_, s) ctl_script(s, "ctl-flood", "exec yes '{\"status\": \"UP\", \"nodes\": '") end,
    after = ctl_gone("ctl-flood") },
  { name = "full state directory (64 KiB tmpfs)", outcome = { ["write-failed"] = true }, deadline = 10,
    before = function(d, s) return small_state_fs(d, s, { fill = true }) end },
  { name = "read-only state directory", outcome = { ["write-failed"] = true }, deadline = 10,
    before = function(d, s) return small_state_fs(d, s, { readonly = true }) end },
  { name = "settings file that loops", outcome = { ["deadline-exceeded"] = true, ["settings-error"] = true },
    deadline = 3, before = settings_plus("while true do end") },
}

--- Run the checks.
-- @param tap function(ok, text)
-- @param long boolean the long form repeats every fault 3 times (short: once)
function M.run(tap, long)
  local simdomain = require("simdomain")
  -- IMEXSIM_MISMATCH_CLEARS=one: the rounds change lists on both nodes at once; the simulator's
  -- default (C32: both ends of a mismatch must restart) would add convergence restarts to them
  local d = simdomain.new { nodes = 2, extra_cfg = simdomain.MISMATCH_CLEARS_ONE }
  local scratch = util.tmpdir("faults")
  local ok, err = pcall(function()
    d:write_node_list("n1", { "n1" })
    d:write_node_list("n2", { "n1", "n2" })
    assert(d:start())
    for _, f in ipairs(FAULTS) do
      if f.args then f.args = f.args:gsub("@SCRATCH@", scratch) end
      local reps, passed, first = long and 3 or 1, 0, nil
      for _ = 1, reps do
        local fok, ferr = fault(d, f, scratch)
        if fok then passed = passed + 1 else first = first or ferr end
      end
      local want = {}
      for k in pairs(f.outcome) do want[#want + 1] = k end
      table.sort(want)
      tap(passed == reps, string.format("fault %s: %d/%d runs ended %s inside the budget of %g s "
        .. "(last: %s in %.1f s), "
        .. "node list unchanged, no restart", f.name, passed, reps, table.concat(want, " or "), f.deadline,
        tostring(f.got), f.took or -1))
      if first then util.note(first) end
    end
    require("soak_memory").run(tap, d, scratch, fault)
  end)
  if not ok then tap(false, "faults: raised: " .. tostring(err)) end
  d:destroy()
  util.rmdir(scratch)
end

return M
