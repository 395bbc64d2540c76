-- SPDX-License-Identifier: Apache-2.0
-- host.journal_read (src/journal.c, sd-journal) against a real systemd-journald: entries sent through
-- the native socket (logger --journald, the protocol of sd_journal_sendv) with fields of this spec
-- are read back by match, newest kept, oldest first, bounded by since_us, max_entries, max_bytes,
-- the timeout and the run's deadline.  Runs under tests/journal/with-journald (a private journald
-- in a private mount namespace: the machine's journal is neither read nor written).
local H = require("helpers")

local JDIR = os.getenv("IMEXGUARD_TEST_JOURNAL_DIR")

local serial = 0
-- A tag no other run of this spec uses: the value of the field IMEXGUARD_TEST_TAG of its entries.
local function unique()
  serial = serial + 1
  return string.format("jr-%d-%d-%d", H.mypid(), os.time(), serial)
end

-- Send one entry with these fields (a table FIELD = value; MESSAGE may hold newlines).
local function send(fields)
  local lines = {}
  for k, v in pairs(fields) do lines[#lines + 1] = k .. "=" .. v end
  table.sort(lines)
  local text = table.concat(lines, "\n") .. "\n"
  assert(not text:find("\n[^=\n]*\n"), "a value holds a newline: the text protocol cannot send it")
  -- without LD_PRELOAD: logger is not under test, and with ASan preloaded (this spec run against
  -- the sanitized module) it hangs
  local p = assert(io.popen("env -u LD_PRELOAD logger --journald", "w"))
  p:write(text)
  assert(p:close(), "logger --journald failed")
end

describe("host.journal_read (a private systemd-journald)", function()
  local host

  setup(function()
    assert(JDIR, "run under tests/journal/with-journald")
    host = H.host()
  end)

  after_each(function() host.set_deadline(0) end)

  -- Wait (deadline 10 s) until journal_read(matches, opts) returns n entries; returns them.
  local function read_n(matches, n, opts)
    local got
    local ok = H.wait_until(function()
      got = assert(host.journal_read(matches, opts))
      return #got == n
    end, 10, 0.02)
    assert(ok, string.format("expected %d entries, got %d", n, got and #got or -1))
    return got
  end

  it("the newest max_entries entries of a match, oldest first, with message, priority, pid and "
    .. "identifier", function()
    local tag = unique()
    for i = 1, 5 do
      send({ IMEXGUARD_TEST_TAG = tag, MESSAGE = "line " .. i, PRIORITY = i == 4 and "3" or "6",
        SYSLOG_IDENTIFIER = "nvidia-imex" })
    end
    local all = read_n({ "IMEXGUARD_TEST_TAG=" .. tag }, 5)
    for i, e in ipairs(all) do
      assert.equal("line " .. i, e.message)
      assert.equal("nvidia-imex", e.identifier)
      assert.is_true(math.type(e.pid) == "integer" and e.pid > 0)
      assert.is_true(math.type(e.realtime_us) == "integer")
      if i > 1 then assert.is_true(e.realtime_us >= all[i - 1].realtime_us) end
    end
    assert.same({ 6, 6, 6, 3, 6 }, { all[1].priority, all[2].priority, all[3].priority, all[4].priority,
      all[5].priority })
    local last2 = assert(host.journal_read({ "IMEXGUARD_TEST_TAG=" .. tag }, { max_entries = 2 }))
    assert.same({ "line 4", "line 5" }, { last2[1].message, last2[2].message })
  end)

  it("since_us leaves out older entries", function()
    local tag = unique()
    send({ IMEXGUARD_TEST_TAG = tag, MESSAGE = "before" })
    local first = read_n({ "IMEXGUARD_TEST_TAG=" .. tag }, 1)[1]
    local since = first.realtime_us + 1
    -- the next entry is stored at least a microsecond later
    assert(H.wait_until(function() return host.wallclock() * 1e6 > since + 1000 end, 2, 0.001))
    send({ IMEXGUARD_TEST_TAG = tag, MESSAGE = "after" })
    read_n({ "IMEXGUARD_TEST_TAG=" .. tag }, 2)
    local got = assert(host.journal_read({ "IMEXGUARD_TEST_TAG=" .. tag }, { since_us = since }))
    assert.equal(1, #got)
    assert.equal("after", got[1].message)
    assert.same({}, assert(host.journal_read({ "IMEXGUARD_TEST_TAG=" .. tag },
      { since_us = math.floor(host.wallclock() * 1e6) + 60 * 1000000 })))
  end)

  it("two values of one field are OR'ed, different fields AND'ed; nothing matching is {}", function()
    local a, b = unique(), unique()
    send({ IMEXGUARD_TEST_TAG = a, IMEXGUARD_TEST_KIND = "x", MESSAGE = "a-x" })
    send({ IMEXGUARD_TEST_TAG = a, IMEXGUARD_TEST_KIND = "y", MESSAGE = "a-y" })
    send({ IMEXGUARD_TEST_TAG = b, IMEXGUARD_TEST_KIND = "x", MESSAGE = "b-x" })
    read_n({ "IMEXGUARD_TEST_TAG=" .. a, "IMEXGUARD_TEST_TAG=" .. b }, 3)
    local got = assert(host.journal_read({ "IMEXGUARD_TEST_TAG=" .. a, "IMEXGUARD_TEST_KIND=x" }))
    assert.equal(1, #got)
    assert.equal("a-x", got[1].message)
    assert.same({}, assert(host.journal_read({ "IMEXGUARD_TEST_TAG=" .. unique() })))
  end)

  it("max_bytes cuts a long MESSAGE; an entry without MESSAGE reads as \"\"", function()
    local tag = unique()
    send({ IMEXGUARD_TEST_TAG = tag, MESSAGE = string.rep("m", 3000) })
    send({ IMEXGUARD_TEST_TAG = tag, IMEXGUARD_TEST_KIND = "no-message" })
    local got = read_n({ "IMEXGUARD_TEST_TAG=" .. tag }, 2, { max_bytes = 200 })
    assert.equal(200, #got[1].message)
    assert.equal(string.rep("m", #got[1].message), got[1].message)
    assert.equal("", got[2].message)
    assert.equal(3000, #assert(host.journal_read({ "IMEXGUARD_TEST_TAG=" .. tag }))[1].message)
  end)

  it("bounded: timeout 0 is 'timeout', a spent budget is 'deadline', before any entry", function()
    local tag = unique()
    send({ IMEXGUARD_TEST_TAG = tag, MESSAGE = "x" })
    read_n({ "IMEXGUARD_TEST_TAG=" .. tag }, 1)
    local r, err, code = host.journal_read({ "IMEXGUARD_TEST_TAG=" .. tag }, { timeout = 0 })
    assert.is_nil(r)
    assert.equal("timeout", code)
    assert.matches("journal: not read within 0 s %(0 entries read%)", err)
    host.set_deadline(1e-9)
    r, err, code = host.journal_read({ "IMEXGUARD_TEST_TAG=" .. tag }, { timeout = 5 })
    assert.is_nil(r)
    assert.equal("deadline", code, err)
  end)

  it("misuse raises: no match, a match without '=' or with a bad field name, bad options", function()
    local bad = {
      function() host.journal_read({}) end,
      function() host.journal_read("X=1") end,
      function() host.journal_read({ "novalue" }) end,
      function() host.journal_read({ "lower=1" }) end,
      function() host.journal_read({ "1X=1" }) end,
      function() host.journal_read({ 42 }) end,
      function() host.journal_read({ "X=1" }, { max_entries = 0 }) end,
      function() host.journal_read({ "X=1" }, { max_entries = 1001 }) end,
      function() host.journal_read({ "X=1" }, { max_bytes = 10 }) end,
      function() host.journal_read({ "X=1" }, { since_us = -1 }) end,
      function() host.journal_read({ "X=1" }, { timeout = -1 }) end,
      function() host.journal_read({ "X=1" }, 5) end,
    }
    local many = {}
    for i = 1, 17 do many[i] = "X=" .. i end
    bad[#bad + 1] = function() host.journal_read(many) end
    for i, f in ipairs(bad) do
      assert.has_error(f, nil, "case " .. i)
    end
    assert.is_table(host.journal_read({ "_SYSTEMD_UNIT=x.service", "_SYSTEMD_INVOCATION_ID=00" }))
  end)
end)
