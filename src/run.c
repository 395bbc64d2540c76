/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run.c: run an argv (no shell) with a timeout, capped output, in its own process group; started
 * and waited for in one call (host.run), or started now and waited for later (host.spawn and its
 * process handle), so that a command runs while the run does other work.  host.run is a spawn and
 * a wait: one implementation.
 *
 * How (POSIX posix_spawn, Linux pidfd_open and poll):
 *  - posix_spawnp (PATH lookup like execvp when argv[1] has no slash), POSIX_SPAWN_SETPGROUP with
 *    pgroup 0: the child leads a new process group, so the whole command tree can be signalled.
 *    Signal dispositions reset to default and the signal mask emptied in the child; stdin is
 *    /dev/null; stdout and stderr are O_CLOEXEC pipes; every other descriptor >= 3 is closed in the
 *    child (posix_spawn_file_actions_addclosefrom_np, glibc >= 2.34), so a command never inherits
 *    the node lock, another command's pipes or anything else.  glibc's posix_spawn reports an exec
 *    failure (ENOENT, EACCES, ENOEXEC) as its return value: no zombie is left and nothing is read.
 *  - The timeout is counted from the start: the command must end by start + min(timeout, the run's
 *    budget then), however late the wait begins.  Until the wait, the command writes into its
 *    pipes' buffers (64 KiB each on Linux) and then blocks: it is not read before the wait.
 *  - The wait: one poll(2) loop over both pipes and a pidfd of the child (readable when it exits)
 *    until that end.  Each stream keeps at most max_output bytes; beyond that the pipe is still
 *    drained (so the child never blocks on a full pipe) and truncated = true.
 *  - Expiry: SIGTERM to the group, up to 0.2 s for the child to exit (still draining), then
 *    SIGKILL to the group (also killing a member that ignored SIGTERM), then reap.
 *  - The child exits before the timeout: whatever is left of its process group is killed
 *    (SIGKILL) while the exited child is still a zombie (waitid WNOWAIT), which keeps its pid and
 *    so the group id from being reused; the pipes are then read to EOF for at most 0.2 s more (a
 *    process that left the group with setsid can hold them open), and the child is reaped.  So a
 *    command that exits (e.g. nvidia-imex-ctl) never costs the full timeout because of a
 *    background grandchild, and no process of its group outlives the call.  A daemon meant to
 *    survive must leave the group (setsid), as daemons do.
 *  - A started command that is never waited for (its handle closed, collected, or the Lua state
 *    closed) has its group killed with SIGKILL at once and is reaped; its output is dropped.
 *  - The child is always reaped and every descriptor closed.  Exception: a process that does not
 *    die within 1 s of SIGKILL (uninterruptible sleep, e.g. a hung NFS mount) is left unreaped
 *    (the message says so); it is reaped by init when this process exits.  A run ended by the
 *    watchdog or a signal (watchdog.c: _exit) leaves a command that is still running, as it would
 *    leave one inside host.run.
 *  - Requires SIGCHLD not to be ignored (SIG_IGN would auto-reap and hide the exit status).
 */
#include "imexguard.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TERM_GRACE  0.2	 /* seconds between SIGTERM and SIGKILL of the group */
#define EXIT_DRAIN  0.2	 /* seconds to read the pipes to EOF after the child exited */
#define KILL_WAIT   1.0	 /* seconds to wait for the child to die after SIGKILL */
#define POLL_SLICE  0.02 /* seconds: poll slice when pidfd_open is unavailable */
#define DEFAULT_MAX (1024 * 1024)

struct stream {
	int fd; /* -1 once at EOF */
	char *buf;
	size_t len, cap;
};

struct run_result {
	int status; /* exit code, or -1 */
	int signal; /* terminating signal, or 0 */
	int truncated;
	int reaped;	/* 0: the child survived SIGKILL (left unreaped) */
	double elapsed; /* seconds */
	struct stream out, err;
};

/* A started command: host.spawn's handle (a full userdata), also host.run's own. */
struct proc {
	pid_t pid;	 /* the child, leader of its process group */
	int pidfd;	 /* -1 when pidfd_open is unavailable */
	int running;	 /* started and neither waited for nor discarded */
	int by_deadline; /* the run's budget was the tighter bound at the start */
	double start;	 /* ig_now() at the start */
	double end;	 /* start + min(timeout, the budget then): the command must end by then */
	double timeout;	 /* seconds, as given (messages) */
	size_t max_out;	 /* bytes kept per stream */
	struct run_result r;
};

/* Read what is available from s (non-blocking), keeping at most max bytes in total. */
static void stream_read(struct stream *s, size_t max, int *truncated)
{
	char tmp[65536];
	while (s->fd >= 0) {
		ssize_t r = read(s->fd, tmp, sizeof tmp);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return;
			r = 0; /* a read error ends the stream like EOF */
		}
		if (r == 0) {
			close(s->fd);
			s->fd = -1;
			return;
		}
		size_t keep = (size_t)r;
		if (s->len + keep > max) {
			keep = max - s->len;
			*truncated = 1;
		}
		if (keep == 0)
			continue;
		if (s->len + keep > s->cap) {
			size_t ncap = s->cap ? s->cap : 4096;
			while (ncap < s->len + keep)
				ncap *= 2;
			char *nb = realloc(s->buf, ncap);
			if (!nb) { /* out of memory: keep what we have, drop the rest */
				*truncated = 1;
				continue;
			}
			s->buf = nb;
			s->cap = ncap;
		}
		memcpy(s->buf + s->len, tmp, keep);
		s->len += keep;
	}
}

/* Has the child exited?  Leaves it a zombie (WNOWAIT) so its pid, and thus the group id, stays
 * reserved until we reap it. */
static int child_exited(pid_t pid)
{
	siginfo_t si;
	memset(&si, 0, sizeof si);
	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return errno == ECHILD; /* already reaped by someone else (SIGCHLD ignored) */
	return si.si_pid == pid;
}

/* Poll both streams and the child's pidfd until `until` (absolute monotonic seconds, may be
 * INFINITY), until the child exits (stop_on_exit) or both streams reach EOF (stop_on_eof).
 * Returns 1 when the child has exited. */
static int pump(struct run_result *r, pid_t pid, int pidfd, size_t max, double until,
		int stop_on_exit, int stop_on_eof)
{
	for (;;) {
		int exited = child_exited(pid);
		if (exited && stop_on_exit)
			return 1;
		if (stop_on_eof && r->out.fd < 0 && r->err.fd < 0)
			return exited;
		double now = ig_now();
		if (now >= until)
			return exited;
		struct pollfd p[3];
		int n = 0;
		if (r->out.fd >= 0)
			p[n++] = (struct pollfd){.fd = r->out.fd, .events = POLLIN};
		if (r->err.fd >= 0)
			p[n++] = (struct pollfd){.fd = r->err.fd, .events = POLLIN};
		int watch_pid = !exited && pidfd >= 0;
		if (watch_pid)
			p[n++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
		double wait = until - now;
		if (!exited && pidfd < 0 && wait > POLL_SLICE)
			wait = POLL_SLICE;
		int ms = isinf(wait)		 ? -1
			 : wait * 1000 > INT_MAX ? INT_MAX
						 : (int)ceil(wait * 1000);
		if (n == 0) {
			/* nothing to watch: streams closed and the child is gone, or no pidfd */
			if (exited)
				return 1;
			ms =
			    ms < 0 || ms > (int)(POLL_SLICE * 1000) ? (int)(POLL_SLICE * 1000) : ms;
		}
		int rc = poll(p, (nfds_t)n, ms);
		if (rc < 0 && errno != EINTR)
			return child_exited(pid); /* should not happen; avoid a busy loop */
		stream_read(&r->out, max, &r->truncated);
		stream_read(&r->err, max, &r->truncated);
	}
}

/* Wait for a pid (already signalled) to die, up to `seconds`.  Returns 1 when it exited. */
static int wait_dead(pid_t pid, int pidfd, double seconds)
{
	double until = ig_now() + seconds;
	while (!child_exited(pid)) {
		double left = until - ig_now();
		if (left <= 0)
			return 0;
		if (pidfd >= 0) {
			struct pollfd p = {.fd = pidfd, .events = POLLIN};
			poll(&p, 1, (int)ceil(left * 1000));
		} else {
			struct timespec ts = {0, 10 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
	}
	return 1;
}

/* Move a descriptor to >= 3 so that the child's dup2 onto 0/1/2 cannot clobber it. */
static int fd_above_stdio(int fd)
{
	if (fd > 2)
		return fd;
	int nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	int e = errno;
	close(fd);
	errno = e;
	return nfd;
}

/* Start argv (PATH searched) in a process group of its own, stdin /dev/null, stdout on out_fd and
 * stderr on err_fd, every other descriptor closed, signals at their defaults and unblocked
 * (posix_spawn(3)).  Returns 0 with *pid set, or the negative errno of posix_spawnp. */
static int spawn(char *const argv[], int out_fd, int err_fd, pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t all, none;
	sigfillset(&all);
	sigemptyset(&none);
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
	posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
					    POSIX_SPAWN_SETSIGMASK);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setsigmask(&attr, &none);
	int err = posix_spawnp(pid, argv[0], &fa, &attr, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	return -err;
}

/* Reap the dead child pid (waitpid, restarting on EINTR) into r->status or r->signal. */
static void reap(struct run_result *r, pid_t pid)
{
	int status;
	pid_t w;
	do
		w = waitpid(pid, &status, 0);
	while (w < 0 && errno == EINTR);
	if (w != pid)
		return;
	if (WIFEXITED(status))
		r->status = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		r->signal = WTERMSIG(status);
}

/* Start argv (NULL-terminated) with `timeout` seconds from now (bounded by the budget) and at
 * most max_out bytes kept per stream.  Returns 0 with p running, or -errno of pipe2/posix_spawnp
 * with p not running and nothing left open. */
static int proc_start(struct proc *p, char *const argv[], double timeout, size_t max_out)
{
	int po[2] = {-1, -1}, pe[2] = {-1, -1};
	int rc = 0;

	memset(p, 0, sizeof *p);
	p->pidfd = -1;
	p->r.status = -1;
	p->r.out.fd = p->r.err.fd = -1;
	p->r.reaped = 1;
	p->timeout = timeout;
	p->max_out = max_out;
	p->start = ig_now();
	p->end = p->start + ig_bound(timeout, &p->by_deadline);

	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		rc = -errno;
		goto close_pipes;
	}
	for (int i = 0; i < 2; i++) {
		if ((po[i] = fd_above_stdio(po[i])) < 0 || (pe[i] = fd_above_stdio(pe[i])) < 0) {
			rc = -errno;
			goto close_pipes;
		}
	}
	if ((rc = spawn(argv, po[1], pe[1], &p->pid)) < 0)
		goto close_pipes;
	close(po[1]);
	close(pe[1]);
	p->r.out.fd = po[0];
	p->r.err.fd = pe[0];
	fcntl(p->r.out.fd, F_SETFL, O_NONBLOCK);
	fcntl(p->r.err.fd, F_SETFL, O_NONBLOCK);
	p->pidfd = pidfd_open(p->pid, 0); /* -1 (ENOSYS on Linux < 5.3): poll in slices */
	p->running = 1;
	return 0;

close_pipes:
	for (int i = 0; i < 2; i++) {
		if (po[i] >= 0)
			close(po[i]);
		if (pe[i] >= 0)
			close(pe[i]);
	}
	return rc;
}

/* Reap the child when it died and close the descriptors; p is no longer running. */
static void proc_release(struct proc *p)
{
	if (p->r.reaped)
		reap(&p->r, p->pid);
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->r.out.fd >= 0)
		close(p->r.out.fd);
	if (p->r.err.fd >= 0)
		close(p->r.err.fd);
	p->pidfd = p->r.out.fd = p->r.err.fd = -1;
	p->running = 0;
}

/* Wait for the running p until its end (the top of this file).  Returns 0 when the child ended by
 * itself in time, -ETIMEDOUT (own timeout) / -ETIME (the budget was the tighter bound) when its
 * group was killed at expiry; p->r is filled either way (its buffers are the caller's to free)
 * and p is no longer running. */
static int proc_wait(struct proc *p)
{
	struct run_result *r = &p->r;
	int rc = 0;

	if (pump(r, p->pid, p->pidfd, p->max_out, p->end, 1, 0)) {
		/* In time.  Strays of the group die now (the zombie leader keeps the id reserved);
		 * then the rest of the output, to EOF or for EXIT_DRAIN seconds. */
		kill(-p->pid, SIGKILL);
		pump(r, p->pid, p->pidfd, p->max_out, ig_now() + EXIT_DRAIN, 0, 1);
	} else {
		rc = p->by_deadline ? -ETIME : -ETIMEDOUT;
		kill(-p->pid, SIGTERM);
		pump(r, p->pid, p->pidfd, p->max_out, ig_now() + TERM_GRACE, 1, 0);
		kill(-p->pid, SIGKILL);
		r->reaped = wait_dead(p->pid, p->pidfd, KILL_WAIT);
		/* what the killed group had written */
		pump(r, p->pid, p->pidfd, p->max_out, ig_now() + (r->reaped ? 0.05 : 0), 0, 1);
	}
	proc_release(p);
	r->elapsed = ig_now() - p->start;
	return rc;
}

/* A running p that will not be waited for: SIGKILL to its group, reaped (up to KILL_WAIT seconds),
 * its descriptors closed.  Frees the output kept so far, also of a p waited for; idempotent. */
static void proc_discard(struct proc *p)
{
	if (p->running) {
		kill(-p->pid, SIGKILL);
		p->r.reaped = wait_dead(p->pid, p->pidfd, KILL_WAIT);
		proc_release(p);
	}
	free(p->r.out.buf);
	free(p->r.err.buf);
	p->r.out.buf = p->r.err.buf = NULL;
}

static void push_result(lua_State *L, const struct run_result *r)
{
	lua_createtable(L, 0, 6);
	if (r->status >= 0) {
		lua_pushinteger(L, r->status);
		lua_setfield(L, -2, "status");
	}
	if (r->signal > 0) {
		lua_pushinteger(L, r->signal);
		lua_setfield(L, -2, "signal");
	}
	lua_pushlstring(L, r->out.buf ? r->out.buf : "", r->out.len);
	lua_setfield(L, -2, "stdout");
	lua_pushlstring(L, r->err.buf ? r->err.buf : "", r->err.len);
	lua_setfield(L, -2, "stderr");
	lua_pushboolean(L, r->truncated);
	lua_setfield(L, -2, "truncated");
	lua_pushnumber(L, r->elapsed);
	lua_setfield(L, -2, "elapsed");
}

/* The command of host.run and host.spawn (called `name` in messages): argv (index 1) as a
 * NULL-terminated array in a userdata left on the stack (its strings are argv's), opts (index 2):
 * timeout (*timeout, seconds) and max_output (*max, bytes).  Raises on misuse. */
static char **check_command(lua_State *L, const char *name, double *timeout, size_t *max)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	luaL_checktype(L, 2, LUA_TTABLE);
	lua_Integer n = luaL_len(L, 1);
	luaL_argcheck(L, n >= 1, 1, "argv must be a non-empty list of strings");
	luaL_argcheck(L, n < 65536, 1, "argv too long");
	const char **argv = lua_newuserdatauv(L, sizeof(char *) * ((size_t)n + 1), 0);
	for (lua_Integer i = 1; i <= n; i++) {
		if (lua_geti(L, 1, i) != LUA_TSTRING)
			luaL_error(L, "bad argument #1 to '%s' (argv[%d] is not a string)", name,
				   (int)i);
		size_t len;
		argv[i - 1] = lua_tolstring(L, -1, &len);
		if (strlen(argv[i - 1]) != len)
			luaL_error(L, "bad argument #1 to '%s' (argv[%d] contains a NUL)", name,
				   (int)i);
		lua_pop(L, 1); /* the string stays alive: it is referenced by the argv table */
	}
	argv[n] = NULL;

	if (lua_getfield(L, 2, "timeout") != LUA_TNUMBER)
		luaL_error(L, "bad argument #2 to '%s' (opts.timeout must be a number)", name);
	*timeout = lua_tonumber(L, -1);
	lua_pop(L, 1);
	if (*timeout != *timeout)
		luaL_error(L, "bad argument #2 to '%s' (opts.timeout is NaN)", name);
	lua_Integer m = DEFAULT_MAX;
	if (lua_getfield(L, 2, "max_output") != LUA_TNIL) {
		if (!lua_isinteger(L, -1) || (m = lua_tointeger(L, -1)) < 0)
			luaL_error(
			    L, "bad argument #2 to '%s' (opts.max_output must be an integer >= 0)",
			    name);
	}
	lua_pop(L, 1);
	*max = (size_t)m;
	return (char **)argv;
}

/* Push a new process handle (not running yet; its user value is the program's name, argv[1])
 * and start argv in it.  Returns the handle, or NULL with nil, message, code pushed (3 values)
 * when the command could not be started. */
static struct proc *new_proc(lua_State *L, char **argv, double timeout, size_t max)
{
	struct proc *p = lua_newuserdatauv(L, sizeof *p, 1);
	memset(p, 0, sizeof *p);
	p->pidfd = -1;
	ig_push_process_metatable(L);
	lua_setmetatable(L, -2);
	lua_pushstring(L, argv[0]);
	lua_setiuservalue(L, -2, 1);
	int rc = proc_start(p, argv, timeout, max);
	if (rc < 0) {
		ig_push_error(L, ig_code(rc), "run %s: %s", argv[0], strerror(-rc));
		return NULL;
	}
	return p;
}

/* Wait for the running handle at index idx and push host.run's results: result, or nil, message,
 * code, result (timeout/deadline).  Returns the number of results. */
static int wait_results(lua_State *L, int idx, struct proc *p)
{
	lua_getiuservalue(L, idx, 1);
	const char *prog = lua_tostring(L, -1);
	int rc = proc_wait(p);
	int n = 1;
	if (rc < 0) {
		const char *tail =
		    p->r.reaped ? "" : " (it did not die after SIGKILL; left unreaped)";
		if (rc == -ETIME)
			ig_push_error(L, "deadline",
				      "%s: killed after %.1f s: the run's deadline passed%s", prog,
				      p->r.elapsed, tail);
		else
			ig_push_error(L, "timeout", "%s timed out after %.1f s%s", prog, p->timeout,
				      tail);
		n = 4;
	}
	push_result(L, &p->r);
	proc_discard(p); /* frees the output: it is in the result now */
	return n;
}

/* host.run(argv, opts) -> result, or nil, msg, code [, result].
 * argv: list of strings (argv[1] is the program; looked up in PATH when it has no slash; no
 * shell).  opts.timeout: seconds (number, required; bounded by the run's budget);
 * opts.max_output: bytes kept per stream (integer, default 1 MiB).
 * result: {status = exit code or nil, signal = number or nil, stdout = string, stderr = string,
 * truncated = boolean (a stream exceeded max_output), elapsed = seconds}.  A non-zero exit is not
 * an error: look at result.status.  Errors: code "timeout" / "deadline" (the group was killed;
 * result given), or the errno name of a spawn failure ("ENOENT", "EACCES", "ENOEXEC", "EMFILE").
 * host.spawn(argv, opts) then process:wait(), in one call.  See the top of run.c for the
 * process-group and grandchild rules. */
int ig_host_run(lua_State *L)
{
	double timeout;
	size_t max;
	char **argv = check_command(L, "run", &timeout, &max);
	struct proc *p = new_proc(L, argv, timeout, max);
	if (!p)
		return 3;
	return wait_results(L, lua_gettop(L), p);
}

/* host.spawn(argv, opts) -> process, or nil, msg, code.
 * Starts argv as host.run does (same argv and opts: opts.timeout in seconds, required, bounded by
 * the run's budget; opts.max_output in bytes per stream, default 1 MiB) and returns at once.  The
 * timeout runs from now: the command must end by now + min(timeout, the budget left now),
 * however late its wait begins.  Errors: the errno name of a spawn failure ("ENOENT", "EACCES",
 * "ENOEXEC", "EMFILE"), nothing started.  The process handle (a userdata):
 *   process:wait() -> exactly what host.run returns (result, or nil, msg, "timeout"|"deadline",
 *     result); result.elapsed counts from the start.  Once only: a second wait raises.
 *   process:pid() -> the child's pid (integer), also its process group's id.
 *   process:close() -> true.  A process not waited for: SIGKILL to its group, reaped, its output
 *     dropped; after a wait, nothing.  Idempotent.  It is also the handle's __close (a
 *     to-be-closed variable: `local p <close> = host.spawn(...)`) and __gc, so a command whose
 *     wait never comes (an error, a return on another path) is killed and reaped, never leaked.
 * Where it comes from: posix_spawn(3) and pidfd_open(2) as host.run; the handle as Lua 5.4's
 * io.popen file (a userdata closed by :close, __close or __gc). */
int ig_host_spawn(lua_State *L)
{
	double timeout;
	size_t max;
	char **argv = check_command(L, "spawn", &timeout, &max);
	return new_proc(L, argv, timeout, max) ? 1 : 3;
}

static struct proc *check_proc(lua_State *L)
{
	return luaL_checkudata(L, 1, IG_PROCESS_MT);
}

/* process:wait(): see ig_host_spawn. */
static int l_proc_wait(lua_State *L)
{
	struct proc *p = check_proc(L);
	luaL_argcheck(L, p->running, 1, "the process was already waited for or closed");
	return wait_results(L, 1, p);
}

/* process:pid(): see ig_host_spawn. */
static int l_proc_pid(lua_State *L)
{
	lua_pushinteger(L, check_proc(L)->pid);
	return 1;
}

/* process:close(), __close and __gc: see ig_host_spawn. */
static int l_proc_close(lua_State *L)
{
	proc_discard(check_proc(L));
	lua_pushboolean(L, 1);
	return 1;
}

/* ig_push_process_metatable: see imexguard.h. */
void ig_push_process_metatable(lua_State *L)
{
	static const luaL_Reg methods[] = {
	    {"wait", l_proc_wait}, {"pid", l_proc_pid}, {"close", l_proc_close}, {NULL, NULL}};
	static const luaL_Reg meta[] = {
	    {"__close", l_proc_close}, {"__gc", l_proc_close}, {NULL, NULL}};

	ig_push_metatable(L, IG_PROCESS_MT, meta, methods);
}
