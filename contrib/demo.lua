-- SPDX-License-Identifier: Apache-2.0
--- The demo behind `make demo`: imexguard's prolog on a simulated IMEX domain under a private
-- systemd user manager. Run as `tests/with-systemd lua5.4 contrib/demo.lua [--nodes N]`.
-- Every node's daemon starts with a stale node list (an earlier job's); job 1 runs the prolog on
-- every node at once; job 2 and job 3 run on two nodes and show that only stale daemons restart.
-- With --keep=DIR (`make demo KEEP=1`, through contrib/demo.sh) the rack then stays up for
-- experiments: job 4 runs the prolog on every node (a healthy domain of all of them), DIR/rack
-- holds the nodes' files, DIR/env the facts that contrib/demo/node needs to run a command on a
-- node (the namespace's PID, the rack's directory, the build), and the demo waits until the
-- process that contrib/demo.sh started is stopped (tests/with-systemd then stops the manager and
-- with it every simulated daemon).
package.path = "contrib/?.lua;" .. package.path
package.cpath = (os.getenv("IMEXGUARD_BUILD") or "build") .. "/lua/?.so;" .. package.cpath
local simdomain = require("simdomain")

local nodes, keep = 4, nil
for _, a in ipairs(arg) do
  local n = a:match("^%-%-nodes=(%d+)$")
  if n then nodes = tonumber(n) end
  keep = a:match("^%-%-keep=(/.+)$") or keep
end
assert(nodes >= 2 and nodes <= 72, "--nodes must be 2..72")

local okhost, host = pcall(require, "imexguard.host")
local now = okhost and host.now or os.time

local function say(fmt, ...) io.write(string.format(fmt, ...), "\n") io.flush() end

--- One job: its prolog on `names` at once, a table of what each node did, then its epilog.
-- @tparam table d the simulated domain (simdomain.new)
-- @tparam integer id Slurm job ID
-- @tparam string expr the job's hostlist expression (SLURM_JOB_NODELIST)
-- @tparam {string,...} names the nodes the prolog and epilog run on
-- @treturn integer how many daemons restarted
-- @treturn integer how many prologs and epilogs failed
local function job(d, id, expr, names)
  local before = {}
  for _, n in ipairs(names) do before[n] = d:invocation(n) end
  local t0 = now()
  local res = d:prologs { job = id, nodelist = expr, names = names }
  local took = now() - t0
  say("")
  say("job %d on %s: imexguard prolog on %d node(s) at once (%.2f s)", id, expr, #names, took)
  say("  %-4s %-4s %-17s %-9s %s", "node", "exit", "outcome", "restarted", "log line")
  local restarts, failed = 0, 0
  for _, n in ipairs(names) do
    local r = res[n]
    local restarted = d:invocation(n) ~= before[n]
    if restarted then restarts = restarts + 1 end
    if r.status ~= 0 then failed = failed + 1 end
    local line = r.output:match("[^\n]*outcome=[^\n]*") or r.output:gsub("\n", " ")
    say("  %-4s %-4s %-17s %-9s %s", n, tostring(r.status), tostring(r.outcome),
      restarted and "yes" or "no", line:gsub("^imexguard: %w+: ", ""))
  end
  say("  restarts: %d of %d node(s); failures: %d", restarts, #names, failed)
  -- The job ends: Slurm runs the epilog on each node, which unregisters the job (IMEX keeps running).
  local ep = d:epilogs { job = id, nodelist = expr, names = names }
  local eps = {}
  for _, n in ipairs(names) do
    eps[#eps + 1] = n .. "=" .. tostring(ep[n].outcome)
    if ep[n].status ~= 0 then failed = failed + 1 end
  end
  say("  epilog: %s", table.concat(eps, " "))
  return restarts, failed
end

-- Kept, each node's prolog drains it with imexguard's reason through the demo's scontrol
-- (contrib/demo/scontrol: a file in DIR/slurm per node stands in for slurmctld).
local settings
if keep then
  local _, cwd = simdomain.capture("pwd")
  settings = { "drain_reason = true", string.format("scontrol = { \"/usr/bin/env\", %q, %q }",
    "IMEXGUARD_DEMO_DIR=" .. keep, cwd:gsub("%s+$", "") .. "/contrib/demo/scontrol") }
end
local d = simdomain.new { nodes = nodes, root = keep and (keep .. "/rack"), settings = settings }
local ok, err = xpcall(function()
  say("imexguard demo: a simulated %d-node IMEX domain under a private systemd user manager", nodes)
  say("  node files, settings and daemon logs: %s (%s)", d.root, keep and "kept" or "removed at the end")
  -- Stale lists left by earlier jobs: the nodes were split into pairs.
  for i, name in ipairs(d.names) do
    local a = i % 2 == 1 and i or i - 1
    local pair = { "n" .. a, "n" .. math.min(a + 1, nodes) }
    if pair[1] == pair[2] then pair = { "n" .. a } end
    d:write_node_list(name, pair)
  end
  assert(d:start())
  say("  before: every daemon runs a stale list (pairs of nodes, from earlier jobs)")

  local all = {}
  for i = 1, nodes do all[i] = "n" .. i end
  local r1, f1 = job(d, 1, "n[1-" .. nodes .. "]", all)

  say("")
  say("domain status (imexguard status on n1):")
  -- as node n1 (SLURMD_NODENAME: the node's Slurm name, not this machine's host name); the result
  -- only (stdout): its final log line is the record, not the demo's output
  local _, status = simdomain.capture("(IMEXGUARD_NO_JOURNAL=1 SLURMD_NODENAME=n1 "
    .. simdomain.quote(d.build .. "/imexguard") .. " --config " .. simdomain.quote(d:config("n1"))
    .. " status 2>/dev/null)")
  io.write(status)

  local r2, f2 = job(d, 2, "n[1-2]", { "n1", "n2" })
  local r3, f3 = job(d, 3, "n[1-2]", { "n1", "n2" })
  say("")
  say("summary: job 1 restarted %d/%d stale daemons; job 2 restarted %d (its list changed);"
    .. " job 3 restarted %d (daemons current)", r1, nodes, r2, r3)
  if f1 + f2 + f3 > 0 or r1 ~= nodes or r2 ~= 2 or r3 ~= 0 then
    error("demo: unexpected result (see the tables above)", 0)
  end
  if keep then
    -- A job on every node that stays: the rack is one healthy domain to experiment with.
    local res = d:prologs { job = 4, nodelist = "n[1-" .. nodes .. "]", names = all }
    for _, n in ipairs(all) do
      if res[n].status ~= 0 then error("demo: job 4's prolog failed on " .. n .. ": " .. res[n].output, 0) end
    end
    say("")
    say("job 4 on n[1-%d]: prolog ok on every node; the rack stays up (--keep)", nodes)
    local env = {
      "# written by contrib/demo.lua --keep: the running demo rack (read by contrib/demo/node)",
      "DEMO_NSPID=" .. simdomain.quote(assert(os.getenv("IMEXGUARD_TEST_MANAGER_PID"))),
      "DEMO_ROOT=" .. simdomain.quote(d.root),
      "DEMO_BUILD=" .. simdomain.quote(d.build),
      "DEMO_XDG_RUNTIME_DIR=" .. simdomain.quote(os.getenv("XDG_RUNTIME_DIR") or ""),
      "DEMO_NODES=" .. simdomain.quote(table.concat(all, " ")),
      "DEMO_PREFIX=" .. simdomain.quote(d.prefix),
      "DEMO_JOB=4",
      "DEMO_NODELIST=" .. simdomain.quote("n[1-" .. nodes .. "]"),
    }
    -- Each node's imexguard: the binary with the node's settings (what health.sh runs).
    for _, n in ipairs(all) do
      local shim = d:dir(n) .. "/imexguard"
      simdomain.write_file(shim, string.format("#!/bin/sh\nexec %s --config %s \"$@\"\n",
        simdomain.quote(d.build .. "/imexguard"), simdomain.quote(d:config(n))))
      os.execute("chmod 0755 " .. simdomain.quote(shim))
    end
    simdomain.write_file(keep .. "/env.new", table.concat(env, "\n") .. "\n")
    assert(os.rename(keep .. "/env.new", keep .. "/env"))
    -- Wait to be stopped (SIGTERM from tests/with-systemd's cleanup).
    while true do os.execute("sleep 3600") end
  end
end, function(e)
  -- A person reads the message; a traceback only helps when the demo itself is being debugged.
  return os.getenv("IMEXGUARD_DEBUG") and debug.traceback(e) or tostring(e)
end)
if not ok then
  -- Show what the simulated daemons logged before everything is removed.
  for _, name in ipairs(d.names) do
    local log = simdomain.read_file(d:dir(name) .. "/imex.log") or ""
    local tail = {}
    for line in log:gmatch("[^\n]+") do tail[#tail + 1] = line end
    io.stderr:write(string.format("--- %s/imex.log (last lines)\n", name))
    for i = math.max(1, #tail - 8), #tail do io.stderr:write(tail[i], "\n") end
    local _, st = d:systemctl("status", "--lines=5", d:unit(name))
    io.stderr:write(st)
  end
end
d:destroy()
if not ok then
  io.stderr:write(tostring(err), "\n")
  os.exit(1)
end
