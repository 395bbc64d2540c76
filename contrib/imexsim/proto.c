/* SPDX-License-Identifier: Apache-2.0 */
/* imexsim: clock, non-blocking TCP and unix socket helpers, line buffers and the connection status
 * names. */
#include "imexsim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int64_t sim_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Fill *sa with IPv4 `ip`:`port`; -EINVAL when `ip` is not an IPv4 literal. */
static int make_addr(struct sockaddr_in *sa, const char *ip, int port)
{
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	return inet_pton(AF_INET, ip, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

int sim_listen(const char *ip, int port)
{
	struct sockaddr_in sa;
	if (make_addr(&sa, ip, port) < 0)
		return -EINVAL;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, SIM_LISTEN_BACKLOG) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* Fill *sa with the unix socket `path`; -ENAMETOOLONG when it does not fit. */
static int make_unix(struct sockaddr_un *sa, const char *path)
{
	memset(sa, 0, sizeof *sa);
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sa->sun_path)
		return -ENAMETOOLONG;
	strcpy(sa->sun_path, path);
	return 0;
}

int sim_listen_unix(const char *path)
{
	struct sockaddr_un sa;
	struct stat st;
	int r = make_unix(&sa, path);
	if (r < 0)
		return r;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		unlink(path); /* left by a daemon that was killed */
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, SIM_LISTEN_BACKLOG) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

int sim_connect_unix_start(const char *path)
{
	struct sockaddr_un sa;
	int r = make_unix(&sa, path);
	if (r < 0)
		return r;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS &&
	    errno != EAGAIN) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

int sim_connect_start(const char *ip, int port)
{
	return sim_connect_start_from(ip, port, NULL);
}

int sim_connect_start_from(const char *ip, int port, const char *src)
{
	struct sockaddr_in sa, from;
	if (make_addr(&sa, ip, port) < 0)
		return -EINVAL;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (src && make_addr(&from, src, 0) == 0) {
		/* Linux: choose the source port at connect time, not at bind time, so that many
		 * short exchanges do not exhaust the ephemeral ports of one source address. */
		int one = 1;
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
		if (bind(fd, (struct sockaddr *)&from, sizeof from) < 0) {
			/* not a local address: let the kernel choose the source */
		}
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

int sim_connect_result(int fd)
{
	int e = 0;
	socklen_t len = sizeof e;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
		return -errno;
	return -e;
}

int sim_buf_fill(struct sim_buf *b, int fd)
{
	if (b->len == sizeof b->data)
		return -EMSGSIZE;
	ssize_t r = read(fd, b->data + b->len, sizeof b->data - b->len);
	if (r < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	b->len += (size_t)r;
	return (int)r;
}

int sim_buf_fill_all(struct sim_buf *b, int fd)
{
	for (;;) {
		int r = sim_buf_fill(b, fd);
		if (r == -EAGAIN)
			return 0;
		if (r <= 0)
			return 1;
	}
}

int sim_buf_line(struct sim_buf *b, char *line, size_t len)
{
	char *nl = memchr(b->data, '\n', b->len);
	if (!nl)
		return 0;
	size_t n = (size_t)(nl - b->data);
	if (n >= len)
		return -EMSGSIZE;
	memcpy(line, b->data, n);
	line[n] = '\0';
	if (n > 0 && line[n - 1] == '\r')
		line[n - 1] = '\0';
	b->len -= n + 1;
	memmove(b->data, nl + 1, b->len);
	return 1;
}

int sim_buf_printf(struct sim_buf *b, const char *fmt, ...)
{
	size_t room = sizeof b->data - b->len;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b->data + b->len, room, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= room)
		return -EMSGSIZE;
	b->len += (size_t)n;
	return 0;
}

int sim_buf_flush(struct sim_buf *b, int fd)
{
	while (b->len > 0) {
		ssize_t w = send(fd, b->data, b->len, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -errno;
		}
		b->len -= (size_t)w;
		memmove(b->data, b->data + w, b->len);
	}
	return (int)b->len;
}

/* Each connection status: its JSON name (CONNECTED, INVALID, NEVER_CONNECTED and RECOVERING are
 * seen in real output; the other four spellings are guesses, README.md) and its letter in the real
 * "Connectivity Table Legend" (tests/fixtures/ctl/up-18node-text.txt). */
static const struct {
	const char *name;
	const char *letter;
} conns[SIM_CONN_COUNT] = {
    [SIM_INVALID] = {"INVALID", "I"},
    [SIM_NEVER_CONNECTED] = {"NEVER_CONNECTED", "N"},
    [SIM_CONNECTED] = {"CONNECTED", "C"},
    [SIM_RECOVERING] = {"RECOVERING", "R"},
    [SIM_DISCONNECTED] = {"DISCONNECTED", "D"},
    [SIM_AUTHENTICATING] = {"AUTHENTICATING", "A"},
    [SIM_VERSION_MISMATCH] = {"VERSION_MISMATCH", "!V!"},
    [SIM_NODE_MAP_MISMATCH] = {"NODE_MAP_MISMATCH", "!M!"},
};

const char *sim_conn_name(enum sim_conn s)
{
	return conns[(unsigned)s < SIM_CONN_COUNT ? s : SIM_INVALID].name;
}

const char *sim_conn_letter(enum sim_conn s)
{
	return conns[(unsigned)s < SIM_CONN_COUNT ? s : SIM_INVALID].letter;
}

enum sim_conn sim_conn_parse(const char *name)
{
	for (int i = 0; i < SIM_CONN_COUNT; i++)
		if (!strcmp(conns[i].name, name))
			return (enum sim_conn)i;
	return SIM_INVALID;
}
