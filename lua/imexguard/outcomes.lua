--- Outcomes of a run: name -> exit code, and the rule for peers-unhealthy.
-- Slurm drains a node on any non-zero prolog exit (slurmd: "Prolog error"), so only outcomes
-- where this node is at fault, or where going on would break another job, are non-zero.
local M = {}

M.codes = {
  ["ok"] = 0,
  ["skipped"] = 0,
  ["peers-unhealthy"] = 0,
  ["bad-input"] = 2,
  ["policy-error"] = 3,
  ["lock-timeout"] = 4,
  ["conflict"] = 5,
  ["unit-unknown"] = 6,
  ["service-failed"] = 7,
  ["ctl-unusable"] = 8,
  ["domain-unhealthy"] = 9,
  ["deadline-exceeded"] = 10,
  ["write-failed"] = 11,
}

--- Exit code of peers-unhealthy when the setting on_peer_fault is "fail".
M.PEERS_UNHEALTHY_FAIL = 12

--- Exit code for an outcome name.
-- @param name string outcome name
-- @param settings table|nil validated settings (on_peer_fault)
-- @return integer exit code, or nil when the name is not an outcome
function M.exit_code(name, settings)
  if name == "peers-unhealthy" and settings and settings.on_peer_fault == "fail" then
    return M.PEERS_UNHEALTHY_FAIL
  end
  return M.codes[name]
end

return M
