/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watchdog.c: layer 3 of the deadline and the end of a run by a signal.
 *
 * A POSIX timer (timer_create, CLOCK_MONOTONIC, SIGEV_THREAD) at deadline + IG_WATCHDOG_GRACE
 * seconds covers code stuck inside one C call (a pathological string.find pattern runs no VM
 * instruction, so the count hook of sandbox.c never fires).  Its thread writes one final line
 * "imexguard: err: <command> job=N outcome=deadline-exceeded: watchdog: ..." with write(2) and
 * calls _exit with the exit code of deadline-exceeded: both are async-signal-safe (POSIX), and a
 * thread is unaffected by the main thread's signal mask.  Child processes of `host.run` are
 * already bounded by the deadline in run.c.
 * The run also ends at once, with the same kind of final line and exit code, on SIGTERM or SIGINT
 * (an admin, or slurmd giving up on the prolog): on_terminate, installed with the watchdog.
 * Both ends also send the run's one journal entry (MESSAGE "<command> job=N
 * outcome=deadline-exceeded: ...", PRIORITY, IMEXGUARD_OUTCOME, IMEXGUARD_JOB_ID,
 * IMEXGUARD_COMMAND, as the final entry of log.c), so a prolog that slurmd stops with SIGTERM
 * when PrologEpilogTimeout runs out is in the journal too: the datagram is built and the socket
 * opened by ig_watchdog_label (ig_journal_prepare), and the handler only calls sendto(2)
 * (ig_journal_send_prepared), which POSIX lists as async-signal-safe.
 * Nothing is torn by such an end: the node list and the state file are replaced by rename(2) or
 * not at all, and the node lock is released by the kernel when the process exits.
 */
#include "watchdog.h"

#include "generated.h"
#include "imexguard.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES	512
#define DGRAM_MAX_BYTES 1024 /* a journal entry: the line plus its fields */

/* The two last lines are double-buffered: ig_watchdog_label writes the buffer not in use, then
 * switches `cur`, so the timer thread or the signal handler never reads a half-written line. */
static struct {
	timer_t timer;
	int timer_ok;			      /* timer was created */
	int exit_code;			      /* of the outcome deadline-exceeded */
	char wd_line[2][LINE_MAX_BYTES];      /* the watchdog's last line */
	char term_line[2][LINE_MAX_BYTES];    /* the last line on SIGTERM/SIGINT */
	atomic_size_t wd_len[2], term_len[2]; /* their lengths */
	char wd_entry[2][DGRAM_MAX_BYTES];    /* their journal entries (0 bytes: journal off) */
	char term_entry[2][DGRAM_MAX_BYTES];
	atomic_size_t wd_elen[2], term_elen[2];
	atomic_int cur; /* index of the lines in use */
} g_wd;

/* Write the line in use (watchdog or signal) and end the process: async-signal-safe only. */
static void end_now(int term)
{
	int cur = atomic_load(&g_wd.cur);
	const char *line = term ? g_wd.term_line[cur] : g_wd.wd_line[cur];
	size_t len = atomic_load(term ? &g_wd.term_len[cur] : &g_wd.wd_len[cur]);
	if (write(STDERR_FILENO, line, len) < 0) {
		/* nothing left to do: the exit code still says deadline-exceeded */
	}
	ig_journal_send_prepared(term ? g_wd.term_entry[cur] : g_wd.wd_entry[cur],
				 atomic_load(term ? &g_wd.term_elen[cur] : &g_wd.wd_elen[cur]));
	_exit(g_wd.exit_code);
}

/* The watchdog's thread (SIGEV_THREAD). */
static void watchdog_fire(union sigval sv)
{
	(void)sv;
	end_now(0);
}

/* SIGTERM/SIGINT handler. */
static void on_terminate(int signo)
{
	(void)signo;
	end_now(1);
}

/* Format one final line into buf (LINE_MAX_BYTES) for the command and job; returns its length.
 * A line cut to the buffer still ends in a newline. */
static size_t final_line(char *buf, const char *command, const char *job, const char *what)
{
	int n = snprintf(
	    buf, LINE_MAX_BYTES, "imexguard: %s: %s job=%s outcome=deadline-exceeded: %s\n",
	    ig_level_name(IG_ERR), command ? command : "-", job && *job ? job : "-", what);
	if (n < 0)
		n = 0;
	if (n >= LINE_MAX_BYTES) {
		n = LINE_MAX_BYTES - 1;
		buf[n - 1] = '\n';
	}
	return (size_t)n;
}

/* Prepare into buf (DGRAM_MAX_BYTES) the journal entry of the final line of final_line;
 * returns its length, 0 when the journal is off or the entry cannot be built. */
static size_t final_entry(char *buf, const char *command, const char *job, const char *what)
{
	char msg[LINE_MAX_BYTES], f_job[LINE_MAX_BYTES / 2], f_cmd[64];
	command = command ? command : "-";
	job = job && *job ? job : "-";
	snprintf(msg, sizeof msg, "%s job=%s outcome=deadline-exceeded: %s", command, job, what);
	snprintf(f_job, sizeof f_job, "IMEXGUARD_JOB_ID=%s", job);
	snprintf(f_cmd, sizeof f_cmd, "IMEXGUARD_COMMAND=%s", command);
	const char *fields[] = {"IMEXGUARD_OUTCOME=deadline-exceeded", f_job, f_cmd, NULL};
	size_t len = 0;
	int code = ig_outcome_code("deadline-exceeded");
	if (ig_journal_prepare(buf, DGRAM_MAX_BYTES, &len, code == 0 ? IG_NOTICE : IG_ERR, msg,
			       fields) < 0)
		return 0;
	return len;
}

void ig_watchdog_label(const char *command, const char *job)
{
	static const char term_what[] = "terminated by a signal (SIGTERM or SIGINT) before the run "
					"ended; the node list on disk is the old or the new one, "
					"never torn";
	char what[160];
	int next = 1 - atomic_load(&g_wd.cur);
	atomic_store(&g_wd.term_len[next],
		     final_line(g_wd.term_line[next], command, job, term_what));
	atomic_store(&g_wd.term_elen[next],
		     final_entry(g_wd.term_entry[next], command, job, term_what));
	snprintf(what, sizeof what,
		 "watchdog: still running %.0f s after the deadline (stuck in a C call), exiting",
		 IG_WATCHDOG_GRACE);
	atomic_store(&g_wd.wd_len[next], final_line(g_wd.wd_line[next], command, job, what));
	atomic_store(&g_wd.wd_elen[next], final_entry(g_wd.wd_entry[next], command, job, what));
	atomic_store(&g_wd.cur, next);
}

/* Create the timer and install the signal handlers (first arm). */
static int watchdog_init(void)
{
	struct sigevent sev;
	memset(&sev, 0, sizeof sev);
	sev.sigev_notify = SIGEV_THREAD;
	sev.sigev_notify_function = watchdog_fire;
	if (timer_create(CLOCK_MONOTONIC, &sev, &g_wd.timer) != 0)
		return -errno;
	g_wd.timer_ok = 1;
	g_wd.exit_code = ig_outcome_code("deadline-exceeded");
	if (g_wd.exit_code < 0)
		g_wd.exit_code = ig_usage_exit;
	if (atomic_load(&g_wd.wd_len[atomic_load(&g_wd.cur)]) == 0)
		ig_watchdog_label(NULL, NULL);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_terminate;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	return 0;
}

int ig_watchdog_arm(void)
{
	if (!g_wd.timer_ok) {
		int rc = watchdog_init();
		if (rc < 0)
			return rc;
	}
	struct itimerspec its;
	memset(&its, 0, sizeof its);
	double dl = ig_deadline();
	if (!isinf(dl)) {
		double at = dl + IG_WATCHDOG_GRACE;
		its.it_value.tv_sec = (time_t)at;
		its.it_value.tv_nsec = (long)((at - (double)its.it_value.tv_sec) * 1e9);
		if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
			its.it_value.tv_nsec = 1;
	}
	if (timer_settime(g_wd.timer, TIMER_ABSTIME, &its, NULL) != 0)
		return -errno;
	return 0;
}
