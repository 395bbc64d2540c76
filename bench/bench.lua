--- bench/bench.lua: the measurements of `make bench` (bench/README.md explains every number).
-- Run by bench/run as `tests/with-systemd lua5.4 bench/bench.lua` from the top of the tree.
-- imexguard's prolog and the baseline shell prolog (bench/baseline-prolog.sh) run against the same
-- simulated IMEX domains (contrib/simdomain.lua: imexsim units under a private systemd user
-- manager); every result is a ratio imexguard / baseline measured in this one run.
-- Test infrastructure style: plain Lua 5.4 with io/os; times on CLOCK_MONOTONIC (host.now()).
package.path = "contrib/?.lua;" .. package.path
local BUILD = os.getenv("IMEXGUARD_BUILD") or "build"
package.cpath = BUILD .. "/lua/?.so;" .. package.cpath
local simdomain = require "simdomain"
local host = require "imexguard.host"

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

local CFG = {
  sleep = num_env("BASELINE_SLEEP", 2),              -- s: the baseline's fixed sleep
  runs = num_env("BENCH_RUNS", 15, 1),               -- fast path: timed runs per tool
  rounds = num_env("BENCH_ROUNDS", 3, 1),            -- restart path: rounds per tool
  restart_nodes = num_env("BENCH_RESTART_NODES", 4, 2), -- restart path: domain size
  conc = num_env("BENCH_CONCURRENCY", 8, 1),         -- concurrent prologs per node
  nvl = num_env("BENCH_NODES", 18, 2),               -- the whole-domain scenario's size
  nvl_rounds = num_env("BENCH_NVL_ROUNDS", 2, 1),    -- its rounds per tool
  net = num_env("BENCH_NET", 180, 1),                -- 127.0.NET.x, NET+1, NET+2 are used
  watch = num_env("BENCH_WATCH_INTERVAL", 0.02, 0.001), -- s: the UP watcher's period
  poll = os.getenv("BENCH_POLL_INTERVAL"),           -- imexguard poll_interval (nil: simdomain's)
  always = num_env("BENCH_ALWAYS_RESTART", 1) ~= 0,  -- c) also the restart-every-job baseline
  only = os.getenv("BENCH_ONLY") or "abcd",          -- the scenarios to run
}
assert(CFG.net + 2 <= 255, "BENCH_NET must be <= 253")
local ABS = select(2, simdomain.capture("pwd")):gsub("%s+$", "")
local BASELINE = ABS .. "/bench/baseline-prolog.sh"
local TIMEIT = ABS .. "/bench/timeit.lua"

local function say(fmt, ...)
  io.write(string.format(fmt, ...), "\n")
  io.flush()
end

---------------------------------------------------------------------------------------------------
-- Statistics

local function sorted(list)
  local c = {}
  for i, v in ipairs(list) do c[i] = v end
  table.sort(c)
  return c
end

--- min, median, max of a non-empty list of numbers (nil for an empty list).
local function mmm(list)
  if #list == 0 then return nil end
  local s = sorted(list)
  local n = #s
  local med = n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
  return s[1], med, s[n]
end

local function median(list) return select(2, mmm(list)) end

--- "min / median / max" in the unit: ms (seconds * 1000), s, or plain numbers (fmt).
local function fmt_mmm(list, scale, fmt)
  local lo, med, hi = mmm(list)
  if not lo then return "n/a" end
  scale, fmt = scale or 1, fmt or "%.0f"
  return string.format(fmt .. " / " .. fmt .. " / " .. fmt, lo * scale, med * scale, hi * scale)
end

local function ratio(a, b)
  if not a or not b or b == 0 then return "n/a" end
  return string.format("%.2f", a / b)
end

---------------------------------------------------------------------------------------------------
-- Commands

--- "K='v' ..." for env -i, sorted.
local function assign(env)
  local a = {}
  for k, v in pairs(env) do a[#a + 1] = k .. "=" .. quote(v) end
  table.sort(a)
  return table.concat(a, " ")
end

--- Shell command of imexguard's prolog on node `name` for job `job` (output to `out`).
local function imexguard_cmd(d, name, job, nodelist, nnodes, out)
  local env = simdomain.prolog_env(job, nodelist, name, nnodes)
  env.IMEXGUARD_NO_JOURNAL = "1"
  return string.format("env -i %s %s --config %s %s prolog >%s 2>&1", assign(env),
    quote(d.build .. "/imexguard"), quote(d:config(name)),
    CFG.poll and ("--set poll_interval=" .. quote(CFG.poll)) or "", quote(out))
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

local TOOLS = {
  imexguard = imexguard_cmd, baseline = baseline_cmd, ["baseline-always"] = baseline_always_cmd,
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
local function run_job(d, tool, procs, nodelist, nnodes, watch_names)
  first_failure = nil
  local key = host_key(d, watch_names)
  local t0 = now()
  for _, p in ipairs(procs) do
    p.out = string.format("%s/bench-%s-%s.out", d:dir(p.name), tool, p.job)
    p.done = p.out:gsub("%.out$", ".done")
    os.remove(p.done)
    p.handle = spawn(TOOLS[tool](d, p.name, p.job, nodelist, nnodes, p.out), p.done)
  end
  -- Watch until UP, or until every prolog has ended and GRACE more seconds passed without UP.
  -- t_up: end of the first ctl call that showed UP; t_down: start of the last one that did not.
  local GRACE = 5
  local t_up, t_down, all_done
  while true do
    local t_call = now()
    if is_up(d, watch_names[1], key) then
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
    if all_done and t_call - all_done > GRACE then break end
    host.sleep(CFG.watch)
  end
  local last = 0
  for _, p in ipairs(procs) do
    local r = collect(p.handle)
    p.handle = nil
    p.start, p.stop, p.took, p.status = r.start, r.stop, r.took, r.status
    p.outcome = tool == "imexguard" and outcome_of(p.out) or (p.status == 0 and "exit-0" or "failed")
    if p.status ~= 0 and tool == "imexguard" then imexguard_failures = imexguard_failures + 1 end
    if p.status ~= 0 and not first_failure then
      first_failure = true
      report_failure(d, p, tool)
    end
    if p.stop > last then last = p.stop end
  end
  -- The job ends: Slurm runs the epilog, which unregisters it (untimed; the baseline has none).
  if tool == "imexguard" then
    for _, p in ipairs(procs) do
      d:epilogs { job = p.job, nodelist = nodelist, names = { p.name } }
    end
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
    d:write_nodes(name, list)
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

local function new_domain(nodes, net)
  os.execute("mkdir -p " .. quote(DROPIN))
  simdomain.write_file(DROPIN .. "/bench.conf", "[Unit]\nStartLimitIntervalSec=0\n")
  local d = simdomain.new { nodes = nodes, net = net, build = BUILD, prefix = PREFIX }
  domains[#domains + 1] = d
  return d
end

local function drop_domain(d)
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

--- b) restart path: every node's list changes (pairs -> the whole domain), all nodes at once.
local function restart_path(d)
  local r = { imexguard = { took = {}, lag = {}, early = 0, fail = 0, restarts = {}, never_up = 0 },
    baseline = { took = {}, lag = {}, early = 0, fail = 0, restarts = {}, never_up = 0 } }
  local nodelist = "n[1-" .. d.n .. "]"
  local job = 200
  for round = 1, CFG.rounds do
    for _, tool in ipairs { "imexguard", "baseline" } do
      job = job + 1
      local res, before = whole_job(d, tool, job, nodelist, make_stale)
      local t = r[tool]
      for _, p in ipairs(res.procs) do
        t.took[#t.took + 1] = p.took
        if p.status ~= 0 then t.fail = t.fail + 1 end
        t.restarts[#t.restarts + 1] = d:starts(p.name) - before[p.name]
      end
      local l, early = lags(res)
      for _, x in ipairs(l) do t.lag[#t.lag + 1] = x end
      t.early = t.early + early
      if not res.t_up then t.never_up = t.never_up + 1 end
      local took = {}
      for _, p in ipairs(res.procs) do took[#took + 1] = p.took end
      say("  restart round %d %-9s: prologs %s ms, return - UP %s ms%s", round, tool, fmt_mmm(took, 1000),
        fmt_mmm(l, 1000), res.t_up and "" or " (UP never seen)")
    end
  end
  return r
end

--- a) fast path on node n1: nothing to do. Interleaves ctl alone, imexguard and the baseline.
local function fast_path(d)
  local nodelist = "n[1-" .. d.n .. "]"
  -- Make everything current with imexguard (its state file then knows the list it wrote).
  local procs = {}
  for i, name in ipairs(d.names) do procs[i] = { name = name, job = 300 } end
  local warm = run_job(d, "imexguard", procs, nodelist, d.n, d.names)
  assert(warm.up_at_end, "fast path: the domain is not UP after the warm-up prologs")
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
      report_failure(d, { name = name, job = "fast", status = res.status, out = out }, tool)
    end
  end
  local ctl_cmd = string.format("%s -c %s -N -j >/dev/null 2>&1", quote(d.build .. "/nvidia-imex-ctl"),
    quote(d:dir(name) .. "/config.cfg"))
  for i = 1, CFG.runs do
    local job = 300 + i
    timed("floor", "/bin/true")
    timed("ctl", ctl_cmd)
    timed("version", quote(d.build .. "/imexguard") .. " --version >/dev/null 2>&1")
    local igout, blout = d:dir(name) .. "/bench-fast-ig.out", d:dir(name) .. "/bench-fast-bl.out"
    timed("imexguard", imexguard_cmd(d, name, job, nodelist, d.n, igout), igout)
    timed("baseline", baseline_cmd(d, name, job, nodelist, d.n, blout), blout)
    if failed then
      say("  fast path: stopped after a failure (%d runs)", i)
      break
    end
  end
  r.igout = outcome_of(d:dir(name) .. "/bench-fast-ig.out")
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

--- d) a whole domain cold: every node's prolog at once, CFG.nvl_rounds rounds per tool.
local function whole_domain(d)
  local r = {}
  local nodelist = "n[1-" .. d.n .. "]"
  for _, tool in ipairs { "imexguard", "baseline" } do
    r[tool] = { wall = {}, ok = {}, one_restart = {}, early = {}, up_end = 0, lag = {} }
  end
  local job = 500
  for round = 1, CFG.nvl_rounds do
    for _, tool in ipairs { "imexguard", "baseline" } do
      job = job + 1
      local res, before = whole_job(d, tool, job, nodelist, make_cold)
      local t = r[tool]
      local ok, one = 0, 0
      for _, p in ipairs(res.procs) do
        if p.status == 0 then ok = ok + 1 end
        if d:starts(p.name) - before[p.name] == 1 then one = one + 1 end
      end
      local l, early = lags(res)
      for _, x in ipairs(l) do t.lag[#t.lag + 1] = x end
      t.wall[#t.wall + 1] = res.last - res.t0
      t.ok[#t.ok + 1] = ok
      t.one_restart[#t.one_restart + 1] = one
      t.early[#t.early + 1] = early
      if res.up_at_end then t.up_end = t.up_end + 1 end
      say("  domain round %d %-9s: %d/%d exit 0, %d/%d one start, before UP %d, wall %.2f s%s", round, tool,
        ok, d.n, one, d.n, early, res.last - res.t0, res.up_at_end and "" or ", NOT UP at the end")
    end
  end
  return r
end

---------------------------------------------------------------------------------------------------
-- Report

local function report(total)
  say("")
  say("imexguard vs baseline (bench/baseline-prolog.sh, BASELINE_SLEEP=%g s); imexguard poll_interval=%s s",
    CFG.sleep, CFG.poll or "0.1")
  say("min / median / max; ratio = imexguard median / baseline median (< 1: imexguard better)")
  say("")
  local rows = {}
  local function row(metric, ig, bl, rat) rows[#rows + 1] = { metric, ig, bl, rat } end
  local a = results.fast
  if a then
    local ctl_med = median(a.ctl.took)
    local ig_med, bl_med = median(a.imexguard.took), median(a.baseline.took)
    row(string.format("a fast path wall, ms (%d runs)", CFG.runs), fmt_mmm(a.imexguard.took, 1000, "%.1f"),
      fmt_mmm(a.baseline.took, 1000, "%.1f"), ratio(ig_med, bl_med))
    row("a   ctl -N -j alone, ms", fmt_mmm(a.ctl.took, 1000, "%.1f"), "(same)", "")
    row("a   imexguard --version (start-up only), ms", fmt_mmm(a.version.took, 1000, "%.1f"), "", "")
    row("a   /bin/true (process start floor), ms", fmt_mmm(a.floor.took, 1000, "%.1f"), "(same)", "")
    local ig_extra, bl_extra = {}, {}
    for _, x in ipairs(a.imexguard.took) do ig_extra[#ig_extra + 1] = x - ctl_med end
    for _, x in ipairs(a.baseline.took) do bl_extra[#bl_extra + 1] = x - ctl_med end
    row("a   cost beyond one ctl call, ms", fmt_mmm(ig_extra, 1000, "%.1f"), fmt_mmm(bl_extra, 1000, "%.1f"),
      ratio(median(ig_extra), median(bl_extra)))
    row("a   peak RSS (largest process), KiB", fmt_mmm(a.imexguard.rss), fmt_mmm(a.baseline.rss),
      ratio(median(a.imexguard.rss), median(a.baseline.rss)))
    row("a   ctl alone peak RSS, KiB", fmt_mmm(a.ctl.rss), "(same)", "")
    row("a   failures / restarted", string.format("%d / %s (%s)", a.imexguard.fail,
      a.restarted and "yes" or "no", tostring(a.igout)), string.format("%d", a.baseline.fail), "")
  end
  local b = results.restart
  if b then
    local ig, bl = b.imexguard, b.baseline
    row(string.format("b restart path wall, s (%d nodes x %d)", CFG.restart_nodes, CFG.rounds),
      fmt_mmm(ig.took, 1, "%.2f"), fmt_mmm(bl.took, 1, "%.2f"), ratio(median(ig.took), median(bl.took)))
    row("b   return - domain UP, ms", fmt_mmm(ig.lag, 1000), fmt_mmm(bl.lag, 1000), "")
    row("b   returned before UP / failed", string.format("%d / %d", ig.early, ig.fail),
      string.format("%d / %d", bl.early, bl.fail), "")
    row("b   starts per node per job", fmt_mmm(ig.restarts), fmt_mmm(bl.restarts), "")
  end
  local c = results.concurrent
  if c then
    local ig, bl = c.imexguard, c.baseline
    row(string.format("c %d concurrent jobs: starts per node", CFG.conc), table.concat(ig.restarts, ", "),
      table.concat(bl.restarts, ", "), ratio(median(ig.restarts), median(bl.restarts)))
    row("c   wall of all prologs, s", string.format("%.2f", ig.wall), string.format("%.2f", bl.wall),
      ratio(ig.wall, bl.wall))
    row("c   per prolog, s", fmt_mmm(ig.took, 1, "%.2f"), fmt_mmm(bl.took, 1, "%.2f"),
      ratio(median(ig.took), median(bl.took)))
    row("c   failed / returned before UP", string.format("%d / %d", ig.fail, ig.early),
      string.format("%d / %d", bl.fail, bl.early), "")
    local al = c["baseline-always"]
    if al then
      row("c   restart-every-job baseline: starts per node", table.concat(ig.restarts, ", "),
        table.concat(al.restarts, ", "), ratio(median(ig.restarts), median(al.restarts)))
      row("c   restart-every-job baseline: wall, s", string.format("%.2f", ig.wall),
        string.format("%.2f", al.wall), ratio(ig.wall, al.wall))
      row("c   restart-every-job baseline: failed / before UP", string.format("%d / %d", ig.fail, ig.early),
        string.format("%d / %d", al.fail, al.early), "")
    end
  end
  local dd = results.domain
  if dd then
    local ig, bl = dd.imexguard, dd.baseline
    row(string.format("d %d nodes cold: wall, s (%d rounds)", CFG.nvl, CFG.nvl_rounds),
      fmt_mmm(ig.wall, 1, "%.2f"), fmt_mmm(bl.wall, 1, "%.2f"), ratio(median(ig.wall), median(bl.wall)))
    row("d   prologs exit 0 (per round)", table.concat(ig.ok, ", "), table.concat(bl.ok, ", "), "")
    row("d   nodes with exactly one start", table.concat(ig.one_restart, ", "),
      table.concat(bl.one_restart, ", "), "")
    row("d   returned before UP (per round)", table.concat(ig.early, ", "), table.concat(bl.early, ", "), "")
    row("d   return - domain UP, ms", fmt_mmm(ig.lag, 1000), fmt_mmm(bl.lag, 1000), "")
    row("d   UP after all prologs (rounds)", tostring(ig.up_end), tostring(bl.up_end), "")
  end
  local w = { 0, 0, 0, 0 }
  local head = { "metric", "imexguard", "baseline", "ratio" }
  for i, h in ipairs(head) do w[i] = #h end
  for _, r in ipairs(rows) do
    for i = 1, 4 do w[i] = math.max(w[i], #r[i]) end
  end
  local f = string.format("%%-%ds | %%-%ds | %%-%ds | %%s", w[1], w[2], w[3])
  say(f, table.unpack(head))
  say("%s", string.rep("-", w[1] + w[2] + w[3] + w[4] + 9))
  for _, r in ipairs(rows) do say(f, table.unpack(r)) end
  say("")
  say("bench: done in %.0f s", total)
end

---------------------------------------------------------------------------------------------------
-- Main

local t_start = now()
local ok, err = xpcall(function()
  say("imexguard bench: build %s, BASELINE_SLEEP=%g s, 127.0.%d-%d.x", BUILD, CFG.sleep, CFG.net, CFG.net + 2)
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
      results.fast = fast_path(d)
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
    d = new_domain(CFG.nvl, CFG.net + 2)
    say("d) %d nodes cold (units enabled and stopped, no node list): every node's prolog at once", CFG.nvl)
    results.domain = whole_domain(d)
    drop_domain(d)
  end
end, debug.traceback)
for _, d in ipairs(domains) do d:destroy() end
os.execute("rm -rf " .. quote(DROPIN))
if not ok then
  io.stderr:write("bench: ", tostring(err), "\n")
  os.exit(1)
end
report(now() - t_start)
if imexguard_failures > 0 then
  say("bench: %d imexguard prolog(s) failed (see above): the numbers are not valid", imexguard_failures)
  os.exit(1)
end
