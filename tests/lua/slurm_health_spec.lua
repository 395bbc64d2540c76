-- SPDX-License-Identifier: Apache-2.0
-- The health check wrappers, as shell: contrib/slurm/health.sh (Slurm's HealthCheckProgram) with a
-- fake imexguard and a fake scontrol (recording each call's argv, answering `show node` with a
-- node of a given state and reason, in Slurm 22.05's layout), and contrib/nhc/imexguard.nhc's
-- check_imexguard under a minimal NHC harness (a `die` that records its arguments).
local H = require("helpers")
local q = H.q

--- A fake imexguard: `health` prints `line` (when given) and exits `rc`.
local function fake_imexguard(dir, rc, line)
  local path = dir .. "/imexguard"
  H.write(path, "#!/bin/sh\n[ \"$1\" = health ] || exit 64\n"
    .. (line and ("printf '%s\\n' " .. q(line) .. "\n") or "") .. "exit " .. rc .. "\n", "0755")
  return path
end

--- A fake scontrol: every call appends its argv (one argument a line, then "--") to DIR/calls;
-- `show node N` prints a node N in `state` with `reason` (none when nil).
local function fake_scontrol(dir, state, reason)
  local path = dir .. "/scontrol"
  local show = {
    "NodeName=$3 Arch=x86_64 CoresPerSocket=1",
    "   CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=0.00",
    "   State=" .. state .. " ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
    "   Partitions=p",
  }
  if reason then show[#show + 1] = "   Reason=" .. reason .. " [root@2026-12-02T00:40:00]" end
  H.write(path, "#!/bin/sh\n{ printf '%s\\n' \"$@\"; echo --; } >>" .. q(dir .. "/calls") .. "\n"
    .. "if [ \"$1\" = show ]; then cat <<EOF\n" .. table.concat(show, "\n") .. "\nEOF\nfi\n", "0755")
  return path
end

--- Run health.sh on node gb03 (slurmctld's verdict SLURM_NODE_IS_HEALTHY = verdict when given);
-- returns its exit status and the scontrol calls (list of argv).
local function health_sh(dir, ig, sc, verdict)
  local rc = tonumber(H.sh(string.format("env -i PATH=/usr/bin:/bin SLURMD_NODENAME=gb03 %s"
    .. "IMEXGUARD=%s SCONTROL=%s sh contrib/slurm/health.sh 2>/dev/null; echo $?",
    verdict and ("SLURM_NODE_IS_HEALTHY=" .. verdict .. " ") or "", q(ig), q(sc))))
  local calls, cur = {}, {}
  for l in ((H.read(dir .. "/calls")) or ""):gmatch("[^\n]*\n") do
    l = l:sub(1, -2)
    if l == "--" then
      calls[#calls + 1] = table.concat(cur, " ")
      cur = {}
    else
      cur[#cur + 1] = l
    end
  end
  return rc, calls
end

describe("contrib/slurm/health.sh", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() H.rmdir(dir) end)

  it("healthy, drained with imexguard's reason: resumes the node", function()
    local rc, calls = health_sh(dir, fake_imexguard(dir, 0),
      fake_scontrol(dir, "IDLE+DRAIN", "imexguard: domain-unhealthy: this node gb03 is not healthy"))
    assert.equal(0, rc)
    assert.same({ "show node gb03", "update NodeName=gb03 State=RESUME" }, calls)
  end)

  it("healthy, drained for another reason: leaves the node drained", function()
    -- not imexguard's grammar (drain.REGEX): another prefix, or no outcome after "imexguard: "
    for _, reason in ipairs({ "maintenance: DIMM swap", "NHC: check_fs_mount: /scratch", "Prolog error",
      " imexguard: not at the start", "imexguard: maintenance: rack 7 (an admin's words)" }) do
      os.remove(dir .. "/calls")
      local rc, calls = health_sh(dir, fake_imexguard(dir, 0), fake_scontrol(dir, "IDLE+DRAIN", reason))
      assert.equal(0, rc)
      assert.same({ "show node gb03" }, calls, reason)
    end
  end)

  it("healthy, drained by its own usage error line ('imexguard: error: ...'): resumes the node", function()
    local rc, calls = health_sh(dir, fake_imexguard(dir, 0),
      fake_scontrol(dir, "IDLE+DRAIN", "imexguard: error: health check exited 1 and printed no reason"))
    assert.equal(0, rc)
    assert.same({ "show node gb03", "update NodeName=gb03 State=RESUME" }, calls)
  end)

  it("healthy and not drained: changes nothing", function()
    local rc, calls = health_sh(dir, fake_imexguard(dir, 0), fake_scontrol(dir, "IDLE"))
    assert.equal(0, rc)
    assert.same({ "show node gb03" }, calls)
  end)

  it("unhealthy: drains the node with imexguard's line as the reason", function()
    local line = "imexguard: local-fault: this node's daemon is down (unit nvidia-imex.service failed)"
    local rc, calls = health_sh(dir, fake_imexguard(dir, 9, line), fake_scontrol(dir, "IDLE"))
    assert.equal(9, rc)
    assert.same({ "show node gb03", "update NodeName=gb03 State=DRAIN Reason=" .. line }, calls)
  end)

  it("unhealthy without a line: drains with a reason naming the exit status", function()
    local rc, calls = health_sh(dir, fake_imexguard(dir, 3), fake_scontrol(dir, "ALLOCATED"))
    assert.equal(3, rc)
    assert.same({ "show node gb03",
      "update NodeName=gb03 State=DRAIN Reason=imexguard: error: health check exited 3 and printed no "
        .. "reason" }, calls)
  end)

  it("unhealthy, already drained by imexguard: the reason is brought up to date", function()
    local rc, calls = health_sh(dir, fake_imexguard(dir, 9, "imexguard: domain-unhealthy: now"),
      fake_scontrol(dir, "IDLE+DRAIN", "imexguard: service-failed: before"))
    assert.equal(9, rc)
    assert.same({ "show node gb03",
      "update NodeName=gb03 State=DRAIN Reason=imexguard: domain-unhealthy: now" }, calls)
  end)

  it("unhealthy, drained for another reason: keeps that reason", function()
    local rc, calls = health_sh(dir, fake_imexguard(dir, 9, "imexguard: domain-unhealthy: x"),
      fake_scontrol(dir, "IDLE+DRAIN", "maintenance: DIMM swap"))
    assert.equal(9, rc)
    assert.same({ "show node gb03" }, calls)
  end)
end)

describe("contrib/slurm/health.sh with slurmctld's verdict (Slurm 26.05 health_check_report)", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() H.rmdir(dir) end)

  it("yes and healthy: no scontrol call at all", function()
    local rc, calls = health_sh(dir, fake_imexguard(dir, 0), fake_scontrol(dir, "IDLE"), "yes")
    assert.equal(0, rc)
    assert.same({}, calls)
  end)

  it("yes and unhealthy: drained with imexguard's line, without asking for the node first", function()
    local line = "imexguard: domain-unhealthy: this node gb03 is not healthy"
    local rc, calls = health_sh(dir, fake_imexguard(dir, 9, line), fake_scontrol(dir, "IDLE"), "yes")
    assert.equal(9, rc)
    assert.same({ "update NodeName=gb03 State=DRAIN Reason=" .. line }, calls)
  end)

  it("no: the reason is still read, to resume only imexguard's own drains", function()
    local rc, calls = health_sh(dir, fake_imexguard(dir, 0),
      fake_scontrol(dir, "IDLE+DRAIN", "imexguard: domain-unhealthy: before"), "no")
    assert.equal(0, rc)
    assert.same({ "show node gb03", "update NodeName=gb03 State=RESUME" }, calls)
    os.remove(dir .. "/calls")
    rc, calls = health_sh(dir, fake_imexguard(dir, 0), fake_scontrol(dir, "IDLE+DRAIN", "maintenance"), "no")
    assert.equal(0, rc)
    assert.same({ "show node gb03" }, calls)
    os.remove(dir .. "/calls")
    rc, calls = health_sh(dir, fake_imexguard(dir, 9, "imexguard: domain-unhealthy: x"),
      fake_scontrol(dir, "DOWN+DRAIN", "Not responding"), "no")
    assert.equal(9, rc)
    assert.same({ "show node gb03" }, calls)
  end)
end)

describe("contrib/nhc/imexguard.nhc (check_imexguard)", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() H.rmdir(dir) end)

  --- Source the check file as NHC does (bash, TIMEOUT set, a `die` of NHC's signature that
  -- records its arguments) and run `check_imexguard ARGS`; returns its status and die's record.
  local function nhc(args, env)
    local harness = dir .. "/harness.bash"
    H.write(harness, "TIMEOUT=30\n"
      .. "die() { printf '%s|%s\\n' \"$1\" \"$2\" >>" .. q(dir .. "/died") .. "; return \"$1\"; }\n"
      .. ". contrib/nhc/imexguard.nhc\n"
      .. "check_imexguard \"$@\"\n")
    local rc = tonumber(H.sh(string.format("env -i PATH=/usr/bin:/bin %s bash %s %s; echo $?", env or "",
      q(harness), args or "")))
    return rc, H.read(dir .. "/died")
  end

  it("healthy: passes without calling die", function()
    local rc, died = nhc("-e " .. q(fake_imexguard(dir, 0)))
    assert.equal(0, rc)
    assert.is_nil(died)
  end)

  it("unhealthy: die 1 with the check's name and imexguard's line", function()
    local rc, died = nhc("-e " .. q(fake_imexguard(dir, 9, "imexguard: domain-unhealthy: this node gb03 x")))
    assert.equal(1, rc)
    assert.equal("1|check_imexguard:  imexguard: domain-unhealthy: this node gb03 x\n", died)
  end)

  it("the binary from IMEXGUARD_BIN; a missing one fails naming it", function()
    local rc, died = nhc("", "IMEXGUARD_BIN=" .. q(fake_imexguard(dir, 0)))
    assert.equal(0, rc)
    assert.is_nil(died)
    rc, died = nhc("-e " .. q(dir .. "/absent"))
    assert.equal(1, rc)
    assert.equal("1|check_imexguard:  " .. dir .. "/absent not found or not executable.\n", died)
  end)

  it("a timeout above NHC's own is refused; a hung imexguard is killed and named", function()
    local rc, died = nhc("-t 60 -e " .. q(fake_imexguard(dir, 0)))
    assert.equal(1, rc)
    assert.matches("^1|check_imexguard:  Command timeout 60 exceeds NHC timeout 30\n$", died)
    os.remove(dir .. "/died")
    local hung = dir .. "/hung"
    H.write(hung, "#!/bin/sh\nexec sleep 30\n", "0755")
    rc, died = nhc("-t 1 -e " .. q(hung))
    assert.equal(1, rc)
    assert.equal("1|check_imexguard:  imexguard: TIMEOUT after 1s of \"" .. hung .. " health\"\n", died)
  end)
end)
