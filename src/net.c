/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net.c: this machine's IPv4 addresses, IPv4 name resolution bounded by a timeout, host name.
 *
 * resolve uses glibc's asynchronous getaddrinfo_a (in libc itself since glibc 2.34, no -lanl):
 * the lookup runs on a glibc helper thread, we wait with gai_suspend for at most
 * min(timeout, the run's budget), and on expiry gai_cancel it.  A lookup already in progress
 * cannot be cancelled (EAI_NOTCANCELED): glibc's thread goes on writing into its request, so the
 * request is kept on a list of abandoned lookups and freed by a later call once gai_error says it
 * is done (a run makes a handful of lookups; what is still pending at exit is freed by the exit).
 * There is no completion notification (SIGEV_NONE): a notification function would run on glibc's
 * thread and could outlive this code when the Lua C module is unloaded by lua_close.
 */
#include "imexguard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* Push the IPv4 addresses of ai (in order, duplicates dropped) as a Lua list. */
static void push_addresses(lua_State *L, const struct addrinfo *ai)
{
	lua_newtable(L);
	int n = 0;
	struct in_addr seen[64];
	int nseen = 0;
	for (; ai; ai = ai->ai_next) {
		if (ai->ai_family != AF_INET || !ai->ai_addr)
			continue;
		struct in_addr a = ((const struct sockaddr_in *)ai->ai_addr)->sin_addr;
		int dup = 0;
		for (int i = 0; i < nseen; i++)
			dup |= seen[i].s_addr == a.s_addr;
		if (dup)
			continue;
		if (nseen < (int)(sizeof seen / sizeof seen[0]))
			seen[nseen++] = a;
		char buf[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &a, buf, sizeof buf);
		lua_pushstring(L, buf);
		lua_rawseti(L, -2, ++n);
	}
}

/* host.local_addresses() -> list of strings, or nil, msg, code.
 * The IPv4 addresses of every interface (getifaddrs(3)), in interface order, without duplicates,
 * loopback included (127.0.0.1 on lo).  code: errno name of getifaddrs. */
int ig_host_local_addresses(lua_State *L)
{
	struct ifaddrs *ifa;
	if (getifaddrs(&ifa) < 0) {
		int e = errno;
		return ig_push_error(L, ig_code(-e), "local addresses: %s", strerror(e));
	}
	lua_newtable(L);
	int n = 0;
	for (struct ifaddrs *p = ifa; p; p = p->ifa_next) {
		if (!p->ifa_addr || p->ifa_addr->sa_family != AF_INET)
			continue;
		char buf[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &((const struct sockaddr_in *)p->ifa_addr)->sin_addr, buf,
			  sizeof buf);
		int dup = 0;
		for (int i = 1; i <= n && !dup; i++) {
			lua_rawgeti(L, -1, i);
			dup = strcmp(lua_tostring(L, -1), buf) == 0;
			lua_pop(L, 1);
		}
		if (dup)
			continue;
		lua_pushstring(L, buf);
		lua_rawseti(L, -2, ++n);
	}
	freeifaddrs(ifa);
	return 1;
}

/* One asynchronous lookup. */
struct lookup {
	struct gaicb cb;
	struct addrinfo hints;
	struct lookup *next; /* on the abandoned list */
	char name[];
};

static struct lookup *abandoned; /* timed out, not cancellable: glibc still owns them */

static void lookup_free(struct lookup *lk)
{
	if (lk->cb.ar_result)
		freeaddrinfo(lk->cb.ar_result);
	free(lk);
}

/* Free the abandoned lookups that glibc has finished with. */
static void reap_abandoned(void)
{
	struct lookup **pp = &abandoned;
	while (*pp) {
		struct lookup *lk = *pp;
		if (gai_error(&lk->cb) != EAI_INPROGRESS) {
			*pp = lk->next;
			lookup_free(lk);
		} else {
			pp = &lk->next;
		}
	}
}

/* Code and message text for a getaddrinfo error. */
static const char *gai_code(int e)
{
	switch (e) {
	case EAI_NONAME:
		return "EAI_NONAME";
	case EAI_NODATA:
		return "EAI_NODATA";
	case EAI_ADDRFAMILY:
		return "EAI_NODATA"; /* the name exists but has no IPv4 address */
	case EAI_AGAIN:
		return "EAI_AGAIN";
	case EAI_FAIL:
		return "EAI_FAIL";
	case EAI_MEMORY:
		return "ENOMEM";
	default:
		return "EAI_FAIL";
	}
}

/* host.resolve(name, timeout) -> list of IPv4 address strings (resolver order: what
 * getaddrinfo(3) returns with AF_INET, i.e. NSS order from /etc/nsswitch.conf, RFC 6724 sorted,
 * duplicates dropped), or nil, msg, code.
 * name: non-empty string (host name or IPv4 literal); timeout: seconds, bounded by the budget.
 * code: "timeout" / "deadline", "EINVAL" (empty or over-long name), "EAI_NONAME" (no such host),
 * "EAI_NODATA" (no IPv4 address), "EAI_AGAIN" (temporary resolver failure), "EAI_FAIL" (any
 * other resolver failure, including EAI_SYSTEM: its errno belongs to glibc's helper thread). */
int ig_host_resolve(lua_State *L)
{
	size_t nlen;
	const char *name = luaL_checklstring(L, 1, &nlen);
	double timeout = luaL_checknumber(L, 2);
	luaL_argcheck(L, timeout == timeout, 2, "timeout is NaN");
	if (nlen == 0 || nlen > 253 || strlen(name) != nlen)
		return ig_push_error(L, "EINVAL", "resolve \"%s\": not a host name", name);

	int by_deadline = 0;
	double start = ig_now();
	double end = start + ig_bound(timeout, &by_deadline);

	reap_abandoned();
	struct lookup *lk = calloc(1, sizeof *lk + nlen + 1);
	if (!lk)
		return ig_push_error(L, "ENOMEM", "resolve %s: out of memory", name);
	memcpy(lk->name, name, nlen + 1);
	lk->hints.ai_family = AF_INET;
	lk->hints.ai_socktype = SOCK_STREAM;
	lk->hints.ai_flags = 0; /* no AI_ADDRCONFIG: names of loopback-only hosts resolve too */
	lk->cb.ar_name = lk->name;
	lk->cb.ar_request = &lk->hints;
	struct gaicb *list[1] = {&lk->cb};
	int rc = getaddrinfo_a(GAI_NOWAIT, list, 1, NULL); /* NULL: SIGEV_NONE */
	if (rc != 0) {
		free(lk);
		return ig_push_error(L, gai_code(rc), "resolve %s: %s", name, gai_strerror(rc));
	}
	for (;;) {
		rc = gai_error(&lk->cb);
		if (rc != EAI_INPROGRESS)
			break;
		double left = end - ig_now();
		if (left <= 0)
			break;
		struct timespec ts;
		if (isinf(left)) {
			ts.tv_sec = 3600;
			ts.tv_nsec = 0;
		} else {
			ts.tv_sec = (time_t)left;
			ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
		}
		gai_suspend((const struct gaicb *const *)list, 1, &ts);
		/* EAI_AGAIN (time out), EAI_INTR, EAI_ALLDONE: the loop re-checks gai_error */
	}
	if (rc == EAI_INPROGRESS) {
		double waited = ig_now() - start;
		int c = gai_cancel(&lk->cb);
		if (c == EAI_CANCELED || c == EAI_ALLDONE) {
			lookup_free(lk);
		} else { /* still running on glibc's thread: freed by a later call */
			lk->next = abandoned;
			abandoned = lk;
		}
		if (by_deadline)
			return ig_push_error(L, "deadline",
					     "resolve %s: the run's deadline passed after %.1f s",
					     name, waited);
		return ig_push_error(L, "timeout", "resolve %s: no answer within %.1f s", name,
				     waited);
	}
	int ret;
	if (rc == 0) {
		push_addresses(L, lk->cb.ar_result);
		ret = 1;
		if (lua_rawlen(L, -1) == 0) {
			lua_pop(L, 1);
			ret = ig_push_error(L, "EAI_NODATA", "resolve %s: no IPv4 address", name);
		}
	} else {
		ret = ig_push_error(L, gai_code(rc), "resolve %s: %s", name, gai_strerror(rc));
	}
	lookup_free(lk);
	return ret;
}

/* host.hostname() -> string: the kernel's node name (uname(2) nodename, what `hostname` prints;
 * Slurm's SLURMD_NODENAME can differ), or nil, msg, code (uname(2)'s errno name) on failure. */
int ig_host_hostname(lua_State *L)
{
	struct utsname u;
	if (uname(&u) < 0) {
		int e = errno;
		return ig_push_error(L, ig_code(-e), "hostname: %s", strerror(e));
	}
	lua_pushstring(L, u.nodename);
	return 1;
}

/* host.euid() -> integer: this process's effective user id (geteuid(2), never fails).  A
 * permission error of a non-root run says "run as root" (the prolog runs as root under slurmd). */
int ig_host_euid(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)geteuid());
	return 1;
}
