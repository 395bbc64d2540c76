/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sandbox.c: the Lua host of the imexguard binary.
 *
 * Policies and the settings file run in one restricted Lua 5.4 state (the approach of Redis'
 * scripting sandbox and of HAProxy's hlua; Slurm's Lua plugins likewise load a chosen set of
 * libraries only):
 *
 *  - Memory: a custom lua_Alloc counts the bytes in use and refuses an allocation that would pass
 *    the limit (the setting memory_limit in MiB, IG_SANDBOX_MEM_LIMIT until the settings are
 *    read).  The call's LUA_ERRMEM becomes the memory interrupt (a light-userdata sentinel that
 *    the sandbox's pcall and xpcall re-raise) and the host ends the run in policy-error "memory
 *    limit of N MiB reached", instead of the kernel's OOM killer.  The host's own bookkeeping
 *    (the count hook suspended, the interrupt's message) gets IG_SANDBOX_MEM_RESERVE bytes more.
 *  - Libraries: base, string (without dump: no bytecode), table, math and utf8 only.  The
 *    environment of every chunk is a separate table (the sandbox env) that holds the allowed
 *    names; the real global table is never reachable.  Removed from base: dofile, loadfile, print
 *    (replaced), load (replaced: text chunks only, env defaults to the sandbox env),
 *    collectgarbage (replaced: "count" only), rawset (replaced: refuses the sandbox env and every
 *    read-only table), setmetatable (replaced: no __gc, finalizers run without hooks),
 *    getmetatable (replaced: never a userdata's metatable, i.e. a host object's), pcall and xpcall
 *    (replaced: see the deadline).  No io, os, debug, package, coroutine.  `print` writes one
 *    line "imexguard: print: ..." to stderr.
 *  - Read-only: the sandbox env, the library tables, the shared string metatable (its
 *    __metatable is a read-only view of it) and every module require returns but policies.*
 *    (make_readonly: an empty proxy reading hidden contents), so a policy cannot change how the
 *    library or the host behaves for the rest of the run.  cjson loses its encode_* and decode_*
 *    configuration functions (their configuration is shared with the host).
 *  - Globals: the sandbox env raises "undefined global 'x'" on reading an undefined name,
 *    "assignment to undeclared global 'x'" on assigning one and "cannot change the global 'x'"
 *    on assigning a built-in one; __metatable hides its metatable.
 *  - require: only the modules compiled into the binary (ig_embedded[]: "imexguard.*" and
 *    "policies.*"), "imexguard.host" (the C primitives, without set_deadline) and "cjson".
 *    With --lua-dir DIR (absolute), "a.b" is read from DIR/a/b.lua first (development).  There is
 *    no package.path and no C module is ever loaded from disk.
 *
 * The deadline (the run's budget, docs/design.md "The deadline") is enforced in three layers:
 *  1. Primitives: every blocking primitive is bounded by ig_remaining() and returns
 *     nil, msg, "deadline" once the budget is gone, so a policy normally ends by itself.  It gets
 *     IG_DEADLINE_GRACE seconds after the deadline to return its own outcome naming the step.
 *  2. Count hook: every IG_HOOK_COUNT VM instructions the hook compares the clock with the
 *     deadline; past deadline + grace it raises a unique light-userdata sentinel (g_sb.sentinel)
 *     and from then on fires every IG_HOOK_COUNT_FIRED instructions.  The sandbox's pcall and
 *     xpcall re-raise it (and any error once the interrupt has fired), so
 *     `while true do pcall(function() while true do end end) end` stops too.  The host turns the
 *     sentinel into the outcome deadline-exceeded.
 *  3. Watchdog (watchdog.c): a timer at deadline + IG_WATCHDOG_GRACE seconds ends a run stuck
 *     inside one C call (a string pattern that backtracks in C is not capped: this ends it).
 * Outside the layers, SIGTERM and SIGINT end a run the same way (watchdog.c).
 * Files read from disk (--lua-dir modules) pass the trust check of trust.c.
 */
#include "sandbox.h"
#include "timing.h"

#include "generated.h"
#include "imexguard.h"
#include "trust.h"

#include <errno.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* lua-cjson's entry point (liblua5.4-cjson ships no header). */
int luaopen_cjson(lua_State *L);

/* Instructions between two deadline checks (a check is one clock_gettime, ~20 ns). */
#define IG_HOOK_COUNT 1000
/* Instructions between two interrupts once the deadline interrupt has fired. */
#define IG_HOOK_COUNT_FIRED 10

#define ENV_KEY	   "imexguard.sandbox.env"
#define LOADED_KEY "imexguard.sandbox.loaded"
#define FROZEN_KEY "imexguard.sandbox.frozen" /* weak-keyed set of the read-only tables */

struct ig_mem {
	size_t used;  /* bytes in use */
	size_t peak;  /* bytes: the most ever in use */
	size_t limit; /* bytes: the limit in force (base, or base + reserve for the host) */
	size_t base;  /* bytes: the setting memory_limit (default IG_SANDBOX_MEM_LIMIT) */
	int refused;  /* the allocator refused an allocation since the last ig_sandbox_call */
};

/* The sandbox's state (one Lua state per process). */
static struct {
	struct ig_mem mem;
	char sentinel;	 /* its address is the deadline interrupt */
	char memory;	 /* its address is the memory interrupt (the limit was reached) */
	char loading;	 /* its address marks a module being loaded */
	int fired;	 /* the deadline interrupt has fired */
	char where[512]; /* where the interrupt first hit: "file:line" */
	char *lua_dir;	 /* --lua-dir, or NULL */
	char *traceback; /* full traceback of the last error */
} g_sb;

/* ---- memory --------------------------------------------------------------------------------- */

/* lua_Alloc (Lua 5.4 manual 4.6) with a cap: an allocation that would take the total past
 * g_sb.mem.limit bytes fails (returns NULL), which Lua reports as "not enough memory". */
static void *ig_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct ig_mem *m = ud;
	if (ptr == NULL)
		osize = 0; /* osize then encodes the object type */
	if (nsize == 0) {
		free(ptr);
		m->used -= osize;
		return NULL;
	}
	if (nsize > osize && m->used + (nsize - osize) > m->limit) {
		m->refused = 1;
		return NULL;
	}
	void *p = realloc(ptr, nsize);
	if (p == NULL)
		return NULL;
	m->used = m->used - osize + nsize;
	if (m->used > m->peak)
		m->peak = m->used;
	return p;
}

/* Unprotected error (a host bug): one line and exit ig_usage_exit (an internal error), never
 * abort() with a core in slurmd's spool directory. */
static int ig_panic(lua_State *L)
{
	const char *msg = lua_tostring(L, -1);
	fprintf(stderr, "imexguard: %s: Lua panic (a bug in imexguard): %s\n",
		ig_level_name(IG_ERR), msg ? msg : "(no message)");
	fflush(stderr);
	_exit(ig_usage_exit);
	return 0;
}

/* ---- deadline ------------------------------------------------------------------------------- */

static void raise_deadline(lua_State *L)
{
	lua_pushlightuserdata(L, &g_sb.sentinel);
	lua_error(L);
}

static int is_sentinel(lua_State *L, int idx)
{
	return lua_islightuserdata(L, idx) && lua_touserdata(L, idx) == &g_sb.sentinel;
}

/* The memory interrupt: raised again by the sandbox's pcall and xpcall once a call failed with
 * LUA_ERRMEM, so a policy cannot catch the limit and go on allocating; the host reports it. */
static void raise_memory(lua_State *L)
{
	lua_pushlightuserdata(L, &g_sb.memory);
	lua_error(L);
}

static int is_memory(lua_State *L, int idx)
{
	return lua_islightuserdata(L, idx) && lua_touserdata(L, idx) == &g_sb.memory;
}

/* Either interrupt (deadline or memory): never handed to the policy's code. */
static int is_interrupt(lua_State *L, int idx)
{
	return g_sb.fired || is_sentinel(L, idx) || is_memory(L, idx);
}

/* The count hook (lua_sethook, LUA_MASKCOUNT): layer 2 of the deadline. */
static void ig_hook(lua_State *L, lua_Debug *ar)
{
	if (!g_sb.fired) {
		double dl = ig_deadline();
		if (isinf(dl) || ig_now() < dl + IG_DEADLINE_GRACE)
			return;
		g_sb.fired = 1;
		if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
			snprintf(g_sb.where, sizeof g_sb.where, "%s:%d", ar->short_src,
				 ar->currentline);
		else
			snprintf(g_sb.where, sizeof g_sb.where, "a C function");
		lua_sethook(L, ig_hook, LUA_MASKCOUNT, IG_HOOK_COUNT_FIRED);
	}
	raise_deadline(L);
}

/* Suspend (on = 0) or restore (on = 1) the count hook; while suspended the host's bookkeeping
 * also gets IG_SANDBOX_MEM_RESERVE bytes past the memory limit. */
void ig_sandbox_hook(lua_State *L, int on)
{
	if (on) {
		lua_sethook(L, ig_hook, LUA_MASKCOUNT,
			    g_sb.fired ? IG_HOOK_COUNT_FIRED : IG_HOOK_COUNT);
		g_sb.mem.limit = g_sb.mem.base;
	} else {
		lua_sethook(L, NULL, 0, 0);
		g_sb.mem.limit = g_sb.mem.base + IG_SANDBOX_MEM_RESERVE;
	}
}

int ig_sandbox_set_memory_limit(lua_State *L, double mib)
{
	(void)L;
	if (!(mib >= 1.0) || isinf(mib))
		return -EINVAL;
	double max = (double)(SIZE_MAX / 4);
	double bytes = mib * 1048576.0;
	g_sb.mem.base = bytes > max ? (size_t)max : (size_t)bytes;
	g_sb.mem.limit = g_sb.mem.base;
	return 0;
}

/* ---- the replaced base functions ------------------------------------------------------------ */

/* The results of the sandbox's pcall and xpcall once lua_pcall returned `status`: an error after
 * the deadline interrupt has fired is re-raised as the interrupt (layer 2), so it cannot be
 * swallowed; otherwise the status boolean goes to index 1, inserted (pcall) or replacing the
 * message handler there (xpcall, replace = 1).  Returns the number of results. */
static int pcall_results(lua_State *L, int status, int replace)
{
	if (status != LUA_OK && (g_sb.fired || is_sentinel(L, -1)))
		raise_deadline(L);
	if (status == LUA_ERRMEM || (status != LUA_OK && is_memory(L, -1)))
		raise_memory(L);
	luaL_checkstack(L, 1, "pcall results");
	lua_pushboolean(L, status == LUA_OK);
	if (replace)
		lua_replace(L, 1);
	else
		lua_insert(L, 1);
	return lua_gettop(L);
}

/* pcall(f, ...) -> true, results | false, err.  As Lua's, but an error after the deadline
 * interrupt has fired is re-raised as the interrupt (layer 2), and a memory error (the limit) as
 * the memory interrupt, so neither can be swallowed. */
static int sb_pcall(lua_State *L)
{
	luaL_checkany(L, 1);
	return pcall_results(L, lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0), 0);
}

/* Call the wrapped original (upvalue 1 of the running C function) with the first `nargs`
 * arguments and leave its one result on the stack; returns 1 (a lua_CFunction's result count). */
static int call_original(lua_State *L, int nargs)
{
	lua_settop(L, nargs);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, nargs, 1);
	return 1;
}

/* The message handler installed by xpcall: the deadline interrupt passes through untouched and
 * the policy's handler (upvalue 1) is not called for it.  This matters: Lua calls a message
 * handler at the point of the error, i.e. still inside the count hook, where hooks are disabled
 * (ldo.c: allowhook is 0 until the error unwinds to a pcall), so a looping handler could not be
 * interrupted there. */
static int sb_xpcall_handler(lua_State *L)
{
	if (is_interrupt(L, 1))
		return 1;
	return call_original(L, lua_gettop(L));
}

/* xpcall(f, msgh, ...) -> true, results | false, msgh(err).  The deadline interrupt is re-raised
 * whatever the message handler returns, and the handler is not called for it. */
static int sb_xpcall(lua_State *L)
{
	int n = lua_gettop(L);
	luaL_checktype(L, 2, LUA_TFUNCTION);
	lua_pushvalue(L, 1); /* f */
	lua_pushvalue(L, 2);
	lua_pushcclosure(L, sb_xpcall_handler, 1);
	lua_replace(L, 1); /* handler at 1 */
	lua_replace(L, 2); /* f at 2 */
	return pcall_results(L, lua_pcall(L, n - 2, LUA_MULTRET, 1), 1);
}

/* load(chunk [, chunkname [, mode [, env]]]): text chunks only (a mode without "t" returns
 * nil, msg; "bt" is forced to "t"), env defaults to the sandbox env.  Upvalue 1: Lua's load. */
static int sb_load(lua_State *L)
{
	int has_env = !lua_isnone(L, 4);
	const char *mode = luaL_optstring(L, 3, "t");
	if (strchr(mode, 't') == NULL) {
		luaL_pushfail(L);
		lua_pushstring(
		    L, "load: binary chunks are not allowed in the sandbox (mode \"t\" only)");
		return 2;
	}
	lua_settop(L, 4);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_pushvalue(L, 1);
	lua_pushvalue(L, 2);
	lua_pushliteral(L, "t");
	if (has_env)
		lua_pushvalue(L, 4);
	else
		lua_getfield(L, LUA_REGISTRYINDEX, ENV_KEY);
	/* --timing: compiling source is "load" (the policy file, the settings); a reader function
	 * runs Lua code, which keeps its own slots */
	int timed = lua_type(L, 1) == LUA_TSTRING;
	double t0 = ig_now();
	lua_call(L, 4, LUA_MULTRET);
	if (timed)
		ig_timing_add("load", ig_now() - t0);
	return lua_gettop(L) - 4;
}

/* collectgarbage([opt]): only "count" (KiB in use, as Lua's); anything else raises. */
static int sb_collectgarbage(lua_State *L)
{
	const char *opt = luaL_optstring(L, 1, "collect");
	if (strcmp(opt, "count") != 0)
		return luaL_error(
		    L, "collectgarbage(\"%s\") is not allowed in the sandbox (only \"count\")",
		    opt);
	int kib = lua_gc(L, LUA_GCCOUNT, 0);
	int rest = lua_gc(L, LUA_GCCOUNTB, 0);
	lua_pushnumber(L, (lua_Number)kib + (lua_Number)rest / 1024.0);
	return 1;
}

/* print(...): one line "imexguard: print: a<TAB>b" on stderr (slurmd keeps stderr; stdout is the
 * output of `imexguard status`). */
static int sb_print(lua_State *L)
{
	int n = lua_gettop(L);
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	luaL_addstring(&b, "imexguard: print: ");
	for (int i = 1; i <= n; i++) {
		if (i > 1)
			luaL_addchar(&b, '\t');
		luaL_tolstring(L, i, NULL);
		luaL_addvalue(&b);
	}
	luaL_addchar(&b, '\n');
	luaL_pushresult(&b);
	size_t len;
	const char *s = lua_tolstring(L, -1, &len);
	fwrite(s, 1, len, stderr);
	fflush(stderr);
	return 0;
}

/* Whether the table at idx is read-only (the sandbox env, a library table, a module). */
static int is_frozen(lua_State *L, int idx)
{
	idx = lua_absindex(L, idx);
	lua_getfield(L, LUA_REGISTRYINDEX, FROZEN_KEY);
	lua_pushvalue(L, idx);
	int frozen = lua_rawget(L, -2) != LUA_TNIL;
	lua_pop(L, 2);
	return frozen;
}

/* rawset(t, k, v): as Lua's, but refuses the sandbox env (the global guard is not optional) and
 * every read-only table (libraries, modules). */
static int sb_rawset(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	luaL_checkany(L, 2);
	luaL_checkany(L, 3);
	lua_getfield(L, LUA_REGISTRYINDEX, ENV_KEY);
	if (lua_rawequal(L, 1, -1))
		return luaL_error(L,
				  "rawset on the global environment is not allowed (no globals)");
	if (is_frozen(L, 1))
		return luaL_error(L, "rawset on a read-only table (a library or module) is not "
				     "allowed in the sandbox");
	lua_settop(L, 3);
	lua_rawset(L, 1);
	return 1;
}

/* setmetatable(t, mt): as Lua's (upvalue 1), but refuses a metatable with a __gc field: Lua 5.4
 * runs finalizers with hooks disabled (lgc.c GCTM), so a looping finalizer would escape layer 2
 * of the deadline.  (A __gc added to mt later is ignored by Lua: marking happens here.) */
static int sb_setmetatable(lua_State *L)
{
	lua_pushliteral(L, "__gc");
	if (lua_istable(L, 2) && lua_rawget(L, 2) != LUA_TNIL)
		return luaL_error(L, "__gc metamethods are not allowed in the sandbox");
	return call_original(L, 2);
}

/* getmetatable(v): as Lua's (upvalue 1), but the metatable of a full userdata (every one is a
 * host object: a policy cannot make userdata) is never handed out: its __metatable field, else
 * a string saying it is protected.  So no policy can reach or change a host object's methods or
 * give it a __gc finalizer. */
static int sb_getmetatable(lua_State *L)
{
	luaL_checkany(L, 1);
	if (lua_type(L, 1) == LUA_TUSERDATA) {
		if (luaL_getmetafield(L, 1, "__metatable") == LUA_TNIL)
			lua_pushliteral(L, "the metatable of a host object is protected");
		return 1;
	}
	return call_original(L, 1);
}

/* hidden.__index of the env: reading an undefined global raises, naming it (position of the
 * reader). */
static int sb_env_index(lua_State *L)
{
	return luaL_error(L, "undefined global '%s'", luaL_tolstring(L, 2, NULL));
}

/* env.__newindex (upvalue 1: the env's contents): assigning a global raises, naming it. */
static int sb_env_newindex(lua_State *L)
{
	lua_pushvalue(L, 2);
	if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
		return luaL_error(L,
				  "cannot change the global '%s' (the sandbox's globals are "
				  "read-only)",
				  luaL_tolstring(L, 2, NULL));
	return luaL_error(L, "assignment to undeclared global '%s'", luaL_tolstring(L, 2, NULL));
}

/* ---- read-only tables ------------------------------------------------------------------------
 * A read-only table is an empty proxy whose metatable reads from a hidden table of contents
 * (__index), refuses writes (__newindex), iterates the contents (__pairs), gives their length
 * (__len) and is itself protected (__metatable).  The proxy keeps its identity, so
 * getmetatable("").__index == string still holds. */

/* __newindex of a read-only table (upvalue 1: its name): always raises. */
static int sb_readonly_newindex(lua_State *L)
{
	return luaL_error(L, "cannot set %s.%s: the table is read-only in the sandbox",
			  lua_tostring(L, lua_upvalueindex(1)), luaL_tolstring(L, 2, NULL));
}

/* The iterator of __pairs (upvalue 1: the contents): next over the contents, which the policy
 * never receives. */
static int sb_readonly_next(lua_State *L)
{
	lua_settop(L, 2);
	if (lua_next(L, lua_upvalueindex(1)))
		return 2;
	lua_pushnil(L);
	return 1;
}

/* __pairs of a read-only table. */
static int sb_readonly_pairs(lua_State *L)
{
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_pushcclosure(L, sb_readonly_next, 1);
	lua_pushvalue(L, 1);
	lua_pushnil(L);
	return 3;
}

/* __len of a read-only table: the border of the contents. */
static int sb_readonly_len(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)lua_rawlen(L, lua_upvalueindex(1)));
	return 1;
}

/* Make the (empty) table at proxy a read-only view of the table at contents, named `what` in
 * errors, and record it as read-only (rawset refuses it).  newindex: the __newindex function
 * (NULL: sb_readonly_newindex naming `what`). */
static void make_readonly(lua_State *L, int proxy, int contents, const char *what,
			  lua_CFunction newindex)
{
	proxy = lua_absindex(L, proxy);
	contents = lua_absindex(L, contents);
	lua_createtable(L, 0, 5);
	lua_pushvalue(L, contents);
	lua_setfield(L, -2, "__index");
	if (newindex) {
		lua_pushvalue(L, contents);
		lua_pushcclosure(L, newindex, 1);
	} else {
		lua_pushstring(L, what);
		lua_pushcclosure(L, sb_readonly_newindex, 1);
	}
	lua_setfield(L, -2, "__newindex");
	lua_pushvalue(L, contents);
	lua_pushcclosure(L, sb_readonly_pairs, 1);
	lua_setfield(L, -2, "__pairs");
	lua_pushvalue(L, contents);
	lua_pushcclosure(L, sb_readonly_len, 1);
	lua_setfield(L, -2, "__len");
	lua_pushfstring(L, "the %s table is read-only", what);
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, proxy);
	lua_getfield(L, LUA_REGISTRYINDEX, FROZEN_KEY);
	lua_pushvalue(L, proxy);
	lua_pushboolean(L, 1);
	lua_rawset(L, -3);
	lua_pop(L, 1);
}

/* Make the table at idx read-only in place: its contents move to a hidden table and it becomes
 * the proxy.  A value that is not a table, or a table with a metatable of its own, is left as is
 * (the latter would lose its metamethods). */
static void freeze(lua_State *L, int idx, const char *what)
{
	idx = lua_absindex(L, idx);
	if (!lua_istable(L, idx))
		return;
	int top = lua_gettop(L);
	int has_mt = lua_getmetatable(L, idx);
	lua_settop(L, top);
	if (has_mt || is_frozen(L, idx))
		return;
	lua_newtable(L);
	int contents = lua_gettop(L);
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		lua_pushvalue(L, -2);
		lua_insert(L, -2);
		lua_rawset(L, contents);
	}
	lua_pushnil(L);
	while (lua_next(L, contents)) {
		lua_pop(L, 1);
		lua_pushvalue(L, -1);
		lua_pushnil(L);
		lua_rawset(L, idx);
	}
	make_readonly(L, idx, contents, what, NULL);
	lua_pop(L, 1);
}

/* Push the sandbox environment table (the policies' _ENV). */
static void push_env(lua_State *L)
{
	lua_getfield(L, LUA_REGISTRYINDEX, ENV_KEY);
}

/* Load a chunk whose _ENV is the sandbox env, chunkname "@path"; mode "t" (source: every file
 * read at run time) or "b" (the embedded library's own precompiled chunks, never anything else).
 * Pushes the function, or returns -EINVAL with the error ("path:line: msg") pushed. */
static int sandbox_load(lua_State *L, const char *text, size_t len, const char *chunkname,
			const char *mode)
{
	double t0 = ig_now();
	int rc = luaL_loadbufferx(L, text, len, chunkname, mode);
	ig_timing_add("load", ig_now() - t0);
	if (rc != LUA_OK)
		return -EINVAL;
	push_env(L);
	if (lua_setupvalue(L, -2, 1) == NULL)
		lua_pop(L, 1);
	return 0;
}

/* ---- modules -------------------------------------------------------------------------------- */

static const struct ig_embedded *find_embedded(const char *name)
{
	for (const struct ig_embedded *e = ig_embedded; e->name != NULL; e++)
		if (strcmp(e->name, name) == 0)
			return e;
	return NULL;
}

/* A loadable library name: "imexguard.x" or "policies.x", x one or more words of [A-Za-z0-9_]
 * joined by single dots ("imexguard.testing.base": a module in a folder; no path tricks). */
static int valid_lib_name(const char *name)
{
	const char *rest;
	if (strncmp(name, "imexguard.", 10) == 0)
		rest = name + 10;
	else if (strncmp(name, "policies.", 9) == 0)
		rest = name + 9;
	else
		return 0;
	if (*rest == '\0')
		return 0;
	for (const char *p = rest; *p; p++) {
		if (*p == '.') {
			if (p == rest || p[1] == '\0' || p[1] == '.')
				return 0;
		} else if (!(*p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
			     (*p >= 'A' && *p <= 'Z'))) {
			return 0;
		}
	}
	return 1;
}

/* DIR/a/b.lua for "a.b" into buf, or with `init` DIR/a/b/init.lua (package.path's "?/init.lua");
 * returns 0 or -ENAMETOOLONG. */
static int lua_dir_path(const char *name, int init, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s/%s%s", g_sb.lua_dir, name, init ? "/init.lua" : ".lua");
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	char *p = buf + strlen(g_sb.lua_dir) + 1;
	for (char *end = p + strlen(name); p < end; p++)
		if (*p == '.')
			*p = '/';
	return 0;
}

int ig_sandbox_has_module(lua_State *L, const char *name)
{
	(void)L;
	if (!valid_lib_name(name))
		return 0;
	if (find_embedded(name))
		return 1;
	if (!g_sb.lua_dir)
		return 0;
	char path[4096];
	for (int init = 0; init <= 1; init++)
		if (lua_dir_path(name, init, path, sizeof path) == 0 && access(path, R_OK) == 0)
			return 1;
	return 0;
}

/* Push the chunk of library module `name` (from --lua-dir: DIR/a/b.lua, else DIR/a/b/init.lua;
 * else embedded) with the sandbox env; raises when it is missing or does not compile. */
static void push_lib_chunk(lua_State *L, const char *name)
{
	for (int init = 0; g_sb.lua_dir && init <= 1; init++) {
		char path[4096], err[768], chunkname[4100];
		char *data = NULL;
		size_t len = 0;
		if (lua_dir_path(name, init, path, sizeof path) != 0)
			luaL_error(L, "module '%s': path too long under --lua-dir", name);
		int rc = ig_read_trusted(path, "module", &data, &len, err, sizeof err);
		if (rc == 0) {
			snprintf(chunkname, sizeof chunkname, "@%s", path);
			rc = sandbox_load(L, data, len, chunkname, "t");
			free(data);
			if (rc != 0)
				lua_error(L);
			return;
		}
		if (rc != -ENOENT && !(init && rc == -ENOTDIR)) /* DIR/a/b a file: no folder b */
			luaL_error(L, "%s", err);
	}
	const struct ig_embedded *e = find_embedded(name);
	if (e == NULL)
		luaL_error(
		    L,
		    "module '%s' not found (the sandbox provides only imexguard.*, policies.* "
		    "and cjson)",
		    name);
	if (sandbox_load(L, e->data, e->len, e->chunkname, "b") != 0)
		lua_error(L);
}

/* Remove lua-cjson's configuration functions (encode_* and decode_*: sparse arrays, depths, number
 * precision, ...) from its module table on top: the configuration is shared by every user of the
 * module, so a policy would change how the host reads ctl answers and writes the state file.
 * cjson.new() still gives a policy a private instance to configure. */
static void strip_cjson_config(lua_State *L)
{
	if (!lua_istable(L, -1))
		return;
	int t = lua_gettop(L);
	lua_newtable(L); /* the names to remove (a table cannot change while it is traversed) */
	int names = t + 1;
	lua_pushnil(L);
	while (lua_next(L, t)) {
		lua_pop(L, 1);
		const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
		if (strncmp(k, "encode_", 7) == 0 || strncmp(k, "decode_", 7) == 0) {
			lua_pushvalue(L, -1);
			lua_rawseti(L, names, (lua_Integer)lua_rawlen(L, names) + 1);
		}
	}
	for (lua_Integer i = 1; lua_rawgeti(L, names, i) != LUA_TNIL; i++) {
		lua_pushnil(L);
		lua_rawset(L, t);
	}
	lua_settop(L, t);
}

/* With --timing, cjson.decode (the module table on top) is timed in slot "cjson.decode": the
 * parse of every ctl answer and state file. */
static void time_cjson_decode(lua_State *L)
{
	if (!ig_timing_enabled() || !lua_istable(L, -1))
		return;
	lua_getfield(L, -1, "decode");
	ig_timing_wrap_value(L, "cjson.decode");
	lua_setfield(L, -2, "decode");
}

/* require(name) -> module value.  Only the embedded library, imexguard.host and cjson (see the
 * top of this file).  Each module is loaded once per run; a module that requires itself while
 * loading raises "loop or previous error loading module". */
static int sb_require(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);
	lua_settop(L, 1);
	lua_getfield(L, LUA_REGISTRYINDEX, LOADED_KEY); /* 2 */
	if (lua_getfield(L, 2, name) != LUA_TNIL) {
		if (lua_touserdata(L, -1) == &g_sb.loading)
			return luaL_error(L, "loop or previous error loading module '%s'", name);
		return 1;
	}
	lua_pop(L, 1);
	lua_pushlightuserdata(L, &g_sb.loading);
	lua_setfield(L, 2, name);
	if (strcmp(name, "imexguard.host") == 0) {
		lua_pushcfunction(L, luaopen_imexguard_host);
		lua_pushvalue(L, 1);
		lua_call(L, 1, 1);
		/* The budget and the bus are the host's (--deadline, the setting `bus`): a policy
		 * can change neither. */
		if (lua_istable(L, -1)) {
			lua_pushnil(L);
			lua_setfield(L, -2, "set_deadline");
			lua_pushnil(L);
			lua_setfield(L, -2, "unit_set_bus");
		}
	} else if (strcmp(name, "cjson") == 0) {
		lua_pushcfunction(L, luaopen_cjson);
		lua_pushvalue(L, 1);
		lua_call(L, 1, 1);
		strip_cjson_config(L);
		time_cjson_decode(L);
	} else if (valid_lib_name(name)) {
		push_lib_chunk(L, name);
		lua_pushvalue(L, 1);
		lua_call(L, 1, 1);
	} else {
		return luaL_error(L,
				  "module '%s' not found (the sandbox provides only imexguard.*, "
				  "policies.* and cjson)",
				  name);
	}
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		lua_pushboolean(L, 1);
	}
	/* The host's modules are shared by the whole run: read-only, so a policy cannot change how
	 * the host behaves.  A policy module (policies.*) stays the policy's to change. */
	if (strncmp(name, "policies.", 9) != 0)
		freeze(L, -1, name);
	lua_pushvalue(L, -1);
	lua_setfield(L, 2, name);
	return 1;
}

/* ---- the state ------------------------------------------------------------------------------ */

static const char *const base_keep[] = {
    "assert", "error",	"ipairs",   "next",	"pairs", "rawequal", "rawget",
    "rawlen", "select", "tonumber", "tostring", "type",	 "_VERSION", NULL,
};

static const luaL_Reg sandbox_funcs[] = {
    {"pcall", sb_pcall}, {"xpcall", sb_xpcall}, {"collectgarbage", sb_collectgarbage},
    {"print", sb_print}, {"rawset", sb_rawset}, {"require", sb_require},
    {NULL, NULL},
};

/* The libraries a policy sees, made read-only in place (string.dump removed first). */
static const char *const sandbox_libs[] = {LUA_STRLIBNAME, LUA_TABLIBNAME, LUA_MATHLIBNAME,
					   LUA_UTF8LIBNAME, NULL};

/* Fill the table at contents with the allowed globals, from the real global table. */
static void fill_globals(lua_State *L, int contents)
{
	lua_pushglobaltable(L);
	int g = lua_gettop(L);
	for (const char *const *k = base_keep; *k; k++) {
		lua_getfield(L, g, *k);
		lua_setfield(L, contents, *k);
	}
	for (const char *const *k = sandbox_libs; *k; k++) {
		lua_getfield(L, g, *k);
		lua_setfield(L, contents, *k);
	}
	static const struct {
		const char *name;
		lua_CFunction f;
	} wrapped[] = {{"load", sb_load},
		       {"setmetatable", sb_setmetatable},
		       {"getmetatable", sb_getmetatable},
		       {NULL, NULL}};
	for (int i = 0; wrapped[i].name; i++) {
		lua_getfield(L, g, wrapped[i].name);
		lua_pushcclosure(L, wrapped[i].f, 1);
		lua_setfield(L, contents, wrapped[i].name);
	}
	lua_pop(L, 1); /* global table */
	lua_pushvalue(L, contents);
	luaL_setfuncs(L, sandbox_funcs, 0);
	lua_pop(L, 1);
}

/* The shared string metatable: its __metatable is a read-only view of it, so
 * getmetatable("") works as usual but cannot change it (Lua reads the real one, raw). */
static void protect_string_metatable(lua_State *L)
{
	lua_pushliteral(L, "");
	lua_getmetatable(L, -1);
	int mt = lua_gettop(L);
	lua_newtable(L);
	make_readonly(L, -1, mt, "string metatable", NULL);
	lua_setfield(L, mt, "__metatable");
	lua_pop(L, 2);
}

/* Protected part of ig_sandbox_new. */
static int sandbox_init(lua_State *L)
{
	static const luaL_Reg libs[] = {
	    {LUA_GNAME, luaopen_base},	     {LUA_STRLIBNAME, luaopen_string},
	    {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
	    {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL},
	};
	for (const luaL_Reg *lib = libs; lib->func; lib++) {
		luaL_requiref(L, lib->name, lib->func, 1);
		lua_pop(L, 1);
	}
	lua_newtable(L);
	lua_setfield(L, LUA_REGISTRYINDEX, FROZEN_KEY);
	lua_getfield(L, LUA_REGISTRYINDEX, FROZEN_KEY);
	lua_createtable(L, 0, 1);
	lua_pushliteral(L, "k");
	lua_setfield(L, -2, "__mode");
	lua_setmetatable(L, -2);
	lua_pop(L, 1);

	/* no bytecode: string.dump is gone for everyone (the host never needs it) */
	lua_getglobal(L, LUA_STRLIBNAME);
	lua_pushnil(L);
	lua_setfield(L, -2, "dump");
	lua_pop(L, 1);
	for (const char *const *k = sandbox_libs; *k; k++) {
		lua_getglobal(L, *k);
		freeze(L, -1, *k);
		lua_pop(L, 1);
	}
	protect_string_metatable(L);

	lua_newtable(L); /* env: the proxy */
	int env = lua_gettop(L);
	lua_newtable(L); /* its contents */
	int contents = lua_gettop(L);
	fill_globals(L, contents);
	lua_pushvalue(L, env);
	lua_setfield(L, contents, LUA_GNAME); /* _G is the sandbox env */
	lua_createtable(L, 0, 1);	      /* undefined globals raise */
	lua_pushcfunction(L, sb_env_index);
	lua_setfield(L, -2, "__index");
	lua_setmetatable(L, contents);
	make_readonly(L, env, contents, "_G", sb_env_newindex);
	lua_getmetatable(L, env);
	lua_pushliteral(L, "the sandbox environment is protected");
	lua_setfield(L, -2, "__metatable");
	lua_pop(L, 2);

	lua_setfield(L, LUA_REGISTRYINDEX, ENV_KEY);
	lua_newtable(L);
	lua_setfield(L, LUA_REGISTRYINDEX, LOADED_KEY);
	return 0;
}

lua_State *ig_sandbox_new(const char *lua_dir, char *err, size_t errlen)
{
	if (lua_dir != NULL) {
		if (lua_dir[0] != '/') {
			snprintf(err, errlen, "--lua-dir %s: must be an absolute directory",
				 lua_dir);
			return NULL;
		}
		struct stat st;
		if (stat(lua_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
			snprintf(err, errlen, "--lua-dir %s: not a directory", lua_dir);
			return NULL;
		}
		free(g_sb.lua_dir);
		g_sb.lua_dir = strdup(lua_dir);
		if (g_sb.lua_dir == NULL) {
			snprintf(err, errlen, "out of memory");
			return NULL;
		}
	}
	g_sb.mem.used = 0;
	g_sb.mem.peak = 0;
	g_sb.mem.base = IG_SANDBOX_MEM_LIMIT;
	g_sb.mem.limit = IG_SANDBOX_MEM_LIMIT;
	lua_State *L = lua_newstate(ig_alloc, &g_sb.mem);
	if (L == NULL) {
		snprintf(err, errlen, "cannot create the Lua state: out of memory");
		return NULL;
	}
	lua_atpanic(L, ig_panic);
	lua_pushcfunction(L, sandbox_init);
	if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
		snprintf(err, errlen, "cannot set up the Lua sandbox: %s", lua_tostring(L, -1));
		lua_close(L);
		return NULL;
	}
	lua_sethook(L, ig_hook, LUA_MASKCOUNT, IG_HOOK_COUNT);
	return L;
}

size_t ig_sandbox_heap_peak(void)
{
	return g_sb.mem.peak;
}

void ig_sandbox_close(lua_State *L)
{
	if (L != NULL)
		lua_close(L);
	free(g_sb.traceback);
	g_sb.traceback = NULL;
}

/* ---- calling -------------------------------------------------------------------------------- */

/* Whether the first line of msg already carries a position ("src:123:"). */
static int has_position(const char *msg)
{
	for (const char *p = msg; *p && *p != '\n'; p++) {
		if (*p != ':' || p[1] < '0' || p[1] > '9')
			continue;
		const char *q = p + 1;
		while (*q >= '0' && *q <= '9')
			q++;
		if (*q == ':')
			return 1;
	}
	return 0;
}

/* Message handler of ig_sandbox_call: passes the deadline interrupt through; otherwise returns
 * "file:line: message" plus Lua's traceback (position added from the innermost Lua function
 * when the error value has none, e.g. error("x", 0) or error({})). */
static int sb_msgh(lua_State *L)
{
	if (is_interrupt(L, 1)) {
		lua_settop(L, 1);
		return 1;
	}
	const char *msg = lua_tostring(L, 1);
	if (msg == NULL) {
		if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
			msg = lua_tostring(L, -1);
		else
			msg =
			    lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
	}
	if (!has_position(msg)) {
		lua_Debug ar;
		for (int level = 1; lua_getstack(L, level, &ar); level++) {
			if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) {
				msg = lua_pushfstring(L, "%s:%d: %s", ar.short_src, ar.currentline,
						      msg);
				break;
			}
		}
	}
	luaL_traceback(L, L, msg, 1);
	return 1;
}

const char *ig_sandbox_traceback(void)
{
	return g_sb.traceback ? g_sb.traceback : "";
}

/* Replace the error on top by the message of the memory interrupt.  The limit is lifted by
 * IG_SANDBOX_MEM_RESERVE bytes for the message and a full collection then frees what the failed
 * call left behind, so the host's epilogue (final line, driver bookkeeping) can still allocate. */
static void memory_message(lua_State *L)
{
	size_t limit = g_sb.mem.limit;
	g_sb.mem.limit = g_sb.mem.base + IG_SANDBOX_MEM_RESERVE;
	lua_pop(L, 1);
	lua_pushfstring(L, "memory limit of %d MiB reached (the setting memory_limit)",
			(int)(g_sb.mem.base >> 20));
	lua_gc(L, LUA_GCCOLLECT);
	g_sb.mem.limit = limit;
}

enum ig_call ig_sandbox_call(lua_State *L, int nargs, int nresults)
{
	int base = lua_gettop(L) - nargs; /* the function */
	lua_pushcfunction(L, sb_msgh);
	lua_insert(L, base);
	g_sb.mem.refused = 0;
	int status = lua_pcall(L, nargs, nresults, base);
	lua_remove(L, base);
	if (status == LUA_OK)
		return IG_CALL_OK;
	if (g_sb.fired || is_sentinel(L, -1)) {
		lua_pop(L, 1);
		lua_pushfstring(L, "the run's deadline passed; interrupted at %s",
				g_sb.where[0] ? g_sb.where : "an unknown place");
		return IG_CALL_DEADLINE;
	}
	/* LUA_ERRERR with a refused allocation: the traceback of an error ran out of memory. */
	if (status == LUA_ERRMEM || is_memory(L, -1) ||
	    (status == LUA_ERRERR && g_sb.mem.refused)) {
		memory_message(L);
		return IG_CALL_MEMORY;
	}
	const char *full = lua_tostring(L, -1);
	if (full == NULL)
		full = "(error object is not a string)";
	free(g_sb.traceback);
	g_sb.traceback = strdup(full);
	const char *nl = strchr(full, '\n');
	if (nl)
		lua_pushlstring(L, full, (size_t)(nl - full));
	else
		lua_pushstring(L, full);
	lua_remove(L, -2);
	return IG_CALL_ERROR;
}

void ig_sandbox_preload(lua_State *L, const char *name)
{
	lua_getfield(L, LUA_REGISTRYINDEX, LOADED_KEY);
	lua_insert(L, -2);
	lua_setfield(L, -2, name);
	lua_pop(L, 1);
}

enum ig_call ig_sandbox_require(lua_State *L, const char *name)
{
	lua_pushcfunction(L, sb_require);
	lua_pushstring(L, name);
	return ig_sandbox_call(L, 1, 1);
}
