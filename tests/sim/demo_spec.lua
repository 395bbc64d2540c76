-- SPDX-License-Identifier: Apache-2.0
-- The demo (contrib/demo.sh, `make demo`): without --keep it leaves nothing running and nothing on
-- disk; with --keep (`make demo KEEP=1`) the rack stays up in the background until its PID is
-- killed, contrib/demo/node runs commands on one node, and contrib/slurm/health.sh drains a broken
-- node with imexguard's reason and resumes it once fixed, through the demo's stand-in scontrol
-- (contrib/demo/scontrol), leaving an admin's reason alone. The demo starts its own
-- tests/with-systemd (a nested namespace and manager of its own).
local H = require("helpers")
local q = H.q

--- PIDs of the processes whose command line contains `text`.
local function processes_with(text)
  local found = {}
  for pid in H.sh("ls /proc"):gmatch("%d+") do
    local cmd = (H.read("/proc/" .. pid .. "/cmdline") or ""):gsub("%z", " ")
    if cmd:find(text, 1, true) and tonumber(pid) ~= H.mypid() then found[#found + 1] = pid .. " " .. cmd end
  end
  return found
end

local function run(cmd)
  local out = H.sh(cmd .. " 2>&1; echo rc=$?")
  return tonumber(out:match("rc=(%d+)$")), out
end

describe("the demo", function()
  it("without --keep: stops and removes everything it started", function()
    local rc, out = run("contrib/demo.sh --nodes=3")
    assert.equal(0, rc, out)
    -- issue 32 item 10: the status step is node n1's, not this machine's host name; its result
    -- once (no final log line among it)
    local step = assert(out:match("domain status %(imexguard status on n1%):\n(.-)\n\n"), out)
    assert.matches("^node +n1\n", step)
    assert.not_matches("outcome=", step, 1, true)
    local root = assert(out:match("node files, settings and daemon logs: (%S+)"), out)
    assert.is_nil(H.read(root .. "/n1/config.cfg"), "the demo's files are left in " .. root)
    assert.same({}, processes_with(root))
  end)

  describe("--keep", function()
    local dir, pid, env

    setup(function()
      dir = H.tmpdir()
      env = "IMEXGUARD_DEMO_DIR=" .. q(dir) .. " "
      local rc, out = run(env .. "contrib/demo.sh --keep --nodes=3")
      assert.equal(0, rc, out)
      pid = tonumber((assert(out:match("Stop the rack: kill (%d+)"), out)))
      assert.equal(pid, tonumber(H.read(dir .. "/pid")))
    end)

    teardown(function()
      -- the rack is stopped whatever failed (its PID file when the output was not as expected)
      pid = pid or tonumber(H.read(dir .. "/pid") or "")
      if pid and H.alive(pid) then os.execute("kill " .. pid) end
      if pid then H.wait_until(function() return not H.alive(pid) end, 20) end
      H.rmdir(dir)
    end)

    local function node(args)
      return run(env .. "contrib/demo/node " .. args)
    end

    local function show(n)
      local _, out = run(env .. "contrib/demo/scontrol show node " .. n)
      return out:match("State=(%S+)"), out:match("Reason=([^\n]*)")
    end

    it("the rack stays up: a second one is refused, commands run on one node", function()
      assert.is_true(H.alive(pid))
      local rc, out = run(env .. "contrib/demo.sh --keep --nodes=3")
      assert.equal(1, rc)
      assert.matches("already running %(PID " .. pid .. "%)", out)
      rc, out = node("n2 status")
      assert.equal(0, rc, out)
      assert.matches("\nIMEX domain UP at ", out, 1, true)
      rc, out = node("n4 status")
      assert.equal(2, rc)
      assert.matches("no node 'n4' in the demo rack (nodes: n1 n2 n3)", out, 1, true)
    end)

    it("issue 32 item 10: an empty SLURM_JOB_NODELIST is bad input, never the kept job's nodes", function()
      local rc, out = node("n1 registrations -q")
      assert.equal(0, rc, out)
      local before = out
      rc, out = run(env .. "SLURM_JOB_ID=11 SLURM_JOB_NODELIST= contrib/demo/node n1 prolog")
      assert.equal(2, rc, out)
      assert.matches("bad-input", out, 1, true)
      rc, out = run(env .. "SLURM_JOB_ID=12 contrib/demo/node n1 plan")
      assert.equal(2, rc, out) -- a job id alone: no node list, not job 4's
      local _, again = node("n1 registrations -q")
      assert.equal(before, again)
      assert.not_matches("11", again, 1, true)
    end)

    it("health.sh drains a broken node with imexguard's reason and resumes it once fixed", function()
      assert.equal(0, (node("n2 health.sh")))
      assert.same({ "IDLE" }, { show("n2") })
      assert.equal(0, (node("n2 systemctl stop")))
      local rc, out = node("n2 health.sh")
      assert.are_not.equal(0, rc, out)
      local state, reason = show("n2")
      assert.equal("IDLE+DRAIN", state)
      assert.matches("^imexguard: [%w-]+: ", reason)
      assert.equal(0, (node("n2 systemctl start")))
      assert.truthy(H.wait_until(function() return node("n2 health") == 0 end, 30, 0.2))
      rc, out = node("n2 health.sh")
      assert.equal(0, rc, out)
      assert.matches("healthy again: resuming it", out, 1, true)
      assert.same({ "IDLE" }, { show("n2") })
    end)

    it("health.sh leaves a node drained for another reason as it is", function()
      assert.equal(0, (run(env .. "contrib/demo/scontrol update NodeName=n1 State=DRAIN Reason=maintenance")))
      assert.equal(0, (node("n1 health.sh")))
      local state, reason = show("n1")
      assert.equal("IDLE+DRAIN", state)
      assert.matches("^maintenance %[", reason)
    end)

    it("kill PID stops the rack: no daemon, no manager left", function()
      local nspid = tonumber(H.read(dir .. "/env"):match("DEMO_NSPID='(%d+)'"))
      assert.is_true(H.alive(nspid))
      os.execute("kill " .. pid)
      assert.truthy(H.wait_until(function() return not H.alive(pid) end, 20, 0.05))
      assert.is_false(H.alive(nspid))
      assert.same({}, processes_with(dir .. "/rack"))
      local rc, out = node("n1 status")
      assert.equal(2, rc)
      assert.matches("the demo rack has stopped", out, 1, true)
    end)
  end)
end)
