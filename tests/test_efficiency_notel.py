"""The per-day rollup of jobs without telemetry (models/marts/efficiency_notel.py) and the efficiency reports that
read it (models/metrics/efficiency.py): day rows by hand, reports over windows whose edges are not on a day or an
hour equal the per-job computation (hypothesis), the incremental rollup equals a full rebuild (hypothesis)."""
from __future__ import annotations

import datetime as dt

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from ingest import warehouse
from models.marts import efficiency as efficiency_mart, efficiency_notel
from models.metrics import efficiency
from telemetry_fixtures import add_jobs, at, busy, load_readings, readings

DAY = 24 * 60   # minutes; at(0) is 2026-07-14 10:00 UTC


def _refresh(con, full: bool = False) -> None:
    efficiency_mart.build(con, full)
    efficiency_notel.build(con, full)


def _exact(con, read):
    """``read()`` with the rollup set aside (its mart state behind the efficiency mart's): every job expanded."""
    con.execute("UPDATE mart_state SET last_run_id = last_run_id - 1000 WHERE mart = 'efficiency_notel'")
    try:
        return read()
    finally:
        con.execute("UPDATE mart_state SET last_run_id = last_run_id + 1000 WHERE mart = 'efficiency_notel'")


def _close(a: list[tuple], b: list[tuple]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(u == pytest.approx(v, rel=1e-9, abs=1e-9) if isinstance(u, float) and v is not None
                                 else u == v for u, v in zip(x, y)) for x, y in zip(a, b))


def test_day_rows_and_a_window_cut_inside_days(tmp_path):
    """Job 1 (2 GPUs, dark) 07-14 10:30 to 07-16 02:30: 13.5 h, 24 h, 2.5 h a day. Job 2 (1 GPU, dark, user bob)
    07-15 01:00 to 07-15 03:00. Job 3 (1 GPU) has telemetry: not rolled up. The window 07-14 22:10 to 07-16 01:20
    (rounded out to whole hours: 22:00 to 02:00) holds job 1's 2 + 24 + 2 h and job 2's 2 h."""
    con = warehouse.connect(":memory:")
    add_jobs(con, tmp_path, [dict(id=1, start=30, end=30 + 40 * 60, gpus=2, nodes="dark1"),
                             dict(id=2, start=15 * 60, end=17 * 60, gpus=1, nodes="dark2", user="bob"),
                             dict(id=3, start=0, end=60, gpus=1, nodes="lit1")])
    load_readings(con, readings({("lit1", 0): busy(range(60), 50)}))
    _refresh(con)
    rows = con.sql("""SELECT day::VARCHAR, "user", alloc_gpu_s / 3600, jobs, jobs_first FROM gpu_efficiency_notel_day
                      ORDER BY ALL""").fetchall()
    assert rows == [("2026-07-14", "alice", 27.0, 1, 1), ("2026-07-15", "alice", 48.0, 1, 0),
                    ("2026-07-15", "bob", 2.0, 1, 1), ("2026-07-16", "alice", 5.0, 1, 0)]
    lo, hi = dt.datetime(2026, 7, 14, 22, 10), dt.datetime(2026, 7, 16, 1, 20)
    assert efficiency._whole_days(con, *efficiency._window(con, lo, hi)) == (dt.datetime(2026, 7, 15),
                                                                             dt.datetime(2026, 7, 16))
    day = efficiency.by_group(con, lo, hi, by=["user"], bucket="day")
    assert day.select("bucket", "user", "jobs", "alloc_gpu_h").rows() == [
        (dt.datetime(2026, 7, 14), "alice", 1, 4.0), (dt.datetime(2026, 7, 15), "alice", 1, 48.0),
        (dt.datetime(2026, 7, 15), "bob", 1, 2.0), (dt.datetime(2026, 7, 16), "alice", 1, 4.0)]
    total = efficiency.summary(con, lo, hi)
    assert (total["jobs"], total["jobs_without_telemetry"], total["alloc_gpu_h"]) == (2, 2, 58.0)
    con.close()


@st.composite
def sites(draw):
    """Up to 8 jobs over five days from 07-14 10:00 on dark nodes (no telemetry) and one lit node (readings for
    its first three hours only: a later job there has none, and takes its pool from the exporter's model), some
    running to the end, two users and partitions; and a window with edges at random minutes (or open)."""
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        s = draw(st.integers(-600, 5 * DAY))
        e = None if draw(st.integers(0, 5)) == 0 else s + draw(st.integers(1, 3 * DAY))
        jobs.append(dict(id=i + 1, start=s, end=e, gpus=draw(st.integers(1, 4)),
                         nodes=draw(st.sampled_from(["dark1", "dark2", "lit1"])),
                         user=draw(st.sampled_from(["alice", "bob"])), partition=draw(st.sampled_from(["gpu", "big"]))))
    lo = draw(st.one_of(st.none(), st.integers(-900, 5 * DAY)))
    hi = draw(st.one_of(st.none(), st.integers((lo or 0) + 1, 7 * DAY)))
    return jobs, lo, hi


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(sites(), st.sampled_from([[], ["user"], ["gpu_type"], ["team", "partition"], ["cluster", "account", "qos"]]))
def test_reports_from_the_rollup_equal_the_per_job_computation(tmp_path, site, by):
    jobs, lo, hi = site
    con = warehouse.connect(":memory:")
    try:
        add_jobs(con, tmp_path, jobs)
        load_readings(con, readings({("lit1", 0): busy(range(-600, 180, 3), 40)}))
        _refresh(con)
        t0, t1 = (None if lo is None else at(lo)), (None if hi is None else at(hi))
        for bucket in ("day", "week", "month", None):
            got = efficiency.by_group(con, t0, t1, by=by, bucket=bucket)
            want = _exact(con, lambda: efficiency.by_group(con, t0, t1, by=by, bucket=bucket))
            assert _close(got.rows(), want.rows()), (bucket, got, want)
        s, w = efficiency.summary(con, t0, t1), _exact(con, lambda: efficiency.summary(con, t0, t1))
        assert _close([tuple(s.values())], [tuple(w.values())])
    finally:
        con.close()


@st.composite
def histories(draw):
    """Jobs over four days as `sacct` shows them at 2-4 cuts at random minutes: running jobs that end later, a
    job whose user is corrected, one whose node gains readings later (it leaves the rollup)."""
    jobs = []
    for i in range(draw(st.integers(1, 7))):
        s = draw(st.integers(0, 4 * DAY))
        e = None if draw(st.integers(0, 4)) == 0 else s + draw(st.integers(1, 2 * DAY))
        jobs.append(dict(id=i + 1, start=s, end=e, gpus=draw(st.integers(1, 3)),
                         nodes=draw(st.sampled_from(["dark1", "dark2", "lit1"])),
                         user=draw(st.sampled_from(["alice", "bob"]))))
    cuts = sorted(draw(st.lists(st.integers(1, 5 * DAY), min_size=1, max_size=3, unique=True)))
    renamed = draw(st.one_of(st.none(), st.sampled_from([j["id"] for j in jobs])))
    lit_at = draw(st.one_of(st.none(), st.integers(0, len(cuts))))    # the batch after which lit1 is read
    return jobs, cuts + [None], renamed, lit_at


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(histories())
def test_incremental_rollup_equals_a_full_rebuild(tmp_path, hist):
    jobs, cuts, renamed, lit_at = hist
    con = warehouse.connect(":memory:")
    try:
        shown: dict[int, tuple] = {}
        for k, cut in enumerate(cuts):
            batch = []
            for j in jobs:
                if cut is not None and j["start"] >= cut:
                    continue
                v = dict(j, end=j["end"] if j["end"] is not None and (cut is None or j["end"] < cut) else None)
                if cut is None and j["id"] == renamed:
                    v["user"] = "carol"
                key = (v["start"], v["end"], v["user"])
                if shown.get(j["id"]) != key:
                    batch.append(v)
                    shown[j["id"]] = key
            if batch:
                add_jobs(con, tmp_path, batch, name=f"jobs{k}.psv")
            if k == lit_at:
                load_readings(con, readings({("lit1", 0): busy(range(0, 5 * DAY, 30), 30)}), f"r{k}.om")
            _refresh(con)
        rows = "SELECT * FROM gpu_efficiency_notel_day ORDER BY ALL"
        state = "SELECT * FROM gpu_efficiency_notel_job ORDER BY ALL"
        incremental = (con.sql(rows).fetchall(), con.sql(state).fetchall())
        efficiency_notel.build(con, full=True)
        rebuilt = (con.sql(rows).fetchall(), con.sql(state).fetchall())
        assert _close(incremental[0], rebuilt[0]) and incremental[1] == rebuilt[1]
    finally:
        con.close()
