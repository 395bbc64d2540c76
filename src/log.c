/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c: one event = one plain line on stderr (slurmd copies a prolog's stderr into its own log)
 * plus, when enabled, one journald entry (sd_journal_sendv, systemd's native protocol) with
 * MESSAGE, PRIORITY (syslog level), SYSLOG_IDENTIFIER=imexguard and the event's fields.
 *
 * The stderr line is "imexguard: <level>: <message>\n", written with a single write(2) so lines of
 * concurrent prologs do not interleave; CR and LF inside the message become spaces.  journald is
 * off when the environment has IMEXGUARD_NO_JOURNAL=1 (read at each event) or after
 * ig_log_setup(0, ...).  A journald failure (no socket, e.g. in a container) is ignored: the stderr
 * line is the record of last resort.  ig_log_journal_first (the final line of a command a person
 * runs, whose result is on stdout) writes the stderr line only when the journal did not take the
 * entry, so that the result is printed once.
 *
 * For the end of a run by a signal or by the watchdog (watchdog.c), where only async-signal-safe
 * calls are allowed, ig_journal_prepare builds the entry ahead of time as one datagram of
 * systemd's native journal protocol (the format sd_journal_sendv writes: "KEY=value\n" per field,
 * or "KEY\n", the value's length as 64-bit little endian, the value and "\n" when the value holds a
 * newline) and opens an unconnected AF_UNIX datagram socket; ig_journal_send_prepared then needs
 * sendto(2) only.
 */
/* <syslog.h> (also included by sd-journal.h) defines syslog's table of priority names,
 * prioritynames: the number of each level name */
#define SYSLOG_NAMES

#include "generated.h"
#include "imexguard.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <syslog.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#define JOURNAL_SOCKET "/run/systemd/journal/socket" /* systemd-journald.socket(8) */

static volatile sig_atomic_t g_journal = 1; /* read by ig_journal_send_prepared in a handler */
static int g_jfd = -1;			    /* the socket of ig_journal_send_prepared */
static enum ig_level g_min_level = IG_INFO;

/* The syslog priority called `name` (prioritynames, syslog.h), or -1. */
static int syslog_priority(const char *name)
{
	for (const CODE *c = prioritynames; c->c_name; c++)
		if (strcmp(c->c_name, name) == 0)
			return c->c_val;
	return -1;
}

/* ig_level_of: see imexguard.h. */
int ig_level_of(const char *name)
{
	for (size_t i = 0; ig_log_levels[i]; i++)
		if (strcmp(ig_log_levels[i], name) == 0)
			return syslog_priority(name);
	return -1;
}

/* ig_level_name: see imexguard.h.  A level that ig_log_levels does not name (a build whose
 * settings.lua lost one) gets syslog's first name for it. */
const char *ig_level_name(enum ig_level level)
{
	if (level < IG_ERR || level > IG_DEBUG)
		level = IG_ERR;
	for (size_t i = 0; ig_log_levels[i]; i++)
		if (syslog_priority(ig_log_levels[i]) == (int)level)
			return ig_log_levels[i];
	for (const CODE *c = prioritynames; c->c_name; c++)
		if (c->c_val == (int)level)
			return c->c_name;
	return "?";
}

/* Turn journald output on (1) or off (0), and print on stderr only events at or above
 * min_level in severity (numerically <= min_level; default IG_INFO). */
void ig_log_setup(int journal, enum ig_level min_level)
{
	g_journal = journal;
	g_min_level = min_level;
}

/* ig_blank_crlf: see imexguard.h. */
char *ig_blank_crlf(char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] == '\n' || s[i] == '\r')
			s[i] = ' ';
	return s;
}

/* One line (see imexguard.h): CR and LF become spaces, a longer text is cut with "...". */
char *ig_one_line(char *dst, size_t size, const char *src)
{
	if (size == 0)
		return dst;
	size_t n = strnlen(src, size - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
	ig_blank_crlf(dst, n);
	if (src[n] && size > 4)
		memcpy(dst + size - 4, "...", 4);
	return dst;
}

static int journal_enabled(void)
{
	const char *env = getenv("IMEXGUARD_NO_JOURNAL");
	return g_journal && !(env && strcmp(env, "1") == 0);
}

static void write_stderr(const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t w = write(STDERR_FILENO, buf, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		buf += w;
		len -= (size_t)w;
	}
}

/* Send one event to journald; 0 when sent, -1 when the journal is off or did not take it. */
static int send_journal(enum ig_level level, const char *message, const char *const *fields,
			size_t nfields)
{
	if (!journal_enabled())
		return -1;
	struct iovec *iov = calloc(nfields + 3, sizeof *iov);
	char *msg = malloc(strlen(message) + sizeof "MESSAGE=");
	char prio[16];
	int rc = -1;
	if (!iov || !msg)
		goto out;
	sprintf(msg, "MESSAGE=%s", message);
	snprintf(prio, sizeof prio, "PRIORITY=%d", (int)level);
	iov[0] = (struct iovec){.iov_base = msg, .iov_len = strlen(msg)};
	iov[1] = (struct iovec){.iov_base = prio, .iov_len = strlen(prio)};
	iov[2] = (struct iovec){.iov_base = (char *)"SYSLOG_IDENTIFIER=imexguard",
				.iov_len = strlen("SYSLOG_IDENTIFIER=imexguard")};
	for (size_t i = 0; i < nfields; i++)
		iov[3 + i] =
		    (struct iovec){.iov_base = (char *)fields[i], .iov_len = strlen(fields[i])};
	rc = sd_journal_sendv(iov, (int)(nfields + 3)) < 0 ? -1 : 0;
out:
	free(iov);
	free(msg);
	return rc;
}

/* Emit one event: message (any length), nfields journald fields "KEY=value".  journal_first: the
 * stderr line only when the journal did not take the entry (ig_log_journal_first). */
static void emit(enum ig_level level, const char *message, const char *const *fields,
		 size_t nfields, int journal_first)
{
	if (level < IG_ERR || level > IG_DEBUG)
		level = IG_ERR;
	/* sd_journal_sendv fails silently (returns 0) when journald's socket does not exist: a
	 * missing socket is looked for first, so that the line is then written on stderr */
	if (journal_first && access(JOURNAL_SOCKET, W_OK) == 0 &&
	    send_journal(level, message, fields, nfields) == 0)
		return;
	const char *lname = ig_level_name(level);
	if (level <= g_min_level) {
		size_t mlen = strlen(message);
		size_t len = strlen("imexguard: ") + strlen(lname) + 2 + mlen + 1;
		char *line = malloc(len + 1);
		if (line) {
			int n = snprintf(line, len + 1, "imexguard: %s: ", lname);
			ig_one_line(line + n, len + 1 - (size_t)n, message);
			strcat(line, "\n");
			write_stderr(line, strlen(line));
			free(line);
		}
	}
	if (!journal_first)
		(void)send_journal(level, message, fields,
				   nfields); /* failures ignored (see top) */
}

/* Append one native-protocol field "KEY=value" (a complete field string) to buf at *off; 0, or
 * -ENOSPC when it does not fit (buf unchanged past *off). */
static int put_field(char *buf, size_t size, size_t *off, const char *field)
{
	const char *eq = strchr(field, '=');
	size_t flen = strlen(field);
	if (!eq || !strchr(eq, '\n')) {
		if (*off + flen + 1 > size)
			return -ENOSPC;
		memcpy(buf + *off, field, flen);
		buf[*off + flen] = '\n';
		*off += flen + 1;
		return 0;
	}
	size_t klen = (size_t)(eq - field), vlen = flen - klen - 1;
	if (*off + klen + 1 + 8 + vlen + 1 > size)
		return -ENOSPC;
	char *p = buf + *off;
	memcpy(p, field, klen);
	p += klen;
	*p++ = '\n';
	for (int i = 0; i < 8; i++)
		*p++ = (char)(((uint64_t)vlen >> (8 * i)) & 0xff);
	memcpy(p, eq + 1, vlen);
	p += vlen;
	*p++ = '\n';
	*off = (size_t)(p - buf);
	return 0;
}

/* Build the journal entry of a run's end by a signal or the watchdog (see imexguard.h). */
int ig_journal_prepare(char *buf, size_t size, size_t *len, enum ig_level level,
		       const char *message, const char *const *fields)
{
	char prio[16], *msg = NULL;
	size_t off = 0;
	int rc = 0;
	*len = 0;
	if (!journal_enabled())
		return 0; /* IMEXGUARD_NO_JOURNAL=1 or turned off: an empty datagram is never sent
			   */
	if (g_jfd < 0)
		g_jfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (g_jfd < 0)
		return -errno;
	if (asprintf(&msg, "MESSAGE=%s", message) < 0)
		return -ENOMEM;
	snprintf(prio, sizeof prio, "PRIORITY=%d", (int)level);
	const char *head[] = {msg, prio, "SYSLOG_IDENTIFIER=imexguard"};
	for (size_t i = 0; i < 3 && rc == 0; i++)
		rc = put_field(buf, size, &off, head[i]);
	for (size_t i = 0; fields && fields[i] && rc == 0; i++)
		rc = put_field(buf, size, &off, fields[i]);
	free(msg);
	if (rc == 0)
		*len = off;
	return rc;
}

/* Send a datagram of ig_journal_prepare (see imexguard.h): async-signal-safe. */
void ig_journal_send_prepared(const char *buf, size_t len)
{
	static const struct sockaddr_un addr = {.sun_family = AF_UNIX, .sun_path = JOURNAL_SOCKET};
	if (len == 0 || g_jfd < 0 || !g_journal)
		return;
	(void)sendto(g_jfd, buf, len, MSG_NOSIGNAL, (const struct sockaddr *)&addr,
		     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + sizeof JOURNAL_SOCKET));
	/* failures ignored (see top): the stderr line remains */
}

/* Format and emit one event (ig_log, ig_log_journal_first). */
static void vlog(enum ig_level level, const char *const *fields, int journal_first, const char *fmt,
		 va_list ap)
{
	char *message = NULL;
	if (vasprintf(&message, fmt, ap) < 0)
		return;
	size_t nfields = 0;
	while (fields && fields[nfields])
		nfields++;
	emit(level, message, fields, nfields, journal_first);
	free(message);
}

/* Log one event (see imexguard.h).  level: IG_ERR..IG_DEBUG; fields: NULL-terminated array of
 * complete journald fields "KEY=value" (C callers name them IMEXGUARD_<KEY>), may be NULL;
 * fmt: printf format of the message. */
void ig_log(enum ig_level level, const char *const *fields, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(level, fields, 0, fmt, ap);
	va_end(ap);
}

/* Log one event to the journal only, or on stderr when the journal is off or did not take it
 * (see imexguard.h). */
void ig_log_journal_first(enum ig_level level, const char *const *fields, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(level, fields, 1, fmt, ap);
	va_end(ap);
}

/* host.log(level, message [, fields]) -> nothing.
 * level: a name of ig_log_levels (settings.lua's LEVELS: syslog levels 7..3); message: string
 * (newlines become spaces on stderr); fields: table of string keys to string/number/boolean values,
 * sent to journald as IMEXGUARD_<KEY>=value (key upper-cased, characters other than A-Z 0-9 become
 * '_', cut to journald's 64-character field names; e.g. {job = "101"} -> IMEXGUARD_JOB=101).  Never
 * fails: journald errors are ignored. */
int ig_host_log(lua_State *L)
{
	int level = ig_level_of(ig_log_levels[luaL_checkoption(L, 1, NULL, ig_log_levels)]);
	luaL_argcheck(L, level >= 0, 1, "not a syslog level");
	const char *message = luaL_checkstring(L, 2);
	size_t nfields = 0;
	const char **fields = NULL;
	if (!lua_isnoneornil(L, 3)) {
		luaL_checktype(L, 3, LUA_TTABLE);
		lua_settop(L, 3);
		for (lua_pushnil(L); lua_next(L, 3); lua_pop(L, 1))
			nfields++;
		fields = lua_newuserdatauv(L, sizeof(char *) * (nfields + 1), 0); /* index 4 */
		lua_createtable(L, (int)nfields, 0); /* index 5: keeps the strings alive */
		size_t i = 0;
		for (lua_pushnil(L); lua_next(L, 3); lua_pop(L, 1)) {
			if (lua_type(L, -2) != LUA_TSTRING)
				return luaL_argerror(L, 3, "field names must be strings");
			int vt = lua_type(L, -1);
			if (vt != LUA_TSTRING && vt != LUA_TNUMBER && vt != LUA_TBOOLEAN)
				return luaL_argerror(L, 3,
						     "field values must be strings, numbers or "
						     "booleans");
			char key[64 - sizeof "IMEXGUARD_" + 1];
			size_t k = 0;
			for (const char *c = lua_tostring(L, -2); *c && k < sizeof key - 1; c++) {
				unsigned char u = (unsigned char)*c;
				key[k++] = isalnum(u) && u < 128 ? (char)toupper(u) : '_';
			}
			key[k] = '\0';
			const char *value = luaL_tolstring(L, -1, NULL);
			lua_pushfstring(L, "IMEXGUARD_%s=%s", key, value);
			lua_remove(L, -2);
			fields[i] = lua_tostring(L, -1);
			lua_rawseti(L, 5, (lua_Integer)++i);
		}
		fields[nfields] = NULL;
	}
	emit((enum ig_level)level, message, fields, nfields, 0);
	return 0;
}
