-- SPDX-License-Identifier: Apache-2.0
-- The environment Slurm gives the prolog and the health check, as the real slurmd of the tier sets
-- it (Slurm 24.11 in tests/slurm24/run, 26.05 in tests/slurm26/run, which runs these specs too):
-- the variables of the fixtures tests/fixtures/slurm/prolog-env-RELEASE.txt and
-- health-env-RELEASE.txt, and every value of the job's exclusivity that imexguard may read, for each
-- sbatch option in partitions of each OverSubscribe= kind (C49). 24.11 has SLURM_JOB_OVERSUBSCRIBE
-- alone, where NO means a whole node and USER, MCS and TOPO are values; 26.05 narrows it to NO, YES
-- and OK, and adds SLURM_JOB_EXCLUSIVE (NO, NODE, USER, MCS, TOPO): NO no longer means exclusive.
-- IMEXGUARD_UPDATE_FIXTURES=1 writes the fixtures from this run (cluster.fixture).
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")

-- The sbatch options, in the order of each row below.
local OPTIONS = { "", "--exclusive", "--exclusive=user", "--exclusive=mcs", "--exclusive=topo",
  "--oversubscribe" }

-- The partitions made here (the tier's p has OverSubscribe=EXCLUSIVE): name -> scontrol create's
-- settings. 26.05's partitions also take Exclusive=NO|NODE|USER|TOPO.
local PARTITIONS = {
  osNO = "OverSubscribe=NO", osYES = "OverSubscribe=YES", osFORCE = "OverSubscribe=FORCE",
  exUSER = "Exclusive=USER", exTOPO = "Exclusive=TOPO",
}

-- Release -> partition -> for each option, the values of SLURM_JOB_OVERSUBSCRIBE and
-- SLURM_JOB_EXCLUSIVE ("-": not set), as seen here.
local EXPECT = {
  ["24.11"] = {
    osNO = { "OK -", "NO -", "USER -", "MCS -", "TOPO -", "YES -" },
    osYES = { "OK -", "NO -", "USER -", "MCS -", "TOPO -", "YES -" },
    osFORCE = { "YES -", "YES -", "YES -", "YES -", "YES -", "YES -" },
    p = { "NO -", "NO -", "NO -", "NO -", "NO -", "NO -" },
  },
  ["26.05"] = {
    osNO = { "NO NO", "NO NODE", "NO USER", "NO MCS", "NO TOPO", "YES NO" },
    osYES = { "OK NO", "NO NODE", "OK USER", "OK MCS", "OK TOPO", "YES NO" },
    osFORCE = { "YES NO", "YES NO", "YES NO", "YES NO", "YES NO", "YES NO" },
    p = { "NO NODE", "NO NODE", "NO NODE", "NO NODE", "NO TOPO", "NO NODE" },
    exUSER = { "NO USER", "NO NODE", "NO USER", "NO MCS", "NO TOPO", "YES NO" },
    exTOPO = { "NO TOPO", "NO TOPO", "NO TOPO", "NO TOPO", "NO TOPO", "NO TOPO" },
  },
}

-- The full version of the tier's Slurm ("26.05.5"), for the fixtures' headers.
local function version()
  local _, out = cluster.sh("scontrol --version")
  return out:match("(%d+%.%d+%.%d+)") or cluster.slurm
end

-- The names of an environment's variables, sorted, without PWD (the shell that saved it adds it).
local function names(env)
  local t = {}
  for k in pairs(env) do
    if k ~= "PWD" then t[#t + 1] = k end
  end
  table.sort(t)
  return t
end

-- `env` output sorted, without PWD: the fixtures' body.
local function sorted_env(text)
  local t = {}
  for line in text:gmatch("[^\n]+") do
    if not line:match("^PWD=") then t[#t + 1] = line end
  end
  table.sort(t)
  return table.concat(t, "\n") .. "\n"
end

describe("Slurm " .. cluster.slurm .. "'s prolog and health check environment", function()
  local d
  local expect = EXPECT[cluster.slurm]
  local made = {}

  setup(function()
    assert.is_table(expect, "no expected values for Slurm " .. cluster.slurm)
    -- every node's daemon runs its own list: one-node jobs change nothing
    d = cluster.domain { "health_timeout = 8", 'domain_map = "none"' }
    for _, n in ipairs(cluster.nodes) do d:write_node_list(n, { n }) end
    assert(d:start())
    for part in pairs(expect) do
      if PARTITIONS[part] then
        local ok, out = cluster.sh("scontrol create PartitionName=" .. part .. " Nodes=n[1-4] "
          .. PARTITIONS[part])
        assert(ok, out)
        made[#made + 1] = part
      end
    end
  end)

  teardown(function()
    for _, p in ipairs(made) do cluster.sh("scontrol delete PartitionName=" .. p) end
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("a 4-node job's prolog gets the fixture's variables", function()
    local id = cluster.sbatch("-N4", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id))
    local text = assert(cluster.env_text("prolog", "n2", id), "the prolog's environment on n2")
    local fixture = cluster.fixture("prolog-env-" .. cluster.slurm .. ".txt", sorted_env(text), string.format(
      "# Environment of a Prolog run by slurmd %s (PrologFlags=Alloc) for a 4-node batch job in a\n"
      .. "# partition with OverSubscribe=EXCLUSIVE, captured on node n2 of a test cluster (slurmctld and\n"
      .. "# four slurmd in one Debian root; tests/e2e/run). PWD, which the shell that saved it adds, left\n"
      .. "# out. Every value of SLURM_JOB_OVERSUBSCRIBE%s: tests/slurm24/env_spec.lua.\n",
      version(), cluster.slurm >= "26.05" and " and SLURM_JOB_EXCLUSIVE" or ""))
    local env = cluster.parse_env(text)
    assert.are.same(names(cluster.parse_env(fixture)), names(env))
    -- both node list variables, and the configuration slurmd read
    assert.are.equal("n[1-4]", env.SLURM_JOB_NODELIST)
    assert.are.equal("n[1-4]", env.SLURM_NODELIST)
    assert.are.equal(cluster.root .. "/slurm.conf", env.SLURM_CONF)
    -- a configless node names its conf-cache
    local cached = cluster.parse_env(cluster.env_text("prolog", "n3", id))
    assert.are.equal(cluster.root .. "/spool/n3/conf-cache/slurm.conf", cached.SLURM_CONF)
  end)

  -- (the partitions of this release)
  for _, part in ipairs { "osNO", "osYES", "osFORCE", "p", "exUSER", "exTOPO" } do
    local settings = PARTITIONS[part] or "OverSubscribe=EXCLUSIVE"
    if (expect or {})[part] then
      it("the job's exclusivity in a partition with " .. settings .. " for each sbatch option", function()
        -- one one-node job per option, all submitted at once (on whichever nodes Slurm picks)
        local ids, seen, want = {}, {}, {}
        for i, opt in ipairs(OPTIONS) do ids[i] = cluster.sbatch("-p " .. part .. " -N1 " .. opt, "true") end
        for i, opt in ipairs(OPTIONS) do
          assert.are.equal("COMPLETED", cluster.wait_job(ids[i]), cluster.job_output(ids[i]))
          local text
          for _, n in ipairs(cluster.nodes) do text = text or cluster.env_text("prolog", n, ids[i]) end
          local env = cluster.parse_env(text)
          local label = (opt == "" and "(none)" or opt) .. ": "
          seen[i] = label .. (env.SLURM_JOB_OVERSUBSCRIBE or "-") .. " " .. (env.SLURM_JOB_EXCLUSIVE or "-")
          want[i] = label .. expect[part][i]
        end
        assert.are.same(want, seen)
      end)
    end
  end

  it("the health check gets SLURMD_NODENAME, and the controller's verdict from 26.05", function()
    local path = cluster.logdir .. "/env-health-n1.txt"
    os.remove(path)
    -- (`env` writes it at once, after the shell emptied it: wait for the node's name in it)
    assert.truthy(simdomain.wait_until(function()
      return (cluster.health_env_text("n1") or ""):match("SLURMD_NODENAME=n1\n")
    end, 30, 0.2), "a health check run on n1")
    local text = cluster.health_env_text("n1")
    local header = string.format(
      "# Environment of the HealthCheckProgram run by slurmd %s on node n1 (idle) of a test\n"
      .. "# cluster (tests/e2e/run; HealthCheckInterval=2, HealthCheckNodeState=ANY%s).\n"
      .. "# PWD, which the shell that saved it adds, left out. Nothing else: no SLURM_CONF, no job.\n",
      version(), cluster.slurm >= "26.05" and ",\n# SlurmctldParameters=health_check_report" or "")
    local fixture = cluster.fixture("health-env-" .. cluster.slurm .. ".txt", sorted_env(text), header)
    local env = cluster.parse_env(text)
    assert.are.same(names(cluster.parse_env(fixture)), names(env))
    assert.are.equal("n1", env.SLURMD_NODENAME)
    assert.are.equal(cluster.slurm >= "26.05" and "yes" or nil, env.SLURM_NODE_IS_HEALTHY)
  end)
end)
