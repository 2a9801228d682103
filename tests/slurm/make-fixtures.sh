#!/usr/bin/env bash
# tests/slurm/make-fixtures.sh - regenerate tests/fixtures/slurm_real from a fresh cluster:
# up.sh --fresh, jobs.sh, release the last job, rollup.sh, capture.sh, down.sh. Takes ~2 minutes, as root.
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
DEST=$(cd ../fixtures && pwd)/slurm_real
# the same lock as tests/test_slurm_integration.py: one harness per host at a time
exec 9>"$S.lock"; flock 9
trap './down.sh' EXIT
./up.sh --fresh 9>&-     # the daemons must not inherit the lock: they outlive this script if it fails
./jobs.sh
late=$(awk '$1 == "late" {print $2}' "$JOBDIR/jobids")
touch "$JOBDIR/release"
done_late() { [[ $(sacct -n -X -P -j "$late" --format=State) == COMPLETED ]]; }
waitfor 30 "late to complete" done_late
./rollup.sh >/dev/null
mkdir -p "$DEST"
find "$DEST" -maxdepth 1 -type f ! -name README.md -delete
./capture.sh "$DEST"
