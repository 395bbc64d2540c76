/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.h: the command line of the imexguard binary (cli.c): options and the command.
 */
#ifndef IMEXGUARD_CLI_H
#define IMEXGUARD_CLI_H

struct ig_opts {
	const char *command;	  /* a name of ig_commands (lua/imexguard/commands.lua) */
	char short_opt;		  /* the short option that gave the command ('t'), or 0 */
	const char *arg;	  /* the command's argument (check's POLICY), or NULL */
	const char *config;	  /* --config, or the default path */
	int config_explicit;	  /* --config given: a missing file is an error */
	const char *policy;	  /* --policy, or NULL */
	const char *deadline_arg; /* --deadline as given, or NULL */
	double deadline;	  /* --deadline in seconds */
	const char **sets;	  /* --set KEY=VALUE, nsets of them (malloc'd) */
	int nsets;
	const char *lua_dir;	  /* --lua-dir or IMEXGUARD_LUA_DIR, or NULL */
	const char *lua_dir_from; /* where lua_dir came from: "--lua-dir" or "IMEXGUARD_LUA_DIR" */
	const char *job;	  /* plan, wait --job N: the job id (SLURM_JOB_ID), or NULL */
	const char *nodelist;	  /* plan --nodelist LIST: the job's hostlist, or NULL */
	const char *timeout_arg;  /* wait --timeout SECONDS as given, or NULL */
	double timeout;		  /* --timeout in seconds */
	int json;		  /* --json */
	int strict;		  /* --strict: config-test's warnings fail too */
	int timing;		  /* --timing */
	int verbosity;		  /* -q: -1, none: 0, -v: 1 (each -v one more) */
};

/* Parse the arguments into o (GNU getopt_long permutes, so options may follow the command:
 * `imexguard status --json`).  Returns -1 to run, or the exit code: 0 after --help, --version or
 * `version` (printed on stdout), ig_usage_exit (generated.h) after a usage error (one line on
 * stderr naming the argument).  Call ig_opts_free(o) afterwards in every case. */
int ig_parse_args(int argc, char **argv, struct ig_opts *o);

/* Free what ig_parse_args allocated in o. */
void ig_opts_free(struct ig_opts *o);

#endif
