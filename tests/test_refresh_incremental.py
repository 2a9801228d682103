"""Incremental refresh = full refresh (#15 part 2): after random ingest batches, each followed by an incremental
refresh of the timeline and the demand marts (models/marts/demand.py: only the jobs changed, open or placed
again restaged, only the days they touch recomputed), the marts equal a full rebuild from the same warehouse.

The batches are what `gpuledger serve` sees: `sacct` as of successive instants, jobs appearing pending or
running and later started or finished, and a second cluster (the all-clusters scope) sometimes.
"""
from __future__ import annotations

import datetime as dt

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import timeline_fixtures as tf
from telemetry_fixtures import add_jobs, load_readings, readings
from ingest import warehouse
from models.marts import demand, efficiency as efficiency_mart, timeline as timeline_mart

NODES = [("n1", 8, "a100", "p1"), ("n2", 4, "h100", "p2"), ("n3", 8, "a100", "p1,p2")]


def as_of(job: tf.Job, cut: dt.datetime) -> tf.Job | None:
    """What `sacct` shows of ``job`` at ``cut``: nothing before its submit, pending before its start, running
    before its end."""
    sub = job.submit or job.start
    if cut is not None and sub >= cut:
        return None
    if cut is not None and (job.start is None or job.start >= cut):
        return tf.Job(job.id, job.user, job.account, job.partition, job.gpus, submit=sub, gpu_type=job.gpu_type)
    if cut is not None and job.end is not None and job.end >= cut:
        return tf.Job(job.id, job.user, job.account, job.partition, job.gpus, job.nodes, submit=sub, start=job.start)
    return job


@st.composite
def histories(draw):
    """Jobs of cluster 'c' on a 15-minute grid over three days (none overlapping on a node beyond its GPUs), cut
    into 2-4 batches at random instants (not on hours); some pending to the end, some running to the end."""
    base = tf.T("03-01 00:00")
    slot = dt.timedelta(minutes=15)
    used: dict[str, list] = {n[0]: [] for n in NODES}
    jobs = []
    for i in range(draw(st.integers(1, 10))):
        node, gpus, pool, parts = draw(st.sampled_from(NODES))
        s = base + slot * draw(st.integers(0, 250))
        e = None if draw(st.integers(0, 5)) == 0 else s + slot * draw(st.integers(1, 60))
        g = draw(st.integers(1, 4))
        busy = sum(b[2] for b in used[node] if b[0] < (e or s + dt.timedelta(days=9)) and (b[1] is None or s < b[1]))
        sub = s - slot * draw(st.integers(0, 40))
        user, acct = draw(st.sampled_from([("u1", "ml"), ("u2", "cv"), ("u3", "ops")]))
        if busy + g > gpus or draw(st.integers(0, 6)) == 0:      # never starts: pending to the end
            jobs.append(tf.Job(i + 1, user, acct, parts.split(",")[0], g, submit=sub,
                               gpu_type=draw(st.sampled_from([None, pool]))))
            continue
        used[node].append((s, e, g))
        jobs.append(tf.Job(i + 1, user, acct, parts.split(",")[0], g, [node], submit=sub, start=s, end=e))
    cuts = sorted(draw(st.lists(st.integers(1, 300), min_size=1, max_size=2, unique=True)))
    cuts = [base + slot * c + dt.timedelta(minutes=7) for c in cuts] + [None]
    other = draw(st.booleans())
    return jobs, cuts, other


def _marts(con) -> dict:
    def rounded(sql):
        return [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in con.sql(sql).fetchall()]
    return {"scopes": con.sql("SELECT * FROM demand_scopes ORDER BY ALL").fetchall(),
            "day": rounded("SELECT * FROM demand_day ORDER BY ALL"),
            "peak": rounded("SELECT * FROM demand_peak_day ORDER BY ALL"),
            "jobs": con.sql("SELECT * FROM demand_job ORDER BY ALL").fetchall(),
            "alloc": con.sql("SELECT * FROM tl_job_alloc ORDER BY ALL").fetchall(),
            "hourly": rounded("SELECT * FROM tl_hourly ORDER BY ALL")}


def _refresh(con, full: bool = False) -> None:
    timeline_mart.build(con, full)
    demand.build(con, full)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_incremental_demand_and_timeline_equal_a_full_rebuild(hist):
    jobs, cuts, other = hist
    con = warehouse.connect(":memory:")
    try:
        tf.load(con, "c", [], NODES, team_map=tf.TEAMS + [("ops", "ops")], refresh=False)
        if other:                 # a second cluster: the all-clusters scope '*' too
            tf.load(con, "d", [tf.Job(1, "u1", "ml", "p1", 2, ["n1"], start=tf.T("03-02 01:00"),
                                      end=tf.T("03-02 03:30"))], NODES, refresh=False)
        shown: dict[int, str] = {}
        for cut in cuts:
            batch = []
            for j in jobs:
                v = as_of(j, cut)
                if v is not None and shown.get(j.id) != v.line("c"):
                    batch.append(v)
                    shown[j.id] = v.line("c")
            if batch:
                tf.load(con, "c", batch, refresh=False)
            _refresh(con)
        incremental = _marts(con)
        _refresh(con, full=True)
        rebuilt = _marts(con)
        for k in incremental:
            assert incremental[k] == rebuilt[k], k
    finally:
        con.close()


def test_a_batch_restages_only_what_it_touches_and_an_open_job_follows_the_finished_runs():
    """By hand: job 1 finished on 03-01 (4 GPUs x 4 h), job 2 running from 03-02 10:00, job 4 (ops: unmapped)
    pending since 03-01 01:00 for 4 h100 GPUs. A batch ending job 2 (18.5 h) and adding job 3 (8 h) restages jobs
    2, 3 and 4 (job 1 is neither changed, open nor placed again); days from 03-02 are recomputed (job 2's
    submit), and of 03-01 only the demanded GPU-hours: job 4's estimate is the cluster's mean run time, 4 h
    before (job 1 alone), 10 1/6 h after (4, 8, 18.5 h)."""
    con = warehouse.connect(":memory:")
    try:
        j1 = tf.Job(1, "u1", "ml", "p1", 4, ["n1"], start=tf.T("03-01 02:00"), end=tf.T("03-01 06:00"))
        j2 = tf.Job(2, "u2", "cv", "p1", 2, ["n1"], start=tf.T("03-02 10:00"))
        j4 = tf.Job(4, "u3", "ops", "p2", 4, submit=tf.T("03-01 01:00"), gpu_type="h100")
        tf.load(con, "c", [j1, j2, j4], NODES, team_map=tf.TEAMS, refresh=False)
        _refresh(con)

        def day1():
            return con.sql("""SELECT team, served_gpu_hours, demanded_gpu_hours, estimated_gpu_hours FROM demand_day
                              WHERE ts = '2024-03-01' AND (served_gpu_hours > 0 OR demanded_gpu_hours > 0)
                              ORDER BY team""").fetchall()
        assert day1() == [("(unmapped)", 0.0, 16.0, 16.0), ("research", 16.0, 16.0, 0.0)]
        j2e = tf.Job(2, "u2", "cv", "p1", 2, ["n1"], start=tf.T("03-02 10:00"), end=tf.T("03-03 04:30"))
        j3 = tf.Job(3, "u1", "ml", "p1", 1, ["n1"], submit=tf.T("03-03 05:10"), start=tf.T("03-03 05:15"),
                    end=tf.T("03-03 13:15"))
        tf.load(con, "c", [j2e, j3], refresh=False)
        timeline_mart.build(con)
        con.execute("BEGIN")        # what the build will restage (looked at, then rolled back)
        since, dem_days = demand._restage(con, warehouse.mart_run(con, "demand"))
        assert sorted(r[0] for r in con.sql("SELECT job_uid FROM _dm_aff").fetchall()) == sorted(
            r[0] for r in con.sql("SELECT job_uid FROM jobs WHERE job_id IN ('2', '3', '4')").fetchall())
        assert since["c"] == tf.T("03-02 10:00") and dem_days["c"] == [tf.T("03-01 00:00")]
        con.execute("ROLLBACK")
        demand.build(con)
        assert day1() == [("(unmapped)", 0.0, pytest.approx(4 * 30.5 / 3), pytest.approx(4 * 30.5 / 3)),
                          ("research", 16.0, 16.0, 0.0)]
        incremental = _marts(con)
        _refresh(con, full=True)
        assert _marts(con) == incremental
    finally:
        con.close()


# ---------------------------------------------------------------- the efficiency marts (telemetry in batches)

EFF_NODES = ("a1", "a2")


@st.composite
def telemetry_histories(draw):
    """Jobs on two 4-GPU nodes over four hours from T0 (10:00), some running to the end, and their nodes'
    readings (GPU_UTIL every minute, with zero stretches; SM_ACTIVE on a1 from some minute on), cut into 2-4
    batches at random minutes not on an hour: each batch is `sacct` as of its cut and the readings before it
    (less a lag: telemetry trails accounting, so jobs already ended get readings later; some batches none)."""
    jobs = []
    for i in range(draw(st.integers(1, 6))):
        s = draw(st.integers(0, 200))
        e = None if draw(st.integers(0, 3)) == 0 else s + draw(st.integers(3, 150))
        jobs.append(dict(id=i + 1, start=s, end=e, gpus=draw(st.integers(1, 2)), nodes=draw(st.sampled_from(EFF_NODES))))
    jobs.append(dict(id=99, start=draw(st.integers(0, 30)), end=239, gpus=1, nodes="a2"))   # running to the end
    zeros = draw(st.lists(st.tuples(st.sampled_from(EFF_NODES), st.integers(0, 3), st.integers(0, 235),
                                    st.integers(2, 12)), max_size=5))
    sm_from = draw(st.one_of(st.none(), st.integers(0, 239)))
    cuts = sorted(draw(st.lists(st.integers(1, 239).filter(lambda m: m % 60), min_size=1, max_size=3, unique=True)))
    lag = draw(st.integers(0, 25))          # readings trail accounting by this many minutes (not the last batch)
    quiet = draw(st.lists(st.booleans(), min_size=len(cuts), max_size=len(cuts)))   # batches without readings
    return jobs, zeros, sm_from, cuts + [None], lag, quiet + [False]


def _util(node: str, g: int, m: int, zeros) -> int:
    if any(n == node and zg == g and z0 <= m < z0 + zl for n, zg, z0, zl in zeros):
        return 0
    return (g * 37 + m * 11 + (node == "a2") * 5) % 97 + 1


def _eff_marts(con) -> dict:
    def rounded(sql):
        return [tuple([round(x, 6) for x in v] if isinstance(v, list) else round(v, 6) if isinstance(v, float)
                      else v for v in r) for r in con.sql(sql).fetchall()]
    return {"job": rounded("SELECT * EXCLUDE (computed_at) FROM gpu_efficiency_job ORDER BY job_uid"),
            "hour": rounded("SELECT * FROM gpu_efficiency_job_hour ORDER BY job_uid, hour"),
            "nodes": rounded("SELECT * FROM job_node_activity ORDER BY ALL")}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(telemetry_histories())
def test_incremental_efficiency_after_telemetry_batches_equals_a_full_rebuild(tmp_path_factory, hist):
    """Running jobs under telemetry that arrives in several batches, cut inside hours (and inside idle
    stretches), jobs ending or starting between batches: the incremental efficiency marts equal a full rebuild."""
    jobs, zeros, sm_from, cuts, lag, quiet = hist
    tmp = tmp_path_factory.mktemp("eff")
    con = warehouse.connect(str(tmp / "w.duckdb"))
    try:
        shown: dict[int, tuple] = {}
        lo = 0
        for k, cut in enumerate(cuts):
            hi = 240 if cut is None else cut
            batch = []
            for j in jobs:
                if j["start"] >= hi:
                    continue
                v = dict(j, end=j["end"] if j["end"] is not None and j["end"] < hi else None)
                if shown.get(j["id"]) != (v["start"], v["end"]):
                    batch.append(v)
                    shown[j["id"]] = (v["start"], v["end"])
            if batch:
                add_jobs(con, tmp, batch, name=f"jobs{k}.psv")
            hi = 240 if cut is None else lo if quiet[k] else max(lo, cut - lag)      # readings up to here
            series = {(n, g, None, "DCGM_FI_DEV_GPU_UTIL"): {m: _util(n, g, m, zeros) for m in range(lo, hi)}
                      for n in EFF_NODES for g in range(4)}
            if sm_from is not None:
                series.update({("a1", g, None, "DCGM_FI_PROF_SM_ACTIVE"):
                               {m: _util("a1", g, m, zeros) / 100 for m in range(max(lo, sm_from), hi)}
                               for g in range(4) if max(lo, sm_from) < hi})
            if hi > lo:
                load_readings(con, readings(series), f"r{k}.om")
            lo = hi
            efficiency_mart.build(con)
        incremental = _eff_marts(con)
        efficiency_mart.build(con, full=True)
        rebuilt = _eff_marts(con)
        assert rebuilt["job"], "no job rows: the example exercised nothing"
        for part in incremental:
            assert incremental[part] == rebuilt[part], part
    finally:
        con.close()


def test_new_telemetry_merges_into_an_open_job_and_keeps_its_earlier_hours(tmp_path):
    """By hand: job 1 (1 GPU on a1, whose 4 GPUs read 10, 20, 30, 40 %) runs from 09:30; all four read 0 from
    10:34 to 10:40, a stretch the first batch (readings to 10:37, horizon 10:36) cuts after 2 minutes. The second
    batch (readings to 11:20, horizon 11:19) is merged: attributed from its cut (10:35), the 10:00 hour completed
    from the stored attribution, the 09:00 hour kept as stored (a value changed in it stays: not re-read). Job 1
    then has 109 minutes x 60 s = 6,540 GPU-s covered, the 6 zero minutes idle (360 s, on GPU 0, the first of the
    tied devices), active 0.4 x 103 min x 60 s = 2,472, p95 40 %, 2 devices; a full rebuild says the same."""
    con = warehouse.connect(str(tmp_path / "w.duckdb"))
    try:
        def util(m, g):
            return 0 if 34 <= m < 40 else (g + 1) * 10

        def batch(k, jobs, lo, hi):
            add_jobs(con, tmp_path, jobs, name=f"jobs{k}.psv")
            load_readings(con, readings({("a1", g): {m: util(m, g) for m in range(lo, hi)} for g in range(4)}),
                          f"r{k}.om")
            efficiency_mart.build(con)

        def job1():
            return con.sql("""SELECT telemetry_gpu_s, idle_alloc_gpu_s, round(active_gpu_s, 6), act_p95, n_devices
                              FROM gpu_efficiency_job WHERE job_uid = (SELECT job_uid FROM jobs WHERE job_id = '1')"""
                           ).fetchall()

        batch(0, [dict(id=1, start=-30, end=None, gpus=1, nodes="a1"), dict(id=2, start=36, end=None, gpus=1,
                                                                             nodes="a2")], -30, 37)
        assert job1() == [(66 * 60.0, 0.0, round(0.4 * 64 * 60, 6), 0.4, 2)]    # 2 zero minutes: not idle yet
        con.execute("""UPDATE gpu_efficiency_job_hour SET active_gpu_s = 0 WHERE hour = '2026-07-14 09:00'
                       AND job_uid = (SELECT job_uid FROM jobs WHERE job_id = '1')""")
        batch(1, [dict(id=3, start=79, end=None, gpus=1, nodes="a2")], 37, 80)
        assert job1() == [(6540.0, 360.0, round(2472.0 - 720.0, 6), 0.4, 2)]     # the 09:00 hour kept as stored
        h11 = int((dt.datetime(2026, 7, 14, 11) - dt.datetime(1970, 1, 1)).total_seconds()) // 60
        assert con.sql("""SELECT count(DISTINCT mi) FILTER (WHERE mi >= $h), min(mi) >= $h - 60
                          FROM gpu_efficiency_open_att""", params={"h": h11}).fetchall() == [(19, True)]   # 11:00-11:18
        efficiency_mart.build(con, full=True)
        assert job1() == [(6540.0, 360.0, 2472.0, 0.4, 2)]
        assert con.sql("""SELECT hour::VARCHAR, alloc_gpu_s, telemetry_gpu_s, idle_alloc_gpu_s, round(active_gpu_s, 6)
                          FROM gpu_efficiency_job_hour WHERE job_uid = (SELECT job_uid FROM jobs WHERE job_id = '1')
                          ORDER BY hour""").fetchall() == [
            ("2026-07-14 09:00:00", 1800.0, 1800.0, 0.0, 720.0), ("2026-07-14 10:00:00", 3600.0, 3600.0, 360.0, 1296.0),
            ("2026-07-14 11:00:00", 1140.0, 1140.0, 0.0, 456.0)]
    finally:
        con.close()


def test_an_open_job_without_placement_grows_with_the_horizon(tmp_path):
    """Job 2 runs (2 GPUs from 10:05) with no node known, beside job 1 on a1: after a second batch moves the
    horizon from 10:20 to 10:40, its allocation-only row grows to 2 x 35 min x 60 s = 4,200 GPU-s, as a full
    rebuild says (an open job is a target even without a node to look for neighbours on)."""
    con = warehouse.connect(str(tmp_path / "w.duckdb"))
    try:
        add_jobs(con, tmp_path, [dict(id=1, start=0, end=None, gpus=1, nodes="a1"),
                                 dict(id=2, start=5, end=None, gpus=2, nodes="")], "j0.psv")
        load_readings(con, readings({("a1", g): {m: 10 for m in range(0, 20)} for g in range(2)}), "r0.om")
        efficiency_mart.build(con)
        add_jobs(con, tmp_path, [dict(id=3, start=40, end=None, gpus=1, nodes="a2")], "j1.psv")
        load_readings(con, readings({("a1", g): {m: 10 for m in range(20, 41)} for g in range(2)}), "r1.om")
        efficiency_mart.build(con)
        assert con.sql("""SELECT window_end::VARCHAR, alloc_gpu_s, method FROM gpu_efficiency_job
                          WHERE job_uid = (SELECT job_uid FROM jobs WHERE job_id = '2')""").fetchall() == [
            ("2026-07-14 10:40:00", 4200.0, "none")]
        incremental = _eff_marts(con)
        efficiency_mart.build(con, full=True)
        assert _eff_marts(con) == incremental
    finally:
        con.close()


def test_a_build_with_nothing_ingested_since_is_skipped_and_the_next_ingest_is_not(tmp_path):
    """A second refresh, or the one after a period close, finds no ingest run newer than the efficiency marts:
    they are left as they are (mart_state's refreshed_at too), not attributed again. The next batch is built,
    and equals a full rebuild."""
    con = warehouse.connect(str(tmp_path / "w.duckdb"))
    try:
        def state():
            return con.sql("SELECT last_run_id, refreshed_at FROM mart_state WHERE mart = 'efficiency'").fetchall()

        add_jobs(con, tmp_path, [dict(id=1, start=0, end=None, gpus=1, nodes="a1"),
                                 dict(id=2, start=15, end=None, gpus=1, nodes="a2")], "j0.psv")
        load_readings(con, readings({("a1", g): {m: 10 for m in range(0, 20)} for g in range(2)}), "r0.om")
        efficiency_mart.build(con)
        built, marts = state(), _eff_marts(con)
        assert marts["job"]
        efficiency_mart.build(con)
        assert state() == built and _eff_marts(con) == marts
        add_jobs(con, tmp_path, [dict(id=3, start=30, end=None, gpus=1, nodes="a2")], "j1.psv")
        load_readings(con, readings({("a1", g): {m: 10 for m in range(20, 33)} for g in range(2)}), "r1.om")
        efficiency_mart.build(con)
        assert state()[0][0] > built[0][0]
        assert con.sql("""SELECT window_end::VARCHAR, telemetry_gpu_s FROM gpu_efficiency_job
                          WHERE job_uid = (SELECT job_uid FROM jobs WHERE job_id = '1')""").fetchall() == [
            ("2026-07-14 10:30:00", 30 * 60.0)]
        incremental = _eff_marts(con)
        efficiency_mart.build(con, full=True)
        assert _eff_marts(con) == incremental
    finally:
        con.close()
