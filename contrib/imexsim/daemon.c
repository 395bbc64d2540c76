/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imexsim daemon: a simulated nvidia-imex.  One single-threaded ppoll() loop serves
 *  - the peer mesh on SERVER_PORT: every node listens and connects out to every other node; a
 *    HELLO handshake carries the node map (count and hash), the instance id and the version;
 *  - the command port (IMEX_CMD_PORT): "STATUS" and "QUERY" requests of the ctl.
 * Behaviour mirrored from NVIDIA's IMEX guide and real output (see docs/design.md,
 * "IMEX facts the code relies on", and contrib/imexsim/README.md).
 */
#include "imexsim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HANDSHAKE_MS   2000 /* give up on a HELLO after this long (connect: its own timeout) */
#define CMD_CLIENT_MS  5000 /* close an idle command-port client after this long */
#define MAX_LINE       512
#define LOG_ATTEMPTS_N 5 /* log the first N connection attempts to a peer, then every 100th */

enum peer_phase { P_IDLE, P_CONNECTING, P_HELLO, P_UP };

/* Our outgoing connection to one peer; its status is what the ctl shows for this pair. */
struct peer {
	enum sim_conn status;
	enum peer_phase phase;
	int fd;
	int64_t next_ms; /* P_IDLE: next attempt; otherwise: give-up time of the handshake */
	int backoff_ms;	 /* delay before the attempt after the next failure (milliseconds) */
	unsigned long attempts;
	int have_instance;
	int dropped; /* IMEXSIM_DROP_PEERS: never connect, refuse its handshakes */
	int blocked; /* this instance saw a node map mismatch with the peer: the pair stays
			NODE_MAP_MISMATCH until this daemon restarts (IMEXSIM_MISMATCH_CLEARS=both)
		      */
	int agreed;  /* this instance has had the peer CONNECTED: a mismatch after that is the
			peer's list changing under this running daemon, which blocks it */
	int64_t blocked_at; /* when `blocked` was set (Unix time, milliseconds) */
	uint64_t instance;
	struct sim_buf in, out;
};

enum client_kind { C_PEER_IN, C_CMD };

/* An accepted connection: a peer's outgoing connection, or a ctl on the command port. */
struct client {
	int fd;
	enum client_kind kind;
	int64_t deadline_ms; /* closed when reached (INT64_MAX: never) */
	int closing;	     /* close once `out` is flushed */
	int hang;	     /* C_CMD, IMEXSIM_HANG_CMD: read requests, never answer */
	int peer_id; /* C_PEER_IN: the sender's node ID once its HELLO was accepted, or -1 */
	struct sim_buf in, out;
	struct client *next;
};

static struct {
	struct sim_config cfg;
	struct sim_nodes nodes;
	int self;
	const char *addr; /* our own node file entry (BIND_INTERFACE_IP or the matching entry) */
	const char *ip;	  /* ... its IPv4 address (the entry, or what its host name resolves to) */
	uint64_t instance, map_hash;
	const char *state;
	int log_fd, log_stderr;
	int peer_lfd, cmd_lfd, cmd_ufd; /* cmd_ufd: IMEX_CMD_UNIX_DOMAIN_PATH's socket */
	struct peer *peers;
	struct client *clients;
	char hostname[256];
	int64_t wait_ms;  /* IMEXSIM_START_DELAY_MS: WAITING_FOR_PEERS from then (0: not waiting) */
	int64_t ready_ms; /* IMEXSIM_START_DELAY_MS: READY from then (0: not waiting) */
	int64_t crash_ms; /* IMEXSIM_CRASH_AFTER_MS: SIGKILL ourselves then (0: never) */
	int64_t exit_ms;  /* IMEXSIM_EXIT_AFTER_MS: shut down then (0: never) */
	int exiting;	  /* ... and it is time: exit with IMEXSIM_EXIT_STATUS */
	int usr1_done;	  /* SIGUSR1 restarted the outgoing connections at least once */
	int64_t usr1_ms;  /* ... last at this time */
	int64_t started;  /* start time (Unix time, milliseconds): the state file's started= */
	int session_fd;	  /* IMEXSIM_SESSION_FILE, open and flock'ed while we hold the session */
	int64_t syn_open_ms; /* IMEXSIM_DROP_SYN_MS: the peer port drops SYNs until then (0: not) */
	int plug_fd[2];	     /* ... the two connections that fill its accept queue meanwhile */
} d;

static volatile sig_atomic_t got_term, got_hup, got_usr1;

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		got_hup = 1;
	else if (sig == SIGUSR1)
		got_usr1 = 1;
	else
		got_term = 1;
}

/* Log one line "[YYYY-MM-DD HH:MM:SS.mmm] [LEVEL] [tid PID] message" (the real daemon's level and
 * tid tags) to LOG_FILE_NAME and, until the daemon detaches, to stderr (only ERROR lines when a
 * log file is set).  */
static void logmsg(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logmsg(const char *level, const char *fmt, ...)
{
	char msg[1024], line[1200], ts[32];
	struct timespec now;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &now);
	localtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	int n = snprintf(line, sizeof line, "[%s.%03ld] [%s] [tid %d] %s\n", ts,
			 now.tv_nsec / 1000000, level, (int)getpid(), msg);
	if (n < 0)
		return;
	size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
	if (d.log_fd >= 0 && write(d.log_fd, line, len) < 0) {
		/* nothing sensible to do: the log is best effort, like the real daemon's */
	}
	if (d.log_stderr && (d.log_fd < 0 || !strcmp(level, "ERROR")) &&
	    write(STDERR_FILENO, line, len) < 0) {
	}
}

/* Write `text` to `path` through a temporary file and rename(2), so readers see old or new. */
static void write_file_atomic(const char *path, const char *text)
{
	char tmp[SIM_PATH_LEN + 16];
	if (!*path || snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
		return;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		logmsg("WARN", "Cannot write %s: %s", tmp, strerror(errno));
		return;
	}
	size_t len = strlen(text);
	int ok = write(fd, text, len) == (ssize_t)len;
	ok = close(fd) == 0 && ok;
	if (!ok || rename(tmp, path) < 0) {
		logmsg("WARN", "Cannot write %s: %s", path, strerror(errno));
		unlink(tmp);
	}
}

/* Unix time in milliseconds (CLOCK_REALTIME): comparable across daemons and with log times. */
static int64_t unix_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* IMEXSIM_STATE_FILE: what a test wants to know without the command port.  `started` (Unix ms)
 * and `blocks` (ID@UNIX_MS of every peer this instance remembers a node-map mismatch with, since
 * when) tell which end of a remembered mismatch started after it began (case C52). */
static void write_state_file(void)
{
	if (!*d.cfg.state_file)
		return;
	char *text = malloc(1024 + (size_t)d.nodes.count * 32);
	if (!text)
		return;
	int n = sprintf(text,
			"pid=%d\ninstance=%016" PRIx64
			"\nstate=%s\nnode_id=%d\naddress=%s\nnodes=%d\nmap_hash=%016" PRIx64
			"\nversion=%s\nstarted=%" PRId64 "\nblocks=",
			(int)getpid(), d.instance, d.state, d.self, d.addr, d.nodes.count,
			d.map_hash, d.cfg.version, d.started);
	for (int i = 0, first = 1; d.peers && i < d.nodes.count; i++) {
		if (!d.peers[i].blocked)
			continue;
		n += sprintf(text + n, "%s%d@%" PRId64, first ? "" : ",", i, d.peers[i].blocked_at);
		first = 0;
	}
	strcpy(text + n, "\n");
	write_file_atomic(d.cfg.state_file, text);
	free(text);
}

/* Change the local state (what -q prints), log it and update the state file. */
static void set_state(const char *state, const char *why)
{
	d.state = state;
	write_state_file();
	logmsg("INFO", "%s (%s)", state, why);
}

/* The handshake line; both ends send it.  `to` is the receiver's index in our list (-1: not
 * known yet); the last field says whether this instance blocks it (struct peer, `blocked`), so
 * that both ends show the stale mismatch. */
static int queue_hello(struct sim_buf *b, int to)
{
	return sim_buf_printf(b, "HELLO %d %d %016" PRIx64 " %d %016" PRIx64 " %s %s %d\n",
			      SIM_PROTO_VERSION, d.self, d.instance, d.nodes.count, d.map_hash,
			      d.cfg.version, d.addr, to >= 0 && d.peers[to].blocked);
}

/* Parsed HELLO of a peer. */
struct hello {
	int proto, id, count;
	uint64_t instance, hash;
	char version[64];
	char addr[SIM_ADDR_LEN]; /* the sender's own address */
	int blocks_us;		 /* the sender holds a node map mismatch with us */
};

/* Parse a HELLO line; returns 0 or -EPROTO. */
static int parse_hello(const char *line, struct hello *h)
{
	if (sscanf(line, "HELLO %d %d %" SCNx64 " %d %" SCNx64 " %63s %63s %d", &h->proto, &h->id,
		   &h->instance, &h->count, &h->hash, h->version, h->addr, &h->blocks_us) != 8 ||
	    h->proto != SIM_PROTO_VERSION)
		return -EPROTO;
	return 0;
}

/* Verdict of a HELLO from the peer at index `from` of our list (-1: not in it):
 * NODE_MAP_MISMATCH (other list, or the sender's own ID is not the one our list gives it, or either
 * end still holds an earlier mismatch of the pair), VERSION_MISMATCH or CONNECTED.  `expect_id`
 * is -1 when unknown (inbound).  AWS's PCS guide says that once a node's list changed under a
 * running daemon, IMEX blocks the mismatched node until both are restarted with one list: so a
 * mismatch with a peer this instance had CONNECTED (`agreed`) is remembered (peer `blocked`) and
 * a peer's later restart with a matching list does not clear it; only this daemon's own restart
 * (a new instance, nothing remembered) does.  A new daemon meeting a peer that still runs another
 * list (a job's prologs restarting one after the other) is a plain mismatch, gone once that peer
 * restarts: how the real daemon draws this line is a guess (imex-facts: "Node-map mismatches that
 * stay").  IMEXSIM_MISMATCH_CLEARS=one never remembers one. */
static enum sim_conn judge_hello(const struct hello *h, int expect_id, int from)
{
	if (h->count != d.nodes.count || h->hash != d.map_hash ||
	    (expect_id >= 0 && h->id != expect_id)) {
		if (from >= 0 && !d.cfg.mismatch_clears_one && d.peers[from].agreed &&
		    !d.peers[from].blocked) {
			d.peers[from].blocked = 1;
			d.peers[from].blocked_at = unix_ms();
			write_state_file();
			logmsg(
			    "ERROR",
			    "Node map mismatch with node %d - %s: blocked until both ends restart "
			    "with one node list",
			    from, d.nodes.addr[from]);
		}
		return SIM_NODE_MAP_MISMATCH;
	}
	if (h->blocks_us || (from >= 0 && d.peers[from].blocked))
		return SIM_NODE_MAP_MISMATCH; /* an earlier mismatch of the pair stays */
	if (strcmp(h->version, d.cfg.version) != 0)
		return SIM_VERSION_MISMATCH;
	if (from >= 0)
		d.peers[from].agreed = 1;
	return SIM_CONNECTED;
}

/* Remember a peer's instance id; a new one means the peer restarted (its imports are gone). */
static void note_instance(int id, uint64_t instance)
{
	struct peer *p = &d.peers[id];
	if (p->have_instance && p->instance != instance)
		logmsg("INFO",
		       "Node %d (%s) restarted: new instance %016" PRIx64 " (was %016" PRIx64 ")",
		       id, d.nodes.addr[id], instance, p->instance);
	p->have_instance = 1;
	p->instance = instance;
}

/* Should attempt number `n` be logged?  The first LOG_ATTEMPTS_N, then every hundredth. */
static int log_attempt(unsigned long n)
{
	return n <= LOG_ATTEMPTS_N || n % 100 == 0;
}

/* Close our connection to peer `id` and schedule the next attempt after the current back-off,
 * which then grows by IMEXSIM_RECONNECT_FACTOR up to IMEXSIM_RECONNECT_MAX_MS.  A connection that
 * was established (P_UP) starts over: back-off IMEXSIM_RECONNECT_MS and attempt #1.  Peers of the
 * real daemon reconnect on their own with a back-off (docs/design.md, "IMEX facts"); its growth is
 * a guess. */
static void peer_close(int id)
{
	struct peer *p = &d.peers[id];
	if (p->phase == P_UP) {
		p->backoff_ms = d.cfg.reconnect_ms;
		p->attempts = 0;
	}
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	p->in.len = p->out.len = 0;
	p->phase = P_IDLE;
	int delay = p->backoff_ms;
	p->next_ms = sim_now_ms() + delay;
	int cap = d.cfg.reconnect_max_ms > d.cfg.reconnect_ms ? d.cfg.reconnect_max_ms
							      : d.cfg.reconnect_ms;
	double next = delay * d.cfg.reconnect_factor;
	p->backoff_ms = next >= cap ? cap : (int)next;
	if (log_attempt(p->attempts))
		logmsg("INFO", "Next connection attempt for target node %d - %s:%d in %d ms", id,
		       d.nodes.addr[id], d.cfg.server_port, delay);
}

/* The connection to peer `id` failed or was lost: CONNECTED becomes RECOVERING (the real
 * daemon's status while IMEX_NODE_DISCONNECTED_GRACE_TIME=-1 delays clean-up); other statuses stay.
 */
static void peer_fail(int id, const char *why)
{
	struct peer *p = &d.peers[id];
	if (p->status == SIM_CONNECTED) {
		p->status = SIM_RECOVERING;
		logmsg("WARN", "Connection to node %d - %s:%d lost (%s)", id, d.nodes.addr[id],
		       d.cfg.server_port, why);
	}
	peer_close(id);
}

/* A connect to peer `id` got no answer within IMEXSIM_CONNECT_TIMEOUT_MS (its SYNs were dropped):
 * logged like the attempts (the first five, then every hundredth), then an ordinary failure. */
static void peer_timeout(int id)
{
	if (log_attempt(d.peers[id].attempts))
		logmsg("INFO", "Connection attempt #%lu to node %d - %s:%d timed out after %d ms",
		       d.peers[id].attempts, id, d.nodes.addr[id], d.cfg.server_port,
		       d.cfg.connect_timeout_ms);
	peer_fail(id, "connect timeout");
}

/* Peer `id` said goodbye (clean shutdown, SIGTERM): its connection is lost at once.  It shows
 * RECOVERING (IMEXSIM_GOODBYE_STATUS=DISCONNECTED: DISCONNECTED) until it is back; which one the
 * real daemon shows is a guess (README.md). */
static void peer_goodbye(int id)
{
	struct peer *p = &d.peers[id];
	if (p->status == SIM_CONNECTED) {
		p->status = d.cfg.goodbye_disconnected ? SIM_DISCONNECTED : SIM_RECOVERING;
		logmsg("INFO", "Node %d - %s shut down cleanly: connection %s", id,
		       d.nodes.addr[id], sim_conn_name(p->status));
	}
	if (p->fd >= 0)
		peer_close(id);
}

/* Resolve peer `id`'s entry again (a host name: IMEXSIM_HOSTS_FILE, else the resolver, which
 * reads /etc/hosts at every lookup).  Every connection attempt does, so a broken channel follows a
 * changed mapping on its next retry, while an established one keeps its address until it breaks
 * or SIGUSR1 restarts it (imex-facts: host names, 570.158.01+; NVIDIA's DRA driver relies on it).
 * Returns 0, or -ENOENT when the name does not resolve (the attempt fails). */
static int peer_resolve(int id)
{
	char ip[SIM_ADDR_LEN];
	int rc = sim_resolve(d.nodes.addr[id], d.cfg.hosts_file, ip, sizeof ip);
	if (strcmp(ip, d.nodes.ip[id]) != 0) {
		logmsg("INFO", "Node %d - %s resolves to %s (was %s)", id, d.nodes.addr[id],
		       *ip ? ip : "nothing", *d.nodes.ip[id] ? d.nodes.ip[id] : "nothing");
		strcpy(d.nodes.ip[id], ip);
	}
	return rc;
}

static void peer_connect(int id)
{
	struct peer *p = &d.peers[id];
	p->attempts++;
	if (log_attempt(p->attempts))
		logmsg("INFO", "Attempting connection for target node %d - %s:%d, attempt #%lu", id,
		       d.nodes.addr[id], d.cfg.server_port, p->attempts);
	if (peer_resolve(id) < 0) {
		peer_fail(id, "name does not resolve");
		return;
	}
	int fd = sim_connect_start(d.nodes.ip[id], d.cfg.server_port);
	if (fd < 0) {
		peer_fail(id, strerror(-fd));
		return;
	}
	p->fd = fd;
	p->phase = P_CONNECTING;
	/* A connect whose SYNs go unanswered (IMEXSIM_DROP_SYN_MS on the peer, dropped packets)
	 * waits for the kernel's SYN retransmits until this timeout. */
	p->next_ms = sim_now_ms() + d.cfg.connect_timeout_ms;
	p->in.len = p->out.len = 0;
	queue_hello(&p->out, id);
}

/* POLLIN/POLLOUT/POLLHUP on our connection to peer `id`. */
static void peer_event(int id, short revents)
{
	struct peer *p = &d.peers[id];
	if (p->phase == P_CONNECTING) {
		if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
			return;
		int r = sim_connect_result(p->fd);
		if (r < 0) {
			peer_fail(id, strerror(-r));
			return;
		}
		p->phase = P_HELLO;
		p->next_ms = sim_now_ms() + HANDSHAKE_MS;
	}
	if (p->out.len > 0) {
		int r = sim_buf_flush(&p->out, p->fd);
		if (r < 0) {
			peer_fail(id, strerror(-r));
			return;
		}
	}
	if (!(revents & (POLLIN | POLLHUP | POLLERR)))
		return;
	int eof = sim_buf_fill_all(&p->in, p->fd);
	char line[MAX_LINE];
	while (p->phase >= P_HELLO && sim_buf_line(&p->in, line, sizeof line) == 1) {
		if (p->phase == P_UP) {
			if (!strncmp(line, "BYE", 3)) {
				peer_goodbye(id);
				return;
			}
			continue; /* nothing else is expected after the handshake */
		}
		struct hello h;
		if (parse_hello(line, &h) < 0) {
			peer_fail(id, "bad handshake");
			return;
		}
		enum sim_conn v = judge_hello(&h, id, id);
		if (v != SIM_CONNECTED) {
			if (p->status != v)
				logmsg("ERROR", "%s with node %d - %s: communication disabled",
				       v == SIM_NODE_MAP_MISMATCH ? "Node map mismatch"
								  : "Version mismatch",
				       id, d.nodes.addr[id]);
			p->status = v;
			peer_close(id);
			return;
		}
		note_instance(id, h.instance);
		p->phase = P_UP;
		p->status = SIM_CONNECTED;
		logmsg("INFO", "Connection established to node %d - %s:%d", id, d.nodes.addr[id],
		       d.cfg.server_port);
	}
	if (eof)
		peer_fail(id, "closed by peer");
}

static void client_free(struct client **link)
{
	struct client *c = *link;
	*link = c->next;
	close(c->fd);
	free(c);
}

/* Is the connection `fd` from another address than its own local one (the ctl of another node,
 * which binds its source to its own node's address)? */
static int from_remote(int fd)
{
	struct sockaddr_storage a, b;
	socklen_t la = sizeof a, lb = sizeof b;
	if (getsockname(fd, (struct sockaddr *)&a, &la) == 0 && a.ss_family == AF_UNIX)
		return 0; /* the unix socket: a client of this machine */
	if (getsockname(fd, (struct sockaddr *)&a, &la) < 0 ||
	    getpeername(fd, (struct sockaddr *)&b, &lb) < 0 || a.ss_family != AF_INET ||
	    b.ss_family != AF_INET)
		return 1;
	return ((struct sockaddr_in *)&a)->sin_addr.s_addr !=
	       ((struct sockaddr_in *)&b)->sin_addr.s_addr;
}

static void accept_all(int lfd, enum client_kind kind)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		int remote = kind == C_CMD && from_remote(fd);
		if (remote && d.cfg.refuse_cmd == SIM_WHO_REMOTE) {
			/* Fault knob: a reset, as from a firewall that rejects other nodes. */
			struct linger lg = {.l_onoff = 1, .l_linger = 0};
			setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
			close(fd);
			continue;
		}
		/* Not calloc: zeroing the two 32 KiB buffers of every command-port client was most
		 * of a daemon's CPU time in a big domain (every prolog's ctl asks every node,
		 * several times a second); only the header fields need values. */
		struct client *c = malloc(sizeof *c);
		if (!c) {
			close(fd);
			return;
		}
		c->fd = fd;
		c->kind = kind;
		c->closing = 0;
		c->in.len = c->out.len = 0;
		c->peer_id = -1;
		c->hang = kind == C_CMD && (d.cfg.hang_cmd == SIM_WHO_ALL ||
					    (d.cfg.hang_cmd == SIM_WHO_REMOTE && remote));
		c->deadline_ms = sim_now_ms() + (kind == C_CMD ? CMD_CLIENT_MS : HANDSHAKE_MS);
		c->next = d.clients;
		d.clients = c;
	}
}

/* The answer to "STATUS": this node's state, identity and its view of every node of its list;
 * each PEER line ends with the address the entry resolves to here ("-": none), so that the ctl
 * asks the nodes where this daemon finds them, whatever resolver the ctl's caller has. */
static void answer_status(struct sim_buf *b)
{
	int rc = sim_buf_printf(b,
				"STATE %s\nNODE %d %s\nVERSION %s\nINSTANCE %016" PRIx64
				"\nHOSTNAME %s\nNODES %d %016" PRIx64 "\n",
				d.state, d.self, d.addr, d.cfg.version, d.instance, d.hostname,
				d.nodes.count, d.map_hash);
	for (int i = 0; rc == 0 && i < d.nodes.count; i++) {
		enum sim_conn s = i == d.self
				      ? (strcmp(d.state, "READY") ? SIM_INVALID : SIM_CONNECTED)
				      : d.peers[i].status;
		rc = sim_buf_printf(b, "PEER %d %s %s %s\n", i, d.nodes.addr[i], sim_conn_name(s),
				    *d.nodes.ip[i] ? d.nodes.ip[i] : "-");
	}
	if (rc == 0)
		rc = sim_buf_printf(b, "END\n");
	if (rc < 0) {
		b->len = 0;
		sim_buf_printf(b, "ERROR answer too long\n");
	}
}

/* Handle the buffered lines of a client; returns -1 when the client must be closed now. */
static int client_lines(struct client *c)
{
	char line[MAX_LINE];
	int r;
	while (!c->closing && (r = sim_buf_line(&c->in, line, sizeof line)) != 0) {
		if (r < 0)
			return -1;
		if (c->kind == C_CMD) {
			if (c->hang)
				continue; /* fault knob: read requests, never answer */
			if (!strcmp(line, "STATUS"))
				answer_status(&c->out);
			else if (!strcmp(line, "QUERY"))
				sim_buf_printf(&c->out, "STATE %s\nEND\n", d.state);
			else
				sim_buf_printf(&c->out, "ERROR unknown command\n");
			c->closing = 1;
			continue;
		}
		if (c->deadline_ms == INT64_MAX && !strncmp(line, "BYE", 3)) {
			if (c->peer_id >= 0)
				peer_goodbye(c->peer_id);
			return -1;
		}
		if (c->deadline_ms == INT64_MAX)
			continue; /* nothing else is expected after the handshake */
		struct hello h;
		if (parse_hello(line, &h) < 0)
			return -1; /* garbage: not a peer of ours */
		int from = sim_nodes_find(&d.nodes, h.addr);
		if (from == d.self)
			from = -1;
		enum sim_conn v = judge_hello(&h, -1, from);
		queue_hello(&c->out,
			    from); /* after the verdict: it says whether we block the peer */
		c->deadline_ms = INT64_MAX;
		if (v == SIM_CONNECTED && h.id != d.self && h.id >= 0 && h.id < d.nodes.count &&
		    d.peers[h.id].dropped)
			return -1; /* fault knob: as if the peer's packets never arrived */
		if (v == SIM_CONNECTED && h.id != d.self && h.id >= 0 && h.id < d.nodes.count) {
			note_instance(h.id, h.instance);
			c->peer_id = h.id;
		} else {
			c->closing = 1; /* our HELLO tells the peer why; then communication stops */
		}
	}
	return 0;
}

/* POLLIN/POLLOUT/POLLHUP on an accepted connection; returns -1 when it must be closed. */
static int client_event(struct client *c, short revents)
{
	if (revents & (POLLIN | POLLHUP | POLLERR)) {
		int eof = sim_buf_fill_all(&c->in, c->fd);
		if (client_lines(c) < 0)
			return -1;
		if (eof && c->out.len == 0)
			return -1;
	}
	int pending = sim_buf_flush(&c->out, c->fd);
	if (pending < 0 || (pending == 0 && c->closing))
		return -1;
	return 0;
}

/* IMEXSIM_SESSION_FILE: take the node's one IMEX session.  The driver lets one IMEX daemon per
 * node hold it (imex-facts, "one IMEX session per driver"); here the daemons of one simulated
 * node share one session file, and the holder keeps it open and flock'ed (LOCK_EX) for its
 * lifetime, so /proc/locks (FLOCK, the holder's PID, the file's inode) and /proc/PID/fd name the
 * holder, as the real holder keeps the fabric-imex-mgmt capability device open.  Called in the
 * process that lives on (the child after the fork).  Returns 0 (no session file, or taken),
 * -EBUSY (another daemon holds it: NV_ERR_IN_USE) or the negative errno of open/flock. */
static int take_session(void)
{
	if (!*d.cfg.session_file)
		return 0;
	d.session_fd = open(d.cfg.session_file, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (d.session_fd < 0)
		return -errno;
	if (flock(d.session_fd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	int e = errno == EWOULDBLOCK ? EBUSY : errno;
	close(d.session_fd);
	d.session_fd = -1;
	return -e;
}

/* IMEXSIM_DROP_SYN_MS: make the peer port drop every SYN for a while, as a firewall or a network
 * policy that drops packets does while a node boots.  No packet filter is needed: Linux drops a
 * SYN to a listener whose accept queue is full (LISTENOVERFLOWS), so the queue's length is set to
 * one (listen(2) again) and filled with two connections of our own that nobody accepts (a queue
 * counts as full only once it holds more than its length; each of our SYNs finds the SYN queue
 * empty, so no syncookies are involved).  The peers' kernels then retransmit their SYNs (1, 3, 7,
 * 15 ... s after the attempt; every second for the first four where tcp_syn_linear_timeouts=4)
 * and the first retransmit after open_peer_port completes the connection.  Returns 0 or a
 * negative errno. */
static int plug_peer_port(void)
{
	if (listen(d.peer_lfd, 1) < 0)
		return -errno;
	for (int i = 0; i < 2; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in sa = {.sin_family = AF_INET,
					 .sin_port = htons((uint16_t)d.cfg.server_port)};
		if (fd < 0)
			return -errno;
		d.plug_fd[i] = fd;
		if (inet_pton(AF_INET, d.ip, &sa.sin_addr) != 1)
			return -EINVAL;
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
			return -errno;
	}
	return 0;
}

/* The end of IMEXSIM_DROP_SYN_MS: the full queue length again, then the two connections of
 * plug_peer_port are closed (their accepted ends see end of file and go). */
static void open_peer_port(void)
{
	d.syn_open_ms = 0;
	if (listen(d.peer_lfd, SIM_LISTEN_BACKLOG) < 0)
		logmsg("WARN", "listen on the peer port: %s", strerror(errno));
	for (int i = 0; i < 2; i++) {
		if (d.plug_fd[i] >= 0)
			close(d.plug_fd[i]);
		d.plug_fd[i] = -1;
	}
	logmsg("INFO", "Peer port %s:%d takes connections again (IMEXSIM_DROP_SYN_MS)", d.addr,
	       d.cfg.server_port);
}

/* What a poll slot belongs to: peer index >= 0, or a client. */
struct slot {
	int peer;
	struct client *client;
};

/* One turn of the loop: build the poll set, wait, dispatch.  `orig` is the signal mask to wait
 * with (SIGTERM/SIGINT/SIGQUIT/SIGHUP are blocked everywhere else, so none is lost). */
static void loop_once(const sigset_t *orig)
{
	int64_t now = sim_now_ms(), wake = now + 1000;
	if (d.crash_ms && now >= d.crash_ms) {
		logmsg("ERROR", "Crashing on purpose (IMEXSIM_CRASH_AFTER_MS)");
		kill(getpid(), SIGKILL);
	}
	if (d.wait_ms && now >= d.wait_ms) {
		d.wait_ms = 0;
		set_state("WAITING_FOR_PEERS", "IMEXSIM_START_DELAY_MS");
	}
	if (d.ready_ms && now >= d.ready_ms) {
		d.ready_ms = 0;
		set_state("READY", "after IMEXSIM_START_DELAY_MS");
	}
	if (d.syn_open_ms && now >= d.syn_open_ms)
		open_peer_port();
	if (d.exit_ms && now >= d.exit_ms) {
		logmsg("ERROR", "Exiting with status %d (IMEXSIM_EXIT_AFTER_MS)",
		       d.cfg.exit_status);
		d.exiting = 1;
		return;
	}
	if (d.crash_ms && d.crash_ms < wake)
		wake = d.crash_ms;
	if (d.exit_ms && d.exit_ms < wake)
		wake = d.exit_ms;
	if (d.wait_ms && d.wait_ms < wake)
		wake = d.wait_ms;
	if (d.ready_ms && d.ready_ms < wake)
		wake = d.ready_ms;
	if (d.syn_open_ms && d.syn_open_ms < wake)
		wake = d.syn_open_ms;
	for (int i = 0; i < d.nodes.count; i++) {
		struct peer *p = &d.peers[i];
		if (i == d.self || p->dropped)
			continue;
		if (p->phase == P_IDLE && now >= p->next_ms)
			peer_connect(i);
		else if (p->phase == P_CONNECTING && now >= p->next_ms)
			peer_timeout(i);
		else if (p->phase == P_HELLO && now >= p->next_ms)
			peer_fail(i, "handshake timeout");
		if (p->phase != P_UP && p->next_ms < wake)
			wake = p->next_ms;
	}
	for (struct client **l = &d.clients; *l;) {
		if (now >= (*l)->deadline_ms) {
			client_free(l);
			continue;
		}
		if ((*l)->deadline_ms < wake)
			wake = (*l)->deadline_ms;
		l = &(*l)->next;
	}

	size_t nclients = 0;
	for (struct client *c = d.clients; c; c = c->next)
		nclients++;
	size_t cap = 3 + (size_t)d.nodes.count + nclients, n = 0;
	struct pollfd *fds = calloc(cap, sizeof *fds);
	struct slot *owner = calloc(cap, sizeof *owner);
	if (!fds || !owner) {
		free(fds);
		free(owner);
		return;
	}
	/* While SYNs are dropped, nothing is accepted: an accept would make room in the queue. */
	fds[n++] = (struct pollfd){.fd = d.syn_open_ms ? -1 : d.peer_lfd, .events = POLLIN};
	fds[n++] = (struct pollfd){.fd = d.cmd_lfd, .events = POLLIN};
	fds[n++] = (struct pollfd){.fd = d.cmd_ufd, .events = POLLIN};
	for (int i = 0; i < d.nodes.count; i++) {
		struct peer *p = &d.peers[i];
		if (i == d.self || p->fd < 0)
			continue;
		short ev = POLLIN;
		if (p->phase == P_CONNECTING || p->out.len > 0)
			ev |= POLLOUT;
		owner[n] = (struct slot){.peer = i};
		fds[n++] = (struct pollfd){.fd = p->fd, .events = ev};
	}
	for (struct client *c = d.clients; c; c = c->next) {
		owner[n] = (struct slot){.peer = -1, .client = c};
		fds[n++] = (struct pollfd){.fd = c->fd,
					   .events = (short)(POLLIN | (c->out.len ? POLLOUT : 0))};
	}

	int64_t wait = wake - now;
	if (wait < 0)
		wait = 0;
	struct timespec ts = {.tv_sec = wait / 1000, .tv_nsec = (wait % 1000) * 1000000};
	int r = ppoll(fds, n, &ts, orig);
	if (r > 0) {
		if (fds[0].revents)
			accept_all(d.peer_lfd, C_PEER_IN);
		if (fds[1].revents)
			accept_all(d.cmd_lfd, C_CMD);
		if (fds[2].revents)
			accept_all(d.cmd_ufd, C_CMD);
		for (size_t k = 3; k < n; k++) {
			if (!fds[k].revents)
				continue;
			if (owner[k].peer >= 0) {
				if (d.peers[owner[k].peer].fd == fds[k].fd)
					peer_event(owner[k].peer, fds[k].revents);
				continue;
			}
			for (struct client **l = &d.clients; *l; l = &(*l)->next) {
				if (*l == owner[k].client) {
					if (client_event(*l, fds[k].revents) < 0)
						client_free(l);
					break;
				}
			}
		}
	}
	free(fds);
	free(owner);
}

/* SIGUSR1 (driver 580+, NVIDIA IMEX guide): restart every outgoing connection at once, with the
 * back-off and the attempt count reset, at most once per IMEXSIM_USR1_INTERVAL_MS (5 s, like the
 * real daemon); the node list is NOT re-read.  A pair keeps its status until the new handshake
 * decides it (a failure turns CONNECTED into RECOVERING). */
static void restart_outgoing(void)
{
	int64_t now = sim_now_ms();
	if (d.usr1_done && now - d.usr1_ms < d.cfg.usr1_interval_ms) {
		logmsg("INFO",
		       "SIGUSR1 ignored: outgoing connections were restarted less than %d ms ago",
		       d.cfg.usr1_interval_ms);
		return;
	}
	d.usr1_done = 1;
	d.usr1_ms = now;
	logmsg("INFO", "SIGUSR1: restarting outgoing connections (the node list is not re-read)");
	for (int i = 0; i < d.nodes.count; i++) {
		struct peer *p = &d.peers[i];
		if (i == d.self || p->dropped)
			continue;
		if (p->fd >= 0)
			close(p->fd);
		p->fd = -1;
		p->in.len = p->out.len = 0;
		p->phase = P_IDLE;
		p->next_ms = now;
		p->backoff_ms = d.cfg.reconnect_ms;
		p->attempts = 0;
	}
}

/* Clean shutdown (SIGTERM/SIGINT/SIGQUIT): tell every connected peer ("BYE INSTANCE" on our
 * outgoing connections and on the ones peers made to us), then close everything.  The real
 * daemon tells its peers too (NVIDIA IMEX guide); the line is the simulator's own. */
static void say_goodbye(void)
{
	for (int i = 0; i < d.nodes.count; i++) {
		struct peer *p = &d.peers[i];
		if (i == d.self || p->fd < 0)
			continue;
		if (p->phase == P_UP &&
		    sim_buf_printf(&p->out, "BYE %016" PRIx64 "\n", d.instance) == 0)
			sim_buf_flush(&p->out, p->fd);
		close(p->fd);
		p->fd = -1;
	}
	while (d.clients) {
		struct client *c = d.clients;
		if (c->kind == C_PEER_IN && c->peer_id >= 0 &&
		    sim_buf_printf(&c->out, "BYE %016" PRIx64 "\n", d.instance) == 0)
			sim_buf_flush(&c->out, c->fd);
		client_free(&d.clients);
	}
}

/* Fork like a Type=forking service.  The parent waits until the child reports that it is
 * initialised (sockets bound, IMEX session held, PID and state files written: see
 * report_started), then exits 0; or exits 1 when the child died first.  The child keeps stdout and
 * stderr until it reports, so that the ERROR line of a failure before that reaches the caller (a
 * unit's journal) as well as LOG_FILE_NAME.  Returns, in the child, the write end of the report
 * pipe, or the negative errno of pipe/fork. */
static int daemonize(void)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(pfd[0]);
		close(pfd[1]);
		return -e;
	}
	if (pid > 0) {
		close(pfd[1]);
		char c;
		ssize_t r;
		while ((r = read(pfd[0], &c, 1)) < 0 && errno == EINTR)
			;
		_exit(r == 1 ? 0 : 1);
	}
	close(pfd[0]);
	setsid();
	return pfd[1];
}

/* The daemon detaches from its caller's stdin, stdout and stderr (DAEMONIZE=1). */
static void detach_stdio(void)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		close(null);
	}
	d.log_stderr = 0;
}

/* Write IMEXSIM_PID_FILE (our PID) and the state file, then release a waiting parent (fd >= 0). */
static void report_started(int fd)
{
	char text[32];
	snprintf(text, sizeof text, "%d\n", (int)getpid());
	if (*d.cfg.pid_file)
		write_file_atomic(d.cfg.pid_file, text);
	write_state_file();
	if (fd >= 0) {
		detach_stdio();
		if (write(fd, "1", 1) < 0) {
			/* the parent is gone: nobody to tell */
		}
		close(fd);
	}
}

/* Make room for the mesh: two descriptors per peer (our connection to it and its connection to
 * us), the command-port clients (every node's ctl may ask at once) and a margin.  A daemon of a
 * 256-node list needs more than the usual soft limit of 1024 (systemd's default LimitNOFILE=1024
 * soft), so raise the soft limit towards the hard one; the real daemon's needs are unknown. */
static void raise_fd_limit(int nodes)
{
	rlim_t want = (rlim_t)nodes * 4 + 64;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want)
		logmsg("WARN",
		       "Open file limit %llu is below the %llu descriptors %d nodes may need",
		       (unsigned long long)rl.rlim_cur, (unsigned long long)want, nodes);
}

static int usage(void)
{
	fprintf(stderr, "usage: nvidia-imex [-c CONFIG]   (imexsim: simulated IMEX daemon)\n");
	return 2;
}

int sim_daemon_main(int argc, char **argv)
{
	const char *cfg_path = SIM_DEFAULT_CFG;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-c") && i + 1 < argc)
			cfg_path = argv[++i];
		else
			return usage();
	}
	memset(&d, 0, sizeof d);
	d.log_fd = -1;
	d.log_stderr = 1;
	d.peer_lfd = d.cmd_lfd = d.cmd_ufd = d.session_fd = d.plug_fd[0] = d.plug_fd[1] = -1;
	d.state = "INITIALIZING";
	d.started = unix_ms();

	char err[SIM_PATH_LEN + 200];
	if (sim_config_read(cfg_path, &d.cfg, err, sizeof err) < 0) {
		/* Every failed start ends with an ERROR line (on stderr only: no log file yet). */
		logmsg("ERROR", "Cannot read config file %s", err);
		return 1;
	}
	if (*d.cfg.log_file) {
		d.log_fd = open(d.cfg.log_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (d.log_fd < 0)
			fprintf(stderr, "nvidia-imex: cannot open log file %s: %s\n",
				d.cfg.log_file, strerror(errno));
	}
	/* Exactly one line with "starting" per start: tests count restarts by it. */
	logmsg("INFO", "imexsim %s starting, config %s", d.cfg.version, cfg_path);
	if (d.cfg.exit_at_start) {
		/* Fault knob: fail before forking, so that a Type=forking start job fails. */
		logmsg("ERROR", "Exiting at start with status %d (IMEXSIM_EXIT_AT_START)",
		       d.cfg.exit_at_start);
		if (d.log_fd >= 0)
			close(d.log_fd);
		return d.cfg.exit_at_start;
	}
	int rc = sim_nodes_read(d.cfg.node_file, &d.nodes);
	if (rc < 0) {
		logmsg("ERROR", "Failed to read node configuration file %s: %s", d.cfg.node_file,
		       strerror(-rc));
		return 1;
	}
	/* The real daemon's line for a name (580.159.04, NVIDIA's DRA driver PR 1465). */
	for (int i = 0; i < d.nodes.count; i++) {
		struct in_addr literal;
		if (inet_pton(AF_INET, d.nodes.addr[i], &literal) != 1)
			logmsg("INFO", "Treating node config entry '%s' as a host name.",
			       d.nodes.addr[i]);
	}
	if ((rc = sim_nodes_resolve(&d.nodes, d.cfg.hosts_file)) > 0)
		for (int i = 0; i < d.nodes.count; i++)
			if (!*d.nodes.ip[i])
				logmsg("WARN", "Cannot resolve node %d - %s", i, d.nodes.addr[i]);
	d.self = *d.cfg.bind_ip ? sim_nodes_find(&d.nodes, d.cfg.bind_ip)
				: sim_nodes_first_local(&d.nodes);
	if (d.self < 0) {
		logmsg("ERROR", "No matching network interface found for any IP addresses in the "
				"node configuration file");
		return 1;
	}
	d.addr = d.nodes.addr[d.self];
	d.ip = d.nodes.ip[d.self];
	if (!*d.ip) {
		logmsg("ERROR", "Cannot resolve this node's entry %s", d.addr);
		return 1;
	}
	/* The real daemon's wording (imex-facts, host names). */
	logmsg("INFO", "Identified this node as ID %d, using bind address of %s", d.self, d.ip);
	raise_fd_limit(d.nodes.count);
	d.map_hash = sim_nodes_hash(&d.nodes);
	if (getrandom(&d.instance, sizeof d.instance, 0) != sizeof d.instance)
		d.instance = ((uint64_t)getpid() << 32) ^ (uint64_t)sim_now_ms();
	if (*d.cfg.hostname)
		strcpy(d.hostname, d.cfg.hostname);
	else if (gethostname(d.hostname, sizeof d.hostname - 1) < 0 || !*d.hostname)
		strcpy(d.hostname, "localhost");

	if (d.cfg.refuse_peers) {
		/* Fault knob: peers' connections are refused; ours still go out. */
		logmsg("WARN", "Not listening on peer port %s:%d (IMEXSIM_REFUSE_PEERS)", d.addr,
		       d.cfg.server_port);
	} else if ((d.peer_lfd = sim_listen(d.ip, d.cfg.server_port)) < 0) {
		logmsg("ERROR", "Failed to listen on %s:%d: %s", d.addr, d.cfg.server_port,
		       strerror(-d.peer_lfd));
		return 1;
	} else if (d.cfg.drop_syn_ms && (rc = plug_peer_port()) < 0) {
		logmsg("ERROR", "Cannot make the peer port drop SYNs (IMEXSIM_DROP_SYN_MS): %s",
		       strerror(-rc));
		return 1;
	} else if (d.cfg.drop_syn_ms) {
		logmsg("INFO", "Peer port %s:%d drops every SYN for %d ms (IMEXSIM_DROP_SYN_MS)",
		       d.addr, d.cfg.server_port, d.cfg.drop_syn_ms);
	}
	if (d.cfg.cmd_enabled && d.cfg.refuse_cmd == SIM_WHO_ALL) {
		logmsg("WARN", "Not listening on the command port (IMEXSIM_REFUSE_CMD=1)");
	} else if (d.cfg.cmd_enabled && !d.cfg.cmd_port && !*d.cfg.cmd_unix_path) {
		/* [guess] what the real daemon does with neither is not documented */
		logmsg("ERROR",
		       "IMEX_CMD_ENABLED=1 needs IMEX_CMD_PORT or IMEX_CMD_UNIX_DOMAIN_PATH");
		if (d.peer_lfd >= 0)
			close(d.peer_lfd);
		return 1;
	} else if (d.cfg.cmd_enabled) {
		/* Real default: all interfaces; here: our own address, so that nodes can share the
		 * port number on one machine.  An empty IMEX_CMD_PORT: no TCP command port. */
		const char *ip = *d.cfg.cmd_bind_ip ? d.cfg.cmd_bind_ip : d.ip;
		if (d.cfg.cmd_port)
			d.cmd_lfd = sim_listen(ip, d.cfg.cmd_port);
		if (d.cmd_lfd >= 0 || !d.cfg.cmd_port) {
			if (*d.cfg.cmd_unix_path &&
			    (d.cmd_ufd = sim_listen_unix(d.cfg.cmd_unix_path)) < 0) {
				logmsg("ERROR", "Failed to listen on command socket %s: %s",
				       d.cfg.cmd_unix_path, strerror(-d.cmd_ufd));
				if (d.cmd_lfd >= 0)
					close(d.cmd_lfd);
				if (d.peer_lfd >= 0)
					close(d.peer_lfd);
				return 1;
			}
		} else {
			logmsg("ERROR", "Failed to listen on command port %s:%d: %s", ip,
			       d.cfg.cmd_port, strerror(-d.cmd_lfd));
			if (d.peer_lfd >= 0)
				close(d.peer_lfd);
			return 1;
		}
	}

	/* SIGUSR1 is handled from driver 580 on (NVIDIA's developers state it for r580 and later;
	 * imex-facts); an older daemon has no handler and, by the default action, dies of it:
	 * killed by a signal, no goodbye, PID and state files left (case C48). */
	int usr1 = sim_version_major(d.cfg.version) >= 580;
	sigset_t block, orig;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGQUIT);
	sigaddset(&block, SIGHUP);
	if (usr1)
		sigaddset(&block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &block, &orig);
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGQUIT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if (usr1)
		sigaction(SIGUSR1, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	int report_fd = -1;
	if (d.cfg.daemonize) {
		if ((rc = report_fd = daemonize()) < 0) {
			logmsg("ERROR", "fork: %s", strerror(-rc));
			return 1;
		}
	}
	if ((rc = take_session()) < 0) {
		/* The words of the real line are seen ("Failed to allocate Imex session",
		 * NV_ERR_IN_USE), not the line itself.  A start job of a Type=forking unit fails:
		 * the parent exits 1 when this child dies before reporting. */
		if (rc == -EBUSY)
			logmsg("ERROR", "Failed to allocate Imex session, status: NV_ERR_IN_USE");
		else
			logmsg("ERROR", "Failed to allocate Imex session: %s: %s",
			       d.cfg.session_file, strerror(-rc));
		return 1;
	}

	d.peers = calloc((size_t)d.nodes.count, sizeof *d.peers);
	if (!d.peers) {
		logmsg("ERROR", "out of memory");
		return 1;
	}
	for (int i = 0; i < d.nodes.count; i++) {
		d.peers[i].fd = -1;
		d.peers[i].backoff_ms = d.cfg.reconnect_ms;
		d.peers[i].status = i == d.self ? SIM_CONNECTED : SIM_NEVER_CONNECTED;
	}
	for (const char *p = d.cfg.drop_peers; *p;) {
		int id = atoi(p);
		if (id >= 0 && id < d.nodes.count && id != d.self)
			d.peers[id].dropped = 1;
		p += strcspn(p, ",");
		p += *p == ',';
	}
	int64_t start = sim_now_ms();
	if (d.cfg.drop_syn_ms && d.peer_lfd >= 0)
		d.syn_open_ms = start + d.cfg.drop_syn_ms;
	if (d.cfg.crash_after_ms)
		d.crash_ms = start + d.cfg.crash_after_ms;
	if (d.cfg.exit_after_ms)
		d.exit_ms = start + d.cfg.exit_after_ms;
	/* IMEX_WAIT_FOR_QUORUM=RECOVERY (and NONE): a clean start is READY at once, unless a
	 * fault knob says otherwise.  Slow start: INITIALIZING for the first half of
	 * IMEXSIM_START_DELAY_MS, WAITING_FOR_PEERS for the second, then READY (a guess at the
	 * real order of the documented states). */
	if (d.cfg.start_delay_ms) {
		d.state = "INITIALIZING";
		d.wait_ms = start + d.cfg.start_delay_ms / 2;
		d.ready_ms = d.cfg.never_ready ? 0 : start + d.cfg.start_delay_ms;
	} else if (d.cfg.never_ready) {
		d.state = "WAITING_FOR_PEERS";
	} else {
		d.state = "READY";
	}
	report_started(report_fd);
	logmsg("INFO", "imexsim %s up: node %d of %d (%s), instance %016" PRIx64 ", %s",
	       d.cfg.version, d.self, d.nodes.count, d.addr, d.instance, d.state);

	while (!got_term && !d.exiting) {
		loop_once(&orig);
		if (got_hup) {
			got_hup = 0;
			logmsg("INFO", "SIGHUP received (the real daemon dumps its log buffer)");
		}
		if (got_usr1) {
			got_usr1 = 0;
			restart_outgoing();
		}
	}

	d.state = "SHUTTING_DOWN";
	logmsg("INFO", "Shutting down (%s), telling peers",
	       d.exiting ? "IMEXSIM_EXIT_AFTER_MS" : "signal received");
	say_goodbye();
	if (d.peer_lfd >= 0)
		close(d.peer_lfd);
	if (d.cmd_lfd >= 0)
		close(d.cmd_lfd);
	if (d.cmd_ufd >= 0) {
		close(d.cmd_ufd);
		unlink(d.cfg.cmd_unix_path);
	}
	if (*d.cfg.state_file)
		unlink(d.cfg.state_file);
	if (*d.cfg.pid_file)
		unlink(d.cfg.pid_file);
	for (int i = 0; i < 2; i++)
		if (d.plug_fd[i] >= 0)
			close(d.plug_fd[i]);
	if (d.session_fd >= 0)
		close(d.session_fd); /* releases the session (the flock) */
	free(d.peers);
	logmsg("INFO", "Exiting");
	if (d.log_fd >= 0)
		close(d.log_fd);
	return d.exiting ? d.cfg.exit_status : 0;
}
