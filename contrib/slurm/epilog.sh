#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Slurm Epilog= wrapper: imexguard unregisters the job; IMEX stays running (a policy may stop it).
exec "${IMEXGUARD:-/usr/local/sbin/imexguard}" epilog
