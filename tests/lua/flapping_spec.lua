-- SPDX-License-Identifier: Apache-2.0
-- lua/imexguard/flapping.lua: the unit's restarts by systemd counted from NRestarts between runs,
-- told apart from a reset-failed and a start by hand by the main process's start time; the window;
-- the record in state_dir; health's unit-flapping and status' line (the kit's fake host).
local flapping = require("imexguard.flapping")
local testing = require("imexguard.testing")
local P = require("policies.default")

local S = { unit = "nvidia-imex.service", flapping_window = 600, flapping_restarts = 3,
  state_dir = "/run/imexguard" }
local T0 = 1700000000 * 1000000 -- microseconds

local function props(n, start_s) return { n_restarts = n, exec_main_start_us = T0 + start_s * 1000000 } end

describe("imexguard.flapping", function()
  it("a first observation is the baseline: restarts before it are not dated, none counted", function()
    local rec, found = flapping.observe(nil, S.unit, props(7, 0), T0, 600)
    assert.equal(0, found)
    assert.same({ unit = S.unit, n_restarts = 7, main_start_us = T0, total = 0, events = {} }, rec)
  end)

  it("a higher count with a new main process: the difference, dated at the new start", function()
    local rec = flapping.observe(nil, S.unit, props(0, 0), T0, 600)
    local found
    rec, found = flapping.observe(rec, S.unit, props(2, 30), T0 + 40e6, 600)
    assert.equal(2, found)
    assert.equal(2, rec.total)
    assert.same({ { T0 + 30e6, 2 } }, rec.events)
    assert.equal(2, flapping.count(rec, T0 + 40e6, 600))
  end)

  it("reset-failed (the count drops, the same main process): no restart", function()
    local rec = flapping.observe(nil, S.unit, props(4, 0), T0, 600)
    local found
    rec, found = flapping.observe(rec, S.unit, props(0, 0), T0 + 10e6, 600)
    assert.equal(0, found)
    assert.equal(0, rec.total)
    assert.equal(0, rec.n_restarts)
  end)

  it("a start by hand (count reset, new process, count 0): no restart; automatic ones after it count",
    function()
    local rec = flapping.observe(nil, S.unit, props(4, 0), T0, 600)
    local found
    rec, found = flapping.observe(rec, S.unit, props(0, 50), T0 + 60e6, 600)
    assert.equal(0, found)
    local _; _, found = flapping.observe(rec, S.unit, props(1, 70), T0 + 80e6, 600)
    assert.equal(1, found)
    -- reset by a start by hand, then 3 automatic restarts, seen at once: the count is theirs
    local rec2 = flapping.observe(nil, S.unit, props(5, 0), T0, 600)
    _, found = flapping.observe(rec2, S.unit, props(3, 90), T0 + 100e6, 600)
    assert.equal(3, found)
  end)

  it("reset-failed, then as many automatic restarts as before, between two runs: the new main process "
    .. "tells them, the count alone would not", function()
    local rec = flapping.observe(nil, S.unit, props(3, 0), T0, 600)
    local _, found = flapping.observe(rec, S.unit, props(3, 40), T0 + 50e6, 600)
    assert.equal(3, found)
  end)

  it("a restart seen while its new process is not started yet (Type=forking: NRestarts rises when the "
    .. "restart job is queued, ExecMainStartTimestamp when the daemon has forked): counted once, when the "
    .. "new main process shows, never the whole count again", function()
    local rec = flapping.observe(nil, S.unit, props(2, 0), T0, 600)
    local found
    rec, found = flapping.observe(rec, S.unit, props(3, 0), T0 + 100e6, 600) -- activating (auto-restart)
    assert.equal(0, found)
    rec, found = flapping.observe(rec, S.unit, props(3, 110), T0 + 120e6, 600) -- the new daemon forked
    assert.equal(1, found)
    assert.equal(1, rec.total)
    assert.equal(1, flapping.count(rec, T0 + 120e6, 600))
    -- the restart failed before forking and systemd restarted it again: both count
    rec = flapping.observe(nil, S.unit, props(2, 0), T0, 600)
    rec = flapping.observe(rec, S.unit, props(3, 0), T0 + 100e6, 600)
    rec = flapping.observe(rec, S.unit, props(4, 0), T0 + 105e6, 600)
    local _
    _, found = flapping.observe(rec, S.unit, props(4, 110), T0 + 120e6, 600)
    assert.equal(2, found)
    -- a reset-failed meanwhile (the count drops, no new process): nothing
    rec = flapping.observe(nil, S.unit, props(2, 0), T0, 600)
    rec = flapping.observe(rec, S.unit, props(3, 0), T0 + 100e6, 600)
    rec, found = flapping.observe(rec, S.unit, props(0, 0), T0 + 105e6, 600)
    assert.equal(0, found)
    assert.equal(0, rec.n_restarts)
  end)

  it("the same main process and the same count: nothing (a run that saw no change)", function()
    local rec = flapping.observe(nil, S.unit, props(2, 0), T0, 600)
    local again, found = flapping.observe(rec, S.unit, props(2, 0), T0 + 5e6, 600)
    assert.equal(0, found)
    assert.equal(flapping.encode(rec), flapping.encode(again))
  end)

  it("restarts older than the window leave the count, not the total", function()
    local rec = flapping.observe(nil, S.unit, props(0, 0), T0, 600)
    rec = flapping.observe(rec, S.unit, props(3, 10), T0 + 20e6, 600)
    assert.equal(3, flapping.count(rec, T0 + 20e6, 600))
    rec = flapping.observe(rec, S.unit, props(3, 10), T0 + 700e6, 600)
    assert.equal(0, flapping.count(rec, T0 + 700e6, 600))
    assert.equal(3, rec.total)
    assert.same({}, rec.events)
  end)

  it("a record of another unit starts again", function()
    local rec = flapping.observe(nil, "other.service", props(9, 0), T0, 600)
    local new, found = flapping.observe(rec, S.unit, props(12, 5), T0 + 10e6, 600)
    assert.equal(0, found)
    assert.equal(S.unit, new.unit)
  end)

  it("no NRestarts (not a service, an old systemd): no record", function()
    assert.is_nil((flapping.observe(nil, S.unit, { exec_main_start_us = T0 }, T0, 600)))
    assert.is_nil(flapping.verdict({}, S, { exec_main_start_us = T0 }))
  end)

  it("judge: flapping from flapping_restarts within the window; the text names count, window and rule",
    function()
    local rec = { unit = S.unit, n_restarts = 3, main_start_us = T0, total = 5,
      events = { { T0 - 700e6, 2 }, { T0 - 60e6, 3 } } }
    local r = flapping.judge(rec, S, T0)
    assert.is_true(r.flapping)
    assert.equal(3, r.count)
    assert.equal(5, r.total)
    assert.matches("nvidia%-imex%.service restarted 3 times in the last 10 min %(flapping from 3: "
      .. "flapping_restarts in flapping_window = 600 s%)", r.text)
    assert.matches("new IMEX instance, and its peers drop every memory import", r.text)
    assert.is_false(flapping.judge(rec, { unit = S.unit, flapping_window = 600, flapping_restarts = 4 }, T0)
      .flapping)
  end)

  it("the record reads back as written; a file that is not one is no record", function()
    local rec = { unit = S.unit, n_restarts = 2, main_start_us = T0, total = 4, events = { { T0, 2 } } }
    local h = testing.host{ files = { [flapping.path(S)] = flapping.encode(rec) } }
    assert.same(rec, flapping.load(h, S))
    h = testing.host{ files = { [flapping.path(S)] = "{}" } }
    local none, err = flapping.load(h, S)
    assert.is_nil(none)
    assert.matches("unit%-restarts%.json is not a record", err)
  end)

  it("record writes only when the record changed", function()
    local h = testing.host{}
    assert.truthy(flapping.record(h, S, props(0, 0)))
    local writes = #h.writes
    assert.truthy(flapping.record(h, S, props(0, 0)))
    assert.equal(writes, #h.writes)
    assert.truthy(flapping.record(h, S, props(1, 5)))
    assert.equal(writes + 1, #h.writes)
  end)
end)

describe("health and status: a flapping unit", function()
  local NOW = math.floor(require("imexguard.testing.base").WALL0)
  local function with_record(n, start_s, restarts)
    -- a record taken a minute ago; the unit now shows `n` restarts and a main process started at start_s
    local rec = { unit = S.unit, n_restarts = 0, main_start_us = (NOW - 3000) * 1000000, total = 0,
      events = {} }
    if restarts then rec.events = restarts end
    return testing.host{ files = { [flapping.path(S)] = flapping.encode(rec) },
      unit = { n_restarts = n, exec_main_start_us = (NOW + start_s) * 1000000 } }
  end

  it("health: 3 restarts since the last run: unit-flapping naming the count, the window and the new instance",
    function()
    local h = with_record(3, -10)
    local ctx = testing.ctx{ host = h, command = "health" }
    local o, m, report = P.health(ctx)
    assert.equal("unit-flapping", o)
    assert.matches("restarted 3 times in the last 10 min", m)
    assert.matches("flapping_restarts in flapping_window = 600 s", m)
    assert.matches("new IMEX instance", m)
    assert.matches("^imexguard: unit%-flapping: ", report)
  end)

  it("health: 2 restarts (below flapping_restarts) stay healthy", function()
    local h = with_record(2, -10)
    local o = P.health(testing.ctx{ host = h, command = "health" })
    assert.equal("ok", o)
  end)

  it("status shows the count on its restarts line, and the same verdict", function()
    local h = with_record(4, -10)
    local o, _, report = P.status(testing.ctx{ host = h, command = "status" })
    assert.equal("unit-flapping", o)
    assert.matches("\nrestarts +flapping: 4 by systemd in the last 10 min %(flapping from 3%); a restart is "
      .. "a new instance", report)
  end)

  it("health changes nothing: the record is not written by the entry point", function()
    local h = with_record(3, -10)
    P.health(testing.ctx{ host = h, command = "health" })
    assert.same({}, h.writes)
  end)
end)
