-- SPDX-License-Identifier: Apache-2.0
-- Specs for imexguard.slurmenv (field case C11 of docs/design.md) against the captured 22.05 prolog
-- environment.
local slurmenv = require("imexguard.slurmenv")
local hostlist = require("imexguard.hostlist")

local function load_env(path)
  local env = {}
  for line in assert(io.lines(path)) do
    if line ~= "" and not line:find("^#") then
      local k, v = line:match("^([%w_]+)=(.*)$")
      assert(k, "bad fixture line: " .. line)
      env[k] = v
    end
  end
  return env
end

local function copy(t, extra)
  local c = {}
  for k, v in pairs(t) do
    c[k] = v
  end
  for k, v in pairs(extra or {}) do
    c[k] = v ~= false and v or nil
  end
  return c
end

describe("slurmenv with the 22.05 prolog environment", function()
  local env = load_env("tests/fixtures/slurm/prolog-env-22.05.txt")

  it("falls back to SLURM_NODELIST (22.05 has no SLURM_JOB_NODELIST)", function()
    assert.is_nil(env.SLURM_JOB_NODELIST)
    local expr, source, warning = slurmenv.nodelist(env)
    assert.equal("n[1-3]", expr)
    assert.equal("SLURM_NODELIST", source)
    assert.is_nil(warning)
    assert.same({ "n1", "n2", "n3" }, hostlist.expand(expr))
  end)

  it("reads the job", function()
    assert.same({
      id = "1", nodename = "n2", user = "root", uid = "0", oversubscribe = nil, partition = "p",
      nodelist = "n[1-3]", nodelist_source = "SLURM_NODELIST",
    }, slurmenv.job(env))
  end)

  it("uses SLURM_JOBID when SLURM_JOB_ID is missing, and reads SLURM_JOB_OVERSUBSCRIBE", function()
    local job = slurmenv.job(copy(env,
      { SLURM_JOB_ID = false, SLURM_JOBID = "77", SLURM_JOB_OVERSUBSCRIBE = "NO" }))
    assert.equal("77", job.id)
    assert.equal("NO", job.oversubscribe)
  end)
end)

describe("slurmenv: the job's exclusivity in the prolog of 24.11 and 26.05 (C49)", function()
  local env24 = load_env("tests/fixtures/slurm/prolog-env-24.11.txt")
  local env26 = load_env("tests/fixtures/slurm/prolog-env-26.05.txt")

  it("reads both variables of the real prologs (a job in an OverSubscribe=EXCLUSIVE partition)", function()
    local job = slurmenv.job(env26)
    assert.equal("NO", job.oversubscribe)
    assert.equal("NODE", job.exclusive)
    assert.equal("p", job.partition)
    assert.same({ oversubscribe = "NO", exclusive_var = "NODE", exclusive = "node", unknown = {} },
      slurmenv.sharing(env26))
    job = slurmenv.job(env24)
    assert.equal("NO", job.oversubscribe)
    assert.is_nil(job.exclusive)
    assert.same({ oversubscribe = "NO", exclusive = "node", unknown = {} }, slurmenv.sharing(env24))
  end)

  -- Every pair tests/slurm24/env_spec.lua saw (SLURM_JOB_OVERSUBSCRIBE SLURM_JOB_EXCLUSIVE, "-": unset)
  -- and what the job asked for.
  local SEEN = {
    ["24.11"] = { ["OK -"] = "no", ["NO -"] = "node", ["USER -"] = "user", ["MCS -"] = "mcs",
      ["TOPO -"] = "topo", ["YES -"] = "no" },
    ["26.05"] = { ["NO NO"] = "no", ["NO NODE"] = "node", ["NO USER"] = "user", ["NO MCS"] = "mcs",
      ["NO TOPO"] = "topo", ["YES NO"] = "no", ["OK NO"] = "no", ["OK USER"] = "user", ["OK MCS"] = "mcs",
      ["OK TOPO"] = "topo" },
  }
  for release, pairs_seen in pairs(SEEN) do
    it("every value Slurm " .. release .. " sets is known, and what it means", function()
      for pair, want in pairs(pairs_seen) do
        local o, e = pair:match("^(%S+) (%S+)$")
        local base = release == "26.05" and env26 or env24
        local sh = slurmenv.sharing(copy(base, { SLURM_JOB_OVERSUBSCRIBE = o,
          SLURM_JOB_EXCLUSIVE = e ~= "-" and e or false }))
        assert.same({}, sh.unknown, pair)
        assert.equal(want, sh.exclusive, release .. " " .. pair)
      end
    end)
  end

  it("26.05's NO is not a whole node: SLURM_JOB_EXCLUSIVE decides when it is set", function()
    assert.equal("no", slurmenv.sharing({ SLURM_JOB_OVERSUBSCRIBE = "NO",
      SLURM_JOB_EXCLUSIVE = "NO" }).exclusive)
    assert.equal("node", slurmenv.sharing({ SLURM_JOB_OVERSUBSCRIBE = "NO" }).exclusive)
  end)

  it("neither set (22.05): nothing said; a value no release sets is named", function()
    assert.same({ unknown = {} }, slurmenv.sharing({}))
    local sh = slurmenv.sharing({ SLURM_JOB_OVERSUBSCRIBE = "MAYBE", SLURM_JOB_EXCLUSIVE = "RACK" })
    assert.same({ "SLURM_JOB_OVERSUBSCRIBE=MAYBE", "SLURM_JOB_EXCLUSIVE=RACK" }, sh.unknown)
    assert.is_nil(sh.exclusive)
  end)
end)

describe("slurmenv.nodelist (C11)", function()
  it("uses SLURM_JOB_NODELIST alone", function()
    local expr, source, warning = slurmenv.nodelist({ SLURM_JOB_NODELIST = "gpu[01-04]" })
    assert.equal("gpu[01-04]", expr)
    assert.equal("SLURM_JOB_NODELIST", source)
    assert.is_nil(warning)
  end)

  it("prefers SLURM_JOB_NODELIST without a warning when both agree", function()
    local expr, source, warning =
      slurmenv.nodelist({ SLURM_JOB_NODELIST = "n[1-2]", SLURM_NODELIST = "n[1-2]" })
    assert.equal("n[1-2]", expr)
    assert.equal("SLURM_JOB_NODELIST", source)
    assert.is_nil(warning)
  end)

  it("prefers SLURM_JOB_NODELIST and warns, naming both, when they differ", function()
    local expr, source, warning =
      slurmenv.nodelist({ SLURM_JOB_NODELIST = "n[1-2]", SLURM_NODELIST = "n[1-3]" })
    assert.equal("n[1-2]", expr)
    assert.equal("SLURM_JOB_NODELIST", source)
    assert.truthy(warning:find("SLURM_JOB_NODELIST='n[1-2]'", 1, true))
    assert.truthy(warning:find("SLURM_NODELIST='n[1-3]'", 1, true))
  end)

  it("falls back with a warning when SLURM_JOB_NODELIST is blank", function()
    local expr, source, warning = slurmenv.nodelist({ SLURM_JOB_NODELIST = " ", SLURM_NODELIST = "n1" })
    assert.equal("n1", expr)
    assert.equal("SLURM_NODELIST", source)
    assert.truthy(warning:find("blank", 1, true))
  end)

  it("trims surrounding whitespace", function()
    assert.equal("n[1-2]", (slurmenv.nodelist({ SLURM_NODELIST = " n[1-2]\n" })))
  end)

  for name, env in pairs({
    neither = {},
    empty = { SLURM_JOB_NODELIST = "", SLURM_NODELIST = "" },
    whitespace = { SLURM_NODELIST = " \t\n" },
  }) do
    it("is an error naming both variables when " .. name, function()
      local expr, err = slurmenv.nodelist(env)
      assert.is_nil(expr)
      assert.truthy(err:find("SLURM_JOB_NODELIST", 1, true))
      assert.truthy(err:find("SLURM_NODELIST", 1, true))
      assert.is_nil(slurmenv.job(env).nodelist)
    end)
  end

  it("raises on a non-table environment", function()
    assert.has_error(function() slurmenv.nodelist("SLURM_NODELIST=n1") end)
    assert.has_error(function() slurmenv.job(nil) end)
  end)
end)
