-- SPDX-License-Identifier: Apache-2.0
-- The sandbox's soft spots, each tried through the BUILT binary ($IMEXGUARD_BUILD/imexguard)
-- on a policy or settings file in a private temp dir: bytecode, load with a foreign environment,
-- require of a standard library, setmetatable(_G), collectgarbage, finalizers, coroutines,
-- host metatables, changes to the shared libraries, C-side pattern backtracking and the memory
-- limit. Also: the surface a policy sees equals the list in docs/policy-api.md "The sandbox".
local H = require("helpers")

local function final(r)
  local f = H.final(r)
  return f.outcome, f.message
end

describe("imexguard sandbox escapes", function()
  local dir
  local n = 0

  setup(function()
    H.imexguard_bin()
    dir = H.tmpdir()
    H.write(dir .. "/none.conf", "")
  end)

  teardown(function() H.rmdir(dir) end)

  -- Run `imexguard prolog` with a policy whose prolog body is `body` (and optional module-level
  -- code `top`); returns the result and the policy's path.
  local function policy(body, extra_args, top)
    n = n + 1
    local path = string.format("%s/e%d.lua", dir, n)
    H.write(path, "local P = {}\n" .. (top or "") .. "\nfunction P.prolog(ctx)\n" .. body
      .. "\nend\nfunction P.epilog() return 'ok' end\nreturn P\n")
    local args = { "--config", dir .. "/none.conf", "--policy", path }
    for _, a in ipairs(extra_args or {}) do args[#args + 1] = a end
    args[#args + 1] = "prolog"
    return H.run_imexguard(args, { dir = dir, inherit_env = true }), path
  end

  -- The policy's outcome must be policy-error (exit 3) with a message matching `pattern` (plain).
  local function refused(r, pattern)
    local outcome, msg = final(r)
    assert.equal("policy-error", outcome, r.stderr)
    assert.equal(3, r.code)
    assert.matches(pattern, msg, 1, true)
    return msg
  end

  describe("bytecode", function()
    it("has no string.dump", function()
      refused(policy("return 'ok', tostring(string.dump(function() end))"),
        "attempt to call a nil value (field 'dump')")
      local r = policy("return 'ok', tostring(rawget(string, 'dump')) .. tostring(('').dump)")
      assert.same({ "ok", "nilnil" }, { final(r) })
    end)

    it("refuses a binary chunk in load, whatever mode is asked for", function()
      -- a binary chunk made by hand (string.dump is gone): the signature is enough to be refused
      local r = policy([[
        local f, err = load("\27Lua\84\0", "bin", "bt")
        return 'ok', tostring(f) .. ' | ' .. err]])
      assert.equal("ok", (final(r)))
      assert.matches("nil | attempt to load a binary chunk (mode is 't')", select(2, final(r)), 1, true)
      r = policy([[
        local parts = { "\27Lua", "\84\0" }
        local f, err = load(function() return table.remove(parts, 1) end)
        return 'ok', tostring(f) .. ' | ' .. err]])
      assert.matches("attempt to load a binary chunk", select(2, final(r)), 1, true)
      r = policy("local f, e = load('return 1', 'x', 'b')\nreturn 'ok', tostring(f) .. ' ' .. e")
      assert.matches("nil load: binary chunks are not allowed in the sandbox", select(2, final(r)), 1, true)
    end)
  end)

  describe("load with a foreign environment", function()
    it("reaches only what the given table holds, never the host's globals", function()
      local r = policy([[
        local env = {}
        local f = assert(load("x = 1 return io, os, debug, package, require, string, _G", "c", "t", env))
        local a, b, c, d, e, s, g = f()
        return 'ok', string.format("%s %s %s %s %s %s %s x=%s", tostring(a), tostring(b), tostring(c),
          tostring(d), tostring(e), tostring(s), tostring(g), tostring(env.x))]])
      assert.same({ "ok", "nil nil nil nil nil nil nil x=1" }, { final(r) })
      -- an explicit nil environment: every global access fails
      refused(policy("return 'ok', tostring(load('return string', 'c', 't', nil)())"),
        "attempt to index a nil value (upvalue '_ENV')")
    end)
  end)

  describe("require", function()
    for _, name in ipairs({ "io", "os", "debug", "package", "coroutine", "string", "_G" }) do
      it("refuses the standard library '" .. name .. "'", function()
        refused(policy("require('" .. name .. "')\nreturn 'ok', 'loaded'"),
          "module '" .. name .. "' not found (the sandbox provides only imexguard.*, policies.* and cjson)")
      end)
    end
  end)

  describe("globals", function()
    it("cannot replace the sandbox env's metatable or its built-in globals", function()
      refused(policy("setmetatable(_G, {}) return 'ok'"), "cannot change a protected metatable")
      assert.equal("the sandbox environment is protected", select(2, final(policy(
        "return 'ok', getmetatable(_G)"))))
      refused(policy("pcall = function() return true end return 'ok'"),
        "cannot change the global 'pcall' (the sandbox's globals are read-only)")
      refused(policy("_G.string = {} return 'ok'"), "cannot change the global 'string'")
      refused(policy("rawset(_G, 'string', {}) return 'ok'"),
        "rawset on the global environment is not allowed")
    end)
  end)

  describe("collectgarbage", function()
    it("allows \"count\" only", function()
      assert.equal("number", select(2, final(policy("return 'ok', type(collectgarbage('count'))"))))
      for _, opt in ipairs({ "collect", "stop", "restart", "step", "isrunning", "incremental",
        "generational", "setpause", "setstepmul" }) do
        refused(policy("collectgarbage('" .. opt .. "') return 'ok'"),
          "collectgarbage(\"" .. opt .. "\") is not allowed in the sandbox (only \"count\")")
      end
      refused(policy("collectgarbage() return 'ok'"), "collectgarbage(\"collect\") is not allowed")
    end)
  end)

  describe("finalizers", function()
    it("refuses __gc on the policy's tables, also as a raw field behind __index", function()
      refused(policy("setmetatable({}, { __gc = function() end }) return 'ok'"),
        "__gc metamethods are not allowed in the sandbox")
      refused(policy("setmetatable({}, setmetatable({ __gc = true }, { __index = {} })) return 'ok'"),
        "__gc metamethods are not allowed in the sandbox")
    end)

    it("a __gc added after setmetatable never runs, so closing the state past the deadline ends", function()
      -- Lua marks an object for finalization only when its metatable has __gc at setmetatable time
      local r = policy([[
        local mt = {}
        local t = setmetatable({}, mt)
        mt.__gc = function() print("finalizer ran") while true do end end
        t = nil
        host_sleep(0.6)
        return 'ok', 'returned past the deadline']], { "--deadline", "0.3" },
        "local function host_sleep(s) require('imexguard.host').sleep(s) end")
      assert.not_matches("finalizer ran", r.stderr)
      assert.is_true(r.elapsed < 0.3 + 2, "took " .. r.elapsed .. " s")
      assert.same({ "ok", "returned past the deadline" }, { final(r) })
      assert.equal(0, r.code)
    end)
  end)

  describe("host objects", function()
    it("hides the lock object's metatable: no methods to change, no __gc to install", function()
      local r = policy([[
        local host = require("imexguard.host")
        local lock = assert(host.lock(ctx.settings.state_dir .. "/escape.lock", 1))
        local mt = getmetatable(lock)
        local ok, err = pcall(setmetatable, lock, {})
        lock:unlock()
        return 'ok', type(mt) .. ' ' .. tostring(mt) .. ' | ' .. tostring(ok) .. ' ' .. err]],
        { "--set", "state_dir=" .. dir })
      local outcome, msg = final(r)
      assert.equal("ok", outcome, r.stderr)
      assert.matches("^string the metatable of a host object is protected | false ", msg)
      assert.matches("table expected, got imexguard.lock", msg, 1, true)
    end)

    it("makes the host module, cjson and the library modules read-only", function()
      refused(policy("require('imexguard.host').run = nil return 'ok'"),
        "cannot set imexguard.host.run: the table is read-only in the sandbox")
      refused(policy("require('cjson').decode = function() return {} end return 'ok'"),
        "cannot set cjson.decode: the table is read-only")
      refused(policy("require('imexguard.driver').finish = function() end return 'ok'"),
        "cannot set imexguard.driver.finish: the table is read-only")
      refused(policy("rawset(require('imexguard.outcomes'), 'codes', {}) return 'ok'"),
        "rawset on a read-only table (a library or module) is not allowed")
      refused(policy("setmetatable(ctx.host, nil) return 'ok'"), "cannot change a protected metatable")
    end)

    it("has no cjson configuration functions (shared with the host); cjson.new() is private", function()
      local r = policy([[
        local cjson = require("cjson")
        local mine = cjson.new()
        mine.encode_sparse_array(true)
        return 'ok', tostring(cjson.encode_sparse_array) .. ' ' .. tostring(cjson.decode_max_depth)
          .. ' ' .. mine.encode({ [3] = 1 })]])
      assert.same({ "ok", "nil nil [null,null,1]" }, { final(r) })
    end)
  end)

  describe("the shared libraries", function()
    -- a second module of the run must still see the real library after the policy's attempt
    local CHECK = "local ok = pcall(function() %s end)\n"
      .. "return 'ok', tostring(ok) .. ' ' .. string.format('%%d', 7) .. ' ' .. ('ab'):upper()"
      .. " .. ' ' .. table.concat({ 1, 2 }, ',') .. ' ' .. require('imexguard.text').one_line('x\\ny')"

    for _, change in ipairs({ "string.format = nil", "getmetatable('').__index = {}",
      "getmetatable('').__index.upper = nil", "table.insert = print", "table.concat = nil",
      "math.floor = nil", "utf8.char = nil", "rawset(string, 'format', nil)",
      "setmetatable(string, nil)", "getmetatable('').__metatable = nil" }) do
      it("cannot be changed: " .. change, function()
        local r = policy(CHECK:format(change))
        assert.same({ "ok", "false 7 AB 1,2 x y" }, { final(r) })
      end)
    end

    it("are read-only with a clear error naming the field", function()
      refused(policy("string.format = nil return 'ok'"),
        "cannot set string.format: the table is read-only in the sandbox")
      refused(policy("getmetatable('').__index = {} return 'ok'"),
        "cannot set string metatable.__index: the table is read-only in the sandbox")
      local r = policy("return 'ok', tostring(getmetatable('').__index == string)")
      assert.same({ "ok", "true" }, { final(r) })
    end)
  end)

  describe("coroutines", function()
    -- Decision: no coroutine library at all (a coroutine has its own hook, and a wrap loop that
    -- yields around pcall could step past the count hook); no primitive hands out a thread.
    for _, code in ipairs({
      "local co = coroutine.create(function() while true do end end) coroutine.resume(co)",
      "local f = coroutine.wrap(function() while true do pcall(coroutine.yield) end end)\n"
        .. "while true do f() end",
    }) do
      it("are not available: " .. code:sub(1, 40), function()
        local r = policy(code .. " return 'ok'", { "--deadline", "0.5" })
        refused(r, "undefined global 'coroutine'")
        assert.is_true(r.elapsed < 0.5, "took " .. r.elapsed .. " s")
      end)
    end
  end)

  describe("string-pattern backtracking in C", function()
    -- Decision: no size cap (it would refuse legitimate input); the count hook cannot interrupt
    -- C, so the watchdog at deadline + 2 s ends the run with its final line and exit 10.
    it("is ended by the watchdog at deadline + 2 s, with its final line and nothing written", function()
      local out = dir .. "/never-written"
      local r = policy(string.format([[
        local found = string.rep("a", 3e4):find(".-.-.-.-.-b")
        require("imexguard.host").write_atomic(%q, "reached", 420)
        return "ok", tostring(found)]], out), { "--deadline", "0.3" })
      assert.equal(10, r.code)
      assert.matches("imexguard: err: prolog job=%S+ outcome=deadline%-exceeded: watchdog: still running 2 s "
        .. "after the deadline", r.stderr)
      assert.is_true(r.elapsed >= 2.3 and r.elapsed < 0.3 + 2 + 1, "took " .. r.elapsed .. " s")
      assert.is_nil(H.read(out))
    end)
  end)

  describe("memory", function()
    it("ends a policy that grows a table forever in policy-error, naming the limit", function()
      local r = policy("local t = {} local i = 0 while true do i = i + 1 t[i] = i end",
        { "--set", "memory_limit=32" })
      local msg = refused(r, "memory limit of 32 MiB reached (the setting memory_limit)")
      assert.not_matches("panic", r.stderr)
      assert.matches("^imexguard: err: prolog job=%S+ outcome=policy%-error: memory limit",
        r.stderr:match("[^\n]*\n?$"))
      assert.truthy(msg)
    end)

    it("cannot be caught by pcall or xpcall", function()
      local r = policy([[
        local kept = {}
        for _ = 1, 3 do
          pcall(function() local s = "x" while true do s = s .. s end end)
          xpcall(function() local t = {} while true do t[#t + 1] = {} end end, function(e) return e end)
        end
        return 'ok', 'caught the memory limit']], { "--set", "memory_limit=32" })
      refused(r, "memory limit of 32 MiB reached")
    end)

    it("still ends with the final line when the policy keeps everything it allocated", function()
      -- the memory stays reachable (module level), so only the host's reserve lets it finish
      -- a linked list: each allocation is small, so the state ends within bytes of the limit
      local r = policy("while true do kept = { next = kept } end",
        { "--set", "memory_limit=24" }, "local kept = {}")
      refused(r, "memory limit of 24 MiB reached")
      r = policy("while true do kept[#kept + 1] = string.rep('x', 4096) .. #kept end",
        { "--set", "memory_limit=24" }, "local kept = {}")
      refused(r, "memory limit of 24 MiB reached")
    end)

    it("applies the default of 256 MiB to a settings file that builds a huge string", function()
      H.write(dir .. "/huge.conf", "local s = 'x'\nwhile true do s = s .. s end")
      local r = H.run_imexguard({ "--config", dir .. "/huge.conf", "--policy", dir .. "/none.conf",
        "prolog" }, { dir = dir, inherit_env = true })
      local outcome, msg = final(r)
      assert.equal("settings-error", outcome, r.stderr)
      assert.equal(18, r.code)
      assert.equal("settings: memory limit of 256 MiB reached (the setting memory_limit)", msg)
    end)

    it("refuses a memory_limit below 16 MiB naming the setting (settings-error)", function()
      local r = policy("return 'ok'", { "--set", "memory_limit=8" })
      local outcome, msg = final(r)
      assert.equal("settings-error", outcome, r.stderr)
      assert.equal(18, r.code)
      assert.matches("setting 'memory_limit' must be a number >= 16 (MiB)", msg, 1, true)
    end)
  end)

  describe("the documented surface", function()
    it("equals what a policy sees (docs/policy-api.md, The sandbox)", function()
      local doc = assert(H.read("docs/policy-api.md"))
      local block = doc:match("\n### The exact surface\n.-\n```text\n(.-)\n```")
      assert.truthy(block, "docs/policy-api.md has no 'The exact surface' block")
      local r = policy([[
        local function names(t)
          local l = {}
          for k in pairs(t) do l[#l + 1] = tostring(k) end
          table.sort(l)
          return table.concat(l, " ")
        end
        local lines = { "_G: " .. names(_G) }
        for _, lib in ipairs({ "string", "table", "math", "utf8" }) do
          lines[#lines + 1] = lib .. ": " .. names(_G[lib])
        end
        lines[#lines + 1] = "cjson: " .. names(require("cjson"))
        print("SURFACE " .. table.concat(lines, "|"))
        return 'ok']])
      assert.equal("ok", (final(r)), r.stderr)
      local seen = assert(r.stderr:match("SURFACE ([^\n]*)"))
      local want = {}
      for line in block:gmatch("[^\n]+") do want[#want + 1] = line end
      assert.same(want, (function()
        local l = {}
        for line in seen:gmatch("[^|]+") do l[#l + 1] = line end
        return l
      end)())
    end)
  end)
end)
