-- SPDX-License-Identifier: Apache-2.0
-- lua/imexguard/expected.lua: the node condition "IMEX expected here" from the registry, the unit and
-- the policy; its file (written only when it changes) and its metric, after the runs that the
-- driver records (imexguard.commands' signals: prolog, epilog, health), on the kit's fake host.
local expected = require("imexguard.expected")
local D = require("imexguard.driver")
local testing = require("imexguard.testing")
local cjson = require("cjson")

local S = { unit = "nvidia-imex.service", state_dir = "/run/imexguard", manage_disabled_unit = false }
local LOADED = { load_state = "loaded", unit_file_state = "enabled" }

describe("imexguard.expected", function()
  it("has a fixed set of reasons, each expected or not", function()
    local names = {}
    for _, r in ipairs(expected.REASONS) do names[#names + 1] = r[1] .. "=" .. tostring(r[2]) end
    assert.same({ "job-registered=true", "static-domain=true", "unit-unknown=true", "registry-unknown=true",
      "idle=false", "not-installed=false", "unit-disabled=false", "not-applicable=false" }, names)
  end)

  it("derive: each reason from what a run saw", function()
    local function d(f) return (expected.derive(f, S)) end
    assert.equal("job-registered", d{ outcome = "ok", props = LOADED, jobs = { { id = "1" } } })
    assert.equal("idle", d{ outcome = "ok", props = LOADED, jobs = {} })
    assert.equal("static-domain", d{ outcome = "ok", props = LOADED, jobs = {}, static = true })
    assert.equal("registry-unknown", d{ outcome = "conflict", props = LOADED, jobs = nil })
    assert.equal("unit-unknown", d{ outcome = "unit-unknown", jobs = {} })
    assert.equal("not-installed", d{ outcome = "skipped", props = { load_state = "not-found" }, jobs = {} })
    assert.equal("unit-disabled", d{ outcome = "skipped", props = { load_state = "loaded",
      unit_file_state = "disabled" }, jobs = {} })
    assert.equal("not-applicable", d{ outcome = "skipped", props = LOADED, jobs = {} })
    -- an epilog asks no unit: a node IMEX does not apply to stays so
    assert.equal("unit-disabled", d{ outcome = "ok", jobs = {}, previous = "unit-disabled" })
    assert.equal("idle", d{ outcome = "ok", jobs = {}, previous = "job-registered" })
    -- a disabled unit managed per job is an IMEX node
    assert.equal("idle", d{ outcome = "ok", props = { load_state = "loaded", unit_file_state = "disabled" },
      jobs = {} })
  end)

  it("record: one line of JSON, replaced only when it changed; since stays while the reason does", function()
    local h = testing.host{}
    h.mkdir("/run/imexguard", 493)
    local r = expected.record(h, S, { outcome = "ok", props = LOADED, jobs = { { id = "101" } } })
    assert.same({ expected = true, reason = "job-registered" }, r)
    local text = h.file(expected.path(S))
    local c = cjson.decode(text)
    assert.same({ 1, true, "job-registered", "nvidia-imex.service", { "101" } },
      { c.schema, c.expected, c.reason, c.unit, c.jobs })
    assert.matches('^{"schema":1,"expected":true,"reason":"job%-registered","since":"20%d%d%-', text)
    local writes = #h.writes
    h.advance(30)
    expected.record(h, S, { outcome = "ok", props = LOADED, jobs = { { id = "101" } } })
    assert.equal(writes, #h.writes)
    expected.record(h, S, { outcome = "ok", jobs = {} })
    assert.equal(writes + 1, #h.writes)
    c = cjson.decode(h.file(expected.path(S)))
    assert.same({ false, "idle" }, { c.expected, c.reason })
    -- a reason that is not expected reads back as well: its since stays, nothing is written
    h.advance(30)
    expected.record(h, S, { outcome = "ok", jobs = {} })
    assert.equal(writes + 1, #h.writes)
  end)
end)

describe("the node condition after a run (driver, runrecord.save_signals)", function()
  local saved, h
  local PROM = "/var/lib/prometheus/node-exporter/imexguard.prom"
  local COND = "/run/imexguard/condition.json"

  before_each(function()
    saved = package.loaded["imexguard.host"]
  end)
  after_each(function()
    package.loaded["imexguard.host"] = saved
  end)

  local function go(command, hopts, env, policy_files, arg)
    h = h or testing.host(hopts)
    package.loaded["imexguard.host"] = h
    local run = { command = command, config = "/etc/imexguard/imexguard.conf", arg = arg,
      sets = { "metrics_dir=/var/lib/prometheus/node-exporter" },
      env = env or { SLURM_JOB_ID = "101", SLURM_JOB_NODELIST = "n[1-2]", SLURMD_NODENAME = "n1" } }
    run.c = {
      read_trusted = function(path)
        if policy_files and policy_files[path] then return policy_files[path] end
        return nil, "no " .. path, "ENOENT"
      end,
      has_module = function(name) return name == D.DEFAULT_POLICY or name == "imexguard.slurmenv" end,
      preload = function(name, value) package.loaded[name] = value end,
      set_job = function() end,
    }
    if policy_files then run.policy = next(policy_files) end
    local a = D.settings(run)
    if a.outcome then return a end
    a = D.prepare(run)
    if a.outcome then return a end
    D.invoke(run)
    return D.finish(run), run
  end

  local function condition() return cjson.decode((assert(h.file(COND)))) end

  it("prolog: job-registered; epilog: idle; the metric follows with its reason", function()
    h = nil
    assert.equal("ok", go("prolog", {}).outcome)
    local c = condition()
    assert.same({ true, "job-registered", { "101" } }, { c.expected, c.reason, c.jobs })
    assert.matches('\nimexguard_imex_expected{reason="job%-registered"} 1\n', h.file(PROM))
    assert.equal("ok", go("epilog", {}).outcome)
    assert.same({ false, "idle", {} }, { condition().expected, condition().reason, condition().jobs })
    assert.matches('\nimexguard_imex_expected{reason="idle"} 0\n', h.file(PROM))
    assert.not_matches('job%-registered', h.file(PROM))
  end)

  it("forget of the last registered job (its epilog never ran): idle, the metric too (issue 31 item 1: "
    .. "a health stack must not judge the node on a job that is gone)", function()
    h = nil
    assert.equal("ok", go("prolog", {}).outcome)
    assert.equal("job-registered", condition().reason)
    local a = go("forget", {}, nil, nil, "101")
    assert.equal("ok", a.outcome, a.message)
    assert.same({ false, "idle", {} }, { condition().expected, condition().reason, condition().jobs })
    assert.matches('\nimexguard_imex_expected{reason="idle"} 0\n', h.file(PROM))
  end)

  it("a fast-path prolog writes no condition again (the same text)", function()
    h = nil
    go("prolog", {})
    local writes = {}
    for _, w in ipairs(h.writes) do writes[#writes + 1] = w.path end
    local before = 0
    for _, p in ipairs(writes) do if p == COND then before = before + 1 end end
    go("prolog", {})
    local after = 0
    for _, w in ipairs(h.writes) do if w.path == COND then after = after + 1 end end
    assert.equal(before, after)
  end)

  it("health on a node without the unit: not-installed, expected 0", function()
    h = nil
    assert.equal("skipped", go("health", { unit = false }).outcome)
    assert.same({ false, "not-installed" }, { condition().expected, condition().reason })
    assert.matches('\nimexguard_imex_expected{reason="not%-installed"} 0\n', h.file(PROM))
  end)

  it("the static policy: static-domain while no job is registered", function()
    h = nil
    local text = "local P = require('policies.default').extend()\nP.imex_always_expected = true\nreturn P"
    go("health", {}, nil, { ["/etc/imexguard/static.lua"] = text })
    assert.same({ true, "static-domain" }, { condition().expected, condition().reason })
  end)

  it("no state_dir yet (no prolog ran here): nothing written, the directory not made", function()
    h = testing.host{ unit = false, fresh_boot = true }
    local a, run = go("health")
    assert.equal("skipped", a.outcome)
    assert.is_true(#h.mkdirs == 0 and not h.dir_exists("/run/imexguard"))
    assert.is_nil(h.file(COND))
    assert.same({ expected = false, reason = "not-installed" }, run.signals.expected)
  end)

  it("plan and registrations leave the condition alone", function()
    h = nil
    go("plan", {})
    assert.is_nil(h.file(COND))
  end)
end)
