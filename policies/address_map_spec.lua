-- Specs of the address-map site policy: addresses from the site's hosts(5)-format file, never DNS.
local testing = require "imexguard.testing"
local P = require "address_map"

local HOSTS = table.concat({
  "# IMEX network of rack 1",
  "10.10.0.1   gpu1 gpu1-imex",
  "10.10.0.2   gpu2",
  "10.10.0.3   gpu3   # spare",
  "",
}, "\n")

local function given(o)
  o = o or {}
  return testing.scenario{ policy = P, node = "gpu1",
    -- DNS would answer other addresses: the policy must not ask it
    nodes = { ["gpu1"] = "10.10.0.1", ["gpu2"] = "192.0.2.2", ["gpu3"] = "192.0.2.3" },
    host = { local_addresses = { "10.10.0.1" } },
    file = o.file or { "10.10.0.1", "10.10.0.2" },
    files = { [P.HOSTS_FILE] = o.hosts == nil and HOSTS or o.hosts } }
end

describe("address_map policy", function()
  it("maps the job's names through the hosts file, in hostlist order, without DNS", function()
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

  it("a node missing from the file: bad-input naming node and file, nothing changed", function()
    local s = given()
    local outcome, message = s:prolog{ job = 101, nodelist = "gpu[1-2],gpu4" }
    assert.equal("bad-input", outcome)
    assert.matches("node gpu4 is not in the IMEX hosts file " .. P.HOSTS_FILE, message, 1, true)
    assert.same({}, s.host.writes)
    assert.equal(0, s:restarts())
  end)

  it("no hosts file: bad-input naming it", function()
    local s = given{ hosts = false }
    local outcome, message = s:prolog{ job = 101, nodelist = "gpu[1-2]" }
    assert.equal("bad-input", outcome)
    assert.matches(P.HOSTS_FILE .. " unreadable", message, 1, true)
    assert.same({}, s.host.writes)
  end)

  it("a name with two addresses: bad-input naming the line", function()
    local s = given{ hosts = HOSTS .. "10.10.0.9 gpu2\n" }
    local outcome, message = s:prolog{ job = 101, nodelist = "gpu[1-2]" }
    assert.equal("bad-input", outcome)
    assert.matches("line 5: gpu2 listed twice %(10.10.0.2, 10.10.0.9%)", message)
  end)

  it("entries are checked like any address source (a host name is refused)", function()
    local s = given{ hosts = HOSTS .. "gpu5.example gpu5\n" }
    local outcome, message = s:prolog{ job = 101, nodelist = "gpu[1,5]" }
    assert.equal("bad-input", outcome)
    assert.matches("gpu5%.example", message)
  end)

  it("parse_hosts: comments, aliases, a line without a name", function()
    assert.same({ a = "10.0.0.1", b = "10.0.0.1", c = "10.0.0.2" },
      assert(P.parse_hosts("# x\n10.0.0.1 a b\n\n  10.0.0.2\tc # y\n", "/h")))
    local r, err = P.parse_hosts("10.0.0.1\n", "/h")
    assert.is_nil(r)
    assert.matches("/h line 1", err)
  end)
end)

describe("address_map policy in the kit's standard world", function()
  it("check_files make a normal job on n[1-2] succeed", function()
    local s = testing.scenario{ policy = P, files = P.check_files }
    assert.equal("ok", (s:prolog{ job = 101, nodelist = "n[1-2]" }))
    assert.equal(0, s.host.count("resolve"))
  end)
end)
