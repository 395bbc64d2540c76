/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proc.c: who owns a TCP port or a unix socket, from the kernel's socket tables and /proc
 * (sock_diag(7), proc(5)).  socket_owner (below) does the same for a unix socket's path, from
 * /proc/net/unix; file_holders names the processes that have a file open (/proc/PID/fd).
 *
 * The Lua primitive port_owner (docs/policy-api.md, section "Processes"): the process listening
 * on a TCP port, found the way ss(8) does it on Linux, in two steps.
 *  1. The listening sockets on the port and their inodes.  First with sock_diag(7): a
 *     NETLINK_SOCK_DIAG dump request (SOCK_DIAG_BY_FAMILY, struct inet_diag_req_v2) for TCP
 *     sockets of AF_INET, then AF_INET6, with idiag_states = 1 << TCP_LISTEN, so the kernel
 *     walks only its listening hash (include/net/tcp_states.h: TCP_LISTEN is 10), and the port
 *     in id.idiag_sport; each answer (struct inet_diag_msg) gives the state, the local address
 *     and port and the inode, checked again here.  When the netlink socket cannot be opened or
 *     the request is refused (no inet_diag in the kernel, EPROTONOSUPPORT; EACCES or EPERM in a
 *     restricted container), the same is read from /proc/net/tcp and /proc/net/tcp6 instead:
 *     one line per socket of the network namespace (the kernel walks every established socket
 *     for that, which is slow on a big node), with the local address and port in hexadecimal,
 *     the state (0A) and the inode.  Messages name the source used ("sock_diag" or
 *     "/proc/net/tcp").
 *  2. The process holding one of those inodes: /proc/PID/fd/N of that process is a symbolic link
 *     whose target is "socket:[INODE]" (proc(5), "/proc/pid/fd/").  A hinted pid (the unit's
 *     main process) is looked at first: a daemon has a handful of descriptors; every process is
 *     read only when the hint does not hold it (a stray daemon).  /proc/PID/comm and
 *     /proc/PID/cmdline then name the process.
 * Every read is bounded: at most PROC_MAX_LINES sockets, PROC_MAX_PIDS processes and
 * PROC_MAX_FDS descriptors in all; the timeout (bounded by the run's budget) bounds each netlink
 * receive and is checked between processes.
 */
#include "imexguard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define PROC_MAX_LINES	  200000  /* sockets read (sock_diag answers or /proc/net/tcp{,6} lines) */
#define PROC_MAX_PIDS	  65536	  /* processes whose fds are read */
#define PROC_MAX_FDS	  1048576 /* descriptors read, over all processes */
#define PROC_MAX_INODES	  16	  /* listening sockets on one port (v4, v6, SO_REUSEPORT) */
#define PROC_DEFAULT_WAIT 5.0	  /* seconds: port_owner's default timeout */
#define TCP_LISTEN	  0x0A
#define DIAG_BUF	  32768 /* bytes: one netlink receive (a dump message is at most 32 KiB) */
#define SRC_DIAG	  "sock_diag"
#define SRC_PROC	  "/proc/net/tcp"

/* Test hooks (luaopen_imexguard_proc_testing below): find the listeners in /proc/net/tcp only,
 * and where the last call found them. */
static int g_procfs_only;
static const char *g_last_source = "";

struct owner {
	const char *only; /* NULL, or the local address (text) a listener must be bound to */
	unsigned long inodes[PROC_MAX_INODES];
	char addresses[PROC_MAX_INODES][64]; /* the local address of each listener */
	int n_inodes;
	int held; /* the index of the listener the process holds */
	long pid;
	char comm[64];
	char cmdline[4096];
	char why[160];	    /* what stopped the search (limit reached, timeout) */
	const char *source; /* where the listeners were found: SRC_DIAG or SRC_PROC */
	int port;	    /* port_owner: the TCP port searched; socket_owner: 0 */
	const char *path;   /* socket_owner: the unix socket's path searched */
	long hint;	    /* the pid whose descriptors are read first (0: none) */
	double bound;	    /* seconds: the search's timeout bounded by the run's budget */
	double end;	    /* monotonic seconds: when the search stops */
	int by_deadline;    /* the budget, not the timeout, is the tighter bound */
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

/* Read the table `path` of /proc/net line by line after its header line, calling fn(line, arg)
 * for each (the line as read, newline included; at most `size` bytes) and counting the lines in
 * *lines.  Returns 0, -ENOENT when the file does not exist (no IPv6), -E2BIG past PROC_MAX_LINES
 * lines, or another negative errno. */
static int each_line(const char *path, char *line, size_t size, long *lines,
		     void (*fn)(char *line, void *arg), void *arg)
{
	FILE *f = fopen(path, "re");

	if (!f)
		return -errno;
	if (fgets(line, (int)size, f)) { /* the header */
		while (fgets(line, (int)size, f)) {
			if (++*lines > PROC_MAX_LINES) {
				fclose(f);
				return -E2BIG;
			}
			fn(line, arg);
		}
	}
	fclose(f);
	return 0;
}

/* A port and the owner to add its listeners to (scan_net). */
struct net_scan {
	unsigned port;
	struct owner *o;
};

/* One line of /proc/net/tcp or tcp6: a socket listening on the port is added to the owner. */
static void net_line(char *line, void *arg)
{
	struct net_scan *n = arg;
	struct owner *o = n->o;
	char local[33];
	unsigned lport, state;
	unsigned long inode;

	if (sscanf(line,
		   " %*u: %32[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*x:%*x %*x:%*x %*x "
		   "%*u %*u %lu",
		   local, &lport, &state, &inode) != 4)
		return;
	if (lport != n->port || state != TCP_LISTEN || inode == 0 || o->n_inodes == PROC_MAX_INODES)
		return;
	format_addr(local, o->addresses[o->n_inodes], sizeof o->addresses[0]);
	if (serves(o, o->addresses[o->n_inodes]))
		o->inodes[o->n_inodes++] = inode;
}

/* Add the inodes of sockets listening on `port` in `path` (/proc/net/tcp or tcp6) to o.
 * Returns as each_line. */
static int scan_net(const char *path, unsigned port, struct owner *o, long *lines)
{
	char line[512];
	struct net_scan n = {port, o};

	return each_line(path, line, sizeof line, lines, net_line, &n);
}

/* The listeners on `port` in /proc/net/tcp and /proc/net/tcp6 (the fallback of diag_scan).
 * Returns 0, -E2BIG over PROC_MAX_LINES lines, or negative errno. */
static int proc_scan(unsigned port, struct owner *o)
{
	long lines = 0;
	int r = scan_net("/proc/net/tcp", port, o, &lines);

	if (r >= 0 || r == -ENOENT)
		r = scan_net("/proc/net/tcp6", port, o, &lines);
	return r == -ENOENT ? 0 : r;
}

/* A sock_diag(7) dump request. */
struct diag_req {
	struct nlmsghdr nlh;
	struct inet_diag_req_v2 r;
};

/* Ask the kernel (netlink socket fd) for the TCP sockets of `family` (AF_INET, AF_INET6) in
 * state LISTEN on `port`, as request number `seq`.  Returns 0 or negative errno of sendto. */
static int diag_send(int fd, int family, unsigned port, unsigned seq)
{
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	struct diag_req req;

	memset(&req, 0, sizeof req);
	req.nlh.nlmsg_len = sizeof req;
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.nlh.nlmsg_seq = seq;
	req.r.sdiag_family = (uint8_t)family;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = 1u << TCP_LISTEN;
	req.r.id.idiag_sport = htons((uint16_t)port);
	if (sendto(fd, &req, sizeof req, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0)
		return -errno;
	return 0;
}

/* Add one answer of the dump to o when it is a listener on `port` that serves o->only. */
static void diag_add(const struct inet_diag_msg *m, unsigned port, struct owner *o)
{
	char *addr = o->addresses[o->n_inodes];

	if (m->idiag_state != TCP_LISTEN || ntohs(m->id.idiag_sport) != port ||
	    m->idiag_inode == 0 || o->n_inodes == PROC_MAX_INODES)
		return;
	if (!inet_ntop(m->idiag_family, m->id.idiag_src, addr, sizeof o->addresses[0]))
		return;
	if (serves(o, addr))
		o->inodes[o->n_inodes++] = m->idiag_inode;
}

/* Wait at most until `end` (monotonic seconds) for one datagram from the kernel on fd.  Returns
 * its length, -ETIMEDOUT when `end` passed (SO_RCVTIMEO, socket(7)), -EMSGSIZE when it was
 * truncated, or negative errno. */
static ssize_t diag_receive(int fd, void *buf, size_t size, double end)
{
	double left = end - ig_now();
	struct timeval tv;
	struct sockaddr_nl from;
	struct iovec iov = {.iov_base = buf, .iov_len = size};
	struct msghdr msg = {
	    .msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &iov, .msg_iovlen = 1};
	ssize_t n;

	if (left <= 0)
		return -ETIMEDOUT;
	if (left < 0.001)
		left = 0.001; /* a zero SO_RCVTIMEO would wait for ever */
	if (left > 86400)
		left = 86400; /* timeout math.huge: a day is for ever for the kernel's answer */
	tv.tv_sec = (time_t)left;
	tv.tv_usec = (suseconds_t)((left - (double)tv.tv_sec) * 1e6);
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
		return -errno;
	do
		n = recvmsg(fd, &msg, 0);
	while (n < 0 && errno == EINTR && ig_now() < end);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -ETIMEDOUT
										 : -errno;
	if (msg.msg_flags & MSG_TRUNC)
		return -EMSGSIZE;
	return from.nl_pid == 0 ? n : -EPROTO; /* only the kernel answers */
}

/* The end of a dump: 0 for NLMSG_DONE (or the negative errno it carries when the dump failed),
 * the kernel's negative errno for NLMSG_ERROR (struct nlmsgerr, netlink(7); an acknowledgement,
 * error 0, was not asked for: -EPROTO). */
static int diag_status(const struct nlmsghdr *h)
{
	const int *err = NLMSG_DATA(h); /* NLMSG_DONE's int, or nlmsgerr.error */

	if (h->nlmsg_len < NLMSG_LENGTH(sizeof *err))
		return h->nlmsg_type == NLMSG_DONE ? 0 : -EPROTO;
	if (*err < 0)
		return *err;
	return h->nlmsg_type == NLMSG_DONE ? 0 : -EPROTO;
}

/* Read the answers to request `seq` into o until NLMSG_DONE, before `end`; *count counts the
 * messages (one per socket).  Returns 0, -E2BIG over PROC_MAX_LINES messages, -ETIMEDOUT, the
 * kernel's error for the request (NLMSG_ERROR: -EPROTONOSUPPORT, -EACCES, -ENOENT, ...) or negative
 * errno. */
static int diag_answers(int fd, unsigned seq, unsigned port, struct owner *o, long *count,
			double end)
{
	union {
		struct nlmsghdr h;
		char bytes[DIAG_BUF];
	} buf;

	for (;;) {
		ssize_t n = diag_receive(fd, &buf, sizeof buf, end);
		size_t len = n > 0 ? (size_t)n : 0;

		if (n < 0)
			return (int)n;
		for (struct nlmsghdr *h = &buf.h; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
			if (++*count > PROC_MAX_LINES)
				return -E2BIG;
			if (h->nlmsg_seq != seq)
				continue;
			if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR)
				return diag_status(h);
			if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
			    h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
				continue;
			diag_add(NLMSG_DATA(h), port, o);
		}
	}
}

/* The listeners on `port` from sock_diag(7): a dump for AF_INET, then one for AF_INET6, before
 * `end` (monotonic seconds).  Returns 0, -E2BIG over PROC_MAX_LINES sockets, -ETIMEDOUT (o->why
 * says so), or another negative errno when this kernel or container does not answer (no netlink
 * socket, the request refused): then o has no listener and the caller reads /proc/net/tcp. */
static int diag_scan(unsigned port, struct owner *o, double end)
{
	static const int families[] = {AF_INET, AF_INET6};
	long count = 0;
	int r = 0;
	int fd;

	if (g_procfs_only)
		return -ENOPROTOOPT;
	fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0)
		return -errno;
	for (unsigned i = 0; i < 2 && r == 0; i++) {
		r = diag_send(fd, families[i], port, i + 1);
		if (r == 0)
			r = diag_answers(fd, i + 1, port, o, &count, end);
	}
	close(fd);
	if (r == -ETIMEDOUT)
		snprintf(o->why, sizeof o->why, "no answer from " SRC_DIAG);
	if (r < 0)
		o->n_inodes = 0;
	return r;
}

/* The listeners on o->port that serve o->only, into o (o->source names where they were found):
 * from sock_diag(7), else from /proc/net/tcp{,6}.  Returns 0, -E2BIG (too many sockets),
 * -ETIMEDOUT (sock_diag did not answer before o->end), or negative errno of reading /proc. */
static int find_listeners(struct owner *o)
{
	int r = diag_scan((unsigned)o->port, o, o->end);

	o->source = SRC_DIAG;
	if (r == 0 || r == -E2BIG || r == -ETIMEDOUT)
		return r;
	o->source = SRC_PROC;
	return proc_scan((unsigned)o->port, o);
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

/* Call match(dfd, name, arg) for each open descriptor of process `pid` (the entries of
 * /proc/PID/fd, dfd that directory's descriptor) until it returns non-zero or *fds reaches
 * PROC_MAX_FDS; *fds counts the descriptors seen, across calls.  Returns match's non-zero value, or
 * 0 (none matched, or the directory is not readable: another user's process, or it exited). */
static int each_fd(long pid, long *fds, int (*match)(int dfd, const char *name, void *arg),
		   void *arg)
{
	char dir[64];
	struct dirent *de;
	DIR *d;
	int found = 0;

	snprintf(dir, sizeof dir, "/proc/%ld/fd", pid);
	d = opendir(dir);
	if (!d)
		return 0;
	while (!found && *fds < PROC_MAX_FDS && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		++*fds;
		found = match(dirfd(d), de->d_name, arg);
	}
	closedir(d);
	return found;
}

/* each_fd's match: whether descriptor `name` is a socket of o->inodes (1, o->held names which). */
static int fd_is_socket_of(int dfd, const char *name, void *arg)
{
	struct owner *o = arg;
	char target[64];
	unsigned long inode;
	ssize_t n = readlinkat(dfd, name, target, sizeof target - 1);

	if (n <= 0)
		return 0;
	target[n] = '\0';
	if (sscanf(target, "socket:[%lu]", &inode) != 1)
		return 0;
	for (int i = 0; i < o->n_inodes; i++)
		if (o->inodes[i] == inode) {
			o->held = i;
			return 1;
		}
	return 0;
}

/* Whether one of process `pid`'s descriptors is a socket of o->inodes: 1 yes (o->held names which),
 * 0 no (or not readable: another user's process, or it exited); *fds counts the descriptors read.
 */
static int pid_holds(long pid, struct owner *o, long *fds)
{
	return each_fd(pid, fds, fd_is_socket_of, o);
}

/* Name process `pid` in o: pid, comm and cmdline (empty when it exited meanwhile).  Returns 0. */
static int name_pid(struct owner *o, long pid)
{
	char path[64];

	o->pid = pid;
	snprintf(path, sizeof path, "/proc/%ld/comm", pid);
	read_small(path, o->comm, sizeof o->comm);
	snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
	read_small(path, o->cmdline, sizeof o->cmdline);
	return 0;
}

/* Find the process holding one of o->inodes, before o->end (monotonic seconds): o->hint first (a
 * pid > 0, else none), then every process in the order /proc lists them.  Returns 0 with o->pid,
 * comm and cmdline set, -ENODATA when o has no listener, -ESRCH when no visible process holds it,
 * -E2BIG when a limit was reached first, -ETIMEDOUT when `end` passed (o->why says which), or
 * negative errno. */
static int find_pid(struct owner *o)
{
	long pids = 0, fds = 0;
	struct dirent *de;
	DIR *d;
	int r = -ESRCH;

	if (o->n_inodes == 0)
		return -ENODATA;
	if (ig_now() >= o->end) {
		snprintf(o->why, sizeof o->why, "before reading any process");
		return -ETIMEDOUT;
	}
	if (o->hint > 0 && pid_holds(o->hint, o, &fds))
		return name_pid(o, o->hint);
	d = opendir("/proc");
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		long pid;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = strtol(de->d_name, NULL, 10);
		if (pid == o->hint)
			continue; /* read above */
		if (ig_now() >= o->end) {
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
		if (pid_holds(pid, o, &fds)) {
			r = name_pid(o, pid);
			break;
		}
	}
	closedir(d);
	return r;
}

/* Start the search of port_owner or socket_owner in o (emptied first): their optional arguments
 * timeout (index timeout_arg: seconds >= 0, default PROC_DEFAULT_WAIT) and pid (index pid_arg:
 * a process ID >= 0, 0 none) read into o, and the timeout bounded by the run's budget
 * (ig_bound) from now.  Raises on misuse. */
static void start_search(lua_State *L, int timeout_arg, int pid_arg, struct owner *o)
{
	double timeout = luaL_optnumber(L, timeout_arg, PROC_DEFAULT_WAIT);
	lua_Integer hint = luaL_optinteger(L, pid_arg, 0);

	luaL_argcheck(L, timeout >= 0, timeout_arg, "timeout must be a number of seconds >= 0");
	luaL_argcheck(L, hint >= 0 && hint <= INT32_MAX, pid_arg, "pid must be a process ID >= 0");
	memset(o, 0, sizeof *o);
	o->hint = (long)hint;
	o->bound = ig_bound(timeout, &o->by_deadline);
	o->end = ig_now() + o->bound;
}

/* Push the result of port_owner or socket_owner: {pid, comm, cmdline, address (port_owner only),
 * inode} of the listener o->held.  Returns 1 (one value). */
static int push_owner(lua_State *L, const struct owner *o)
{
	lua_createtable(L, 0, 5);
	ig_set_integer(L, "pid", o->pid);
	ig_set_string(L, "comm", o->comm);
	ig_set_string(L, "cmdline", o->cmdline);
	if (o->port)
		ig_set_string(L, "address", o->addresses[o->held]);
	ig_set_integer(L, "inode", (lua_Integer)o->inodes[o->held]);
	return 1;
}

/* Push the failure r (a negative errno) of the search o of port_owner (o->port) or socket_owner
 * (o->path) as nil, message, code; the message names the port or the path: "none" (-ENODATA: no
 * listener), "unknown" (-ESRCH: no visible process holds it), "limit" (-E2BIG),
 * "timeout"/"deadline" (-ETIMEDOUT), else the errno code of reading /proc (or, for a port,
 * where the listeners were read).  Returns 3. */
static int push_search_error(lua_State *L, int r, const struct owner *o)
{
	const char *what = o->port ? lua_pushfstring(L, "port %d", o->port)
				   : lua_pushfstring(L, "unix socket %s", o->path);

	if (r == -ENODATA && o->port)
		return ig_push_error(L, "none", "%s: no listener on TCP port %d%s%s (%s)", what,
				     o->port, o->only ? " for " : "", o->only ? o->only : "",
				     o->source);
	if (r == -ENODATA)
		return ig_push_error(L, "none", "%s: no listener (/proc/net/unix)", what);
	if (r == -ESRCH)
		return ig_push_error(
		    L, "unknown",
		    "%s: socket inode %lu listens%s but no process visible here holds it", what,
		    o->inodes[0],
		    o->port ? lua_pushfstring(L, " on %s (%s)", o->addresses[0], o->source) : "");
	if (r == -E2BIG && o->why[0] == '\0' && o->port)
		return ig_push_error(L, "limit", "%s: more than %d sockets in %s", what,
				     PROC_MAX_LINES, o->source);
	if (r == -E2BIG || r == -ETIMEDOUT)
		return ig_push_error(L,
				     r == -E2BIG      ? "limit"
				     : o->by_deadline ? "deadline"
						      : "timeout",
				     "%s: listener not found within %.3g s (%s)", what, o->bound,
				     o->why[0] ? o->why : "too many sockets");
	return ig_push_error(L, ig_code(r), "%s: reading %s: %s", what,
			     o->port && o->n_inodes == 0 ? o->source : "/proc", strerror(-r));
}

/*
 * host.port_owner(port [, timeout [, address [, pid]]]) -> {pid, comm, cmdline, address, inode}
 * | nil, msg, code
 *   port: TCP port (integer 1..65535); timeout: seconds (default 5), bounded by the run's budget;
 *   address: an IPv4 address in text: only listeners that take connections to it count (bound to
 *   it, to it mapped into IPv6, or to a wildcard 0.0.0.0 / ::), so on a host with several daemons
 *   on one port (the simulator: one per loopback address) the one answering `address` is found;
 *   pid: integer >= 0, a hint (the unit's main PID; 0: none): its descriptors are read first, and
 *   every process only when it does not hold the socket.
 *   Finds a socket in state LISTEN on that port in this network namespace (a v6 socket bound to
 *   :: also takes IPv4) with sock_diag(7), or from /proc/net/tcp and /proc/net/tcp6 where the
 *   kernel or the container refuses NETLINK_SOCK_DIAG, and the process holding it through
 *   /proc/PID/fd (proc(5)).  Result: pid (number), comm (string, the kernel's short name),
 *   cmdline (string, arguments joined by spaces, at most 4095 bytes), address (the local address
 *   listened on, e.g. "127.0.0.1" or "::"), inode (number, the socket's).  With several
 *   processes holding it (a forked daemon), the hinted pid when it is one of them, else the
 *   first one /proc lists.
 *   Errors (the message names the port and where the listeners were read: "sock_diag" or
 *   "/proc/net/tcp"): code "none" (nothing listens on the port), "unknown" (a listener exists
 *   but no process of ours can see it: another PID namespace, or another user's process when
 *   not root; the message gives the inode), "limit" (more than 65536 processes or 1048576
 *   descriptors, or 200000 sockets), "timeout"/"deadline" (the bound passed), or the errno
 *   code of reading /proc ("EACCES", ...).
 */
int ig_host_port_owner(lua_State *L)
{
	lua_Integer port = luaL_checkinteger(L, 1);
	struct owner o;
	int r;

	luaL_argcheck(L, port >= 1 && port <= 65535, 1, "port must be a TCP port 1..65535");
	start_search(L, 2, 4, &o);
	o.port = (int)port;
	o.only = luaL_optstring(L, 3, NULL);
	r = find_listeners(&o);
	g_last_source = o.source;
	if (r == 0)
		r = find_pid(&o);
	return r < 0 ? push_search_error(L, r, &o) : push_owner(L, &o);
}

/* One line of /proc/net/unix: a listening socket bound to o->path is added to the owner o. */
static void unix_line(char *line, void *arg)
{
	struct owner *o = arg;
	unsigned long flags, inode;
	int off = 0;

	line[strcspn(line, "\n")] = '\0';
	if (sscanf(line, "%*s %*s %*s %lx %*s %*s %lu %n", &flags, &inode, &off) != 2 || off == 0 ||
	    !(flags & 0x10000) || strcmp(line + off, o->path) != 0)
		return;
	if (o->n_inodes < PROC_MAX_INODES) {
		snprintf(o->addresses[o->n_inodes], sizeof o->addresses[0], "unix");
		o->inodes[o->n_inodes++] = inode;
	}
}

/* Add to o the inodes of the unix sockets listening on o->path in /proc/net/unix (proc(5): lines
 * "Num RefCount Protocol Flags Type St Inode Path"; a listening socket has __SO_ACCEPTCON,
 * 0x00010000, in Flags).  Returns 0, -E2BIG over PROC_MAX_LINES lines, or negative errno. */
static int scan_unix(struct owner *o)
{
	char line[4096 + 128];
	long lines = 0;

	return each_line("/proc/net/unix", line, sizeof line, &lines, unix_line, o);
}

/*
 * host.socket_owner(path [, timeout [, pid]]) -> {pid, comm, cmdline, inode} | nil, msg, code
 *   path: the unix socket's path as the listener bound it (IMEX_CMD_UNIX_DOMAIN_PATH of
 *   config.cfg: NVIDIA's DRA driver's host-managed setup); timeout: seconds (default 5), bounded by
 *   the run's budget; pid: integer >= 0, a hint read first (the unit's main PID; 0: none).
 *   Finds the listening sockets bound to that path in /proc/net/unix of this network namespace
 *   (proc(5): the Flags field has __SO_ACCEPTCON), then the process holding one through
 *   /proc/PID/fd, as port_owner does.  Result: pid, comm, cmdline, inode (as port_owner's).
 *   Errors (the message names the path): "none" (no listener on it), "unknown" (a listener but no
 *   visible process holds it), "limit", "timeout"/"deadline", or the errno code of reading /proc.
 */
int ig_host_socket_owner(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	struct owner o;
	int r;

	luaL_argcheck(L, *path != '\0', 1, "path must not be empty");
	start_search(L, 2, 3, &o);
	o.path = path;
	r = scan_unix(&o);
	if (r == 0)
		r = find_pid(&o);
	return r < 0 ? push_search_error(L, r, &o) : push_owner(L, &o);
}

/* ---- file_holders ------------------------------------------------------------------------ */

#define HOLDERS_MAX 16 /* processes named by one file_holders call */

/* The file a holder has open: its device and inode; for a character device its device number
 * (any node of that device counts: a container's own /dev node of the same device). */
struct held_file {
	int chr;
	dev_t rdev, dev;
	ino_t ino;
	const char
	    *base; /* the last component of the file's real path: a descriptor is stat'ed only
		      when its link text ends with it (or, for a device, is under /dev/) */
};

/* Whether descriptor `name` of the directory /proc/PID/fd (dfd) is the file: its link text is
 * looked at first (sockets, pipes and anonymous inodes are skipped; only a path with the same last
 * component, or for a character device any /dev/ path), then fstatat follows the link
 * (proc(5)) and compares the device and inode.  Looking at the text first keeps a descriptor on a
 * hung network file system from being stat'ed at all. */
static int fd_is(int dfd, const char *name, void *arg)
{
	const struct held_file *f = arg;
	char target[4096];
	struct stat st;
	ssize_t n = readlinkat(dfd, name, target, sizeof target - 1);
	const char *slash;

	if (n <= 0 || target[0] != '/')
		return 0;
	target[n] = '\0';
	slash = strrchr(target, '/');
	if (strcmp(slash + 1, f->base) != 0 && !(f->chr && strncmp(target, "/dev/", 5) == 0))
		return 0;
	if (fstatat(dfd, name, &st, 0) < 0)
		return 0;
	if (f->chr)
		return S_ISCHR(st.st_mode) && st.st_rdev == f->rdev;
	return st.st_dev == f->dev && st.st_ino == f->ino;
}

/* Whether process `pid` has the file open; *fds counts the descriptors read. */
static int pid_has_open(long pid, const struct held_file *f, long *fds)
{
	return each_fd(pid, fds, fd_is, (void *)f);
}

/* Push the holders of f, before `end`, as a list of {pid, comm, cmdline} (at most HOLDERS_MAX, in
 * /proc's order).  Returns 1 (pushed), or 0 with *why set: -ETIMEDOUT (end passed), -E2BIG (a limit
 * reached) or negative errno (nothing pushed). */
static int push_holders(lua_State *L, const struct held_file *f, double end, int *why, long *pids)
{
	long fds = 0;
	lua_Integer n = 0;
	struct dirent *de;
	DIR *d = opendir("/proc");

	*pids = 0;
	if (!d) {
		*why = -errno;
		return 0;
	}
	lua_newtable(L);
	while (n < HOLDERS_MAX && (de = readdir(d))) {
		struct owner o;
		long pid;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		if (ig_now() >= end || ++*pids > PROC_MAX_PIDS || fds >= PROC_MAX_FDS) {
			*why = ig_now() >= end ? -ETIMEDOUT : -E2BIG;
			closedir(d);
			lua_pop(L, 1);
			return 0;
		}
		pid = strtol(de->d_name, NULL, 10);
		if (!pid_has_open(pid, f, &fds))
			continue;
		memset(&o, 0, sizeof o);
		name_pid(&o, pid);
		lua_createtable(L, 0, 3);
		ig_set_integer(L, "pid", pid);
		ig_set_string(L, "comm", o.comm);
		ig_set_string(L, "cmdline", o.cmdline);
		lua_seti(L, -2, ++n);
	}
	closedir(d);
	return 1;
}

/*
 * host.file_holders(path [, timeout]) -> list of {pid, comm, cmdline} | nil, msg, code
 *   path: a file (symlinks followed); timeout: seconds (default 5), bounded by the run's budget.
 *   The processes of this PID namespace with a descriptor open on that file (proc(5),
 *   /proc/PID/fd): the same device and inode, or for a character device the same device number
 *   (a container's own node of the device counts).  Used for who holds a node's IMEX session
 *   (C50): a daemon holding it keeps the fabric-imex-mgmt capability device open [guess], the
 *   simulator's daemon its session file.  At most 16, in the order /proc lists them; {} when no
 *   visible process has it open (another PID namespace, or another user's process when not
 *   root).  comm and cmdline as port_owner's.
 *   Errors (the message names the path): stat(2)'s errno code ("ENOENT"...), "limit" (65536
 *   processes or 1048576 descriptors), "timeout"/"deadline", or the errno code of reading /proc.
 */
int ig_host_file_holders(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	double timeout = luaL_optnumber(L, 2, PROC_DEFAULT_WAIT);
	struct held_file f;
	struct stat st;
	int by_deadline = 0, why = 0;
	long pids = 0;
	double bound;
	char real[PATH_MAX];
	const char *slash;

	luaL_argcheck(L, *path != '\0', 1, "path must not be empty");
	luaL_argcheck(L, timeout >= 0, 2, "timeout must be a number of seconds >= 0");
	if (stat(path, &st) < 0) {
		int e = errno;
		return ig_push_error(L, ig_code(-e), "file holders of %s: %s", path, strerror(e));
	}
	memset(&f, 0, sizeof f);
	f.chr = S_ISCHR(st.st_mode);
	f.rdev = st.st_rdev;
	f.dev = st.st_dev;
	f.ino = st.st_ino;
	if (!realpath(path, real))
		snprintf(real, sizeof real, "%s", path);
	slash = strrchr(real, '/');
	f.base = slash ? slash + 1 : real;
	bound = ig_bound(timeout, &by_deadline);
	if (push_holders(L, &f, ig_now() + bound, &why, &pids))
		return 1;
	if (why == -ETIMEDOUT)
		return ig_push_error(
		    L, by_deadline ? "deadline" : "timeout",
		    "file holders of %s: not found within %.3g s (after %ld processes)", path,
		    bound, pids);
	if (why == -E2BIG)
		return ig_push_error(L, "limit",
				     "file holders of %s: limit of %d processes or %d descriptors",
				     path, PROC_MAX_PIDS, PROC_MAX_FDS);
	return ig_push_error(L, ig_code(why), "file holders of %s: reading /proc: %s", path,
			     strerror(-why));
}

/* Test hooks of the busted specs (tests/systemd/proc_spec.lua), loaded from the Lua C module with
 * package.loadlib(".../imexguard/host.so", "luaopen_imexguard_proc_testing"): the binary never
 * registers them and a policy has no package.loadlib (src/sandbox.c), so only a test can make
 * port_owner skip sock_diag.  A C function rather than an environment variable: nothing in the
 * environment of a Slurm prolog can change which path is taken.
 *   procfs_only(flag): flag (boolean) true: find the listeners in /proc/net/tcp{,6} only, as on
 *     a kernel without sock_diag; false: sock_diag first again.
 *   last_source() -> string: where the last port_owner call found the listeners: "sock_diag",
 *     "/proc/net/tcp", or "" before the first call. */
int luaopen_imexguard_proc_testing(lua_State *L);

static int l_procfs_only(lua_State *L)
{
	g_procfs_only = lua_toboolean(L, 1);
	return 0;
}

static int l_last_source(lua_State *L)
{
	lua_pushstring(L, g_last_source);
	return 1;
}

int luaopen_imexguard_proc_testing(lua_State *L)
{
	static const luaL_Reg fns[] = {
	    {"procfs_only", l_procfs_only},
	    {"last_source", l_last_source},
	    {NULL, NULL},
	};
	luaL_newlib(L, fns);
	return 1;
}
