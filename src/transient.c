/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transient.c: a transient service of imexguard's own, the Lua primitive unit_start_transient
 * (docs/policy-api.md, section "systemd"): the prolog's watcher (lua/imexguard/watch.lua) runs as
 * one, so that systemd bounds its life (RuntimeMaxSec) and it outlives the prolog's process.
 *
 * systemd's Manager.StartTransientUnit (org.freedesktop.systemd1(5); what systemd-run(1) calls)
 * over bus.c's connection.  The start can be sent without waiting for systemd's answer: the
 * caller's time is one write, and systemd creates and starts the unit while the caller goes on.
 * Its answer is awaited only when the Lua state closes (ig_bus_send_detached; at most 1 s), by
 * which time it has mostly come: a call still in the socket of a process that exits may never
 * run (systemd dropped a third of 30 such starts from processes that exited at once, under
 * tests/with-systemd).  Nothing then says whether systemd accepted it.
 */
#include "bus.h"
#include "imexguard.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-bus.h>

#define ARGV_MAX     64	  /* arguments of the service's command */
#define ENV_MAX	     256  /* environment entries */
#define STR_MAX	     4096 /* bytes of one argument, entry or description */
#define SEND_TIMEOUT 10.0 /* seconds: default bound of the call */

/* What the service is: read from the Lua table before any sd-bus object exists. */
struct transient {
	const char *name;
	const char *description;
	const char *argv[ARGV_MAX + 1]; /* argv[0] is the program's absolute path; NULL-ended */
	const char *env[ENV_MAX + 1];	/* "KEY=VALUE"; NULL-ended */
	uint64_t runtime_max_us;	/* RuntimeMaxUSec; 0: none */
	int wait;			/* wait for systemd's answer (the job queued) */
};

/* Open the property `name` of D-Bus type `type` (a signature: "as") in the a(sv) that m is
 * filling: its struct (sv), the name, and its variant, left open for the value (as systemd's
 * bus-unit-util writes a property).  Returns 0 or sd-bus's negative errno. */
static int open_property(sd_bus_message *m, const char *name, const char *type)
{
	int r = sd_bus_message_open_container(m, 'r', "sv");

	if (r >= 0)
		r = sd_bus_message_append(m, "s", name);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', type);
	return r < 0 ? r : 0;
}

/* Close the variant and the struct of the property that open_property opened.  Returns 0 or
 * sd-bus's negative errno. */
static int close_property(sd_bus_message *m)
{
	int r = sd_bus_message_close_container(m);

	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r < 0 ? r : 0;
}

/* Append to m's a(sv) the property ExecStart (a(sasb)): one command, argv (NULL-ended; argv[0]
 * the program's absolute path, also its path) whose failure is not ignored.  Returns 0 or sd-bus's
 * negative errno. */
static int append_exec_start(sd_bus_message *m, const char *const *argv)
{
	int r = open_property(m, "ExecStart", "a(sasb)");

	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "(sasb)");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'r', "sasb");
	if (r >= 0)
		r = sd_bus_message_append(m, "s", argv[0]);
	if (r >= 0)
		r = sd_bus_message_append_strv(m, (char **)argv);
	if (r >= 0)
		r = sd_bus_message_append(m, "b", 0);
	for (int i = 0; i < 2 && r >= 0; i++) /* the struct (sasb), the array */
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = close_property(m);
	return r < 0 ? r : 0;
}

/* Append the properties of t (a(sv)) to m: Description, ExecStart (append_exec_start),
 * Environment, RuntimeMaxUSec, and CollectMode=inactive-or-failed so that systemd unloads the
 * unit when it ended, whatever its result (systemd.unit(5)).  Returns 0 or sd-bus's negative
 * errno. */
static int append_properties(sd_bus_message *m, const struct transient *t)
{
	int r = sd_bus_message_open_container(m, 'a', "(sv)");

	if (r >= 0)
		r = sd_bus_message_append(m, "(sv)", "Description", "s", t->description);
	if (r >= 0)
		r = sd_bus_message_append(m, "(sv)", "CollectMode", "s", "inactive-or-failed");
	if (r >= 0 && t->runtime_max_us)
		r = sd_bus_message_append(m, "(sv)", "RuntimeMaxUSec", "t", t->runtime_max_us);
	if (r >= 0)
		r = open_property(m, "Environment", "as");
	if (r >= 0)
		r = sd_bus_message_append_strv(m, (char **)t->env);
	if (r >= 0)
		r = close_property(m);
	if (r >= 0)
		r = append_exec_start(m, t->argv);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r < 0 ? r : 0;
}

/* Send StartTransientUnit(name, "fail", properties, no auxiliary units) for t on b before `end`:
 * waiting for the answer (t->wait; *error set by a D-Bus error), else marked NO_REPLY_EXPECTED and
 * flushed.  Returns 0 or a negative errno. */
static int start_on(sd_bus *b, double end, const struct transient *t, sd_bus_error *error)
{
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
	uint64_t left = ig_bus_usec_left(end);
	int r;

	if (left == 0)
		return -ETIMEDOUT;
	r = sd_bus_message_new_method_call(b, &m, IG_BUS_DEST, IG_BUS_PATH, IG_BUS_MANAGER,
					   "StartTransientUnit");
	/* "fail": refuse to replace a unit of that name that exists (a watcher already running) */
	if (r >= 0)
		r = sd_bus_message_append(m, "ss", t->name, "fail");
	if (r >= 0)
		r = append_properties(m, t);
	if (r >= 0)
		r = sd_bus_message_append(m, "a(sa(sv))", 0);
	if (r < 0)
		return r;
	if (t->wait)
		return sd_bus_call(b, m, left == UINT64_MAX ? UINT64_MAX - 1 : left, error, NULL);
	return ig_bus_send_detached(b, m);
}

/* Start t within `timeout` seconds (bounded by the budget); a connection lost while systemd
 * re-executes is reopened and the call made once more.  Returns 0 or a negative errno with msg
 * (size n) and *code set. */
static int start_transient(const struct transient *t, double timeout, char *msg, size_t n,
			   const char **code)
{
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	int by_deadline = 0;
	double bound = ig_bound(timeout, &by_deadline);
	double end = ig_now() + bound;
	sd_bus *b;
	int r = ig_bus_acquire(&b, end);

	if (r >= 0)
		r = start_on(b, end, t, &error);
	if (r < 0 && ig_bus_conn_error(r) && ig_bus_usec_left(end) > 0) {
		sd_bus_error_free(&error);
		r = ig_bus_reopen(&b, end, 1);
		if (r >= 0)
			r = start_on(b, end, t, &error);
	}
	if (r >= 0)
		return 0;
	if (ig_bus_conn_error(r))
		ig_bus_drop();
	if (r == -ETIMEDOUT) {
		*code = by_deadline ? "deadline" : "timeout";
		snprintf(msg, n, "start %s: no answer from systemd on %s within %.3g s", t->name,
			 ig_bus_name(), bound);
	} else {
		*code = "bus";
		snprintf(msg, n, "start %s: %s: %s", t->name,
			 sd_bus_error_is_set(&error) ? error.name : "D-Bus",
			 sd_bus_error_is_set(&error) && error.message ? error.message
								      : strerror(-r));
	}
	return r;
}

/* Read the list of strings spec[field] into out (at most max, NULL-ended); `required`: at least
 * one.  Raises on misuse.  The strings stay owned by the Lua table (alive during the call). */
static void check_strings(lua_State *L, int spec, const char *field, const char **out, int max,
			  int required)
{
	int n;

	lua_getfield(L, spec, field);
	if (lua_isnil(L, -1) && !required) {
		lua_pop(L, 1);
		out[0] = NULL;
		return;
	}
	if (!lua_istable(L, -1))
		luaL_error(L, "unit_start_transient: spec.%s must be a list of strings", field);
	n = (int)luaL_len(L, -1);
	if (n > max || (required && n < 1))
		luaL_error(L, "unit_start_transient: spec.%s must hold 1 to %d strings", field,
			   max);
	for (int i = 1; i <= n; i++) {
		size_t len;

		lua_rawgeti(L, -1, i);
		if (lua_type(L, -1) != LUA_TSTRING)
			luaL_error(L, "unit_start_transient: spec.%s[%d] must be a string", field,
				   i);
		out[i - 1] = lua_tolstring(L, -1, &len);
		if (len > STR_MAX || strlen(out[i - 1]) != len)
			luaL_error(L, "unit_start_transient: spec.%s[%d] too long or has a NUL",
				   field, i);
		lua_pop(L, 1);
	}
	out[n] = NULL;
	lua_pop(L, 1);
}

/*
 * host.unit_start_transient(name, spec [, timeout]) -> true | nil, msg, code
 *   name: the service's name (string ending in ".service"); spec: {argv = {program (absolute
 *   path), arguments...}, environment = {"KEY=VALUE"...} or nil, description = string,
 *   runtime_max = seconds > 0 (RuntimeMaxSec: systemd stops the service that long after its
 *   start) or nil, wait = boolean (default true)}; timeout: seconds (default 10), bounded by the
 *   budget.  Starts a transient service running argv with that environment
 *   (Manager.StartTransientUnit(name, "fail", properties, []), org.freedesktop.systemd1(5); as
 *   systemd-run(1)), collected by systemd once it ended (CollectMode=inactive-or-failed).
 *   wait: true: returns once systemd answered (the start job queued); false: returns once the
 *   call is written to systemd's socket: true then says only that it was sent (its answer is
 *   awaited, at most 1 s, when the Lua state closes, so that systemd runs it: bus.h,
 *   ig_bus_send_detached).
 *   Errors: "timeout", "deadline", "bus" (e.g. org.freedesktop.systemd1.UnitExists: a unit of that
 *   name is loaded; only with wait).  Misuse (a name without ".service", a relative program, a
 *   spec that is not as above) raises.
 */
int ig_host_unit_start_transient(lua_State *L)
{
	struct transient t;
	size_t len;
	double timeout = luaL_optnumber(L, 3, SEND_TIMEOUT);
	double runtime_max;
	const char *code = "bus";
	char msg[512];

	memset(&t, 0, sizeof t);
	t.name = luaL_checklstring(L, 1, &len);
	luaL_argcheck(L,
		      len > 8 && len <= 256 && strlen(t.name) == len &&
			  strcmp(t.name + len - 8, ".service") == 0,
		      1, "a service name (NAME.service, at most 256 bytes)");
	luaL_checktype(L, 2, LUA_TTABLE);
	luaL_argcheck(L, timeout >= 0, 3, "timeout must be a number of seconds >= 0");
	check_strings(L, 2, "argv", t.argv, ARGV_MAX, 1);
	luaL_argcheck(L, t.argv[0][0] == '/', 2, "spec.argv[1] must be an absolute path");
	check_strings(L, 2, "environment", t.env, ENV_MAX, 0);
	lua_getfield(L, 2, "description");
	t.description = luaL_optstring(L, -1, t.name);
	lua_getfield(L, 2, "runtime_max");
	runtime_max = luaL_optnumber(L, -1, 0);
	luaL_argcheck(L, runtime_max >= 0 && runtime_max < 1e9, 2,
		      "spec.runtime_max must be seconds >= 0");
	t.runtime_max_us = (uint64_t)(runtime_max * 1e6);
	lua_getfield(L, 2, "wait");
	t.wait = lua_isnil(L, -1) ? 1 : lua_toboolean(L, -1);
	lua_pop(L, 3);
	if (start_transient(&t, timeout, msg, sizeof msg, &code) < 0)
		return ig_push_error(L, code, "%s", msg);
	lua_pushboolean(L, 1);
	return 1;
}
