/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c: the imexguard binary, the edges of a run.  It parses the arguments (cli.c),
 * creates the sandbox (sandbox.c), sets the deadline and arms the watchdog (watchdog.c), and hands
 * the run to the Lua driver (lua/imexguard/driver.lua), which owns its sequence: settings, the
 * host table, the policy, ctx, the entry point, the outcome, and the scenarios of `check`.
 * The protocol is small and fixed (driver.c): every call passes one table, the run, and returns
 * one table, the answer; an answer with an `outcome` ends the run.  main.c then logs the one final
 * line
 *
 *     imexguard: <notice|err>: <command> job=<id> outcome=<name>: <message>
 *
 * (a journald entry with IMEXGUARD_OUTCOME, IMEXGUARD_JOB_ID, IMEXGUARD_COMMAND, and the line on
 * stderr; for an interactive command, whose result is on stdout, on stderr only when the journal
 * does not take the entry) and exits
 * with the outcome's code (lua/imexguard/outcomes.lua, generated into C at build time).
 * Slurm drains a node on any non-zero prolog exit (slurm.conf(5) Prolog), so a command line that
 * cannot run exits ig_usage_exit (1), never 0: a prolog that did not run must not pass silently.
 */
#include "bus.h"
#include "cli.h"
#include "driver.h"
#include "generated.h"
#include "imexguard.h"
#include "sandbox.h"
#include "timing.h"
#include "watchdog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGE 2000 /* bytes of the final line's message */
/* Real seconds each scenario of `check` may take at most; the run's budget (--deadline, the
 * setting) bounds the whole check.  The kit's fake host simulates time, so a sane policy needs
 * milliseconds per scenario; only a policy that never ends reaches this, and the count hook
 * (sandbox.c, layer 2 of the deadline) then interrupts it. */
#define CHECK_SCENARIO_SECONDS 3.0

/* ---- the end of a run ----------------------------------------------------------------------- */

/* The command's entry of the generated table (commands.lua), or NULL. */
static const struct ig_command *command_of(const char *command)
{
	for (const struct ig_command *c = ig_commands; c->name; c++)
		if (strcmp(c->name, command) == 0)
			return c;
	return NULL;
}

/* Bytes of the cause that reason_line keeps: the prefix, the longest outcome and the separators
 * around it leave at least this much of drain.lua's MAX_REASON (255 bytes), with "..." after. */
#define REASON_CAUSE_MAX 200

/* The one line "imexguard: OUTCOME: cause" on stdout of a run that printed nothing: for a command
 * with a reason line (health, config-test) that ends non-zero (a settings or policy error, the
 * deadline, the Lua library), what Slurm's HealthCheckProgram wrapper and NHC take as the reason;
 * for an interactive command (commands.lua's interactive: status, plan...) whatever the code, since
 * its final log line goes to the journal only and its result must be printed once, on stdout.
 * msg is one line already.  The grammar of lua/imexguard/drain.lua (REGEX): a cause longer than
 * REASON_CAUSE_MAX bytes is cut there, never inside a UTF-8 sequence, and ends in "...". */
static void reason_line(struct ig_run *r, const char *outcome, int code, const char *msg)
{
	const struct ig_command *c = command_of(r->o->command);
	size_t n = strlen(msg);
	int cut = n > REASON_CAUSE_MAX;

	if (r->printed || c == NULL || !((c->reason_line && code != 0) || c->interactive))
		return;
	if (cut) {
		n = REASON_CAUSE_MAX;
		while (n > 0 && ((unsigned char)msg[n] & 0xC0) == 0x80)
			n--; /* msg[n] continues a sequence: cut before the sequence's first byte */
	}
	printf("imexguard: %s: %.*s%s\n", outcome, (int)n, msg, cut ? "..." : "");
	fflush(stdout);
	r->printed = 1;
}

/* Log the one final line (message made one line) and return the exit code `code`. */
static int finish(struct ig_run *r, const char *outcome, int code, const char *message)
{
	char f_outcome[96], f_job[160], f_command[64], msg[MAX_MESSAGE + 1];
	snprintf(f_outcome, sizeof f_outcome, "IMEXGUARD_OUTCOME=%s", outcome);
	snprintf(f_job, sizeof f_job, "IMEXGUARD_JOB_ID=%s", r->job);
	snprintf(f_command, sizeof f_command, "IMEXGUARD_COMMAND=%s", r->o->command);
	const char *const fields[] = {f_outcome, f_job, f_command, NULL};
	ig_one_line(msg, sizeof msg, message ? message : "");
	reason_line(r, outcome, code, msg);
	const struct ig_command *c = command_of(r->o->command);
	/* an interactive command printed its result on stdout: the final line to the journal only
	 */
	(c && c->interactive ? ig_log_journal_first : ig_log)(
	    code == 0 ? IG_NOTICE : IG_ERR, fields, "%s job=%s outcome=%s%s%s", r->o->command,
	    r->job, outcome, msg[0] ? ": " : "", msg);
	return code;
}

/* Finish with an outcome the host itself decides (policy-error, deadline-exceeded). */
static int finish_host(struct ig_run *r, const char *outcome, const char *message)
{
	int code = ig_outcome_code(outcome);
	return finish(r, outcome, code < 0 ? ig_usage_exit : code, message);
}

/* Finish after a failed call (enum ig_call): its message is on the stack.  The deadline
 * interrupt is deadline-exceeded (policy-error for check: 0 valid, 3 anything else); an error is
 * policy-error, its traceback logged at debug level.  prefix: NULL or put before the message. */
static int finish_call(struct ig_run *r, enum ig_call st, const char *prefix)
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

/* ---- the driver's answers ------------------------------------------------------------------ */

/* Handle the answer on top and pop it: write its `output` to stdout; when it has an `outcome`,
 * log the final line and return the exit code (`code`, else the outcome's), else -1. */
static int answer(struct ig_run *r)
{
	lua_State *L = r->L;
	int code = -1;
	if (lua_getfield(L, -1, "output") == LUA_TSTRING) {
		size_t n;
		const char *out = lua_tolstring(L, -1, &n);
		fwrite(out, 1, n, stdout);
		fflush(stdout);
		r->printed = r->printed || n > 0;
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
static int step(struct ig_run *r, const char *name, int hook)
{
	enum ig_call st = ig_driver_call(r, name, hook);
	ig_timing_phase(name);
	if (st != IG_CALL_OK)
		return finish_call(r, st, NULL);
	return answer(r);
}

/* ---- the run -------------------------------------------------------------------------------- */

/* Seconds left of the run's budget (negative once spent). */
static double run_left(const struct ig_run *r)
{
	return r->budget - (ig_now() - r->t0);
}

/* Apply the validated settings of the answer on top (driver.settings): the deadline (seconds,
 * counted from the start), the memory limit (MiB), the bus and logging.  Returns -1, or the exit
 * code (bus unusable). */
static int apply_settings(struct ig_run *r)
{
	lua_State *L = r->L;
	lua_getfield(L, -1, "deadline");
	r->budget = lua_tonumber(L, -1);
	double left = run_left(r);
	ig_set_deadline(left > 1e-6 ? left : 1e-6);
	ig_watchdog_arm();
	if (lua_getfield(L, -2, "memory_limit") == LUA_TNUMBER)
		ig_sandbox_set_memory_limit(L, lua_tonumber(L, -1));
	lua_pop(L, 1);
	lua_getfield(L, -2, "bus");
	const char *bus = lua_tostring(L, -1);
	if (bus && ig_bus_set_address(bus) != 0) {
		char err[300];
		snprintf(err, sizeof err, "settings: bus '%s' is not usable", bus);
		lua_pop(L, 2);
		return finish_host(r, "policy-error", err);
	}
	lua_getfield(L, -3, "log_level");
	const char *lv = lua_tostring(L, -1);
	int level = lv ? ig_level_of(lv) : -1;
	lua_getfield(L, -4, "log_journal");
	ig_log_setup(lua_toboolean(L, -1), level < 0 ? IG_INFO : (enum ig_level)level);
	lua_pop(L, 4);
	return -1;
}

/* driver.settings, then apply them.  Returns -1 or the exit code. */
static int load_settings(struct ig_run *r)
{
	enum ig_call st = ig_driver_call(r, "settings", 1);
	ig_timing_phase("settings");
	if (st == IG_CALL_MEMORY) { /* the settings file itself reached the limit */
		char msg[MAX_MESSAGE + 1];
		const char *m = lua_tostring(r->L, -1);
		snprintf(msg, sizeof msg, "settings: %s", m ? m : "memory limit reached");
		return finish_host(r, "settings-error", msg);
	}
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

/* Every command but check (and version, which cli.c answers): driver.prepare, invoke (the
 * policy's entry point), finish. */
static int run_entry(struct ig_run *r)
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
static int check_one(struct ig_run *r)
{
	lua_State *L = r->L;
	char why[1200];
	double left = run_left(r);
	if (r->interrupted || left <= 0) {
		ig_run_set(r, "why",
			   r->interrupted
			       ? "not run: an earlier scenario was interrupted by the deadline"
			       : "not run: the run's budget is spent");
		ig_run_set(r, "verdict", "SKIP");
		return step(r, "check_failed", 0);
	}
	double limit = left < CHECK_SCENARIO_SECONDS ? left : CHECK_SCENARIO_SECONDS;
	ig_set_deadline(limit);
	enum ig_call st = ig_driver_call(r, "check_scenario", 1);
	if (st == IG_CALL_OK)
		return answer(r);
	const char *m = lua_tostring(L, -1);
	if (st == IG_CALL_DEADLINE) {
		r->interrupted = 1;
		ig_run_set(r, "interrupted", "yes");
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
	ig_run_set(r, "why", why);
	ig_run_set(r, "verdict", "FAIL");
	return step(r, "check_failed", 0);
}

/* `imexguard check POLICY`: driver.check_begin (the policy loaded in the sandbox with the fake
 * host preloaded as imexguard.host, its entry points checked), then each standard scenario
 * (lua/imexguard/testing/check.lua) with its own real-time limit, then driver.check_end (summary or
 * --json report; ok when no scenario failed, else policy-error). */
static int run_check(struct ig_run *r)
{
	int code = step(r, "check_begin", 1);
	while (code < 0) {
		enum ig_call st = ig_driver_call(r, "check_next", 0);
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

static int run(struct ig_opts *o)
{
	struct ig_run r;
	memset(&r, 0, sizeof r);
	r.o = o;
	r.t0 = ig_now();
	const char *jid = getenv("SLURM_JOB_ID");
	if (jid == NULL || !*jid)
		jid = getenv("SLURM_JOBID");
	ig_set_job_label(&r, jid && *jid ? jid : "-");

	ig_log_setup(1, IG_INFO);
	r.budget = o->deadline_arg ? o->deadline : ig_default_deadline;
	ig_set_deadline(r.budget);
	ig_watchdog_label(o->command, r.job);
	ig_watchdog_arm();

	char err[1024];
	r.L = ig_sandbox_new(o->lua_dir, err, sizeof err);
	ig_timing_phase("lua-state");
	/* an internal error (cli.c checked --lua-dir): exit 1, as usage errors */
	if (r.L == NULL)
		return finish(&r, "error", ig_usage_exit, err);
	int code;
	enum ig_call st = ig_sandbox_require(r.L, "imexguard.driver");
	ig_timing_phase("load-driver");
	/* the library does not load (from --lua-dir, IMEXGUARD_LUA_DIR): exit 1, as usage errors;
	 * the outcome name "error" is no outcome of outcomes.lua */
	if (st != IG_CALL_OK) {
		const char *m = lua_tostring(r.L, -1);
		char msg[MAX_MESSAGE + 1];
		snprintf(msg, sizeof msg, "imexguard's Lua library%s%s: %s",
			 o->lua_dir ? " from " : "", o->lua_dir ? o->lua_dir_from : "",
			 m ? m : "(no message)");
		code = finish(&r, "error", ig_usage_exit, msg);
	} else {
		ig_driver_open(&r);
		if ((code = load_settings(&r)) < 0)
			code = strcmp(o->command, "check") == 0 ? run_check(&r) : run_entry(&r);
	}
	/* lua_close runs pending finalizers (lock objects unlock); the hook stays on. */
	ig_sandbox_close(r.L);
	ig_timing_phase("close");
	ig_timing_report(stderr, ig_sandbox_heap_peak());
	return code;
}

/* The imexguard binary: `imexguard [OPTIONS] COMMAND` (cli.c).  Returns the process exit status:
 * the outcome's code (lua/imexguard/outcomes.lua), 0 after --help or --version, ig_usage_exit (1,
 * outcomes.lua's USAGE_EXIT) for a command line that cannot run. */
int main(int argc, char **argv)
{
	struct ig_opts o;
	int rc = ig_parse_args(argc, argv, &o);
	if (rc < 0 && o.timing)
		ig_timing_enable();
	if (rc < 0)
		rc = run(&o);
	ig_opts_free(&o);
	return rc;
}
