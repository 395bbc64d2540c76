-- SPDX-License-Identifier: Apache-2.0
-- imexguard.drain: the drain reason of a failed prolog, on the kit's fake host (scontrol scripted).
local testing = require("imexguard.testing")
local drain = require("imexguard.drain")

describe("drain reason", function()
  local function ctx(answer, settings, env)
    local h = testing.host{ scontrol = function() return answer end }
    return testing.ctx{ host = h, settings = settings or { drain_reason = true }, env = env }, h
  end

  it("reason: 'imexguard: OUTCOME: cause', one line", function()
    assert.equal("imexguard: domain-unhealthy: not READY",
      drain.reason("domain-unhealthy", "node n1:\nnot READY\n"))
  end)

  it("reason: cut to MAX_REASON bytes with '...'", function()
    local r = drain.reason("write-failed", string.rep("x", 1000))
    assert.equal(drain.MAX_REASON, #r)
    assert.matches("%.%.%.$", r)
  end)

  it("reason: at most 255 bytes (slurmdbd's tinytext), outcome first, the node's name dropped", function()
    assert.equal(255, drain.MAX_REASON)
    assert.equal("imexguard: conflict: job 102 needs gb[03-18]",
      drain.reason("conflict", "node gb03: job 102 needs gb[03-18]"))
    -- sinfo -R's default 20 columns show the prefix and the outcome
    assert.equal("imexguard: conflict:", drain.reason("conflict", "x"):sub(1, drain.SINFO_WIDTH))
  end)

  it("reason: a long cause is cut at a clause, never inside one", function()
    local clause = "job 101 holds 10.0.0.[3-18] (registered 2h05m ago)"
    local msg = "node gb03: " .. string.rep(clause .. "; ", 8)
    local r = drain.reason("conflict", msg)
    assert.is_true(#r <= drain.MAX_REASON)
    assert.equal("imexguard: conflict: " .. string.rep(clause, 4, "; ") .. "...", r)
    -- no clause boundary: cut at a blank
    r = drain.reason("conflict", string.rep("word ", 80))
    assert.matches("word%.%.%.$", r)
    assert.is_true(#r <= drain.MAX_REASON)
  end)

  it("ours: tells imexguard's reasons from others", function()
    assert.is_true(drain.ours(drain.reason("conflict", "x")))
    assert.is_false(drain.ours("Prolog error"))
    assert.is_false(drain.ours(nil))
  end)

  it("runs scontrol update NodeName=N State=DRAIN Reason=... (no shell), bounded", function()
    local c, h = ctx({ status = 0, stdout = "" })
    assert.is_true(drain.set(c, "domain-unhealthy", "node n1: not READY"))
    assert.same({ "/usr/bin/scontrol", "update", "NodeName=n1", "State=DRAIN",
      "Reason=imexguard: domain-unhealthy: not READY" }, h.runs[1])
    local call
    for _, x in ipairs(h.calls) do if x[1] == "run" then call = x end end
    assert.is_truthy(call)
  end)

  it("an argv prefix setting is used as given", function()
    local c, h = ctx({ status = 0 }, { drain_reason = true, scontrol = { "/opt/slurm/bin/scontrol", "-Q" } })
    drain.set(c, "bad-input", "x")
    assert.same({ "/opt/slurm/bin/scontrol", "-Q", "update" }, { table.unpack(h.runs[1], 1, 3) })
  end)

  it("off by default: nothing runs", function()
    local c, h = ctx({ status = 0 }, {})
    assert.is_false(drain.set(c, "domain-unhealthy", "x"))
    assert.equal(0, #h.runs)
  end)

  it("Slurm does not answer: skipped with a log line, within its own timeout", function()
    local c, h = ctx({ hang = true })
    local t0 = h.now()
    assert.is_false(drain.set(c, "domain-unhealthy", "x"))
    assert.is_true(h.now() - t0 <= drain.TIMEOUT + 0.01)
    local logged = false
    for _, l in ipairs(h.logs) do
      if l[1] == "warning" and l[2]:find("drain reason not set", 1, true) then logged = true end
    end
    assert.is_true(logged)
  end)

  it("scontrol refuses: skipped with its stderr logged", function()
    local c, h = ctx({ status = 1, stderr = "slurm_update error: Invalid node name specified" })
    assert.is_false(drain.set(c, "domain-unhealthy", "x"))
    assert.matches("Invalid node name", h.logs[#h.logs][2])
  end)

  it("no SLURMD_NODENAME: skipped, nothing runs", function()
    local c, h = ctx({ status = 0 }, nil, { SLURM_JOB_ID = "1" })
    assert.is_false(drain.set(c, "domain-unhealthy", "x"))
    assert.equal(0, #h.runs)
  end)

  describe("the grammar of a reason (drain.REGEX, imexguard(8) DRAIN REASONS)", function()
    -- grep -E: the expression as a consumer uses it (POSIX ERE)
    local function ere_matches(re, line)
      local path = os.tmpname()
      local f = assert(io.open(path, "wb"))
      f:write(line, "\n")
      f:close()
      local ok = os.execute("grep -Eq '" .. re:gsub("'", "'\\''") .. "' " .. path)
      os.remove(path)
      return ok == true
    end

    it("matches the reason of every outcome, short and cut, with and without scontrol's [user@time]",
      function()
      local outcomes = require("imexguard.outcomes")
      local long = "node gb03: " .. string.rep("job 101 holds 10.0.0.[3-18] (registered 2h05m ago); ", 12)
      for _, o in ipairs(outcomes.list) do
        for _, cause in ipairs({ "node gb03: not READY", long, "é" .. string.rep("ü", 200) }) do
          local r = drain.reason(o[1], cause)
          assert.is_true(#r <= drain.MAX_REASON, r)
          assert.is_true(ere_matches(drain.REGEX, r), r)
          assert.is_true(ere_matches(drain.REGEX, r .. " [root@2026-12-01T21:09:59]"), r)
          local name, got, cut = drain.parse(r .. " [root@2026-12-01T21:09:59]")
          assert.equal(o[1], name)
          assert.equal(#r - #("imexguard: " .. o[1] .. ": "), #got)
          assert.equal(#cause > 200, cut)
          assert.truthy(utf8.len(r), "a reason is never cut inside a UTF-8 sequence: " .. r)
        end
      end
    end)

    it("does not match another's reason, a prefix alone or a word that is no outcome", function()
      for _, r in ipairs({ "Prolog error", "NHC: check_imexguard:  imexguard: fabric-fault: GPU 2",
        "maintenance [admin@2026-12-01T21:09:59]", "imexguard:", "imexguard: health check exited 9",
        "imexguard: domain-unhealthy", "imexguard: fabric-faulty: x", " imexguard: ok: x" }) do
        assert.is_false(ere_matches(drain.REGEX, r), r)
        assert.is_nil(drain.parse(r), r)
      end
      assert.is_true(ere_matches(drain.REGEX, "imexguard: error: --set: expected KEY=VALUE"))
    end)

    it("contrib/slurm/health.sh tells its own drains apart with the same expression", function()
      local f = assert(io.open("contrib/slurm/health.sh", "rb"))
      local text = f:read("a")
      f:close()
      local re = text:match("\nreason_re='([^'\n]*)'\n")
      assert.equal(drain.REGEX, re)
    end)
  end)
end)
