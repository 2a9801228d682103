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
from models import demand


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
        # h100 03-01: job3 2x18 = 36 served; demanded: job3 running 42 h so far (more than the 5 h estimate) x 2
        ("h100", d1, 36.0, 84.0, 0.0, 2.0),
        # 03-02: job3 2x24; job5 pending: 4 GPUs x 5 h (median of finished 12, 8, 2, 1 h), all estimated;
        # peak 22:00-24:00: job3 2 + job5 4
        ("h100", d2, 48.0, 20.0, 20.0, 6.0),
    ]


def test_daily_by_team_and_total(hand):
    t = demand.demand_table(hand, "day", ["team"])
    assert _rows(t.filter(pl.col("team") == "product"), "served_gpu_hours", "demanded_gpu_hours", "peak_gpus") == [
        (16.0, 64.0, 20.0), (48.0, 0.0, 20.0)]       # job2 16 / job2 32 + job4 32; job4 pending 16 + job2 4
    assert _rows(t.filter(pl.col("team") == "unmapped"), "served_gpu_hours", "demanded_gpu_hours") == [
        (0.0, 0.0), (1.0, 1.0)]                      # frank's hour, reported, never dropped
    total = demand.demand_table(hand, "day", [])
    assert total["served_gpu_hours"].to_list() == [148.0, 97.0]
    assert total["demanded_gpu_hours"].sum() == pytest.approx(160 + 1 + 84 + 20)


def test_served_agrees_with_the_timeline(hand):
    from models import timeline
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
    from models import timeline
    timeline.build(con)
    t = demand.demand_table(con, "hour", [])
    at = {r["ts"]: r for r in t.iter_rows(named=True)}
    # 4 tasks x 1 GPU pending from 06:00; median finished run time = (4 h + 1 h) / 2 = 2.5 h
    assert at[dt.datetime(2024, 3, 1, 6)]["peak_gpus"] == 4.0
    assert at[dt.datetime(2024, 3, 1, 6)]["demanded_gpu_hours"] == pytest.approx(4 * 2.5)
    assert at[dt.datetime(2024, 3, 1, 6)]["estimated_gpu_hours"] == pytest.approx(4 * 2.5)
    # the pending record asked for untyped GPUs and never ran: its pool is its partition's only GPU type
    by_pool = demand.demand_table(con, "hour", ["pool"]).filter(pl.col("ts") == dt.datetime(2024, 3, 1, 6))
    assert _rows(by_pool, "pool", "peak_gpus") == [("a100", 4.0)]


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
