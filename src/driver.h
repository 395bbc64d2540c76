/* SPDX-License-Identifier: Apache-2.0 */
/*
 * driver.h: the C side of the protocol with lua/imexguard/driver.lua (driver.c), used by main.c.
 */
#ifndef IMEXGUARD_DRIVER_H
#define IMEXGUARD_DRIVER_H

#include "cli.h"
#include "sandbox.h"

#include <lua.h>

struct ig_run {
	struct ig_opts *o;
	lua_State *L;
	int driver; /* registry reference of the driver module */
	int table;  /* registry reference of the run table */
	char job[128];
	double t0;	 /* ig_now() at the start, seconds */
	double budget;	 /* seconds: the run's deadline (--deadline, the setting, or the default) */
	int interrupted; /* check: the deadline interrupt fired (no Lua runs with the hook after) */
	int printed;	 /* something was written on stdout */
};

/* Set r->job (the "job=<id>" of log lines) from id, every character outside [A-Za-z0-9_.-]
 * replaced by '_'. */
void ig_set_job_label(struct ig_run *r, const char *id);

/* Keep the driver module on top of the stack (popped) and make the run table from r->o, both
 * kept in the registry (r->driver, r->table). */
void ig_driver_open(struct ig_run *r);

/* Set run[key] = value in the run table (a string; NULL: nil). */
void ig_run_set(struct ig_run *r, const char *key, const char *value);

/* Call driver function `name` with the run table, through ig_sandbox_call (traceback, deadline
 * and memory classified), with the count hook on (hook = 1: Lua that may meet the deadline) or
 * suspended (hook = 0: host bookkeeping that must run even after the interrupt fired).  On
 * IG_CALL_OK the answer (a table) is on top; otherwise its message (a string). */
enum ig_call ig_driver_call(struct ig_run *r, const char *name, int hook);

#endif
