/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trust.c: the trust check of the files imexguard loads as code or settings (the settings file,
 * a policy, a --lua-dir module) when it runs as root, and their bounded read.
 */
#include "trust.h"

#include "imexguard.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The trust rule, applied only when running as root, after sshd's StrictModes
 * (OpenSSH misc.c safe_path) and sudo's sudoers checks:
 *  - the file: a regular file owned by root (uid 0), not writable by group or others;
 *  - every directory in which a name is looked up while the path is resolved, i.e. every
 *    directory from "/" down to the file's canonical parent AND the directory holding each
 *    symlink met on the way (at any hop): owned by root and not writable by group or others,
 *    EXCEPT a root-owned directory with the sticky bit (S_ISVTX, like /tmp 1777): there other
 *    users can neither rename nor delete entries they do not own (POSIX rename/unlink on sticky
 *    directories), so a root-owned entry below it cannot be swapped.  A symlink kept in a
 *    directory another user can write is refused even when it points to a root file: that user
 *    decides where it points (another root-owned file: an older policy, an example policy).
 *    sshd does not make the sticky exception; we do, so that a private root-owned directory
 *    under /tmp (mktemp -d, 0700) is usable, e.g. by tests.
 * The path is resolved here component by component, as realpath(3) does (symlinks followed, at
 * most IG_TRUST_MAX_LINKS), checking each directory before a name is looked up in it.  The file is
 * opened first and checked by fstat, and the resolved canonical path must name the same inode, so
 * what is read is what was checked. */
#define IG_TRUST_MAX_LINKS 40

/* Check one directory (absolute path) by the rule above.  Returns 0, or -EPERM / -errno with a
 * one-line message naming the file (path) and the directory. */
static int trusted_dir(const char *dir, const char *path, const char *what, char *err,
		       size_t errlen)
{
	struct stat dst;
	if (stat(dir, &dst) != 0) {
		int rc = -errno;
		snprintf(err, errlen, "refusing %s %s: cannot stat directory %s: %s", what, path,
			 dir, strerror(-rc));
		return rc;
	}
	if (dst.st_uid != 0) {
		snprintf(err, errlen, "refusing %s %s: directory %s is owned by uid %u, not root",
			 what, path, dir, (unsigned)dst.st_uid);
		return -EPERM;
	}
	if ((dst.st_mode & (S_IWGRP | S_IWOTH)) && !(dst.st_mode & S_ISVTX)) {
		snprintf(err, errlen,
			 "refusing %s %s: directory %s is writable by group or others (mode %04o)",
			 what, path, dir, (unsigned)(dst.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/* The absolute form of `path` (relative: to the working directory) into abs (PATH_MAX bytes).
 * Returns 0, or a negative errno (-ENAMETOOLONG, getcwd's) with err set. */
static int absolute(const char *path, char *abs, const char *what, char *err, size_t errlen)
{
	char cwd[PATH_MAX];
	int n;
	if (path[0] == '/') {
		n = snprintf(abs, PATH_MAX, "%s", path);
	} else if (getcwd(cwd, sizeof cwd) == NULL) {
		int rc = -errno;
		snprintf(err, errlen, "refusing %s %s: cannot resolve its path: %s", what, path,
			 strerror(-rc));
		return rc;
	} else {
		n = snprintf(abs, PATH_MAX, "%s/%s", cwd, path);
	}
	if (n < 0 || n >= PATH_MAX) {
		snprintf(err, errlen, "refusing %s %s: path too long", what, path);
		return -ENAMETOOLONG;
	}
	return 0;
}

/* Resolve `path` (absolute, or relative to the working directory) to its canonical form in
 * *resolved (malloc'd), checking with trusted_dir every directory in which a component is looked
 * up.  Returns 0 or a negative errno with err set (-ELOOP after IG_TRUST_MAX_LINKS symlinks,
 * -ENAMETOOLONG beyond PATH_MAX). */
static int trust_walk(const char *path, const char *what, char **resolved, char *err, size_t errlen)
{
	char cur[PATH_MAX], rest[PATH_MAX], comp[PATH_MAX], link[PATH_MAX], tmp[2 * PATH_MAX + 2];
	int links = 0, rc;

	*resolved = NULL;
	if ((rc = absolute(path, rest, what, err, errlen)) != 0)
		return rc;
	strcpy(cur, "/");
	char *p = rest;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		size_t n = strcspn(p, "/");
		memcpy(comp, p, n);
		comp[n] = '\0';
		p += n;
		if (strcmp(comp, ".") == 0)
			continue;
		if (strcmp(comp, "..") == 0) { /* the parent: already checked on the way down */
			char *slash = strrchr(cur, '/');
			if (slash == cur)
				cur[1] = '\0';
			else
				*slash = '\0';
			continue;
		}
		if ((rc = trusted_dir(cur, path, what, err, errlen)) != 0)
			return rc;
		char next[PATH_MAX];
		if (snprintf(next, sizeof next, "%s%s%s", cur, strcmp(cur, "/") ? "/" : "", comp) >=
		    (int)sizeof next)
			goto toolong;
		struct stat lst;
		if (lstat(next, &lst) != 0) {
			rc = -errno;
			snprintf(err, errlen, "refusing %s %s: cannot resolve its path: %s: %s",
				 what, path, next, strerror(-rc));
			return rc;
		}
		if (!S_ISLNK(lst.st_mode)) {
			strcpy(cur, next);
			continue;
		}
		if (++links > IG_TRUST_MAX_LINKS) {
			snprintf(err, errlen, "refusing %s %s: more than %d symbolic links", what,
				 path, IG_TRUST_MAX_LINKS);
			return -ELOOP;
		}
		ssize_t ln = readlink(next, link, sizeof link - 1);
		if (ln < 0) {
			rc = -errno;
			snprintf(err, errlen, "refusing %s %s: cannot read link %s: %s", what, path,
				 next, strerror(-rc));
			return rc;
		}
		link[ln] = '\0';
		/* the link's target, then what was left of the path */
		snprintf(tmp, sizeof tmp, "%s/%s", link, p);
		if (strlen(tmp) >= sizeof rest)
			goto toolong;
		strcpy(rest, tmp);
		p = rest;
		if (link[0] == '/')
			strcpy(cur, "/");
	}
	*resolved = strdup(cur);
	if (*resolved == NULL) {
		snprintf(err, errlen, "refusing %s %s: out of memory", what, path);
		return -ENOMEM;
	}
	return 0;
toolong:
	snprintf(err, errlen, "refusing %s %s: path too long", what, path);
	return -ENAMETOOLONG;
}

static int trust_check(const char *path, const struct stat *st, const char *what, char *err,
		       size_t errlen)
{
	if (st->st_uid != 0) {
		snprintf(err, errlen, "refusing %s %s: owned by uid %u, not root", what, path,
			 (unsigned)st->st_uid);
		return -EPERM;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(err, errlen, "refusing %s %s: writable by group or others (mode %04o)",
			 what, path, (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	char *rp = NULL;
	int rc = trust_walk(path, what, &rp, err, errlen);
	if (rc != 0)
		return rc;
	struct stat rst;
	if (stat(rp, &rst) != 0 || rst.st_dev != st->st_dev || rst.st_ino != st->st_ino) {
		snprintf(err, errlen, "refusing %s %s: the file changed while it was checked", what,
			 path);
		rc = -EAGAIN;
	}
	free(rp);
	return rc;
}

/* Read a settings, policy or module file, checking it by the trust rule above when running as
 * root (see trust.h).  Returns 0 with *data (malloc'd, NUL-terminated) and *len, or a negative
 * errno with a one-line message naming the file in err. */
int ig_read_trusted(const char *path, const char *what, char **data, size_t *len, char *err,
		    size_t errlen)
{
	*data = NULL;
	*len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		int rc = -errno;
		snprintf(err, errlen, "cannot read %s %s: %s", what, path, strerror(-rc));
		return rc;
	}
	int rc = 0;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot stat %s %s: %s", what, path, strerror(-rc));
	} else if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		snprintf(err, errlen, "%s %s is not a regular file", what, path);
	} else if (geteuid() != 0 || (rc = trust_check(path, &st, what, err, errlen)) == 0) {
		rc = ig_read_full_fd(fd, (size_t)st.st_size, IG_TRUST_MAX_FILE, data, len);
		if (rc == -EFBIG)
			snprintf(err, errlen, "%s %s is larger than %zu bytes", what, path,
				 IG_TRUST_MAX_FILE);
		else if (rc < 0)
			snprintf(err, errlen, "cannot read %s %s: %s", what, path, strerror(-rc));
	}
	close(fd);
	return rc;
}
