-- SPDX-License-Identifier: Apache-2.0
-- imexguard.barrier (`imexguard wait [--job N] [--timeout S]`) on the kit's fake host: the job's
-- nodes from this node's registry (else, for the environment's own job, its SLURM_JOB_NODELIST),
-- every ordered pair CONNECTED, the missing links named after the timeout, nothing changed.
local testing = require("imexguard.testing")
local barrier = require("imexguard.barrier")
local ctl = require("imexguard.ctl")
local H = require("default_policy_helper")

local A = { "10.0.0.1", "10.0.0.2", "10.0.0.3" }

local function run(hopts, o)
  local h = testing.host(hopts)
  o = o or {}
  o.command = "wait"
  o.env = o.env or H.env("n[1-3]", { SLURM_JOB_ID = "100" })
  local outcome, message, report, ctx = H.run(h, o)
  return outcome, message, report, h, ctx
end

-- n3's own link to n1 is down (n3 -> n1 INVALID), every node READY
local function one_way()
  return { mesh = { nodes = { { host = A[1] }, { host = A[2] },
    { host = A[3], connections = { [A[1]] = "INVALID" } } } } }
end

describe("imexguard.barrier (wait)", function()
  it("missing: every ordered pair, each node's own view; absent and not READY nodes named", function()
    local mesh = assert(ctl.parse_mesh(testing.render_mesh(one_way().mesh), 0))
    local list, links = barrier.missing(mesh, A)
    assert.same({ "10.0.0.3 -> 10.0.0.1 INVALID" }, list)
    assert.equal(6, links)
    mesh = assert(ctl.parse_mesh(testing.render_mesh({ nodes = { { host = A[1] },
      { host = A[2], status = "UNAVAILABLE" } } }), 0))
    list = barrier.missing(mesh, A)
    assert.same({ "10.0.0.1 -> 10.0.0.2 INVALID", "10.0.0.1 -> 10.0.0.3 not listed", "10.0.0.2 UNAVAILABLE",
      "10.0.0.3 absent from the daemon's node map" }, list)
  end)

  it("every link CONNECTED: ok at once, naming the nodes' source (the registry)", function()
    local o, m, report, h = run({ files = H.registered(A), ctl = { testing.up(A) } }, { job_given = true })
    assert.equal("ok", o)
    assert.matches("^job 100: 3 nodes of this node's IMEX domain, every link CONNECTED %(6 links%)", m)
    assert.matches("the registry", m)
    assert.equal(m .. "\n", report)
    H.assert_untouched(h)
  end)

  it("a link comes up during the wait: ok once it is CONNECTED, polled at the health wait's pace", function()
    local o, m, _, h = run({ files = H.registered(A), ctl = { one_way(), one_way(), testing.up(A) } })
    assert.equal("ok", o, m)
    assert.equal(3, #h.runs_of("nvidia-imex-ctl"))
  end)

  it("a link that stays down: domain-unhealthy after --timeout, naming it", function()
    local o, m, _, h = run({ files = H.registered(A), ctl = function() return one_way() end },
      { timeout = 2 })
    assert.equal("domain-unhealthy", o)
    assert.matches("job 100: not every node of this node's IMEX domain is CONNECTED to every other after "
      .. "2 s", m)
    assert.matches(": 10%.0%.0%.3 %-> 10%.0%.0%.1 INVALID$", m)
    assert.is_true(h.now() - 1000 >= 2 and h.now() - 1000 < 3)
    H.assert_untouched(h)
  end)

  it("--job N not registered here: bad-input, nothing waited for", function()
    local o, m = run({ files = H.registered(A), ctl = { testing.up(A) } },
      { env = H.env("n[1-3]", { SLURM_JOB_ID = "555" }), job_given = true })
    assert.equal("bad-input", o)
    assert.matches("job 555 is not registered here", m)
  end)

  it("the environment's own job, not registered (the static policy keeps no registry): its "
    .. "SLURM_JOB_NODELIST in this node's domain", function()
    local o, m = run({ ctl = { testing.up(A) }, resolve = { n3 = { A[3] } } },
      { env = H.env("n[1-3]", { SLURM_JOB_ID = "555" }) })
    assert.equal("ok", o, m)
    assert.matches("SLURM_JOB_NODELIST", m)
  end)

  it("a node where IMEX does not apply: skipped, exit 0", function()
    local o = run({ unit = false })
    assert.equal("skipped", o)
  end)
end)
