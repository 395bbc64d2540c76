-- The Debian package (`make deb`, debian/): it builds from the work tree without changing it,
-- lintian reports no error, its control data and contents are what a site installs (Depends from
-- dh_shlibdeps, one commented conffile, the binary, the Slurm wrappers, the man pages, the example
-- policies, no service), and it installs on this machine with dpkg, runs from the installed paths,
-- and purges leaving nothing behind.
-- Needs root (dpkg -i). Safe on CI: it refuses to run (fails, never pends) when a package named
-- imexguard is already installed or /etc/imexguard exists, so it never replaces or removes a site's
-- own install; what it installs it purges, also when an assertion fails.
local H = require "helpers"
local q = H.q

local function ok(cmd)
  return os.execute(cmd) == true
end

local function installed()
  return H.sh("dpkg-query -W -f='${Status}' imexguard 2>/dev/null"):match("install ok installed") ~= nil
end

describe("the Debian package", function()
  local deb, version, we_installed

  setup(function()
    assert.equal("0", H.sh("id -u"), "the package tier must run as root (dpkg -i)")
    assert(not installed(), "a package imexguard is already installed here: not touching it")
    assert(not ok("test -e /etc/imexguard"), "/etc/imexguard exists (a site's install?): not touching it")
    version = H.sh([[sed -n 's/^#define IG_VERSION "\(.*\)"/\1/p' src/imexguard.h]])
    assert.matches("^%d+%.%d+%.%d+", version)
    local before = H.sh("git status --porcelain 2>&1")
    local out = H.sh("make -s --no-print-directory deb 2>&1; echo rc=$?")
    assert.matches("rc=0$", out)
    assert.equal(before, H.sh("git status --porcelain 2>&1"), "make deb changed the work tree")
    deb = string.format("build/deb/imexguard_%s_%s.deb", version, H.sh("dpkg --print-architecture"))
    assert(ok("test -f " .. q(deb)), deb .. " was not built:\n" .. out)
  end)

  teardown(function()
    if we_installed and installed() then os.execute("dpkg --purge imexguard >/dev/null 2>&1") end
  end)

  it("lintian reports no error", function()
    -- lintian leaves temp files behind (its MLDBM storage): in a directory of the test's own
    local tmp = H.tmpdir()
    local out = H.sh("TMPDIR=" .. q(tmp) .. " lintian --fail-on error " .. q(deb) .. " 2>&1; echo rc=$?")
    H.rmdir(tmp)
    assert.not_matches("\nE: ", "\n" .. out)
    assert.matches("rc=0$", out)
  end)

  it("Depends come from dh_shlibdeps: the runtime libraries the binary links", function()
    local dep = H.sh("dpkg-deb -f " .. q(deb) .. " Depends")
    for _, p in ipairs({ "libc6", "liblua5.4-0", "libsystemd0", "lua-cjson" }) do
      assert.matches("%f[%w]" .. p:gsub("%p", "%%%0") .. " %(>= ", dep)
    end
    assert.equal(version, H.sh("dpkg-deb -f " .. q(deb) .. " Version"))
  end)

  it("ships the binary, the wrappers, the man pages, the policies and one commented conffile", function()
    local files = H.sh("dpkg-deb -c " .. q(deb) .. " | awk '{print $6}'")
    for _, f in ipairs({ "./usr/sbin/imexguard", "./usr/lib/imexguard/prolog.sh",
      "./usr/lib/imexguard/epilog.sh",
      "./usr/share/man/man8/imexguard.8.gz", "./usr/share/man/man5/imexguard.conf.5.gz",
      "./usr/share/imexguard/policies/static_domain.lua", "./usr/share/imexguard/policies/default.lua",
      "./etc/imexguard/imexguard.conf" }) do
      assert.matches("\n" .. f:gsub("%p", "%%%0") .. "\n", "\n" .. files .. "\n")
    end
    assert.not_matches("systemd", files) -- no unit, no preset: nothing to enable
    assert.not_matches("_spec%.lua", files)
    local dir = H.tmpdir()
    local conffiles = H.sh("dpkg-deb --ctrl-tarfile " .. q(deb) .. " | tar -xO ./conffiles")
    assert(ok("dpkg-deb -x " .. q(deb) .. " " .. q(dir)))
    local conf = H.read(dir .. "/etc/imexguard/imexguard.conf")
    local prolog = H.read(dir .. "/usr/lib/imexguard/prolog.sh")
    H.rmdir(dir)
    assert.equal("/etc/imexguard/imexguard.conf", conffiles)
    for l in conf:gmatch("[^\n]+") do assert.matches("^%-%-", l) end
    assert.matches('"${IMEXGUARD:-/usr/sbin/imexguard}" prolog', prolog, 1, true)
  end)

  it("installs with dpkg, runs from the installed paths, purges leaving nothing behind", function()
    local out = H.sh("dpkg -i " .. q(deb) .. " 2>&1; echo rc=$?")
    we_installed = true
    assert.matches("rc=0$", out)
    local paths = H.sh("dpkg -L imexguard")
    assert.matches("imexguard " .. version:gsub("%p", "%%%0") .. " ", H.sh("/usr/sbin/imexguard version"))
    -- the default settings file is the installed conffile (every line commented: all defaults)
    local r = H.sh("IMEXGUARD_NO_JOURNAL=1 /usr/sbin/imexguard check "
      .. "/usr/share/imexguard/policies/static_domain.lua 2>&1; echo rc=$?")
    assert.matches("rc=0$", r)
    assert.matches("is valid", r)
    assert(ok("man -w imexguard.conf >/dev/null 2>&1"), "man does not find imexguard.conf(5)")
    assert.equal("", H.sh("ls /etc/systemd/system /lib/systemd/system 2>/dev/null | grep imexguard"))

    out = H.sh("dpkg --purge imexguard 2>&1; echo rc=$?")
    assert.matches("rc=0$", out)
    assert.is_false(installed())
    local left = {}
    for p in paths:gmatch("[^\n]+") do
      -- directories the package shares with the system (/usr, /etc, ...) stay; its own go
      if p:match("imexguard") and ok("test -e " .. q(p)) then left[#left + 1] = p end
    end
    assert.same({}, left)
    assert.is_false(ok("test -e /etc/imexguard"))
  end)
end)
