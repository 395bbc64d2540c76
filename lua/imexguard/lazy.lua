-- SPDX-License-Identifier: Apache-2.0
--- A module loaded when first used: `local health = lazy "imexguard.health"` stands for the module,
-- and the first field read from it requires it (once). A command that never reads one never
-- loads it: the epilog does not load the health wait, the ctl's parsers or the hostlist
-- (docs/design.md, "Performance goals").
-- @param name string the module's name (as for require)
-- @return table a stand-in whose fields are the module's (read-only: assignments raise)
return function(name)
  local mod
  return setmetatable({}, {
    __index = function(_, k)
      mod = mod or require(name)
      return mod[k]
    end,
    __newindex = function(_, k)
      error(string.format("cannot set %s.%s through its lazy stand-in", name, tostring(k)), 2)
    end,
  })
end
