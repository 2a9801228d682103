"""Speed: forecast many team x pool series with the backtest that chooses each series' model, in <= 60 s.

Two cases (issue #17): 200 daily series x 730 days (horizon 90) and 50 hourly series x 90 days (horizon 24).
The series are demanded GPU-hours shaped like a real site's teams (level, weekly cycle and for hourly data a
daily one, trend, noise, a few level shifts and idle teams), generated here with a fixed seed so the figure is
repeatable.
With --db FILE it times the real thing instead: `demand.series` + `forecast_table` by team,pool on a warehouse.

Prints the median of --runs runs (wall seconds for all series, per series), the CPU seconds they took (which,
unlike wall time, does not grow when other work shares the machine) and peak RSS.
Run: .venv/bin/python benchmarks/forecast_speed.py [--freq day|hour|both] [--runs 3]
(defaults: day 200 series x 730 days, horizon 90; hour 50 series x 90 days, horizon 24)
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


def synthetic(n_series: int, days: int, seed: int = 7, freq: str = "day") -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    per_day = 24 if freq == "hour" else 1
    n = days * per_day
    t = np.arange(n)
    day = t // per_day
    start = np.datetime64("2024-01-01T00")
    frames = []
    for i in range(n_series):
        level = rng.lognormal(4, 1)
        weekly = 1 + rng.uniform(0, 0.4) * (day % 7 < 5)
        daily = 1 + rng.uniform(0, 0.6) * np.clip(np.sin(np.pi * ((t % 24) - 7) / 14), 0, None) if per_day > 1 else 1
        trend = 1 + rng.uniform(-0.3, 1.0) * t / n
        walk = np.exp(np.cumsum(rng.normal(0, 0.02 / np.sqrt(per_day), n)))
        y = level * weekly * daily * trend * walk * rng.lognormal(0, 0.15, n)
        if i % 10 == 0:                                        # a pool added mid-way: a level shift
            y[n // 2:] *= 2.5
        if i % 25 == 0:                                        # a team that started recently
            y[: n - 100 * per_day // (4 if per_day > 1 else 1)] = 0
        frames.append(pl.DataFrame({"team": f"team{i // 4:02d}", "pool": f"pool{i % 4}",
                                    "ts": (start + t * F.STEP[freq]).astype("datetime64[us]"), "value": y}))
    return pl.concat(frames)


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the spawned forecast workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


CASES = {"day": (200, 730, 90), "hour": (50, 90, 24)}      # series, days, horizon


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--freq", choices=["day", "hour", "both"], default="both")
    ap.add_argument("--series", type=int, help="series (default 200 daily, 50 hourly)")
    ap.add_argument("--days", type=int, help="days of history (default 730 daily, 90 hourly)")
    ap.add_argument("--horizon", type=int, help="periods ahead (default 90 daily, 24 hourly)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--db", help="time demand.series + forecast_table by team,pool (daily) on this warehouse instead")
    args = ap.parse_args(argv)
    for freq in (("day", "hour") if args.freq == "both" else (args.freq,)):
        n_series, days, horizon = CASES[freq]
        n_series, days, horizon = args.series or n_series, args.days or days, args.horizon or horizon
        if args.db:
            from ingest import warehouse
            from models.metrics import demand
            con = warehouse.connect(args.db, read_only=True)
            t0 = time.perf_counter()
            df = demand.series(con, "demanded", freq, ["team", "pool"])
            print(f"demand.series team,pool: {time.perf_counter() - t0:.2f} s")
        else:
            df = synthetic(n_series, days, freq=freq)
        run_case(df, freq, horizon, args.runs)
    return 0


def run_case(df: pl.DataFrame, freq: str, horizon: int, runs: int) -> None:
    n = df.select("team", "pool").unique().height
    times, cpus = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), _cpu()
        fc, summary = F.forecast_table(df, ["team", "pool"], freq, horizon)
        times.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
    med = statistics.median(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    chosen = summary.group_by("model").agg(pl.len()).sort("model").rows()
    print(f"{freq}: {n} series x {df.height // max(n, 1)} periods, horizon {horizon}: median {med:.1f} s over "
          f"{runs} runs ({med / n * 1000:.0f} ms per series; runs {', '.join(f'{x:.1f}' for x in times)}); "
          f"target <= 60 s: {'met' if med <= 60 else 'NOT met'}")
    print(f"  CPU seconds (this process + worker processes): median {statistics.median(cpus):.1f} "
          f"({statistics.median(cpus) / n * 1000:.0f} ms per series); workers {F._workers(n)}; "
          f"load average when done {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"  models chosen: {chosen}; peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
