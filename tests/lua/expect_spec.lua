-- SPDX-License-Identifier: Apache-2.0
-- Specs of imexguard.expect: a library function's argument check, blaming the function's caller.
local expect = require("imexguard.expect")

-- A library function as the modules write one: its first statement checks its argument.
local function lib(v)
  expect(v, "string", "lib: v must be a string")
  return "ok"
end

describe("imexguard.expect", function()
  it("returns nothing for a value of the type named", function()
    assert.equal("ok", lib("x"))
    assert.is_nil(expect({}, "table", "unused"))
  end)

  it("raises the message at the caller of the function that checks (as error(message, 2) there)",
    function()
    local line
    local ok, err = pcall(function()
      line = debug.getinfo(1, "l").currentline + 1
      lib(1) -- this line is blamed
    end)
    assert.is_false(ok)
    assert.equal("tests/lua/expect_spec.lua:" .. line .. ": lib: v must be a string", err)
  end)

  it("formats the message with the arguments that follow, only when it raises", function()
    assert.has_error(function() expect(nil, "table", "f: entry %d is a %s", 3, type(nil)) end,
      "f: entry 3 is a nil")
    assert.has_no.errors(function() expect("x", "string", "f: %d", "not a number") end)
    assert.has_error(function() expect(1, "string", "f: 100% sure") end, "f: 100% sure")
  end)
end)
