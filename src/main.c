/*
 * main.c: the imexguard command line, the edges of a run.  It parses the arguments (getopt_long),
 * creates the sandbox (sandbox.c), sets the deadline and arms the watchdog (watchdog.c), and hands
 * the run to the Lua driver (lua/imexguard/driver.lua), which owns its sequence: settings, the
 * host table, the policy, ctx, the entry point, the outcome, and the scenarios of `check`.
 * The protocol is small and fixed: every call passes one table, the run, and returns one table,
 * the answer; an answer with an `outcome` ends the run.  main.c then logs the one final line
 *
 *     imexguard: <notice|err>: <command> job=<id> outcome=<name>: <message>
 *
 * (also a journald entry with IMEXGUARD_OUTCOME, IMEXGUARD_JOB_ID, IMEXGUARD_COMMAND) and exits
 * with the outcome's code (lua/imexguard/outcomes.lua, generated into C at build time).
 * Slurm drains a node on any non-zero prolog exit (slurm.conf(5) Prolog), so a command line that
 * cannot run exits 1, never 0: a prolog that did not run must not pass silently.
 */
#include "imexguard.h"
#include "sandbox.h"
#include "trust.h"
#include "watchdog.h"

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
#define DEFAULT_DEADLINE 90.0 /* seconds */
#define EXIT_USAGE	 1
#define MAX_MESSAGE	 2000 /* bytes of the final line's message */
/* Real seconds each scenario of `check` may take at most; the run's budget (--deadline, the
 * setting) bounds the whole check.  The kit's fake host simulates time, so a sane policy needs
 * milliseconds per scenario; only a policy that never ends reaches this, and the count hook
 * (sandbox.c, layer 2 of the deadline) then interrupts it. */
#define CHECK_SCENARIO_SECONDS 3.0

struct opts {
	const char *command;
	const char *check_path; /* check POLICY */
	const char *config;
	int config_explicit;
	const char *policy;
	const char *deadline_arg;
	double deadline; /* seconds */
	const char **sets;
	int nsets;
	const char *lua_dir;
	int json;
};

struct run {
	struct opts *o;
	lua_State *L;
	int driver; /* registry reference of the driver module */
	int table;  /* registry reference of the run table */
	char job[128];
	double t0;	 /* ig_now() at the start, seconds */
	double budget;	 /* seconds: the run's deadline (--deadline, the setting, or the default) */
	int interrupted; /* check: the deadline interrupt fired (no Lua runs with the hook after) */
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
	fputs(
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
	    "  --json              machine-readable output (status, plan, check)\n"
	    "  -h, --help          this help\n"
	    "  -V, --version       print the version\n"
	    "\n"
	    "Outcomes and exit codes (Slurm drains the node on a non-zero prolog exit):\n",
	    f);
	fputs(ig_outcomes_usage, f);
	fputs("\n"
	      "Every run ends with one line on stderr (and in the journal):\n"
	      "  imexguard: <notice|err>: COMMAND job=ID outcome=NAME: MESSAGE\n",
	      f);
}

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "imexguard: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'imexguard --help'.\n");
	return EXIT_USAGE;
}

/* ---- the end of a run ----------------------------------------------------------------------- */

/* Log the one final line (message made one line) and return the exit code `code`. */
static int finish(struct run *r, const char *outcome, int code, const char *message)
{
	char f_outcome[96], f_job[160], f_command[64], msg[MAX_MESSAGE + 1];
	snprintf(f_outcome, sizeof f_outcome, "IMEXGUARD_OUTCOME=%s", outcome);
	snprintf(f_job, sizeof f_job, "IMEXGUARD_JOB_ID=%s", r->job);
	snprintf(f_command, sizeof f_command, "IMEXGUARD_COMMAND=%s", r->o->command);
	const char *const fields[] = {f_outcome, f_job, f_command, NULL};
	ig_one_line(msg, sizeof msg, message ? message : "");
	ig_log(code == 0 ? IG_NOTICE : IG_ERR, fields, "%s job=%s outcome=%s%s%s", r->o->command,
	       r->job, outcome, msg[0] ? ": " : "", msg);
	return code;
}

/* Finish with an outcome the host itself decides (policy-error, deadline-exceeded). */
static int finish_host(struct run *r, const char *outcome, const char *message)
{
	int code = ig_outcome_code(outcome);
	return finish(r, outcome, code < 0 ? EXIT_USAGE : code, message);
}

/* Finish after a failed call (enum ig_call): its message is on the stack.  The deadline
 * interrupt is deadline-exceeded (policy-error for check: 0 valid, 3 anything else); an error is
 * policy-error, its traceback logged at debug level.  prefix: NULL or put before the message. */
static int finish_call(struct run *r, enum ig_call st, const char *prefix)
{
	const char *m = lua_tostring(r->L, -1);
	char msg[MAX_MESSAGE + 1];
	if (st == IG_CALL_DEADLINE) {
		snprintf(msg, sizeof msg, "%sbudget of %g s: %s", prefix ? prefix : "", r->budget,
			 m ? m : "(no message)");
		if (strcmp(r->o->command, "check") != 0)
			return finish_host(r, "deadline-exceeded", msg);
		return finish_host(r, "policy-error", msg);
	}
	snprintf(msg, sizeof msg, "%s%s", prefix ? prefix : "", m ? m : "(no message)");
	if (st == IG_CALL_ERROR && ig_sandbox_traceback()[0])
		ig_log(IG_DEBUG, NULL, "%s", ig_sandbox_traceback());
	return finish_host(r, "policy-error", msg);
}

/* ---- the host's functions for the driver (run.c) ------------------------------------------- */

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
	struct run *r = lua_touserdata(L, lua_upvalueindex(1));
	set_job_label(r, luaL_checkstring(L, 1));
	ig_watchdog_label(r->o->command, r->job);
	return 0;
}

/* Set run[key] = value (a string; NULL: nil). */
static void run_set(struct run *r, const char *key, const char *value)
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

/* Make the run table (the driver's one argument; see driver.lua) and keep it in the registry. */
static void make_run_table(struct run *r)
{
	static const luaL_Reg c_funcs[] = {{"read_trusted", c_read_trusted},
					   {"has_module", c_has_module},
					   {"preload", c_preload},
					   {"set_job", c_set_job},
					   {NULL, NULL}};
	lua_State *L = r->L;
	struct opts *o = r->o;
	lua_createtable(L, 0, 12);
	r->table = luaL_ref(L, LUA_REGISTRYINDEX);
	run_set(r, "command", o->command);
	run_set(r, "config", o->config);
	run_set(r, "policy", o->policy);
	run_set(r, "check_path", o->check_path);
	run_set(r, "deadline_arg", o->deadline_arg);
	lua_rawgeti(L, LUA_REGISTRYINDEX, r->table);
	lua_pushboolean(L, o->config_explicit);
	lua_setfield(L, -2, "config_explicit");
	lua_pushboolean(L, o->json);
	lua_setfield(L, -2, "json");
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
static enum ig_call driver_call(struct run *r, const char *name, int hook)
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

/* Handle the answer on top and pop it: write its `output` to stdout; when it has an `outcome`,
 * log the final line and return the exit code (`code`, else the outcome's), else -1. */
static int answer(struct run *r)
{
	lua_State *L = r->L;
	int code = -1;
	if (lua_getfield(L, -1, "output") == LUA_TSTRING) {
		size_t n;
		const char *out = lua_tolstring(L, -1, &n);
		fwrite(out, 1, n, stdout);
		fflush(stdout);
	}
	lua_pop(L, 1);
	if (lua_getfield(L, -1, "outcome") == LUA_TSTRING) {
		const char *outcome = lua_tostring(L, -1);
		lua_getfield(L, -2, "code");
		lua_getfield(L, -3, "message");
		if (lua_isinteger(L, -2))
			code = finish(r, outcome, (int)lua_tointeger(L, -2), lua_tostring(L, -1));
		else
			code = finish_host(r, outcome, lua_tostring(L, -1));
		lua_pop(L, 2);
	}
	lua_pop(L, 2);
	return code;
}

/* One step: call driver function `name` and handle its answer.  Returns -1 to go on, or the
 * exit code (the run ended: final line logged). */
static int step(struct run *r, const char *name, int hook)
{
	enum ig_call st = driver_call(r, name, hook);
	if (st != IG_CALL_OK)
		return finish_call(r, st, NULL);
	return answer(r);
}

/* ---- the run -------------------------------------------------------------------------------- */

/* Seconds left of the run's budget (negative once spent). */
static double run_left(const struct run *r)
{
	return r->budget - (ig_now() - r->t0);
}

/* Apply the validated settings of the answer on top (driver.settings): the deadline (seconds,
 * counted from the start), the bus and logging.  Returns -1, or the exit code (bus unusable). */
static int apply_settings(struct run *r)
{
	static const struct {
		const char *name;
		enum ig_level level;
	} levels[] = {{"debug", IG_DEBUG},     {"info", IG_INFO}, {"notice", IG_NOTICE},
		      {"warning", IG_WARNING}, {"err", IG_ERR},	  {NULL, IG_INFO}};
	lua_State *L = r->L;
	lua_getfield(L, -1, "deadline");
	r->budget = lua_tonumber(L, -1);
	double left = run_left(r);
	ig_set_deadline(left > 1e-6 ? left : 1e-6);
	ig_watchdog_arm();
	lua_getfield(L, -2, "bus");
	const char *bus = lua_tostring(L, -1);
	if (bus && ig_unit_set_bus(bus) != 0) {
		char err[300];
		snprintf(err, sizeof err, "settings: bus '%s' is not usable", bus);
		lua_pop(L, 2);
		return finish_host(r, "policy-error", err);
	}
	lua_getfield(L, -3, "log_level");
	const char *lv = lua_tostring(L, -1);
	enum ig_level level = IG_INFO;
	for (int i = 0; lv && levels[i].name; i++)
		if (strcmp(levels[i].name, lv) == 0)
			level = levels[i].level;
	lua_getfield(L, -4, "log_journal");
	ig_log_setup(lua_toboolean(L, -1), level);
	lua_pop(L, 4);
	return -1;
}

/* driver.settings, then apply them.  Returns -1 or the exit code. */
static int load_settings(struct run *r)
{
	enum ig_call st = driver_call(r, "settings", 1);
	if (st != IG_CALL_OK)
		return finish_call(r, st, "settings: ");
	if (lua_getfield(r->L, -1, "outcome") != LUA_TNIL) {
		lua_pop(r->L, 1);
		return answer(r);
	}
	lua_pop(r->L, 1);
	int code = apply_settings(r);
	lua_pop(r->L, 1);
	return code;
}

/* prolog, epilog, status, plan: driver.prepare, invoke (the policy's entry point), finish. */
static int run_entry(struct run *r)
{
	int code;
	if ((code = step(r, "prepare", 1)) >= 0 || (code = step(r, "invoke", 1)) >= 0 ||
	    (code = step(r, "finish", 0)) >= 0)
		return code;
	return finish_host(r, "policy-error", "imexguard.driver.finish ended no run (a bug)");
}

/* check: the current scenario under a deadline of its own (CHECK_SCENARIO_SECONDS within the
 * run's budget), or its SKIP or FAIL line when it cannot run or does not end by itself.
 * Returns -1 or the exit code. */
static int check_one(struct run *r)
{
	lua_State *L = r->L;
	char why[1200];
	double left = run_left(r);
	if (r->interrupted || left <= 0) {
		run_set(r, "why",
			r->interrupted
			    ? "not run: an earlier scenario was interrupted by the deadline"
			    : "not run: the run's budget is spent");
		run_set(r, "verdict", "SKIP");
		return step(r, "check_failed", 0);
	}
	double limit = left < CHECK_SCENARIO_SECONDS ? left : CHECK_SCENARIO_SECONDS;
	ig_set_deadline(limit);
	enum ig_call st = driver_call(r, "check_scenario", 1);
	if (st == IG_CALL_OK)
		return answer(r);
	const char *m = lua_tostring(L, -1);
	if (st == IG_CALL_DEADLINE) {
		r->interrupted = 1;
		run_set(r, "interrupted", "yes");
		snprintf(why, sizeof why,
			 "did not finish within %.2g s of real time (%s); a policy must end by "
			 "itself, also when host.remaining() is 0",
			 limit, m ? m : "interrupted");
	} else {
		lua_rawgeti(L, LUA_REGISTRYINDEX, r->table);
		lua_getfield(L, -1, "stage");
		const char *stage = lua_tostring(L, -1);
		snprintf(why, sizeof why, "%s raised: %s", stage ? stage : "the scenario",
			 m ? m : "(no message)");
		lua_pop(L, 2);
	}
	lua_pop(L, 1);
	run_set(r, "why", why);
	run_set(r, "verdict", "FAIL");
	return step(r, "check_failed", 0);
}

/* `imexguard check POLICY`: driver.check_begin (the policy loaded in the sandbox with the fake
 * host preloaded as imexguard.host, its entry points checked), then each standard scenario
 * (lua/imexguard/scenarios.lua) with its own real-time limit, then driver.check_end (summary or
 * --json report; ok when no scenario failed, else policy-error). */
static int run_check(struct run *r)
{
	int code = step(r, "check_begin", 1);
	while (code < 0) {
		enum ig_call st = driver_call(r, "check_next", 0);
		if (st != IG_CALL_OK)
			return finish_call(r, st, NULL);
		lua_getfield(r->L, -1, "done");
		int done = lua_toboolean(r->L, -1);
		lua_pop(r->L, 2);
		if (done)
			break;
		code = check_one(r);
	}
	if (code >= 0)
		return code;
	double left = run_left(r);
	ig_set_deadline(left > 1e-6 ? left : 1e-6);
	if ((code = step(r, "check_end", 0)) >= 0)
		return code;
	return finish_host(r, "policy-error", "imexguard.driver.check_end ended no run (a bug)");
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
	int code;
	enum ig_call st = ig_sandbox_require(r.L, "imexguard.driver");
	if (st != IG_CALL_OK) {
		code = finish_call(&r, st, "imexguard's Lua library: ");
	} else {
		r.driver = luaL_ref(r.L, LUA_REGISTRYINDEX);
		make_run_table(&r);
		if ((code = load_settings(&r)) < 0)
			code = strcmp(o->command, "check") == 0 ? run_check(&r) : run_entry(&r);
	}
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
