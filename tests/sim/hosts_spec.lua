-- SPDX-License-Identifier: Apache-2.0
-- Host names in the node list resolved through the host's resolver, with a private hosts file
-- bind-mounted over /etc/hosts in each unit's own mount namespace (a drop-in with
-- BindReadOnlyPaths=FILE:/etc/hosts), under a real systemd user manager (tests/with-systemd;
-- contrib/simdomain.lua): the membership of NVIDIA's DRA driver and of imexguard's slots (#30).
-- The daemon finds itself by the name that resolves to its address, once; every connection attempt
-- resolves its peer again, so a broken channel follows a changed mapping on its next retry while a
-- healthy one keeps its old address until SIGUSR1; a slot mapped to a sentinel that refuses
-- (127.0.0.2) shows UNAVAILABLE. The machine's /etc/hosts is never touched.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

-- Status of the pair from -> to (0-based IDs) in a decoded -N -j, or nil.
local function pair(t, from, to)
  local node = t and t.nodes and t.nodes[tostring(from)]
  local c = node and node.connections[tostring(to)]
  return c and c.status
end

local SENTINEL = "127.0.0.2" -- what NVIDIA's DRA driver maps unused slots to (nothing listens)

describe("imexsim under systemd: node names through a hosts file bind-mounted into each unit", function()
  local d, slots

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  -- Write node `name`'s private hosts file: slot k -> map[k] (default: node k+1's address).
  -- In place (truncate and write): a bind mount holds the file's inode, so a file replaced by
  -- rename(2) is not what the unit sees (see the first test).
  local function write_hosts(name, map)
    local lines = { "# imexsim test: private hosts file of " .. name }
    for k, slot in ipairs(slots) do
      lines[#lines + 1] = ((map or {})[k] or d.addr[d.names[k]]) .. " " .. slot
    end
    simdomain.write_file(d:dir(name) .. "/hosts", table.concat(lines, "\n") .. "\n")
  end

  -- A domain of n nodes whose node files list n slot names (unknown to the machine's resolver),
  -- each unit resolving them through its own hosts file; not started.
  local function slot_domain(n)
    d = simdomain.new { nodes = n, extra_cfg = {
      "IMEXSIM_RECONNECT_MS=100", "IMEXSIM_RECONNECT_MAX_MS=400", "IMEXSIM_USR1_INTERVAL_MS=0" } }
    slots = {}
    for k = 1, n do slots[k] = string.format("imexsim-slot-%d-%d", d.net, k - 1) end
    for _, name in ipairs(d.names) do
      d:write_node_list(name, slots)
      write_hosts(name)
      assert(d:unit_options(name, { Service = { BindReadOnlyPaths = d:dir(name) .. "/hosts:/etc/hosts" } }))
    end
  end

  local function wait_json(name, pred, timeout)
    return simdomain.wait_until(function()
      local t = d:ctl_json(name)
      return t and pred(t) and t
    end, timeout or 10)
  end

  local function log(name) return simdomain.read_file(d:dir(name) .. "/imex.log") or "" end

  local function usr1(name)
    local before = select(2, log(name):gsub("SIGUSR1: restarting", ""))
    assert(d:systemctl("kill", "--signal=SIGUSR1", d:unit(name)))
    assert.truthy(simdomain.wait_until(function()
      return select(2, log(name):gsub("SIGUSR1: restarting", "")) > before
    end, 5), name .. " did not act on SIGUSR1")
  end

  it("resolves slot names in the unit's own /etc/hosts (BindReadOnlyPaths=); the ctl shows the "
    .. "names and asks each node where its daemon finds it; a file replaced by rename is not seen",
  function()
    slot_domain(3)
    assert(d:start())
    local t = assert(wait_json("n1", function(j) return j.status == "UP" end), "domain never UP")
    for k = 0, 2 do assert.are.equal(slots[k + 1], t.nodes[tostring(k)].host) end
    -- The machine's resolver (this process's mount namespace) does not know the names.
    local known = simdomain.capture("getent hosts " .. slots[1])
    assert.is_false(known)
    -- Each daemon found itself by its address (BIND_INTERFACE_IP) through its own hosts file,
    -- logged as the real daemon does.
    assert.truthy(log("n2"):find("] Treating node config entry '" .. slots[1] .. "' as a host name.\n",
      1, true))
    local identified = "] Identified this node as ID 1, using bind address of " .. d.addr.n2 .. "\n"
    assert.truthy(log("n2"):find(identified, 1, true))
    -- rename(2) gives the path a new inode; the unit keeps the one it bound: after SIGUSR1 its
    -- connections resolve the old mapping again.
    local tmp = d:dir("n1") .. "/hosts.new"
    simdomain.write_file(tmp, SENTINEL .. " " .. slots[2] .. "\n")
    assert(os.rename(tmp, d:dir("n1") .. "/hosts"))
    usr1("n1")
    assert.truthy(wait_json("n1", function(j) return j.status == "UP" end), "n1 lost the mesh")
    assert.is_nil(log("n1"):find("resolves to " .. SENTINEL, 1, true))
  end)

  it("a healthy channel keeps its address until SIGUSR1; a slot mapped to the sentinel refuses "
    .. "(UNAVAILABLE, its links RECOVERING); a broken channel re-resolves on its next retry",
  function()
    slot_domain(3)
    assert(d:start())
    assert.truthy(wait_json("n1", function(j) return j.status == "UP" end), "domain never UP")
    -- n1 and n2 map n3's slot to the sentinel (n3's own file keeps its slot).
    write_hosts("n1", { [3] = SENTINEL })
    write_hosts("n2", { [3] = SENTINEL })
    -- Healthy channels keep the address they have: observed UP for a second (several of the
    -- reconnect periods in which a broken channel would have resolved again).
    local seen = {}
    simdomain.wait_until(function()
      local j = d:ctl_json("n1")
      seen[#seen + 1] = j and j.status
      return false
    end, 1)
    assert.is_true(#seen >= 2)
    for _, status in ipairs(seen) do assert.are.equal("UP", status) end
    assert.is_nil(log("n1"):find("resolves to", 1, true))
    local t
    -- SIGUSR1: every outgoing connection restarts and resolves again.
    usr1("n1")
    usr1("n2")
    t = assert(wait_json("n1", function(j)
      return pair(j, 0, 2) == "RECOVERING" and pair(j, 1, 2) == "RECOVERING"
        and j.nodes["2"].status == "UNAVAILABLE"
    end), "the sentinel slot is not shown refused")
    assert.truthy(log("n1"):find("resolves to " .. SENTINEL .. " (was " .. d.addr.n3 .. ")", 1, true))
    for k = 0, 2 do assert.are.equal("INVALID", pair(t, 2, k)) end
    assert.are.equal("", t.nodes["2"].version)
    assert.are.equal("DEGRADED", t.status)
    assert.are.equal("CONNECTED", pair(t, 0, 1))
    -- n3's own view is unchanged: its links to n1 and n2 still up.
    local t3 = assert(d:ctl_json("n3"))
    assert.are.equal("CONNECTED", pair(t3, 2, 0))
    assert.are.equal("CONNECTED", pair(t3, 2, 1))
    -- The slot back to n3 in n1's file, no signal: n1's broken channel finds it on a retry.
    write_hosts("n1")
    assert.truthy(wait_json("n1", function(j) return pair(j, 0, 2) == "CONNECTED" end, 5),
      "n1's broken channel did not re-resolve")
    assert.are.equal("RECOVERING", pair(assert(d:ctl_json("n2")), 1, 2))
  end)
end)
