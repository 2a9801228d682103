"""Demand series on the synthetic year: the demanded GPU-hours computed from the jobs, with every open job's
expected run time given what it has run (models/kernels/demand_measures.py), against a scan of every job.

Read-only on benchmarks/_year.py's year with its marts (2,000 nodes x 8 GPUs, ~5,000,000 jobs), medians of
--repeat runs, seconds:

1. daily served, demanded and estimated GPU-hours per pool over the year from the jobs (``demand_table`` with
   ``mart=False``: what `gpuledger forecast` computes when the marts are stale, and the demand mart's refresh
   per scope), peaks left out;
2. the same for the hourly series of the last 90 days (`--freq hour`);
3. baseline: one scan summing every GPU job's requested GPUs x elapsed seconds (what any answer must read);

and each as a ratio to the baseline. Also the open jobs at the horizon and the GPU-hours their estimate adds.

    flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/demand_speed.py
    .venv/bin/python benchmarks/demand_speed.py --scale 2 --repeat 1          # develop at small scale
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _year  # noqa: E402
from benchmarks.waiting_speed import timed  # noqa: E402
from ingest import warehouse  # noqa: E402
from models.kernels import demand_measures  # noqa: E402

BASELINE_SQL = """SELECT sum(coalesce(req_gpus, ngpus) * coalesce(elapsed_s, 0)) / 3600 FROM jobs
                  WHERE ngpus > 0 OR coalesce(req_gpus, 0) > 0"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=_year.YEAR_SCALE)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--db", type=Path, help="a warehouse with its marts instead of the year's (read-only)")
    a = ap.parse_args(argv)
    con = warehouse.connect(a.db or _year.year_warehouse(scale=a.scale, marts=True), read_only=True)
    end = demand_measures.load_jobs(con, None)
    start = con.sql("SELECT date_trunc('day', min(submit)) FROM _demand_jobs").fetchall()[0][0]
    end = end.replace(hour=0, minute=0, second=0, microsecond=0)
    n, open_jobs = con.sql("""SELECT count(*), count(*) FILTER (WHERE "end" IS NULL) FROM _demand_jobs""").fetchall()[0]
    base, _ = timed(lambda: con.sql(BASELINE_SQL).fetchall(), a.repeat)
    day, t = timed(lambda: demand_measures.measures(con, "day", ["pool"], start, end, peak=False), a.repeat)
    hstart = end - dt.timedelta(days=90)
    hour, _ = timed(lambda: demand_measures.measures(con, "hour", ["pool"], hstart, end, peak=False), a.repeat)
    print(f"warehouse: {n:,} GPU jobs staged, {open_jobs:,} open at the horizon ({end:%Y-%m-%d})")
    print(f"{'step':<52} {'median s':>9} {'x baseline':>11}")
    print(f"{'baseline: scan of every GPU job':<52} {base:>9.3f} {1:>11.1f}")
    print(f"{'daily per pool over the year (served, demanded)':<52} {day:>9.3f} {day / base:>11.1f}")
    print(f"{'hourly per pool, last 90 days':<52} {hour:>9.3f} {hour / base:>11.1f}")
    print(f"estimated GPU-hours (open jobs beyond what they have run): {t['estimated_gpu_hours'].sum():,.1f} "
          f"of {t['demanded_gpu_hours'].sum():,.1f} demanded")
    con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
