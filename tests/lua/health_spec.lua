-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.health beyond the probe (steps_spec): the configuration-fault verdict over
-- polls (C22), its blame and early stop in wait (the node map in the status report, C21:
-- report_spec). Case ids are the field cases of docs/design.md, "Field cases".
local testing = require("imexguard.testing")
local health = require("imexguard.health")
local ctl = require("imexguard.ctl")
local verdict = require("imexguard.verdict")
local imexcfg = require("imexguard.imexcfg")

local ctl_answers = require("ctl_answers")

local H = ctl_answers.HOSTS
local cmd_unreachable = ctl_answers.cmd_unreachable

-- A peer whose daemon is down: UNAVAILABLE, every link to it INVALID.
local function peer_down(hosts, which)
  local nodes = {}
  for i, h in ipairs(hosts) do nodes[i] = { host = h, status = h == which and "UNAVAILABLE" or nil } end
  return { nodes = nodes }
end

local function verdict_of(described, expected, self)
  local d = assert(ctl.parse_mesh(testing.render_mesh(described), 0))
  return verdict.judge({ mesh = d }, { addrs = expected, self = self })
end

local function find(s, word)
  return s:find(word, 1, true) ~= nil
end

describe("health.config_fault_established", function()
  local cf = verdict_of(cmd_unreachable(H), H, H[1])
  local peer = verdict_of(peer_down(H, H[3]), H, H[1])

  it("needs CONFIG_FAULT_POLLS consecutive config-fault verdicts", function()
    assert.equal(3, health.CONFIG_FAULT_POLLS)
    assert.is_false(health.config_fault_established({ cf, cf }))
    local ok, v = health.config_fault_established({ cf, cf, cf })
    assert.is_true(ok)
    assert.equal(cf, v)
    assert.is_true(health.config_fault_established({ peer, cf, cf, cf }))
  end)

  it("an unusable or different poll in the window restarts the count", function()
    assert.is_false(health.config_fault_established({ cf, cf, peer }))
    assert.is_false(health.config_fault_established({ cf, peer, cf, cf }))
    assert.is_false(health.config_fault_established({ cf, false, cf }, 3, 3))
    assert.is_false(health.config_fault_established({ cf, nil, cf }, 3, 3))
  end)

  it("the same peers every time: a changing set is not established", function()
    local three = verdict_of(cmd_unreachable({ H[1], H[2], H[3] }), { H[1], H[2], H[3] }, H[1])
    assert.is_false(health.config_fault_established({ cf, three, cf }))
  end)

  it("takes the number of polls (at least 1)", function()
    assert.is_true(health.config_fault_established({ cf }, 1))
    assert.is_true(health.config_fault_established({ cf }, 0))
    assert.is_false(health.config_fault_established({ peer, cf }, 2))
  end)
end)

describe("health.blame of a configuration fault", function()
  it("blames nobody, names the causes, this node's own config findings first", function()
    local h = testing.host()
    local ctx = testing.ctx{ host = h }
    local v = verdict_of(cmd_unreachable(H), H, H[1])
    local cfg = assert(imexcfg.parse("IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\n"))
    local o, msg = health.blame(ctx, { self = H[1], names = { [H[1]] = "n1" }, cfg = cfg,
      config_path = "/opt/site/imex.cfg" }, v, 2.5)
    assert.equal(health.CONFIG_FAULT_OUTCOME, o)
    assert.equal("config-fault", o)
    assert.is_nil(msg:find("\n"))
    assert.truthy(find(msg, "this node 10.0.0.1 (n1): configuration fault after 2.5 s, not a peer fault"))
    assert.truthy(find(msg, "likely causes: here: /opt/site/imex.cfg: IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1"))
    assert.truthy(find(msg, "firewalled"), msg)
    assert.is_false(find(msg, "peers are not"))
    assert.is_false(find(msg, "status UNAVAILABLE"))
    -- logged at level err (loud also with on_config_fault = "warn"), never a warning about peers
    assert.equal(1, #h.logs)
    assert.same({ "err", msg }, { h.logs[1][1], h.logs[1][2] })
  end)

  it("without a config, the generic causes", function()
    local v = verdict_of(cmd_unreachable({ H[1], H[2] }), { H[1], H[2] }, H[1])
    local _, msg = health.blame(testing.ctx{}, { self = H[1] }, v)
    assert.truthy(find(msg, "connected to 1 peers"), msg)
    assert.is_false(find(msg, "here:"))
  end)

  it("a real peer fault is still peers-unhealthy, naming the peer", function()
    local v = verdict_of(peer_down(H, H[3]), H, H[1])
    local o, msg = health.blame(testing.ctx{}, { self = H[1] }, v)
    assert.equal("peers-unhealthy", o)
    assert.truthy(find(msg, "10.0.0.3: status UNAVAILABLE"), msg)
  end)

  it("config_fault_causes: command-service and bind findings of this node, then the generic ones", function()
    local cfg = assert(imexcfg.parse("IMEX_CMD_ENABLED=0\nIMEX_NODE_CONFIG_FILE=rel\n"))
    local c = health.config_fault_causes(cfg, "/c.cfg")
    assert.equal(1 + #verdict.CONFIG_FAULT_CAUSES, #c)
    assert.truthy(find(c[1], "here: /c.cfg: IMEX_CMD_ENABLED=0"))
    assert.same(verdict.CONFIG_FAULT_CAUSES, { table.unpack(c, 2) })
  end)
end)

describe("health.wait", function()
  local function want(hosts) return { addrs = hosts, self = hosts[1], names = {} } end

  it("stops after CONFIG_FAULT_POLLS polls of a configuration fault, long before health_timeout", function()
    local h = testing.host{ ctl = { { mesh = cmd_unreachable(H) } } }
    local ctx = testing.ctx{ host = h }
    local o, msg, polls = health.wait(ctx, want(H))
    assert.equal("config-fault", o)
    assert.equal(health.CONFIG_FAULT_POLLS, polls)
    assert.equal(health.CONFIG_FAULT_POLLS, #h.runs)
    assert.truthy(find(msg, "configuration fault"), msg)
    assert.is_false(find(msg, "peers are not"))
  end)

  it("17 peers (an 18-node rack): the same early stop", function()
    local hosts = {}
    for i = 1, 18 do hosts[i] = "10.0.2." .. i end
    local h = testing.host{ ctl = { { mesh = cmd_unreachable(hosts) } } }
    local o, msg, polls = health.wait(testing.ctx{ host = h }, want(hosts))
    assert.equal("config-fault", o)
    assert.equal(3, polls)
    assert.truthy(find(msg, "connected to 17 peers"), msg)
  end)

  it("want.config_fault_polls sets the number of polls", function()
    local h = testing.host{ ctl = { { mesh = cmd_unreachable(H) } } }
    local w = want(H)
    w.config_fault_polls = 5
    local _, _, polls = health.wait(testing.ctx{ host = h }, w)
    assert.equal(5, polls)
  end)

  it("a transient signature that clears is not a fault: the domain comes up", function()
    local h = testing.host{ ctl = { { mesh = cmd_unreachable(H) }, { mesh = cmd_unreachable(H) },
      testing.up(H) } }
    local o, _, polls = health.wait(testing.ctx{ host = h }, want(H))
    assert.equal("ok", o)
    assert.equal(3, polls)
  end)

  it("C22: the same peers persist (polls - 1) x poll_interval, also after the faulty set changed", function()
    -- a peer fault long enough to fill the pace's bucket, then a configuration fault of 2 peers (the
    -- 4th node not yet in the map), then of all 3: the count and the time start again with the new set
    local answers = {}
    for i = 1, 12 do answers[i] = { mesh = peer_down(H, H[2]) } end
    answers[13] = { mesh = cmd_unreachable({ H[1], H[2], H[3] }) }
    answers[14] = { mesh = cmd_unreachable({ H[1], H[2], H[3] }) }
    answers[15] = { mesh = cmd_unreachable(H) }
    local h = testing.host{ ctl = answers }
    local ctx = testing.ctx{ host = h, settings = { health_timeout = 120, poll_interval = 1 } }
    local at = {} -- the time of each poll (the debug lines are written only when the answer changed)
    local function judge(answer, w)
      at[#at + 1] = h.now()
      return verdict.judge(answer, w)
    end
    local o, _, polls = health.wait(ctx, want(H), nil, judge)
    assert.equal("config-fault", o)
    assert.is_true(at[polls] - at[15] >= (health.CONFIG_FAULT_POLLS - 1) * 1,
      string.format("3 peers at %.3f s, established at %.3f s", at[15], at[polls]))
  end)

  it("a real peer fault waits the whole health_timeout and names the peer", function()
    local h = testing.host{ ctl = { { mesh = peer_down(H, H[2]) } } }
    local ctx = testing.ctx{ host = h, settings = { health_timeout = 5, poll_interval = 1 } }
    local o, msg, polls = health.wait(ctx, want(H))
    assert.equal("peers-unhealthy", o)
    assert.is_true(polls > 3)
    assert.truthy(find(msg, "10.0.0.2"), msg)
  end)

  describe("with a judge of the caller's", function()
    it("judges each answer, with want; its healthy verdict ends the wait with its message", function()
      local h = testing.host{ ctl = { { mesh = peer_down(H, H[2]) } } }
      local seen = {}
      local function judge(answer, w)
        seen[#seen + 1] = { answer = answer, want = w }
        local v = verdict.judge(answer, w)
        if #seen < 3 then return v end
        return { healthy = true, status = v.status, healthy_message = "my nodes are fine" }
      end
      local w = want(H)
      local o, msg, polls = health.wait(testing.ctx{ host = h }, w, nil, judge)
      assert.equal("ok", o)
      assert.equal("my nodes are fine", msg)
      assert.equal(3, polls)
      assert.equal(3, #seen)
      assert.equal(w, seen[1].want)
      assert.equal("peer-fault", verdict.judge(seen[1].answer, w).verdict) -- the answers of probe
    end)

    it("a healthy verdict without a message of its own: the default message", function()
      local h = testing.host{ ctl = { { mesh = peer_down(H, H[2]) } } }
      local o, msg = health.wait(testing.ctx{ host = h }, want(H), nil,
        function() return { healthy = true, status = "DEGRADED" } end)
      assert.equal("ok", o)
      assert.equal("domain DEGRADED, 4 nodes healthy", msg)
    end)

    it("its last verdict is blamed when the wait times out: a healthy domain judged faulty", function()
      local h = testing.host{ ctl = { testing.up(H) } }
      local ctx = testing.ctx{ host = h, settings = { health_timeout = 3, poll_interval = 1 } }
      local o, msg = health.wait(ctx, want(H), nil, function()
        return { healthy = false, status = "UP", faulty = { { host = H[3], reason = "judged so" } } }
      end)
      assert.equal("peers-unhealthy", o)
      assert.truthy(find(msg, "10.0.0.3: judged so"), msg)
    end)

    it("nil for every answer: ctl-unusable, even when the ctl answers UP", function()
      local h = testing.host{ ctl = { testing.up(H) } }
      local ctx = testing.ctx{ host = h, settings = { health_timeout = 3, poll_interval = 1 } }
      local o, msg, polls = health.wait(ctx, want(H), nil, function() return nil end)
      assert.equal("ctl-unusable", o)
      assert.is_true(polls > 1)
      assert.truthy(find(msg, "no usable answer"), msg)
    end)

    it("its configuration-fault verdicts stop the wait early, as the default judge's", function()
      local h = testing.host{ ctl = { testing.up(H) } }
      local cf = verdict_of(cmd_unreachable(H), H, H[1])
      local o, _, polls = health.wait(testing.ctx{ host = h }, want(H), nil, function() return cf end)
      assert.equal("config-fault", o)
      assert.equal(health.CONFIG_FAULT_POLLS, polls)
    end)
  end)
end)

describe("verdict.judge of an answer without a mesh", function()
  it("names the verdict of an unreachable local daemon", function()
    local v = verdict.judge({ kind = "unreachable", err = "down" }, { addrs = H, self = H[1] })
    assert.equal("local-fault", v.verdict)
  end)
end)

describe("health.probe of a large domain", function()
  -- n nodes, every one READY and CONNECTED to every one, as the daemon prints it (one space of indent
  -- per level, as in tests/fixtures/ctl/up-2node-570.json).
  local function indented(n)
    local b = { "{\n \"nodes\": {\n" }
    for i = 0, n - 1 do
      b[#b + 1] = string.format("  \"%d\": {\n   \"status\": \"READY\",\n   \"host\": \"10.2.%d.%d\",\n"
        .. "   \"connections\": {\n", i, i // 250, i % 250 + 1)
      for j = 0, n - 1 do
        b[#b + 1] = string.format("    \"%d\": {\n     \"host\": \"10.2.%d.%d\",\n"
          .. "     \"status\": \"CONNECTED\",\n"
          .. "     \"changed\": false\n    }%s\n", j, j // 250, j % 250 + 1, j < n - 1 and "," or "")
      end
      b[#b + 1] = string.format("   },\n   \"changed\": false,\n   \"version\": \"570.172.08\"\n  }%s\n",
        i < n - 1 and "," or "")
    end
    b[#b + 1] = " },\n \"timestamp\": \"8/8/2025 17:38:02.641\",\n \"status\": \"UP\"\n}\n"
    return table.concat(b)
  end

  it("keeps the whole answer of a 144-node domain (2 MB) and finds it healthy", function()
    local out = indented(144)
    assert.is_true(#out > 2 * 1024 * 1024 - 200000)
    local ctx = { settings = { ctl = "nvidia-imex-ctl", imex_config = "/etc/nvidia-imex/config.cfg",
      ctl_timeout = 5 },
      host = { run = function(_, opts) -- the primitive's cap (run.c): a longer stream is cut
        return { stdout = out:sub(1, opts.max_output), status = 0, truncated = #out > opts.max_output }
      end } }
    local answer = health.probe(ctx)
    assert.is_nil(answer.err)
    assert.equal(144, #answer.mesh.nodes)
    local hosts = {}
    for i, n in ipairs(answer.mesh.nodes) do hosts[i] = n.host end
    assert.equal("healthy", verdict.judge(answer, { addrs = hosts, self = hosts[1] }).verdict)
  end)
end)

describe("health.group_faults and hosts_ranged: a rack's blame stays short", function()
  it("one part per reason, the hosts compressed in numeric order, names when every host has one", function()
    local faulty, names = {}, {}
    for i = 3, 18 do
      local a = "10.0.0." .. i
      faulty[#faulty + 1] = { host = a,
        reason = i == 9 and "connection from this node INVALID" or "status UNAVAILABLE" }
      names[a] = string.format("gb%02d", i)
    end
    faulty[#faulty + 1] = { host = "10.0.0.1", reason = "status UNAVAILABLE" } -- this node: left out
    assert.same({ "gb[03-08,10-18]: status UNAVAILABLE", "gb09: connection from this node INVALID" },
      health.group_faults(faulty, "10.0.0.1", names))
    names["10.0.0.10"] = nil
    assert.same({ "10.0.0.[3-8,10-18]: status UNAVAILABLE", "gb09: connection from this node INVALID" },
      health.group_faults(faulty, "10.0.0.1", names))
    assert.equal("10.0.0.[9-10]", health.hosts_ranged({ "10.0.0.10", "10.0.0.9" }))
  end)
end)

describe("health.probe: the ctl's 'not configured' of a run that is not root", function()
  local function ctx_of(euid)
    return {
      settings = { ctl = "nvidia-imex-ctl", imex_config = "/etc/nvidia-imex/config.cfg", ctl_timeout = 5 },
      host = { euid = function() return euid end,
        run = function() return { stdout = "Failed to read node configuration file\n", status = 255 } end } }
  end

  it("says the ctl may not read its configuration and to run as root (a permission error looks the same)",
    function()
      local answer = health.probe(ctx_of(1000))
      assert.equal("unconfigured", answer.kind)
      assert.matches("running as uid 1000, the ctl may be unable to read its configuration: run as root",
        answer.err, 1, true)
    end)

  it("as root: only 'not configured'", function()
    local answer = health.probe(ctx_of(0))
    assert.equal("unconfigured", answer.kind)
    assert.matches("IMEX is not configured", answer.err, 1, true)
    assert.not_matches("as root", answer.err, 1, true)
  end)
end)

describe("health.wait's log lines (imexguard.progress)", function()
  it("progress at info every progress.EVERY s naming what is awaited and the time left; one debug "
    .. "line per change, not per poll", function()
    local progress = require("imexguard.progress")
    local h = testing.host{ ctl = { { mesh = peer_down(H, H[2]) } } }
    local ctx = testing.ctx{ host = h, settings = { health_timeout = 20, poll_interval = 1 } }
    local o, _, polls = health.wait(ctx, { addrs = H, self = H[1], names = {} })
    assert.equal("peers-unhealthy", o)
    local info, debug = {}, {}
    for _, l in ipairs(h.logs) do
      if l[1] == "info" and l[2]:match("^waiting for ") then info[#info + 1] = l[2] end
      if l[1] == "debug" and l[2]:match("^health poll ") then debug[#debug + 1] = l[2] end
    end
    assert.is_true(polls > 10)
    assert.equal(1, #debug) -- the same answer on every poll
    assert.is_true(#info >= 20 // progress.EVERY - 1 and #info <= 20 // progress.EVERY, #info .. " lines")
    local waited = tonumber(info[1]:match("^waiting for the domain's health %(4 nodes%) %((%d+)s / 20s%): "))
    assert.is_true(waited ~= nil and waited >= progress.EVERY and waited < progress.EVERY + 2, info[1])
    assert.matches("10.0.0.2", info[1], 1, true)
  end)
end)
