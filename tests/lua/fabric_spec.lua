-- SPDX-License-Identifier: Apache-2.0
-- imexguard.fabric: parsing nvidia-smi's fabric query (field reports in tests/fixtures/nvidia-smi/),
-- judging a node's GPUs, the domain map's partition name, and the bounded check on the kit's host.
local fabric = require "imexguard.fabric"
local testing = require "imexguard.testing"

local U = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
local V = "dc6e40c4-d722-4357-9ba6-5291dd461278"

local function fixture(name)
  local f = assert(io.open("tests/fixtures/nvidia-smi/" .. name))
  local t = f:read("a")
  f:close()
  return t
end

local function line(i, state, status, uuid, clique)
  return string.format("%d, %s, %s, %s, %s", i, state, status, uuid, clique)
end

describe("fabric.parse", function()
  it("reads the field reports' CSV", function()
    local g = assert(fabric.parse(fixture("csv-4gpu-completed.csv")))
    assert.equal(4, #g)
    assert.same({ index = 3, na = false, state = "Completed", status = "Success", cluster_uuid = U,
      clique_id = 4026 }, g[4])
    g = assert(fabric.parse(fixture("csv-no-nvswitch.csv")))
    assert.equal(4, #g)
    for _, x in ipairs(g) do
      assert.is_true(x.na)
      assert.is_nil(x.state)
      assert.is_nil(x.status)
      assert.is_nil(x.cluster_uuid)
      assert.is_nil(x.clique_id)
    end
    g = assert(fabric.parse(fixture("csv-insufficient-resources.csv")))
    assert.equal("Insufficient Resources", g[1].status)
    assert.equal(fabric.ZERO_UUID, g[1].cluster_uuid)
    assert.equal(0, g[1].clique_id)
  end)

  it("takes blanks, tabs, CRLF, blank lines, bracketed N/A and an upper-case UUID", function()
    local g = assert(fabric.parse("\n  0 ,Completed,   Success ,\t" .. U:upper() .. " ,32766\r\n\n"
      .. "1, [N/A], [Not Supported], N/A, [N/A]\r\n   \n"))
    assert.equal(2, #g)
    assert.equal(U, g[1].cluster_uuid)
    assert.equal(32766, g[1].clique_id)
    assert.is_true(g[2].na)
  end)

  it("keeps every state and any status text", function()
    local g = assert(fabric.parse(table.concat({ line(0, "Not Started", "N/A", "N/A", "N/A"),
      line(1, "In Progress", "N/A", "N/A", "N/A"), line(2, "Completed", "Unknown Error", U, 7) }, "\n")))
    assert.equal("Not Started", g[1].state)
    assert.equal("In Progress", g[2].state)
    assert.equal("Unknown Error", g[3].status)
  end)

  local bad = {
    { "", "no GPU line" },
    { "\n \n", "no GPU line" },
    { "0, Completed, Success, " .. U, "4 fields instead of 5" },
    { "0, Completed, Success, " .. U .. ", 1, extra", "6 fields instead of 5" },
    { "x, Completed, Success, " .. U .. ", 1", "index" },
    { "-1, Completed, Success, " .. U .. ", 1", "index" },
    { "0, Completed, Success, " .. U .. ", 1\n0, Completed, Success, " .. U .. ", 1", "listed twice" },
    { "0, Done, Success, " .. U .. ", 1", "unknown fabric.state" },
    { "0, Completed, , " .. U .. ", 1", "empty fabric.status" },
    { "0, Completed, Success, 9c6f5af3, 1", "not a UUID" },
    { "0, Completed, Success, " .. U .. ", 1.5", "not a number" },
    { "0, Completed, Success, " .. U .. ", -3", "not a number" },
    { 'Field "fabric.state" is not a valid field to query.', "fields instead of 5" },
    { "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "fields" },
    { "\0\1\2", "fields" },
  }
  for _, c in ipairs(bad) do
    it("refuses " .. string.format("%q", c[1]):sub(1, 50) .. " naming what is wrong", function()
      local g, err = fabric.parse(c[1])
      assert.is_nil(g)
      assert.matches(c[2], err, 1, true)
      assert.is_nil(err:find("\n"))
    end)
  end

  it("refuses a non-string", function()
    assert.is_nil(fabric.parse(nil))
  end)
end)

describe("fabric.parse_q (nvidia-smi -q, Fabric section)", function()
  it("reads the field reports", function()
    local g = assert(fabric.parse_q(fixture("q-insufficient-resources.txt")))
    assert.same({ index = 0, na = false, state = "Completed", status = "Insufficient Resources",
      cluster_uuid = fabric.ZERO_UUID, clique_id = 0 }, g[1])
    g = assert(fabric.parse_q(fixture("q-completed-health-unhealthy.txt")))
    assert.same({ index = 0, na = false, state = "Completed", status = "Success", cluster_uuid = V,
      clique_id = 2 }, g[1])
  end)

  it("numbers several GPUs in order; a GPU without a Fabric section is N/A", function()
    local g = assert(fabric.parse_q("GPU 00000008:01:00.0\n    Fabric\n        State : In Progress\n"
      .. "        Status : N/A\n        CliqueId : N/A\n        ClusterUUID : N/A\n    Other\n"
      .. "        State : Completed\nGPU 00000009:01:00.0\n    Product Name : NVIDIA GB200\n"))
    assert.equal(2, #g)
    assert.equal("In Progress", g[1].state)
    assert.is_true(g[2].na)
    assert.is_nil(fabric.parse_q("no gpus here"))
  end)
end)

describe("fabric.judge", function()
  local function judge(lines) return fabric.judge(assert(fabric.parse(table.concat(lines, "\n")))) end
  local function healthy(n, uuid, clique)
    local t = {}
    for i = 0, n - 1 do t[#t + 1] = line(i, "Completed", "Success", uuid or U, clique or 32766) end
    return t
  end

  it("healthy: every GPU registered in one partition, named", function()
    local v = judge(healthy(4))
    assert.equal("healthy", v.kind)
    assert.same({ cluster_uuid = U, clique_id = 32766, id = U .. ".32766" }, v.partition)
    assert.matches(U .. ".32766", v.message, 1, true)
    assert.equal("healthy", judge(healthy(1)).kind)
    assert.equal("healthy", fabric.judge(assert(fabric.parse(fixture("csv-4gpu-completed.csv")))).kind)
  end)

  it("none: every GPU N/A (no NVSwitch)", function()
    local v = fabric.judge(assert(fabric.parse(fixture("csv-no-nvswitch.csv"))))
    assert.equal("none", v.kind)
    assert.matches("no multi%-node NVLink", v.message)
  end)

  it("pending: a GPU Not Started or In Progress, the others registered", function()
    local t = healthy(4)
    t[3] = line(2, "In Progress", "N/A", "N/A", "N/A")
    local v = judge(t)
    assert.equal("pending", v.kind)
    assert.same({ 2 }, v.pending)
    assert.matches("GPU 2 In Progress", v.message, 1, true)
    t[1] = line(0, "Not Started", "N/A", "N/A", "N/A")
    v = judge(t)
    assert.same({ 0, 2 }, v.pending)
  end)

  local faults = {
    { "a failed status", 1, line(1, "Completed", "Insufficient Resources", U, 32766),
      { "GPU 1", "fabric.status Insufficient Resources", "failed" } },
    { "Unknown Error", 2, line(2, "Completed", "Unknown Error", U, 32766), { "GPU 2", "Unknown Error" } },
    { "a zero ClusterUUID", 3, line(3, "Completed", "Success", fabric.ZERO_UUID, 0),
      { "GPU 3", "zero ClusterUUID" } },
    { "no ClusterUUID", 0, line(0, "Completed", "Success", "N/A", 5), { "GPU 0", "zero ClusterUUID" } },
    { "no CliqueId", 1, line(1, "Completed", "Success", U, "N/A"), { "GPU 1", "no CliqueId" } },
    { "a GPU N/A beside registered ones", 2, line(2, "N/A", "N/A", "N/A", "N/A"),
      { "GPU 2", "fabric.state N/A" } },
    { "another CliqueId", 3, line(3, "Completed", "Success", U, 4026),
      { "GPU 3", "CliqueId 4026", "GPUs 0-2", U .. ".32766" } },
    { "another ClusterUUID", 1, line(1, "Completed", "Success", V, 32766),
      { "GPU 1", V, "GPUs 0, 2, 3" } },
  }
  for _, c in ipairs(faults) do
    it("fault: " .. c[1] .. " names the GPU and its fields", function()
      local t = healthy(4)
      t[c[2] + 1] = c[3]
      local v = judge(t)
      assert.equal("fault", v.kind)
      assert.equal(c[2], v.gpu)
      for _, want in ipairs(c[4]) do assert.matches(want, v.message, 1, true) end
    end)
  end

  it("a fault wins over a GPU still registering (a failed status is final)", function()
    local t = healthy(4)
    t[1] = line(0, "In Progress", "N/A", "N/A", "N/A")
    t[2] = line(1, "Completed", "Insufficient Resources", fabric.ZERO_UUID, 0)
    assert.equal("fault", judge(t).kind)
  end)

  it("two partitions of two GPUs each: the first printed keeps the majority's place", function()
    local v = judge({ line(0, "Completed", "Success", U, 1), line(1, "Completed", "Success", U, 1),
      line(2, "Completed", "Success", U, 2), line(3, "Completed", "Success", U, 2) })
    assert.equal("fault", v.kind)
    assert.equal(2, v.gpu)
    assert.matches("GPUs 0-1", v.message, 1, true)
  end)

  it("the -q field report with Insufficient Resources is a fault", function()
    local v = fabric.judge(assert(fabric.parse_q(fixture("q-insufficient-resources.txt"))))
    assert.equal("fault", v.kind)
    assert.matches("Insufficient Resources", v.message, 1, true)
  end)
end)

describe("fabric.matches (the domain map's partition name)", function()
  local p = { cluster_uuid = U, clique_id = 32766 }
  it("a name of the form <ClusterUUID>.<CliqueId> or <ClusterUUID>:<CliqueId> is compared", function()
    assert.is_true(fabric.matches(p, U .. ".32766"))
    assert.is_true(fabric.matches(p, U:upper() .. ":32766"))
    local ok, why = fabric.matches(p, U .. ".4026")
    assert.is_false(ok)
    assert.matches(U .. ".4026", why, 1, true)
    assert.matches(U .. ".32766", why, 1, true)
    ok, why = fabric.matches(p, V .. ":32766")
    assert.is_false(ok)
    assert.matches(V .. ".32766", why, 1, true)
  end)

  it("a node without a partition is not in the named one", function()
    local ok, why = fabric.matches(nil, U .. ".1")
    assert.is_false(ok)
    assert.matches("no NVLink partition", why, 1, true)
  end)

  it("any other name: no comparison", function()
    for _, name in ipairs({ "rack1", "b1", "", U, U .. ".", U .. ".x", "9c6f5af3.1", U .. ".1.2",
      "x" .. U .. ".1" }) do
      assert.is_nil(fabric.matches(p, name), name)
    end
    assert.is_nil(fabric.matches(p, nil))
  end)
end)

describe("fabric.check on the kit's host", function()
  local function ctx(hopts, settings)
    local h = testing.host(hopts)
    return testing.ctx{ host = h, settings = settings }, h
  end

  it("runs the query through host.run with the nvidia_smi argv, bounded", function()
    local c, h = ctx({}, { nvidia_smi = { "/opt/wrap", "nvidia-smi" } })
    local r = assert(fabric.check(c))
    assert.equal("healthy", r.state)
    assert.same({ "/opt/wrap", "nvidia-smi", fabric.QUERY[1], fabric.QUERY[2] }, h.runs[1])
    assert.equal(r, c.fabric)
    assert.equal(testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID, r.partition.id)
  end)

  it("off: nothing runs", function()
    local c, h = ctx({}, { fabric_check = "off" })
    assert.equal("off", assert(fabric.check(c, { wait = true })).state)
    assert.equal(0, #h.runs)
  end)

  it("waits while a GPU registers, paced, then ok; one that stays is a fault after fabric_timeout", function()
    local t0
    local function smi(_, _, h)
      t0 = t0 or h.now()
      local st = h.now() - t0 < 4 and "In Progress" or "Completed"
      return testing.gpus({ {}, {}, { state = st }, {} })
    end
    local c, h = ctx({ nvidia_smi = smi })
    local r = assert(fabric.check(c, { wait = true }))
    assert.equal("healthy", r.state)
    assert.is_true(h.now() - t0 >= 4)
    assert.is_true(h.now() - t0 <= 4 + 2 * 0.25 * 2 + 0.1) -- at most one slow gap past the change
    assert.is_true(r.polls <= 1 + 4 / 0.25 + 4)
    assert.matches("after waiting", r.message)
    -- without wait (status): one read, pending
    c = ctx({ nvidia_smi = testing.gpus({ {}, { state = "In Progress" } }) })
    assert.equal("pending", assert(fabric.check(c)).state)
    -- it stays: fabric-fault after fabric_timeout, naming the GPU
    c, h = ctx({ nvidia_smi = testing.gpus({ {}, { state = "In Progress" } }) }, { fabric_timeout = 3 })
    local start = h.now()
    local ok, o, m = fabric.check(c, { wait = true })
    assert.is_nil(ok)
    assert.equal("fabric-fault", o)
    assert.matches("GPU 1 In Progress", m, 1, true)
    assert.matches("fabric_timeout 3", m, 1, true)
    assert.is_true(h.now() - start <= 3 + 0.1)
  end)

  it("a budget that runs out while waiting is deadline-exceeded", function()
    local c = ctx({ deadline = 2, nvidia_smi = testing.gpus({ { state = "Not Started" } }) })
    local ok, o = fabric.check(c, { wait = true })
    assert.is_nil(ok)
    assert.is_true(o == "deadline-exceeded" or o == "fabric-fault")
  end)

  local unknown = {
    { "absent", testing.ABSENT, "cannot run" },
    { "hung", testing.HANG, "hung" },
    { "failing", { status = 9, stdout = "NVIDIA-SMI has failed because it couldn't communicate with the "
      .. "NVIDIA driver.\n" }, "exited 9" },
    { "garbage", "garbage\n", "unparsable" },
  }
  for _, u in ipairs(unknown) do
    it("nvidia-smi " .. u[1] .. ": skipped with a warning, or fabric-unknown with on_fabric_unknown = fail",
      function()
        local c, h = ctx({ nvidia_smi = u[2] })
        local t0 = h.now()
        local r = assert(fabric.check(c, { wait = true }))
        assert.equal("unknown", r.state)
        assert.matches(u[3], r.message, 1, true)
        assert.is_true(h.now() - t0 <= fabric.CALL_TIMEOUT + 1e-6) -- never a hang: one bounded call
        assert.equal(1, #h.runs)
        local warned = false
        for _, l in ipairs(h.logs) do
          warned = warned or (l[1] == "warning" and l[2]:find(u[3], 1, true) ~= nil)
        end
        assert.is_true(warned)
        c = ctx({ nvidia_smi = u[2] }, { on_fabric_unknown = "fail" })
        local ok, o, m = fabric.check(c, { wait = true })
        assert.is_nil(ok)
        assert.equal("fabric-unknown", o)
        assert.matches(u[3], m, 1, true)
      end)
  end

  it("the domain map's name: another partition is this node's fabric-fault, both named", function()
    local c = ctx({})
    local mine = testing.CLUSTER_UUID .. "." .. testing.CLIQUE_ID
    assert(fabric.check(c, { domain = { name = mine } }))
    assert(fabric.check(c, { domain = { name = "rack7" } }))
    local ok, o, m = fabric.check(c, { domain = { name = V .. ".1" } })
    assert.is_nil(ok)
    assert.equal("fabric-fault", o)
    assert.matches(V .. ".1", m, 1, true)
    assert.matches(mine, m, 1, true)
    c = ctx({ nvidia_smi = testing.FABRIC_NONE })
    ok, o = fabric.check(c, { domain = { name = V .. ".1" } })
    assert.is_nil(ok)
    assert.equal("fabric-fault", o)
  end)
end)
