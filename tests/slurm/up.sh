#!/usr/bin/env bash
# tests/slurm/up.sh - bring up a real single-host Slurm with accounting, for gpuledger's integration tests:
#   munged -> MariaDB -> slurmdbd -> accounts -> slurmctld -> 3 x slurmd
#   gpu01, gpu02: 4 x a100 each (partition a100), gpu03: 4 x h100 (partition h100); partition debug spans all.
#   accounts research/{ml,vision} and infra; users alice, bob (ml and vision), carol, dave, root; QOS high,
#   which preempts (requeues) jobs of QOS scavenger (PreemptType=preempt/qos).
# Needs root and the Debian packages slurmctld slurmd slurmdbd slurm-client munge mariadb-server.
# Idempotent: configs are rewritten only when they change (then `scontrol reconfigure`), daemons already
# running (by PID file) are kept, accounts are added only once. `up.sh --fresh` first wipes the Slurm state
# and the accounting database (down.sh --reset), so job ids start at 1 again and the event history is empty.
# Ports: six consecutive free TCP ports from 16800 up, chosen once per state (kept in $S/ports).
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh

FRESH=0
if [[ ${1:-} == --fresh ]]; then FRESH=1; ./down.sh --reset; fi
[[ $(id -u) -eq 0 ]] || die "must run as root (daemons switch to the slurm, munge and mysql users)"
for b in munged mungekey mariadbd mariadb-install-db mysql slurmdbd slurmctld slurmd sacctmgr scontrol sinfo runuser; do
  command -v "$b" >/dev/null || die "$b not found: apt-get install slurmctld slurmd slurmdbd slurm-client munge mariadb-server"
done

mkdir -p "$S"/{etc,log,run,ctld,fakedev,munge,mysql} "$S"/spool/{gpu01,gpu02,gpu03}
chmod 755 "$S" "$S/etc"
chown slurm:slurm "$S"/{run,ctld}
chown munge:munge "$S/munge"; chmod 755 "$S/munge"
chown mysql:mysql "$S/mysql"
mkdir -p "$JOBDIR"; chmod 1777 "$JOBDIR"
# slurmctld/slurmdbd log (and chdir) as the slurm user, MariaDB as mysql, slurmd as root
chown slurm:slurm "$S/log"; chmod 755 "$S/log"
touch "$S/log/mariadb.err"; chown mysql:mysql "$S/log/mariadb.err"

# ---------------------------------------------------------------- ports
# nothing listens on 127.0.0.1:PORT (bash's /dev/tcp: no dependency on iproute2)
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if ! load_ports; then
  for base in $(seq 16800 20 18800); do
    ok=1; for p in $(seq "$base" $((base + 5))); do port_free "$p" || { ok=0; break; }; done
    ((ok)) && break
  done
  ((ok)) || die "no six free ports between 16800 and 18805"
  printf 'P_MYSQL=%d\nP_DBD=%d\nP_CTLD=%d\nP_SLURMD=%d\n' "$base" $((base + 1)) $((base + 2)) $((base + 3)) >"$S/ports"
  load_ports
fi
log "state $S, ports mysql=$P_MYSQL slurmdbd=$P_DBD slurmctld=$P_CTLD slurmd=$P_SLURMD-$((P_SLURMD + 2))"

# ---------------------------------------------------------------- munge (own key and socket)
if [[ ! -s $S/munge/munge.key ]]; then
  mungekey -c -k "$S/munge/munge.key" >/dev/null
  chown munge:munge "$S/munge/munge.key"; chmod 400 "$S/munge/munge.key"
fi
if ! alive "$S/munge/munged.pid"; then
  runuser -u munge -- munged --socket="$MUNGE_SOCK" --key-file="$S/munge/munge.key" \
    --pid-file="$S/munge/munged.pid" --log-file="$S/munge/munged.log" --seed-file="$S/munge/munged.seed"
fi
waitfor 10 munged bash -c "munge -S '$MUNGE_SOCK' -n | unmunge -S '$MUNGE_SOCK'"
log "munged up"

# ---------------------------------------------------------------- MariaDB (own data directory, TCP on 127.0.0.1)
DBPASS=gl-slurmdb
if [[ ! -d $S/mysql/data/mysql ]]; then
  mariadb-install-db --no-defaults --user=mysql --datadir="$S/mysql/data" --skip-test-db \
    --auth-root-authentication-method=socket >"$S/log/mariadb-install.log" 2>&1 \
    || die "mariadb-install-db failed: see $S/log/mariadb-install.log"
fi
if ! alive "$S/mysql/mysqld.pid"; then
  # small buffers and lazy flushing: this is a throw-away test database on a shared 2-core box
  setsid mariadbd --no-defaults --user=mysql --datadir="$S/mysql/data" --socket="$MYSQL_SOCK" \
    --pid-file="$S/mysql/mysqld.pid" --port="$P_MYSQL" --bind-address=127.0.0.1 --skip-name-resolve \
    --log-error="$S/log/mariadb.err" --skip-log-bin --innodb-buffer-pool-size=64M \
    --innodb-log-file-size=16M --innodb-flush-log-at-trx-commit=0 --innodb-lock-wait-timeout=900 \
    --max-allowed-packet=64M </dev/null >/dev/null 2>&1 &
fi
waitfor 60 mariadb mysql_root -e 'SELECT 1'
if ((FRESH)); then mysql_root -e 'DROP DATABASE IF EXISTS slurm_acct_db'; fi
mysql_root <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
log "mariadb up"

# ---------------------------------------------------------------- configs
CHANGED=0
put() { # put FILE: replace FILE with stdin only when it differs (and note the change)
  local tmp; tmp=$(mktemp)
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; chmod 644 "$1"; CHANGED=1; fi
}

put "$S/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$P_DBD
SlurmUser=slurm
LogFile=$S/log/slurmdbd.log
PidFile=$S/run/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$P_MYSQL
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
EOF
# slurmdbd refuses a config readable by others (it holds the DB password)
chown slurm:slurm "$S/etc/slurmdbd.conf"; chmod 600 "$S/etc/slurmdbd.conf"

put "$S/etc/slurm.conf" <<EOF
ClusterName=$GL_CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$P_CTLD
SlurmUser=slurm
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCK
CredType=cred/munge
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# no cgroups in a container: /proc based process tracking, no binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=10
# an .extern step per job, as on most production sites
PrologFlags=Contain
MpiDefault=none
SwitchType=switch/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$P_DBD
# for slurmdbd connections this names the munge socket (AuthInfo covers only the other RPCs)
AccountingStoragePass=$MUNGE_SOCK
AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:h100
AccountingStorageEnforce=associations,limits,qos
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
PriorityType=priority/multifactor
PriorityCalcPeriod=1
PriorityWeightFairshare=10000
PriorityWeightAge=1000
PriorityWeightQOS=1000
# QOS preemption (tests/slurm/waiting.sh): only QOS high preempts, only jobs of QOS scavenger, which are requeued
PreemptType=preempt/qos
PreemptMode=REQUEUE
# the host has 2 cores: trust the CPUs/memory declared here instead of draining the nodes
SlurmdParameters=config_overrides
# 1, not 2: with 2 an admin-downed node comes back within a second (0-second events)
ReturnToService=1
MinJobAge=300
KillWait=2
InactiveLimit=0
Waittime=0
MessageTimeout=30
SlurmctldTimeout=60
SlurmdTimeout=300
GresTypes=gpu
NodeName=gpu01 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$P_SLURMD CPUs=32 RealMemory=256000 Gres=gpu:a100:4 Feature=a100 State=UNKNOWN
NodeName=gpu02 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((P_SLURMD + 1)) CPUs=32 RealMemory=256000 Gres=gpu:a100:4 Feature=a100 State=UNKNOWN
NodeName=gpu03 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((P_SLURMD + 2)) CPUs=32 RealMemory=256000 Gres=gpu:h100:4 Feature=h100 State=UNKNOWN
PartitionName=a100 Nodes=gpu[01-02] Default=YES MaxTime=1-00:00:00 TRESBillingWeights=CPU=0.5,Mem=0.125G,GRES/gpu:a100=8 State=UP
PartitionName=h100 Nodes=gpu03 MaxTime=12:00:00 TRESBillingWeights=CPU=0.5,Mem=0.125G,GRES/gpu:h100=16 State=UP
PartitionName=debug Nodes=gpu[01-03] MaxTime=00:30:00 State=UP
EOF

# Fake GPUs: 22.05 silently drops a typed gres.conf line without File= (the node then registers 0 GPUs and
# goes INVAL), so point File= at character devices nobody opens (NVIDIA's major 195). Where mknod is not
# permitted (unprivileged container) a regular file also works, with one warning per GPU in slurmd's log.
for i in 0 1 2 3; do
  [[ -e $S/fakedev/nvidia$i ]] || mknod "$S/fakedev/nvidia$i" c 195 "$i" 2>/dev/null || touch "$S/fakedev/nvidia$i"
done
put "$S/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=gpu[01-02] Name=gpu Type=a100 File=$S/fakedev/nvidia[0-3]
NodeName=gpu03 Name=gpu Type=h100 File=$S/fakedev/nvidia[0-3]
EOF
log "configs in $S/etc (changed=$CHANGED)"

# ---------------------------------------------------------------- slurmdbd + associations
if ! alive "$S/run/slurmdbd.pid"; then slurmdbd; fi
waitfor 60 slurmdbd sacctmgr -n show cluster
for u in $GL_USERS; do id -u "$u" >/dev/null 2>&1 || useradd -M -s /bin/bash "$u"; done
if [[ -z $(sacctmgr -n -P show assoc where cluster="$GL_CLUSTER" account=infra user=dave format=user) ]]; then
  # one `load` instead of a dozen `add`s: each sacctmgr call costs a slurmdbd commit (~1 s here)
  sacctmgr -i add qos high Priority=100 >/dev/null
  # preemptible: QOS high may requeue it (PreemptMode=REQUEUE); no job of jobs.sh uses it
  sacctmgr -i add qos scavenger Priority=0 PreemptMode=requeue >/dev/null
  sacctmgr -i modify qos high set Preempt=scavenger >/dev/null
  cat >"$S/etc/associations.cfg" <<EOF
Cluster - '$GL_CLUSTER':Fairshare=1:QOS='normal'
Parent - 'root'
User - 'root':DefaultAccount='infra':AdminLevel='Administrator':Fairshare=1:QOS='normal,high,scavenger'
Account - 'infra':Description='infra team':Organization='infra':Fairshare=10
Account - 'research':Description='research org':Organization='research':Fairshare=1
Parent - 'infra'
User - 'dave':DefaultAccount='infra':Fairshare=1:QOS='normal,high,scavenger'
User - 'root':DefaultAccount='infra':Fairshare=1:QOS='normal,high,scavenger'
Parent - 'research'
Account - 'ml':Description='ML team':Organization='research':Fairshare=60
Account - 'vision':Description='vision team':Organization='research':Fairshare=40
Parent - 'ml'
User - 'alice':DefaultAccount='ml':Fairshare=1:QOS='normal,high,scavenger'
User - 'bob':DefaultAccount='ml':Fairshare=1:QOS='normal,high,scavenger'
Parent - 'vision'
User - 'bob':DefaultAccount='ml':Fairshare=1:QOS='normal,high,scavenger'
User - 'carol':DefaultAccount='vision':Fairshare=1:QOS='normal,high,scavenger'
EOF
  sacctmgr -i load file="$S/etc/associations.cfg" >"$S/log/sacctmgr-load.log" 2>&1 \
    || die "sacctmgr load failed: see $S/log/sacctmgr-load.log"
  log "associations loaded"
fi
log "slurmdbd up"

# ---------------------------------------------------------------- slurmctld + slurmd x3
if ! alive "$S/run/slurmctld.pid"; then
  slurmctld 2>>"$S/log/slurmctld.stderr"
elif ((CHANGED)); then
  scontrol reconfigure; log "config changed: scontrol reconfigure"
fi
waitfor 60 slurmctld scontrol ping
# TRES limits name gres/gpu, which slurmdbd knows only once slurmctld has registered AccountingStorageTRES
waitfor 30 "gres/gpu TRES" bash -c 'sacctmgr -n -P show tres | grep -q "^gres|gpu|"'
if [[ -z $(sacctmgr -n -P show assoc where account=ml user= format=GrpTRES) ]]; then
  sacctmgr -i modify account where name=ml cluster="$GL_CLUSTER" set GrpTRES=gres/gpu=12 >/dev/null
fi
for n in gpu01 gpu02 gpu03; do alive "$S/run/slurmd-$n.pid" || slurmd -N "$n"; done
nodes_up() { [[ $(sinfo -h -N -p debug -o '%t' | grep -cE '^(idle|mix|alloc)$') -eq 3 ]]; }
waitfor 60 "3 nodes idle" nodes_up || { sinfo -N >&2; exit 1; }
log "cluster $GL_CLUSTER up: source $(pwd)/env.sh to use it"
