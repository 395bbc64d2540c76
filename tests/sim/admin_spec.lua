-- SPDX-License-Identifier: Apache-2.0
-- An admin's first hour (issue 32) under the real systemd user manager with the simulator
-- (tests/with-systemd; contrib/simdomain.lua, one imexsim@NODE.service per node):
--   item 1: the domain map's file breaks after it worked: the last map that parsed stands in, loudly,
--           for the nodes it places as the file does; a node without that record fails with the
--           file's error; -t names the file and line;
--   item 4: a lost epilog: job 4's epilog never ran on n1 and n2 while n3 and n4 moved on to job 10's
--           list; Slurm (a stand-in scontrol) is asked once: an ended job is dropped, no drain; a
--           Slurm that cannot answer leaves the verdict, named with the forget hint;
--   item 5: health right after this node's daemon restarted waits for its peers within its budget:
--           no drain.
-- Every job's prologs run at once on its nodes (Slurm's order: simdomain's run_all); every wait
-- polls with a deadline; each domain is destroyed in after_each, its processes stopped by PID.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

describe("issue 32 under systemd", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  local function all_ok(res, what)
    for name, r in pairs(res) do
      assert.are.equal(0, r.status, (what or "") .. " " .. name .. ": " .. r.output)
    end
  end

  local function up(name, timeout)
    return simdomain.wait_until(function()
      local t = d:ctl_json(name)
      return t and t.status == "UP"
    end, timeout or 30)
  end

  -- A stand-in scontrol for `show job`: prints the file ANSWER beside it and exits with the
  -- number in RC (what Slurm 22.05's scontrol prints is in lua/imexguard/lostjobs.lua).
  local function fake_scontrol(root)
    local path = root .. "/scontrol"
    simdomain.write_file(path, "#!/bin/sh\necho \"$@\" >> \"$0.calls\"\ncat \"$0.answer\"\nexit "
      .. "$(cat \"$0.rc\")\n")
    os.execute("chmod 0755 " .. simdomain.quote(path))
    return path
  end
  local function answer(path, text, rc)
    simdomain.write_file(path .. ".answer", text)
    simdomain.write_file(path .. ".rc", tostring(rc))
    os.remove(path .. ".calls")
  end

  describe("item 4: a lost epilog", function()
    local scontrol
    -- n1..n4 run job 4; its epilog runs on n3 and n4 only; job 10 then runs on n3 and n4
    local function lost_epilog()
      d = simdomain.new{ nodes = 4, extra_cfg = simdomain.FAST_RECONNECT }
      scontrol = fake_scontrol(d.root)
      for _, n in ipairs(d.names) do
        simdomain.write_file(d:config(n), simdomain.read_file(d:config(n)) .. string.format("scontrol = %q\n",
          scontrol))
        d:write_node_list(n, d.names)
      end
      assert(d:start())
      all_ok(d:run_all{ job = 4, nodelist = "n[1-4]" }, "job 4")
      all_ok(d:run_all{ job = 4, nodelist = "n[1-4]", names = { "n3", "n4" }, command = "epilog" })
      all_ok(d:run_all{ job = 10, nodelist = "n[3-4]", names = { "n3", "n4" } }, "job 10")
      assert.truthy(simdomain.wait_until(function()
        local t = d:ctl_json("n1")
        return t and t.nodes["0"].connections["2"].status ~= "CONNECTED"
          and t.nodes["2"].connections["3"].status == "CONNECTED"
      end, 10), "n3 and n4 never moved on")
    end

    it("Slurm no longer knows job 4: health on n1 and n2 exits 0, the registration dropped with a log line",
      function()
        lost_epilog()
        answer(scontrol, "slurm_load_jobs error: Invalid job id specified\n", 1)
        local res = d:run_all{ job = 4, nodelist = "n[1-2]", names = { "n1", "n2" }, command = "health" }
        for _, n in ipairs({ "n1", "n2" }) do
          assert.are.equal(0, res[n].status, n .. ": " .. res[n].output)
          assert.truthy(res[n].output:find("job 4 (Slurm no longer knows it (Invalid job id)) "
            .. "ended", 1, true),
            res[n].output)
          assert.truthy(res[n].output:find("imexguard forget 4", 1, true), res[n].output)
          assert.truthy(res[n].output:find("warning: ", 1, true), res[n].output) -- the log line
        end
        -- one call per node, for the one registered job
        local calls = simdomain.read_file(scontrol .. ".calls") or ""
        assert.are.equal(2, select(2, calls:gsub("%-o show job 4\n", "")), calls)
      end)

    it("Slurm cannot say: the verdict stands (exit 9), its line names the forget hint", function()
      lost_epilog()
      answer(scontrol, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n", 1)
      local res = d:run_all{ job = 4, nodelist = "n[1-2]", names = { "n1" }, command = "health" }
      assert.are.equal(9, res.n1.status, res.n1.output)
      assert.truthy(res.n1.output:find("\nimexguard: domain%-unhealthy: [^\n]*imexguard forget "
        .. "4"), res.n1.output)
    end)
  end)

  it("item 5: health right after this node's daemon restarted waits for its peers: exit 0; status says "
    .. "starting", function()
    -- the peers reconnect to a restarted daemon after 3 s (their back-off), 6 s at most
    d = simdomain.new{ nodes = 3,
      extra_cfg = { "IMEXSIM_RECONNECT_MS=3000", "IMEXSIM_RECONNECT_MAX_MS=6000" } }
    for _, n in ipairs(d.names) do d:write_node_list(n, d.names) end
    assert(d:start())
    assert.truthy(up("n1"), "never UP")
    all_ok(d:run_all{ job = 1, nodelist = "n[1-3]" }, "job 1")
    assert(d:systemctl("restart", d:unit("n1")))
    local st = d:run_all{ job = 1, nodelist = "n[1-3]", names = { "n1" }, command = "status" }
    local h = d:run_all{ job = 1, nodelist = "n[1-3]", names = { "n1" }, command = "health" }
    assert.are.equal(0, h.n1.status, h.n1.output)
    assert.truthy(h.n1.output:find("started %d+ s") or h.n1.output:find("healthy"), h.n1.output)
    -- status, run at once after the restart, does not wait: starting (or already UP)
    assert.are.equal(0, st.n1.status, st.n1.output)
    assert.truthy(st.n1.output:find("starting: ", 1, true) or st.n1.output:find("outcome=ok: domain "
      .. "UP", 1, true),
      st.n1.output)
  end)

  describe("item 1: the domain map's file breaks after it worked", function()
    local BROKEN = "BlockName=rack1 Nodes=n[1-2]\nBlockName=rack2 Nodes=n[3-4\nBlockSizes=2\n"

    it("the last map that parsed stands in, loudly (log, metric, status, -t); a node without it fails",
      function()
        d = simdomain.new{ racks = { 2, 2 }, extra_cfg = simdomain.FAST_RECONNECT }
        for _, n in ipairs(d.names) do
          simdomain.write_file(d:config(n), simdomain.read_file(d:config(n))
            .. string.format("metrics_dir = %q\n", d:dir(n)))
        end
        for _, rack in ipairs(d.racks) do
          for _, n in ipairs(rack) do d:write_node_list(n, rack) end
        end
        assert(d:start())
        all_ok(d:run_all{ job = 1, nodelist = "n[1-4]" }, "job 1")
        all_ok(d:run_all{ job = 1, nodelist = "n[1-4]", command = "epilog" })
        simdomain.write_file(d.root .. "/topology.conf", BROKEN)
        -- job 2 on both racks, all prologs at once: every node uses its record
        local res = d:run_all{ job = 2, nodelist = "n[1-4]" }
        all_ok(res, "job 2 on the broken file")
        for n, r in pairs(res) do
          assert.truthy(r.output:find("topology.conf line 2: domain rack2: invalid hostlist 'n[3-4': "
            .. "unclosed '['",
            1, true), n .. ": " .. r.output)
          assert.truthy(r.output:find("using the last domain map that parsed", 1, true), n .. ": "
            .. "" .. r.output)
          local prom = simdomain.read_file(d:dir(n) .. "/imexguard.prom") or ""
          assert.truthy(prom:find('imexguard_domain_map_fallback{command="prolog"} 1', 1, true),
            n .. ": " .. prom)
        end
        local st = d:run_all{ job = 2, nodelist = "n[1-4]", names = { "n1" }, command = "status" }
        assert.truthy(st.n1.output:find("IMEX domain map broken: prologs here use the last map that "
          .. "parsed", 1,
          true), st.n1.output)
        local t = d:run_all{ job = 2, nodelist = "n[1-4]", names = { "n1" }, command = "-t" }
        assert.are.equal(2, t.n1.status, t.n1.output)
        assert.truthy(t.n1.output:find(d.root .. "/topology.conf:2: error: IMEX domain map: ", 1, true),
          t.n1.output)
        all_ok(d:run_all{ job = 2, nodelist = "n[1-4]", command = "epilog" })
        -- n3 without its record (a reboot empties state_dir): the file's error, n3 drains
        os.remove(d:dir("n3") .. "/state/domain-map.last")
        res = d:run_all{ job = 3, nodelist = "n[3-4]", names = { "n3", "n4" } }
        assert.are.equal(2, res.n3.status, res.n3.output)
        assert.truthy(res.n3.output:find("bad-input", 1, true), res.n3.output)
        -- fixed: the file's own map again, the metric back to 0
        simdomain.write_file(d.root .. "/topology.conf", "BlockName=rack1 "
          .. "Nodes=n[1-2]\nBlockName=rack2 Nodes=n[3-4]\n")
        all_ok(d:run_all{ job = 4, nodelist = "n[1-2]", names = { "n1", "n2" } }, "job 4, fixed")
        local prom = simdomain.read_file(d:dir("n1") .. "/imexguard.prom") or ""
        assert.truthy(prom:find('imexguard_domain_map_fallback{command="prolog"} 0', 1, true), prom)
      end)
  end)
end)
