"""The occupancy timeline: span and horizon, node state, job placement, incremental refresh = full rebuild."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboards.snapshot import Snapshot
from ingest import warehouse
from models.pipeline import refresh
from models.metrics import freshness, timeline
from models.marts import timeline as timeline_mart

import timeline_fixtures as tf
from timeline_fixtures import T


@pytest.fixture(scope="module")
def hand():
    con = warehouse.connect(":memory:")
    tf.load_hand_cluster(con)
    yield con
    con.close()


def test_span_and_horizon(hand):
    assert timeline.data_span(hand).rows() == [("tc", T("03-01 00:00"), T("03-03 00:00"))]
    assert timeline.horizon(hand) == T("03-03 00:00") == timeline.horizon(hand, "tc")
    assert timeline.horizon(hand, "nope") is None


def test_running_job_counts_up_to_the_horizon_never_beyond(hand):
    per_job = timeline.job_gpu_seconds(hand)
    uid = hand.sql("SELECT job_uid FROM jobs WHERE job_id = '3'").fetchall()[0][0]
    assert per_job.filter(pl.col("job_uid") == uid)["gpu_seconds"].to_list() == [2 * 42 * 3600.0]
    assert hand.sql("SELECT max(t1) FROM tl_job_alloc").fetchall()[0][0] == T("03-03 00:00")
    later = timeline.job_gpu_seconds(hand, "2024-03-02T12:00", "2024-03-09")
    assert later.filter(pl.col("job_uid") == uid)["gpu_seconds"].to_list() == [2 * 12 * 3600.0]


def test_pending_and_cpu_only_jobs_hold_nothing(hand):
    uid = hand.sql("SELECT job_uid FROM jobs WHERE job_id = '5'").fetchall()[0][0]
    assert uid not in timeline.job_gpu_seconds(hand)["job_uid"].to_list()


def test_node_state_from_inventory_and_events(hand):
    got = hand.sql("SELECT node, t0, t1, gpus, gpu_type, avail, reason FROM tl_node_state ORDER BY node, t0").fetchall()
    assert got == [
        ("gpu01", T("03-01 00:00"), T("03-03 00:00"), 8, "a100", "up", None),
        ("gpu02", T("03-01 00:00"), T("03-01 12:00"), 8, "a100", "up", None),
        ("gpu02", T("03-01 12:00"), T("03-01 18:00"), 8, "a100", "down", "DRAIN"),
        ("gpu02", T("03-01 18:00"), T("03-03 00:00"), 8, "a100", "up", None),
        ("gpu03", T("03-01 00:00"), T("03-02 12:00"), 4, "h100", "up", None),
        ("gpu03", T("03-02 12:00"), T("03-02 14:00"), 4, "h100", "planned_down", "MAINT"),
        ("gpu03", T("03-02 14:00"), T("03-03 00:00"), 4, "h100", "up", None),
    ]


def test_segments_are_piecewise_constant_per_node(hand):
    seg = timeline.node_segments(hand, "2024-03-01T19:00", "2024-03-02T09:00").pl()
    gpu02 = seg.filter(pl.col("node") == "gpu02").sort("t0").select("t0", "t1", "alloc", "jobs").rows()
    assert gpu02 == [(T("03-01 19:00"), T("03-01 20:00"), 0.0, 0), (T("03-01 20:00"), T("03-02 04:00"), 4.0, 1),
                     (T("03-02 04:00"), T("03-02 08:00"), 0.0, 0), (T("03-02 08:00"), T("03-02 09:00"), 8.0, 1)]
    # no gaps, no overlaps
    for _, g in seg.sort("t0").group_by("node"):
        t0, t1 = g["t0"].to_list(), g["t1"].to_list()
        assert all(b == a for a, b in zip(t1[:-1], t0[1:]))


def test_capacity_api(hand):
    cap = timeline.capacity(hand, bucket="day", by="pool")
    assert cap.rows() == [(T("03-01 00:00"), "a100", 384.0, 48.0, 336.0), (T("03-01 00:00"), "h100", 96.0, 0.0, 96.0),
                          (T("03-02 00:00"), "a100", 384.0, 0.0, 384.0), (T("03-02 00:00"), "h100", 96.0, 4.0, 92.0)]


def test_a_job_on_a_node_missing_from_the_inventory_is_beyond_capacity(con):
    jobs = [tf.Job(1, "a", "x", "p", 4, ["n1"], start=T("03-01 00:00"), end=T("03-01 10:00")),
            tf.Job(2, "a", "x", "p", 2, ["ghost"], start=T("03-01 02:00"), end=T("03-01 04:00")),
            tf.Job(3, "a", "x", "p", 8, ["n1"], start=T("03-01 05:00"), end=T("03-01 06:00"))]  # 4 + 8 > 8
    tf.load(con, "c", jobs, nodes=[("n1", 8, "a100", "p")])
    from models.metrics import utilization
    df = utilization.by_bucket(con, bucket="day")
    r = df.row(0, named=True)
    assert (r["capacity_gpu_h"], r["allocated_gpu_h"], r["beyond_capacity_gpu_h"], r["idle_gpu_h"]) == (
        80.0, 52.0, 4.0 + 4.0, 80.0 - (52.0 - 8.0))
    assert abs(r["allocated_gpu_h"] - r["beyond_capacity_gpu_h"] + r["idle_gpu_h"] + r["unavailable_gpu_h"]
               - r["capacity_gpu_h"]) < 1e-9
    assert con.sql("SELECT avail, gpus FROM tl_node_state WHERE node = 'ghost'").fetchall() == [("absent", 0)]


def test_team_remap_rebuilds_demand_rows(con):
    """Governance can re-map teams without touching placements: the next refresh notices (team fingerprint)."""
    from ingest import jobs_store
    from models.metrics import utilization
    tf.load(con, "tc", tf.JOBS, tf.NODES, tf.EVENTS, tf.TEAMS)
    before = utilization.by_bucket(con, "2024-03-01", "2024-03-02", by="team")
    assert sorted(before["team"].to_list()) == ["(all)", "product", "research"]
    con.execute("UPDATE team_map SET team = 'vision' WHERE account_pattern = 'cv'")
    jobs_store.assign_teams(con)
    con.execute("""INSERT INTO ingest_runs (run_id, source, input_name, started_at, status)
                   VALUES (nextval('seq_ingest_run'), 'governance', 'g.toml', now()::TIMESTAMP, 'ok')""")
    unchanged = utilization.by_bucket(con, "2024-03-01", "2024-03-02", by="team")   # reads never rebuild
    assert sorted(unchanged["team"].to_list()) == ["(all)", "product", "research"]
    timeline_mart.build(con)
    after = utilization.by_bucket(con, "2024-03-01", "2024-03-02", by="team")
    assert dict(zip(after["team"], after["allocated_gpu_h"])) == {"(all)": 148.0, "research": 132.0, "vision": 16.0}


def test_event_classes():
    con = warehouse.connect(":memory:")
    got = con.sql(f"""SELECT e.state, {timeline_mart.EVENT_CLASS_SQL} FROM (VALUES ('DOWN'), ('DRAIN'), ('MAINT'),
                      ('IDLE+DRAIN'), ('POWERED_DOWN'), ('FAIL'), ('IDLE'), ('RESERVED'), ('WEIRD')) e(state)""").fetchall()
    assert dict(got) == {"DOWN": "down", "DRAIN": "down", "MAINT": "planned_down", "IDLE+DRAIN": "down",
                         "POWERED_DOWN": "planned_down", "FAIL": "down", "IDLE": None, "RESERVED": None,
                         "WEIRD": "down"}


def test_refresh_runs_the_timeline_and_publishes(db_path):
    con = warehouse.connect(db_path)
    tf.load(con, "tc", tf.JOBS, tf.NODES, tf.EVENTS, refresh=False)
    assert not freshness.freshness(con).current
    assert "run `gpuledger refresh`" in freshness.note(con)
    done = dict(refresh.run(con, db_path))
    assert "timeline" in done and freshness.freshness(con).current and freshness.note(con) is None
    con.close()
    snap = Snapshot(db_path).cursor()     # the published view, as the dashboards read it
    assert snap.sql("SELECT count(*) FROM tl_hourly").fetchall()[0][0] > 0
    assert freshness.note(snap) is None   # the snapshot carries the mart state it was published with
    snap.close()


# ---------------------------------------------------------------- incremental = full

def _marts(con) -> dict:
    merged = con.sql("""
        WITH m AS (SELECT *, CASE WHEN lag(t1) OVER w = t0 AND lag(alloc) OVER w = alloc AND lag(avail) OVER w = avail
                                   AND lag(jobs) OVER w = jobs AND lag(gpus) OVER w = gpus THEN 0 ELSE 1 END AS brk
                   FROM (SELECT s.*, n.node FROM (""" + timeline.SEGMENTS_SQL + """) s JOIN tl_nodes n USING (nid))
                   WINDOW w AS (PARTITION BY cluster, node ORDER BY t0)),
             g AS (SELECT *, sum(brk) OVER (PARTITION BY cluster, node ORDER BY t0) AS grp FROM m)
        SELECT cluster, node, min(t0), max(t1), any_value(alloc), any_value(avail), any_value(jobs)
        FROM g GROUP BY cluster, node, grp ORDER BY ALL""").fetchall()
    return {
        "clusters": con.sql("SELECT cluster, data_start, horizon FROM tl_clusters ORDER BY ALL").fetchall(),
        "state": con.sql("SELECT * FROM tl_node_state ORDER BY ALL").fetchall(),
        "alloc": con.sql("SELECT * EXCLUDE (job_uid) FROM tl_job_alloc ORDER BY ALL").fetchall(),
        "segments": merged,
        "hourly": [tuple(round(v, 6) if isinstance(v, float) else v for v in r)
                   for r in con.sql("SELECT * FROM tl_hourly ORDER BY ALL").fetchall()],
        "demand": [tuple(round(v, 6) if isinstance(v, float) else v for v in r)
                   for r in con.sql("SELECT * FROM tl_demand_daily ORDER BY ALL").fetchall()],
        "pending": [tuple(round(v, 6) if isinstance(v, float) else v for v in r)
                    for r in con.sql("SELECT * FROM tl_pending_hourly ORDER BY ALL").fetchall()],
        "blocked": con.sql("SELECT * EXCLUDE (job_uid) FROM tl_blocked_daily ORDER BY ALL").fetchall(),
        "frag_state": con.sql("SELECT * FROM tl_frag_state_daily ORDER BY ALL").fetchall(),
        "frag_partial": con.sql("SELECT * FROM tl_frag_partial_daily ORDER BY ALL").fetchall(),
        "frag_workload": con.sql("SELECT * FROM tl_frag_workload_daily ORDER BY ALL").fetchall(),
        "pending_team": [tuple(round(v, 4) if isinstance(v, float) else v for v in r)
                         for r in con.sql("SELECT * FROM tl_pending_team_daily ORDER BY ALL").fetchall()],
        "decay": [tuple(round(v, 4) if isinstance(v, float) else v for v in r)
                  for r in con.sql("SELECT * FROM tl_decay_daily ORDER BY ALL").fetchall()],
    }


@st.composite
def histories(draw):
    """Two exports of one cluster: the first sees some jobs running or pending that the second sees finished,
    plus a later drain; ingested one after the other with a refresh after each."""
    base = T("03-01 00:00")
    hour = dt.timedelta(hours=1)
    first, second = [], []
    for i in range(draw(st.integers(1, 8))):
        node = draw(st.sampled_from(["n1", "n2"]))
        s = base + hour * draw(st.integers(0, 40))
        e = s + hour * draw(st.integers(1, 20))
        g = draw(st.integers(1, 2))
        sub = s - hour * draw(st.integers(0, 30))     # waits, some across midnight (blocked-by-fragmentation mart)
        done = tf.Job(i + 1, "u", "a", "p", g, [node], submit=sub, start=s, end=e)
        kind = draw(st.sampled_from(["done", "running", "pending", "later"]))
        if kind == "done":
            first.append(done)
        elif kind == "running":
            first.append(tf.Job(i + 1, "u", "a", "p", g, [node], submit=sub, start=s))
        elif kind == "pending":
            first.append(tf.Job(i + 1, "u", "a", "p", g, submit=sub))
        second.append(done)
    ev = []
    if draw(st.booleans()):
        s = base + hour * draw(st.integers(0, 50))
        ev.append(("n1", s, s + hour * draw(st.integers(1, 10)), "DRAIN", "x"))
    return first, second, ev


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_incremental_refresh_equals_full_rebuild(hist):
    first, second, ev = hist
    con = warehouse.connect(":memory:")
    try:
        tf.load(con, "c", first, [("n1", 8, "a100", "p"), ("n2", 4, "h100", "p")])
        tf.load(con, "c", second, events=ev)          # incremental refresh after the second export
        incremental = _marts(con)
        timeline_mart.build(con, full=True)
        rebuilt = _marts(con)
        for k in incremental:
            assert incremental[k] == rebuilt[k], k
    finally:
        con.close()


def test_overlapping_outages_of_one_class_pick_the_latest_and_refresh_from_the_old_horizon():
    """Two open outages of node n1, both 'down' (DOWN from 03-01 00:00, FAIL from 03-01 06:00): the node
    state names the later one from 06:00 whatever order the rows come in, so an incremental refresh after a new
    job finds no change before the old horizon (03-02 12:00, job 1's end) and re-places from there."""
    con = warehouse.connect(":memory:")
    try:
        ev = [("n1", T("03-01 00:00"), None, "DOWN", "x"), ("n1", T("03-01 06:00"), None, "FAIL", "y")]
        tf.load(con, "c", [tf.Job(1, "u", "a", "p", 2, ["n2"], start=T("03-01 02:00"), end=T("03-02 12:00"))],
                [("n1", 8, "a100", "p"), ("n2", 4, "h100", "p")], ev)
        assert con.sql("SELECT t0, reason FROM tl_node_state WHERE node = 'n1' ORDER BY t0").fetchall() == [
            (T("03-01 02:00"), "DOWN"), (T("03-01 06:00"), "FAIL")]
        tf.load(con, "c", [tf.Job(2, "u", "a", "p", 1, ["n2"], start=T("03-02 13:00"), end=T("03-02 14:00"))],
                refresh=False)
        report = timeline_mart.build(con)
        assert report["c"]["from"] == T("03-02 12:00") and not report["c"]["full"]
    finally:
        con.close()


def test_jobs_without_placement_are_counted_not_hidden(run_cli, db_path, fixtures):
    # openb's pod lists name no node: the pods' GPU-hours are in no timeline piece, and utilization's allocated
    # leaves them out. Expected from the CSV itself: scheduled pods with GPUs, num_gpu x gpu_milli/1000 GPUs
    # from scheduled_time to deletion_time (the whole span is the window: none is clipped)
    pods = fixtures / "traces" / "openb" / "openb_pod_list_gpuspec33.csv"
    assert run_cli("ingest", "trace", "alibaba-openb", str(pods), "--no-refresh")[0] == 0
    assert run_cli("refresh")[0] == 0
    d = pl.read_csv(pods).filter(pl.col("num_gpu") > 0, pl.col("scheduled_time").is_not_null(),
                                 pl.col("deletion_time") > pl.col("scheduled_time"))
    gpu_h = (d["num_gpu"] * d["gpu_milli"].fill_null(1000) / 1000 * (d["deletion_time"] - d["scheduled_time"])
             / 3600).sum()
    con = warehouse.connect(db_path, read_only=True)
    got = timeline.unplaced(con)
    con.close()
    assert got["jobs"] == d.height > 100 and got["gpu_h"] == pytest.approx(gpu_h, rel=1e-9)
    code, out, err = run_cli("report", "utilization", "--bucket", "month")
    assert code == 0 and f"note: {d.height:,} jobs held {gpu_h:,.2f} GPU-hours in the window" in err
    # the fragmentation report samples the same nodes as free: it says so with the same figures
    code, out, err = run_cli("report", "fragmentation", "--bucket", "month")
    assert code == 0 and "free_gpus" in out
    assert (f"note: {d.height:,} jobs held {gpu_h:,.2f} GPU-hours in the window by their records but name no node "
            "(a trace without placement, e.g. openb's pod lists): the free GPUs here count theirs as free") in err
