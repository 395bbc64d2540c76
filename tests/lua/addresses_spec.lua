-- SPDX-License-Identifier: Apache-2.0
-- Specs of the address map, the one way to give node names fixed IMEX addresses: the settings
-- address_source = "map" and address_map = FILE, a file of "name address" lines. DNS is never asked.
local testing = require("imexguard.testing")
local addresses = require("imexguard.addresses")

local MAP = addresses.MAP_PATH

local TEXT = table.concat({
  "# IMEX network of rack 1",
  "gpu1 10.10.0.1",
  "gpu2   10.10.0.2",
  "gpu3\t10.10.0.3   # spare",
  "",
}, "\n")

local function given(o)
  o = o or {}
  return testing.scenario{ node = "gpu1",
    -- DNS would answer other addresses: the map source must not ask it
    nodes = { ["gpu1"] = "10.10.0.1", ["gpu2"] = "192.0.2.2", ["gpu3"] = "192.0.2.3" },
    host = { local_addresses = { "10.10.0.1" } },
    settings = { address_source = "map", address_map = MAP },
    file = o.file or { "10.10.0.1", "10.10.0.2" },
    files = { [MAP] = o.map == nil and TEXT or o.map } }
end

describe("address map (address_source = \"map\")", function()
  it("has one documented path", function()
    assert.equal("/etc/imexguard/addresses", MAP)
  end)

  it("maps the job's names through the file, in hostlist order, without DNS", function()
    local s = given()
    local outcome = s:prolog{ job = 101, nodelist = "gpu3,gpu1" }
    assert.equal("ok", outcome)
    assert.same({ "10.10.0.3\n10.10.0.1\n" }, s:writes())
    assert.equal(0, s.host.count("resolve"))
    assert.equal(1, s:restarts())
  end)

  it("the current list: nothing to do", function()
    local s = given()
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "gpu[1-2]" }))
    assert.same({}, s:writes())
    assert.equal(0, s:restarts())
  end)

  it("a node missing from the map: bad-input naming node and file, nothing changed", function()
    local s = given()
    local outcome, message = s:prolog{ job = 101, nodelist = "gpu[1-2],gpu4" }
    assert.equal("bad-input", outcome)
    assert.matches("node gpu4 is not in the address map " .. MAP, message, 1, true)
    assert.same({}, s.host.writes)
    assert.equal(0, s:restarts())
  end)

  it("no map file: bad-input naming it, no fallback to DNS", function()
    local s = given{ map = false }
    local outcome, message = s:prolog{ job = 101, nodelist = "gpu[1-2]" }
    assert.equal("bad-input", outcome)
    assert.matches("address map " .. MAP .. " unreadable", message, 1, true)
    assert.same({}, s.host.writes)
    assert.equal(0, s.host.count("resolve"))
  end)

  it("the setting address_map unset: bad-input naming the setting and the documented path", function()
    local s = testing.scenario{ settings = { address_source = "map" } }
    local outcome, message = s:prolog{ job = 101, nodelist = "n[1-2]" }
    assert.equal("bad-input", outcome)
    assert.matches("address_map is not set", message, 1, true)
    assert.matches(MAP, message, 1, true)
    assert.same({}, s.host.writes)
  end)

  it("a name with two addresses: bad-input naming the line", function()
    local s = given{ map = TEXT .. "gpu2 10.10.0.9\n" }
    local outcome, message = s:prolog{ job = 101, nodelist = "gpu[1-2]" }
    assert.equal("bad-input", outcome)
    assert.matches("line 5: gpu2 listed twice %(10.10.0.2, 10.10.0.9%)", message)
  end)

  it("a line that is not 'name address [domain]': bad-input naming the line", function()
    local s = given{ map = TEXT .. "10.10.0.5 gpu5 gpu5-imex rack1\n" }
    local outcome, message = s:prolog{ job = 101, nodelist = "gpu[1-2]" }
    assert.equal("bad-input", outcome)
    assert.matches("line 5: expected 'name address [domain]'", message, 1, true)
    assert.same({}, s.host.writes)
  end)

  it("entries are checked like any address source (a host name is refused)", function()
    local s = given{ map = TEXT .. "gpu5 gpu5.example\n" }
    local outcome, message = s:prolog{ job = 101, nodelist = "gpu[1,5]" }
    assert.equal("bad-input", outcome)
    assert.matches("gpu5%.example", message)
  end)
end)

describe("addresses.parse_map of long lines (bench/lua_scale.lua)", function()
  it("reads a line with a long run of blanks inside in linear time", function()
    local t0 = os.clock()
    local line = "  gpu1" .. string.rep(" ", 200000) .. "10.0.0.1 \t# rack 1\n"
    local map = assert(addresses.parse_map(line, "/m"))
    assert.is_true(os.clock() - t0 < 0.5, "parse_map took " .. os.clock() - t0 .. " s")
    assert.same({ gpu1 = "10.0.0.1" }, map)
  end)
end)

describe("addresses.resolve_entries (C35: host names in a node list file)", function()
  it("keeps literals, resolves names one by one through the address source, names every failure", function()
    local h = testing.host{ resolve = { ["rack7-slot01"] = { "10.0.0.1" }, ["rack7-slot02"] = { "10.0.0.2" },
      ["rack7-slot03"] = "EAI_NONAME", ["rack7-slot05"] = { "10.0.0.5", "10.0.0.6" } } }
    local ctx = testing.ctx{ host = h }
    local addrs, names, unresolved = addresses.resolve_entries(h, ctx.settings,
      { "rack7-slot01", "10.0.0.9", "rack7-slot03", "rack7-slot02", "rack7-slot05" })
    assert.same({ "10.0.0.1", "10.0.0.9", false, "10.0.0.2", false }, addrs)
    assert.same({ ["10.0.0.1"] = "rack7-slot01", ["10.0.0.2"] = "rack7-slot02" }, names)
    assert.equal(2, #unresolved)
    assert.matches("^rack7%-slot03 %(resolving node rack7%-slot03 failed", unresolved[1])
    assert.matches("^rack7%-slot05 %(node rack7%-slot05 resolves to 2 IPv4 addresses", unresolved[2])
    -- with the address map: the map, never the resolver
    local mh = testing.host{ files = { [MAP] = "rack7-slot01 10.0.0.1\n" } }
    local mctx = testing.ctx{ host = mh, settings = { address_source = "map", address_map = MAP } }
    local names2
    addrs, names2, unresolved = addresses.resolve_entries(mh, mctx.settings,
      { "rack7-slot01", "rack7-slot02" })
    assert.same({ ["10.0.0.1"] = "rack7-slot01" }, names2)
    assert.same({ "10.0.0.1", false }, addrs)
    assert.matches("not in the address map", unresolved[1])
    assert.equal(0, mh.count("resolve"))
  end)
end)

describe("addresses.resolve_list (C35: a node list file as the daemon's addresses)", function()
  it("replaces each entry that resolves by its address, keeps the others, maps names to addresses", function()
    local h = testing.host{ resolve = { ["rack7-slot01"] = { "10.0.0.1" }, ["rack7-slot03"] = "EAI_NONAME" } }
    local ctx = testing.ctx{ host = h }
    local entries = { "rack7-slot01", "10.0.0.9", "rack7-slot03" }
    local resolved, names, by_entry, unresolved = addresses.resolve_list(h, ctx.settings, entries)
    assert.same({ "10.0.0.1", "10.0.0.9", "rack7-slot03" }, resolved)
    assert.same({ "rack7-slot01", "10.0.0.9", "rack7-slot03" }, entries) -- the entries are untouched
    assert.same({ ["10.0.0.1"] = "rack7-slot01" }, names)
    assert.same({ ["rack7-slot01"] = "10.0.0.1" }, by_entry) -- an address is not its own entry
    assert.equal(1, #unresolved)
    assert.matches("^rack7%-slot03 %(resolving node rack7%-slot03 failed", unresolved[1])
  end)
end)
