#!/bin/sh
# Install the Debian 12 packages imexguard needs to build, test, demo and run end to end, when missing.
# Runs apt-get only if something is missing (so it costs nothing on a prepared machine).
set -eu
PKGS="gcc make pkg-config lua5.4 liblua5.4-dev lua-cjson lua-cjson-dev libsystemd-dev systemd
dbus lua-busted lua-check clang-format util-linux procps iproute2 munge slurmctld slurmd slurm-client
python3-prometheus-client"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "imexguard: installing missing packages:$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
