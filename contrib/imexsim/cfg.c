/* SPDX-License-Identifier: Apache-2.0 */
/* imexsim: config.cfg and node file parsing (formats from NVIDIA's IMEX guide, see docs/design.md,
 * "IMEX facts the code relies on", Files). */
#include "imexsim.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Trim leading and trailing blanks of `s` in place; returns the start. */
static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

/* Parse a decimal integer in [lo, hi]; returns 0 or -EINVAL. */
static int parse_int(const char *v, int lo, int hi, int *out)
{
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end != '\0' || x < lo || x > hi)
		return -EINVAL;
	*out = (int)x;
	return 0;
}

/* Parse a decimal number (e.g. "1.5") in [lo, hi]; returns 0 or -EINVAL. */
static int parse_double(const char *v, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end != '\0' || !(x >= lo && x <= hi))
		return -EINVAL;
	*out = x;
	return 0;
}

/* Copy `v` into dst (size n); -EINVAL when it does not fit. */
static int copy_str(char *dst, size_t n, const char *v)
{
	if (strlen(v) >= n)
		return -EINVAL;
	strcpy(dst, v);
	return 0;
}

/* How a config.cfg key is checked and stored in struct sim_config. */
enum kind {
	K_INT,	  /* an int in [lo, hi] */
	K_DOUBLE, /* a double in [lo, hi] */
	K_STR,	  /* a string, at most size - 1 bytes */
	K_TOKEN,  /* a string of at least lo bytes without blanks (one token of the handshake and
		     the STATUS answer) */
	K_IDS,	  /* a string of node IDs: digits and commas */
	K_PORT,	  /* an int in [lo, hi], or the empty value: 0 (the service is off) */
	K_CHOICE, /* an int: the index of the value among `choices` */
	K_ONE_OF, /* a string: one of `choices` */
};

static const char *const who[] = {"0", "1", "remote", NULL}; /* SIM_WHO_* by index */
_Static_assert(SIM_WHO_NONE == 0 && SIM_WHO_ALL == 1 && SIM_WHO_REMOTE == 2,
	       "who[] is by SIM_WHO_*");
static const char *const goodbye[] = {"RECOVERING", "DISCONNECTED", NULL};
static const char *const node_list[] = {"daemon", "file", NULL};
static const char *const connections[] = {"local", "node", NULL};
static const char *const clears[] = {"both", "one", NULL};
static const char *const formats[] = {"570", "570.00", "580", NULL};

/* A field of struct sim_config: its offset and size in bytes. */
#define FIELD(f) offsetof(struct sim_config, f), sizeof(((struct sim_config *)0)->f)

/* The keys read (README.md, "config.cfg keys" and the fault knobs); unknown keys are ignored (the
 * real config has many more). */
static const struct key {
	const char *name;
	enum kind kind;
	size_t off, size;
	double lo, hi;
	const char *const *choices;
} keys[] = {
    {"SERVER_PORT", K_INT, FIELD(server_port), 1, 65535, NULL},
    {"IMEX_CMD_PORT", K_PORT, FIELD(cmd_port), 1, 65535, NULL},
    {"IMEX_CMD_UNIX_DOMAIN_PATH", K_STR, FIELD(cmd_unix_path), 0, 0, NULL},
    {"IMEX_CMD_ENABLED", K_INT, FIELD(cmd_enabled), 0, 1, NULL},
    {"DAEMONIZE", K_INT, FIELD(daemonize), 0, 1, NULL},
    {"IMEX_CMD_BIND_INTERFACE_IP", K_STR, FIELD(cmd_bind_ip), 0, 0, NULL},
    {"BIND_INTERFACE_IP", K_STR, FIELD(bind_ip), 0, 0, NULL},
    {"IMEX_NODE_CONFIG_FILE", K_STR, FIELD(node_file), 0, 0, NULL},
    {"LOG_FILE_NAME", K_STR, FIELD(log_file), 0, 0, NULL},
    {"IMEX_WAIT_FOR_QUORUM", K_STR, FIELD(wait_for_quorum), 0, 0, NULL},
    {"IMEXSIM_VERSION", K_TOKEN, FIELD(version), 1, 0, NULL},
    {"IMEXSIM_HOSTNAME", K_TOKEN, FIELD(hostname), 0, 0, NULL},
    {"IMEXSIM_RECONNECT_MS", K_INT, FIELD(reconnect_ms), 1, 3600000, NULL},
    {"IMEXSIM_RECONNECT_FACTOR", K_DOUBLE, FIELD(reconnect_factor), 1.0, 100.0, NULL},
    {"IMEXSIM_RECONNECT_MAX_MS", K_INT, FIELD(reconnect_max_ms), 1, 3600000, NULL},
    {"IMEXSIM_USR1_INTERVAL_MS", K_INT, FIELD(usr1_interval_ms), 0, 3600000, NULL},
    {"IMEXSIM_GOODBYE_STATUS", K_CHOICE, FIELD(goodbye_disconnected), 0, 0, goodbye},
    {"IMEXSIM_CTL_FORMAT", K_ONE_OF, FIELD(ctl_format), 0, 0, formats},
    {"IMEXSIM_CTL_NODE_LIST", K_CHOICE, FIELD(ctl_list_from_file), 0, 0, node_list},
    {"IMEXSIM_CTL_CONNECTIONS", K_CHOICE, FIELD(ctl_conn_own), 0, 0, connections},
    {"IMEXSIM_MISMATCH_CLEARS", K_CHOICE, FIELD(mismatch_clears_one), 0, 0, clears},
    {"IMEXSIM_PID_FILE", K_STR, FIELD(pid_file), 0, 0, NULL},
    {"IMEXSIM_STATE_FILE", K_STR, FIELD(state_file), 0, 0, NULL},
    {"IMEXSIM_HOSTS_FILE", K_STR, FIELD(hosts_file), 0, 0, NULL},
    {"IMEXSIM_SESSION_FILE", K_STR, FIELD(session_file), 0, 0, NULL},
    {"IMEXSIM_NO_IPV6", K_INT, FIELD(no_ipv6), 0, 1, NULL},
    {"IMEXSIM_CONNECT_TIMEOUT_MS", K_INT, FIELD(connect_timeout_ms), 1, 3600000, NULL},
    {"IMEXSIM_DROP_SYN_MS", K_INT, FIELD(drop_syn_ms), 0, 3600000, NULL},
    {"IMEXSIM_NEVER_READY", K_INT, FIELD(never_ready), 0, 1, NULL},
    {"IMEXSIM_HANG_CMD", K_CHOICE, FIELD(hang_cmd), 0, 0, who},
    {"IMEXSIM_REFUSE_CMD", K_CHOICE, FIELD(refuse_cmd), 0, 0, who},
    {"IMEXSIM_REFUSE_PEERS", K_INT, FIELD(refuse_peers), 0, 1, NULL},
    {"IMEXSIM_EXIT_AT_START", K_INT, FIELD(exit_at_start), 0, 255, NULL},
    {"IMEXSIM_START_DELAY_MS", K_INT, FIELD(start_delay_ms), 0, 3600000, NULL},
    {"IMEXSIM_CRASH_AFTER_MS", K_INT, FIELD(crash_after_ms), 0, 3600000, NULL},
    {"IMEXSIM_EXIT_AFTER_MS", K_INT, FIELD(exit_after_ms), 0, 3600000, NULL},
    {"IMEXSIM_EXIT_STATUS", K_INT, FIELD(exit_status), 0, 255, NULL},
    {"IMEXSIM_DROP_PEERS", K_IDS, FIELD(drop_peers), 0, 0, NULL},
};

/* The index of `v` among the NULL-terminated `choices`, or -1. */
static int choice(const char *const *choices, const char *v)
{
	for (int i = 0; choices[i]; i++)
		if (!strcmp(choices[i], v))
			return i;
	return -1;
}

/* Check `v` as `key` says and store it in c.  Returns 0 or -EINVAL. */
static int store(struct sim_config *c, const struct key *key, const char *v)
{
	char *field = (char *)c + key->off;
	int i;

	switch (key->kind) {
	case K_PORT:
		if (*v == '\0') {
			*(int *)(void *)field = 0;
			return 0;
		}
		return parse_int(v, (int)key->lo, (int)key->hi, (int *)(void *)field);
	case K_INT:
		return parse_int(v, (int)key->lo, (int)key->hi, (int *)(void *)field);
	case K_DOUBLE:
		return parse_double(v, key->lo, key->hi, (double *)(void *)field);
	case K_TOKEN:
		for (const char *p = v; *p; p++)
			if (isspace((unsigned char)*p))
				return -EINVAL;
		if (strlen(v) < (size_t)key->lo)
			return -EINVAL;
		return copy_str(field, key->size, v);
	case K_IDS:
		if (strspn(v, "0123456789,") != strlen(v))
			return -EINVAL;
		return copy_str(field, key->size, v);
	case K_CHOICE:
		if ((i = choice(key->choices, v)) < 0)
			return -EINVAL;
		*(int *)(void *)field = i;
		return 0;
	case K_ONE_OF:
		if (choice(key->choices, v) < 0)
			return -EINVAL;
		return copy_str(field, key->size, v);
	case K_STR:
		break;
	}
	return copy_str(field, key->size, v);
}

/* Store one KEY=VALUE pair; unknown keys are ignored (the real config has many more). */
static int set_key(struct sim_config *c, const char *k, const char *v)
{
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (!strcmp(k, keys[i].name))
			return store(c, &keys[i], v);
	return 0;
}

int sim_config_read(const char *path, struct sim_config *c, char *err, size_t errlen)
{
	memset(c, 0, sizeof *c);
	c->server_port = 50000;
	c->cmd_port = 50005;
	c->cmd_enabled = 1;
	c->daemonize = 1;
	c->exit_status = 1;
	c->reconnect_ms = 300;
	c->reconnect_factor = 2.0;
	c->reconnect_max_ms = 2000;
	c->usr1_interval_ms = 5000;
	c->connect_timeout_ms = 20000;
	strcpy(c->node_file, "/etc/nvidia-imex/nodes_config.cfg");
	strcpy(c->wait_for_quorum, "RECOVERY");
	strcpy(c->version, SIM_DEFAULT_VERS);
	if (copy_str(c->path, sizeof c->path, path) < 0) {
		snprintf(err, errlen, "%s: path too long", path);
		return -ENAMETOOLONG;
	}

	FILE *f = fopen(path, "re");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	char line[SIM_PATH_LEN + 128];
	int rc = 0, lineno = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		char *s = trim(line);
		if (*s == '\0' || *s == '#')
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%d: not KEY=VALUE: %.80s", path, lineno, s);
			rc = -EINVAL;
			break;
		}
		*eq = '\0';
		char *k = trim(s), *v = trim(eq + 1);
		if (set_key(c, k, v) < 0) {
			snprintf(err, errlen, "%s:%d: bad value for %s: %.80s", path, lineno, k, v);
			rc = -EINVAL;
			break;
		}
	}
	if (rc == 0 && ferror(f)) {
		rc = -EIO;
		snprintf(err, errlen, "%s: read error", path);
	}
	fclose(f);
	/* The ctl comes with the driver: its format follows the version unless set. */
	if (!*c->ctl_format)
		strcpy(c->ctl_format, sim_version_major(c->version) >= 580 ? "580" : "570");
	return rc;
}

int sim_version_major(const char *version)
{
	long major = 0;
	for (const char *p = version; *p >= '0' && *p <= '9' && major < 100000; p++)
		major = major * 10 + (*p - '0');
	return (int)major;
}

int sim_nodes_read(const char *path, struct sim_nodes *n)
{
	n->count = 0;
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	char line[512];
	int rc = 0;
	while (fgets(line, sizeof line, f)) {
		char *s = trim(line);
		if (*s == '\0' || *s == '#')
			continue;
		if (n->count == SIM_MAX_NODES || strlen(s) >= SIM_ADDR_LEN) {
			rc = -E2BIG;
			break;
		}
		strcpy(n->addr[n->count++], s);
	}
	if (rc == 0 && ferror(f))
		rc = -EIO;
	fclose(f);
	if (rc == 0 && n->count == 0)
		rc = -ENODATA;
	return rc < 0 ? rc : n->count;
}

int sim_nodes_find(const struct sim_nodes *n, const char *addr)
{
	for (int i = 0; i < n->count; i++)
		if (!strcmp(n->addr[i], addr))
			return i;
	for (int i = 0; i < n->count; i++)
		if (*n->ip[i] && !strcmp(n->ip[i], addr))
			return i;
	return -1;
}

/* The address of `name` in the hosts file at `path` into out (size len): 0, or -ENOENT. */
static int hosts_lookup(const char *path, const char *name, char *out, size_t len)
{
	FILE *f = fopen(path, "re");
	char line[1024];
	int rc = -ENOENT;
	if (!f)
		return -ENOENT;
	while (rc < 0 && fgets(line, sizeof line, f)) {
		line[strcspn(line, "#\n")] = '\0';
		char *save = NULL, *a = strtok_r(line, " \t", &save), *nm;
		while (a && (nm = strtok_r(NULL, " \t", &save)))
			if (!strcmp(nm, name) && strlen(a) < len) {
				strcpy(out, a);
				rc = 0;
				break;
			}
	}
	fclose(f);
	return rc;
}

int sim_resolve(const char *entry, const char *hosts_file, char *out, size_t len)
{
	struct in_addr a;
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
	if (len == 0)
		return -EINVAL;
	out[0] = '\0';
	if (inet_pton(AF_INET, entry, &a) == 1) {
		if (strlen(entry) >= len)
			return -ENOENT;
		strcpy(out, entry);
		return 0;
	}
	if (hosts_file && *hosts_file && hosts_lookup(hosts_file, entry, out, len) == 0)
		return 0; /* from the private hosts file */
	if (getaddrinfo(entry, NULL, &hints, &res) != 0)
		return -ENOENT;
	if (!inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)res->ai_addr)->sin_addr, out,
		       (socklen_t)len))
		out[0] = '\0';
	freeaddrinfo(res);
	return *out ? 0 : -ENOENT;
}

int sim_nodes_resolve(struct sim_nodes *n, const char *hosts_file)
{
	int missing = 0;
	for (int i = 0; i < n->count; i++)
		missing += sim_resolve(n->addr[i], hosts_file, n->ip[i], sizeof n->ip[i]) < 0;
	return missing;
}

uint64_t sim_nodes_hash(const struct sim_nodes *n)
{
	uint64_t h = 1469598103934665603ULL;
	for (int i = 0; i < n->count; i++) {
		for (const char *p = n->addr[i];; p++) {
			h ^= (unsigned char)(*p ? *p : '\n');
			h *= 1099511628211ULL;
			if (!*p)
				break;
		}
	}
	return h;
}

int sim_nodes_first_local(const struct sim_nodes *n)
{
	struct ifaddrs *ifs;
	if (getifaddrs(&ifs) < 0)
		return -1;
	int best = -1;
	for (int i = 0; i < n->count && best < 0; i++) {
		struct in_addr a;
		if (inet_pton(AF_INET, *n->ip[i] ? n->ip[i] : n->addr[i], &a) != 1)
			continue;
		for (struct ifaddrs *p = ifs; p; p = p->ifa_next) {
			if (p->ifa_addr && p->ifa_addr->sa_family == AF_INET &&
			    ((struct sockaddr_in *)(void *)p->ifa_addr)->sin_addr.s_addr ==
				a.s_addr) {
				best = i;
				break;
			}
		}
	}
	freeifaddrs(ifs);
	return best;
}
