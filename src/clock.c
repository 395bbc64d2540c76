/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.c: the monotonic clock, the run's global deadline (budget), bounded sleep, and the
 * error helpers every primitive uses (ig_code, ig_push_error).
 *
 * All durations are seconds as double.  The deadline is an absolute CLOCK_MONOTONIC instant, so
 * it is immune to wall-clock steps (NTP, an admin running `date`), as POSIX specifies for
 * CLOCK_MONOTONIC.  The state is per process (one run = one process); the Lua state that uses it
 * is single-threaded.
 */
#include "imexguard.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Absolute CLOCK_MONOTONIC time of the deadline in seconds; INFINITY: no deadline. */
static double g_deadline = INFINITY;

/* The largest sleep/timeout we convert to a timespec (about 31 years): keeps time_t in range. */
#define IG_MAX_SECONDS 1e9

static double ts_to_double(const struct timespec *ts)
{
	return (double)ts->tv_sec + (double)ts->tv_nsec / 1e9;
}

/* Absolute instant `t` (seconds, finite, >= 0) as a timespec, rounded up to the nanosecond so
 * that a sleep to it never ends before `t`. */
static struct timespec double_to_ts(double t)
{
	struct timespec ts;
	if (!(t > 0))
		t = 0;
	if (t > IG_MAX_SECONDS * 4)
		t = IG_MAX_SECONDS * 4;
	ts.tv_sec = (time_t)t;
	ts.tv_nsec = (long)ceil((t - (double)ts.tv_sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* Monotonic clock (POSIX CLOCK_MONOTONIC) in seconds; the epoch is unspecified (boot). */
double ig_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts_to_double(&ts);
}

/* Wall clock (POSIX CLOCK_REALTIME) in seconds since the Unix epoch, sub-second. */
double ig_wallclock(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts_to_double(&ts);
}

/* Set the budget to `seconds` (double) from now.  seconds <= 0, NaN or INFINITY: no deadline. */
void ig_set_deadline(double seconds)
{
	if (!(seconds > 0) || isinf(seconds) || seconds > IG_MAX_SECONDS)
		g_deadline = INFINITY;
	else
		g_deadline = ig_now() + seconds;
}

/* Absolute CLOCK_MONOTONIC deadline in seconds, INFINITY when none. */
double ig_deadline(void)
{
	return g_deadline;
}

/* Seconds (double, >= 0) left of the budget; INFINITY when no deadline is set. */
double ig_remaining(void)
{
	if (isinf(g_deadline))
		return INFINITY;
	double left = g_deadline - ig_now();
	return left > 0 ? left : 0;
}

/* min(timeout, ig_remaining()) in seconds, never negative (a negative or NaN timeout counts as 0).
 * *by_deadline (may be NULL) is 1 when the budget is strictly the tighter bound, else 0. */
double ig_bound(double timeout, int *by_deadline)
{
	double left = ig_remaining();
	if (!(timeout > 0))
		timeout = 0;
	int dl = left < timeout;
	if (by_deadline)
		*by_deadline = dl;
	return dl ? left : timeout;
}

/* Sleep `seconds` on CLOCK_MONOTONIC with an absolute target (clock_nanosleep TIMER_ABSTIME,
 * POSIX), so a signal that interrupts it (EINTR) does not stretch the total: the call resumes
 * towards the same instant.  Negative or NaN: no sleep.  Never sleeps past the deadline.
 * Returns 0, or -ETIME when the deadline cut the sleep short (the call then ends at the deadline).
 */
int ig_sleep(double seconds)
{
	if (!(seconds > 0))
		seconds = 0;
	if (seconds > IG_MAX_SECONDS)
		seconds = IG_MAX_SECONDS;
	double target = ig_now() + seconds;
	int cut = 0;
	if (g_deadline < target) {
		target = g_deadline;
		cut = 1;
	}
	struct timespec ts = double_to_ts(target);
	int rc;
	do
		rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	while (rc == EINTR);
	return cut ? -ETIME : 0;
}

/* Short code for a negative errno (see imexguard.h): "timeout" for -ETIMEDOUT, "deadline" for
 * -ETIME, else the symbolic errno name from glibc's strerrorname_np (glibc >= 2.32), or "EUNKNOWN".
 * The string is static. */
const char *ig_code(int neg_errno)
{
	if (neg_errno == -ETIMEDOUT)
		return "timeout";
	if (neg_errno == -ETIME)
		return "deadline";
	const char *name = strerrorname_np(neg_errno < 0 ? -neg_errno : neg_errno);
	return name ? name : "EUNKNOWN";
}

/* Push the runtime-failure triple nil, message, code and return 3 (imexguard.h convention).
 * The message is formatted with vsnprintf and made one line (CR/LF become spaces). */
int ig_push_error(lua_State *L, const char *code, const char *fmt, ...)
{
	char small[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	lua_pushnil(L);
	if (n < 0) {
		lua_pushstring(L, fmt);
	} else {
		luaL_Buffer b;
		char *p = luaL_buffinitsize(L, &b, (size_t)n + 1);
		if ((size_t)n < sizeof small) {
			memcpy(p, small, (size_t)n + 1);
		} else {
			va_start(ap, fmt);
			vsnprintf(p, (size_t)n + 1, fmt, ap);
			va_end(ap);
		}
		ig_blank_crlf(p, (size_t)n);
		luaL_pushresultsize(&b, (size_t)n);
	}
	lua_pushstring(L, code);
	return 3;
}

/* ---- Lua primitives ------------------------------------------------------------------------- */

/* host.now() -> number: monotonic seconds (CLOCK_MONOTONIC). */
int ig_host_now(lua_State *L)
{
	lua_pushnumber(L, ig_now());
	return 1;
}

/* host.wallclock() -> number: seconds since the Unix epoch (CLOCK_REALTIME), sub-second. */
int ig_host_wallclock(lua_State *L)
{
	lua_pushnumber(L, ig_wallclock());
	return 1;
}

/* host.localtime([seconds]) -> table: the local civil time of `seconds` since the Unix epoch
 * (default: now, the wall clock) in this process's time zone: the TZ environment variable, else
 * /etc/localtime (tzset(3), localtime_r(3); TZ is read again at each call).  Fields: year (e.g.
 * 2026), month (1-12), day (1-31), hour (0-23), min (0-59), sec (0-60), wday (1-7, 1 = Sunday, as
 * Lua's os.date), yday (1-366), isdst (boolean), utc_offset (seconds east of UTC, tm_gmtoff) and
 * zone (the abbreviation, e.g. "CET").  The sandbox has no `os` (no os.date): a policy with a rule
 * of local hours reads them here.  Errors: nil, msg, "EOVERFLOW" for a time localtime_r cannot
 * represent; a NaN or infinite `seconds` raises. */
int ig_host_localtime(lua_State *L)
{
	double t = luaL_optnumber(L, 1, ig_wallclock());
	luaL_argcheck(L, isfinite(t), 1, "seconds must be finite");
	struct tm tm;
	/* beyond about 30 million years a year no longer fits tm_year: refused before the cast */
	if (!(t > -1e15 && t < 1e15))
		return ig_push_error(L, "EOVERFLOW", "localtime %.6g: not a representable time", t);
	time_t tt = (time_t)floor(t);
	tzset();
	if (localtime_r(&tt, &tm) == NULL)
		return ig_push_error(L, "EOVERFLOW", "localtime %.6g: not a representable time", t);
	static const struct {
		const char *name;
		int off;
	} ints[] = {{"year", 1900}, {"month", 1}, {"day", 0},  {"hour", 0},
		    {"min", 0},	    {"sec", 0},	  {"wday", 1}, {"yday", 1}};
	const int values[] = {tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour,
			      tm.tm_min,  tm.tm_sec, tm.tm_wday, tm.tm_yday};
	lua_createtable(L, 0, 11);
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
		lua_pushinteger(L, (lua_Integer)values[i] + ints[i].off);
		lua_setfield(L, -2, ints[i].name);
	}
	lua_pushboolean(L, tm.tm_isdst > 0);
	lua_setfield(L, -2, "isdst");
	lua_pushinteger(L, (lua_Integer)tm.tm_gmtoff);
	lua_setfield(L, -2, "utc_offset");
	lua_pushstring(L, tm.tm_zone ? tm.tm_zone : "");
	lua_setfield(L, -2, "zone");
	return 1;
}

/* host.remaining() -> number: seconds left of the run's budget, math.huge when none is set. */
int ig_host_remaining(lua_State *L)
{
	lua_pushnumber(L, ig_remaining());
	return 1;
}

/* host.sleep(seconds) -> true, or nil, msg, "deadline" when the budget cut the sleep short
 * (the call returns at the deadline).  seconds: number; negative sleeps 0; NaN raises. */
int ig_host_sleep(lua_State *L)
{
	double s = luaL_checknumber(L, 1);
	luaL_argcheck(L, s == s, 1, "seconds is NaN");
	double left = ig_remaining();
	if (ig_sleep(s) == -ETIME)
		return ig_push_error(
		    L, "deadline", "sleep %.3f s cut short: the run's deadline passed after %.3f s",
		    s, left);
	lua_pushboolean(L, 1);
	return 1;
}

/* host.set_deadline(seconds) -> true: the run's budget from now (<= 0 or math.huge: none).
 * Only the busted module keeps it; the binary removes it from the policy's host table. */
int ig_host_set_deadline(lua_State *L)
{
	double s = luaL_checknumber(L, 1);
	luaL_argcheck(L, s == s, 1, "seconds is NaN");
	ig_set_deadline(s);
	lua_pushboolean(L, 1);
	return 1;
}
