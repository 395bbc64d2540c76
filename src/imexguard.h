/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imexguard: the C host's shared declarations.
 *
 * Conventions (every file of src/ follows them):
 *  - Internal C functions return 0 (or a count) on success and a negative errno on failure;
 *    -ETIMEDOUT means "the step's own timeout expired", -ETIME means "the run's global deadline
 *    (budget) ran out first".  They clean up on every path (by hand, or with _cleanup_ below).
 *    This is the one way an error travels inside C: a function that also explains its failure
 *    takes a message buffer (char *err, size_t errlen) and writes one line there that names the
 *    input (made one line by ig_one_line); a constructor that returns a pointer returns NULL with
 *    that message.  unit.c's bus work takes a struct unit_err instead: the message, the short
 *    code its primitive returns and, for a failed job, the job's and the unit's results.
 *  - Lua primitives check their arguments with luaL_check* (misuse raises) and report runtime
 *    failure as nil, a one-line message that names the input, and a short code string (see
 *    ig_push_error); two add a fourth value that describes the failure: lock's holder on a
 *    timeout (lock.c) and unit_job's {job_result, unit_result, active_state} for a job that
 *    ended but not "done" (unit.c).  They never exit and never raise on a runtime failure.
 *  - Every blocking primitive is bounded by min(its own timeout, ig_remaining()).
 *  - Times are seconds as lua_Number (double) unless a name ends in _us (microseconds) or _ms.
 */
#ifndef IMEXGUARD_H
#define IMEXGUARD_H

#include <lauxlib.h>
#include <lua.h>
#include <stdarg.h>
#include <stddef.h>

#define IG_VERSION "0.1.0"

/* Call f(&var) when var goes out of scope, on every path (GCC's and Clang's cleanup attribute, as
 * systemd writes it): `_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;`. */
#define _cleanup_(f) __attribute__((cleanup(f)))

/* ---- clock.c: monotonic clock and the global deadline ------------------------------------ */

/* Monotonic clock (CLOCK_MONOTONIC), in seconds. */
double ig_now(void);
/* Wall clock (CLOCK_REALTIME), in seconds since the Unix epoch. */
double ig_wallclock(void);
/* Set the global budget to `seconds` from now (seconds <= 0 or INFINITY: no deadline). */
void ig_set_deadline(double seconds);
/* Absolute monotonic time of the deadline in seconds (INFINITY when none is set). */
double ig_deadline(void);
/* Seconds left of the global budget, >= 0 (INFINITY when no deadline is set). */
double ig_remaining(void);
/* Bound a step's own timeout (seconds) by the budget: min(timeout, ig_remaining()).
 * *by_deadline (may be NULL) is set to 1 when the budget is the tighter bound. */
double ig_bound(double timeout, int *by_deadline);
/* Sleep `seconds` (CLOCK_MONOTONIC, restarting on EINTR) but never past the deadline.
 * Returns 0, or -ETIME when the deadline cut the sleep short. */
int ig_sleep(double seconds);

/* ---- error helpers (clock.c) ------------------------------------------------------------- */

/* Short code for a negative errno: -ETIMEDOUT -> "timeout", -ETIME -> "deadline",
 * otherwise the symbolic name ("ENOENT", "EACCES", "ENOSPC", ...). */
const char *ig_code(int neg_errno);
/* Push nil, message (printf format), code; return 3.  Use as `return ig_push_error(...)`. */
int ig_push_error(lua_State *L, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Set t[key] = value on the table on top of the stack (value NULL: nil, so nothing is set);
 * the stack is left as it was.  For the result tables of the primitives. */
static inline void ig_set_string(lua_State *L, const char *key, const char *value)
{
	lua_pushstring(L, value);
	lua_setfield(L, -2, key);
}
/* Set t[key] = value (a Lua integer) on the table on top of the stack. */
static inline void ig_set_integer(lua_State *L, const char *key, lua_Integer value)
{
	lua_pushinteger(L, value);
	lua_setfield(L, -2, key);
}

/* Push the metatable called tname in the registry, made on the first call in the Lua state
 * (luaL_newmetatable): meta's functions (__gc, __close...) and, when methods is not NULL, an
 * __index table of methods.  Set it on a new userdata with lua_setmetatable(L, -2); then
 * luaL_checkudata(L, i, tname) finds it. */
static inline void ig_push_metatable(lua_State *L, const char *tname, const luaL_Reg *meta,
				     const luaL_Reg *methods)
{
	if (!luaL_newmetatable(L, tname))
		return;
	luaL_setfuncs(L, meta, 0);
	if (methods) {
		lua_newtable(L);
		luaL_setfuncs(L, methods, 0);
		lua_setfield(L, -2, "__index");
	}
}

/* Copy src into dst (size bytes) as one line: every CR and every LF becomes a space (ig_blank_crlf)
 * and a text longer than size - 1 bytes is cut, ending in "...".  Returns dst. (log.c) */
char *ig_one_line(char *dst, size_t size, const char *src);
/* Make the len bytes at s one line in place: every CR and every LF becomes a space.  Returns s.
 * (log.c) */
char *ig_blank_crlf(char *s, size_t len);

/* ---- file.c: bounded reads (systemd's read_full_stream / read_full_file) ------------------- */

/* Read fd to its end into a malloc'ed NUL-terminated buffer (*out, *len bytes without the NUL)
 * of at most max_bytes bytes; size_hint: the file's st_size in bytes.  Restarts on EINTR.
 * Returns 0, -EFBIG (more than max_bytes), -ENOMEM or read(2)'s negative errno.  fd stays open. */
int ig_read_full_fd(int fd, size_t size_hint, size_t max_bytes, char **out, size_t *len);
/* Open `path` (symlinks followed) and read it as ig_read_full_fd.  Returns 0, or -EFBIG, -EISDIR,
 * -EINVAL (not a regular file), -ENOMEM, or the negative errno of open/fstat/read. */
int ig_read_full_file(const char *path, size_t max_bytes, char **out, size_t *len);

/* ---- the primitives: host.NAME is ig_host_NAME (host.c's table) ----------------------------- */

/* Each is the lua_CFunction of one field of the host table: its arguments on L's stack, it
 * pushes its results and returns their count.  The comment at its definition gives its
 * arguments, results (types, units), errors and where its behaviour comes from;
 * docs/policy-api.md is the policy's view of the same. */
int ig_host_now(lua_State *L);			/* clock.c: monotonic seconds */
int ig_host_wallclock(lua_State *L);		/* clock.c: seconds since the Unix epoch */
int ig_host_localtime(lua_State *L);		/* clock.c: the local civil time of a time */
int ig_host_remaining(lua_State *L);		/* clock.c: seconds left of the budget */
int ig_host_sleep(lua_State *L);		/* clock.c: sleep, never past the deadline */
int ig_host_set_deadline(lua_State *L);		/* clock.c: the budget (busted module only) */
int ig_host_read(lua_State *L);			/* file.c: a file, bounded */
int ig_host_read_tail(lua_State *L);		/* file.c: a growing file's end */
int ig_host_stat(lua_State *L);			/* file.c: lstat(2) */
int ig_host_write_atomic(lua_State *L);		/* file.c: a file replaced by rename(2) */
int ig_host_write_in_place(lua_State *L);	/* file.c: a same-size write in place */
int ig_host_remove_temps(lua_State *L);		/* file.c: temp files of write_atomic left behind */
int ig_host_mknod_char(lua_State *L);		/* file.c: a character device node */
int ig_host_mkdir(lua_State *L);		/* file.c: a directory */
int ig_host_lock(lua_State *L);			/* lock.c: the node lock, with a timed wait */
int ig_host_lock_holder(lua_State *L);		/* lock.c: who holds the node lock */
int ig_host_run(lua_State *L);			/* run.c: run an argv to its end */
int ig_host_spawn(lua_State *L);		/* run.c: start an argv, wait later */
int ig_host_unit(lua_State *L);			/* unit.c: a unit's properties */
int ig_host_unit_job(lua_State *L);		/* unit.c: start/stop/restart, waited for */
int ig_host_unit_reset_failed(lua_State *L);	/* unit.c: ResetFailedUnit */
int ig_host_unit_kill(lua_State *L);		/* unit.c: KillUnit */
int ig_host_unit_set_bus(lua_State *L);		/* unit.c: the bus (busted module only) */
int ig_host_unit_start_transient(lua_State *L); /* transient.c: a service of imexguard's own */
int ig_host_log(lua_State *L);			/* log.c: a line on stderr and the journal */
int ig_host_local_addresses(lua_State *L);	/* net.c: this host's addresses */
int ig_host_resolve(lua_State *L);		/* net.c: IPv4 resolution with a timeout */
int ig_host_hostname(lua_State *L);		/* net.c: the kernel's node name */
int ig_host_euid(lua_State *L);			/* net.c: the effective user id */
int ig_host_port_owner(lua_State *L);		/* proc.c: who listens on a TCP port */
int ig_host_socket_owner(lua_State *L);		/* proc.c: who listens on a unix socket */
int ig_host_file_holders(lua_State *L);		/* proc.c: who holds a file open */
int ig_host_xml_parse(lua_State *L);		/* xml.c: an XML document as tables */
int ig_host_journal_read(lua_State *L);		/* journal.c: matching journal entries */

/* The registry name of the metatable of host.spawn's process handles (run.c); host.c times their
 * methods. */
#define IG_PROCESS_MT "imexguard.process"
/* Push the metatable of host.spawn's process handles (ig_push_metatable): methods wait, pid and
 * close; __close and __gc kill and reap an unwaited process.  (run.c) */
void ig_push_process_metatable(lua_State *L);

/* host.c: the module table `imexguard.host` (also the entry point of the Lua C module). */
int luaopen_imexguard_host(lua_State *L);

/* ---- log.c: used by the C side too ---------------------------------------------------------- */
/* The levels: syslog's priorities (syslog(3)); their names are lua/imexguard/settings.lua's
 * LEVELS (ig_log_levels, generated.h). */
enum ig_level { IG_ERR = 3, IG_WARNING = 4, IG_NOTICE = 5, IG_INFO = 6, IG_DEBUG = 7 };
/* The name of a level (one of ig_log_levels); that of IG_ERR for a value outside
 * IG_ERR..IG_DEBUG.  The string is static. */
const char *ig_level_name(enum ig_level level);
/* The level called `name` (a name of ig_log_levels, the setting log_level's values), or -1 for
 * any other name. */
int ig_level_of(const char *name);
/* Log one event: a plain line "imexguard: LEVEL: message" on stderr (what slurmd keeps) and,
 * when enabled and reachable, a journald entry with MESSAGE, PRIORITY, SYSLOG_IDENTIFIER and
 * the given extra "KEY=value" fields (NULL-terminated array, may be NULL). */
void ig_log(enum ig_level level, const char *const *fields, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Log one event as ig_log does, but to the journal only: the stderr line is written only when the
 * journal is off (IMEXGUARD_NO_JOURNAL=1, the setting log_journal) or did not take the entry (no
 * journald). For the final line of a command whose result a person reads on stdout (commands.lua's
 * interactive), so that the result is printed once. */
void ig_log_journal_first(enum ig_level level, const char *const *fields, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Turn journald output on or off (default on); stderr lines at or above `min_level` only. */
void ig_log_setup(int journal, enum ig_level min_level);
/* Prepare, outside any handler, the journald entry of a run ended by a signal or the watchdog:
 * writes into buf (size bytes) one datagram of systemd's native journal protocol with MESSAGE,
 * PRIORITY (level), SYSLOG_IDENTIFIER=imexguard and the "KEY=value" fields (NULL-terminated, may
 * be NULL), sets *len (0 when the journal is off: IMEXGUARD_NO_JOURNAL=1 or ig_log_setup(0)),
 * and opens the datagram socket once.  Returns 0, -ENOSPC (buf too small, *len 0) or -errno. */
int ig_journal_prepare(char *buf, size_t size, size_t *len, enum ig_level level,
		       const char *message, const char *const *fields);
/* Send a prepared datagram to /run/systemd/journal/socket with sendto(2), unless len is 0 or the
 * journal was turned off since; errors ignored.  Async-signal-safe (POSIX: sendto). */
void ig_journal_send_prepared(const char *buf, size_t len);

#endif
