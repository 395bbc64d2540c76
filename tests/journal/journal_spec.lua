-- SPDX-License-Identifier: Apache-2.0
-- The journal entries of src/log.c, read back from a real systemd-journald: the final entry of a
-- run of the built binary (SYSLOG_IDENTIFIER, PRIORITY, MESSAGE, IMEXGUARD_OUTCOME,
-- IMEXGUARD_JOB_ID, IMEXGUARD_COMMAND), host.log's IMEXGUARD_<KEY> fields, the off switches, and
-- that no input forges an entry or a field.  Runs under tests/journal/with-journald (a private
-- journald in a private mount namespace; IMEXGUARD_TEST_JOURNAL_DIR names its journal directory).
local H = require("helpers")
local cjson = require("cjson")

local JDIR = os.getenv("IMEXGUARD_TEST_JOURNAL_DIR")
local JPID = os.getenv("IMEXGUARD_TEST_JOURNALD_PID")

--- A journalctl -o json value as a list of strings: a field sent once is a string, or an array
-- of byte values when it holds control characters or invalid UTF-8; a field sent several times
-- is an array of those.
-- @param v string|table the decoded JSON value
-- @return table list of strings
local function values(v)
  if type(v) == "string" then return { v } end
  if type(v[1]) == "number" then
    local chars = {}
    for i, b in ipairs(v) do chars[i] = string.char(b) end
    return { table.concat(chars) }
  end
  local out = {}
  for _, x in ipairs(v) do out[#out + 1] = values(x)[1] end
  return out
end

--- Every entry of the private journal, in order, each a table FIELD = list of strings.
-- @return table list of entries
local function entries()
  local p = assert(io.popen("journalctl --directory=" .. H.q(JDIR) .. " -o json --no-pager -q 2>/dev/null"))
  local list = {}
  for line in p:lines() do
    local e = {}
    for k, v in pairs(cjson.decode(line)) do e[k] = values(v) end
    list[#list + 1] = e
  end
  p:close()
  return list
end

local serial = 0
--- A string no other run of this spec produces.
local function unique(what)
  serial = serial + 1
  return string.format("imexguard-journal-test-%s-%d-%d-%d", what, H.mypid(), os.time(), serial)
end

--- Send one marker entry through the native socket (the same datagram queue as
-- sd_journal_sendv, so journald stores it after every entry sent before it).
local function marker(text)
  assert(H.sh(string.format("printf 'MESSAGE=%%s\\nSYSLOG_IDENTIFIER=imexguard-test-marker\\n' %s "
    .. "| logger --journald && echo sent", H.q(text))) == "sent", "logger --journald failed")
end

local function index_of(list, text)
  for i, e in ipairs(list) do
    if e.MESSAGE and e.MESSAGE[1] == text then return i end
  end
end

--- The entries that `fn` sent: those between a begin and an end marker, journald's own
-- (its PID) left out.  Waits (deadline 10 s) for the end marker to be stored.
-- @param fn function run between the markers
-- @return table list of entries, as entries() gives them
local function journal_of(fn)
  local tag = unique("window")
  marker(tag .. " begin")
  fn()
  marker(tag .. " end")
  local list = H.wait_until(function()
    local l = entries()
    return index_of(l, tag .. " end") and l
  end, 10, 0.02)
  assert(list, "the end marker never reached the private journal " .. JDIR)
  local out = {}
  for i = assert(index_of(list, tag .. " begin")) + 1, index_of(list, tag .. " end") - 1 do
    if not (list[i]._PID and list[i]._PID[1] == JPID) then out[#out + 1] = list[i] end
  end
  return out
end

--- The fields of an entry whose name starts with IMEXGUARD_, sorted.
local function imexguard_fields(e)
  local names = {}
  for k in pairs(e) do
    if k:match("^IMEXGUARD_") then names[#names + 1] = k end
  end
  table.sort(names)
  return names
end

describe("the journal (a private systemd-journald)", function()
  local dir, conf

  setup(function()
    assert(JDIR and JPID, "run under tests/journal/with-journald")
    H.imexguard_bin()
    dir = H.tmpdir()
    conf = dir .. "/imexguard.conf"
    H.write(conf, string.format("state_dir = %q\n", dir .. "/state"))
  end)

  teardown(function() H.rmdir(dir) end)

  -- Run the binary with the journal on (IMEXGUARD_NO_JOURNAL=0 overrides run_imexguard's 1).
  local function run(args, env)
    local e = { IMEXGUARD_NO_JOURNAL = "0" }
    for k, v in pairs(env or {}) do e[k] = v end
    local r
    local got = journal_of(function() r = H.run_imexguard(args, { dir = dir, env = e }) end)
    return r, got
  end

  -- The one entry of a run (there must be exactly one), checked against its final stderr line.
  local function final_entry(r, got, command, outcome, job, priority)
    assert.equal(1, #got, "entries of the run: " .. cjson.encode(got))
    local e = got[1]
    local f = H.final(r)
    assert.same({ "imexguard" }, e.SYSLOG_IDENTIFIER)
    assert.same({ priority }, e.PRIORITY)
    assert.same({ string.format("%s job=%s outcome=%s: %s", command, job, outcome, f.message) }, e.MESSAGE)
    assert.same({ "IMEXGUARD_COMMAND", "IMEXGUARD_JOB_ID", "IMEXGUARD_OUTCOME" }, imexguard_fields(e))
    assert.same({ outcome }, e.IMEXGUARD_OUTCOME)
    assert.same({ job }, e.IMEXGUARD_JOB_ID)
    assert.same({ command }, e.IMEXGUARD_COMMAND)
    return e
  end

  it("an epilog that ends ok: one entry at notice (5) with outcome, job id and command", function()
    local r, got = run({ "--config", conf, "epilog" },
      { SLURM_JOB_ID = "4242", SLURMD_NODENAME = "n1", SLURM_JOB_NODELIST = "n1" })
    assert.equal(0, r.code)
    final_entry(r, got, "epilog", "ok", "4242", "5")
    assert.matches("job 4242 was not registered on node n1", got[1].MESSAGE[1], 1, true)
  end)

  it("a prolog that ends bad-input: one entry at err (3)", function()
    local r, got = run({ "--config", conf, "prolog" },
      { SLURM_JOB_ID = "12x", SLURMD_NODENAME = "n1", SLURM_JOB_NODELIST = "n1" })
    assert.equal(2, r.code)
    final_entry(r, got, "prolog", "bad-input", "12x", "3")
    assert.matches('SLURM_JOB_ID="12x" is not a Slurm job id', got[1].MESSAGE[1], 1, true)
  end)

  -- The one entry of a run of a command a person runs (commands.lua's interactive): its result is
  -- on stdout, its final line in the journal and NOT on stderr (issue 32 item 9: printed once).
  local function interactive_entry(r, got, command, outcome, priority)
    assert.equal(1, #got, "entries of the run: " .. cjson.encode(got))
    assert.not_matches("outcome=", r.stderr, 1, true)
    assert.matches("^" .. command:gsub("%-", "%%-") .. " job=%- outcome=" .. outcome:gsub("%-", "%%-"),
      got[1].MESSAGE[1])
    assert.same({ priority }, got[1].PRIORITY)
    assert.same({ command }, got[1].IMEXGUARD_COMMAND)
    assert.not_equal("", r.stdout)
    return got[1]
  end

  it("check of a shipped policy: its report on stdout, one entry at notice, job id '-'", function()
    local r, got = run({ "--config", conf, "check", "policies/shared_nodes.lua" })
    assert.equal(0, r.code)
    interactive_entry(r, got, "check", "ok", "5")
  end)

  it("item 9: status -q, -T and -t print their result once (stdout); the final line is the journal's",
    function()
      local nobus = "bus=unix:path=" .. dir .. "/no-bus"
      local r, got = run({ "--config", conf, "--set", nobus, "--set", "ctl=" .. dir .. "/no-ctl", "status",
        "-q" })
      assert.not_equal(0, r.code)
      interactive_entry(r, got, "status", r.stdout:match("^([%w-]+):"), "3")
      assert.equal(1, select(2, r.stdout:gsub("\n", "")), r.stdout) -- one line, for pdsh | dshbak
      r, got = run({ "--config", conf, "-T" })
      assert.equal(0, r.code)
      interactive_entry(r, got, "show-config", "ok", "5")
      r, got = run({ "--config", conf, "--set", nobus, "-t" })
      interactive_entry(r, got, "config-test", r.code == 0 and "ok" or "[%w-]+", r.code == 0 and "5" or "3")
      -- the journal off: the stderr line is the record of last resort
      r = H.run_imexguard({ "--config", conf, "-T" }, { dir = dir })
      assert.equal("show-config", H.final(r).command)
    end)

  it("a job id with newlines forges neither a second entry nor a field", function()
    local forged = "101\nIMEXGUARD_OUTCOME=ok\nPRIORITY=6\nMESSAGE=forged"
    local r, got = run({ "--config", conf, "prolog" },
      { SLURM_JOB_ID = forged, SLURMD_NODENAME = "n1", SLURM_JOB_NODELIST = "n1" })
    assert.equal(2, r.code)
    -- the job label keeps [A-Za-z0-9_.-] only; the message shows the raw id escaped
    local e = final_entry(r, got, "prolog", "bad-input", "101_IMEXGUARD_OUTCOME_ok_PRIORITY_6_MESSAGE_forged",
      "3")
    assert.not_matches("\n", e.MESSAGE[1], 1, true)
    assert.matches([[101\010IMEXGUARD_OUTCOME=ok\010]], e.MESSAGE[1], 1, true)
  end)

  it("host.log: IMEXGUARD_<KEY> fields, values kept whole, the level as PRIORITY", function()
    local long = string.rep("k", 70)
    local got = journal_of(function()
      local cmd = H.lua_cmd(dir, "hostlog", string.format([[
        local h = require("imexguard.host")
        h.log("warning", "node list\nchanged", { job = "101", ["node-name"] = "n1", ok = true,
          count = 2, ratio = 0.5, ["caf\195\169"] = "x", [%q] = "long",
          note = "a\nIMEXGUARD_FORGED=1\nMESSAGE=forged" })
        h.log("debug", "quiet")
        h.log("info", "no fields")
      ]], long))
      assert.equal("", H.sh("env -u IMEXGUARD_NO_JOURNAL " .. cmd .. " 2>/dev/null"))
    end)
    assert.equal(3, #got, cjson.encode(got))
    local e = got[1]
    assert.same({ "imexguard" }, e.SYSLOG_IDENTIFIER)
    assert.same({ "4" }, e.PRIORITY)
    assert.same({ "node list\nchanged" }, e.MESSAGE) -- newlines become spaces on stderr only
    -- a long key is cut so that the field name stays below journald's limit of 64 characters
    local cut = "IMEXGUARD_" .. string.rep("K", 63 - #"IMEXGUARD_")
    assert.same({ "IMEXGUARD_CAF__", "IMEXGUARD_COUNT", "IMEXGUARD_JOB", cut, "IMEXGUARD_NODE_NAME",
      "IMEXGUARD_NOTE", "IMEXGUARD_OK", "IMEXGUARD_RATIO" }, imexguard_fields(e))
    assert.same({ "101" }, e.IMEXGUARD_JOB)
    assert.same({ "n1" }, e.IMEXGUARD_NODE_NAME)
    assert.same({ "true" }, e.IMEXGUARD_OK)
    assert.same({ "2" }, e.IMEXGUARD_COUNT)
    assert.same({ "0.5" }, e.IMEXGUARD_RATIO)
    assert.same({ "x" }, e.IMEXGUARD_CAF__)
    assert.same({ "long" }, e[cut])
    assert.same({ "a\nIMEXGUARD_FORGED=1\nMESSAGE=forged" }, e.IMEXGUARD_NOTE)
    -- debug reaches the journal (log_level filters stderr only)
    assert.same({ "7" }, got[2].PRIORITY)
    assert.same({ "quiet" }, got[2].MESSAGE)
    assert.same({ "6" }, got[3].PRIORITY)
    assert.same({}, imexguard_fields(got[3]))
  end)

  -- Start `imexguard prolog` on a policy whose prolog logs "ready" and then runs `body`; returns
  -- the shell's pid, the stderr log and the file that gets the exit status, once "ready" is logged.
  local function start_prolog(body, args, no_journal)
    local path, log, rc = dir .. "/slow.lua", dir .. "/slow.log", dir .. "/slow.rc"
    os.remove(log)
    os.remove(rc)
    H.write(path, "local P = {}\nfunction P.prolog(ctx) ctx.host.log('notice', 'ready') " .. body
      .. " end\nfunction P.epilog() return 'ok' end\nreturn P\n")
    local sh = H.spawn(string.format("sh -c '%s %s --config %s --policy %s %s prolog 2>%s; echo $? >%s'",
      "env IMEXGUARD_NO_JOURNAL=" .. (no_journal or "0") .. " SLURM_JOB_ID=4245 SLURMD_NODENAME=n1 "
        .. "SLURM_JOB_NODELIST=n1",
      H.imexguard_bin(), conf, path, args or "", log, rc))
    assert.truthy(H.wait_until(function() return (H.read(log) or ""):find("ready", 1, true) end, 10),
      H.read(log))
    return sh, log, rc
  end

  -- The run's entries: "ready", then exactly one with an outcome, deadline-exceeded, matching the
  -- last stderr line.
  local function ended_by(got, log, what)
    local last = H.read(log):match("([^\n]*)\n?$")
    assert.matches("^imexguard: err: prolog job=4245 outcome=deadline%-exceeded: " .. what, last)
    assert.equal(2, #got, "entries of the run: " .. cjson.encode(got))
    assert.same({ "ready" }, got[1].MESSAGE)
    final_entry({ stderr = last }, { got[2] }, "prolog", "deadline-exceeded", "4245", "3")
  end

  -- Start a prolog that sleeps 30 s, stop it with SIGTERM; returns its entries, log and rc file.
  local function terminated(no_journal)
    local sh, log, rc
    local got = journal_of(function()
      sh, log, rc = start_prolog("ctx.host.sleep(30) return 'ok', 'slept'", nil, no_journal)
      -- the shell's child (read from /proc: procps tools hang under the ASan tier's LD_PRELOAD)
      local child = tonumber((H.read(string.format("/proc/%d/task/%d/children", sh, sh)) or ""):match("%d+"))
      assert.truthy(child, "the imexguard process")
      H.kill(child, "TERM")
      assert.truthy(H.wait_until(function() return H.read(rc) end, 10), "imexguard did not end")
    end)
    H.kill_wait(sh)
    assert.equal("10", (H.read(rc):gsub("%s", "")))
    return got, log
  end

  it("a prolog stopped by SIGTERM (Slurm's PrologEpilogTimeout): one entry, deadline-exceeded", function()
    local got, log = terminated()
    ended_by(got, log, "terminated by a signal")
  end)

  it("a prolog stopped by SIGTERM with IMEXGUARD_NO_JOURNAL=1 sends nothing", function()
    local got, log = terminated("1")
    assert.same({}, got)
    assert.matches("outcome=deadline%-exceeded: terminated by a signal", H.read(log))
  end)

  it("a prolog ended by the watchdog (stuck in a C call): one entry, deadline-exceeded", function()
    local sh, log, rc
    local got = journal_of(function()
      sh, log, rc = start_prolog("string.rep('a', 200000):find('.-.-.-b') return 'ok', 'finished?'",
        "--deadline 0.3")
      assert.truthy(H.wait_until(function() return H.read(rc) end, 20), "imexguard did not end")
    end)
    H.kill_wait(sh)
    assert.equal("10", (H.read(rc):gsub("%s", "")))
    ended_by(got, log, "watchdog:")
  end)

  it("IMEXGUARD_NO_JOURNAL=1 and log_journal = false send nothing", function()
    local env = { SLURM_JOB_ID = "4244", SLURMD_NODENAME = "n1", SLURM_JOB_NODELIST = "n1" }
    local r, got = run({ "--config", conf, "--set", "log_journal=false", "epilog" }, env)
    assert.equal(0, r.code)
    assert.equal("ok", H.final(r).outcome)
    assert.same({}, got)
    env.IMEXGUARD_NO_JOURNAL = "1"
    r, got = run({ "--config", conf, "epilog" }, env)
    assert.equal(0, r.code)
    assert.same({}, got)
  end)

  it("is private: its entries never reach the machine's journal", function()
    local text = unique("isolation")
    local got = journal_of(function() marker(text) end)
    assert.same({ { text } }, { got[1].MESSAGE })
    -- the machine's root, opened by the harness before unshare: another /run/log and another
    -- socket, and the machine's journal files (if any, whether or not its journald runs) do not
    -- hold the marker, which journalctl --root finds in the private ones
    local host = assert(os.getenv("IMEXGUARD_TEST_HOST_ROOT"), "run under tests/journal/with-journald")
    assert.not_equal(H.sh("stat -c %d /run/log"), H.sh("stat -c %d " .. host .. "/run/log"))
    assert.not_equal(H.sh("stat -L -c %d:%i /run/systemd/journal/socket"),
      H.sh("stat -L -c %d:%i " .. host .. "/run/systemd/journal/socket 2>/dev/null"))
    local function count(root)
      return H.sh("journalctl --root=" .. H.q(root) .. " -q -o export --no-pager 2>/dev/null | grep -c -F "
        .. H.q(text))
    end
    assert.equal("1", count("/"))
    assert.equal("0", count(host))
  end)
end)
