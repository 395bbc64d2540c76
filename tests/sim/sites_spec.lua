-- SPDX-License-Identifier: Apache-2.0
-- What real sites give, reproduced by the simulator under a real systemd user manager
-- (tests/with-systemd; contrib/simdomain.lua, one imexsim@NODE.service per node), one knob each
-- (contrib/imexsim/README.md): an IPv4-only host whose ctl dials [::] (C44, IMEXSIM_NO_IPV6); a
-- daemon before 580 that dies of SIGUSR1 (C48, IMEXSIM_VERSION); a second daemon losing the node's
-- one IMEX session (C50, IMEXSIM_SESSION_FILE); a restarted node whose peer port drops SYNs
-- (C51, IMEXSIM_DROP_SYN_MS, IMEXSIM_CONNECT_TIMEOUT_MS); the instance timeline of a remembered
-- mismatch (C52, the state file's started= and blocks=). Every wait polls with a deadline; every
-- unit and hand-started daemon is stopped in after_each.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

-- Status of the pair from -> to (0-based IDs) in a decoded -N -j, or nil.
local function pair(t, from, to)
  local node = t and t.nodes and t.nodes[tostring(from)]
  local c = node and node.connections[tostring(to)]
  return c and c.status
end

-- The lines of a text that contain `needle` (plain text), in order.
local function lines_with(text, needle)
  local out = {}
  for line in (text or ""):gmatch("[^\n]+") do
    if line:find(needle, 1, true) then out[#out + 1] = line end
  end
  return out
end

-- The time of a daemon log line "[YYYY-MM-DD HH:MM:SS.mmm] ..." in milliseconds since midnight.
local function log_ms(line)
  local hh, mm, ss, ms = line:match("^%[%d+%-%d+%-%d+ (%d+):(%d+):(%d+)%.(%d+)%]")
  return hh and ((tonumber(hh) * 60 + tonumber(mm)) * 60 + tonumber(ss)) * 1000 + tonumber(ms)
end

-- KEY=value lines of a file as a table, or nil when it cannot be read.
local function keyvals(path)
  local text = simdomain.read_file(path)
  if not text then return nil end
  local t = {}
  for k, v in text:gmatch("([%w_]+)=([^\n]*)") do t[k] = v end
  return t
end

describe("imexsim under systemd: what real sites give", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  -- Wait until `name`'s ctl -N -j satisfies pred(t); returns t or nil.
  local function wait_json(name, pred, timeout)
    return simdomain.wait_until(function()
      local t = d:ctl_json(name)
      return t and pred(t) and t
    end, timeout or 10)
  end

  local function up(name, timeout)
    return wait_json(name, function(t) return t.status == "UP" end, timeout)
  end

  local function log(name) return simdomain.read_file(d:dir(name) .. "/imex.log") or "" end

  it("C44: an IPv4-only host (IMEXSIM_NO_IPV6) with IMEX_CMD_BIND_INTERFACE_IP empty: -c alone "
    .. "fails as the real ctl does, -i 127.x PORT answers, -N shows the local daemon unreachable",
  function()
    d = simdomain.in_order(2)
    for _, n in ipairs(d.names) do d:configure(n, { IMEX_CMD_BIND_INTERFACE_IP = "" }) end
    assert(d:start())
    assert.truthy(up("n1"), "domain never UP")
    -- With IPv6 the ctl reaches the daemon listening on all interfaces.
    assert.are.same({ "READY\n", 0 }, { d:ctl("n1", "-q") })
    d:configure("n1", { IMEXSIM_NO_IPV6 = 1 }) -- read by the ctl, at every call
    local out, rc = d:ctl("n1", "-q")
    assert.are.equal(1, rc)
    -- The real line (tests/fixtures/ctl/errors.txt), the port being 50005 here too.
    local sample = lines_with(simdomain.read_file("tests/fixtures/ctl/errors.txt"), "ipv6:")[1]
    assert.are.equal(sample .. "\n", out)
    -- The daemon is fine: asked at its address it answers.
    assert.are.same({ "READY\n", 0 }, { d:ctl("n1", "-i " .. d.addr.n1 .. " 50005 -q") })
    -- -N cannot reach the local daemon either: the answer for an unreachable one.
    local t = assert(d:ctl_json("n1"))
    assert.are.equal("DOWN", t.status)
    assert.are.equal("0.0.0.0", t.nodes["0"].host)
    assert.are.equal("UNAVAILABLE", t.nodes["0"].status)
    -- A node whose ctl has IMEX_CMD_BIND_INTERFACE_IP set is not affected.
    d:configure("n2", { IMEXSIM_NO_IPV6 = 1, IMEX_CMD_BIND_INTERFACE_IP = d.addr.n2 })
    assert.are.same({ "READY\n", 0 }, { d:ctl("n2", "-q") })
    assert.are.equal("UP", assert(d:ctl_json("n2")).status)
  end)

  it("C48: a daemon before 580 dies of SIGUSR1 (Result=signal, no goodbye); 580 and later (the "
    .. "default, 580.95.05-sim) restart their outgoing connections", function()
    d = simdomain.in_order(2, { "IMEXSIM_USR1_INTERVAL_MS=0" })
    d:configure("n1", { IMEXSIM_VERSION = "570.172.08-sim" })
    assert(d:start())
    assert.truthy(wait_json("n2", function(t)
      return t.nodes["0"].status == "READY" and t.nodes["1"].status == "READY"
    end), "daemons not READY")
    assert.are.equal("580.95.05-sim", assert(d:ctl_json("n2")).nodes["1"].version)
    local pid1 = d:prop("n1", "MainPID")
    assert(d:systemctl("kill", "--signal=SIGUSR1", d:unit("n1")))
    assert(d:systemctl("kill", "--signal=SIGUSR1", d:unit("n2")))
    assert.truthy(simdomain.wait_until(function() return d:prop("n1", "ActiveState") == "failed" end, 10),
      "the 570 daemon survived SIGUSR1")
    assert.are.equal("signal", d:prop("n1", "Result"))
    assert.are.equal("10", d:prop("n1", "ExecMainStatus")) -- SIGUSR1
    assert.is_false(simdomain.alive(tonumber(pid1)))
    assert.are.same({}, lines_with(log("n1"), "Shutting down"))
    -- The 580 daemon is the same instance, its connections restarted.
    assert.truthy(simdomain.wait_until(function()
      return #lines_with(log("n2"), "SIGUSR1: restarting outgoing connections") == 1
    end, 5))
    assert.are.equal("active", d:prop("n2", "ActiveState"))
    assert.are.equal(1, d:starts("n2"))
  end)

  it("C50: one IMEX session per node (IMEXSIM_SESSION_FILE): a second daemon fails NV_ERR_IN_USE, "
    .. "its start job fails with its last ERROR line in LOG_FILE_NAME and on stderr; /proc/locks "
    .. "names the holder", function()
    d = simdomain.in_order(1)
    local dir = d:dir("n1")
    local session, stderr = dir .. "/imex-session", dir .. "/unit-stderr"
    d:configure("n1", { IMEXSIM_SESSION_FILE = session })
    -- "A container's" daemon on the node holds the session: its own config and ports, the same
    -- session (the unit's daemon would otherwise conflict on the ports first).
    local other = dir .. "/container.cfg"
    simdomain.write_file(other, assert(simdomain.read_file(dir .. "/config.cfg")))
    d:configure("n1", { SERVER_PORT = 50100, IMEX_CMD_PORT = 50105,
      LOG_FILE_NAME = dir .. "/container.log" }, other)
    local holder = assert(d:start_stray("n1", other))
    assert(d:unit_options("n1", { Service = { StandardError = "file:" .. stderr } }))
    local ok = d:systemctl("start", d:unit("n1"))
    assert.is_false(ok)
    assert.are.equal("failed", d:prop("n1", "ActiveState"))
    assert.are.equal("exit-code", d:prop("n1", "Result"))
    local errors = lines_with(log("n1"), "[ERROR]")
    assert.truthy(errors[#errors]:match("%] Failed to allocate Imex session, status: NV_ERR_IN_USE$"),
      errors[#errors])
    local journal = lines_with(simdomain.read_file(stderr), "[ERROR]")
    assert.are.equal(errors[#errors], journal[#journal])
    -- The holder: the flock on the session file (its inode), as /proc/locks lists it.
    local _, inode = simdomain.capture("stat -c %i " .. simdomain.quote(session))
    local pids = {}
    for line in simdomain.read_file("/proc/locks"):gmatch("[^\n]+") do
      local pid, ino = line:match("FLOCK%s+%S+%s+WRITE%s+(%d+)%s+%x+:%x+:(%d+)")
      if ino == inode:match("%d+") then pids[#pids + 1] = tonumber(pid) end
    end
    assert.are.same({ holder }, pids)
    -- Once the holder is gone the unit starts and holds the session itself.
    d:stop_strays()
    assert(d:systemctl("reset-failed", d:unit("n1")))
    assert(d:systemctl("start", d:unit("n1")))
    assert.are.equal("active", d:prop("n1", "ActiveState"))
  end)

  it("C51: a restarted node whose peer port drops SYNs (IMEXSIM_DROP_SYN_MS) is reached by its "
    .. "peers only after the drop, through the connect attempt made during it; with "
    .. "IMEXSIM_CONNECT_TIMEOUT_MS shorter the attempts time out and repeat", function()
    d = simdomain.in_order(3)
    d:configure("n2", { IMEXSIM_CONNECT_TIMEOUT_MS = 500 })
    assert(d:start())
    assert.truthy(up("n1"), "domain never UP")
    d:configure("n3", { IMEXSIM_DROP_SYN_MS = 3000 })
    assert(d:systemctl("restart", d:unit("n3")))
    -- The restarted node's own links come up at once, its peers' links to it do not.
    local t = assert(wait_json("n3", function(j)
      return pair(j, 2, 0) == "CONNECTED" and pair(j, 2, 1) == "CONNECTED"
    end, 2), "n3's own links not up")
    assert.are_not.equal("CONNECTED", pair(t, 0, 2))
    assert.are_not.equal("CONNECTED", pair(t, 1, 2))
    assert.truthy(up("n1", 15), "the survivors never reached n3")
    local opened = lines_with(log("n3"), "takes connections again")
    assert.are.equal(1, #opened)
    -- n1 (IMEXSIM_CONNECT_TIMEOUT_MS 20 s): one attempt spans the drop; the kernel's SYN
    -- retransmits complete it at least a second after it began, after the port opened.
    local n1 = log("n1")
    local attempts = lines_with(n1, "Attempting connection for target node 2")
    local established = lines_with(n1, "Connection established to node 2")
    local t_attempt, t_up = log_ms(attempts[#attempts]), log_ms(established[#established])
    assert.is_true(t_up - t_attempt >= 1000, attempts[#attempts] .. " / " .. established[#established])
    assert.is_true(t_up >= log_ms(opened[1]), established[#established])
    assert.are.same({}, lines_with(n1, "timed out"))
    -- n2 (500 ms): its attempts into the drop time out and are made again.
    assert.is_true(#lines_with(log("n2"), "to node 2 - " .. d.addr.n3 .. ":50000 timed out after 500 ms")
      >= 2)
  end)

  it("C52: the state file tells which end of a remembered mismatch started after it began "
    .. "(started=, blocks=ID@TIME)", function()
    d = simdomain.in_order(2)
    for _, n in ipairs(d.names) do d:configure(n, { IMEXSIM_STATE_FILE = d:dir(n) .. "/imexsim.state" }) end
    assert(d:start())
    assert.truthy(up("n1"), "domain never UP")
    local s1 = assert(keyvals(d:dir("n1") .. "/imexsim.state"))
    assert.are.equal("", s1.blocks)
    -- n2's list changes under n1's running daemon: n1, which had n2 CONNECTED, remembers it.
    d:write_node_list("n2", { "n2", "n1" })
    assert(d:systemctl("restart", d:unit("n2")))
    local blocked = simdomain.wait_until(function()
      local s = keyvals(d:dir("n1") .. "/imexsim.state")
      return s and s.blocks ~= "" and s
    end, 10)
    assert.truthy(blocked, "n1 never remembered the mismatch")
    local since = tonumber(blocked.blocks:match("^1@(%d+)$"))
    local s2 = assert(keyvals(d:dir("n2") .. "/imexsim.state"))
    assert.are.equal("", s2.blocks) -- a new instance meeting another list remembers nothing
    assert.are.equal(s1.started, blocked.started) -- the same instance
    assert.is_true(tonumber(s1.started) < since)
    -- n2 restarts with n1's list: still NODE_MAP_MISMATCH (C32); n2 started after the mismatch
    -- began, so it cannot be the end that remembers it, n1 is.
    d:write_node_list("n2", { "n1", "n2" })
    assert(d:systemctl("restart", d:unit("n2")))
    assert.truthy(wait_json("n1", function(j)
      return j.nodes["1"].status == "READY" and pair(j, 1, 0) == "NODE_MAP_MISMATCH"
        and pair(j, 0, 1) == "NODE_MAP_MISMATCH"
    end), "the pair recovered")
    s2 = assert(keyvals(d:dir("n2") .. "/imexsim.state"))
    assert.is_true(tonumber(s2.started) > since)
    assert.are.equal("", s2.blocks)
    assert.are.equal(blocked.blocks, assert(keyvals(d:dir("n1") .. "/imexsim.state")).blocks)
  end)
end)
