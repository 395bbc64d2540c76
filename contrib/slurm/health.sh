#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Slurm HealthCheckProgram= wrapper (slurm.conf: HealthCheckProgram=/usr/local/libexec/imexguard/health.sh).
# slurmd runs it as root every HealthCheckInterval seconds, with no arguments, and does nothing with
# its exit status: a health check program must drain, and resume, the node itself. This runs
# `imexguard health` (this node's IMEX, changing nothing, within 10 s) and then, as LBNL NHC does
# for the nodes it drained itself:
#   - unhealthy: drains this node with the one line it printed ("imexguard: OUTCOME: cause"), as
#     `sinfo -R` then shows; a node already drained or down for another reason (an admin's, NHC's,
#     Slurm's "Prolog error") keeps that reason;
#   - healthy or not applicable: resumes this node when it is drained with imexguard's own reason
#     (set here or by the prolog's setting drain_reason), told apart by the grammar of imexguard's
#     reasons (reason_re below: "imexguard: OUTCOME: cause", imexguard(8) DRAIN REASONS); a node
#     drained for any other reason is left as it is.
# The node's state and reason come from `scontrol show node` (lines "State=IDLE+DRAIN ..." and
# "Reason=TEXT [user@time]" of Slurm 22.05 and later). Where slurmd hands over slurmctld's verdict
# (SLURM_NODE_IS_HEALTHY: Slurm 26.05.2+ with SlurmctldParameters=health_check_report, the default
# from 26.11): "yes" (not down, drained, failed or in maintenance) needs no scontrol call at all (a
# healthy node changes nothing; an unhealthy one is drained with imexguard's line), "no" still asks
# scontrol for the reason, to tell imexguard's own drains apart. Exits with imexguard's status.
# Overrides for tests: IMEXGUARD (the binary), SCONTROL.
imexguard=${IMEXGUARD:-/usr/local/sbin/imexguard}
scontrol=${SCONTROL:-scontrol}
node=${SLURMD_NODENAME:-$(hostname -s)}
# The grammar of imexguard's reasons: lua/imexguard/drain.lua's REGEX, the same text (the lua tier's
# tests/lua/drain_spec.lua compares them); a POSIX extended regular expression for grep -E.
reason_re='^imexguard: (ok|skipped|peers-unhealthy|bad-input|policy-error|lock-timeout|conflict|unit-unknown|service-failed|ctl-unusable|domain-unhealthy|deadline-exceeded|write-failed|channel-failed|config-fault|config-mismatch|fabric-fault|fabric-unknown|settings-error|stuck-mismatch|slurm-conf-unreadable|driver-mismatch|refused|unit-flapping|not-placed|error): '
verdict=${SLURM_NODE_IS_HEALTHY:-}

line=$("$imexguard" health)
rc=$?
state=
current=
if [ "$verdict" = yes ]; then
	# slurmctld: neither drained nor down: nothing to resume, no reason to keep
	[ "$rc" -eq 0 ] && exit 0
else
	show=$(timeout 10 "$scontrol" show node "$node" 2>/dev/null)
	state=$(printf '%s\n' "$show" | sed -n 's/^[[:space:]]*State=\([^[:space:]]*\).*/\1/p' | head -n 1)
	current=$(printf '%s\n' "$show" | sed -n 's/^[[:space:]]*Reason=//p' | head -n 1)
fi
ours=no
printf '%s\n' "$current" | grep -Eq "$reason_re" && ours=yes

if [ "$rc" -eq 0 ]; then
	case $state in
	*DRAIN*)
		if [ "$ours" = yes ]; then
			echo "imexguard health.sh: $node is healthy again: resuming it (was: $current)" >&2
			timeout 10 "$scontrol" update NodeName="$node" State=RESUME
		fi
		;;
	esac
	exit 0
fi

# one line of at most 255 bytes (Slurm's reason in slurmdbd), as the grammar says imexguard prints it
line=$(printf '%s\n' "$line" | head -n 1 | cut -b 1-255)
[ -n "$line" ] || line="imexguard: error: health check exited $rc and printed no reason"
if [ -n "$current" ] && [ "$ours" = no ]; then
	case $state in
	*DRAIN* | *DOWN* | *FAIL*)
		echo "imexguard health.sh: $node is already drained for another reason ($current): not replacing it with: $line" >&2
		exit "$rc"
		;;
	esac
fi
timeout 10 "$scontrol" update NodeName="$node" State=DRAIN Reason="$line"
exit "$rc"
