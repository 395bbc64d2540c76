-- SPDX-License-Identifier: Apache-2.0
-- The build (Makefile, src/embed.lua): header dependencies of every object (-MD -MP), a plain
-- `make` without the build packages, and the C side of the outcomes generated from
-- lua/imexguard/outcomes.lua. Dry runs only (make -n): nothing in the tree is rebuilt or touched.
local H = require("helpers")

-- Run a shell command (without the ASan preload of the asan tier); its exit code and its stdout +
-- stderr.
local function sh(cmd)
  local p = assert(io.popen("env -u LD_PRELOAD sh -c " .. H.q(cmd) .. " 2>&1; echo \"rc=$?\""))
  local out = p:read("a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  return rc, out:gsub("rc=%d+\n$", "")
end

describe("the build", function()
  it("an object is rebuilt when a header it includes changes, and only then (-MD)", function()
    H.imexguard_bin()
    -- make -W: "what if this file were new", without touching it
    local rc, out = sh("make -n -W src/trust.h build/imexguard")
    assert.equal(0, rc, out)
    assert.matches("-o build/obj/trust%.o src/trust%.c", out)
    assert.matches("-o build/obj/driver%.o src/driver%.c", out)
    assert.not_matches("-o build/obj/clock%.o", out)
    rc, out = sh("make -n build/imexguard")
    assert.equal(0, rc, out)
    assert.not_matches("-o build/obj/trust%.o", out)
  end)

  it("a plain make without the build packages says which command installs them", function()
    local dir = H.tmpdir()
    local rc, out = sh("make -s B=" .. H.q(dir) .. " PKG='lua5.4 libsystemd-not-installed' all")
    local built = sh("ls " .. H.q(dir) .. " | grep -q .")
    H.rmdir(dir)
    assert.is_not.equal(0, rc)
    assert.matches("install them with 'make deps' (runs contrib/deps.sh)", out, 1, true)
    assert.not_matches("No such file", out)
    assert.is_not.equal(0, built, "nothing was built")
  end)

  it("--help lists every outcome of outcomes.lua with its exit code, in its order", function()
    local outcomes = require("imexguard.outcomes")
    local rc, out = sh(H.q(H.imexguard_bin()) .. " --help")
    assert.equal(0, rc, out)
    local list = out:match("Outcomes and exit codes[^\n]*\n(.-)\n\n")
    assert.is_string(list, out)
    local text = list:gsub("%s+", " ")
    local want = {}
    for _, o in ipairs(outcomes.list) do want[#want + 1] = o[1] .. " " .. o[2] end
    local pos = 0
    for _, item in ipairs(want) do
      local at = text:find(item, pos + 1, true)
      assert.is_number(at, item .. " in: " .. text)
      pos = at
    end
    assert.matches('peers-unhealthy 0 (' .. outcomes.PEERS_UNHEALTHY_FAIL .. ' with on_peer_fault = "fail")',
      text, 1, true)
  end)
end)
