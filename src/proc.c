/*
 * proc.c: who owns a TCP port, from /proc (proc(5)).
 *
 * The Lua primitive port_owner (docs/policy-api.md, section "Processes"): the process listening
 * on a TCP port, found the way ss(8) and lsof(8) do it on Linux.  /proc/net/tcp and
 * /proc/net/tcp6 list the sockets of this network namespace, one per line, with the local
 * address and port in hexadecimal, the state (0A is TCP_LISTEN, include/net/tcp_states.h) and the
 * socket's inode; /proc/PID/fd/N of the process holding it is a symbolic link whose target is
 * "socket:[INODE]" (proc(5), "/proc/pid/fd/").  Then /proc/PID/comm and /proc/PID/cmdline name
 * the process.  Every read is bounded: at most PROC_MAX_LINES socket lines, PROC_MAX_PIDS
 * processes and PROC_MAX_FDS descriptors in all, and the timeout (bounded by the run's budget) is
 * checked between processes.
 */
#include "imexguard.h"
#include "timing.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROC_MAX_LINES	  200000  /* socket lines read from /proc/net/tcp + tcp6 */
#define PROC_MAX_PIDS	  65536	  /* processes whose fds are read */
#define PROC_MAX_FDS	  1048576 /* descriptors read, over all processes */
#define PROC_MAX_INODES	  16	  /* listening sockets on one port (v4, v6, SO_REUSEPORT) */
#define PROC_DEFAULT_WAIT 5.0	  /* seconds: port_owner's default timeout */
#define TCP_LISTEN	  0x0A

struct owner {
	const char *only; /* NULL, or the local address (text) a listener must be bound to */
	unsigned long inodes[PROC_MAX_INODES];
	char addresses[PROC_MAX_INODES][64]; /* the local address of each listener */
	int n_inodes;
	int held; /* the index of the listener the process holds */
	long pid;
	char comm[64];
	char cmdline[4096];
	char why[160]; /* what stopped the search (limit reached, timeout) */
};

/* The local address of a /proc/net/tcp{,6} line in text: 8 hex digits (one 32-bit word in host
 * order) for IPv4, 32 (four such words) for IPv6. */
static void format_addr(const char *hex, char *out, size_t size)
{
	unsigned char bytes[16];
	size_t n = strlen(hex) / 8;

	for (size_t w = 0; w < n && w < 4; w++) {
		char word[9];
		uint32_t v;

		memcpy(word, hex + 8 * w, 8);
		word[8] = '\0';
		v = (uint32_t)strtoul(word, NULL, 16);
		memcpy(bytes + 4 * w, &v, 4);
	}
	if (!inet_ntop(n == 1 ? AF_INET : AF_INET6, bytes, out, (socklen_t)size))
		snprintf(out, size, "%s", hex);
}

/* Whether a listener bound to `addr` takes connections to o->only: the same address, an IPv4
 * address mapped into IPv6 (::ffff:a.b.c.d), or a wildcard (0.0.0.0, ::: every address). */
static int serves(const struct owner *o, const char *addr)
{
	if (!o->only || strcmp(addr, "0.0.0.0") == 0 || strcmp(addr, "::") == 0)
		return 1;
	if (strncmp(addr, "::ffff:", 7) == 0)
		addr += 7;
	return strcmp(addr, o->only) == 0;
}

/* Add the inodes of sockets listening on `port` in `path` (/proc/net/tcp or tcp6) to o.
 * Returns 0, -ENOENT when the file does not exist (no IPv6), -E2BIG at PROC_MAX_LINES, or
 * another negative errno. */
static int scan_net(const char *path, unsigned port, struct owner *o, long *lines)
{
	char line[512];
	FILE *f = fopen(path, "re");

	if (!f)
		return -errno;
	if (!fgets(line, sizeof line, f)) { /* the header */
		fclose(f);
		return 0;
	}
	while (fgets(line, sizeof line, f)) {
		char local[33];
		unsigned lport, state;
		unsigned long inode;

		if (++*lines > PROC_MAX_LINES) {
			fclose(f);
			return -E2BIG;
		}
		if (sscanf(line,
			   " %*u: %32[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*x:%*x %*x:%*x %*x "
			   "%*u %*u %lu",
			   local, &lport, &state, &inode) != 4)
			continue;
		if (lport != port || state != TCP_LISTEN || inode == 0 ||
		    o->n_inodes == PROC_MAX_INODES)
			continue;
		format_addr(local, o->addresses[o->n_inodes], sizeof o->addresses[0]);
		if (!serves(o, o->addresses[o->n_inodes]))
			continue;
		o->inodes[o->n_inodes++] = inode;
	}
	fclose(f);
	return 0;
}

/* Read at most size-1 bytes of a small /proc file into buf (NUL-terminated); NULs (between
 * arguments) and other control characters become spaces, and trailing spaces are removed.  Returns
 * the length or negative errno. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n, len = 0;

	if (fd < 0)
		return -errno;
	while ((size_t)len < size - 1 && (n = read(fd, buf + len, size - 1 - (size_t)len)) > 0)
		len += n;
	close(fd);
	for (ssize_t i = 0; i < len; i++)
		if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
			buf[i] = ' ';
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
		len--;
	buf[len] = '\0';
	return len;
}

/* Whether one of process `pid`'s descriptors is a socket of o->inodes: 1 yes (o->held names which),
 * 0 no (or not readable: another user's process, or it exited); *fds counts the descriptors read.
 */
static int pid_holds(long pid, struct owner *o, long *fds)
{
	char dir[64], target[64];
	struct dirent *de;
	DIR *d;
	int found = 0;

	snprintf(dir, sizeof dir, "/proc/%ld/fd", pid);
	d = opendir(dir);
	if (!d)
		return 0;
	while (!found && *fds < PROC_MAX_FDS && (de = readdir(d))) {
		unsigned long inode;
		ssize_t n;

		if (de->d_name[0] == '.')
			continue;
		++*fds;
		n = readlinkat(dirfd(d), de->d_name, target, sizeof target - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		if (sscanf(target, "socket:[%lu]", &inode) != 1)
			continue;
		for (int i = 0; i < o->n_inodes && !found; i++)
			if (o->inodes[i] == inode) {
				found = 1;
				o->held = i;
			}
	}
	closedir(d);
	return found;
}

/* Find the process holding one of o->inodes, before `end` (monotonic seconds).  Returns 0 with
 * o->pid, comm and cmdline set, -ESRCH when no visible process holds it, -E2BIG when a limit
 * was reached first, -ETIMEDOUT when `end` passed (o->why says which), or negative errno. */
static int find_pid(struct owner *o, double end)
{
	long pids = 0, fds = 0;
	struct dirent *de;
	DIR *d = opendir("/proc");
	int r = -ESRCH;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char path[64];
		long pid;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = strtol(de->d_name, NULL, 10);
		if (ig_now() >= end) {
			snprintf(o->why, sizeof o->why, "after %ld processes", pids);
			r = -ETIMEDOUT;
			break;
		}
		if (++pids > PROC_MAX_PIDS || fds >= PROC_MAX_FDS) {
			snprintf(o->why, sizeof o->why, "limit of %d processes or %d descriptors",
				 PROC_MAX_PIDS, PROC_MAX_FDS);
			r = -E2BIG;
			break;
		}
		if (!pid_holds(pid, o, &fds))
			continue;
		o->pid = pid;
		snprintf(path, sizeof path, "/proc/%ld/comm", pid);
		read_small(path, o->comm, sizeof o->comm);
		snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
		read_small(path, o->cmdline, sizeof o->cmdline);
		r = 0;
		break;
	}
	closedir(d);
	return r;
}

/*
 * host.port_owner(port [, timeout [, address]]) -> {pid, comm, cmdline, address, inode} | nil, msg,
 * code
 *   port: TCP port (integer 1..65535); timeout: seconds (default 5), bounded by the run's budget;
 *   address: an IPv4 address in text: only listeners that take connections to it count (bound to
 *   it, to it mapped into IPv6, or to a wildcard 0.0.0.0 / ::), so on a host with several daemons
 *   on one port (the simulator: one per loopback address) the one answering `address` is found.
 *   Finds a socket in state LISTEN on that port in /proc/net/tcp or /proc/net/tcp6 (this network
 *   namespace; a v6 socket bound to :: also takes IPv4) and the process holding it through
 *   /proc/PID/fd (proc(5)).  Result: pid (number), comm (string, the kernel's short name),
 *   cmdline (string, arguments joined by spaces, at most 4095 bytes), address (the local address
 *   listened on, e.g. "127.0.0.1" or "::"), inode (number, the socket's).  With several
 *   processes holding it (a forked daemon), the first one /proc lists.
 *   Errors: code "none" (nothing listens on the port), "unknown" (a listener exists but no
 *   process of ours can see it: another PID namespace, or another user's process when not
 *   root; the message gives the inode), "limit" (more than 65536 processes or 1048576
 *   descriptors, or 200000 socket lines), "timeout"/"deadline" (the bound passed), or the
 *   errno code of reading /proc ("EACCES", ...).
 */
static int l_port_owner(lua_State *L)
{
	lua_Integer port = luaL_checkinteger(L, 1);
	double timeout = luaL_optnumber(L, 2, PROC_DEFAULT_WAIT);
	int by_deadline = 0;
	struct owner o;
	long lines = 0;
	double bound, end;
	int r;

	luaL_argcheck(L, port >= 1 && port <= 65535, 1, "port must be a TCP port 1..65535");
	luaL_argcheck(L, timeout >= 0, 2, "timeout must be a number of seconds >= 0");
	memset(&o, 0, sizeof o);
	o.only = luaL_optstring(L, 3, NULL);
	bound = ig_bound(timeout, &by_deadline);
	end = ig_now() + bound;
	r = scan_net("/proc/net/tcp", (unsigned)port, &o, &lines);
	if (r >= 0 || r == -ENOENT)
		r = scan_net("/proc/net/tcp6", (unsigned)port, &o, &lines);
	if (r == -ENOENT)
		r = 0;
	if (r == -E2BIG)
		return ig_push_error(L, "limit", "port %d: more than %d sockets in /proc/net/tcp",
				     (int)port, PROC_MAX_LINES);
	if (r < 0)
		return ig_push_error(L, ig_code(r), "port %d: reading /proc/net/tcp: %s", (int)port,
				     strerror(-r));
	if (o.n_inodes == 0)
		return ig_push_error(L, "none", "port %d: no listener on TCP port %d%s%s",
				     (int)port, (int)port, o.only ? " for " : "",
				     o.only ? o.only : "");
	r = find_pid(&o, end);
	if (r == -ESRCH)
		return ig_push_error(L, "unknown",
				     "port %d: socket inode %lu listens on %s but no process "
				     "visible here holds it",
				     (int)port, o.inodes[0], o.addresses[0]);
	if (r == -E2BIG || r == -ETIMEDOUT)
		return ig_push_error(L,
				     r == -E2BIG   ? "limit"
				     : by_deadline ? "deadline"
						   : "timeout",
				     "port %d: listener not found within %.3g s (%s)", (int)port,
				     bound, o.why);
	if (r < 0)
		return ig_push_error(L, ig_code(r), "port %d: reading /proc: %s", (int)port,
				     strerror(-r));
	lua_createtable(L, 0, 5);
	ig_set_integer(L, "pid", o.pid);
	ig_set_string(L, "comm", o.comm);
	ig_set_string(L, "cmdline", o.cmdline);
	ig_set_string(L, "address", o.addresses[o.held]);
	ig_set_integer(L, "inode", (lua_Integer)o.inodes[o.held]);
	return 1;
}

/* ig_register_proc: see imexguard.h; adds port_owner to the table on top of the stack. */
void ig_register_proc(lua_State *L)
{
	static const luaL_Reg fns[] = {
	    {"port_owner", l_port_owner},
	    {NULL, NULL},
	};
	ig_setfuncs(L, fns, "host");
}
