/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file.c: bounded read (whole, or a growing file's end), lstat, atomic replace, a same-size
 * write in place, character device nodes.
 *
 * Atomic replace (field case C03 of docs/design.md: a daemon that starts while a script truncates
 * and refills nodes_config.cfg reads an empty or partial list).  write_atomic never modifies the
 * file at `path`: it builds the new content in a new inode of the same directory and rename(2)s it
 * over `path`, which POSIX makes atomic: a reader opens either the whole old or the whole new file.
 *  1. open the directory (O_DIRECTORY); every later step is relative to that descriptor, so a
 *     rename of the directory in between cannot send the data elsewhere;
 *  2. the temp file is an unnamed O_TMPFILE inode (Linux >= 3.11) when the file system supports
 *     it: a writer killed (kill -9) while writing leaves nothing behind.  Otherwise (NFS, old
 *     kernels) a named `.<basename>.imexguard.XXXXXX` file created O_EXCL (what mkostemp does, but
 * relative to the directory descriptor);
 *  3. flock(LOCK_EX) the temp inode (marks it as "being written by a live process"), fchmod to
 *     `mode` exactly (no umask), write everything (restarting on EINTR and short writes), fsync;
 *  4. O_TMPFILE: give it a name `.<basename>.imexguard.XXXXXX` with linkat; rename the name over
 * `path`;
 *  5. fsync the directory so the rename itself is durable.
 * On any failure before the rename the temp inode is closed/unlinked and `path` is untouched;
 * the code is the errno of the failing step (ENOSPC, EROFS, EDQUOT, EIO, EACCES...).
 * Leftovers: a writer killed between creating a named temp file and the rename leaves a
 * `.<basename>.imexguard.XXXXXX` file.  The next successful write_atomic of the same path removes
 * such files when no live process holds their flock (a dead writer's flock is released by the
 * kernel), and so does host.remove_temps(path), which the prolog and epilog call under the node
 * lock (C39); the O_EXCL fallback re-checks its own temp file after locking it, so it never loses
 * it to that cleanup. Nothing else is preserved: the new file belongs to the caller (root), has
 * exactly `mode`, and carries no xattrs/ACLs of the old one.  A symlink at `path` is replaced by
 * the file, not followed.
 */
#include "imexguard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define TEMP_MARK   "imexguard." /* after ".<basename>.": marks a temp file as ours (C39) */
#define TEMP_SUFFIX 6		 /* random characters after ".<basename>.imexguard." */

/* ---- read ----------------------------------------------------------------------------------- */

/* Read fd to its end into a malloc'ed, NUL-terminated buffer of at most max_bytes bytes (the
 * read_full_stream of systemd's fileio.c).  size_hint: the file's st_size in bytes (0 for /proc
 * and /sys files: the buffer starts small and grows).  Restarts on EINTR.  Returns 0 with *out
 * and *len set, -EFBIG when fd holds more than max_bytes, -ENOMEM, or read(2)'s negative errno.
 * The caller keeps (and closes) fd. */
int ig_read_full_fd(int fd, size_t size_hint, size_t max_bytes, char **out, size_t *len)
{
	size_t cap = size_hint + 1, n = 0;
	if (size_hint > max_bytes)
		return -EFBIG;
	if (cap < 4096)
		cap = 4096;
	if (cap > max_bytes + 1)
		cap = max_bytes + 1;
	char *buf = malloc(cap + 1);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	for (;;) {
		if (n == cap) {
			if (n > max_bytes) {
				rc = -EFBIG;
				break;
			}
			size_t ncap = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
			char *nb = realloc(buf, ncap + 1);
			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			buf = nb;
			cap = ncap;
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			break;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (rc == 0 && n > max_bytes)
		rc = -EFBIG;
	if (rc < 0) {
		free(buf);
		return rc;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

/* Read the whole regular file `path` (symlinks followed: configuration files are often links)
 * into a malloc'ed, NUL-terminated buffer of at most max_bytes bytes (systemd's read_full_file).
 * Returns 0 with *out and *len set, -EFBIG when the file holds more than max_bytes, -EISDIR,
 * -EINVAL (not a regular file: a FIFO or device could block or never end), or the negative
 * errno of open/fstat/read. */
int ig_read_full_file(const char *path, size_t max_bytes, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc;
	if (fstat(fd, &st) < 0)
		rc = -errno;
	else if (S_ISDIR(st.st_mode))
		rc = -EISDIR;
	else if (!S_ISREG(st.st_mode))
		rc = -EINVAL;
	else
		rc = ig_read_full_fd(fd, (size_t)st.st_size, max_bytes, out, len);
	close(fd);
	return rc;
}

/* host.read(path, max_bytes) -> string, or nil, msg, code.
 * path: string (symlinks followed); max_bytes: integer >= 0, the cap.  code: "EFBIG" when the file
 * holds more than max_bytes, "EISDIR", "EINVAL" (not a regular file), or open(2)/read(2)'s errno
 * name ("ENOENT", "EACCES"...). */
int ig_host_read(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	lua_Integer max = luaL_checkinteger(L, 2);
	luaL_argcheck(L, max >= 0, 2, "max_bytes must be >= 0");
	char *buf = NULL;
	size_t len = 0;
	int rc = ig_read_full_file(path, (size_t)max, &buf, &len);
	if (rc == -EFBIG)
		return ig_push_error(L, "EFBIG", "read %s: larger than %lld bytes", path,
				     (long long)max);
	if (rc == -EINVAL)
		return ig_push_error(L, "EINVAL", "read %s: not a regular file", path);
	if (rc < 0)
		return ig_push_error(L, ig_code(rc), "read %s: %s", path, strerror(-rc));
	lua_pushlstring(L, buf, len);
	free(buf);
	return 1;
}

/* host.read_tail(path, max_bytes [, from]) -> string, size, start, or nil, msg, code.
 * The end of a regular file that grows (a log: LOG_FILE_NAME of config.cfg, C50): the bytes from
 * `start` to its end, where start = max(from, size - max_bytes), or max(0, size - max_bytes) when
 * the file is now shorter than `from` (it was truncated or replaced since).  path: string (symlinks
 * followed); max_bytes: integer 0..64 MiB; from: integer >= 0, a size seen earlier (default 0):
 * only what was appended since.  size: the file's size when read (bytes).  One pread(2) loop of at
 * most max_bytes; a file that grows meanwhile is read up to the size fstat gave.  code: "EISDIR",
 * "EINVAL" (not a regular file), or open(2)/read(2)'s errno name ("ENOENT", "EACCES"...). */
int ig_host_read_tail(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	lua_Integer max = luaL_checkinteger(L, 2);
	lua_Integer from = luaL_optinteger(L, 3, 0);
	luaL_argcheck(L, max >= 0 && max <= 64 * 1024 * 1024, 2, "max_bytes must be 0..67108864");
	luaL_argcheck(L, from >= 0, 3, "from must be a byte offset >= 0");
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		return ig_push_error(L, ig_code(-e), "read %s: %s", path, strerror(e));
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return ig_push_error(L, ig_code(-e), "read %s: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		if (S_ISDIR(st.st_mode))
			return ig_push_error(L, "EISDIR", "read %s: a directory", path);
		return ig_push_error(L, "EINVAL", "read %s: not a regular file", path);
	}
	lua_Integer size = (lua_Integer)st.st_size;
	lua_Integer start = size - max > 0 ? size - max : 0;
	if (from <= size && from > start)
		start = from;
	size_t want = (size_t)(size - start), got = 0;
	char *buf = malloc(want + 1);
	if (!buf) {
		close(fd);
		return ig_push_error(L, "ENOMEM", "read %s: out of memory", path);
	}
	while (got < want) {
		ssize_t r = pread(fd, buf + got, want - got, (off_t)(start + (lua_Integer)got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(buf);
			close(fd);
			return ig_push_error(L, ig_code(-e), "read %s: %s", path, strerror(e));
		}
		if (r == 0)
			break; /* truncated meanwhile */
		got += (size_t)r;
	}
	close(fd);
	lua_pushlstring(L, buf, got);
	free(buf);
	lua_pushinteger(L, size);
	lua_pushinteger(L, start);
	return 3;
}

/* ---- stat ----------------------------------------------------------------------------------- */

/* host.stat(path) -> table, or nil, msg, code (lstat(2): a symlink is described, not followed).
 * Fields: type "file"|"dir"|"link"|"char"|"other", size (bytes), mode (permission bits, integer,
 * & 07777), uid, gid, ino, dev, nlink, mtime_us (microseconds since the epoch, integer); for a
 * character device also rdev_major and rdev_minor. */
int ig_host_stat(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	struct stat st;
	if (lstat(path, &st) < 0) {
		int e = errno;
		return ig_push_error(L, ig_code(-e), "stat %s: %s", path, strerror(e));
	}
	const char *type = S_ISREG(st.st_mode)	 ? "file"
			   : S_ISDIR(st.st_mode) ? "dir"
			   : S_ISLNK(st.st_mode) ? "link"
			   : S_ISCHR(st.st_mode) ? "char"
						 : "other";
	lua_createtable(L, 0, 12);
	lua_pushstring(L, type);
	lua_setfield(L, -2, "type");
	lua_pushinteger(L, (lua_Integer)st.st_size);
	lua_setfield(L, -2, "size");
	lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
	lua_setfield(L, -2, "mode");
	lua_pushinteger(L, (lua_Integer)st.st_uid);
	lua_setfield(L, -2, "uid");
	lua_pushinteger(L, (lua_Integer)st.st_gid);
	lua_setfield(L, -2, "gid");
	lua_pushinteger(L, (lua_Integer)st.st_ino);
	lua_setfield(L, -2, "ino");
	lua_pushinteger(L, (lua_Integer)st.st_dev);
	lua_setfield(L, -2, "dev");
	lua_pushinteger(L, (lua_Integer)st.st_nlink);
	lua_setfield(L, -2, "nlink");
	lua_pushinteger(L, (lua_Integer)st.st_mtim.tv_sec * 1000000 + st.st_mtim.tv_nsec / 1000);
	lua_setfield(L, -2, "mtime_us");
	if (S_ISCHR(st.st_mode)) {
		lua_pushinteger(L, (lua_Integer)major(st.st_rdev));
		lua_setfield(L, -2, "rdev_major");
		lua_pushinteger(L, (lua_Integer)minor(st.st_rdev));
		lua_setfield(L, -2, "rdev_minor");
	}
	return 1;
}

/* ---- write_atomic --------------------------------------------------------------------------- */

/* Split path into a malloc'ed directory ("." when none) and a pointer to the base name inside
 * path.  Returns 0, -EINVAL for a path with no usable base name ("", "dir/", ".", ".."), -ENOMEM.
 */
static int split_path(const char *path, char **dir, const char **base)
{
	size_t len = strlen(path);
	if (len == 0 || path[len - 1] == '/')
		return -EINVAL;
	const char *slash = strrchr(path, '/');
	const char *b = slash ? slash + 1 : path;
	if (strcmp(b, ".") == 0 || strcmp(b, "..") == 0)
		return -EINVAL;
	if (!slash)
		*dir = strdup(".");
	else if (slash == path)
		*dir = strdup("/");
	else
		*dir = strndup(path, (size_t)(slash - path));
	if (!*dir)
		return -ENOMEM;
	*base = b;
	return 0;
}

/* Fill name with ".<base>.imexguard.XXXXXX" (X from [A-Za-z0-9], getrandom(2)): the word
 * "imexguard" marks the file as ours, so that remove_temps never takes another tool's temp file
 * of the same shape (rsync's `.<base>.XXXXXX`, an admin's `.<base>.backup`; C39). */
static void temp_name(char *name, size_t size, const char *base)
{
	static const char alphabet[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	static unsigned long counter;
	unsigned char rnd[TEMP_SUFFIX];
	if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
		unsigned long x = (unsigned long)(ig_now() * 1e9) ^
				  ((unsigned long)getpid() << 16) ^ (++counter * 2654435761UL);
		for (int i = 0; i < TEMP_SUFFIX; i++, x >>= 6)
			rnd[i] = (unsigned char)x;
	}
	char suffix[TEMP_SUFFIX + 1];
	for (int i = 0; i < TEMP_SUFFIX; i++)
		suffix[i] = alphabet[rnd[i] % (sizeof alphabet - 1)];
	suffix[TEMP_SUFFIX] = '\0';
	snprintf(name, size, ".%s." TEMP_MARK "%s", base, suffix);
}

/* Is `name` a temp file name of `base` (".<base>.imexguard." followed by TEMP_SUFFIX
 * alphanumerics)? */
static int is_temp_of(const char *name, const char *base)
{
	size_t bl = strlen(base), ml = strlen(TEMP_MARK);
	if (strlen(name) != bl + 2 + ml + TEMP_SUFFIX || name[0] != '.' ||
	    strncmp(name + 1, base, bl) != 0 || name[bl + 1] != '.' ||
	    strncmp(name + bl + 2, TEMP_MARK, ml) != 0)
		return 0;
	for (const char *p = name + bl + 2 + ml; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9')))
			return 0;
	return 1;
}

/* Remove temp files of `base` in dirfd left by dead writers: a regular file whose flock we can
 * take (its writer is gone) and that the name still denotes.  Best effort, errors ignored.
 * With L, each removed name is appended to the table on top of L's stack. */
static void remove_stale_temps_of(int dirfd, const char *base, lua_State *L)
{
	int dfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (!is_temp_of(de->d_name, base))
			continue;
		int tfd = openat(dirfd, de->d_name,
				 O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
		if (tfd < 0)
			continue;
		struct stat a, b;
		if (fstat(tfd, &a) == 0 && S_ISREG(a.st_mode) &&
		    flock(tfd, LOCK_EX | LOCK_NB) == 0 &&
		    fstatat(dirfd, de->d_name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
		    a.st_dev == b.st_dev && a.st_ino == b.st_ino &&
		    unlinkat(dirfd, de->d_name, 0) == 0 && L) {
			lua_pushstring(L, de->d_name);
			lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
		}
		close(tfd); /* also releases the flock */
	}
	closedir(d);
}

static void remove_stale_temps(int dirfd, const char *base)
{
	remove_stale_temps_of(dirfd, base, NULL);
}

static int write_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, data, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -EIO;
		data += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Create the locked temp inode in dirfd.  Returns the fd; *named is set to 1 and `name` filled
 * when it already has a name (O_EXCL fallback), 0 for an unnamed O_TMPFILE inode. */
static int create_temp(int dirfd, const char *base, mode_t mode, char *name, size_t size,
		       int *named)
{
	int fd = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode & 0777);
	if (fd >= 0) {
		*named = 0;
		flock(fd, LOCK_EX | LOCK_NB); /* nobody else can reach an unnamed inode */
		return fd;
	}
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL && errno != ENOENT)
		return -errno;
	*named = 1;
	for (int tries = 0; tries < 100; tries++) {
		temp_name(name, size, base);
		fd = openat(dirfd, name,
			    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
		if (fd < 0) {
			if (errno == EEXIST)
				continue;
			return -errno;
		}
		/* Lock it, then make sure a concurrent stale-temp cleanup did not take it between
		 * the create and the lock (it would hold the flock or have unlinked the name). */
		struct stat st;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 && st.st_nlink > 0)
			return fd;
		close(fd);
	}
	return -EEXIST;
}

/* Give the unnamed inode fd a temp name in dirfd (linkat; /proc/self/fd when AT_EMPTY_PATH
 * needs CAP_DAC_READ_SEARCH).  Returns 0 or -errno. */
static int link_temp(int fd, int dirfd, const char *base, char *name, size_t size)
{
	for (int tries = 0; tries < 100; tries++) {
		temp_name(name, size, base);
		if (linkat(fd, "", dirfd, name, AT_EMPTY_PATH) == 0)
			return 0;
		if (errno == ENOENT || errno == EPERM) {
			char proc[64];
			snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
			if (linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW) == 0)
				return 0;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/* Replace `path` with `len` bytes of data, mode `mode` (exact, no umask), atomically (see the top
 * of this file).  Returns 0 or -errno; *step names the failing step for write_atomic's message.
 * *replaced is 1 when the rename happened (only the directory fsync can fail after it). */
static int replace_file(const char *path, const char *data, size_t len, mode_t mode,
			const char **step, int *replaced)
{
	char *dir = NULL;
	const char *base;
	char name[NAME_MAX + 16];
	int named = 0, fd = -1, rc;

	*replaced = 0;
	*step = "bad path";
	if ((rc = split_path(path, &dir, &base)) < 0)
		return rc;
	*step = "temp file name too long";
	if (strlen(base) + 2 + TEMP_SUFFIX > NAME_MAX) {
		free(dir);
		return -ENAMETOOLONG;
	}
	*step = "opening the directory";
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	if (dirfd < 0)
		return -errno;

	*step = "creating the temp file";
	fd = create_temp(dirfd, base, mode, name, sizeof name, &named);
	if (fd < 0) {
		rc = fd;
		fd = -1;
		goto fail;
	}
	*step = "setting the mode";
	if (fchmod(fd, mode) < 0) {
		rc = -errno;
		goto fail;
	}
	*step = "writing the temp file";
	if ((rc = write_all(fd, data, len)) < 0)
		goto fail;
	*step = "fsync of the temp file";
	if (fsync(fd) < 0) {
		rc = -errno;
		goto fail;
	}
	if (!named) {
		*step = "naming the temp file";
		if ((rc = link_temp(fd, dirfd, base, name, sizeof name)) < 0)
			goto fail;
		named = 1;
	}
	*step = "renaming the temp file";
	if (renameat(dirfd, name, dirfd, base) < 0) {
		rc = -errno;
		goto fail;
	}
	*replaced = 1;
	close(fd); /* the data is already on disk (fsync above) */
	fd = -1;
	*step = "fsync of the directory";
	if (fsync(dirfd) < 0 && errno != EINVAL && errno != EROFS) {
		/* EINVAL: the file system cannot sync directories; nothing more can be done */
		rc = -errno;
		close(dirfd);
		return rc;
	}
	remove_stale_temps(dirfd, base);
	close(dirfd);
	return 0;

fail:
	if (named)
		unlinkat(dirfd, name, 0);
	if (fd >= 0)
		close(fd);
	close(dirfd);
	return rc;
}

/* Replace `path` atomically (replace_file).  Returns 0, or -errno with a one-line message in err
 * (errlen bytes) naming the path and the failing step, and whether the old file is intact. */
static int write_atomic(const char *path, const char *data, size_t len, mode_t mode, char *err,
			size_t errlen)
{
	const char *step = "";
	int replaced = 0;
	int rc = replace_file(path, data, len, mode, &step, &replaced);
	if (rc < 0 && replaced)
		snprintf(err, errlen, "write %s: replaced, but %s failed: %s", path, step,
			 strerror(-rc));
	else if (rc < 0)
		snprintf(err, errlen, "write %s: %s: %s (old file intact)", path, step,
			 strerror(-rc));
	return rc;
}

/* host.write_atomic(path, data [, mode]) -> true, or nil, msg, code.
 * path: string; data: string (bytes); mode: integer permission bits, default 0644 (exact, the
 * umask does not apply).  code: the errno name of the failing step ("ENOSPC", "EROFS", "EDQUOT",
 * "EACCES", "ENOENT" for a missing directory, "EINVAL" for a path without a file name).  On
 * failure the old file is intact and no temp file is left; except when only the final fsync of the
 * directory fails: the message then says the file was replaced (durability of the rename unknown).
 * Behaviour: rename(2) atomicity (POSIX), fsync of the file and the directory (Linux ext4/xfs
 * guidance for durable replace); see the top of file.c. */
int ig_host_write_atomic(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	size_t len;
	const char *data = luaL_checklstring(L, 2, &len);
	lua_Integer mode = luaL_optinteger(L, 3, 0644);
	luaL_argcheck(L, mode >= 0 && mode <= 07777, 3, "mode must be permission bits (0..07777)");
	char err[PATH_MAX + 256];
	int rc = write_atomic(path, data, len, (mode_t)mode, err, sizeof err);
	if (rc < 0)
		return ig_push_error(L, ig_code(rc), "%s", err);
	lua_pushboolean(L, 1);
	return 1;
}

/* ---- write_in_place ------------------------------------------------------------------------- */

/* host.write_in_place(path, data) -> true, or nil, msg, code.
 * Overwrites the regular file `path` (string; a symlink is refused: O_NOFOLLOW) with `data`
 * (string, bytes) in place: the same inode, one pwrite(2) at offset 0, then fdatasync.  The file
 * must already hold exactly #data bytes: nothing is created, truncated or extended, so a reader
 * sees the file at its size throughout, each byte old or new.  For a file bind-mounted into another
 * mount namespace (systemd's BindReadOnlyPaths= holds the inode: a file replaced by rename(2) is
 * never seen there), as the slot map of membership = "slots" is (docs/design.md, "Membership by
 * slots": the caller changes only bytes whose every mix of old and new is valid).  code: "EINVAL"
 * when the size differs or the file is not a regular file (nothing written), "ENOENT", "ELOOP" (a
 * symlink), "EACCES", "EROFS", "EIO" for a short write, or the errno name of the failing step. */
int ig_host_write_in_place(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	size_t len;
	const char *data = luaL_checklstring(L, 2, &len);
	int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		int e = errno;
		return ig_push_error(L, ig_code(-e), "write_in_place %s: open: %s", path,
				     strerror(e));
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return ig_push_error(L, ig_code(-e), "write_in_place %s: fstat: %s", path,
				     strerror(e));
	}
	if (!S_ISREG(st.st_mode) || (uintmax_t)st.st_size != (uintmax_t)len) {
		close(fd);
		if (!S_ISREG(st.st_mode))
			return ig_push_error(L, "EINVAL", "write_in_place %s: not a regular file",
					     path);
		return ig_push_error(
		    L, "EINVAL", "write_in_place %s: holds %lld bytes, not %zu: nothing written",
		    path, (long long)st.st_size, len);
	}
	size_t done = 0;
	while (done < len) {
		ssize_t w = pwrite(fd, data + done, len - done, (off_t)done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			close(fd);
			return ig_push_error(
			    L, ig_code(-e),
			    "write_in_place %s: write: %s (%zu of %zu bytes written)", path,
			    strerror(e), done, len);
		}
		done += (size_t)w;
	}
	if (fdatasync(fd) < 0 && errno != EINVAL) {
		int e = errno;
		close(fd);
		return ig_push_error(L, ig_code(-e), "write_in_place %s: fdatasync: %s (written)",
				     path, strerror(e));
	}
	close(fd);
	lua_pushboolean(L, 1);
	return 1;
}

/* ---- mknod_char ----------------------------------------------------------------------------- */

/* The end of mknod_char and mkdir: `path` was just made by `what` ("mknod", "mkdir"), which
 * applied the umask: give it the permission bits `mode` exactly (chmod(2)), or remove it again
 * with `undo` (unlink or rmdir) and push the error.  Returns the Lua results: true, or nil, msg,
 * code. */
static int push_made(lua_State *L, const char *what, const char *path, lua_Integer mode,
		     int (*undo)(const char *))
{
	if (chmod(path, (mode_t)mode) < 0) {
		int e = errno;
		undo(path);
		return ig_push_error(L, ig_code(-e), "%s %s: chmod: %s", what, path, strerror(e));
	}
	lua_pushboolean(L, 1);
	return 1;
}

/* host.mknod_char(path, major, minor [, mode]) -> true, or nil, msg, code.
 * Creates the character device node `path` (mknod(2), makedev(3)) with permission bits `mode`
 * exactly (integer, default 0666: an IMEX channel /dev/nvidia-caps-imex-channels/channelN must be
 * openable by the job's user; NVIDIA's IMEX guide creates it with mknod ... c MAJOR N).  MAJOR
 * comes from /proc/devices.  Already a character device with the same numbers: true (nothing
 * changed). Anything else at path: "EEXIST". */
int ig_host_mknod_char(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	lua_Integer maj = luaL_checkinteger(L, 2);
	lua_Integer min = luaL_checkinteger(L, 3);
	lua_Integer mode = luaL_optinteger(L, 4, 0666);
	luaL_argcheck(L, maj >= 0 && maj <= 0xfff, 2, "major must be 0..4095");
	luaL_argcheck(L, min >= 0 && min <= 0xfffff, 3, "minor must be 0..1048575");
	luaL_argcheck(L, mode >= 0 && mode <= 07777, 4, "mode must be permission bits (0..07777)");
	dev_t dev = makedev((unsigned)maj, (unsigned)min);
	if (mknod(path, S_IFCHR | ((mode_t)mode & 0777), dev) < 0) {
		int e = errno;
		struct stat st;
		if (e == EEXIST && lstat(path, &st) == 0 && S_ISCHR(st.st_mode) &&
		    st.st_rdev == dev) {
			lua_pushboolean(L, 1);
			return 1;
		}
		if (e == EEXIST)
			return ig_push_error(
			    L, "EEXIST", "mknod %s: exists and is not character device %lld:%lld",
			    path, (long long)maj, (long long)min);
		return ig_push_error(L, ig_code(-e), "mknod %s: %s", path, strerror(e));
	}
	return push_made(L, "mknod", path, mode, unlink);
}

/* ---- mkdir ---------------------------------------------------------------------------------- */

/* host.mkdir(path [, mode]) -> true, or nil, msg, code.
 * Creates ONE directory (mkdir(2); parents are not created) with permission bits `mode` exactly
 * (integer, default 0755; applied with chmod after mkdir, so the umask does not narrow it).  The
 * state directory /run/imexguard lives on a tmpfs that is empty after every boot.  An existing
 * directory is success and is left as it is (mode and owner unchanged); anything else at `path`
 * is "ENOTDIR".  Errors: the errno name ("ENOENT" when the parent is missing, "EACCES", "EROFS").
 */
int ig_host_mkdir(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	lua_Integer mode = luaL_optinteger(L, 2, 0755);
	luaL_argcheck(L, mode >= 0 && mode <= 07777, 2, "mode must be permission bits (0..07777)");
	if (mkdir(path, (mode_t)mode) < 0) {
		int e = errno;
		struct stat st;
		if (e == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
			lua_pushboolean(L, 1);
			return 1;
		}
		if (e == EEXIST)
			return ig_push_error(L, "ENOTDIR",
					     "mkdir %s: exists and is not a directory", path);
		return ig_push_error(L, ig_code(-e), "mkdir %s: %s", path, strerror(e));
	}
	return push_made(L, "mkdir", path, mode, rmdir);
}

/* host.remove_temps(path) -> list of removed names, or nil, msg, code.
 * path: string, the file whose leftovers to remove (field case C39: a writer killed between naming
 * its temp file and the rename leaves `.<basename>.imexguard.XXXXXX` in path's directory). Removes,
 * in path's directory, exactly the names write_atomic gives its temp files (`.` basename `.` and 6
 * characters of [A-Za-z0-9]; nothing else, not another basename's) that are regular files whose
 * flock can be taken (no live writer holds it).  The list holds the removed base names (any
 * order; {} when none).  code: "ENOENT" for a missing directory, "EINVAL" for a path without a
 * file name, or opendir's errno name.  Call it under the node lock (the writers of those files
 * hold it). */
int ig_host_remove_temps(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	char *dir = NULL;
	const char *base;
	int rc = split_path(path, &dir, &base);
	if (rc < 0)
		return ig_push_error(L, ig_code(rc), "remove_temps %s: no file name", path);
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int e = errno;
	free(dir);
	if (dirfd < 0)
		return ig_push_error(L, ig_code(-e), "remove_temps %s: %s", path, strerror(e));
	lua_newtable(L);
	remove_stale_temps_of(dirfd, base, L);
	close(dirfd);
	return 1;
}
