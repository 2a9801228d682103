"""Model-scale benchmark: the occupancy timeline, utilization and fragmentation on the synthetic year.

The warehouse is benchmarks/_year.py's (2,000 nodes x 8 GPUs, ~5,000,000 jobs, built through the real ingest
path and cached). On a private copy it measures (medians of --repeat runs, seconds):

1. timeline full refresh                   (target <= 60 s)   on the year minus its last day
2. incremental refresh after one more day  (target <= 5 s)    the last day's jobs arrive (new, started, ended)
3. daily utilization by team over the year (target <= 5 s)
4. fragmentation at 5-minute samples over the year, per day, pool and partition (target <= 120 s)
5. queue wait blocked by fragmentation over the year, per team and size class (reported)
(4 and 5 sum the daily rollups the timeline build keeps; their sweep of the 5-minute grid is part of 1 and 2)
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
from models.metrics import fragmentation, blocked as fragmentation_blocked, timeline
from models.marts import timeline as timeline_mart
from models.metrics import utilization  # noqa: E402

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


# ---------------------------------------------------------------- stand-in year (when _year's cache is cold)

PATTERNS = [[8], [4, 4], [4, 2, 2], [2, 2, 2, 2], [4, 2, 1, 1], [1] * 8, [2, 1, 1, 4], [8], [4, 4], [2, 2, 4]]


def standin_warehouse(path: Path, nodes: int = 2000, days: int = 365, seed: int = 1) -> Path:
    """A year of 8-GPU nodes kept busy by jobs packed per node (no overlaps), inserted directly with SQL:
    the shape of the synthetic year (2,000 x 8 GPUs, ~5M jobs, drains) without its scheduler, in a minute.
    Jobs stay on one node each; waits are exponential (mean 45 min)."""
    import numpy as np
    import polars as pl
    rng = np.random.default_rng(seed)
    t0 = int(dt.datetime(2026, 1, 5).timestamp())
    t_end = t0 + days * 86400
    per_node = int(days * 24 / 9.5) + 8
    node = np.repeat(np.arange(nodes), per_node)
    length = rng.uniform(2, 16, node.size) * 3600
    gap = rng.exponential(1800, node.size)
    start = t0 + (np.cumsum((length + gap).reshape(nodes, per_node), axis=1) - (length + gap).reshape(nodes, per_node)
                  ).ravel() + rng.uniform(0, 3600, nodes).repeat(per_node)
    keep = start < t_end
    node, length, start = node[keep], length[keep], start[keep]
    pat = rng.integers(0, len(PATTERNS), node.size)
    sizes = [np.array(PATTERNS[i]) for i in range(len(PATTERNS))]
    counts = np.array([len(x) for x in sizes])[pat]
    j_node = np.repeat(node, counts)
    j_gpus = np.concatenate([sizes[i] for i in pat])
    j_start = np.repeat(start, counts) + rng.uniform(0, 300, j_node.size)
    j_end = j_start + np.repeat(length, counts) * rng.uniform(0.3, 1.0, j_node.size)
    n = j_node.size
    running = j_end > t_end
    wait = rng.exponential(2700, n)
    pools = np.where(j_node < nodes * 3 // 5, "a100", "h100")
    ts = lambda a: pl.from_epoch(pl.Series(np.round(a).astype(np.int64)), time_unit="s")   # noqa: E731
    user = rng.integers(0, 200, n)
    jobs = pl.DataFrame({
        "job_uid": np.arange(1, n + 1), "cluster": "orion", "job_id": np.arange(1, n + 1).astype(str),
        "user": pl.Series(user).cast(pl.String).str.replace(r"^", "u"),
        "account": pl.Series(user // 10).cast(pl.String).str.replace(r"^", "acct"),
        "team": pl.Series(user // 20).cast(pl.String).str.replace(r"^", "team"),
        "partition": pools, "state": np.where(running, "RUNNING", "COMPLETED"),
        "submit": ts(j_start - wait), "start": ts(j_start), "end": ts(np.where(running, 0, j_end)),
        "ngpus": j_gpus.astype(float), "gpu_type": pools, "nnodes": 1, "node": pl.Series(j_node).cast(pl.String)
            .str.zfill(4).str.replace(r"^", "gpu")})
    jobs = jobs.with_columns(pl.when(pl.col("state") == "RUNNING").then(None).otherwise(pl.col("end")).alias("end"),
                             pl.col("submit").alias("eligible"))
    con = warehouse.connect(path)
    con.register("_j", jobs)
    con.execute("""INSERT INTO jobs (job_uid, cluster, job_id, job_id_raw, "user", account, team, partition, state,
                                     submit, eligible, start, "end", elapsed_s, ngpus, req_gpus, gpu_type, nnodes,
                                     nodelist, source, ingest_run_id)
                   SELECT job_uid, cluster, job_id, job_id, "user", account, team, partition, state, submit, eligible,
                          start, "end", epoch("end") - epoch(start), ngpus, ngpus, gpu_type, nnodes, node,
                          'standin', 1 FROM _j""")
    con.execute("""INSERT INTO job_nodes SELECT job_uid, cluster, job_id, submit, node, ngpus FROM _j""")
    con.unregister("_j")
    con.execute("""INSERT INTO nodes (cluster, node, partitions, gpu_type, gpus, cpus, valid_from, valid_to,
                                      ingest_run_id)
                   SELECT 'orion', 'gpu' || lpad(i::VARCHAR, 4, '0'), CASE WHEN i < $a THEN 'a100,all' ELSE 'h100,all' END,
                          CASE WHEN i < $a THEN 'a100' ELSE 'h100' END, 8, 64, NULL, NULL, 1 FROM range($n) r(i)""",
                {"a": nodes * 3 // 5, "n": nodes})
    ev_node = rng.integers(0, nodes, nodes * 4)
    ev_start = rng.uniform(t0, t_end, ev_node.size)
    ev = pl.DataFrame({"node": pl.Series(ev_node).cast(pl.String).str.zfill(4).str.replace(r"^", "gpu"),
                       "start": ts(ev_start), "end": ts(ev_start + rng.exponential(4 * 3600, ev_node.size)),
                       "state": np.where(rng.random(ev_node.size) < 0.8, "DRAIN", "DOWN")})
    con.register("_e", ev)
    con.execute("""INSERT INTO node_events (cluster, node, state, state_raw, start, "end", reason, source, ingest_run_id)
                   SELECT 'orion', node, state, state, start, "end", 'stand-in', 'standin', 1 FROM _e""")
    con.unregister("_e")
    con.execute("""INSERT INTO ingest_runs (run_id, source, input_name, started_at, status)
                   VALUES (nextval('seq_ingest_run'), 'standin', 'models_scale stand-in', now()::TIMESTAMP, 'ok')""")
    con.execute("CHECKPOINT")
    con.close()
    return path


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
    ap.add_argument("--standin", action="store_true",
                    help="generate a stand-in year with SQL instead of benchmarks/_year.py's synthetic one")
    a = ap.parse_args(argv)

    _year.CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=a.workdir or _year.CACHE) as tmp:
        if a.standin:
            t = time.perf_counter()
            db = standin_warehouse(Path(tmp) / "standin.duckdb", nodes=round(60 * a.scale), seed=a.seed)
            print(f"stand-in year generated in {time.perf_counter() - t:.0f} s")
        else:
            db = _year.work_copy(_year.year_warehouse(a.seed, a.scale), Path(tmp))
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
        res["full refresh"], _ = timed(lambda: timeline_mart.build(con, full=True), a.heavy_repeat)
        print(f"full refresh: {res['full refresh']:.1f} s  (peak RSS so far {peak_rss_gb():.2f} GB)", flush=True)

        def cycle():   # back to the day before (refreshed, untimed), so each timed run adds the same day
            hold_back(con, cut)
            timeline_mart.build(con)
            add_day(con)
        add_day(con)
        res["incremental refresh (+1 day)"], rep = timed(lambda: timeline_mart.build(con), 1)
        info = next(iter(rep.values()))
        if a.repeat > 1:
            more, _ = timed(lambda: timeline_mart.build(con), a.repeat - 1, setup=cycle)
            res["incremental refresh (+1 day)"] = statistics.median([res["incremental refresh (+1 day)"], more])
        inc = mart_totals(con)
        timeline_mart.build(con, full=True)
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
