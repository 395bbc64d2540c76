-- SPDX-License-Identifier: Apache-2.0
--- A module loaded when first used: `local health = lazy("imexguard.health")` stands for the module,
-- and the first field read from it requires it (once). A command that never reads one never
-- loads it: the epilog does not load the health wait, the ctl's parsers or the hostlist
-- (docs/design.md, "Performance goals"). Several at once, one stand-in per name, in order:
-- `local state, registry = lazy("imexguard.state", "imexguard.registry")`.

-- The stand-in of one module.
local function stand_in(name)
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

--- lazy(name, ...): the stand-ins.
-- @param ... strings the modules' names (as for require), one or more
-- @return tables one stand-in per name, in the names' order, whose fields are the module's
--   (read-only: assignments raise)
return function(...)
  local names = table.pack(...)
  for i = 1, names.n do names[i] = stand_in(names[i]) end
  return table.unpack(names, 1, names.n)
end
