-- SPDX-License-Identifier: Apache-2.0
-- The Debian package (`make deb`, debian/): it builds from the work tree without changing it,
-- lintian reports no error and no warning, its control data and contents are what a site installs
-- (Depends from dh_shlibdeps, one commented conffile, the binary, the Slurm wrappers in
-- /usr/libexec/imexguard, the man pages, the example policies, the NHC check, the bash completion,
-- the docs and examples, a machine-readable debian/copyright of the Apache-2.0 licence, no
-- service), and it installs on this machine with dpkg, runs and completes from the installed
-- paths, and purges leaving nothing behind.
-- Needs root (dpkg -i). Safe on CI: it refuses to run (fails, never pends) when a package named
-- imexguard is already installed or /etc/imexguard exists, so it never replaces or removes a site's
-- own install; what it installs it purges, also when an assertion fails.
local H = require("helpers")
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

  it("lintian reports no error and no warning", function()
    -- lintian leaves temp files behind (its MLDBM storage): in a directory of the test's own
    local tmp = H.tmpdir()
    local out = H.sh("TMPDIR=" .. q(tmp) .. " lintian --fail-on error,warning " .. q(deb)
      .. " 2>&1; echo rc=$?")
    H.rmdir(tmp)
    assert.not_matches("\nE: ", "\n" .. out)
    assert.not_matches("\nW: ", "\n" .. out)
    assert.matches("rc=0$", out)
  end)

  it("Depends come from dh_shlibdeps: the runtime libraries the binary links", function()
    local dep = H.sh("dpkg-deb -f " .. q(deb) .. " Depends")
    for _, p in ipairs({ "libc6", "liblua5.4-0", "libsystemd0", "lua-cjson", "libexpat1" }) do
      assert.matches("%f[%w]" .. p:gsub("%p", "%%%0") .. " %(>= ", dep)
    end
    assert.equal(version, H.sh("dpkg-deb -f " .. q(deb) .. " Version"))
  end)

  it("ships the binary, the wrappers, the man pages, the policies and one commented conffile", function()
    local files = H.sh("dpkg-deb -c " .. q(deb) .. " | awk '{print $6}'")
    for _, f in ipairs({ "./usr/sbin/imexguard", "./usr/libexec/imexguard/prolog.sh",
      "./usr/libexec/imexguard/epilog.sh", "./usr/libexec/imexguard/health.sh",
      "./usr/share/bash-completion/completions/imexguard", "./usr/share/imexguard/nhc/imexguard.nhc",
      "./usr/share/doc/imexguard/copyright", "./usr/share/doc/imexguard/README.md.gz",
      "./usr/share/doc/imexguard/design.md.gz", "./usr/share/doc/imexguard/policy-api.md.gz",
      "./usr/share/doc/imexguard/json.md.gz",
      "./usr/share/doc/imexguard/examples/imexguard.conf.example",
      "./usr/share/doc/imexguard/examples/slurm.conf.snippet",
      "./usr/share/doc/imexguard/examples/nhc.conf",
      "./usr/share/doc/imexguard/examples/imexguard-slots.conf",
      "./usr/share/man/man8/imexguard.8.gz", "./usr/share/man/man5/imexguard.conf.5.gz",
      "./usr/share/imexguard/policies/static_domain.lua", "./usr/share/imexguard/policies/default.lua",
      "./etc/imexguard/imexguard.conf" }) do
      assert.matches("\n" .. f:gsub("%p", "%%%0") .. "\n", "\n" .. files .. "\n")
    end
    assert.not_matches("systemd", files) -- no unit, no preset: nothing to enable
    assert.not_matches("_spec%.lua", files)
    assert.not_matches("%./usr/lib/imexguard/", files) -- the wrappers moved to libexec
    local dir = H.tmpdir()
    local conffiles = H.sh("dpkg-deb --ctrl-tarfile " .. q(deb) .. " | tar -xO ./conffiles")
    assert(ok("dpkg-deb -x " .. q(deb) .. " " .. q(dir)))
    local conf = H.read(dir .. "/etc/imexguard/imexguard.conf")
    local prolog = H.read(dir .. "/usr/libexec/imexguard/prolog.sh")
    local health = H.read(dir .. "/usr/libexec/imexguard/health.sh")
    local nhc = H.read(dir .. "/usr/share/imexguard/nhc/imexguard.nhc")
    local snippet = H.read(dir .. "/usr/share/doc/imexguard/examples/slurm.conf.snippet")
    H.rmdir(dir)
    assert.equal("/etc/imexguard/imexguard.conf", conffiles)
    for l in conf:gmatch("[^\n]+") do assert.matches("^%-%-", l) end
    assert.matches('"${IMEXGUARD:-/usr/sbin/imexguard}" prolog', prolog, 1, true)
    assert.matches("imexguard=${IMEXGUARD:-/usr/sbin/imexguard}", health, 1, true)
    assert.matches('IMEXGUARD_BIN="${IMEXGUARD_BIN:-/usr/sbin/imexguard}"', nhc, 1, true)
    assert.matches("the Debian package has them under /usr/libexec/imexguard/", snippet, 1, true)
  end)

  it("debian/copyright is machine-readable (DEP-5) and licenses every file under Apache-2.0", function()
    local dir = H.tmpdir()
    assert(ok("dpkg-deb -x " .. q(deb) .. " " .. q(dir)))
    local text = H.read(dir .. "/usr/share/doc/imexguard/copyright")
    H.rmdir(dir)
    -- deb822 paragraphs: "Field: value" lines, continuation lines start with a space, a blank line
    -- ends a paragraph (copyright-format 1.0)
    local paras, cur, last = {}, nil, nil
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      if line:match("^%s*$") then
        cur, last = nil, nil
      elseif line:match("^ ") then
        assert(cur and last, "a continuation line outside a field: " .. line)
        cur[last] = cur[last] .. "\n" .. line:sub(2)
      else
        local k, v = line:match("^([%w-]+):%s*(.-)%s*$")
        assert(k, "not a field: " .. line)
        if not cur then
          cur = {}
          paras[#paras + 1] = cur
        end
        assert(cur[k] == nil, "field " .. k .. " twice in one paragraph")
        cur[k], last = v, k
      end
    end
    assert.equal("https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/", paras[1].Format)
    assert.equal("imexguard", paras[1]["Upstream-Name"])
    local files, licenses = {}, {}
    for i = 2, #paras do
      local p = paras[i]
      if p.Files then
        assert.truthy(p.Copyright and p.Copyright ~= "", "a Files paragraph without Copyright")
        assert.truthy(p.License, "a Files paragraph without License")
        files[#files + 1] = p
      else
        local name, body = p.License:match("^([^\n]+)\n(.+)$")
        assert.truthy(name, "a stand-alone License paragraph without its text")
        licenses[name] = body
      end
    end
    assert.equal("*", files[1].Files)
    for _, p in ipairs(files) do
      assert.equal("Apache-2.0", p.License) -- a short name: its text is a License paragraph
    end
    assert.matches("/usr/share/common-licenses/Apache-2.0", licenses["Apache-2.0"], 1, true)
    assert.matches("Licensed under the Apache License, Version 2.0", licenses["Apache-2.0"], 1, true)
    -- the source tree carries the licence text itself
    assert.equal(H.read("/usr/share/common-licenses/Apache-2.0"), H.read("LICENSE"))
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
    -- the installed bash completion completes the installed binary's commands and settings
    local comp = H.sh([[bash -c '. /usr/share/bash-completion/completions/imexguard
      t() { COMP_LINE="$1"; COMP_POINT=${#1}; _imexguard; echo "${COMPREPLY[*]}"; }
      t "imexguard he"; t "imexguard --set drain_r"; t "imexguard --set log_level=e"
      complete -p imexguard']])
    assert.equal("health\ndrain_reason=\nerr\ncomplete -F _imexguard imexguard", comp)
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
