/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bus.h: the process's D-Bus connection to systemd's service manager (bus.c): opened on first
 * use, reopened after systemd re-executes, bounded calls and pipelined (asynchronous) calls.
 * The unit primitives (unit.c) are its users; main.c sets the address from the setting `bus`.
 */
#ifndef IMEXGUARD_BUS_H
#define IMEXGUARD_BUS_H

#include <lua.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

/* The service manager's bus name (org.freedesktop.systemd1(5)); every call goes to it. */
#define IG_BUS_DEST	  "org.freedesktop.systemd1"
#define IG_BUS_PROPERTIES "org.freedesktop.DBus.Properties"
/* The Manager object and its interface (org.freedesktop.systemd1(5)): Subscribe (bus.c), the unit
 * jobs, KillUnit, ResetFailedUnit and the JobRemoved signal (unit.c); a unit's object is below
 * IG_BUS_PATH "/unit". */
#define IG_BUS_PATH    "/org/freedesktop/systemd1"
#define IG_BUS_MANAGER "org.freedesktop.systemd1.Manager"

/* Set the bus: "system" (default: /run/systemd/private when root, else the system bus), "user"
 * (the calling user's manager), or a D-Bus address such as "unix:path=/run/user/0/systemd/private"
 * used peer-to-peer.  The string is copied; an open connection to another address is closed.
 * Returns 0, -EINVAL (not one of these forms) or -ENOMEM. */
int ig_bus_set_address(const char *address);

/* Close the connection and go back to the default bus ("system"): what the Lua state's end does
 * (ig_bus_forget_at_close), so nothing of sd-bus outlives it.  First it waits for the answers of
 * the calls sent with ig_bus_send_detached (at most 1 s, never past the run's deadline). */
void ig_bus_forget(void);
/* Make the Lua state L call ig_bus_forget when it closes (the __gc of a sentinel in its registry,
 * made once per state), so that the connection of its primitives ends with it (host.c). */
void ig_bus_forget_at_close(lua_State *L);

/* Microseconds left until the absolute monotonic time `end` (seconds; ig_now): 0 when expired,
 * UINT64_MAX (no timeout, for sd_bus_wait and sd_bus_call) when `end` is infinite, else >= 1. */
uint64_t ig_bus_usec_left(double end);

/* Whether the negative errno r of a call means the connection broke or was refused (systemd
 * re-executing or reloading): 1 or 0. */
int ig_bus_conn_error(int r);

/* What the messages call the bus: its address, "the system bus" or "the user bus". */
const char *ig_bus_name(void);

/* Drop the connection (the next call opens a new one), e.g. after a connection-level error. */
void ig_bus_drop(void);

/* The connection for a new call, ready to use, opened when there is none; a manager that is
 * restarting is waited out until `end` (absolute monotonic seconds; a missing socket for at most
 * 1 s: on a first connection it most likely means there is no manager).  Returns 0 with *ret set
 * (owned by bus.c: never unref it), or a negative errno (-ETIMEDOUT when `end` passed). */
int ig_bus_acquire(sd_bus **ret, double end);

/* After a call failed with a connection error (ig_bus_conn_error): drop the connection and open
 * a new one, retrying until `end` while the manager restarts (lost = 1: a connection existed and
 * broke, so a missing socket is waited for until `end` too).  Returns 0 with *ret set, or the last
 * negative errno when `end` (or the run's deadline) passed. */
int ig_bus_reopen(sd_bus **ret, double end, int lost);

/* One round of driving connection b: dispatch one pending message, or when none is pending wait
 * for one, at most until `end` (absolute monotonic seconds).  Returns 0 (the caller checks its
 * condition and calls again), -ETIMEDOUT when nothing was pending and `end` has passed, or the
 * negative errno of sd_bus_process/sd_bus_wait (sd-bus(3)). */
int ig_bus_step(sd_bus *b, double end);

/* Call method `member` of interface `iface` on object `path` of the manager with the arguments
 * `types`... (sd_bus_message_append(3)), waiting for the answer until `end` (absolute monotonic
 * seconds).  Returns 0 (the answer in *reply when reply is not NULL; unref it) or a negative
 * errno (-ETIMEDOUT when `end` passed) with *error set by a D-Bus error answer. */
int ig_bus_call(sd_bus *b, double end, const char *path, const char *iface, const char *member,
		sd_bus_error *error, sd_bus_message **reply, const char *types, ...);

/* Manager.Subscribe once per connection (so that systemd sends its signals, such as JobRemoved,
 * on a bus; AlreadySubscribed is fine), bounded by `end`.  Returns 0 or a negative errno with
 * *error set. */
int ig_bus_subscribe(sd_bus *b, double end, sd_bus_error *error);

/* A call sent without waiting (ig_bus_send) and its answer once it came.  Zero it before use;
 * release it with ig_bus_pending_clear. */
struct ig_bus_pending {
	sd_bus_slot *slot;
	sd_bus_message *reply; /* the method return, or NULL */
	sd_bus_error error;    /* the method error (set when the call failed) */
	int r;		       /* 0, or the call's negative errno */
	int done;	       /* the answer came */
};

/* Send method `member` of `iface` on `path` with the arguments `types`... without waiting for the
 * answer, which fills q (its timeout: `end`, absolute monotonic seconds).  Several sent in a row
 * are answered in one round trip (systemd answers a connection's calls in order).  Returns 0 or a
 * negative errno (-ETIMEDOUT when `end` passed). */
int ig_bus_send(sd_bus *b, double end, const char *path, const char *iface, const char *member,
		struct ig_bus_pending *q, const char *types, ...);

/* Drive the connection until the n calls of q are answered.  Returns 0 (each q[i].r says how its
 * call went), -ETIMEDOUT when `end` passed, or the negative errno of a failing connection. */
int ig_bus_wait_all(sd_bus *b, double end, const struct ig_bus_pending *q, size_t n);

/* Send method call m on b and return at once; its answer is not read by the caller, but the
 * process waits for it (bounded) before the connection closes (ig_bus_forget): a call that systemd
 * must run although the caller goes on without it (the prolog's watcher, transient.c).  Returns 0
 * or a negative errno of the send. */
int ig_bus_send_detached(sd_bus *b, sd_bus_message *m);

/* Release what q holds (slot, reply, error); q can be sent again after zeroing. */
void ig_bus_pending_clear(struct ig_bus_pending *q);

#endif
