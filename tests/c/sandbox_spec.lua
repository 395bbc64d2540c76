-- SPDX-License-Identifier: Apache-2.0
-- The Lua sandbox of the imexguard binary (src/sandbox.c): the deadline layers, removed globals
-- and modules, the global guard, error reporting, outcome codes, memory cap and the trust check.
-- Runs the BUILT binary ($IMEXGUARD_BUILD/imexguard) on policies in a private temp dir.
local H = require("helpers")

-- Run the binary with args (list) in this process's environment plus `env`;
-- returns {code, stdout, stderr, elapsed (seconds)}.
local function run(dir, args, env)
  return H.run_imexguard(args, { dir = dir, env = env, inherit_env = true })
end

-- A number #defined in a header of src/ (the bounds below follow the code's own constants).
local function define(header, name)
  local v = (H.read("src/" .. header) or ""):match("#define%s+" .. name .. "%s+([%d.]+)")
  return assert(tonumber(v), name .. " not found in src/" .. header)
end

-- Timing bounds: from what the code guarantees, counted from the start of the run: the
-- count hook ends a busy policy IG_DEADLINE_GRACE s after the deadline, the watchdog ends code
-- stuck in C IG_WATCHDOG_GRACE s after it, and SIGTERM ends it at once. A policy logs host.now() as
-- its first line (after the start of the run) and the bound runs from there to the return of the
-- harness, plus EXIT_MARGIN for the end of the process and the harness's shell (measured up to
-- 0.85 s under ASan beside two CPU hogs on 2 cores, so 1.5 s). A run that never reaches a policy
-- (a loop in a settings file) is bounded from the harness's start: START_MARGIN more for exec,
-- dynamic loading and ASan's set-up (measured up to 1.9 s in the same conditions, so 3 s). Which
-- layer ended the run is checked by its message, not by the clock.
local DEADLINE_GRACE = define("sandbox.h", "IG_DEADLINE_GRACE")
local WATCHDOG_GRACE = define("watchdog.h", "IG_WATCHDOG_GRACE")
local EXIT_MARGIN, START_MARGIN = 1.5, 3

-- The Lua line a policy starts with to log its start on the monotonic clock.
local LOG_START = "ctx.host.log('notice', string.format('start %.6f', ctx.host.now()))"

-- Seconds from the policy's logged start to `t_end` (monotonic), or nil when it did not log one.
local function since_start(r, t_end)
  local start = tonumber(r.stderr:match("start (%d+%.%d+)"))
  return start and t_end - start
end

-- The final line "imexguard: LEVEL: COMMAND job=ID outcome=NAME: MESSAGE" of stderr: outcome, message.
local function final(r)
  local f = H.final(r)
  return f.outcome, f.message
end

describe("imexguard sandbox", function()
  local dir
  local n = 0

  setup(function()
    H.imexguard_bin()
    dir = H.tmpdir()
  end)

  teardown(function() H.rmdir(dir) end)

  -- Write a policy whose prolog body is `body` and run `imexguard prolog` on it; the prolog logs
  -- its start first (on line 2: `body` starts on line 3). Also returns the monotonic time at which
  -- the run returned.
  local function policy(body, extra_args, env)
    n = n + 1
    local path = string.format("%s/p%d.lua", dir, n)
    H.write(path, "local P = {}\nfunction P.prolog(ctx) " .. LOG_START .. "\n" .. body
      .. "\nend\nfunction P.epilog() return 'ok' end\nreturn P\n")
    local args = { "--config", dir .. "/none.conf", "--policy", path }
    for _, a in ipairs(extra_args or {}) do args[#args + 1] = a end
    args[#args + 1] = "prolog"
    local r = run(dir, args, env)
    return r, path, H.host().now()
  end

  setup(function()
    H.write(dir .. "/none.conf", "")
  end)

  describe("deadline", function()
    local DEADLINE = 0.5

    -- A run ended by the count hook (not the watchdog) within its bound (see the top); t_end: the
    -- monotonic time it returned.
    local function expect_deadline(r, t_end)
      local outcome, msg = final(r)
      assert.equal("deadline-exceeded", outcome, r.stderr)
      assert.equal(10, r.code)
      assert.not_matches("^watchdog:", msg)
      assert.is_true(r.elapsed >= DEADLINE, "ended before the deadline: " .. r.elapsed)
      local took, bound = since_start(r, t_end), DEADLINE + DEADLINE_GRACE + EXIT_MARGIN
      if not took then -- no policy ran: from the harness's start
        took, bound = r.elapsed, bound + START_MARGIN
      end
      assert.is_true(took < bound, string.format("took %.2f s, bound %.2f s", took, bound))
      return msg
    end

    it("SIGTERM ends the run at once with its final line and the deadline's exit code", function()
      n = n + 1
      local path = string.format("%s/p%d.lua", dir, n)
      H.write(path, "local P = {}\nfunction P.prolog(ctx) ctx.host.log('notice', 'ready') "
        .. "ctx.host.sleep(30) return 'ok', 'slept' end\nfunction P.epilog() return 'ok' end\nreturn P\n")
      local log, rc = dir .. "/term.log", dir .. "/term.rc"
      local sh = H.spawn(string.format("sh -c '%s --config %s --policy %s prolog 2>%s; echo $? >%s'",
        H.imexguard_bin(), dir .. "/none.conf", path, log, rc))
      assert.truthy(H.wait_until(function() return (H.read(log) or ""):find("ready", 1, true) end, 10),
        H.read(log))
      -- the shell's child (read from /proc: procps tools hang under the ASan tier's LD_PRELOAD)
      local child = tonumber((H.read(string.format("/proc/%d/task/%d/children", sh, sh)) or ""):match("%d+"))
      assert.truthy(child, "the imexguard process")
      local t0 = H.host().now()
      H.kill(child, "TERM")
      -- the handler writes, sends and exits at once: the bound is the shell's exit and the poll
      assert.truthy(H.wait_until(function() return H.read(rc) end, 5), "imexguard did not end")
      assert.is_true(H.host().now() - t0 < EXIT_MARGIN, "took " .. (H.host().now() - t0))
      assert.equal("10", (H.read(rc):gsub("%s", "")))
      local last = H.read(log):match("([^\n]*)\n?$")
      assert.matches("^imexguard: err: prolog job=%S+ outcome=deadline%-exceeded: terminated by a signal",
        last)
    end)

    it("stops `while true do end` within the hook's grace of the deadline", function()
      local r, path, t_end = policy("while true do end", { "--deadline", tostring(DEADLINE) })
      local msg = expect_deadline(r, t_end)
      assert.matches(path:gsub("%p", "%%%0") .. ":3", msg)
    end)

    it("is not swallowed by pcall", function()
      local r, _, t_end = policy("while true do pcall(function() while true do end end) end",
        { "--deadline", tostring(DEADLINE) })
      expect_deadline(r, t_end)
    end)

    it("is not swallowed by xpcall, even with a handler that loops", function()
      local r, _, t_end = policy([[
        while true do
          xpcall(function() while true do end end, function(e) while true do end return e end)
        end]], { "--deadline", tostring(DEADLINE) })
      expect_deadline(r, t_end)
    end)

    it("is not swallowed by error-catching loops around erroring code", function()
      local r, _, t_end = policy([[
        while true do pcall(error, "x") end]], { "--deadline", tostring(DEADLINE) })
      expect_deadline(r, t_end)
    end)

    it("stops a loop in a module's code and in a settings file", function()
      H.write(dir .. "/loop.conf", "local x = 0 while true do x = x + 1 end")
      local r = run(dir, { "--config", dir .. "/loop.conf", "--deadline", tostring(DEADLINE),
        "--policy", dir .. "/none.conf", "prolog" })
      expect_deadline(r, H.host().now())
    end)

    it("refuses __gc finalizers (they run with hooks disabled)", function()
      local r = policy("setmetatable({}, { __gc = function() while true do end end })\nreturn 'ok'")
      local outcome, msg = final(r)
      assert.equal("policy-error", outcome)
      assert.matches("__gc metamethods are not allowed", msg)
      r = policy("local t = setmetatable({}, { __index = { x = 7 } })\nreturn 'ok', tostring(t.x)")
      assert.same({ "ok", "7" }, { final(r) })
    end)

    it("the watchdog ends code stuck inside one C call", function()
      -- Lua's matcher backtracks in C: O(n^3) steps, no VM instruction, so no count hook.
      local r, _, t_end = policy([[
        local s = string.rep("a", 200000)
        s:find(".-.-.-b")
        return "ok", "finished?"]], { "--deadline", "0.3" })
      assert.equal(10, r.code)
      assert.matches("outcome=deadline%-exceeded: watchdog:", r.stderr)
      local took, bound = since_start(r, t_end), 0.3 + WATCHDOG_GRACE + EXIT_MARGIN
      assert.is_true(took < bound, string.format("took %.2f s, bound %.2f s", took, bound))
    end)

    it("lets a policy that returns in time keep its own outcome", function()
      local r = policy([[
        local host = ctx.host
        host.sleep(10)           -- cut short by the deadline
        return "deadline-exceeded", "step X did not finish"]], { "--deadline", "0.3" })
      local outcome, msg = final(r)
      assert.equal("deadline-exceeded", outcome)
      assert.equal("step X did not finish", msg)
      assert.equal(10, r.code)
    end)
  end)

  describe("removed globals and modules", function()
    for _, name in ipairs({ "io", "os", "debug", "dofile", "loadfile", "package", "coroutine" }) do
      it("has no " .. name, function()
        local r = policy("local x = " .. name .. "\nreturn 'ok', 'got ' .. tostring(x)")
        local outcome, msg = final(r)
        assert.equal("policy-error", outcome)
        assert.equal(3, r.code)
        assert.matches("undefined global '" .. name .. "'", msg, 1, true)
      end)
    end

    for _, name in ipairs({ "io", "os", "debug", "ffi", "../x", "imexguard.nope" }) do
      it("refuses require('" .. name .. "') naming it", function()
        local r = policy("require('" .. name .. "')\nreturn 'ok', 'loaded'")
        local outcome, msg = final(r)
        assert.equal("policy-error", outcome)
        assert.matches("module '" .. name .. "' not found", msg, 1, true)
      end)
    end

    it("refuses binary chunks", function()
      local r = policy("local f = assert(load(string.dump(function() return 1 end)))\n"
        .. "return 'ok', 'ran ' .. tostring(f())")
      local outcome, msg = final(r)
      assert.equal("policy-error", outcome)
      assert.matches("attempt to call a nil value (field 'dump')", msg, 1, true)
      r = policy("local f, e = load('return 1', 'x', 'b')\nreturn 'ok', tostring(f) .. ' ' .. e")
      assert.equal("ok", (final(r)))
      assert.matches("nil load: binary chunks are not allowed", r.stderr)
    end)

    it("loads text chunks into the sandbox env", function()
      local r = policy("return 'ok', tostring(load('return io')())")
      local outcome, msg = final(r)
      assert.equal("policy-error", outcome)
      assert.matches("undefined global 'io'", msg)
      r = policy("return 'ok', tostring(load('return x', 'c', 't', { x = 'mine' })())")
      assert.equal("mine", select(2, final(r)))
    end)

    it("allows collectgarbage('count') only", function()
      local r = policy("return 'ok', math.type(collectgarbage('count'))")
      assert.same({ "ok", "float" }, { final(r) })
      r = policy("collectgarbage('collect') return 'ok', 'collected'")
      local outcome, msg = final(r)
      assert.equal("policy-error", outcome)
      assert.matches("collectgarbage%(\"collect\"%) is not allowed", msg)
    end)

    it("provides the library, cjson and the host without set_deadline", function()
      local r = policy([[
        local outcomes = require("imexguard.outcomes")
        local cjson = require("cjson")
        local host = require("imexguard.host")
        assert(host == require("imexguard.host"))
        return "ok", string.format("%d %s %s %s", outcomes.codes["lock-timeout"],
          cjson.encode({ 1 }), type(host.now), tostring(host.set_deadline))]])
      assert.same({ "ok", "4 [1] function nil" }, { final(r) })
    end)

    it("routes print to a stderr line", function()
      local r = policy("print('hello', 42) return 'ok'")
      assert.equal("", r.stdout)
      assert.matches("imexguard: print: hello\t42\n", r.stderr, 1, true)
    end)
  end)

  describe("--lua-dir modules in folders", function()
    local lib
    setup(function()
      lib = dir .. "/lib"
      assert(os.execute("mkdir -p " .. lib .. "/imexguard/kit " .. lib .. "/imexguard/both && chmod 0755 "
        .. lib .. " " .. lib .. "/imexguard " .. lib .. "/imexguard/kit " .. lib .. "/imexguard/both"))
      H.write(lib .. "/imexguard/kit/init.lua", "return { from = 'kit/init.lua' }")
      H.write(lib .. "/imexguard/kit/part.lua", "return { from = 'kit/part.lua' }")
      H.write(lib .. "/imexguard/both.lua", "return { from = 'both.lua' }")
      H.write(lib .. "/imexguard/both/init.lua", "return { from = 'both/init.lua' }")
    end)

    local function load(mod)
      return final(policy("return 'ok', require('" .. mod .. "').from", { "--lua-dir", lib }))
    end

    it("loads imexguard.d from DIR/imexguard/d/init.lua when there is no DIR/imexguard/d.lua", function()
      assert.same({ "ok", "kit/init.lua" }, { load("imexguard.kit") })
    end)

    it("prefers DIR/imexguard/d.lua to DIR/imexguard/d/init.lua (as package.path)", function()
      assert.same({ "ok", "both.lua" }, { load("imexguard.both") })
    end)

    it("loads imexguard.d.x from DIR/imexguard/d/x.lua", function()
      assert.same({ "ok", "kit/part.lua" }, { load("imexguard.kit.part") })
    end)

    local bad = { "imexguard.kit..part", "imexguard.kit.", "imexguard..kit", "imexguard.kit/part" }
    for _, name in ipairs(bad) do
      it("refuses the name '" .. name .. "' (an empty word, or not a word)", function()
        local outcome, msg = load(name)
        assert.equal("policy-error", outcome)
        assert.matches("module '" .. name .. "' not found", msg, 1, true)
      end)
    end
  end)

  describe("globals", function()
    it("refuses reading an undefined global, naming it and the line", function()
      local r, path = policy("local x = 1\nreturn 'ok', tostring(undefined_thing)")
      local outcome, msg = final(r)
      assert.equal("policy-error", outcome)
      assert.equal(path .. ":4: undefined global 'undefined_thing'", msg)
    end)

    it("refuses assigning a global", function()
      local r, path = policy("counter = 1\nreturn 'ok'")
      local _, msg = final(r)
      assert.equal(path .. ":3: assignment to undeclared global 'counter'", msg)
    end)

    it("cannot be bypassed with rawset or setmetatable on _G", function()
      local r = policy("rawset(_G, 'x', 1) return 'ok'")
      assert.matches("rawset on the global environment is not allowed", select(2, final(r)))
      r = policy("setmetatable(_G, nil) return 'ok'")
      assert.matches("protected metatable", select(2, final(r)))
      r = policy("local t = {} rawset(t, 'x', 1) return 'ok', tostring(t.x)")
      assert.same({ "ok", "1" }, { final(r) })
    end)
  end)

  describe("errors", function()
    it("reports a syntax error with file and line", function()
      n = n + 1
      local path = dir .. "/syntax.lua"
      H.write(path, "local P = {}\n\nfunction P.prolog(\nreturn P\n")
      local r = run(dir, { "--config", dir .. "/none.conf", "--policy", path, "prolog" })
      local outcome, msg = final(r)
      assert.equal("policy-error", outcome)
      assert.equal(3, r.code)
      assert.matches(path:gsub("%p", "%%%0") .. ":4:", msg)
    end)

    it("reports a runtime error as its first line with file:line, no traceback", function()
      local r, path = policy("local t = nil\nreturn t.field")
      local _, msg = final(r)
      assert.equal(path .. ":4: attempt to index a nil value (local 't')", msg)
      assert.not_matches("traceback", r.stderr)
    end)

    it("adds a position to errors raised without one", function()
      local r, path = policy("error({ code = 1 })")
      local _, msg = final(r)
      assert.equal(path .. ":3: (error object is a table value)", msg)
      r, path = policy("error('plain', 0)")
      assert.equal(path .. ":3: plain", select(2, final(r)))
    end)

    it("refuses an unknown outcome or a bad message", function()
      local r = policy("return 'fine', 'all good'")
      local outcome, msg = final(r)
      assert.equal("policy-error", outcome)
      assert.matches('returned "fine" instead of an outcome name', msg, 1, true)
      r = policy("return nil")
      assert.matches("returned nil instead of an outcome name", select(2, final(r)))
      r = policy("return 'ok', { 1 }")
      assert.matches("returned a table as its message", select(2, final(r)))
    end)

    it("maps every outcome to its exit code", function()
      local outcomes = dofile("lua/imexguard/outcomes.lua")
      for name, code in pairs(outcomes.codes) do
        local r = policy(string.format("return %q, 'message for %s'", name, name))
        local outcome, msg = final(r)
        assert.equal(name, outcome)
        assert.equal("message for " .. name, msg)
        assert.equal(code, r.code, name)
      end
      local r = policy("return 'peers-unhealthy', 'n3 down'", { "--set", "on_peer_fault=fail" })
      assert.equal(outcomes.PEERS_UNHEALTHY_FAIL, r.code)
    end)

    it("turns a memory bomb into policy-error, not a crash", function()
      local r = policy("local s = 'x'\nwhile true do s = s .. s end")
      local outcome, msg = final(r)
      assert.equal("policy-error", outcome)
      assert.equal(3, r.code)
      assert.equal("memory limit of 256 MiB reached (the setting memory_limit)", msg)
      r = policy("local s = 'x'\nwhile true do s = string.rep(s, 2) end")
      assert.equal("policy-error", (final(r)))
      assert.matches("memory limit of 256 MiB reached", r.stderr)
    end)
  end)

  describe("trust (as root)", function()
    local is_root = H.sh("id -u") == "0"

    local function sub(name, mode)
      local d = dir .. "/" .. name
      assert(os.execute("mkdir -p " .. H.q(d) .. " && chmod " .. mode .. " " .. H.q(d)))
      return d
    end

    local function run_policy(path)
      return run(dir, { "--config", dir .. "/none.conf", "--policy", path, "prolog" })
    end

    local good = "return { prolog = function() return 'ok', 'trusted' end, epilog = function() end }"

    it("accepts a root-owned 0644 file in a private dir under sticky /tmp", function()
      if not is_root then return pending("needs root") end
      local d = sub("trusted", "0755")
      H.write(d .. "/p.lua", good, "0644")
      assert.same({ "ok", "trusted" }, { final(run_policy(d .. "/p.lua")) })
    end)

    it("refuses a group-writable policy file, naming it", function()
      if not is_root then return pending("needs root") end
      local d = sub("gw-file", "0755")
      H.write(d .. "/p.lua", good, "0664")
      local r = run_policy(d .. "/p.lua")
      local outcome, msg = final(r)
      assert.equal("policy-error", outcome)
      assert.equal(3, r.code)
      assert.equal("refusing policy " .. d .. "/p.lua: writable by group or others (mode 0664)", msg)
    end)

    it("refuses a policy in a group-writable directory", function()
      if not is_root then return pending("needs root") end
      local d = sub("gw-dir", "0775")
      H.write(d .. "/p.lua", good, "0644")
      local _, msg = final(run_policy(d .. "/p.lua"))
      assert.equal("refusing policy " .. d .. "/p.lua: directory " .. d
        .. " is writable by group or others (mode 0775)", msg)
    end)

    it("refuses a policy file not owned by root", function()
      if not is_root then return pending("needs root") end
      local d = sub("owned", "0755")
      H.write(d .. "/p.lua", good, "0644")
      assert(os.execute("chown 65534 " .. H.q(d .. "/p.lua")))
      local _, msg = final(run_policy(d .. "/p.lua"))
      assert.equal("refusing policy " .. d .. "/p.lua: owned by uid 65534, not root", msg)
    end)

    it("refuses a settings file in a non-sticky world-writable directory", function()
      if not is_root then return pending("needs root") end
      local d = sub("ww", "0777")
      H.write(d .. "/c.conf", "", "0644")
      local r = run(dir, { "--config", d .. "/c.conf", "--policy", dir .. "/none.conf", "prolog" })
      local outcome, msg = final(r)
      assert.equal("settings-error", outcome)
      assert.matches("refusing settings file " .. d:gsub("%p", "%%%0") .. "/c.conf: directory", msg)
    end)
  end)
end)
