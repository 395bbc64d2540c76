-- SPDX-License-Identifier: Apache-2.0
-- The man pages imexguard(8) and imexguard.conf(5) (man/*.scd.in, built by `make man` into
-- build/man): mandoc finds nothing wrong in them, and the settings and outcomes they show agree with
-- the code's own sources, lua/imexguard/settings.lua (schema) and lua/imexguard/outcomes.lua,
-- in both directions. The pages are read as a reader sees them (mandoc's text output), so a fault
-- of the generator (man/gen.lua) or of the page sources shows here.
local H = require("helpers")
local settings = require("imexguard.settings")
local outcomes = require("imexguard.outcomes")
local q = H.q

local MAN = "build/man"

-- The page rendered as plain text, one paragraph per line (no wrapping: width 400).
local function render(page)
  return H.sh("mandoc -T ascii -O width=400 " .. q(MAN .. "/" .. page) .. " | col -b")
end

-- The lines of one section (from its heading to the next heading) of a rendered page.
local function section(text, heading)
  local out, inside = {}, false
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do
    if l:match("^%u[%u ]+$") then
      inside = (l == heading)
    elseif inside then
      out[#out + 1] = l
    end
  end
  assert(#out > 0, "no section " .. heading)
  return out
end

-- A default as the settings file writes it.
local function lit(v)
  if v == nil then
    return "unset"
  elseif type(v) == "string" then
    return string.format("%q", v)
  end
  return tostring(v)
end

describe("man pages", function()
  setup(function()
    assert(os.execute("make -s --no-print-directory man >/dev/null"), "make man failed")
  end)

  for _, page in ipairs({ "imexguard.8", "imexguard.conf.5" }) do
    it(page .. ": mandoc -T lint reports no warning or error", function()
      local out = H.sh("mandoc -T lint -W warning " .. q(MAN .. "/" .. page) .. " 2>&1; echo rc=$?")
      assert.equal("rc=0", out)
    end)
  end

  it("imexguard.conf(5) shows every setting of the schema, with its type, default and unit", function()
    local entries, name = {}, nil
    for _, l in ipairs(section(render("imexguard.conf.5"), "SETTINGS")) do
      local n = l:match("^       ([%w_]+)$")
      if n then
        name = n
        entries[name] = ""
      elseif name then
        entries[name] = entries[name] .. " " .. l
      end
    end
    for _, e in ipairs(settings.schema) do
      local body = entries[e.name]
      assert(body, "setting " .. e.name .. " is not in imexguard.conf(5)")
      local default, unit = body:match("Default: (.-)%. Unit: (%a+)%.")
      assert.equal(lit(e.default), default, e.name)
      assert.equal(e.unit or (e.kind == "number" and "seconds" or "none"), unit, e.name)
      for _, v in ipairs(e.values or {}) do
        assert.matches('"' .. v .. '"', body, 1, true)
      end
      entries[e.name] = nil
    end
    assert.same({}, entries, "settings in imexguard.conf(5) that the schema does not have")
  end)

  it("imexguard(8) shows every outcome with its exit code, and no other", function()
    local shown = {}
    for _, l in ipairs(section(render("imexguard.8"), "EXIT STATUS")) do
      local n, code = l:match("^       ([%l-]+), exit (%d+)")
      if n then shown[n] = tonumber(code) end
      if n == "peers-unhealthy" then
        assert.matches("exit " .. outcomes.PEERS_UNHEALTHY_FAIL .. ' with on_peer_fault = "fail"', l, 1, true)
      end
    end
    assert.same(outcomes.codes, shown)
  end)

  it("imexguard(8) documents the health check, drain reasons, metrics, files and examples", function()
    local text = render("imexguard.8")
    local metrics = require("imexguard.metrics")
    local shown = {}
    for _, l in ipairs(section(text, "METRICS")) do
      local n = l:match("^       (imexguard_[%w_]+) %(")
      if n then shown[#shown + 1] = n end
    end
    assert.same(metrics.ORDER, shown)
    local health = table.concat(section(text, "HEALTH CHECKS"), "\n")
    assert.matches("State=RESUME", health, 1, true)
    assert.matches("check_imexguard", health, 1, true)
    local reasons = table.concat(section(text, "DRAIN REASONS"), "\n")
    assert.matches("at most " .. require("imexguard.drain").MAX_REASON .. " bytes", reasons, 1, true)
    -- the grammar of a reason: the one expression of lua/imexguard/drain.lua, on a line of its own
    local re = require("imexguard.drain").REGEX:gsub(" $", ""):gsub("%p", "%%%0")
    assert.matches("\n%s+" .. re .. " ?\n", reasons .. "\n")
    local files = table.concat(section(text, "FILES"), "\n")
    for _, f in ipairs({ "/usr/libexec/imexguard/health.sh", "/usr/share/imexguard/nhc/imexguard.nhc",
      "/usr/share/bash-completion/completions/imexguard", "/usr/share/doc/imexguard/" }) do
      assert.matches(f, files, 1, true)
    end
    local examples = table.concat(section(text, "EXAMPLES"), "\n")
    assert.matches("HealthCheckProgram=/usr/libexec/imexguard/health.sh", examples, 1, true)
    assert.not_matches("/usr/lib/imexguard/", text) -- the wrappers are in libexec
  end)

  it("the commented default settings file names every setting, its default commented out", function()
    local text = assert(H.read("contrib/imexguard.conf.example"))
    for l in text:gmatch("[^\n]+") do
      assert.matches("^%-%-", l) -- every line is a comment: the default file changes nothing
    end
    for _, e in ipairs(settings.schema) do
      local v = text:match("\n%-%- " .. e.name .. " = ([^\n]+)")
      assert(v, "setting " .. e.name .. " is not in contrib/imexguard.conf.example")
      if e.default ~= nil then assert.equal(lit(e.default), v, e.name) end
    end
  end)
end)
