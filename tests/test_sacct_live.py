"""ingest/sacct_live.py: the live sacct read keeps what accounting learns late.

Without Slurm: sdiag's queue line and the job ids of a read, on real outputs (tests/fixtures/slurm_real). With the
real Slurm of tests/slurm (skipped, saying why, where it cannot run): a job whose end reached accounting before the
read's window is read by id, and the watermark waits while slurmctld holds records for slurmdbd (slurmdbd stopped
while a job runs to its end, then started again)."""
from __future__ import annotations

import csv
import datetime as dt
import os
import subprocess
import time
from pathlib import Path

import pytest

from ingest import sacct, sacct_live, warehouse
from ingest.errors import InputError
from test_service import _final, _sbatch, slurm  # noqa: F401 -- the module's Slurm, fresh, under the shared lock

REAL = Path(__file__).parent / "fixtures" / "slurm_real"
CLUSTER = "glcluster"


def test_dbd_queue_is_read_from_real_sdiag_outputs():
    assert sacct_live.dbd_queue(f"cat {REAL / 'sdiag.txt'}", None) == 0
    assert sacct_live.dbd_queue(f"cat {REAL / 'sdiag-slurmdbd-down.txt'}", None) == 5


def test_dbd_queue_unknown_is_an_error_naming_the_command():
    with pytest.raises(InputError, match=r"sacct-allocations.psv: no 'DBD Agent queue size' line in its output"):
        sacct_live.dbd_queue(f"cat {REAL / 'sacct-allocations.psv'}", None)
    with pytest.raises(InputError, match=r"^false: sdiag exited 1: no message$"):
        sacct_live.dbd_queue("false", None)
    with pytest.raises(InputError, match=r"sdiag not found on PATH"):
        sacct_live.dbd_queue("/nonexistent/sdiag", None)


def test_listed_ids_are_the_jobidraw_column_of_a_live_read():
    path = REAL / "sacct-allocations-xdmod-noheader.psv"
    with open(path, newline="") as f:
        want = {row[1] for row in csv.reader(f, delimiter="|")}
    assert len(want) > 10
    assert sacct_live._listed_ids(path.read_bytes()) == want


# ---------------------------------------------------------------- a real Slurm

def _live(db: Path, since: str | None = None) -> dict:
    con = warehouse.connect(db)
    try:
        return sacct_live.ingest_live(con, sacct.SacctOptions(cluster=CLUSTER), since=since, timeout_s=60)
    finally:
        con.close()


def _one(db: Path, sql: str, params=None):
    con = warehouse.connect(db, read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _mark(db: Path) -> dt.datetime | None:
    rows = _one(db, "SELECT value FROM watermarks WHERE source = 'sacct-live' AND cluster = ?", [CLUSTER])
    return rows[0][0] if rows else None


def _wait(what: str, cond, timeout: float, step: float = 0.3):
    deadline = time.monotonic() + timeout
    while not (got := cond()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(step)
    return got


def _sacct_end(job: str) -> dt.datetime:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "--format=End"], capture_output=True, text=True,
                         timeout=30, env=dict(os.environ, TZ="UTC")).stdout.split()
    return dt.datetime.fromisoformat(out[0])


@pytest.mark.slurm
@pytest.mark.slow
def test_real_slurm_an_open_job_the_window_leaves_out_is_read_by_id(slurm, tmp_path):   # noqa: F811
    db = tmp_path / "w.duckdb"
    job = _sbatch(slurm, "alice", "-A", "ml", "-p", "a100", "--gres=gpu:a100:1", "--wrap", "sleep 6")
    state = lambda: _one(db, "SELECT state, \"end\" FROM jobs WHERE job_id_raw = ?", [job])  # noqa: E731
    _wait(f"job {job} running in a live read", lambda: _live(db) and state() == [("RUNNING", None)], 60, 0.5)
    _wait(f"job {job} to end", lambda: _final(job), 60, 0.5)
    end = _sacct_end(job)
    # the watermark past the job's end: where it is when the end reached accounting after the window had moved on
    since = (end + dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S")
    _wait("a second after it", lambda: warehouse.utcnow() > end + dt.timedelta(seconds=2), 10)
    got = _live(db, since=since)
    assert got["dbd_queue"] == 0 and got["reread"] is not None
    assert got["reread"]["ids"] == [job] and got["reread"]["still_open"] == []
    assert (got["reread"]["updated"], got["reread"]["rejected"]) == (1, 0)
    assert state() == [("COMPLETED", end)]
    assert _live(db)["reread"] is None                       # nothing open is left out any more


def _dbd(state: Path, up: bool) -> None:
    pid_file = state / "run" / "slurmdbd.pid"
    if up:
        subprocess.run(["slurmdbd"], cwd=state, check=True, timeout=30)
        _wait("slurmdbd answering", lambda: subprocess.run(["sacctmgr", "-n", "show", "cluster"], capture_output=True,
                                                          timeout=30).returncode == 0, 60)
        return
    pid = int(pid_file.read_text())
    os.kill(pid, 15)
    _wait("slurmdbd to stop", lambda: not Path(f"/proc/{pid}").exists(), 30)


def _queue() -> int:
    return sacct_live.dbd_queue("sdiag", None)


@pytest.mark.slurm
@pytest.mark.slow
def test_real_slurm_the_watermark_waits_while_slurmctld_holds_records(slurm, tmp_path):   # noqa: F811
    db = tmp_path / "w.duckdb"
    _live(db)
    held = []
    try:
        for attempt in range(3):           # slurmctld hands its queue over seconds after slurmdbd is back: catch it
            mark = _mark(db)
            _dbd(slurm, up=False)
            job = _sbatch(slurm, "bob", "-A", "vision", "-p", "a100", "--gres=gpu:a100:2", "--wrap", "sleep 1")
            _wait(f"slurmctld to queue job {job}'s records for slurmdbd", lambda: _queue() > 0, 60)
            with pytest.raises(InputError, match="sacct exited"):
                _live(db)                  # accounting is down: the read fails and the watermark stays
            assert _mark(db) == mark
            _dbd(slurm, up=True)
            got = _live(db)
            if got["dbd_queue"]:
                held.append(got["dbd_queue"])
                assert _mark(db) == mark, "the watermark moved while slurmctld held records"
                assert any("slurmctld held" in n for n in got["notes"])
            _wait("slurmctld's queue to empty", lambda: _queue() == 0, 60)
            got = _live(db)
            assert got["dbd_queue"] == 0 and _mark(db) > mark
            assert _one(db, "SELECT state FROM jobs WHERE job_id_raw = ?", [job]) == [("COMPLETED",)]
            if held:
                break
    finally:
        if not (slurm / "run" / "slurmdbd.pid").exists() or not _alive(slurm / "run" / "slurmdbd.pid"):
            _dbd(slurm, up=True)
    print(f"\nslurmctld held {held} record(s) for slurmdbd at a read after its restart ({attempt + 1} attempt(s))")
    assert held, "no read after slurmdbd's restart found slurmctld's queue still full (3 attempts)"


def _alive(pid_file: Path) -> bool:
    try:
        return Path(f"/proc/{int(pid_file.read_text())}").exists()
    except (OSError, ValueError):
        return False


def _jobs(db: Path) -> list[tuple]:
    return _one(db, 'SELECT job_id_raw, submit, state, start, "end", elapsed_s, ngpus, nodelist FROM jobs '
                    'ORDER BY 1, 2')


def _lines_add_up(got: dict) -> None:
    for r in got["runs"]:
        assert r["read"] == r["loaded"] + r["skipped"] + r["rejected"] and r["rejected"] == 0, r


@pytest.mark.slurm
@pytest.mark.slow
def test_real_slurm_a_catch_up_in_windows_loads_what_one_read_does(slurm, tmp_path):   # noqa: F811
    whole = tmp_path / "whole.duckdb"
    got = _live(whole)                                         # the first read: all history at once
    assert got["windows"] == 1 and len(_jobs(whole)) >= 2       # the earlier tests' jobs
    first = min(r[1] for r in _jobs(whole))
    windows = tmp_path / "windows.duckdb"
    con = warehouse.connect(windows)
    try:       # from a minute before the first job, in windows of 10 s that double while quiet
        got = sacct_live.ingest_live(con, sacct.SacctOptions(cluster=CLUSTER), window_s=10,
                                     since=f"{first - dt.timedelta(minutes=1):%Y-%m-%dT%H:%M:%S}")
    finally:
        con.close()
    print(f"\n{got['windows']} windows, {len(got['runs'])} runs from {got['since']}")
    assert got["windows"] >= 4 and not got["more"] and got["error"] is None
    _lines_add_up(got)
    assert _jobs(windows) == _jobs(whole)
    assert _mark(windows) >= _mark(whole)


def _dbd_conf(state: Path, extra: str) -> Path:
    """A copy of the cluster's config directory whose slurmdbd.conf adds ``extra`` (slurmdbd reads the
    slurmdbd.conf beside $SLURM_CONF)."""
    etc = state / "etc-limited"
    etc.mkdir(exist_ok=True)
    for f in (state / "etc").iterdir():
        if f.is_file():
            (etc / f.name).write_bytes(f.read_bytes())
    conf = etc / "slurmdbd.conf"
    conf.write_text(conf.read_text() + extra + "\n")
    subprocess.run(["chown", "slurm:slurm", str(conf)], check=True)
    conf.chmod(0o600)
    return etc / "slurm.conf"


@pytest.mark.slurm
@pytest.mark.slow
def test_real_slurm_a_span_slurmdbd_refuses_is_read_in_shorter_windows(slurm, tmp_path):   # noqa: F811
    """slurmdbd's MaxQueryTimeRange (here 60 minutes) refuses a user's wider sacct: the read halves its window
    until slurmdbd answers, and loads what root's unlimited read does."""
    whole = tmp_path / "whole.duckdb"
    _live(whole)
    limited = _dbd_conf(slurm, "MaxQueryTimeRange=60")
    db = tmp_path / "w.duckdb"
    _dbd(slurm, up=False)
    try:
        subprocess.run(["slurmdbd"], cwd=slurm, check=True, timeout=30, env=dict(os.environ, SLURM_CONF=str(limited)))
        _wait("slurmdbd answering", lambda: subprocess.run(["sacctmgr", "-n", "show", "cluster"], capture_output=True,
                                                          timeout=30).returncode == 0, 60)
        as_alice = f"runuser -u alice -- env SLURM_CONF={slurm}/etc/slurm.conf sacct"
        refused = subprocess.run(as_alice.split() + ["-a", "-X", "-S", "now-3hours", "-E", "now"],
                                 capture_output=True, text=True, timeout=30)
        assert "Too wide of a date range in query" in refused.stderr       # the limit holds for alice
        con = warehouse.connect(db)
        try:
            got = sacct_live.ingest_live(con, sacct.SacctOptions(cluster=CLUSTER), sacct_cmd=as_alice,
                                         since=f"{warehouse.utcnow() - dt.timedelta(hours=3):%Y-%m-%dT%H:%M:%S}")
        finally:
            con.close()
    finally:
        _dbd(slurm, up=False)
        _dbd(slurm, up=True)
    print(f"\n{got['windows']} windows of at most 60 minutes over 3 hours")
    assert got["windows"] >= 4 and got["error"] is None and not got["more"]
    _lines_add_up(got)
    assert _jobs(db) == _jobs(whole)
