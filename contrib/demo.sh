#!/bin/sh
# `make demo`: the prolog on a simulated IMEX domain under a private systemd user manager.
# Arguments go to contrib/demo.lua (--nodes=18 simulates one NVL72 rack).
set -eu
cd "$(dirname "$0")/.."
export IMEXGUARD_NO_JOURNAL=1
exec tests/with-systemd lua5.4 contrib/demo.lua "$@"
