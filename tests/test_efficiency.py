"""The efficiency model: metric choice, idle stretches, no-telemetry jobs, hour split, incremental refresh,
group reports and `gpuledger report efficiency`."""
from __future__ import annotations

import datetime as dt

import pytest

from models.metrics import efficiency

from telemetry_fixtures import add_jobs, at, busy, load_readings, readings
from models.marts import efficiency as efficiency_mart


def _job(con, job_id):
    return con.sql("""SELECT e.metric, e.telemetry_gpu_s / 60, e.act_mean, e.act_p95, e.idle_alloc_gpu_s / 60,
                             e.fb_max_mib, e.energy_j, e.method
                      FROM gpu_efficiency_job e JOIN jobs j USING (job_uid) WHERE j.job_id = ?""",
                   params=[str(job_id)]).fetchall()[0]


def test_idle_stretches_of_five_minutes_count_four_do_not(con, tmp_path):
    """Job 1: zero for minutes 3-7 (5 min) -> 5 idle GPU-min. Job 2: zero for 3-6 (4 min) and 10-13 (4 min),
    separated by activity -> no idle-allocated time, though 8 minutes read zero."""
    add_jobs(con, tmp_path, [dict(id=1, start=0, end=20, gpus=1, nodes="a1"),
                             dict(id=2, start=0, end=20, gpus=1, nodes="a2")])
    load_readings(con, readings({("a1", 0): {m: 0 if 3 <= m < 8 else 70 for m in range(20)},
                                 ("a2", 0): {m: 0 if 3 <= m < 7 or 10 <= m < 14 else 70 for m in range(20)}}))
    efficiency_mart.build(con)
    assert _job(con, 1)[4] == pytest.approx(5) and _job(con, 1)[2] == pytest.approx(70 * 15 / 20 / 100)
    assert _job(con, 2)[4] == 0


def test_a_stretch_counts_only_while_the_job_holds_the_gpu(con, tmp_path):
    """The GPU is idle 10:00-10:10; job 3 starts at 10:07: its 3 idle minutes are a stretch shorter than 5."""
    add_jobs(con, tmp_path, [dict(id=3, start=7, end=20, gpus=1, nodes="b1")])
    load_readings(con, readings({("b1", 0): {m: 0 if m < 10 else 40 for m in range(20)}}))
    efficiency_mart.build(con)
    assert _job(con, 3)[4] == 0


@pytest.mark.parametrize("have,expect", [
    ({"DCGM_FI_PROF_SM_ACTIVE": 0.3, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.6, "DCGM_FI_DEV_GPU_UTIL": 90}, "SM_ACTIVE"),
    ({"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.6, "DCGM_FI_DEV_GPU_UTIL": 90}, "GR_ENGINE_ACTIVE"),
    ({"DCGM_FI_DEV_GPU_UTIL": 90}, "GPU_UTIL"),
])
def test_metric_preference(con, tmp_path, have, expect):
    add_jobs(con, tmp_path, [dict(id=4, start=0, end=10, gpus=1, nodes="c1")])
    load_readings(con, readings({("c1", 0, None, m): busy(range(10), v) for m, v in have.items()}))
    efficiency_mart.build(con)
    metric, tel, mean, *_ = _job(con, 4)
    scale = 100 if expect == "GPU_UTIL" else 1
    key = {"SM_ACTIVE": "DCGM_FI_PROF_SM_ACTIVE", "GR_ENGINE_ACTIVE": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
           "GPU_UTIL": "DCGM_FI_DEV_GPU_UTIL"}[expect]
    assert (metric, tel, mean) == (expect, 10, pytest.approx(have[key] / scale))


def test_sparse_sm_active_gives_way_to_the_better_covered_metric(con, tmp_path):
    add_jobs(con, tmp_path, [dict(id=5, start=0, end=20, gpus=1, nodes="d1")])
    load_readings(con, readings({("d1", 0, None, "DCGM_FI_PROF_SM_ACTIVE"): busy(range(5), 0.2),
                                 ("d1", 0, None, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"): busy(range(20), 0.5)}))
    efficiency_mart.build(con)
    assert _job(con, 5)[:3] == ("GR_ENGINE_ACTIVE", 20, pytest.approx(0.5))


def test_job_without_telemetry_is_shown_as_such(con, tmp_path, run_cli):
    add_jobs(con, tmp_path, [dict(id=6, start=0, end=60, gpus=2, nodes="dark1", user="dora"),
                             dict(id=7, start=0, end=60, gpus=1, nodes="lit1", user="eve")])
    load_readings(con, readings({("lit1", 0): busy(range(60), 0)}))
    efficiency_mart.build(con)
    assert _job(con, 6) == (None, 0, None, None, 0, None, None, "none")
    df = efficiency.by_group(con, by=["user"], bucket=None)
    dora = df.filter(df["user"] == "dora").to_dicts()[0]
    assert (dora["jobs"], dora["jobs_without_telemetry"], dora["alloc_gpu_h"], dora["telemetry_gpu_h"]) == (1, 1, 2, 0)
    assert dora["mean_pct"] is None and dora["idle_alloc_gpu_h"] == 0
    jobs = efficiency.per_job(con)
    assert jobs.filter(jobs["job_id"] == "6")["metric"].to_list() == ["no telemetry"]


def test_jobs_without_telemetry_are_allocation_by_the_hour_without_mart_rows(con, tmp_path):
    """Job 60 (2 GPUs, dark node) runs 00:30-02:15, job 61 (1 GPU, lit node) 00:00-01:00 with readings.
    Hourly allocation: 00h 2x30 + 60 = 120 GPU-min, 01h 2x60 = 120, 02h 2x15 = 30; the mart stores job 61's
    hour only (job 60's hours are all allocation, derived from its window), and a window cut mid-job counts
    only its part."""
    add_jobs(con, tmp_path, [dict(id=60, start=30, end=135, gpus=2, nodes="dark2"),
                             dict(id=61, start=0, end=60, gpus=1, nodes="lit2")])
    load_readings(con, readings({("lit2", 0): busy(range(60), 40)}))
    efficiency_mart.build(con)
    assert con.sql("SELECT count(*), count(DISTINCT job_uid) FROM gpu_efficiency_job_hour").fetchall() == [(1, 1)]
    hourly = efficiency.by_group(con, bucket="hour")
    assert hourly["alloc_gpu_h"].to_list() == pytest.approx([2, 2, 0.5])
    assert hourly["telemetry_gpu_h"].to_list() == pytest.approx([1, 0, 0])
    assert hourly["jobs_without_telemetry"].to_list() == [1, 1, 1]
    cut = efficiency.by_group(con, at(60), at(120), bucket=None)
    assert cut["alloc_gpu_h"].to_list() == pytest.approx([2]) and cut["jobs"].to_list() == [1]
    jobs = {r["job_id"]: r for r in efficiency.per_job(con, at(60), at(180)).to_dicts()}
    assert jobs.keys() == {"60"} and jobs["60"]["alloc_gpu_h"] == pytest.approx(2.5)


def test_hours_split_jobs_and_add_up(con, tmp_path):
    """Job 8 runs 10:30-12:15 on 2 GPUs: hours 10 (30 min), 11 (60), 12 (15)."""
    add_jobs(con, tmp_path, [dict(id=8, start=30, end=135, gpus=2, nodes="e1")])
    load_readings(con, readings({("e1", g, None, m): busy(range(30, 135), v)
                                 for g in (0, 1) for m, v in (("DCGM_FI_DEV_GPU_UTIL", 50),
                                                              ("DCGM_FI_DEV_POWER_USAGE", 300),
                                                              ("DCGM_FI_DEV_FB_USED", 1000 + g))}))
    efficiency_mart.build(con)
    hours = con.sql("""SELECT hour, alloc_gpu_s / 60, telemetry_gpu_s / 60, active_gpu_s / 60, energy_j
                       FROM gpu_efficiency_job_hour ORDER BY hour""").fetchall()
    assert hours == [(at(0), 60, 60, 30, 60 * 60 * 300), (at(60), 120, 120, 60, 120 * 60 * 300),
                     (at(120), 30, 30, 15, 30 * 60 * 300)]
    metric, tel, mean, p95, idle, fb, energy, method = _job(con, 8)
    assert (tel, mean, p95, fb, energy) == (210, 0.5, 0.5, 1001, 210 * 60 * 300)
    day = efficiency.by_group(con, bucket="day")
    assert day["energy_kwh"].to_list() == [pytest.approx(210 * 60 * 300 / 3.6e6)]


def test_incremental_refresh_matches_a_full_rebuild(con, tmp_path):
    add_jobs(con, tmp_path, [dict(id=10, start=0, end=40, gpus=2, nodes="f1"),
                             dict(id=11, start=20, end=60, gpus=1, nodes="f1")])
    load_readings(con, readings({("f1", g): {m: (g * 30 + m) % 100 for m in range(30)} for g in range(3)}), "a.om")
    efficiency_mart.build(con)
    # more telemetry, then a new job on the same node: both change the earlier jobs' shares
    load_readings(con, readings({("f1", g): {m: (g * 30 + m) % 100 for m in range(30, 60)} for g in range(3)}),
                  "b.om")
    efficiency_mart.build(con)
    add_jobs(con, tmp_path, [dict(id=12, start=10, end=50, gpus=1, nodes="f1")], name="more.psv")
    efficiency_mart.build(con)
    cols = "job_uid, alloc_gpu_s, telemetry_gpu_s, active_gpu_s, idle_alloc_gpu_s, act_p95, method"
    incremental = con.sql(f"SELECT {cols} FROM gpu_efficiency_job ORDER BY 1").fetchall()
    hours_inc = con.sql("SELECT * EXCLUDE (hist) FROM gpu_efficiency_job_hour ORDER BY ALL").fetchall()
    efficiency_mart.build(con, full=True)
    assert con.sql(f"SELECT {cols} FROM gpu_efficiency_job ORDER BY 1").fetchall() == incremental
    assert con.sql("SELECT * EXCLUDE (hist) FROM gpu_efficiency_job_hour ORDER BY ALL").fetchall() == hours_inc
    assert len(incremental) == 3


def test_group_report_and_p95_bins(con, tmp_path):
    add_jobs(con, tmp_path, [dict(id=20, start=0, end=60, gpus=1, nodes="g1", user="ann", account="a"),
                             dict(id=21, start=0, end=60, gpus=1, nodes="g2", user="ben", account="a")])
    # ann: 54 minutes at 10 %, 6 at 97 %: 95 % of 60 minutes = 57 falls 3/6 into the 95-100 % bin -> 97.5 %;
    # ben: 60 minutes at 42 % -> 95 % of the way through the 40-45 % bin
    load_readings(con, readings({("g1", 0): {m: 10 if m < 54 else 97 for m in range(60)},
                                 ("g2", 0): busy(range(60), 42)}))
    efficiency_mart.build(con)
    df = efficiency.by_group(con, dt.datetime(2026, 7, 14), dt.datetime(2026, 7, 15), by=["account", "user"],
                             bucket="hour")
    rows = {r["user"]: r for r in df.to_dicts()}
    assert rows["ann"]["bucket"] == at(0) and rows["ann"]["metric"] == "GPU_UTIL"
    assert rows["ann"]["mean_pct"] == pytest.approx((54 * 10 + 6 * 97) / 60)
    assert rows["ann"]["p95_pct"] == pytest.approx(97.5) and rows["ben"]["p95_pct"] == pytest.approx(40 + 5 * 0.95)
    assert _job(con, 20)[3] == pytest.approx(0.97)           # the per-job p95 is exact
    whole = efficiency.by_group(con, by=["account"], bucket=None).to_dicts()[0]
    assert (whole["jobs"], whole["alloc_gpu_h"], whole["exact_label_pct"], whole["node_share_pct"]) == (2, 2, 0, 100)
    # untyped GRES and no inventory: the GPU type is the model the exporter reports
    assert efficiency.by_group(con, by=["gpu_type"], bucket=None)["gpu_type"].to_list() == ["NVIDIA A100-SXM4-80GB"]
    with pytest.raises(ValueError, match="cannot group efficiency by size"):
        efficiency.by_group(con, by=["size"])


def test_report_cli(run_cli, db_path, tmp_path):
    from ingest import warehouse
    con = warehouse.connect(db_path)
    add_jobs(con, tmp_path, [dict(id=30, start=0, end=30, gpus=1, nodes="h1", user="ann"),
                             dict(id=31, start=0, end=30, gpus=1, nodes="h2", user="bob")])
    load_readings(con, readings({("h1", 0): busy(range(30), 0), ("h2", 0): busy(range(30), 80)}))
    con.close()
    assert run_cli("refresh")[0] == 0
    code, out, err = run_cli("report", "efficiency", "--worst", "5", "--format", "csv")
    assert code == 0 and out.splitlines()[1].split(",")[1] == "30" and len(out.splitlines()) == 2
    assert "activity metric: GPU_UTIL 100.0% of 1.00 telemetry GPU-h" in err
    code, out, err = run_cli("report", "efficiency", "--by", "user", "--total")
    assert code == 0 and out.splitlines()[0].split()[:3] == ["user", "metric", "jobs"]
    code, out, err = run_cli("report", "efficiency", "--by", "job", "--from", "2026-07-14", "--to", "2026-07-15",
                             "--format", "json")
    assert code == 0 and '"idle_alloc_gpu_h": 0.5' in out
    assert "widened" not in err
    code, out, err = run_cli("report", "efficiency", "--total", "--from", "2026-07-14T00:20:00",
                             "--to", "2026-07-14T05:10:30")
    assert code == 0 and ("window widened to whole UTC hours, the efficiency mart's grain: 2026-07-14 00:00 to "
                          "2026-07-14 06:00") in err
    code, out, err = run_cli("report", "efficiency", "--by", "size_class")
    assert code == 2 and "cannot group efficiency by size_class" in err


def test_allocated_gpu_hours_agree_with_the_timeline(con, db_path, tmp_path):
    """Efficiency's allocated GPU-seconds per job are the occupancy timeline's (so utilization and efficiency
    reports add up), including a running job counted to the horizon and a two-node job."""
    from models.pipeline import refresh
    from models.metrics import timeline
    add_jobs(con, tmp_path, [dict(id=40, start=0, end=95, gpus=2, nodes="t1"),
                             dict(id=41, start=30, end=None, gpus=1, nodes="t2"),
                             dict(id=42, start=10, end=70, gpus=4, nodes="t[3-4]", nnodes=2)])
    load_readings(con, readings({("t1", 0): busy(range(95), 30)}))
    refresh.run(con, db_path, publish=False)
    ours = dict(con.sql("SELECT job_uid, alloc_gpu_s FROM gpu_efficiency_job").fetchall())
    theirs = {r["job_uid"]: r["gpu_seconds"] for r in timeline.job_gpu_seconds(con).to_dicts()}
    assert ours.keys() == theirs.keys() and all(ours[k] == pytest.approx(theirs[k]) for k in ours)


def test_reports_at_any_grain_equal_the_hour_by_hour_sums(con, tmp_path):
    """Job 70 (2 GPUs, dark node) runs 07-14 10:30 to 07-16 02:30: 13.5 h, 24 h and 2.5 h a day. Job 71 (1 GPU)
    10:00-11:00 reads 0 % (1 idle GPU-hour); job 72 (1 GPU) 10:00-12:00 reads 0 % for 30 minutes, then 50 %.
    Jobs 73 and 74 (dark) last no time and hold no GPU-hours: the marts leave them out at every grain.
    Reports summing jobs without telemetry per day, week, month or job give what their hours add up to."""
    add_jobs(con, tmp_path, [dict(id=70, start=30, end=30 + 40 * 60, gpus=2, nodes="dark3"),
                             dict(id=71, start=0, end=60, gpus=1, nodes="lit3"),
                             dict(id=72, start=0, end=120, gpus=1, nodes="lit4"),
                             dict(id=73, start=60, end=60, gpus=1, nodes="dark4"),
                             dict(id=74, start=15, end=15, gpus=4, nodes="dark4")])
    load_readings(con, readings({("lit3", 0): busy(range(60), 0),
                                 ("lit4", 0): {m: 0 if m < 30 else 50 for m in range(120)}}))
    efficiency_mart.build(con)
    day = efficiency.by_group(con, bucket="day")
    d = dt.datetime
    assert day["bucket"].to_list() == [d(2026, 7, 14), d(2026, 7, 15), d(2026, 7, 16)]
    assert day["alloc_gpu_h"].to_list() == pytest.approx([2 * 13.5 + 1 + 2, 2 * 24, 2 * 2.5])
    assert day["jobs"].to_list() == [3, 1, 1] and day["jobs_without_telemetry"].to_list() == [1, 1, 1]
    assert day["idle_alloc_gpu_h"].to_list() == pytest.approx([1.5, 0, 0])
    lo, hi = efficiency._window(con, None, None)
    for bucket in ("day", "week", "month", None):
        for by in ([], ["user"], ["gpu_type"]):
            key = f"date_trunc('{bucket}', hour)" if bucket else "NULL"
            cols = "".join(f', "{c}"' for c in by)
            ref = con.sql(f"""
                WITH h AS ({efficiency._hours_in(by, "hour")}),
                pj AS (SELECT {key} AS b{cols}, job_uid, sum(alloc_gpu_s) AS a, sum(telemetry_gpu_s) AS t,
                              sum(idle_alloc_gpu_s) AS i FROM h GROUP BY ALL)
                SELECT b{cols}, count(*), count(*) FILTER (WHERE t = 0), sum(a) / 3600, sum(t) / 3600, sum(i) / 3600
                FROM pj GROUP BY ALL ORDER BY ALL""", params={"lo": lo, "hi": hi}).fetchall()
            got = efficiency.by_group(con, by=by, bucket=bucket)
            names = (["bucket"] if bucket else []) + by
            rows = got.select(*names, "jobs", "jobs_without_telemetry", "alloc_gpu_h", "telemetry_gpu_h",
                              "idle_alloc_gpu_h").rows()
            assert [r if bucket else (None, *r) for r in rows] == ref, (bucket, by)
    s = efficiency.summary(con)
    assert (s["jobs"], s["jobs_without_telemetry"], s["alloc_gpu_h"]) == (3, 1, pytest.approx(83))
    # a window cut mid-job counts only its part: 07-15 00:00 to 07-16 01:00 holds 25 h of job 70
    cut = efficiency.by_group(con, d(2026, 7, 15), d(2026, 7, 16, 1), bucket=None)
    assert cut["alloc_gpu_h"].to_list() == pytest.approx([50]) and cut["jobs"].to_list() == [1]


def test_worst_offenders_with_a_limit_equal_the_head_of_the_full_list(con, tmp_path):
    """Idle GPU-hours: job 81 1 h, job 82 1 h (a tie), job 83 0.5 h; jobs 80, 84, 85 none (84 and 85 have no
    telemetry): ties in idle time are ordered by job id."""
    add_jobs(con, tmp_path, [dict(id=80, start=0, end=60, gpus=1, nodes="w0"),
                             dict(id=81, start=0, end=60, gpus=1, nodes="w1"),
                             dict(id=82, start=0, end=60, gpus=1, nodes="w2"),
                             dict(id=83, start=0, end=60, gpus=1, nodes="w3"),
                             dict(id=84, start=0, end=600, gpus=2, nodes="dark5"),
                             dict(id=85, start=30, end=90, gpus=1, nodes="dark6")])
    load_readings(con, readings({("w0", 0): busy(range(60), 80), ("w1", 0): busy(range(60), 0),
                                 ("w2", 0): busy(range(60), 0),
                                 ("w3", 0): {m: 0 if m < 30 else 50 for m in range(60)}}))
    efficiency_mart.build(con)
    full = efficiency.per_job(con, order="idle")
    assert full["job_id"].to_list() == ["81", "82", "83", "80", "84", "85"]
    assert full["idle_alloc_gpu_h"].to_list() == pytest.approx([1, 1, 0.5, 0, 0, 0])
    for n in range(1, 8):
        assert efficiency.per_job(con, order="idle", limit=n).rows() == full.head(n).rows(), n
    # in a window after the telemetry jobs ended only the dark jobs remain
    later = efficiency.per_job(con, at(60), at(600), order="idle", limit=1)
    assert later["job_id"].to_list() == ["84"] and later["alloc_gpu_h"].to_list() == pytest.approx([18])
    assert efficiency.worst_offenders(con, n=2)["job_id"].to_list() == ["81", "82"]
    # every job with idle GPU-hours (the page's read when filters apply): the telemetry jobs' rows, as per_job has them
    every = efficiency.worst_offenders(con, n=None)
    assert every.rows() == full.filter(full["idle_alloc_gpu_h"] > 0).rows()
