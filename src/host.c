/*
 * host.c: the Lua C module `imexguard.host` (require "imexguard.host" from busted; the binary
 * calls luaopen_imexguard_host too and then removes what policies must not have, such as
 * set_deadline).  One table holding every primitive of docs/policy-api.md plus `version`.
 */
#include "imexguard.h"

/* luaopen_imexguard_host(L) -> 1: pushes the primitives table.  Fields: every primitive of the
 * clock, lock, file, run, unit, log and net files, and `version` (string, IG_VERSION). */
int luaopen_imexguard_host(lua_State *L)
{
	lua_newtable(L);
	ig_register_clock(L);
	ig_register_lock(L);
	ig_register_file(L);
	ig_register_run(L);
	ig_register_unit(L);
	ig_register_log(L);
	ig_register_net(L);
	ig_register_proc(L);
	lua_pushliteral(L, IG_VERSION);
	lua_setfield(L, -2, "version");
	return 1;
}
