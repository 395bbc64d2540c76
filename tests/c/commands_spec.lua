-- SPDX-License-Identifier: Apache-2.0
-- lua/imexguard/commands.lua is the one source of the commands: a command added there appears in
-- --help, in the usage error's list and in imexguard(8), and the argument parser accepts it, with
-- no other edit (src/embed.lua generates the C side, man/gen.lua the man page). The spec copies
-- the sources into a temp dir, adds one command to the copy's commands.lua, builds the copy's
-- binary (-O0) and man page, and reads them.
local H = require("helpers")
local q = H.q

-- The command the spec adds: an argument, --json, a budget of its own and a help long enough to
-- be wrapped; an optional entry point that changes nothing (the spec's policy has it).
local ADDED = [[
M.list[#M.list + 1] = { name = "frobnicate", arg = "THING", json = true, entry = "optional",
  dry_run = true, deadline = 7,
  help = "a command that only this spec adds, with a help long enough to be wrapped onto two lines" }
]]

-- Run a shell command without the ASan preload of the asan tier; its exit code and its stdout +
-- stderr.
local function sh(cmd)
  local p = assert(io.popen("env -u LD_PRELOAD sh -c " .. q(cmd) .. " 2>&1; echo \"rc=$?\""))
  local out = p:read("a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  return rc, out:gsub("rc=%d+\n$", "")
end

-- Copy the sources to dir, add ADDED to the copy's commands.lua and build its binary and man page.
local function build_copy(dir)
  local rc, out = sh("cp -r src lua policies man Makefile " .. q(dir))
  assert.equal(0, rc, out)
  local path = dir .. "/lua/imexguard/commands.lua"
  local text, n = assert(H.read(path)):gsub("\n(M%.by_name = {})", "\n" .. ADDED:gsub("%%", "%%%%") .. "%1")
  assert.equal(1, n, "commands.lua has no line 'M.by_name = {}' to add the command before")
  H.write(path, text)
  rc, out = sh("make -s -j2 --no-print-directory -C " .. q(dir) .. " B=build CFLAGS=-O0 "
    .. "build/imexguard build/man/imexguard.8")
  assert.equal(0, rc, out)
end

describe("a command added to lua/imexguard/commands.lua", function()
  local dir, bin

  setup(function()
    dir = H.tmpdir()
    local ok, err = pcall(build_copy, dir)
    if not ok then
      H.rmdir(dir)
      dir = nil
      error(err, 0)
    end
    bin = dir .. "/build/imexguard"
    H.write(dir .. "/empty.conf", "")
    H.write(dir .. "/policy.lua", "local P = {}\nfunction P.prolog() return 'ok', 'prolog' end\n"
      .. "P.epilog = P.prolog\nfunction P.frobnicate() return 'ok', 'frobnicated' end\nreturn P\n")
  end)

  teardown(function() H.rmdir(dir) end)

  local function run(args)
    return H.run_imexguard(args, { dir = dir, bin = bin })
  end

  it("is in --help: its argument, [--json] and its help (with its budget), wrapped", function()
    local r = run({ "--help" })
    assert.equal(0, r.code, r.stderr)
    local list = assert(r.stdout:match("\nCommands:\n(.-)\n\n"), r.stdout)
    local help_column = string.rep(" ", 18)
    assert.matches("\n  frobnicate THING %[%-%-json%]\n" .. help_column .. "a command that only this spec",
      list)
    assert.matches("\n" .. help_column .. "[^\n]*lines; budget 7 s unless %-%-deadline$", list)
    for line in list:gmatch("[^\n]+") do
      assert.is_true(#line <= 80, line)
    end
    assert.matches("machine-readable output (status, plan, registrations, rack, check, show-config, "
      .. "frobnicate)",
      r.stdout, 1,
      true)
  end)

  it("is in the usage error's list of commands", function()
    for _, args in ipairs({ {}, { "frobnicat" } }) do
      local r = run(args)
      assert.equal(1, r.code)
      assert.matches("(prolog, epilog, watch, status, plan, health, registrations, forget, wait, rack, "
        .. "check, config-test, show-config, version, frobnicate)", r.stderr, 1, true)
    end
  end)

  it("is accepted by the argument parser, which asks for its argument", function()
    local r = run({ "frobnicate" })
    assert.equal(1, r.code)
    assert.matches("imexguard: frobnicate: missing THING\nTry 'imexguard --help'.", r.stderr, 1, true)
    r = run({ "--config", dir .. "/empty.conf", "--policy", dir .. "/policy.lua", "--deadline", "5",
      "frobnicate", "x" })
    assert.not_matches("Try 'imexguard --help'", r.stderr, 1, true)
    assert.equal("frobnicate", H.final(r).command, r.stderr) -- the run's final line: parsed and run
  end)

  it("is in imexguard(8): the synopsis and the COMMANDS section", function()
    local roff = assert(H.read(dir .. "/build/man/imexguard.8"))
    local function section(name)
      return assert(roff:match("\n%.SH " .. name .. "\n(.-)\n%.SH "), "no section " .. name)
    end
    assert.matches("\\fBfrobnicate\\fR \\fITHING\\fR [\\fB--json\\fR]", section("SYNOPSIS"), 1, true)
    local commands = section("COMMANDS")
    assert.matches("\\fBfrobnicate\\fR \\fITHING\\fR [\\fB--json\\fR]", commands, 1, true)
    assert.matches("A command that only this spec adds, with a help long enough to be wrapped onto two "
      .. "lines; budget 7 seconds unless \\fB--deadline\\fR.", commands:gsub("\n", " "), 1, true)
  end)
end)
