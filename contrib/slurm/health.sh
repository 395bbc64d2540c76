#!/bin/sh
# Slurm HealthCheckProgram= wrapper (slurm.conf: HealthCheckProgram=/usr/local/lib/imexguard/health.sh).
# slurmd runs it as root every HealthCheckInterval seconds, with no arguments, and does nothing with
# its exit status: a health check program must drain the node itself. This runs `imexguard health`
# (this node's IMEX, changing nothing, within 10 s) and, when it fails, drains this node with the
# one line it printed ("imexguard: OUTCOME: cause"), as `sinfo -R` then shows. A healthy or
# not applicable node is left as it is (a drained node is resumed by the admin: scontrol update
# NodeName=... State=RESUME). Overrides for tests: IMEXGUARD (the binary), SCONTROL.
imexguard=${IMEXGUARD:-/usr/local/sbin/imexguard}
scontrol=${SCONTROL:-scontrol}
node=${SLURMD_NODENAME:-$(hostname -s)}
reason=$("$imexguard" health)
rc=$?
[ "$rc" -eq 0 ] && exit 0
reason=$(printf '%s\n' "$reason" | head -n 1 | cut -c 1-200)
[ -n "$reason" ] || reason="imexguard: health check exited $rc"
timeout 10 "$scontrol" update NodeName="$node" State=DRAIN Reason="$reason"
exit "$rc"
