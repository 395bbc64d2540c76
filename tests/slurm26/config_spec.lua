-- SPDX-License-Identifier: Apache-2.0
-- What Slurm 26.05 says about the tier's configuration (tests/slurm26/run): it accepts
-- SlurmctldParameters=health_check_report; it logs no warning about BatchStartTimeout (10 s, the
-- default) below PrologEpilogTimeout (60 s), a warning that SchedMD's development branch adds after
-- 26.05, so imexguard's `-t` is alone in saying it.
local cluster = require "tests.e2e.cluster"
local simdomain = require "simdomain"

describe("Slurm 26.05 on the tier's slurm.conf", function()
  local conf, log

  setup(function()
    local ok
    ok, conf = cluster.sh("scontrol show config")
    assert(ok, conf)
    log = simdomain.read_file(cluster.logdir .. "/slurmctld.log") or ""
  end)

  it("accepts SlurmctldParameters=health_check_report", function()
    assert.truthy(conf:match("\nSlurmctldParameters%s+= enable_configless,health_check_report\n"), conf)
    assert.is_nil(log:match("[^\n]*health_check_report[^\n]*"))
  end)

  it("logs no warning about BatchStartTimeout below the prolog timeout", function()
    assert.truthy(conf:match("\nBatchStartTimeout%s+= 10 sec\n"), conf)
    assert.truthy(conf:match("\nPrologEpilogTimeout%s+= 60\n"), conf)
    assert.is_nil(log:match("[^\n]*BatchStartTimeout[^\n]*"))
  end)
end)
