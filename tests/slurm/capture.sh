#!/usr/bin/env bash
# tests/slurm/capture.sh [DIR] - capture real outputs of the up.sh cluster after jobs.sh (and rollup.sh)
# into DIR (default $GL_SLURM_DIR/out/capture): each FILE with a FILE.cmd beside it (command as run, exit
# status, time). Times are printed in UTC (TZ=UTC is part of each command) except in *-berlin files.
# tests/fixtures/slurm_real/README.md describes every file.
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
load_ports || die "no cluster state in $S: run up.sh first"
OUT=${1:-$S/out/capture}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# Open XDMoD's field list: the order `gpuledger ingest sacct` assumes for headerless input and --live uses
XDMOD=jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,jobname
STEPS=JobID,JobIDRaw,JobName,User,Account,Partition,QOS,State,ExitCode,DerivedExitCode,Submit,Eligible,Start,End,ElapsedRaw,Timelimit,NNodes,NCPUS,ReqTRES,AllocTRES,NodeList,TotalCPU,MaxRSS,TRESUsageInTot
W=(--starttime 2020-01-01T00:00:00 --endtime now)
# sreport's window: whole hours, from the first submission to the end of the hour rollup.sh rolled
first=$(TZ=UTC sacct -a -X -n -P "${W[@]}" --format=Submit | sort | head -1)
RS=$(date -u -d "${first/T/ }" +%FT%H:00:00)
RE=$(date -u -d '+1 hour' +%FT%H:00:00)

c() { capture "$OUT" "$@"; }
c sacct-allocations.psv env TZ=UTC sacct --allusers --duplicates --allocations --parsable2 --format "$XDMOD" "${W[@]}"
c sacct-allocations-xdmod-noheader.psv env TZ=UTC sacct --allusers --duplicates --allocations --parsable2 --noheader --format "$XDMOD" "${W[@]}"
c sacct-allocations-berlin.psv env TZ=Europe/Berlin sacct --allusers --duplicates --allocations --parsable2 --format "$XDMOD" "${W[@]}"
c sacct-steps.psv env TZ=UTC sacct --allusers --duplicates --parsable2 --format "$STEPS" "${W[@]}"
c sacct-all-fields.psv env TZ=UTC sacct --allusers --duplicates --parsable --format ALL "${W[@]}"
c scontrol-show-node.txt env TZ=UTC scontrol show node
c scontrol-show-node-o.txt env TZ=UTC scontrol show node -o
c sinfo-gres.psv env TZ=UTC sinfo -N -O "$SINFO_GRES_FORMAT"
c sinfo.txt env TZ=UTC sinfo
c scontrol-show-partition.txt env TZ=UTC scontrol show partition
c sacctmgr-event.psv env TZ=UTC sacctmgr -P show event All_Time
c sacctmgr-event-format.psv env TZ=UTC sacctmgr -P show event All_Time \
  format=Cluster,ClusterNodes,NodeName,Event,Start,End,State,StateRaw,Reason,User,Duration,TRES
c sacctmgr-assoc.psv env TZ=UTC sacctmgr -P show assoc format=Cluster,Account,ParentName,User,Share,GrpTRES,QOS,DefaultQOS
c sacctmgr-tres.psv env TZ=UTC sacctmgr -P show tres
c sshare-l.psv env TZ=UTC sshare -a -l -P
c sreport-gpu-utilization-minutes.txt env TZ=UTC sreport -T gres/gpu cluster utilization start="$RS" end="$RE" -t minutes
c sreport-gpu-utilization-seconds.psv env TZ=UTC sreport -P -T gres/gpu cluster utilization start="$RS" end="$RE" -t seconds
c sreport-gpu-account-user-seconds.psv env TZ=UTC sreport -P -T gres/gpu cluster AccountUtilizationByUser start="$RS" end="$RE" -t seconds
[[ -d $S/out/midrun ]] && cp "$S"/out/midrun/* "$OUT/"
log "captured $(ls "$OUT"/*.cmd | wc -l) outputs in $OUT"
