-- SPDX-License-Identifier: Apache-2.0
-- Specs of the nudge (lua/imexguard/nudge.lua) in the health wait (health.wait): when this node's
-- daemon is READY and its link to a READY peer of the job stays down for nudge_after seconds, the
-- wait sends SIGUSR1 to the unit's main process through systemd (host.unit_kill), at most once per
-- 5 s; never to a daemon that is not READY, never for a peer that is not READY or not in the job,
-- never in a dry run; a failed unit_kill is a warning. The ctl answers and the clock are the test
-- kit's (testing.restarted_peer: a peer restarted, this node waits on its reconnect back-off).
local testing = require("imexguard.testing")
local health = require("imexguard.health")
local nudge = require("imexguard.nudge")
local ctl = require("imexguard.ctl")

local H = { "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4" }
local NAMES = { ["10.0.0.1"] = "n1", ["10.0.0.2"] = "n2", ["10.0.0.3"] = "n3", ["10.0.0.4"] = "n4" }

-- A health wait of this node (10.0.0.1) in a domain given by `peer` (testing.restarted_peer's
-- options); o.settings: overrides; o.host: more testing.host options; o.dry_run, o.planned, o.addrs;
-- o.version: this node's daemon version in the answers.
-- Returns outcome, message, and what happened: {h, kills = h.kills ({unit, signal, timeout, at,
-- sent}), asked = {monotonic times of the ctl calls}, start = the wait's start, took = its seconds}.
local function wait(peer, o)
  o = o or {}
  local seen = { asked = {} }
  local inner = testing.restarted_peer(peer)
  local hopts = {
    ctl = function(n, argv, hh)
      seen.asked[#seen.asked + 1] = hh.now()
      local a = inner(n, argv, hh)
      if o.version then a.mesh.nodes[1].version = o.version end
      return a
    end,
  }
  for k, v in pairs(o.host or {}) do hopts[k] = v end
  local h = testing.host(hopts)
  seen.h, seen.kills = h, h.kills
  local ctx = testing.ctx{ host = h, settings = o.settings, dry_run = o.dry_run }
  ctx.planned = o.planned
  seen.start = h.now()
  local outcome, msg = health.wait(ctx, { addrs = o.addrs or H, self = H[1], names = NAMES })
  seen.took = h.now() - seen.start
  return outcome, msg, seen
end

local function logs(h, level, word)
  local out = {}
  for _, l in ipairs(h.logs) do
    if l[1] == level and (not word or l[2]:find(word, 1, true)) then out[#out + 1] = l[2] end
  end
  return out
end

describe("nudge: the constants come from the daemon's facts", function()
  it("SIGUSR1 is 10, at most once per 5 s (NVIDIA, driver 580+); on by default, after 1 s", function()
    assert.equal(10, nudge.SIGUSR1)
    assert.equal(5, nudge.INTERVAL)
    local s = require("imexguard.settings").defaults()
    assert.is_true(s.nudge)
    assert.equal(1, s.nudge_after)
  end)
end)

describe("nudge.version_allows: the SIGUSR1 floor (C48)", function()
  local S = require("imexguard.settings")

  it("default floor 580: r580 and later yes; older, unknown or unparsable no, with a reason", function()
    local s = S.defaults()
    assert.equal("580", s.sigusr1_min_version)
    for _, v in ipairs({ "580", "580.65.06", "580.95.05-sim", "590.1", "1000.0" }) do
      assert.is_true(nudge.version_allows(v, s), v)
      assert.is_true(nudge.version_allows(v), v) -- no settings: the default floor
    end
    for _, v in ipairs({ "579.99", "570.172.08", "570.158.01", "565" }) do
      local ok, why = nudge.version_allows(v, s)
      assert.is_false(ok, v)
      assert.matches("version " .. v:gsub("%.", "%%.") .. " is older than sigusr1_min_version 580", why)
    end
    for _, v in ipairs({ "", "N/A", "sim-580" }) do
      local ok, why = nudge.version_allows(v, s)
      assert.is_false(ok, v)
      assert.matches("unknown", why)
    end
    local ok, why = nudge.version_allows(nil, s)
    assert.is_false(ok)
    assert.matches("the ctl shows none", why)
  end)

  it("a lowered floor compares number by number over the floor's numbers", function()
    local s = S.validate({ sigusr1_min_version = "570.158.01" })
    assert.is_true(nudge.version_allows("570.158.01", s))
    assert.is_true(nudge.version_allows("570.172.08", s))
    assert.is_true(nudge.version_allows("571", s))
    assert.is_false(nudge.version_allows("570.158.0", s))
    assert.is_false(nudge.version_allows("570.86.15", s))
    assert.is_false(nudge.version_allows("", s)) -- unknown stays refused whatever the floor
  end)

  it("the setting must be a version: a clear error naming it", function()
    for _, bad in ipairs({ "", "r580", "580-sim", "any" }) do
      local t, err = S.validate({ sigusr1_min_version = bad })
      assert.is_nil(t)
      assert.matches("setting 'sigusr1_min_version' must be a driver version", err)
    end
  end)
end)

describe("nudge.lagging: the peers this node waits on in one answer", function()
  local function parsed(peer)
    local answer = testing.restarted_peer(peer)(1, {}, testing.host())
    return assert(ctl.parse_mesh(testing.render_mesh(answer.mesh), 0))
  end

  it("a READY peer whose link from this node is not CONNECTED, this node READY", function()
    assert.same({ { host = H[4], status = "RECOVERING" } }, nudge.lagging(parsed{}, H, H[1]))
    assert.same({ { host = H[4], status = "NEVER_CONNECTED" } },
      nudge.lagging(parsed{ status = "NEVER_CONNECTED" }, H, H[1]))
  end)

  it("none when this node is not READY, the peer is not READY, or the peer is not in the job", function()
    assert.same({}, nudge.lagging(parsed{ self_status = "UNAVAILABLE" }, H, H[1]))
    assert.same({}, nudge.lagging(parsed{ peer_status = "UNAVAILABLE" }, H, H[1]))
    assert.same({}, nudge.lagging(parsed{}, { H[1], H[2], H[3] }, H[1]))
    assert.same({}, nudge.lagging(parsed{}, H, "10.0.0.9"))
    assert.same({}, nudge.lagging(nil, H, H[1]))
  end)

  it("a node-map mismatch is left out unless the peer shows itself CONNECTED to this node", function()
    -- both sides see the mismatch: the daemons run different lists, a reconnect cannot clear it
    local both = parsed{ status = "NODE_MAP_MISMATCH", theirs = "NODE_MAP_MISMATCH" }
    assert.same({}, nudge.lagging(both, H, H[1]))
    assert.same({}, nudge.lagging(parsed{ status = "NODE_MAP_MISMATCH", theirs = "RECOVERING" }, H, H[1]))
    assert.same({}, nudge.lagging(parsed{ status = "RECOVERING", theirs = "NODE_MAP_MISMATCH" }, H, H[1]))
    -- the peer restarted with this node's list: the mismatch is this node's stale view
    assert.same({ { host = H[4], status = "NODE_MAP_MISMATCH" } },
      nudge.lagging(parsed{ status = "NODE_MAP_MISMATCH", theirs = "CONNECTED" }, H, H[1]))
  end)
end)

describe("nudge in health.wait", function()
  it("none before nudge_after; one when the link stays down that long; the domain is then UP", function()
    local o, msg, seen = wait({ backoff = 15 })
    assert.equal("ok", o, msg)
    assert.equal(1, #seen.kills)
    local k = seen.kills[1]
    assert.same({ testing.UNIT, 10, true }, { k.unit, k.signal, k.sent })
    assert.is_true(k.timeout > 0 and k.timeout <= nudge.KILL_TIMEOUT)
    -- the first answer (the lag seen first) came 0.01 s after the first call (the kit's ctl)
    local first = seen.asked[1] + 0.01
    assert.is_true(k.at - first >= 1, "nudged after " .. (k.at - first) .. " s, before nudge_after")
    assert.is_true(k.at - first < 1.1, "nudged " .. (k.at - first) .. " s after, not when due")
    -- the wait polled soon after the nudge (within its token bucket: at most one poll_interval
    -- plus a call) and saw UP: far before the back-off's 15 s
    assert.is_true(seen.took < 1.1 + 0.25 + 0.02, "returned after " .. seen.took .. " s")
  end)

  it("nudge_after is the threshold: a link that comes up before it is never nudged", function()
    local o, _, seen = wait({ backoff = 0.8 })
    assert.equal("ok", o)
    assert.same({}, seen.kills)
    local o3, _, seen3 = wait({ backoff = 15 }, { settings = { nudge_after = 3 } })
    assert.equal("ok", o3)
    assert.equal(1, #seen3.kills)
    local lag = seen3.kills[1].at - (seen3.asked[1] + 0.01)
    assert.is_true(lag >= 3 and lag < 3.1, "nudged after " .. lag .. " s")
  end)

  it("at most once per 5 s: a link that never comes up is nudged again and again, 5 s apart", function()
    local o, _, seen = wait({ reconnect = false }, { settings = { health_timeout = 22 } })
    assert.equal("peers-unhealthy", o)
    assert.is_true(#seen.kills >= 4, #seen.kills .. " nudges in 22 s")
    for i = 2, #seen.kills do
      local gap = seen.kills[i].at - seen.kills[i - 1].at
      assert.is_true(gap >= nudge.INTERVAL, "nudges " .. gap .. " s apart")
      assert.is_true(gap < nudge.INTERVAL + nudge.SLACK + 0.1, "next nudge " .. gap .. " s after")
    end
    -- 22 s: at 1, then every 5.25 s: at most 1 + (22 - 1) / 5 nudges
    assert.is_true(#seen.kills <= 1 + math.floor(21 / nudge.INTERVAL))
  end)

  it("nudge = false: none; the wait lasts until the back-off fires", function()
    local o, _, seen = wait({ backoff = 15 }, { settings = { nudge = false } })
    assert.equal("ok", o)
    assert.same({}, seen.kills)
    assert.equal(0, seen.h.count("unit_kill"))
    assert.is_true(seen.took >= 15, "returned after " .. seen.took .. " s")
  end)

  it("never to a daemon that is not READY", function()
    local o, _, seen = wait({ self_status = "UNAVAILABLE", reconnect = false },
      { settings = { health_timeout = 8 } })
    assert.equal("domain-unhealthy", o)
    assert.same({}, seen.kills)
  end)

  it("never for a peer that is not READY, nor for one outside the job", function()
    local o, _, seen = wait({ peer_status = "UNAVAILABLE", reconnect = false },
      { settings = { health_timeout = 8 } })
    assert.same({}, seen.kills)
    assert.equal("peers-unhealthy", o)
    local _, _, seen2 = wait({ backoff = 6 },
      { addrs = { H[1], H[2], H[3] }, settings = { health_timeout = 8 } })
    assert.same({}, seen2.kills)
  end)

  it("never to a daemon below the SIGUSR1 floor (r580 by default, C48) or of an unknown version", function()
    for _, v in ipairs({ "565.57.01", "570.86.15", "570.158.01", "570.172.08-sim", "", "N/A" }) do
      local o, _, seen = wait({ backoff = 4 }, { version = v })
      assert.equal("ok", o)
      assert.same({}, seen.kills, tostring(v))
      assert.equal(1, #logs(seen.h, "info", "no nudge"), tostring(v))
      local _, _, off = wait({ backoff = 4 }, { version = v, settings = { nudge = false } })
      assert.is_true(#seen.asked <= #off.asked + 1, "polls as without the nudge")
    end
    for _, v in ipairs({ "580.65.06", "580.95.05-sim", "595.10" }) do
      local _, _, seen = wait({ backoff = 4 }, { version = v })
      assert.equal(1, #seen.kills, v)
    end
    -- a site that lowers the floor for a driver it knows handles the signal
    local _, _, low = wait({ backoff = 4 },
      { version = "570.172.08", settings = { sigusr1_min_version = "570.158.01" } })
    assert.equal(1, #low.kills)
  end)

  it("never for a peer in a node-map mismatch with this node (both sides see it)", function()
    local _, _, seen = wait({ status = "NODE_MAP_MISMATCH", theirs = "NODE_MAP_MISMATCH", reconnect = false },
      { settings = { health_timeout = 8 } })
    assert.same({}, seen.kills)
  end)

  it("a dry run records the nudge and sends nothing", function()
    local planned = {}
    local o, _, seen = wait({ backoff = 4 }, { dry_run = true, planned = planned })
    assert.equal("ok", o)
    assert.same({}, seen.kills)
    assert.equal(0, seen.h.count("unit_kill"))
    assert.same({ 'unit_kill("nvidia-imex.service", 10)' }, planned)
    assert.equal(1, #logs(seen.h, "notice", "dry run: would nudge"))
    assert.same({}, logs(seen.h, "info", "nudge: "))
  end)

  it("logs each nudge at info naming the peers waited on", function()
    local _, _, seen = wait({ backoff = 15 })
    local lines = logs(seen.h, "info", "nudge: ")
    assert.equal(1, #lines)
    assert.matches("SIGUSR1 to nvidia-imex.service's main process", lines[1], 1, true)
    assert.matches("10.0.0.4 (n4) RECOVERING for 1.0 s", lines[1], 1, true)
    assert.not_matches("10.0.0.2", lines[1], 1, true)
  end)

  it("a failed unit_kill is a warning and changes nothing: the wait goes on to its outcome", function()
    local o, msg, seen = wait({ backoff = 15 }, { host = { unit_kill = "bus" } })
    assert.equal("ok", o, msg)
    assert.is_true(seen.took >= 15)
    assert.is_true(seen.h.count("unit_kill") >= 2, "tried again after 5 s")
    for _, k in ipairs(seen.kills) do assert.is_false(k.sent) end
    local warn = logs(seen.h, "warning", "nudge failed: ")
    assert.equal(seen.h.count("unit_kill"), #warn)
    assert.matches("(bus)", warn[1], 1, true)
    assert.same({}, logs(seen.h, "info", "nudge: "))
  end)
end)
