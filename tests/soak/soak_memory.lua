-- SPDX-License-Identifier: Apache-2.0
--- Soak check 5/6 (memory): a settings file and a policy that allocate without bound must end as
-- `settings-error` and `policy-error` with nothing changed, stopped by the sandbox's allocator
-- limit, not by the kernel.
-- The prolog runs under `ulimit -v` of 2 GiB (a safety net for the machine) and GNU time reports
-- its peak resident size: it must stay under 600 MiB (the limit, the setting memory_limit of
-- 256 MiB by default, plus the process), and the final line must name the limit.
local util = require("soakutil")

local M = {}

local PEAK_KIB = 600 * 1024
local AS_KIB = 2 * 1024 * 1024

-- Run a prolog for job on n1 with the address-space cap; returns outcome, output, peak KiB, seconds.
local function capped_prolog(d, job, extra_args, scratch)
  local simdomain = require("simdomain")
  local env = simdomain.prolog_env(job, "n[1-2]", "n1", 1)
  local assign = {}
  for k, v in pairs(env) do assign[#assign + 1] = k .. "=" .. util.q(v) end
  table.sort(assign)
  local out, tfile = scratch .. "/mem.out", scratch .. "/mem.time"
  local h = util.host()
  local t = h.now()
  util.sh(string.format("(ulimit -v %d; /usr/bin/time -o %s -f %%M env -i %s %s --config %s "
    .. "--deadline 10 %s prolog) >%s 2>&1", AS_KIB, util.q(tfile), table.concat(assign, " "),
    util.q(d.build .. "/imexguard"), util.q(d:config("n1")), extra_args, util.q(out)))
  local took = h.now() - t
  local text = util.read(out) or ""
  local peak = tonumber((util.read(tfile) or ""):match("(%d+)%s*$"))
  return text:match("outcome=([%w%-]+)"), text, peak, took
end

local CASES = {
  { what = "settings file",
    settings = "local t, s = {}, 'x'\nwhile true do t[#t + 1] = s; s = s .. s .. #t end" },
  { what = "policy", policy = table.concat({
    "local P = {}",
    "function P.prolog()",
    "  local t, s = {}, 'x'",
    "  while true do t[#t + 1] = s; s = s .. s .. #t end",
    "end",
    "function P.epilog() return 'ok', 'nothing' end",
    "return P" }, "\n") },
}

--- Run the checks (called by soak_faults with its domain).
-- @param tap function(ok, text)
-- @param d table the simdomain
-- @param scratch string a temp dir
function M.run(tap, d, scratch)
  for i, c in ipairs(CASES) do
    local path, orig = d:config("n1"), nil
    local args = ""
    if c.settings then
      orig = util.read(path)
      util.write(path, orig .. c.settings .. "\n")
    else
      util.write(scratch .. "/hungry.lua", c.policy)
      args = "--policy " .. util.q(scratch .. "/hungry.lua")
    end
    local list, inv = d:nodes_file("n1"), d:invocation("n1")
    local outcome, text, peak, took = capped_prolog(d, 40 + i, args, scratch)
    if orig then util.write(path, orig) end
    local same = d:nodes_file("n1") == list and d:invocation("n1") == inv
    -- a settings file is the settings' fault (settings-error), a policy the policy's
    local want = c.settings and "settings-error" or "policy-error"
    local ok = outcome == want and same and peak ~= nil and peak < PEAK_KIB
      and text:find("memory limit of 256 MiB reached", 1, true) ~= nil
    local line = string.format("memory: a %s that allocates without bound ended %s in %.1f s, peak %s MiB "
      .. "(limit %d MiB), node list %s, no restart: %s", c.what, tostring(outcome), took,
      peak and string.format("%.0f", peak / 1024) or "?", PEAK_KIB // 1024, same and "unchanged" or "CHANGED",
      tostring(same))
    tap(ok, line)
    if not ok then util.note(util.show(text, 300)) end
    d:epilogs { job = 40 + i, nodelist = "n[1-2]", names = { "n1" } }
  end
end

return M
