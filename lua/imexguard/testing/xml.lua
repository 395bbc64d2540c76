-- SPDX-License-Identifier: Apache-2.0
--- The fake host's XML primitive (src/xml.c): host.xml_parse is a pure function of its arguments
-- (no side effect, nothing of the node), so the fake host passes it to the real primitive, the C
-- module imexguard.host (under busted the build's host.so: `--cpath='build/lua/?.so'`; under
-- `imexguard check` the binary's own), and records each call as {"xml_parse", name}.
-- Test infrastructure of imexguard.testing.
local M = {}

-- The real primitive, taken when the kit is loaded, while imexguard.host is still the C module
-- (busted: the build's host.so; `imexguard check`: the binary's read-only table, before it
-- preloads the kit's host as imexguard.host).
local function c_module_xml_parse()
  local ok, prim = pcall(function() return require("imexguard.host").xml_parse end)
  return ok and type(prim) == "function" and prim or nil
end
local REAL = c_module_xml_parse()

-- The real primitive, or (a spec that required the kit only after it preloaded a fake host as
-- imexguard.host) the C module loaded from package.cpath where the package library exists.
local function real_xml_parse(h)
  if REAL and REAL ~= h.xml_parse then return REAL end
  local pkg = rawget(_ENV, "package")
  local path = pkg and pkg.searchpath and pkg.searchpath("imexguard.host", pkg.cpath)
  local open = path and pkg.loadlib(path, "luaopen_imexguard_host")
  if open then return open().xml_parse end
  error("testing: host.xml_parse needs the real primitive (the C module imexguard.host: busted "
    .. "--cpath='build/lua/?.so')", 0)
end

--- Add xml_parse to a fake host.
-- @param h table the fake host
-- @param w table the host's shared world (needs rec)
-- @param opts table testing.host options (xml_parse = function(text, name, limits): answers in
--   place of the primitive, e.g. nil, msg, "ENOMEM")
function M.install(h, w, opts)
  function h.xml_parse(text, name, limits)
    w.rec("xml_parse", name)
    if type(opts.xml_parse) == "function" then return opts.xml_parse(text, name, limits) end
    return real_xml_parse(h)(text, name, limits)
  end
end

return M
