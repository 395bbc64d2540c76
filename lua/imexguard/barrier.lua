-- SPDX-License-Identifier: Apache-2.0
--- `imexguard wait [--job N] [--timeout S]`: a barrier for job scripts and step prologs that must
-- not start before the job's IMEX domain is whole. Changing nothing, it polls this node's
-- `nvidia-imex-ctl -N -j` (imexguard.health.probe) until every node of job N in this node's IMEX
-- domain is READY and CONNECTED to every other one of them, in both directions (each node's own
-- view of its links, as the ctl reports it from the node's command port); exit 0 then, else, after
-- --timeout seconds (default: the setting health_timeout), `domain-unhealthy` naming the missing
-- links.
--
-- Where job N's nodes come from: this node's job registry (the state file), whose entry for N holds
-- the node list its prolog made right and registered: the job's nodes in this node's IMEX domain,
-- in the job's order (docs/design.md, steps 2a and 9); with membership = "slots" its `slots` field,
-- the job's slots in force (the entry's node list is then the domain's whole slot list, whose other
-- slots refuse by design). It needs no Slurm call, no name service and
-- no shared storage, and it is what the daemons run. A job that is not registered here (its prolog
-- failed, ran elsewhere, or a policy without a registry: static_domain) falls back, only when
-- --job is not given (the job is the environment's own: a job script, SLURM_JOB_ID), to the policy's
-- desired list from SLURM_JOB_NODELIST (P:applies, P:desired: the prolog's steps 1, 2 and 2a). A node
-- where IMEX does not apply has nothing to wait for: `skipped`, exit 0.
local text = require("imexguard.text")
local base = require("imexguard.steps.base")
local lazy = require("imexguard.lazy")
local state, registry, housekeeping, applies = lazy("imexguard.state", "imexguard.registry",
  "imexguard.steps.housekeeping", "imexguard.steps.applies")
local nodelist, slots = lazy("imexguard.nodelist", "imexguard.slots")
local health, pace = lazy("imexguard.health", "imexguard.pace")

local M = {}

--- Seconds of the run's budget beyond the wait: the poll that is running when the wait ends, and
-- the final line (driver.lua gives `wait` a budget of its --timeout plus this).
M.MARGIN = 2

--- Links named in the message at most (the rest counted).
M.MAX_NAMED = 12

--- The missing links of a mesh among `addrs`: every ordered pair (a, b), a ~= b, whose link as a
-- reports it is not CONNECTED, and every node that is absent or not READY (pure).
-- @param mesh table ctl.parse_mesh's result
-- @param addrs list of the job's addresses
-- @return list of strings ("10.0.0.1 -> 10.0.0.3 INVALID", "10.0.0.3 absent", "10.0.0.3 UNAVAILABLE"),
--   empty when every node is READY and every link CONNECTED; integer the links counted
function M.missing(mesh, addrs)
  local out, links = {}, 0
  for _, a in ipairs(addrs) do
    local node = mesh.by_host and mesh.by_host[a]
    if not node then
      out[#out + 1] = a .. " absent from the daemon's node map"
    elseif node.status ~= "READY" then
      out[#out + 1] = a .. " " .. tostring(node.status)
    else
      for _, b in ipairs(addrs) do
        if b ~= a then
          links = links + 1
          local st = node.connections[b]
          if st ~= "CONNECTED" then
            out[#out + 1] = string.format("%s -> %s %s", a, b, tostring(st or "not listed"))
          end
        end
      end
    end
  end
  return out, links
end

-- The job's entry in this node's registry, or nil, outcome, message (the registry is unreadable).
local function registered(ctx, id)
  local st, serr = state.load(ctx.host, ctx.settings)
  if not st then return nil, housekeeping.registry_unknown(ctx, serr) end
  return registry.find(st, id) or false
end

--- The job's nodes in this node's IMEX domain, and where they come from.
-- @param policy table the policy (applies, desired)
-- @return info (P:applies'), list of addresses, source (string); or nil, outcome, message
function M.job_nodes(policy, ctx)
  local id, info, m = applies.applies_to_job(policy, ctx)
  if not id then return nil, info, m end
  local entry, o
  entry, o, m = registered(ctx, id)
  if entry == nil then return nil, o, m end
  if entry and entry.slots then -- membership by slots: the job's slots, not the domain's slot list
    return info, slots.of_field(entry.slots), "the registry (job " .. id .. "'s slots)"
  end
  if entry then
    return info, nodelist.lines(entry.nodes), "the registry (job " .. id .. "'s registration)"
  end
  if rawget(ctx, "job_given") then
    return nil, "bad-input", string.format("node %s: job %s is not registered here (its prolog did not "
      .. "succeed on this node); nothing to wait for", base.node_name(ctx), id)
  end
  local want
  want, o, m = policy:desired(ctx, info)
  if not want then return nil, o, m end
  return info, want.addrs, "SLURM_JOB_NODELIST (job " .. id .. " is not registered here)"
end

-- The message of missing links: the first M.MAX_NAMED, then how many more.
local function named(list)
  local shown = {}
  for i = 1, math.min(#list, M.MAX_NAMED) do shown[i] = list[i] end
  local more = #list > M.MAX_NAMED and string.format(" and %d more", #list - M.MAX_NAMED) or ""
  return table.concat(shown, ", ") .. more
end

--- Entry point `wait` (the default policy's P:run_wait): poll until the job's domain is whole or the
-- timeout passes.
-- @param policy table the policy
-- @param ctx table the run's context (timeout: --timeout seconds or nil; job_given)
-- @return outcome, message (one line), report (a line on stdout when it is ok)
function M.run(policy, ctx)
  local info, addrs, source = M.job_nodes(policy, ctx)
  if not info then return addrs, source end
  local host, s = ctx.host, ctx.settings
  local timeout = math.min(rawget(ctx, "timeout") or s.health_timeout, math.max(0, host.remaining() - 0.5))
  local started = host.now()
  local p = pace.new(s.poll_interval, started)
  local last, links
  while true do
    local t = host.now()
    local ans = health.probe(ctx, nil, info.config, info.cfg)
    if ans.mesh then
      last, links = M.missing(ans.mesh, addrs)
      if #last == 0 then
        local msg = text.one_line(string.format("job %s: %d node%s of this node's IMEX domain, every link "
          .. "CONNECTED (%d links) after %.1f s; nodes from %s", base.job_id(ctx), #addrs,
          #addrs == 1 and "" or "s", links, host.now() - started, source))
        return "ok", msg, msg .. "\n"
      end
    else
      last = { tostring(ans.err) }
    end
    p:polled(t, host.now(), table.concat(last, ","))
    local now = host.now()
    if now - started >= timeout then break end
    host.sleep(math.min(p:delay(now), timeout - (now - started)))
  end
  return "domain-unhealthy", text.one_line(string.format("job %s: not every node of this node's IMEX domain "
    .. "is CONNECTED to every other after %g s (nodes from %s): %s", base.job_id(ctx), timeout, source,
    named(last)))
end

return M
