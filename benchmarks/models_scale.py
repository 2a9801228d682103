"""Model-scale benchmark: the occupancy timeline, utilization and fragmentation on the synthetic year.

The warehouse is benchmarks/_year.py's (2,000 nodes x 8 GPUs, ~5,000,000 jobs, built through the real ingest
path and cached). On a private copy it measures (medians of --repeat runs, seconds):

1. timeline full refresh                   (target <= 60 s)   on the year minus its last day
2. incremental refresh after one more day  (target <= 5 s)    the last day's jobs arrive (new, started, ended)
3. daily utilization by team over the year (target <= 5 s)
4. fragmentation at 5-minute samples over the year, per day, pool and partition (target <= 120 s)
5. queue wait blocked by fragmentation over the year, per team and size class (same sweep; reported)
and the peak RSS of the process (target <= 8 GB), plus each time as a ratio to a baseline run in the same
process: one full scan summing every job's GPU-seconds (what any answer must at least read).

"One more day" is made the way an ingest would make it: the copy is first rolled back to how the accounting
looked a day before the horizon (jobs submitted later removed, jobs started later pending again, jobs running
then open), refreshed, then the held-back rows come back marked as written by a new ingest run.

Run the full scale under the heavy lock:  flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/models_scale.py
Develop at small scale:                    .venv/bin/python benchmarks/models_scale.py --scale 2 --repeat 1
"""
from __future__ import annotations

import argparse
import datetime as dt
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _year  # noqa: E402
from ingest import warehouse  # noqa: E402
from models import fragmentation, fragmentation_blocked, timeline, timeline_mart, utilization  # noqa: E402

TARGETS = {"full refresh": 60, "incremental refresh (+1 day)": 5, "utilization daily by team": 5,
           "fragmentation year, 5-min": 120}


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def timed(fn, repeat: int, setup=None) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        if setup:
            setup()
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _new_run(con, name: str) -> int:
    rid = con.sql("SELECT nextval('seq_ingest_run')").fetchall()[0][0]
    con.execute("""INSERT INTO ingest_runs (run_id, source, input_name, started_at, finished_at, status)
                   VALUES (?, 'benchmark', ?, now()::TIMESTAMP, now()::TIMESTAMP, 'ok')""", [rid, name])
    return rid


def hold_back(con, cut: dt.datetime) -> None:
    """Roll the accounting back to how it looked at ``cut``; the originals wait in bench_jobs/bench_job_nodes."""
    con.execute("""CREATE TABLE IF NOT EXISTS bench_jobs AS SELECT * FROM jobs
                   WHERE submit >= $cut OR start >= $cut OR "end" > $cut""", {"cut": cut})
    con.execute("""CREATE TABLE IF NOT EXISTS bench_job_nodes AS SELECT * FROM job_nodes
                   WHERE job_uid IN (SELECT job_uid FROM bench_jobs)""")
    rid = _new_run(con, f"as of {cut}")
    con.execute("BEGIN TRANSACTION")
    con.execute("DELETE FROM job_nodes WHERE job_uid IN (SELECT job_uid FROM bench_jobs WHERE submit >= $cut "
                "OR start >= $cut)", {"cut": cut})
    con.execute("DELETE FROM jobs WHERE submit >= $cut", {"cut": cut})
    con.execute("""UPDATE jobs SET state = 'PENDING', start = NULL, "end" = NULL, ngpus = 0, elapsed_s = 0,
                          nodelist = 'None assigned', updated_run_id = $r WHERE start >= $cut""", {"cut": cut, "r": rid})
    con.execute("""UPDATE jobs SET state = 'RUNNING', "end" = NULL, elapsed_s = epoch($cut) - epoch(start),
                          updated_run_id = $r WHERE start < $cut AND "end" > $cut""", {"cut": cut, "r": rid})
    con.execute("COMMIT")


def add_day(con) -> None:
    """The day's accounting arrives: the held-back rows replace their rolled-back versions."""
    rid = _new_run(con, "one more day")
    con.execute("BEGIN TRANSACTION")
    con.execute("DELETE FROM job_nodes WHERE job_uid IN (SELECT job_uid FROM bench_jobs)")
    con.execute("DELETE FROM jobs WHERE job_uid IN (SELECT job_uid FROM bench_jobs)")
    con.execute("INSERT INTO jobs SELECT * REPLACE ($r AS updated_run_id) FROM bench_jobs", {"r": rid})
    con.execute("INSERT INTO job_nodes SELECT * FROM bench_job_nodes")
    con.execute("COMMIT")


def mart_totals(con) -> tuple:
    return con.sql("""SELECT count(*), round(sum(capacity_s)), round(sum(alloc_s)), round(sum(idle_s)),
                             round(sum(down_s + planned_down_s)) FROM tl_hourly""").fetchall()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=_year.YEAR_SCALE, help="synthetic scale (default: the year)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    ap.add_argument("--heavy-repeat", type=int, default=1, help="runs of the full refresh and fragmentation year")
    ap.add_argument("--workdir", help="where the private copy goes (default: next to the cache)")
    a = ap.parse_args(argv)

    src = _year.year_warehouse(a.seed, a.scale)
    with tempfile.TemporaryDirectory(dir=a.workdir or _year.CACHE) as tmp:
        db = _year.work_copy(src, Path(tmp))
        con = warehouse.connect(db)
        jobs, nodes, gpus = con.sql("""SELECT (SELECT count(*) FROM jobs), (SELECT count(DISTINCT node) FROM nodes),
                                              (SELECT sum(gpus) FROM nodes WHERE valid_to IS NULL)""").fetchall()[0]
        span = timeline_mart.compute_spans(con)
        print(f"warehouse: {jobs:,} jobs, {nodes:,} nodes, {gpus:,} GPUs; span "
              + ", ".join(f"{c} {s:%Y-%m-%d}..{h:%Y-%m-%d %H:%M}" for c, (s, h) in span.items()))
        res = {}
        res["baseline scan"], _ = timed(lambda: con.sql(
            "SELECT sum(ngpus * epoch(coalesce(\"end\", start) - start)) FROM jobs").fetchall(), a.repeat)

        horizon = max(h for _, h in span.values())
        cut = horizon - dt.timedelta(days=1)
        hold_back(con, cut)
        res["full refresh"], _ = timed(lambda: timeline.build(con, full=True), a.heavy_repeat)
        print(f"full refresh: {res['full refresh']:.1f} s  (peak RSS so far {peak_rss_gb():.2f} GB)", flush=True)

        def cycle():   # back to the day before (refreshed, untimed), so each timed run adds the same day
            hold_back(con, cut)
            timeline.build(con)
            add_day(con)
        add_day(con)
        res["incremental refresh (+1 day)"], rep = timed(lambda: timeline_mart.build(con), 1)
        info = next(iter(rep.values()))
        if a.repeat > 1:
            more, _ = timed(lambda: timeline_mart.build(con), a.repeat - 1, setup=cycle)
            res["incremental refresh (+1 day)"] = statistics.median([res["incremental refresh (+1 day)"], more])
        inc = mart_totals(con)
        timeline.build(con, full=True)
        same = inc == mart_totals(con)
        print(f"incremental refresh: {res['incremental refresh (+1 day)']:.2f} s, rebuilt from {info['from']} "
              f"re-placing {info['jobs']:,} jobs; equals a full rebuild: {same}", flush=True)

        res["utilization daily by team"], util = timed(
            lambda: utilization.by_bucket(con, bucket="day", by="team"), a.repeat)
        res["utilization hourly by pool"], _ = timed(
            lambda: utilization.by_bucket(con, bucket="hour", by="gpu_type"), a.repeat)
        res["fragmentation year, 5-min"], frag = timed(
            lambda: fragmentation.report(con, bucket="day", by="gpu_type,partition"), a.heavy_repeat)
        print(f"fragmentation: {res['fragmentation year, 5-min']:.1f} s (peak RSS {peak_rss_gb():.2f} GB)", flush=True)
        res["blocked by fragmentation, year"], blocked = timed(lambda: fragmentation_blocked.blocked(con),
                                                              a.heavy_repeat)
        con.close()

    base = res["baseline scan"]
    print(f"\n{'step':40s} {'seconds':>9s} {'x baseline':>11s} {'target':>8s}")
    for name, secs in res.items():
        tgt = TARGETS.get(name)
        flag = "" if tgt is None else ("  ok" if secs <= tgt else "  OVER")
        print(f"{name:40s} {secs:9.2f} {secs / base:11.1f} {('<= %d' % tgt) if tgt else '':>8s}{flag}")
    rss = peak_rss_gb()
    print(f"{'peak RSS (GB)':40s} {rss:9.2f} {'':11s} {'<= 8':>8s}{'  ok' if rss <= 8 else '  OVER'}")
    tot = util.filter(util["team"] == utilization.TOTAL_LABEL)
    print(f"\nyear: allocated {tot['allocated_gpu_h'].sum():,.0f} of {tot['capacity_gpu_h'].sum():,.0f} GPU-h "
          f"({tot['allocated_gpu_h'].sum() / tot['available_gpu_h'].sum():.1%} of available); "
          f"fragmentation rows {frag.height:,}; mean FGD rate {frag['fgd_rate'].mean():.3f}; queue wait explained "
          f"by fragmentation {blocked['fragmentation_share_of_all_wait'][-1]:.1%} of "
          f"{blocked['wait_gpu_h'][-1]:,.0f} GPU-h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
