/* SPDX-License-Identifier: Apache-2.0 */
/*
 * generated.h: the facts the C host takes from the Lua library, declared here and defined in
 * build/generated.c, which src/embed.lua writes at build time from lua/imexguard/commands.lua
 * (the commands), lua/imexguard/outcomes.lua (the outcomes, their exit codes and the usage exit
 * code), lua/imexguard/settings.lua (the default deadline, the names of the log levels) and
 * lua/imexguard/progress.lua (the seconds between two progress lines of a wait).  Those files
 * are the one source of these facts; C keeps no copy.  Linked into the binary and
 * the Lua C module (host.so).
 */
#ifndef IMEXGUARD_GENERATED_H
#define IMEXGUARD_GENERATED_H

/* ---- commands.lua ---------------------------------------------------------------------------- */

/* A command the command line accepts: its name, the name of its one argument as the usage text
 * shows it ("POLICY") or NULL when it takes none, the short option that runs it ('t' for
 * `imexguard -t`) or 0, reason_line: 1 when a non-zero exit always prints one line
 * "imexguard: OUTCOME: cause" on stdout (main.c prints it when the run printed nothing), and
 * interactive: 1 when a person runs it and reads its result on stdout, so its final line goes to
 * the journal only (on stderr when the journal does not take it: main.c, ig_log_journal_first).
 * options: the long options only it takes among those some commands take (commands.lua's
 * OPTIONS), each with a blank before and after it (" job timeout "; " " for none). */
struct ig_command {
	const char *name;
	const char *arg;
	char short_opt;
	int reason_line;
	int interactive;
	const char *options;
};
/* The commands, in the order --help lists them; the table ends with a NULL name. */
extern const struct ig_command ig_commands[];
/* The names of the commands, ", " between them: what a usage error lists. */
extern const char ig_command_names[];
/* The names of the commands whose output --json changes, ", " between them. */
extern const char ig_json_commands[];
/* The names of the commands that take -q and -v, ", " between them. */
extern const char ig_verbosity_commands[];
/* The usage text's list of commands: one entry per command ("  NAME [ARG] [--json]", its help
 * from column 18, wrapped at 80 characters), each line ending in a newline. */
extern const char ig_commands_usage[];
/* The usage text's lines of the options only some commands take (commands.lua's OPTIONS: "  --job
 * ID", then the commands that take it and what it gives), each line ending in a newline. */
extern const char ig_options_usage[];

/* ---- outcomes.lua ---------------------------------------------------------------------------- */

/* The exit code of an outcome name (on_peer_fault's variant of peers-unhealthy is the driver's to
 * apply); -1 for a name that is not an outcome. */
int ig_outcome_code(const char *name);
/* The usage text's list of outcomes and exit codes (lines indented by two spaces, each ending
 * in a newline), written by outcomes.lua's usage(). */
extern const char ig_outcomes_usage[];
/* The exit code of a command line that cannot run and of an internal error (USAGE_EXIT): not an
 * outcome, and never 0, since Slurm must not take a prolog that did not run for one that passed. */
extern const int ig_usage_exit;

/* ---- settings.lua ---------------------------------------------------------------------------- */

/* Seconds: the run's budget when neither --deadline nor the settings give one (the default of the
 * setting `deadline`). */
extern const double ig_default_deadline;
/* The names of the log levels (LEVELS: the values of the setting log_level), from the most
 * verbose; the list ends with NULL.  Their syslog priorities are enum ig_level (imexguard.h). */
extern const char *const ig_log_levels[];

/* ---- progress.lua ---------------------------------------------------------------------------- */

/* Seconds between two progress lines of a long wait at level info (EVERY): unit.c's wait for a
 * systemd job tells its progress as the Lua waits do. */
extern const double ig_progress_every;

#endif
