/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watchdog.h: layer 3 of the deadline (a timer that ends a run stuck in C) and the end of a run
 * on SIGTERM/SIGINT (watchdog.c).  Only the binary uses it.
 */
#ifndef IMEXGUARD_WATCHDOG_H
#define IMEXGUARD_WATCHDOG_H

/* Seconds after the deadline at which the watchdog ends the process (code stuck in C). */
#define IG_WATCHDOG_GRACE 2.0

/* Arm (or re-arm after the deadline changed) the watchdog at ig_deadline() + IG_WATCHDOG_GRACE
 * seconds (CLOCK_MONOTONIC, POSIX timer_settime with TIMER_ABSTIME).  No deadline: disarmed.
 * The first call also installs the SIGTERM and SIGINT handlers that end the run at once with its
 * final line (outcome deadline-exceeded and its exit code, from lua/imexguard/outcomes.lua).
 * Returns 0 or a negative errno (timer_create failed: the other two layers still apply). */
int ig_watchdog_arm(void);

/* Set the command and the job id (strings, copied; NULL: "-") that the final line of the
 * watchdog and of a signal names. */
void ig_watchdog_label(const char *command, const char *job);

#endif
