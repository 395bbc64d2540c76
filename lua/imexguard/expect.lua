-- SPDX-License-Identifier: Apache-2.0
--- The argument check of a library function (a programmer's misuse, never bad input from the
-- outside, which gets nil and a message): `expect(stdout, "string", "ctl.parse_text: stdout must be
-- a string")` raises that message when the value's type is not the one named, blaming the
-- function's caller, as `error(message, 2)` written in the function itself does.

--- expect(value, kind, message, ...): nothing, or raises.
-- @param value any the argument
-- @param kind string the Lua type it must have (a name that type() returns)
-- @param message string the error; a string.format format when arguments follow (formatted only
--   when it is raised)
-- @param ... the format's arguments
-- @raise message, at the level of the caller of the function that calls expect
return function(value, kind, message, ...)
  if type(value) ~= kind then
    error(select("#", ...) > 0 and string.format(message, ...) or message, 3)
  end
end
