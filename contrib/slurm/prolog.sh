#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Slurm Prolog= wrapper (slurm.conf: Prolog=/usr/local/libexec/imexguard/prolog.sh, PrologFlags=Alloc).
# slurmd runs it as root on every allocated node with the job's environment (SLURM_JOB_ID,
# SLURM_NODELIST / SLURM_JOB_NODELIST, SLURMD_NODENAME). A non-zero exit drains the node and requeues
# the job, so imexguard exits non-zero only when this node is at fault. Its one-line outcome goes to
# stderr (kept in slurmd's log) and to the journal.
exec "${IMEXGUARD:-/usr/local/sbin/imexguard}" prolog
