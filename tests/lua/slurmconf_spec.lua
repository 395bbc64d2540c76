-- SPDX-License-Identifier: Apache-2.0
-- Specs for imexguard.slurmconf (C38 of docs/design.md, "Field cases"): slurm.conf where Slurm
-- keeps it (SLURM_CONF, the setting, the configless link), its Includes, keys as Slurm reads them.
local testing = require("imexguard.testing")
local slurmconf = require("imexguard.slurmconf")

local function host(files) return testing.host{ files = files } end

describe("slurmconf.read and get", function()
  it("reads Key=Value pairs as Slurm does: any case, several per line, comments, quotes, last wins",
    function()
    local h = host{ ["/etc/slurm/slurm.conf"] = table.concat({
      "ClusterName=c # the cluster",
      "#SwitchType=switch/commented",
      "  switchtype = switch/none",
      "NodeName=n[1-4] CPUs=4 Feature=\"a b\" # x=y",
      "Weird=a\\#b",
      "SWITCHTYPE=switch/nvidia_imex",
    }, "\n") }
    local conf = assert(slurmconf.read(h, "/etc/slurm/slurm.conf"))
    local v, where = slurmconf.get(conf, "SwitchType")
    assert.equal("switch/nvidia_imex", v)
    assert.same({ file = "/etc/slurm/slurm.conf", line = 6 }, where)
    assert.equal("4", slurmconf.get(conf, "cpus"))
    assert.equal("a b", slurmconf.get(conf, "Feature"))
    assert.equal("a#b", slurmconf.get(conf, "Weird"))
    assert.is_nil(slurmconf.get(conf, "x"))
    assert.is_nil(slurmconf.get(conf, "NoSuchKey"))
  end)

  it("follows Include (relative to the including file's directory, nested), in place", function()
    local h = host{
      ["/etc/slurm/slurm.conf"] = "SwitchType=switch/none\nInclude conf.d/switch.conf\nX=1\n",
      ["/etc/slurm/conf.d/switch.conf"] = "include more/imex.conf\n",
      ["/etc/slurm/conf.d/more/imex.conf"] = "SwitchType=switch/nvidia_imex\nX=2\n",
    }
    local conf = assert(slurmconf.read(h, "/etc/slurm/slurm.conf"))
    local v, where = slurmconf.get(conf, "SwitchType")
    assert.equal("switch/nvidia_imex", v)
    assert.same({ file = "/etc/slurm/conf.d/more/imex.conf", line = 1 }, where)
    assert.equal("1", slurmconf.get(conf, "X")) -- the line after the Include comes later
    assert.same({ "/etc/slurm/slurm.conf", "/etc/slurm/conf.d/switch.conf",
      "/etc/slurm/conf.d/more/imex.conf" }, conf.files)
    -- an absolute Include
    h = host{ ["/a/slurm.conf"] = "Include /b/x.conf\n", ["/b/x.conf"] = "SwitchType=switch/nvidia_imex\n" }
    local abs = assert(slurmconf.read(h, "/a/slurm.conf"))
    assert.equal("switch/nvidia_imex", slurmconf.get(abs, "SwitchType"))
    -- a comment after the Include's path, as Slurm strips it
    h = host{ ["/a/slurm.conf"] = "Include switch.conf # NVLink channels\n  include\tsw2.conf#x\n",
      ["/a/switch.conf"] = "SwitchType=switch/nvidia_imex\n", ["/a/sw2.conf"] = "X=3\n" }
    local commented = assert(slurmconf.read(h, "/a/slurm.conf"))
    assert.equal("switch/nvidia_imex", slurmconf.get(commented, "SwitchType"))
    assert.equal("3", slurmconf.get(commented, "X"))
  end)

  it("names a missing or unreadable Include with the line that includes it", function()
    local h = host{ ["/etc/slurm/slurm.conf"] = "A=1\nInclude switch.conf\n" }
    local conf, err = slurmconf.read(h, "/etc/slurm/slurm.conf")
    assert.is_nil(conf)
    assert.equal("/etc/slurm/switch.conf unreadable (Include on /etc/slurm/slurm.conf line 2): ENOENT", err)
    h = testing.host{ files = { ["/etc/slurm/slurm.conf"] = "x" }, fail = { ["/etc/slurm/slurm.conf"] =
      { read = "EACCES" } } }
    assert.equal("/etc/slurm/slurm.conf unreadable: EACCES",
      select(2, slurmconf.read(h, "/etc/slurm/slurm.conf")))
  end)

  it("refuses a cycle, nesting past MAX_DEPTH and a wildcard Include, naming them", function()
    local h = host{ ["/s/a.conf"] = "Include b.conf\n", ["/s/b.conf"] = "Include a.conf\n" }
    assert.matches("/s/a.conf includes itself %(Include on /s/b.conf line 1%)", select(2, slurmconf.read(h,
      "/s/a.conf")))
    local files = {}
    for i = 0, slurmconf.MAX_DEPTH + 1 do
      files["/d/" .. i .. ".conf"] = "Include " .. (i + 1) .. ".conf\n"
    end
    assert.matches("Include nested deeper than " .. slurmconf.MAX_DEPTH, select(2, slurmconf.read(host(files),
      "/d/0.conf")))
    h = host{ ["/s/slurm.conf"] = "Include conf.d/*.conf\n" }
    assert.matches("line 1: Include conf.d/%*.conf has a wildcard",
      select(2, slurmconf.read(h, "/s/slurm.conf")))
  end)

  it("dir: the directory of slurm.conf", function()
    assert.equal("/etc/slurm", slurmconf.dir("/etc/slurm/slurm.conf"))
    assert.equal("/", slurmconf.dir("/slurm.conf"))
    assert.equal(".", slurmconf.dir("slurm.conf"))
  end)
end)

describe("slurmconf.locate and load", function()
  local CACHE = "/var/spool/slurmd/conf-cache/slurm.conf"

  it("SLURM_CONF of the prolog's environment first (configless: the conf-cache)", function()
    local h = host{ [CACHE] = "SwitchType=switch/nvidia_imex\n",
      ["/etc/slurm/slurm.conf"] = "SwitchType=x\n" }
    local ctx = testing.ctx{ host = h, env = { SLURM_CONF = CACHE } }
    assert.same({ CACHE, "SLURM_CONF" }, { slurmconf.locate(ctx) })
    local conf = assert(slurmconf.load(ctx))
    assert.equal("switch/nvidia_imex", slurmconf.get(conf, "SwitchType"))
    assert.equal("SLURM_CONF", conf.source)
  end)

  it("a SLURM_CONF that does not exist is unreadable, never another file", function()
    local h = host{ ["/etc/slurm/slurm.conf"] = "SwitchType=x\n" }
    local conf, err = slurmconf.load(testing.ctx{ host = h, env = { SLURM_CONF = CACHE } })
    assert.is_nil(conf)
    assert.equal("slurm.conf (SLURM_CONF): " .. CACHE .. " unreadable: ENOENT", err)
  end)

  it("without SLURM_CONF: the setting, else the configless link, else none", function()
    local ctx = testing.ctx{ host = host{ ["/etc/slurm/slurm.conf"] = "A=1\n" }, env = {} }
    assert.same({ "/etc/slurm/slurm.conf", "setting slurm_conf" }, { slurmconf.locate(ctx) })
    ctx = testing.ctx{ host = host{ [slurmconf.CONFIGLESS] = "A=1\n" }, env = {} }
    assert.same({ slurmconf.CONFIGLESS, "configless" }, { slurmconf.locate(ctx) })
    ctx = testing.ctx{ host = host{}, env = {} }
    assert.is_nil(slurmconf.locate(ctx))
    assert.same({}, { slurmconf.load(ctx) })
  end)
end)

describe("slurmconf.partitions (C47: the topology a job's partition binds)", function()
  local function parts(text)
    local conf = assert(slurmconf.read(host{ ["/s/slurm.conf"] = text }, "/s/slurm.conf"))
    local out = {}
    for _, p in ipairs(slurmconf.partitions(conf)) do
      out[#out + 1] = string.format("%s=%s@%d", p.name, tostring(p.topology), p.line)
    end
    return out, conf
  end

  it("a line continued with a trailing backslash is one line, as Slurm joins it", function()
    local out, conf = parts(table.concat({
      "PartitionName=gb200 Nodes=gb200-[0-7] \\",
      "   State=UP Topology=gb200-racks",
      "PartitionName=cpu Nodes=gb200-[0-3],\\",
      "gb200-[4-7] \\   ",
      "  MaxTime=10 # comment \\",
      "Topology=eth",
      "# a comment that ends in a backslash \\",
      "PrologFlags=Alloc,\\ # DeferBatch",
      "DeferBatch",
    }, "\n") .. "\n")
    assert.same({ "gb200=gb200-racks@1", "cpu=nil@3" }, out)
    assert.equal("gb200-[0-3],gb200-[4-7]", (slurmconf.get(conf, "Nodes")))
    assert.same({ "eth", { file = "/s/slurm.conf", line = 6 } }, { slurmconf.get(conf, "Topology") })
    assert.same({ "Alloc,DeferBatch", { file = "/s/slurm.conf", line = 8 } },
      { slurmconf.get(conf, "PrologFlags") })
  end)

  it("PartitionName=DEFAULT lines add to the defaults before them, never reset them (slurm.conf(5))",
    function()
    assert.same({ "gb200=gb200-racks@1", "gb300=gb300-racks@4", "cpu=nil@6" }, (parts(table.concat({
      "PartitionName=DEFAULT Topology=gb200-racks",
      "PartitionName=DEFAULT MaxTime=60 State=UP",
      "PartitionName=gb200 Nodes=gb200-[0-7]",
      "PartitionName=gb300 Nodes=gb300-[0-7] Topology=gb300-racks",
      "PartitionName=DEFAULT Topology=",
      "PartitionName=cpu Nodes=c1",
    }, "\n") .. "\n")))
  end)

  it("a partition named on a second line: that line is ignored, the first counts (slurm.conf(5))", function()
    assert.same({ "gb200=gb200-racks@1" }, (parts(
      "PartitionName=gb200 Nodes=gb200-[0-7] Topology=gb200-racks\n"
      .. "PartitionName=gb200 Nodes=gb200-[0-3] Topology=gb300-racks\n")))
  end)
end)
