"""The collector service (models/service/, `gpuledger serve`): per-source backoff and source_status, /healthz and
/metrics, SIGTERM in a real process with its dashboard child; against a real Prometheus (stopped and restarted
mid-run, and scraping /metrics) and a real Slurm (a job submitted while the service runs; downtime and catch-up;
then the live sacct read of ingest/sacct_live.py on the same cluster: late ends read by id, the watermark held while
slurmctld queues records for slurmdbd, windows, a span slurmdbd refuses).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import prometheus_server
from conftest import ROOT
from dashboards.snapshot import Snapshot
from ingest import job_gpus, reservations, sacct, sacct_live, squeue, warehouse
from ingest.errors import InputError
from models.service import config, health, loop

GOVERNANCE = ROOT / "data" / "governance.example.toml"
SCONTROL = ROOT / "tests" / "fixtures" / "slurm_real" / "scontrol-show-node-o.txt"


def _config(tmp_path: Path, body: str, cycle: int = 1, backoff_max: int = 4) -> config.ServiceConfig:
    p = tmp_path / "gpuledger.toml"
    p.write_text(f'[service]\nwarehouse = "wh.duckdb"\ncycle = {cycle}\nbackoff_initial = 1\nbackoff_max = {backoff_max}\n'
                 f'lock_timeout = 30\n{body}', encoding="utf-8")
    return config.load(p)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""            # nothing listens (yet)


def _wait(what: str, cond, timeout: float, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Running:
    """A Collector looping in a thread of this process (signals are the subprocess test's business)."""

    def __init__(self, cfg: config.ServiceConfig):
        self.collector = loop.Collector(cfg)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.collector.run, args=(self.stop_event,), daemon=True)
        self.thread.start()

    def cycles(self) -> int:
        return self.collector.snapshot()["cycles"]

    def source(self, cluster: str, source: str) -> dict:
        return next(s for s in self.collector.snapshot()["sources"] if (s["cluster"], s["source"]) == (cluster, source))

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()


# ---------------------------------------------------------------- backoff, status, health (no external server)

def test_failing_sources_back_off_alone_and_are_recorded(tmp_path):
    gov = tmp_path / "governance.toml"
    gov.write_bytes(GOVERNANCE.read_bytes())
    cfg = _config(tmp_path, f'[governance]\npath = "{gov}"\ninterval = 1\n[[clusters]]\nname = "lab"\n'
                            '[clusters.sacct]\ncommand = "/nonexistent/sacct"\n'
                            '[clusters.nodes]\ncommand = "sh -c \'echo slurm_load_node: Unable to contact >&2; exit 3\'"\n'
                            # a second cluster whose inventory source works (a real scontrol capture)
                            f'[[clusters]]\nname = "lab2"\n[clusters.nodes]\ncommand = "cat {SCONTROL}"\n')
    c = loop.Collector(cfg)
    stop = threading.Event()
    waits = []
    for i in range(4):
        for st in c.states.values():
            st.next_due = 0.0                          # every source due: the backoff is read from the schedule
        if i == 2:
            gov.write_bytes(GOVERNANCE.read_bytes() + b"\n# edited\n")
        assert c.cycle(stop)                           # source failures are not cycle failures
        # between cycles the warehouse is closed: another process (a CLI report) opens it at once
        ro = i == 1 and subprocess.run([sys.executable, "-c", f"import duckdb; duckdb.connect({str(cfg.warehouse)!r}, "
                                                   "read_only=True).execute('SELECT 1')"], capture_output=True)
        assert not ro or ro.returncode == 0, ro.stderr
        con = warehouse.connect(cfg.warehouse, read_only=True)
        rows = {r[1]: r for r in con.execute("SELECT cluster, source, consecutive_failures, last_error, "
                                             "epoch(next_attempt - last_attempt), last_success, attempts "
                                             "FROM source_status WHERE cluster <> 'lab2'").fetchall()}
        lab2 = con.execute("SELECT consecutive_failures, attempts, last_success IS NOT NULL FROM source_status "
                           "WHERE cluster = 'lab2'").fetchall()
        con.close()
        assert lab2 == [(0, i + 1, True)]              # the other cluster's source goes on
        waits.append([round(rows[s][4]) for s in ("sacct", "nodes")])
        assert rows["sacct"][2] == rows["nodes"][2] == i + 1 and rows["sacct"][5] is None
        assert rows["sacct"][3] == "/nonexistent/sacct: sacct not found on PATH (is slurm-client installed?)"
        assert rows["nodes"][3] == "sh -c echo slurm_load_node: Unable to contact >&2; exit 3: exited 3: " \
                                   "slurm_load_node: Unable to contact"
        assert rows["governance"][0] == "*" and rows["governance"][2] == 0 and rows["governance"][6] == i + 1
    assert waits == [[1, 1], [2, 2], [4, 4], [4, 4]]          # 1 s doubling, capped at backoff_max
    con = warehouse.connect(cfg.warehouse, read_only=True)
    # the file is loaded again only when its content changed (cycle 3), never on an unchanged check
    assert con.execute("SELECT count(*) FROM ingest_runs WHERE source = 'governance'").fetchall() == [(2,)]
    # the statuses reached the dashboard's snapshot
    con.close()
    shown = Snapshot(cfg.warehouse).frame("SELECT cluster, source, consecutive_failures FROM source_status "
                                          "ORDER BY 1, 2")
    assert shown.rows() == [("*", "governance", 0), ("lab", "nodes", 4), ("lab", "sacct", 4), ("lab2", "nodes", 0)]
    assert Snapshot(cfg.warehouse).frame("SELECT DISTINCT cluster, node FROM nodes ORDER BY 2").rows() == \
        [("lab2", "gpu01"), ("lab2", "gpu02"), ("lab2", "gpu03")]

    snap = c.snapshot()
    code, body = health.status(snap)
    assert code == 200 and body["failing_sources"] == ["lab/nodes", "lab/sacct"] and body["cycles"] == 4
    text = health.metrics(snap)
    assert 'gpuledger_source_consecutive_failures{cluster="lab",source="sacct"} 4.0' in text
    assert 'gpuledger_source_up{cluster="*",source="governance"} 1.0' in text
    assert "gpuledger_source_complete_to_age_seconds{" not in text     # sacct never read; the others keep no mark
    assert 'gpuledger_source_lines_total{cluster="*",source="governance",outcome="loaded"} 56.0' in text   # 2 loads x 28 records (4 [[access]], 2 [[budgets]])
    assert "gpuledger_cycles_total 4.0" in text
    size = int(float(re.search(r"^gpuledger_warehouse_size_bytes (\S+)$", text, re.M).group(1)))
    assert size == os.path.getsize(cfg.warehouse) > 0
    assert not re.search(r'last_success_timestamp_seconds\{cluster="lab"', text)     # never succeeded: no series
    # a failed cycle (the warehouse unavailable), a stale last cycle: 503 with the reason
    assert health.status({**snap, "cycle_error": "wh.duckdb: warehouse is locked"})[1]["reason"] == \
        "last cycle failed: wh.duckdb: warehouse is locked"
    stale = health.status({**snap, "last_cycle_end": time.time() - 3600})
    assert stale[0] == 503 and stale[1]["reason"].startswith("the last cycle ended 3600 s ago (limit 63 s)")


def test_prometheus_window_catches_up_in_bounded_steps():
    opts = {"step": 60, "overlap": 300, "lookback": 3600, "max_window": 1800}
    now = dt.datetime(2026, 7, 14, 12, 0, 42)
    from models.service.sources import prometheus_window
    assert prometheus_window(None, now, opts) == (dt.datetime(2026, 7, 14, 11, 0), dt.datetime(2026, 7, 14, 11, 30))
    assert prometheus_window(dt.datetime(2026, 7, 14, 11, 0), now, opts) == \
        (dt.datetime(2026, 7, 14, 10, 55), dt.datetime(2026, 7, 14, 11, 30))      # max_window past the watermark
    assert prometheus_window(dt.datetime(2026, 7, 14, 11, 30), now, opts) == \
        (dt.datetime(2026, 7, 14, 11, 25), dt.datetime(2026, 7, 14, 12, 0))
    assert prometheus_window(dt.datetime(2026, 7, 14, 11, 55), now, opts) == \
        (dt.datetime(2026, 7, 14, 11, 50), dt.datetime(2026, 7, 14, 12, 0))


def _unix(t: dt.datetime) -> float:
    return t.replace(tzinfo=dt.timezone.utc).timestamp()


@settings(max_examples=60)
@given(step=st.sampled_from([15, 60, 300]), overlap=st.integers(0, 7200), lookback=st.integers(60, 86400),
       max_window=st.integers(1, 86400), downtime=st.integers(0, 86400), second=st.integers(0, 59))
def test_prometheus_windows_cover_every_step_after_any_downtime(step, overlap, lookback, max_window, downtime, second):
    """From any watermark, successive windows reach the present on the step grid with no hole, each advancing
    at most max_window (at least a step) past the watermark."""
    from models.service.sources import prometheus_window
    opts = {"step": step, "overlap": overlap, "lookback": lookback, "max_window": max_window}
    now = dt.datetime(2026, 7, 14, 12, 0, second)
    mark = now - dt.timedelta(seconds=downtime) if downtime else None
    for _ in range(86400 // 15 + 2):
        start, end = prometheus_window(mark, now, opts)
        assert _unix(start) % step == 0 and _unix(end) % step == 0 and start <= end
        if mark is not None:
            assert start <= mark                       # no hole between two pulls
            assert mark < end or (now - mark).total_seconds() < step
            assert (end - mark).total_seconds() <= max(step, max_window)
        mark = end
        if (now - end).total_seconds() < step:         # caught up: the last whole step is in
            break
    else:
        raise AssertionError("never caught up")


# ---------------------------------------------------------------- a real process, a real signal

def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _command_running(pid: int, word: str) -> list[int]:
    """Children of ``pid`` whose command line contains ``word``."""
    out = []
    for c in _children(pid):
        try:
            if word.encode() in Path(f"/proc/{c}/cmdline").read_bytes():
                out.append(c)
        except OSError:
            pass
    return out


def test_sigterm_finishes_the_collection_stops_the_dashboard_and_exits_0(tmp_path):
    health_port, dash_port = prometheus_server.free_port(), prometheus_server.free_port()
    # an inventory source that takes 2 s (a slow scontrol), collected back to back: SIGTERM lands inside it
    cfg = _config(tmp_path, f'[governance]\npath = "{GOVERNANCE}"\n[health]\nlisten = "127.0.0.1:{health_port}"\n'
                            f'[dashboard]\nport = {dash_port}\n[[clusters]]\nname = "lab"\n[clusters.nodes]\n'
                            f'interval = 1\ncommand = "sh -c \'sleep 2; cat {SCONTROL}\'"\n')
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, str(ROOT / "gpuledger.py"), "serve", "--config", str(cfg.path)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True)
    try:
        code, body = _wait("/healthz 200", lambda: (r := _get(f"http://127.0.0.1:{health_port}/healthz"))[0] == 200
                           and r, 60)
        assert json.loads(body)["status"] == "ok"
        _wait("the dashboard", lambda: _get(f"http://127.0.0.1:{dash_port}/_stcore/health")[0] == 200, 60)
        children = _children(proc.pid)
        assert children
        dash = [c for c in children if b"dashboards.launch" in Path(f"/proc/{c}/cmdline").read_bytes()]
        environ = Path(f"/proc/{dash[0]}/environ").read_bytes().split(b"\0")
        assert f"GPULEDGER_CONFIG={cfg.path.resolve()}".encode() in environ
        _wait("a collection in progress", lambda: _command_running(proc.pid, "sleep 2"), 30, 0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        err = proc.stderr.read()
        assert "signal 15: finishing the current step, then stopping" in err and "stopped after" in err
        assert not Path(f"/proc/{dash[0]}").exists(), "the dashboard child outlived the service"
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{health_port}/healthz", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    con = warehouse.connect(cfg.warehouse, lock_timeout=0)          # released: a writer gets it at once
    assert con.execute("SELECT count(*) FROM ingest_runs WHERE source = 'governance' AND status = 'ok'").fetchall() \
        == [(1,)]
    # the collection under way when the signal came finished and committed: every attempt is an ok run
    runs = con.execute("SELECT status, count(*) FROM ingest_runs WHERE source = 'nodes' GROUP BY 1").fetchall()
    status = con.execute("SELECT attempts, consecutive_failures FROM source_status WHERE source = 'nodes'").fetchall()
    con.close()
    assert runs == [("ok", status[0][0])] and status[0][1] == 0 and status[0][0] >= 2


# ---------------------------------------------------------------- a real Prometheus, stopped and restarted mid-run

def _prom_query(url: str, expr: str) -> list:
    q = urllib.parse.urlencode({"query": expr})
    code, body = _get(f"{url}/api/v1/query?{q}")
    return json.loads(body)["data"]["result"] if code == 200 else []


@pytest.mark.prometheus
def test_prometheus_outage_is_shown_then_the_gap_is_filled(tmp_path):
    prometheus_server.binaries()
    now = int(time.time())
    end = now - now % 60                      # readings once a minute over the hour before this minute
    minutes = 60
    devices = [(g, f'gpu="{g}",UUID="GPU-00{g}",Hostname="gpu01",modelName="NVIDIA A100-SXM4-80GB"') for g in (0, 1)]
    util = {(g, m): (7 * m + 31 * g) % 101 for g, _ in devices for m in range(minutes)}
    fams = {"DCGM_FI_DEV_GPU_UTIL": [(lab, [(end - 60 * (minutes - m), util[g, m]) for m in range(minutes)])
                                     for g, lab in devices]}
    health_port = prometheus_server.free_port()
    prom = prometheus_server.start(prometheus_server.openmetrics(fams), tmp_path / "prom",
                                   scrape=(f"127.0.0.1:{health_port}",), scrape_interval="1s")
    cfg = _config(tmp_path, f'[health]\nlisten = "127.0.0.1:{health_port}"\n[[clusters]]\nname = "lab"\n'
                            f'[clusters.prometheus]\nurl = "{prom.url}"\ninterval = 1\nlookback = "{minutes + 2}m"\n'
                            'max_window = "10m"\noverlap = "2m"\nretries = 0\ntimeout = 2\n'
                            'metrics = ["DCGM_FI_DEV_GPU_UTIL"]\n', backoff_max=2)
    run = Running(cfg)
    http = health.start(cfg.health_listen, run.collector.snapshot)
    try:
        _wait("a first pull", lambda: run.source("lab", "prometheus")["last_success"], 30, 0.05)
        prom.stop()                                      # mid-run: the hour is pulled in 10-minute windows
        st = run.source("lab", "prometheus")
        assert st["attempts"] - st["failures"] < 7, "the whole hour was pulled before the outage"
        _wait("the outage recorded", lambda: run.source("lab", "prometheus")["consecutive_failures"] >= 1, 30)
        assert "cannot reach Prometheus: connection refused" in run.source("lab", "prometheus")["last_error"]
        code, text = _get(f"http://127.0.0.1:{health_port}/metrics")
        assert code == 200 and 'gpuledger_source_up{cluster="lab",source="prometheus"} 0.0' in text
        assert _get(f"http://127.0.0.1:{health_port}/healthz")[0] == 200     # the service itself is fine

        def published_error():
            snap = Snapshot(cfg.warehouse)
            return snap.frame("SELECT last_error FROM source_status WHERE source = 'prometheus' "
                              "AND consecutive_failures > 0").rows()
        assert "connection refused" in _wait("the error on Data health's table", published_error, 30)[0][0]
        assert run.thread.is_alive()

        prom.restart()
        mark = dt.datetime.fromtimestamp(end, dt.timezone.utc).replace(tzinfo=None)

        def caught_up():
            rows = Snapshot(cfg.warehouse).frame("SELECT value FROM watermarks WHERE source = 'prometheus'").rows()
            return rows and rows[0][0] >= mark
        _wait("the catch-up to the present", caught_up, 60, 0.5)

        def complete_to():     # the watermark is what the source's data is complete to, on Data health and /metrics
            rows = Snapshot(cfg.warehouse).frame("SELECT complete_to FROM source_status "
                                                 "WHERE source = 'prometheus'").rows()
            return rows and rows[0][0] is not None and rows[0][0] >= mark
        _wait("the source complete to the present", complete_to, 30, 0.5)
        age = re.search(r'^gpuledger_source_complete_to_age_seconds\{cluster="lab",source="prometheus"\} (\S+)$',
                        _get(f"http://127.0.0.1:{health_port}/metrics")[1], re.M)
        assert age and 0 <= float(age.group(1)) < 600
        # the real Prometheus scraped /metrics: the failures counter reads back through its HTTP API
        series = _wait("gpuledger's series in Prometheus", lambda: _prom_query(
            prom.url, 'gpuledger_source_failures_total{cluster="lab",source="prometheus"}'), 30, 0.5)
        assert float(series[0]["value"][1]) >= 1
        assert _prom_query(prom.url, "gpuledger_cycles_total")
    finally:
        run.stop()
        http.shutdown()
        http.server_close()
        prom.stop()
    con = warehouse.connect(cfg.warehouse, read_only=True)
    got = con.execute("""SELECT gpu, count(*), count(DISTINCT ts), min(ts), max(ts), list(gpu_util ORDER BY ts)
                         FROM gpu_samples GROUP BY gpu ORDER BY gpu""").fetchall()
    fails = con.execute("SELECT failures FROM source_status WHERE source = 'prometheus'").fetchall()[0][0]
    con.close()
    first = dt.datetime.fromtimestamp(end - 60 * minutes, dt.timezone.utc).replace(tzinfo=None)
    for (g, _), (gpu, n, distinct, lo, hi, values) in zip(devices, got):
        # every minute of the hour once: nothing lost in the outage, nothing counted twice by the overlaps
        assert (gpu, n, distinct, lo, hi) == (str(g), minutes, minutes, first, mark - dt.timedelta(minutes=1))
        assert values == pytest.approx([util[g, m] / 100 for m in range(minutes)])
    assert fails >= 1


# ---------------------------------------------------------------- a real Slurm: a new job, then downtime and catch-up

@pytest.fixture(scope="module")
def slurm():
    """The cluster of tests/slurm/up.sh, fresh (empty accounting), under test_slurm_integration's lock."""
    from test_slurm_integration import PATH, SLURM_DIR, STATE, _env, _interrupt, _script, _take_turn, _why_unavailable
    why = _why_unavailable()
    if why:
        pytest.skip(why)
    STATE.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{STATE}.lock", "w") as lock:
        _take_turn(lock)
        mp = pytest.MonkeyPatch()
        default_term = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        if default_term:                    # a CI timeout's SIGTERM must still stop the daemons
            signal.signal(signal.SIGTERM, _interrupt)
        try:
            _script("up.sh", "--fresh", timeout=240)
            mp.setenv("SLURM_CONF", str(STATE / "etc" / "slurm.conf"))
            mp.setenv("PATH", PATH)
            yield STATE
        finally:
            mp.undo()
            subprocess.run([str(SLURM_DIR / "down.sh")], check=False, env=_env(), capture_output=True, timeout=120)
            if default_term:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _sbatch(state: Path, user: str, *args: str) -> str:
    """Submit as ``user`` (the harness' users have associations) from the shared job directory; the job id."""
    out = subprocess.run(["runuser", "-u", user, "--", "env", f"SLURM_CONF={state}/etc/slurm.conf", "sbatch",
                          "--parsable", "-o", f"{state}/jobs/%x-%j.out", "-t", "5", *args], cwd=state / "jobs",
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def _accounted(job_id: str) -> bool:
    """True once accounting offers the job to a read by time window, the read the service makes (`sacct
    --starttime/--endtime`). `sacct -j` returns a job seconds earlier: right after it ran, it showed the job
    COMPLETED with its eligible time still Unknown while window reads left it out (2026-12-06, 0.8-1.6 s idle;
    under load a window read 4 s after `-j` had the job still lacked it, and the service needed a third read)."""
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    out = subprocess.run(["sacct", "--allusers", "--duplicates", "--allocations", "--parsable2", "--noheader",
                          "--format=JobID", "--starttime", (now - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S"),
                          "--endtime", now.strftime("%Y-%m-%dT%H:%M:%S")], capture_output=True, text=True,
                         timeout=30, env=dict(os.environ, TZ="UTC")).stdout.split()
    return job_id in out


def _final(job_id: str) -> bool:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "--format=State"], capture_output=True,
                         text=True, timeout=30).stdout.split()
    return bool(out) and not {"PENDING", "RUNNING", "REQUEUED"} & set(out)


def _jobs(db: Path) -> tuple[list, int, list]:
    """(every job's key, state and GPU-seconds; their GPU-seconds in total from the occupancy timeline; the sacct
    runs' new/updated counts)."""
    from models.metrics import timeline
    con = warehouse.connect(db, read_only=True)
    try:
        jobs = con.execute("""SELECT job_id_raw, submit, state, elapsed_s, ngpus, elapsed_s * ngpus FROM jobs
                              ORDER BY 1, 2""").fetchall()
        gpu_s = timeline.job_gpu_seconds(con)["gpu_seconds"].sum()
        runs = con.execute("SELECT inserted, updated FROM ingest_runs WHERE source = 'sacct-live' AND status = 'ok' "
                           "ORDER BY run_id").fetchall()
        return jobs, gpu_s, runs
    finally:
        con.close()


def _marts_behind(db: Path) -> bool:
    """True when an ingest run is newer than the timeline mart's last refresh (`mart_state`)."""
    con = warehouse.connect(db, read_only=True)
    try:
        return con.execute("""SELECT (SELECT max(run_id) FROM ingest_runs WHERE status = 'ok')
                                     > (SELECT last_run_id FROM mart_state WHERE mart = 'timeline')""").fetchall()[0][0]
    finally:
        con.close()


def _reads_to_load(db: Path, job_id: str, since: dt.datetime) -> int:
    """Successful `sacct --live` reads that ended after ``since`` (UTC), up to and including the one that inserted
    the job: the warehouse's own run log, so a test process slowed by load cannot count a later read."""
    con = warehouse.connect(db, read_only=True)
    try:
        return con.execute("""SELECT count(*) FROM ingest_runs
                              WHERE source = 'sacct-live' AND status = 'ok' AND finished_at > ?
                                AND run_id <= (SELECT min(ingest_run_id) FROM jobs WHERE job_id = ?)""",
                           [since, job_id]).fetchall()[0][0]
    finally:
        con.close()


@pytest.mark.slurm
@pytest.mark.slow
def test_real_slurm_new_job_within_two_cycles_and_downtime_loses_nothing(slurm, tmp_path):
    cfg = _config(tmp_path, f'[[clusters]]\nname = "glcluster"\nslurm_conf = "{slurm}/etc/slurm.conf"\n'
                            '[clusters.sacct]\ninterval = 2\n[clusters.nodes]\ninterval = "1h"\n'
                            '[clusters.events]\ninterval = "1h"\n', cycle=2)
    run = Running(cfg)
    try:
        _wait("the first cycle", lambda: run.cycles() >= 1, 60)
        first = _sbatch(slurm, "alice", "-A", "ml", "-p", "a100", "--gres=gpu:a100:1", "--wrap", "sleep 1")
        # count from when accounting offers the job to a time-window read: slurmctld hands it to slurmdbd
        # asynchronously (seconds under load), and no read of the service can see it before; a read ending after
        # it still counts, though it may have started before. Counted from the run log after the stop: a poll here,
        # slowed by load, once saw a third read
        _wait(f"job {first} in accounting's time window", lambda: _accounted(first), 60, 0.2)
        accounted_at = warehouse.utcnow()

        def published():
            return Snapshot(cfg.warehouse).frame("SELECT state FROM jobs WHERE job_id = ?", [first]).rows()
        _wait(f"job {first} in the serving snapshot", published, 30, 0.1)
        t = run.collector.snapshot()["timings"]
        print(f"\nserve on the real Slurm: last cycle {t['cycle']:.2f} s (refresh {t['refresh']:.2f} s, publish "
              f"{t['publish']:.2f} s)")
        nodes = Snapshot(cfg.warehouse).frame("SELECT node, gpus FROM nodes ORDER BY node").rows()
        assert nodes == [("gpu01", 4), ("gpu02", 4), ("gpu03", 4)]       # the inventory source ran too
    finally:
        run.stop()
    reads = _reads_to_load(cfg.warehouse, first, accounted_at)
    print(f"{reads} sacct read(s) from accounting to the warehouse")
    assert 1 <= reads <= 2, f"job {first} took {reads} sacct reads to reach the warehouse after accounting had it"
    # after the stop: a cycle in progress at the stop may read once more, and the restarted service starts from
    # that read's status (taken before the stop, a read of the stopping service passed for one after the restart)
    read_before = run.source("glcluster", "sacct")["last_success"]
    # downtime: accounting the service has not seen (and the first job's end)
    more = [_sbatch(slurm, "bob", "-A", "vision", "-p", "a100", "--gres=gpu:a100:2", "--wrap", "sleep 2"),
            _sbatch(slurm, "dave", "-A", "infra", "-p", "h100", "--gres=gpu:h100:1", "--wrap", "exit 3")]
    for job in [first, *more]:
        _wait(f"job {job} to end", lambda job=job: _final(job), 60, 0.5)
    import gpuledger
    # restart: catch up from the watermark. A read of accounting by time window right after the jobs ended has
    # been seen to lack them although `sacct -j` had them final (the service's and a one-shot ingest's alike):
    # the next read, from the watermark less its overlap, must then bring them, and the one-shot ingest taken
    # after each restart is the reference; a job the service loses for good fails this test.
    for restarts in (1, 2, 3):
        run = Running(cfg)
        try:
            # a read that succeeded after the restart (one may fail and be retried under load: that is the
            # design), then the end of a cycle after it (its refresh); a failing read's error is in the message
            def read_again():
                st = run.source("glcluster", "sacct")
                return run.cycles() + 1 if st["last_success"] and st["last_success"] > read_before else None
            try:
                c1 = _wait("a successful sacct read after the restart", read_again, 60)
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {run.source('glcluster', 'sacct')['last_error']}") from None
            _wait("the end of that cycle", lambda: run.cycles() >= c1, 60)
        finally:
            run.stop()
        read_before = run.source("glcluster", "sacct")["last_success"]
        once = tmp_path / f"one-shot-{restarts}.duckdb"    # what one ingest of accounting now loads
        assert gpuledger.main(["--db", str(once), "-q", "ingest", "sacct", "--live", "--cluster", "glcluster"]) == 0
        alone, gpu_s_alone, _ = _jobs(once)
        served, gpu_s, runs = _jobs(cfg.warehouse)
        if served == alone and len(alone) == 3:
            break
    print(f"served = one-shot ingest after {restarts} restart(s)")
    if _marts_behind(cfg.warehouse):
        # a stop skips the rest of its cycle: a read that the stop let finish (it brought the jobs, seen in a
        # 3-worker make test) is in the warehouse and not yet in the marts, which say so; a start refreshes first
        run = Running(cfg)
        try:
            _wait("the first cycle after a start", lambda: run.cycles() >= 1, 60)
        finally:
            run.stop()
        served, gpu_s, runs = _jobs(cfg.warehouse)
    assert served == alone and gpu_s == gpu_s_alone, f"after {restarts} restarts: {served} != {alone}"
    assert {j[0] for j in served} >= {first, *more} and len(served) == 3
    assert [j[2] for j in served] == ["COMPLETED", "COMPLETED", "FAILED"]
    assert gpu_s == sum(j[5] for j in served) > 0
    # every job was inserted once over all the service's overlapping reads; re-reads were updates or no-ops
    assert sum(r[0] for r in runs) == len(served) and len(runs) >= 3


# ---------------------------------------------------------------- a real Slurm: the live sacct read (sacct_live.py)
# Here rather than in tests/test_sacct_live.py so that they share this module's cluster: a second module would wait for
# the Slurm lock and bring the cluster up again (50 s of a test worker in a clean-clone run).

SLURM_CLUSTER = "glcluster"


def _live(db: Path, since: str | None = None) -> dict:
    con = warehouse.connect(db)
    try:
        return sacct_live.ingest_live(con, sacct.SacctOptions(cluster=SLURM_CLUSTER), since=since, timeout_s=60)
    finally:
        con.close()


def _one(db: Path, sql: str, params=None):
    con = warehouse.connect(db, read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _mark(db: Path) -> dt.datetime | None:
    rows = _one(db, "SELECT value FROM watermarks WHERE source = 'sacct-live' AND cluster = ?", [SLURM_CLUSTER])
    return rows[0][0] if rows else None


def _sacct_end(job: str) -> dt.datetime:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "--format=End"], capture_output=True, text=True,
                         timeout=30, env=dict(os.environ, TZ="UTC")).stdout.split()
    return dt.datetime.fromisoformat(out[0])


@pytest.mark.slurm
@pytest.mark.slow
def test_real_slurm_an_open_job_the_window_leaves_out_is_read_by_id(slurm, tmp_path):
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
    # a job stored running that accounting no longer has (purged; here from an old export of another cluster's
    # life): read by id, still open, and said so in a note rather than dropped or ended at a guessed time
    lines = (ROOT / "tests" / "fixtures" / "slurm_real" / "sacct-allocations.psv").read_text().splitlines()
    gone = lines[1].split("|")
    gone[0] = gone[1] = "999999"
    gone[13], gone[14], gone[16] = "Unknown", "00:01:00", "RUNNING"
    con = warehouse.connect(db)
    try:
        sacct.ingest_bytes(con, "\n".join([lines[0], "|".join(gone)]).encode(), "old.psv",
                           sacct.SacctOptions(cluster=SLURM_CLUSTER))
    finally:
        con.close()
    got = _live(db)
    assert got["reread"]["ids"] == got["reread"]["still_open"] == ["999999"]
    assert "1 job(s) still open after their read by id (accounting has them open outside any time window, or no " \
           "longer has them): 999999" in got["live_notes"]


def test_real_slurm_the_gpus_a_running_job_holds_are_read_live(slurm, tmp_path):
    """`ingest job-gpus --live` while a 2-GPU job runs: two distinct devices of the node accounting placed it on,
    the indices `scontrol -d show job` prints for it (Slurm keeps them only while it remembers the job)."""
    db = tmp_path / "w.duckdb"
    job = _sbatch(slurm, "bob", "-A", "ml", "-p", "a100", "--gres=gpu:a100:2", "--wrap", "sleep 8")
    _wait(f"job {job} running in a live read", lambda: _live(db) and _one(
        db, "SELECT state FROM jobs WHERE job_id_raw = ?", [job]) == [("RUNNING",)], 60, 0.5)
    detail = subprocess.run(["scontrol", "-d", "show", "job", job], capture_output=True, text=True, timeout=30).stdout
    node, idx = re.search(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=gpu:a100:2\(IDX:([^)]*)\)", detail).groups()
    con = warehouse.connect(db)
    try:
        got = job_gpus.ingest_live(con, cluster=SLURM_CLUSTER)
        held = con.execute("""SELECT j.nodelist, g.node, g.gpu FROM job_gpu_indices g JOIN jobs j USING (job_uid)
                              WHERE j.job_id_raw = ? ORDER BY g.gpu""", [job]).fetchall()
    finally:
        con.close()
    assert got["loaded"] >= 1 and got["rejected"] == 0
    assert held == [(node, node, str(i)) for i in job_gpus.indices(idx)] and len(held) == 2


def test_job_gpus_are_collected_like_the_cli_loads_them(tmp_path):
    """`[clusters.job-gpus]` runs `ingest job-gpus` on what its command prints (the jobs loaded before)."""
    fx = ROOT / "tests" / "fixtures" / "slurm_shards"
    cfg = _config(tmp_path, '[[clusters]]\nname = "glcluster"\n'
                            f'[clusters.job-gpus]\ncommand = "cat {fx}/scontrol-show-job-d-o.txt"\n')
    con = warehouse.connect(cfg.warehouse)
    try:
        sacct.ingest_bytes(con, (fx / "sacct-allocations-gpu-map.psv").read_bytes(), "sacct.psv", sacct.SacctOptions())
    finally:
        con.close()
    assert loop.Collector(cfg).cycle(threading.Event())
    con = warehouse.connect(cfg.warehouse, read_only=True)
    try:
        status = con.execute("SELECT source, consecutive_failures, lines_loaded FROM source_status").fetchall()
        held = con.execute("SELECT count(*), count(DISTINCT job_uid) FROM job_gpu_indices").fetchall()
    finally:
        con.close()
    assert status == [("job-gpus", 0, 4)] and held == [(8, 4)]


def _dbd(state: Path, up: bool, conf: Path | None = None) -> None:
    """Stop slurmdbd, or start it (with the slurmdbd.conf beside ``conf``, a slurm.conf; default the cluster's)."""
    pid_file = state / "run" / "slurmdbd.pid"
    if up:
        env = dict(os.environ, SLURM_CONF=str(conf)) if conf else None
        subprocess.run(["slurmdbd"], cwd=state, check=True, timeout=30, env=env)
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
def test_real_slurm_the_watermark_waits_while_slurmctld_holds_records(slurm, tmp_path):
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


def _job_rows(db: Path) -> list[tuple]:
    return _one(db, 'SELECT job_id_raw, submit, state, start, "end", elapsed_s, ngpus, nodelist FROM jobs '
                    'ORDER BY 1, 2')


def _lines_add_up(got: dict) -> None:
    for r in got["runs"]:
        assert r["read"] == r["loaded"] + r["skipped"] + r["rejected"] and r["rejected"] == 0, r


def _two_finished_jobs(state: Path) -> None:
    """Two short jobs of their own, ended and in accounting's time window: a test's reads compared at different
    times must see them final (xdist may set the module's cluster up afresh between tests: no earlier jobs)."""
    jobs = [_sbatch(state, "carol", "-A", "vision", "-p", "a100", "--gres=gpu:a100:1", "--wrap", "sleep 1")
            for _ in range(2)]
    for job in jobs:
        _wait(f"job {job} to end", lambda job=job: _final(job), 60, 0.5)
        _wait(f"job {job} in accounting's time window", lambda job=job: _accounted(job), 60, 0.2)


@pytest.mark.slurm
@pytest.mark.slow
def test_real_slurm_a_catch_up_in_windows_loads_what_one_read_does(slurm, tmp_path):
    _two_finished_jobs(slurm)
    whole = tmp_path / "whole.duckdb"
    got = _live(whole)                                         # the first read: all history at once
    assert got["windows"] == 1 and len(_job_rows(whole)) >= 2
    first = min(r[1] for r in _job_rows(whole))
    windows = tmp_path / "windows.duckdb"
    con = warehouse.connect(windows)
    try:       # from two minutes before the first job, in windows of 10 s that double while quiet
        got = sacct_live.ingest_live(con, sacct.SacctOptions(cluster=SLURM_CLUSTER), window_s=10,
                                     since=f"{first - dt.timedelta(minutes=2):%Y-%m-%dT%H:%M:%S}")
    finally:
        con.close()
    print(f"\n{got['windows']} windows, {len(got['runs'])} runs from {got['since']}")
    assert got["windows"] >= 4 and not got["more"] and got["error"] is None
    _lines_add_up(got)
    assert _job_rows(windows) == _job_rows(whole)
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
def test_real_slurm_a_span_slurmdbd_refuses_is_read_in_shorter_windows(slurm, tmp_path):
    """slurmdbd's MaxQueryTimeRange (here 60 minutes) refuses a user's wider sacct: the read halves its window
    until slurmdbd answers, and loads what root's unlimited read does."""
    _two_finished_jobs(slurm)
    whole = tmp_path / "whole.duckdb"
    _live(whole)
    assert len(_job_rows(whole)) >= 2
    limited = _dbd_conf(slurm, "MaxQueryTimeRange=60")
    db = tmp_path / "w.duckdb"
    _dbd(slurm, up=False)
    try:
        _dbd(slurm, up=True, conf=limited)
        as_alice = f"runuser -u alice -- env SLURM_CONF={slurm}/etc/slurm.conf sacct"
        refused = subprocess.run(as_alice.split() + ["-a", "-X", "-S", "now-3hours", "-E", "now"],
                                 capture_output=True, text=True, timeout=30)
        assert "Too wide of a date range in query" in refused.stderr       # the limit holds for alice
        con = warehouse.connect(db)
        try:
            got = sacct_live.ingest_live(con, sacct.SacctOptions(cluster=SLURM_CLUSTER), sacct_cmd=as_alice,
                                         since=f"{warehouse.utcnow() - dt.timedelta(hours=3):%Y-%m-%dT%H:%M:%S}")
        finally:
            con.close()
    finally:
        _dbd(slurm, up=False)
        _dbd(slurm, up=True)
    print(f"\n{got['windows']} windows of at most 60 minutes over 3 hours")
    assert got["windows"] >= 4 and got["error"] is None and not got["more"]
    _lines_add_up(got)
    assert _job_rows(db) == _job_rows(whole)


def test_once_runs_one_cycle_and_exits_1_when_a_source_failed(tmp_path, caplog):
    import gpuledger
    cfg = _config(tmp_path, f'[governance]\npath = "{GOVERNANCE}"\n')
    assert gpuledger.main(["serve", "--config", str(cfg.path), "--once"]) == 0
    cfg = _config(tmp_path, f'[governance]\npath = "{GOVERNANCE}"\n[[clusters]]\nname = "lab"\n[clusters.events]\n'
                            'command = "/nonexistent/sacctmgr"\n')
    assert gpuledger.main(["serve", "--config", str(cfg.path), "--once", "-q"]) == 1
    assert "lab/events failed (1 in a row; next try in 1 s): /nonexistent/sacctmgr: not found on PATH" \
        in caplog.text
    con = warehouse.connect(cfg.warehouse, read_only=True)
    assert con.execute("SELECT source, consecutive_failures, attempts FROM source_status ORDER BY 1").fetchall() == \
        [("events", 1, 1), ("governance", 0, 2)]
    con.close()


def test_queue_snapshots_and_reservations_are_collected_like_the_cli_loads_them(tmp_path):
    """`[clusters.squeue]` and `[clusters.reservations]` (issue 16: why jobs pend, reserved idle) run the same
    ingestors as `gpuledger ingest squeue|reservations`: the same rows as a direct load of the same output."""
    fx = ROOT / "tests" / "fixtures" / "slurm_waiting"
    # `sh -c 'cat F' sh`: the options the collector appends to squeue become the shell's ignored arguments
    cfg = _config(tmp_path, '[[clusters]]\nname = "lab"\n'
                            f'[clusters.squeue]\ncommand = "sh -c \'cat {fx}/squeue-01.psv\' sh"\n'
                            f'[clusters.reservations]\ncommand = "sh -c \'cat {fx}/scontrol-show-reservation-o.txt\' sh"\n')
    assert loop.Collector(cfg).cycle(threading.Event())
    direct = warehouse.connect(tmp_path / "direct.duckdb")
    try:
        want_q = squeue.load(direct, (fx / "squeue-01.psv").read_bytes(), dt.datetime(2026, 12, 4, 5, 37, 41),
                             "x", cluster="lab", tz="UTC")
        want_r = reservations.load(direct, (fx / "scontrol-show-reservation-o.txt").read_bytes(), "x",
                                   cluster="lab", tz="UTC")
        want_rows = direct.execute("SELECT job_id, state, reason, gpus FROM squeue_snapshots ORDER BY ALL").fetchall()
    finally:
        direct.close()
    con = warehouse.connect(cfg.warehouse, read_only=True)
    try:
        status = con.execute("SELECT source, consecutive_failures, last_success IS NOT NULL, lines_loaded "
                             "FROM source_status ORDER BY 1").fetchall()
        rows = con.execute("SELECT job_id, state, reason, gpus FROM squeue_snapshots ORDER BY ALL").fetchall()
        resv = con.execute("SELECT cluster, name, users FROM reservations").fetchall()
    finally:
        con.close()
    assert want_q["loaded"] > 0 and rows == want_rows
    assert status == [("reservations", 0, True, want_r["loaded"]), ("squeue", 0, True, want_q["loaded"])]
    assert [r[:2] for r in resv] == [("lab", "gl-resv")] and resv[0][2]
