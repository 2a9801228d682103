#!/usr/bin/env bash
# tests/slurm/rollup.sh - make sreport see the usage of the current hour.
# slurmdbd rolls usage up only for hours that have ended, so sreport shows nothing for jobs of the last
# <60 minutes. `sacctmgr rollup START END` (a command sacctmgr does not list in its help) asks slurmdbd to
# roll [START, END) now. The hour is rolled as a whole: the minutes after this call count as idle (or down)
# and are final, so run it only after the jobs of interest have ended. Prints the rolled window.
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
load_ports || die "no cluster state in $S: run up.sh first"
first=$(TZ=UTC sacct -a -X -n -P -S 2020-01-01T00:00:00 -E now --format=Submit | sort | head -1)
[[ -n $first ]] || first=$(date -u +%FT%T)
start=$(date -u -d "${first/T/ }" +%FT%H:00:00)
end=$(date -u -d "+1 hour" +%FT%H:00:00)
out=$(TZ=UTC sacctmgr -i rollup "$start" "$end" 2>&1) || die "sacctmgr rollup failed: $out"
echo "$start $end"
