#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# `make demo`: the prolog on a simulated IMEX domain under a private systemd user manager.
# Arguments go to contrib/demo.lua (--nodes=18 simulates one NVL72 rack); the demo stops and
# removes everything it started before it returns.
# `make demo KEEP=1` (--keep): the same, then the simulated rack stays up in the background for
# experiments with contrib/demo/node (one command on one node) until it is stopped by its PID
# (kill PID), which this prints. Its files are in build/demo (IMEXGUARD_DEMO_DIR), removed by the
# next `make demo KEEP=1` or `make clean`.
set -eu
cd "$(dirname "$0")/.."
export IMEXGUARD_NO_JOURNAL=1
keep=no
for a in "$@"; do
	[ "$a" = --keep ] && keep=yes
done
[ "$keep" = yes ] || exec tests/with-systemd lua5.4 contrib/demo.lua "$@"

dir=${IMEXGUARD_DEMO_DIR:-$PWD/build/demo}
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
	echo "demo: a demo rack is already running (PID $(cat "$dir/pid")); stop it first: kill $(cat "$dir/pid")" >&2
	exit 1
fi
rm -rf "$dir"
mkdir -p "$dir"
args=""
for a in "$@"; do
	[ "$a" = --keep ] || args="$args $a"
done
# In its own session (setsid: no terminal's signals reach it); the process writes its own PID,
# which stays the rack's through tests/with-systemd's exec of unshare.
# shellcheck disable=SC2086 # args: --nodes=N words
setsid sh -c 'echo $$ >"$1/pid"; shift; exec "$@"' sh "$dir" \
	tests/with-systemd lua5.4 contrib/demo.lua $args --keep="$dir" </dev/null >"$dir/demo.log" 2>&1 &
# Wait (deadline 120 s) until the rack is up (contrib/demo.lua writes env) or the demo has ended.
end=$(($(date +%s) + 120))
while [ ! -f "$dir/env" ]; do
	pid=$(cat "$dir/pid" 2>/dev/null || true)
	if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null || [ "$(date +%s)" -gt "$end" ]; then
		cat "$dir/demo.log"
		[ -n "$pid" ] && kill "$pid" 2>/dev/null
		echo "demo: the rack did not come up (log above: $dir/demo.log)" >&2
		exit 1
	fi
	sleep 0.1
done
pid=$(cat "$dir/pid")
cat "$dir/demo.log"
# shellcheck source=/dev/null
. "$dir/env"
first=${DEMO_NODES%% *}
last=${DEMO_NODES##* }
cat <<EOT

The demo rack is up: simulated nodes $first..$last (job 4 on all of them) in the background, PID $pid.
One command on one node (contrib/demo/node NODE COMMAND; the demo has no Slurm: contrib/demo/scontrol
stands in for it, one file per node in $dir/slurm):
  contrib/demo/node $last status            imexguard status on $last (also health, plan, prolog, epilog)
  contrib/demo/node $last systemctl stop    stop $last's IMEX daemon (start, restart, status)
  contrib/demo/node $last health.sh         Slurm's HealthCheckProgram: drains or resumes $last
  contrib/demo/node $last ctl -N            nvidia-imex-ctl -N on $last
  contrib/demo/scontrol show node $last     the node's drain state and reason
Stop the rack: kill $pid
EOT
