"""Budgets and alerts on the synthetic year (benchmarks/_year.py: 2,000 nodes x 8 GPUs, ~5,000,000 jobs).

On a private copy of the cached warehouse (its timeline and demand marts built first, not measured), with one
monthly money budget per team and one quarterly GPU-hour budget per cost centre inserted, it measures (medians of
--repeat runs, wall and CPU seconds):

1. baseline: the statement of the month holding the data horizon, without job detail (what any budget figure
   must at least compute)
2. `gpuledger report budgets` (models/forecasting/budgets.report): the month's and the quarter's statements,
   the per-team daily forecast of served GPU-hours and the pricing                           target <= 60 s
3. one alert evaluation of each kind (models/service/alerts.evaluate, into the copy), and all six together
   (idle_gpu_hours and zero_util_job find nothing: the year has no telemetry)

and prints each as a ratio to the baseline.

Full scale, under the heavy lock:  flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/budgets_alerts.py
Develop at small scale:             .venv/bin/python benchmarks/budgets_alerts.py --scale 2 --repeat 1
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
from models.definitions.policy import current_policy  # noqa: E402
from models.definitions.times import period_of  # noqa: E402
from models.forecasting import budgets  # noqa: E402
from models.marts import demand as demand_mart, timeline as timeline_mart  # noqa: E402
from models.metrics import chargeback, timeline  # noqa: E402
from models.service import alerts  # noqa: E402
from models.service.config import ALERT_KINDS, AlertRule  # noqa: E402

TARGET_S = 60.0
THRESHOLDS = {"budget": 90, "idle_gpu_hours": 100, "zero_util_job": 4, "exhaustion": 60, "stale_source": 60,
              "blocked_wait": 10}
WINDOWS = {"idle_gpu_hours": 7 * 86400, "zero_util_job": 86400, "blocked_wait": 7 * 86400}


def cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children (the forecasts fit in worker processes)."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def timed(fn, repeat: int) -> tuple[float, float, object]:
    """(median wall s, median CPU s of all threads, last result)."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), cpu_seconds()
        out = fn()
        walls.append(time.perf_counter() - t)
        cpus.append(cpu_seconds() - c)
    return statistics.median(walls), statistics.median(cpus), out


def insert_budgets(con) -> int:
    """One monthly money budget per team and one quarterly GPU-hour budget per cost centre (a benchmark's
    fixture on its private copy; a site writes [[budgets]] in its governance file)."""
    teams = [r[0] for r in con.sql("SELECT team FROM teams ORDER BY team").fetchall()]
    ccs = [r[0] for r in con.sql("SELECT DISTINCT cost_center FROM teams WHERE cost_center IS NOT NULL "
                                 "ORDER BY 1").fetchall()]
    rows = [(i, "team", t, "month", "money", 50000, None, None) for i, t in enumerate(teams)]
    rows += [(len(rows) + i, "cost_center", c, "quarter", "gpu_hours", 200000, None, None) for i, c in enumerate(ccs)]
    con.executemany("INSERT INTO budgets VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=_year.YEAR_SCALE, help="synthetic scale (default: the year)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=_year.CACHE) as tmp:
        db = _year.work_copy(_year.year_warehouse(a.seed, a.scale), Path(tmp))
        con = warehouse.connect(db)
        t = time.perf_counter()
        timeline_mart.build(con, full=True)
        demand_mart.build(con, full=True)
        print(f"setup: timeline and demand marts built in {time.perf_counter() - t:.1f} s (not measured)")
        n = insert_budgets(con)
        hz = timeline.horizon(con)
        month = period_of(hz - dt.timedelta(microseconds=1), current_policy(con).period_timezone)
        print(f"warehouse: {con.sql('SELECT count(*) FROM jobs').fetchall()[0][0]:,} jobs, {n} budgets, "
              f"data horizon {hz:%Y-%m-%d %H:%M}, month {month}")
        res = {}
        base = "baseline: statement of the month (no job detail)"
        res[base] = timed(lambda: chargeback.compute(con, month, detail=False), a.repeat)
        res["report budgets"] = timed(lambda: budgets.report(con), a.repeat)
        rep = res["report budgets"][2]
        print(f"report budgets: {rep.height} rows, {rep.filter(rep['forecast_pct'] > 100).height} forecast over 100 %")
        rules = [AlertRule(k, k, THRESHOLDS[k], WINDOWS.get(k), (), ("ops@example.org",)) for k in ALERT_KINDS]
        for r in rules:
            res[f"alert evaluation: {r.kind}"] = timed(lambda r=r: alerts.evaluate(con, [r]), a.repeat)
        res["alert evaluation: all six"] = timed(lambda: alerts.evaluate(con, rules), a.repeat)
        counts = res["alert evaluation: all six"][2]
        print(f"all six: {counts} (firing subjects; fired only on the first evaluation)")
        con.close()
    b = res[base][0]
    print(f"\n{'measurement':<46} {'wall s':>8} {'cpu s':>8} {'x baseline':>10}")
    for name, (wall, cpu, _) in res.items():
        print(f"{name:<46} {wall:8.2f} {cpu:8.2f} {wall / b:10.2f}")
    ok = res["report budgets"][0] <= TARGET_S
    print(f"\nreport budgets {res['report budgets'][0]:.1f} s: {'meets' if ok else 'MISSES'} the {TARGET_S:.0f} s target")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
