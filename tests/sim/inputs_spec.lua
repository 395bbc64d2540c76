-- The node's inputs as the field has them (field cases C35-C39 of docs/design.md, "Field cases"),
-- with the real imexguard binary against the simulator under a real systemd user manager
-- (tests/with-systemd; contrib/simdomain.lua): a state directory that outlived a reboot (C36) and
-- the temp files of killed writes (C39). Every unit is stopped in after_each (d:destroy()).
package.path = "contrib/?.lua;" .. package.path
local simdomain = require("simdomain")

local function ls(dir)
  local _, out = simdomain.capture("ls -A " .. simdomain.quote(dir))
  local t = {}
  for n in out:gmatch("[^\n]+") do t[n] = true end
  return t
end

describe("imexsim under systemd: the node's inputs", function()
  local d

  after_each(function()
    if d then d:destroy() end
    d = nil
  end)

  it("C36, C39: a registration of another boot is dropped and the prolog restarts; the temp files "
    .. "of killed writes are removed, look-alikes kept", function()
    d = simdomain.in_order(1)
    local dir = d:dir("n1")
    -- job 100 registered with another list during another boot (a state_dir that outlived it)
    simdomain.write_file(dir .. "/state/state.json", string.format(
      '{"jobs":[{"id":"100","nodes":"%s\\n","registered_us":"1700000000000000","invocation_id":"",'
      .. '"boot_id":"00000000-0000-4000-8000-000000000000"}]}\n', "127.0.0.99"))
    -- leftovers of killed writes, and files that only look like them
    for _, p in ipairs({ "state/.state.json.AbC123", ".nodes_config.cfg.x9Y8z7", "state/.foo.AbC123",
      "state/.state.json.bak", ".config.cfg.AbC123" }) do
      simdomain.write_file(dir .. "/" .. p, "partial")
    end
    d:write_nodes("n1", { "n1" })
    -- the file no longer holds the job's list: the prolog must rewrite it and restart, which job 100
    -- (another list) would refuse if it still counted
    assert(d:start())
    d:write_nodes("n1", {})
    local r = d:prologs{ job = 101, nodelist = "n1", args = "--set log_level=debug" }.n1
    assert.equal("ok", r.outcome, r.output)
    assert.matches("dropping the registration%(s%) of job 100: made during another boot", r.output)
    assert.matches("removed " .. dir .. "/state/.state.json.AbC123", r.output, 1, true)
    assert.matches("removed " .. dir .. "/.nodes_config.cfg.x9Y8z7", r.output, 1, true)
    local state, top = ls(dir .. "/state"), ls(dir)
    assert.is_nil(state[".state.json.AbC123"])
    assert.is_nil(top[".nodes_config.cfg.x9Y8z7"])
    assert.is_true(state[".foo.AbC123"] and state[".state.json.bak"] and top[".config.cfg.AbC123"])
    local st = simdomain.read_file(dir .. "/state/state.json")
    assert.is_nil(st:find('"100"', 1, true))
    local boot = simdomain.read_file("/proc/sys/kernel/random/boot_id"):gsub("%s+$", "")
    assert.truthy(st:find('"boot_id":"' .. boot .. '"', 1, true), st)
  end)
end)
