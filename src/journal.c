/* SPDX-License-Identifier: Apache-2.0 */
/*
 * journal.c: host.journal_read, the last entries of the machine's journal that match a few fields,
 * read with sd-journal (libsystemd's reader, sd-journal(3)) and bounded by time, count and size.
 *
 * What for: the daemon's own words after a failed start (field case C50 of docs/design.md): the
 * entries of the unit's invocation (journald's trusted fields _SYSTEMD_UNIT and
 * _SYSTEMD_INVOCATION_ID tag what the unit's processes wrote on stdout/stderr or with syslog;
 * systemd.journal-fields(7)) since the start job was queued.
 *
 * How: sd_journal_open(SD_JOURNAL_LOCAL_ONLY) (this machine's journal files under /run/log/journal
 * and /var/log/journal), sd_journal_add_match for each "FIELD=value" (sd-journal: matches of one
 * field are OR'ed, matches of different fields AND'ed), sd_journal_seek_tail, then
 * sd_journal_previous until max_entries entries are kept or an entry is older than since_us (its
 * __REALTIME_TIMESTAMP).  The entries are returned oldest first.  A MESSAGE longer than max_bytes
 * is cut there (sd_journal_set_data_threshold also keeps a compressed field from being unpacked
 * whole; it does not cut uncompressed ones).
 *
 * Bounds: the journal is local files, read through mmap; no other process is waited for.  The
 * timeout (bounded by the run's budget) is checked after the journal is opened and before each
 * entry, so a walk over a long journal cannot outlast it.
 */
#include "imexguard.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-journal.h>

#define JOURNAL_MAX_MATCHES	16
#define JOURNAL_MAX_ENTRIES	1000
#define JOURNAL_DEFAULT_ENTRIES 20
#define JOURNAL_DEFAULT_BYTES	4096
#define JOURNAL_DEFAULT_WAIT	2.0 /* seconds */

static void journal_closep(sd_journal **j)
{
	if (*j)
		sd_journal_close(*j);
}

/* Whether s is "FIELD=value" with FIELD a journal field name: upper-case letters, digits and '_',
 * not starting with a digit, at most 64 characters (systemd's journal_field_valid, with the
 * leading '_' of the trusted fields allowed). */
static int valid_match(const char *s, size_t len)
{
	const char *eq = memchr(s, '=', len);
	size_t n;

	if (!eq)
		return 0;
	n = (size_t)(eq - s);
	if (n == 0 || n > 64 || (s[0] >= '0' && s[0] <= '9'))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return 0;
	return 1;
}

/* Set t[key] of the table on top of the stack to the value of FIELD of the current entry (a string
 * of at most max bytes, or an integer when as_int); nothing when the entry has no such field. */
static void push_field(lua_State *L, sd_journal *j, const char *field, const char *key, int as_int,
		       size_t max)
{
	const void *data;
	size_t len, flen = strlen(field);

	if (sd_journal_get_data(j, field, &data, &len) < 0 || len <= flen)
		return;
	const char *v = (const char *)data + flen + 1; /* past "FIELD=" */
	size_t vlen = len - flen - 1;
	if (vlen > max)
		vlen = max; /* sd_journal_set_data_threshold cuts compressed fields only */
	if (as_int) {
		char num[32];
		char *end;
		long long x;

		if (vlen == 0 || vlen >= sizeof num)
			return;
		memcpy(num, v, vlen);
		num[vlen] = '\0';
		x = strtoll(num, &end, 10);
		if (*end != '\0')
			return;
		lua_pushinteger(L, (lua_Integer)x);
	} else {
		lua_pushlstring(L, v, vlen);
	}
	lua_setfield(L, -2, key);
}

/* Options of journal_read, from the table at index idx (or none). */
struct jopts {
	lua_Integer since_us, max_entries, max_bytes;
	double timeout;
};

/* Set *value to the integer t[key] of the options table t at index idx, when it is not nil; a
 * value that is not an integer raises (luaL_checkinteger). */
static void opt_integer(lua_State *L, int idx, const char *key, lua_Integer *value)
{
	if (lua_getfield(L, idx, key) != LUA_TNIL)
		*value = luaL_checkinteger(L, -1);
	lua_pop(L, 1);
}

/* Read the options of journal_read from the table at index idx (none or nil: the defaults) into o;
 * raises on misuse. */
static void check_opts(lua_State *L, int idx, struct jopts *o)
{
	o->since_us = 0;
	o->max_entries = JOURNAL_DEFAULT_ENTRIES;
	o->max_bytes = JOURNAL_DEFAULT_BYTES;
	o->timeout = JOURNAL_DEFAULT_WAIT;
	if (lua_isnoneornil(L, idx))
		return;
	luaL_checktype(L, idx, LUA_TTABLE);
	opt_integer(L, idx, "since_us", &o->since_us);
	opt_integer(L, idx, "max_entries", &o->max_entries);
	opt_integer(L, idx, "max_bytes", &o->max_bytes);
	if (lua_getfield(L, idx, "timeout") != LUA_TNIL)
		o->timeout = luaL_checknumber(L, -1);
	lua_pop(L, 1);
	luaL_argcheck(L, o->since_us >= 0, idx, "since_us must be microseconds >= 0");
	luaL_argcheck(L, o->max_entries >= 1 && o->max_entries <= JOURNAL_MAX_ENTRIES, idx,
		      "max_entries must be 1..1000");
	luaL_argcheck(L, o->max_bytes >= 64 && o->max_bytes <= 65536, idx,
		      "max_bytes must be 64..65536");
	luaL_argcheck(L, o->timeout >= 0, idx, "timeout must be a number of seconds >= 0");
}

/* Add the matches of the list at index 1 to j; raises on misuse (before j is opened, the list is
 * checked by check_matches). Returns 0 or sd_journal_add_match's negative errno. */
static int add_matches(lua_State *L, sd_journal *j, lua_Integer n)
{
	for (lua_Integer i = 1; i <= n; i++) {
		size_t len;
		const char *m;
		int r;

		lua_geti(L, 1, i);
		m = lua_tolstring(L, -1, &len);
		r = sd_journal_add_match(j, m, len);
		lua_pop(L, 1);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The number of matches of the list at index 1, each checked ("FIELD=value"); raises on misuse. */
static lua_Integer check_matches(lua_State *L)
{
	lua_Integer n;

	luaL_checktype(L, 1, LUA_TTABLE);
	n = (lua_Integer)luaL_len(L, 1);
	luaL_argcheck(L, n >= 1 && n <= JOURNAL_MAX_MATCHES, 1,
		      "matches must be a list of 1..16 strings");
	for (lua_Integer i = 1; i <= n; i++) {
		size_t len;
		const char *m;

		if (lua_geti(L, 1, i) != LUA_TSTRING)
			luaL_argerror(L, 1, "every match must be a string \"FIELD=value\"");
		m = lua_tolstring(L, -1, &len);
		if (!valid_match(m, len))
			luaL_argerror(L, 1,
				      "a match is not \"FIELD=value\" with FIELD in [A-Z0-9_]");
		lua_pop(L, 1);
	}
	return n;
}

/*
 * host.journal_read(matches [, opts]) -> entries | nil, msg, code
 *   matches: list of 1..16 strings "FIELD=value" (e.g. "_SYSTEMD_UNIT=nvidia-imex.service",
 *   "_SYSTEMD_INVOCATION_ID=<32 hex>"); one field's values are OR'ed, different fields AND'ed.
 *   opts (table, optional): since_us (integer, microseconds since the epoch, CLOCK_REALTIME:
 *   older entries are not read; default 0), max_entries (1..1000, default 20: the newest ones),
 *   max_bytes (64..65536, default 4096: the most read of one field), timeout (seconds, default 2,
 *   bounded by the run's budget).
 *   Result: a list, oldest first, of {message = string (MESSAGE; "" when the entry has none),
 *   realtime_us = integer, priority = integer or nil (PRIORITY, syslog's 0..7), pid = integer or
 *   nil (_PID), identifier = string or nil (SYSLOG_IDENTIFIER)}; {} when nothing matches (also
 *   on a machine without journal files).
 *   Errors: the errno code of opening the journal or adding a match ("EACCES"...), or
 *   "timeout"/"deadline" when the bound passed during the walk (the message says after how many
 *   entries).
 */
int ig_host_journal_read(lua_State *L)
{
	_cleanup_(journal_closep) sd_journal *j = NULL;
	struct jopts o;
	lua_Integer n_matches = check_matches(L), kept = 0, seen = 0;
	int by_deadline = 0, r;
	double end;

	check_opts(L, 2, &o);
	end = ig_now() + ig_bound(o.timeout, &by_deadline);
	r = sd_journal_open(&j, SD_JOURNAL_LOCAL_ONLY);
	if (r < 0)
		return ig_push_error(L, ig_code(r), "journal: cannot open the journal: %s",
				     strerror(-r));
	(void)sd_journal_set_data_threshold(j, (size_t)o.max_bytes);
	r = add_matches(L, j, n_matches);
	if (r < 0)
		return ig_push_error(L, ig_code(r), "journal: cannot add a match: %s",
				     strerror(-r));
	r = sd_journal_seek_tail(j);
	if (r < 0)
		return ig_push_error(L, ig_code(r), "journal: cannot seek to its end: %s",
				     strerror(-r));
	lua_createtable(L, (int)o.max_entries, 0);
	while (kept < o.max_entries) {
		uint64_t usec;

		if (ig_now() >= end) {
			lua_pop(L, 1);
			return ig_push_error(L, by_deadline ? "deadline" : "timeout",
					     "journal: not read within %.3g s (%lld entries read)",
					     o.timeout, (long long)seen);
		}
		r = sd_journal_previous(j);
		if (r < 0) {
			lua_pop(L, 1);
			return ig_push_error(L, ig_code(r), "journal: reading an entry: %s",
					     strerror(-r));
		}
		if (r == 0)
			break; /* the start of the journal */
		seen++;
		if (sd_journal_get_realtime_usec(j, &usec) < 0)
			continue;
		if ((lua_Integer)usec < o.since_us)
			break;
		lua_createtable(L, 0, 5);
		lua_pushliteral(L, "");
		lua_setfield(L, -2, "message");
		push_field(L, j, "MESSAGE", "message", 0, (size_t)o.max_bytes);
		lua_pushinteger(L, (lua_Integer)usec);
		lua_setfield(L, -2, "realtime_us");
		push_field(L, j, "PRIORITY", "priority", 1, 32);
		push_field(L, j, "_PID", "pid", 1, 32);
		push_field(L, j, "SYSLOG_IDENTIFIER", "identifier", 0, 256);
		lua_seti(L, -2, ++kept);
	}
	/* newest first as read: reverse into oldest first */
	for (lua_Integer a = 1, b = kept; a < b; a++, b--) {
		lua_geti(L, -1, a);
		lua_geti(L, -2, b);
		lua_seti(L, -3, a);
		lua_seti(L, -2, b);
	}
	return 1;
}
