"""Utilization: exact figures on a hand-computed cluster, sreport categories, invariants under hypothesis, CLI.

The hand cluster (tests/timeline_fixtures.py): gpu01, gpu02 (8 x a100, partitions a100,all), gpu03 (4 x h100,
partitions all,h100); 20 GPUs = 480 GPU-h a day. 2024-03-01 .. 03-03 (the horizon: job 6 ends then).
  job 1 alice/ml   8 GPUs gpu01          03-01 00:00-12:00                 96 GPU-h day 1
  job 2 bob/cv     4 GPUs gpu02          03-01 20:00-03-02 04:00           16 + 16 (crosses midnight)
  job 3 carol/ml   2 GPUs gpu03          03-01 06:00-still running         36 + 48 (to the horizon)
  job 4 dave/cv   16 GPUs gpu01+gpu02    eligible 03-01 10:00, 03-02 08:00-10:00       32 day 2
  job 5 erin/ml    4 GPUs h100 typed     eligible 03-02 22:00, still pending
  job 6 frank/ops  1 GPU  gpu01          03-02 23:00-03-03 00:00            1 day 2
  gpu02 DRAIN 03-01 12:00-18:00 (8 free GPUs x 6 h = 48 Down); gpu03 MAINT 03-02 12:00-14:00 while job 3 holds
  2 of its 4 GPUs (2 free x 2 h = 4 PlannedDown; job 3's GPUs stay allocated).
planned_gpu_h: per hour, min(idle, eligible pending GPUs). Day 1: job 4 waits 10:00-24:00 with 16 GPUs;
idle was 10 (10-12), 10 (12-18, gpu02 drained), 18 (18-20), 14 (20-24) -> 20 + 60 + 32 + 56 = 168.
Day 2: job 4 waits 00:00-08:00 (idle 14 then 18 -> 56 + 64) and job 5 22:00-24:00 (4 + 4) -> 128.
sreport's own Planned counts requested CPUs only (slurmdbd's _add_planned_time), so for -T gres/gpu it is 0
and the waiting jobs' idle GPU time is in its Idle.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import json

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import warehouse
from models.metrics import timeline, utilization

import timeline_fixtures as tf

D1, D2 = dt.datetime(2024, 3, 1), dt.datetime(2024, 3, 2)


@pytest.fixture(scope="module")
def hand():
    con = warehouse.connect(":memory:")
    tf.load_hand_cluster(con)
    yield con
    con.close()


def rows(df: pl.DataFrame, *cols) -> list[tuple]:
    return [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in df.select(cols).iter_rows()]


def test_daily_cluster_every_column(hand):
    df = utilization.by_bucket(hand, bucket="day", by="cluster")
    assert df.columns == ["bucket", "cluster", *utilization.TOTAL_COLUMNS]
    assert rows(df, *df.columns) == [
        # bucket cluster hours cap unav avail alloc idle ratio beyond pending planned
        #   | sreport (-T gres/gpu): alloc down pdown idle planned reported
        (D1, "tc", 24.0, 480.0, 48.0, 432.0, 148.0, 284.0, round(148 / 432, 6), 0.0, 224.0, 168.0,
         148.0, 48.0, 0.0, 284.0, 0.0, 480.0),
        (D2, "tc", 24.0, 480.0, 4.0, 476.0, 97.0, 379.0, round(97 / 476, 6), 0.0, 136.0, 128.0,
         97.0, 0.0, 4.0, 379.0, 0.0, 480.0),
    ]


def test_daily_by_pool(hand):
    df = utilization.by_bucket(hand, bucket="day", by="pool")
    assert rows(df, "bucket", "gpu_type", "capacity_gpu_h", "unavailable_gpu_h", "allocated_gpu_h", "idle_gpu_h",
                "pending_gpu_h", "planned_gpu_h") == [
        # a100 day 1: idle 8 (10-12), 8 (12-18, gpu02 drained), 16 (18-20), 12 (20-24) against job 4's 16
        (D1, "a100", 384.0, 48.0, 112.0, 224.0, 224.0, 144.0),
        (D1, "h100", 96.0, 0.0, 36.0, 60.0, 0.0, 0.0),
        (D2, "a100", 384.0, 0.0, 49.0, 335.0, 128.0, 112.0),   # job 4: idle 12 (00-04), 16 (04-08)
        (D2, "h100", 96.0, 4.0, 48.0, 44.0, 8.0, 4.0),         # job 5 (typed h100): min(2, 4) + min(1, 4)
    ]


def test_partition_rows_overlap_and_team_rows_split_allocation(hand):
    df = utilization.by_bucket(hand, bucket="day", by="partition,team")
    tot = df.filter(pl.col("team") == utilization.TOTAL_LABEL)
    # 'all' holds every node: its row is the cluster's; a100 + h100 rows also sum to it (no overlap between them)
    assert rows(tot.filter(pl.col("partition") == "all"), "bucket", "capacity_gpu_h", "allocated_gpu_h",
                "idle_gpu_h", "pending_gpu_h") == [(D1, 480.0, 148.0, 284.0, 0.0), (D2, 480.0, 97.0, 379.0, 0.0)]
    demand = df.filter(pl.col("team") != utilization.TOTAL_LABEL)
    assert demand.get_column("capacity_gpu_h").null_count() == demand.height   # capacity is never split by team
    assert rows(demand.filter(pl.col("partition") == "all"), "bucket", "team", "allocated_gpu_h",
                "share_of_available") == [
        (D1, "research", 132.0, round(132 / 432, 6)), (D1, "product", 16.0, round(16 / 432, 6)),
        (D2, "product", 48.0, round(48 / 476, 6)), (D2, "research", 48.0, round(48 / 476, 6)),
        (D2, "(unmapped)", 1.0, round(1 / 476, 6))]
    sums = demand.group_by("bucket", "partition").agg(pl.col("allocated_gpu_h").sum())
    joined = tot.join(sums, on=["bucket", "partition"], suffix="_teams")
    assert (joined["allocated_gpu_h"] - joined["allocated_gpu_h_teams"]).abs().max() < 1e-9


def test_demand_rows_agree_across_buckets_and_partial_days(hand):
    """Team rows come from the daily rollup, from job pieces at the window's partial days, and from job pieces
    split by hour for hour buckets: all three agree with each other and with the job list."""
    teams = lambda df: dict(df.filter(pl.col("team") != "(all)").group_by("team")    # noqa: E731
                            .agg(pl.col("allocated_gpu_h").sum()).iter_rows())
    day = teams(utilization.by_bucket(hand, bucket="day", by="team"))
    hour = teams(utilization.by_bucket(hand, bucket="hour", by="team"))
    assert day == hour == {"research": 180.0, "product": 64.0, "(unmapped)": 1.0}
    # 03-01 10:30 .. 03-02 06:00: job 1 1.5 h x 8, job 3 19.5 h x 2 (research); job 2 8 h x 4 (product)
    part = teams(utilization.by_bucket(hand, "2024-03-01T10:30", "2024-03-02T06:00", bucket="week", by="team"))
    assert part == {"research": 12.0 + 39.0, "product": 32.0}


def test_by_user_and_account(hand):
    df = utilization.by_bucket(hand, "2024-03-02", "2024-03-03", bucket="day", by="account,user")
    assert rows(df, "account", "user", "allocated_gpu_h") == [
        ("(all)", "(all)", 97.0), ("ml", "carol", 48.0), ("cv", "dave", 32.0), ("cv", "bob", 16.0),
        ("ops", "frank", 1.0)]


def test_hour_buckets_and_a_window_inside_hours(hand):
    df = utilization.by_bucket(hand, "2024-03-01T10:30", "2024-03-01T12:30", bucket="hour")
    # 10:30-11: 20 GPUs x .5 h; job 1 (8) + job 3 (2) hold 10; job 4 waits with 16 -> Planned min(5, 8)
    assert rows(df, "bucket", "hours", "capacity_gpu_h", "unavailable_gpu_h", "allocated_gpu_h", "idle_gpu_h",
                "pending_gpu_h", "planned_gpu_h") == [
        (dt.datetime(2024, 3, 1, 10), 0.5, 10.0, 0.0, 5.0, 5.0, 8.0, 5.0),
        (dt.datetime(2024, 3, 1, 11), 1.0, 20.0, 0.0, 10.0, 10.0, 16.0, 10.0),
        (dt.datetime(2024, 3, 1, 12), 0.5, 10.0, 4.0, 1.0, 5.0, 8.0, 5.0),   # gpu02 drained from 12:00
    ]


@pytest.mark.parametrize("bucket,label", [("week", dt.datetime(2024, 2, 26)), ("month", dt.datetime(2024, 3, 1))])
def test_week_and_month_buckets_sum_the_days(hand, bucket, label):
    df = utilization.by_bucket(hand, bucket=bucket)
    assert rows(df, "bucket", "hours", "capacity_gpu_h", "allocated_gpu_h", "idle_gpu_h", "planned_gpu_h") == [
        (label, 48.0, 960.0, 245.0, 663.0, 296.0)]


def test_window_is_clipped_to_the_horizon(hand):
    df = utilization.by_bucket(hand, "2024-03-02", "2024-03-10", bucket="day")
    assert df.height == 1 and rows(df, "hours", "capacity_gpu_h") == [(24.0, 480.0)]


def test_bad_grouping_and_bucket_are_errors(hand):
    with pytest.raises(ValueError, match="cannot group by 'colour'"):
        utilization.by_bucket(hand, by="colour")
    with pytest.raises(ValueError, match="bucket must be one of"):
        utilization.by_bucket(hand, bucket="fortnight")
    with pytest.raises(ValueError, match="empty window"):
        utilization.by_bucket(hand, "2024-03-02", "2024-03-01")


def test_empty_warehouse_gives_empty_table(con):
    assert utilization.by_bucket(con, by="pool,team").is_empty()


def test_real_slurm_capture_reconciles_with_sreport(run_cli, db_path):
    """tests/fixtures/slurm_real: a real Slurm 22.05 run and its own `sreport -T gres/gpu cluster utilization
    -t seconds` for 12:00-13:00: Allocated 236, Down 20, PLND Down 0, Idle 10136, Planned 0, Reported 10392."""
    real = tf.FIXTURES / "slurm_real"
    assert run_cli("ingest", "sacct", str(real / "sacct-allocations.psv"))[0] == 0
    assert run_cli("ingest", "nodes", "--as-of", "2026-12-02T12:47:12", str(real / "scontrol-show-node-o.txt"))[0] == 0
    assert run_cli("ingest", "events", str(real / "sacctmgr-event.psv"))[0] == 0
    con = warehouse.connect(db_path)
    try:
        df = utilization.by_bucket(con, "2026-12-02T12:00", "2026-12-02T13:00", bucket="hour")
        span = timeline.data_span(con).row(0, named=True)
    finally:
        con.close()
    r = {k: (round(v * 3600, 6) if isinstance(v, float) and k.endswith(("_h", "_gpu_h")) or k.startswith("sreport")
             else v) for k, v in df.row(0, named=True).items()}
    assert (r["sreport_allocated"], r["sreport_down"], r["sreport_planned_down"], r["sreport_planned"]) == (
        236.0, 20.0, 0.0, 0.0)
    # sreport counts all 12 GPUs from the cluster's registration (12:45:34, a cluster-level event) to the end of
    # the rolled-up hour; our data span is the accounting's own [first start, last timestamp]. The rest is idle.
    outside = 12 * ((span["data_start"] - dt.datetime(2026, 12, 2, 12, 45, 34))
                    + (dt.datetime(2026, 12, 2, 13) - span["horizon"])).total_seconds()
    assert r["sreport_reported"] + outside == 10392
    assert r["sreport_idle"] + outside == 10136
    assert r["allocated_gpu_h"] == 236.0 and r["beyond_capacity_gpu_h"] == 0.0


def test_cli_says_capacity_is_not_known_without_a_node_inventory(run_cli):
    """The same real jobs without `ingest nodes`: capacity, available and idle read 0 for want of data, and the
    note says so (all 236 GPU-seconds beyond capacity) instead of the partial-inventory note; with the inventory
    neither note is printed."""
    real = tf.FIXTURES / "slurm_real"
    assert run_cli("ingest", "sacct", str(real / "sacct-allocations.psv"))[0] == 0
    code, out, err = run_cli("report", "utilization", "--from", "2026-12-02T12:00", "--to", "2026-12-02T13:00",
                             "--bucket", "hour", "--format", "csv")
    assert code == 0
    row = next(csv.DictReader(io.StringIO(out)))
    assert float(row["capacity_gpu_h"]) == 0 and round(float(row["beyond_capacity_gpu_h"]) * 3600, 6) == 236
    assert ("note: no GPU capacity known (no node inventory): capacity_gpu_h, unavailable_gpu_h, available_gpu_h "
            "and idle_gpu_h read 0 for want of data, and every allocated GPU-hour is beyond_capacity_gpu_h "
            "(0.07)") in err
    assert "inventory lacks" not in err
    assert run_cli("ingest", "nodes", "--as-of", "2026-12-02T12:47:12", str(real / "scontrol-show-node-o.txt"))[0] == 0
    code, out, err = run_cli("report", "utilization", "--from", "2026-12-02T12:00", "--to", "2026-12-02T13:00")
    assert code == 0 and "note:" not in err


# ---------------------------------------------------------------- invariants

def _expected_job_gpu_h(jobs, start, end, horizon):
    tot = 0.0
    for j in jobs:
        if j.start is None:
            continue
        a, b = max(j.start, start), min(j.end or horizon, end, horizon)
        tot += j.gpus * max(0.0, (b - a).total_seconds()) / 3600
    return tot


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tf.clusters(), st.sampled_from(["hour", "day"]), st.sampled_from(["cluster", "pool", "partition", "pool,partition"]))
def test_invariants(cluster, bucket, by):
    nodes, jobs, events = cluster
    con = warehouse.connect(":memory:")
    try:
        tf.load(con, "hc", jobs, nodes, events)
        df = utilization.by_bucket(con, bucket=bucket, by=by)
        if df.is_empty():   # no job ever started: no data span
            assert timeline.data_span(con).is_empty()   # nothing ever ran before the horizon
            return
        # allocated + idle + unavailable = capacity in every row (these clusters never over-allocate)
        assert df["beyond_capacity_gpu_h"].abs().max() < 1e-9
        gap = df["allocated_gpu_h"] + df["idle_gpu_h"] + df["unavailable_gpu_h"] - df["capacity_gpu_h"]
        assert gap.abs().max() < 1e-6
        # sreport's identity
        rep = (df["sreport_allocated"] + df["sreport_down"] + df["sreport_planned_down"] + df["sreport_idle"]
               + df["sreport_planned"] - df["sreport_reported"])
        assert rep.abs().max() < 1e-6 and df["sreport_idle"].min() >= -1e-9
        assert (df["planned_gpu_h"] <= df["idle_gpu_h"] + 1e-9).all()
        assert (df["planned_gpu_h"] <= df["pending_gpu_h"] + 1e-9).all()
        # allocated summed over buckets = sum over jobs of GPUs x run time inside the window
        span = timeline.data_span(con).row(0, named=True)
        if by in ("cluster", "pool"):
            want = _expected_job_gpu_h(jobs, span["data_start"], span["horizon"], span["horizon"])
            assert abs(df["allocated_gpu_h"].sum() - want) < 1e-6
        mid = span["data_start"] + (span["horizon"] - span["data_start"]) / 3
        sub = utilization.by_bucket(con, start=mid, bucket=bucket)
        want = _expected_job_gpu_h(jobs, mid, span["horizon"], span["horizon"])
        assert abs((sub["allocated_gpu_h"].sum() if sub.height else 0.0) - want) < 1e-6
        per_job = timeline.job_gpu_seconds(con, start=mid)
        assert abs(per_job["gpu_seconds"].sum() / 3600 - want) < 1e-6
    finally:
        con.close()


# ---------------------------------------------------------------- CLI

@pytest.fixture
def hand_db(db_path):
    con = warehouse.connect(db_path)
    tf.load_hand_cluster(con)
    con.close()
    return db_path


def test_cli_table_csv_json(hand_db, run_cli, tmp_path):
    code, out, err = run_cli("report", "utilization", "--bucket", "day")
    assert code == 0 and "sreport_reported" in out and "480.00" in out
    code, out, err = run_cli("report", "utilization", "--by", "pool,team", "--format", "csv", "--from", "2024-03-02")
    assert code == 0
    csv = pl.read_csv(out.encode())
    assert csv.filter(pl.col("team") == "(all)")["capacity_gpu_h"].to_list() == [384.0, 96.0]
    target = tmp_path / "u.json"
    code, out, err = run_cli("report", "utilization", "--bucket", "month", "--out", str(target))
    assert code == 0 and out == ""
    data = json.loads(target.read_text())
    assert data[0]["allocated_gpu_h"] == 245.0 and data[0]["sreport_reported"] == 960.0


def test_cli_bad_usage_exits_2(hand_db, run_cli):
    code, out, err = run_cli("report", "utilization", "--by", "colour")
    assert code == 2 and "cannot group by 'colour'" in err
    code, out, err = run_cli("report", "utilization", "--from", "yesterday")
    assert code == 2 and "--from: not a time: 'yesterday'" in err
