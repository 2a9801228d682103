"""Chargeback and fairness speed on the synthetic year (benchmarks/_year.py: 2,000 nodes x 8 GPUs, ~5,000,000 jobs).

On a private copy of the cached warehouse (its timeline mart built first), it measures (medians of --repeat runs, seconds):

1. the statement of one month (the busiest full month), computed         \\
2. + each export of it: XLSX (summary, views, job-level detail), CSV, Parquet  > target: 1 + the slowest <= 10 s
3. closing that month, then re-reading and re-exporting the frozen statement (byte-identical check)
4. the fairness report for one 30-day window ending at the horizon            target <= 5 s
5. the queue report (waits by team x size class, per QOS, starvation) for the same window (reported)

and the peak RSS, plus each time as a ratio to a baseline in the same process: one scan of the month's job
allocations from the timeline (what any statement must at least read).

Full scale, under the heavy lock:  flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/chargeback_speed.py
Develop at small scale:             .venv/bin/python benchmarks/chargeback_speed.py --scale 2 --repeat 1
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
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
from dashboards import exports  # noqa: E402
from ingest import warehouse  # noqa: E402
from models.metrics import chargeback, cost, fairness, queue
from models.metrics import timeline  # noqa: E402
from models.marts import timeline as timeline_mart  # noqa: E402
from models.pipeline import close  # noqa: E402
from models.definitions import times as tdefs  # noqa: E402
from models.definitions import policy  # noqa: E402

TARGETS = {"statement + slowest export": 10.0, "fairness report, 30 days": 5.0}


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


CPU: dict[str, float] = {}


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn, repeat: int, name: str | None = None) -> tuple[float, object]:
    """Median wall seconds of ``repeat`` runs; the median CPU seconds (all threads) go to CPU[name], because
    on a shared machine wall time also measures the neighbours."""
    times, cpus, out = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), cpu_seconds()
        out = fn()
        times.append(time.perf_counter() - t)
        cpus.append(cpu_seconds() - c)
    if name:
        CPU[name] = statistics.median(cpus)
    return statistics.median(times), out


def busiest_month(con) -> str:
    """The full month with the most jobs started (inside the data span)."""
    lo, hi = con.sql("SELECT min(data_start), min(horizon) FROM tl_clusters").fetchall()[0]
    first = (lo.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
    return con.execute("""SELECT strftime(date_trunc('month', start), '%Y-%m') AS m FROM jobs
                          WHERE start >= ? AND start < date_trunc('month', ?::TIMESTAMP) GROUP BY m
                          ORDER BY count(*) DESC LIMIT 1""", [first, hi]).fetchall()[0][0]


def export_one(st, out: Path, fmt: str) -> None:
    exports.write_tables(chargeback.views(st), out / f"chargeback-{st.period}.{fmt}", main="by team",
                         title=f"GPU chargeback {st.period}", created=st.closed_at or dt.datetime(2026, 1, 1))


def export_all(st, out: Path) -> dict[str, float]:
    views = chargeback.views(st)
    secs = {}
    for fmt in ("xlsx", "csv", "parquet"):
        t = time.perf_counter()
        exports.write_tables(views, out / f"chargeback-{st.period}.{fmt}", main="by team",
                             title=f"GPU chargeback {st.period}", created=st.closed_at or dt.datetime(2026, 1, 1))
        secs[fmt] = time.perf_counter() - t
    return secs


STANDIN_GOV = """currency = "EUR"
{teams}
[[rates]]
gpu_type = "h100"
price_per_gpu_hour = "2.85"
from = 2026-01-01
[[rates]]
gpu_type = "h100"
price_per_gpu_hour = "2.40"
from = 2026-03-16
[[rates]]
gpu_type = "a100"
price_per_gpu_hour = "1.10"
from = 2026-01-01
[idle]
policy = "proportional_usage"
"""


def standin(path: Path, nodes: int, jobs_per_month: int) -> str:
    """A stand-in warehouse written directly (not through the ingestors): ``nodes`` 8-GPU nodes (3/4 h100),
    March 2026 plus the week before with ``jobs_per_month`` jobs a month from 12 teams, runtimes log-normal
    (median 1.5 h, capped at 3 days), 1-8 GPUs, queue waits exponential (mean 1 h). Returns the period."""
    from ingest import governance
    con = warehouse.connect(path)
    days = 38
    n = int(jobs_per_month * days / 31)
    con.execute("SELECT setseed(0.42)")
    con.execute("""INSERT INTO nodes (cluster, node, partitions, gpu_type, gpus, cpus, mem_bytes, ingest_run_id)
                   SELECT 'big', printf('n%05d', i), 'gpu', CASE WHEN i % 4 = 0 THEN 'a100' ELSE 'h100' END, 8, 64,
                          512 * 1024 ^ 3, 0 FROM range($n) t(i)""", {"n": nodes})
    con.execute("""
        CREATE TEMP TABLE _sj AS
        SELECT i, printf('n%05d', (random() * $nodes)::INT % $nodes) AS node,
               (ARRAY[1, 1, 1, 2, 4, 8])[1 + (random() * 6)::INT % 6] AS g,
               TIMESTAMP '2026-02-22' + to_microseconds((random() * $span)::BIGINT) AS start,
               least(exp(ln(5400) + 1.2 * sqrt(-2 * ln(random() + 1e-12)) * cos(2 * pi() * random())), 259200) AS dur,
               -3600 * ln(random() + 1e-12) AS wait, (random() * 12)::INT % 12 AS team
        FROM range($n) t(i)""", {"n": n, "nodes": nodes, "span": days * 86400 * 10 ** 6})
    con.execute("""
        INSERT INTO jobs (job_uid, cluster, job_id, job_id_raw, "user", account, partition, qos, state, submit,
                          eligible, start, "end", elapsed_s, nnodes, ncpus, ngpus, req_gpus, gpu_type, billing,
                          nodelist, source, ingest_run_id)
        SELECT i + 1, 'big', (i + 1)::VARCHAR, (i + 1)::VARCHAR, printf('u%03d', i % 300), printf('team%02d', team),
               'gpu', 'normal', 'COMPLETED', start - to_microseconds((wait * 1e6)::BIGINT),
               start - to_microseconds((wait * 1e6)::BIGINT), start, start + to_microseconds((dur * 1e6)::BIGINT),
               dur::BIGINT, 1, 4 * g, g, g, CASE WHEN node[-1:]::INT % 4 = 0 THEN 'a100' ELSE 'h100' END, 4 * g,
               node, 'standin', 0
        FROM _sj""")
    con.execute("""INSERT INTO job_nodes SELECT job_uid, cluster, job_id_raw, submit, nodelist, ngpus FROM jobs""")
    teams = "\n".join(f'[[teams]]\nname = "team{t:02d}"\naccounts = ["team{t:02d}"]\n[[entitlements]]\n'
                       f'team = "team{t:02d}"\ngpu_type = "h100"\nshare = "0.08"\nfrom = 2026-01-01' for t in range(12))
    gov = path.with_suffix(".toml")
    gov.write_text(STANDIN_GOV.format(teams=teams))
    governance.ingest_path(con, gov)
    con.execute("CHECKPOINT")
    con.close()
    return "2026-03"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=_year.YEAR_SCALE, help="synthetic scale (default: the year)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    ap.add_argument("--workdir", help="where the private copy goes (default: next to the cache)")
    ap.add_argument("--standin", type=int, metavar="NODES",
                    help="instead of the synthetic year, a stand-in written directly with NODES 8-GPU nodes")
    ap.add_argument("--jobs", type=int, default=420_000, help="with --standin: jobs a month (default 420,000)")
    a = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(dir=a.workdir or _year.CACHE) as tmp:
        tmp = Path(tmp)
        if a.standin:
            db = tmp / "standin.duckdb"
            t = time.perf_counter()
            standin(db, a.standin, a.jobs)
            print(f"setup: stand-in written in {time.perf_counter() - t:.1f} s")
        else:
            db = _year.work_copy(_year.year_warehouse(a.seed, a.scale), tmp)
        con = warehouse.connect(db)
        # Only the timeline mart is needed (no telemetry in the year: waste shows as unavailable).
        t = time.perf_counter()
        timeline_mart.build(con, full=True)
        print(f"setup: timeline mart built in {time.perf_counter() - t:.1f} s (not part of any measurement)")
        period = busiest_month(con)
        start, end = tdefs.period_bounds(period, policy.current_policy(con).period_timezone)
        jobs = con.execute("SELECT count(*) FROM jobs WHERE start < ? AND coalesce(\"end\", start) >= ?",
                           [end, start]).fetchall()[0][0]
        print(f"warehouse: {con.sql('SELECT count(*) FROM jobs').fetchall()[0][0]:,} jobs; month {period}: "
              f"{jobs:,} jobs ran in it")
        res = {}
        b = "baseline: the month's allocations"
        res[b], _ = timed(lambda: timeline.job_gpu_seconds(con, start, end), a.repeat, b)
        res["statement (compute)"], st = timed(lambda: chargeback.compute(con, period), a.repeat, "statement (compute)")
        for fmt in ("xlsx", "csv", "parquet"):
            res[f"export {fmt}"], _ = timed(lambda: export_one(st, tmp, fmt), a.repeat, f"export {fmt}")
        slow = max(("xlsx", "csv", "parquet"), key=lambda f: res[f"export {f}"])
        res["statement + slowest export"] = res["statement (compute)"] + res[f"export {slow}"]
        CPU["statement + slowest export"] = CPU["statement (compute)"] + CPU[f"export {slow}"]
        print(f"statement {period}: {st.lines.height} lines, {st.jobs.height:,} job rows, reconciliation: "
              + dict(st.header)["Reconciliation"] + f"; residue {st.total_row['rounding_residue']}")
        t = time.perf_counter()
        closed = close.close_period(con, period)
        res["close"] = time.perf_counter() - t
        first = (tmp / "closed1").mkdir() or tmp / "closed1"
        second = (tmp / "closed2").mkdir() or tmp / "closed2"
        res["re-read closed statement (hash verified)"], frozen = timed(lambda: chargeback.statement(con, period), a.repeat,
                                                                        "re-read closed statement (hash verified)")
        export_all(closed, first)
        export_all(frozen, second)
        same = all((first / f"chargeback-{period}.{f}").read_bytes() == (second / f"chargeback-{period}.{f}").read_bytes()
                   for f in ("xlsx", "csv", "parquet"))
        print(f"closed {period}: sha256 {closed.content_hash[:16]}...; re-export byte-identical: {same}")
        hz = timeline.horizon(con)
        win = [("30d", hz - dt.timedelta(days=30), hz)]
        res["fairness report, 30 days"], rep = timed(lambda: fairness.report(con, win), a.repeat,
                                                     "fairness report, 30 days")
        res["queue report, 30 days"], _ = timed(lambda: (queue.waits(con, win[0][1], hz),
                                                         queue.waits(con, win[0][1], hz, ("qos",)),
                                                         queue.starvation(con, win[0][1], hz)), a.repeat,
                                                "queue report, 30 days")
        print(f"fairness: {rep['teams'].height} team rows, {rep['pools'].height} pools")
        base = res["baseline: the month's allocations"]
        print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"\n{'measurement':44} {'wall s':>8} {'cpu s':>7} {'x baseline':>11} {'target':>8}")
        for name, secs in res.items():
            tgt = TARGETS.get(name)
            mark = "" if tgt is None else (f"<= {tgt:g}" + ("  ok" if secs <= tgt else "  MISSED"))
            cpu = f"{CPU[name]:7.2f}" if name in CPU else " " * 7
            print(f"{name:44} {secs:8.2f} {cpu} {secs / base:11.1f} {mark:>8}")
        print(f"peak RSS: {peak_rss_gb():.2f} GB")
        con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
