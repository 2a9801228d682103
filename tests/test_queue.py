"""models/queue.py: hand-computed waits, size classes, bounded slowdown, starvation, pending demand."""
from __future__ import annotations

import datetime as dt

import pytest

from cost_helpers import Job, T, build
from models.metrics import queue

NODES = [("h1", 8, "h100"), ("h2", 8, "h100"), ("h3", 8, "h100")]
JOBS = [
    Job(1, "vision", 1, T(1, 2), T(1, 12), submit=T(1)),                                # wait 2 h, run 10 h
    Job(2, "vision", 1, T(2) + dt.timedelta(minutes=5), T(2) + dt.timedelta(minutes=6), submit=T(2)),  # 5 min, 1 min
    Job(3, "vision", 4, T(4, 6), T(4, 7), submit=T(3)),                                 # 30 h: starving
    Job(4, "nlp", 8, T(5, 4), T(5, 8), submit=T(5), qos="high"),                        # 4 h
    Job(5, "nlp", 16, None, None, submit=T(6)),                                         # still pending
    Job(6, "nlp", 1, T(31), T(1, month=4), submit=T(31)),                               # no wait
    # cancelled while pending: sacct records when it left the queue (End), so it was pending until then
    Job(7, "nlp", 1, None, T(11), submit=T(10), state="CANCELLED"),                     # pending 24 h
]
GOV = '''currency = "EUR"
[[teams]]
name = "vision"
accounts = ["vision"]
[[teams]]
name = "nlp"
accounts = ["nlp"]
'''


@pytest.fixture(scope="module")
def qcon(tmp_path_factory):
    from ingest import warehouse
    tmp = tmp_path_factory.mktemp("queue")
    con = warehouse.connect(tmp / "w.duckdb")
    build(con, tmp, JOBS, NODES, GOV)
    yield con
    con.close()


def rows(df, *keys):
    return {tuple(r[k] for k in keys): r for r in df.iter_rows(named=True)}


def test_wait_percentiles_per_team_and_size_class(qcon):
    w = rows(queue.waits(qcon, T(1), T(1, month=4)), "team", "size_class")
    assert set(w) == {("vision", "1"), ("vision", "2-4"), ("nlp", "5-8"), ("nlp", "1")}
    v1 = w["vision", "1"]
    assert v1["jobs"] == 2 and v1["wait_max_h"] == pytest.approx(2.0)
    assert v1["wait_p50_h"] == pytest.approx((2 + 5 / 60) / 2)              # linear interpolation of two waits
    assert v1["wait_p95_h"] == pytest.approx(5 / 60 + 0.95 * (2 - 5 / 60))
    assert v1["wait_p90_h"] == pytest.approx(5 / 60 + 0.90 * (2 - 5 / 60))    # each percentile its own
    assert w["vision", "2-4"]["wait_p95_h"] == pytest.approx(30.0) and w["vision", "2-4"]["waited_over_threshold"] == 1
    assert w["nlp", "5-8"]["wait_p50_h"] == pytest.approx(4.0) and w["nlp", "1"]["wait_max_h"] == 0


def test_bounded_slowdown_uses_tau_for_short_jobs(qcon):
    w = rows(queue.waits(qcon, T(1), T(1, month=4), tau_minutes=10), "team", "size_class")
    # job 1: (2 h + 10 h) / 10 h = 1.2; job 2: (5 + 1) / max(1, 10) min = 0.6 -> bounded to 1
    assert w["vision", "1"]["bsld_p50"] == pytest.approx((1.2 + 1.0) / 2)
    assert w["vision", "1"]["bsld_p95"] == pytest.approx(1.0 + 0.95 * 0.2)
    assert w["vision", "2-4"]["bsld_p50"] == pytest.approx(31.0)             # (30 h + 1 h) / 1 h
    assert w["nlp", "5-8"]["bsld_p50"] == pytest.approx(2.0)


def test_waits_per_qos_and_parity(qcon):
    w = rows(queue.waits(qcon, T(1), T(1, month=4), by=("qos",)), "qos")
    assert w["high",]["jobs"] == 1 and w["normal",]["jobs"] == 4
    allp95 = queue.waits(qcon, T(1), T(1, month=4), by=("cluster",))["wait_p95_h"][0]
    assert w["high",]["p95_vs_all"] == pytest.approx(4.0 / allp95)


def test_size_classes_cover_every_request():
    import duckdb
    with duckdb.connect() as own:           # not duckdb's process-wide default connection: other tests use it
        got = own.sql(f"SELECT g, {queue.size_class_sql('g')} FROM range(0, 140) t(g)").fetchall()
    classes = {g: c for g, c in got}
    assert [classes[g] for g in (0, 1, 2, 4, 5, 8, 9, 15, 16, 17, 39, 64, 65, 129)] == [
        "0", "1", "2-4", "2-4", "5-8", "5-8", "9-16", "9-16", "9-16", "17-32", "33-64", "33-64", "65-128", "129+"]


def test_pending_at_a_time(qcon):
    p = queue.pending_at(qcon, T(10, 12))
    assert p["job_id"].to_list() == ["5", "7"] and p["pending_h"].to_list() == pytest.approx([108.0, 12.0])
    assert queue.pending_at(qcon, T(11, 1))["job_id"].to_list() == ["5"]  # 7 left the queue at its End
    p = queue.pending_at(qcon, T(3, 12))                                    # oldest first
    assert p["job_id"].to_list() == ["3"] and p["size_class"].to_list() == ["2-4"]


def test_starvation_counts_long_waits_and_the_oldest_pending(qcon):
    s = rows(queue.starvation(qcon, T(1), T(1, month=4), threshold_hours=24), "team")
    assert s["vision",]["started_after_threshold"] == 1 and s["vision",]["longest_wait_h"] == pytest.approx(30)
    assert s["vision",]["pending_now"] == 0
    nlp = s["nlp",]
    assert nlp["pending_now"] == 1 and nlp["pending_over_threshold"] == 1
    assert nlp["gpus_pending_over_threshold"] == 16 and nlp["oldest_pending_h"] == pytest.approx(26 * 24)


def test_pending_demand_in_gpu_hours(qcon):
    d = queue.pending_demand(qcon, T(1), T(1, month=4))
    by_team = {t: sum(r["pending_gpu_h"] for r in d.iter_rows(named=True) if r["team"] == t) for t in ("vision", "nlp")}
    assert by_team["vision"] == pytest.approx(1 * 2 + 1 * 5 / 60 + 4 * 30)
    assert by_team["nlp"] == pytest.approx(8 * 4 + 16 * 26 * 24 + 1 * 24)


def test_cli_queue_report(qcon, tmp_path):
    import gpuledger
    from pathlib import Path
    db = Path(qcon.sql("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()[0][0])
    out = tmp_path / "waits.csv"
    assert gpuledger.main(["--db", str(db), "report", "queue", "--windows", "31", "--out", str(out)]) == 0
    text = out.read_text().splitlines()
    assert text[0].startswith("window,team,size_class,jobs") and any(l.startswith("31d,nlp,5-8,1,") for l in text)
