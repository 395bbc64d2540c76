/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host.c: the Lua C module `imexguard.host` (require("imexguard.host") from busted; the binary
 * calls luaopen_imexguard_host too and then removes what policies must not have, such as
 * set_deadline): one table holding every primitive of docs/policy-api.md plus `version`, each
 * primitive timed for --timing (timing.c).
 */
#include "bus.h"
#include "imexguard.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PRIMITIVES 64

/* The host's whole surface: every primitive by its Lua name, in the order of the files of src/
 * (each documented at its definition; the policy's view in docs/policy-api.md). */
static const luaL_Reg primitives[] = {
    /* clock.c: the clocks and the run's budget */
    {"now", ig_host_now},
    {"wallclock", ig_host_wallclock},
    {"localtime", ig_host_localtime},
    {"remaining", ig_host_remaining},
    {"sleep", ig_host_sleep},
    {"set_deadline", ig_host_set_deadline}, /* removed from the policy's table by the binary */
    /* lock.c: the node lock */
    {"lock", ig_host_lock},
    {"lock_holder", ig_host_lock_holder},
    /* file.c: files */
    {"read", ig_host_read},
    {"read_tail", ig_host_read_tail},
    {"stat", ig_host_stat},
    {"write_atomic", ig_host_write_atomic},
    {"write_in_place", ig_host_write_in_place},
    {"remove_temps", ig_host_remove_temps},
    {"mknod_char", ig_host_mknod_char},
    {"mkdir", ig_host_mkdir},
    /* run.c: commands */
    {"run", ig_host_run},
    {"spawn", ig_host_spawn},
    /* unit.c and transient.c: systemd units over bus.c's connection */
    {"unit", ig_host_unit},
    {"unit_job", ig_host_unit_job},
    {"unit_reset_failed", ig_host_unit_reset_failed},
    {"unit_kill", ig_host_unit_kill},
    {"unit_set_bus", ig_host_unit_set_bus},
    {"unit_start_transient", ig_host_unit_start_transient},
    /* log.c: the run's log */
    {"log", ig_host_log},
    /* net.c: this host on the network, and who runs */
    {"local_addresses", ig_host_local_addresses},
    {"resolve", ig_host_resolve},
    {"hostname", ig_host_hostname},
    {"euid", ig_host_euid},
    /* proc.c: processes behind a port, a socket or an open file */
    {"port_owner", ig_host_port_owner},
    {"socket_owner", ig_host_socket_owner},
    {"file_holders", ig_host_file_holders},
    /* xml.c and journal.c: documents and the journal read */
    {"xml_parse", ig_host_xml_parse},
    {"journal_read", ig_host_journal_read},
    {NULL, NULL},
};

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
	ig_push_process_metatable(L);
	if (lua_getfield(L, -1, "__index") == LUA_TTABLE)
		time_functions(L, "host.spawn:");
	lua_pop(L, 2);
}

/* luaopen_imexguard_host(L) -> 1: pushes the primitives table.  Fields: the primitives (the table
 * `primitives` above) and `version` (string, IG_VERSION).  The bus connection of the unit
 * primitives closes with the Lua state (ig_bus_forget_at_close). */
int luaopen_imexguard_host(lua_State *L)
{
	luaL_newlib(L, primitives);
	ig_bus_forget_at_close(L);
	time_primitives(L);
	lua_pushliteral(L, IG_VERSION);
	lua_setfield(L, -2, "version");
	return 1;
}
