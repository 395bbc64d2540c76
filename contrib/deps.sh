#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Install the Debian packages (Debian 12; the same names exist on Ubuntu 24.04) that imexguard needs,
# by purpose, when missing. apt-get runs only if something is missing (nothing to do on a prepared
# machine).
#   contrib/deps.sh build    compile the binary and the man pages (`make deps`, `make deps-build`)
#   contrib/deps.sh run      the runtime libraries a node needs when the binary is copied to it
#   contrib/deps.sh demo     build + a private systemd manager and the tools `make demo` uses
#   contrib/deps.sh pkg      build + Debian packaging tools and mandoc (`make deb`)
#   contrib/deps.sh test     demo + pkg + linters, busted, Slurm and munge for the e2e tier,
#                            debootstrap for the Debian roots of the slurm24 tier (Debian 13) and
#                            the slurm26 tier (Debian testing, by the sid script) (`make check`)
#   contrib/deps.sh --list GROUP   print the group's packages, install nothing
# Neither build nor run ever installs Slurm or munge: they are safe on a compute node that runs a
# site Slurm. No group leaves a unit of what it installed enabled or running (the test group's
# munge and Slurm daemons, man-db's timer): starts are refused while apt-get runs (policy-rc.d,
# exit 101), and every unit file that this run's install enabled is disabled afterwards, then
# checked, with munge, slurmctld and slurmd.
set -eu

BUILD="gcc make pkg-config lua5.4 liblua5.4-dev lua-cjson lua-cjson-dev libsystemd-dev libexpat1-dev scdoc"
# ldd build/imexguard, then dpkg -S: liblua5.4.so.0, liblua5.4-cjson.so.0, libsystemd.so.0, libexpat.so.1,
# libc.
RUN="libc6 liblua5.4-0 lua-cjson libsystemd0 libexpat1"
DEMO="$BUILD systemd dbus util-linux procps iproute2"
PKG="$BUILD build-essential debhelper dpkg-dev lintian mandoc"
TEST="$DEMO build-essential debhelper dpkg-dev lintian mandoc lua-busted lua-check clang-format
munge slurmctld slurmd slurm-client python3-prometheus-client time debootstrap"
# Services that Debian's test packages enable on install.
SERVICES="munge slurmctld slurmd"

usage() {
	echo "usage: contrib/deps.sh [--list] build|run|demo|pkg|test" >&2
	exit 2
}

list=0
[ "${1:-}" = "--list" ] && { list=1; shift; }
case "${1:-build}" in
build) PKGS=$BUILD ;;
run) PKGS=$RUN ;;
demo) PKGS=$DEMO ;;
pkg) PKGS=$PKG ;;
test) PKGS=$TEST ;;
*) usage ;;
esac
if [ "$list" -eq 1 ]; then
	echo $PKGS
	exit 0
fi

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "imexguard: installing missing packages:$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

# Refuse every service start while apt-get runs: a policy-rc.d that exits 101 ("action forbidden"),
# honoured by invoke-rc.d and deb-systemd-invoke. A site's own policy-rc.d is kept aside and put
# back afterwards, also when apt-get fails.
RCD=/usr/sbin/policy-rc.d
SAVED=""
BEFORE=""
restore_rcd() {
	[ -z "$BEFORE" ] || rm -f "$BEFORE"
	if [ -n "$SAVED" ]; then
		$SUDO mv -f "$SAVED" "$RCD"
	else
		$SUDO rm -f "$RCD"
	fi
}
if [ -e "$RCD" ]; then
	SAVED=$($SUDO mktemp /usr/sbin/.policy-rc.d.imexguard.XXXXXX)
	$SUDO cp -p "$RCD" "$SAVED"
fi
trap restore_rcd EXIT
trap 'exit 130' INT TERM
printf '#!/bin/sh\n# imexguard contrib/deps.sh: no service starts while packages install\nexit 101\n' |
	$SUDO tee "$RCD" >/dev/null
$SUDO chmod 0755 "$RCD"

# Unit files are read and changed with --root=/ (systemctl(1): on the files only, no manager asked),
# so that it works the same with a running systemd, without one (a chroot), and in a chroot where
# /run/systemd/system exists but no manager answers (plain systemctl then fails to connect).
enabled_units() {
	systemctl --root=/ list-unit-files --state=enabled --no-legend 2>/dev/null | awk '{ print $1 }' | sort
}
BEFORE=$(mktemp)
enabled_units >"$BEFORE"

$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing

# Disable what this run's install enabled (a unit the site had enabled before is left as it was):
# the services of the packages named in SERVICES that it installed, and every unit file (service,
# timer, socket) enabled now and not before; then prove that none is enabled or running.
units=$(enabled_units | comm -13 "$BEFORE" -)
for s in $SERVICES; do
	case " $missing " in *" $s "*) units="$units $s.service" ;; esac
done
bad=""
for u in $units; do
	$SUDO deb-systemd-helper disable "$u" >/dev/null 2>&1 || true
	$SUDO systemctl --root=/ disable "$u" >/dev/null 2>&1 || true
	case "$(systemctl --root=/ is-enabled "$u" 2>/dev/null)" in
	enabled* | linked*) bad="$bad $u(enabled)" ;;
	esac
	[ "$(systemctl is-active "$u" 2>/dev/null)" = "active" ] && bad="$bad $u(running)"
done
if [ -n "$bad" ]; then
	echo "imexguard: contrib/deps.sh: units of installed packages left enabled or running:$bad" >&2
	exit 1
fi
exit 0
