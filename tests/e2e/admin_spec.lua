-- SPDX-License-Identifier: Apache-2.0
-- An admin's first hour (issue 32) under a real Slurm (tests/e2e/run; the e2e, slurm24 and slurm26
-- tiers all run it):
--   items 2 and C53: `imexguard -t` reads the cluster's slurm.conf as slurmctld does (the values
--     `scontrol show config` reports) and names PrologEpilogTimeout=60 and BatchStartTimeout (10 s,
--     Slurm's default) against the deadline (90 s), and PrologFlags=Alloc without DeferBatch; with
--     --strict they fail;
--   item 4: job A's epilog never ran on n1 and n2 (their registrations put back after it ended)
--     while n3 and n4 moved on to job B's list: `imexguard health` on n1 asks the real slurmctld,
--     which has job A ended, and exits 0; a scontrol that cannot reach slurmctld leaves the verdict,
--     named with the forget hint.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")
local cluster = require("tests.e2e.cluster")

local q = simdomain.quote
local root, simroot = cluster.root, cluster.simroot

describe("issue 32 under a real Slurm", function()
  local d
  local all = { "n1", "n2", "n3", "n4" }

  setup(function()
    -- one IMEX domain over n[1-4] (the 24.11 tier's topology.conf has two blocks)
    d = cluster.domain{ "health_timeout = 8", cluster.scontrol_setting(), 'domain_map = "none"' }
    for _, n in ipairs(all) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  -- imexguard ARGS with node N's settings, run where a person runs it (SLURM_CONF of this cluster)
  -- (in the tier's Debian root when it has one: its scontrol talks to its slurmctld)
  local function imexguard(n, args)
    return cluster.run(string.format("%senv IMEXGUARD_NO_JOURNAL=1 SLURMD_NODENAME=%s SLURM_CONF=%s %s "
      .. "--config %s %s", cluster.in_root, n, q(root .. "/slurm.conf"), q(d.build .. "/imexguard"),
      q(d:config(n)), args))
  end

  it("item 2, C53: -t reads slurm.conf's timeouts and flags as slurmctld has them", function()
    local ok, conf = cluster.sh("scontrol show config")
    assert(ok, conf)
    local pet = assert(conf:match("\nPrologEpilogTimeout%s+= (%d+)"), conf)
    local bst = assert(conf:match("\nBatchStartTimeout%s+= (%d+) sec"), conf)
    local flags = assert(conf:match("\nPrologFlags%s+= (%S+)"), conf)
    local out, err, status = imexguard("n1", "-t")
    assert.are.equal(0, status, out .. err)
    local sc = root .. "/slurm.conf"
    assert.truthy(out:find(sc .. ": info: slurm.conf read (SLURM_CONF)", 1, true), out)
    assert.truthy(out:find(":" .. "%d+: warning: PrologEpilogTimeout=" .. pet .. " is not above imexguard's "
      .. "deadline = 90 s"), out)
    -- the tier's slurm.conf does not set BatchStartTimeout: Slurm's default, which slurmctld reports
    assert.truthy(out:find(sc .. ": warning: BatchStartTimeout (not set: Slurm's default, " .. bst
      .. " s) is not above imexguard's deadline = 90 s", 1, true), out)
    if not flags:lower():find("deferbatch", 1, true) then
      assert.truthy(out:find("warning: PrologFlags=Alloc: without DeferBatch", 1, true), out)
    end
    out, err, status = imexguard("n1", "-t --strict")
    assert.are.equal(2, status, out .. err)
    assert.truthy(out:find("\nimexguard: bad%-input: [^\n]*; warnings fail with %-%-strict\n$"), out)
  end)

  it("item 4: a lost epilog: health asks slurmctld, which has the job ended: exit 0, no drain", function()
    local saved = {}
    -- job A on the four nodes; its registrations on n1 and n2, as the prolog left them
    local a = cluster.sbatch("-N4 -w n[1-4]", "sleep 4")
    assert.truthy(simdomain.wait_until(function()
      for _, n in ipairs({ "n1", "n2" }) do
        local st = simdomain.read_file(simroot .. "/" .. n .. "/state/state.json") or ""
        if not st:find('"id":"' .. a .. '"', 1, true) then return false end
        saved[n] = st
      end
      return true
    end, 60, 0.1), "job " .. a .. " never registered on n1 and n2")
    assert.are.equal("COMPLETED", cluster.wait_job(a))
    -- its epilog "never ran" on n1 and n2
    for n, st in pairs(saved) do simdomain.write_file(simroot .. "/" .. n .. "/state/state.json", st) end
    -- n3 and n4 move on to job B's list
    local b = cluster.sbatch("-N2 -w n[3-4]", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(b))
    assert.truthy(simdomain.wait_until(function()
      local t = d:ctl_json("n1")
      return t and t.nodes["2"] and t.nodes["2"].connections["3"]
        and t.nodes["2"].connections["3"].status == "CONNECTED"
        and t.nodes["0"].connections["2"].status ~= "CONNECTED"
    end, 20), "n3 and n4 did not move on")
    local out, err, status = imexguard("n1", "health")
    assert.are.equal(0, status, out .. err)
    assert.truthy(err:find("job " .. a .. " (JobState=COMPLETED) ended, its epilog never ran here", 1, true)
      or err:find("job " .. a .. " (Slurm no longer knows it", 1, true), err)
    assert.truthy(err:find("imexguard forget " .. a, 1, true), err)
    -- slurmctld out of reach (a port nobody listens on): the verdict stands, with the forget hint
    out, err, status = imexguard("n1", "--set 'scontrol=/usr/bin/env SLURM_CONF=" .. root
      .. "/no-such.conf /usr/bin/scontrol' health")
    assert.are.equal(9, status, out .. err)
    assert.truthy(out:find("^imexguard: domain%-unhealthy: [^\n]*imexguard forget " .. a), out)
  end)
end)
