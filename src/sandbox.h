/*
 * sandbox.h: the Lua host of the imexguard binary (sandbox.c): the restricted Lua state in which
 * settings files and policies run, the embedded module loader, the deadline enforcement (count
 * hook, uncatchable interrupt, watchdog) and the trust check of files loaded as root.
 * Only src/main.c uses it; the Lua C module (host.so) for busted does not contain it.
 */
#ifndef IMEXGUARD_SANDBOX_H
#define IMEXGUARD_SANDBOX_H

#include <lua.h>
#include <stddef.h>

/* Memory cap of the Lua state in bytes (an allocation beyond it fails: "not enough memory"). */
#define IG_SANDBOX_MEM_LIMIT ((size_t)256 << 20)
/* Largest settings/policy/module file read from disk, in bytes. */
#define IG_SANDBOX_MAX_FILE ((size_t)4 << 20)
/* Seconds after the deadline during which the policy may still return its own outcome (every
 * blocking primitive already returns "deadline"); then the count hook interrupts it. */
#define IG_DEADLINE_GRACE 0.25
/* Seconds after the deadline at which the watchdog ends the process (code stuck in C). */
#define IG_WATCHDOG_GRACE 2.0
/* Exit code of the watchdog: the code of the outcome deadline-exceeded (outcomes.lua). */
#define IG_WATCHDOG_EXIT 10

/* Result of ig_sandbox_call. */
enum ig_call {
	IG_CALL_OK = 0,	   /* results on the stack */
	IG_CALL_ERROR = 1, /* error message (string: first line "file:line: msg") on the stack */
	IG_CALL_DEADLINE =
	    2, /* the deadline interrupt; a message naming where it hit is on the stack */
	IG_CALL_MEMORY = 3, /* memory cap reached; a message is on the stack */
};

/* Create the sandboxed Lua state.  lua_dir: NULL, or an absolute directory from which the modules
 * "a.b" are loaded as DIR/a/b.lua instead of the embedded copies (development override; a
 * missing file falls back to the embedded module).  Installs the count hook (deadline).
 * Returns the state, or NULL with a one-line message in err (errlen bytes). */
lua_State *ig_sandbox_new(const char *lua_dir, char *err, size_t errlen);

/* Close the state (runs pending finalizers, e.g. lock objects unlock). NULL is accepted. */
void ig_sandbox_close(lua_State *L);

/* Push the sandbox environment table (the policies' _ENV). */
void ig_sandbox_push_env(lua_State *L);

/* require(name) from C, as a sandboxed chunk would call it.  On IG_CALL_OK the module's value is
 * pushed; otherwise a message (an unknown module: "module 'x' not found ...").  The module's chunk
 * runs under ig_sandbox_call (deadline and errors are classified). */
enum ig_call ig_sandbox_require(lua_State *L, const char *name);

/* Whether an embedded module (name "imexguard.x" or "policies.x") exists in the binary or in
 * the --lua-dir directory.  Returns 1 or 0. */
int ig_sandbox_has_module(lua_State *L, const char *name);

/* Read a settings or policy file.  Running as root (geteuid() == 0) the file must be a regular
 * file owned by root and not writable by group or others, and every directory above it owned by
 * root and not writable by group or others, except a root-owned directory with the sticky bit
 * (like /tmp): see sandbox.c.  On success *data (malloc'd, NUL-terminated, free()) and *len are
 * set and 0 is returned; on failure a negative errno and a one-line message naming the file.
 * what: "policy", "settings file" ..., used in messages. */
int ig_read_trusted(const char *path, const char *what, char **data, size_t *len, char *err,
		    size_t errlen);

/* Load a chunk from text with the sandbox env; chunkname "@path".  Pushes the function, or
 * returns -EINVAL with the syntax error (string "path:line: msg") pushed. */
int ig_sandbox_load(lua_State *L, const char *text, size_t len, const char *chunkname);

/* Call the function below its nargs arguments with a traceback message handler, like lua_pcall,
 * and classify the result (enum ig_call).  On IG_CALL_OK nresults results are on the stack (or
 * all of them with LUA_MULTRET); otherwise one message string.  The full traceback of the last
 * error is kept for ig_sandbox_traceback. */
enum ig_call ig_sandbox_call(lua_State *L, int nargs, int nresults);

/* The full traceback of the last IG_CALL_ERROR ("" when none); valid until the next call. */
const char *ig_sandbox_traceback(void);

/* Whether the deadline interrupt has fired (1) or not (0). */
int ig_sandbox_deadline_fired(void);

/* Suspend (on = 0) or restore (on = 1) the count hook around the host's own bookkeeping. */
void ig_sandbox_hook(lua_State *L, int on);

/* Arm (or re-arm after the deadline changed) the watchdog at ig_deadline() + IG_WATCHDOG_GRACE
 * seconds (CLOCK_MONOTONIC).  No deadline: disarmed.  The first call also installs the SIGTERM and
 * SIGINT handlers that end the run at once with its final line (outcome deadline-exceeded, exit
 * IG_WATCHDOG_EXIT).  Returns 0 or a negative errno. */
int ig_watchdog_arm(void);

/* Set the command and job id that the watchdog's last line names (copied). */
void ig_watchdog_label(const char *command, const char *job);

#endif
