-- SPDX-License-Identifier: Apache-2.0
-- Specs of the bench's own helpers: bench/timing.lua (imexguard's --timing lines) and
-- bench/stats.lua (the metrics and the JSON of build/bench.json).
package.path = "bench/?.lua;" .. package.path
local timing = require("timing")
local stats = require("stats")
local H = require("helpers")

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local SAMPLE = table.concat({
  "imexguard: outcome=ok job=301",
  "timing: lua-state 0.40 ms",
  "timing: load-driver 1.25 ms",
  "timing: invoke 9.5 ms",
  "timing: total 12.60 ms",
  "timing: host.run 8.00 ms 3 calls",
  "timing: cjson.decode 0.05 ms 1 call",
  "timing: in-lua 2.00 ms",
  "timing: bad x ms",
  "xtiming: host.unit 1 ms 2 calls",
}, "\n") .. "\n"

describe("bench timing.parse", function()
  it("reads every 'timing: NAME MS ms [N calls]' line and nothing else", function()
    local t = timing.parse(SAMPLE)
    assert.same({ ms = 0.40 }, t["lua-state"])
    assert.same({ ms = 9.5 }, t.invoke)
    assert.same({ ms = 8.0, calls = 3 }, t["host.run"])
    assert.same({ ms = 0.05, calls = 1 }, t["cjson.decode"])
    assert.is_nil(t.bad)
    assert.is_nil(t["host.unit"])
    assert.equal(3, timing.calls(t, "host.run"))
    assert.equal(0, timing.calls(t, "host.unit"))
  end)

  it("gives an empty table for output without timing lines", function()
    assert.same({}, timing.parse("imexguard: unknown option --timing\n"))
    assert.same({}, timing.parse(nil))
  end)
end)

describe("bench timing.summary", function()
  it("takes medians per name, a missing name counting 0, phases first in their order", function()
    local runs = {
      timing.parse("timing: total 10 ms\ntiming: invoke 6 ms\ntiming: host.run 5 ms 1 calls\n"),
      timing.parse("timing: total 14 ms\ntiming: invoke 8 ms\ntiming: host.run 7 ms 3 calls\n"),
      timing.parse("timing: total 12 ms\ntiming: invoke 7 ms\n"),
    }
    local rows = timing.summary(runs)
    local names = {}
    for i, r in ipairs(rows) do names[i] = r.name end
    assert.same({ "invoke", "total", "host.run" }, names)
    assert.equal(12, rows[2].median_ms)
    assert.is_true(rows[2].phase)
    assert.same({ 5, 7, 0 }, rows[3].ms)
    assert.equal(5, rows[3].median_ms)
    assert.equal(1, rows[3].median_calls)
    assert.is_nil(rows[1].median_calls)
    local lines = timing.table_lines(rows)
    assert.truthy(lines[3]:find("^  total +12%.00 +100%.0%%"))
    assert.truthy(lines[4]:find("^    host%.run +5%.00 +41%.7%% +1$"))
  end)
end)

describe("bench timing.available", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() H.rmdir(dir) end)

  local function fake(body)
    local path = dir .. "/imexguard"
    local f = assert(io.open(path, "w"))
    f:write("#!/bin/sh\n", body, "\n")
    f:close()
    os.execute("chmod +x " .. q(path))
    return path
  end

  it("is true for a binary whose --help lists --timing", function()
    local exe = fake([[[ "$1" = --help ] || exit 2
echo 'Options:'
echo '  --json              machine-readable output'
echo '  --timing            at the end, where the run'"'"'s time went on stderr']])
    assert.is_true(timing.available(exe, q))
  end)

  it("is false for a binary without the flag, or whose --help fails", function()
    assert.is_false(timing.available(fake("echo '  --json   machine-readable output'"), q))
    assert.is_false(timing.available(fake("echo '  --timing   x'; exit 1"), q))
    assert.is_false(timing.available(dir .. "/missing", q))
  end)

  it("is true for the built imexguard", function()
    local exe = (os.getenv("IMEXGUARD_BUILD") or "build") .. "/imexguard"
    assert.is_true(timing.available(exe, q))
  end)
end)

describe("bench stats", function()
  it("makes a metric with the baseline's median and the ratio of medians", function()
    local m = stats.metric("fast.wall", "ms", { 30, 10, 20 }, { 40, 80 })
    assert.same({ name = "fast.wall", unit = "ms", min = 10, median = 20, max = 30, baseline_median = 60,
      ratio = 20 / 60, n = 3 }, m)
    local alone = stats.metric("fast.floor", "ms", {})
    assert.equal(stats.null, alone.median)
    assert.equal(stats.null, alone.baseline_median)
    assert.equal(stats.null, alone.ratio)
    assert.equal(0, alone.n)
  end)

  it("writes JSON with sorted keys, arrays, null, integers without a fraction, escapes", function()
    local doc = { b = { 1, 2.5, stats.null }, a = "x\"y\n", c = setmetatable({}, stats.list_mt), d = {},
      e = true }
    assert.equal('{\n  "a": "x\\"y\\n",\n  "b": [\n    1,\n    2.5,\n    null\n  ],\n  "c": [],\n'
      .. '  "d": {},\n  "e": true\n}', stats.json(doc))
    local cjson = require("cjson")
    local back = cjson.decode(stats.json({ metrics = { stats.metric("x", "s", { 1.25 }, { 2.5 }) } }))
    assert.equal(0.5, back.metrics[1].ratio)
    assert.equal(1.25, back.metrics[1].min)
    assert.equal(1, back.metrics[1].n)
  end)
end)
