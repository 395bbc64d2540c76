/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imexsim ctl: a simulated nvidia-imex-ctl.  -q asks the local daemon for its state; -N asks every
 * node of the node list, in parallel, on its command port and prints what it sees of the domain
 * (its state, each node and its links: the mesh) in the real JSON (-j) or text layout
 * (tests/fixtures/ctl/).  Guesses about the real ctl are listed in README.md.
 */
#include "imexsim.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LINE 512

/* One request/response exchange on a command port. */
struct query {
	const char *ip;
	int port;
	const char *sock; /* a unix socket instead of ip:port (-u) */
	int fd;
	int connecting;
	int err; /* 0: answer complete; negative errno: -ECONNREFUSED, -ETIMEDOUT, -EPROTO, ... */
	int done;
	struct sim_buf out, in;
};

/* What one node said about itself and its peers (parsed STATUS/QUERY answer). */
struct view {
	int ok;	     /* 1 when the node answered */
	int self_id; /* its own node ID ("NODE id addr" of the STATUS answer), -1 unknown */
	char self_addr[SIM_ADDR_LEN];
	char state[32], version[64], hostname[256];
	int npeers;
	char peer_addr[SIM_MAX_NODES][SIM_ADDR_LEN];
	char peer_ip[SIM_MAX_NODES]
		    [SIM_ADDR_LEN]; /* where the node finds the entry ("": unknown) */
	enum sim_conn peer_status[SIM_MAX_NODES];
};

static void query_finish(struct query *q, int err)
{
	if (q->fd >= 0)
		close(q->fd);
	q->fd = -1;
	q->err = err;
	q->done = 1;
}

/* Read what arrived; finish the query at "END" (success), EOF before it or an overflow. */
static void query_read(struct query *q)
{
	for (;;) {
		int r = sim_buf_fill(&q->in, q->fd);
		if (r == -EAGAIN)
			return;
		if (r <= 0) {
			query_finish(q, r == 0 ? -EPROTO : r);
			return;
		}
		if (q->in.len >= 4 && !memcmp(q->in.data + q->in.len - 4, "END\n", 4) &&
		    (q->in.len == 4 || q->in.data[q->in.len - 5] == '\n')) {
			query_finish(q, 0);
			return;
		}
	}
}

/* Run all `n` exchanges in parallel, each sending `request` from the source address `src` (the
 * local node's address, so that daemons can tell local from remote ctls; NULL: any), all bounded
 * by `timeout_ms` (milliseconds, the ctl's -t); queries already `done` are skipped.  Afterwards
 * every query is done; unanswered ones have err = -ETIMEDOUT. */
static void run_queries(struct query *qs, int n, const char *request, const char *src,
			int timeout_ms)
{
	int64_t deadline = sim_now_ms() + timeout_ms;
	for (int i = 0; i < n; i++) {
		struct query *q = &qs[i];
		if (q->done)
			continue; /* not to be asked */
		q->fd = q->sock ? sim_connect_unix_start(q->sock)
				: sim_connect_start_from(q->ip, q->port, src);
		if (q->fd < 0) {
			query_finish(q, q->fd);
			continue;
		}
		q->connecting = 1;
		sim_buf_printf(&q->out, "%s\n", request);
	}
	struct pollfd *fds = calloc((size_t)n, sizeof *fds);
	int *idx = calloc((size_t)n, sizeof *idx);
	for (;;) {
		int m = 0;
		for (int i = 0; fds && idx && i < n; i++) {
			if (qs[i].done)
				continue;
			short ev = qs[i].connecting || qs[i].out.len ? POLLOUT : POLLIN;
			fds[m] = (struct pollfd){.fd = qs[i].fd, .events = ev};
			idx[m++] = i;
		}
		int64_t left = deadline - sim_now_ms();
		if (m == 0 || left <= 0)
			break;
		if (poll(fds, (nfds_t)m, (int)left) < 0 && errno != EINTR)
			break;
		for (int k = 0; k < m; k++) {
			struct query *q = &qs[idx[k]];
			if (!fds[k].revents)
				continue;
			if (q->connecting) {
				int r = sim_connect_result(q->fd);
				if (r < 0) {
					query_finish(q, r);
					continue;
				}
				q->connecting = 0;
			}
			if (q->out.len) {
				int r = sim_buf_flush(&q->out, q->fd);
				if (r < 0)
					query_finish(q, r);
				continue;
			}
			query_read(q);
		}
	}
	for (int i = 0; i < n; i++)
		if (!qs[i].done)
			query_finish(&qs[i], -ETIMEDOUT);
	free(fds);
	free(idx);
}

/* Copy `src` into dst (size n), cut to fit. */
static void copy_field(char *dst, size_t n, const char *src)
{
	size_t len = strnlen(src, n - 1);
	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* Parse an answer ("STATE x", "VERSION v", "HOSTNAME h", "PEER id addr STATUS [ip]", ..., "END").
 */
static void parse_view(struct query *q, struct view *v)
{
	/* Not memset: a view is 17 KiB, and -N parses one per node on every call. */
	v->ok = v->npeers = 0;
	v->self_addr[0] = v->state[0] = v->version[0] = v->hostname[0] = '\0';
	v->self_id = -1;
	if (q->err < 0)
		return;
	char line[MAX_LINE];
	while (sim_buf_line(&q->in, line, sizeof line) == 1) {
		char a[SIM_ADDR_LEN], s[32], ip[SIM_ADDR_LEN];
		int id, k;
		if (sscanf(line, "NODE %d %63s", &id, a) == 2) {
			v->self_id = id;
			strcpy(v->self_addr, a);
		} else if (!strncmp(line, "STATE ", 6))
			copy_field(v->state, sizeof v->state, line + 6);
		else if (!strncmp(line, "VERSION ", 8))
			copy_field(v->version, sizeof v->version, line + 8);
		else if (!strncmp(line, "HOSTNAME ", 9))
			copy_field(v->hostname, sizeof v->hostname, line + 9);
		else if ((k = sscanf(line, "PEER %d %63s %31s %63s", &id, a, s, ip)) >= 3 &&
			 v->npeers < SIM_MAX_NODES) {
			strcpy(v->peer_addr[v->npeers], a);
			strcpy(v->peer_ip[v->npeers], k == 4 && strcmp(ip, "-") ? ip : "");
			v->peer_status[v->npeers++] = sim_conn_parse(s);
		}
	}
	v->ok = *v->state != '\0';
}

/* Node k's view of the node at `addr`: INVALID when k did not answer or does not know `addr`.
 * `hint`: where `addr` usually is in k's list (the same index when both run the same list), tried
 * first so that a whole domain costs N x N comparisons rather than N x N x N. */
static enum sim_conn conn_of(const struct view *v, const char *addr, int hint)
{
	if (!v->ok)
		return SIM_INVALID;
	if (hint >= 0 && hint < v->npeers && !strcmp(v->peer_addr[hint], addr))
		return v->peer_status[hint];
	for (int i = 0; i < v->npeers; i++)
		if (!strcmp(v->peer_addr[i], addr))
			return v->peer_status[i];
	return SIM_INVALID;
}

static const char *node_state(const struct view *v)
{
	return v->ok ? v->state : "UNAVAILABLE";
}

/* Domain status, by the rule of docs/design.md ("IMEX facts the code relies on", nvidia-imex-ctl;
 * a guess consistent with every real sample): UP when every node is READY and all its connections
 * are CONNECTED; DOWN when no node is READY; else DEGRADED. */
static const char *domain_status(const struct sim_nodes *nodes, const struct view *views)
{
	int all = 1, any = 0;
	for (int k = 0; k < nodes->count; k++) {
		int ready = views[k].ok && !strcmp(views[k].state, "READY");
		any |= ready;
		all &= ready;
		for (int j = 0; all && j < nodes->count; j++)
			all &= conn_of(&views[k], nodes->addr[j], j) == SIM_CONNECTED;
	}
	return all ? "UP" : any ? "DEGRADED" : "DOWN";
}

/* "M/D/YYYY HH:MM:SS.mmm" in local time, as in the real output. */
static void timestamp(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	snprintf(buf, len, "%d/%d/%d %02d:%02d:%02d.%03ld", tm.tm_mon + 1, tm.tm_mday,
		 tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* Options of one ctl run. */
struct opts {
	const char *cfg_path, *ip;
	const char *sock; /* -u SOCKET: the local daemon's command socket */
	int port;	  /* command port of the local daemon (-i PORT, else IMEX_CMD_PORT) */
	int node_port;	  /* IMEX_CMD_PORT: the command port of every node */
	int mode, json, hostnames, timeout_ms;
	const char *format;	/* IMEXSIM_CTL_FORMAT: "570", "570.00" or "580" */
	const char *hosts_file; /* IMEXSIM_HOSTS_FILE: names of the node list */
	int list_from_file;	/* IMEXSIM_CTL_NODE_LIST=file: -N shows the node file's list */
	int conn_own; /* IMEXSIM_CTL_CONNECTIONS=node: -N -j shows each node's own table */
	int v6_any;   /* the local daemon is [::]:port on a host without IPv6 (IMEXSIM_NO_IPV6) */
};

/* The "hostName" of node view `v` in -N -j, or NULL for none.  570 [guess]: only with -H, the
 * node's host name or "N/A" when it did not answer.  580 (docs/design.md, "IMEX facts"): always; ""
 * without -H, "N/A" for a node that did not answer [guess: with or without -H]. */
static const char *json_hostname(const struct opts *o, const struct view *v)
{
	if (!v->ok)
		return o->hostnames || !strcmp(o->format, "580") ? "N/A" : NULL;
	if (o->hostnames)
		return v->hostname;
	return strcmp(o->format, "580") ? NULL : "";
}

/* The -N -j layout of tests/fixtures/ctl/up-2node-570.json (one space of indent per level).
 * "changed" is true when the status differs from the initial one (UNAVAILABLE / INVALID): a guess
 * that fits both real samples.  "hostName": see json_hostname.  Node k's "connections" are its
 * view of the hosts of `nodes` under the local IDs (matched by address); with
 * IMEXSIM_CTL_CONNECTIONS=node, node k's own table instead: its IDs and its hosts, which may name
 * IDs or hosts absent from `nodes` when k holds another list (which form the real ctl uses is not
 * known). */
static void print_json(const struct opts *o, const struct sim_nodes *nodes,
		       const struct view *views, const char *status)
{
	char ts[64];
	timestamp(ts, sizeof ts);
	printf("{\n \"nodes\": {\n");
	for (int k = 0; k < nodes->count; k++) {
		const struct view *v = &views[k];
		printf("  \"%d\": {\n   \"status\": ", k);
		json_str(node_state(v));
		printf(",\n   \"host\": ");
		json_str(nodes->addr[k]);
		printf(",\n   \"connections\": {\n");
		/* IMEXSIM_CTL_CONNECTIONS=node: node k's own table (its IDs, its hosts). */
		int own = o->conn_own && v->ok;
		int nc = own ? v->npeers : nodes->count;
		for (int j = 0; j < nc; j++) {
			const char *host = own ? v->peer_addr[j] : nodes->addr[j];
			enum sim_conn c = own ? v->peer_status[j] : conn_of(v, host, j);
			printf("    \"%d\": {\n     \"host\": ", j);
			json_str(host);
			printf(",\n     \"status\": \"%s\",\n     \"changed\": %s\n    }%s\n",
			       sim_conn_name(c), c != SIM_INVALID ? "true" : "false",
			       j + 1 < nc ? "," : "");
		}
		printf("   },\n   \"changed\": %s,\n   \"version\": ", v->ok ? "true" : "false");
		json_str(v->ok ? v->version : "");
		const char *hn = json_hostname(o, v);
		if (hn) {
			printf(",\n   \"hostName\": ");
			json_str(hn);
		}
		printf("\n  }%s\n", k + 1 < nodes->count ? "," : "");
	}
	printf(" },\n \"timestamp\": \"%s\",\n \"status\": \"%s\"\n}\n", ts, status);
}

/* Print `line` without trailing blanks (the real matrix has none). */
static void put_trimmed(char *line)
{
	size_t n = strlen(line);
	while (n > 0 && line[n - 1] == ' ')
		line[--n] = '\0';
	puts(line);
}

/* The -N text layouts of the real ctl: IMEXSIM_CTL_FORMAT 570 and 580 print the layout of
 * tests/fixtures/ctl/up-18node-text.txt (8-line legend, Version column, 4-wide matrix, a blank
 * line before "Domain State"); 570.00 the older one of up-2node-570-00-text.txt (6-line legend,
 * no version, 3-wide matrix, no blank line).  -H adds a host name column after the address
 * ("- NAME", padded like the address; "N/A" for a node that did not answer) [guess]. */
static void print_text(const struct opts *o, const struct sim_nodes *nodes,
		       const struct view *views, const char *status)
{
	int old = !strcmp(o->format, "570.00");
	char ts[64];
	timestamp(ts, sizeof ts);
	fputs(
	    "Connectivity Table Legend:\n"
	    "I - Invalid - Node wasn't reachable, no connection status available\n"
	    "N - Never Connected\n"
	    "R - Recovering - Connection was lost, but clean up has not yet been triggered.\n"
	    "D - Disconnected - Connection was lost, and clean up has been triggreed.\n"
	    "A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.\n",
	    stdout);
	if (!old)
		fputs("!V! - Version mismatch, communication disabled.\n"
		      "!M! - Node map mismatch, communication disabled.\n",
		      stdout);
	fputs("C - Connected - Ready for operation\n\n", stdout);
	printf("%s\nNodes:\n", ts);
	for (int k = 0; k < nodes->count; k++) {
		const struct view *v = &views[k];
		printf("Node #%-4d- %-16s", k, nodes->addr[k]);
		if (o->hostnames)
			printf("- %-16s", v->ok ? v->hostname : "N/A");
		if (old)
			printf("- %s\n", node_state(v));
		else
			printf("- %-21s- Version: %s\n", node_state(v), v->ok ? v->version : "");
	}
	int w = old ? 3 : 4;
	char line[16 + 4 * SIM_MAX_NODES + 8];
	int n = snprintf(line, sizeof line, " Nodes From\\To  ");
	for (int j = 0; j < nodes->count; j++)
		n += snprintf(line + n, sizeof line - (size_t)n, "%-*d", w, j);
	putchar('\n');
	put_trimmed(line);
	for (int k = 0; k < nodes->count; k++) {
		n = snprintf(line, sizeof line, "%8d        ", k);
		for (int j = 0; j < nodes->count; j++)
			n += snprintf(line + n, sizeof line - (size_t)n, "%-*s", w,
				      sim_conn_letter(conn_of(&views[k], nodes->addr[j], j)));
		put_trimmed(line);
	}
	printf("%sDomain State: %s\n", old ? "" : "\n", status);
}

/* The node list -N shows, from the local daemon's answer `local`: by default the daemon's own node
 * map (its PEER lines, in ID order: the list it started with), so that a daemon started with
 * another order shows its own IDs after the file was rewritten [seen in a field report];
 * IMEXSIM_CTL_NODE_LIST=file: the node file of the ctl's config (`file`), the older guess. */
static void shown_list(const struct opts *o, const struct sim_nodes *file, const struct view *local,
		       struct sim_nodes *out)
{
	if (o->list_from_file || local->npeers == 0) {
		*out = *file;
		return;
	}
	out->count = local->npeers;
	for (int i = 0; i < local->npeers; i++)
		strcpy(out->addr[i], local->peer_addr[i]);
}

/* -N once: ask the local daemon (its STATUS answer gives its own ID and node map), then every other
 * node of the list shown (see shown_list) in parallel; print; return 0.  When the local daemon
 * does not answer, print what the real ctl printed for an unconfigured node
 * (tests/fixtures/ctl/down-unconfigured.json): one node 0.0.0.0, UNAVAILABLE, DOWN (a guess). */
static int domain_once(const struct opts *o, const struct sim_nodes *file)
{
	static struct sim_nodes nodes, down = {.count = 1, .addr = {"0.0.0.0"}};
	struct query *qs = calloc(SIM_MAX_NODES, sizeof *qs);
	struct view *views = calloc(SIM_MAX_NODES, sizeof *views);
	if (!qs || !views) {
		free(qs);
		free(views);
		fprintf(stderr, "nvidia-imex-ctl: out of memory\n");
		return 1;
	}
	qs[0].ip = o->ip;
	qs[0].port = o->port;
	qs[0].sock = o->sock;
	if (o->v6_any) { /* the same failure as -q's: the local daemon is not reached */
		qs[0].done = 1;
		qs[0].err = -EAFNOSUPPORT;
	}
	run_queries(qs, 1, "STATUS", o->ip, o->timeout_ms);
	struct view local;
	parse_view(&qs[0], &local);
	const char *status = "DOWN";
	const struct sim_nodes *shown = &down;
	if (local.ok) {
		shown_list(o, file, &local, &nodes);
		shown = &nodes;
		sim_nodes_resolve(&nodes, o->hosts_file);
		/* Ask each node where the local daemon finds it (its own resolver: a private hosts
		 * file bind-mounted into its unit is not the ctl's) [guess: whether the real ctl or
		 * the local daemon resolves the peers is not documented]. */
		for (int i = 0; i < nodes.count; i++)
			for (int j = 0; j < local.npeers; j++)
				if (*local.peer_ip[j] &&
				    !strcmp(local.peer_addr[j], nodes.addr[i])) {
					strcpy(nodes.ip[i], local.peer_ip[j]);
					break;
				}
		int self = sim_nodes_find(&nodes, local.self_addr);
		memset(qs, 0, sizeof *qs);
		for (int i = 0; i < nodes.count; i++) {
			qs[i].ip = *nodes.ip[i] ? nodes.ip[i] : nodes.addr[i];
			qs[i].port = o->node_port;
			/* answered above; no TCP command port: the others cannot be asked */
			qs[i].done = i == self || !o->node_port;
			if (qs[i].done && i != self)
				qs[i].err = -ECONNREFUSED;
		}
		run_queries(qs, nodes.count, "STATUS", o->ip, o->timeout_ms);
		for (int i = 0; i < nodes.count; i++) {
			if (i == self)
				views[i] = local;
			else
				parse_view(&qs[i], &views[i]);
		}
		status = domain_status(&nodes, views);
	}
	if (o->json)
		print_json(o, shown, views, status);
	else
		print_text(o, shown, views, status);
	fflush(stdout);
	free(qs);
	free(views);
	return 0;
}

/* -q: the local daemon's state on one line.  The error lines are the real ctl's gRPC messages
 * (tests/fixtures/ctl/errors.txt); code 4 for a timeout is a guess. */
static int query_local(const struct opts *o)
{
	struct query *q = calloc(1, sizeof *q);
	struct view *v = calloc(1, sizeof *v);
	int rc = 1;
	if (!q || !v) {
		fprintf(stderr, "nvidia-imex-ctl: out of memory\n");
		goto out;
	}
	q->ip = o->ip;
	q->port = o->port;
	q->sock = o->sock;
	if (o->v6_any) {
		q->done = 1;
		q->err = -EAFNOSUPPORT;
	}
	run_queries(q, 1, "QUERY", o->ip, o->timeout_ms);
	parse_view(q, v);
	if (v->ok) {
		printf("%s\n", v->state);
		rc = 0;
	} else if (q->err == -ETIMEDOUT) {
		printf("Query Status returned error code: 4 - Deadline Exceeded\n");
	} else if (q->err == -EPROTO) {
		printf("Query Status returned error code: 14 - Socket closed\n");
	} else if (o->sock) {
		printf("Query Status returned error code: 14 - failed to connect to all addresses; "
		       "last error: UNKNOWN: unix:%s: %s\n",
		       o->sock, strerror(-q->err));
	} else if (o->v6_any) {
		/* tests/fixtures/ctl/errors.txt: the real text, gRPC's spelling of [::] */
		printf("Query Status returned error code: 14 - failed to connect to all addresses; "
		       "last error: UNKNOWN: ipv6:%%5B::%%5D:%d: %s\n",
		       o->port, strerror(-q->err));
	} else {
		printf("Query Status returned error code: 14 - failed to connect to all addresses; "
		       "last error: UNKNOWN: ipv4:%s:%d: %s\n",
		       o->ip, o->port, strerror(-q->err));
	}
out:
	free(q);
	free(v);
	return rc;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: nvidia-imex-ctl [-c CONFIG] [-i IP PORT | -u SOCKET] (-q|-N|-n) [-j] [-H] "
		"[-t MS]   (imexsim: simulated IMEX ctl)\n");
	return 2;
}

int sim_ctl_main(int argc, char **argv)
{
	struct opts o = {.cfg_path = SIM_DEFAULT_CFG, .timeout_ms = 1000, .format = "570"};
	int cfg_given = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-c") && i + 1 < argc) {
			o.cfg_path = argv[++i];
			cfg_given = 1;
		} else if (!strcmp(a, "-i") && i + 2 < argc) {
			o.ip = argv[++i];
			o.port = atoi(argv[++i]);
			if (o.port <= 0 || o.port > 65535)
				return usage();
		} else if (!strcmp(a, "-u") && i + 1 < argc) {
			o.sock = argv[++i];
		} else if (!strcmp(a, "-t") && i + 1 < argc) {
			o.timeout_ms = atoi(argv[++i]);
			if (o.timeout_ms <= 0)
				return usage();
		} else if (!strcmp(a, "-q") || !strcmp(a, "-N") || !strcmp(a, "-n")) {
			if (o.mode && o.mode != a[1])
				return usage();
			o.mode = a[1];
		} else if (!strcmp(a, "-j")) {
			o.json = 1;
		} else if (!strcmp(a, "-H")) {
			o.hostnames = 1;
		} else {
			if (!strcmp(a, "-s"))
				fprintf(stderr, "nvidia-imex-ctl: %s is not simulated\n", a);
			return usage();
		}
	}
	if (!o.mode)
		return usage();

	/* With -i or -u, -q needs no file; everything else needs config.cfg and the node file.
	 * -u without -c: the default config when it can be read, else its defaults and the local
	 * daemon's node map [guess: what the real ctl reads with -u is not documented]. */
	static struct sim_config cfg;
	static struct sim_nodes nodes;
	if (o.sock && o.ip)
		return usage();
	if (!(o.mode == 'q' && (o.ip || o.sock))) {
		char err[SIM_PATH_LEN + 200];
		if (sim_config_read(o.cfg_path, &cfg, err, sizeof err) < 0) {
			if (o.sock && !cfg_given) {
				sim_config_read("/dev/null", &cfg, err, sizeof err);
				cfg.cmd_port = 0;
			} else {
				printf("Failed to read config file %s\n", err);
				return 255;
			}
		}
		o.node_port = cfg.cmd_port;
		o.hosts_file = cfg.hosts_file;
		o.format = cfg.ctl_format;
		o.list_from_file = cfg.ctl_list_from_file;
		o.conn_own = cfg.ctl_conn_own;
		if (sim_nodes_read(cfg.node_file, &nodes) < 0 && !(o.sock && !cfg_given)) {
			printf("Failed to read node configuration file %s\n", cfg.node_file);
			return 255;
		}
		sim_nodes_resolve(&nodes, cfg.hosts_file);
		/* The real ctl given only -c dials [::]:IMEX_CMD_PORT when
		 * IMEX_CMD_BIND_INTERFACE_IP is empty: on a kernel without IPv6 that fails
		 * (IMEXSIM_NO_IPV6, case C44); with IPv6 it reaches the daemon listening on all
		 * interfaces, which the simulator models by the node's own address (see the
		 * daemon's command port). */
		o.v6_any = !o.ip && !o.sock && !*cfg.cmd_bind_ip && cfg.no_ipv6;
		if (!o.ip && !o.sock) {
			int local = sim_nodes_first_local(&nodes);
			o.ip = *cfg.cmd_bind_ip ? cfg.cmd_bind_ip
			       : *cfg.bind_ip	? cfg.bind_ip
			       : local >= 0	? nodes.ip[local]
						: "127.0.0.1";
			o.port = cfg.cmd_port;
		}
	}
	if (o.mode == 'q')
		return query_local(&o);
	if (o.mode == 'N')
		return domain_once(&o, &nodes);
	for (;;) { /* -n: the real ctl refreshes continuously; we print every second */
		domain_once(&o, &nodes);
		struct timespec one = {.tv_sec = 1};
		nanosleep(&one, NULL);
	}
}
