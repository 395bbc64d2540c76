/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unit.c: systemd units: the Lua primitives unit, unit_job, unit_reset_failed, unit_kill and
 * unit_set_bus (see docs/policy-api.md, section "systemd").
 *
 * They use the service manager's D-Bus API, org.freedesktop.systemd1(5), over the connection of
 * bus.c: the Manager object /org/freedesktop/systemd1 (StartUnit, StopUnit, RestartUnit,
 * TryRestartUnit, ResetFailedUnit, KillUnit, the JobRemoved signal) and the unit objects'
 * org.freedesktop.systemd1.Unit and .Service properties read with
 * org.freedesktop.DBus.Properties.Get (D-Bus specification, "org.freedesktop.DBus.Properties").
 *
 * A call whose connection breaks or is refused while systemd re-executes or reloads
 * (daemon-reexec, daemon-reload) is made again on the connection ig_bus_reopen gives, within its
 * bound (unit_query, unit_simple; unit_job_run for jobs queued before the re-exec, which systemd
 * keeps).  Every primitive is bounded by ig_bound(timeout).  A query that fails is reported as
 * nil, msg, code and never as a made-up state: the caller must treat it as "unknown".
 *
 * The bus work is done by plain C functions that fill a struct and an error buffer; the Lua
 * wrappers push results only after every sd-bus object is released, so a Lua error (which
 * longjmps) can never leak a message, slot or error.
 */
#include "bus.h"
#include "generated.h"
#include "imexguard.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>

#define UNIT_DEFAULT_TIMEOUT 10.0 /* seconds: unit(), unit_reset_failed(), unit_kill() */
#define EXEC_MAX	     16	  /* ExecStart commands kept */
#define EXEC_BUF	     8192 /* bytes of ExecStart paths and arguments kept */
#define BUS_RETRIES	     3	  /* lost connections survived by one primitive call */
#define SNAPSHOT_TRIES	     3	  /* unit queries asked again while the unit changes state */

/* For _cleanup_(freep): free(*p). */
static inline void freep(void *p)
{
	free(*(void **)p);
}

/* ---- errors ---------------------------------------------------------------------------- */

/* A failure, formatted before anything is pushed on the Lua stack. */
struct unit_err {
	char code[32];
	char msg[512];
	/* a job that ended but not "done" (job_failed): the job's result, the unit's Result and
	 * ActiveState read right after; job_result "" for any other failure */
	char job_result[32];
	char unit_result[32];
	char active_state[32];
};

static void set_err(struct unit_err *e, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(struct unit_err *e, const char *code, const char *fmt, ...)
{
	va_list ap;

	snprintf(e->code, sizeof e->code, "%s", code);
	e->job_result[0] = e->unit_result[0] = e->active_state[0] = '\0';
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
}

/* Fill `e` for a failed step `what` ("unit foo.service", "restart foo.service: RestartUnit"...):
 * code "timeout"/"deadline" for -ETIMEDOUT (by_deadline: the run's budget was the tighter bound),
 * else "bus" with the D-Bus error name and message (or strerror for a local failure).
 * A connection-level failure drops the connection so the next call reconnects. */
static int bus_fail(struct unit_err *e, const char *what, int r, const sd_bus_error *error,
		    double bound, int by_deadline)
{
	if (r == -ETIMEDOUT) {
		if (by_deadline)
			set_err(e, "deadline",
				"%s: run deadline reached after %.3g s waiting for systemd", what,
				bound);
		else
			set_err(e, "timeout", "%s: no answer from systemd on %s within %.3g s",
				what, ig_bus_name(), bound);
		return r;
	}
	if (ig_bus_conn_error(r))
		ig_bus_drop();
	if (error && sd_bus_error_is_set(error))
		set_err(e, "bus", "%s: %s: %s", what, error->name,
			error->message ? error->message : strerror(-r));
	else
		set_err(e, "bus", "%s: D-Bus on %s: %s", what, ig_bus_name(), strerror(-r));
	return r;
}

/* ---- unit properties -------------------------------------------------------------------- */

struct unit_props {
	char id[257]; /* UNIT_NAME_MAX is 256 */
	char load_state[32];
	char unit_file_state[32];
	char active_state[32];
	char sub_state[32];
	char result[32];
	uint32_t main_pid;
	uint32_t n_restarts; /* Service.NRestarts: automatic restarts since the count was reset */
	uint64_t exec_main_start_us;
	uint64_t active_enter_us;
	uint64_t state_change_us;
	char invocation_id[33];
	uint32_t job_id; /* the unit's pending job (Unit.Job), 0 when none */
	char job_path[128];
	/* ExecStart (Service.ExecStart): n_exec commands; command i is exec[i].argc + 1 strings,
	 * NUL-terminated one after another in exec_buf from exec[i].off: the path, then argv. */
	unsigned n_exec;
	int exec_overflow; /* ExecStart did not fit: more than EXEC_MAX commands or exec_buf */
	struct {
		size_t off;
		unsigned argc;
	} exec[EXEC_MAX];
	char exec_buf[EXEC_BUF];
	size_t exec_len;
};

/* Append string s (with its NUL) to p->exec_buf; -EOVERFLOW when it does not fit. */
static int exec_put(struct unit_props *p, const char *s)
{
	size_t n = strlen(s) + 1;

	if (n > sizeof p->exec_buf - p->exec_len)
		return -EOVERFLOW;
	memcpy(p->exec_buf + p->exec_len, s, n);
	p->exec_len += n;
	return 0;
}

/* Read one ExecStart entry (sasbttttuii: path, argv, ignore-failure, start/exit timestamps,
 * pid, code, status; org.freedesktop.systemd1(5)) into p, keeping path and argv only. */
static int read_exec_one(sd_bus_message *m, struct unit_props *p)
{
	const char *path, *arg;
	unsigned idx = p->n_exec, argc = 0;
	int r = sd_bus_message_read(m, "s", &path);

	if (r < 0)
		return r;
	if (idx >= EXEC_MAX)
		p->exec_overflow = 1;
	else
		p->exec[idx].off = p->exec_len;
	if (!p->exec_overflow && exec_put(p, path) < 0)
		p->exec_overflow = 1;
	r = sd_bus_message_enter_container(m, 'a', "s");
	if (r < 0)
		return r;
	while ((r = sd_bus_message_read(m, "s", &arg)) > 0) {
		if (!p->exec_overflow && exec_put(p, arg) < 0)
			p->exec_overflow = 1;
		argc++;
	}
	if (r < 0)
		return r;
	r = sd_bus_message_exit_container(m);
	if (r < 0)
		return r;
	r = sd_bus_message_skip(m, "bttttuii");
	if (r < 0)
		return r;
	if (!p->exec_overflow) {
		p->exec[idx].argc = argc;
		p->n_exec = idx + 1;
	}
	return 0;
}

/* Properties whose type is a structure or an array of them: Unit.Job (uo) and
 * Service.ExecStart (a(sasbttttuii)).  Returns 1 when `key` was one of them (value consumed),
 * 0 when not (nothing consumed), or negative errno. */
static int read_prop_special(sd_bus_message *m, const char *key, const char *contents,
			     struct unit_props *p)
{
	const char *job;
	int r;

	if (strcmp(key, "Job") == 0 && contents && strcmp(contents, "(uo)") == 0) {
		r = sd_bus_message_read(m, "v", "(uo)", &p->job_id, &job);
		if (r >= 0)
			snprintf(p->job_path, sizeof p->job_path, "%s", job);
		return r < 0 ? r : 1;
	}
	if (strcmp(key, "ExecStart") != 0 || !contents || strcmp(contents, "a(sasbttttuii)") != 0)
		return 0;
	r = sd_bus_message_enter_container(m, 'v', contents);
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', "(sasbttttuii)");
	if (r < 0)
		return r;
	while ((r = sd_bus_message_enter_container(m, 'r', "sasbttttuii")) > 0) {
		r = read_exec_one(m, p);
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
		if (r < 0)
			return r;
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	return r < 0 ? r : 1;
}

/* Read one variant value of property `key` if it is one we keep (and has the documented type:
 * org.freedesktop.systemd1(5)); skip it otherwise. */
static int read_prop(sd_bus_message *m, const char *key, struct unit_props *p)
{
	static const struct {
		const char *key;
		const char *sig;
		size_t off;
		size_t size;
	} props[] = {
#define S(k, f) {k, "s", offsetof(struct unit_props, f), sizeof(((struct unit_props *)0)->f)}
	    S("Id", id),
	    S("LoadState", load_state),
	    S("UnitFileState", unit_file_state),
	    S("ActiveState", active_state),
	    S("SubState", sub_state),
	    S("Result", result),
#undef S
	    {"MainPID", "u", offsetof(struct unit_props, main_pid), 0},
	    {"NRestarts", "u", offsetof(struct unit_props, n_restarts), 0},
	    {"ExecMainStartTimestamp", "t", offsetof(struct unit_props, exec_main_start_us), 0},
	    {"ActiveEnterTimestamp", "t", offsetof(struct unit_props, active_enter_us), 0},
	    {"StateChangeTimestamp", "t", offsetof(struct unit_props, state_change_us), 0},
	    {"InvocationID", "ay", offsetof(struct unit_props, invocation_id), 0},
	};
	const char *contents = NULL;
	char type;
	int r;

	r = sd_bus_message_peek_type(m, &type, &contents);
	if (r < 0)
		return r;
	r = type == 'v' ? read_prop_special(m, key, contents, p) : 0;
	if (r != 0)
		return r < 0 ? r : 0;
	for (size_t i = 0; i < sizeof props / sizeof props[0]; i++) {
		char *field = (char *)p + props[i].off;
		const void *bytes;
		size_t n;

		if (strcmp(key, props[i].key) != 0)
			continue;
		if (type != 'v' || !contents || strcmp(contents, props[i].sig) != 0)
			break; /* unexpected type: ignore rather than misread */
		r = sd_bus_message_enter_container(m, 'v', props[i].sig);
		if (r < 0)
			return r;
		switch (props[i].sig[0]) {
		case 's': {
			const char *s;
			r = sd_bus_message_read(m, "s", &s);
			if (r >= 0)
				snprintf(field, props[i].size, "%s", s);
			break;
		}
		case 'u':
			r = sd_bus_message_read(m, "u", (uint32_t *)field);
			break;
		case 't':
			r = sd_bus_message_read(m, "t", (uint64_t *)field);
			break;
		default: /* "ay": the 128-bit invocation ID, sd-id128(3) */
			r = sd_bus_message_read_array(m, 'y', &bytes, &n);
			if (r >= 0) {
				field[0] = '\0';
				if (n == 16)
					for (size_t k = 0; k < 16; k++)
						snprintf(field + 2 * k, 3, "%02x",
							 ((const unsigned char *)bytes)[k]);
			}
			break;
		}
		if (r < 0)
			return r;
		return sd_bus_message_exit_container(m);
	}
	return sd_bus_message_skip(m, "v");
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The properties a query reads (struct unit_props; org.freedesktop.systemd1(5)), each with
 * Properties.Get: GetAll would make systemd compute every property of the interface, among them
 * the cgroup's accounting (MemoryCurrent, CPUUsageNSec, IO and IP counters read from the kernel),
 * several times the cost of these.  StateChangeTimestamp comes first and is read once more after
 * the others (query_send_all): systemd answers a connection's calls in order but may run jobs
 * between two of them, and every change of the unit's state moves that timestamp, so equal
 * readings mean the properties come from one state of the unit. */
static const struct {
	int service; /* 1: org.freedesktop.systemd1.Service, 0: org.freedesktop.systemd1.Unit */
	const char *key;
} QUERY[] = {
    {0, "StateChangeTimestamp"},
    {0, "Id"},
    {0, "LoadState"},
    {0, "UnitFileState"},
    {0, "ActiveState"},
    {0, "SubState"},
    {0, "ActiveEnterTimestamp"},
    {0, "InvocationID"},
    {0, "Job"},
    {1, "Result"},
    {1, "MainPID"},
    {1, "ExecMainStartTimestamp"},
    {1, "NRestarts"},
    {1, "ExecStart"},
};
#define NQUERY (sizeof QUERY / sizeof QUERY[0])

/* Send every Get of QUERY (n of them) and one more of QUERY[0] (StateChangeTimestamp) into q[n],
 * wait for all the answers and read them into p.  Returns 0, -EAGAIN when the unit changed state
 * while they were answered (the two readings differ), or negative errno with *error possibly
 * set. */
static int query_send_all(sd_bus *b, double end, const char *path, size_t n,
			  struct ig_bus_pending *q, struct unit_props *p, sd_bus_error *error)
{
	struct unit_props again;
	int r = 0;

	for (size_t i = 0; i <= n && r >= 0; i++)
		r = ig_bus_send(b, end, path, IG_BUS_PROPERTIES, "Get", &q[i], "ss",
				QUERY[i % n].service ? "org.freedesktop.systemd1.Service"
						     : "org.freedesktop.systemd1.Unit",
				QUERY[i % n].key);
	n++;
	if (r >= 0)
		r = ig_bus_wait_all(b, end, q, n);
	for (size_t i = 0; i < n && r >= 0; i++) {
		r = q[i].r;
		if (r < 0 && sd_bus_is_open(b) <= 0)
			return -ECONNRESET; /* sd-bus answered NoReply for the closed connection */
		if (r < 0)
			sd_bus_error_copy(error, &q[i].error);
		else if (i < n - 1)
			r = read_prop(q[i].reply, QUERY[i].key, p);
	}
	if (r < 0)
		return r;
	memset(&again, 0, sizeof again);
	r = read_prop(q[n - 1].reply, QUERY[0].key, &again);
	return r < 0 ? r : again.state_change_us == p->state_change_us ? 0 : -EAGAIN;
}

/* Properties of unit `name` on connection `b` before `end`, in one round trip: the unit's object
 * path is the name encoded under /org/freedesktop/systemd1/unit (sd_bus_path_encode(3); systemd
 * names its unit objects so, and systemctl show finds them so), and systemd loads a unit that is
 * not loaded when its object is looked up (load_state "not-found" when no unit file exists), as
 * Manager.LoadUnit would.  Every Properties.Get of QUERY (the .Service ones only for a service)
 * is sent before any answer is awaited.  Returns 0 or negative errno with *error possibly set. */
static int query_on(sd_bus *b, double end, const char *name, struct unit_props *p,
		    sd_bus_error *error)
{
	_cleanup_(freep) char *path = NULL;
	struct ig_bus_pending q[NQUERY + 1];
	size_t n = 0;
	int r;

	memset(p, 0, sizeof *p);
	/* Every unit name has a type suffix; systemd reads an object path ending in "self" or in a
	 * 128-bit id (neither has a '.') as the caller's unit or the unit of an invocation ID. */
	if (!strchr(name, '.'))
		return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
					 "Unit name %s is not valid.", name);
	for (size_t i = 0; i < NQUERY; i++)
		if (!QUERY[i].service || ends_with(name, ".service"))
			n = i + 1;
	r = sd_bus_path_encode(IG_BUS_PATH "/unit", name, &path);
	/* a unit that changes state under the query is asked again, SNAPSHOT_TRIES times at most; a
	 * unit that never holds still for one round trip gets its last answer */
	for (int t = 0; r >= 0 && t < SNAPSHOT_TRIES; t++) {
		memset(p, 0, sizeof *p);
		memset(q, 0, sizeof q);
		r = query_send_all(b, end, path, n, q, p, error);
		for (size_t i = 0; i <= NQUERY; i++)
			ig_bus_pending_clear(&q[i]);
		if (r != -EAGAIN)
			return r;
		r = 0;
	}
	return r;
}

/* Properties of unit `name` within `timeout` seconds (bounded by the budget), with query_on.  A
 * lost connection (the manager re-executed or reloaded) is reopened and the query retried, at
 * most BUS_RETRIES times (a read has no side effect), within the same bound.  Returns 0 or negative
 * errno with `e` set. */
static int unit_query(const char *name, double timeout, struct unit_props *p, struct unit_err *e)
{
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	int by_deadline = 0;
	double bound = ig_bound(timeout, &by_deadline);
	double end = ig_now() + bound;
	char what[320];
	sd_bus *b;
	int r;

	snprintf(what, sizeof what, "unit %s", name);
	r = ig_bus_acquire(&b, end);
	if (r >= 0)
		r = query_on(b, end, name, p, &error);
	for (int n = 0;
	     r < 0 && ig_bus_conn_error(r) && n < BUS_RETRIES && ig_bus_usec_left(end) > 0; n++) {
		sd_bus_error_free(&error);
		r = ig_bus_reopen(&b, end, 1);
		if (r >= 0)
			r = query_on(b, end, name, p, &error);
	}
	if (r < 0)
		return bus_fail(e, what, r, &error, bound, by_deadline);
	if (p->exec_overflow) {
		set_err(e, "EOVERFLOW",
			"unit %s: ExecStart has more than %d commands or %d bytes of arguments",
			name, EXEC_MAX, EXEC_BUF);
		return -EOVERFLOW;
	}
	return 0;
}

/* ---- unit jobs -------------------------------------------------------------------------- */

struct job_wait {
	char path[512];	 /* the job object path returned by Start/Stop/...Unit; "" until known */
	char result[32]; /* JobRemoved's result, "" until our job is removed */
	int deduced;	 /* result deduced from the unit's state: the job vanished while the
			  * connection was lost (the manager re-executed) */
};

/* JobRemoved(u id, o job, s unit, s result), org.freedesktop.systemd1(5): note our job's result. */
static int on_job_removed(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct job_wait *w = userdata;
	const char *job, *unit, *result;
	uint32_t id;

	(void)error;
	if (sd_bus_message_read(m, "uoss", &id, &job, &unit, &result) < 0)
		return 0;
	if (w->path[0] && strcmp(job, w->path) == 0)
		snprintf(w->result, sizeof w->result, "%s", result[0] ? result : "unknown");
	return 0;
}

/* Subscribe (ig_bus_subscribe) and install the JobRemoved match in *slot (replacing an older
 * one).  On a bus the match names the sender; a direct connection has no
 * sender names.  Returns 0 or negative errno. */
static int job_watch(sd_bus *b, double end, struct job_wait *w, sd_bus_slot **slot,
		     sd_bus_error *error)
{
	int r;

	*slot = sd_bus_slot_unref(*slot);
	r = ig_bus_subscribe(b, end, error);
	if (r < 0)
		return r;
	r = sd_bus_match_signal_async(b, slot, sd_bus_is_bus_client(b) > 0 ? IG_BUS_DEST : NULL,
				      IG_BUS_PATH, IG_BUS_MANAGER, "JobRemoved", on_job_removed,
				      NULL, w);
	return r < 0 ? r : 0;
}

/* Queue job `method` for `name` with mode "replace"; its object path goes to w->path. */
static int job_queue(sd_bus *b, double end, const char *method, const char *name,
		     struct job_wait *w, sd_bus_error *error)
{
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	const char *job;
	int r;

	r = ig_bus_call(b, end, IG_BUS_PATH, IG_BUS_MANAGER, method, error, &reply, "ss", name,
			"replace");
	if (r >= 0)
		r = sd_bus_message_read(reply, "o", &job);
	if (r < 0)
		return r;
	snprintf(w->path, sizeof w->path, "%s", job);
	return 0;
}

/* Whether job object `path` still exists (Properties.Get of org.freedesktop.systemd1.Job.State):
 * 1 yes, 0 gone (systemd answers UnknownObject for a removed job), negative errno otherwise. */
static int job_exists(sd_bus *b, double end, const char *path, sd_bus_error *error)
{
	int r = ig_bus_call(b, end, path, IG_BUS_PROPERTIES, "Get", error, NULL, "ss",
			    "org.freedesktop.systemd1.Job", "State");

	if (r >= 0)
		return 1;
	if (sd_bus_error_has_names(error, "org.freedesktop.DBus.Error.UnknownObject",
				   "org.freedesktop.DBus.Error.UnknownInterface",
				   "org.freedesktop.DBus.Error.UnknownMethod",
				   "org.freedesktop.systemd1.NoSuchJob")) {
		sd_bus_error_free(error);
		return 0;
	}
	return r;
}

/* The result of a job of `verb` that is gone, from the unit's state: "done" when the unit is in
 * the state the verb asks for (active for start/restart; inactive or failed for stop; anything
 * but failed for try-restart), "failed" when it is inactive or failed after a start/restart, else
 * "unknown" (the unit is between states: another job runs it). */
static const char *deduce_result(const char *verb, const struct unit_props *p)
{
	const char *a = p->active_state;
	int active = strcmp(a, "active") == 0 || strcmp(a, "reloading") == 0;
	int down = strcmp(a, "inactive") == 0 || strcmp(a, "failed") == 0;

	if (strcmp(verb, "stop") == 0)
		return down ? "done" : "unknown";
	if (strcmp(verb, "try-restart") == 0 && strcmp(a, "inactive") == 0)
		return "done";
	return active ? "done" : down ? "failed" : "unknown";
}

/* After the connection was lost while a job of `verb` on `name` was queued or waited for:
 * reopen it, re-subscribe and re-install the JobRemoved match (job_watch), then find out what
 * became of the job, as systemd keeps jobs across daemon-reexec and daemon-reload.  A job
 * whose path we know and that still exists is waited for again; one that is gone gets its
 * result from the unit's state (deduce_result).  When the queuing call itself was lost
 * (w->path ""), the unit's pending job is adopted, or a state change since `t_call_us`
 * (wall clock, microseconds) that shows the job's success is taken as its result, or else the
 * job is queued again, once per call (*requeued), since a job has side effects.  Returns 0 (w->path
 * or w->result set) or negative errno. */
static int job_recover(sd_bus **b, double end, const char *verb, const char *method,
		       const char *name, uint64_t t_call_us, struct job_wait *w, sd_bus_slot **slot,
		       sd_bus_error *error, int *requeued)
{
	struct unit_props p;
	int r;

	*slot = sd_bus_slot_unref(*slot);
	sd_bus_error_free(error);
	r = ig_bus_reopen(b, end, 1);
	if (r >= 0)
		r = job_watch(*b, end, w, slot, error);
	if (r >= 0 && w->path[0])
		r = job_exists(*b, end, w->path, error);
	if (r != 0)
		return r < 0 ? r : 0; /* still queued or running: wait for its JobRemoved */
	r = query_on(*b, end, name, &p, error);
	if (r < 0)
		return r;
	if (!w->path[0] && p.job_id) {
		snprintf(w->path, sizeof w->path, "%s", p.job_path);
		r = job_exists(*b, end, w->path, error);
		if (r != 0)
			return r < 0 ? r : 0;
		r = query_on(*b, end, name, &p, error);
		if (r < 0)
			return r;
	} else if (!w->path[0] && !*requeued &&
		   (p.state_change_us < t_call_us ||
		    strcmp(deduce_result(verb, &p), "done") != 0)) {
		/* the call was lost and its effect is not to be seen: no state change since, or
		 * none that is the job's success (seen under daemon-reexec in a loop: a lost start,
		 * the unit inactive with a newer state-change time, was taken for a failed job) */
		*requeued = 1;
		return job_queue(*b, end, method, name, w, error);
	}
	snprintf(w->result, sizeof w->result, "%s", deduce_result(verb, &p));
	w->deduced = 1;
	return 0;
}

/* A duration as systemd writes it ("15s", "1min 30s"; lua/imexguard/progress.lua's duration) in
 * buf. */
static void duration(char *buf, size_t size, double s)
{
	long n = s > 0 ? (long)s : 0;

	if (s > 0 && s < 1)
		snprintf(buf, size, "%.1fs", s);
	else if (n < 60)
		snprintf(buf, size, "%lds", n);
	else if (n % 60 == 0)
		snprintf(buf, size, "%ldmin", n / 60);
	else
		snprintf(buf, size, "%ldmin %lds", n / 60, n % 60);
}

/* Dispatch signals until w->result is set or `end` passes, telling the wait's progress at level
 * info every ig_progress_every seconds, as systemd tells a slow start ("waiting for systemd's job
 * restart nvidia-imex.service (5s / 30s)"; lua/imexguard/progress.lua's line).  what: "VERB UNIT";
 * total: the seconds the wait may take.  Returns 0, -ETIMEDOUT, or the negative errno of a failing
 * connection. */
static int job_wait_removed(sd_bus *b, double end, struct job_wait *w, const char *what,
			    double total)
{
	double start = ig_now(), next = start + ig_progress_every;

	while (!w->result[0]) {
		double until = next < end ? next : end;
		int r = ig_bus_step(b, until);

		if (r == -ETIMEDOUT && until < end) {
			char waited[32], all[32];

			duration(waited, sizeof waited, ig_now() - start);
			duration(all, sizeof all, total);
			ig_log(IG_INFO, NULL, "waiting for systemd's job %s (%s / %s)", what,
			       waited, all);
			next += ig_progress_every;
			continue;
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* A job that ended with a result other than "done": read the unit's Result and state (the reason
 * systemd gives: "start-limit-hit", "exit-code", "timeout", "core-dump", "signal"...) on the same
 * connection before `end` and fill `e` with code = the job result, a message naming both, and
 * for start-limit-hit how to recover. */
static void job_failed(sd_bus *b, double end, const char *what, const char *name,
		       const struct job_wait *w, struct unit_err *e)
{
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	struct unit_props p;
	const char *hint = "";

	if (query_on(b, end, name, &p, &error) < 0)
		snprintf(p.result, sizeof p.result, "unknown");
	if (!p.result[0])
		snprintf(p.result, sizeof p.result, "unknown");
	if (strcmp(p.result, "start-limit-hit") == 0)
		hint = " (the unit hit its start limit, StartLimitBurst in StartLimitIntervalSec: "
		       "'systemctl reset-failed' clears it)";
	set_err(e, w->result,
		"%s: job %s finished with result '%s'%s; unit Result '%s', state %s%s", what,
		w->path, w->result, w->deduced ? " (deduced from the unit's state)" : "", p.result,
		p.active_state[0] ? p.active_state : "unknown", hint);
	snprintf(e->job_result, sizeof e->job_result, "%s", w->result);
	snprintf(e->unit_result, sizeof e->unit_result, "%s", p.result);
	snprintf(e->active_state, sizeof e->active_state, "%s", p.active_state);
}

/* Queue job `method` (StartUnit, StopUnit, RestartUnit, TryRestartUnit) for `name` with mode
 * "replace" and wait for its JobRemoved within `timeout` seconds (bounded by the budget), the
 * pattern of systemctl (bus-wait-for-jobs.c in systemd): Subscribe, install the match
 * for JobRemoved, then call the method, remember the returned job path and dispatch signals
 * until that job is removed.  Up to BUS_RETRIES lost connections (daemon-reexec,
 * daemon-reload) are survived with job_recover, which queues the job again at most once.  Returns 0
 * for result "done", else negative errno with `e` set: code = systemd's job result (with the unit's
 * Result, job_failed), "wait-timeout", "deadline", "timeout" or "bus". */
static int unit_job_run(const char *name, const char *verb, const char *method, double timeout,
			struct unit_err *e)
{
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	_cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
	struct job_wait w = {{0}, {0}, 0};
	int by_deadline = 0, recovered = 0, requeued = 0;
	double bound = ig_bound(timeout, &by_deadline);
	double end = ig_now() + bound;
	uint64_t t_call_us = (uint64_t)(ig_wallclock() * 1e6);
	char what[320];
	sd_bus *b = NULL;
	int r;

	snprintf(what, sizeof what, "%s %s", verb, name);
	r = ig_bus_acquire(&b, end);
	if (r >= 0)
		r = job_watch(b, end, &w, &slot, &error);
	if (r >= 0)
		r = job_queue(b, end, method, name, &w, &error);
	for (;;) {
		if (r >= 0)
			r = job_wait_removed(b, end, &w, what, bound);
		if (r >= 0 || !ig_bus_conn_error(r) || recovered++ == BUS_RETRIES ||
		    ig_bus_usec_left(end) == 0)
			break;
		r = job_recover(&b, end, verb, method, name, t_call_us, &w, &slot, &error,
				&requeued);
	}
	if (r == -ETIMEDOUT && w.path[0]) {
		if (by_deadline)
			set_err(
			    e, "deadline",
			    "%s: run deadline reached after %.3g s; job %s may still be running",
			    what, bound, w.path);
		else
			set_err(e, "wait-timeout",
				"%s: no result after %.3g s; job %s may still be running", what,
				bound, w.path);
		return r;
	}
	if (r < 0)
		return bus_fail(e, what, r, &error, bound, by_deadline);
	if (strcmp(w.result, "done") == 0)
		return 0;
	job_failed(b, end, what, name, &w, e);
	return -EIO;
}

/* One Manager method call with arguments, no result: ResetFailedUnit(s), KillUnit(ssi), within
 * `timeout` seconds (bounded by the budget); a lost connection is reopened and the call made
 * once more.  Returns 0 or negative errno with `e` set. */
static int unit_simple(const char *what, const char *method, double timeout, struct unit_err *e,
		       const char *types, const char *name, const char *who, int signo)
{
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	int by_deadline = 0;
	double bound = ig_bound(timeout, &by_deadline);
	double end = ig_now() + bound;
	sd_bus *b;
	int r;

	r = ig_bus_acquire(&b, end);
	if (r >= 0)
		r = ig_bus_call(b, end, IG_BUS_PATH, IG_BUS_MANAGER, method, &error, NULL, types,
				name, who, signo);
	if (r < 0 && ig_bus_conn_error(r) && ig_bus_usec_left(end) > 0) {
		/* the manager re-executed: reopen and call once more (see ig_bus_reopen) */
		sd_bus_error_free(&error);
		r = ig_bus_reopen(&b, end, 1);
		if (r >= 0)
			r = ig_bus_call(b, end, IG_BUS_PATH, IG_BUS_MANAGER, method, &error, NULL,
					types, name, who, signo);
	}
	if (r < 0)
		return bus_fail(e, what, r, &error, bound, by_deadline);
	return 0;
}

/* ---- Lua primitives --------------------------------------------------------------------- */

static const char *check_unit_name(lua_State *L, int arg)
{
	size_t len;
	const char *name = luaL_checklstring(L, arg, &len);

	if (len == 0 || strlen(name) != len || len > 256)
		luaL_argerror(L, arg, "unit name must be a non-empty string of at most 256 bytes");
	return name;
}

static double check_timeout(lua_State *L, int arg, int optional)
{
	double t =
	    optional ? luaL_optnumber(L, arg, UNIT_DEFAULT_TIMEOUT) : luaL_checknumber(L, arg);

	if (!(t >= 0))
		luaL_argerror(L, arg, "timeout must be a number of seconds >= 0");
	return t;
}

/* Push p's ExecStart as a list of {path = string, argv = {string...}} (argv[1] is argv[0]). */
static void push_exec_start(lua_State *L, const struct unit_props *p)
{
	lua_createtable(L, (int)p->n_exec, 0);
	for (unsigned i = 0; i < p->n_exec; i++) {
		const char *s = p->exec_buf + p->exec[i].off;

		lua_createtable(L, 0, 2);
		lua_pushstring(L, s);
		lua_setfield(L, -2, "path");
		lua_createtable(L, (int)p->exec[i].argc, 0);
		for (unsigned k = 1; k <= p->exec[i].argc; k++) {
			s += strlen(s) + 1;
			lua_pushstring(L, s);
			lua_rawseti(L, -2, k);
		}
		lua_setfield(L, -2, "argv");
		lua_rawseti(L, -2, i + 1);
	}
}

/*
 * host.unit(name [, timeout]) -> properties | nil, msg, code
 *   name: unit name (string, e.g. "nvidia-imex.service"); timeout: seconds (default 10),
 *   bounded by the run's budget.
 *   properties: {load_state, unit_file_state, active_state, sub_state, result (strings; result
 *   "" for a unit that is not a service), main_pid (number, 0 when none), invocation_id (32
 *   lowercase hex chars, "" when never started), exec_main_start_us, active_enter_us,
 *   state_change_us (StateChangeTimestamp: the "since" of `systemctl status`) (microseconds since
 *   the epoch, 0 when never), n_restarts (Service.NRestarts: how often systemd restarted the
 *   service by its Restart= setting since the count was last reset (systemd 235+; reset-failed
 *   and a start by hand after the unit stopped reset it; a restart by hand does not count it);
 *   0 for a unit that is not a service)}.  A unit without a unit file answers with
 *   load_state "not-found" (not an error).
 *   Errors: code "timeout" (our timeout), "deadline" (the budget), "bus" (a D-Bus error or no
 *   connection; the message names the unit and the D-Bus error).  Never a guessed state.
 *   systemd API: Properties.Get of each property, pipelined, on the unit object whose path is
 *   the encoded name (sd_bus_path_encode(3); query_on), org.freedesktop.systemd1.Unit and, for a
 *   service, org.freedesktop.systemd1.Service (org.freedesktop.systemd1(5)); a name without a
 *   type suffix is refused (code "bus", InvalidArgs) without asking systemd.
 *   exec_start: the Service's ExecStart (a(sasbttttuii)) as a list of {path = string, argv =
 *   {strings}} (argv[1] is argv[0]; {} for a non-service or a unit without a unit file); code
 *   "EOVERFLOW" when it has over EXEC_MAX commands or EXEC_BUF bytes.  A connection lost while
 *   systemd re-executes is reopened and the query retried (unit_query).
 */
int ig_host_unit(lua_State *L)
{
	const char *name = check_unit_name(L, 1);
	double timeout = check_timeout(L, 2, 1);
	struct unit_props p;
	struct unit_err e;

	if (unit_query(name, timeout, &p, &e) < 0)
		return ig_push_error(L, e.code, "%s", e.msg);
	lua_createtable(L, 0, 12);
	ig_set_string(L, "load_state", p.load_state);
	ig_set_string(L, "unit_file_state", p.unit_file_state);
	ig_set_string(L, "active_state", p.active_state);
	ig_set_string(L, "sub_state", p.sub_state);
	ig_set_string(L, "result", p.result);
	ig_set_integer(L, "main_pid", (lua_Integer)p.main_pid);
	ig_set_integer(L, "n_restarts", (lua_Integer)p.n_restarts);
	ig_set_string(L, "invocation_id", p.invocation_id);
	ig_set_integer(L, "exec_main_start_us", (lua_Integer)p.exec_main_start_us);
	ig_set_integer(L, "active_enter_us", (lua_Integer)p.active_enter_us);
	ig_set_integer(L, "state_change_us", (lua_Integer)p.state_change_us);
	push_exec_start(L, &p);
	lua_setfield(L, -2, "exec_start");
	return 1;
}

/*
 * host.unit_job(name, verb, timeout) -> "done" | nil, msg, code
 *   name: unit name; verb: "start" | "stop" | "restart" | "try-restart" (anything else raises);
 *   timeout: seconds to wait for the job's result, bounded by the run's budget.
 *   Queues the job with mode "replace" (Manager.StartUnit/StopUnit/RestartUnit/TryRestartUnit)
 *   after subscribing to JobRemoved, then waits for this job's JobRemoved signal
 *   (org.freedesktop.systemd1(5), the pattern of systemctl's bus-wait-for-jobs).
 *   Errors: code = systemd's job result when not "done" ("failed", "canceled", "timeout",
 *   "dependency", "skipped", "invalid", ...), then a 4th value {job_result, unit_result,
 *   active_state} (strings: the unit's Result and ActiveState read after the job, e.g.
 *   unit_result "start-limit-hit", "exit-code", "signal", "core-dump", "timeout"; "unknown"
 *   when unreadable), both named in the message; "wait-timeout" when our wait expired (the job
 *   may still be queued or running: the message says so and names the job); "deadline" when
 *   the budget expired first; "timeout" when queuing the job got no answer; "bus" for a D-Bus
 *   error (e.g. org.freedesktop.systemd1.NoSuchUnit).  A connection lost while systemd
 *   re-executes or reloads is survived (unit_job_run); a job that ended meanwhile gets its
 *   result from the unit's state (deduce_result) and the message says so.
 */
int ig_host_unit_job(lua_State *L)
{
	static const char *const verbs[] = {"start", "stop", "restart", "try-restart", NULL};
	static const char *const methods[] = {"StartUnit", "StopUnit", "RestartUnit",
					      "TryRestartUnit"};
	const char *name = check_unit_name(L, 1);
	int v = luaL_checkoption(L, 2, NULL, verbs);
	double timeout = check_timeout(L, 3, 0);
	struct unit_err e;

	if (unit_job_run(name, verbs[v], methods[v], timeout, &e) < 0) {
		ig_push_error(L, e.code, "%s", e.msg);
		if (!e.job_result[0])
			return 3;
		lua_createtable(L, 0, 3);
		ig_set_string(L, "job_result", e.job_result);
		ig_set_string(L, "unit_result", e.unit_result);
		ig_set_string(L, "active_state", e.active_state);
		return 4;
	}
	lua_pushliteral(L, "done");
	return 1;
}

/*
 * host.unit_reset_failed(name [, timeout]) -> true | nil, msg, code
 *   name: unit name; timeout: seconds (default 10; an extension of docs/policy-api.md), bounded
 *   by the budget.  Clears the "failed" state and the start rate-limit counter
 *   (Manager.ResetFailedUnit, org.freedesktop.systemd1(5)).  Errors: "timeout", "deadline",
 *   "bus" (e.g. org.freedesktop.systemd1.NoSuchUnit for a unit that is not loaded).
 */
int ig_host_unit_reset_failed(lua_State *L)
{
	const char *name = check_unit_name(L, 1);
	double timeout = check_timeout(L, 2, 1);
	struct unit_err e;
	char what[320];

	snprintf(what, sizeof what, "reset-failed %s", name);
	if (unit_simple(what, "ResetFailedUnit", timeout, &e, "s", name, NULL, 0) < 0)
		return ig_push_error(L, e.code, "%s", e.msg);
	lua_pushboolean(L, 1);
	return 1;
}

/*
 * host.unit_kill(name, signal [, timeout]) -> true | nil, msg, code
 *   name: unit name; signal: signal number (integer 1..SIGRTMAX, e.g. 10 for SIGUSR1 on x86 and
 *   arm64); timeout: seconds (default 10; an extension of docs/policy-api.md), bounded by the
 *   budget.  Sends the signal to the unit's main process only (Manager.KillUnit(name, "main",
 *   signal), org.freedesktop.systemd1(5)).  Errors: "timeout", "deadline", "bus" (e.g.
 *   org.freedesktop.systemd1.NoSuchProcess when the unit has no main process).
 */
int ig_host_unit_kill(lua_State *L)
{
	const char *name = check_unit_name(L, 1);
	lua_Integer signo = luaL_checkinteger(L, 2);
	double timeout;
	struct unit_err e;
	char what[320];

	luaL_argcheck(L, signo >= 1 && signo <= SIGRTMAX, 2, "signal must be a signal number");
	timeout = check_timeout(L, 3, 1);
	snprintf(what, sizeof what, "kill %s", name);
	if (unit_simple(what, "KillUnit", timeout, &e, "ssi", name, "main", (int)signo) < 0)
		return ig_push_error(L, e.code, "%s", e.msg);
	lua_pushboolean(L, 1);
	return 1;
}

/*
 * host.unit_set_bus(address) -> true | nil, msg, "EINVAL"
 *   address: "system" (default: /run/systemd/private when root, else the system bus), "user"
 *   (the user bus), or a D-Bus address such as "unix:path=/run/user/0/systemd/private" used
 *   peer-to-peer.  Not in docs/policy-api.md: the busted module needs it to reach a test
 *   manager; the binary sets the bus from its settings with ig_bus_set_address and may remove it
 *   from the sandbox like set_deadline.
 */
int ig_host_unit_set_bus(lua_State *L)
{
	const char *address = luaL_checkstring(L, 1);
	int r = ig_bus_set_address(address);

	if (r < 0)
		return ig_push_error(L, ig_code(r),
				     "bus address '%s': not \"system\", \"user\" or a D-Bus "
				     "address (transport:key=value)",
				     address);
	lua_pushboolean(L, 1);
	return 1;
}
