-- SPDX-License-Identifier: Apache-2.0
-- imexguard.rack: the findings on a domain's rows (pure) and the whole command on the kit's fake host
-- (scontrol's answer scripted in Slurm 22.05's layout): the findings named first, in their order.
local rack = require("imexguard.rack")
local digest = require("imexguard.digest")
local ctl = require("imexguard.ctl")
local testing = require("imexguard.testing")
local H = require("default_policy_helper")

local A = { "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4" }

-- A row of node `i` (n1..n4) whose digest runs list `l` of 4 entries, line and ID i - 1.
local function row(i, more)
  local d = { v = 1, a = A[i], l = "aaaaaaaa", n = 4, p = i - 1, m = i - 1, i = "1111111" .. i,
    s = 1700000000,
    u = "active", o = "ok" }
  for k, v in pairs(more or {}) do d[k] = v end
  return { name = "n" .. i, state = "IDLE", d = d }
end

local function kinds(f)
  local t = {}
  for i, x in ipairs(f) do t[i] = x.node .. " " .. x.kind end
  return t
end

describe("imexguard.rack findings", function()
  it("a healthy domain: none", function()
    assert.same({}, rack.findings({ row(1), row(2), row(3), row(4) }, nil))
  end)

  it("names IDs claimed twice or by nobody, an ID that is not the line, lists that differ, first", function()
    local rows = { row(1), row(2, { m = 1 }), row(3, { m = 1, p = 2 }),
      row(4, { l = "bbbbbbbb", n = 1, p = 0, m = 0 }) }
    local f = rack.findings(rows, nil)
    assert.same({ "n[1,4] duplicate-id", "n[2-3] duplicate-id", "ID 2 missing-id", "ID 3 missing-id",
      "n3 id-not-line", "n4 list-differs" }, kinds(f))
    for i = 2, #f do
      local ra, rb
      for k, name in ipairs(rack.KINDS) do
        if name == f[i - 1].kind then ra = k end
        if name == f[i].kind then rb = k end
      end
      assert.is_true(ra <= rb, "findings in the order of rack.KINDS")
    end
    local lists = f[#f]
    assert.equal("another node list than n[1-3]: bbbbbbbb (1 entries) against aaaaaaaa (4 entries)",
      lists.message)
  end)

  it("nodes that see each other differently in this node's ctl answer; a daemon not READY", function()
    local mesh = assert(ctl.parse_mesh(testing.render_mesh({ nodes = { { host = A[1] }, { host = A[2] },
      { host = A[3], connections = { [A[1]] = "NODE_MAP_MISMATCH" } },
      { host = A[4], status = "UNAVAILABLE" } } }), 0))
    local f = rack.findings({ row(1), row(2), row(3), row(4) }, mesh)
    local msgs = {}
    for _, x in ipairs(f) do msgs[#msgs + 1] = x.node .. ": " .. x.message end
    local all = table.concat(msgs, "\n")
    assert.truthy(all:find("n1,n3: n1 sees n3 CONNECTED, n3 sees n1 NODE_MAP_MISMATCH", 1, true), all)
    assert.truthy(all:find("n4: its daemon is UNAVAILABLE in this node's answer", 1, true), all)
  end)

  it("then restarts outside imexguard, units, Slurm's drains, failed runs, nodes without a digest", function()
    local rows = { row(1), row(2, { x = "7", h = true }),
      row(3, { u = "failed", o = "domain-unhealthy", c = "health" }),
      row(4), { name = "n5", state = "IDLE" } }
    rows[4].state, rows[4].reason, rows[4].reason_by = "IDLE+DRAIN", "DIMM swap", "root@2026-12-06T00:46:19"
    local f = rack.findings(rows, nil)
    assert.same({ "n2 restarted", "n3 unit", "n4 slurm", "n3 outcome", "n5 no-digest" }, kinds(f))
    assert.matches("not the one job 7 was admitted to: restarted outside imexguard under the job; a new "
      .. "instance, its peers dropped every import of the old one", f[1].message)
    assert.equal("Slurm IDLE+DRAIN: DIMM swap (root@2026-12-06T00:46:19)", f[3].message)
    assert.equal("its last health ended domain-unhealthy", f[4].message)
  end)
end)

describe("imexguard rack on the kit's host", function()
  local function slurm(extra2, reason4)
    local out = {}
    for i = 1, 4 do
      out[#out + 1] = "NodeName=n" .. i .. " Arch=x86_64 CoresPerSocket=1 "
      out[#out + 1] = "   State=" .. (reason4 and i == 4 and "IDLE+DRAIN" or "IDLE") .. " ThreadsPerCore=1"
      if reason4 and i == 4 then out[#out + 1] = "   Reason=" .. reason4 .. " [root@2026-12-06T00:46:19]" end
      local d = i == 2 and extra2 or { v = 1, a = A[i], l = digest.hash(table.concat(A, "\n") .. "\n"), n = 4,
        p = i - 1, m = i - 1, i = "2222222" .. i, s = 1700000000, u = "active", o = "ok" }
      out[#out + 1] = "   Extra=" .. digest.merged_extra(nil, d)
      out[#out + 1] = ""
    end
    return { status = 0, stdout = table.concat(out, "\n") }
  end

  local function run(o)
    local files = { ["/etc/nvidia-imex/nodes_config.cfg"] = table.concat(A, "\n") .. "\n" }
    local h = testing.host{ files = files, ctl = { testing.up(A) }, scontrol = { o.slurm },
      commands = { tail = { status = 0, stdout = "" } } }
    return H.run(h, { command = "rack", json = o.json, env = { SLURMD_NODENAME = "n1" } })
  end

  it("a node restarted under a job and a drained node: named on the lines after the head, then the table",
    function()
    local d2 = { v = 1, a = A[2], l = digest.hash(table.concat(A, "\n") .. "\n"), n = 4, p = 1, m = 1,
      i = "33333333", s = 1700000500, u = "active", o = "ok", x = "7" }
    local outcome, message, report = run{ slurm = slurm(d2, "maintenance") }
    assert.equal("ok", outcome)
    assert.matches("^4 nodes, 2 findings: n2: restarted; n4: slurm", message)
    local lines = {}
    for l in report:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.matches("^rack: the domain of this node's node list, 4 nodes, seen from n1; IMEX UP$", lines[1])
    assert.matches("^n2: its daemon %(instance 33333333, started 2023%-11%-14T22:21:40Z%) is not the one "
      .. "job 7", lines[2])
    assert.matches("^n4: Slurm IDLE%+DRAIN: maintenance", lines[3])
    assert.matches("^NODE +SLURM +LIST +ID/LINE +DAEMON +LAST +LAST ERROR$", lines[4])
    assert.matches("^n1%* +IDLE ", lines[5])
    assert.equal(8, #lines)
  end)

  it("no digest anywhere but here (slurm_extra off): the node list's other nodes by their map names, "
    .. "each named for it", function()
    local files = { ["/etc/nvidia-imex/nodes_config.cfg"] = table.concat(A, "\n") .. "\n",
      ["/etc/imexguard/addresses"] = "n1 10.0.0.1\nn2 10.0.0.2\nn3 10.0.0.3\nn4 10.0.0.4\n" }
    local show = "NodeName=n1 Arch=x86_64\n   State=IDLE\n\nNodeName=n2 Arch=x86_64\n   State=IDLE\n"
    local h = testing.host{ files = files, ctl = { testing.up(A) },
      commands = { tail = { status = 0, stdout = "" } }, scontrol = { { status = 0, stdout = show } } }
    local outcome, message, report = H.run(h, { command = "rack", env = { SLURMD_NODENAME = "n1" },
      settings = { address_source = "map", address_map = "/etc/imexguard/addresses" } })
    assert.equal("ok", outcome)
    assert.matches("4 nodes, 3 findings", message)
    assert.matches("\nn2: no digest in Slurm's Extra", report)
    assert.matches("\nn4: no digest in Slurm's Extra", report)
  end)

  it("--json: the findings and one object per node (docs/json.md, rack)", function()
    local _, _, report = run{ slurm = slurm(nil, nil), json = true }
    local j = require("cjson").decode(report)
    assert.equal("rack", j.command)
    assert.same({}, j.findings)
    assert.equal(4, #j.nodes)
    assert.equal("n1", j.nodes[1].name)
    assert.is_true(j.nodes[1].self)
    assert.equal(0, j.nodes[1].digest.line)
  end)
end)
