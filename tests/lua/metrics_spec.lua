-- SPDX-License-Identifier: Apache-2.0
-- Prometheus textfile metrics (lua/imexguard/metrics.lua): the file parses with the reference
-- parser of the format (python3-prometheus-client), counters survive between runs, the update
-- goes through host.write_atomic under its own lock and never fails a run.
local metrics = require("imexguard.metrics")
local testing = require("imexguard.testing")

local PARSER = [[
import sys
from prometheus_client.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        labels = ",".join("%s=%s" % (k, v if v.isprintable() and "\\" not in v else repr(v))
                          for k, v in sorted(s.labels.items()))
        print("%s|%s|%s|%r" % (fam.type, s.name, labels, s.value))
]]

-- Parse text with the reference parser: list of "type|name|labels|value" lines, or raises.
local function reference_parse(text)
  local tmp = os.tmpname()
  local f = assert(io.open(tmp, "wb"))
  f:write(text)
  f:close()
  local p = assert(io.popen("/usr/bin/python3 -c '" .. PARSER .. "' < " .. tmp .. " 2>&1; echo rc=$?"))
  local out = p:read("a")
  p:close()
  os.remove(tmp)
  assert(out:match("rc=0\n$"), "the reference parser refused the file:\n" .. out .. "\n--- file:\n" .. text)
  local lines = {}
  for l in out:gmatch("[^\n]+") do if not l:match("^rc=") then lines[#lines + 1] = l end end
  return lines
end

local function has(lines, want)
  for _, l in ipairs(lines) do if l == want then return true end end
  return false
end

local RUN = { command = "prolog", outcome = "ok", exit_code = 0, duration = 0.5, ended = 1700000000,
  restarts = 1, nodes = { { id = "0", host = "10.0.0.1", status = "READY" },
    { id = "1", host = "10.0.0.2", status = "UNAVAILABLE" } } }

describe("metrics", function()
  it("renders a file the reference parser accepts, with types and every family", function()
    local text = metrics.render(metrics.update({}, RUN))
    local lines = reference_parse(text)
    assert.is_true(has(lines, "counter|imexguard_runs_total|command=prolog,outcome=ok|1.0"))
    assert.is_true(has(lines, "counter|imexguard_restarts_total||1.0"))
    assert.is_true(has(lines, "summary|imexguard_run_duration_seconds_sum|command=prolog|0.5"))
    assert.is_true(has(lines, "summary|imexguard_run_duration_seconds_count|command=prolog|1.0"))
    assert.is_true(has(lines, "gauge|imexguard_last_run_timestamp_seconds|command=prolog|1700000000.0"))
    assert.is_true(has(lines, "gauge|imexguard_last_outcome|command=prolog,outcome=ok|1.0"))
    assert.is_true(has(lines, "gauge|imexguard_domain_node_status|host=10.0.0.2,id=1,status=UNAVAILABLE|1.0"))
  end)

  it("has imexguard_build_info{version} 1, one series, replaced by a new version", function()
    local run = { command = "epilog", outcome = "ok", exit_code = 0, duration = 0.1, ended = 1,
      version = "0.9" }
    local s = assert(metrics.parse(metrics.render(metrics.update({}, run))))
    run.version = "1.0"
    local text = metrics.render(metrics.update(s, run))
    local lines = reference_parse(text)
    assert.is_true(has(lines, "gauge|imexguard_build_info|version=1.0|1.0"))
    assert.is_false(has(lines, "gauge|imexguard_build_info|version=0.9|1.0"))
    assert.matches("^# HELP imexguard_build_info ", text)
  end)

  it("has a 0 series for every command, outcome and node status that did not happen", function()
    local lines = reference_parse(metrics.render(metrics.update({}, RUN)))
    for _, c in ipairs({ "prolog", "epilog", "status", "health" }) do
      assert.is_true(has(lines, "counter|imexguard_runs_total|command=" .. c .. ",outcome=conflict|0.0"), c)
    end
    assert.is_true(has(lines, "counter|imexguard_runs_total|command=prolog,outcome=ok|1.0"))
    assert.is_true(has(lines, "gauge|imexguard_last_outcome|command=prolog,outcome=domain-unhealthy|0.0"))
    assert.is_true(has(lines, "gauge|imexguard_last_outcome|command=prolog,outcome=ok|1.0"))
    -- the last outcome of a command that never ran is not invented
    assert.is_false(has(lines, "gauge|imexguard_last_outcome|command=epilog,outcome=ok|0.0"))
    assert.is_true(has(lines, "gauge|imexguard_domain_node_status|host=10.0.0.2,id=1,status=READY|0.0"))
    assert.is_true(has(lines, "gauge|imexguard_domain_node_status|host=10.0.0.2,id=1,status=UNAVAILABLE|1.0"))
    assert.is_true(has(lines, "gauge|imexguard_domain_node_status|host=10.0.0.1,id=0,status=UNAVAILABLE|0.0"))
  end)

  it("counts the nudges (SIGUSR1 of the health wait) across runs; a run without any adds 0", function()
    local s = assert(metrics.parse(metrics.render(metrics.update({}, { command = "prolog", outcome = "ok",
      exit_code = 0, duration = 1, ended = 1, nudges = 2 }))))
    local lines = reference_parse(metrics.render(metrics.update(s, RUN)))
    assert.is_true(has(lines, "counter|imexguard_nudges_total||2.0"))
    lines = reference_parse(metrics.render(metrics.update(s, { command = "prolog", outcome = "ok",
      exit_code = 0, duration = 1, ended = 2, nudges = 1 })))
    assert.is_true(has(lines, "counter|imexguard_nudges_total||3.0"))
  end)

  it("membership by slots: the mode in force as a state set, the name map's writes counted", function()
    local s = assert(metrics.parse(metrics.render(metrics.update({}, { command = "prolog", outcome = "ok",
      exit_code = 0, duration = 1, ended = 1, map_writes = 1, membership = "slots" }))))
    local lines = reference_parse(metrics.render(metrics.update(s, { command = "epilog", outcome = "ok",
      exit_code = 0, duration = 1, ended = 2, map_writes = 1, membership = "slots" })))
    assert.is_true(has(lines, "counter|imexguard_slot_map_writes_total||2.0"))
    assert.is_true(has(lines, "gauge|imexguard_membership|mode=slots|1.0"))
    assert.is_true(has(lines, "gauge|imexguard_membership|mode=list|0.0"))
    lines = reference_parse(metrics.render(metrics.update({}, RUN))) -- a run that does not say: none
    assert.is_false(has(lines, "gauge|imexguard_membership|mode=list|1.0"))
    assert.is_true(has(lines, "counter|imexguard_slot_map_writes_total||0.0"))
  end)

  it("counts across runs from the previous file, and keeps one last outcome per command", function()
    local s = assert(metrics.parse(metrics.render(metrics.update({}, RUN))))
    local second = { command = "prolog", outcome = "domain-unhealthy", exit_code = 9, duration = 2,
      ended = 1700000100 }
    local text = metrics.render(metrics.update(s, second))
    local lines = reference_parse(text)
    assert.is_true(has(lines, "counter|imexguard_runs_total|command=prolog,outcome=ok|1.0"))
    assert.is_true(has(lines, "counter|imexguard_runs_total|command=prolog,outcome=domain-unhealthy|1.0"))
    assert.is_true(has(lines, "summary|imexguard_run_duration_seconds_count|command=prolog|2.0"))
    assert.is_true(has(lines, "summary|imexguard_run_duration_seconds_sum|command=prolog|2.5"))
    assert.is_true(has(lines, "gauge|imexguard_last_outcome|command=prolog,outcome=domain-unhealthy|1.0"))
    assert.is_true(has(lines, "gauge|imexguard_last_outcome|command=prolog,outcome=ok|0.0"))
    assert.is_true(has(lines, "gauge|imexguard_last_exit_code|command=prolog|9.0"))
    -- a run that did not ask the ctl keeps the last domain view
    assert.is_true(has(lines, "gauge|imexguard_domain_node_status|host=10.0.0.1,id=0,status=READY|1.0"))
  end)

  it("the GPUs' fabric registration of the last run that read it, one gauge per GPU (C31)", function()
    local run = { command = "prolog", outcome = "fabric-fault", exit_code = 16, duration = 1, ended = 1,
      gpus = { { gpu = "0", state = "Completed", status = "Success", partition = "u.1" },
        { gpu = "1", state = "Completed", status = "Insufficient Resources", partition = "N/A" } } }
    local s = assert(metrics.parse(metrics.render(metrics.update({}, run))))
    local lines = reference_parse(metrics.render(metrics.update(s, { command = "epilog", outcome = "ok",
      exit_code = 0, duration = 1, ended = 2 })))
    assert.is_true(has(lines, "gauge|imexguard_fabric_gpu|gpu=1,health=N/A,partition=N/A,state=Completed,"
      .. "status=Insufficient Resources|1.0"), table.concat(lines, "\n"))
    lines = reference_parse(metrics.render(metrics.update(s, { command = "prolog", outcome = "ok",
      exit_code = 0, duration = 1, ended = 3, gpus = { { gpu = "0", state = "Completed", status = "Success",
        partition = "u.1", health = "Limited Capacity" } } })))
    assert.is_true(has(lines, "gauge|imexguard_fabric_gpu|gpu=0,health=Limited Capacity,partition=u.1,"
      .. "state=Completed,status=Success|1.0"))
    assert.is_false(has(lines, "gauge|imexguard_fabric_gpu|gpu=1,health=N/A,partition=N/A,state=Completed,"
      .. "status=Insufficient Resources|1.0"))
  end)

  it("escapes label values (backslash, quote, newline) so a host name cannot break the file", function()
    local run = { command = "status", outcome = "ok", exit_code = 0, duration = 0.1, ended = 1,
      nodes = { { id = "0", host = 'a"b\\c\nd', status = "READY" } } }
    local text = metrics.render(metrics.update({}, run))
    local lines = reference_parse(text)
    assert.is_true(has(lines, [[gauge|imexguard_domain_node_status|host='a"b\\c\nd',id=0,status=READY|1.0]]),
      table.concat(lines, "\n"))
    local back = assert(metrics.parse(text))
    assert.equal(1, back['imexguard_domain_node_status{host="a\\"b\\\\c\\nd",id="0",status="READY"}'])
  end)

  it("a previous file that does not parse restarts the counters, with a warning", function()
    local h = testing.host { files = { ["/m/imexguard.prom"] = "garbage {\n" } }
    local ctx = testing.ctx { host = h, settings = { metrics_dir = "/m" } }
    assert.is_true(metrics.record(ctx, RUN))
    local lines = reference_parse(h.file("/m/imexguard.prom"))
    assert.is_true(has(lines, "counter|imexguard_runs_total|command=prolog,outcome=ok|1.0"))
    local warned = false
    for _, l in ipairs(h.logs) do
      if l[1] == "warning" and l[2]:match("does not parse") then warned = true end
    end
    assert.is_true(warned)
  end)

  it("writes nothing without metrics_dir, and skips (logged) when its lock is held", function()
    local h = testing.host {}
    assert.is_false(metrics.record(testing.ctx { host = h }, RUN))
    assert.equal(0, #h.writes)
    h = testing.host { lock = { pid = 42, owner = "metrics" } }
    assert.is_false(metrics.record(testing.ctx { host = h, settings = { metrics_dir = "/m" } }, RUN))
    assert.equal(0, #h.writes)
  end)
end)
