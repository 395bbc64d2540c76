/*
 * cli.c: the command line of imexguard: the usage text and the arguments (getopt_long).
 */
#include "cli.h"

#include "imexguard.h"
#include "sandbox.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CONFIG "/etc/imexguard/imexguard.conf"
#define COMMANDS       "prolog, epilog, status, plan, health, check, version"

/* The --help text; the outcomes come from outcomes.lua (generated). */
static void usage(FILE *f)
{
	fputs(
	    "Usage: imexguard [OPTIONS] COMMAND\n"
	    "Keeps the NVIDIA IMEX node list of a Slurm job's nodes consistent (run as the Slurm\n"
	    "prolog and epilog), restarting nvidia-imex only when the running daemon is stale.\n"
	    "\n"
	    "Commands:\n"
	    "  prolog          make this node's IMEX domain match the job (Slurm Prolog)\n"
	    "  epilog          the job ended (Slurm Epilog)\n"
	    "  status [--json] show the domain, with a diagnosis per unhealthy node\n"
	    "  plan [--json]   what prolog would do, without doing it\n"
	    "  health          check this node's IMEX, changing nothing (Slurm\n"
	    "                  HealthCheckProgram, LBNL NHC): exit 0 healthy or not\n"
	    "                  applicable, else one line 'imexguard: OUTCOME: cause' on\n"
	    "                  stdout; budget 10 s unless --deadline\n"
	    "  check POLICY    compile a policy in the sandbox, run standard scenarios\n"
	    "  version         print the version\n"
	    "\n"
	    "Options:\n"
	    "  --config FILE       settings file (default " DEFAULT_CONFIG "; a missing\n"
	    "                      default file means all defaults)\n"
	    "  --policy FILE       policy file (default: the built-in policy)\n"
	    "  --deadline SECONDS  the whole run's budget (default: setting deadline, 90)\n"
	    "  --set KEY=VALUE     override a setting (repeatable)\n"
	    "  --lua-dir DIR       load the Lua library from DIR/imexguard/*.lua (absolute;\n"
	    "                      development; also IMEXGUARD_LUA_DIR)\n"
	    "  --json              machine-readable output (status, plan, check)\n"
	    "  --timing            at the end, where the run's time went on stderr\n"
	    "                      (phases, primitive calls; milliseconds)\n"
	    "  -h, --help          this help\n"
	    "  -V, --version       print the version\n"
	    "\n"
	    "Outcomes and exit codes (Slurm drains the node on a non-zero prolog exit):\n",
	    f);
	fputs(ig_outcomes_usage, f);
	fputs("\n"
	      "Every run ends with one line on stderr (and in the journal):\n"
	      "  imexguard: <notice|err>: COMMAND job=ID outcome=NAME: MESSAGE\n",
	      f);
}

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "imexguard: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'imexguard --help'.\n");
	return IG_EXIT_USAGE;
}

/* ---- arguments ------------------------------------------------------------------------------ */

enum { OPT_CONFIG = 256, OPT_POLICY, OPT_DEADLINE, OPT_SET, OPT_LUA_DIR, OPT_JSON, OPT_TIMING };

/* Take one option c (getopt_long's value) with its argument optarg.  Returns -1 to go on, or the
 * exit code (0 after --help/--version, IG_EXIT_USAGE after a usage error on stderr). */
static int take_option(int c, char **argv, struct ig_opts *o)
{
	char *end;
	switch (c) {
	case OPT_CONFIG:
		o->config = optarg;
		o->config_explicit = 1;
		return -1;
	case OPT_POLICY:
		o->policy = optarg;
		return -1;
	case OPT_DEADLINE:
		errno = 0;
		o->deadline = strtod(optarg, &end);
		if (errno || end == optarg || *end || !(o->deadline > 0) || isinf(o->deadline))
			return usage_error("--deadline: '%s' is not a number of seconds > 0",
					   optarg);
		o->deadline_arg = optarg;
		return -1;
	case OPT_SET:
		if (strchr(optarg, '=') == NULL)
			return usage_error("--set: expected KEY=VALUE, got '%s'", optarg);
		o->sets[o->nsets++] = optarg;
		return -1;
	case OPT_LUA_DIR:
		o->lua_dir = optarg;
		return -1;
	case OPT_JSON:
		o->json = 1;
		return -1;
	case OPT_TIMING:
		o->timing = 1;
		return -1;
	case 'h':
		usage(stdout);
		return 0;
	case 'V':
		printf("imexguard " IG_VERSION " (" LUA_RELEASE ")\n");
		return 0;
	case ':':
		return usage_error("option '%s' needs an argument", argv[optind - 1]);
	default:
		return usage_error("unknown option '%s'", argv[optind - 1]);
	}
}

/* Take the COMMAND (and check's POLICY) at argv[optind].  Returns -1 or the exit code. */
static int take_command(int argc, char **argv, struct ig_opts *o)
{
	if (optind >= argc)
		return usage_error("%s", "missing COMMAND (" COMMANDS ")");
	o->command = argv[optind++];
	if (strcmp(o->command, "check") == 0) {
		if (optind >= argc)
			return usage_error("%s", "check: missing POLICY (a policy file)");
		o->check_path = argv[optind++];
	} else if (strcmp(o->command, "version") == 0) {
		printf("imexguard " IG_VERSION " (" LUA_RELEASE ")\n");
		return 0;
	} else if (strcmp(o->command, "prolog") != 0 && strcmp(o->command, "epilog") != 0 &&
		   strcmp(o->command, "status") != 0 && strcmp(o->command, "plan") != 0 &&
		   strcmp(o->command, "health") != 0) {
		return usage_error("unknown command '%s' (" COMMANDS ")", o->command);
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (o->lua_dir && o->lua_dir[0] != '/')
		return usage_error("--lua-dir %s: must be an absolute directory", o->lua_dir);
	return -1;
}

int ig_parse_args(int argc, char **argv, struct ig_opts *o)
{
	static const struct option longopts[] = {
	    {"config", required_argument, NULL, OPT_CONFIG},
	    {"policy", required_argument, NULL, OPT_POLICY},
	    {"deadline", required_argument, NULL, OPT_DEADLINE},
	    {"set", required_argument, NULL, OPT_SET},
	    {"lua-dir", required_argument, NULL, OPT_LUA_DIR},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"timing", no_argument, NULL, OPT_TIMING},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof *o);
	o->config = DEFAULT_CONFIG;
	o->lua_dir = getenv("IMEXGUARD_LUA_DIR");
	if (o->lua_dir && !*o->lua_dir)
		o->lua_dir = NULL;
	o->sets = calloc((size_t)argc + 1, sizeof *o->sets);
	if (o->sets == NULL) {
		fprintf(stderr, "imexguard: out of memory\n");
		return IG_EXIT_USAGE;
	}
	int c, rc;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hV", longopts, NULL)) != -1)
		if ((rc = take_option(c, argv, o)) >= 0)
			return rc;
	return take_command(argc, argv, o);
}

void ig_opts_free(struct ig_opts *o)
{
	free(o->sets);
	o->sets = NULL;
}
