/*
 * main.c: the imexguard command line (getopt_long): parse the arguments, set the deadline, read
 * the settings and the policy in the sandbox (sandbox.c), build the context `ctx`, call the
 * policy's entry point, map its outcome to the exit code and log the one final line
 *
 *     imexguard: <notice|err>: <command> job=<id> outcome=<name>: <message>
 *
 * (also a journald entry with IMEXGUARD_OUTCOME, IMEXGUARD_JOB_ID, IMEXGUARD_COMMAND).
 * Slurm drains a node on any non-zero prolog exit (slurm.conf(5) Prolog), so a command line that
 * cannot run exits 1, never 0: a prolog that did not run must not pass silently.
 */
#include "imexguard.h"
#include "sandbox.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

#define DEFAULT_CONFIG	 "/etc/imexguard/imexguard.conf"
#define DEFAULT_POLICY	 "policies.default"
#define DEFAULT_DEADLINE 90.0
#define EXIT_USAGE	 1
/* Exit codes of the outcomes the host itself decides (same as lua/imexguard/outcomes.lua; used
 * only when that module cannot be asked). */
#define EXIT_POLICY_ERROR 3
#define EXIT_DEADLINE	  10
#define MAX_MESSAGE	  2000

struct opts {
	const char *command;
	const char *check_path; /* check POLICY */
	const char *config;
	int config_explicit;
	const char *policy;
	const char *deadline_arg;
	double deadline;
	const char **sets;
	int nsets;
	const char *lua_dir;
	int json;
};

/* ---- the run -------------------------------------------------------------------------------- */

struct run {
	struct opts *o;
	lua_State *L;
	int driver;   /* stack index of the driver table */
	int settings; /* stack index of the validated settings table, 0 before */
	char job[128];
	double t0;
	double budget; /* seconds: the run's deadline (--deadline, the setting, or the default) */
};

/* The job id as it appears in log lines ("job=<id>"): Slurm job ids are decimal integers; any
 * character outside [A-Za-z0-9_.-] (a space, a newline that would forge a second log line) is
 * replaced by '_'.  The policy refuses such an id as bad-input; this only keeps the line honest. */
static void set_job_label(struct run *r, const char *id)
{
	snprintf(r->job, sizeof r->job, "%s", id);
	for (char *p = r->job; *p; p++)
		if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-'))
			*p = '_';
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: imexguard [OPTIONS] COMMAND\n"
	    "Keeps the NVIDIA IMEX node list of a Slurm job's nodes consistent (run as the Slurm\n"
	    "prolog and epilog), restarting nvidia-imex only when the running daemon is stale.\n"
	    "\n"
	    "Commands:\n"
	    "  prolog          make this node's IMEX domain match the job (Slurm Prolog)\n"
	    "  epilog          the job ended (Slurm Epilog)\n"
	    "  status [--json] show the domain, with a diagnosis per unhealthy node\n"
	    "  plan [--json]   what prolog would do, without doing it\n"
	    "  check POLICY    compile a policy in the sandbox, run standard scenarios\n"
	    "  version         print the version\n"
	    "\n"
	    "Options:\n"
	    "  --config FILE       settings file (default " DEFAULT_CONFIG "; a missing\n"
	    "                      default file means all defaults)\n"
	    "  --policy FILE       policy file (default: the built-in policy)\n"
	    "  --deadline SECONDS  the whole run's budget (default: setting deadline, 90)\n"
	    "  --set KEY=VALUE     override a setting (repeatable)\n"
	    "  --lua-dir DIR       load the Lua library from DIR/imexguard/*.lua (absolute;\n"
	    "                      development; also IMEXGUARD_LUA_DIR)\n"
	    "  --json              machine-readable output (status, plan)\n"
	    "  -h, --help          this help\n"
	    "  -V, --version       print the version\n"
	    "\n"
	    "Outcomes and exit codes (Slurm drains the node on a non-zero prolog exit):\n"
	    "  ok 0, skipped 0, peers-unhealthy 0 (12 with on_peer_fault = \"fail\"),\n"
	    "  bad-input 2, policy-error 3, lock-timeout 4, conflict 5, unit-unknown 6,\n"
	    "  service-failed 7, ctl-unusable 8, domain-unhealthy 9, deadline-exceeded 10,\n"
	    "  write-failed 11; a bad command line or an internal error exits 1.\n"
	    "\n"
	    "Every run ends with one line on stderr (and in the journal):\n"
	    "  imexguard: <notice|err>: COMMAND job=ID outcome=NAME: MESSAGE\n");
}

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "imexguard: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'imexguard --help'.\n");
	return EXIT_USAGE;
}

/* Exit code of an outcome name, from outcomes.lua (hook suspended: host bookkeeping); the C
 * fallback covers the outcomes the host itself decides. */
static int exit_code_of(struct run *r, const char *outcome)
{
	int code = -1;
	if (r->L && r->driver) {
		lua_State *L = r->L;
		ig_sandbox_hook(L, 0);
		lua_getfield(L, r->driver, "code");
		lua_pushstring(L, outcome);
		if (r->settings)
			lua_pushvalue(L, r->settings);
		else
			lua_pushnil(L);
		if (lua_pcall(L, 2, 1, 0) == LUA_OK && lua_isinteger(L, -1))
			code = (int)lua_tointeger(L, -1);
		lua_pop(L, 1);
		ig_sandbox_hook(L, 1);
	}
	if (code < 0)
		code = strcmp(outcome, "deadline-exceeded") == 0 ? EXIT_DEADLINE
		       : strcmp(outcome, "ok") == 0		 ? 0
								 : EXIT_POLICY_ERROR;
	return code;
}

/* Log the one final line and return the exit code. */
static int finish(struct run *r, const char *outcome, int code, const char *message)
{
	char f_outcome[96], f_job[160], f_command[64];
	snprintf(f_outcome, sizeof f_outcome, "IMEXGUARD_OUTCOME=%s", outcome);
	snprintf(f_job, sizeof f_job, "IMEXGUARD_JOB_ID=%s", r->job);
	snprintf(f_command, sizeof f_command, "IMEXGUARD_COMMAND=%s", r->o->command);
	const char *const fields[] = {f_outcome, f_job, f_command, NULL};
	char msg[MAX_MESSAGE + 1];
	snprintf(msg, sizeof msg, "%s", message ? message : "");
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	ig_log(code == 0 ? IG_NOTICE : IG_ERR, fields, "%s job=%s outcome=%s%s%s", r->o->command,
	       r->job, outcome, msg[0] ? ": " : "", msg);
	return code;
}

static int finish_policy_error(struct run *r, const char *msg);

/* Finish after a failed ig_sandbox_call: the message is on the stack. */
static int finish_call(struct run *r, enum ig_call st, const char *prefix)
{
	const char *m = lua_tostring(r->L, -1);
	char msg[MAX_MESSAGE + 1];
	if (st == IG_CALL_DEADLINE) {
		snprintf(msg, sizeof msg, "%sbudget of %g s: %s", prefix ? prefix : "", r->budget,
			 m ? m : "(no message)");
		if (strcmp(r->o->command, "check") == 0) /* check: 0 valid, 3 anything else */
			return finish_policy_error(r, msg);
		return finish(r, "deadline-exceeded", exit_code_of(r, "deadline-exceeded"), msg);
	}
	snprintf(msg, sizeof msg, "%s%s", prefix ? prefix : "", m ? m : "(no message)");
	if (st == IG_CALL_ERROR && ig_sandbox_traceback()[0])
		ig_log(IG_DEBUG, NULL, "%s", ig_sandbox_traceback());
	return finish(r, "policy-error", exit_code_of(r, "policy-error"), msg);
}

static int finish_policy_error(struct run *r, const char *msg)
{
	return finish(r, "policy-error", exit_code_of(r, "policy-error"), msg);
}

/* Call driver function `name` with nargs arguments already pushed above it (pushes the function
 * itself under them). */
static enum ig_call driver_call(struct run *r, const char *name, int nargs, int nresults)
{
	lua_getfield(r->L, r->driver, name);
	lua_insert(r->L, -nargs - 1);
	return ig_sandbox_call(r->L, nargs, nresults);
}

/* Read the settings (file, --set, --deadline), validate them in Lua and apply bus, logging and
 * the deadline.  Returns -1 on success (settings table at r->settings) or the exit code. */
static int load_settings(struct run *r)
{
	lua_State *L = r->L;
	char err[1024];
	char *text = NULL;
	size_t len = 0;
	int rc = ig_read_trusted(r->o->config, "settings file", &text, &len, err, sizeof err);
	if (rc == -ENOENT && !r->o->config_explicit) {
		text = NULL; /* the default file is optional: all defaults */
	} else if (rc != 0) {
		return finish_policy_error(r, err);
	}
	if (text)
		lua_pushlstring(L, text, len);
	else
		lua_pushnil(L);
	free(text);
	lua_pushstring(L, r->o->config);
	lua_createtable(L, r->o->nsets + 1, 0);
	for (int i = 0; i < r->o->nsets; i++) {
		lua_pushstring(L, r->o->sets[i]);
		lua_rawseti(L, -2, i + 1);
	}
	if (r->o->deadline_arg) { /* --deadline wins over the file and --set */
		lua_pushfstring(L, "deadline=%s", r->o->deadline_arg);
		lua_rawseti(L, -2, r->o->nsets + 1);
	}
	enum ig_call st = driver_call(r, "settings", 3, 2);
	if (st != IG_CALL_OK)
		return finish_call(r, st, "settings: ");
	if (lua_isnil(L, -2)) {
		const char *m = lua_tostring(L, -1);
		return finish_policy_error(r, m ? m : "settings: invalid");
	}
	lua_pop(L, 1);
	r->settings = lua_gettop(L);

	lua_getfield(L, r->settings, "deadline");
	double deadline = lua_tonumber(L, -1);
	lua_pop(L, 1);
	r->budget = deadline;
	double left = deadline - (ig_now() - r->t0);
	ig_set_deadline(left > 1e-6 ? left : 1e-6);
	ig_watchdog_arm();

	lua_getfield(L, r->settings, "bus");
	const char *bus = lua_tostring(L, -1);
	if (bus && ig_unit_set_bus(bus) != 0) {
		snprintf(err, sizeof err, "settings: bus '%s' is not usable", bus);
		lua_pop(L, 1);
		return finish_policy_error(r, err);
	}
	lua_pop(L, 1);

	static const struct {
		const char *name;
		enum ig_level level;
	} levels[] = {{"debug", IG_DEBUG},     {"info", IG_INFO}, {"notice", IG_NOTICE},
		      {"warning", IG_WARNING}, {"err", IG_ERR},	  {NULL, IG_INFO}};
	lua_getfield(L, r->settings, "log_level");
	const char *lv = lua_tostring(L, -1);
	enum ig_level level = IG_INFO;
	for (int i = 0; lv && levels[i].name; i++)
		if (strcmp(levels[i].name, lv) == 0)
			level = levels[i].level;
	lua_pop(L, 1);
	lua_getfield(L, r->settings, "log_journal");
	int journal = lua_toboolean(L, -1);
	lua_pop(L, 1);
	ig_log_setup(journal, level);
	return -1;
}

/* Read the policy file `path` (the trust check of sandbox.c applies) and compile it in the sandbox
 * with chunkname "@path", so errors name file:line.  Returns -1 with the chunk pushed, or the exit
 * code of policy-error (the final line logged) with nothing pushed. */
static int push_policy_chunk(struct run *r, const char *path)
{
	char err[1024];
	char *text = NULL;
	size_t len = 0;
	if (ig_read_trusted(path, "policy", &text, &len, err, sizeof err) != 0)
		return finish_policy_error(r, err);
	char *chunkname = malloc(strlen(path) + 2);
	if (chunkname == NULL) {
		free(text);
		return finish_policy_error(r, "out of memory");
	}
	sprintf(chunkname, "@%s", path);
	int rc = ig_sandbox_load(r->L, text, len, chunkname);
	free(text);
	free(chunkname);
	if (rc != 0) {
		const char *m = lua_tostring(r->L, -1);
		snprintf(err, sizeof err, "policy %s", m ? m : "does not compile");
		return finish_policy_error(r, err);
	}
	return -1;
}

/* Push the policy table: the file at `path` (trust-checked, chunkname "@path"), or the built-in
 * policy when path is NULL.  Returns -1 on success or the exit code. */
static int load_policy(struct run *r, const char *path)
{
	lua_State *L = r->L;
	enum ig_call st;
	char err[1024];
	if (path == NULL) {
		if (!ig_sandbox_has_module(L, DEFAULT_POLICY))
			return finish_policy_error(r, "the built-in policy " DEFAULT_POLICY
						      " is not in this binary");
		st = ig_sandbox_require(L, DEFAULT_POLICY);
		path = DEFAULT_POLICY;
	} else {
		int code = push_policy_chunk(r, path);
		if (code >= 0)
			return code;
		st = ig_sandbox_call(L, 0, 1);
	}
	if (st != IG_CALL_OK)
		return finish_call(r, st, NULL);
	lua_pushvalue(L, -1);
	st = driver_call(r, "check", 1, 2);
	if (st != IG_CALL_OK)
		return finish_call(r, st, NULL);
	if (lua_isnil(L, -2)) {
		snprintf(err, sizeof err, "policy %s: %s", path, lua_tostring(L, -1));
		return finish_policy_error(r, err);
	}
	lua_pop(L, 2);
	return -1;
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

/* ---- check ------------------------------------------------------------------------------- */

/* Real seconds each scenario of `check` may take at most; the run's budget (--deadline, the
 * setting) bounds the whole check.  The kit's fake host simulates time, so a sane policy needs
 * milliseconds per scenario; only a policy that never ends reaches this, and the count hook
 * (sandbox.c, layer 2 of the deadline) then interrupts it. */
#define CHECK_SCENARIO_SECONDS 3.0

/* Seconds left of the run's budget (negative once spent). */
static double run_left(const struct run *r)
{
	return r->budget - (ig_now() - r->t0);
}

/* Call driver function `name` with nargs arguments already pushed, with the count hook suspended
 * (host bookkeeping: it must run even after the deadline interrupt has fired).  Returns the
 * lua_pcall status; on an error the message is on the stack. */
static int driver_call_nohook(struct run *r, const char *name, int nargs, int nresults)
{
	lua_getfield(r->L, r->driver, name);
	lua_insert(r->L, -nargs - 1);
	ig_sandbox_hook(r->L, 0);
	int rc = lua_pcall(r->L, nargs, nresults, 0);
	ig_sandbox_hook(r->L, 1);
	return rc;
}

/* Append "name" to a comma-separated list in buf (cut with "..." when full). */
static void list_append(char *buf, size_t size, const char *name)
{
	size_t used = strlen(buf);
	if (used + 2 >= size)
		return;
	int n = snprintf(buf + used, size - used, "%s%s", used ? ", " : "", name);
	if (n < 0 || (size_t)n >= size - used)
		snprintf(buf + size - 4, 4, "...");
}

/* One scenario: a fresh policy table from the chunk at `chunk`, then scenarios.run_one under a
 * deadline of its own.  Pushes the result table and the report line.  *interrupted is set when
 * the deadline interrupt fired (it cannot be undone: no Lua runs with the hook on after it). */
static void check_one(struct run *r, int sc, int chunk, int name, int *interrupted)
{
	lua_State *L = r->L;
	const char *why = NULL;
	char buf[1200];
	double left = run_left(r);
	if (*interrupted || left <= 0) {
		why = *interrupted ? "not run: an earlier scenario was interrupted by the deadline"
				   : "not run: the run's budget is spent";
		lua_pushvalue(L, sc);
		lua_pushvalue(L, name);
		lua_pushstring(L, why);
		lua_pushliteral(L, "SKIP");
		if (driver_call_nohook(r, "scenario_failed", 4, 2) != LUA_OK) {
			lua_pushnil(L);
			lua_pushfstring(L, "SKIP %s: %s", lua_tostring(L, name), why);
		}
		return;
	}
	double limit = left < CHECK_SCENARIO_SECONDS ? left : CHECK_SCENARIO_SECONDS;
	ig_set_deadline(limit);
	lua_pushvalue(L, chunk);
	enum ig_call st = ig_sandbox_call(L, 0, 1);
	const char *stage = "loading the policy again";
	if (st == IG_CALL_OK) {
		int policy = lua_gettop(L);
		lua_getfield(L, r->driver, "scenario");
		lua_pushvalue(L, sc);
		lua_pushvalue(L, policy);
		lua_pushvalue(L, name);
		lua_pushvalue(L, r->settings);
		st = ig_sandbox_call(L, 4, 2);
		lua_remove(L, policy);
		stage = "the scenario";
		if (st == IG_CALL_OK)
			return; /* result, line */
	}
	const char *m = lua_tostring(L, -1);
	if (st == IG_CALL_DEADLINE) {
		*interrupted = 1;
		snprintf(
		    buf, sizeof buf,
		    "did not finish within %.2g s of real time (%s); a policy must end by itself, "
		    "also when host.remaining() is 0",
		    limit, m ? m : "interrupted");
	} else {
		snprintf(buf, sizeof buf, "%s raised: %s", stage, m ? m : "(no message)");
	}
	lua_pop(L, 1);
	lua_pushvalue(L, sc);
	lua_pushvalue(L, name);
	lua_pushstring(L, buf);
	lua_pushliteral(L, "FAIL");
	if (driver_call_nohook(r, "scenario_failed", 4, 2) != LUA_OK) {
		lua_pop(L, 1);
		lua_pushnil(L);
		lua_pushfstring(L, "FAIL %s: %s", lua_tostring(L, name), buf);
	}
}

/* `imexguard check POLICY`: load the policy in the sandbox (trust check, syntax and runtime
 * errors with file:line), check its entry points (driver D.check), then run the standard
 * scenarios of lua/imexguard/scenarios.lua against the test kit's fake host, one by one, each
 * with a fresh policy table and its own real-time limit (CHECK_SCENARIO_SECONDS, within the
 * run's budget).  "imexguard.host" is preloaded with the scenarios' proxy, so a policy that
 * requires the primitives reaches the fake host, never the node.  Prints one PASS/FAIL/SKIP line
 * per scenario on stdout (or one JSON object with --json) and returns the exit code: 0 when every
 * scenario passed, 3 (policy-error) otherwise. */
static int run_check(struct run *r)
{
	lua_State *L = r->L;
	const char *path = r->o->check_path;
	char err[1024];

	enum ig_call st = driver_call(r, "scenarios", 0, 3);
	if (st != IG_CALL_OK)
		return finish_call(r, st, "imexguard.scenarios: ");
	int names = lua_gettop(L), proxy = names - 1, sc = names - 2;
	lua_getfield(L, LUA_REGISTRYINDEX, "imexguard.sandbox.loaded");
	lua_pushvalue(L, proxy);
	lua_setfield(L, -2, "imexguard.host");
	lua_pop(L, 1);

	int code = push_policy_chunk(r, path);
	if (code >= 0)
		return code;
	int chunk = lua_gettop(L);
	lua_pushvalue(L, chunk);
	st = ig_sandbox_call(L, 0, 1);
	if (st != IG_CALL_OK)
		return finish_call(r, st, NULL);
	st = driver_call(r, "check", 1, 2);
	if (st != IG_CALL_OK)
		return finish_call(r, st, NULL);
	if (lua_isnil(L, -2)) {
		snprintf(err, sizeof err, "policy %s: %s", path, lua_tostring(L, -1));
		return finish_policy_error(r, err);
	}
	char entries[128];
	snprintf(entries, sizeof entries, "%s", lua_tostring(L, -2));
	lua_pop(L, 2);
	if (!r->o->json) {
		printf("policy %s: entry points %s\n", path, entries);
		fflush(stdout);
	}

	lua_newtable(L);
	int results = lua_gettop(L);
	int total = (int)luaL_len(L, names), nfail = 0, nskip = 0, interrupted = 0;
	char failed[600] = "";
	for (int i = 1; i <= total; i++) {
		lua_geti(L, names, i);
		int name = lua_gettop(L);
		check_one(r, sc, chunk, name, &interrupted);
		/* stack: name, result, line */
		int ok = 0, not_run = 0;
		if (lua_istable(L, -2)) {
			lua_getfield(L, -2, "ok");
			ok = lua_toboolean(L, -1);
			lua_getfield(L, -3, "not_run");
			not_run = lua_toboolean(L, -1);
			lua_pop(L, 2);
			lua_pushvalue(L, -2);
			lua_seti(L, results, i);
		}
		if (not_run) {
			nskip++;
		} else if (!ok) {
			nfail++;
			list_append(failed, sizeof failed, lua_tostring(L, name));
		}
		if (!r->o->json) {
			printf("%s\n", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(no report)");
			fflush(stdout);
		}
		lua_settop(L, name - 1);
	}
	double left = run_left(r);
	ig_set_deadline(left > 1e-6 ? left : 1e-6);

	if (r->o->json) {
		lua_pushstring(L, path);
		lua_pushstring(L, entries);
		lua_pushvalue(L, results);
		if (driver_call_nohook(r, "check_json", 3, 1) == LUA_OK && lua_isstring(L, -1)) {
			size_t n;
			const char *out = lua_tolstring(L, -1, &n);
			fwrite(out, 1, n, stdout);
		}
		lua_pop(L, 1);
	}
	char skipped[160] = "";
	if (nskip > 0)
		snprintf(skipped, sizeof skipped, "; %d not run (%s)", nskip,
			 interrupted ? "the deadline interrupt ended the check"
				     : "the run's budget was spent");
	if (!r->o->json) {
		if (nfail + nskip == 0)
			printf("check: all %d scenarios passed\n", total);
		else
			printf("check: %d of %d scenarios failed: %s%s\n", nfail, total, failed,
			       skipped);
	}
	fflush(stdout);
	char msg[1200];
	if (nfail + nskip == 0) {
		snprintf(msg, sizeof msg, "policy %s is valid: %s; all %d scenarios passed", path,
			 entries, total);
		return finish(r, "ok", 0, msg);
	}
	snprintf(msg, sizeof msg, "policy %s: %d of %d scenarios failed: %s%s", path, nfail, total,
		 failed, skipped);
	return finish_policy_error(r, msg);
}

static int run(struct opts *o)
{
	struct run r;
	memset(&r, 0, sizeof r);
	r.o = o;
	r.t0 = ig_now();
	const char *jid = getenv("SLURM_JOB_ID");
	if (jid == NULL || !*jid)
		jid = getenv("SLURM_JOBID");
	set_job_label(&r, jid && *jid ? jid : "-");

	ig_log_setup(1, IG_INFO);
	r.budget = o->deadline_arg ? o->deadline : DEFAULT_DEADLINE;
	ig_set_deadline(r.budget);
	ig_watchdog_label(o->command, r.job);
	ig_watchdog_arm();

	char err[1024];
	r.L = ig_sandbox_new(o->lua_dir, err, sizeof err);
	if (r.L == NULL) {
		ig_log(IG_ERR, NULL, "%s job=%s outcome=policy-error: %s", o->command, r.job, err);
		return EXIT_USAGE;
	}
	lua_State *L = r.L;
	int code;
	luaL_checkstack(L, 40, "imexguard");

	/* the driver */
	enum ig_call st = ig_sandbox_require(L, "imexguard.driver");
	if (st != IG_CALL_OK) {
		code = finish_call(&r, st, "imexguard's Lua library: ");
		goto out;
	}
	r.driver = lua_gettop(L);

	if ((code = load_settings(&r)) >= 0)
		goto out;
	if (strcmp(o->command, "check") == 0) {
		code = run_check(&r);
		goto out;
	}

	/* the host table (recorders for plan), preloaded so require sees the same one */
	int dry_run = strcmp(o->command, "plan") == 0;
	st = ig_sandbox_require(L, "imexguard.host");
	if (st != IG_CALL_OK) {
		code = finish_call(&r, st, "imexguard.host: ");
		goto out;
	}
	lua_pushboolean(L, dry_run);
	st = driver_call(&r, "host", 2, 2);
	if (st != IG_CALL_OK) {
		code = finish_call(&r, st, NULL);
		goto out;
	}
	int planned = lua_gettop(L);
	int host = planned - 1;
	if (dry_run) {
		lua_getfield(L, LUA_REGISTRYINDEX, "imexguard.sandbox.loaded");
		lua_pushvalue(L, host);
		lua_setfield(L, -2, "imexguard.host");
		lua_pop(L, 1);
	}

	/* the policy */
	const char *policy_path = o->policy;
	if (policy_path == NULL) {
		lua_getfield(L, r.settings, "policy");
		policy_path = lua_tostring(L, -1); /* stays on the stack: the pointer stays valid */
	}
	if ((code = load_policy(&r, policy_path)) >= 0)
		goto out;
	int policy = lua_gettop(L);

	/* the entry point: policy[command]; status and plan fall back to the built-in policy's */
	const char *entry = strcmp(o->command, "status") == 0 ? "status"
			    : strcmp(o->command, "plan") == 0 ? "plan"
							      : o->command;
	lua_getfield(L, policy, entry);
	if (!lua_isfunction(L, -1) && policy_path != NULL &&
	    (strcmp(entry, "status") == 0 || strcmp(entry, "plan") == 0)) {
		lua_pop(L, 1);
		if ((code = load_policy(&r, NULL)) >= 0)
			goto out;
		lua_getfield(L, -1, entry);
	}
	if (!lua_isfunction(L, -1)) {
		snprintf(err, sizeof err, "policy %s has no function '%s'",
			 policy_path ? policy_path : DEFAULT_POLICY, entry);
		code = finish_policy_error(&r, err);
		goto out;
	}
	int fn = lua_gettop(L);

	/* ctx */
	lua_pushstring(L, o->command);
	lua_pushvalue(L, r.settings);
	lua_pushvalue(L, host);
	push_environ(L);
	lua_pushboolean(L, ig_sandbox_has_module(L, "imexguard.slurmenv"));
	lua_pushboolean(L, dry_run);
	lua_pushboolean(L, o->json);
	lua_pushvalue(L, planned);
	st = driver_call(&r, "ctx", 8, 1);
	if (st != IG_CALL_OK) {
		code = finish_call(&r, st, "ctx: ");
		goto out;
	}
	lua_getfield(L, -1, "job");
	lua_getfield(L, -1, "id");
	if (lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER) {
		set_job_label(&r, lua_tostring(L, -1));
		ig_watchdog_label(o->command, r.job);
	}
	lua_pop(L, 2);

	/* call it */
	lua_pushvalue(L, fn);
	lua_insert(L, -2);
	int before = lua_gettop(L) - 2;
	st = ig_sandbox_call(L, 1, 3);
	if (st != IG_CALL_OK) {
		code = finish_call(&r, st, NULL);
		goto out;
	}
	int res = before + 1;

	/* host bookkeeping from here: not interruptible by the hook */
	ig_sandbox_hook(L, 0);
	char what[300];
	snprintf(what, sizeof what, "policy %s: %s", policy_path ? policy_path : DEFAULT_POLICY,
		 entry);
	lua_getfield(L, r.driver, "result");
	lua_pushstring(L, what);
	lua_pushvalue(L, r.settings);
	lua_pushvalue(L, res);
	lua_pushvalue(L, res + 1);
	if (lua_pcall(L, 4, 3, 0) != LUA_OK) {
		code = finish_policy_error(&r, lua_tostring(L, -1));
		goto out_hook;
	}
	if (lua_isnil(L, -3)) {
		code = finish_policy_error(&r, lua_tostring(L, -2));
		goto out_hook;
	}
	code = (int)lua_tointeger(L, -3);
	const char *outcome = lua_tostring(L, -2);
	const char *message = lua_tostring(L, -1);

	/* output on stdout: status and plan reports (third result), or JSON for --json */
	lua_getfield(L, r.driver, "output");
	lua_pushvalue(L, res + 2);
	lua_pushboolean(L, o->json);
	if (lua_pcall(L, 2, 1, 0) == LUA_OK && lua_isstring(L, -1)) {
		size_t n;
		const char *out = lua_tolstring(L, -1, &n);
		fwrite(out, 1, n, stdout);
		fflush(stdout);
	}
	lua_pop(L, 1);
	code = finish(&r, outcome, code, message);
out_hook:
	ig_sandbox_hook(L, 1);
out:
	/* lua_close runs pending finalizers (lock objects unlock); the hook stays on. */
	ig_sandbox_close(r.L);
	return code;
}

/* ---- arguments ------------------------------------------------------------------------------ */

enum { OPT_CONFIG = 256, OPT_POLICY, OPT_DEADLINE, OPT_SET, OPT_LUA_DIR, OPT_JSON };

/* Parse the arguments into o (GNU getopt_long permutes, so options may follow the command:
 * `imexguard status --json`).  Returns -1 to run, or the exit code (0 after --help/--version,
 * EXIT_USAGE after a usage error on stderr). */
static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
	    {"config", required_argument, NULL, OPT_CONFIG},
	    {"policy", required_argument, NULL, OPT_POLICY},
	    {"deadline", required_argument, NULL, OPT_DEADLINE},
	    {"set", required_argument, NULL, OPT_SET},
	    {"lua-dir", required_argument, NULL, OPT_LUA_DIR},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hV", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_CONFIG:
			o->config = optarg;
			o->config_explicit = 1;
			break;
		case OPT_POLICY:
			o->policy = optarg;
			break;
		case OPT_DEADLINE: {
			char *end;
			errno = 0;
			o->deadline = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(o->deadline > 0) ||
			    isinf(o->deadline))
				return usage_error(
				    "--deadline: '%s' is not a number of seconds > 0", optarg);
			o->deadline_arg = optarg;
			break;
		}
		case OPT_SET:
			if (strchr(optarg, '=') == NULL)
				return usage_error("--set: expected KEY=VALUE, got '%s'", optarg);
			o->sets[o->nsets++] = optarg;
			break;
		case OPT_LUA_DIR:
			o->lua_dir = optarg;
			break;
		case OPT_JSON:
			o->json = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("imexguard " IG_VERSION " (" LUA_RELEASE ")\n");
			return 0;
		case ':':
			return usage_error("option '%s' needs an argument", argv[optind - 1]);
		default:
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error(
		    "%s", "missing COMMAND (prolog, epilog, status, plan, check, version)");
	o->command = argv[optind++];
	if (strcmp(o->command, "check") == 0) {
		if (optind >= argc)
			return usage_error("%s", "check: missing POLICY (a policy file)");
		o->check_path = argv[optind++];
	} else if (strcmp(o->command, "version") == 0) {
		printf("imexguard " IG_VERSION " (" LUA_RELEASE ")\n");
		return 0;
	} else if (strcmp(o->command, "prolog") != 0 && strcmp(o->command, "epilog") != 0 &&
		   strcmp(o->command, "status") != 0 && strcmp(o->command, "plan") != 0) {
		return usage_error(
		    "unknown command '%s' (prolog, epilog, status, plan, check, version)",
		    o->command);
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (o->lua_dir && o->lua_dir[0] != '/')
		return usage_error("--lua-dir %s: must be an absolute directory", o->lua_dir);
	return -1;
}

int main(int argc, char **argv)
{
	struct opts o;
	memset(&o, 0, sizeof o);
	o.config = DEFAULT_CONFIG;
	o.lua_dir = getenv("IMEXGUARD_LUA_DIR");
	if (o.lua_dir && !*o.lua_dir)
		o.lua_dir = NULL;
	o.sets = calloc((size_t)argc + 1, sizeof *o.sets);
	if (o.sets == NULL) {
		fprintf(stderr, "imexguard: out of memory\n");
		return EXIT_USAGE;
	}
	int rc = parse_args(argc, argv, &o);
	if (rc < 0)
		rc = run(&o);
	free(o.sets);
	return rc;
}
