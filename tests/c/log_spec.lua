-- SPDX-License-Identifier: Apache-2.0
-- Logging (src/log.c): the stderr line slurmd keeps, captured from a child lua5.4 process.
local H = require("helpers")

describe("host.log", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() H.rmdir(dir) end)

  -- run `code` in a child and return its stderr
  local function stderr_of(code, env)
    local cmd = H.lua_cmd(dir, "child", code)
    return H.sh(string.format("%s %s 2>&1 >/dev/null", env or "IMEXGUARD_NO_JOURNAL=1", cmd)) .. "\n"
  end

  it("writes one plain line per event on stderr", function()
    local err = stderr_of([[
      local h = require("imexguard.host")
      h.log("warning", "node list changed", { job = "101", nodes = 2, ok = true })
      h.log("err", "two\nlines\r\nhere")
      h.log("info", "done")
      h.log("notice", "n")
      h.log("debug", "not shown by default")
    ]])
    assert.equal("imexguard: warning: node list changed\n" ..
      "imexguard: err: two lines  here\n" ..
      "imexguard: info: done\n" ..
      "imexguard: notice: n\n", err)
  end)

  it("ignores an unreachable journald", function()
    local err = stderr_of([[
      local h = require("imexguard.host")
      h.log("info", "with journal", { job = "7" })
      io.stderr:write("after\n")
    ]], "env -u IMEXGUARD_NO_JOURNAL")
    assert.equal("imexguard: info: with journal\nafter\n", err)
  end)

  it("raises on misuse", function()
    local err = stderr_of([[
      local h = require("imexguard.host")
      for _, f in ipairs({
        function() h.log("loud", "x") end,
        function() h.log("info") end,
        function() h.log("info", "x", { job = {} }) end,
        function() h.log("info", "x", { [1] = "positional" }) end,
        function() h.log("info", "x", "fields") end,
      }) do
        io.stderr:write(pcall(f) and "no error\n" or "raised\n")
      end
    ]])
    assert.equal(string.rep("raised\n", 5), err)
  end)
end)
