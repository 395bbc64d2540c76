-- SPDX-License-Identifier: Apache-2.0
--- bench/bench.lua: the measurements of `make bench` (bench/README.md explains every number).
-- Run by bench/run as `tests/with-systemd lua5.4 bench/bench.lua` from the top of the tree.
-- imexguard's prolog and the baseline shell prolog (bench/baseline-prolog.sh) run against the same
-- simulated IMEX domains (contrib/simdomain.lua: imexsim units under a private systemd user
-- manager); every result is a ratio imexguard / baseline measured in this one run.
-- Test infrastructure style: plain Lua 5.4 with io/os; times on CLOCK_MONOTONIC (host.now()).
package.path = "contrib/?.lua;bench/?.lua;" .. package.path
local BUILD = os.getenv("IMEXGUARD_BUILD") or "build"
package.cpath = BUILD .. "/lua/?.so;" .. package.cpath
local simdomain = require("simdomain")
local host = require("imexguard.host")
local stats = require("stats")
local timing = require("timing")
local slots_bench = require("slots")

local quote = simdomain.quote
local now = host.now

--- A number from the environment, or the default; a bad value stops the bench with one line.
local function num_env(name, default, min)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  local n = tonumber(v)
  if not n or n < (min or 0) then
    io.stderr:write(string.format("bench: %s=%q is not a number >= %s\n", name, v, min or 0))
    os.exit(2)
  end
  return n
end

--- The domain sizes of the scale scenario: BENCH_SCALE ("18 36 72"), else BENCH_NODES (one size,
-- the knob of earlier versions); a bad value stops the bench with one line.
local function sizes_env()
  local v = os.getenv("BENCH_SCALE")
  local name = "BENCH_SCALE"
  if (v == nil or v == "") and (os.getenv("BENCH_NODES") or "") ~= "" then
    v, name = os.getenv("BENCH_NODES"), "BENCH_NODES"
  end
  if v == nil or v == "" then return { 18, 36, 72 } end
  local list = {}
  for w in v:gmatch("[^%s,]+") do
    local n = math.tointeger(tonumber(w))
    if not n or n < 2 or n > 250 then
      io.stderr:write(string.format("bench: %s=%q: each size must be a whole number of nodes 2..250\n",
        name, v))
      os.exit(2)
    end
    list[#list + 1] = n
  end
  return list
end

--- The rack layouts of the racks scenario: BENCH_RACKS ("2x18 4x18"), each RxS = R racks of S
-- nodes; a bad value stops the bench with one line.
local function racks_env()
  local v = os.getenv("BENCH_RACKS")
  if v == nil or v == "" then v = "2x18 4x18" end
  local list = {}
  for w in v:gmatch("[^%s,]+") do
    local r, size = w:match("^(%d+)x(%d+)$")
    r, size = tonumber(r), tonumber(size)
    if not r or r < 2 or size < 1 or r * size > 250 then
      io.stderr:write(string.format("bench: BENCH_RACKS=%q: each layout is RxS, R >= 2 racks of S nodes, "
        .. "at most 250 nodes\n", v))
      os.exit(2)
    end
    list[#list + 1] = { racks = r, size = size }
  end
  return list
end

local CFG = {
  sleep = num_env("BASELINE_SLEEP", 2),              -- s: the baseline's fixed sleep
  runs = num_env("BENCH_RUNS", 15, 1),               -- fast path: timed runs per tool
  rounds = num_env("BENCH_ROUNDS", 5, 1),            -- restart path: rounds per tool
  restart_nodes = num_env("BENCH_RESTART_NODES", 4, 2), -- restart path: domain size
  conc = num_env("BENCH_CONCURRENCY", 8, 1),         -- concurrent prologs per node
  sizes = sizes_env(),                               -- d) the domain sizes, cold then fast path
  nvl_rounds = num_env("BENCH_NVL_ROUNDS", 1, 1),    -- d) cold rounds per tool and size
  scale_runs = num_env("BENCH_SCALE_RUNS", 7, 1),    -- d) fast-path runs per tool and size
  scale_baseline_max = num_env("BENCH_SCALE_BASELINE_MAX", 36), -- d) largest size of the cold baseline
  scale_deadline = num_env("BENCH_SCALE_DEADLINE", 240, 20), -- s: d) imexguard's deadline and health wait
  strict_max = num_env("BENCH_SCALE_STRICT_MAX", 36),  -- d) larger domains: failures reported, not fatal
  net = num_env("BENCH_NET", 180, 1),                -- 127.0.NET.x, NET+1, NET+2 are used
  watch = num_env("BENCH_WATCH_INTERVAL", 0.02, 0.001), -- s: the UP watcher's period
  poll = os.getenv("BENCH_POLL_INTERVAL"),           -- imexguard poll_interval (nil: simdomain's)
  always = num_env("BENCH_ALWAYS_RESTART", 1) ~= 0,  -- c) also the restart-every-job baseline
  backoff_rounds = num_env("BENCH_BACKOFF_ROUNDS", 3, 1), -- e) rounds per tool
  backoff_ms = num_env("BENCH_BACKOFF_MS", 15000, 100), -- e) ms: the daemons' first reconnect back-off
  racks = racks_env(),                               -- f) the rack layouts
  only = os.getenv("BENCH_ONLY") or "abcdefg",       -- the scenarios to run
  profile = os.getenv("BENCH_PROFILE"),              -- a) command prefix of the breakdown runs
}
if CFG.profile == "" then CFG.profile = nil end
-- a) and b) use 127.0.NET.x, c) NET+1, d) NET+2, NET+3, ... (one per size), e) the next one.
if CFG.net + 2 + #CFG.sizes > 255 then
  io.stderr:write(string.format("bench: BENCH_NET=%d: 127.0.%d.x is beyond 255 with %d sizes\n", CFG.net,
    CFG.net + 2 + #CFG.sizes, #CFG.sizes))
  os.exit(2)
end
local ABS = select(2, simdomain.capture("pwd")):gsub("%s+$", "")
local BASELINE = ABS .. "/bench/baseline-prolog.sh"
local TIMEIT = ABS .. "/bench/timeit.lua"

local function say(fmt, ...)
  io.write(string.format(fmt, ...), "\n")
  io.flush()
end

---------------------------------------------------------------------------------------------------
-- Statistics

local mmm, median, fmt_mmm, ratio = stats.mmm, stats.median, stats.fmt_mmm, stats.ratio

-- Whether this imexguard has --timing (decided once at the start; see bench/timing.lua).
local TIMING = false

---------------------------------------------------------------------------------------------------
-- Commands

--- "K='v' ..." for env -i, sorted.
local function assign(env)
  local a = {}
  for k, v in pairs(env) do a[#a + 1] = k .. "=" .. quote(v) end
  table.sort(a)
  return table.concat(a, " ")
end

--- Shell command of imexguard's prolog on node `name` for job `job` (output to `out`); with
-- `with_timing`, `--timing` when this imexguard has it (its lines go to `out` too); `prefix`: a
-- command that runs imexguard (BENCH_PROFILE, e.g. strace -c), a shell string.
local function imexguard_cmd(d, name, job, nodelist, nnodes, out, with_timing, prefix)
  local env = simdomain.prolog_env(job, nodelist, name, nnodes)
  env.IMEXGUARD_NO_JOURNAL = "1"
  env.SLURM_CONF = d.slurm_conf -- racks (f): topology.conf beside it, as slurmd passes it
  return string.format("env -i %s %s%s%s --config %s %s%s prolog >%s 2>&1", assign(env),
    prefix and (prefix .. " ") or "", quote(d.build .. "/imexguard"),
    (with_timing and TIMING) and " --timing" or "", quote(d:config(name)),
    CFG.poll and ("--set poll_interval=" .. quote(CFG.poll)) or "", d.ig_args or "", quote(out))
end

--- Shell command of the baseline prolog on node `name` (same Slurm environment, its own settings;
-- `extra`: more variables).
local function baseline_cmd(d, name, job, nodelist, nnodes, out, extra)
  local env = simdomain.prolog_env(job, nodelist, name, nnodes)
  for k, v in pairs(extra or {}) do env[k] = v end
  local dir = d:dir(name)
  env.XDG_RUNTIME_DIR = assert(os.getenv("XDG_RUNTIME_DIR"), "run inside tests/with-systemd")
  env.BASELINE_UNIT = d:unit(name)
  env.BASELINE_SYSTEMCTL = "systemctl --user"
  env.BASELINE_CTL = d.build .. "/nvidia-imex-ctl"
  env.BASELINE_IMEX_CONFIG = dir .. "/config.cfg"
  env.BASELINE_NODES_FILE = dir .. "/nodes_config.cfg"
  env.BASELINE_ADDRESS_MAP = d.root .. "/addresses"
  env.BASELINE_LOCK = dir .. "/baseline.lock"
  env.BASELINE_SLEEP = tostring(CFG.sleep)
  -- This node's daemon only: every simulated node shares the machine (on a rack: pkill -9 -x).
  env.BASELINE_DAEMON_PATTERN = "imexsim -c " .. dir .. "/config.cfg$"
  return string.format("env -i %s /bin/bash %s >%s 2>&1", assign(env), quote(BASELINE), quote(out))
end

--- The baseline in its earlier form: restart on every job (BASELINE_ALWAYS_RESTART=1).
local function baseline_always_cmd(d, name, job, nodelist, nnodes, out)
  return baseline_cmd(d, name, job, nodelist, nnodes, out, { BASELINE_ALWAYS_RESTART = "1" })
end

--- imexguard's prolog with the nudge turned off (--set nudge=false): it waits for the daemons' own
-- reconnect back-off (scenario e).
local function imexguard_nonudge_cmd(d, name, job, nodelist, nnodes, out)
  local saved = d.ig_args
  d.ig_args = (saved or "") .. " --set nudge=false"
  local cmd = imexguard_cmd(d, name, job, nodelist, nnodes, out)
  d.ig_args = saved
  return cmd
end

local TOOLS = {
  imexguard = imexguard_cmd, baseline = baseline_cmd, ["baseline-always"] = baseline_always_cmd,
  ["imexguard-nonudge"] = imexguard_nonudge_cmd,
}

--- Start `cmd` under bench/timeit.lua (which writes its result to `done` too, when given);
-- returns a handle for collect().
local function spawn(cmd, done)
  return assert(io.popen(string.format("lua5.4 %s %s %s %s", quote(TIMEIT), quote(BUILD), quote(cmd),
    done and quote(done) or ""), "r"))
end

--- Wait for a spawned command: {start = s, stop = s, took = s, status = exit code}.
local function collect(p)
  local line = p:read("a")
  p:close()
  local a, b, st = line:match("^(%S+) (%S+) (%d+)")
  assert(a, "timeit: unexpected output: " .. line)
  return { start = tonumber(a), stop = tonumber(b), took = tonumber(b) - tonumber(a), status = tonumber(st) }
end

local function run_timed(cmd) return collect(spawn(cmd)) end

local report_failure -- defined below (needs the domain helpers)

---------------------------------------------------------------------------------------------------
-- Domain facts

--- Each node's daemon start count so far (simdomain counts imexsim's "starting" log lines).
local function all_starts(d)
  local t = {}
  for _, name in ipairs(d.names) do t[name] = d:starts(name) end
  return t
end

--- Sorted, newline-joined addresses of `names`.
local function host_key(d, names)
  local a = {}
  for i, n in ipairs(names) do a[i] = d.addr[n] end
  table.sort(a)
  return table.concat(a, "\n")
end

--- true when `nvidia-imex-ctl -N -j` on node `name` reports UP over exactly the hosts of `key`.
local function is_up(d, name, key)
  local v = d:ctl_json(name)
  if not v or v.status ~= "UP" or type(v.nodes) ~= "table" then return false end
  local a = {}
  for _, node in pairs(v.nodes) do a[#a + 1] = tostring(node.host) end
  table.sort(a)
  return table.concat(a, "\n") == key
end

-- Watch node `name`'s ctl until the domain is UP with `key`'s hosts, or until every prolog of
-- `procs` has ended (its done file) and `grace` more seconds passed without UP. Returns t_up (end
-- of the first ctl call that showed UP, or nil) and t_down (start of the last one that did not).
local function watch_up(d, name, key, procs, grace)
  local t_up, t_down, all_done
  while true do
    local t_call = now()
    if is_up(d, name, key) then
      t_up = now()
      break
    end
    t_down = t_call
    if not all_done then
      all_done = t_call
      for _, p in ipairs(procs) do
        if not simdomain.read_file(p.done) then all_done = nil break end
      end
    end
    if all_done and t_call - all_done > grace then break end
    -- At least as long as the call took: on a big domain (-N -j asks every node) the watcher
    -- then takes at most about half a core away from the prologs it measures.
    host.sleep(math.max(CFG.watch, now() - t_call))
  end
  return t_up, t_down
end

local function outcome_of(path)
  local text = simdomain.read_file(path) or ""
  return text:match("outcome=([%w%-]+)")
end

--- Run one job's prologs with `tool` at once: procs is a list of {name=, job=}; nodelist the job's
-- hostlist; watch: the node whose ctl is polled for UP over `watch_names` (every CFG.watch s).
-- Returns {procs = {...with start, stop, took, status, outcome}, t0, t_up (nil: never seen), last}.
--- Print a failed prolog's last output line and the state of its node's unit and daemon.
-- p: {name, job, status, out = path of the prolog's output}.
function report_failure(d, p, tool)
  local text = simdomain.read_file(p.out) or ""
  say("    failure: %s %s job %s exit %d: %s", tool, p.name, p.job, p.status,
    (text:gsub("%s+$", ""):match("[^\n]*$")))
  local _, q = simdomain.capture(quote(d.build .. "/nvidia-imex-ctl") .. " -c "
    .. quote(d:dir(p.name) .. "/config.cfg") .. " -q")
  say("    %s: unit %s/%s MainPID %s; ctl -q: %s; last lines of imex.log:", p.name,
    tostring(d:prop(p.name, "ActiveState")), tostring(d:prop(p.name, "SubState")),
    tostring(d:prop(p.name, "MainPID")), (q:gsub("%s+$", "")))
  local _, tail = simdomain.capture("tail -n 6 " .. quote(d:dir(p.name) .. "/imex.log"))
  for line in tail:gmatch("[^\n]+") do say("      %s", line) end
end

local first_failure
-- imexguard prologs that failed: the scenarios are built so that every one of them should succeed,
-- so any failure makes the numbers invalid and the bench exits non-zero.
local imexguard_failures = 0
-- ... except on the domains bigger than BENCH_SCALE_STRICT_MAX (d.tolerant): there N simulated nodes
-- starve each other of this machine's CPU, and their failures are reported, not fatal.
local tolerated_failures = 0
local function count_failure(d)
  if d.tolerant then
    tolerated_failures = tolerated_failures + 1
  else
    imexguard_failures = imexguard_failures + 1
  end
end
local function run_job(d, tool, procs, nodelist, nnodes, watch_names, with_timing)
  first_failure = nil
  local key = host_key(d, watch_names)
  local t0 = now()
  for _, p in ipairs(procs) do
    p.out = string.format("%s/bench-%s-%s.out", d:dir(p.name), tool, p.job)
    p.done = p.out:gsub("%.out$", ".done")
    os.remove(p.done)
    local cmd = tool == "imexguard" and imexguard_cmd(d, p.name, p.job, nodelist, nnodes, p.out, with_timing)
      or TOOLS[tool](d, p.name, p.job, nodelist, nnodes, p.out)
    -- GNU time: the CPU seconds of the prolog and of every process it waited for (the ctl, ...).
    p.timef = p.out:gsub("%.out$", ".cpu")
    p.handle = spawn(string.format("/usr/bin/time -f '%%U %%S' -o %s %s", quote(p.timef), cmd), p.done)
  end
  local t_up, t_down = watch_up(d, watch_names[1], key, procs, 5)
  local last = 0
  for _, p in ipairs(procs) do
    local r = collect(p.handle)
    p.handle = nil
    p.start, p.stop, p.took, p.status = r.start, r.stop, r.took, r.status
    p.outcome = tool == "imexguard" and outcome_of(p.out) or (p.status == 0 and "exit-0" or "failed")
    local u, sy = (simdomain.read_file(p.timef) or ""):match("([%d.]+) ([%d.]+)%s*$")
    p.cpu = u and (tonumber(u) + tonumber(sy)) or nil
    if p.status ~= 0 and tool == "imexguard" then count_failure(d) end
    if p.status ~= 0 and not first_failure then
      first_failure = true
      report_failure(d, p, tool)
    end
    if p.stop > last then last = p.stop end
  end
  -- The job ends: Slurm runs the epilog, which unregisters it (untimed; the baseline has none);
  -- each job's epilogs at once, as Slurm runs them.
  if tool == "imexguard" then
    local by_job, jobs = {}, {}
    for _, p in ipairs(procs) do
      if not by_job[p.job] then
        by_job[p.job] = {}
        jobs[#jobs + 1] = p.job
      end
      table.insert(by_job[p.job], p.name)
    end
    for _, job in ipairs(jobs) do d:epilogs { job = job, nodelist = nodelist, names = by_job[job] } end
  end
  local up_at_end = is_up(d, watch_names[1], key)
  return { procs = procs, t0 = t0, t_up = t_up, t_down = t_down, last = last, up_at_end = up_at_end }
end

--- systemctl --user VERB on the units of `names` in one call (parallel jobs).
local function units(d, verb, names)
  local args = { verb }
  for _, n in ipairs(names or d.names) do args[#args + 1] = d:unit(n) end
  local ok, out = d:systemctl(table.unpack(args))
  assert(ok, "systemctl " .. verb .. ": " .. out)
end

--- Clear the units' failed state and start rate counters (systemctl reset-failed).
local function reset_failed(d)
  local u = {}
  for i, n in ipairs(d.names) do u[i] = d:unit(n) end
  d:systemctl("reset-failed", table.unpack(u))
end

--- Stale state: every node's daemon runs an earlier job's list: pairs of nodes (n1,n2; n3,n4; ...),
-- in a 2-node domain every node alone.
local function make_stale(d)
  local size = d.n > 2 and 2 or 1
  for i, name in ipairs(d.names) do
    local first = i - (i - 1) % size
    local list = {}
    for k = first, math.min(first + size - 1, d.n) do list[#list + 1] = "n" .. k end
    d:write_node_list(name, list)
  end
  reset_failed(d)
  units(d, "restart")
end

--- Cold state: units enabled but stopped, no node list, no imexguard state (a fresh boot).
local function make_cold(d)
  units(d, "enable")
  units(d, "stop")
  reset_failed(d)
  for _, name in ipairs(d.names) do
    os.remove(d:dir(name) .. "/nodes_config.cfg")
    os.execute("rm -f " .. quote(d:dir(name) .. "/state") .. "/* " .. quote(d:dir(name) .. "/baseline.lock"))
  end
end

---------------------------------------------------------------------------------------------------
-- Scenarios

local results = {}
local domains = {}

-- The bench's own unit names, igbenchPID@nK.service: user managers of concurrent tests/with-systemd
-- runs may share cgroup paths (/app.slice/UNIT), so a unit named like the demo's or the tests'
-- (imexsim@nK) could be stopped by, or stop, theirs.
local PREFIX = "igbench" .. assert(simdomain.read_file("/proc/self/stat")):match("^(%d+)")

-- A drop-in that turns off systemd's start rate limit (StartLimitBurst=5 in 10 s by default) for
-- the simulated units: with BASELINE_SLEEP of 2 s instead of the field's 30-45 s, a baseline that
-- restarts on every job would otherwise trip it, which a real node would not.
local DROPIN = assert(os.getenv("IMEXGUARD_TEST_UNIT_DIR"), "run inside tests/with-systemd")
  .. "/" .. PREFIX .. "@.service.d"

-- Each node's imexguard state directory is a tmpfs, as its default /run/imexguard is on a node
-- (the state file's fsync then costs what it costs there); the node lists stay on disk, as
-- /etc/nvidia-imex does. Mounted in tests/with-systemd's private mount namespace.
local function state_tmpfs(d, verb)
  for _, name in ipairs(d.names) do
    local dir = quote(d:dir(name) .. "/state")
    if verb == "mount" then
      assert(os.execute("mount -t tmpfs -o size=4m,mode=0755 imexguard-state " .. dir),
        "bench: cannot mount a tmpfs on " .. dir)
    else
      os.execute("umount " .. dir .. " 2>/dev/null")
    end
  end
end

local function new_domain(nodes, net, extra_cfg, racks)
  os.execute("mkdir -p " .. quote(DROPIN))
  simdomain.write_file(DROPIN .. "/bench.conf", "[Unit]\nStartLimitIntervalSec=0\n")
  -- IMEXSIM_MISMATCH_CLEARS=one: the cases time one restart per list change, as measured before the
  -- simulator kept a node-map mismatch until both ends restart (C32)
  local cfg = {}
  for _, l in ipairs(extra_cfg or {}) do cfg[#cfg + 1] = l end
  for _, l in ipairs(simdomain.MISMATCH_CLEARS_ONE) do cfg[#cfg + 1] = l end
  local d = simdomain.new { nodes = nodes, net = net, build = BUILD, prefix = PREFIX, extra_cfg = cfg,
    racks = racks }
  domains[#domains + 1] = d
  state_tmpfs(d, "mount")
  return d
end

local function drop_domain(d)
  state_tmpfs(d, "umount")
  d:destroy()
  for i, x in ipairs(domains) do
    if x == d then table.remove(domains, i) end
  end
end

--- Lags (prolog return - first UP seen) of a job's procs, and how many returned while the domain
-- was provably not UP yet (before the start of the watcher's last ctl call that did not see UP;
-- a return between that and t_up is within the watcher's precision and not counted).
local function lags(job)
  local l, early = {}, 0
  for _, p in ipairs(job.procs) do
    if job.t_up then l[#l + 1] = p.stop - job.t_up end
    if job.t_down and p.stop < job.t_down then early = early + 1 end
  end
  return l, early
end

--- One job on every node of the domain at once, after `prepare(d)`; returns run_job's result and
-- each node's daemon start count before the job.
local function whole_job(d, tool, job, nodelist, prepare)
  prepare(d)
  local before = all_starts(d)
  local procs = {}
  for i, name in ipairs(d.names) do procs[i] = { name = name, job = job } end
  return run_job(d, tool, procs, nodelist, d.n, d.names), before
end

--- The imexguard prologs' ctl calls (host.run and host.spawn calls of --timing: in the simulated
-- settings the only program the prolog runs is the ctl) into t.calls and t.rate (calls per second
-- of the prolog's wall); nothing without --timing.
local function count_ctl_calls(t, procs)
  if not TIMING then return end
  for _, p in ipairs(procs) do
    local run = timing.parse(simdomain.read_file(p.out))
    if run.total then
      local n = timing.calls(run, "host.run") + timing.calls(run, "host.spawn")
      t.calls[#t.calls + 1] = n
      if p.took > 0 then t.rate[#t.rate + 1] = n / p.took end
    end
  end
end

--- b) restart path: every node's list changes (pairs -> the whole domain), all nodes at once.
local function restart_path(d)
  local r = {}
  for _, tool in ipairs { "imexguard", "baseline" } do
    r[tool] = { took = {}, lag = {}, lagmax = {}, early = 0, fail = 0, restarts = {}, never_up = 0,
      calls = {}, rate = {} }
  end
  local nodelist = "n[1-" .. d.n .. "]"
  local job = 200
  for round = 1, CFG.rounds do
    for _, tool in ipairs { "imexguard", "baseline" } do
      job = job + 1
      make_stale(d)
      local before = all_starts(d)
      local procs = {}
      for i, name in ipairs(d.names) do procs[i] = { name = name, job = job } end
      local res = run_job(d, tool, procs, nodelist, d.n, d.names, true)
      local t = r[tool]
      local took = {}
      for _, p in ipairs(res.procs) do
        t.took[#t.took + 1] = p.took
        took[#took + 1] = p.took
        if p.status ~= 0 then t.fail = t.fail + 1 end
        t.restarts[#t.restarts + 1] = d:starts(p.name) - before[p.name]
      end
      if tool == "imexguard" then count_ctl_calls(t, res.procs) end
      local l, early = lags(res)
      for _, x in ipairs(l) do t.lag[#t.lag + 1] = x end
      if #l > 0 then t.lagmax[#t.lagmax + 1] = select(3, mmm(l)) end
      t.early = t.early + early
      if not res.t_up then t.never_up = t.never_up + 1 end
      say("  restart round %d %-9s: prologs %s ms, return - UP %s ms%s", round, tool, fmt_mmm(took, 1000),
        fmt_mmm(l, 1000), res.t_up and "" or " (UP never seen)")
    end
  end
  return r
end

--- Make everything current with one imexguard prolog on every node (its state file then knows the
-- list it wrote; the domain must be UP after it), then end that job (the epilogs).
local function warm_up(d, job)
  local procs = {}
  for i, name in ipairs(d.names) do procs[i] = { name = name, job = job } end
  local warm = run_job(d, "imexguard", procs, "n[1-" .. d.n .. "]", d.n, d.names)
  assert(warm.up_at_end, string.format("fast path (%d nodes): the domain is not UP after the warm-up prologs",
    d.n))
  -- the warm-up job ends: no registration and no watcher of it runs during the measurements
  d:epilogs{ job = job, nodelist = "n[1-" .. d.n .. "]", env = { IMEXGUARD_NO_JOURNAL = "1" } }
end

--- The end of job `job` on node `name` (untimed): imexguard's epilog, as slurmd runs it when the
-- job ends, so that the fast path's runs, each a job of its own, leave no registration and no
-- watcher (imexguard.watch) running behind them, as on a node where job follows job.
local function end_job(d, name, job)
  d:run_all{ job = job, nodelist = "n[1-" .. d.n .. "]", names = { name }, command = "epilog",
    env = { IMEXGUARD_NO_JOURNAL = "1" } }
end

--- The breakdown of the fast path: `runs` more imexguard prologs on `name` with --timing (and
-- under BENCH_PROFILE when set), each job ended by its epilog.
local function breakdown(d, name, runs, job0)
  local out = d:dir(name) .. "/bench-fast-timing.out"
  local parsed = {}
  for i = 1, runs do
    local res = run_timed(imexguard_cmd(d, name, job0 + i, "n[1-" .. d.n .. "]", d.n, out, true, CFG.profile))
    end_job(d, name, job0 + i)
    local run = timing.parse(simdomain.read_file(out))
    if res.status == 0 and run.total then parsed[#parsed + 1] = run end
  end
  return timing.summary(parsed), #parsed
end

--- a) fast path on node n1: nothing to do. Interleaves ctl alone, imexguard and the baseline.
-- opts: runs (count), job (first job id), full (also /bin/true, --version and the breakdown).
local function fast_path(d, opts)
  local nodelist = "n[1-" .. d.n .. "]"
  warm_up(d, opts.job)
  local name = "n1"
  local inv, nstart = d:invocation(name), d:starts(name)
  local r = { ctl = { took = {}, rss = {} }, version = { took = {}, rss = {} },
    floor = { took = {}, rss = {} },
    imexguard = { took = {}, rss = {}, fail = 0 }, baseline = { took = {}, rss = {}, fail = 0 } }
  local rssfile = d:dir(name) .. "/bench-rss"
  local failed
  local function timed(tool, cmd, out)
    local res = run_timed(string.format("/usr/bin/time -f %%M -o %s %s", quote(rssfile), cmd))
    local t = r[tool]
    t.took[#t.took + 1] = res.took
    t.rss[#t.rss + 1] = tonumber((simdomain.read_file(rssfile) or ""):match("(%d+)%s*$")) or 0
    if t.fail and res.status ~= 0 then
      t.fail = t.fail + 1
      failed = true
      if t == r.imexguard then count_failure(d) end
      report_failure(d, { name = name, job = "fast", status = res.status, out = out }, tool)
    end
  end
  local ctl_cmd = string.format("%s -c %s -N -j >/dev/null 2>&1", quote(d.build .. "/nvidia-imex-ctl"),
    quote(d:dir(name) .. "/config.cfg"))
  local igout, blout = d:dir(name) .. "/bench-fast-ig.out", d:dir(name) .. "/bench-fast-bl.out"
  for i = 1, opts.runs do
    local job = opts.job + i
    if opts.full then timed("floor", "/bin/true") end
    timed("ctl", ctl_cmd)
    if opts.full then timed("version", quote(d.build .. "/imexguard") .. " --version >/dev/null 2>&1") end
    timed("imexguard", imexguard_cmd(d, name, job, nodelist, d.n, igout), igout)
    end_job(d, name, job)
    timed("baseline", baseline_cmd(d, name, job, nodelist, d.n, blout), blout)
    if failed then
      say("  fast path: stopped after a failure (%d runs)", i)
      break
    end
  end
  if opts.full and (TIMING or CFG.profile) and not failed then
    r.breakdown, r.breakdown_runs = breakdown(d, name, opts.runs, opts.job + opts.runs)
  end
  r.igout = outcome_of(igout)
  r.restarted = d:invocation(name) ~= inv or d:starts(name) ~= nstart
  return r
end

--- c) CFG.conc jobs with the same list start at once on every node of a 2-node domain.
local function concurrent(d)
  local r = {}
  local nodelist = "n[1-" .. d.n .. "]"
  local tools = { "imexguard", "baseline" }
  if CFG.always then tools[3] = "baseline-always" end
  for t, tool in ipairs(tools) do
    make_stale(d)
    local before = all_starts(d)
    local procs = {}
    for j = 1, CFG.conc do
      for _, name in ipairs(d.names) do procs[#procs + 1] = { name = name, job = 400 + 100 * t + j } end
    end
    local res = run_job(d, tool, procs, nodelist, d.n, d.names)
    local x = { restarts = {}, fail = 0, took = {}, early = select(2, lags(res)),
      wall = res.last - res.t0, up_at_end = res.up_at_end }
    for _, name in ipairs(d.names) do x.restarts[#x.restarts + 1] = d:starts(name) - before[name] end
    for _, p in ipairs(res.procs) do
      x.took[#x.took + 1] = p.took
      if p.status ~= 0 then x.fail = x.fail + 1 end
    end
    r[tool] = x
    say("  concurrent %-15s: starts per node %s, failures %d, returned before UP %d, wall %.2f s",
      tool, table.concat(x.restarts, ","), x.fail, x.early, x.wall)
  end
  return r
end

--- d) a whole domain cold: every node's prolog at once, CFG.nvl_rounds rounds per tool; then the
-- fast path on n1 of the same domain (CFG.scale_runs runs).
local function whole_domain(d)
  local r = { n = d.n }
  local nodelist = "n[1-" .. d.n .. "]"
  for _, tool in ipairs { "imexguard", "baseline" } do
    r[tool] = { wall = {}, ok = {}, one_restart = {}, early = {}, up_end = 0, lag = {}, lagmax = {},
      cpu = {} }
  end
  local job = 500
  -- The baseline's cold rounds take minutes on big domains on 2 cores (BENCH_SCALE_BASELINE_MAX).
  local tools = d.n <= CFG.scale_baseline_max and { "imexguard", "baseline" } or { "imexguard" }
  for round = 1, CFG.nvl_rounds do
    for _, tool in ipairs(tools) do
      job = job + 1
      local res, before = whole_job(d, tool, job, nodelist, make_cold)
      local t = r[tool]
      local ok, one = 0, 0
      for _, p in ipairs(res.procs) do
        if p.status == 0 then ok = ok + 1 end
        local starts = d:starts(p.name) - before[p.name]
        if starts == 1 then one = one + 1 end
        t.cpu[#t.cpu + 1] = p.cpu
        if starts ~= 1 then -- what kept a node from exactly one start: its prolog's last line
          local text = (simdomain.read_file(p.out) or ""):gsub("%s+$", "")
          say("    %s: %d starts, prolog exit %d: %s", p.name, starts, p.status, text:match("[^\n]*$"))
        end
      end
      local l, early = lags(res)
      for _, x in ipairs(l) do t.lag[#t.lag + 1] = x end
      if #l > 0 then t.lagmax[#t.lagmax + 1] = select(3, mmm(l)) end
      t.wall[#t.wall + 1] = res.last - res.t0
      t.ok[#t.ok + 1] = ok
      t.one_restart[#t.one_restart + 1] = one
      t.early[#t.early + 1] = early
      if res.up_at_end then t.up_end = t.up_end + 1 end
      say("  %d nodes round %d %-9s: %d/%d exit 0, %d/%d one start, before UP %d, wall %.2f s%s", d.n, round,
        tool, ok, d.n, one, d.n, early, res.last - res.t0, res.up_at_end and "" or ", NOT UP at the end")
    end
  end
  say("  %d nodes fast path on n1: %d runs each of ctl alone, imexguard, baseline", d.n, CFG.scale_runs)
  r.fast = fast_path(d, { runs = CFG.scale_runs, job = 600 })
  return r
end

--- f) a job over several racks, cold (units enabled and stopped, no node list), every node's prolog
-- at once: with per-rack IMEX domains (topology.conf beside SLURM_CONF) and, against the same nodes,
-- as one domain (--set domain_map=none); CFG.nvl_rounds rounds each. Per mode: the wall of the
-- whole job, the CPU of each prolog, the size of n1's ctl answer after the job, and the return of
-- each prolog of n1's domain after the watcher saw that domain UP.
local function racks_job(d)
  local r = { racks = #d.racks, size = #d.racks[1], n = d.n, modes = {} }
  local nodelist = "n[1-" .. d.n .. "]"
  local base = d.ig_args
  local job = 800
  for _, mode in ipairs { "racks", "one" } do
    local t = { wall = {}, cpu = {}, lag = {}, lagmax = {}, early = {}, ok = {}, answer = {},
      domain = mode == "racks" and r.size or r.n }
    r.modes[mode] = t
    d.ig_args = base .. (mode == "one" and " --set domain_map=none" or "")
    local watch = mode == "racks" and d.racks[1] or d.names
    local in_watch = {}
    for _, n in ipairs(watch) do in_watch[n] = true end
    for round = 1, CFG.nvl_rounds do
      job = job + 1
      make_cold(d)
      local procs = {}
      for i, name in ipairs(d.names) do procs[i] = { name = name, job = job } end
      local res = run_job(d, "imexguard", procs, nodelist, d.n, watch)
      local ok = 0
      for _, p in ipairs(res.procs) do
        if p.status == 0 then ok = ok + 1 end
        t.cpu[#t.cpu + 1] = p.cpu
      end
      -- the lags of n1's domain only: the watcher sees that domain
      local mine = {}
      for _, p in ipairs(res.procs) do if in_watch[p.name] then mine[#mine + 1] = p end end
      local l, early = lags({ procs = mine, t_up = res.t_up, t_down = res.t_down })
      for _, x in ipairs(l) do t.lag[#t.lag + 1] = x end
      if #l > 0 then t.lagmax[#t.lagmax + 1] = select(3, mmm(l)) end
      t.wall[#t.wall + 1] = res.last - res.t0
      t.ok[#t.ok + 1] = ok
      t.early[#t.early + 1] = early
      local _, answer = simdomain.capture(quote(d.build .. "/nvidia-imex-ctl") .. " -c "
        .. quote(d:dir("n1") .. "/config.cfg") .. " -N -j")
      t.answer[#t.answer + 1] = #answer
      say("  %dx%d %-5s round %d: %d/%d exit 0, n1's domain %d nodes, before UP %d, wall %.2f s, ctl answer "
        .. "%d bytes", r.racks, r.size, mode, round, ok, d.n, t.domain, early, res.last - res.t0, #answer)
    end
  end
  d.ig_args = base
  return r
end

--- Lines of node `name`'s imex.log that contain `text` (plain): e) counts SIGUSR1 by them.
local function log_lines(d, name, text)
  local n = 0
  for line in (simdomain.read_file(d:dir(name) .. "/imex.log") or ""):gmatch("[^\n]+") do
    if line:find(text, 1, true) then n = n + 1 end
  end
  return n
end

--- Wait (polling every CFG.watch s, at most `timeout` s) until the domain is UP over all its nodes.
local function wait_up(d, timeout)
  local key, t_end = host_key(d, d.names), now() + timeout
  while now() < t_end do
    if is_up(d, "n1", key) then return true end
    host.sleep(CFG.watch)
  end
  return false
end

--- e) one job with `tool`: n4's node list file is stale, so n4's prolog restarts its daemon; once
-- the unit has its new invocation, the prologs of the current nodes n1..n(N-1) start. The UP
-- watcher polls n1 from n4's prolog on, until UP or until every prolog ended and twice the
-- back-off passed. Returns {procs (p.after: its end minus the restarted daemon's start), t_up,
-- t_down, start = ExecMainStartTimestampMonotonic of n4 (s, CLOCK_MONOTONIC as host.now()),
-- starts = daemon starts per node during the job, usr1 = SIGUSR1 the daemons acted on}.
local function backoff_job(d, tool, job)
  local nodelist = "n[1-" .. d.n .. "]"
  local last = d.names[d.n]
  d:write_node_list(last, { last })
  local before, inv = all_starts(d), d:invocation(last)
  local usr1 = {}
  for _, n in ipairs(d.names) do usr1[n] = log_lines(d, n, "SIGUSR1: restarting") end
  local procs = {}
  local function launch(name)
    local p = { name = name, job = job }
    p.out = string.format("%s/bench-e-%s-%s.out", d:dir(name), tool, job)
    p.done = p.out:gsub("%.out$", ".done")
    os.remove(p.done)
    p.handle = spawn(TOOLS[tool](d, name, job, nodelist, d.n, p.out), p.done)
    procs[#procs + 1] = p
  end
  local key = host_key(d, d.names)
  launch(last)
  local t_inv = now() + 30
  while true do
    local i = d:invocation(last)
    if i and i ~= "" and i ~= inv then break end
    assert(now() < t_inv, "e: " .. last .. "'s prolog did not restart its daemon within 30 s")
    host.sleep(0.01)
  end
  for i = 1, d.n - 1 do launch(d.names[i]) end
  local grace = 2 * CFG.backoff_ms / 1000 + 5
  local t_up, t_down = watch_up(d, "n1", key, procs, grace)
  local start = tonumber(d:prop(last, "ExecMainStartTimestampMonotonic")) / 1e6
  for _, p in ipairs(procs) do
    local r = collect(p.handle)
    p.handle = nil
    p.start, p.stop, p.took, p.status = r.start, r.stop, r.took, r.status
    p.after = p.stop - start
    if p.status ~= 0 and tool ~= "baseline" then count_failure(d) end
    if p.status ~= 0 then report_failure(d, p, tool) end
  end
  if tool ~= "baseline" then d:epilogs { job = job, nodelist = nodelist } end
  local starts, acted = {}, 0
  for _, n in ipairs(d.names) do
    starts[n] = d:starts(n) - before[n]
    acted = acted + log_lines(d, n, "SIGUSR1: restarting") - usr1[n]
  end
  return { procs = procs, t_up = t_up, t_down = t_down, start = start, starts = starts, usr1 = acted }
end

--- e) back-off: a domain whose daemons reconnect to a lost peer only after CFG.backoff_ms,
-- doubling (a 595 daemon: 15, 31, 62, 125 s); CFG.backoff_rounds rounds of each tool, in the
-- order imexguard with nudge = false, the baseline, imexguard (so that the daemons' 5 s throttle
-- of SIGUSR1 never holds back a nudged round). Each job starts on an UP domain.
local function backoff_path(d)
  local tools = { "imexguard-nonudge", "baseline", "imexguard" }
  local r = {}
  for _, tool in ipairs(tools) do
    r[tool] = { took = {}, after = {}, after_max = {}, lag = {}, early = 0, fail = 0, extra = {}, usr1 = {},
      nudges = {} }
  end
  local job = 700
  for round = 1, CFG.backoff_rounds do
    for _, tool in ipairs(tools) do
      job = job + 1
      assert(wait_up(d, 3 * CFG.backoff_ms / 1000 + 10), "e: the domain is not UP before job " .. job)
      local res = backoff_job(d, tool, job)
      local t = r[tool]
      local after = {}
      for _, p in ipairs(res.procs) do
        t.took[#t.took + 1] = p.took
        t.after[#t.after + 1] = p.after
        after[#after + 1] = p.after
        if res.t_up then t.lag[#t.lag + 1] = p.stop - res.t_up end
        if res.t_down and p.stop < res.t_down then t.early = t.early + 1 end
        if p.status ~= 0 then t.fail = t.fail + 1 end
        local line = (simdomain.read_file(p.out) or ""):match("outcome=[^\n]*") or ""
        t.nudges[#t.nudges + 1] = tonumber(line:match("nudges=(%d+)")) or 0
      end
      t.after_max[#t.after_max + 1] = select(3, mmm(after))
      local total = 0
      for _, n in ipairs(d.names) do total = total + res.starts[n] end
      t.extra[#t.extra + 1] = total - 1
      t.usr1[#t.usr1 + 1] = res.usr1
      say("  back-off round %d %-17s: prologs %s ms, end - restarted daemon's start max %.2f s, "
        .. "daemon starts %d, SIGUSR1 %d%s", round, tool, fmt_mmm(after, 1000), select(3, mmm(after)), total,
        res.usr1, res.t_up and "" or " (UP never seen)")
    end
  end
  return r
end

---------------------------------------------------------------------------------------------------
-- Report: the text tables and build/bench.json (one metric per row; bench/README.md)

local rows, metrics = {}, {}
local function row(metric, ig, bl, rat) rows[#rows + 1] = { metric, ig, bl, rat } end
local function metric(...) metrics[#metrics + 1] = stats.metric(...) end
local function ms(list) return stats.scaled(list, 1000) end

--- Each value of `list` minus `x`.
local function minus(list, x)
  local out = {}
  for i, v in ipairs(list) do out[i] = v - x end
  return out
end

local function report_fast(a)
  local ctl_med = median(a.ctl.took)
  local ig_extra, bl_extra = minus(a.imexguard.took, ctl_med), minus(a.baseline.took, ctl_med)
  row(string.format("a fast path wall, ms (%d runs)", CFG.runs), fmt_mmm(a.imexguard.took, 1000, "%.1f"),
    fmt_mmm(a.baseline.took, 1000, "%.1f"), ratio(median(a.imexguard.took), median(a.baseline.took)))
  row("a   ctl -N -j alone, ms", fmt_mmm(a.ctl.took, 1000, "%.1f"), "(same)", "")
  row("a   imexguard --version (start-up only), ms", fmt_mmm(a.version.took, 1000, "%.1f"), "", "")
  row("a   /bin/true (process start floor), ms", fmt_mmm(a.floor.took, 1000, "%.1f"), "(same)", "")
  row("a   cost beyond one ctl call, ms", fmt_mmm(ig_extra, 1000, "%.1f"), fmt_mmm(bl_extra, 1000, "%.1f"),
    ratio(median(ig_extra), median(bl_extra)))
  row("a   peak RSS (largest process), KiB", fmt_mmm(a.imexguard.rss), fmt_mmm(a.baseline.rss),
    ratio(median(a.imexguard.rss), median(a.baseline.rss)))
  row("a   ctl alone peak RSS, KiB", fmt_mmm(a.ctl.rss), "(same)", "")
  row("a   failures / restarted", string.format("%d / %s (%s)", a.imexguard.fail,
    a.restarted and "yes" or "no", tostring(a.igout)), string.format("%d", a.baseline.fail), "")
  metric("fast.wall", "ms", ms(a.imexguard.took), ms(a.baseline.took))
  metric("fast.ctl_alone", "ms", ms(a.ctl.took))
  metric("fast.version", "ms", ms(a.version.took))
  metric("fast.floor", "ms", ms(a.floor.took))
  metric("fast.cost_beyond_ctl", "ms", ms(ig_extra), ms(bl_extra))
  metric("fast.peak_rss", "KiB", a.imexguard.rss, a.baseline.rss)
  metric("fast.ctl_peak_rss", "KiB", a.ctl.rss)
  metric("fast.failures", "count", { a.imexguard.fail }, { a.baseline.fail })
  metric("fast.restarted", "count", { a.restarted and 1 or 0 })
end

local function report_restart(b)
  local ig, bl = b.imexguard, b.baseline
  row(string.format("b restart path wall, s (%d nodes x %d)", CFG.restart_nodes, CFG.rounds),
    fmt_mmm(ig.took, 1, "%.2f"), fmt_mmm(bl.took, 1, "%.2f"), ratio(median(ig.took), median(bl.took)))
  row("b   return - domain UP, ms", fmt_mmm(ig.lag, 1000), fmt_mmm(bl.lag, 1000), "")
  local function max_ms(list)
    return #list > 0 and string.format("%.0f", select(3, mmm(list)) * 1000) or "n/a"
  end
  row("b   return - domain UP, max over rounds, ms", max_ms(ig.lagmax), max_ms(bl.lagmax), "")
  row("b   returned before UP / failed", string.format("%d / %d", ig.early, ig.fail),
    string.format("%d / %d", bl.early, bl.fail), "")
  row("b   starts per node per job", fmt_mmm(ig.restarts), fmt_mmm(bl.restarts), "")
  local na = "n/a (no --timing)"
  row("b   ctl calls per prolog", TIMING and fmt_mmm(ig.calls) or na, "", "")
  row("b   ctl calls per second of the prolog", TIMING and fmt_mmm(ig.rate, 1, "%.1f") or na, "", "")
  metric("restart.wall", "s", ig.took, bl.took)
  metric("restart.return_minus_up", "ms", ms(ig.lag), ms(bl.lag))
  metric("restart.return_minus_up_round_max", "ms", ms(ig.lagmax), ms(bl.lagmax))
  metric("restart.returned_before_up", "count", { ig.early }, { bl.early })
  metric("restart.failed", "count", { ig.fail }, { bl.fail })
  metric("restart.starts_per_node", "count", ig.restarts, bl.restarts)
  metric("restart.ctl_calls_per_prolog", "calls", ig.calls)
  metric("restart.ctl_calls_per_second", "calls/s", ig.rate)
end

local function report_concurrent(c)
  local ig, bl = c.imexguard, c.baseline
  row(string.format("c %d concurrent jobs: starts per node", CFG.conc), table.concat(ig.restarts, ", "),
    table.concat(bl.restarts, ", "), ratio(median(ig.restarts), median(bl.restarts)))
  row("c   wall of all prologs, s", string.format("%.2f", ig.wall), string.format("%.2f", bl.wall),
    ratio(ig.wall, bl.wall))
  row("c   per prolog, s", fmt_mmm(ig.took, 1, "%.2f"), fmt_mmm(bl.took, 1, "%.2f"),
    ratio(median(ig.took), median(bl.took)))
  row("c   failed / returned before UP", string.format("%d / %d", ig.fail, ig.early),
    string.format("%d / %d", bl.fail, bl.early), "")
  metric("concurrent.starts_per_node", "count", ig.restarts, bl.restarts)
  metric("concurrent.wall", "s", { ig.wall }, { bl.wall })
  metric("concurrent.per_prolog", "s", ig.took, bl.took)
  metric("concurrent.failed", "count", { ig.fail }, { bl.fail })
  metric("concurrent.returned_before_up", "count", { ig.early }, { bl.early })
  local al = c["baseline-always"]
  if al then
    row("c   restart-every-job baseline: starts per node", table.concat(ig.restarts, ", "),
      table.concat(al.restarts, ", "), ratio(median(ig.restarts), median(al.restarts)))
    row("c   restart-every-job baseline: wall, s", string.format("%.2f", ig.wall),
      string.format("%.2f", al.wall), ratio(ig.wall, al.wall))
    row("c   restart-every-job baseline: failed / before UP", string.format("%d / %d", ig.fail, ig.early),
      string.format("%d / %d", al.fail, al.early), "")
    metric("concurrent.always.starts_per_node", "count", ig.restarts, al.restarts)
    metric("concurrent.always.wall", "s", { ig.wall }, { al.wall })
    metric("concurrent.always.failed", "count", { ig.fail }, { al.fail })
  end
end

--- The metrics of one size of the scale scenario, and its line of the scale table.
local function report_size(r)
  local ig, bl, f = r.imexguard, r.baseline, r.fast
  local p = "scale." .. r.n .. "."
  local ctl_med = median(f.ctl.took)
  local ig_extra, bl_extra = minus(f.imexguard.took, ctl_med), minus(f.baseline.took, ctl_med)
  local per_node = function(list) return stats.scaled(list, 1000 / r.n) end
  metric(p .. "cold_wall", "s", ig.wall, bl.wall)
  metric(p .. "cold_wall_per_node", "ms/node", per_node(ig.wall), per_node(bl.wall))
  metric(p .. "cold_cpu_per_prolog", "ms", ms(ig.cpu), ms(bl.cpu))
  metric(p .. "cold_cpu_per_prolog_per_node", "ms/node", per_node(ig.cpu), per_node(bl.cpu))
  metric(p .. "prologs_ok", "count", ig.ok, bl.ok)
  metric(p .. "one_start", "count", ig.one_restart, bl.one_restart)
  metric(p .. "returned_before_up", "count", ig.early, bl.early)
  metric(p .. "return_minus_up", "ms", ms(ig.lag), ms(bl.lag))
  metric(p .. "return_minus_up_round_max", "ms", ms(ig.lagmax), ms(bl.lagmax))
  metric(p .. "up_after_all", "count", { ig.up_end }, #bl.wall > 0 and { bl.up_end } or nil)
  metric(p .. "ctl_alone", "ms", ms(f.ctl.took))
  metric(p .. "fast_wall", "ms", ms(f.imexguard.took), ms(f.baseline.took))
  metric(p .. "fast_cost_beyond_ctl", "ms", ms(ig_extra), ms(bl_extra))
  metric(p .. "fast_cost_per_node", "ms/node", per_node(ig_extra), per_node(bl_extra))
  metric(p .. "fast_failures", "count", { f.imexguard.fail }, { f.baseline.fail })
  -- "imexguard (baseline)" medians times k; "-" where there is no value (no baseline at this size)
  local function med(list, k, fmt)
    local m = median(list)
    return m and string.format(fmt, m * k) or "-"
  end
  local function pair(a, b, k, fmt) return med(a, k, fmt) .. " (" .. med(b, k, fmt) .. ")" end
  local function rounds(a, b)
    return table.concat(a, ",") .. " (" .. (#b > 0 and table.concat(b, ",") or "-") .. ")"
  end
  local node = 1000 / r.n
  return { tostring(r.n), pair(ig.wall, bl.wall, 1, "%.2f"), rounds(ig.ok, bl.ok),
    rounds(ig.one_restart, bl.one_restart),
    med(ig.lag, 1000, "%.0f") .. " / " .. med({ select(3, mmm(ig.lag)) }, 1000, "%.0f"),
    pair(ig.wall, bl.wall, node, "%.1f"), pair(ig.cpu, bl.cpu, 1000, "%.0f"),
    pair(ig.cpu, bl.cpu, node, "%.1f"),
    med(f.ctl.took, 1000, "%.1f"), pair(f.imexguard.took, f.baseline.took, 1000, "%.1f"),
    pair(ig_extra, bl_extra, 1000, "%.1f"), pair(ig_extra, bl_extra, node, "%.2f") }
end

--- Print `lines` (lists of cells) as a table with `head`, columns padded.
local function print_table(head, lines)
  local w = {}
  for i, h in ipairs(head) do w[i] = #h end
  for _, r in ipairs(lines) do
    for i, c in ipairs(r) do w[i] = math.max(w[i] or 0, #c) end
  end
  local fmt = {}
  for i = 1, #head - 1 do fmt[i] = "%-" .. w[i] .. "s" end
  fmt[#head] = "%s"
  local f = table.concat(fmt, " | ")
  say(f, table.unpack(head))
  local width = 3 * (#head - 1)
  for i = 1, #head do width = width + w[i] end
  say("%s", string.rep("-", width))
  for _, r in ipairs(lines) do say(f, table.unpack(r)) end
end

--- e) the back-off table: imexguard with and without the nudge against the baseline of this run.
local function report_backoff(e)
  local ig, no, bl = e.imexguard, e["imexguard-nonudge"], e.baseline
  local function sum(list)
    local n = 0
    for _, v in ipairs(list) do n = n + v end
    return n
  end
  local lines = {}
  local function line(name, a, b, c, ra, rb) lines[#lines + 1] = { name, a, b, c, ra or "", rb or "" } end
  local function ms3(t) return fmt_mmm(t, 1000) end
  line(string.format("prolog wall, ms (%d nodes x %d)", CFG.restart_nodes, CFG.backoff_rounds), ms3(ig.took),
    ms3(no.took), ms3(bl.took), ratio(median(ig.took), median(bl.took)),
    ratio(median(no.took), median(bl.took)))
  line("end - restarted daemon's start, ms", ms3(ig.after), ms3(no.after), ms3(bl.after),
    ratio(median(ig.after), median(bl.after)), ratio(median(no.after), median(bl.after)))
  line("  the same, max over rounds, ms", ms3(ig.after_max), ms3(no.after_max), ms3(bl.after_max),
    ratio(median(ig.after_max), median(bl.after_max)), ratio(median(no.after_max), median(bl.after_max)))
  line("return - domain UP, ms", ms3(ig.lag), ms3(no.lag), ms3(bl.lag))
  line("returned before UP / failed", string.format("%d / %d", ig.early, ig.fail),
    string.format("%d / %d", no.early, no.fail), string.format("%d / %d", bl.early, bl.fail))
  line("daemon starts beyond the one, per job", table.concat(ig.extra, ", "), table.concat(no.extra, ", "),
    table.concat(bl.extra, ", "))
  line("SIGUSR1 the daemons acted on, per job", table.concat(ig.usr1, ", "), table.concat(no.usr1, ", "),
    table.concat(bl.usr1, ", "))
  line("nudges (final lines), per job", tostring(sum(ig.nudges) / CFG.backoff_rounds),
    tostring(sum(no.nudges) / CFG.backoff_rounds), "")
  say("")
  say("e) back-off: %d nodes, the last one's prolog restarts its daemon, the others' prologs start once "
    .. "it is back; the daemons' first reconnect back-off %g s, doubling", CFG.restart_nodes,
    CFG.backoff_ms / 1000)
  say("")
  print_table({ "metric", "imexguard", "imexguard nudge=false", "baseline", "ratio", "ratio nudge=false" },
    lines)
  local worst = select(3, mmm(ig.after_max)) or math.huge
  say("goal: every prolog back within 2 s of the restarted daemon's start (worst %.2f s), no extra restart "
    .. "(%d): %s", worst, sum(ig.extra), (worst <= 2 and sum(ig.extra) == 0) and "met" or "NOT met")
  metric("backoff.wall", "ms", ms(ig.took), ms(bl.took))
  metric("backoff.wall_nonudge", "ms", ms(no.took), ms(bl.took))
  metric("backoff.after_start", "ms", ms(ig.after), ms(bl.after))
  metric("backoff.after_start_nonudge", "ms", ms(no.after), ms(bl.after))
  metric("backoff.after_start_round_max", "ms", ms(ig.after_max), ms(bl.after_max))
  metric("backoff.after_start_round_max_nonudge", "ms", ms(no.after_max), ms(bl.after_max))
  metric("backoff.return_minus_up", "ms", ms(ig.lag), ms(bl.lag))
  metric("backoff.return_minus_up_nonudge", "ms", ms(no.lag), ms(bl.lag))
  metric("backoff.returned_before_up", "count", { ig.early }, { bl.early })
  metric("backoff.failed", "count", { ig.fail }, { bl.fail })
  metric("backoff.failed_nonudge", "count", { no.fail }, { bl.fail })
  metric("backoff.extra_starts", "count", ig.extra, bl.extra)
  metric("backoff.extra_starts_nonudge", "count", no.extra, bl.extra)
  metric("backoff.usr1", "count", ig.usr1, bl.usr1)
  metric("backoff.nudges", "count", ig.nudges)
end

local function report_scale(list)
  local lines = {}
  for _, r in ipairs(list) do lines[#lines + 1] = report_size(r) end
  say("")
  say("d) scale: each size cold (%d rounds per tool), then the fast path on n1 (%d runs); medians, "
    .. "the baseline's in ( )", CFG.nvl_rounds, CFG.scale_runs)
  say("   cost per run grows at most linearly with nodes when the /node columns do not grow with nodes;")
  say("   CPU/prolog: user + system CPU of one cold prolog and the processes it waited for (GNU time)")
  say("")
  print_table({ "nodes", "cold wall s", "prologs ok", "one start", "return-UP ms med / max",
    "cold wall/node ms", "CPU/prolog ms", "CPU/prolog/node ms", "ctl alone ms", "fast wall ms",
    "beyond ctl ms", "beyond ctl/node ms" }, lines)
end

--- f) the racks table and metrics: per layout, per-rack domains against one domain.
local function report_racks(list)
  local lines = {}
  for _, r in ipairs(list) do
    for _, mode in ipairs { "racks", "one" } do
      local t = r.modes[mode]
      local p = string.format("racks.%dx%d.%s.", r.racks, r.size, mode)
      local per_node = function(x) return stats.scaled(x, 1000 / t.domain) end
      metric(p .. "cold_wall", "s", t.wall)
      metric(p .. "cold_cpu_per_prolog", "ms", ms(t.cpu))
      metric(p .. "cold_cpu_per_prolog_per_domain_node", "ms/node", per_node(t.cpu))
      metric(p .. "ctl_answer", "bytes", t.answer)
      metric(p .. "return_minus_up", "ms", ms(t.lag))
      metric(p .. "returned_before_up", "count", t.early)
      metric(p .. "prologs_ok", "count", t.ok)
      local function med(x, k, f)
        local m = median(x)
        return m and string.format(f, m * k) or "-"
      end
      lines[#lines + 1] = { string.format("%dx%d", r.racks, r.size),
        mode == "racks" and "per rack" or "one domain", tostring(t.domain), med(t.wall, 1, "%.2f"),
        table.concat(t.ok, ","), med(t.cpu, 1000, "%.0f"), med(t.cpu, 1000 / t.domain, "%.1f"),
        med(t.answer, 1, "%.0f"), med(t.lag, 1000, "%.0f") .. " / " .. med({ select(3, mmm(t.lag)) }, 1000,
        "%.0f"), table.concat(t.early, ",") }
    end
  end
  say("")
  say("f) a job over several racks, cold (%d rounds per mode): per-rack IMEX domains (topology.conf) "
    .. "against one domain over the same nodes (domain_map=none); medians", CFG.nvl_rounds)
  say("   the cost per node stays flat when CPU/prolog/domain node does not grow with the domain")
  say("")
  print_table({ "racks", "domains", "domain nodes", "cold wall s", "prologs ok", "CPU/prolog ms",
    "CPU/prolog/domain node ms", "ctl answer B", "return-UP ms med / max", "before UP" }, lines)
end

-- g) membership by slots against the per-job list, one sequence, both modes (bench/slots.lua).
local function report_slots(g)
  local l, sl = g.list, g.slots
  local function med(x, k) local m = median(x) return m and string.format("%.0f", m * k) or "-" end
  local function max(x, k) local _, _, m = mmm(x) return m and string.format("%.0f", m * k) or "-" end
  local function outs(r)
    local t = {}
    for o, n in pairs(r.outcomes) do t[#t + 1] = o .. " " .. n end
    table.sort(t)
    return table.concat(t, ", ")
  end
  local function rat(a, b) return ratio(median(b), median(a)) end
  say("")
  say("g) membership: %d jobs over changing subsets of a rack of 6, rounds with two disjoint jobs at once, "
    .. "each mode from a cold rack (bench/slots.lua); ratio = slots / list", l.jobs)
  say("")
  print_table({ "metric", "list", "slots", "ratio" }, {
    { "daemon starts", tostring(l.starts), tostring(sl.starts), rat({ l.starts }, { sl.starts }) },
    { "prolog wall ms, median", med(l.prolog, 1000), med(sl.prolog, 1000), rat(l.prolog, sl.prolog) },
    { "prolog wall ms, max", max(l.prolog, 1000), max(sl.prolog, 1000), "" },
    { "job ready ms, median", med(l.ready, 1000), med(sl.ready, 1000), rat(l.ready, sl.ready) },
    { "job ready ms, max", max(l.ready, 1000), max(sl.ready, 1000), "" },
    { "epilog wall ms, median", med(l.epilog, 1000), med(sl.epilog, 1000), rat(l.epilog, sl.epilog) },
    { "jobs ready / jobs", #l.ready .. "/" .. l.jobs, #sl.ready .. "/" .. sl.jobs, "" },
    { "outcomes", outs(l), outs(sl), "" },
  })
  for _, mode in ipairs({ "list", "slots" }) do
    local r = g[mode]
    metric("membership." .. mode .. ".daemon_starts", "count", { r.starts })
    metric("membership." .. mode .. ".prolog_wall", "ms", ms(r.prolog))
    metric("membership." .. mode .. ".job_ready", "ms", ms(r.ready))
    metric("membership." .. mode .. ".epilog_wall", "ms", ms(r.epilog))
  end
end

local function report_breakdown(a)
  say("")
  if CFG.profile and a and a.breakdown_runs then
    say("BENCH_PROFILE: %d more fast-path prologs ran under: %s", CFG.runs, CFG.profile)
  end
  if not TIMING then
    say("phase breakdown: not available (this imexguard has no --timing)")
    return
  end
  if not a or not a.breakdown then
    say("phase breakdown: not measured (the fast path did not run or failed)")
    return
  end
  say("phase breakdown of the fast path (imexguard --timing, %d runs on n1; medians)", a.breakdown_runs)
  for _, line in ipairs(timing.table_lines(a.breakdown)) do say("%s", line) end
  for _, r in ipairs(a.breakdown) do
    local m = stats.metric("breakdown." .. r.name, "ms", r.ms)
    if r.calls then m.calls = median(r.calls) end
    metrics[#metrics + 1] = m
  end
end

--- build/bench.json: the settings, the commit, the date and every metric.
local function write_json(total)
  local _, commit = simdomain.capture("git rev-parse HEAD 2>/dev/null")
  commit = commit:match("^(%x+)%s*$")
  local doc = {
    commit = commit or stats.null,
    date = os.date("!%Y-%m-%dT%H:%M:%SZ"),
    duration_s = total,
    timing_available = TIMING,
    imexguard_failures = imexguard_failures,
    tolerated_failures = tolerated_failures,
    settings = {
      runs = CFG.runs, rounds = CFG.rounds, sizes = CFG.sizes, scale_rounds = CFG.nvl_rounds,
      scale_runs = CFG.scale_runs, poll_interval = tonumber(CFG.poll or "0.1"), baseline_sleep = CFG.sleep,
      restart_nodes = CFG.restart_nodes, concurrency = CFG.conc, watch_interval = CFG.watch,
      only = CFG.only, baseline_always_restart = CFG.always, backoff_rounds = CFG.backoff_rounds,
      backoff_ms = CFG.backoff_ms, racks = CFG.racks,
    },
    metrics = setmetatable(metrics, stats.list_mt),
  }
  local path = BUILD .. "/bench.json"
  simdomain.write_file(path, stats.json(doc) .. "\n")
  say("bench: wrote %s (%d metrics)", path, #metrics)
end

local function report(total)
  say("")
  say("imexguard vs baseline (bench/baseline-prolog.sh, BASELINE_SLEEP=%g s); imexguard poll_interval=%s s",
    CFG.sleep, CFG.poll or "0.1")
  say("min / median / max; ratio = imexguard median / baseline median (< 1: imexguard better)")
  say("")
  if results.fast then report_fast(results.fast) end
  if results.restart then report_restart(results.restart) end
  if results.concurrent then report_concurrent(results.concurrent) end
  if #rows > 0 then print_table({ "metric", "imexguard", "baseline", "ratio" }, rows) end
  if results.domain then report_scale(results.domain) end
  if results.backoff then report_backoff(results.backoff) end
  if results.racks then report_racks(results.racks) end
  if results.slots then report_slots(results.slots) end
  if results.fast or CFG.only:find("a", 1, true) then report_breakdown(results.fast) end
  say("")
  write_json(total)
  say("bench: done in %.0f s", total)
end

---------------------------------------------------------------------------------------------------
-- Main

local t_start = now()
local ok, err = xpcall(function()
  TIMING = timing.available(BUILD .. "/imexguard", quote)
  say("imexguard bench: build directory %s, BASELINE_SLEEP=%g s, 127.0.%d-%d.x, sizes %s, --timing %s", BUILD,
    CFG.sleep, CFG.net, CFG.net + 2 + #CFG.sizes, table.concat(CFG.sizes, " "), TIMING and "yes" or "no")
  local function want(x) return CFG.only:find(x, 1, true) ~= nil end
  local d
  if want("a") or want("b") then
    d = new_domain(CFG.restart_nodes, CFG.net)
    units(d, "enable")
    make_stale(d)
    if want("b") then
      say("b) restart path: %d nodes, each running a stale list; job n[1-%d] on all nodes at once",
        d.n, d.n)
      results.restart = restart_path(d)
    end
    if want("a") then
      say("a) fast path: node n1, nothing to do, %d runs each of /bin/true, ctl alone, "
        .. "imexguard --version, imexguard, baseline", CFG.runs)
      results.fast = fast_path(d, { runs = CFG.runs, job = 300, full = true })
    end
    drop_domain(d)
  end
  if want("c") then
    d = new_domain(2, CFG.net + 1)
    units(d, "enable")
    say("c) %d jobs with the same list n[1-2] at once on each of 2 nodes (stale daemons)", CFG.conc)
    results.concurrent = concurrent(d)
    drop_domain(d)
  end
  if want("d") then
    results.domain = {}
    for i, n in ipairs(CFG.sizes) do
      d = new_domain(n, CFG.net + 1 + i)
      -- N simulated nodes share this machine's cores: every health poll's ctl asks N daemons, so a
      -- cold domain's wait for UP stretches with N (bench/README.md, d); a budget that the
      -- simulation, not imexguard, would exhaust must not count as imexguard failing.
      d.ig_args = string.format(" --deadline %d --set health_timeout=%d --set start_timeout=%d",
        CFG.scale_deadline, CFG.scale_deadline - 10, CFG.scale_deadline - 10)
      d.tolerant = n > CFG.strict_max
      say("d) %d nodes cold (units enabled and stopped, no node list): every node's prolog at once", n)
      results.domain[i] = whole_domain(d)
      drop_domain(d)
    end
  end
  if want("e") then
    -- the daemons reconnect to a lost peer after CFG.backoff_ms, doubling (a 595 daemon: 15, 31,
    -- 62, 125 s; docs/design.md, "IMEX facts")
    d = new_domain(CFG.restart_nodes, CFG.net + 2 + #CFG.sizes, { "IMEXSIM_RECONNECT_MS=" .. CFG.backoff_ms,
      "IMEXSIM_RECONNECT_FACTOR=2", "IMEXSIM_RECONNECT_MAX_MS=" .. math.max(CFG.backoff_ms * 8, 120000) })
    for _, name in ipairs(d.names) do d:write_node_list(name, d.names) end
    units(d, "enable")
    units(d, "start")
    say("e) back-off %g s: %d nodes, one restarts; imexguard with and without the nudge, the baseline",
      CFG.backoff_ms / 1000, d.n)
    -- a first job's prologs bring the fresh mesh UP (the units' first attempts at peers that were
    -- not up yet wait for the back-off), then it ends
    warm_up(d, 700)
    results.backoff = backoff_path(d)
    drop_domain(d)
  end
  if want("g") then
    say("g) membership by slots against the per-job list: a rack of 6, %d rounds, both modes",
      #slots_bench.SEQUENCE)
    local function command(dd, name, job, nodelist, nnodes, out, verb)
      return (imexguard_cmd(dd, name, job, nodelist, nnodes, out):gsub(" prolog >", " " .. verb .. " >", 1))
    end
    results.slots = slots_bench.run({ new_domain = new_domain, drop_domain = drop_domain, units = units,
      spawn = spawn, collect = collect, command = command, now = now, sleep = host.sleep, say = say,
      simdomain = simdomain }, CFG.net + #CFG.racks + 2)
  end
  if want("f") then
    results.racks = {}
    for i, layout in ipairs(CFG.racks) do
      local sizes = {}
      for k = 1, layout.racks do sizes[k] = layout.size end
      -- racks use 127.<rack>.NET.x (simdomain), apart from the other scenarios' 127.0.NET.x
      d = new_domain(nil, CFG.net + i, nil, sizes)
      d.ig_args = string.format(" --deadline %d --set health_timeout=%d --set start_timeout=%d",
        CFG.scale_deadline, CFG.scale_deadline - 10, CFG.scale_deadline - 10)
      d.tolerant = d.n > CFG.strict_max
      say("f) %d racks of %d nodes cold: one job over all of them, per-rack domains then one domain",
        layout.racks, layout.size)
      results.racks[i] = racks_job(d)
      drop_domain(d)
    end
  end
end, debug.traceback)
for _, d in ipairs(domains) do
  state_tmpfs(d, "umount")
  d:destroy()
end
os.execute("rm -rf " .. quote(DROPIN))
if not ok then
  io.stderr:write("bench: ", tostring(err), "\n")
  os.exit(1)
end
report(now() - t_start)
if tolerated_failures > 0 then
  say("bench: %d imexguard prolog(s) failed on domains above BENCH_SCALE_STRICT_MAX=%d nodes (see above; "
    .. "not counted: the simulation is CPU-bound there, bench/README.md)", tolerated_failures, CFG.strict_max)
end
if imexguard_failures > 0 then
  say("bench: %d imexguard prolog(s) failed (see above): the numbers are not valid", imexguard_failures)
  os.exit(1)
end
