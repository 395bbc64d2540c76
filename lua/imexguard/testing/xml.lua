-- SPDX-License-Identifier: Apache-2.0
--- The fake host's XML primitive (src/xml.c): host.xml_parse is a pure function of its arguments
-- (no side effect, nothing of the node), so the fake host passes it to the real primitive, the C
-- module imexguard.host (under busted the build's host.so: `--cpath='build/lua/?.so'`; under
-- `imexguard check` the binary's own), and records each call as {"xml_parse", name}.
-- Test infrastructure of imexguard.testing.
local M = {}

--- Add xml_parse to a fake host.
-- @param h table the fake host
-- @param w table the host's shared world (needs rec)
-- @param opts table testing.host options (xml_parse = function(text, name, limits): answers in
--   place of the primitive, e.g. nil, msg, "ENOMEM")
function M.install(h, w, opts)
  function h.xml_parse(text, name, limits)
    w.rec("xml_parse", name)
    if type(opts.xml_parse) == "function" then return opts.xml_parse(text, name, limits) end
    return require("imexguard.host").xml_parse(text, name, limits)
  end
end

return M
