/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timing.c: where a run's time goes (`imexguard --timing COMMAND`).
 *
 * Off unless --timing is given; then the run is cut into disjoint phases (ig_timing_phase: the
 * time since the previous phase ended goes to the one named) and every primitive call is timed in
 * a slot of its own: the Lua functions of imexguard.host ("host.NAME", wrapped by host.c when it
 * has built the table), cjson.decode (sandbox.c), and the loading of Lua chunks ("load": compiling
 * source or undumping the embedded library).  Slots lie inside the phases; "in-lua" is the phases'
 * time outside every slot (the policy's and the library's own Lua code).  All times are
 * CLOCK_MONOTONIC (ig_now), printed in milliseconds at the end of the run, one line each:
 *
 *     timing: NAME MS ms
 *     timing: NAME MS ms N calls
 *
 * A timed call that raises (a bad argument, the memory limit, cjson on malformed JSON) is not
 * counted: its time shows in in-lua.  A part (ig_timing_add_part) is a slot inside another
 * slot's time, printed alike and left out of the sum that in-lua is the rest of: "bus.connect",
 * the D-Bus connection to systemd that the first unit primitive of a run waits for (bus.c).
 *
 * The Lua heap's peak (the sandbox's allocator counts it) ends the report, in KiB.
 * The time from exec(2) to main() (the dynamic loader and the libraries' constructors) is not in
 * the total: the process cannot time its own start (measure it as `imexguard --version` against
 * /bin/true, as make bench does).
 */
#include "timing.h"

#include "imexguard.h"

#include <stdio.h>
#include <string.h>

#define MAX_PHASES 16
#define MAX_SLOTS  64

struct span {
	char name[40];
	double seconds;
	long calls;
	int part; /* a part of another slot's time (ig_timing_add_part): not in the slots' sum */
};

static struct {
	int on;
	double start, mark; /* ig_now() at ig_timing_enable and at the end of the last phase */
	struct span phases[MAX_PHASES], slots[MAX_SLOTS];
	int nphases, nslots;
} g_timing;

void ig_timing_enable(void)
{
	g_timing.on = 1;
	g_timing.start = g_timing.mark = ig_now();
}

int ig_timing_enabled(void)
{
	return g_timing.on;
}

/* The span called `name` in list (n of them, at most max): found or added; NULL when full. */
static struct span *span_of(struct span *list, int *n, int max, const char *name)
{
	for (int i = 0; i < *n; i++)
		if (strcmp(list[i].name, name) == 0)
			return &list[i];
	if (*n == max)
		return NULL;
	struct span *s = &list[(*n)++];
	snprintf(s->name, sizeof s->name, "%s", name);
	return s;
}

void ig_timing_phase(const char *name)
{
	if (!g_timing.on)
		return;
	double t = ig_now();
	struct span *s = span_of(g_timing.phases, &g_timing.nphases, MAX_PHASES, name);
	if (s) {
		s->seconds += t - g_timing.mark;
		s->calls++;
	}
	g_timing.mark = t;
}

/* One call of `seconds` to `slot`; `part`: the slot is a part of another one (printed, not
 * subtracted again). */
static void add(const char *slot, double seconds, int part)
{
	if (!g_timing.on)
		return;
	struct span *s = span_of(g_timing.slots, &g_timing.nslots, MAX_SLOTS, slot);
	if (s) {
		s->seconds += seconds;
		s->calls++;
		if (part)
			s->part = 1;
	}
}

void ig_timing_add(const char *slot, double seconds)
{
	add(slot, seconds, 0);
}

void ig_timing_add_part(const char *slot, double seconds)
{
	add(slot, seconds, 1);
}

/* The wrapper of a timed Lua value: upvalue 1 the slot, upvalue 2 the function. */
static int timed_value(lua_State *L)
{
	struct span *s = lua_touserdata(L, lua_upvalueindex(1));
	int nargs = lua_gettop(L);
	lua_pushvalue(L, lua_upvalueindex(2));
	lua_insert(L, 1);
	double t0 = ig_now();
	lua_call(L, nargs, LUA_MULTRET);
	s->seconds += ig_now() - t0;
	s->calls++;
	return lua_gettop(L);
}

void ig_timing_wrap_value(lua_State *L, const char *slot)
{
	struct span *s =
	    g_timing.on ? span_of(g_timing.slots, &g_timing.nslots, MAX_SLOTS, slot) : NULL;
	if (s == NULL)
		return;
	lua_pushlightuserdata(L, s);
	lua_insert(L, -2);
	lua_pushcclosure(L, timed_value, 2);
}

void ig_timing_report(FILE *f, size_t heap_peak)
{
	if (!g_timing.on)
		return;
	double phases = 0, slots = 0;
	for (int i = 0; i < g_timing.nphases; i++) {
		const struct span *s = &g_timing.phases[i];
		fprintf(f, "timing: %s %.3f ms\n", s->name, s->seconds * 1e3);
		phases += s->seconds;
	}
	for (int i = 0; i < g_timing.nslots; i++) {
		const struct span *s = &g_timing.slots[i];
		if (s->calls == 0)
			continue;
		fprintf(f, "timing: %s %.3f ms %ld call%s\n", s->name, s->seconds * 1e3, s->calls,
			s->calls == 1 ? "" : "s");
		if (!s->part)
			slots += s->seconds;
	}
	/* lua-state and close hold no Lua code of the run; every other phase is the driver's */
	double outside = 0;
	for (int i = 0; i < g_timing.nphases; i++)
		if (strcmp(g_timing.phases[i].name, "lua-state") == 0 ||
		    strcmp(g_timing.phases[i].name, "close") == 0)
			outside += g_timing.phases[i].seconds;
	double in_lua = phases - outside - slots;
	fprintf(f, "timing: in-lua %.3f ms\n", (in_lua > 0 ? in_lua : 0) * 1e3);
	fprintf(f, "timing: total %.3f ms\n", phases * 1e3);
	fprintf(f, "timing: lua-heap-peak %zu KiB\n", (heap_peak + 1023) / 1024);
}
