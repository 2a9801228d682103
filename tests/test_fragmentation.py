"""Fragmentation: exact figures on hand-computed clusters, FGD against the published example, blocked-by-
fragmentation classification, invariants under hypothesis (including agreement with utilization), the daily mart
against the sample grid, CLI."""
from __future__ import annotations

import datetime as dt
from unittest import mock

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import warehouse
from models.metrics import fragmentation as fr
from models.metrics import blocked as fb
from models.metrics import timeline, utilization

import timeline_fixtures as tf
from timeline_fixtures import T, Job
from models.marts import timeline as timeline_mart
from models.definitions import times


def r6(v):
    return round(v, 6) if isinstance(v, float) else v


def rows(df: pl.DataFrame, *cols) -> list[tuple]:
    return [tuple(r6(v) for v in r) for r in df.select(cols).iter_rows()]


@pytest.fixture(scope="module")
def hand():
    con = warehouse.connect(":memory:")
    tf.load_hand_cluster(con)
    yield con
    con.close()


# Scenario F: two 8-GPU nodes; job 3 (8 GPUs) waits 01:00-03:00 while each node has 4 free: fragmentation.
F_JOBS = [Job(1, "al", "ml", "gpu", 4, ["n1"], start=T("03-01 00:00"), end=T("03-01 06:00")),
          Job(2, "bo", "cv", "gpu", 4, ["n2"], start=T("03-01 00:00"), end=T("03-01 03:00")),
          Job(3, "cy", "ml", "gpu", 8, ["n2"], submit=T("03-01 01:00"), start=T("03-01 03:00"), end=T("03-01 05:00")),
          Job(4, "di", "cv", "gpu", 16, ["n1", "n2"], submit=T("03-01 02:00"), start=T("03-01 06:00"),
              end=T("03-01 07:00")),
          Job(5, "ed", "cv", "gpu", 1, ["n1"], submit=T("03-01 04:00"), start=T("03-01 04:30"), end=T("03-01 05:30"))]


@pytest.fixture(scope="module")
def scen_f():
    con = warehouse.connect(":memory:")
    tf.load(con, "fc", F_JOBS, [("n1", 8, "a100", "gpu"), ("n2", 8, "a100", "gpu")],
            team_map=[("research", "ml"), ("product", "cv")])
    yield con
    con.close()


def test_hand_cluster_daily_by_pool_every_column(hand):
    df = fr.report(hand, bucket="day", by="pool", interval="1h")
    assert df.columns[:6] == ["bucket", "cluster", "gpu_type", "samples", "nodes_up", "free_gpus"]
    d1, d2 = dt.datetime(2024, 3, 1), dt.datetime(2024, 3, 2)
    # a100 day 1, hourly samples: 00-11 gpu01 full + gpu02 8 free; 12-17 gpu01 8 free, gpu02 drained;
    # 18-19 both free; 20-23 gpu01 8, gpu02 4 (job 2). Workload: jobs 1 (8), 2 (4), 4 (2 x 8) submitted.
    # FGD: only gpu02 with 4 free (4 samples) fragments, for the 8-GPU specs (p = 2/3): 4 x 4000 x 2/3.
    # a100 day 2: 00-03 12 free, 04-07 16, 08-09 0 (job 4), 10-22 16, 23 15 (job 6); workload job 6 (1 GPU).
    # h100: gpu03 4 free until job 3 takes 2 at 06:00; day 2 MAINT 12-14 removes 2 samples; job 5 (typed h100,
    # 4 GPUs) is day 2's workload: every free GPU of gpu03 is a fragment for it.
    want = {
        (d1, "a100"): dict(samples=24, nodes_up=42 / 24, free_gpus=224 / 24, nodes_free_0=12 / 24,
                           nodes_free_4=4 / 24, nodes_free_8=26 / 24, whole_free_nodes=26 / 24,
                           whole_free_nodes_min=1, largest_single_node=8.0, largest_single_node_min=8,
                           largest_gang_gpus=26 * 8 / 24, largest_gang_gpus_min=8, stranded_1=0.0, stranded_2=0.0,
                           stranded_4=0.0, stranded_8=16 / 24, stranded_multinode=16 / 24,
                           fgd_frag_gpus=4 * 4 * (2 / 3) / 24, fgd_rate=(4 * 4000 * 2 / 3) / 224000,
                           workload_jobs=3, workload_specs=2),
        (d1, "h100"): dict(samples=24, nodes_up=1.0, free_gpus=60 / 24, nodes_free_0=0.0, nodes_free_2=18 / 24,
                           nodes_free_4=6 / 24, nodes_free_8=0.0, whole_free_nodes=6 / 24, whole_free_nodes_min=0,
                           largest_single_node=60 / 24, largest_single_node_min=2, largest_gang_gpus=1.0,
                           largest_gang_gpus_min=0, stranded_1=0.0, stranded_2=0.0, stranded_4=36 / 24,
                           stranded_8=60 / 24, stranded_multinode=36 / 24, fgd_frag_gpus=0.0, fgd_rate=0.0,
                           workload_jobs=1, workload_specs=1),
        (d2, "a100"): dict(samples=24, nodes_up=2.0, free_gpus=335 / 24, nodes_free_0=4 / 24, nodes_free_4=4 / 24,
                           nodes_free_7=1 / 24, nodes_free_8=39 / 24, whole_free_nodes=39 / 24,
                           whole_free_nodes_min=0, largest_single_node=22 * 8 / 24, largest_single_node_min=0,
                           largest_gang_gpus=13.0, largest_gang_gpus_min=0, stranded_8=23 / 24,
                           stranded_multinode=23 / 24, fgd_frag_gpus=0.0, fgd_rate=0.0, workload_jobs=1,
                           workload_specs=1),
        (d2, "h100"): dict(samples=24, nodes_up=22 / 24, free_gpus=44 / 24, nodes_free_2=22 / 24,
                           whole_free_nodes=0.0, largest_single_node=44 / 24, largest_single_node_min=0,
                           stranded_4=44 / 24, stranded_multinode=44 / 24, fgd_frag_gpus=44 / 24, fgd_rate=1.0,
                           workload_jobs=1, workload_specs=1),
    }
    got = {(r["bucket"], r["gpu_type"]): r for r in df.iter_rows(named=True)}
    assert set(got) == set(want)
    for key, cols in want.items():
        for c, v in cols.items():
            assert r6(got[key][c]) == r6(v), (key, c)
    # unmentioned histogram columns are zero, and the histogram adds up
    for r in df.iter_rows(named=True):
        assert abs(sum(r[f"nodes_free_{k}"] for k in range(9)) - r["nodes_up"]) < 1e-9
        assert abs(sum(k * r[f"nodes_free_{k}"] for k in range(9)) - r["free_gpus"]) < 1e-9


def test_free_gpus_agree_with_utilization_idle(hand):
    """With every edge on the hour and hourly samples, mean free GPUs x hours = utilization's idle GPU-hours."""
    frag = fr.report(hand, bucket="day", by="pool", interval="1h")
    util = utilization.by_bucket(hand, bucket="day", by="pool")
    j = frag.join(util, on=["bucket", "gpu_type"])
    assert rows(j, "free_gpus") and all(
        abs(a * 24 - b) < 1e-9 for a, b in j.select("free_gpus", "idle_gpu_h").iter_rows())


def test_partition_cells_overlap(hand):
    df = fr.report(hand, bucket="day", by="partition")
    by_part = {(r["bucket"].day, r["partition"]): r for r in df.iter_rows(named=True)}
    assert by_part[(1, "all")]["samples"] == 288   # 5-minute samples by default
    assert r6(by_part[(1, "all")]["free_gpus"]) == r6(by_part[(1, "a100")]["free_gpus"] + by_part[(1, "h100")]["free_gpus"])
    assert by_part[(1, "all")]["workload_jobs"] == 0 and by_part[(1, "all")]["fgd_rate"] is None   # nobody asked 'all'


def test_samples_show_the_state_at_each_time(scen_f):
    s = fr.samples(scen_f, "2024-03-01T01:00", "2024-03-01T01:10", by="pool")
    assert rows(s, "ts", "nodes_up", "free_gpus", "whole_free_nodes", "largest_single_node") == [
        (T("03-01 01:00"), 2, 8, 0, 4), (T("03-01 01:05"), 2, 8, 0, 4)]
    assert s["ge"].to_list()[0][:5] == [2, 2, 2, 2, 0]


def test_hourly_summary_scenario_f(scen_f):
    df = fr.report(scen_f, "2024-03-01T01:00", "2024-03-01T02:00", bucket="hour", by="pool")
    # n1 and n2 each 4 free all hour; job 3 (8 GPUs) is the hour's workload: all 8 free GPUs are fragments
    assert rows(df, "samples", "free_gpus", "nodes_free_4", "whole_free_nodes", "largest_single_node",
                "largest_gang_gpus", "stranded_4", "stranded_8", "stranded_multinode", "fgd_frag_gpus", "fgd_rate",
                "workload_jobs") == [(12, 8.0, 2.0, 0.0, 4.0, 0.0, 0.0, 8.0, 8.0, 8.0, 1.0, 1)]


def test_blocked_per_job_scenario_f(scen_f):
    jobs = fb.per_job(scen_f)
    assert rows(jobs.sort("job_id"), "job_id", "team", "size_class", "wait_h", "placeable_h", "fragmentation_h",
                "capacity_h", "unknown_h", "wait_gpu_h", "fragmentation_gpu_h") == [
        ("3", "research", "5-8", 2.0, 0.0, 2.0, 0.0, 0.0, 16.0, 16.0),         # 4 + 4 free, no node with 8
        ("4", "product", "9-16", 4.0, 0.0, 0.0, 4.0, 0.0, 64.0, 0.0),  # never 16 free in total
        ("5", "product", "1", 0.5, 0.5, 0.0, 0.0, 0.0, 0.5, 0.0),           # n1 had 4 free: not GPUs
    ]


def test_blocked_by_team_and_size_class(scen_f):
    df = fb.blocked(scen_f)
    assert rows(df, "team", "size_class", "jobs", "wait_gpu_h", "placeable_gpu_h", "fragmentation_gpu_h",
                "capacity_gpu_h", "fragmentation_share", "fragmentation_share_of_all_wait") == [
        ("product", "1", 1, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0),
        ("product", "9-16", 1, 64.0, 0.0, 0.0, 64.0, 0.0, 0.0),
        ("research", "5-8", 1, 16.0, 0.0, 16.0, 0.0, 1.0, r6(16 / 80.5)),
        ("(all)", "(all)", 3, 80.5, 0.5, 16.0, 64.0, r6(16 / 80.5), r6(16 / 80.5)),
    ]


def test_blocked_hand_cluster(hand):
    jobs = {r["job_id"]: r for r in fb.per_job(hand).iter_rows(named=True)}
    # job 4 (16 GPUs on 2 nodes): 10-12 gpu01 busy, 12-18 gpu02 drained, 20-04 gpu02 half busy -> capacity 16 h;
    # 18-20 and 04-08 both nodes free -> placeable 6 h (it waited for other reasons)
    assert (jobs["4"]["wait_h"], jobs["4"]["capacity_h"], jobs["4"]["placeable_h"], jobs["4"]["fragmentation_h"]) == (
        22.0, 16.0, 6.0, 0.0)
    assert (jobs["5"]["wait_h"], jobs["5"]["capacity_h"], jobs["5"]["gpu_type"]) == (2.0, 2.0, "h100")


def test_unknown_partition_is_unknown_not_blocked(con):
    jobs = [Job(1, "a", "x", "gpu", 2, ["n1"], start=T("03-01 00:00"), end=T("03-01 02:00")),
            Job(2, "a", "x", "nowhere", 2, submit=T("03-01 01:00"))]
    tf.load(con, "c", jobs, [("n1", 8, "a100", "gpu")])
    r = fb.per_job(con).row(0, named=True)
    assert (r["wait_h"], r["unknown_h"], r["fragmentation_h"]) == (1.0, 1.0, 0.0)


def test_fgd_formula_matches_the_published_example():
    # ../shared/METRICS.md 1.1: free = [1000, 1000, 500, 0 x 5]; M = {1 GPU .5, 0.5 GPU .3, 8 GPU .2} -> 750
    m = pl.DataFrame({"k": [1, 1, 8], "q": [1000, 500, 1000], "p": [0.5, 0.3, 0.2]})
    got = m.select((pl.col("p") * fr.fgd_fragment(pl.lit(2), pl.lit(500), pl.col("k"), pl.col("q"))).sum()).item()
    assert got == pytest.approx(750.0)


def test_fractional_gpus(con):
    """GPU-sharing jobs (gpu_milli, as trace converters write them) are packed: 0.5 + 0.3 share one GPU."""
    jobs = [Job(1, "a", "x", "gpu", 1, ["n1"], start=T("03-01 00:00"), end=T("03-01 01:00")),
            Job(2, "a", "x", "gpu", 1, ["n1"], start=T("03-01 00:00"), end=T("03-01 01:00")),
            Job(3, "a", "x", "gpu", 2, ["n1"], start=T("03-01 00:00"), end=T("03-01 01:00"))]
    tf.load(con, "c", jobs, [("n1", 8, "a100", "gpu")], refresh=False)
    for job_id, milli in (("1", 500), ("2", 300)):
        uid = con.execute("SELECT job_uid FROM jobs WHERE job_id = ?", [job_id]).fetchall()[0][0]
        con.execute("UPDATE jobs SET gpu_milli = ?, ngpus = ? / 1000 WHERE job_uid = ?", [milli, milli, uid])
        con.execute("UPDATE job_nodes SET gpus_on_node = ? / 1000 WHERE job_uid = ?", [milli, uid])
    timeline_mart.build(con)
    df = fr.report(con, bucket="hour", by="pool")
    # whole 2 + one shared GPU (800 milli used) -> f = 5, r = 200; tasks (1, 500), (1, 300), (2, 1000) at 1/3:
    # F = 200 [200 < 500] + 200 [200 < 300] + (200 + 0) over 3 = 200 milli; FREE = 5200
    assert rows(df, "free_gpus", "nodes_free_5", "stranded_1", "stranded_8", "fgd_frag_gpus", "fgd_rate") == [
        (5.2, 1.0, 0.2, 5.2, 0.2, r6(200 / 5200))]
    assert utilization.by_bucket(con, bucket="hour")["allocated_gpu_h"].to_list() == [2.8]


def test_bad_arguments(hand):
    with pytest.raises(ValueError, match="cannot read duration"):
        fr.report(hand, interval="soon")
    with pytest.raises(ValueError, match="cannot group by 'team'"):
        fr.report(hand, by="team")
    with pytest.raises(ValueError, match="cannot group by 'colour'"):
        fb.blocked(hand, by="colour")
    assert times.parse_duration("5m") == 300 and times.parse_duration("1h") == 3600 and times.parse_duration(60) == 60


# ---------------------------------------------------------------- invariants

@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tf.clusters(), st.sampled_from(["pool", "partition", "pool,partition"]))
def test_invariants(cluster, by):
    nodes, jobs, events = cluster
    con = warehouse.connect(":memory:")
    try:
        tf.load(con, "hc", jobs, nodes, events)
        df = fr.report(con, bucket="day", by=by)   # 5-min samples; every edge is on the 15-minute grid
        if df.is_empty():
            assert timeline.data_span(con).is_empty()   # nothing ever ran before the horizon
            return
        k = fr.max_gpus_per_node(con)
        hist = sum(pl.col(f"nodes_free_{i}") for i in range(k + 1))
        weighted = sum(i * pl.col(f"nodes_free_{i}") for i in range(k + 1))
        assert df.select((hist - pl.col("nodes_up")).abs().max()).item() < 1e-9
        assert df.select((weighted - pl.col("free_gpus")).abs().max()).item() < 1e-9
        sizes = [c for c in df.columns if c.startswith("stranded_") and c[9:].isdigit()]
        for a, b in zip(sizes, sizes[1:]):
            assert (df[a] <= df[b] + 1e-9).all()
        assert (df["stranded_multinode"] <= df["free_gpus"] + 1e-9).all()
        assert df["fgd_rate"].drop_nulls().is_between(0, 1).all()
        assert (df["largest_single_node_min"] <= df["largest_single_node"] + 1e-9).all()
        assert (df["largest_single_node"] <= k).all()
        # the sweep (per-sample state) and the histogram agree; free GPU-hours = utilization's idle
        samp = fr.samples(con, by=by)
        keys = ["cluster", *[c for c in ("gpu_type", "partition") if c in df.columns]]
        mean = samp.group_by([pl.col("ts").dt.truncate("1d").alias("bucket"), *keys]).agg(
            pl.col("free_gpus").mean().alias("f2"), pl.col("nodes_up").mean().alias("n2"))
        j = df.join(mean, on=["bucket", *keys])
        assert j.height == df.height
        assert j.select((pl.col("free_gpus") - pl.col("f2")).abs().max()).item() < 1e-9
        assert j.select((pl.col("nodes_up") - pl.col("n2")).abs().max()).item() < 1e-9
        if by == "pool":
            util = utilization.by_bucket(con, bucket="day", by="pool")
            u = df.join(util, on=["bucket", "gpu_type"])
            assert u.select((pl.col("free_gpus") * pl.col("samples") / 12 - pl.col("idle_gpu_h")).abs().max()).item() < 1e-6
        # every pending sample of every job is classified exactly once
        pj = fb.per_job(con)
        if pj.height:
            parts = pj["placeable_h"] + pj["fragmentation_h"] + pj["capacity_h"] + pj["unknown_h"]
            assert (parts - pj["wait_h"]).abs().max() < 1e-9
            assert pj["unknown_h"].min() >= 0
        # the daily mart sums to what the sample grid gives, over the whole span and over whole days inside it
        lo, hi = con.sql("SELECT min(data_start), max(horizon) FROM tl_clusters").fetchall()[0]
        day = dt.timedelta(days=1)
        first = lo.replace(hour=0, minute=0, second=0, microsecond=0)
        for win in ((lo, hi), (first + day, first + 2 * day), (first, hi)):
            mart = fb._from_mart(con, win)
            assert mart is not None
            direct = fb._compute(con, win, fr.DEFAULT_INTERVAL_S)
            cols = ["job_uid", "samples", "placeable", "fragmentation", "capacity"]
            if direct.is_empty():
                assert mart.is_empty()
            else:
                assert mart.select(cols).sort("job_uid").to_dicts() == direct.select(cols).sort("job_uid").to_dicts()
        # and blocked() summed in SQL from the mart = blocked() summed from the grid's per-job rows
        for dims in (["team", "size_class"], ["gpu_type", "partition", "account"], []):
            from_mart = fb.blocked(con, by=dims)
            with mock.patch.object(fb, "_from_mart", lambda *a: None), \
                 mock.patch.object(fb, "_groups_from_mart", lambda *a: None):
                direct = fb.blocked(con, by=dims)
            assert from_mart.columns == direct.columns and from_mart.height == direct.height
            for a, b in zip(from_mart.iter_rows(), direct.iter_rows()):
                for x, y in zip(a, b):
                    assert x == (pytest.approx(y, rel=1e-12, abs=1e-12) if isinstance(y, float) else y), dims
    finally:
        con.close()


# ---------------------------------------------------------------- the daily mart

def _same_reports(con, win) -> None:
    """report() from the daily mart = report() from the sample grid, every bucket, granularity and column."""
    for bucket in ("day", "week", "month"):
        for by in (("gpu_type",), ("gpu_type", "partition"), "partition,pool"):
            mart = fr.report(con, *win, bucket=bucket, by=by)
            with mock.patch.object(fr, "_from_mart", lambda *a: None):
                grid = fr.report(con, *win, bucket=bucket, by=by)
            assert mart.schema == grid.schema and mart.height == grid.height, (bucket, by)
            for a, b in zip(mart.iter_rows(), grid.iter_rows()):
                for x, y in zip(a, b):
                    assert x == (pytest.approx(y, rel=1e-9, abs=1e-12) if isinstance(y, float) else y), (bucket, by)


def _share_first_job(con) -> None:
    """Make the first job that ran a GPU-sharing one (half a GPU), as trace converters write them."""
    uid = con.sql("SELECT min(job_uid) FROM job_nodes").fetchall()[0][0]
    if uid is not None:
        con.execute("UPDATE jobs SET gpu_milli = 500, ngpus = 0.5 WHERE job_uid = ?", [uid])
        con.execute("UPDATE job_nodes SET gpus_on_node = 0.5 WHERE job_uid = ?", [uid])


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tf.clusters(), st.booleans(), st.integers(0, 2))
def test_daily_mart_equals_the_sample_grid(cluster, sharing, first_day):
    nodes, jobs, events = cluster
    con = warehouse.connect(":memory:")
    try:
        tf.load(con, "hc", jobs, nodes, events, refresh=False)
        if sharing:
            _share_first_job(con)
        timeline_mart.build(con)
        lo, hi = con.sql("SELECT min(data_start), max(horizon) FROM tl_clusters").fetchall()[0]
        if lo is None:
            return
        day = dt.timedelta(days=1)
        d0 = lo.replace(hour=0, minute=0, second=0, microsecond=0) + first_day * day
        windows = [(lo, hi), (d0, d0 + day), (d0, d0 + 8 * day), (lo - dt.timedelta(minutes=7), d0 + day)]
        for win in windows:
            if win[1] > win[0]:
                assert fr._from_mart(con, win, ["gpu_type"], "day", fr.max_gpus_per_node(con)) is not None
                _same_reports(con, win)
        # a bound inside the span off midnight: the sample grid
        if hi - lo > dt.timedelta(hours=1):
            win = (lo + dt.timedelta(minutes=35), hi)
            assert fr._from_mart(con, win, ["gpu_type"], "day", fr.max_gpus_per_node(con)) is None
    finally:
        con.close()


@pytest.mark.parametrize("later", [[("n1", 8, "a100", "p1"), ("n2", 4, "h100", "p1")],
                                   [("n1", 8, "a100", "p1,p2")],
                                   [("n1", 8, "a100", "p1"), ("n2", 8, "a100", "p1"), ("n3", 16, "a100", "p1")]])
def test_daily_mart_incremental_equals_full(later):
    """Second export: job 3 ends, job 5 (untyped, waiting since day 1) ran on day 3. With pools a100 + h100 in
    p1, job 5's pool is where it ran: its day-1 workload changes while the free GPUs change from day 2. With n1
    put in p2 as well on day 3, cell (a100, p2) exists on every day. With a 16-GPU node arriving on day 3 beside
    two 8-GPU ones, a node of job 6's cell is big enough on every day (12 GPUs on one node, waiting from day 1):
    blocked by fragmentation where 12 GPUs were free, not by capacity. The incremental refresh's mart rows (and
    the blocked-wait rollup's) = a full rebuild's, and report() = the grid."""
    con = warehouse.connect(":memory:")
    try:
        first = [Job(1, "a", "x", "p1", 2, ["n1"], submit=T("03-01 01:00"), start=T("03-01 02:00"),
                     end=T("03-02 12:00")),
                 Job(2, "a", "x", "p1", 4, submit=T("03-01 05:00")),
                 Job(3, "a", "x", "p1", 1, ["n1"], submit=T("03-01 06:00"), start=T("03-01 07:00")),
                 Job(5, "a", "x", "p1", 8, submit=T("03-01 10:00")),
                 Job(6, "a", "x", "p1", 12, submit=T("03-01 00:30"))]
        tf.load(con, "c", first, [n for n in later if n[0] == "n2"] + [("n1", 8, "a100", "p1")])
        second = [Job(3, "a", "x", "p1", 1, ["n1"], submit=T("03-01 06:00"), start=T("03-01 07:00"),
                      end=T("03-03 03:00")),
                  Job(5, "a", "x", "p1", 8, ["n1"], submit=T("03-01 10:00"), start=T("03-03 04:00"),
                      end=T("03-03 08:00"))]
        tf.load(con, "c", second, later, as_of="2024-03-03T04:00:00")
        marts = ("tl_frag_state_daily", "tl_frag_partial_daily", "tl_frag_workload_daily", "tl_blocked_daily")
        incremental = {t: con.sql(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in marts}
        timeline_mart.build(con, full=True)
        assert incremental == {t: con.sql(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in marts}
        _same_reports(con, (None, None))
    finally:
        con.close()


# ---------------------------------------------------------------- CLI

@pytest.fixture
def f_db(db_path):
    con = warehouse.connect(db_path)
    tf.load(con, "fc", F_JOBS, [("n1", 8, "a100", "gpu"), ("n2", 8, "a100", "gpu")],
            team_map=[("research", "ml"), ("product", "cv")])
    con.close()
    return db_path


def test_cli_views(f_db, run_cli, tmp_path):
    code, out, err = run_cli("report", "fragmentation", "--bucket", "hour")
    assert code == 0 and "fgd_rate" in out and "stranded_multinode" in out
    code, out, err = run_cli("report", "fragmentation", "--view", "blocked", "--format", "csv")
    assert code == 0
    csv = pl.read_csv(out.encode())
    assert csv.filter(pl.col("team") == "(all)")["fragmentation_gpu_h"].to_list() == [16.0]
    code, out, err = run_cli("report", "fragmentation", "--view", "jobs", "--out", str(tmp_path / "j.json"))
    assert code == 0 and '"fragmentation_gpu_h": 16.0' in (tmp_path / "j.json").read_text()
    code, out, err = run_cli("report", "fragmentation", "--view", "blocked", "--by", "account")
    assert code == 0 and "cv" in out and "ml" in out


def test_cli_bad_usage(f_db, run_cli):
    code, out, err = run_cli("report", "fragmentation", "--interval", "7x")
    assert code == 2 and "cannot read duration" in err
    code, out, err = run_cli("report", "fragmentation", "--by", "team")
    assert code == 2 and "cannot group by 'team'" in err
