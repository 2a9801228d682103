#!/usr/bin/env bash
# tests/slurm/waiting.sh - after jobs.sh (cluster idle): preemption, a reservation and pending reasons, ~45 s.
#
#   name       user/account  where                          ends as
#   victim     alice/ml      gpu01 4 GPUs, QOS scavenger    PREEMPTED by `preemptor`, requeued, then COMPLETED
#   preemptor  bob/vision    gpu01 4 GPUs, QOS high         COMPLETED (QOS high preempts scavenger: up.sh)
#   inresv     carol/vision  reservation gl-resv, 1 h100    COMPLETED inside the reservation
#   outlast    carol/vision  reservation gl-resv, 1 h100,   TIMEOUT when gl-resv ends (ResvOverRun 0): it starts
#                            --time=5 (outlasts it)         inside whatever its limit, and is killed at the end
#   big        alice/ml      gpu02 4 GPUs, 12 s             COMPLETED
#   waitres    bob/vision    gpu02 2 GPUs                   PENDING (Resources) while `big` runs, then COMPLETED
#   dep        alice/ml      a100 1 GPU, afterok:big        PENDING (Dependency) while `big` runs, then COMPLETED
# Reservation gl-resv: gpu03 (4 x h100), users carol, accounts vision, 30 s from its creation, a 5-s job and one
# killed at its end inside: ~90 GPU-seconds of it stay idle.
# While the mix runs, squeue is captured every 2 s into $S/out/waiting/squeue-NN.psv (each with a .cmd file
# giving the time) and the reservation while it is active; jobids go to $JOBDIR/waiting-jobids.
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
load_ports || die "no cluster state in $S: run up.sh first"
W=$S/out/waiting; rm -rf "$W"; mkdir -p "$W"
SQUEUE_FORMAT='JobArrayID:|,Cluster:|,State:|,Reason:|,tres-per-job:|,tres-per-node:|,tres-alloc:|,NumNodes:|,Partition:|,Account:|,UserName:|,QOS:|,SubmitTime:|,Reservation:|,Name:|'

sb() { local u=$1; shift; as_user "$u" sbatch --parsable -o /dev/null -e /dev/null "$@"; }
state() { squeue -h -j "$1" -o %T 2>/dev/null | sort -u | paste -sd, || true; }
is_state() { [[ $(state "$1") == "$2" ]]; }
gone() { [[ -z $(squeue -h -j "$1" -o %i 2>/dev/null) ]]; }
declare -A ID

# squeue every 2 s until the mix is over (stopped below)
( i=0; while [[ ! -e $W/stop ]]; do
    capture "$W" "$(printf 'squeue-%02d.psv' $i)" env TZ=UTC squeue --all --array --Format "$SQUEUE_FORMAT"
    i=$((i + 1)); sleep 2; done ) &
SNAPPER=$!
trap 'touch "$W/stop"; wait $SNAPPER 2>/dev/null || true' EXIT

scontrol create reservation ReservationName=gl-resv StartTime=now EndTime=now+30seconds Nodes=gpu03 \
  Users=carol Accounts=vision >/dev/null
capture "$W" scontrol-show-reservation-o.txt env TZ=UTC scontrol show reservation -o
capture "$W" scontrol-show-reservation.txt env TZ=UTC scontrol show reservation
# slurmdbd names a job's reservation only if the reservation started strictly before the job (its sacct join
# reads t3.time_start < t1.time_start, in whole seconds): a job started in the reservation's first second shows
# an empty Reservation for ever. Start `inresv` in a later second.
sleep 1.2
ID[inresv]=$(sb carol -J inresv -A vision --reservation=gl-resv -p h100 -c 2 --gres=gpu:h100:1 -t 5 --wrap 'sleep 5')
ID[outlast]=$(sb carol -J outlast -A vision --reservation=gl-resv -p h100 -c 2 --gres=gpu:h100:1 -t 5 \
  --wrap 'sleep 300')
ID[victim]=$(sb alice -J victim -A ml --qos=scavenger --requeue -p a100 -w gpu01 -c 2 --gres=gpu:a100:4 -t 5 \
  --wrap 'if [ "${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then sleep 300; else sleep 2; fi')
ID[big]=$(sb alice -J big -A ml -p a100 -w gpu02 -c 2 --gres=gpu:a100:4 -t 5 --wrap 'sleep 12')
waitfor 20 "big to run" is_state "${ID[big]}" RUNNING || die "big is $(state "${ID[big]}")"
ID[waitres]=$(sb bob -J waitres -A vision -p a100 -w gpu02 -c 2 --gres=gpu:a100:2 -t 5 --wrap 'sleep 2')
ID[dep]=$(sb alice -J dep -A ml -p a100 --dependency=afterok:"${ID[big]}" -c 2 --gres=gpu:a100:1 -t 5 --wrap 'sleep 2')
waitfor 20 "victim to run" is_state "${ID[victim]}" RUNNING || die "victim is $(state "${ID[victim]}")"
sleep 2
ID[preemptor]=$(sb bob -J preemptor -A vision --qos=high -p a100 -w gpu01 -c 2 --gres=gpu:a100:4 -t 5 --wrap 'sleep 5')
requeued() { [[ $(squeue -h -j "${ID[victim]}" -o '%T %r') == "PENDING BeginTime" ]]; }
waitfor 30 "victim to be preempted and requeued" requeued || die "victim is $(state "${ID[victim]}")"
log "victim ${ID[victim]} preempted by ${ID[preemptor]} and requeued"
waitfor 30 "preemptor to end" gone "${ID[preemptor]}" || die "preemptor is $(state "${ID[preemptor]}")"
sleep 1
scontrol update JobId="${ID[victim]}" StartTime=now+3     # not `now`: see README (credential revocation)
for k in "${!ID[@]}"; do echo "$k ${ID[$k]}"; done | sort >"$JOBDIR/waiting-jobids"
waitfor 60 "the mix to end" bash -c '[[ -z $(squeue -h -o %i) ]]' || { squeue >&2; exit 1; }
# an ended reservation stays listed (State=INACTIVE) until slurmctld purges it
resv_over() { ! scontrol show reservation -o 2>/dev/null | grep 'ReservationName=gl-resv ' | grep -q 'State=ACTIVE'; }
waitfor 40 "gl-resv to end" resv_over || die "gl-resv still active"
touch "$W/stop"; wait $SNAPPER 2>/dev/null || true
capture "$W" sacctmgr-reservation.psv env TZ=UTC sacctmgr -P show reservation start=2000-01-01T00:00:00 \
  format=Cluster,Name,TRES,TimeStart,TimeEnd,NodeNames,Flags
log "waiting mix done: $(tr '\n' ' ' <"$JOBDIR/waiting-jobids")"
