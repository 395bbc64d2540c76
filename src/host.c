/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host.c: the Lua C module `imexguard.host` (require "imexguard.host" from busted; the binary
 * calls luaopen_imexguard_host too and then removes what policies must not have, such as
 * set_deadline): one table holding every primitive of docs/policy-api.md plus `version`, each
 * primitive timed for --timing (timing.c).
 */
#include "imexguard.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PRIMITIVES 64

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* With --timing, replace each function of the table on top by one timed in slot PREFIX NAME
 * (ig_timing_wrap_value), in the order of the names so that the report's order is the same on
 * every run (a table's traversal order is not). */
static void time_functions(lua_State *L, const char *prefix)
{
	const char *names[MAX_PRIMITIVES];
	size_t n = 0;

	/* the names stay valid: they are the table's keys, and only values change below */
	for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1))
		if (lua_type(L, -2) == LUA_TSTRING && lua_isfunction(L, -1) && n < MAX_PRIMITIVES)
			names[n++] = lua_tostring(L, -2);
	qsort(names, n, sizeof names[0], by_name);
	for (size_t i = 0; i < n; i++) {
		char slot[64];

		snprintf(slot, sizeof slot, "%s%s", prefix, names[i]);
		lua_getfield(L, -1, names[i]);
		ig_timing_wrap_value(L, slot);
		lua_setfield(L, -2, names[i]);
	}
}

/* With --timing, time the primitives of the table on top (slot "host.NAME") and the methods of
 * host.spawn's process handles (slot "host.spawn:NAME": the wait is where a started command
 * costs the run time). */
static void time_primitives(lua_State *L)
{
	if (!ig_timing_enabled())
		return;
	time_functions(L, "host.");
	if (luaL_getmetatable(L, IG_PROCESS_MT) == LUA_TTABLE) {
		if (lua_getfield(L, -1, "__index") == LUA_TTABLE)
			time_functions(L, "host.spawn:");
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
}

/* luaopen_imexguard_host(L) -> 1: pushes the primitives table.  Fields: the primitives that the
 * files of src/ register (ig_register_*, imexguard.h), and `version` (string, IG_VERSION). */
int luaopen_imexguard_host(lua_State *L)
{
	lua_newtable(L);
	ig_register_clock(L);
	ig_register_lock(L);
	ig_register_file(L);
	ig_register_run(L);
	ig_register_unit(L);
	ig_register_transient(L);
	ig_register_log(L);
	ig_register_net(L);
	ig_register_proc(L);
	ig_register_xml(L);
	ig_register_journal(L);
	time_primitives(L);
	lua_pushliteral(L, IG_VERSION);
	lua_setfield(L, -2, "version");
	return 1;
}
