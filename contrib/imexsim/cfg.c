/* imexsim: config.cfg and node file parsing (formats from NVIDIA's IMEX guide, see docs/design.md,
 * "IMEX facts the code relies on", Files). */
#include "imexsim.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
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

/* Parse a SIM_WHO_* knob value: "0", "1" or "remote"; returns 0 or -EINVAL. */
static int parse_who(const char *v, int *out)
{
	if (!strcmp(v, "remote")) {
		*out = SIM_WHO_REMOTE;
		return 0;
	}
	return parse_int(v, 0, 1, out);
}

/* Copy `v` into dst (size n); -EINVAL when it does not fit. */
static int copy_str(char *dst, size_t n, const char *v)
{
	if (strlen(v) >= n)
		return -EINVAL;
	strcpy(dst, v);
	return 0;
}

/* Store one KEY=VALUE pair; unknown keys are ignored (the real config has many more). */
static int set_key(struct sim_config *c, const char *k, const char *v)
{
	if (!strcmp(k, "SERVER_PORT"))
		return parse_int(v, 1, 65535, &c->server_port);
	if (!strcmp(k, "IMEX_CMD_PORT"))
		return parse_int(v, 1, 65535, &c->cmd_port);
	if (!strcmp(k, "IMEX_CMD_ENABLED"))
		return parse_int(v, 0, 1, &c->cmd_enabled);
	if (!strcmp(k, "DAEMONIZE"))
		return parse_int(v, 0, 1, &c->daemonize);
	if (!strcmp(k, "IMEXSIM_RECONNECT_MS"))
		return parse_int(v, 1, 3600000, &c->reconnect_ms);
	if (!strcmp(k, "IMEXSIM_RECONNECT_FACTOR"))
		return parse_double(v, 1.0, 100.0, &c->reconnect_factor);
	if (!strcmp(k, "IMEXSIM_RECONNECT_MAX_MS"))
		return parse_int(v, 1, 3600000, &c->reconnect_max_ms);
	if (!strcmp(k, "IMEXSIM_USR1_INTERVAL_MS"))
		return parse_int(v, 0, 3600000, &c->usr1_interval_ms);
	if (!strcmp(k, "IMEXSIM_GOODBYE_STATUS")) {
		if (strcmp(v, "RECOVERING") && strcmp(v, "DISCONNECTED"))
			return -EINVAL;
		c->goodbye_disconnected = !strcmp(v, "DISCONNECTED");
		return 0;
	}
	if (!strcmp(k, "IMEXSIM_CTL_FORMAT")) {
		if (strcmp(v, "570") && strcmp(v, "570.00") && strcmp(v, "580"))
			return -EINVAL;
		return copy_str(c->ctl_format, sizeof c->ctl_format, v);
	}
	if (!strcmp(k, "IMEXSIM_CTL_NODE_LIST")) {
		if (strcmp(v, "daemon") && strcmp(v, "file"))
			return -EINVAL;
		c->ctl_list_from_file = !strcmp(v, "file");
		return 0;
	}
	if (!strcmp(k, "IMEXSIM_CTL_CONNECTIONS")) {
		if (strcmp(v, "local") && strcmp(v, "node"))
			return -EINVAL;
		c->ctl_conn_own = !strcmp(v, "node");
		return 0;
	}
	if (!strcmp(k, "IMEXSIM_HOSTNAME")) {
		/* One token of the STATUS answer, like the version. */
		for (const char *p = v; *p; p++)
			if (isspace((unsigned char)*p))
				return -EINVAL;
		return copy_str(c->hostname, sizeof c->hostname, v);
	}
	if (!strcmp(k, "IMEXSIM_NEVER_READY"))
		return parse_int(v, 0, 1, &c->never_ready);
	if (!strcmp(k, "IMEXSIM_HANG_CMD"))
		return parse_who(v, &c->hang_cmd);
	if (!strcmp(k, "IMEXSIM_REFUSE_CMD"))
		return parse_who(v, &c->refuse_cmd);
	if (!strcmp(k, "IMEXSIM_REFUSE_PEERS"))
		return parse_int(v, 0, 1, &c->refuse_peers);
	if (!strcmp(k, "IMEXSIM_EXIT_AT_START"))
		return parse_int(v, 0, 255, &c->exit_at_start);
	if (!strcmp(k, "IMEXSIM_START_DELAY_MS"))
		return parse_int(v, 0, 3600000, &c->start_delay_ms);
	if (!strcmp(k, "IMEXSIM_CRASH_AFTER_MS"))
		return parse_int(v, 0, 3600000, &c->crash_after_ms);
	if (!strcmp(k, "IMEXSIM_EXIT_AFTER_MS"))
		return parse_int(v, 0, 3600000, &c->exit_after_ms);
	if (!strcmp(k, "IMEXSIM_EXIT_STATUS"))
		return parse_int(v, 0, 255, &c->exit_status);
	if (!strcmp(k, "IMEXSIM_DROP_PEERS")) {
		for (const char *p = v; *p; p++)
			if (!isdigit((unsigned char)*p) && *p != ',')
				return -EINVAL;
		return copy_str(c->drop_peers, sizeof c->drop_peers, v);
	}
	if (!strcmp(k, "IMEX_CMD_BIND_INTERFACE_IP"))
		return copy_str(c->cmd_bind_ip, sizeof c->cmd_bind_ip, v);
	if (!strcmp(k, "BIND_INTERFACE_IP"))
		return copy_str(c->bind_ip, sizeof c->bind_ip, v);
	if (!strcmp(k, "IMEX_NODE_CONFIG_FILE"))
		return copy_str(c->node_file, sizeof c->node_file, v);
	if (!strcmp(k, "LOG_FILE_NAME"))
		return copy_str(c->log_file, sizeof c->log_file, v);
	if (!strcmp(k, "IMEX_WAIT_FOR_QUORUM"))
		return copy_str(c->wait_for_quorum, sizeof c->wait_for_quorum, v);
	if (!strcmp(k, "IMEXSIM_PID_FILE"))
		return copy_str(c->pid_file, sizeof c->pid_file, v);
	if (!strcmp(k, "IMEXSIM_STATE_FILE"))
		return copy_str(c->state_file, sizeof c->state_file, v);
	if (!strcmp(k, "IMEXSIM_VERSION")) {
		/* The version travels as one token of the handshake and the STATUS answer. */
		for (const char *p = v; *p; p++)
			if (isspace((unsigned char)*p))
				return -EINVAL;
		if (!*v)
			return -EINVAL;
		return copy_str(c->version, sizeof c->version, v);
	}
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
	strcpy(c->ctl_format, "570");
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
	return rc;
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
	return -1;
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
		if (inet_pton(AF_INET, n->addr[i], &a) != 1)
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
