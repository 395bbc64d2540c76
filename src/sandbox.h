/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sandbox.h: the Lua host of the imexguard binary (sandbox.c): the restricted Lua state in which
 * settings files and policies run, the loader of the modules compiled into the binary
 * (ig_embedded) and layer 2 of the deadline (the count hook and its uncatchable interrupt).
 * Only the binary uses it; the Lua C module (host.so) for busted does not contain it.
 */
#ifndef IMEXGUARD_SANDBOX_H
#define IMEXGUARD_SANDBOX_H

#include <lua.h>
#include <stddef.h>

/* Default memory limit of the Lua state in bytes (the setting memory_limit, in MiB, replaces it
 * once the settings are read; the settings file itself runs under this default).  An allocation
 * beyond it fails, and the call ends with IG_CALL_MEMORY. */
#define IG_SANDBOX_MEM_LIMIT ((size_t)256 << 20)
/* Bytes past the limit that the host's own bookkeeping may use (ig_sandbox_hook(L, 0), the
 * message of IG_CALL_MEMORY), so the run still ends with its final line after the limit. */
#define IG_SANDBOX_MEM_RESERVE ((size_t)16 << 20)
/* Seconds after the deadline during which the policy may still return its own outcome (every
 * blocking primitive already returns "deadline"); then the count hook interrupts it. */
#define IG_DEADLINE_GRACE 0.25

/* ---- the embedded modules (build/embedded.c, written by src/embed.lua) ---------------------- */

/* A module compiled into the binary: its name ("imexguard.x", "policies.p"), its chunk name
 * ("@lua/imexguard/x.lua") and its precompiled chunk (Lua 5.4 bytecode with debug information),
 * len bytes.  The table ig_embedded ends with a NULL name. */
struct ig_embedded {
	const char *name;
	const char *chunkname;
	const char *data;
	size_t len;
};
extern const struct ig_embedded ig_embedded[];

/* ---- the sandbox --------------------------------------------------------------------------- */

/* Result of ig_sandbox_call. */
enum ig_call {
	IG_CALL_OK = 0,	      /* results on the stack */
	IG_CALL_ERROR = 1,    /* error message (string: first line "file:line: msg") on the stack */
	IG_CALL_DEADLINE = 2, /* the deadline interrupt; a message naming where it hit */
	IG_CALL_MEMORY = 3,   /* memory limit reached: "memory limit of N MiB reached (...)" */
};

/* Create the sandboxed Lua state.  lua_dir: NULL, or an absolute directory from which the modules
 * "a.b" are loaded as DIR/a/b.lua instead of the embedded copies (development override; a
 * missing file falls back to the embedded module).  Installs the count hook (deadline).
 * Returns the state, or NULL with a one-line message in err (errlen bytes). */
lua_State *ig_sandbox_new(const char *lua_dir, char *err, size_t errlen);

/* Bytes: the most the Lua heap of the state held at any time (what the allocator counts against
 * memory_limit). */
size_t ig_sandbox_heap_peak(void);

/* Close the state (runs pending finalizers, e.g. lock objects unlock). NULL is accepted. */
void ig_sandbox_close(lua_State *L);

/* require(name) from C, as a sandboxed chunk would call it.  On IG_CALL_OK the module's value is
 * pushed; otherwise a message (an unknown module: "module 'x' not found ...").  The module's chunk
 * runs under ig_sandbox_call (deadline and errors are classified). */
enum ig_call ig_sandbox_require(lua_State *L, const char *name);

/* Pop the value on top and make it what require(name) returns from now on (e.g. the recorders of
 * `plan` or the fake host of `check` as "imexguard.host"). */
void ig_sandbox_preload(lua_State *L, const char *name);

/* Whether an embedded module (name "imexguard.x" or "policies.x") exists in the binary or in
 * the --lua-dir directory.  Returns 1 or 0. */
int ig_sandbox_has_module(lua_State *L, const char *name);

/* Call the function below its nargs arguments with a traceback message handler, like lua_pcall,
 * and classify the result (enum ig_call).  On IG_CALL_OK nresults results are on the stack (or
 * all of them with LUA_MULTRET); otherwise one message string.  The full traceback of the last
 * error is kept for ig_sandbox_traceback. */
enum ig_call ig_sandbox_call(lua_State *L, int nargs, int nresults);

/* The full traceback of the last IG_CALL_ERROR ("" when none); valid until the next call. */
const char *ig_sandbox_traceback(void);

/* Suspend (on = 0) or restore (on = 1) the count hook around the host's own bookkeeping; while
 * suspended the memory limit is raised by IG_SANDBOX_MEM_RESERVE bytes. */
void ig_sandbox_hook(lua_State *L, int on);

/* Set the memory limit of the Lua state to mib MiB (the setting memory_limit, a number >= 1;
 * values past SIZE_MAX / 4 bytes are clamped).  A Lua call that needs more ends with
 * IG_CALL_MEMORY; the sandbox's pcall and xpcall cannot catch it (lua_Alloc, Lua 5.4 manual
 * 4.6).  Returns 0, or -EINVAL for a value below 1 or not finite (nothing changed). */
int ig_sandbox_set_memory_limit(lua_State *L, double mib);

#endif
