-- SPDX-License-Identifier: Apache-2.0
-- Trust (src/trust.c ig_read_trusted): running as root, imexguard refuses a
-- settings file, policy or --lua-dir module that a user other than root could change: the file
-- owned by another uid or writable by group/others, or any directory on its way from "/" writable
-- by someone else (a root-owned sticky directory such as /tmp excepted). The refusal is the outcome
-- policy-error (exit 3) with a one-line message naming the file, and nothing of it runs.
-- These specs need root (they chown to nobody): they fail, never pend, when not run as root.
-- Everything happens in a root-owned 0700 temp dir under /tmp; run the BUILT binary.
local H = require("helpers")
local final, q = H.final, H.q

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok == true, "command failed: " .. cmd)
end

-- Run the binary (env -i, SLURM_JOB_ID=7); {code, stdout, stderr}. `prefix` runs it through e.g. setpriv,
-- `bin` replaces the built binary's path.
local function run(dir, args, prefix, bin)
  return H.run_imexguard(args, { dir = dir, env = { SLURM_JOB_ID = "7" }, prefix = prefix, bin = bin })
end

local POLICY = "local P = {}\nfunction P.prolog() print('POLICY RAN') return 'ok', 'policy ran' end\n"
  .. "P.epilog = P.prolog\nreturn P\n"

describe("trust of files loaded as root", function()
  local top -- root-owned 0700 dir under /tmp (root-owned sticky 1777)
  local n = 0

  setup(function()
    assert.equal("0", H.sh("id -u"), "the trust specs must run as root (they are never skipped)")
    H.imexguard_bin()
    top = H.tmpdir()
    sh("chmod 0700 " .. q(top))
    H.write(top .. "/empty.conf", "")
  end)

  teardown(function() H.rmdir(top) end)

  -- A fresh root-owned 0755 directory under top.
  local function newdir(mode, owner)
    n = n + 1
    local d = string.format("%s/d%d", top, n)
    sh(string.format("mkdir -m %s %s", mode or "0755", q(d)))
    if owner then sh("chown " .. owner .. " " .. q(d)) end
    return d
  end

  -- The policy at `path` is refused: exit 3, policy-error naming `path` and `want`, it did not run.
  local function refused_policy(path, want)
    for _, args in ipairs({ { "--config", top .. "/empty.conf", "--policy", path, "prolog" },
      { "--config", top .. "/empty.conf", "check", path } }) do
      local r = run(top, args)
      assert.equal(3, r.code, r.stderr)
      local f = final(r)
      assert.equal("policy-error", f.outcome)
      assert.equal("refusing policy " .. path .. ": " .. want, f.message)
      assert.not_matches("POLICY RAN", r.stderr)
      -- check is a command a person runs: its result is printed once, on stdout (issue 32 item 9)
      assert.equal(args[#args - 1] == "check" and ("imexguard: policy-error: " .. f.message .. "\n") or "",
        r.stdout)
    end
  end

  local function accepted_policy(path)
    local r = run(top, { "--config", top .. "/empty.conf", "--policy", path, "prolog" })
    assert.equal(0, r.code, r.stderr)
    assert.equal("policy ran", final(r).message)
  end

  describe("the policy file", function()
    it("root-owned 0644 in root-owned directories is accepted (control)", function()
      local d = newdir()
      H.write(d .. "/p.lua", POLICY)
      accepted_policy(d .. "/p.lua")
    end)

    it("group-writable (g+w) is refused", function()
      local d = newdir()
      H.write(d .. "/p.lua", POLICY)
      sh("chmod g+w " .. q(d .. "/p.lua"))
      refused_policy(d .. "/p.lua", "writable by group or others (mode 0664)")
    end)

    it("writable by others (o+w) is refused", function()
      local d = newdir()
      H.write(d .. "/p.lua", POLICY)
      sh("chmod o+w " .. q(d .. "/p.lua"))
      refused_policy(d .. "/p.lua", "writable by group or others (mode 0646)")
    end)

    it("owned by a non-root user (chown nobody), even 0444, is refused", function()
      local d = newdir()
      H.write(d .. "/p.lua", POLICY)
      sh("chmod 0444 " .. q(d .. "/p.lua") .. " && chown nobody " .. q(d .. "/p.lua"))
      refused_policy(d .. "/p.lua", "owned by uid 65534, not root")
    end)
  end)

  describe("the directories above it", function()
    it("a parent directory writable by others (o+w, no sticky bit) is refused", function()
      local d = newdir("0757")
      H.write(d .. "/p.lua", POLICY)
      refused_policy(d .. "/p.lua", "directory " .. d .. " is writable by group or others (mode 0757)")
    end)

    it("a group-writable directory two levels up is refused", function()
      local d = newdir("0775")
      sh("mkdir -m 0755 " .. q(d .. "/sub"))
      H.write(d .. "/sub/p.lua", POLICY)
      refused_policy(d .. "/sub/p.lua", "directory " .. d .. " is writable by group or others (mode 0775)")
    end)

    it("a parent directory owned by a non-root user is refused", function()
      local d = newdir("0755", "nobody")
      H.write(d .. "/p.lua", POLICY)
      refused_policy(d .. "/p.lua", "directory " .. d .. " is owned by uid 65534, not root")
    end)

    it("a root-owned sticky directory writable by all (like /tmp) is accepted", function()
      local d = newdir("1777")
      H.write(d .. "/p.lua", POLICY)
      accepted_policy(d .. "/p.lua")
    end)

    it("a sticky directory writable by all but owned by a non-root user is refused", function()
      local d = newdir("1777", "nobody")
      H.write(d .. "/p.lua", POLICY)
      refused_policy(d .. "/p.lua", "directory " .. d .. " is owned by uid 65534, not root")
    end)
  end)

  describe("symlinks and hard links", function()
    it("a symlink in a root directory pointing into a user-writable directory is refused", function()
      local safe, open = newdir(), newdir("0777")
      H.write(open .. "/p.lua", POLICY)
      sh("ln -s " .. q(open .. "/p.lua") .. " " .. q(safe .. "/link.lua"))
      refused_policy(safe .. "/link.lua", "directory " .. open
        .. " is writable by group or others (mode 0777)")
    end)

    it("a symlink in a root directory pointing to a file owned by a user is refused", function()
      local safe, other = newdir(), newdir()
      H.write(other .. "/p.lua", POLICY)
      sh("chown nobody " .. q(other .. "/p.lua"))
      sh("ln -s " .. q(other .. "/p.lua") .. " " .. q(safe .. "/link.lua"))
      refused_policy(safe .. "/link.lua", "owned by uid 65534, not root")
    end)

    it("a symlinked directory that resolves to a user's directory is refused", function()
      local safe, users = newdir(), newdir("0755", "nobody")
      H.write(users .. "/p.lua", POLICY)
      sh("ln -s " .. q(users) .. " " .. q(safe .. "/dirlink"))
      refused_policy(safe .. "/dirlink/p.lua", "directory " .. users .. " is owned by uid 65534, not root")
    end)

    it("a relative symlink is resolved like an absolute one", function()
      local safe = newdir()
      local open = safe .. "/open"
      sh("mkdir -m 0777 " .. q(open))
      H.write(open .. "/p.lua", POLICY)
      sh("ln -s open/p.lua " .. q(safe .. "/rel.lua"))
      refused_policy(safe .. "/rel.lua", "directory " .. open
        .. " is writable by group or others (mode 0777)")
    end)

    it("a hard link of a root file placed in a user's directory is refused", function()
      local safe, users = newdir(), newdir("0755", "nobody")
      H.write(safe .. "/p.lua", POLICY)
      sh("ln " .. q(safe .. "/p.lua") .. " " .. q(users .. "/hard.lua"))
      refused_policy(users .. "/hard.lua", "directory " .. users .. " is owned by uid 65534, not root")
    end)

    -- The directory that holds a symlink decides where the link points: a user who can write it
    -- can point the link at another root-owned file (an older policy, an example that stops IMEX).
    it("a symlink kept in a user's directory is refused even when it points to a root file", function()
      local safe, users = newdir(), newdir("0755", "nobody")
      H.write(safe .. "/p.lua", POLICY)
      sh("ln -s " .. q(safe .. "/p.lua") .. " " .. q(users .. "/link.lua"))
      refused_policy(users .. "/link.lua", "directory " .. users .. " is owned by uid 65534, not root")
    end)

    it("a chain of symlinks through a user-writable directory is refused", function()
      local safe, open = newdir(), newdir("0777")
      H.write(safe .. "/p.lua", POLICY)
      sh("ln -s " .. q(safe .. "/p.lua") .. " " .. q(open .. "/hop.lua"))
      sh("ln -s " .. q(open .. "/hop.lua") .. " " .. q(safe .. "/start.lua"))
      refused_policy(safe .. "/start.lua", "directory " .. open
        .. " is writable by group or others (mode 0777)")
    end)
  end)

  describe("the settings file and modules", function()
    it("a settings file writable by others is refused, naming it; the policy does not run", function()
      local d = newdir()
      H.write(d .. "/p.lua", POLICY)
      H.write(d .. "/ig.conf", "deadline = 30\n")
      sh("chmod o+w " .. q(d .. "/ig.conf"))
      local r = run(top, { "--config", d .. "/ig.conf", "--policy", d .. "/p.lua", "prolog" })
      assert.equal(18, r.code) -- settings-error
      assert.equal("refusing settings file " .. d .. "/ig.conf: writable by group or others (mode 0646)",
        final(r).message)
      assert.not_matches("POLICY RAN", r.stderr)
    end)

    it("a settings file in a user's directory is refused", function()
      local d = newdir("0755", "nobody")
      H.write(d .. "/ig.conf", "deadline = 30\n")
      local r = run(top, { "--config", d .. "/ig.conf", "check", top .. "/empty.conf" })
      assert.equal(18, r.code) -- settings-error
      assert.equal("refusing settings file " .. d .. "/ig.conf: directory " .. d
        .. " is owned by uid 65534, not root", final(r).message)
    end)

    it("the policy named by the settings file is checked too", function()
      local open = newdir("0777")
      H.write(open .. "/p.lua", POLICY)
      local d = newdir()
      H.write(d .. "/ig.conf", string.format("policy = %q\n", open .. "/p.lua"))
      local r = run(top, { "--config", d .. "/ig.conf", "prolog" })
      assert.equal(3, r.code)
      assert.equal("refusing policy " .. open .. "/p.lua: directory " .. open
        .. " is writable by group or others (mode 0777)", final(r).message)
    end)

    it("a --lua-dir module in a user-writable directory is refused", function()
      local d = newdir()
      sh("mkdir -m 0777 " .. q(d .. "/imexguard"))
      H.write(d .. "/imexguard/extra.lua", "return { x = 'loaded' }\n")
      local p = newdir()
      H.write(p .. "/p.lua", "local P = {}\n"
        .. "function P.prolog() return 'ok', require('imexguard.extra').x end\n"
        .. "P.epilog = P.prolog\nreturn P\n")
      local r = run(top, { "--config", top .. "/empty.conf", "--lua-dir", d, "--policy", p .. "/p.lua",
        "prolog" })
      assert.equal(3, r.code)
      assert.matches("refusing module " .. d:gsub("%p", "%%%0") .. "/imexguard/extra%.lua: directory "
        .. d:gsub("%p", "%%%0") .. "/imexguard is writable by group or others %(mode 0777%)",
        final(r).message)
    end)
  end)

  describe("not as root", function()
    it("a user checking a policy of their own is not refused (the rule guards root's runs)", function()
      local d = newdir("0755", "nobody")
      H.write(d .. "/p.lua", "return (require('policies.default'))\n")
      H.write(d .. "/ig.conf", "")
      sh("chown nobody " .. q(d .. "/p.lua") .. " " .. q(d .. "/ig.conf") .. " && chmod 0711 " .. q(top))
      -- The clone may live where nobody cannot reach (e.g. /root, mode 0700 on Debian): run a copy of
      -- the binary from a fresh 0755 directory instead (the binary needs nothing beside it).
      local bindir = newdir("0755")
      sh("cp " .. q(H.imexguard_bin()) .. " " .. q(bindir .. "/imexguard") .. " && chmod 0755 "
        .. q(bindir .. "/imexguard"))
      local r = run(d, { "--config", d .. "/ig.conf", "check", d .. "/p.lua" },
        "setpriv --reuid=65534 --regid=65534 --clear-groups", bindir .. "/imexguard")
      sh("chmod 0700 " .. q(top))
      assert.equal(0, r.code, r.stderr)
      assert.matches("is valid", final(r).message)
    end)
  end)
end)
