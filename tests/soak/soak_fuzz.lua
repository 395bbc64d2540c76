-- SPDX-License-Identifier: Apache-2.0
--- Soak check 4: fuzzing with generated inputs (seeded PRNG of tests/soak/run.lua).
-- Targets: `nvidia-imex-ctl -N -j` answers mutated from tests/fixtures/ctl (structurally: missing
-- keys, wrong types, huge numbers, duplicate ids, unknown states; and bytewise: truncation,
-- invalid UTF-8), the text form of `-N`, hostlists (differential against `scontrol show
-- hostnames`, given a minimal slurm.conf through SLURM_CONF in a temp dir), node files,
-- config.cfg, the state file and the settings file. Properties: no crash or uncaught error, every
-- result of the documented shape; a ctl answer that does not parse never makes steps.assess_daemon decide
-- "restart" and never gives a healthy verdict; every hostlist Slurm accepts expands the same.
-- A failing input is printed (escaped) with the target's name.
local cjson = require("cjson")
local util = require("soakutil")
local mut = require("soakmut")

local M = {}

local FIX = "tests/fixtures/ctl/"
-- The fixture's hosts become the fake node's addresses (imexguard.testing: n1 = 10.0.0.1, n2 =
-- 10.0.0.2), so well-formed mutants describe the daemon the job wants.
local function fixture(name)
  local t = assert(util.read(FIX .. name), name)
  return (t:gsub("192%.168%.103%.159", "10.0.0.1"):gsub("192%.168%.107%.187", "10.0.0.2"))
end

-- Call fn(...) with a bound on VM instructions (a runaway is an error, not a hang of the tier).
local function bounded(fn, ...)
  local count = 0
  debug.sethook(function()
    count = count + 1
    if count > 2000 then error("runaway: more than 2e8 VM instructions", 2) end
  end, "", 100000)
  local r = table.pack(pcall(fn, ...))
  debug.sethook()
  return table.unpack(r, 1, r.n)
end

-- Is msg a one-line non-empty string?
local function one_line(msg)
  return type(msg) == "string" and msg ~= "" and not msg:find("\n")
end

-- Bugs this fuzzer found, reported and not yet fixed (the code is not the soak tier's): a failure
-- whose reason matches is counted as pending (a "# TODO" in the line, the input printed), and
-- IMEXGUARD_SOAK_STRICT=1 makes it a failure again. Remove an entry once the bug is fixed.
local KNOWN = {
}

local function known(why)
  if os.getenv("IMEXGUARD_SOAK_STRICT") == "1" then return nil end
  for _, k in ipairs(KNOWN) do
    if tostring(why):find(k[1]) then return k[2] end
  end
end

-- Run `n` inputs of a target: gen() -> input; check(input, counts) -> true or false, why. Prints one
-- TAP line and up to 3 failing inputs.
local function target(tap, name, n, gen, check)
  local bad, fails, counts, pending = 0, {}, {}, {}
  for _ = 1, n do
    local input = gen()
    local ok, res, why = bounded(check, input, counts)
    if not ok or not res then
      why = ok and why or ("raised: " .. tostring(res))
      local k = known(why)
      if k then
        pending[k] = (pending[k] or 0) + 1
        if pending[k] == 1 then fails[#fails + 1] = { input = input, why = why } end -- one sample
      else
        bad = bad + 1
        if bad <= 3 then fails[#fails + 1] = { input = input, why = why } end
      end
    end
  end
  local parts, todo = {}, {}
  for k, v in pairs(counts) do parts[#parts + 1] = k .. " " .. v end
  table.sort(parts)
  for k, v in pairs(pending) do todo[#todo + 1] = v .. " inputs hit the known bug: " .. k end
  tap(bad == 0, string.format("fuzz %s: %d inputs, %d failed%s%s", name, n, bad,
    #parts > 0 and (" (" .. table.concat(parts, ", ") .. ")") or "",
    #todo > 0 and (" # TODO pending: " .. table.concat(todo, "; ")) or ""))
  for _, f in ipairs(fails) do
    local input = f.input
    if type(input) == "table" then -- a ctl answer
      input = string.format("exit %s, stdout %s", tostring(input.status), util.show(input.stdout, 400))
    else
      input = util.show(input, 400)
    end
    util.note(string.format("failing %s input (%s): %s", name, tostring(f.why), input))
  end
end

local function bump(counts, k) counts[k] = (counts[k] or 0) + 1 end

-- ctl -N -j: parse, then the decision steps.assess_daemon and verdict.judge make from it.
local function ctl_json(tap, n)
  local testing = require("imexguard.testing")
  local steps = require("imexguard.steps")
  local ctl = require("imexguard.ctl")
  local verdict = require("imexguard.verdict")
  local seeds = { fixture("up-2node-570.json"), fixture("down-unconfigured.json") }
  local trees = {}
  for i, s in ipairs(seeds) do trees[i] = cjson.decode(s) end
  local function gen()
    local status = math.random(10) == 1 and mut.pick({ 1, 255, 2 }) or 0
    if math.random(2) == 1 then
      return { stdout = mut.json(trees[math.random(#trees)]), status = status }
    end
    return { stdout = mut.bytes(seeds[math.random(#seeds)]), status = status }
  end
  local function check(a, counts)
    local d, msg, kind = ctl.parse_mesh(a.stdout, a.status)
    if d == nil then
      if not one_line(msg) then return false, "ctl error message spans lines: " .. tostring(msg) end
      if kind ~= "malformed" and kind ~= "unreachable" and kind ~= "unconfigured" then
        return false, "unknown error kind " .. tostring(kind)
      end
      bump(counts, kind)
    elseif type(d) ~= "table" or type(d.nodes) ~= "table" or type(d.status) ~= "string" then
      return false, "parsed mesh has the wrong shape"
    else
      bump(counts, "parsed")
    end
    -- The decision: a daemon current by the state of its files, this answer from the ctl.
    local h = testing.host { ctl = { { stdout = a.stdout, status = a.status } } }
    local ctx = testing.ctx { host = h }
    local info = assert(steps.applies(ctx))
    local want = assert(steps.desired(ctx, info))
    local v, o, m = steps.assess_daemon(ctx, info, want, {}, { changed = false })
    if not v then return false, "assess failed: " .. tostring(o) .. " " .. tostring(m) end
    if d == nil and v.action == "restart" then return false, "unparsable answer -> restart: " .. v.reason end
    if v.action == "restart" then bump(counts, "restart (parsed, other hosts)") end
    local judged = verdict.judge(d and { mesh = d } or { err = msg, kind = kind }, want)
    if d == nil and judged and judged.healthy then return false, "unparsable answer judged healthy" end
    return true
  end
  target(tap, "ctl -N -j", n, gen, check)
end

-- The text form of `-N`.
local function ctl_text(tap, n)
  local ctl = require("imexguard.ctl")
  local seeds = { fixture("up-18node-text.txt"), fixture("up-2node-570-00-text.txt") }
  local function gen() return mut.text(seeds[math.random(#seeds)]) end
  local function check(s, counts)
    local d, msg = ctl.parse_text(s)
    if d == nil then
      if not one_line(msg) then return false, "ctl error message spans lines: " .. tostring(msg) end
      bump(counts, "refused")
    elseif type(d) ~= "table" then
      return false, "result is a " .. type(d)
    else
      bump(counts, "parsed")
    end
    return true
  end
  target(tap, "ctl -N text", n, gen, check)
end

-- Node files: parse, then check against the fake node's options.
local function node_files(tap, n)
  local nodelist = require("imexguard.nodelist")
  local seed = {}
  for i = 1, 18 do seed[i] = "10.0.0." .. i end
  local base = table.concat(seed, "\n") .. "\n"
  local function gen() return mut.text(base) end
  local function check(s, counts)
    local list, err = nodelist.parse(s)
    if not list then
      if not one_line(err) then return false, "error message is not one line" end
      bump(counts, "refused")
      return true
    end
    local ok, cerr = nodelist.check(list, { allow_loopback = false, self = "10.0.0.1" })
    if not ok and not one_line(cerr) then return false, "check message is not one line" end
    bump(counts, ok and "valid" or "refused by check")
    if ok then
      local bytes = nodelist.format(list)
      local again = nodelist.parse(bytes)
      if not again or not nodelist.equal(list, again) then return false, "format/parse round trip differs" end
    end
    return true
  end
  target(tap, "node files", n, gen, check)
end

-- config.cfg.
local function imex_config(tap, n)
  local imexcfg = require("imexguard.imexcfg")
  local base = table.concat({ "# config.cfg", "SERVER_PORT=50000", "IMEX_CMD_PORT=50005",
    "IMEX_CMD_ENABLED=1",
    "BIND_INTERFACE_IP=10.0.0.1", "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg",
    "IMEX_WAIT_FOR_QUORUM=RECOVERY", "LOG_FILE_NAME=/var/log/nvidia-imex.log", "" }, "\n")
  local function gen() return mut.text(base) end
  local function check(s, counts)
    local cfg, err = imexcfg.parse(s)
    if not cfg then
      if not one_line(err) then return false, "error message is not one line" end
      bump(counts, "refused")
      return true
    end
    for k, v in pairs(cfg) do
      if type(k) ~= "string" or type(v) ~= "string" then return false, "non-string key or value" end
    end
    for _, key in ipairs({ "SERVER_PORT", "IMEX_CMD_PORT" }) do
      local p, perr = imexcfg.port(cfg, key)
      if p == nil and not one_line(perr) then return false, "port error is not one line" end
      if p ~= nil and (math.type(p) ~= "integer" or p < 1 or p > 65535) then
        return false, key .. " accepted as " .. tostring(p)
      end
    end
    bump(counts, "parsed")
    return true
  end
  target(tap, "config.cfg", n, gen, check)
end

-- The state file through state.load on the test kit's host (and the registry on what it loads).
local function state_file(tap, n)
  local testing = require("imexguard.testing")
  local state = require("imexguard.state")
  local registry = require("imexguard.registry")
  local settings = require("imexguard.settings")
  local s = settings.validate({})
  local path = state.path(s)
  local seed = {
    nodes = "10.0.0.1\n10.0.0.2\n", written_us = 1754000000000000, job = "100",
    running_nodes = "10.0.0.1\n10.0.0.2\n", running_config = "SERVER_PORT=50000\n",
    invocation_id = "0123456789abcdef0123456789abcdef", started_us = 1754000000000000,
    jobs = { { id = "100", nodes = "10.0.0.1\n10.0.0.2\n", since_us = 1754000000000000 },
      { id = "101", nodes = "10.0.0.1\n10.0.0.2\n" } },
  }
  local text = state.encode(seed)
  local function gen()
    if math.random(2) == 1 then return mut.json(cjson.decode(text)) end
    return mut.bytes(text)
  end
  local function check(t, counts)
    local h = testing.host { files = { [path] = t } }
    local st, err = state.load(h, s)
    if st == nil then
      if not one_line(err) then return false, "error message is not one line" end
      bump(counts, "refused")
      return true
    end
    if type(st) ~= "table" then return false, "loaded a " .. type(st) end
    for _, e in ipairs(registry.jobs(st)) do
      if type(e.id) ~= "string" or type(e.nodes) ~= "string" then
        return false, "registry entry of the wrong shape"
      end
    end
    registry.conflicting(st, "999", "10.0.0.3\n")
    local again = state.encode(st)
    if type(again) ~= "string" then return false, "cannot encode what was loaded" end
    bump(counts, "loaded")
    return true
  end
  target(tap, "state file", n, gen, check)
end

-- The settings file: settings.load, then settings.validate.
local function settings_file(tap, n)
  local settings = require("imexguard.settings")
  local lines = {}
  for l in (util.read("contrib/imexguard.conf.example") or ""):gmatch("[^\n]+") do
    local a = l:match("^%-%- ([%a_]+ = .*)$")
    if a then lines[#lines + 1] = a end
  end
  assert(#lines > 5, "assignments of contrib/imexguard.conf.example")
  local base = table.concat(lines, "\n") .. "\n"
  local function gen() return mut.lua(base) end
  local function check(text, counts)
    local raw, err = settings.load(text, "@fuzz.conf")
    if raw == nil then
      if not one_line(err) then return false, "load error is not one line" end
      bump(counts, "refused by load")
      return true
    end
    local v, verr = settings.validate(raw)
    if v == nil then
      if not one_line(verr) then
        return false, verr:find("\\\n") and "validate error spans lines (a quoted newline)"
          or "validate error is not one line"
      end
      bump(counts, "refused by validate")
      return true
    end
    if type(v.deadline) ~= "number" or v.deadline <= 0 then
      return false, "deadline accepted as " .. tostring(v.deadline)
    end
    bump(counts, "valid")
    return true
  end
  target(tap, "settings file", n, gen, check)
end

--- Run the fuzz targets.
-- @param tap function(ok, text)
-- @param long boolean the long form (10,000 inputs per target; short: 1,000, hostlists 500)
function M.run(tap, long)
  local n = long and 10000 or 1000
  ctl_json(tap, n)
  ctl_text(tap, n)
  node_files(tap, n)
  imex_config(tap, n)
  state_file(tap, n)
  settings_file(tap, n)
  require("soak_hostlist").run(tap, long and 10000 or 500)
end

return M
