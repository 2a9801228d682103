"""The efficiency page's reads over long windows on the 5M-job year (#20): each read the page prefetches, timed
alone on a cursor of the year's serving snapshot (Parquet parts, as the dashboard reads them; ``--duckdb``: the
warehouse file read-only instead), with the per-day rollup of jobs without telemetry (models/marts/efficiency_notel.py)
and, in the same run, as before it (every job's window expanded: the rollup set aside; worst offenders as the page
read them before, ``per_job(order="idle", limit=25)``).

Windows end at the data's last hour (not on a day: the edge days are computed per job) and span 90 days and a
year. Run under the heavy lock (a marts refresh of the year may come first, 3-5 min)::

    flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/efficiency_windows.py \
        [--runs 3] [--no-before] [--duckdb]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

from benchmarks._year import CACHE, work_copy, year_warehouse  # noqa: E402
from dashboards.snapshot import Snapshot  # noqa: E402
from ingest import warehouse  # noqa: E402
from models.metrics import efficiency  # noqa: E402


def reads(bucket: str, before: bool) -> dict:
    """The page's reads (dashboards/views/efficiency.py's prefetch), by name."""
    worst = ((lambda con, lo, hi: efficiency.per_job(con, lo, hi, order="idle", limit=25)) if before else
             (lambda con, lo, hi: efficiency.worst_offenders(con, lo, hi, n=25)))
    return {"total": lambda con, lo, hi: efficiency.by_group(con, lo, hi, bucket=None),
            "by team": lambda con, lo, hi: efficiency.by_group(con, lo, hi, by=["team"], bucket=None),
            "by user": lambda con, lo, hi: efficiency.by_group(con, lo, hi, by=["user"], bucket=None),
            f"by pool per {bucket}":
                lambda con, lo, hi: efficiency.by_group(con, lo, hi, by=["gpu_type"], bucket=bucket),
            "worst offenders": worst,
            "attribution methods": lambda con, lo, hi: efficiency.method_shares(con, lo, hi)}


def timed(fn, con, lo, hi, runs: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn(con, lo, hi)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs per read with the rollup (median)")
    ap.add_argument("--no-before", action="store_true", help="skip the reads without the rollup (slow)")
    ap.add_argument("--duckdb", action="store_true", help="read the warehouse file, not the serving snapshot")
    args = ap.parse_args(argv)
    db = year_warehouse(marts=True)
    if args.duckdb:
        con = duckdb.connect(str(db), read_only=True)
        print(f"{db.name} (DuckDB file); load average {os.getloadavg()[0]:.1f}", flush=True)
        return measure(con, args)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        copy = work_copy(db, Path(tmp))
        w = warehouse.connect(copy)
        t = time.perf_counter()
        warehouse.publish_serving(w, copy, full=True)
        w.close()
        snap = Snapshot(copy)
        print(f"{db.name} (serving snapshot, published in {time.perf_counter() - t:.1f} s); load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        try:
            return measure(snap.cursor(), args)
        finally:
            snap.close()


def measure(con, args) -> int:
    end = con.sql("SELECT date_trunc('hour', max(window_end)) FROM gpu_efficiency_job").fetchall()[0][0]
    rollup = efficiency._whole_days
    for days, bucket in ((90, "day"), (365, "week")):
        lo, hi = end - dt.timedelta(days=days, minutes=-7), end + dt.timedelta(minutes=23)
        print(f"\nwindow {lo} .. {hi} ({days} days)\n| read | before (s) | after (s, median of {args.runs}) "
              "| same figures |\n|---|---|---|---|", flush=True)
        for name in reads(bucket, False):
            after, got = timed(reads(bucket, False)[name], con, lo, hi, args.runs)
            cell, same = "-", "-"
            if not args.no_before:
                efficiency._whole_days = lambda *a: None      # the rollup set aside: every job expanded
                try:
                    before, want = timed(reads(bucket, True)[name], con, lo, hi, 1)
                finally:
                    efficiency._whole_days = rollup
                cell = f"{before:.2f}"
                same = _same(name, got, want)
            print(f"| {name} | {cell} | {after:.2f} | {same} |", flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    return 0


def _same(name: str, got, want) -> str:
    """Whether the read gave the figures it gave before (worst offenders: the jobs with idle GPU-hours)."""
    if name == "worst offenders":
        want = want.filter(want["idle_alloc_gpu_h"] > 0)
    if isinstance(got, dict):
        got, want = [got], [want]
    else:
        got, want = got.rows(), want.rows()
    ok = len(got) == len(want) and all(
        (abs(a - b) <= 1e-6 * max(1.0, abs(b))) if isinstance(a, float) and isinstance(b, float) else a == b
        for x, y in zip(got, want) for a, b in zip(x.values() if isinstance(x, dict) else x,
                                                   y.values() if isinstance(y, dict) else y))
    return "yes" if ok else "NO"


if __name__ == "__main__":
    raise SystemExit(main())
