-- SPDX-License-Identifier: Apache-2.0
-- contrib/deps.sh: what `make deps` (build) and `make deps-run` install never includes Slurm or munge
-- (safe on a compute node that runs a site Slurm); the build group has what compiling needs; the run
-- group covers every library the built binary links (ldd -> dpkg -S).
local H = require("helpers")

local function list(group)
  local set = {}
  for p in H.sh("contrib/deps.sh --list " .. group):gmatch("%S+") do set[p] = true end
  return set
end

describe("contrib/deps.sh", function()
  it("build and run never install Slurm or munge; test does", function()
    for _, g in ipairs({ "build", "run", "demo", "pkg" }) do
      for p in pairs(list(g)) do
        assert.not_matches("slurm", p, 1, true)
        assert.not_matches("munge", p, 1, true)
      end
    end
    local test = list("test")
    assert.truthy(test.slurmd and test.munge and test.slurmctld)
  end)

  it("build has the compiler, pkg-config, lua5.4 and every -dev package", function()
    local b = list("build")
    for _, p in ipairs({ "gcc", "make", "pkg-config", "lua5.4", "liblua5.4-dev", "lua-cjson-dev",
      "libsystemd-dev", "libexpat1-dev", "scdoc" }) do
      assert.truthy(b[p], p)
    end
  end)

  it("run covers every library the built binary links", function()
    local run = list("run")
    local bin = H.q(H.imexguard_bin())
    -- only the binary's own NEEDED entries: libsystemd0 brings its dependencies (libgcrypt, ...)
    local direct = H.sh("objdump -p " .. bin .. " | awk '/NEEDED/ {print $2}'")
    assert.truthy(direct:match("liblua5%.4"))
    for lib in direct:gmatch("%S+") do
      local path = H.sh("ldd " .. bin .. " | awk -v l=" .. H.q(lib) .. " '$1 == l {print $3}'")
      local pkg = H.sh("{ dpkg -S " .. H.q(path) .. " || dpkg -S \"$(readlink -f " .. H.q(path)
        .. ")\"; } 2>/dev/null | head -n1 | cut -d: -f1")
      assert(pkg ~= "", "no package has " .. lib .. " (" .. path .. ")")
      assert(run[pkg], lib .. " comes from " .. pkg .. ", which `contrib/deps.sh run` does not install")
    end
  end)

  it("an unknown group is a usage error naming the groups", function()
    local out = H.sh("contrib/deps.sh nodes 2>&1; echo rc=$?")
    assert.matches("usage: contrib/deps.sh %[%-%-list%] build|run|demo|pkg|test\nrc=2", out)
  end)
end)
