-- SPDX-License-Identifier: Apache-2.0
-- imexguard's shared_nodes policy under Slurm 26.05's two exclusivity variables (C49): the prolog
-- reads SLURM_JOB_OVERSUBSCRIBE (NO, YES, OK) and SLURM_JOB_EXCLUSIVE (NO, NODE, USER, MCS, TOPO),
-- records both in the job's registry entry with what they mean together (asked: node, user, mcs,
-- topo, or no for a node others' jobs may share) and logs it. One-node batch jobs, all submitted at
-- once, in the tier's partition p (OverSubscribe=EXCLUSIVE) and in a partition with
-- OverSubscribe=YES; each job's script copies its node's state file while the job is registered.
-- The values each pair of partition and option gets are tests/slurm24/env_spec.lua's.
local cluster = require("tests.e2e.cluster")
local simdomain = require("simdomain")
local cjson = require("cjson")

describe("Slurm 26.05: shared_nodes records what the job asked for (C49)", function()
  local d

  setup(function()
    local policy = os.getenv("PWD") .. "/policies/shared_nodes.lua"
    d = cluster.domain { "health_timeout = 8", 'domain_map = "none"', string.format("policy = %q", policy) }
    for _, n in ipairs(cluster.nodes) do d:write_node_list(n, { n }) end
    assert(d:start())
    local ok, out = cluster.sh("scontrol create PartitionName=osYES Nodes=n[1-4] OverSubscribe=YES")
    assert(ok, out)
  end)

  teardown(function()
    cluster.sh("scontrol delete PartitionName=osYES")
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("every pair of values is recorded and named in the log", function()
    -- sbatch arguments -> the entry's {shared, exclusive, asked}
    local cases = {
      { "-p p", { "NO", "NODE", "node" } },
      { "-p osYES", { "OK", "NO", "no" } },
      { "-p osYES --oversubscribe", { "YES", "NO", "no" } },
      { "-p osYES --exclusive=user", { "OK", "USER", "user" } },
      { "-p osYES --exclusive=mcs", { "OK", "MCS", "mcs" } },
      { "-p osYES --exclusive=topo", { "OK", "TOPO", "topo" } },
    }
    local script = "cp " .. simdomain.quote(cluster.simroot) .. "/$SLURMD_NODENAME/state/state.json "
      .. simdomain.quote(cluster.root) .. "/state-$SLURM_JOB_ID.json"
    local ids = {}
    for i, c in ipairs(cases) do ids[i] = cluster.sbatch("-N1 " .. c[1], script) end
    local seen, want = {}, {}
    for i, c in ipairs(cases) do
      local id = ids[i]
      assert.are.equal("COMPLETED", cluster.wait_job(id), cluster.job_output(id))
      local text = assert(simdomain.read_file(cluster.root .. "/state-" .. id .. ".json"),
        cluster.job_output(id))
      local st = cjson.decode(text)
      local entry
      for _, e in ipairs(st.jobs or {}) do
        if e.id == id then entry = e end
      end
      assert.is_table(entry, "job " .. id .. " registered")
      seen[i] = c[1] .. ": " .. table.concat({ entry.shared, entry.exclusive or "-", entry.asked }, " ")
      want[i] = c[1] .. ": " .. table.concat(c[2], " ")
      local logs = ""
      for _, n in ipairs(cluster.nodes) do logs = logs .. cluster.log_of(n) end
      assert.matches("job " .. id .. " asked for [^\n]*%(SLURM_JOB_OVERSUBSCRIBE=" .. c[2][1]
        .. ", SLURM_JOB_EXCLUSIVE=" .. c[2][2] .. "%)", logs)
    end
    assert.are.same(want, seen)
  end)
end)
