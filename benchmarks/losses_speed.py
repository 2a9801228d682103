"""Losses and reliability on the synthetic year (issue 16 part 7): what the loss marts add to the full refresh,
and every loss/reliability report read from the marts.

On a private copy of benchmarks/_year.py's year (2,000 nodes x 8 GPUs, ~5,000,000 jobs, no telemetry) it runs
``gpuledger refresh --full`` --repeat times in this process and prints the medians of the loss marts' step and
of every other step together, and their ratio (target <= 20 %); then each report over the whole year (medians of
--repeat runs, target <= 2 s each), including the telemetry views (XID GPUs, slow nodes), which on the year
must answer fast that there is no telemetry.

    flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/losses_speed.py
    flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/losses_speed.py --reports-only   # no refresh:
        # the reports read-only on the newest cached marts file of the year (benchmarks/waiting_speed.marts_file)
    .venv/bin/python benchmarks/losses_speed.py --scale 2 --repeat 1          # develop at small scale
"""
from __future__ import annotations

import argparse
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
from models.metrics import losses, reliability, reliability_summary  # noqa: E402
from models.pipeline import refresh  # noqa: E402

REPORT_TARGET_S, RATIO_TARGET = 2.0, 0.20


def _reports(con) -> dict:
    """Each report of `gpuledger report losses|reliability` as the CLI calls it, over the whole span."""
    def telemetry_view(fn):
        return lambda: fn(con) if reliability.has_telemetry(con) else None
    return {
        "losses by team, month": lambda: losses.report(con, bucket="month", by=["team"]),
        "losses by pool, week": lambda: losses.report(con, bucket="week", by=["gpu_type"]),
        "losses by team x cause, total": lambda: losses.report(con, bucket=None, by=["team", "cause"]),
        "losses by node, total": lambda: losses.report(con, bucket=None, by=["node"]),
        "losses by team, day": lambda: losses.report(con, bucket="day", by=["team"]),
        "loss jobs (top 100)": lambda: losses.jobs(con, limit=100),
        "loss basis footer": lambda: losses.basis(con),
        "reliability nodes": lambda: reliability.nodes(con, by="node"),
        "reliability pools": lambda: reliability.nodes(con, by="gpu_type"),
        "outages": lambda: reliability.outages(con),
        "repeat offenders": lambda: reliability.offenders(con),
        "XID GPUs (telemetry check first)": telemetry_view(reliability.gpus),
        "slow nodes (telemetry check first)": telemetry_view(reliability.slow_nodes),
        "summary teams, year": lambda: reliability_summary.teams(con),
        "summary pull, year": lambda: reliability_summary.pull(con),
        "summary teams, last full month": lambda: reliability_summary.teams(con, *reliability_summary.last_full_month(con)),
        "summary pull, last full month": lambda: reliability_summary.pull(con, *reliability_summary.last_full_month(con)),
    }


def _time_reports(ro, repeat: int) -> float:
    """Print each report's median of ``repeat`` runs; return the worst median (seconds)."""
    print(f"\n{'report (whole year unless said)':<40} {'median s':>9}  target <= {REPORT_TARGET_S} s")
    worst = 0.0
    for name, fn in _reports(ro).items():
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        m = statistics.median(times)
        worst = max(worst, m)
        print(f"{name:<40} {m:>9.3f}  {'met' if m <= REPORT_TARGET_S else 'NOT MET'}", flush=True)
    print(f"telemetry in the warehouse: {reliability.has_telemetry(ro)}")
    return worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=_year.YEAR_SCALE)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each report (median)")
    ap.add_argument("--refresh-repeat", type=int, help="full refreshes (median; default --repeat)")
    ap.add_argument("--reports-only", action="store_true", help="no refresh: time the reports, read-only, on the "
                    "newest cached marts file of the year")
    a = ap.parse_args(argv)
    if a.reports_only:
        from benchmarks.waiting_speed import marts_file
        src = marts_file()
        print(f"reports only, read-only on a copy of {src.name} migrated to this schema")
        tmp = tempfile.TemporaryDirectory(dir="/tmp")
        db = _year.work_copy(src, Path(tmp.name))
        warehouse.connect(db).close()               # migrates the copy (the cache may be of an older schema)
        ro = warehouse.connect(db, read_only=True)
        jobs, loss_jobs = ro.sql("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM loss_jobs)").fetchall()[0]
        print(f"year: {jobs:,} jobs; loss_jobs {loss_jobs:,} rows; last full month "
              f"{reliability_summary.last_full_month(ro)}")
        worst = _time_reports(ro, a.repeat)
        ro.close()
        tmp.cleanup()
        return 0 if worst <= REPORT_TARGET_S else 1
    src = _year.year_warehouse(scale=a.scale)
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        db = _year.work_copy(src, Path(tmp))
        con = warehouse.connect(db)
        steps: dict[str, list[float]] = {}
        n_refresh = a.refresh_repeat or a.repeat
        for i in range(n_refresh):
            for name, secs in refresh.run(con, db, full=True, publish=False):
                steps.setdefault(name, []).append(secs)
            print(f"refresh {i + 1}: " + ", ".join(f"{n} {s[-1]:.1f} s" for n, s in steps.items()), flush=True)
        mine = statistics.median(steps["losses"])
        others = statistics.median([sum(steps[n][i] for n in steps if n != "losses") for i in range(n_refresh)])
        ratio = mine / others
        jobs, loss_jobs, days = con.sql("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM loss_jobs), "
                                        "(SELECT count(*) FROM loss_days)").fetchall()[0]
        print(f"\nyear: {jobs:,} jobs; loss_jobs {loss_jobs:,} rows, loss_days {days:,} rows")
        print(f"full refresh without the loss marts: median {others:.1f} s; loss marts: median {mine:.2f} s; "
              f"ratio {100 * ratio:.1f} % (target <= {100 * RATIO_TARGET:.0f} %) "
              f"{'met' if ratio <= RATIO_TARGET else 'NOT MET'}")
        con.close()
        ro = warehouse.connect(db, read_only=True)
        worst = _time_reports(ro, a.repeat)
        ro.close()
    return 0 if ratio <= RATIO_TARGET and worst <= REPORT_TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
