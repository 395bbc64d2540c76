-- SPDX-License-Identifier: Apache-2.0
--- The steps the built-in policy is built from, in one table for site policies
-- (docs/policy-api.md, "The built-in policy and its steps"; docs/design.md, "Decision model of the
-- default policy"). An index without logic of its own: each field is the function (or constant)
-- of the room that holds it, under the same name. The rooms (lua/imexguard/steps/), one concern
-- each, in the order of a prolog:
--   imexguard.steps.base          what every step shares: failures, node name, job id (step 0), boot
--   imexguard.steps.applies       step 1: does IMEX apply; the unit, its config.cfg and node list file
--   imexguard.steps.desired       steps 2 and 2a: the desired list, the owner of `want`
--   imexguard.steps.node_lock     step 3: the node lock
--   imexguard.steps.housekeeping  step 3a and the state file: leftovers of earlier runs
--   imexguard.steps.nodes_file    step 4: read (4a) and write (4b) the node list file
--   imexguard.steps.staleness     step 5: is the daemon current (5a: the unit settles)
--   imexguard.steps.other_jobs    step 6: the registered jobs decide; the conflict wait (C24)
--   imexguard.steps.registration  steps 9a, 9b, 9: the job's registration
--   imexguard.steps.restart       step 7: (re)start the unit; the command port's owner (C27)
--   imexguard.steps.converge      steps 8 and 10: the health wait, C32's one restart, the watcher (C51)
-- plus `one_line` (imexguard.text), `entry_hosts` (imexguard.registry) and the old names of five
-- steps (RENAMED below).
-- Requiring this index loads every room. The library (the built-in policy included) requires the
-- rooms it uses, so that a command loads only those (the epilog: base, node_lock, housekeeping).
local ROOMS = { "base", "applies", "desired", "node_lock", "housekeeping", "nodes_file", "staleness",
  "other_jobs", "registration", "restart", "converge" }

--- The old names of steps, each still the function of its new name (docs/policy-api.md, "The
-- built-in policy and its steps"), so that a site policy written for them runs unchanged. Old name
-- -> new name.
local RENAMED = { assess = "assess_daemon", read_nodes = "read_node_list", write_nodes = "write_node_list",
  check_port = "check_port_owner", check_owner = "check_listener_owner" }

local M = {
  one_line = require("imexguard.text").one_line,
  entry_hosts = require("imexguard.registry").entry_hosts,
}

for _, room in ipairs(ROOMS) do
  local name = "imexguard.steps." .. room
  for k, v in pairs(require(name)) do
    -- one name, one function: two rooms must not export the same name
    if M[k] ~= nil then error(string.format("%s.%s: imexguard.steps has that name already", name, k)) end
    M[k] = v
  end
end
for old, new in pairs(RENAMED) do M[old] = M[new] end

return M
