-- SPDX-License-Identifier: Apache-2.0
-- How DCGM's IMEX health watch reads the states imexguard leaves a node in (issue 31, item 1), under
-- the real systemd user manager with the simulator (tests/with-systemd; contrib/simdomain.lua).
-- DCGM's rules are applied as DCGM 4.6.0's source writes them (NVIDIA/DCGM at commit
-- 72fa3feaa67d716a75323a8f47c34ff3ee73f824):
--   dcgmlib/src/DcgmImexManager.cpp, GetDomainStatusFromCommand / GetDaemonStatusFromCommand:
--     https://github.com/NVIDIA/DCGM/blob/72fa3feaa67d/dcgmlib/src/DcgmImexManager.cpp
--     `nvidia-imex-ctl -N -j` and `nvidia-imex-ctl -q`, no -c (the ctl's default config.cfg), each
--     within 30 s; the ctl not found in its trusted paths: NOT_INSTALLED; a timeout: UNAVAILABLE
--     (domain) or COMMAND_ERROR (daemon); a non-zero exit is an error (common/DcgmUtilities.cpp,
--     RunCmdAndGetOutputWithTimeout: CheckChildExitStatus) and reads UNAVAILABLE (domain) or
--     COMMAND_ERROR (daemon) BEFORE the output is looked at; exit 0 with "Failed to read node
--     configuration file" in the output: NOT_CONFIGURED; else the domain is the last `"status":` value
--     of the JSON (UP, DOWN, DEGRADED; anything else UNAVAILABLE), the daemon the trimmed -q line
--     (one of the eight states; anything else UNAVAILABLE);
--   modules/health/DcgmHealthWatch.cpp, MonitorImex (under the NVLINK health watch):
--     https://github.com/NVIDIA/DCGM/blob/72fa3feaa67d/modules/health/DcgmHealthWatch.cpp
--     the domain passes UP, NOT_INSTALLED, NOT_CONFIGURED, UNAVAILABLE and fails DOWN, DEGRADED; the
--     daemon passes READY, UNAVAILABLE, NOT_INSTALLED, NOT_CONFIGURED and fails every other value
--     (INITIALIZING ... SHUTTING_DOWN, COMMAND_ERROR): DCGM_FR_IMEX_UNHEALTHY.
-- Each state is checked twice: what DCGM reads, and what imexguard says (health's outcome and the
-- node condition, state_dir/condition.json); docs/design.md ("The GPU health stack") has the table.
-- The simulator stands in for nvidia-imex and its ctl: where it guesses (the ctl's exit status and
-- output with the local daemon down) is said in contrib/imexsim/README.md.
package.path = "contrib/?.lua;" .. package.path
local cjson = require("cjson")
local simdomain = require("simdomain")

local DCGM = {}

--- DCGM's domain status from `nvidia-imex-ctl -N -j` (its output and exit status).
function DCGM.domain(out, status)
  if status ~= 0 then return "UNAVAILABLE" end
  if out:find("Failed to read node configuration file", 1, true) then return "NOT_CONFIGURED" end
  local last
  for v in out:gmatch('"status"%s*:%s*"([^"]*)"') do last = v end
  -- DCGM's rfind of `"status":`, then the next quoted value, upper-cased
  last = last and last:upper()
  if last == "UP" or last == "DOWN" or last == "DEGRADED" then return last end
  return "UNAVAILABLE"
end

local STATES = { INITIALIZING = true, STARTING_AUTH_SERVER = true, WAITING_FOR_PEERS = true,
  WAITING_FOR_RECOVERY = true, INIT_GPU = true, READY = true, SHUTTING_DOWN = true, UNAVAILABLE = true }

--- DCGM's daemon status from `nvidia-imex-ctl -q`.
function DCGM.daemon(out, status)
  if status ~= 0 then return "COMMAND_ERROR" end
  if out:find("Failed to read node configuration file", 1, true) then return "NOT_CONFIGURED" end
  local s = out:gsub("^%s+", ""):gsub("%s+$", ""):upper()
  return STATES[s] and s or "UNAVAILABLE"
end

--- MonitorImex's verdict: "PASS" or "FAIL" (DCGM_FR_IMEX_UNHEALTHY), with both statuses.
function DCGM.verdict(domain, daemon)
  local dom_ok = domain == "UP" or domain == "NOT_INSTALLED" or domain == "NOT_CONFIGURED"
    or domain == "UNAVAILABLE"
  local dae_ok = daemon == "READY" or daemon == "UNAVAILABLE" or daemon == "NOT_INSTALLED"
    or daemon == "NOT_CONFIGURED"
  return (dom_ok and dae_ok) and "PASS" or "FAIL", domain .. "/" .. daemon
end

describe("DCGM's IMEX health watch on the states imexguard leaves (simulator, systemd)", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  -- What DCGM reads on node `name`: its verdict and "domain/daemon".
  local function dcgm(name)
    local nout, nst = d:ctl(name, "-N -j")
    local qout, qst = d:ctl(name, "-q")
    return DCGM.verdict(DCGM.domain(nout, nst), DCGM.daemon(qout, qst))
  end

  local function condition(name)
    local f = io.open(d:dir(name) .. "/state/condition.json", "rb")
    if not f then return nil end
    local t = cjson.decode(f:read("a"))
    f:close()
    return t
  end

  local function health(name, args)
    return d:run_all{ command = "health", job = 1, nodelist = name, names = { name }, args = args }[name]
  end

  local function all_ok(res)
    for n, r in pairs(res) do assert.are.equal("ok", r.outcome, n .. ": " .. r.output) end
  end

  local function up(name)
    return simdomain.wait_until(function()
      local t = d:ctl_json(name)
      return t and t.status == "UP"
    end, 30)
  end

  it("the mapping itself, on the ctl's own answers (tests/fixtures/ctl)", function()
    local f = assert(io.open("tests/fixtures/ctl/up-2node-570.json", "rb"))
    local up2 = f:read("a")
    f:close()
    assert.are.equal("UP", DCGM.domain(up2, 0))
    assert.are.equal("UNAVAILABLE", DCGM.domain("Query Status returned error code: 14 - x", 1))
    assert.are.equal("UNAVAILABLE", DCGM.domain("Failed to read node configuration file", 255))
    assert.are.equal("NOT_CONFIGURED", DCGM.domain("Failed to read node configuration file", 0))
    assert.are.equal("COMMAND_ERROR", DCGM.daemon("Query Status returned error code: 14 - x", 1))
    assert.are.equal("COMMAND_ERROR", DCGM.daemon("Failed to read node configuration file", 255))
    assert.are.equal("READY", DCGM.daemon("READY\n", 0))
    assert.are.equal("FAIL", (DCGM.verdict("DEGRADED", "READY")))
    assert.are.equal("PASS", (DCGM.verdict("UNAVAILABLE", "READY")))
  end)

  it("default policy: a job's nodes PASS; idle nodes PASS while their peers idle on the same list; an "
    .. "idle node whose peers moved on to another job's list FAILS (DEGRADED) while imexguard calls it "
    .. "healthy and not expected", function()
    d = simdomain.in_order(3)
    assert(d:start())
    all_ok(d:prologs{ job = 1, nodelist = "n[1-3]" })
    assert.truthy(up("n1"))
    for _, n in ipairs({ "n1", "n2", "n3" }) do
      assert.are.equal("PASS", (dcgm(n)))
      assert.are.same({ true, "job-registered" }, { condition(n).expected, condition(n).reason })
    end
    all_ok(d:epilogs{ job = 1, nodelist = "n[1-3]" })
    assert.are.equal("PASS", (dcgm("n3")))
    assert.are.same({ false, "idle" }, { condition("n3").expected, condition("n3").reason })
    -- job 2 on n[1-2]: their daemons restart with {n1, n2}; n3 idles with {n1, n2, n3}
    all_ok(d:prologs{ job = 2, nodelist = "n[1-2]", names = { "n1", "n2" } })
    local verdict, seen = dcgm("n3")
    assert.are.equal("FAIL", verdict)
    assert.are.equal("DEGRADED/READY", seen)
    local h = health("n3")
    assert.are.equal(0, h.status, h.output) -- C33: idle, judged on what it owns
    assert.are.same({ false, "idle" }, { condition("n3").expected, condition("n3").reason })
    assert.are.equal("PASS", (dcgm("n1")))
  end)

  it("park_on_last_epilog: an idle node parked on its own list PASSES whatever its former peers run; "
    .. "the next job restarts it with its list", function()
    d = simdomain.in_order(3)
    assert(d:start())
    local policy = "--policy " .. os.getenv("PWD") .. "/policies/park_on_last_epilog.lua"
    all_ok(d:run_all{ command = "prolog", job = 5, nodelist = "n[1-3]", args = policy })
    all_ok(d:run_all{ command = "epilog", job = 5, nodelist = "n[1-3]", args = policy })
    assert.are.equal(d.addr.n3 .. "\n", d:nodes_file("n3"))
    all_ok(d:run_all{ command = "prolog", job = 6, nodelist = "n[1-2]", names = { "n1", "n2" },
      args = policy })
    assert.truthy(up("n3"))
    local verdict, seen = dcgm("n3")
    assert.are.equal("PASS", verdict, seen)
    assert.are.same({ false, "idle" }, { condition("n3").expected, condition("n3").reason })
    assert.are.equal("PASS", (dcgm("n1")))
  end)

  it("stop_on_last_epilog: an idle node's stopped daemon FAILS (COMMAND_ERROR, DOWN) while imexguard "
    .. "says not expected", function()
    d = simdomain.in_order(2)
    assert(d:start())
    local policy = "--policy " .. os.getenv("PWD") .. "/policies/stop_on_last_epilog.lua"
    all_ok(d:run_all{ command = "prolog", job = 3, nodelist = "n[1-2]", args = policy })
    assert.are.equal("PASS", (dcgm("n1")))
    all_ok(d:run_all{ command = "epilog", job = 3, nodelist = "n[1-2]", args = policy })
    assert.are.equal("inactive", d:prop("n1", "ActiveState"))
    local verdict, seen = dcgm("n1")
    assert.are.equal("FAIL", verdict)
    assert.are.equal("COMMAND_ERROR", seen:match("/(.*)$"))
    assert.are.same({ false, "idle" }, { condition("n1").expected, condition("n1").reason })
    local h = health("n1", policy)
    assert.are.equal(0, h.status, h.output)
  end)

  it("static policy: every node PASSES while the rack is whole; one daemon down FAILS every node "
    .. "(DEGRADED), while imexguard fails that node alone and expects IMEX everywhere", function()
    d = simdomain.in_order(3)
    assert(d:start())
    assert.truthy(up("n1"))
    local policy = "--policy " .. os.getenv("PWD") .. "/policies/static_domain.lua"
    all_ok(d:run_all{ command = "health", job = 1, nodelist = "n1", names = { "n1", "n2", "n3" },
      args = policy })
    for _, n in ipairs({ "n1", "n2", "n3" }) do
      assert.are.equal("PASS", (dcgm(n)))
      assert.are.same({ true, "static-domain" }, { condition(n).expected, condition(n).reason })
    end
    assert(d:systemctl("stop", d:unit("n3")))
    assert.truthy(simdomain.wait_until(function() return (dcgm("n1")) == "FAIL" end, 20))
    assert.are.equal("FAIL", (dcgm("n2")))
    assert.are.equal(0, health("n1", policy).status)
    assert.are_not.equal(0, health("n3", policy).status)
  end)

  it("a unit installed but disabled (C23), its ctl present: FAILS (COMMAND_ERROR) while imexguard "
    .. "skips the node and says not expected", function()
    d = simdomain.in_order(2)
    assert(d:start())
    all_ok(d:prologs{ job = 4, nodelist = "n[1-2]" })
    assert(d:systemctl("disable", "--now", d:unit("n1")))
    local h = health("n1")
    assert.are.equal("skipped", h.outcome, h.output)
    assert.are.equal("FAIL", (dcgm("n1")))
    assert.are.same({ false, "unit-disabled" }, { condition("n1").expected, condition("n1").reason })
  end)
end)
