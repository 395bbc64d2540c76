-- imexguard.drain: the drain reason of a failed prolog, on the kit's fake host (scontrol scripted).
local testing = require "imexguard.testing"
local drain = require "imexguard.drain"

describe("drain reason", function()
  local function ctx(answer, settings, env)
    local h = testing.host{ scontrol = function() return answer end }
    return testing.ctx{ host = h, settings = settings or { drain_reason = true }, env = env }, h
  end

  it("reason: 'imexguard: OUTCOME: cause', one line", function()
    assert.equal("imexguard: domain-unhealthy: node n1: not READY",
      drain.reason("domain-unhealthy", "node n1:\nnot READY\n"))
  end)

  it("reason: cut to MAX_REASON bytes with '...'", function()
    local r = drain.reason("write-failed", string.rep("x", 1000))
    assert.equal(drain.MAX_REASON, #r)
    assert.matches("%.%.%.$", r)
  end)

  it("runs scontrol update NodeName=N State=DRAIN Reason=... (no shell), bounded", function()
    local c, h = ctx({ status = 0, stdout = "" })
    assert.is_true(drain.set(c, "domain-unhealthy", "node n1: not READY"))
    assert.same({ "/usr/bin/scontrol", "update", "NodeName=n1", "State=DRAIN",
      "Reason=imexguard: domain-unhealthy: node n1: not READY" }, h.runs[1])
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
end)
