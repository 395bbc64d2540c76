-- SPDX-License-Identifier: Apache-2.0
--- What the specs of the default policy (policies/default_*_spec.lua) share: running one entry
-- point against the test kit's fake host, the assertions on what a run touched, and the fixtures
-- of the field cases whose tests sit in more than one of those files.
local testing = require("imexguard.testing")
local assert = require("luassert")
local P = require("default")

local M = {}

local NODES, STATE = testing.NODES, testing.STATE

--- A file of tests/fixtures.
-- @tparam string name its path below tests/fixtures
-- @treturn string its bytes
function M.fixture(name)
  local f = assert(io.open("tests/fixtures/" .. name, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- This node (10.0.0.1, n1) READY, peer 10.0.0.2 (n2) UNAVAILABLE: the domain is DEGRADED.
M.DEGRADED = { mesh = { nodes = { { host = "10.0.0.1" },
  { host = "10.0.0.2", status = "UNAVAILABLE" } } } }

--- A state file with one registered job (as a prolog leaves it), for status and health, which judge
-- a node with a registered job on that job's nodes and an idle one on what it owns (C33).
-- @tparam[opt] {string,...} addrs the job's node list (default the kit's 10.0.0.1, 10.0.0.2)
-- @treturn table testing.host's `files` option {[STATE] = the state file's JSON}
function M.registered(addrs)
  local nodes = table.concat(addrs or { "10.0.0.1", "10.0.0.2" }, "\n") .. "\n"
  return { [STATE] = require("cjson").encode({ jobs = { { id = "100", nodes = nodes,
    registered_us = "1699999400000000", invocation_id = "" } } }) .. "\n" }
end

--- A prolog's environment: job 101 on node n1.
-- @tparam string nodelist SLURM_JOB_NODELIST
-- @tparam[opt] table extra more variables, or other values
function M.env(nodelist, extra)
  local e = { SLURM_JOB_ID = "101", SLURM_JOB_NODELIST = nodelist, SLURMD_NODENAME = "n1" }
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end

--- Run one entry point of the default policy on the fake host `h`.
-- @tparam table h the fake host (testing.host)
-- @tparam[opt] table o testing.ctx's options; o.command names the entry point (default "prolog")
-- @return the outcome, the message, the report and the ctx
function M.run(h, o)
  o = o or {}
  o.host = h
  local ctx = testing.ctx(o)
  local outcome, message, report = P[o.command or "prolog"](ctx)
  return outcome, message, report, ctx
end

function M.assert_one_line(message)
  assert.is_string(message)
  assert.is_nil(message:find("\n"), "message is one line: " .. message)
end

-- Nothing on disk or in the service changed, and the node lock was never taken.
function M.assert_untouched(h)
  assert.same({}, h.writes)
  assert.same({}, h.jobs)
  assert.equal(0, h.count("lock"))
end

-- Paths written, in order.
function M.paths(h)
  local out = {}
  for i, w in ipairs(h.writes) do out[i] = w.path end
  return out
end

-- The writes other than the state file's, in order.
function M.list_writes(h)
  local out = {}
  for _, w in ipairs(h.writes) do
    if w.path ~= STATE then out[#out + 1] = w end
  end
  return out
end

-- Every lock taken was released.
function M.assert_released(h)
  for _, l in ipairs(h.locks) do assert.is_true(l.released) end
end

-- "default policy job registry (C08, scenario style)".
M.registry = {}

-- Job 100 runs on {.1,.3}, IMEX UP with that list.
function M.registry.given()
  return testing.scenario{ policy = P, node = "n1", file = { "n1", "n3" }, mesh = "up", unit = "active",
    jobs = { { id = 100, nodes = { "n1", "n3" } } } }
end

-- "default policy: unit lifecycle faults (C26, C27)".
M.lifecycle = {
  STRAY = { pid = 31337, comm = "nvidia-imex", cmdline = "/usr/bin/nvidia-imex -c /tmp/debug.cfg" },
}

-- This node runs {n1, n3}; the job wants n[1-2]: a restart.
function M.lifecycle.given(o)
  o = o or {}
  return testing.scenario{ policy = P, file = { "n1", "n3" }, unit = o.unit, restart = o.restart,
    settings = o.settings, host = o.host, mesh = o.mesh }
end

-- "default policy: the IMEX channel step (after applies?, before the node list)".
local DIR = "/dev/nvidia-caps-imex-channels"
local DEV = "/proc/devices"
M.channel = {
  DIR = DIR,
  DEV = DEV,
  CONF = "/etc/slurm/slurm.conf",
  CH = { imex_channels = "channel0" },
  PD = DIR:gsub("%-", "%%-"), -- DIR as a pattern
}

-- The kit's host with a GB200's /proc/devices, and the files `extra`.
function M.channel.chost(extra)
  local files = { [DEV] = M.fixture("proc/devices-gb200.txt") }
  for k, v in pairs(extra or {}) do files[k] = v end
  return testing.host{ files = files }
end

-- "default policy: ordered identity, the unit's config, configuration faults" (C21, C22, C28).
local T3 = "10.0.0.1\n10.0.0.2\n10.0.0.3\n"
local SITE_NODES = "/opt/site/nodes.cfg"
M.identity = {
  T3 = T3,
  A = "10.0.0.1", B = "10.0.0.2", C = "10.0.0.3",
  -- C28: a config.cfg of the site's, named by the unit's ExecStart, and its node list.
  SITE = "/opt/site/imex.cfg",
  SITE_NODES = SITE_NODES,
  site_cfg = testing.CONFIG_TEXT:gsub("IMEX_NODE_CONFIG_FILE=[^\n]*", "IMEX_NODE_CONFIG_FILE=" .. SITE_NODES),
  IMEX = "/usr/bin/nvidia-imex",
  -- C22: a config.cfg whose command bind is the loopback address.
  loop_cfg = testing.CONFIG_TEXT:gsub("IMEX_CMD_BIND_INTERFACE_IP=[^\n]*",
    "IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1"),
}

-- A domain as the ctl shows it: hosts in id order, READY and connected.
function M.identity.mesh_of(hosts)
  local nodes = {}
  for i, h in ipairs(hosts) do nodes[i] = { host = h } end
  return { mesh = { nodes = nodes } }
end

-- The kit's host with the node list {n1, n2, n3} and the ctl answering the domain `hosts`.
function M.identity.host3(hosts, more)
  return testing.host{ files = { [NODES] = T3 }, ctl = { M.identity.mesh_of(hosts), more } }
end

-- A unit whose ExecStart is `argv`.
function M.identity.unit_with(argv)
  return { exec_start = { { path = argv[1], argv = argv } } }
end

return M
