-- SPDX-License-Identifier: Apache-2.0
-- Specs for imexguard.state: a state file load accepts is one encode can write back.
local state = require("imexguard.state")

local SETTINGS = { state_dir = "/var/lib/imexguard" }

-- A host whose state file holds `text`.
local function host_with(text)
  local written
  return {
    read = function() return text end,
    write_atomic = function(_, bytes) written = bytes; return true end,
    written = function() return written end,
  }
end

describe("state.load", function()
  it("reads times as integers and writes them back as decimal strings", function()
    local h = host_with('{"written_us":"1733011200123456","jobs":[{"id":"7","nodes":"a\\n",'
      .. '"registered_us":1733011200000000}]}')
    local st = assert(state.load(h, SETTINGS))
    assert.equal(1733011200123456, st.written_us)
    assert.equal("integer", math.type(st.written_us))
    assert.equal("integer", math.type(st.jobs[1].registered_us))
    assert.truthy(state.save(h, SETTINGS, st))
    assert.truthy(h.written():find('"written_us":"1733011200123456"', 1, true))
    assert.truthy(h.written():find('"registered_us":"1733011200000000"', 1, true))
  end)

  it("treats a time encode cannot write back as a corrupt file, never raising later", function()
    for _, text in ipairs({
      '{"written_us":"99999999999999999999"}', -- beyond 2^63: a float
      '{"written_us":"9223372036854775808"}', -- 2^63
      '{"since_us":1e999}', '{"started_us":1e999}', '{"started_us":-1e999}',
      '{"deploying_us":-5}', '{"written_us":"-5"}', '{"written_us":"1.5"}',
      '{"jobs":[{"id":"7","nodes":"a\\n","registered_us":1e999}]}',
      '{"jobs":[{"id":"7","nodes":"a\\n","registered_us":"123456789012345678901"}]}',
    }) do
      local ok, st, err = pcall(state.load, host_with(text), SETTINGS)
      assert.is_true(ok, text .. ": " .. tostring(st))
      assert.is_nil(st, text .. " was accepted")
      assert.is_string(err)
      assert.is_nil(err:find("\n"), err)
      assert.truthy(err:find("/var/lib/imexguard/state.json", 1, true), err)
    end
  end)

  it("names a bad field of the file on one line, whatever its key holds", function()
    -- a key with a newline and a control character (found by the soak tier's fuzzing)
    local st, err = state.load(host_with('{"nodes0.0.0.2\\n\\u0008":[1],"jobs":[]}'), SETTINGS)
    assert.is_nil(st)
    assert.not_matches("[\n\r\8]", err)
    assert.matches("is not a scalar", err)
  end)

  it("keeps the largest time below 2^63", function()
    local st = assert(state.load(host_with('{"written_us":"9223372036854775807"}'), SETTINGS))
    assert.equal(math.maxinteger, st.written_us)
    assert.truthy(state.encode(st):find('"9223372036854775807"', 1, true))
  end)
end)

describe("state: the records of the prolog's steps", function()
  it("a change in progress: begun, found as interrupted, ended; saved and loaded as it was", function()
    local st = {}
    assert.is_nil(state.interrupted_job(st))
    state.begin_deployment(st, "10.0.0.1\n", "101", 1700000000000001)
    assert.equal("101", state.interrupted_job(st))
    local back = assert(state.load(host_with(state.encode(st)), SETTINGS))
    assert.same({ deploying_nodes = "10.0.0.1\n", deploying_job = "101", deploying_us = 1700000000000001 },
      back)
    state.end_deployment(back)
    assert.is_nil(state.interrupted_job(back))
    assert.same({}, back)
  end)

  it("the list written and what the daemon was started with", function()
    local st = {}
    state.record_write(st, "10.0.0.1\n", 1700000000000002, "7")
    state.record_start(st, { nodes = "10.0.0.1\n", config = "X=1\n", invocation_id = "abc",
      started_us = 1700000000000003, job = "8" })
    assert.same({ nodes = "10.0.0.1\n", written_us = 1700000000000002, job = "8",
      running_nodes = "10.0.0.1\n", running_config = "X=1\n", invocation_id = "abc",
      started_us = 1700000000000003 }, st)
    assert.same(st, assert(state.load(host_with(state.encode(st)), SETTINGS)))
  end)
end)
