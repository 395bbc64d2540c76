-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.lazy and of the modules each command of the default policy loads: a command
-- loads only the modules it uses (docs/design.md, "Performance goals").
local testing = require("imexguard.testing")
local lazy = require("imexguard.lazy")

-- The library modules (imexguard.*, not the kit's) loaded while `f` runs, from a fresh load of
-- policies/default.lua; package.loaded is restored afterwards.
local function loaded_by(f)
  local saved = {}
  for name, m in pairs(package.loaded) do
    if name:match("^imexguard%.") and not name:match("^imexguard%.testing") then
      saved[name], package.loaded[name] = m, nil
    end
  end
  -- what every run loads before the policy (the driver): these are never the policy's choice
  for _, name in ipairs { "imexguard.settings", "imexguard.commands", "imexguard.outcomes",
    "imexguard.text", "imexguard.slurmenv" } do
    require(name)
  end
  local ok, err = pcall(f, assert(loadfile("policies/default.lua"))())
  local names = {}
  for name in pairs(package.loaded) do
    if name:match("^imexguard%.") and not name:match("^imexguard%.testing") then names[name] = true end
  end
  for name in pairs(names) do package.loaded[name] = nil end
  for name, m in pairs(saved) do package.loaded[name] = m end
  assert(ok, err)
  return names
end

describe("imexguard.lazy", function()
  it("requires the module at the first field read, once; its stand-in cannot be assigned", function()
    local requires = 0
    package.preload["imexguard.lazy_probe"] = function()
      requires = requires + 1
      return { answer = 42, f = function(x) return x + 1 end }
    end
    local m = lazy("imexguard.lazy_probe")
    assert.equal(0, requires)
    assert.equal(42, m.answer)
    assert.equal(3, m.f(2))
    assert.is_nil(m.missing)
    assert.equal(1, requires)
    assert.has_error(function() m.answer = 1 end,
      "cannot set imexguard.lazy_probe.answer through its lazy stand-in")
    package.preload["imexguard.lazy_probe"], package.loaded["imexguard.lazy_probe"] = nil, nil
  end)

  it("gives one stand-in per name, in order, each requiring its own module at its first read", function()
    local required = {}
    for _, name in ipairs { "imexguard.lazy_a", "imexguard.lazy_b", "imexguard.lazy_c" } do
      package.preload[name] = function()
        required[#required + 1] = name
        return { name = name }
      end
    end
    local a, b, c, none = lazy("imexguard.lazy_a", "imexguard.lazy_b", "imexguard.lazy_c")
    assert.is_nil(none)
    assert.same({}, required)
    assert.equal("imexguard.lazy_c", c.name)
    assert.equal("imexguard.lazy_a", a.name)
    assert.same({ "imexguard.lazy_c", "imexguard.lazy_a" }, required)
    assert.equal("imexguard.lazy_b", b.name)
    assert.equal("imexguard.lazy_b", b.name)
    assert.same({ "imexguard.lazy_c", "imexguard.lazy_a", "imexguard.lazy_b" }, required)
    assert.has_error(function() b.name = "x" end,
      "cannot set imexguard.lazy_b.name through its lazy stand-in")
    for _, name in ipairs { "imexguard.lazy_a", "imexguard.lazy_b", "imexguard.lazy_c" } do
      package.preload[name], package.loaded[name] = nil, nil
    end
  end)
end)

describe("the modules a command of the default policy loads", function()
  -- the health wait, the ctl's parsers and verdicts, hostlists, addresses, node lists, config.cfg,
  -- the channel, the reports, the drain reason
  local PROLOG_ONLY = { "imexguard.health", "imexguard.ctl", "imexguard.verdict", "imexguard.pace",
    "imexguard.hostlist", "imexguard.addresses", "imexguard.nodelist", "imexguard.imexcfg",
    "imexguard.channels" }
  -- the rooms of the steps (lua/imexguard/steps/) that only the prolog's decision uses: applies?,
  -- the desired list, the node list file, stale? (the assessment), the (re)start, the registration,
  -- the health wait and its convergence
  local PROLOG_ROOMS = { "imexguard.steps.applies", "imexguard.steps.desired",
    "imexguard.steps.nodes_file", "imexguard.steps.staleness", "imexguard.steps.restart",
    "imexguard.steps.registration", "imexguard.steps.converge" }

  it("the epilog loads none of the prolog's decision modules", function()
    local h = testing.host()
    h.set_file(testing.STATE, '{"jobs": [{"id": "101", "nodes": "10.0.0.1\\n10.0.0.2\\n", '
      .. '"registered_us": "1700000000000000", "invocation_id": ""}]}')
    local names = loaded_by(function(P)
      local outcome, message = P.epilog(testing.ctx{ host = h, command = "epilog" })
      assert.equal("ok", outcome, message)
      assert.matches("job 101 unregistered", message)
    end)
    for _, name in ipairs(PROLOG_ONLY) do assert.is_nil(names[name], name) end
    for _, name in ipairs(PROLOG_ROOMS) do assert.is_nil(names[name], name) end
    assert.is_nil(names["imexguard.steps.other_jobs"])
    assert.is_nil(names["imexguard.steps"]) -- the index for site policies loads every room
    assert.is_nil(names["imexguard.report"])
    assert.is_nil(names["imexguard.drain"])
    assert.is_nil(names["imexguard.inspect"])
    assert.is_true(names["imexguard.state"])
    assert.is_true(names["imexguard.registry"])
    assert.is_true(names["imexguard.steps.node_lock"])
    assert.is_true(names["imexguard.steps.housekeeping"])
  end)

  it("status and health load the state file (C33: a node is judged on its registered job); the "
    .. "prolog loads no report", function()
    local names = loaded_by(function(P)
      assert.equal("ok", (P.health(testing.ctx{ host = testing.host(), command = "health" })))
    end)
    assert.is_true(names["imexguard.state"])
    assert.is_nil(names["imexguard.addresses"]) -- DNS: no address map to name the nodes by
    assert.is_true(names["imexguard.report"])
    assert.is_true(names["imexguard.inspect"])
    names = loaded_by(function(P)
      assert.equal("ok", (P.prolog(testing.ctx{ host = testing.host() })))
    end)
    for _, name in ipairs(PROLOG_ONLY) do assert.is_true(names[name], name) end
    for _, name in ipairs(PROLOG_ROOMS) do assert.is_true(names[name], name) end
    assert.is_nil(names["imexguard.steps"])
    assert.is_nil(names["imexguard.report"])
    assert.is_nil(names["imexguard.inspect"])
    assert.is_nil(names["imexguard.drain"])
  end)
end)
