/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trust.h: reading the files imexguard runs as code or settings (trust.c).  Only the binary uses
 * it; the Lua C module (host.so) for busted does not contain it.
 */
#ifndef IMEXGUARD_TRUST_H
#define IMEXGUARD_TRUST_H

#include <stddef.h>

/* Largest settings/policy/module file read from disk, in bytes. */
#define IG_TRUST_MAX_FILE ((size_t)4 << 20)

/* Read a settings or policy file.  Running as root (geteuid() == 0) the file must be a regular
 * file owned by root and not writable by group or others, and every directory above it owned by
 * root and not writable by group or others, except a root-owned directory with the sticky bit
 * (like /tmp): see trust.c (the rule follows OpenSSH's StrictModes and sudo's sudoers checks).
 * path: absolute or relative to the working directory; what: "policy", "settings file",
 * "module", used in messages.  On success *data (malloc'd, NUL-terminated, free()) and *len
 * (bytes) are set and 0 is returned; on failure a negative errno (-ENOENT, -EPERM, -EFBIG beyond
 * IG_TRUST_MAX_FILE, -EINVAL not a regular file...) and a one-line message naming the file in
 * err (errlen bytes). */
int ig_read_trusted(const char *path, const char *what, char **data, size_t *len, char *err,
		    size_t errlen);

#endif
