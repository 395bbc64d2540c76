/*
 * cli.h: the command line of the imexguard binary (cli.c): options and the command.
 */
#ifndef IMEXGUARD_CLI_H
#define IMEXGUARD_CLI_H

/* Exit code of a command line that cannot run (and of an internal error): not an outcome, and
 * never 0, since Slurm must not take a prolog that did not run for one that passed. */
#define IG_EXIT_USAGE 1

struct ig_opts {
	const char *command;	  /* prolog, epilog, status, plan, check */
	const char *check_path;	  /* check POLICY */
	const char *config;	  /* --config, or the default path */
	int config_explicit;	  /* --config given: a missing file is an error */
	const char *policy;	  /* --policy, or NULL */
	const char *deadline_arg; /* --deadline as given, or NULL */
	double deadline;	  /* --deadline in seconds */
	const char **sets;	  /* --set KEY=VALUE, nsets of them (malloc'd) */
	int nsets;
	const char *lua_dir; /* --lua-dir or IMEXGUARD_LUA_DIR, or NULL */
	int json;	     /* --json */
	int timing;	     /* --timing */
};

/* Parse the arguments into o (GNU getopt_long permutes, so options may follow the command:
 * `imexguard status --json`).  Returns -1 to run, or the exit code: 0 after --help, --version or
 * `version` (printed on stdout), IG_EXIT_USAGE after a usage error (one line on stderr naming
 * the argument).  Call ig_opts_free(o) afterwards in every case. */
int ig_parse_args(int argc, char **argv, struct ig_opts *o);

/* Free what ig_parse_args allocated in o. */
void ig_opts_free(struct ig_opts *o);

#endif
