#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/baseline-prolog.sh: the BASELINE of `make bench`, not part of imexguard and not for production.
#
# A Slurm prolog written the way the widely deployed IMEX prolog scripts work (docs/design.md, "IMEX
# facts the code relies on", How sites run it today; "Performance goals"), in their later form that skips the restart when
# the daemon already lists the expected hosts:
#   1. flock on a lock file with a timeout (on timeout the lock file is deleted, as the copied
#      "deadlock recovery" does, and the prolog fails);
#   2. expand the job's hostlist (SLURM_JOB_NODELIST, else SLURM_NODELIST) with a shell loop, no
#      scontrol; map names to addresses with a static "name address" map file;
#   3. compare with nodes_config.cfg; if it differs, rewrite it with a truncating redirect (`>`);
#   4. `systemctl is-active`; if active and the list did not change, `nvidia-imex-ctl -N -j` and a jq
#      compare of the listed hosts with the desired ones;
#   5. when anything differs: stop the unit, `pkill -9` the daemon, start the unit, then sleep a fixed
#      time (the scripts in the wild sleep 30-45 s; the bench uses BASELINE_SLEEP, default 2 s);
#   6. exit 0 (the lock is held until the script exits: `exec 9>`).
#
# Settings (environment, defaults are the real paths of a GB200 node):
#   BASELINE_UNIT          systemd unit                     (nvidia-imex.service)
#   BASELINE_SYSTEMCTL     systemctl command line           (systemctl; the bench: systemctl --user)
#   BASELINE_CTL           nvidia-imex-ctl                  (/usr/bin/nvidia-imex-ctl)
#   BASELINE_IMEX_CONFIG   config.cfg given to the ctl -c   (/etc/nvidia-imex/config.cfg)
#   BASELINE_NODES_FILE    node list                        (/etc/nvidia-imex/nodes_config.cfg)
#   BASELINE_ADDRESS_MAP   "name address" lines             (/etc/imexguard/addresses)
#   BASELINE_LOCK          lock file                        (/var/lock/nvidia-imex-prolog.lock)
#   BASELINE_LOCK_TIMEOUT  seconds to wait for the lock     (60)
#   BASELINE_SLEEP         seconds of the fixed sleep       (2)
#   BASELINE_DAEMON_PATTERN  pkill -9 -f ERE of this node's daemon; unset: `pkill -9 -x nvidia-imex`
#   BASELINE_ALWAYS_RESTART  1: restart on every job, the earlier form of the copied scripts (0)
# Exit: 0 done; 1 lock timeout, bad hostlist, unknown node name, or a failed start.
set -u

UNIT=${BASELINE_UNIT:-nvidia-imex.service}
read -ra SYSTEMCTL <<<"${BASELINE_SYSTEMCTL:-systemctl}"
CTL=${BASELINE_CTL:-/usr/bin/nvidia-imex-ctl}
IMEX_CONFIG=${BASELINE_IMEX_CONFIG:-/etc/nvidia-imex/config.cfg}
NODES_FILE=${BASELINE_NODES_FILE:-/etc/nvidia-imex/nodes_config.cfg}
ADDRESS_MAP=${BASELINE_ADDRESS_MAP:-/etc/imexguard/addresses}
LOCK=${BASELINE_LOCK:-/var/lock/nvidia-imex-prolog.lock}
LOCK_TIMEOUT=${BASELINE_LOCK_TIMEOUT:-60}
SLEEP=${BASELINE_SLEEP:-2}

log() { echo "baseline-prolog: $*" >&2; }

# Expand a Slurm hostlist such as "n[1-3,7],gpu[01-02],login" into one name a line (one bracket
# group per name, zero padding kept).
expand_hostlist() {
	local expr=$1 item="" depth=0 c i
	local -a items=()
	for ((i = 0; i < ${#expr}; i++)); do
		c=${expr:i:1}
		case $c in
		"[") depth=$((depth + 1)) ;;
		"]") depth=$((depth - 1)) ;;
		",") if [ "$depth" -eq 0 ]; then
			items+=("$item")
			item=""
			continue
		fi ;;
		esac
		item+=$c
	done
	items+=("$item")
	local prefix ranges suffix r lo hi n
	for item in "${items[@]}"; do
		if [[ $item =~ ^([^][]*)\[([0-9,-]+)\]([^][]*)$ ]]; then
			prefix=${BASH_REMATCH[1]} ranges=${BASH_REMATCH[2]} suffix=${BASH_REMATCH[3]}
			IFS=, read -ra parts <<<"$ranges"
			for r in "${parts[@]}"; do
				lo=${r%-*} hi=${r#*-}
				for ((n = 10#$lo; n <= 10#$hi; n++)); do
					printf '%s%0*d%s\n' "$prefix" "${#lo}" "$n" "$suffix"
				done
			done
		elif [[ $item =~ ^[^][]+$ ]]; then
			printf '%s\n' "$item"
		else
			return 1
		fi
	done
}

exec 9>"$LOCK"
if ! flock -w "$LOCK_TIMEOUT" 9; then
	log "lock $LOCK not acquired in $LOCK_TIMEOUT s, removing it (deadlock recovery)"
	rm -f "$LOCK"
	exit 1
fi

hostlist=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}
names=$(expand_hostlist "$hostlist") || {
	log "cannot expand hostlist '$hostlist'"
	exit 1
}
desired=""
for name in $names; do
	addr=$(awk -v n="$name" '$1 == n { print $2; exit }' "$ADDRESS_MAP")
	[ -n "$addr" ] || {
		log "no address for $name in $ADDRESS_MAP"
		exit 1
	}
	desired+="$addr"$'\n'
done
desired=${desired%$'\n'}

current=$(cat "$NODES_FILE" 2>/dev/null)
restart=0
if [ "$current" != "$desired" ]; then
	echo "$desired" >"$NODES_FILE"
	log "node list rewritten"
	restart=1
fi
if ! "${SYSTEMCTL[@]}" is-active --quiet "$UNIT"; then
	restart=1
fi
if [ "${BASELINE_ALWAYS_RESTART:-0}" = 1 ]; then
	restart=1
fi
if [ "$restart" -eq 0 ]; then
	running=$(timeout 10 "$CTL" -c "$IMEX_CONFIG" -N -j | jq -r '.nodes[].host' | sort)
	[ "$running" = "$(sort <<<"$desired")" ] || restart=1
fi
if [ "$restart" -eq 1 ]; then
	timeout 15 "${SYSTEMCTL[@]}" stop "$UNIT"
	if [ -n "${BASELINE_DAEMON_PATTERN:-}" ]; then
		pkill -9 -f -- "$BASELINE_DAEMON_PATTERN"
	else
		pkill -9 -x nvidia-imex
	fi
	if ! timeout 60 "${SYSTEMCTL[@]}" start "$UNIT"; then
		log "$UNIT failed to start"
		exit 1
	fi
	log "$UNIT restarted, sleeping $SLEEP s"
	sleep "$SLEEP"
else
	log "nothing to do"
fi
exit 0
