-- SPDX-License-Identifier: Apache-2.0
-- `imexguard wait [--job N] [--timeout S]` (issue 31, item 5) under the real systemd user manager
-- (tests/with-systemd; contrib/simdomain.lua, one imexsim@NODE.service per node): after a job's
-- prologs (all at once, as Slurm starts them), the barrier returns 0 once every node of the job is
-- CONNECTED to every other; with a node down it names the missing links after the timeout; started
-- before that node comes back, it returns 0 when the links are up. Every wait polls a condition with
-- a deadline; the domain is destroyed in after_each and a background wait is killed by its PID.
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

describe("imexguard wait under systemd", function()
  local d, bg

  after_each(function()
    if bg then os.execute("kill " .. bg .. " 2>/dev/null") end
    bg = nil
    if d then d:destroy() end
    d = nil
  end)

  local function wait_on(name, args, job)
    return d:run_all{ command = "wait", job = job or 5, nodelist = "n[1-3]", names = { name },
      args = args }[name]
  end

  -- `imexguard wait` on node n1 in the background: its PID, and a function giving (status, output)
  -- once it has ended (nil before)
  local function wait_in_background(args)
    local env = simdomain.prolog_env(5, "n[1-3]", "n1", 1)
    local assign = {}
    for k, v in pairs(env) do assign[#assign + 1] = k .. "=" .. q(v) end
    local out, rc = d:dir("n1") .. "/wait.out", d:dir("n1") .. "/wait.rc"
    local cmd = string.format("env -i %s %s --config %s %s wait >%s 2>&1; echo $? >%s.tmp; mv %s.tmp %s",
      table.concat(assign, " "), q(d.build .. "/imexguard"), q(d:config("n1")), args, q(out), q(rc), q(rc),
      q(rc))
    local p = io.popen("sh -c " .. q(cmd) .. " >/dev/null 2>&1 & echo $!")
    local pid = p:read("l")
    p:close()
    return pid, function()
      local s = read(rc)
      if not s then return nil end
      return tonumber(s), read(out)
    end
  end

  it("0 once every node of the job is CONNECTED to every other; a node down: the missing links named "
    .. "after --timeout; a wait started before it comes back returns 0 once its links are up", function()
    d = simdomain.in_order(3)
    assert(d:start())
    local res = d:prologs{ job = 5, nodelist = "n[1-3]" }
    for name, r in pairs(res) do assert.are.equal("ok", r.outcome, name .. ": " .. r.output) end
    local r = wait_on("n1", "--job 5 --timeout 10")
    assert.are.equal(0, r.status, r.output)
    assert.truthy(r.output:find("job 5: 3 nodes of this node's IMEX domain, every link CONNECTED (6 links)",
      1, true), r.output)
    assert.truthy(r.output:find("the registry", 1, true), r.output)
    -- without --job: the environment's job (SLURM_JOB_ID), as in a job script
    r = wait_on("n2", "")
    assert.are.equal(0, r.status, r.output)
    -- n3 goes down: n1 sees it, and names it after the timeout
    assert(d:systemctl("stop", d:unit("n3")))
    r = wait_on("n1", "--job 5 --timeout 1")
    assert.are.equal(9, r.status, r.output)
    assert.are.equal("domain-unhealthy", r.outcome, r.output)
    local n3 = d.addr.n3
    assert.truthy(r.output:find("after 1 s", 1, true), r.output)
    assert.truthy(r.output:find(n3, 1, true), r.output)
    assert.truthy(r.output:find("imexguard: domain-unhealthy: job 5: not every node", 1, true), r.output)
    -- a barrier: started while n3 is down, it returns 0 once n3 is back and connected
    local done
    bg, done = wait_in_background("--job 5 --timeout 30")
    os.execute("sleep 0.5")
    assert.is_nil(done(), "the wait returned while n3 was down")
    assert(d:systemctl("start", d:unit("n3")))
    assert.truthy(simdomain.wait_until(function() return done() ~= nil end, 40), "the wait never returned")
    local status, out = done()
    bg = nil
    assert.are.equal(0, status, out)
    assert.truthy(out:find("every link CONNECTED (6 links)", 1, true), out)
  end)

  it("a job not registered on this node: bad-input, exit 2, naming it", function()
    d = simdomain.in_order(3)
    assert(d:start())
    local r = wait_on("n1", "--job 99 --timeout 1", 99)
    assert.are.equal(2, r.status, r.output)
    assert.truthy(r.output:find("job 99 is not registered here", 1, true), r.output)
  end)
end)
