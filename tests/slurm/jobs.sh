#!/usr/bin/env bash
# tests/slurm/jobs.sh - submit gpuledger's deterministic GPU job mix to the up.sh cluster and drive it until
# every job but one has ended (~70-100 s, bounded by the 1-minute TIMEOUT job).
#
#   name         user/account   where                    ends as
#   timeout      dave/infra     h100 1 GPU, -t 1         TIMEOUT (Slurm checks limits every 30 s)
#   ddp          alice/ml       a100 2 nodes x 2 GPUs    COMPLETED, steps .batch .extern .0 .1
#   oom-eval     bob/ml         gpu01 1 untyped GPU      FAILED 3:0
#   cancel-run   carol/vision   h100 2 GPUs              CANCELLED by carol while RUNNING
#   sweep        carol/vision   h100 array 0-3%2, 1 GPU  task 2 FAILED 1:0, the others COMPLETED
#   nodefail     alice/ml       gpu02 1 GPU --no-requeue NODE_FAIL: gpu02 is set DOWN under it
#   prio         bob/vision     a100 2 GPUs, QOS high    COMPLETED
#   requeue      dave/infra     gpu01 1 GPU              REQUEUED by root once, then COMPLETED (2 records)
#   late         bob/vision     debug on gpu01, 1 GPU    RUNNING until $JOBDIR/release exists, then COMPLETED
#   cancel-pend  dave/infra     h100 4 GPUs              CANCELLED while PENDING (Resources): never started
#   suspend      alice/ml       h100 1 GPU, sleep 8      suspended by root for 4 s, then COMPLETED: Slurm keeps
#                                                        its GPU allocated, sacct's Elapsed leaves the 4 s out
#   impossible   carol/vision   h100 asking for a100     rejected by sbatch, yet in sacct: FAILED 1:0, None assigned
# Node events: gpu02 DOWN (reason "gl-test: XID 79 ...") under `nodefail`, resumed 2 s later; gpu03 set to
# DRAIN while `timeout` runs on it (DRAINING, no accounting event yet), resumed 2 s after it is DRAINED.
# $S/out/midrun/ keeps scontrol, sinfo and squeue taken while gpu02 was DOWN and gpu03 DRAINING.
# Writes "$JOBDIR/jobids": one `name jobid` line per job.
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
load_ports || die "no cluster state in $S: run up.sh first"
rm -f "$JOBDIR/release" "$JOBDIR/jobids"

sb() { local u=$1; shift; as_user "$u" sbatch --parsable -o "$JOBDIR/%x-%j.out" -e "$JOBDIR/%x-%j.err" "$@"; }
state() { squeue -h -j "$1" -o %T 2>/dev/null | sort -u | paste -sd, || true; }
is_state() { [[ $(state "$1") == "$2" ]]; }
gone() { [[ -z $(squeue -h -j "$1" -o %i 2>/dev/null) ]]; }
wait_state() { waitfor "$3" "job $1 to be $2" is_state "$1" "$2" || die "job $1 is $(state "$1"), not $2"; }
wait_gone() { waitfor "$2" "job $1 to end" gone "$1" || die "job $1 is still $(state "$1")"; }
declare -A ID

ID[timeout]=$(sb dave -J timeout -A infra -p h100 -c 2 --gres=gpu:h100:1 -t 1 --wrap 'sleep 300')
ID[ddp]=$(sb alice -J ddp -A ml -p a100 -N 2 --ntasks-per-node=2 -c 2 --gres=gpu:a100:2 -t 5 \
  --wrap 'srun hostname; srun sleep 5')
ID[oom-eval]=$(sb bob -J oom-eval -A ml -p a100 -w gpu01 -c 4 --gres=gpu:1 -t 5 \
  --wrap 'sleep 3; echo "CUDA error: out of memory" >&2; exit 3')
ID[cancel-run]=$(sb carol -J cancel-run -A vision -p h100 -c 8 --gres=gpu:h100:2 -t 10 --wrap 'sleep 300')
ID[sweep]=$(sb carol -J sweep -A vision -p h100 --array=0-3%2 -c 2 --gres=gpu:h100:1 -t 5 \
  --wrap 'sleep 2; [ "$SLURM_ARRAY_TASK_ID" -ne 2 ]')
ID[nodefail]=$(sb alice -J nodefail -A ml -p a100 -w gpu02 --no-requeue -c 4 --gres=gpu:a100:1 -t 10 --wrap 'sleep 300')
ID[prio]=$(sb bob -J prio -A vision --qos=high -p a100 -c 8 --gres=gpu:a100:2 -t 5 --wrap 'sleep 4')
ID[requeue]=$(sb dave -J requeue -A infra -p a100 -w gpu01 --requeue -c 2 --gres=gpu:a100:1 -t 5 \
  --wrap 'if [ "${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then sleep 300; else sleep 2; fi')
ID[late]=$(sb bob -J late -A vision -p debug -w gpu01 -c 2 --gres=gpu:a100:1 -t 10 \
  --wrap "while [ ! -e '$JOBDIR/release' ]; do sleep 0.5; done")
if out=$(sb carol -J impossible -A vision -p h100 --gres=gpu:a100:1 --wrap true 2>&1); then
  die "the impossible job was accepted: $out"
fi
log "submitted: $(for k in "${!ID[@]}"; do printf '%s=%s ' "$k" "${ID[$k]}"; done)"

wait_state "${ID[cancel-run]}" RUNNING 30; sleep 2
as_user carol scancel "${ID[cancel-run]}"
log "carol cancelled running cancel-run"

wait_state "${ID[requeue]}" RUNNING 30; sleep 1
scontrol requeue "${ID[requeue]}"
# a requeued job waits ~2 minutes (BeginTime) before it may start again: let it go in 3 s instead. Not at
# once: slurmd revokes the old instance's credential, and a new one issued within the same second is refused
# ("Job credential revoked": the job FAILS). Not before it is PENDING: the requeue would reset the begin time.
reason() { [[ $(squeue -h -j "$1" -o '%T %r') == "PENDING BeginTime" ]]; }
waitfor 20 "requeue to be pending" reason "${ID[requeue]}" || die "requeue is $(state "${ID[requeue]}")"
scontrol update JobId="${ID[requeue]}" StartTime=now+3
log "root requeued requeue"

# the array's tasks have gpu03 to themselves once cancel-run is gone; then a 4-GPU job can only wait
wait_gone "${ID[sweep]}" 40
ID[cancel-pend]=$(sb dave -J cancel-pend -A infra -p h100 -c 2 --gres=gpu:h100:4 -t 5 --wrap 'sleep 300')
wait_state "${ID[cancel-pend]}" PENDING 10; sleep 2
as_user dave scancel "${ID[cancel-pend]}"
log "dave cancelled pending cancel-pend"

# ended before the mid-run snapshot, which must see only `timeout` on gpu03
ID[suspend]=$(sb alice -J suspend -A ml -p h100 -c 2 --gres=gpu:h100:1 -t 5 --wrap 'sleep 8')
wait_state "${ID[suspend]}" RUNNING 15; sleep 1
scontrol suspend "${ID[suspend]}"; sleep 4; scontrol resume "${ID[suspend]}"
wait_gone "${ID[suspend]}" 20
log "root suspended suspend for 4 s; it has ended"

wait_gone "${ID[ddp]}" 30
wait_state "${ID[nodefail]}" RUNNING 30
scontrol update NodeName=gpu02 State=DOWN Reason="gl-test: XID 79 GPU has fallen off the bus"
scontrol update NodeName=gpu03 State=DRAIN Reason="gl-test: ECC double-bit errors"
wait_gone "${ID[nodefail]}" 30
M=$S/out/midrun; rm -rf "$M"; mkdir -p "$M"
capture "$M" scontrol-show-node-o-midrun.txt env TZ=UTC scontrol show node -o
capture "$M" sinfo-json-midrun.json env TZ=UTC sinfo --json
capture "$M" scontrol-show-node-midrun.txt env TZ=UTC scontrol show node
capture "$M" sinfo-gres-midrun.psv env TZ=UTC sinfo -N -O "$SINFO_GRES_FORMAT"
capture "$M" squeue-midrun.psv env TZ=UTC squeue --all -o '%i|%j|%u|%a|%P|%T|%M|%l|%D|%b|%N|%r'
sleep 2
scontrol update NodeName=gpu02 State=RESUME
log "gpu02 DOWN (nodefail ended) and resumed; gpu03 DRAINING under timeout; snapshot in $M"

for k in "${!ID[@]}"; do echo "$k ${ID[$k]}"; done | sort >"$JOBDIR/jobids"
waitfor 150 "all jobs but late to end" bash -c "! squeue -h -o %i | grep -vqx '${ID[late]}'" \
  || { squeue >&2; exit 1; }
is_state "${ID[late]}" RUNNING || die "late is $(state "${ID[late]}"), not RUNNING"
# a drain becomes an accounting event only once the node is DRAINED (its last job ended), so gpu03 is resumed
# only now: the event runs from the end of `timeout` to here
drained() { [[ $(sinfo -h -n gpu03 -p h100 -o %T) == drained ]]; }
waitfor 10 "gpu03 to be drained" drained || die "gpu03 is $(sinfo -h -n gpu03 -p h100 -o %T), not drained"
sleep 2
scontrol update NodeName=gpu03 State=RESUME
log "all jobs but late (${ID[late]}) have ended; touch $JOBDIR/release to let it finish"
