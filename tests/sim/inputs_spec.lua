-- SPDX-License-Identifier: Apache-2.0
-- The node's inputs as the field has them (field cases C35-C39 of docs/design.md, "Field cases"),
-- with the real imexguard binary against the simulator under a real systemd user manager
-- (tests/with-systemd; contrib/simdomain.lua): a state directory that outlived a reboot (C36) and
-- the temp files of killed writes (C39). Every unit is stopped in after_each (d:destroy()).
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

local function ls(dir)
  local _, out = simdomain.capture("ls -A " .. simdomain.quote(dir))
  local t = {}
  for n in out:gmatch("[^\n]+") do t[n] = true end
  return t
end

describe("imexsim under systemd: the node's inputs", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  it("C36, C39: a registration of another boot is dropped and the prolog restarts; the temp files "
    .. "of killed writes are removed, look-alikes kept", function()
    d = simdomain.in_order(1)
    local dir = d:dir("n1")
    -- job 100 registered with another list during another boot (a state_dir that outlived it)
    simdomain.write_file(dir .. "/state/state.json", string.format(
      '{"jobs":[{"id":"100","nodes":"%s\\n","registered_us":"1700000000000000","invocation_id":"",'
      .. '"boot_id":"00000000-0000-4000-8000-000000000000"}]}\n', "127.0.0.99"))
    -- leftovers of killed writes, and files that only look like them
    for _, p in ipairs({ "state/.state.json.imexguard.AbC123", ".nodes_config.cfg.imexguard.x9Y8z7",
      "state/.foo.imexguard.AbC123", "state/.state.json.bak", ".config.cfg.imexguard.AbC123",
      ".nodes_config.cfg.AbC123" }) do
      simdomain.write_file(dir .. "/" .. p, "partial")
    end
    d:write_node_list("n1", { "n1" })
    -- the file no longer holds the job's list: the prolog must rewrite it and restart, which job 100
    -- (another list) would refuse if it still counted
    assert(d:start())
    d:write_node_list("n1", {})
    local r = d:prologs{ job = 101, nodelist = "n1", args = "--set log_level=debug" }.n1
    assert.equal("ok", r.outcome, r.output)
    assert.matches("dropping the registration%(s%) of job 100: made during another boot", r.output)
    assert.matches("removed " .. dir .. "/state/.state.json.imexguard.AbC123", r.output, 1, true)
    assert.matches("removed " .. dir .. "/.nodes_config.cfg.imexguard.x9Y8z7", r.output, 1, true)
    local state, top = ls(dir .. "/state"), ls(dir)
    assert.is_nil(state[".state.json.imexguard.AbC123"])
    assert.is_nil(top[".nodes_config.cfg.imexguard.x9Y8z7"])
    assert.is_true(state[".foo.imexguard.AbC123"] and state[".state.json.bak"]
      and top[".config.cfg.imexguard.AbC123"] and top[".nodes_config.cfg.AbC123"])
    local st = simdomain.read_file(dir .. "/state/state.json")
    assert.is_nil(st:find('"100"', 1, true))
    local boot = simdomain.read_file("/proc/sys/kernel/random/boot_id"):gsub("%s+$", "")
    assert.truthy(st:find('"boot_id":"' .. boot .. '"', 1, true), st)
  end)

  describe("C37: the command service on a unix socket only", function()
    -- one node whose config.cfg has IMEX_CMD_PORT left empty and a command socket in its directory
    local function socket_domain()
      d = simdomain.in_order(1)
      local sock = d:dir("n1") .. "/cmd.sock"
      d:configure("n1", { IMEX_CMD_PORT = "", IMEX_CMD_UNIX_DOMAIN_PATH = sock })
      return sock
    end

    it("the simulator serves it: the ctl answers through -u, not through -c alone", function()
      local sock = socket_domain()
      assert(d:start())
      local ok = simdomain.wait_until(function()
        local out = simdomain.capture(simdomain.quote(d.build .. "/nvidia-imex-ctl") .. " -u "
          .. simdomain.quote(sock) .. " -q")
        return out == true
      end, 10)
      assert.truthy(ok, "the ctl never reached the socket")
      local _, out = simdomain.capture(simdomain.quote(d.build .. "/nvidia-imex-ctl") .. " -u "
        .. simdomain.quote(sock) .. " -N -j")
      assert.matches('"status": "UP"', out, 1, true)
      local qout, qstatus = d:ctl("n1", "-q")
      assert.equal(1, qstatus, qout) -- -c alone: no TCP command port to reach
    end)

    it("the prolog rewrites, restarts and finds the domain healthy through the socket; the unit's "
      .. "daemon holds it", function()
      socket_domain()
      assert(d:start())
      d:write_node_list("n1", {})
      local r = d:prologs{ job = 101, nodelist = "n1", args = "--set log_level=debug" }.n1
      assert.equal("ok", r.outcome, r.output)
      assert.matches("restarted", r.output)
      assert.is_nil(r.output:find("owner unknown", 1, true), r.output)
      local st = d:prologs{ job = 102, nodelist = "n1" }.n1
      assert.equal("ok", st.outcome, st.output)
    end)

    it("a daemon started by hand on the socket, the unit inactive: service-failed naming it", function()
      local sock = socket_domain()
      d:write_node_list("n1", { "n1" })
      assert(d:systemctl("enable", d:unit("n1"))) -- installed and enabled, not started
      local pid = assert(d:start_stray("n1"))
      assert.truthy(simdomain.wait_until(function()
        return simdomain.capture("test -S " .. simdomain.quote(sock))
      end, 10))
      local r = d:prologs{ job = 103, nodelist = "n1" }.n1
      assert.equal("service-failed", r.outcome, r.output)
      assert.matches("pid " .. pid, r.output)
      assert.matches("command socket " .. sock:gsub("%p", "%%%0"), r.output)
    end)
  end)

  it("C35: a static list of rack-slot host names (a private hosts file for the daemons, the address map "
    .. "for imexguard): the static policy verifies the job; status shows name and address", function()
    local _, root = simdomain.capture("mktemp -d /tmp/imexsim.XXXXXX")
    root = root:gsub("%s+$", "")
    local net = simdomain.random_net()
    local hosts = string.format("127.0.%d.1 rack7-slot01\n127.0.%d.2 rack7-slot02\n", net, net)
    simdomain.write_file(root .. "/hosts", hosts)
    local extra = { "IMEXSIM_HOSTS_FILE=" .. root .. "/hosts" }
    for _, l in ipairs(simdomain.FAST_RECONNECT) do extra[#extra + 1] = l end
    d = simdomain.new{ nodes = 2, root = root, net = net, extra_cfg = extra }
    local map = simdomain.read_file(root .. "/addresses")
    simdomain.write_file(root .. "/addresses", map .. string.format("rack7-slot01 127.0.%d.1\n"
      .. "rack7-slot02 127.0.%d.2\n", net, net))
    for _, name in ipairs(d.names) do d:write_node_list(name, { "rack7-slot01", "rack7-slot02" }) end
    assert.equal("rack7-slot01\nrack7-slot02\n", d:nodes_file("n1"))
    assert(d:start())
    local policy = simdomain.quote(simdomain.src_dir() .. "/../policies/static_domain.lua")
    local r = d:prologs{ job = 101, nodelist = "n[1-2]", args = "--policy " .. policy }
    for _, name in ipairs(d.names) do
      assert.equal("ok", r[name].outcome, r[name].output)
      assert.matches("static domain: nothing rewritten or restarted", r[name].output)
    end
    assert.equal("rack7-slot01\nrack7-slot02\n", d:nodes_file("n1")) -- never rewritten
    local st = d:run_all{ command = "status", job = 101, nodelist = "n[1-2]", names = { "n1" },
      args = "--policy " .. policy }.n1
    assert.equal("ok", st.outcome, st.output)
    assert.matches("127%.0%." .. net .. "%.2 +rack7%-slot02", st.output)
  end)
end)
