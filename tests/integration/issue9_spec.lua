-- SPDX-License-Identifier: Apache-2.0
-- Integration of channels, health and metrics through the real binary under a real systemd user manager
-- (tests/with-systemd) with the simulator (contrib/simdomain.lua): the IMEX channel created by
-- `imexguard prolog` on a tmpfs device directory in a private mount namespace (checked with stat),
-- `imexguard health` (healthy, a daemon that never becomes READY, a unit that is not installed), and
-- the metrics file (parsed by python3-prometheus-client's reference parser, counting across runs).
-- Every wait polls a condition with a deadline; every domain is destroyed in after_each.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

local q = simdomain.quote
local FAST = { "IMEXSIM_RECONNECT_MS=100", "IMEXSIM_RECONNECT_MAX_MS=400" }

local function domain(n, extra)
  local d = simdomain.new { nodes = n, extra_cfg = FAST }
  for _, name in ipairs(d.names) do d:write_node_list(name, d.names) end
  for k, v in pairs(extra or {}) do d:configure("n1", { [k] = v }) end
  return d
end

-- Run `imexguard ARGS COMMAND` for job 7 on n1 with Slurm's prolog environment, optionally inside
-- `sh -c PRE; ...; POST` in a private mount namespace. Returns {status, stdout, stderr, post}.
local function imexguard(d, command, args, ns)
  local env = simdomain.prolog_env(7, "n1", "n1", 1)
  local assign = {}
  for k, v in pairs(env) do assign[#assign + 1] = k .. "=" .. q(v) end
  table.sort(assign)
  local out, err, post = d.root .. "/out", d.root .. "/err", d.root .. "/post"
  local cmd = string.format("env -i %s %s --config %s %s %s >%s 2>%s; echo $? >%s.rc",
    table.concat(assign, " "), q(d.build .. "/imexguard"), q(d:config("n1")), args or "", command,
    q(out), q(err), q(out))
  if ns then
    cmd = string.format("unshare -m --propagation private sh -c %s",
      q(ns.pre .. " && { " .. cmd .. "; } && { " .. ns.post .. "; } >" .. q(post) .. " 2>&1"))
  end
  os.execute(cmd)
  return { status = tonumber(simdomain.read_file(out .. ".rc") or ""),
    stdout = simdomain.read_file(out) or "", stderr = simdomain.read_file(err) or "",
    post = simdomain.read_file(post) or "" }
end

local function ready(d) return d:ctl("n1", "-q") == "READY\n" end

-- The samples of a metrics file through the reference parser: {["name{k=v,...}"] = value}.
local PARSER = [[
import sys
from prometheus_client.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        print("%s{%s} %r" % (s.name, ",".join("%s=%s" % kv for kv in sorted(s.labels.items())), s.value))
]]
local function parse_metrics(path)
  local ok, out = simdomain.capture("/usr/bin/python3 -c " .. q(PARSER) .. " < " .. q(path))
  assert(ok, "the reference parser refused " .. path .. ":\n" .. out)
  local t = {}
  for k, v in out:gmatch("(%S+) (%S+)\n") do t[k] = tonumber(v) end
  return t
end

describe("channels, health and metrics through the binary", function()
  local d
  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  it("prolog with imex_channels=channel0 creates channel0 on a tmpfs (stat: major, minor, mode)", function()
    d = domain(1)
    assert(d:start())
    assert.truthy(simdomain.wait_until(function() return ready(d) end, 15))
    local dev = d.root .. "/dev"
    os.execute("mkdir -p " .. q(dev) .. " && cp tests/fixtures/proc/devices-gb200.txt " .. q(d.root))
    local set = string.format("--set imex_channels=channel0 "
      .. "--set imex_channel_dir=%s/nvidia-caps-imex-channels --set proc_devices=%s/devices-gb200.txt "
      .. "--set slurm_conf=%s/slurm.conf", dev, d.root, d.root)
    local r = imexguard(d, "prolog", set, { pre = "mount -t tmpfs -o mode=0755 imexguard-test " .. q(dev),
      post = "stat -c '%t %T %a %U %F' " .. q(dev .. "/nvidia-caps-imex-channels/channel0") .. " "
        .. q(dev .. "/nvidia-caps-imex-channels") })
    assert.are.equal(0, r.status, r.stderr)
    assert.truthy(r.stderr:find("outcome=ok", 1, true), r.stderr)
    assert.truthy(r.stderr:find("IMEX channel: created " .. dev .. "/nvidia-caps-imex-channels/channel0 "
      .. "(238:0, mode 0666)", 1, true), r.stderr)
    -- stat prints the major and minor in hex: 238 = 0xee
    assert.are.equal("ee 0 666 root character special file\n0 0 755 root directory\n", r.post)
    -- the tmpfs was private to the namespace: nothing is left on the machine's file system
    assert.is_nil(simdomain.read_file(dev .. "/nvidia-caps-imex-channels/channel0"))
  end)

  it("prolog with a /proc/devices without the IMEX line: channel-failed, exit 13, no device", function()
    d = domain(1)
    assert(d:start())
    local dev = d.root .. "/dev"
    os.execute("mkdir -p " .. q(dev) .. " && cp tests/fixtures/proc/devices-no-imex.txt " .. q(d.root))
    local set = string.format("--set imex_channels=channel0 --set imex_channel_dir=%s/ch "
      .. "--set proc_devices=%s/devices-no-imex.txt --set slurm_conf=%s/slurm.conf", dev, d.root, d.root)
    local r = imexguard(d, "prolog", set, { pre = "mount -t tmpfs imexguard-test " .. q(dev),
      post = "ls -A " .. q(dev) })
    assert.are.equal(13, r.status, r.stderr)
    assert.truthy(r.stderr:find("outcome=channel-failed: IMEX channel: ", 1, true), r.stderr)
    assert.are.equal("", r.post)
  end)

  it("health: healthy -> 0 with nothing on stdout, nothing changed", function()
    d = domain(1)
    assert(d:start())
    assert.truthy(simdomain.wait_until(function() return ready(d) end, 15))
    local inv, before = d:invocation("n1"), d:nodes_file("n1")
    local r = imexguard(d, "health")
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal("", r.stdout)
    assert.truthy(r.stderr:find("health job=7 outcome=ok", 1, true), r.stderr)
    assert.are.equal(inv, d:invocation("n1"))
    assert.are.equal(before, d:nodes_file("n1"))
    assert.is_nil(simdomain.read_file(d:dir("n1") .. "/state/lock"), "health takes no lock")
  end)

  it("health: a daemon that never becomes READY -> non-zero, one line naming the fault", function()
    d = domain(1, { IMEXSIM_NEVER_READY = 1 })
    assert(d:start())
    assert.truthy(simdomain.wait_until(function()
      local out = d:ctl("n1", "-q")
      return out ~= "" and not out:find("connect", 1, true)
    end, 15))
    local r = imexguard(d, "health")
    assert.are_not.equal(0, r.status, r.stderr)
    assert.matches("^imexguard: domain%-unhealthy: [^\n]+\n$", r.stdout)
    assert.are.equal("active", d:prop("n1", "ActiveState"))
  end)

  it("contrib/slurm/health.sh (HealthCheckProgram) drains this node with the health line", function()
    d = domain(1, { IMEXSIM_NEVER_READY = 1 })
    assert(d:start())
    assert.truthy(simdomain.wait_until(function()
      local out = d:ctl("n1", "-q")
      return out ~= "" and not out:find("connect", 1, true)
    end, 15))
    -- the binary with n1's settings, and an scontrol that records its arguments one per line
    local ig, sc, args = d.root .. "/imexguard.sh", d.root .. "/scontrol.sh", d.root .. "/scontrol.args"
    simdomain.write_file(ig, string.format("#!/bin/sh\nexec %s --config %s \"$@\"\n",
      q(d.build .. "/imexguard"), q(d:config("n1"))))
    simdomain.write_file(sc, "#!/bin/sh\nprintf '%s\\n' \"$@\" >" .. q(args) .. "\n")
    os.execute("chmod 0755 " .. q(ig) .. " " .. q(sc))
    local ok, _, status = simdomain.capture(string.format("env -i PATH=/usr/bin:/bin SLURMD_NODENAME=n1 "
      .. "IMEXGUARD=%s SCONTROL=%s contrib/slurm/health.sh 2>/dev/null", q(ig), q(sc)))
    assert.falsy(ok)
    assert.are_not.equal(0, status)
    local got = simdomain.read_file(args) or ""
    assert.matches("^update\nNodeName=n1\nState=DRAIN\nReason=imexguard: domain%-unhealthy: [^\n]+\n$", got)
  end)

  it("health: the unit is not installed -> 0, not applicable", function()
    d = domain(1)
    local r = imexguard(d, "health", "--set unit=imexguard-absent@x.service")
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal("", r.stdout)
    assert.truthy(r.stderr:find("outcome=skipped: not applicable", 1, true), r.stderr)
  end)

  it("metrics: prolog and status in metrics_dir, read by the reference parser, counted", function()
    d = domain(1)
    local m = d.root .. "/metrics"
    os.execute("mkdir -p " .. q(m))
    local set = "--set metrics_dir=" .. q(m)
    assert(d:systemctl("enable", d:unit("n1"))) -- enabled, inactive: the prolog starts it
    local p = imexguard(d, "prolog", set)
    assert.are.equal(0, p.status, p.stderr)
    assert.are.equal(0, imexguard(d, "status", set).status)
    local r = imexguard(d, "status", set)
    assert.are.equal(0, r.status, r.stderr)
    local t = parse_metrics(m .. "/imexguard.prom")
    assert.are.equal(2, t['imexguard_runs_total{command=status,outcome=ok}'])
    assert.are.equal(1, t['imexguard_runs_total{command=prolog,outcome=ok}'])
    assert.are.equal(1, t['imexguard_restarts_total{}'])
    assert.are.equal(2, t['imexguard_run_duration_seconds_count{command=status}'])
    assert.are.equal(0, t['imexguard_last_exit_code{command=status}'])
    assert.are.equal(1, t['imexguard_last_outcome{command=status,outcome=ok}'])
    assert.are.equal(1, t['imexguard_domain_node_status{host=' .. d.addr.n1 .. ',id=0,status=READY}'])
    assert.truthy(t['imexguard_last_run_timestamp_seconds{command=status}'] > 1.7e9)
  end)

  it("metrics never change an outcome: a metrics_dir that cannot be written is a warning", function()
    d = domain(1)
    assert(d:start())
    assert.truthy(simdomain.wait_until(function() return ready(d) end, 15))
    local r = imexguard(d, "status", "--set metrics_dir=" .. q(d.root .. "/absent/metrics"))
    assert.are.equal(0, r.status, r.stderr)
    assert.truthy(r.stderr:find("outcome=ok", 1, true), r.stderr)
    assert.truthy(r.stderr:find("warning: metrics not written", 1, true), r.stderr)
  end)
end)
