#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/ab.sh: compare two imexguard builds run by run on the same simulated node. Given as the
# BENCH_PROFILE prefix of the fast path's breakdown runs (bench/README.md), it runs the prolog the
# bench asks for with build A's imexguard, the next one with build B's, and so on, and appends to
# LOG one line per run with its wall time (microseconds, from just before the exec to its exit)
# and its --timing lines, each prefixed by the build's letter. Interleaved, both builds see the
# same domain, registry and load; `lua5.4 bench/ab.lua LOG` prints the paired comparison.
#   BENCH_ONLY=a BENCH_RUNS=300 BENCH_PROFILE="$PWD/bench/ab.sh /tmp/old-build $PWD/build /tmp/ab.log" bench/run
# Arguments: BUILD_A BUILD_B LOG, then the command the bench runs (its imexguard is replaced).
set -u
a=$1 b=$2 log=$3
shift 4
n=$(grep -c '^[AB] wall ' "$log" 2>/dev/null)
if [ $((${n:-0} % 2)) -eq 0 ]; then tag=A dir=$a; else tag=B dir=$b; fi
err=$(mktemp)
t0=$(date +%s%N)
"$dir/imexguard" "$@" 2>"$err"
rc=$?
t1=$(date +%s%N)
cat "$err" >&2
{
	echo "$tag wall $(((t1 - t0) / 1000))"
	sed -n "s/^timing: /$tag /p" "$err"
} >>"$log"
rm -f "$err"
exit $rc
