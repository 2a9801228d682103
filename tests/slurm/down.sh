#!/usr/bin/env bash
# tests/slurm/down.sh - stop what up.sh started, each daemon by its PID file (never by name).
#   down.sh           stop the daemons, keep the state (database, Slurm state, logs) for a later up.sh
#   down.sh --reset   also delete the Slurm state, keeping MariaDB's data directory and the logs (up.sh --fresh)
#   down.sh --purge   also delete the state directory, except its logs (kept for post-mortems)
set -uo pipefail
cd "$(dirname "$0")"
source ./lib.sh
case ${1:-} in --purge) KEEP=log ;; --reset) KEEP='log|mysql' ;; '') KEEP= ;; *) die "usage: down.sh [--reset|--purge]" ;; esac
[[ -d $S ]] || exit 0

# a running job's slurmstepd lives on after its slurmd: cancel jobs while the controller still answers
if alive "$S/run/slurmctld.pid" && ids=$(squeue -h -o %i 2>/dev/null) && [[ -n $ids ]]; then
  scancel $ids 2>/dev/null
  waitfor 20 "jobs to end" bash -c '[[ -z $(squeue -h -o %i) ]]'
fi
# slurmd's together, then the controller and slurmdbd, then MariaDB and munged
stop_pidfiles "$S"/run/slurmd-*.pid
stop_pidfiles "$S/run/slurmctld.pid" "$S/run/slurmdbd.pid"
stop_pidfiles "$S/mysql/mysqld.pid" "$S/munge/munged.pid"

if [[ -n $KEEP ]]; then
  for f in "$S"/* "$S"/.[!.]*; do
    [[ -e $f ]] || continue
    [[ ${f##*/} =~ ^($KEEP)$ ]] || rm -rf "$f"
  done
  log "removed the state under $S (kept: ${KEEP//|/, })"
fi
exit 0
