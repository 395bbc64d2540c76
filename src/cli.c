/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.c: the command line of imexguard: the usage text and the arguments (getopt_long).  The
 * commands, their list in the usage text, the default deadline and the outcomes come from the Lua
 * library (generated.h).
 */
#include "cli.h"

#include "generated.h"
#include "imexguard.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_CONFIG "/etc/imexguard/imexguard.conf"

/* The --help text; the commands and the outcomes come from commands.lua and outcomes.lua. */
static void usage(FILE *f)
{
	fputs(
	    "Usage: imexguard [OPTIONS] COMMAND\n"
	    "Keeps the NVIDIA IMEX node list of a Slurm job's nodes consistent (run as the Slurm\n"
	    "prolog and epilog), restarting nvidia-imex only when the running daemon is stale.\n"
	    "\n"
	    "Commands:\n",
	    f);
	fputs(ig_commands_usage, f);
	fprintf(f,
		"\n"
		"Options:\n"
		"  --config FILE       settings file (default " DEFAULT_CONFIG "; a missing\n"
		"                      default file means all defaults)\n"
		"  --policy FILE       policy file (default: the built-in policy)\n"
		"  --deadline SECONDS  the whole run's budget (default: setting deadline, %g)\n"
		"  --set KEY=VALUE     override a setting (repeatable, the last wins); VALUE is\n"
		"                      plain text, not Lua: a number, true/false (also yes/no,\n"
		"                      on/off, 1/0), a string without quotes, for ctl and\n"
		"                      scontrol words separated by spaces; KEY= unsets an\n"
		"                      optional setting (--set ctl='/usr/bin/env X=1 imex-ctl')\n",
		ig_default_deadline);
	fputs(ig_options_usage, f);
	fprintf(f,
		"  --lua-dir DIR       load the Lua library from DIR/imexguard/*.lua (absolute;\n"
		"                      development; also IMEXGUARD_LUA_DIR)\n"
		"  --strict            config-test: a warning fails too (exit non-zero)\n"
		"  --json              machine-readable output (%s)\n"
		"  -q, --quiet         one line (status: the same on every healthy node, for\n"
		"                      pdsh ... | dshbak -c)\n"
		"  -v, --verbose       more detail (status: every peer's address and state)\n"
		"  --timing            at the end, where the run's time went on stderr\n"
		"                      (phases, primitive calls; milliseconds)\n"
		"  -t                  the command config-test (as sshd -t, nginx -t)\n"
		"  -T                  the command show-config (as sshd -T, nginx -T)\n"
		"  -h, --help          this help\n"
		"  -V, --version       print the version\n"
		"\n"
		"Outcomes and exit codes (Slurm drains the node on a non-zero prolog exit):\n",
		ig_json_commands);
	fputs(ig_outcomes_usage, f);
	fputs("\n"
	      "Every run ends with one line on stderr (and in the journal):\n"
	      "  imexguard: <notice|err>: COMMAND job=ID outcome=NAME: MESSAGE\n",
	      f);
}

/* Print the version line on stdout. */
static void print_version(void)
{
	printf("imexguard " IG_VERSION " (" LUA_RELEASE ")\n");
}

/* Whether the command line names a command with a reason line (commands.lua's reason_line: health,
 * config-test, also as its short option): its usage errors print that line on stdout too. */
static int reason_line_wanted;

/* A usage error: "imexguard: " and the message (printf format) on stderr, then where to find
 * help, and with reason_line_wanted the reason line on stdout.  Returns the exit code
 * ig_usage_exit. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "imexguard: %s\nTry 'imexguard --help'.\n", msg);
	if (reason_line_wanted) { /* what health.sh and NHC take as the reason */
		/* the grammar of lua/imexguard/drain.lua (REGEX): outcome "error", a cause of at
		 * most 200 bytes ending in "..." when cut, never inside a UTF-8 sequence */
		size_t n = strlen(msg);
		int cut = n > 200;
		if (cut)
			for (n = 200; n > 0 && ((unsigned char)msg[n] & 0xC0) == 0x80; n--)
				;
		printf("imexguard: error: %.*s%s\n", (int)n, msg, cut ? "..." : "");
	}
	return ig_usage_exit;
}

/* Set reason_line_wanted from the arguments (before they are parsed: an error may come first). */
static void scan_reason_line(int argc, char **argv)
{
	reason_line_wanted = 0;
	for (int i = 1; i < argc; i++)
		for (const struct ig_command *k = ig_commands; k->name; k++)
			if (k->reason_line && (strcmp(argv[i], k->name) == 0 ||
					       (k->short_opt && argv[i][0] == '-' &&
						argv[i][1] == k->short_opt && argv[i][2] == '\0')))
				reason_line_wanted = 1;
}

/* ---- arguments ------------------------------------------------------------------------------ */

enum {
	OPT_CONFIG = 256,
	OPT_POLICY,
	OPT_DEADLINE,
	OPT_SET,
	OPT_LUA_DIR,
	OPT_JOB,
	OPT_NODELIST,
	OPT_TIMEOUT
};

/* The command whose short option is c (`-t`: config-test), or NULL. */
static const char *short_command(int c)
{
	for (const struct ig_command *k = ig_commands; k->name; k++)
		if (k->short_opt && k->short_opt == c)
			return k->name;
	return NULL;
}

/* Is name one of list, a ", "-separated list of names (generated.h)? */
static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
			return 1;
	return 0;
}

/* Take optarg, the argument of `option` (its name as the user writes it, "--deadline"), as a
 * number of seconds > 0 and finite (strtod(3): decimal, hexadecimal or with an exponent) into
 * *seconds, and optarg itself into *given.  Returns -1 to go on, or ig_usage_exit after a usage
 * error naming the option and its argument. */
static int take_seconds(const char *option, double *seconds, const char **given)
{
	char *end;

	errno = 0;
	*seconds = strtod(optarg, &end);
	if (errno || end == optarg || *end || !(*seconds > 0) || isinf(*seconds))
		return usage_error("%s: '%s' is not a number of seconds > 0", option, optarg);
	*given = optarg;
	return -1;
}

/* Take one option c (getopt_long's value) with its argument optarg.  Returns -1 to go on, or the
 * exit code (0 after --help/--version, ig_usage_exit after a usage error on stderr). */
static int take_option(int c, char **argv, struct ig_opts *o)
{
	switch (c) {
	case 0: /* a flag (--json, --strict, --timing), set by getopt_long */
		return -1;
	case OPT_CONFIG:
		o->config = optarg;
		o->config_explicit = 1;
		return -1;
	case OPT_LUA_DIR:
		o->lua_dir = optarg;
		o->lua_dir_from = "--lua-dir";
		return -1;
	case OPT_SET:
		if (strchr(optarg, '=') == NULL)
			return usage_error("--set: expected KEY=VALUE, got '%s'", optarg);
		o->sets[o->nsets++] = optarg;
		return -1;
	case OPT_POLICY:
		o->policy = optarg;
		return -1;
	case OPT_JOB:
		o->job = optarg;
		return -1;
	case OPT_NODELIST:
		o->nodelist = optarg;
		return -1;
	case OPT_DEADLINE:
		return take_seconds("--deadline", &o->deadline, &o->deadline_arg);
	case OPT_TIMEOUT:
		return take_seconds("--timeout", &o->timeout, &o->timeout_arg);
	case 'q':
		o->verbosity = -1;
		return -1;
	case 'v':
		o->verbosity = o->verbosity < 0 ? 1 : o->verbosity + 1;
		return -1;
	case 'h':
		usage(stdout);
		return 0;
	case 'V':
		print_version();
		return 0;
	case ':':
		return usage_error("option '%s' needs an argument", argv[optind - 1]);
	default:
		if (c > 0 && c < 256 && short_command(c)) {
			if (o->command && strcmp(o->command, short_command(c)) != 0)
				return usage_error("-%c and -%c: give one command", c,
						   o->short_opt);
			o->command = short_command(c);
			o->short_opt = (char)c;
			return -1;
		}
		return usage_error("unknown option '%s'", argv[optind - 1]);
	}
}

/* Take the COMMAND (one of ig_commands) and its argument at argv[optind].  Returns -1 or the
 * exit code. */
static int take_command(int argc, char **argv, struct ig_opts *o)
{
	const struct ig_command *c;
	if (o->short_opt) { /* -t, -T: the command is given */
		if (optind < argc)
			return usage_error("unexpected argument '%s' (-%c is the command %s)",
					   argv[optind], o->short_opt, o->command);
	} else if (optind >= argc) {
		return usage_error("missing COMMAND (%s)", ig_command_names);
	} else {
		o->command = argv[optind++];
	}
	for (c = ig_commands; c->name && strcmp(c->name, o->command) != 0; c++)
		;
	if (c->name == NULL)
		return usage_error("unknown command '%s' (%s)", o->command, ig_command_names);
	if (c->arg && !o->short_opt) {
		if (optind >= argc)
			return usage_error("%s: missing %s", c->name, c->arg);
		o->arg = argv[optind++];
	}
	/* every command either supports --json or refuses it (docs/json.md); -q/-v likewise */
	if (o->json && !in_list(ig_json_commands, c->name))
		return usage_error("--json: %s has no JSON output (only %s)", c->name,
				   ig_json_commands);
	if (o->verbosity && !in_list(ig_verbosity_commands, c->name))
		return usage_error("%s: %s has no quiet or verbose form (only %s)",
				   o->verbosity < 0 ? "-q" : "-v", c->name, ig_verbosity_commands);
	if (strcmp(o->command, "version") == 0) {
		print_version();
		return 0;
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (o->strict && strcmp(o->command, "config-test") != 0)
		return usage_error("--strict is for config-test (-t) only");
	const char *given[][2] = {
	    {"job", o->job}, {"nodelist", o->nodelist}, {"timeout", o->timeout_arg}};
	for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
		char word[32];
		snprintf(word, sizeof word, " %s ", given[i][0]);
		if (given[i][1] && !strstr(c->options, word))
			return usage_error(
			    "--%s is not an option of %s (a prolog takes the job from "
			    "Slurm's environment; --help lists which command takes it)",
			    given[i][0], c->name);
	}
	if (o->job && !*o->job)
		return usage_error("--job: empty job id");
	if (o->nodelist && !*o->nodelist)
		return usage_error("--nodelist: empty hostlist");
	struct stat st;
	if (o->lua_dir && o->lua_dir[0] != '/')
		return usage_error("%s %s: must be an absolute directory", o->lua_dir_from,
				   o->lua_dir);
	if (o->lua_dir && (stat(o->lua_dir, &st) != 0 || !S_ISDIR(st.st_mode)))
		return usage_error("%s %s: not a directory", o->lua_dir_from, o->lua_dir);
	return -1;
}

int ig_parse_args(int argc, char **argv, struct ig_opts *o)
{
	/* the flags are set by getopt_long itself (a flag's pointer and value; it returns 0) */
	const struct option longopts[] = {
	    {"config", required_argument, NULL, OPT_CONFIG},
	    {"policy", required_argument, NULL, OPT_POLICY},
	    {"deadline", required_argument, NULL, OPT_DEADLINE},
	    {"set", required_argument, NULL, OPT_SET},
	    {"lua-dir", required_argument, NULL, OPT_LUA_DIR},
	    {"job", required_argument, NULL, OPT_JOB},
	    {"nodelist", required_argument, NULL, OPT_NODELIST},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"json", no_argument, &o->json, 1},
	    {"strict", no_argument, &o->strict, 1},
	    {"timing", no_argument, &o->timing, 1},
	    {"quiet", no_argument, NULL, 'q'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof *o);
	scan_reason_line(argc, argv);
	o->config = DEFAULT_CONFIG;
	o->lua_dir = getenv("IMEXGUARD_LUA_DIR");
	if (o->lua_dir && !*o->lua_dir)
		o->lua_dir = NULL;
	o->lua_dir_from = "IMEXGUARD_LUA_DIR";
	o->sets = calloc((size_t)argc + 1, sizeof *o->sets);
	if (o->sets == NULL) {
		fprintf(stderr, "imexguard: out of memory\n");
		return ig_usage_exit;
	}
	/* ":hVqv" and the commands' short options (commands.lua: -t, -T) */
	char optstring[64] = ":hVqv";
	size_t n = strlen(optstring);
	for (const struct ig_command *k = ig_commands; k->name && n + 1 < sizeof optstring; k++)
		if (k->short_opt)
			optstring[n++] = k->short_opt;
	optstring[n] = '\0';
	int c, rc;
	opterr = 0;
	while ((c = getopt_long(argc, argv, optstring, longopts, NULL)) != -1)
		if ((rc = take_option(c, argv, o)) >= 0)
			return rc;
	return take_command(argc, argv, o);
}

void ig_opts_free(struct ig_opts *o)
{
	free(o->sets);
	o->sets = NULL;
}
