"""models/demand.py on the hand-computed cluster of tests/timeline_fixtures.py (ingested through the real
ingestors), plus array tasks and multi-pool jobs. Every expected number below is worked out in the comments.

The cluster (horizon 2024-03-03 00:00): a100 = gpu01, gpu02 (8 GPUs each), h100 = gpu03 (4).
 1 alice/ml  a100  8 GPUs 03-01 00:00-12:00          4 dave/cv   a100 16 GPUs submit 03-01 10:00, run 03-02 08-10
 2 bob/cv    a100  4 GPUs 03-01 20:00-03-02 04:00    5 erin/ml   h100  4 GPUs pending since 03-02 22:00
 3 carol/ml  h100  2 GPUs from 03-01 06:00 (running)  6 frank/ops a100  1 GPU  03-02 23:00-03-03 00:00
Teams: ml -> research, cv -> product, ops unmapped.
"""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

import timeline_fixtures as tf
from dashboards.snapshot import Snapshot
from models.metrics import demand
from models.marts import timeline as timeline_mart


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    """One hand cluster for the module (the tests only read it)."""
    from ingest import warehouse
    c = warehouse.connect(tmp_path_factory.mktemp("demand") / "warehouse.duckdb")
    tf.load_hand_cluster(c)
    yield c
    c.close()


def _rows(df: pl.DataFrame, *cols) -> list[tuple]:
    return [tuple(r) for r in df.select(*cols).iter_rows()]


def test_daily_by_pool_by_hand(hand):
    t = demand.demand_table(hand, "day", ["pool"])
    d1, d2 = dt.datetime(2024, 3, 1), dt.datetime(2024, 3, 2)
    assert _rows(t, "pool", "ts", "served_gpu_hours", "demanded_gpu_hours", "estimated_gpu_hours", "peak_gpus") == [
        # a100 03-01 served: job1 8x12 + job2 4x4 = 112; demanded (submit day): job1 96 + job2 4x8 + job4 16x2 = 160
        # peak: 10:00-12:00 job1 8 running + job4 16 pending = 24
        ("a100", d1, 112.0, 160.0, 0.0, 24.0),
        # 03-02 served: job2 4x4 + job4 16x2 + job6 1 = 49; demanded: job6 1; peak 00-04: job2 4 + job4 16 = 20
        ("a100", d2, 49.0, 1.0, 0.0, 20.0),
        # h100 03-01: job3 2x18 = 36 served; demanded: job3 running 42 h so far x 2 (no finished run lasted
        # 42 h and it has no time limit: what it has run)
        ("h100", d1, 36.0, 84.0, 0.0, 2.0),
        # 03-02: job3 2x24; job5 pending: 4 GPUs x 5.75 h (mean of the finished 12, 8, 2, 1 h), all estimated;
        # peak 22:00-24:00: job3 2 + job5 4
        ("h100", d2, 48.0, 23.0, 23.0, 6.0),
    ]


def test_daily_by_team_and_total(hand):
    t = demand.demand_table(hand, "day", ["team"])
    assert _rows(t.filter(pl.col("team") == "product"), "served_gpu_hours", "demanded_gpu_hours", "peak_gpus") == [
        (16.0, 64.0, 20.0), (48.0, 0.0, 20.0)]       # job2 16 / job2 32 + job4 32; job4 pending 16 + job2 4
    assert _rows(t.filter(pl.col("team") == "(unmapped)"), "served_gpu_hours", "demanded_gpu_hours") == [
        (0.0, 0.0), (1.0, 1.0)]                      # frank's hour, reported, never dropped
    total = demand.demand_table(hand, "day", [])
    assert total["served_gpu_hours"].to_list() == [148.0, 97.0]
    assert total["demanded_gpu_hours"].sum() == pytest.approx(160 + 1 + 84 + 23)


def test_served_agrees_with_the_timeline(hand):
    from models.metrics import timeline
    t = demand.demand_table(hand, "day", [])
    alloc = timeline.job_gpu_seconds(hand)["gpu_seconds"].sum() / 3600
    assert t["served_gpu_hours"].sum() == pytest.approx(alloc)


def test_hourly_peak_counts_pending_gpus(hand):
    t = demand.demand_table(hand, "hour", [])
    at = {r["ts"]: r for r in t.iter_rows(named=True)}
    assert at[dt.datetime(2024, 3, 1, 10)]["peak_gpus"] == 26.0      # job1 8 + job3 2 + job4 pending 16
    assert at[dt.datetime(2024, 3, 1, 10)]["served_gpu_hours"] == 10.0
    assert at[dt.datetime(2024, 3, 1, 10)]["demanded_gpu_hours"] == 32.0   # job4 submitted: 16 GPUs x 2 h
    assert at[dt.datetime(2024, 3, 2, 8)]["peak_gpus"] == 18.0       # job4 now running: pending -> running
    assert t["ts"].max() == dt.datetime(2024, 3, 2, 23)              # last complete hour before the horizon


def test_served_understates_demand_when_the_queue_is_long(hand):
    """Job 4 waited 22 h: on 03-01 the cluster served 148 GPU-hours but 244 were submitted."""
    row = demand.demand_table(hand, "day", []).row(0, named=True)
    assert row["demanded_gpu_hours"] > row["served_gpu_hours"]


def test_pending_array_record_counts_every_task(con):
    jobs = [tf.Job(1, "alice", "ml", "a100", 2, ["gpu01"], start=tf.T("03-01 00:00"), end=tf.T("03-01 04:00"))]
    tf.load(con, "tc", jobs, tf.NODES, refresh=False)
    line = ("JobID|JobIDRaw|Cluster|Partition|Account|User|State|Submit|Eligible|Start|End|Elapsed|NNodes|NCPUS|"
            "ReqTRES|AllocTRES|NodeList\n"
            "50_[1-3,7%2]|53|tc|a100|ml|alice|PENDING|2024-03-01T06:00:00|2024-03-01T06:00:00|Unknown|Unknown|"
            "00:00:00|1|4|billing=1,cpu=4,gres/gpu=1,mem=16G,node=1||None assigned\n"
            "60|60|tc|a100|ml|alice|COMPLETED|2024-03-01T07:00:00|2024-03-01T07:00:00|2024-03-01T07:00:00|"
            "2024-03-01T08:00:00|01:00:00|1|4|billing=1,cpu=4,gres/gpu=1,mem=16G,node=1|"
            "billing=1,cpu=4,gres/gpu=1,mem=16G,node=1|gpu02\n")
    from ingest import sacct
    sacct.ingest_bytes(con, line.encode(), "arr.psv", sacct.SacctOptions(cluster="tc"))
    from models.metrics import timeline
    timeline_mart.build(con)
    t = demand.demand_table(con, "hour", [])
    at = {r["ts"]: r for r in t.iter_rows(named=True)}
    # 4 tasks x 1 GPU pending from 06:00; mean finished run time = (4 h + 1 h) / 2 = 2.5 h
    assert at[dt.datetime(2024, 3, 1, 6)]["peak_gpus"] == 4.0
    assert at[dt.datetime(2024, 3, 1, 6)]["demanded_gpu_hours"] == pytest.approx(4 * 2.5)
    assert at[dt.datetime(2024, 3, 1, 6)]["estimated_gpu_hours"] == pytest.approx(4 * 2.5)
    # the pending record asked for untyped GPUs and never ran: its pool is its partition's only GPU type
    by_pool = demand.demand_table(con, "hour", ["pool"]).filter(pl.col("ts") == dt.datetime(2024, 3, 1, 6))
    assert _rows(by_pool, "pool", "peak_gpus") == [("a100", 4.0)]


def test_running_jobs_count_the_mean_of_finished_runs_at_least_as_long(con):
    """A job still running at the horizon will run longer than it has so far: it counts the mean run time of the
    finished jobs of its partition (else cluster) that ran at least as long as it has, else its time limit, never
    more than its limit; a pending job, which has run 0 s, the mean of them all. Finished a100 runs: 1, 2, 10, 20
    and 60 h; the horizon is 03-10 00:00 (the 60 h job's end)."""
    head = ("JobID|JobIDRaw|Cluster|Partition|Account|User|State|Submit|Eligible|Start|End|Elapsed|Timelimit|NNodes|"
            "NCPUS|ReqTRES|AllocTRES|NodeList\n")
    tres = "billing=1,cpu=4,gres/gpu=1,mem=16G,node=1"

    def line(i, part, node, start, end=None, limit="3-00:00:00", submit=None):
        state = "PENDING" if start is None else "RUNNING" if end is None else "COMPLETED"
        el = tf._dur(tf.T(end) - tf.T(start)) if end else "00:00:00"
        return "|".join([str(i), str(i), "tc", part, "ml", "alice", state, tf._ts(tf.T(submit or start)),
                         tf._ts(tf.T(submit or start)), tf._ts(start and tf.T(start)), tf._ts(end and tf.T(end)),
                         el, limit, "1", "4", tres, tres if start else "", node or "None assigned"])
    rows = [line(1, "a100", "gpu01", "03-01 00:00", "03-01 01:00"),
            line(2, "a100", "gpu01", "03-01 02:00", "03-01 04:00"),
            line(3, "a100", "gpu01", "03-02 00:00", "03-02 10:00"),
            line(4, "a100", "gpu01", "03-03 00:00", "03-03 20:00"),
            line(5, "a100", "gpu01", "03-07 12:00", "03-10 00:00"),
            line(11, "a100", "gpu02", "03-09 19:00"),                   # ran 5 h: mean of 10, 20, 60 = 30 h
            line(12, "a100", "gpu02", "03-08 23:00"),                   # ran 25 h: only the 60 h run
            line(13, "a100", "gpu02", "03-07 07:00"),                   # ran 65 h: longer than any: its limit, 72 h
            line(14, "a100", "gpu02", "03-09 19:00", limit="12:00:00"),  # ran 5 h, 30 h capped by its limit: 12 h
            line(15, "a100", None, None, submit="03-09 12:00"),          # pending: the mean of all five, 18.6 h
            line(16, "h100", "gpu03", "03-09 19:00")]                   # no finished h100 run: the cluster's, 30 h
    from ingest import sacct
    s = sacct.ingest_bytes(con, (head + "\n".join(rows) + "\n").encode(), "runs.psv", sacct.SacctOptions(cluster="tc"))
    assert s["rejected"] == 0, s
    tf.load(con, "tc", [], tf.NODES)
    t = demand.demand_table(con, "day", ["pool"], mart=False).filter(pl.col("demanded_gpu_hours") > 0)
    d = lambda day: dt.datetime(2024, 3, day)
    assert [(p, ts, round(v, 9), round(e, 9)) for p, ts, v, e in _rows(t, "pool", "ts", "demanded_gpu_hours",
                                                                      "estimated_gpu_hours")] == [
        ("a100", d(1), 3.0, 0.0), ("a100", d(2), 10.0, 0.0), ("a100", d(3), 20.0, 0.0),
        ("a100", d(7), 60.0 + 72.0, 7.0),          # job 5's 60; job 13's 72 (ran 65, 7 estimated)
        ("a100", d(8), 60.0, 35.0),                # job 12's 60 (ran 25)
        ("a100", d(9), 60.6, 50.6),                # jobs 11 (30; ran 5), 14 (12; ran 5), 15 (18.6; pending)
        ("h100", d(9), 30.0, 25.0)]


def test_a_job_finished_without_an_end_counts_its_elapsed_time_as_the_timeline_does(con):
    """Some exports give a finished job its elapsed time and no end: it ended at start + elapsed (jobs_sql's
    end_eff_sql, which served GPU-hours use), not at the horizon, and nothing of it is estimated."""
    jobs = [tf.Job(1, "alice", "ml", "a100", 2, ["gpu01"], start=tf.T("03-01 00:00"), end=tf.T("03-02 00:00"))]
    tf.load(con, "tc", jobs, tf.NODES, refresh=False)
    con.execute("""INSERT INTO jobs (job_uid, cluster, job_id, job_id_raw, state, source, ingest_run_id, submit,
                                     eligible, start, elapsed_s, timelimit_s, nnodes, ngpus, req_gpus, gpu_type,
                                     partition, account)
                   VALUES (70, 'tc', '70', '70', 'COMPLETED', 'test', 0, '2024-03-01 06:00', '2024-03-01 06:00',
                           '2024-03-01 06:00', 7200, 86400, 1, 1, 1, 'a100', 'a100', 'ml')""")
    con.execute("INSERT INTO job_nodes VALUES (70, 'tc', '70', NULL, 'gpu02', 1)")
    timeline_mart.build(con)
    t = demand.demand_table(con, "hour", [], mart=False)
    at = {r["ts"]: r for r in t.iter_rows(named=True)}
    six = at[dt.datetime(2024, 3, 1, 6)]
    assert (six["demanded_gpu_hours"], six["estimated_gpu_hours"], six["served_gpu_hours"]) == (2.0, 0.0, 3.0)
    assert at[dt.datetime(2024, 3, 1, 7)]["peak_gpus"] == 3.0 and at[dt.datetime(2024, 3, 1, 8)]["peak_gpus"] == 2.0


def test_series_shape_and_errors(hand):
    s = demand.series(hand, "served", "day", "team,pool")
    assert s.columns == ["team", "pool", "ts", "value"]
    with pytest.raises(ValueError, match="unknown column 'user'"):
        demand.series(hand, "served", "day", "user")
    with pytest.raises(ValueError, match="--measure"):
        demand.series(hand, "bogus", "day", "pool")
    with pytest.raises(ValueError, match="--freq"):
        demand.demand_table(hand, "minute", ["pool"])


def test_empty_warehouse_gives_an_empty_table(con):
    t = demand.demand_table(con, "day", ["pool"])
    assert t.is_empty() and "peak_gpus" in t.columns


# ---------------------------------------------------------------- the daily marts (`gpuledger refresh`)

# a second cluster, earlier and with a later horizon (03-04 00:00): a100 jobs 02-29/03-01 and 03-03, and a
# running h100 job
OTHER = [tf.Job(11, "gina", "ml", "a100", 8, ["gpu01"], start=tf.T("02-29 20:00"), end=tf.T("03-01 02:00")),
         tf.Job(12, "hank", "cv", "h100", 4, ["gpu03"], submit=tf.T("03-02 06:00"), start=tf.T("03-03 06:00")),
         tf.Job(13, "gina", "ml", "a100", 1, ["gpu02"], start=tf.T("03-03 20:00"), end=tf.T("03-04 00:00"))]


@pytest.fixture
def two_clusters(db_path):
    """The hand cluster 'tc' and OTHER on 'td', refreshed (marts built) and published."""
    from ingest import warehouse
    from models.pipeline import refresh
    c = warehouse.connect(db_path)
    tf.load_hand_cluster(c)
    tf.load(c, "td", OTHER, tf.NODES, team_map=tf.TEAMS)
    done = dict(refresh.run(c, db_path))
    assert "demand" in done
    yield c
    c.close()


GROUPINGS = [["pool"], ["cluster", "pool"], ["pool", "cluster"], ["team"], [], ["partition", "team"], ["cluster"]]


def _same(con, cluster):
    from polars.testing import assert_frame_equal
    for by in GROUPINGS:
        for m in demand.MEASURES:
            direct = demand._direct(con, "day", by, cluster, peak=m == "peak")
            assert_frame_equal(demand.series(con, m, "day", by, cluster),
                               direct.select([*by, "ts", pl.col(demand.MEASURES[m]).alias("value")]))
        assert_frame_equal(demand.demand_table(con, "day", by, cluster),
                           demand.demand_table(con, "day", by, cluster, mart=False))


@pytest.mark.parametrize("cluster", [None, "tc", "td", "nowhere"])
def test_the_mart_equals_the_direct_computation(two_clusters, cluster):
    con = two_clusters
    assert demand._from_mart(con, ["pool"], cluster, peak=True) is not None    # the mart answers
    assert demand._from_mart(con, ["team"], cluster, peak=True) is None        # peaks are kept per pool only
    _same(con, cluster)


def test_the_mart_holds_each_cluster_and_all_together(two_clusters):
    con = two_clusters
    scopes = con.sql("SELECT scope, first_ts, end_ts FROM demand_scopes ORDER BY scope").fetchall()
    d = dt.datetime
    # tc: first submit 03-01, horizon 03-03; td: first submit 02-29, horizon 03-04 (job 12 runs on);
    # together: from 02-29 to the earliest horizon, 03-03
    assert scopes == [("*", d(2024, 2, 29), d(2024, 3, 3)), ("tc", d(2024, 3, 1), d(2024, 3, 3)),
                      ("td", d(2024, 2, 29), d(2024, 3, 4))]
    td = demand.demand_table(con, "day", ["pool"], "td")
    assert _rows(td, "pool", "ts", "served_gpu_hours", "demanded_gpu_hours", "peak_gpus") == [
        # job 11: 8 GPUs 20:00-02:00 (4 h on 02-29, 2 h on 03-01), submitted 02-29: 48 demanded
        ("a100", d(2024, 2, 29), 32.0, 48.0, 8.0), ("a100", d(2024, 3, 1), 16.0, 0.0, 8.0),
        ("a100", d(2024, 3, 2), 0.0, 0.0, 0.0), ("a100", d(2024, 3, 3), 4.0, 4.0, 1.0),   # job 13: 1 x 4 h
        # job 12: 4 GPUs pending 03-02 06:00 to 03-03 06:00, then running to the horizon (18 h);
        # demanded on 03-02: 4 x 18 h run so far (no finished run of the cluster, 6 h and 4 h, lasted 18 h) = 72
        ("h100", d(2024, 2, 29), 0.0, 0.0, 0.0), ("h100", d(2024, 3, 1), 0.0, 0.0, 0.0),
        ("h100", d(2024, 3, 2), 0.0, 72.0, 4.0), ("h100", d(2024, 3, 3), 72.0, 0.0, 4.0)]
    both = demand.demand_table(con, "day", ["pool"])
    # all clusters: the a100 peak of 03-01 is tc's 24 (10:00-12:00), td's job 11 ended at 02:00
    assert both.filter((pl.col("pool") == "a100") & (pl.col("ts") == d(2024, 3, 1)))["peak_gpus"].to_list() == [24.0]
    assert both["ts"].max() == d(2024, 3, 2)


def test_a_serving_snapshot_reads_the_mart_and_a_new_ingest_bypasses_it(two_clusters, db_path):
    from ingest import sacct, warehouse
    snap = Snapshot(db_path).cursor()     # the published view, as the dashboards read it
    try:
        assert demand._from_mart(snap, ["pool"], "tc", peak=True) is not None
        t = demand.series(snap, "demanded", "day", ["pool"], "tc")
        assert t["value"].to_list() == [160.0, 1.0, 84.0, 23.0]     # test_daily_by_pool_by_hand's figures
        _same(snap, None)
    finally:
        snap.close()
    con = two_clusters
    late = tf.Job(7, "ivy", "ml", "a100", 2, ["gpu02"], start=tf.T("03-01 01:00"), end=tf.T("03-01 03:00"))
    sacct.ingest_bytes(con, tf.sacct_text([late], "tc").encode(), "late.psv", sacct.SacctOptions(cluster="tc"))
    assert demand._from_mart(con, ["pool"], "tc", peak=True) is None            # stale: computed from the jobs
    t = demand.series(con, "demanded", "day", ["pool"], "tc")
    # + job 7 (2 GPUs x 2 h); job 5's estimate falls to the new mean run time, 5 h (of 12, 8, 2, 2, 1 h): 4 x 5
    assert t["value"].to_list() == [164.0, 1.0, 84.0, 20.0]
