"""A real Slurm, end to end: tests/slurm/up.sh starts munged, MariaDB, slurmdbd, slurmctld and three slurmd
with fake GPUs (gpu01, gpu02: 4 x a100; gpu03: 4 x h100); tests/slurm/jobs.sh runs a known job mix
(completed, failed, cancelled running and pending, timeout, array with a failing task, multi-node, NODE_FAIL,
requeue, a rejected submission, DOWN and DRAIN events). Then `gpuledger ingest sacct --live`, `ingest nodes`
and `ingest events` run against the real commands, and the warehouse must agree with Slurm's own numbers:
states, placements, and GPU-seconds per account from sacct's ElapsedRaw (+ Suspended) x AllocTRES and from sreport.

The fixture tests at the end replay tests/fixtures/slurm_real (a capture of the same mix) without Slurm.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import io
import os
import pwd
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT

SLURM_DIR = ROOT / "tests" / "slurm"
REAL = ROOT / "tests" / "fixtures" / "slurm_real"
STATE = Path(os.environ.get("GL_SLURM_DIR") or Path(os.environ.get("TMPDIR", "/tmp")) / "gpuledger-slurm")
BINARIES = ("munged", "mungekey", "mariadbd", "mariadb-install-db", "mysql", "slurmdbd", "slurmctld", "slurmd",
            "sacct", "sbatch", "scontrol", "sacctmgr", "sinfo", "squeue", "sreport", "runuser")
PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
LIVE_OVERLAP = dt.timedelta(seconds=600)

#: what each job of jobs.sh must end as (in submission order of its records)
EXPECTED_STATES = {"timeout": ["TIMEOUT"], "ddp": ["COMPLETED"], "oom-eval": ["FAILED"],
                   "cancel-run": ["CANCELLED"], "nodefail": ["NODE_FAIL"], "prio": ["COMPLETED"],
                   "requeue": ["REQUEUED", "COMPLETED"], "late": ["COMPLETED"], "cancel-pend": ["CANCELLED"],
                   "suspend": ["COMPLETED"]}


# ---------------------------------------------------------------- helpers

def _why_unavailable() -> str | None:
    missing = [b for b in BINARIES if shutil.which(b, path=PATH) is None]
    if missing:
        return (f"real Slurm unavailable: {', '.join(missing)} not found; install the Debian packages slurmctld "
                "slurmd slurmdbd slurm-client munge mariadb-server (.ci/run does)")
    if os.geteuid() != 0:
        return "real Slurm needs root: the test starts munged, MariaDB and the Slurm daemons as their system users"
    return None


def _env() -> dict:
    return dict(os.environ, PATH=PATH, GL_SLURM_DIR=str(STATE), SLURM_CONF=str(STATE / "etc" / "slurm.conf"),
                TZ="UTC")


def _script(name: str, *args: str, timeout: float) -> str:
    proc = subprocess.run([str(SLURM_DIR / name), *args], check=False, env=_env(), capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"tests/slurm/{name} exited {proc.returncode} (logs in {STATE}/log):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def _slurm(*cmd: str) -> str:
    """Run a Slurm client command against the test cluster; times print in UTC."""
    proc = subprocess.run(cmd, check=False, env=_env(), capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _cli(db: Path, *argv: str) -> str:
    """The gpuledger CLI, in-process (imports once); returns its stderr (the ingest summaries)."""
    import gpuledger
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = gpuledger.main(["--db", str(db), *argv])
    assert code == 0, f"gpuledger {' '.join(argv)} exited {code}: {err.getvalue()}"
    return err.getvalue()


def _query(db: Path, sql: str, params=None) -> list[tuple]:
    from ingest import warehouse
    con = warehouse.connect(db)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _gpus(tres: str) -> int:
    """GPUs in an AllocTRES string, the way sacct prints them: `gres/gpu=N` (0 when absent)."""
    m = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
    return int(m.group(1)) if m else 0


def _utc(stamp: str) -> dt.datetime:
    """A time sacct printed under TZ=UTC (``_env``), naive UTC as the warehouse keeps times."""
    return dt.datetime.fromisoformat(stamp)


def _sacct_allocations() -> list[dict]:
    """Slurm's own view, independent of our parser: one dict per allocation record."""
    fields = ["JobIDRaw", "JobID", "Submit", "Account", "State", "ElapsedRaw", "AllocTRES", "NodeList", "Suspended"]
    out = _slurm("sacct", "--allusers", "--duplicates", "--allocations", "--parsable2", "--noheader",
                 "--starttime", "2020-01-01T00:00:00", "--endtime", "now", "--format", ",".join(fields))
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line]


def _seconds(duration: str) -> int:
    """Seconds of a sacct duration, [D-]HH:MM:SS (Suspended prints so)."""
    days, _, hms = duration.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def _held_gpu_seconds(sacct: list[dict]) -> dict[str, int]:
    """GPU-seconds per account the way sreport counts them: (ElapsedRaw + Suspended) x GPUs, since a suspended
    job keeps its GPUs (sacct's Elapsed leaves the suspended time out)."""
    held: dict[str, int] = {}
    for rec in sacct:
        held[rec["Account"]] = held.get(rec["Account"], 0) + \
            (int(rec["ElapsedRaw"]) + _seconds(rec["Suspended"])) * _gpus(rec["AllocTRES"])
    return held


def _hostnames(nodelist: str) -> set[str]:
    if nodelist in ("", "None assigned"):
        return set()
    return set(_slurm("scontrol", "show", "hostnames", nodelist).split())


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _captured_at(cmd_file: Path) -> str:
    """The UTC time a capture.sh/jobs.sh output was taken, from its .cmd file."""
    return re.search(r"captured (\S+)Z", cmd_file.read_text()).group(1)


# ---------------------------------------------------------------- the cluster and the ingest (once per session)

def _take_turn(lock) -> None:
    """One harness per host at a time: a second session (another engineer's `make test`) waits here."""
    deadline = time.monotonic() + 600
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise AssertionError(f"{lock.name} held by another Slurm test session for 10 minutes") from None
            time.sleep(2)


@pytest.fixture(scope="module")      # the lock is released with the module: tests/test_service.py takes it too
def slurm_cluster():
    """Bring the cluster up fresh, run the job mix; always stop every daemon afterwards (by PID file)."""
    why = _why_unavailable()
    if why:
        pytest.skip(why)
    STATE.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{STATE}.lock", "w") as lock:
        _take_turn(lock)
        mp = pytest.MonkeyPatch()
        # a CI timeout's SIGTERM must still stop the daemons: make it unwind like Ctrl-C, through `finally`
        default_term = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        if default_term:
            signal.signal(signal.SIGTERM, _interrupt)
        try:
            t0 = time.monotonic()
            _script("up.sh", "--fresh", timeout=240)
            t_up = time.monotonic() - t0
            mp.setenv("SLURM_CONF", str(STATE / "etc" / "slurm.conf"))
            mp.setenv("PATH", PATH)
            t_wait = _clear_of_the_hour()
            _script("jobs.sh", timeout=300)
            t_jobs = time.monotonic() - t0 - t_up - t_wait
            ids = dict(line.split() for line in (STATE / "jobs" / "jobids").read_text().splitlines())
            print(f"\nreal Slurm: bring-up {t_up:.1f} s, job mix {t_jobs:.1f} s")
            yield {"ids": ids, "t_up": t_up, "t_jobs": t_jobs}
        finally:
            mp.undo()
            subprocess.run([str(SLURM_DIR / "down.sh")], check=False, env=_env(), capture_output=True,
                           timeout=120)
            if default_term:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _clear_of_the_hour(needed_s: float = 240) -> float:
    """Wait, if need be, until the job mix (about 100 s) and the rollup after it can run before the next full hour
    (UTC); returns the seconds waited. slurmdbd rolls usage up per hour, and sreport then counted jobs running over
    the hour's end only up to it (seen 2026-12-05: the TIMEOUT job and a 90 s job over 18:00 lost their 15 and 18 s
    after it), while sacct's elapsed times have them whole."""
    left = 3600 - time.time() % 3600
    if left >= needed_s:
        return 0.0
    time.sleep(left + 2)
    return left + 2


@pytest.fixture(scope="module")
def ingested(slurm_cluster, tmp_path_factory):
    """Two `ingest sacct --live` runs around the `late` job's completion, then nodes and events."""
    d = tmp_path_factory.mktemp("slurm-real")
    db = d / "warehouse.duckdb"
    ids = slurm_cluster["ids"]
    late = ids["late"]
    live1 = _cli(db, "ingest", "sacct", "--live", "--no-refresh")
    after_live1 = {r[0]: r[1:] for r in _query(db, 'SELECT job_id, state, "end" FROM jobs')}
    mark1 = _query(db, "SELECT value FROM watermarks WHERE source = 'sacct-live'")[0][0]

    (STATE / "jobs" / "release").touch()
    deadline = time.monotonic() + 60
    while _slurm("sacct", "-n", "-X", "-P", "-j", late, "--format=State").strip() != "COMPLETED":
        assert time.monotonic() < deadline, "the late job did not complete within 60 s of its release"
        time.sleep(0.5)
    live2 = _cli(db, "ingest", "sacct", "--live", "--no-refresh")
    sacct = _sacct_allocations()

    node_file = d / "scontrol-show-node.txt"
    node_file.write_text(_slurm("scontrol", "show", "node"))
    midrun = STATE / "out" / "midrun" / "scontrol-show-node-o-midrun.txt"
    _cli(db, "ingest", "nodes", "--no-refresh", "--as-of", _captured_at(Path(f"{midrun}.cmd")), str(midrun))
    _cli(db, "ingest", "nodes", "--no-refresh", str(node_file))
    events = _slurm("sacctmgr", "-P", "show", "event", "All_Time")
    (d / "events.psv").write_text(events)
    _cli(db, "ingest", "events", "--no-refresh", str(d / "events.psv"))

    window = _script("rollup.sh", timeout=60).split()
    sreport = _slurm("sreport", "-n", "-P", "-T", "gres/gpu", "cluster", "AccountUtilizationByUser",
                     f"start={window[0]}", f"end={window[1]}", "-t", "seconds")
    return {"db": db, "ids": ids, "live1": live1, "live2": live2, "after_live1": after_live1, "mark1": mark1,
            "sacct": sacct, "events": events, "sreport": sreport}


# ---------------------------------------------------------------- real Slurm tests

@pytest.mark.slurm
@pytest.mark.slow
def test_states_of_the_job_mix(ingested):
    db, ids = ingested["db"], ingested["ids"]
    for name, want in EXPECTED_STATES.items():
        got = [r[0] for r in _query(db, "SELECT state FROM jobs WHERE job_id = ? ORDER BY submit, state",
                                    [ids[name]])]
        assert sorted(got) == sorted(want), name
    sweep = _query(db, "SELECT array_task_id, state, exit_code, gpu_type FROM jobs WHERE array_job_id = ? "
                       "ORDER BY 1", [int(ids["sweep"])])
    assert sweep == [(0, "COMPLETED", 0, "h100"), (1, "COMPLETED", 0, "h100"), (2, "FAILED", 1, "h100"),
                     (3, "COMPLETED", 0, "h100")]
    row = dict(zip(["exit_code", "gpu_type", "req_gpus", "ngpus"],
                   _query(db, "SELECT exit_code, gpu_type, req_gpus, ngpus FROM jobs WHERE job_id = ?",
                          [ids["oom-eval"]])[0]))
    assert row == {"exit_code": 3, "gpu_type": "a100", "req_gpus": 1, "ngpus": 1}  # untyped request, typed alloc
    by = _query(db, "SELECT cancelled_by_uid FROM jobs WHERE job_id = ?", [ids["cancel-run"]])[0][0]
    assert by == pwd.getpwnam("carol").pw_uid
    limit, elapsed = _query(db, "SELECT timelimit_s, elapsed_s FROM jobs WHERE job_id = ?", [ids["timeout"]])[0]
    assert limit == 60 and elapsed >= 60
    # never ran: no GPUs, no placement, but the request is kept
    for name, req in (("cancel-pend", 4), ("impossible", 1)):          # `impossible` got no id from sbatch
        ngpus, req_gpus, nodes = _query(db, "SELECT ngpus, req_gpus, (SELECT count(*) FROM job_nodes n "
                                            "WHERE n.job_uid = j.job_uid) FROM jobs j "
                                            "WHERE job_id = ? OR (? IS NULL AND job_name = 'impossible')",
                                        [ids.get(name), ids.get(name)])[0]
        assert (ngpus, req_gpus, nodes) == (0, req, 0), name
    assert _query(db, "SELECT state, timelimit_s FROM jobs WHERE job_name = 'impossible'") == [("FAILED", None)]
    assert _query(db, "SELECT qos, account, user FROM jobs WHERE job_id = ?", [ids["prio"]]) == \
        [("high", "vision", "bob")]


@pytest.mark.slurm
@pytest.mark.slow
def test_placements_match_sacct_nodelists(ingested):
    db, ids = ingested["db"], ingested["ids"]
    placed = {}
    for raw, submit, node, gpus in _query(db, "SELECT job_id_raw, strftime(submit, '%Y-%m-%dT%H:%M:%S'), "
                                              "node, gpus_on_node FROM job_nodes"):
        placed.setdefault((raw, submit), {})[node] = gpus
    for rec in ingested["sacct"]:
        key = (rec["JobIDRaw"], rec["Submit"])
        nodes = _hostnames(rec["NodeList"])
        assert set(placed.get(key, {})) == nodes, key
        if nodes:
            assert sum(placed[key].values()) == _gpus(rec["AllocTRES"]), key
    ddp = _query(db, "SELECT node, gpus_on_node FROM job_nodes JOIN jobs USING (job_uid) WHERE job_id = ? "
                     "ORDER BY node", [ids["ddp"]])
    assert ddp == [("gpu01", 2), ("gpu02", 2)]
    assert _query(db, "SELECT DISTINCT node FROM job_nodes JOIN jobs USING (job_uid) WHERE job_id = ?",
                  [ids["nodefail"]]) == [("gpu02",)]


@pytest.mark.slurm
@pytest.mark.slow
def test_gpu_hours_per_account_equal_sacct_and_sreport(ingested):
    db = ingested["db"]
    expected: dict[str, int] = {}
    for rec in ingested["sacct"]:
        expected[rec["Account"]] = expected.get(rec["Account"], 0) + int(rec["ElapsedRaw"]) * _gpus(rec["AllocTRES"])
    got = dict(_query(db, "SELECT account, sum(elapsed_s * ngpus)::BIGINT FROM jobs GROUP BY account"))
    assert got == expected
    assert expected["infra"] >= 60                       # the TIMEOUT job alone held an h100 for a minute
    # start to end includes the 4 s `suspend` was suspended: sacct's Elapsed does not, sreport does
    held = _held_gpu_seconds(ingested["sacct"])
    assert held["ml"] - expected["ml"] >= 3
    by_times = dict(_query(db, 'SELECT account, sum(coalesce(epoch("end") - epoch(start), 0) * ngpus)::BIGINT '
                               "FROM jobs GROUP BY account"))
    assert by_times == held
    assert len(ingested["sacct"]) == _query(db, "SELECT count(*) FROM jobs")[0][0]
    # slurmdbd's own rollup, per account (rows with an empty user), GPU-seconds
    assert by_times == _sreport_accounts(ingested, by_times)
    hours = dict(_query(db, "SELECT account, round(sum(elapsed_s * ngpus) / 3600, 6) FROM jobs GROUP BY account"))
    assert hours == {a: round(s / 3600, 6) for a, s in expected.items()}


def _sreport_accounts(ingested: dict, accounts) -> dict[str, int]:
    """sreport's GPU-seconds per account (the rows with an empty user), for ``accounts``."""
    sreport = {f[1]: int(f[5]) for f in (ln.split("|") for ln in ingested["sreport"].splitlines())
               if f[2] == "" and f[1] != "root"}
    return {a: sreport.get(a, 0) for a in accounts}


@pytest.mark.slurm
@pytest.mark.slow
def test_a_suspended_job_holds_its_gpus_in_utilization_as_in_sreport(ingested, tmp_path):
    """`scontrol suspend` leaves a job's GPUs allocated (on Slurm 22.05 a job asking for them pends for Resources
    meanwhile) and sreport counts them as Allocated; the occupancy timeline, which utilization and chargeback
    read, counts the job from start to end as sreport does, not sacct's Elapsed."""
    db = tmp_path / "warehouse.duckdb"
    shutil.copy(ingested["db"], db)
    _cli(db, "refresh")
    suspended = next(r for r in ingested["sacct"] if r["JobIDRaw"] == ingested["ids"]["suspend"])
    assert _seconds(suspended["Suspended"]) >= 3, suspended
    from ingest import warehouse
    from models.metrics import timeline
    con = warehouse.connect(db, read_only=True)
    try:
        per_job = timeline.job_gpu_seconds(con)
        accounts = con.sql("SELECT job_uid, account FROM jobs").pl()
    finally:
        con.close()
    got = {a: round(s) for a, s in per_job.join(accounts, on="job_uid").group_by("account")
           .agg(pl.col("gpu_seconds").sum()).iter_rows()}
    held = _held_gpu_seconds(ingested["sacct"])
    assert got == {a: s for a, s in held.items() if s}
    assert got == _sreport_accounts(ingested, got)


@pytest.mark.slurm
@pytest.mark.slow
def test_sacct_json_loads_the_same_jobs_as_the_parsable_export(ingested, tmp_path):
    """The same accounting as `sacct --json` (this Slurm's own JSON, not a capture) loads the same jobs, field
    by field, as `ingest sacct --live` loaded from --parsable2."""
    out = _slurm("sacct", "--json", "--allusers", "--duplicates", "--starttime", "2020-01-01T00:00:00",
                 "--endtime", "now")
    (tmp_path / "jobs.json").write_text(out)
    db = tmp_path / "json.duckdb"
    err = _cli(db, "ingest", "sacct", str(tmp_path / "jobs.json"), "--no-refresh")
    assert "rejected 0" in err and "job records" in err, err
    cols = ("job_id, job_id_raw, cluster, state, submit, eligible, start, \"end\", elapsed_s, timelimit_s, ngpus, "
            "req_gpus, gpu_type, nnodes, ncpus, account, \"user\", qos, partition, nodelist, exit_code, "
            "array_job_id, array_task_id, job_name")
    want = _query(ingested["db"], f"SELECT {cols} FROM jobs ORDER BY job_id_raw, submit")
    got = _query(db, f"SELECT {cols} FROM jobs ORDER BY job_id_raw, submit")
    assert len(got) == len(want) > 10
    names = [c.strip().strip('"') for c in cols.split(",")]
    diffs = [(w[1], w[3], n, a, b) for w, g in zip(want, got) for n, a, b in zip(names, w, g) if a != b]
    # Slurm 22.05's JSON prints a FAILED job's exit code as SUCCESS/0 (sacct: 3:0): loaded as unknown, not as 0
    lost = [d for d in diffs if d[1] == "FAILED" and d[2] == "exit_code" and d[3] and d[4] is None]
    assert [d for d in diffs if d not in lost] == [] and len(lost) == 3
    assert _query(db, "SELECT count(*) FROM jobs WHERE nullif(extra->>'reservation', '') IS NOT NULL")[0][0] == 0


@pytest.mark.slurm
@pytest.mark.slow
def test_sacct_all_fields_loads_the_same_jobs_as_the_live_export(ingested, tmp_path):
    """`sacct --parsable --format ALL` of this Slurm (every field it has, whatever its version adds) loads the
    same jobs, field by field, as `ingest sacct --live` loaded, and rejects nothing."""
    out = _slurm("sacct", "--allusers", "--duplicates", "--parsable", "--format", "ALL", "--starttime",
                 "2020-01-01T00:00:00", "--endtime", "now")
    (tmp_path / "all.psv").write_text(out)
    db = tmp_path / "all.duckdb"
    err = _cli(db, "ingest", "sacct", str(tmp_path / "all.psv"), "--no-refresh")
    assert "rejected 0" in err and "1 header line" in err, err
    cols = ("job_id, job_id_raw, cluster, state, submit, eligible, start, \"end\", elapsed_s, timelimit_s, ngpus, "
            "req_gpus, gpu_type, nnodes, ncpus, account, \"user\", qos, partition, nodelist, exit_code, job_name")
    want = _query(ingested["db"], f"SELECT {cols} FROM jobs ORDER BY job_id_raw, submit")
    assert _query(db, f"SELECT {cols} FROM jobs ORDER BY job_id_raw, submit") == want and len(want) > 10


@pytest.mark.slurm
@pytest.mark.slow
def test_live_watermark_rereads_with_overlap_and_updates_finished_job(ingested):
    db, late = ingested["db"], ingested["ids"]["late"]
    assert ingested["after_live1"][late][0] == "RUNNING" and ingested["after_live1"][late][1] is None
    runs = _query(db, "SELECT input_name, lines_read, loaded, skipped, rejected, inserted, updated, unchanged, "
                      "status FROM ingest_runs WHERE source = 'sacct-live' ORDER BY run_id")
    assert len(runs) == 2
    for _, read, loaded, skipped, rejected, *_rest, status in runs:
        assert status == "ok" and rejected == 0 and read == loaded + skipped + rejected
    n = len(ingested["sacct"])
    assert runs[0][5:8] == (n, 0, 0)
    assert runs[1][5:8] == (0, 1, n - 1)                 # only `late` changed: RUNNING -> COMPLETED
    since = (ingested["mark1"] - LIVE_OVERLAP).strftime("%Y-%m-%dT%H:%M:%S")
    assert f"--starttime {since}" in runs[1][0]
    state, end, elapsed = _query(db, 'SELECT state, "end", elapsed_s FROM jobs WHERE job_id = ?', [late])[0]
    rec = next(r for r in ingested["sacct"] if r["JobID"] == late)
    assert (state, elapsed) == ("COMPLETED", int(rec["ElapsedRaw"])) and end is not None
    mark2 = _query(db, "SELECT value FROM watermarks WHERE source = 'sacct-live'")[0][0]
    assert mark2 > ingested["mark1"]


@pytest.mark.slurm
@pytest.mark.slow
def test_nodes_inventory_and_states_from_scontrol(ingested):
    db = ingested["db"]
    nodes = _query(db, "SELECT node, partitions, gpu_type, gpus, cpus, mem_bytes FROM nodes "
                       "WHERE valid_to IS NULL ORDER BY node")
    assert [(n, set(p.split(",")), t, g, c, m) for n, p, t, g, c, m in nodes] == [
        ("gpu01", {"a100", "debug"}, "a100", 4, 32, 256000 * 2**20),
        ("gpu02", {"a100", "debug"}, "a100", 4, 32, 256000 * 2**20),
        ("gpu03", {"h100", "debug"}, "h100", 4, 32, 256000 * 2**20)]
    snaps = _query(db, "SELECT DISTINCT observed_at FROM node_states ORDER BY 1")
    assert len(snaps) == 2
    mid = {n: (s, g) for n, s, g in _query(db, "SELECT node, state, gpus_alloc FROM node_states "
                                               "WHERE observed_at = ?", [snaps[0][0]])}
    assert mid["gpu02"] == ("DOWN", 0) and mid["gpu03"] == ("DRAIN", 1) and mid["gpu01"][0] == "MIXED"
    final = _query(db, "SELECT DISTINCT state FROM node_states WHERE observed_at = ?", [snaps[1][0]])
    assert final == [("IDLE",)]


@pytest.mark.slurm
@pytest.mark.slow
def test_sinfo_json_of_the_midrun_moment_loads_as_its_scontrol_snapshot(ingested, tmp_path):
    """jobs.sh takes `sinfo --json` beside `scontrol show node -o` while gpu02 is DOWN and gpu03 drains under a
    job: this Slurm's JSON loads the same node states, reasons and allocated GPUs."""
    midrun = STATE / "out" / "midrun"
    as_of = _captured_at(Path(f"{midrun / 'scontrol-show-node-o-midrun.txt'}.cmd"))   # the snapshot's time
    db = tmp_path / "json.duckdb"
    err = _cli(db, "ingest", "nodes", "--no-refresh", "--cluster", "glcluster", "--as-of", as_of,
               str(midrun / "sinfo-json-midrun.json"))
    assert "read 3 node records: loaded 3" in err and "rejected 0" in err, err
    sql = "SELECT node, state, state_raw, reason, gpus_alloc FROM node_states WHERE observed_at = ? ORDER BY node"
    first = _query(ingested["db"], "SELECT min(observed_at) FROM node_states")[0][0]
    got = _query(db, sql, [first])
    assert got == _query(ingested["db"], sql, [first]) and len(got) == 3


@pytest.mark.slurm
@pytest.mark.slow
def test_node_events_from_sacctmgr(ingested):
    db, ids = ingested["db"], ingested["ids"]
    raw = {}
    for line in ingested["events"].splitlines()[1:]:
        _cluster, node, start, end, state, reason, _user = line.split("|")
        if node:
            raw[node] = (state, start, end, reason)
    got = {n: (s, a.strftime("%Y-%m-%dT%H:%M:%S"), b.strftime("%Y-%m-%dT%H:%M:%S"), r)
           for n, s, a, b, r in _query(db, 'SELECT node, state, start, "end", reason FROM node_events')}
    assert got == raw
    assert got["gpu02"][0] == "DOWN" and got["gpu02"][3].startswith("gl-test: XID 79")
    assert got["gpu03"][0] == "DRAIN" and got["gpu03"][3] == "gl-test: ECC double-bit errors"
    # the DOWN event began when the job under it failed
    nodefail_end = _query(db, 'SELECT "end" FROM jobs WHERE job_id = ?', [ids["nodefail"]])[0][0]
    start = _query(db, "SELECT start FROM node_events WHERE node = 'gpu02'")[0][0]
    assert abs((start - nodefail_end).total_seconds()) <= 2
    read, loaded, skipped, rejected = _query(db, "SELECT lines_read, loaded, skipped, rejected FROM ingest_runs "
                                                 "WHERE source = 'events'")[0]
    assert read == loaded + skipped + rejected and rejected == 0 and loaded == 2


# ---------------------------------------------------------------- preemption, a reservation, pending reasons

@pytest.fixture(scope="module")
def waiting(ingested, tmp_path_factory):
    """tests/slurm/waiting.sh after the job mix (its figures are taken already), with `ingest squeue --live` and
    `ingest reservations --live` every ~1.5 s while it runs; then sacct, nodes, governance and a refresh into a
    warehouse of its own."""
    from waiting_fixtures import GOVERNANCE
    d = tmp_path_factory.mktemp("slurm-waiting")
    db = d / "warehouse.duckdb"
    t0 = time.monotonic()
    proc = subprocess.Popen([str(SLURM_DIR / "waiting.sh")], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        while proc.poll() is None:
            _cli(db, "ingest", "squeue", "--live", "--no-refresh")
            _cli(db, "ingest", "reservations", "--live", "--no-refresh")
            time.sleep(1.5)
            assert time.monotonic() - t0 < 150, "waiting.sh ran for more than 150 s"
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.communicate()[0]
    assert proc.returncode == 0, f"tests/slurm/waiting.sh exited {proc.returncode}:\n{out[-3000:]}"
    ids = dict(line.split() for line in (STATE / "jobs" / "waiting-jobids").read_text().splitlines())
    _cli(db, "ingest", "sacct", "--live", "--no-refresh")
    (d / "nodes.txt").write_text(_slurm("scontrol", "show", "node"))
    _cli(db, "ingest", "nodes", "--no-refresh", "--as-of", "2020-01-01T00:00:00Z", str(d / "nodes.txt"))
    _cli(db, "ingest", "reservations", "--live", "--no-refresh")
    (d / "gov.toml").write_text(GOVERNANCE)
    _cli(db, "ingest", "governance", "--no-refresh", str(d / "gov.toml"))
    _cli(db, "refresh")
    fields = ["JobIDRaw", "JobName", "State", "ElapsedRaw", "AllocTRES", "Reservation", "Start", "End"]
    recs = [dict(zip(fields, ln.split("|"))) for ln in _slurm(
        "sacct", "--allusers", "--duplicates", "--allocations", "--parsable2", "--noheader", "--starttime",
        "2020-01-01T00:00:00", "--endtime", "now", "--format", ",".join(fields)).splitlines() if ln]
    print(f"\nreal Slurm: waiting mix {time.monotonic() - t0:.1f} s")
    return {"db": db, "ids": ids, "sacct": recs}


@pytest.mark.slurm
@pytest.mark.slow
def test_preempted_job_is_attributed_to_victim_and_preemptor(waiting):
    from ingest import warehouse
    from models.metrics import preemption
    ids, victim = waiting["ids"], waiting["ids"]["victim"]
    recs = [r for r in waiting["sacct"] if r["JobIDRaw"] == victim]
    assert sorted(r["State"] for r in recs) == ["COMPLETED", "PREEMPTED"]
    pre = next(r for r in recs if r["State"] == "PREEMPTED")
    con = warehouse.connect(waiting["db"], read_only=True)
    try:
        v = preemption.victims(con).filter(pl.col("job_id") == victim).to_dicts()
        assert len(v) == 1
        assert (v[0]["team"], v[0]["qos"], v[0]["preemptor_job_id"], v[0]["preemptor_team"],
                v[0]["preemptor_qos"]) == ("ml", "scavenger", ids["preemptor"], "vision", "high")
        assert round(v[0]["gpu_h"] * 3600) == int(pre["ElapsedRaw"]) * _gpus(pre["AllocTRES"])
        ml = preemption.by_victim(con).filter(pl.col("team") == "ml").row(0, named=True)
        assert ml["requeues"] >= 1 and ml["preempted_jobs"] == 1        # jobs.sh's `requeue` is infra's
    finally:
        con.close()


@pytest.mark.slurm
@pytest.mark.slow
def test_reservation_owner_and_reserved_idle_in_the_chargeback(waiting):
    from ingest import warehouse
    from models.metrics import chargeback, reservations
    inside = [r for r in waiting["sacct"] if r["JobName"] in ("inresv", "outlast")]
    assert [r["Reservation"] for r in inside] == ["gl-resv", "gl-resv"]
    con = warehouse.connect(waiting["db"], read_only=True)
    try:
        # scontrol's listing names no cluster: filed under the controller's ClusterName, as sacctmgr's row, even
        # when the live ingest ran before the warehouse knew any cluster (it once read "default": two rows)
        assert con.sql("SELECT cluster FROM reservations WHERE name = 'gl-resv'").fetchall() == [("glcluster",)]
        r = reservations.report(con).filter(pl.col("name") == "gl-resv").row(0, named=True)
        span = (r["end"] - r["start"]).total_seconds()
        assert (r["team"], r["owner_account"], r["owner_user"], r["gpus"], r["gpu_type"]) == \
            ("vision", "vision", "carol", 4, "h100") and 29 <= span <= 31
        # `outlast` runs up to ~30 s past the end (the controller's timer): only its part inside counts as used
        used = sum(min(int(x["ElapsedRaw"]), (r["end"] - _utc(x["Start"])).total_seconds())
                   * _gpus(x["AllocTRES"]) for x in inside)
        assert round(r["used_gpu_h"] * 3600) == used and round(r["reserved_gpu_h"] * 3600) == 4 * span
        assert round(r["reserved_idle_gpu_h"] * 3600) == 4 * span - used
        st = chargeback.compute(con, f"{r['start']:%Y-%m}")
        line = st.lines.filter((pl.col("kind") == chargeback.RESERVED_IDLE)
                               & (pl.col("team") == "vision")).row(0, named=True)
        assert round(float(line["gpu_hours"]) * 3600) == 4 * span - used and line["total"] > 0
        assert st.total_row["difference"] == 0
    finally:
        con.close()


@pytest.mark.slurm
@pytest.mark.slow
def test_pending_reasons_from_real_squeue_snapshots(waiting):
    from ingest import warehouse
    from models.metrics import pending
    con = warehouse.connect(waiting["db"], read_only=True)
    try:
        runs = con.sql("SELECT lines_read, loaded, skipped, rejected FROM ingest_runs WHERE source = 'squeue'").fetchall()
        assert len(runs) >= 5 and all(r == l + s and j == 0 for r, l, s, j in runs)
        seen = set(con.sql("SELECT job_id, reason FROM squeue_snapshots WHERE state = 'PENDING'").fetchall())
        assert (waiting["ids"]["waitres"], "Resources") in seen and (waiting["ids"]["dep"], "Dependency") in seen
        r = pending.by_reason(con).filter(pl.col("source") == "squeue")
        got = {(x["team"], x["reason"]) for x in r.to_dicts() if x["wait_gpu_h"] > 0}
        assert ("vision", "Resources") in got and ("ml", "Dependency") in got
    finally:
        con.close()


@pytest.mark.slurm
@pytest.mark.slow
def test_a_job_outlasting_its_reservation_starts_and_is_killed_at_its_end_as_the_simulator_replays_it(waiting):
    """Slurm 22.05 starts `outlast` (--time=5) in the 30-s reservation gl-resv and kills it (TIMEOUT) when gl-resv
    ends, within the controller's 30-s timer (ResvOverRun 0): the rule models/simulation applies. Replayed from the
    warehouse, the job starts when it did and ends at the reservation's end."""
    from ingest import warehouse
    from models.simulation import whatif
    from models.simulation.simulate import Policy
    rec = next(r for r in waiting["sacct"] if r["JobName"] == "outlast")
    con = warehouse.connect(waiting["db"], read_only=True)
    try:
        start, end = con.sql("SELECT start, \"end\" FROM reservations WHERE name = 'gl-resv'").fetchall()[0]
        uid = con.execute("SELECT job_uid FROM jobs WHERE job_id = ?", [waiting["ids"]["outlast"]]).fetchall()[0][0]
        inp = whatif.load_inputs(con, f"{start - dt.timedelta(minutes=10):%Y-%m-%dT%H:%M:%S}",
                                 f"{end + dt.timedelta(minutes=10):%Y-%m-%dT%H:%M:%S}")
    finally:
        con.close()
    assert rec["State"] == "TIMEOUT" and rec["Reservation"] == "gl-resv"
    assert start <= _utc(rec["Start"]) < end and 0 <= (_utc(rec["End"]) - end).total_seconds() <= 45
    assert int(rec["ElapsedRaw"]) < 300                                      # killed well before its limit
    _, out = whatif.replay(inp, Policy.parse("fifo-backfill", bf_interval_s=0))
    assert out.filter(pl.col("reservation") == "gl-resv").height == 2           # inresv and outlast
    killed = out.filter(pl.col("job_uid") == uid).row(0, named=True)
    end_s = (end - inp.t0).total_seconds()
    assert killed["end_s"] == pytest.approx(end_s) and killed["start_s"] < end_s


@pytest.mark.slurm
def test_a_live_listing_without_a_cluster_takes_the_controller_s_cluster_name(ingested, monkeypatch):
    """`scontrol show reservation` and `scontrol show job` name no cluster: their live ingests ask `scontrol show
    config` (ClusterName), and fall back to the warehouse's only cluster when scontrol cannot answer."""
    from ingest import inputs
    monkeypatch.setenv("SLURM_CONF", str(STATE / "etc" / "slurm.conf"))
    monkeypatch.setenv("PATH", PATH)
    assert inputs.slurm_cluster_name() == "glcluster"
    monkeypatch.setenv("PATH", "/nonexistent")
    assert inputs.slurm_cluster_name() is None


# ---------------------------------------------------------------- the captured fixtures, without Slurm

def _fixture_gpu_seconds(run_cli, con, name: str) -> dict[str, int]:
    code, _, err = run_cli("ingest", "sacct", "--no-refresh", str(REAL / name))
    assert code == 0, err
    return dict(con.execute("SELECT account, sum(elapsed_s * ngpus)::BIGINT FROM jobs GROUP BY account").fetchall())


def test_captured_sacct_agrees_with_captured_sreport(run_cli, con):
    got = _fixture_gpu_seconds(run_cli, con, "sacct-allocations.psv")
    rows = [ln.split("|") for ln in (REAL / "sreport-gpu-account-user-seconds.psv").read_text().splitlines()
            if ln.startswith("glcluster|")]
    sreport = {r[1]: int(r[5]) for r in rows if r[2] == "" and r[1] not in ("root", "research")}
    assert got == sreport
    total = next(ln.split("|") for ln in (REAL / "sreport-gpu-utilization-seconds.psv").read_text().splitlines()
                 if ln.startswith("glcluster|"))
    assert sum(got.values()) == int(total[2])            # Allocated


def test_captured_headerless_and_berlin_outputs_are_the_same_jobs(run_cli, con):
    _fixture_gpu_seconds(run_cli, con, "sacct-allocations.psv")
    code, _, err = run_cli("ingest", "sacct", "--no-refresh", str(REAL / "sacct-allocations-xdmod-noheader.psv"))
    assert code == 0 and "new 0, updated 0" in err and "rejected 0" in err, err
    code, _, err = run_cli("ingest", "sacct", "--no-refresh", "--tz", "Europe/Berlin",
                           str(REAL / "sacct-allocations-berlin.psv"))
    assert code == 0 and "new 0, updated 0" in err and "rejected 0" in err, err


def test_captured_all_fields_output_loads_every_allocation(run_cli, con):
    """`sacct --parsable --format ALL` of Slurm 22.05 (109 fields, ResvCPU and ResvCPURAW among them, a trailing
    `|`, steps included; the `impossible` job's TimelimitRaw is Partition_Limit): every allocation record loads
    with the GPU-seconds its own line says (ElapsedRaw x gres/gpu), every step is skipped, nothing is rejected."""
    path = REAL / "sacct-all-fields.psv"
    code, _, err = run_cli("ingest", "sacct", "--no-refresh", str(path))
    assert code == 0 and "rejected 0" in err and "note:" not in err, err
    lines = path.read_text().splitlines()
    head = lines[0].split("|")
    rows = [dict(zip(head, ln.split("|"))) for ln in lines[1:]]
    allocations = [r for r in rows if "." not in r["JobID"]]
    want: dict[str, int] = {}
    for r in allocations:
        want[r["Account"]] = want.get(r["Account"], 0) + int(r["ElapsedRaw"]) * _gpus(r["AllocTRES"])
    got = dict(con.execute("SELECT account, sum(elapsed_s * ngpus)::BIGINT FROM jobs GROUP BY account").fetchall())
    assert got == want and len(allocations) == 16 and len(rows) - len(allocations) > 20
    assert con.execute("SELECT count(*) FROM jobs").fetchall()[0][0] == len(allocations)
    assert con.execute("SELECT timelimit_s, timelimit_raw FROM jobs WHERE job_name = 'impossible'").fetchall() == [
        (None, "Partition_Limit")]
    assert con.execute("SELECT extra->>'resvcpuraw' FROM jobs WHERE job_name = 'late'").fetchall()[0][0] is not None


def test_captured_midrun_snapshot_and_events(run_cli, con):
    snap = REAL / "scontrol-show-node-o-midrun.txt"
    code, _, err = run_cli("ingest", "nodes", "--no-refresh", "--as-of", _captured_at(Path(f"{snap}.cmd")),
                           str(snap))
    assert code == 1 and "--cluster" in err     # scontrol output names no cluster and none is known yet
    code, _, err = run_cli("ingest", "nodes", "--no-refresh", "--as-of", _captured_at(Path(f"{snap}.cmd")),
                           "--cluster", "glcluster", str(snap))
    assert code == 0, err
    states = dict(con.execute("SELECT node, state FROM node_states").fetchall())
    assert states == {"gpu01": "MIXED", "gpu02": "DOWN", "gpu03": "DRAIN"}
    code, _, err = run_cli("ingest", "events", "--no-refresh", str(REAL / "sacctmgr-event.psv"))
    assert code == 0, err
    assert sorted(con.execute("SELECT node, state FROM node_events").fetchall()) == [("gpu02", "DOWN"),
                                                                                      ("gpu03", "DRAIN")]


def test_captured_scontrol_and_sinfo_of_one_moment_agree(tmp_path):
    """The same mid-run moment seen by `scontrol show node -o` and by sinfo gives one inventory and one state."""
    import gpuledger
    from ingest import warehouse
    seen = []
    for name in ("scontrol-show-node-o-midrun.txt", "sinfo-gres-midrun.psv"):
        db = tmp_path / f"{name}.duckdb"
        at = _captured_at(REAL / f"{name}.cmd")
        assert gpuledger.main(["--db", str(db), "-q", "ingest", "nodes", "--no-refresh", "--as-of", at,
                               "--cluster", "glcluster", str(REAL / name)]) == 0
        con = warehouse.connect(db)
        seen.append((con.execute("SELECT node, string_split(partitions, ',').list_sort(), gpu_type, gpus, cpus, "
                                 "mem_bytes FROM nodes ORDER BY node").fetchall(),
                     con.execute("SELECT node, state, gpus_alloc, reason FROM node_states ORDER BY node").fetchall()))
        con.close()
    (inv_scontrol, st_scontrol), (inv_sinfo, st_sinfo) = seen
    assert inv_scontrol == inv_sinfo
    assert [r[:3] for r in st_scontrol] == [r[:3] for r in st_sinfo]
    # scontrol appends " [user@time]" to Reason, sinfo does not
    assert all((a or "").startswith(b or "") for (*_, a), (*_, b) in zip(st_scontrol, st_sinfo))
    assert [(n, s, g) for n, s, g, _ in st_sinfo] == [("gpu01", "MIXED", 2), ("gpu02", "DOWN", 0),
                                                        ("gpu03", "DRAIN", 1)]
