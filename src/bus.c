/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bus.c: the D-Bus connection to systemd's service manager (libsystemd's sd-bus), for the unit
 * primitives of unit.c and transient.c; it closes with the Lua state (ig_bus_forget_at_close).
 *
 * One connection per process, opened lazily on first use and reopened when it was closed (the
 * manager re-executed, or the process forked).  A call whose connection breaks or is refused
 * while systemd re-executes or reloads (daemon-reexec, daemon-reload) is made again by its caller
 * on a connection that ig_bus_reopen waits for.  Every call, including connecting, is bounded by
 * an absolute monotonic `end` (the caller's ig_bound(timeout)): sd_bus_call with a microsecond
 * timeout, and for waiting sd_bus_process + sd_bus_wait with the time left.  Calls can also be
 * pipelined (ig_bus_send, ig_bus_wait_all): sent in a row, answered in one round trip.
 */
#include "bus.h"

#include "imexguard.h"
#include "timing.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PRIVATE_SYSTEM	 "unix:path=/run/systemd/private"
#define REOPEN_PAUSE_MAX 0.2 /* seconds: longest pause between reconnection attempts */
#define ENOENT_GRACE	 1.0 /* seconds: a first connection waits for a missing socket */

#define DRAIN_MAX 1.0 /* seconds: the longest ig_bus_forget waits for detached calls' answers */

static char *bus_address;  /* NULL means "system" */
static sd_bus *bus;	   /* the process's connection, or NULL */
static pid_t bus_pid;	   /* the process that opened it (sd-bus objects do not survive fork) */
static int bus_subscribed; /* Subscribe() done on this connection */
static int detached;	   /* calls sent by ig_bus_send_detached whose answer has not come */

/* ig_bus_usec_left: see bus.h. */
uint64_t ig_bus_usec_left(double end)
{
	double rem;

	if (isinf(end))
		return UINT64_MAX;
	rem = end - ig_now();
	if (!(rem > 0))
		return 0;
	if (rem > 1e12)
		return UINT64_MAX;
	return rem * 1e6 < 1 ? 1 : (uint64_t)(rem * 1e6);
}

/* Drop the connection (the next call reconnects); not flushed, since a flush could block on a
 * hung peer and nothing we queue needs delivery.  After a fork the child must not touch the
 * parent's sd-bus object (sd-bus(3): "not safe across fork"), so it is forgotten, not freed. */
void ig_bus_drop(void)
{
	if (bus && bus_pid == getpid())
		sd_bus_close_unref(bus);
	bus = NULL;
	bus_subscribed = 0;
	detached = 0; /* their slots went with the connection */
}

/* ig_bus_step: see bus.h; EINTR is not an error. */
int ig_bus_step(sd_bus *b, double end)
{
	int r = sd_bus_process(b, NULL);
	uint64_t left;

	if (r < 0)
		return r;
	if (r > 0)
		return 0;
	left = ig_bus_usec_left(end);
	if (left == 0)
		return -ETIMEDOUT;
	r = sd_bus_wait(b, left);
	if (r < 0 && r != -EINTR)
		return r;
	return 0;
}

/* Drive the connection until it is ready (authenticated; for a bus client, Hello answered) or
 * `end` passes.  Returns 0, -ETIMEDOUT, or the negative errno of the failure. */
static int bus_wait_ready(sd_bus *b, double end)
{
	for (;;) {
		int r = sd_bus_is_ready(b);

		if (r < 0)
			return r;
		if (r > 0)
			return 0;
		r = ig_bus_step(b, end);
		if (r < 0)
			return r;
	}
}

/* Open a connection as the bus setting says: "system" -> the manager's private socket
 * /run/systemd/private when euid is 0 (peer-to-peer, as systemctl does as root), else the system
 * bus; "user" -> the user bus (sd_bus_open_user(3)); anything else is a D-Bus address used
 * peer-to-peer (e.g. unix:path=$XDG_RUNTIME_DIR/systemd/private).  Returns 0 or negative errno. */
static int bus_open(sd_bus **ret, double end)
{
	_cleanup_(sd_bus_close_unrefp) sd_bus *b = NULL;
	const char *addr = bus_address;
	double t0 = ig_now();
	int r;

	if (!addr && geteuid() == 0)
		addr = PRIVATE_SYSTEM;
	if (!addr) {
		r = sd_bus_open_system(&b);
	} else if (strcmp(addr, "user") == 0) {
		r = sd_bus_open_user(&b);
	} else {
		r = sd_bus_new(&b);
		if (r >= 0)
			r = sd_bus_set_address(b, addr);
		if (r >= 0)
			r = sd_bus_start(b);
	}
	if (r < 0)
		return r;
	r = bus_wait_ready(b, end);
	/* --timing: the connection is most of the first unit query's time (systemd sets up every
	 * new connection before it answers the authentication) */
	ig_timing_add_part("bus.connect", ig_now() - t0);
	if (r < 0)
		return r;
	*ret = b;
	b = NULL;
	return 0;
}

/* ig_bus_name: see bus.h. */
const char *ig_bus_name(void)
{
	if (!bus_address)
		return geteuid() == 0 ? PRIVATE_SYSTEM : "the system bus";
	if (strcmp(bus_address, "user") == 0)
		return "the user bus";
	return bus_address;
}

/* ig_bus_conn_error: see bus.h. */
int ig_bus_conn_error(int r)
{
	return r == -ENOTCONN || r == -ECONNRESET || r == -EPIPE || r == -ESHUTDOWN ||
	       r == -ECHILD || r == -ECONNREFUSED;
}

/* The process's connection, ready to use: reuses the open one after dispatching (and so
 * discarding) the signals queued since the last call, which also notices a closed peer.
 * Returns 0 and sets *ret, or negative errno (-ETIMEDOUT when `end` passed). */
static int bus_get(sd_bus **ret, double end)
{
	int r;

	if (bus && bus_pid != getpid())
		ig_bus_drop();
	if (bus) {
		int n = 0;

		do
			r = sd_bus_process(bus, NULL);
		while (r > 0 && ++n < 100000);
		if (r < 0 || sd_bus_is_open(bus) <= 0)
			ig_bus_drop();
	}
	if (!bus) {
		r = bus_open(&bus, end);
		if (r < 0)
			return r;
		bus_pid = getpid();
	}
	*ret = bus;
	return 0;
}

/* ig_bus_reopen: see bus.h.  Refused and reset connections (-ECONNREFUSED while the socket is
 * recreated, -ECONNRESET from a connection accepted just before the exec) are waited out until
 * `end`; a missing socket (-ENOENT: a re-executed systemd unlinks its private socket and binds it
 * again) until `end` when `lost`, else for at most ENOENT_GRACE seconds.  The pauses between
 * attempts grow from 10 ms to REOPEN_PAUSE_MAX. */
int ig_bus_reopen(sd_bus **ret, double end, int lost)
{
	double pause = 0.01, enoent_end = lost ? end : fmin(end, ig_now() + ENOENT_GRACE);

	for (;;) {
		double left;
		int r;

		ig_bus_drop();
		r = bus_get(ret, end);
		if (r >= 0 || !(ig_bus_conn_error(r) || r == -ENOENT))
			return r;
		left = (r == -ENOENT ? enoent_end : end) - ig_now();
		if (!(left > 0) || ig_sleep(fmin(pause, left)) < 0)
			return r;
		pause = fmin(pause * 2, REOPEN_PAUSE_MAX);
	}
}

/* ig_bus_acquire: see bus.h (bus_get, then ig_bus_reopen for a manager that is restarting). */
int ig_bus_acquire(sd_bus **ret, double end)
{
	int r = bus_get(ret, end);

	if (r < 0 && (ig_bus_conn_error(r) || r == -ENOENT))
		r = ig_bus_reopen(ret, end, 0);
	return r;
}

/* ig_bus_set_address: see bus.h.  "system", "user", or a D-Bus address "transport:key=value,..."
 * (D-Bus specification, "Server Addresses"). */
int ig_bus_set_address(const char *address)
{
	const char *colon;
	char *copy = NULL;

	if (!address || !*address)
		return -EINVAL;
	colon = strchr(address, ':');
	if (strcmp(address, "system") != 0 && strcmp(address, "user") != 0 &&
	    (!colon || colon == address || !colon[1]))
		return -EINVAL;
	if (strcmp(address, "system") != 0) {
		copy = strdup(address);
		if (!copy)
			return -ENOMEM;
	}
	if ((copy == NULL) != (bus_address == NULL) || (copy && strcmp(copy, bus_address) != 0))
		ig_bus_drop();
	free(bus_address);
	bus_address = copy;
	return 0;
}

/* Wait until systemd answered every call of ig_bus_send_detached, at most DRAIN_MAX seconds and
 * never past the run's deadline: a call still in the socket when the process exits may never run
 * (systemd drops what a closed connection sent, seen for StartTransientUnit). */
static void drain_detached(void)
{
	double end;

	if (!bus || bus_pid != getpid() || detached <= 0)
		return;
	end = ig_now() + fmin(DRAIN_MAX, ig_remaining());
	while (detached > 0 && ig_bus_step(bus, end) >= 0)
		;
}

/* ig_bus_forget: see bus.h. */
void ig_bus_forget(void)
{
	drain_detached();
	ig_bus_drop();
	free(bus_address);
	bus_address = NULL;
}

/* __gc of the registry sentinel of ig_bus_forget_at_close. */
static int forget_gc(lua_State *L)
{
	(void)L;
	ig_bus_forget();
	return 0;
}

/* ig_bus_forget_at_close: see bus.h. */
void ig_bus_forget_at_close(lua_State *L)
{
	/* One sentinel per state: the module opened again (busted restores package.loaded between
	 * spec files) must not orphan the first one, whose __gc would then forget the bus setting
	 * at an arbitrary later collection. */
	if (lua_getfield(L, LUA_REGISTRYINDEX, "imexguard.bus") != LUA_TNIL) {
		lua_pop(L, 1);
		return;
	}
	lua_pop(L, 1);
	lua_newuserdatauv(L, 0, 0);
	lua_createtable(L, 0, 1);
	lua_pushcfunction(L, forget_gc);
	lua_setfield(L, -2, "__gc");
	lua_setmetatable(L, -2);
	lua_setfield(L, LUA_REGISTRYINDEX, "imexguard.bus");
}

/* ---- calls ------------------------------------------------------------------------------ */

/* sd_bus_call_async(3) callback of ig_bus_send: keep the reply, or the error it carries. */
static int on_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error)
{
	struct ig_bus_pending *q = userdata;

	(void)ret_error;
	q->done = 1;
	if (sd_bus_message_is_method_error(m, NULL)) {
		q->r = -sd_bus_message_get_errno(m);
		if (q->r == 0)
			q->r = -EIO;
		sd_bus_error_copy(&q->error, sd_bus_message_get_error(m));
	} else {
		q->reply = sd_bus_message_ref(m);
	}
	return 1;
}

/* Make a method call of the manager with the arguments `types` ap and, with q NULL, wait for its
 * answer until `end` (sd_bus_call(3): *error, *reply as ig_bus_call), else send it without waiting,
 * the answer to fill q (sd_bus_call_async(3)).  Returns 0, -ETIMEDOUT when `end` has passed, or a
 * negative errno. */
static int call(sd_bus *b, double end, struct ig_bus_pending *q, sd_bus_error *error,
		sd_bus_message **reply, const char *path, const char *iface, const char *member,
		const char *types, va_list ap)
{
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
	uint64_t left = ig_bus_usec_left(end);
	int r;

	if (left == 0)
		return -ETIMEDOUT;
	/* sd_bus_call(3) and sd_bus_call_async(3): a timeout of 0 means the default (25 s), so left
	 * is >= 1 here; an infinite bound (no budget, infinite timeout) is passed as UINT64_MAX -
	 * 1, which saturates to none. */
	uint64_t timeout = left == UINT64_MAX ? UINT64_MAX - 1 : left;
	r = sd_bus_message_new_method_call(b, &m, IG_BUS_DEST, path, iface, member);
	if (r >= 0)
		r = sd_bus_message_appendv(m, types, ap);
	if (r >= 0)
		r = q ? sd_bus_call_async(b, &q->slot, m, on_reply, q, timeout)
		      : sd_bus_call(b, m, timeout, error, reply);
	return r < 0 ? r : 0;
}

/* ig_bus_call: see bus.h. */
int ig_bus_call(sd_bus *b, double end, const char *path, const char *iface, const char *member,
		sd_bus_error *error, sd_bus_message **reply, const char *types, ...)
{
	va_list ap;
	va_start(ap, types);
	int r = call(b, end, NULL, error, reply, path, iface, member, types, ap);
	va_end(ap);
	return r;
}

/* ig_bus_send: see bus.h. */
int ig_bus_send(sd_bus *b, double end, const char *path, const char *iface, const char *member,
		struct ig_bus_pending *q, const char *types, ...)
{
	va_list ap;
	va_start(ap, types);
	int r = call(b, end, q, NULL, NULL, path, iface, member, types, ap);
	va_end(ap);
	return r;
}

/* ig_bus_subscribe: see bus.h; on a private connection systemd sends its signals anyway and the
 * call is a no-op. */
int ig_bus_subscribe(sd_bus *b, double end, sd_bus_error *error)
{
	int r;

	if (bus_subscribed)
		return 0;
	r = ig_bus_call(b, end, IG_BUS_PATH, IG_BUS_MANAGER, "Subscribe", error, NULL, "");
	if (r < 0 && !sd_bus_error_has_name(error, "org.freedesktop.systemd1.AlreadySubscribed"))
		return r;
	sd_bus_error_free(error);
	bus_subscribed = 1;
	return 0;
}

/* sd_bus_call_async(3) callback of ig_bus_send_detached: one answer less to wait for. */
static int on_detached_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error)
{
	(void)m;
	(void)userdata;
	(void)ret_error;
	if (detached > 0)
		detached--;
	return 1;
}

/* ig_bus_send_detached: see bus.h. */
int ig_bus_send_detached(sd_bus *b, sd_bus_message *m)
{
	int r = sd_bus_call_async(b, NULL, m, on_detached_reply, NULL, 0);

	if (r < 0)
		return r;
	detached++;
	r = sd_bus_flush(b);
	return r < 0 ? r : 0;
}

/* ---- pipelined calls -------------------------------------------------------------------- */

/* ig_bus_wait_all: see bus.h. */
int ig_bus_wait_all(sd_bus *b, double end, const struct ig_bus_pending *q, size_t n)
{
	size_t got = 0;
	int r = 0;

	while (r >= 0 && got < n) {
		r = ig_bus_step(b, end);
		for (got = 0; got < n && q[got].done; got++)
			;
	}
	return r;
}

/* ig_bus_pending_clear: see bus.h. */
void ig_bus_pending_clear(struct ig_bus_pending *q)
{
	q->slot = sd_bus_slot_unref(q->slot);
	q->reply = sd_bus_message_unref(q->reply);
	sd_bus_error_free(&q->error);
}
