"""Speed: forecast 200 team x pool daily series, with the backtest that chooses each series' model, in <= 60 s.

The series are two years of daily demanded GPU-hours shaped like a real site's teams (level, weekly cycle,
trend, noise, a few level shifts and idle teams), generated here with a fixed seed so the figure is repeatable.
With --db FILE it times the real thing instead: `demand.series` + `forecast_table` by team,pool on a warehouse.

Prints the median of --runs runs (wall seconds for all series, per series), the CPU seconds they took (which,
unlike wall time, does not grow when other work shares the machine) and peak RSS.
Run: .venv/bin/python benchmarks/forecast_speed.py [--series 200] [--days 730] [--horizon 90] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from models.forecasting import forecast as F  # noqa: E402


def synthetic(n_series: int, days: int, seed: int = 7) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(days)
    start = np.datetime64("2024-01-01")
    frames = []
    for i in range(n_series):
        level = rng.lognormal(4, 1)
        weekly = 1 + rng.uniform(0, 0.4) * (t % 7 < 5)
        trend = 1 + rng.uniform(-0.3, 1.0) * t / days
        walk = np.exp(np.cumsum(rng.normal(0, 0.02, days)))
        y = level * weekly * trend * walk * rng.lognormal(0, 0.15, days)
        if i % 10 == 0:                                        # a pool added mid-way: a level shift
            y[days // 2:] *= 2.5
        if i % 25 == 0:                                        # a team that started recently
            y[: days - 100] = 0
        frames.append(pl.DataFrame({"team": f"team{i // 4:02d}", "pool": f"pool{i % 4}",
                                    "ts": (start + t).astype("datetime64[us]"), "value": y}))
    return pl.concat(frames)


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the spawned forecast workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=200)
    ap.add_argument("--days", type=int, default=730)
    ap.add_argument("--horizon", type=int, default=90)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--db", help="time demand.series + forecast_table by team,pool on this warehouse instead")
    args = ap.parse_args(argv)
    if args.db:
        from ingest import warehouse
        from models.metrics import demand
        con = warehouse.connect(args.db, read_only=True)
        t0 = time.perf_counter()
        df = demand.series(con, "demanded", "day", ["team", "pool"])
        print(f"demand.series team,pool: {time.perf_counter() - t0:.2f} s")
    else:
        df = synthetic(args.series, args.days)
    n = df.select("team", "pool").unique().height
    times, cpus = [], []
    for _ in range(args.runs):
        t0, c0 = time.perf_counter(), _cpu()
        fc, summary = F.forecast_table(df, ["team", "pool"], "day", args.horizon)
        times.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
    med = statistics.median(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    chosen = summary.group_by("model").agg(pl.len()).sort("model").rows()
    print(f"{n} series x {df.height // max(n, 1)} days, horizon {args.horizon}: median {med:.1f} s over "
          f"{args.runs} runs ({med / n * 1000:.0f} ms per series; runs {', '.join(f'{x:.1f}' for x in times)}); "
          f"target <= 60 s: {'met' if med <= 60 else 'NOT met'}")
    print(f"CPU seconds (this process + worker processes): median {statistics.median(cpus):.1f} "
          f"({statistics.median(cpus) / n * 1000:.0f} ms per series); workers {F._workers(n)}; "
          f"load average when done {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"models chosen: {chosen}; peak RSS {rss:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
