-- SPDX-License-Identifier: Apache-2.0
-- Integration: `imexguard prolog` on a simulated 4-node IMEX domain under a real systemd user manager
-- (tests/with-systemd), with the real 22.05 prolog environment and the simulator's real ctl formats.
-- Case ids (Cnn) are the field cases of docs/design.md, "Field cases".
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")
local cjson = require("cjson")

-- The job ends: Slurm runs the epilog on each of its nodes, which unregisters the job.
local function epilogs(d, job, nodelist, names)
  for n, r in pairs(d:epilogs { job = job, nodelist = nodelist, names = names }) do
    assert.are.equal("ok", r.outcome, n .. ": " .. r.output)
  end
end

local function expected_bytes(d, names)
  local t = {}
  for _, n in ipairs(names) do t[#t + 1] = d.addr[n] end
  return table.concat(t, "\n") .. "\n"
end

describe("prolog on a simulated domain under systemd", function()
  local d
  local all = { "n1", "n2", "n3", "n4" }

  setup(function()
    -- the simulator's old rule for node-map mismatches (either end's restart clears one): these specs
    -- count one restart per stale node; with its default (C32: both ends must restart), prologs
    -- that restart at once may see stale mismatches and restart once more (tests/sim/converge_spec.lua)
    d = simdomain.new { nodes = 4, extra_cfg = simdomain.MISMATCH_CLEARS_ONE }
    d:write_node_list("n1", { "n1", "n2" })
    d:write_node_list("n2", { "n1", "n2" })
    d:write_node_list("n3", { "n3", "n4" })
    d:write_node_list("n4", { "n3", "n4" })
    assert(d:start())
  end)

  teardown(function()
    if d then d:destroy() end
  end)

  it("job 1 on all four nodes: ok everywhere, one restart per stale node, domain UP", function()
    local before = {}
    for _, n in ipairs(all) do before[n] = { inv = d:invocation(n), starts = d:starts(n) } end
    local res = d:prologs { job = 1, nodelist = "n[1-4]" }
    local want = expected_bytes(d, all)
    for _, n in ipairs(all) do
      assert.are.equal(0, res[n].status, n .. ": " .. res[n].output)
      assert.are.equal("ok", res[n].outcome, res[n].output)
      assert.are_not.equal(before[n].inv, d:invocation(n))
      assert.are.equal(before[n].starts + 1, d:starts(n), n .. " restarted exactly once")
      assert.are.equal(want, d:nodes_file(n))
      local dom = assert(d:ctl_json(n))
      assert.are.equal("UP", dom.status)
    end
    epilogs(d, 1, "n[1-4]")
  end)

  it("the same job again: no restart, no rewrite", function()
    local before = {}
    for _, n in ipairs(all) do before[n] = d:invocation(n) end
    local res = d:prologs { job = 2, nodelist = "n[1-4]" }
    for _, n in ipairs(all) do
      assert.are.equal("ok", res[n].outcome, res[n].output)
      assert.are.equal(before[n], d:invocation(n), n .. " must not restart")
    end
    epilogs(d, 2, "n[1-4]")
  end)

  it("four concurrent prologs of one job on one node restart it once", function()
    local s0 = d:starts("n1")
    local pipes = {}
    for i = 1, 4 do
      local env = simdomain.prolog_env(10 + i, "n1", "n1", 1)
      local assign = {}
      for k, v in pairs(env) do assign[#assign + 1] = k .. "=" .. simdomain.quote(v) end
      pipes[i] = io.popen(string.format("env -i %s %s --config %s prolog 2>&1; echo rc=$?",
        table.concat(assign, " "), simdomain.quote(d.build .. "/imexguard"),
        simdomain.quote(d:config("n1"))))
    end
    for i = 1, 4 do
      local out = pipes[i]:read("a")
      pipes[i]:close()
      -- A one-node domain on n1: n1 is healthy alone.
      assert.truthy(out:match("rc=0"), out)
    end
    assert.are.equal(s0 + 1, d:starts("n1"))
    assert.are.equal(expected_bytes(d, { "n1" }), d:nodes_file("n1"))
    for i = 1, 4 do epilogs(d, 10 + i, "n1", { "n1" }) end
  end)

  it("a job on two nodes restarts only those whose list changed", function()
    local before = {}
    for _, n in ipairs(all) do before[n] = d:starts(n) end
    local res = d:prologs { job = 20, nodelist = "n[1-2]", names = { "n1", "n2" } }
    assert.are.equal("ok", res.n1.outcome, res.n1.output)
    assert.are.equal("ok", res.n2.outcome, res.n2.output)
    assert.are.equal(before.n1 + 1, d:starts("n1"))
    assert.are.equal(before.n2 + 1, d:starts("n2"))
    assert.are.equal(before.n3, d:starts("n3"))
    assert.are.equal(before.n4, d:starts("n4"))
    local dom = assert(d:ctl_json("n1"))
    assert.are.equal("UP", dom.status)
  end)

  it("a job with another list while job 20 runs: conflict, nothing rewritten or restarted (C08)", function()
    local file, inv = d:nodes_file("n1"), d:invocation("n1")
    local res = d:prologs { job = 21, nodelist = "n[1,3]", names = { "n1" } }
    assert.are.equal("conflict", res.n1.outcome, res.n1.output)
    assert.truthy(res.n1.output:match("20"), "names job 20: " .. res.n1.output)
    assert.are.equal(file, d:nodes_file("n1"))
    assert.are.equal(inv, d:invocation("n1"))
    epilogs(d, 20, "n[1-2]", { "n1", "n2" })
    assert.are.equal(inv, d:invocation("n1"), "the epilog leaves IMEX running")
    assert.are.equal("active", d:prop("n1", "ActiveState"))
  end)

  it("a prolog environment without a node list: bad-input, nothing rewritten or restarted", function()
    local file, inv = d:nodes_file("n3"), d:invocation("n3")
    local res = d:run_all { job = 30, names = { "n3" }, env = { SLURM_NODELIST = false } }
    assert.are.equal("bad-input", res.n3.outcome, res.n3.output)
    assert.are.equal(2, res.n3.status)
    assert.are.equal(file, d:nodes_file("n3"))
    assert.are.equal(inv, d:invocation("n3"))
  end)

  it("status --json reports the domain", function()
    local p = io.popen(simdomain.quote(d.build .. "/imexguard") .. " --config "
      .. simdomain.quote(d:config("n1")) .. " status --json 2>/dev/null")
    local out = p:read("a")
    p:close()
    local ok, v = pcall(cjson.decode, out)
    assert.is_true(ok, out)
    assert.are.equal("UP", v.status)
    assert.are.equal("ok", v.outcome)
    assert.are.equal(2, #v.nodes) -- the last job ran on n[1-2]
    assert.are.equal(d.addr.n1, v.self)
  end)
end)
