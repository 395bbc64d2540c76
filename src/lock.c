/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lock.c: the node lock.  An exclusive flock(2) on a dedicated lock file, waited for in the kernel
 * and bounded by min(timeout, the run's budget).
 *
 * Rules (field case C01 of docs/design.md, "Field cases"; flock(2) belongs to the open file
 * description of an inode):
 *  - The lock file is created 0644 if missing and NEVER unlinked or renamed by us: a "recovery"
 * that deletes it lets two holders run at once, because the new file is a new inode.
 *  - After flock succeeds, fstat(fd) must equal stat(path) (st_dev, st_ino); if someone replaced or
 *    removed the path while we waited, the lock we hold protects nothing: unlock and retry on the
 *    inode the path names now.
 *  - The holder writes "pid=<pid> owner=<owner> since=<epoch seconds>\n" into the file so a waiter
 *    that times out can name it.  The record is written with pwrite at offset 0 and then the file
 *    is truncated to the record's length (not truncate-then-write), so a reader never sees an empty
 *    file while the lock is held; readers parse the first complete line only.  The record is NOT
 *    cleared at unlock: the next holder overwrites it, so during a hand-over the file names the
 *    previous holder instead of nobody.  A waiter that times out checks the record against the
 *    holder's pid in /proc/locks (the kernel's table of flock(2) locks, "FLOCK ... <pid>
 *    <major>:<minor>:<inode>") and re-reads it for up to HOLDER_SETTLE_MS while they differ
 *    (the new holder has not written yet): a holder is named whenever one exists, by its
 *    record, or by its pid alone when it wrote none in time.
 *  - The timed wait: flock(LOCK_EX) blocks in the kernel; a POSIX timer (timer_create on
 *    CLOCK_MONOTONIC, SIGEV_THREAD_ID to this thread) fires at the end instant and then every
 *    10 ms, and its signal handler is installed WITHOUT SA_RESTART, so flock returns EINTR.  The
 *    repeating interval covers the race where the signal lands after the deadline check but before
 *    the thread enters flock.  After each EINTR the deadline is checked.  The handler, the signal
 *    mask and the timer are restored/deleted on every path, and a signal still pending is consumed.
 *    The save/restore of the handler is not thread-safe: call from one thread (the Lua state's).
 */
#include "imexguard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

#define LOCK_MT		 "imexguard.lock"
#define RETICK_NS	 10000000L /* 10 ms: re-fire interval of the wake-up timer */
#define HOLDER_MAX	 512	   /* bytes of the holder record we read */
#define OWNER_MAX	 200	   /* bytes of `owner` we record */
#define IG_LOCK_SIGNO	 (SIGRTMIN + 2)
#define HOLDER_SETTLE_MS 50 /* ms a timed-out waiter re-reads a record that is not the holder's */

struct ig_lock {
	int fd; /* -1 once released */
	dev_t dev;
	ino_t ino;
};

struct holder {
	int known; /* the record parsed, or the pid found in /proc/locks (then since < 0) */
	long pid;
	char owner[OWNER_MAX + 1];
	long long since; /* epoch seconds; -1: no record, pid from /proc/locks only */
};

static void on_wakeup(int signo)
{
	(void)signo; /* only there to make flock(2) return EINTR */
}

/* Wait for flock(fd, LOCK_EX) until the absolute CLOCK_MONOTONIC instant `end` (seconds,
 * finite).  Returns 0 when locked, -ETIMEDOUT when `end` passed first, or another -errno. */
static int flock_until(int fd, double end)
{
	int signo = IG_LOCK_SIGNO;
	struct sigaction sa, old_sa;
	sigset_t set, old_mask;
	timer_t timer;
	int rc;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_wakeup;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART: flock must return EINTR */
	if (sigaction(signo, &sa, &old_sa) < 0)
		return -errno;
	sigemptyset(&set);
	sigaddset(&set, signo);
	if ((rc = pthread_sigmask(SIG_UNBLOCK, &set, &old_mask)) != 0) {
		sigaction(signo, &old_sa, NULL);
		return -rc;
	}

	struct sigevent sev;
	memset(&sev, 0, sizeof sev);
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = signo;
	sev.sigev_notify_thread_id = gettid();
	if (timer_create(CLOCK_MONOTONIC, &sev, &timer) < 0) {
		rc = -errno;
		goto restore;
	}
	struct itimerspec its;
	its.it_value.tv_sec = (time_t)end;
	its.it_value.tv_nsec = (long)((end - floor(end)) * 1e9);
	if (its.it_value.tv_nsec >= 1000000000L)
		its.it_value.tv_nsec = 999999999L;
	if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
		its.it_value.tv_nsec = 1; /* zero would disarm the timer */
	its.it_interval.tv_sec = 0;
	its.it_interval.tv_nsec = RETICK_NS;
	if (timer_settime(timer, TIMER_ABSTIME, &its, NULL) < 0) {
		rc = -errno;
		timer_delete(timer);
		goto restore;
	}

	for (;;) {
		if (ig_now() >= end) {
			rc = -ETIMEDOUT;
			break;
		}
		if (flock(fd, LOCK_EX) == 0) {
			rc = 0;
			break;
		}
		if (errno != EINTR) {
			rc = -errno;
			break;
		}
	}
	timer_delete(timer);

restore:;
	/* Consume a tick that may still be pending, with the signal blocked, before the old
	 * disposition (default for a real-time signal: terminate) comes back. */
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	struct timespec zero = {0, 0};
	while (sigtimedwait(&set, NULL, &zero) == signo)
		;
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	sigaction(signo, &old_sa, NULL);
	return rc;
}

/* Parse "pid=<n> owner=<s> since=<n>\n" (first complete line of buf, NUL-terminated). */
static void parse_holder(const char *buf, struct holder *h)
{
	memset(h, 0, sizeof *h);
	const char *nl = strchr(buf, '\n');
	if (!nl || strncmp(buf, "pid=", 4) != 0)
		return;
	char *end;
	errno = 0;
	long pid = strtol(buf + 4, &end, 10);
	if (errno || end == buf + 4 || strncmp(end, " owner=", 7) != 0)
		return;
	const char *owner = end + 7;
	/* owner may contain spaces: " since=" is the last field of the line */
	const char *since = NULL;
	for (const char *p = owner; p + 7 <= nl; p++)
		if (strncmp(p, " since=", 7) == 0)
			since = p;
	if (!since)
		return;
	errno = 0;
	long long s = strtoll(since + 7, &end, 10);
	if (errno || end == since + 7 || end != nl)
		return;
	size_t olen = (size_t)(since - owner);
	if (olen > OWNER_MAX)
		olen = OWNER_MAX;
	memcpy(h->owner, owner, olen);
	h->owner[olen] = '\0';
	h->pid = pid;
	h->since = s;
	h->known = 1;
}

/* Read the holder record of an open lock file (pread, no locking). */
static void read_holder(int fd, struct holder *h)
{
	char buf[HOLDER_MAX + 1];
	ssize_t n;
	do
		n = pread(fd, buf, HOLDER_MAX, 0);
	while (n < 0 && errno == EINTR);
	buf[n > 0 ? n : 0] = '\0';
	parse_holder(buf, h);
}

/* The pid holding a flock(2) on (dev, ino) per /proc/locks (the kernel's lock table; blocked
 * waiters, marked "->", are skipped), or 0 when none is listed or the table cannot be read. */
static long flock_pid(dev_t dev, ino_t ino)
{
	FILE *f = fopen("/proc/locks", "re");
	if (!f)
		return 0;
	char line[256], kind[16];
	long pid = 0, p;
	unsigned maj, min;
	unsigned long long i;
	while (pid == 0 && fgets(line, sizeof line, f)) {
		if (strstr(line, "->"))
			continue;
		int n = sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%llu", kind, &p, &maj, &min, &i);
		if (n == 5 && strcmp(kind, "FLOCK") == 0 && maj == major(dev) &&
		    min == minor(dev) && i == (unsigned long long)ino)
			pid = p;
	}
	fclose(f);
	return pid;
}

/* After a timeout: the holder of the lock on fd (identity st), see the top comment.  Reads the
 * holder's pid in /proc/locks, then the record, every 1 ms for at most HOLDER_SETTLE_MS until
 * the record names that pid (a record read while nobody is listed, or another pid, may be a
 * previous holder's); then falls back to the listed pid alone (since = -1), else to the record
 * last read (nobody listed: the lock was let go meanwhile, or /proc/locks names another device,
 * e.g. on overlayfs). */
static void settle_holder(int fd, const struct stat *st, struct holder *h)
{
	const struct timespec tick = {0, 1000000L};
	long lp = 0;
	for (int ms = 0;; ms++) {
		lp = flock_pid(st->st_dev, st->st_ino);
		read_holder(fd, h);
		if (h->known && lp > 0 && h->pid == lp)
			return;
		if (ms >= HOLDER_SETTLE_MS)
			break;
		nanosleep(&tick, NULL);
	}
	if (lp > 0) {
		memset(h, 0, sizeof *h);
		h->known = 1;
		h->pid = lp;
		h->since = -1;
	}
}

/* Write our holder record: pwrite at 0, then truncate to its length (see top comment). */
static int write_holder(int fd, const char *owner)
{
	char rec[HOLDER_MAX], clean[OWNER_MAX + 1];
	size_t len = strnlen(owner, OWNER_MAX);
	memcpy(clean, owner, len);
	clean[len] = '\0';
	ig_blank_crlf(clean, len);
	int n = snprintf(rec, sizeof rec, "pid=%ld owner=%s since=%lld\n", (long)getpid(), clean,
			 (long long)ig_wallclock());
	if (n < 0 || n >= (int)sizeof rec)
		return -EINVAL;
	size_t off = 0;
	while (off < (size_t)n) {
		ssize_t w = pwrite(fd, rec + off, (size_t)n - off, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		off += (size_t)w;
	}
	if (ftruncate(fd, n) < 0)
		return -errno;
	return 0;
}

/* Take the lock.  path: lock file; timeout: seconds (INFINITY: no own bound); owner: the recorded
 * string.  Returns 0 with *fd_out locked (holder record written) and *st its identity, or
 * -ETIMEDOUT (own timeout) / -ETIME (budget) / -errno (open: ENOENT for a missing directory,
 * ELOOP for a symlink, EACCES...; EINVAL when the path is not a regular file).  After a timeout
 * *holder describes the holder when its record could be read.  *waited: seconds spent. */
static int lock_take(const char *path, double timeout, const char *owner, int *fd_out,
		     struct stat *st, struct holder *holder, double *waited)
{
	int by_deadline = 0;
	double start = ig_now();
	double end = start + ig_bound(timeout, &by_deadline);
	int rc;

	memset(holder, 0, sizeof *holder);
	*waited = 0;
	*fd_out = -1;
	for (;;) {
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0644);
		if (fd < 0)
			return -errno;
		if (fstat(fd, st) < 0) {
			rc = -errno;
			close(fd);
			return rc;
		}
		if (!S_ISREG(st->st_mode)) {
			close(fd);
			return -EINVAL;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			rc = 0;
		} else if (errno != EWOULDBLOCK) {
			rc = -errno;
		} else if (isinf(end)) {
			do
				rc = flock(fd, LOCK_EX) == 0 ? 0 : -errno;
			while (rc == -EINTR);
		} else {
			rc = flock_until(fd, end);
		}
		if (rc < 0) {
			*waited = ig_now() - start;
			if (rc == -ETIMEDOUT) {
				settle_holder(fd, st, holder);
				if (by_deadline)
					rc = -ETIME;
			}
			close(fd);
			return rc;
		}
		/* Locked: the path must still name this inode, else someone replaced it. */
		struct stat cur;
		if (stat(path, &cur) == 0 && cur.st_dev == st->st_dev && cur.st_ino == st->st_ino) {
			rc = write_holder(fd, owner);
			if (rc < 0) {
				flock(fd, LOCK_UN);
				close(fd);
				return rc;
			}
			*fd_out = fd;
			*waited = ig_now() - start;
			return 0;
		}
		flock(fd, LOCK_UN);
		close(fd);
		if (ig_now() >= end) {
			*waited = ig_now() - start;
			return by_deadline ? -ETIME : -ETIMEDOUT;
		}
	}
}

/* ---- Lua binding ---------------------------------------------------------------------------- */

static void release(struct ig_lock *lk)
{
	if (lk->fd < 0)
		return;
	/* The record stays for the next holder to overwrite (see the top comment); drop the lock
	 * explicitly: LOCK_UN releases it even if a forked child still shares the descriptor
	 * (before its exec). */
	flock(lk->fd, LOCK_UN);
	close(lk->fd);
	lk->fd = -1;
}

static void push_holder(lua_State *L, const struct holder *h)
{
	lua_createtable(L, 0, 3);
	if (!h->known)
		return;
	lua_pushinteger(L, h->pid);
	lua_setfield(L, -2, "pid");
	if (h->since < 0)
		return; /* pid from /proc/locks only */
	lua_pushstring(L, h->owner);
	lua_setfield(L, -2, "owner");
	lua_pushinteger(L, h->since);
	lua_setfield(L, -2, "since");
}

static void describe_holder(char *buf, size_t len, const struct holder *h)
{
	if (!h->known) {
		snprintf(buf, len, "held by an unknown process");
		return;
	}
	if (h->since < 0) {
		snprintf(buf, len, "held by pid %ld (no holder record)", h->pid);
		return;
	}
	long long age = (long long)ig_wallclock() - h->since;
	snprintf(buf, len, "held by pid %ld (owner %s, for %lld s)", h->pid,
		 h->owner[0] ? h->owner : "unnamed", age < 0 ? 0 : age);
}

static int m_unlock(lua_State *L)
{
	release(luaL_checkudata(L, 1, LOCK_MT));
	lua_pushboolean(L, 1);
	return 1;
}

static int m_gc(lua_State *L)
{
	release(luaL_checkudata(L, 1, LOCK_MT));
	return 0;
}

static int m_inode(lua_State *L)
{
	struct ig_lock *lk = luaL_checkudata(L, 1, LOCK_MT);
	lua_pushinteger(L, (lua_Integer)lk->dev);
	lua_pushinteger(L, (lua_Integer)lk->ino);
	return 2;
}

static int m_tostring(lua_State *L)
{
	struct ig_lock *lk = luaL_checkudata(L, 1, LOCK_MT);
	if (lk->fd >= 0)
		lua_pushfstring(L, "imexguard.lock (held, inode %I)", (lua_Integer)lk->ino);
	else
		lua_pushliteral(L, "imexguard.lock (released)");
	return 1;
}

/* Push the metatable of lock objects (ig_push_metatable). */
static void push_lock_metatable(lua_State *L)
{
	static const luaL_Reg methods[] = {{"unlock", m_unlock}, {"inode", m_inode}, {NULL, NULL}};
	static const luaL_Reg meta[] = {
	    {"__gc", m_gc}, {"__close", m_gc}, {"__tostring", m_tostring}, {NULL, NULL}};

	ig_push_metatable(L, LOCK_MT, meta, methods);
}

/* host.lock(path, timeout, owner) -> lock, or nil, msg, code, holder.
 * path: string, the lock file (created 0644, never deleted or renamed; a symlink is refused with
 * ELOOP); timeout: seconds (number, bounded by the run's budget; 0 tries once; math.huge waits as
 * long as the budget allows); owner: string recorded with our pid (e.g. "job=101"), default "".
 * code: "timeout" (own timeout), "deadline" (the budget ran out first), or an errno name from
 * open(2)/flock(2) ("EACCES", "ENOENT" for a missing directory, "EINVAL" for a non-regular file).
 * holder (on timeout): {pid = integer, owner = string, since = epoch seconds}; {pid = integer}
 * when the holder listed in /proc/locks wrote no record within HOLDER_SETTLE_MS (50 ms) of the
 * timeout; {} when neither is known.  The lock object: lock:unlock() -> true (idempotent; also on
 * __gc, __close and process exit, the kernel releasing flock(2) with the last descriptor);
 * lock:inode() -> dev, ino (integers) of the locked file. */
int ig_host_lock(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	double timeout = luaL_checknumber(L, 2);
	luaL_argcheck(L, timeout == timeout, 2, "timeout is NaN");
	const char *owner = luaL_optstring(L, 3, "");

	struct ig_lock *lk = lua_newuserdatauv(L, sizeof *lk, 0);
	lk->fd = -1;
	push_lock_metatable(L);
	lua_setmetatable(L, -2);

	struct stat st;
	struct holder h;
	double waited;
	int fd;
	int rc = lock_take(path, timeout, owner, &fd, &st, &h, &waited);
	if (rc == -ETIMEDOUT || rc == -ETIME) {
		char who[OWNER_MAX + 96];
		describe_holder(who, sizeof who, &h);
		if (rc == -ETIME)
			ig_push_error(L, "deadline",
				      "lock %s: the run's deadline passed after waiting %.1f s; %s",
				      path, waited, who);
		else
			ig_push_error(L, "timeout", "lock %s: still %s after waiting %.1f s", path,
				      who, waited);
		push_holder(L, &h);
		return 4;
	}
	if (rc < 0) {
		if (rc == -EINVAL)
			return ig_push_error(L, ig_code(rc), "lock %s: not a regular file", path);
		return ig_push_error(L, ig_code(rc), "lock %s: %s", path, strerror(-rc));
	}
	lk->fd = fd;
	lk->dev = st.st_dev;
	lk->ino = st.st_ino;
	return 1;
}

/* host.lock_holder(path) -> holder table, nil (nobody holds the lock, or the file does not exist),
 * or nil, msg, code.  Does not wait and does not take the lock for longer than a non-blocking
 * probe: flock(LOCK_EX|LOCK_NB) on a separate open file description succeeds only when nobody
 * holds it, and is released at once.  holder: {pid, owner, since}, or {} while the first holder of
 * a new file has not yet written its record; during a hand-over (between the next holder's flock
 * and its record) the record read is the previous holder's, which no unlock clears. */
int ig_host_lock_holder(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT) {
			lua_pushnil(L);
			return 1;
		}
		int e = errno;
		return ig_push_error(L, ig_code(-e), "lock holder %s: %s", path, strerror(e));
	}
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		flock(fd, LOCK_UN);
		close(fd);
		lua_pushnil(L);
		return 1;
	}
	if (errno != EWOULDBLOCK) {
		int e = errno;
		close(fd);
		return ig_push_error(L, ig_code(-e), "lock holder %s: %s", path, strerror(e));
	}
	struct holder h;
	read_holder(fd, &h);
	close(fd);
	push_holder(L, &h);
	return 1;
}
