/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imexsim: a simulated nvidia-imex daemon and nvidia-imex-ctl (test and demo infrastructure for
 * machines without NVLink).  One binary; main.c dispatches on the name it was called by.
 *
 * Conventions: internal functions return 0 (or a count) on success and a negative errno on
 * failure; times are milliseconds (int64_t, CLOCK_MONOTONIC) unless stated otherwise.
 * Behaviour of the real IMEX that this file mirrors is described in contrib/imexsim/README.md;
 * where the real behaviour is unknown, README.md says which guess we made.
 */
#ifndef IMEXSIM_H
#define IMEXSIM_H

#include <stddef.h>
#include <stdint.h>

#define SIM_MAX_NODES	  256 /* more than an NVL72 rack (18 compute trays) ever needs */
#define SIM_ADDR_LEN	  64  /* one node file entry (IPv4 literal or host name) */
#define SIM_PATH_LEN	  4096
#define SIM_BUF_SIZE	  32768 /* per connection and direction; a STATUS answer for 256 nodes fits */
#define SIM_DEFAULT_CFG	  "/etc/nvidia-imex/config.cfg"
#define SIM_DEFAULT_VERS  "580.95.05-sim"
#define SIM_PROTO_VERSION 1
/* listen(2) backlog of the peer and command ports: when a whole domain starts at once, every
 * other node connects to a new daemon within a few milliseconds (71 peers in a 72-node domain),
 * plus the ctls of the prologs polling it; a full accept queue drops SYNs, which the peers' kernels
 * retry after 1 s and more, delaying the mesh for nothing.  The kernel caps it at somaxconn. */
#define SIM_LISTEN_BACKLOG 1024

/* ---- cfg.c: config.cfg and the node file ----------------------------------------------------- */

/* The keys of config.cfg the simulator knows (NVIDIA's package defaults, plus IMEXSIM_* keys). */
struct sim_config {
	char path[SIM_PATH_LEN];
	int server_port; /* SERVER_PORT, default 50000 (peer mesh) */
	int cmd_port;	 /* IMEX_CMD_PORT, default 50005; 0: set empty (no TCP command port) */
	char cmd_unix_path[SIM_PATH_LEN]; /* IMEX_CMD_UNIX_DOMAIN_PATH, default "" (none) */
	int cmd_enabled;		  /* IMEX_CMD_ENABLED, default 1 */
	char cmd_bind_ip[SIM_ADDR_LEN];	  /* IMEX_CMD_BIND_INTERFACE_IP, default "" */
	char bind_ip[SIM_ADDR_LEN];	  /* BIND_INTERFACE_IP, default "" */
	char node_file[SIM_PATH_LEN];	  /* IMEX_NODE_CONFIG_FILE */
	int daemonize;			  /* DAEMONIZE, default 1 */
	char log_file[SIM_PATH_LEN];	  /* LOG_FILE_NAME, default "" (no log file) */
	char wait_for_quorum[32];	  /* IMEX_WAIT_FOR_QUORUM, default RECOVERY */
	char version[64];		  /* IMEXSIM_VERSION, default SIM_DEFAULT_VERS */
	int reconnect_ms;		  /* IMEXSIM_RECONNECT_MS: first back-off, default 300 */
	double reconnect_factor; /* IMEXSIM_RECONNECT_FACTOR: growth per failure, default 2 */
	int reconnect_max_ms;	 /* IMEXSIM_RECONNECT_MAX_MS: back-off cap, default 2000 */
	int usr1_interval_ms;	 /* IMEXSIM_USR1_INTERVAL_MS: SIGUSR1 rate limit, default 5000 */
	char hostname[SIM_ADDR_LEN]; /* IMEXSIM_HOSTNAME, default "" (gethostname(2)) */
	int goodbye_disconnected; /* IMEXSIM_GOODBYE_STATUS: 0 RECOVERING (default), 1 DISCONNECTED
				   */
	char ctl_format[16];	  /* IMEXSIM_CTL_FORMAT: 570, 570.00 or 580; default: 580 when
				     IMEXSIM_VERSION is 580 or later, else 570 */
	int ctl_list_from_file;	  /* IMEXSIM_CTL_NODE_LIST: 0 daemon (default), 1 file */
	int ctl_conn_own;	  /* IMEXSIM_CTL_CONNECTIONS: 0 local (default), 1 node */
	int mismatch_clears_one;  /* IMEXSIM_MISMATCH_CLEARS: 0 both (default: a node map mismatch
				     stays until both ends restarted), 1 one (either end's restart
				     with a matching list clears it: the old rule) */
	char pid_file[SIM_PATH_LEN];   /* IMEXSIM_PID_FILE, default "" */
	char state_file[SIM_PATH_LEN]; /* IMEXSIM_STATE_FILE, default "" */
	char hosts_file[SIM_PATH_LEN]; /* IMEXSIM_HOSTS_FILE: names of the node file, default "" */
	char session_file[SIM_PATH_LEN]; /* IMEXSIM_SESSION_FILE: the node's one IMEX session (a
					    file flock'ed by the daemon holding it), default "" */
	int no_ipv6;		/* IMEXSIM_NO_IPV6: read by the ctl: the host has no IPv6 */
	int connect_timeout_ms; /* IMEXSIM_CONNECT_TIMEOUT_MS: one connect attempt, default 20000 */
	/* Fault knobs (README.md), all off by default.  SIM_WHO_* values: who is affected. */
	int never_ready;      /* IMEXSIM_NEVER_READY: stay WAITING_FOR_PEERS */
	int start_delay_ms;   /* IMEXSIM_START_DELAY_MS: INITIALIZING, WAITING_FOR_PEERS, READY */
	int crash_after_ms;   /* IMEXSIM_CRASH_AFTER_MS: SIGKILL itself then */
	int exit_after_ms;    /* IMEXSIM_EXIT_AFTER_MS: shut down (goodbye) then ... */
	int exit_status;      /* IMEXSIM_EXIT_STATUS: ... exiting with this status (default 1) */
	int exit_at_start;    /* IMEXSIM_EXIT_AT_START: exit with this status before forking */
	int hang_cmd;	      /* IMEXSIM_HANG_CMD: accept, never answer (SIM_WHO_*) */
	int refuse_cmd;	      /* IMEXSIM_REFUSE_CMD: no command port / reset (SIM_WHO_*) */
	int refuse_peers;     /* IMEXSIM_REFUSE_PEERS: do not listen on SERVER_PORT */
	char drop_peers[256]; /* IMEXSIM_DROP_PEERS: node IDs, comma-separated */
	int drop_syn_ms;      /* IMEXSIM_DROP_SYN_MS: drop SYNs to the peer port this long */
};

/* Values of the IMEXSIM_HANG_CMD and IMEXSIM_REFUSE_CMD knobs: "0", "1" (every client) or
 * "remote" (only clients whose source address is not the command port's own address, i.e. the
 * ctl of another node; the local ctl still gets answers). */
enum { SIM_WHO_NONE = 0, SIM_WHO_ALL = 1, SIM_WHO_REMOTE = 2 };

/* The node list (nodes_config.cfg): entry i is node ID i, as written (an IPv4 literal or a host
 * name); ip[i] is its IPv4 address once sim_nodes_resolve ran ("" when it does not resolve). */
struct sim_nodes {
	int count;
	char addr[SIM_MAX_NODES][SIM_ADDR_LEN];
	char ip[SIM_MAX_NODES][SIM_ADDR_LEN];
};

/* Read config.cfg at `path` (KEY=VALUE lines, '#' comments, blanks ignored, unknown keys ignored)
 * into *c, after filling in the defaults.  Returns 0, the negative errno of open/read, or -EINVAL
 * for a malformed value (then `err` (size errlen) names the key and the value). */
int sim_config_read(const char *path, struct sim_config *c, char *err, size_t errlen);

/* Read the node file at `path`: one address per line; surrounding blanks are trimmed, blank lines
 * and '#' comment lines are skipped (so the node ID is the index among the entries).  Returns the
 * number of entries, the negative errno of open/read, -E2BIG (more than SIM_MAX_NODES entries or
 * an entry longer than SIM_ADDR_LEN-1) or -ENODATA (no entry at all). */
int sim_nodes_read(const char *path, struct sim_nodes *n);

/* Index of `addr` in the node list (an entry as written, or its resolved address), or -1. */
int sim_nodes_find(const struct sim_nodes *n, const char *addr);

/* Resolve one node file entry: an IPv4 literal as it is; a host name from `hosts_file` (when
 * given and it names it), else the resolver (getaddrinfo, AF_INET, the first answer: /etc/hosts
 * and DNS as nsswitch.conf says, read again at every call).  Writes the IPv4 address to `out`
 * (size `len`); returns 0, or -ENOENT when it does not resolve ("" written). */
int sim_resolve(const char *entry, const char *hosts_file, char *out, size_t len);

/* Leading number of a driver version string ("580.95.05-sim": 580), or 0 when there is none. */
int sim_version_major(const char *version);

/* Fill n->ip: an IPv4 literal as it is; a host name (driver 570.158.01+ accepts them) from
 * `hosts_file` ("ADDRESS NAME..." lines as /etc/hosts, '#' comments; IMEXSIM_HOSTS_FILE, so tests
 * need not touch the machine's /etc/hosts) when given and it names it, else the resolver
 * (getaddrinfo, AF_INET, the first answer).  A name that does not resolve gets "" (a peer that
 * never connects).  Returns the number of entries that did not resolve. */
int sim_nodes_resolve(struct sim_nodes *n, const char *hosts_file);

/* FNV-1a 64-bit hash of the node map (entries in order, each followed by '\n'): the handshake
 * compares it (with the count) to detect a node map mismatch. */
uint64_t sim_nodes_hash(const struct sim_nodes *n);

/* Index of the first entry of the node list that is an address of a local interface
 * (getifaddrs(3), IPv4 only), or -1 when none is.  Note: 127.0.0.2 and the like are usable on
 * Linux (all of 127/8 routes to lo) but only 127.0.0.1 is listed, so the simulator's demo and tests
 * always set BIND_INTERFACE_IP. */
int sim_nodes_first_local(const struct sim_nodes *n);

/* ---- proto.c: clock, sockets, buffers, status names ------------------------------------------ */

/* Monotonic clock (CLOCK_MONOTONIC) in milliseconds. */
int64_t sim_now_ms(void);

/* A byte buffer of one connection direction. */
struct sim_buf {
	size_t len;
	char data[SIM_BUF_SIZE];
};

/* Create a non-blocking TCP socket listening on IPv4 `ip`:`port` (SO_REUSEADDR, backlog
 * SIM_LISTEN_BACKLOG).
 * Returns the fd, or -EINVAL for a non-literal `ip`, or the negative errno of socket/bind/listen.
 */
int sim_listen(const char *ip, int port);

/* Create a non-blocking unix stream socket listening on `path` (a stale socket file there is
 * removed first; any other file is left alone: -EEXIST).  Returns the fd or a negative errno. */
int sim_listen_unix(const char *path);

/* Start a non-blocking connect to the unix socket `path`.  Returns the fd (wait for POLLOUT, then
 * sim_connect_result) or a negative errno (-ENOENT, -ECONNREFUSED, -ENAMETOOLONG). */
int sim_connect_unix_start(const char *path);

/* Start a non-blocking TCP connect to IPv4 `ip`:`port`.  Returns the fd (the connect may still be
 * in progress: wait for POLLOUT, then call sim_connect_result), -EINVAL for a non-literal `ip`, or
 * the negative errno of socket/connect (e.g. -ECONNREFUSED). */
int sim_connect_start(const char *ip, int port);

/* The same from the source address `src` (an IPv4 literal; NULL or "": the kernel's choice).
 * The ctl binds to its own node's address so that a daemon can tell its local ctl from the ctl
 * of another node (IMEXSIM_HANG_CMD=remote).  A source that cannot be bound is ignored. */
int sim_connect_start_from(const char *ip, int port, const char *src);

/* After POLLOUT on a connecting fd: 0 when connected, else the negative errno (SO_ERROR). */
int sim_connect_result(int fd);

/* Read what is available from `fd` into `b`.  Returns the bytes read (> 0), 0 at end of file,
 * -EAGAIN when nothing was available, -EMSGSIZE when the buffer is full, or another negative errno.
 */
int sim_buf_fill(struct sim_buf *b, int fd);

/* Read everything available from the non-blocking `fd` into `b` (sim_buf_fill until -EAGAIN).
 * Returns 0, or 1 when the connection is done: end of file, a full buffer or a read error. */
int sim_buf_fill_all(struct sim_buf *b, int fd);

/* Pop one '\n'-terminated line from `b` into `line` (size `len`, the '\n' removed, a trailing '\r'
 * too).  Returns 1 when a line was popped, 0 when no whole line is buffered, -EMSGSIZE when the
 * line does not fit in `line`. */
int sim_buf_line(struct sim_buf *b, char *line, size_t len);

/* Append printf-formatted text to `b`.  Returns 0 or -EMSGSIZE (nothing appended). */
int sim_buf_printf(struct sim_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Write as much of `b` to `fd` as the socket takes (MSG_NOSIGNAL) and drop what was written.
 * Returns the bytes still pending (>= 0) or a negative errno. */
int sim_buf_flush(struct sim_buf *b, int fd);

/* Connection status of one node towards another, as nvidia-imex-ctl -N shows it. */
enum sim_conn {
	SIM_INVALID = 0,
	SIM_NEVER_CONNECTED,
	SIM_CONNECTED,
	SIM_RECOVERING,
	SIM_DISCONNECTED,
	SIM_AUTHENTICATING,
	SIM_VERSION_MISMATCH,
	SIM_NODE_MAP_MISMATCH,
	SIM_CONN_COUNT
};

/* JSON spelling ("CONNECTED", ...) of a connection status; see README.md for the guessed ones. */
const char *sim_conn_name(enum sim_conn s);
/* One-letter (or !V!/!M!) spelling of the text matrix. */
const char *sim_conn_letter(enum sim_conn s);
/* Parse a JSON spelling; returns SIM_INVALID for an unknown one. */
enum sim_conn sim_conn_parse(const char *name);

/* ---- daemon.c and ctl.c: the two programs ---------------------------------------------------- */

/* nvidia-imex [-c CONFIG]: the daemon.  Returns the process exit status. */
int sim_daemon_main(int argc, char **argv);
/* nvidia-imex-ctl [-c CONFIG] [-i IP PORT | -u SOCKET] (-q|-N|-n) [-j] [-H] [-t MS]: the ctl.
 * Returns the process exit status (0, 1 when -q cannot reach the daemon, 2 for a usage error, 255
 * when the configuration cannot be read). */
int sim_ctl_main(int argc, char **argv);

#endif
