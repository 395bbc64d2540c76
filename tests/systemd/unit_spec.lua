-- SPDX-License-Identifier: Apache-2.0
-- Specs of the systemd primitives (src/unit.c) against a real systemd user manager.
-- Run: tests/with-systemd busted --cpath='build/lua/?.so' tests/systemd (or tests/run systemd)
-- tests/with-systemd provides the manager in a private mount namespace and exports
-- IMEXGUARD_TEST_BUS (its private socket) and IMEXGUARD_TEST_UNIT_DIR (where units go).
-- The C module is found through IMEXGUARD_BUILD (default: busted's cpath, i.e. build/).

local build = os.getenv("IMEXGUARD_BUILD")
if build then
  package.cpath = build .. "/lua/?.so;" .. package.cpath
end

local BUS = os.getenv("IMEXGUARD_TEST_BUS")
local UNIT_DIR = os.getenv("IMEXGUARD_TEST_UNIT_DIR")
local RUNTIME = os.getenv("XDG_RUNTIME_DIR")
local SRC_UNITS = "tests/systemd/units"
local UNITS = { "ig-sleep.service", "ig-forking.service", "ig-fail.service", "ig-hang.service",
  "ig-usr1.service", "ig-hung.socket", "ig-hung.service", "ig-imex.service", "ig-limit.service",
  "ig-slow.service", "ig-signal.service" }

if not (BUS and UNIT_DIR and RUNTIME) then
  describe("host.unit* against systemd", function()
    pending("needs a systemd user manager: run under tests/with-systemd")
  end)
  return
end

local host = require("imexguard.host")

-- States of ig-hang.service after a stop interrupted its ExecStartPre: the killed control
-- process may leave the unit "failed" (result "signal") instead of "inactive".
local stopped = { inactive = true, failed = true }

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true
end

local function capture(cmd)
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  f:close()
  return out
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local data = f:read("a")
  f:close()
  return data
end

local function copy_file(from, to)
  local data = assert(read_file(from), "cannot read " .. from)
  local f = assert(io.open(to, "w"))
  f:write(data)
  f:close()
end

-- Poll `cond` every 20 ms until it returns a true value or `timeout` seconds pass.
local function wait_for(what, timeout, cond)
  local limit = host.now() + timeout
  while true do
    local v = cond()
    if v then return v end
    if host.now() >= limit then
      error("timed out after " .. timeout .. " s waiting for " .. what, 2)
    end
    host.sleep(0.02)
  end
end

local function pid_file(name)
  local text = read_file(RUNTIME .. "/" .. name)
  return text and tonumber(text:match("^(%d+)"))
end

-- Stop everything this spec may have started, through systemctl (independent of the code under
-- test), and forget the files the units wrote.
local function stop_all()
  sh("systemctl --user stop " .. table.concat(UNITS, " ") .. " >/dev/null 2>&1")
  sh("systemctl --user reset-failed " .. table.concat(UNITS, " ") .. " >/dev/null 2>&1")
  for _, f in ipairs({ "ig-sleep.pid", "ig-forking.pid", "ig-usr1.ready", "ig-usr1.got" }) do
    os.remove(RUNTIME .. "/" .. f)
  end
end

describe("host.unit* against systemd", function()
  setup(function()
    for _, u in ipairs(UNITS) do
      copy_file(SRC_UNITS .. "/" .. u, UNIT_DIR .. "/" .. u)
    end
    assert.is_true(sh("systemctl --user daemon-reload"), "systemctl --user daemon-reload failed")
  end)

  before_each(function()
    host.set_deadline(0)
    assert.is_true(host.unit_set_bus(BUS))
  end)

  after_each(function()
    host.set_deadline(0)
    host.unit_set_bus(BUS)
    stop_all()
  end)

  teardown(stop_all)

  describe("unit()", function()
    it("reports a unit without a unit file as not-found, not as an error", function()
      local p, err, code = host.unit("ig-absent.service", 5)
      assert.is_table(p, tostring(err) .. " " .. tostring(code))
      assert.equal("not-found", p.load_state)
      assert.equal("inactive", p.active_state)
      assert.equal(0, p.main_pid)
      assert.equal("", p.invocation_id)
      assert.equal(0, p.exec_main_start_us)
    end)

    it("reports an inactive unit with every field", function()
      local p = assert(host.unit("ig-sleep.service"))
      assert.equal("loaded", p.load_state)
      assert.equal("disabled", p.unit_file_state)
      assert.equal("inactive", p.active_state)
      assert.equal("dead", p.sub_state)
      assert.equal("success", p.result)
      assert.equal(0, p.main_pid)
      assert.equal("", p.invocation_id)
      assert.equal(0, p.exec_main_start_us)
      assert.equal(0, p.active_enter_us)
      -- Service.NRestarts (systemd 235+): no restart yet; systemctl's own reading agrees
      assert.equal(0, p.n_restarts)
      assert.equal("0", (capture("systemctl --user show -P NRestarts ig-sleep.service"):gsub("%s+$", "")))
    end)

    it("reports an active unit: its main PID, a 32-hex invocation ID, start times near now",
      function()
        assert.is_true(sh("systemctl --user start ig-sleep.service"))
        local pid = wait_for("ig-sleep.pid", 5, function() return pid_file("ig-sleep.pid") end)
        local p = assert(host.unit("ig-sleep.service", 5))
        assert.equal("active", p.active_state)
        assert.equal("running", p.sub_state)
        assert.equal(pid, p.main_pid)
        assert.matches("^" .. string.rep("%x", 32) .. "$", p.invocation_id)
        assert.equal(p.invocation_id, p.invocation_id:lower())
        local want = capture("systemctl --user show -P InvocationID ig-sleep.service"):gsub("%s+$", "")
        assert.equal(want, p.invocation_id)
        local now = host.wallclock()
        assert.is_true(math.abs(p.exec_main_start_us / 1e6 - now) < 30, "exec_main_start_us far from now")
        assert.is_true(math.abs(p.active_enter_us / 1e6 - now) < 30, "active_enter_us far from now")
        assert.is_true(p.exec_main_start_us <= p.active_enter_us + 1000000)
        -- StateChangeTimestamp, the "since" of systemctl status: the start made it active
        assert.is_true(math.abs(p.state_change_us / 1e6 - now) < 30, "state_change_us far from now")
        assert.is_true(p.state_change_us >= p.active_enter_us)
      end)

    it("reports the daemon of a Type=forking unit as main PID", function()
      assert.equal("done", host.unit_job("ig-forking.service", "start", 5))
      local pid = assert(pid_file("ig-forking.pid"))
      local p = assert(host.unit("ig-forking.service"))
      assert.equal("active", p.active_state)
      assert.equal(pid, p.main_pid)
      -- the PID file may be written before the forked child has executed sleep
      wait_for("pid " .. pid .. " to run sleep", 5, function()
        return read_file("/proc/" .. pid .. "/comm") == "sleep\n"
      end)
    end)

    it("reports ExecStart as a list of {path, argv}", function()
      local p = assert(host.unit("ig-imex.service"))
      assert.same({
        { path = "/bin/sh", argv = { "/bin/sh", "-c", "exit 0", "nvidia-imex", "-c", "/opt/site/imex.cfg" } },
        { path = "/bin/true", argv = { "/bin/true", "two words", "" } },
      }, p.exec_start)
      p = assert(host.unit("ig-sleep.service"))
      assert.equal(1, #p.exec_start)
      assert.equal("/bin/sh", p.exec_start[1].path)
      assert.matches("exec /bin/sleep infinity$", p.exec_start[1].argv[3])
      -- no ExecStart: a unit without a unit file, a socket
      assert.same({}, assert(host.unit("ig-absent.service")).exec_start)
      assert.same({}, assert(host.unit("ig-hung.socket")).exec_start)
    end)

    it("reconnects after the manager closed the connection (daemon-reexec)", function()
      assert(host.unit("ig-sleep.service"))
      assert.is_true(sh("systemctl --user daemon-reexec"))
      local p, err = host.unit("ig-sleep.service", 5)
      assert.is_table(p, err)
      assert.equal("loaded", p.load_state)
    end)

    it("waits for a start job queued before daemon-reexec and gets its result", function()
      -- A helper (its own 5 s limit) waits until our start job is queued, then re-executes the
      -- manager while the job's ExecStartPre runs: the connection drops under our wait.
      local helper = [[
        end=$((SECONDS + 5))
        until systemctl --user list-jobs --no-legend --no-pager | grep -q ig-slow; do
          [ "$SECONDS" -ge "$end" ] && exit 1
          sleep 0.02
        done
        systemctl --user daemon-reexec]]
      local pid = tonumber(capture("bash -c '" .. helper .. "' >/dev/null 2>&1 & echo $!"))
      finally(function() sh("kill " .. pid .. " 2>/dev/null") end)
      local t0 = host.now()
      local r, err, code = host.unit_job("ig-slow.service", "start", 10)
      assert.equal("done", r, tostring(err) .. " " .. tostring(code))
      assert.is_true(host.now() - t0 < 8, "the wait did not end with the job")
      assert.equal("active", assert(host.unit("ig-slow.service")).active_state)
      -- the helper did re-execute the manager during the job (its exit status says so)
      wait_for("the helper to exit", 5, function() return not sh("kill -0 " .. pid .. " 2>/dev/null") end)
    end)

    it("queries, starts and stops across daemon-reexec and daemon-reload in a loop", function()
      -- Re-execute and reload the manager back to back (at most 60 s, or until the file .stop
      -- exists; .done appears when the loop has ended), counting the rounds in a file; the calls
      -- below go on until 15 rounds are done.
      local count = RUNTIME .. "/ig-reexec.count"
      os.remove(count)
      os.remove(count .. ".stop")
      os.remove(count .. ".done")
      local loop = [[
        end=$((SECONDS + 60)); n=0
        while [ "$SECONDS" -lt "$end" ] && [ ! -e ]] .. count .. [[.stop ]; do
          systemctl --user daemon-reexec; systemctl --user daemon-reload
          n=$((n + 1)); echo $n > ]] .. count .. [[.tmp; mv ]] .. count .. [[.tmp ]] .. count .. [[

        done
        touch ]] .. count .. ".done"
      capture("bash -c '" .. loop .. "' >/dev/null 2>&1 & echo $!")
      -- end the loop and wait for it, so that the next spec finds the manager idle
      finally(function()
        sh("touch " .. count .. ".stop")
        wait_for("the re-exec loop to end", 30, function() return read_file(count .. ".done") end)
      end)
      local function rounds() return tonumber(read_file(count) or "0") or 0 end
      local failures, i, limit = {}, 0, host.now() + 60
      while rounds() < 15 and host.now() < limit do
        i = i + 1
        local p, err = host.unit("ig-sleep.service", 10)
        if not p then failures[#failures + 1] = i .. ": unit: " .. err end
        local verb = i % 2 == 1 and "start" or "stop"
        local r, jerr = host.unit_job("ig-sleep.service", verb, 10)
        if r ~= "done" then failures[#failures + 1] = i .. ": " .. verb .. ": " .. tostring(jerr) end
      end
      assert.is_true(rounds() >= 15, "the manager re-executed only " .. rounds() .. " times")
      assert.same({}, failures)
    end)

    it("answers from one state of the unit while it restarts under the query", function()
      -- Restart ig-sleep back to back (at most 30 s, or until .stop exists) while querying it: an
      -- answer mixing two runs shows the unit active since before its main process started. (The
      -- properties are separate Properties.Get calls; systemd 252 was not seen to run a job between
      -- them in 3000 tries, and the query's second reading of StateChangeTimestamp makes it sure.)
      local flag = RUNTIME .. "/ig-restart-loop"
      os.remove(flag .. ".stop")
      os.remove(flag .. ".done")
      capture("bash -c 'end=$((SECONDS + 30)); while [ $SECONDS -lt $end ] && [ ! -e " .. flag
        .. ".stop ]; do systemctl --user restart ig-sleep.service; done; touch " .. flag
        .. ".done' >/dev/null 2>&1 & echo $!")
      finally(function()
        sh("touch " .. flag .. ".stop")
        wait_for("the restart loop to end", 30, function() return read_file(flag .. ".done") end)
      end)
      local mixed, active = {}, 0
      for i = 1, 1000 do
        local p = assert(host.unit("ig-sleep.service", 10))
        if p.active_state == "active" then
          active = active + 1
          if p.exec_main_start_us > p.active_enter_us or p.main_pid == 0 or p.invocation_id == "" then
            mixed[#mixed + 1] = string.format("%d: main pid %d started %d, active since %d", i, p.main_pid,
              p.exec_main_start_us, p.active_enter_us)
          end
        end
      end
      assert.is_true(active > 0, "never saw the unit active")
      assert.same({}, mixed)
    end)

    it("never turns a bus failure into a state", function()
      assert.is_true(host.unit_set_bus("unix:path=" .. RUNTIME .. "/no-such-socket"))
      local p, err, code = host.unit("ig-sleep.service", 2)
      assert.is_nil(p)
      assert.equal("bus", code)
      assert.matches("ig%-sleep%.service", err)
      assert.matches("no%-such%-socket", err)
      local r, _, code2 = host.unit_job("ig-sleep.service", "start", 2)
      assert.is_nil(r)
      assert.equal("bus", code2)
      r, _, code2 = host.unit_kill("ig-sleep.service", 15)
      assert.is_nil(r)
      assert.equal("bus", code2)
      r, _, code2 = host.unit_reset_failed("ig-sleep.service")
      assert.is_nil(r)
      assert.equal("bus", code2)
      -- and nothing was started through another route
      assert.is_true(host.unit_set_bus(BUS))
      assert.equal("inactive", assert(host.unit("ig-sleep.service")).active_state)
    end)

    it("returns timeout, not a state, when systemd does not answer", function()
      assert.is_true(sh("systemctl --user start ig-hung.socket"))
      assert.is_true(host.unit_set_bus("unix:path=" .. RUNTIME .. "/ig-hung.sock"))
      local t0 = host.now()
      local p, err, code = host.unit("ig-sleep.service", 0.3)
      local elapsed = host.now() - t0
      assert.is_nil(p)
      assert.equal("timeout", code)
      assert.matches("ig%-sleep%.service", err)
      assert.is_true(elapsed >= 0.25 and elapsed < 1, "took " .. elapsed)
      local r, _
      r, _, code = host.unit_job("ig-sleep.service", "start", 0.3)
      assert.is_nil(r)
      assert.equal("timeout", code)
      host.set_deadline(0.2)
      t0 = host.now()
      p, _, code = host.unit("ig-sleep.service", 5)
      elapsed = host.now() - t0
      assert.is_nil(p)
      assert.equal("deadline", code)
      assert.is_true(elapsed < 1, "took " .. elapsed)
    end)

    it("reports a D-Bus error for an invalid unit name with code bus", function()
      local p, err, code = host.unit("no-suffix")
      assert.is_nil(p)
      assert.equal("bus", code)
      assert.matches("no%-suffix", err)
      assert.matches("InvalidArgs", err)
    end)

    -- The unit's object path is the encoded name, and systemd reads a path ending in "self" or
    -- in a 128-bit id as "the caller's unit" or "the unit of this invocation ID": neither is a
    -- unit name, so neither may answer with another unit's properties.
    it("never answers for another unit when the name is an invocation ID or 'self'", function()
      assert.is_true(sh("systemctl --user start ig-sleep.service"))
      wait_for("ig-sleep.pid", 5, function() return pid_file("ig-sleep.pid") end)
      local id = assert(host.unit("ig-sleep.service", 5)).invocation_id
      assert.matches("^" .. string.rep("%x", 32) .. "$", id)
      local uuid = id:sub(1, 8) .. "-" .. id:sub(9, 12) .. "-" .. id:sub(13, 16) .. "-" .. id:sub(17, 20)
        .. "-" .. id:sub(21)
      for _, name in ipairs { id, uuid, "self" } do
        local p, err, code = host.unit(name, 5)
        assert.is_nil(p, name .. " answered as a unit")
        assert.equal("bus", code)
        assert.matches("InvalidArgs", err)
        assert.is_truthy(err:find(name, 1, true), err)
      end
    end)

    it("is bounded by the run's deadline", function()
      host.set_deadline(1e-6)
      wait_for("the deadline to pass", 1, function() return host.remaining() == 0 end)
      local p, _, code = host.unit("ig-sleep.service", 5)
      assert.is_nil(p)
      assert.equal("deadline", code)
    end)

    it("returns timeout (not a state) when its own timeout is 0", function()
      local p, _, code = host.unit("ig-sleep.service", 0)
      assert.is_nil(p)
      assert.equal("timeout", code)
    end)
  end)

  describe("unit_job()", function()
    it("starts and stops a unit and waits for the job's result", function()
      assert.equal("done", host.unit_job("ig-sleep.service", "start", 5))
      -- the job is finished when the call returns: no polling needed
      assert.equal("active", assert(host.unit("ig-sleep.service")).active_state)
      assert.equal("done", host.unit_job("ig-sleep.service", "stop", 5))
      assert.equal("inactive", assert(host.unit("ig-sleep.service")).active_state)
    end)

    it("restart gives a new invocation ID and a new main process", function()
      assert.equal("done", host.unit_job("ig-sleep.service", "start", 5))
      local before = assert(host.unit("ig-sleep.service"))
      assert.equal("done", host.unit_job("ig-sleep.service", "restart", 5))
      local after = assert(host.unit("ig-sleep.service"))
      assert.equal("active", after.active_state)
      assert.matches("^" .. string.rep("%x", 32) .. "$", after.invocation_id)
      assert.are_not.equal(before.invocation_id, after.invocation_id)
      assert.are_not.equal(before.main_pid, after.main_pid)
      assert.is_true(after.exec_main_start_us >= before.exec_main_start_us)
    end)

    it("try-restart leaves an inactive unit inactive and restarts an active one", function()
      assert.equal("done", host.unit_job("ig-sleep.service", "try-restart", 5))
      assert.equal("inactive", assert(host.unit("ig-sleep.service")).active_state)
      assert.equal("done", host.unit_job("ig-sleep.service", "start", 5))
      local before = assert(host.unit("ig-sleep.service"))
      assert.equal("done", host.unit_job("ig-sleep.service", "try-restart", 5))
      local after = assert(host.unit("ig-sleep.service"))
      assert.equal("active", after.active_state)
      assert.are_not.equal(before.invocation_id, after.invocation_id)
    end)

    it("reports a failing start as failed; reset_failed clears the failed state", function()
      local r, err, code = host.unit_job("ig-fail.service", "start", 5)
      assert.is_nil(r)
      assert.equal("failed", code)
      assert.matches("ig%-fail%.service", err)
      local p = assert(host.unit("ig-fail.service"))
      assert.equal("failed", p.active_state)
      assert.equal("exit-code", p.result)
      assert.is_true(host.unit_reset_failed("ig-fail.service"))
      p = assert(host.unit("ig-fail.service"))
      assert.equal("inactive", p.active_state)
      assert.equal("success", p.result)
    end)

    it("names the unit's Result with a failed job: exit-code, signal", function()
      local r, err, code, info = host.unit_job("ig-fail.service", "start", 5)
      assert.is_nil(r)
      assert.equal("failed", code)
      assert.matches("result 'failed'", err)
      assert.matches("unit Result 'exit%-code'", err)
      assert.same({ job_result = "failed", unit_result = "exit-code", active_state = "failed" }, info)
      r, err, code, info = host.unit_job("ig-signal.service", "start", 5)
      assert.is_nil(r)
      assert.equal("failed", code)
      assert.matches("unit Result 'signal'", err)
      assert.equal("signal", info.unit_result)
    end)

    it("names start-limit-hit in the failing run and how to recover", function()
      assert.equal("done", host.unit_job("ig-limit.service", "restart", 5))
      assert.equal("done", host.unit_job("ig-limit.service", "restart", 5))
      local r, err, code, info = host.unit_job("ig-limit.service", "restart", 5)
      assert.is_nil(r)
      assert.equal("failed", code)
      assert.matches("ig%-limit%.service", err)
      assert.matches("unit Result 'start%-limit%-hit'", err)
      assert.matches("reset%-failed", err)
      assert.equal("start-limit-hit", info.unit_result)
      -- reset-failed clears the start limit: the next start works again
      assert.is_true(host.unit_reset_failed("ig-limit.service", 5))
      assert.equal("done", host.unit_job("ig-limit.service", "start", 5))
    end)

    it("gives no failure table for errors that are not a job result", function()
      local r, _, code, info = host.unit_job("ig-absent.service", "start", 5)
      assert.is_nil(r)
      assert.equal("bus", code)
      assert.is_nil(info)
    end)

    it("returns wait-timeout for a hanging start and leaves the job queued", function()
      local t0 = host.now()
      local r, err, code = host.unit_job("ig-hang.service", "start", 0.5)
      local elapsed = host.now() - t0
      assert.is_nil(r)
      assert.equal("wait-timeout", code)
      assert.matches("may still be running", err)
      assert.is_true(elapsed >= 0.45, "returned early: " .. elapsed)
      assert.is_true(elapsed < 1.2, "returned late: " .. elapsed)
      assert.matches("ig%-hang%.service", capture("systemctl --user list-jobs --no-legend --no-pager"))
      assert.equal("activating", assert(host.unit("ig-hang.service")).active_state)
      -- stopping cancels the start job
      assert.equal("done", host.unit_job("ig-hang.service", "stop", 5))
      assert.is_not_nil(stopped[assert(host.unit("ig-hang.service")).active_state])
      assert.is_nil(capture("systemctl --user list-jobs --no-legend --no-pager"):match("ig%-hang"))
    end)

    it("tells a long start job's progress at info every few seconds (systemd's '(5s / 6s)')", function()
      -- in a process of its own, whose stderr (the log lines of host.so) the spec reads
      local cmd = string.format("lua5.4 -e %q 2>&1", string.format(
        "package.cpath = %q; local h = require('imexguard.host'); assert(h.unit_set_bus(%q)); "
          .. "print('result', h.unit_job('ig-hang.service', 'start', 6.5))", package.cpath, BUS))
      local out = capture(cmd)
      assert.matches("result%s+nil", out)
      local lines = {}
      for l in out:gmatch("waiting for systemd's job [^\n]+") do lines[#lines + 1] = l end
      assert.equal(1, #lines, out)
      assert.matches("^waiting for systemd's job start ig%-hang%.service %(5s / 6%.?%d*s%)$", lines[1])
      assert.equal("done", host.unit_job("ig-hang.service", "stop", 5))
    end)

    it("reports canceled when another client's stop replaces our start job", function()
      -- A helper (its own 5 s limit) waits until our start job is queued, then stops the unit.
      local helper = [[
        end=$((SECONDS + 5))
        until systemctl --user list-jobs --no-legend --no-pager | grep -q ig-hang; do
          [ "$SECONDS" -ge "$end" ] && exit 1
          sleep 0.02
        done
        systemctl --user stop ig-hang.service]]
      local pid = tonumber(capture("sh -c '" .. helper .. "' >/dev/null 2>&1 & echo $!"))
      finally(function() sh("kill " .. pid .. " 2>/dev/null") end)
      local r, err, code = host.unit_job("ig-hang.service", "start", 5)
      assert.is_nil(r)
      assert.equal("canceled", code)
      assert.matches("canceled", err)
      -- the helper's stop job finishes after our start job was canceled
      wait_for("ig-hang.service to stop", 5, function()
        return stopped[assert(host.unit("ig-hang.service")).active_state]
      end)
    end)

    it("stops its wait at the run's deadline with code deadline", function()
      host.set_deadline(0.3)
      local t0 = host.now()
      local r, err, code = host.unit_job("ig-hang.service", "start", 10)
      local elapsed = host.now() - t0
      assert.is_nil(r)
      assert.equal("deadline", code)
      assert.matches("may still be running", err)
      assert.is_true(elapsed < 1, "took " .. elapsed)
    end)

    it("reports an unknown unit as a bus error naming it", function()
      local r, err, code = host.unit_job("ig-absent.service", "start", 5)
      assert.is_nil(r)
      assert.equal("bus", code)
      assert.matches("ig%-absent%.service", err)
      assert.matches("NoSuchUnit", err)
    end)

    it("rejects a bad verb, an empty name and a missing timeout", function()
      assert.has_error(function() host.unit_job("ig-sleep.service", "reload", 1) end)
      assert.has_error(function() host.unit_job("", "start", 1) end)
      assert.has_error(function() host.unit_job("ig-sleep.service", "start") end)
      assert.has_error(function() host.unit_job("ig-sleep.service", "start", -1) end)
      assert.has_error(function() host.unit("") end)
      assert.has_error(function() host.unit_kill("ig-sleep.service", 0) end)
      -- and nothing was started
      assert.equal("inactive", assert(host.unit("ig-sleep.service")).active_state)
    end)
  end)

  describe("unit_reset_failed()", function()
    it("names the unit in a clear error when it is not loaded", function()
      local r, err, code = host.unit_reset_failed("ig-absent.service", 5)
      assert.is_nil(r)
      assert.equal("bus", code)
      assert.matches("^reset%-failed ig%-absent%.service: ", err)
      assert.matches("NoSuchUnit", err)
    end)

    it("is bounded by its timeout and by the run's deadline when systemd does not answer", function()
      assert.is_true(sh("systemctl --user start ig-hung.socket"))
      assert.is_true(host.unit_set_bus("unix:path=" .. RUNTIME .. "/ig-hung.sock"))
      local t0 = host.now()
      local r, err, code = host.unit_reset_failed("ig-sleep.service", 0.3)
      local elapsed = host.now() - t0
      assert.is_nil(r)
      assert.equal("timeout", code)
      assert.matches("reset%-failed ig%-sleep%.service", err)
      assert.is_true(elapsed >= 0.25 and elapsed < 1, "took " .. elapsed)
      host.set_deadline(0.2)
      t0 = host.now()
      r, err, code = host.unit_reset_failed("ig-sleep.service")
      elapsed = host.now() - t0
      assert.is_nil(r)
      assert.equal("deadline", code)
      assert.is_true(elapsed < 1, "took " .. elapsed)
      assert.matches("ig%-sleep%.service", err)
    end)
  end)

  describe("unit_kill()", function()
    it("delivers the signal to the main process", function()
      local usr1 = tonumber(capture("bash -c 'kill -l USR1'"):match("%d+"))
      assert.equal("done", host.unit_job("ig-usr1.service", "start", 5))
      wait_for("ig-usr1.ready", 5, function() return read_file(RUNTIME .. "/ig-usr1.ready") end)
      assert.is_nil(read_file(RUNTIME .. "/ig-usr1.got"))
      assert.is_true(host.unit_kill("ig-usr1.service", usr1))
      local got = wait_for("ig-usr1.got", 5, function()
        local text = read_file(RUNTIME .. "/ig-usr1.got")
        return text and text:find("\n") and text -- a complete line, not a file still being written
      end)
      assert.equal("USR1\n", got)
      -- the trap kept the process alive
      assert.equal("active", assert(host.unit("ig-usr1.service")).active_state)
    end)

    it("reports a unit without a main process as a bus error", function()
      local r, _, code = host.unit_kill("ig-sleep.service", 15)
      assert.is_nil(r)
      assert.equal("bus", code)
    end)
  end)

  describe("unit_start_transient() (src/transient.c: the prolog's watcher)", function()
    -- A shell script as the service's command, writing `text` and its environment's FOO to `file`.
    local function spec(file, text, o)
      o = o or {}
      return { argv = { "/bin/sh", "-c", "echo " .. text .. " $FOO >> " .. file .. "; sleep 30" },
        environment = { "FOO=bar" }, description = "ig test transient", runtime_max = o.runtime_max or 30,
        wait = o.wait }
    end

    local function state(name)
      local p = host.unit(name)
      return p and p.active_state
    end

    it("waited for: systemd runs it with its environment, bounded by RuntimeMaxSec, collected after; a "
      .. "second start of the name is UnitExists", function()
      local file = RUNTIME .. "/ig-tr-1.out"
      os.remove(file)
      assert.is_true(host.unit_start_transient("ig-tr-1.service", spec(file, "one", { runtime_max = 2 })))
      assert.equal("one bar\n", wait_for("ig-tr-1.out", 5, function() return read_file(file) end))
      local r, err, code = host.unit_start_transient("ig-tr-1.service", spec(file, "two"))
      assert.is_nil(r)
      assert.equal("bus", code)
      assert.matches("UnitExists", err)
      -- RuntimeMaxSec ended it; CollectMode=inactive-or-failed unloaded it
      wait_for("ig-tr-1 gone", 10, function()
        local p = host.unit("ig-tr-1.service")
        return p and p.load_state == "not-found" and p
      end)
    end)

    it("sent without waiting from processes that exit at once: every one still runs (their end waits for "
      .. "systemd's answer)", function()
      local file = RUNTIME .. "/ig-tr-many.out"
      os.remove(file)
      local script = RUNTIME .. "/ig-tr.lua"
      local f = assert(io.open(script, "w"))
      f:write(string.format([[
package.cpath = %q
local host = require("imexguard.host")
assert(host.unit_set_bus(%q))
local ok = host.unit_start_transient("ig-tr-m" .. arg[1] .. ".service", { argv = { "/bin/sh", "-c",
  "echo " .. arg[1] .. " >> %s" }, description = "ig test transient", wait = false })
io.write(tostring(ok))
]], package.cpath, BUS, file))
      f:close()
      assert.is_true(sh("for i in $(seq 1 12); do lua5.4 " .. script .. " $i >/dev/null & done; wait"))
      local lines = wait_for("12 lines", 10, function()
        local text = read_file(file) or ""
        local n = select(2, text:gsub("\n", ""))
        return n == 12 and n
      end)
      assert.equal(12, lines)
    end)

    it("refuses misuse: not a service, a relative program, no argv", function()
      local file = RUNTIME .. "/x.out"
      assert.has_error(function() host.unit_start_transient("ig-tr.timer", spec(file, "x")) end)
      assert.has_error(function() host.unit_start_transient("ig-tr-2.service", { argv = { "sh" } }) end)
      assert.has_error(function() host.unit_start_transient("ig-tr-2.service", { argv = {} }) end)
      assert.has_error(function() host.unit_start_transient("ig-tr-2.service", {}) end)
      assert.is_nil(state("ig-tr-2.service") == "active" or nil)
    end)
  end)

  describe("unit_set_bus()", function()
    it("rejects what is not a bus name or address and keeps the old one", function()
      local r, err, code = host.unit_set_bus("bogus")
      assert.is_nil(r)
      assert.equal("EINVAL", code)
      assert.matches("bogus", err)
      assert.is_table(host.unit("ig-sleep.service"))
    end)
  end)
end)
