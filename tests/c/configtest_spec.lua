-- SPDX-License-Identifier: Apache-2.0
-- `imexguard -t` reads what a prolog will read (issue 32 items 1-3 and 10; field case C53):
-- slurm.conf and its Includes, the topology files, the address map, config.cfg and the ctl, each
-- fault named with its file and line (errors fail with the outcome a prolog would end in, warnings
-- only with --strict), and which slurm.conf and topology it found; `-T` shows what a run will use
-- (SLURM_CONF honoured) and the line a repeated setting's value comes from; a syntax error on the
-- last line is named on that line. Runs the BUILT binary in a private temp dir; systemd is never
-- asked (bus = a path that does not exist).
local H = require("helpers")

describe("config-test reads every file a prolog reads", function()
  local dir
  local count = 0
  -- A file under the temp dir (relative name) with `text`; returns its path.
  local function put(name, text)
    local path = dir .. "/" .. name
    H.write(path, text)
    return path
  end
  -- A site: slurm.conf, config.cfg, the settings file with `extra` lines; every path in `dir`.
  local function site(opts)
    count = count + 1
    local d = string.format("%s/site%d", dir, count)
    assert(os.execute("mkdir -p " .. d .. "/state"))
    H.write(d .. "/slurm.conf", opts.slurm or "PrologFlags=Alloc,DeferBatch\nPrologEpilogTimeout=180\n"
      .. "BatchStartTimeout=180\n")
    for name, text in pairs(opts.files or {}) do H.write(d .. "/" .. name, text) end
    H.write(d .. "/config.cfg", opts.cfg or "SERVER_PORT=50000\nIMEX_CMD_PORT=50005\n")
    local conf = d .. "/imexguard.conf"
    H.write(conf, (opts.head or "") .. 'slurm_conf = "' .. d .. '/slurm.conf"\nimex_config = "' .. d
      .. '/config.cfg"\nctl = "' .. (opts.ctl or "/bin/true") .. '"\nstate_dir = "' .. d .. '/state"\n'
      .. 'bus = "unix:path=' .. d .. '/no-bus"\n' .. (opts.extra or ""))
    return d, conf
  end
  local function test(conf, args, env)
    local a = { "--config", conf, "-t" }
    for _, x in ipairs(args or {}) do a[#a + 1] = x end
    return H.run_imexguard(a, { dir = dir, env = env })
  end
  local function last_line(out) return out:match("([^\n]*)\n$") end
  local function lines_with(out, s)
    local n = 0
    for l in out:gmatch("[^\n]+") do if l:find(s, 1, true) then n = n + 1 end end
    return n
  end

  setup(function()
    H.imexguard_bin()
    dir = H.tmpdir()
  end)
  teardown(function() H.rmdir(dir) end)

  it("a clean site: exit 0, says which slurm.conf (with its Include) and topology it read, no warning",
    function()
      local d, conf = site{ slurm = "PrologFlags=Alloc,DeferBatch\nInclude timeouts.conf\n",
        files = { ["timeouts.conf"] = "PrologEpilogTimeout=180\nBatchStartTimeout=120\n",
          ["topology.conf"] = "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-4]\nBlockSizes=2\n" } }
      local r = test(conf)
      assert.equal(0, r.code, r.stdout .. r.stderr)
      assert.not_matches("warning", r.stdout)
      assert.matches(d .. "/slurm.conf: info: slurm.conf read (setting slurm_conf), with Include " .. d
        .. "/timeouts.conf", r.stdout, 1, true)
      assert.matches(d .. "/topology.conf: info: domain map (topology) read: 2 domains, 4 nodes", r.stdout, 1,
        true)
      assert.matches("^" .. conf:gsub("%p", "%%%0") .. ": ok; policy policies%.default "
        .. "loads", last_line(r.stdout))
    end)

  describe("item 1: a broken topology.conf fails -t with its file and line, as the prolog would", function()
    local cases = {
      { "an unclosed bracket", "BlockName=b1 Nodes=n[1-2\nBlockName=b2 Nodes=n[3-4]\n", 1, "unclosed '['" },
      { "a node in two blocks", "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[2-4]\n", 2,
        "node n2 is in domain b2 and in domain b1" },
      { "a misspelt key", "BlockName=b1 Nodes=n[1-2]\nBlokName=b2 Nodes=n[3-4]\n", 2, "unparsable line" },
    }
    for _, c in ipairs(cases) do
      it(c[1] .. ": exit 2 (bad-input), FILE:LINE named", function()
        local d, conf = site{ files = { ["topology.conf"] = c[2] } }
        local r = test(conf)
        assert.equal(2, r.code, r.stdout)
        local where = d .. "/topology.conf:" .. c[3] .. ": "
        assert.matches(where .. "error: IMEX domain map: ", r.stdout, 1, true)
        assert.matches(c[4], r.stdout, 1, true)
        assert.equal(1, lines_with(r.stdout, "error:"), r.stdout)
        assert.equal("imexguard: bad-input: " .. where, last_line(r.stdout):sub(1, #where + 22))
      end)
    end

    it("a misspelt Nodes (a block without nodes to imexguard's reader, a file Slurm refuses): an error on "
      .. "its line", function()
      local d, conf = site{ files = {
        ["topology.conf"] = "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Node=n[3-4]\n" } }
      local r = test(conf)
      assert.equal(2, r.code, r.stdout)
      assert.matches(d .. "/topology.conf:2: error: key Node is not one of Slurm's topology.conf keys",
        r.stdout, 1, true)
      assert.matches("this line has no Nodes=, so its unit would have no nodes", r.stdout, 1, true)
    end)

    it("a misspelt key on a line continued with a backslash whose Nodes= follows: a warning on the line's "
      .. "first line (imexguard's reader, as Slurm's, joins the lines)", function()
      local d, conf = site{ files = {
        ["topology.conf"] = "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodez=n3 \\\n  Nodes=n[3-4]\n" } }
      local r = test(conf)
      assert.equal(0, r.code, r.stdout)
      assert.matches(d .. "/topology.conf:2: warning: key Nodez is not one of Slurm's topology.conf keys",
        r.stdout, 1, true)
      assert.equal(0, lines_with(r.stdout, "error:"), r.stdout)
    end)

    it("a missing topology_file: exit 2 naming it", function()
      local d, conf = site{ extra = 'topology_file = "/nonexistent/topology.conf"\n' }
      local r = test(conf)
      assert.equal(2, r.code, r.stdout)
      assert.matches("/nonexistent/topology.conf: error: IMEX domain map: unreadable", r.stdout, 1, true)
      assert.truthy(d)
    end)

    it("a key Slurm does not know beside a Nodes= that parses: a warning on its line", function()
      local d, conf = site{ files = { ["topology.conf"] = "BlockName=b1 Nodes=n[1-2] Nodez=n3\n" } }
      local r = test(conf)
      assert.equal(0, r.code, r.stdout)
      assert.matches(d .. "/topology.conf:1: warning: key Nodez is not one of Slurm's topology.conf keys",
        r.stdout, 1, true)
    end)

    it("a broken topology.yaml and an address map with a bad line are named too", function()
      local _, conf = site{ files = { ["topology.yaml"] = "- topology: t\n  block:\n    blocks:\n"
        .. "      - block: b1\n        nodes: n[1-\n" } }
      local r = test(conf)
      assert.equal(2, r.code, r.stdout)
      assert.matches("/topology.yaml:4: error: IMEX domain map: domain b1: invalid "
        .. "hostlist", r.stdout, 1, true)
      local map = put("addresses", "n1 10.0.0.1\nn2\n")
      _, conf = site{ extra = 'address_source = "map"\naddress_map = "' .. map .. '"\n' }
      r = test(conf)
      assert.equal(2, r.code, r.stdout)
      assert.matches(map .. ":2: error: address map: expected 'name address [domain]'", r.stdout, 1, true)
    end)

    it("config.cfg: a line without '=' is an error on its line, a loopback command port an error "
      .. "too", function()
      local d, conf = site{ cfg = "SERVER_PORT=50000\nIMEX_CMD_PORT 50005\n" }
      local r = test(conf)
      assert.equal(2, r.code, r.stdout)
      assert.matches(d .. "/config.cfg:2: error: no '=' in 'IMEX_CMD_PORT 50005'", r.stdout, 1, true)
      d, conf = site{ cfg = "SERVER_PORT=50000\nIMEX_CMD_PORT=50005\nIMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\n" }
      r = test(conf)
      assert.equal(14, r.code, r.stdout) -- the prolog's config-fault
      assert.matches(d .. "/config.cfg: error: IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1 is a loopback address",
        r.stdout, 1, true)
    end)

    it("a missing ctl on an IMEX node is an error (ctl-unusable); a missing config.cfg a warning", function()
      local _, conf = site{ ctl = dir .. "/no-ctl" }
      local r = test(conf)
      assert.equal(8, r.code, r.stdout)
      assert.matches("error: ctl " .. dir .. "/no-ctl does not exist", r.stdout, 1, true)
      local d
      d, conf = site{ extra = 'imex_config = "/nonexistent/config.cfg"\n' }
      r = test(conf)
      assert.equal(0, r.code, r.stdout)
      assert.matches("/nonexistent/config.cfg: warning: config.cfg (setting imex_config) does not "
        .. "exist: not an "
        .. "IMEX node", r.stdout, 1, true)
      assert.truthy(d)
    end)
  end)

  describe("the facts of the other rooms: racks (C45), slots (issue 30), the ctl's target (C44)", function()
    it("a tree and no block topology under domain_map = auto: a warning on the topology file", function()
      local d, conf = site{ files = { ["topology.conf"] = "SwitchName=rack1 Nodes=n[1-2]\n"
        .. "SwitchName=rack2 Nodes=n[3-4]\nSwitchName=top Switches=rack[1-2]\n" } }
      local r = test(conf)
      assert.equal(0, r.code, r.stdout)
      assert.matches(d .. "/topology.conf:1: warning: ", r.stdout, 1, true)
      assert.matches("a tree defines no NVLink domain", r.stdout, 1, true)
      assert.not_equal(0, test(conf, { "--strict" }).code)
    end)

    it("membership = slots with domain_map = none: an error, exit 2", function()
      local _, conf = site{ extra = 'membership = "slots"\ndomain_map = "none"\n' }
      local r = test(conf)
      assert.equal(2, r.code, r.stdout)
      assert.matches("error: membership = \"slots\" needs an IMEX domain map", r.stdout, 1, true)
    end)

    it("a command service on every interface of a host without IPv6: a warning on config.cfg", function()
      local d, conf = site{ extra = 'proc_if_inet6 = "/nonexistent/if_inet6"\n' }
      local r = test(conf)
      assert.equal(0, r.code, r.stdout)
      assert.matches(d .. "/config.cfg: warning: IMEX_CMD_BIND_INTERFACE_IP is empty and this host has no "
        .. "IPv6", r.stdout, 1, true)
      -- IPv6 disabled by sysctl: the address table is there, without ::1: the same warning
      local eth0 = "fe800000000000000000000000000001 02 40 20 80     eth0\n"
      H.write(d .. "/if_inet6", eth0)
      local _, conf_off = site{ extra = 'proc_if_inet6 = "' .. d .. '/if_inet6"\n' }
      assert.matches("has no IPv6", test(conf_off).stdout, 1, true)
      -- the same site with IPv6 (::1 listed): no such warning
      H.write(d .. "/if_inet6", eth0 .. "00000000000000000000000000000001 01 80 10 80       lo\n")
      local _, conf6 = site{ extra = 'proc_if_inet6 = "' .. d .. '/if_inet6"\n' }
      assert.not_matches("has no IPv6", test(conf6).stdout, 1, true)
    end)
  end)

  describe("item 2 and C53: slurm.conf's flags and timeouts against the deadline", function()
    it("PrologFlags missing, then Alloc without DeferBatch: warnings on the line, exit 0; --strict fails",
      function()
        local d, conf = site{ slurm = "ClusterName=c\nPrologEpilogTimeout=180\nBatchStartTimeout=180\n" }
        local r = test(conf)
        assert.equal(0, r.code, r.stdout)
        assert.matches(d .. "/slurm.conf: warning: PrologFlags is not set: without Alloc the prolog "
          .. "runs only "
          .. "on nodes where a job step starts", r.stdout, 1, true)
        assert.matches("; 1 warning$", last_line(r.stdout))
        r = test(conf, { "--strict" })
        assert.equal(2, r.code, r.stdout)
        assert.matches("^imexguard: bad%-input: " .. d:gsub("%p", "%%%0") .. "/slurm%.conf: "
          .. "PrologFlags is not set",
          last_line(r.stdout))
        assert.matches("warnings fail with %-%-strict$", last_line(r.stdout))
        d, conf = site{ slurm = "PrologFlags=Alloc\nPrologEpilogTimeout=180\nBatchStartTimeout=180\n" }
        r = test(conf)
        assert.matches(d .. "/slurm.conf:1: warning: PrologFlags=Alloc: without DeferBatch a batch script "
          .. "starts once the batch node's prolog is done", r.stdout, 1, true)
      end)

    it("PrologFlags=Contain or X11 imply Alloc (slurm.conf(5)): only DeferBatch is named; with it, nothing",
      function()
        for _, flags in ipairs({ "Contain", "X11", "contain" }) do
          local d, conf = site{ slurm = "PrologFlags=" .. flags .. "\nPrologEpilogTimeout=180\n"
            .. "BatchStartTimeout=180\n" }
          local r = test(conf)
          assert.equal(0, r.code, r.stdout)
          assert.matches(d .. "/slurm.conf:1: warning: PrologFlags=" .. flags .. ": without DeferBatch a "
            .. "batch script starts once the batch node's prolog is done", r.stdout, 1, true)
          assert.not_matches("without Alloc", r.stdout, 1, true)
        end
        local _, conf = site{ slurm = "PrologFlags=Contain,DeferBatch\nPrologEpilogTimeout=180\n"
          .. "BatchStartTimeout=180\n" }
        assert.not_matches("PrologFlags", test(conf).stdout, 1, true)
      end)

    it("PrologTimeout (Slurm 26.05) is the prolog's when set, whatever PrologEpilogTimeout says", function()
      local function slurm(text) return text .. "BatchStartTimeout=180\n" end
      local d, conf = site{ slurm = slurm("PrologFlags=Alloc,DeferBatch\nPrologEpilogTimeout=600\n"
        .. "PrologTimeout=30\n") }
      local r = test(conf)
      assert.equal(0, r.code, r.stdout)
      assert.matches(d .. "/slurm.conf:3: warning: PrologTimeout=30 is not above imexguard's deadline = 90 s",
        r.stdout, 1, true)
      assert.not_matches("PrologEpilogTimeout", r.stdout, 1, true)
      local _
      _, conf = site{ slurm = slurm("PrologFlags=Alloc,DeferBatch\nPrologEpilogTimeout=60\n"
        .. "PrologTimeout=300\n") }
      assert.not_matches("Timeout", test(conf).stdout, 1, true)
      -- NoHold, ForceRequeueOnFail and RunInJob imply Alloc too (26.05)
      _, conf = site{ slurm = slurm("PrologFlags=RunInJob,DeferBatch\nPrologEpilogTimeout=180\n") }
      assert.not_matches("PrologFlags", test(conf).stdout, 1, true)
      _, conf = site{ slurm = slurm("PrologFlags=NoHold\nPrologEpilogTimeout=180\n") }
      assert.not_matches("without Alloc", test(conf).stdout, 1, true)
    end)

    it("PrologEpilogTimeout=60 and BatchStartTimeout unset: each named with the deadline's 90 s", function()
      local d, conf = site{ slurm = "PrologFlags=Alloc,DeferBatch\nPrologEpilogTimeout=60\n" }
      local r = test(conf)
      assert.equal(0, r.code, r.stdout)
      assert.matches(d .. "/slurm.conf:2: warning: PrologEpilogTimeout=60 is not above imexguard's "
        .. "deadline = "
        .. "90 s (default)", r.stdout, 1, true)
      assert.matches(d .. "/slurm.conf: warning: BatchStartTimeout (not set: Slurm's default, 10 s) is not "
        .. "above imexguard's deadline = 90 s (default)", r.stdout, 1, true)
    end)

    it("a deadline above PrologEpilogTimeout names the settings file's line", function()
      local _, conf = site{ extra = "deadline = 200\n" }
      local r = test(conf)
      assert.matches("PrologEpilogTimeout=180 is not above imexguard's deadline = 200 s (" .. conf .. ":6)",
        r.stdout, 1, true)
      assert.matches("BatchStartTimeout=180 is not above imexguard's deadline = 200 s", r.stdout, 1, true)
    end)

    it("health_timeout above the deadline is named", function()
      local _, conf = site{ extra = "health_timeout = 120\n" }
      local r = test(conf)
      assert.matches(conf .. ":6: warning: health_timeout = 120 s (" .. conf .. ":6) is above "
        .. "deadline = 90 s",
        r.stdout, 1, true)
    end)

    it("SLURM_CONF naming no file; imex_channels beside switch/nvidia_imex in an Include", function()
      local _, conf = site{}
      local r = test(conf, nil, { SLURM_CONF = dir .. "/gone/slurm.conf" })
      assert.equal(0, r.code, r.stdout)
      assert.matches(dir .. "/gone/slurm.conf: warning: SLURM_CONF=" .. dir .. "/gone/slurm.conf "
        .. "names a file "
        .. "that does not exist", r.stdout, 1, true)
      -- with imex_channels = "channel0" the prolog reads slurm.conf: unreadable is its outcome
      _, conf = site{ extra = 'imex_channels = "channel0"\n' }
      r = test(conf, nil, { SLURM_CONF = dir .. "/gone/slurm.conf" })
      assert.equal(20, r.code, r.stdout)
      local d
      d, conf = site{ slurm = "PrologFlags=Alloc,DeferBatch\nPrologEpilogTimeout=180\nBatchStartTimeout=180\n"
        .. "Include switch.conf\n", files = { ["switch.conf"] = "\nSwitchType=switch/nvidia_imex\n" },
        extra = 'imex_channels = "channel0"\n' }
      r = test(conf)
      assert.equal(0, r.code, r.stdout)
      assert.matches(d .. "/switch.conf:2: warning: SwitchType=switch/nvidia_imex hands each job its "
        .. "own IMEX "
        .. "channel, so imex_channels = \"channel0\" (" .. conf .. ":6) makes none", r.stdout, 1, true)
    end)
  end)

  describe("item 3: -T shows what a run will use, and a repeated setting's line", function()
    it("a setting assigned twice: -t names the repeat, -T gives the line whose value counts", function()
      local _, conf = site{ head = "health_timeout = 30\n", extra = "health_timeout = 45\n" }
      local r = test(conf)
      assert.equal(0, r.code, r.stdout)
      assert.matches(conf .. ":7: warning: setting 'health_timeout' is assigned 2 times (lines 1, "
        .. "7): the last, "
        .. "line 7, counts", r.stdout, 1, true)
      r = H.run_imexguard({ "--config", conf, "-T" }, { dir = dir })
      assert.matches("\nhealth_timeout = 45 -- " .. conf .. ":7 (also line 1: the last "
        .. "counts)\n", r.stdout, 1,
        true)
    end)

    it("SLURM_CONF: -T says which slurm.conf a run reads, and the topology file beside it", function()
      local d, conf = site{ files = { ["topology.conf"] = "BlockName=b1 Nodes=n[1-2]\n" } }
      local r = H.run_imexguard({ "--config", conf, "-T" },
        { dir = dir, env = { SLURM_CONF = d .. "/slurm.conf" } })
      assert.equal(0, r.code, r.stderr)
      assert.matches('\nslurm_conf = "' .. d .. '/slurm.conf" -- ' .. conf .. ':1; a run reads ' .. d
        .. '/slurm.conf (SLURM_CONF)\n', r.stdout, 1, true)
      assert.matches("\n-- topology_file unset (default); a run reads " .. d .. "/topology.conf (beside "
        .. "slurm.conf)\n", r.stdout, 1, true)
      r = H.run_imexguard({ "--config", conf, "-T" },
        { dir = dir, env = { SLURM_CONF = "/elsewhere/slurm.conf" } })
      assert.matches("; a run reads /elsewhere/slurm.conf (SLURM_CONF)\n", r.stdout, 1, true)
    end)
  end)

  describe("item 7: a policy's own settings (policy_settings) and the local time", function()
    local QUIET = "policies/quiet_hours.lua"
    local function copy_policy()
      local path = dir .. "/quiet_hours.lua"
      H.write(path, assert(H.read(QUIET)))
      return path
    end

    it("-T lists the policy's declared settings with their values and defaults; --set sets one", function()
      local p = copy_policy()
      local _, conf = site{ extra = 'policy = "' .. p .. '"\npolicy_settings = { quiet_from = 22 }\n' }
      local r = H.run_imexguard({ "--config", conf, "-T" }, { dir = dir })
      assert.equal(0, r.code, r.stdout .. r.stderr)
      assert.matches("\npolicy_settings = { quiet_from = 22, quiet_to = 18 } -- " .. conf .. ":7\n", r.stdout,
        1, true)
      assert.matches("\n--   policy_settings.quiet_to = 18 (number, default 18): the hour (0-23) they end",
        r.stdout, 1, true)
      r = H.run_imexguard({ "--config", conf, "--set", "policy_settings.quiet_to=6", "-T" }, { dir = dir })
      assert.matches("\npolicy_settings = { quiet_from = 22, quiet_to = 6 } -- --set\n", r.stdout, 1, true)
      r = test(conf)
      assert.equal(0, r.code, r.stdout)
    end)

    it("an unknown name or a wrong value: settings-error 18 naming the file and line", function()
      local p = copy_policy()
      local _, conf = site{ extra = 'policy = "' .. p .. '"\npolicy_settings = { quiet_form = 22 }\n' }
      local r = test(conf)
      assert.equal(18, r.code, r.stdout)
      assert.equal("imexguard: settings-error: settings file " .. conf .. ":7: unknown policy setting "
        .. "'quiet_form' (the policy declares quiet_from, quiet_to)", last_line(r.stdout))
      _, conf = site{ extra = 'policy = "' .. p .. '"\npolicy_settings = { quiet_to = 24 }\n' }
      r = H.run_imexguard({ "--config", conf, "plan", "--job", "1", "--nodelist", "n1" }, { dir = dir })
      assert.equal(18, r.code, r.stdout)
      assert.matches(":7: setting 'policy_settings.quiet_to' must be a number from 0 to 23", r.stdout, 1,
        true)
      -- the built-in policy declares none: any name is unknown
      _, conf = site{ extra = 'policy_settings = { x = 1 }\n' }
      r = test(conf)
      assert.equal(18, r.code, r.stdout)
      assert.matches("unknown policy setting 'x' (the policy declares none)", r.stdout, 1, true)
    end)

    it("host.localtime in the sandbox honours TZ", function()
      local p = put("lt.lua", "local P = require('policies.default').extend()\n"
        .. "function P:run_plan(ctx)\n  local t = ctx.host.localtime(1767225600)\n"
        .. "  return 'ok', string.format('%d-%02d-%02d %02d:%02d %s', t.year, t.month, t.day, t.hour, t.min, "
        .. "t.zone)\nend\nreturn P\n")
      local _, conf = site{}
      local r = H.run_imexguard({ "--config", conf, "--policy", p, "plan", "--job", "1", "--nodelist", "n1" },
        { dir = dir, env = { TZ = "XYZ-5:30" } })
      assert.equal(0, r.code, r.stdout .. r.stderr)
      assert.equal("imexguard: ok: 2026-01-01 05:30 XYZ\n", r.stdout)
    end)
  end)

  it("item 10: a syntax error on line 2 of a two-line settings file is named on line 2", function()
    local conf = put("two.conf", "deadline = 90\nunit = \n")
    local r = test(conf)
    assert.equal(18, r.code)
    assert.matches("^imexguard: settings%-error: settings file " .. conf:gsub("%p", "%%%0") .. ":2: "
      .. "", r.stdout)
  end)
end)
