-- SPDX-License-Identifier: Apache-2.0
-- Field case C25 (docs/design.md, "Field cases"): systemd re-executes during a run.
-- `imexguard prolog` (the real binary) on a simulated 4-node IMEX domain (contrib/simdomain.lua,
-- as tests/integration does) while the user manager is re-executed and reloaded in a loop
-- (`systemctl --user daemon-reexec`, `daemon-reload`): 100 prologs, some of them restarting the
-- daemon, and not one may fail for it. Run under tests/with-systemd.
package.path = "contrib/?.lua;" .. package.path

if not os.getenv("IMEXGUARD_TEST_BUS") then
  describe("prologs while systemd re-executes", function()
    pending("needs a systemd user manager: run under tests/with-systemd")
  end)
  return
end

local simdomain = require("simdomain")

local function capture(cmd)
  local f = assert(io.popen(cmd, "r"))
  local out = f:read("a")
  f:close()
  return out
end

describe("prologs while systemd re-executes", function()
  local d

  setup(function()
    d = simdomain.new { nodes = 4 }
    for _, n in ipairs(d.names) do d:write_node_list(n, d.names) end
    assert(d:start())
  end)

  teardown(function()
    if d then d:destroy() end
  end)

  it("100 prologs (with restarts) during a daemon-reexec/daemon-reload loop: 0 failures", function()
    -- The loop (at most 300 s) counts its rounds in a file.  It pauses 0.2 s between rounds (a
    -- load pattern, not a synchronisation): back to back, the manager does little else and the
    -- prologs only wait longer.
    -- The file .stop ends it; .done appears when it has ended.
    local count = d.root .. "/reexec.count"
    local loop = "end=$((SECONDS + 300)); n=0; " ..
      "while [ $SECONDS -lt $end ] && [ ! -e " .. count .. ".stop ]; do " ..
      "systemctl --user daemon-reexec; systemctl --user daemon-reload; n=$((n + 1)); " ..
      "echo $n > " .. count .. ".tmp; mv " .. count .. ".tmp " .. count .. "; sleep 0.2; done; " ..
      "touch " .. count .. ".done"
    capture("bash -c '" .. loop .. "' >/dev/null 2>&1 &")
    finally(function()
      os.execute("touch " .. count .. ".stop")
      assert(simdomain.wait_until(function()
        local f = io.open(count .. ".done")
        return f and f:close()
      end, 30),
        "the re-exec loop did not end")
    end)
    local failures, prologs, restarts0 = {}, 0, d:starts("n1")
    local job = 100
    local function run(kind, nodelist, names)
      local res = d:run_all { command = kind, job = job, nodelist = nodelist, names = names }
      for n, r in pairs(res) do
        if kind == "prolog" then prologs = prologs + 1 end
        if r.status ~= 0 or r.outcome ~= "ok" then
          failures[#failures + 1] = string.format("job %d %s on %s: %s", job, kind, n, r.output)
        end
      end
    end
    while prologs < 100 do
      job = job + 1
      -- every 5th job runs on n1 and n2 only: their lists change and their daemons restart, and
      -- again for the next 4-node job
      local nodelist, names = "n[1-4]", d.names
      if job % 5 == 0 then nodelist, names = "n[1-2]", { "n1", "n2" } end
      run("prolog", nodelist, names)
      run("epilog", nodelist, names)
    end
    local rounds = tonumber(io.open(count):read("a")) or 0
    assert.is_true(rounds >= 5, "the manager re-executed only " .. rounds .. " times")
    assert.is_true(d:starts("n1") - restarts0 >= 4, "too few restarts to exercise unit jobs")
    assert.same({}, failures)
  end)
end)
