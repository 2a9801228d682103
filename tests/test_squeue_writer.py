"""The demo's squeue snapshots: the queue the demo scheduler held at each capture time, each pending job's reason
as Slurm names it, written in the real squeue format and loaded by the real ingestor without a reject."""
from __future__ import annotations

import datetime as dt

import duckdb
import numpy as np
import polars as pl
import pytest

from ingest import plausible, squeue, warehouse
from models.demo import build, config, squeue_writer
from models.metrics import pending


def frame(*rows: dict) -> pl.DataFrame:
    """instance_frame's columns, one row per instance; times are epoch seconds, -1 = none."""
    base = {"raw": 100, "array_id": -1, "task": -1, "partition": "h100", "qos": "normal", "account": "vision",
            "user": "ada", "submit": 0, "eligible": 0, "start": -1, "end": -1, "nnodes": 1, "cpus": 24,
            "gpus": 1, "mem_mib": 1024, "req_type": None, "name": "train", "resv": None}
    return pl.DataFrame([{**base, "i": i, "raw": 100 + i, **r} for i, r in enumerate(rows)],
                        schema_overrides={"req_type": pl.String, "resv": pl.String})


def test_snapshot_times_are_the_multiples_of_the_interval_inside_the_window():
    assert squeue_writer.snapshot_times(1000, 3000, 900).tolist() == [1800, 2700]
    assert squeue_writer.snapshot_times(900, 2700, 900).tolist() == [900, 1800]
    assert squeue_writer.snapshot_times(901, 1799, 900).tolist() == []


def test_each_pending_job_gets_the_reason_its_place_in_the_queue_implies():
    f = frame({"submit": 0, "eligible": 0, "start": 2000, "end": 5000},      # 0: waits, then runs from 2000
              {"submit": 100, "eligible": 100},                             # 1: behind 0, then the head
              {"submit": 1700, "eligible": 1820},                           # 2: requeued, held until 1820
              {"partition": "a100", "submit": 500, "eligible": 500, "end": 1000},   # 3: cancelled while pending
              {"partition": "preempt", "submit": 50, "eligible": 50})      # 4: its partition's only job
    rows = squeue_writer.queue_rows(f, squeue_writer.snapshot_times(0, 3000, 900))
    got = {(t, i): (s, r) for t, i, s, r in rows.select("t", "i", "state", "reason").iter_rows()}
    assert got == {
        (0, 0): ("PENDING", "Resources"),           # submitted at the capture: in the queue (pending from submit)
        (900, 0): ("PENDING", "Resources"), (900, 1): ("PENDING", "Priority"), (900, 3): ("PENDING", "Resources"),
        (900, 4): ("PENDING", "Resources"),
        (1800, 0): ("PENDING", "Resources"), (1800, 1): ("PENDING", "Priority"), (1800, 2): ("PENDING", "BeginTime"),
        (1800, 4): ("PENDING", "Resources"),
        (2700, 0): ("RUNNING", "None"), (2700, 1): ("PENDING", "Resources"), (2700, 2): ("PENDING", "Priority"),
        (2700, 4): ("PENDING", "Resources")}


def test_a_reservation_s_jobs_queue_on_their_own_and_name_it():
    f = frame({"submit": 0, "eligible": 0, "resv": "llm-pt-run"},          # 0: waits for the reserved nodes
              {"submit": 100, "eligible": 100},                            # 1: the partition's own head
              {"submit": 200, "eligible": 200, "resv": "llm-pt-run"})      # 2: behind 0
    rows = squeue_writer.queue_rows(f, np.array([900]))
    assert rows.select("i", "reason").rows() == [(0, "Resources"), (1, "Resources"), (2, "Priority")]
    lines = squeue_writer._lines(rows, "orion")["line"].to_list()
    assert [line.split("|")[13] for line in lines] == ["llm-pt-run", "(null)", "llm-pt-run"]
    assert squeue.LIVE_TITLES[13] == "RESERVATION"


def test_a_day_s_log_loads_line_for_line_into_the_warehouse(tmp_path):
    f = frame({"submit": 0, "start": 2000, "end": 5000, "gpus": 16, "nnodes": 2, "req_type": "h100"},
              {"submit": 100, "array_id": 77, "task": 3})
    written = squeue_writer.write_logs(f, "orion", 1, 3000, tmp_path, every=900)
    assert [p.name for p in written] == ["squeue-1970-01-01.log"]
    lines = written[0].read_text().splitlines()
    assert lines[-5:] == ["Thu Jan 01 00:45:00 1970", squeue_writer.HEADER,
                          "100|orion|RUNNING|None|N/A|gres:gpu:h100:8|cpu=24,mem=1G,node=2,billing=24,gres/gpu=16|2|"
                          "h100|vision|ada|normal|1970-01-01T00:00:00|(null)|train|",
                          "77_3|orion|PENDING|Resources|N/A|gres:gpu:1|cpu=24,mem=1G,node=1,billing=24,gres/gpu=1|1|"
                          "h100|vision|ada|normal|1970-01-01T00:01:40|(null)|train|", ""]
    assert lines[0] == "Thu Jan 01 00:15:00 1970" and len(lines) == 3 * 5    # time, header, two jobs, blank
    con = warehouse.connect(tmp_path / "w.duckdb")
    with plausible.replaying("1970-01-01..1970-01-02"):
        run = squeue.ingest_path(con, str(written[0]), None, cluster="orion", tz="UTC")
    assert (run["read"], run["loaded"], run["skipped"], run["rejected"]) == (15, 6, 9, 0)
    stored = con.sql("SELECT captured_at, job_id, state, reason, gpus FROM squeue_snapshots "
                     "ORDER BY captured_at, job_id").fetchall()
    t = [dt.datetime(1970, 1, 1, 0, m) for m in (15, 30, 45)]
    assert stored == [(t[0], "100", "PENDING", "Resources", 16.0), (t[0], "77_3", "PENDING", "Priority", 1.0),
                      (t[1], "100", "PENDING", "Resources", 16.0), (t[1], "77_3", "PENDING", "Priority", 1.0),
                      (t[2], "100", "RUNNING", "None", 16.0), (t[2], "77_3", "PENDING", "Resources", 1.0)]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    db = tmp_path_factory.mktemp("sq") / "demo.duckdb"
    cfg = config.for_scale(0.25, seed=7, days=7, telemetry_days=0, squeue_days=1)
    build.build(db, cfg)
    return db, cfg


def test_the_demo_explains_almost_every_wait_of_its_last_day_by_squeue(demo):
    db, _ = demo
    con = duckdb.connect(str(db), read_only=True)
    n, first, last = con.sql("SELECT count(DISTINCT captured_at), min(captured_at), max(captured_at) "
                             "FROM squeue_snapshots").fetchall()[0]
    assert n == 96 and last - first == dt.timedelta(hours=23, minutes=45)      # one day, every 15 minutes
    end = last + dt.timedelta(minutes=15)
    # every pending snapshot row of a job (not an array task: sacct prints an array's pending tasks as one record,
    # `A_[5-9]`, which no task's row matches, docs/METRICS.md) is a job the exports know, submitted before it
    rows, orphans = con.sql("""
        SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.job_id = s.job_id
                                                              AND j.submit <= s.captured_at))
        FROM squeue_snapshots s WHERE s.state = 'PENDING' AND s.job_id NOT LIKE '%\\_%' ESCAPE '\\'""").fetchall()[0]
    assert rows > 100 and orphans == 0
    rs = pending.by_reason(con, end - dt.timedelta(hours=23), end, by="cluster")
    share = rs.filter(pl.col("source") == "squeue")["wait_gpu_h"].sum() / rs["wait_gpu_h"].sum()
    assert share > 0.9, rs
    assert set(rs.filter(pl.col("source") == "squeue")["reason"]) <= {"Priority", "Resources", "BeginTime"}
    con.close()
