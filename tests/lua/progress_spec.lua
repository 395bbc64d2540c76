-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.progress: the progress line of a long wait (systemd's "(15s / 1min 30s)"),
-- at most one per progress.EVERY seconds, and debug lines only when what a wait saw changed.
local progress = require("imexguard.progress")
local testing = require("imexguard.testing")

describe("progress", function()
  it("duration: systemd's form", function()
    assert.equal("0s", progress.duration(0))
    assert.equal("0.5s", progress.duration(0.5))
    assert.equal("15s", progress.duration(15.9))
    assert.equal("1min", progress.duration(60))
    assert.equal("1min 30s", progress.duration(90))
    assert.equal("2min 5s", progress.duration(125))
  end)

  it("tick: one info line per EVERY seconds, naming what is awaited, the time waited and the total",
    function()
    local h = testing.host()
    local w = progress.new(h, "node lock /run/imexguard/lock held by pid 7 (job=3)", 85)
    assert.is_false(w:tick())
    h.advance(progress.EVERY - 0.1)
    assert.is_false(w:tick())
    h.advance(0.1)
    assert.is_true(w:tick("still held"))
    assert.is_false(w:tick())
    local lines = {}
    for _, l in ipairs(h.logs) do lines[#lines + 1] = l[1] .. " " .. l[2] end
    assert.same({ "info waiting for node lock /run/imexguard/lock held by pid 7 (job=3) (5s / 1min 25s): "
      .. "still held" }, lines)
  end)

  it("debug: the same key is logged once", function()
    local h = testing.host()
    local w = progress.new(h, "x", 10)
    assert.is_true(w:debug("poll 1: A", "A"))
    assert.is_false(w:debug("poll 2: A", "A"))
    assert.is_true(w:debug("poll 3: B", "B"))
    assert.equal(2, #h.logs)
  end)
end)
