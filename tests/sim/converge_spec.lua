-- SPDX-License-Identifier: Apache-2.0
-- Field cases C32 (a node-map mismatch that stays) and C33 (an idle node's health) of
-- docs/design.md under the real systemd user manager (tests/with-systemd; contrib/simdomain.lua,
-- one imexsim@NODE.service per node). The simulator keeps a node-map mismatch until both ends run
-- new daemons with one list (its default, IMEXSIM_MISMATCH_CLEARS=both). imexguard's prologs run
-- on the nodes of each job at once (simdomain's prologs); every wait polls with a deadline; the
-- domain is destroyed in after_each.
package.path = "contrib/?.lua;" .. package.path
local cjson = require("cjson")
local simdomain = require("simdomain")

describe("C32 and C33 under systemd", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  -- A domain of `n` nodes whose daemons start with the given node lists ({name = {names...}}).
  local function domain(n, lists)
    d = simdomain.new{ nodes = n, extra_cfg = simdomain.FAST_RECONNECT }
    for name, list in pairs(lists) do d:write_node_list(name, list) end
    assert(d:start())
    return d
  end

  -- Prologs (or another command) of job `id` on `nodelist`, run on `names` at once.
  local function run(id, nodelist, names, command, args)
    return d:run_all{ job = id, nodelist = nodelist, names = names, command = command or "prolog",
      args = args }
  end

  -- Every result ok (exit 0), else fail naming the node and its output.
  local function all_ok(res)
    for name, r in pairs(res) do
      assert.are.equal(0, r.status, name .. ": " .. r.output)
      assert.are.equal("ok", r.outcome, name .. ": " .. r.output)
    end
  end

  local function starts()
    local t = {}
    for _, n in ipairs(d.names) do t[n] = d:starts(n) end
    return t
  end

  local function up(name)
    return simdomain.wait_until(function()
      local t = d:ctl_json(name)
      return t and t.status == "UP"
    end, 30)
  end

  -- C32 up to job 3's prologs: n1 and n2 ran {n1, n2} (job 1); job 2 restarted n2 with {n2, n3} while
  -- n1 idled; n1 now holds a mismatch with n2 that stays.
  local function c32()
    domain(3, { n1 = { "n1", "n2" }, n2 = { "n1", "n2" }, n3 = { "n3" } })
    assert.truthy(up("n1"), "job 1's domain never UP")
    all_ok(run(2, "n[2-3]", { "n2", "n3" }))
    run(2, "n[2-3]", { "n2", "n3" }, "epilog")
    assert.truthy(simdomain.wait_until(function()
      local t = d:ctl_json("n1")
      return t and t.nodes["0"].connections["1"].status == "NODE_MAP_MISMATCH"
    end, 10), "n1 never saw the mismatch with n2's {n2, n3}")
  end

  it("C32: job 3 on n[1-2]: n2 restarts with n1's list, n1 is current; both prologs ok, n1's daemon "
    .. "restarted once to clear the stale mismatch", function()
    c32()
    local before = starts()
    local res = run(3, "n[1-2]", { "n1", "n2" })
    all_ok(res)
    assert.truthy(res.n1.output:find("restarted once to clear a stale node-map mismatch", 1, true),
      res.n1.output)
    assert.are.equal(before.n1 + 1, d:starts("n1"))
    assert.is_true(d:starts("n2") - before.n2 <= 2, "n2 started more than twice")
    assert.truthy(up("n1"))
  end)

  it("C32, the registry forbids n1's restart (job 99 uses its daemon): both nodes end stuck-mismatch (19) "
    .. "naming both nodes to restart together, n2 (the new end, C52) without a second restart; restarting "
    .. "both clears it", function()
    c32()
    -- job 99 registered on n1 with {n1, n2}, as its prolog would have left it
    local nodes = d.addr.n1 .. "\n" .. d.addr.n2 .. "\n"
    simdomain.write_file(d:dir("n1") .. "/state/state.json", cjson.encode({ jobs = { { id = "99",
      nodes = nodes, registered_us = string.format("%d", os.time() * 1000000), invocation_id = "" } } })
      .. "\n")
    local before = starts()
    -- n2, the new end, waits the whole health wait for n1's restart, which never comes: a short one
    local res = run(3, "n[1-2]", { "n1", "n2" }, nil, "--set health_timeout=12")
    for _, n in ipairs({ "n1", "n2" }) do
      assert.are.equal(19, res[n].status, n .. ": " .. res[n].output)
      assert.are.equal("stuck-mismatch", res[n].outcome, n .. ": " .. res[n].output)
      assert.truthy(res[n].output:find("restart " .. d:unit("n1"):gsub("n1", n) .. " on "
        .. d.addr.n1 .. " (n1) and " .. d.addr.n2 .. " (n2) together", 1, true), res[n].output)
      assert.is_nil(res[n].output:find("peers are not", 1, true), res[n].output)
    end
    assert.truthy(res.n1.output:find("job 99", 1, true), res.n1.output)
    assert.are.equal(before.n1, d:starts("n1"))
    assert.are.equal(before.n2 + 1, d:starts("n2")) -- the new list: a new end restarts for nothing else
    -- the remedy: both ends restarted
    assert(d:systemctl("restart", d:unit("n1")))
    assert(d:systemctl("restart", d:unit("n2")))
    assert.truthy(up("n1"), "not UP after restarting both ends")
  end)

  it("3 nodes: after a job on n[2-3] the idle n1 is healthy (C33); a job on n[1-3] converges with one "
    .. "restart of n1; an idle n1 whose daemon is not READY fails", function()
    domain(3, { n1 = { "n1", "n2", "n3" }, n2 = { "n1", "n2", "n3" }, n3 = { "n1", "n2", "n3" } })
    assert.truthy(up("n1"))
    all_ok(run(2, "n[2-3]", { "n2", "n3" }))
    run(2, "n[2-3]", { "n2", "n3" }, "epilog")
    assert.truthy(simdomain.wait_until(function()
      local t = d:ctl_json("n1")
      return t and t.nodes["0"].connections["1"].status == "NODE_MAP_MISMATCH"
        and t.nodes["0"].connections["2"].status == "NODE_MAP_MISMATCH"
    end, 10), "n1 never saw the mismatch with n2 and n3")
    -- C33: idle n1 (no job registered) judged on what it owns
    local h = run(4, "n1", { "n1" }, "health")
    assert.are.equal(0, h.n1.status, h.n1.output)
    assert.truthy(h.n1.output:find("no job registered, judged on what it owns", 1, true), h.n1.output)
    local s = run(4, "n1", { "n1" }, "status")
    assert.are.equal(0, s.n1.status, s.n1.output)
    -- C32 with two peers: n1 current, n2 and n3 restart with n1's list
    local before = starts()
    local res = run(5, "n[1-3]", d.names)
    all_ok(res)
    assert.are.equal(before.n1 + 1, d:starts("n1"))
    for _, n in ipairs({ "n2", "n3" }) do assert.is_true(d:starts(n) - before[n] <= 2, n) end
    assert.truthy(up("n1"))
    run(5, "n[1-3]", d.names, "epilog")
    -- an idle node whose daemon is not READY still fails
    d:configure("n1", { IMEXSIM_NEVER_READY = 1 })
    assert(d:systemctl("restart", d:unit("n1")))
    h = run(6, "n1", { "n1" }, "health")
    assert.are.equal(9, h.n1.status, h.n1.output)
    assert.truthy(h.n1.output:find("not READY", 1, true), h.n1.output)
  end)
end)
