/* SPDX-License-Identifier: Apache-2.0 */
/*
 * driver.c: the C side of the protocol between main.c and lua/imexguard/driver.lua: the run table
 * (the driver's one argument, made once per run), the host functions it carries (the field
 * `run.c` in driver.lua: read_trusted, has_module, preload, set_job), and the call of a driver
 * function (one table in, one table out, through ig_sandbox_call).
 */
#include "driver.h"

#include "imexguard.h"
#include "sandbox.h"
#include "trust.h"
#include "watchdog.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* The job id as it appears in log lines ("job=<id>"): Slurm job ids are decimal integers; any
 * character outside [A-Za-z0-9_.-] (a space, a newline that would forge a second log line) is
 * replaced by '_'.  The policy refuses such an id as bad-input; this only keeps the line honest. */
void ig_set_job_label(struct ig_run *r, const char *id)
{
	snprintf(r->job, sizeof r->job, "%s", id);
	for (char *p = r->job; *p; p++)
		if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-'))
			*p = '_';
}

/* ---- the host functions of the run table (`run.c` in driver.lua) ---------------------------- */

/* c.read_trusted(path, what) -> text, or nil, message, code: ig_read_trusted (trust.c). */
static int c_read_trusted(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	const char *what = luaL_checkstring(L, 2);
	char err[1024];
	char *text = NULL;
	size_t len = 0;
	int rc = ig_read_trusted(path, what, &text, &len, err, sizeof err);
	if (rc != 0)
		return ig_push_error(L, ig_code(rc), "%s", err);
	lua_pushlstring(L, text, len);
	free(text);
	return 1;
}

/* c.has_module(name) -> boolean: ig_sandbox_has_module. */
static int c_has_module(lua_State *L)
{
	lua_pushboolean(L, ig_sandbox_has_module(L, luaL_checkstring(L, 1)));
	return 1;
}

/* c.preload(name, value): require(name) returns value from now on (ig_sandbox_preload). */
static int c_preload(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);
	luaL_checkany(L, 2);
	lua_settop(L, 2);
	ig_sandbox_preload(L, name);
	return 0;
}

/* c.set_job(id): the job id (string) that the final line and the watchdog's line name. */
static int c_set_job(lua_State *L)
{
	struct ig_run *r = lua_touserdata(L, lua_upvalueindex(1));
	ig_set_job_label(r, luaL_checkstring(L, 1));
	ig_watchdog_label(r->o->command, r->job);
	return 0;
}

/* Set run[key] = value (a string; NULL: nil). */
void ig_run_set(struct ig_run *r, const char *key, const char *value)
{
	lua_rawgeti(r->L, LUA_REGISTRYINDEX, r->table);
	if (value)
		lua_pushstring(r->L, value);
	else
		lua_pushnil(r->L);
	lua_setfield(r->L, -2, key);
	lua_pop(r->L, 1);
}

/* Push the environment (environ) as a table of strings. */
static void push_environ(lua_State *L)
{
	lua_newtable(L);
	for (char **e = environ; e && *e; e++) {
		const char *eq = strchr(*e, '=');
		if (eq == NULL)
			continue;
		lua_pushlstring(L, *e, (size_t)(eq - *e));
		lua_pushstring(L, eq + 1);
		lua_rawset(L, -3);
	}
}

/* run.exe: the absolute path of this binary (readlink(2) of /proc/self/exe, proc(5)), which the
 * prolog's watcher runs again (lua/imexguard/watch.lua); nil when it cannot be read. */
static void set_exe(struct ig_run *r)
{
	char path[4096];
	ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);

	if (n <= 0 || path[0] != '/')
		return;
	path[n] = '\0';
	ig_run_set(r, "exe", path);
}

/* Make the run table (the driver's one argument; see driver.lua) and keep it in the registry. */
void ig_driver_open(struct ig_run *r)
{
	static const luaL_Reg c_funcs[] = {{"read_trusted", c_read_trusted},
					   {"has_module", c_has_module},
					   {"preload", c_preload},
					   {"set_job", c_set_job},
					   {NULL, NULL}};
	lua_State *L = r->L;
	struct ig_opts *o = r->o;
	r->driver = luaL_ref(L, LUA_REGISTRYINDEX);
	lua_createtable(L, 0, 12);
	r->table = luaL_ref(L, LUA_REGISTRYINDEX);
	ig_run_set(r, "command", o->command);
	ig_run_set(r, "config", o->config);
	ig_run_set(r, "policy", o->policy);
	ig_run_set(r, "check_path", o->arg);
	ig_run_set(r, "arg", o->arg);
	ig_run_set(r, "deadline_arg", o->deadline_arg);
	ig_run_set(r, "job_arg", o->job);
	ig_run_set(r, "nodelist_arg", o->nodelist);
	ig_run_set(r, "timeout_arg", o->timeout_arg);
	ig_run_set(r, "lua_dir", o->lua_dir);
	set_exe(r);
	lua_rawgeti(L, LUA_REGISTRYINDEX, r->table);
	lua_pushboolean(L, o->config_explicit);
	lua_setfield(L, -2, "config_explicit");
	lua_pushboolean(L, o->json);
	lua_setfield(L, -2, "json");
	lua_pushboolean(L, o->strict);
	lua_setfield(L, -2, "strict");
	lua_pushinteger(L, o->verbosity);
	lua_setfield(L, -2, "verbosity");
	lua_createtable(L, o->nsets, 0);
	for (int i = 0; i < o->nsets; i++) {
		lua_pushstring(L, o->sets[i]);
		lua_rawseti(L, -2, i + 1);
	}
	lua_setfield(L, -2, "sets");
	push_environ(L);
	lua_setfield(L, -2, "env");
	lua_newtable(L);
	lua_pushlightuserdata(L, r);
	luaL_setfuncs(L, c_funcs, 1);
	lua_setfield(L, -2, "c");
	lua_pop(L, 1);
}

/* ---- calling the driver --------------------------------------------------------------------- */

/* Call driver function `name` with the run table, through ig_sandbox_call (traceback, deadline
 * and memory classified), with the count hook on (hook = 1: Lua that may meet the deadline) or
 * suspended (hook = 0: host bookkeeping that must run even after the interrupt fired).  On
 * IG_CALL_OK the answer (a table) is on top; otherwise its message. */
enum ig_call ig_driver_call(struct ig_run *r, const char *name, int hook)
{
	lua_State *L = r->L;
	lua_rawgeti(L, LUA_REGISTRYINDEX, r->driver);
	lua_getfield(L, -1, name);
	lua_remove(L, -2);
	lua_rawgeti(L, LUA_REGISTRYINDEX, r->table);
	if (!hook)
		ig_sandbox_hook(L, 0);
	enum ig_call st = ig_sandbox_call(L, 1, 1);
	if (!hook)
		ig_sandbox_hook(L, 1);
	if (st == IG_CALL_OK && !lua_istable(L, -1)) {
		lua_pop(L, 1);
		lua_pushfstring(L, "imexguard.driver.%s returned no table (a bug)", name);
		st = IG_CALL_ERROR;
	}
	return st;
}
