/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imexsim: one binary for the simulated nvidia-imex daemon and nvidia-imex-ctl.  It dispatches on
 * basename(argv[0]): "nvidia-imex-ctl" runs the ctl, any other name the daemon; `imexsim daemon
 * ARGS` and `imexsim ctl ARGS` select explicitly (`imexsim -c CONFIG` is the daemon).  Test and
 * demo infrastructure only.
 */
#include "imexsim.h"

#include <string.h>

int main(int argc, char **argv)
{
	const char *name = argc > 0 ? argv[0] : "imexsim";
	const char *slash = strrchr(name, '/');
	if (slash)
		name = slash + 1;
	if (!strcmp(name, "nvidia-imex-ctl"))
		return sim_ctl_main(argc, argv);
	if (!strcmp(name, "imexsim")) {
		if (argc >= 2 && !strcmp(argv[1], "ctl"))
			return sim_ctl_main(argc - 1, argv + 1);
		if (argc >= 2 && !strcmp(argv[1], "daemon"))
			return sim_daemon_main(argc - 1, argv + 1);
	}
	return sim_daemon_main(argc, argv);
}
