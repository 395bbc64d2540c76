-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.steps, the index of the steps' rooms (lua/imexguard/steps/), and of `want`,
-- the record whose owner is the room imexguard.steps.desired.
local testing = require("imexguard.testing")
local steps = require("imexguard.steps")
local desired = require("imexguard.steps.desired")

local ROOMS = { "base", "applies", "desired", "node_lock", "housekeeping", "nodes_file", "staleness",
  "other_jobs", "registration", "restart", "converge" }

describe("imexguard.steps, the index", function()
  it("still gives every name the single module steps.lua gave site policies", function()
    for _, name in ipairs { "DEFAULT_NODES_FILE", "EPILOG_RESERVE", "JOB_ID_MAX", "JOB_ID_PATTERN",
      "LOCK_RESERVE", "MAX_FILE", "RESULT_HINTS", "STATE_DIR_MODE", "applies", "assess", "begin_change",
      "boot_id", "by_code", "check_job_id", "check_owner", "check_port", "conflict_message",
      "daemon_config", "desired", "disabled_unit", "domain", "drop_interrupted", "drop_other_boots",
      "ensure_dir", "entry_hosts", "fail", "job_id", "lock", "lock_holder_text", "lock_wait",
      "lock_waiting", "log_repeats", "may_restart", "node_name", "one_line", "query_unit", "read_nodes",
      "register", "registry_key", "registry_unknown", "remove_temps", "restart", "root_hint", "setting",
      "settle_unit", "start_probe", "unit_result", "unit_start_job", "wait_registry", "want_of",
      "write_nodes" } do
      assert.is_not_nil(steps[name], name)
    end
  end)

  it("is each room's own function under the same name, one room per name, and nothing else", function()
    local seen = { one_line = "imexguard.text", entry_hosts = "imexguard.registry" }
    -- the old names of five steps (steps.lua's RENAMED): the function of the new name
    local old = { assess = "assess_daemon", read_nodes = "read_node_list", write_nodes = "write_node_list",
      check_port = "check_port_owner", check_owner = "check_listener_owner" }
    for name, new in pairs(old) do
      assert.is_function(steps[new], new)
      assert.equal(steps[new], steps[name], name)
      seen[name] = "the old name of " .. new
    end
    assert.equal(require("imexguard.text").one_line, steps.one_line)
    assert.equal(require("imexguard.registry").entry_hosts, steps.entry_hosts)
    for _, room in ipairs(ROOMS) do
      local name = "imexguard.steps." .. room
      for k, v in pairs(require(name)) do
        assert.is_nil(seen[k], k .. " in " .. name .. " and " .. tostring(seen[k]))
        seen[k] = name
        assert.equal(v, steps[k], name .. "." .. k)
      end
    end
    for k in pairs(steps) do assert.is_not_nil(seen[k], k) end
  end)
end)

describe("want (imexguard.steps.desired)", function()
  local function setup()
    local ctx = testing.ctx{ host = testing.host() }
    local info = assert(steps.applies(ctx))
    return ctx, info, assert(desired.desired(ctx, info))
  end

  it("is built with the daemon's config (C28) and the job's domain", function()
    local ctx, info, want = setup()
    assert.equal(info.config, want.config_path)
    assert.equal(info.cfg, want.cfg)
    assert.equal(ctx.domain, want.domain)
    assert.same({ "n1", "n2" }, want.list)
    assert.equal(1, want.self_index)
  end)

  it("narrow: the fields of the nodes made anew, every other field kept; the original unchanged", function()
    local ctx, info, want = setup()
    desired.set_node_list(want, { "10.0.0.2", "10.0.0.1" }, { x = "10.0.0.2" })
    local narrowed = assert(desired.narrow(ctx, info, want, { "n1" }, { "10.0.0.1" }))
    assert.equal("10.0.0.1\n", narrowed.bytes)
    assert.same({ "n1" }, narrowed.list)
    assert.same({ ["10.0.0.1"] = "n1" }, narrowed.names)
    assert.equal(want.expr, narrowed.expr)
    assert.equal(want.domain, narrowed.domain)
    assert.same({ "10.0.0.2", "10.0.0.1" }, narrowed.node_list)
    assert.same({ x = "10.0.0.2" }, narrowed.by_entry)
    assert.equal(info.config, narrowed.config_path)
    assert.equal("10.0.0.1\n10.0.0.2\n", want.bytes)
    -- a narrowing that leaves this node out is refused, as any want without it
    local none, err = desired.narrow(ctx, info, want, { "n2" }, { "10.0.0.2" })
    assert.is_nil(none)
    assert.matches("node n1", err)
  end)

  it("set_stale_wait: the health wait's mark after this node's restart for a stale mismatch (C32)", function()
    local _, _, want = setup()
    assert.is_nil(want.stale_wait)
    desired.set_stale_wait(want)
    assert.is_true(want.stale_wait)
  end)
end)
