/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timing.h: where a run's time goes (--timing; timing.c).  Every function is a no-op until
 * ig_timing_enable is called.
 */
#ifndef IMEXGUARD_TIMING_H
#define IMEXGUARD_TIMING_H

#include <lua.h>
#include <stdio.h>

/* Turn timing on; the first phase starts now (ig_now, CLOCK_MONOTONIC). */
void ig_timing_enable(void);
/* 1 when timing is on, else 0. */
int ig_timing_enabled(void);
/* End the current phase: the seconds since the previous phase ended go to phase `name` (phases
 * are disjoint; a name given twice adds up). */
void ig_timing_phase(const char *name);
/* Add `seconds` and one call to slot `slot` (a timed activity inside the phases). */
void ig_timing_add(const char *slot, double seconds);
/* Add `seconds` and one call to `slot`, a part of another slot's time (bus.c: "bus.connect",
 * inside the unit primitive that opened the connection): printed as a slot, but not subtracted
 * again from in-lua. */
void ig_timing_add_part(const char *slot, double seconds);
/* Replace the function on top (any Lua function, upvalues kept) by a wrapper that times every
 * call in slot `slot` (a call that raises is not counted); with timing off, or when all 64 slots
 * are taken, it stays as it is.  host.c wraps each primitive of imexguard.host with it
 * ("host.NAME"), sandbox.c cjson.decode. */
void ig_timing_wrap_value(lua_State *L, const char *slot);
/* Print the phases, the slots with their calls, "in-lua" and "total" on f, in milliseconds, one
 * "timing: NAME MS ms[ N calls]" line each, then "timing: lua-heap-peak N KiB" from heap_peak
 * (bytes: the most the Lua heap held); nothing when timing is off. */
void ig_timing_report(FILE *f, size_t heap_peak);

#endif
