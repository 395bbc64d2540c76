-- SPDX-License-Identifier: Apache-2.0
-- `imexguard rack` under a real slurmctld (tests/e2e/run; both Slurm tiers run it: 22.05 and, in
-- tests/slurm24, 24.11): the prologs of a 4-node job keep each node's digest in its Slurm node's
-- Extra (slurm_extra), written only when it changed; a node's site string in Extra is never
-- overwritten; then a rack with one node restarted by hand under the job, one whose node list differs
-- and one drained: `imexguard rack` on n1 names all three on its first lines, and so does --json.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")
local cjson = require("cjson")
local cluster = require("tests.e2e.cluster")

local q = simdomain.quote
local simroot = cluster.simroot
local sh, sbatch, outcomes = cluster.sh, cluster.sbatch, cluster.outcomes

describe("imexguard rack under a real slurmctld", function()
  local d, job

  setup(function()
    -- one IMEX domain over n[1-4] (the 24.11 tier's topology.conf has two blocks)
    d = cluster.domain{ "health_timeout = 8", "slurm_extra = true", cluster.scontrol_setting(),
      'domain_map = "none"' }
    for _, n in ipairs(cluster.nodes) do d:write_node_list(n, { n }) end
    assert(d:start())
  end)

  teardown(function()
    if job then sh("scancel " .. job) end
    for _, n in ipairs(cluster.nodes) do sh("scontrol update NodeName=" .. n .. " Extra=''") end
    if d then d:stop() end
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  -- imexguard COMMAND ARGS on node N, where slurmd runs (its settings, SLURMD_NODENAME): status, output
  -- (stdout alone with `stdout_only`: a JSON report without the final line)
  local function on(n, command, args, stdout_only)
    local cmd = string.format("%senv SLURMD_NODENAME=%s %s --config %s %s %s", cluster.in_root, n,
      q(d.build .. "/imexguard"), q(simroot .. "/" .. n .. "/imexguard.conf"), args or "", command)
    -- capture adds 2>&1 after the command: the group's stderr goes first
    if stdout_only then cmd = "{ " .. cmd .. " 2>/dev/null; }" end
    local ok, out, status = simdomain.capture(cmd)
    return status or (ok and 0 or 1), out
  end

  -- The digest in node N's Extra, decoded (nil when none).
  local function digest_of(n)
    local _, out = sh("scontrol show node " .. n)
    local extra = out:match("\n%s*Extra=([^\n]*)")
    local ok, t = pcall(cjson.decode, extra or "")
    return ok and type(t) == "table" and t.imexguard or nil, extra
  end

  it("keeps each node's digest in Extra, names a node restarted by hand, one whose list differs and one "
    .. "drained on the first lines of rack", function()
    -- a site's own key in n1's Extra (a JSON object): kept beside the digest
    assert(sh([[scontrol update NodeName=n1 Extra='{"site":"rack 7, slot 1"}']]))
    job = sbatch("-N4", "sleep 300")
    assert.truthy(simdomain.wait_until(function()
      for _, n in ipairs(cluster.nodes) do
        if outcomes(n, job)[1] ~= "ok" then return false end
      end
      return true
    end, 90, 0.2), cluster.log_of("n1"))
    local dg = {}
    assert.truthy(simdomain.wait_until(function()
      for _, n in ipairs(cluster.nodes) do
        dg[n] = digest_of(n)
        if not (dg[n] and dg[n].n == 4) then return false end
      end
      return true
    end, 30, 0.2), "every prolog published its digest")
    for i, n in ipairs(cluster.nodes) do
      assert.are.equal(i - 1, dg[n].p, n)
      assert.are.equal(4, dg[n].n, n)
      assert.are.equal(dg.n1.l, dg[n].l, n)
      assert.are.equal("ok", dg[n].o)
    end
    local _, extra = digest_of("n1")
    assert.are.equal("rack 7, slot 1", cjson.decode(extra).site, extra)
    -- nothing changed: another health run writes nothing (the digest's time stays)
    local before = dg.n1.t
    assert.are.equal(0, (on("n1", "health")))
    assert.are.equal(before, digest_of("n1").t)
    -- n2: its daemon restarted by hand under the job (its health check publishes it)
    assert(d:systemctl("restart", d:unit("n2")))
    assert.truthy(simdomain.wait_until(function() return d:ctl("n2", "-q") == "READY\n" end, 20))
    on("n2", "health")
    -- n3: its node list file now differs from the job's (another order); its daemon runs the old one
    d:write_node_list("n3", { "n4", "n3", "n2", "n1" })
    on("n3", "health")
    -- n4: drained by an admin
    assert(sh("scontrol update NodeName=n4 State=DRAIN Reason='rack e2e: DIMM swap'"))
    local status, out = on("n1", "rack")
    assert.are.equal(0, status, out)
    local head = assert(out:match("^(.-)\nNODE +SLURM"), out)
    local lines = {}
    for l in head:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.matches("^rack: ", lines[1])
    local function named(pattern)
      for i = 2, #lines do if lines[i]:find(pattern) then return i end end
      return nil
    end
    assert.truthy(named("^n2: its daemon %(instance %x+, started [^)]+%) is not the one job " .. job), out)
    assert.truthy(named("^n3: another node list than n%[1%-2,4%]"), out)
    assert.truthy(named("^n3: ID 2 in its daemon's node map, line 1 of its node list file"), out)
    assert.truthy(named("^n4: Slurm [%u_+]*DRAIN[%u_+]*: rack e2e: DIMM swap"), out)
    -- the three are among the first lines (the peers' links to the restarted n2 may still be
    -- coming back: a few "sees differently" lines before them, as the order of findings says)
    assert.is_true(#lines <= 12, "the findings come first: " .. head)
    -- the table: one row per node, this node marked
    for _, n in ipairs(cluster.nodes) do assert.matches("\n" .. n .. "%*? ", out) end
    local _, js = on("n1", "rack", "--json", true)
    local j = cjson.decode(js)
    local kinds = {}
    for _, f in ipairs(j.findings) do kinds[f.node .. " " .. f.kind] = true end
    assert.truthy(kinds["n2 restarted"], js)
    assert.truthy(kinds["n3 list-differs"], js)
    assert.truthy(kinds["n4 slurm"], js)
    assert.are.equal(4, #j.nodes)
    sh("scancel " .. job)
    job = nil
    assert.is_true(cluster.reset(), "the cluster is idle again")
  end)

  it("a node whose Extra is the site's own string keeps it; the prolog says why it publishes nothing",
    function()
    assert(sh("scontrol update NodeName=n3 Extra='owned by the site'"))
    local j = sbatch("-N1 -w n3", "true")
    assert.are.equal("COMPLETED", cluster.wait_job(j))
    local _, extra = digest_of("n3")
    assert.are.equal("owned by the site", extra)
    assert.truthy(cluster.log_of("n3"):find("its Extra is not a JSON object", 1, true), cluster.log_of("n3"))
  end)
end)
