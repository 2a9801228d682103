# tests/slurm/lib.sh - sourced by up.sh, jobs.sh, capture.sh, rollup.sh and down.sh.
#
# Everything this harness owns lives under $GL_SLURM_DIR (default /tmp/gpuledger-slurm): configs, munge key
# and socket, the MariaDB data directory, Slurm state, logs, PID files. Nothing is written to /etc/slurm,
# /etc/munge or /var/lib/mysql, so a site's (or another engineer's) Slurm on the same host is left alone.
# Client commands find this cluster through SLURM_CONF, which every script exports:
#     source tests/slurm/env.sh    # then sinfo, sacct, scontrol ... talk to the test cluster
# The path is short on purpose: munge and MariaDB put UNIX sockets under it (108-byte limit).

GL_SLURM_DIR=${GL_SLURM_DIR:-${TMPDIR:-/tmp}/gpuledger-slurm}
S=$GL_SLURM_DIR
export SLURM_CONF=$S/etc/slurm.conf
GL_CLUSTER=${GL_SLURM_CLUSTER:-glcluster}
MUNGE_SOCK=$S/munge/munge.sock
MYSQL_SOCK=$S/mysql/mysqld.sock
JOBDIR=$S/jobs
GL_USERS="alice bob carol dave"
# sinfo, one line per node and partition, with the GPU columns (`|` separated, header included)
SINFO_GRES_FORMAT="NodeList:|,Partition:|,StateLong:|,CPUsState:|,Memory:|,AllocMem:|,Gres:|,GresUsed:|,Reason:"

_T0=${_T0:-$(date +%s%3N)}
log() { local ms=$(($(date +%s%3N) - _T0)); printf '[%s %3d.%ds] %s\n' "${0##*/}" $((ms / 1000)) $((ms % 1000 / 100)) "$*"; }
die() { echo "${0##*/}: $*" >&2; exit 1; }

# daemon_pid PIDFILE: print the PID in PIDFILE if that process is alive and is the daemon the file is named
# for (slurmd-gpu01.pid -> slurmd, mysqld.pid -> mariadbd, ...): a stale file whose PID the kernel has since
# given to another process must not make us skip a start, or kill a stranger
daemon_pid() {
  local pf=$1 pid comm want
  [[ -s $pf ]] || return 1
  pid=$(<"$pf"); want=${pf##*/}; want=${want%.pid}; want=${want%%-*}
  [[ $want == mysqld ]] && want=mariadbd
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm == "$want" ]] && echo "$pid"
}
alive() { daemon_pid "$1" >/dev/null; }

# waitfor SECONDS WHAT CMD...: poll CMD every 0.2 s until it succeeds (SECONDS of wall time at most)
waitfor() {
  local what=$2 end=$((SECONDS + $1)); shift 2
  while ((SECONDS < end)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "${0##*/}: timed out waiting for $what" >&2
  return 1
}

# stop_pidfiles PIDFILE...: TERM each daemon named by a PID file (only those PIDs, see daemon_pid), wait up
# to 20 s for all of them, KILL what is left, remove the files
stop_pidfiles() {
  local pf pid pids=() end=$((SECONDS + 20))
  for pf in "$@"; do
    pid=$(daemon_pid "$pf") && kill -TERM "$pid" 2>/dev/null && pids+=("$pid:${pf##*/}")
  done
  for pid in "${pids[@]}"; do
    while kill -0 "${pid%%:*}" 2>/dev/null && ((SECONDS < end)); do sleep 0.1; done
    if kill -0 "${pid%%:*}" 2>/dev/null; then
      echo "${pid#*:} (${pid%%:*}) ignored TERM for 20 s: KILL" >&2; kill -KILL "${pid%%:*}" 2>/dev/null
    fi
    log "stopped ${pid#*:} (${pid%%:*})"
  done
  for pf in "$@"; do [[ -e $pf ]] && rm -f "$pf"; done
  return 0
}

# ports: chosen once per state directory (see up.sh) and kept in $S/ports
load_ports() { [[ -s $S/ports ]] && source "$S/ports"; }

mysql_root() { mysql --no-defaults --protocol=socket --socket="$MYSQL_SOCK" -u root "$@"; }

# as USER CMD...: run a client command as USER in the shared job directory, with this cluster's config
as_user() { local u=$1; shift; (cd "$JOBDIR" && runuser -u "$u" -- env SLURM_CONF="$SLURM_CONF" "$@"); }

# capture DIR FILE CMD...: run CMD with stdout to DIR/FILE; DIR/FILE.cmd gets the command line as run (shell
# quoted) and a comment with its exit status, the UTC time and the Slurm version. Stderr, if any, is kept
# in DIR/FILE.stderr. Commands are given as `env TZ=... cmd ...` so the zone of printed times is on record.
capture() {
  local dir=$1 f=$2 rc=0; shift 2
  "$@" >"$dir/$f" 2>"$dir/$f.stderr" || rc=$?
  { printf '%q ' "$@" | sed 's/ $//'; echo
    echo "# exit $rc; captured $(date -u +%FT%TZ); $(sinfo -V); cluster $GL_CLUSTER of tests/slurm/up.sh"; } >"$dir/$f.cmd"
  [[ -s $dir/$f.stderr ]] || rm -f "$dir/$f.stderr"
  return 0
}
