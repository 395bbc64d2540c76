# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# tests/lib/kernel-mounts.sh, sourced by tests/with-systemd and tests/journal/with-journald inside
# their private mount namespace, after `mount --make-rprivate /`; the sourcing script defines die.
#
# own_kernel_mounts: a chroot entered without /proc, /sys or a cgroup hierarchy (a debootstrap root
# bind-mounted onto itself) gets this namespace's own, which go with it; systemd and journald need
# all three. The cgroup hierarchies mirror the kernel's memberships (/proc/self/cgroup, cgroups(7)):
# the cgroup v1 hierarchies (name=systemd and the controllers) where this process is in any, under
# a tmpfs as systemd mounts them on a legacy machine, else the unified cgroup2 hierarchy. A cgroup2
# mount beside v1 memberships is what slurmd 22.05 refuses ("Hybrid mode is not supported").
own_kernel_mounts() {
	if [ ! -e /proc/self/stat ]; then
		mount -t proc proc /proc || die "no /proc here and cannot mount one"
	fi
	if [ ! -d /sys/kernel ]; then
		mount -t sysfs sysfs /sys || die "no /sys here and cannot mount one"
	fi
	if [ -e /sys/fs/cgroup/cgroup.procs ] || [ -e /sys/fs/cgroup/unified/cgroup.procs ] ||
		[ -e /sys/fs/cgroup/systemd/cgroup.procs ]; then
		return 0
	fi
	local v1 h
	# hierarchy-ID:controller-list:path; ID 0 is the unified hierarchy
	v1=$(awk -F: '$1 != "0" && $2 != "" { print $2 }' /proc/self/cgroup) ||
		die "cannot read /proc/self/cgroup"
	if [ -z "$v1" ]; then
		mount -t cgroup2 cgroup2 /sys/fs/cgroup ||
			die "no cgroup hierarchy under /sys/fs/cgroup and cannot mount cgroup2 there"
		return 0
	fi
	mount -t tmpfs -o mode=0755 tmpfs /sys/fs/cgroup || die "cannot mount a tmpfs on /sys/fs/cgroup"
	for h in $v1; do
		# name=systemd: a named hierarchy without controllers (mount option none,name=systemd)
		mkdir -p "/sys/fs/cgroup/${h#name=}" || die "cannot create /sys/fs/cgroup/${h#name=}"
		mount -t cgroup -o "${h/#name=/none,name=}" cgroup "/sys/fs/cgroup/${h#name=}" ||
			die "cannot mount the cgroup v1 hierarchy $h on /sys/fs/cgroup/${h#name=}"
	done
}
