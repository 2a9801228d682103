"""What team scoping costs on the 5,000,000-job synthetic year: the dashboards' model reads through a full
cursor and through a team lead's scoped cursor (dashboards/access.py: views that merge every other team into
"other teams"), on the same serving snapshot, in the same process.

For each scope: the one-time creation of the scope's views (per snapshot), then each read cold (a new snapshot
connection per run; medians of ``--runs``): utilization by team per day, efficiency by team, fairness (one
window), queue waits by team, demand by team per day, and the horizon month's statement without job detail.
Prints each read's seconds for both scopes and the ratio scoped / full. Heavy: run it as
``flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/access_scope.py --db YEAR_WITH_MARTS.duckdb``
(a warehouse with its marts: ``benchmarks/_year.py --marts`` prints the path). It works on a private copy.

    python benchmarks/access_scope.py --db WAREHOUSE [--runs 3] [--team NAME] [--days 30]
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dashboards import access  # noqa: E402
from dashboards.snapshot import Snapshot  # noqa: E402
from ingest import warehouse  # noqa: E402
from models.metrics import chargeback, demand, efficiency, fairness, queue, timeline, utilization  # noqa: E402


def reads(t0: dt.datetime, t1: dt.datetime, month: str) -> dict:
    return {
        "utilization by team, daily": lambda c: utilization.by_bucket(c, t0, t1, "day", by=["team"]),
        "efficiency by team": lambda c: efficiency.by_group(c, t0, t1, by=["team"], bucket=None),
        "fairness, one window": lambda c: fairness.report(c, [("window", t0, t1)]),
        "queue waits by team": lambda c: queue.waits(c, t0, t1, by=("team",)),
        "demand by team, daily": lambda c: demand.series(c, "demanded", "day", by=("team",)),
        "statement of the month": lambda c: chargeback.statement(c, month, detail=False),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--team", help="the team lead's team (default: the team with most jobs)")
    ap.add_argument("--days", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuledger-access-") as tmp:
        db = Path(tmp) / "year.duckdb"
        shutil.copyfile(args.db, db)
        con = warehouse.connect(db)                 # migrates the copy (the access tables) and publishes it
        warehouse.publish_serving(con, db)
        con.close()
        probe = Snapshot(db)
        cur = probe.cursor()
        team = args.team or cur.sql("SELECT team FROM jobs WHERE team IS NOT NULL GROUP BY team "
                                    "ORDER BY count(*) DESC LIMIT 1").fetchall()[0][0]
        horizon = timeline.horizon(cur)
        probe.close()
        t1 = horizon.replace(minute=0, second=0, microsecond=0)
        t0 = t1 - dt.timedelta(days=args.days)
        month = f"{t1:%Y-%m}"
        key = access.Scope("team_lead", (team,)).key
        print(f"year copy {db.stat().st_size / 1e9:.2f} GB; window {t0:%Y-%m-%d %H:%M} to {t1:%Y-%m-%d %H:%M}; "
              f"team lead of {team!r}; month {month}; medians of {args.runs} cold runs")
        times: dict[tuple[str, str], list[float]] = {}
        views: list[float] = []
        for _ in range(args.runs):
            for scope in ("", key):
                snap = Snapshot(db)
                snap.cursor()                        # open the snapshot: not part of either figure
                t = time.perf_counter()
                snap.cursor(scope)
                if scope:
                    views.append(time.perf_counter() - t)
                for name, read in reads(t0, t1, month).items():
                    t = time.perf_counter()
                    read(snap.cursor(scope))
                    times.setdefault((name, scope), []).append(time.perf_counter() - t)
                snap.close()
        print(f"creating the scope's views (once per snapshot and scope): {statistics.median(views) * 1000:.0f} ms")
        print(f"{'read':32s} {'full s':>8s} {'scoped s':>9s} {'ratio':>6s}")
        total = {"": 0.0, key: 0.0}
        for name in reads(t0, t1, month):
            full, scoped = statistics.median(times[(name, "")]), statistics.median(times[(name, key)])
            total[""] += full
            total[key] += scoped
            print(f"{name:32s} {full:8.3f} {scoped:9.3f} {scoped / full:6.2f}")
        print(f"{'all six':32s} {total['']:8.3f} {total[key]:9.3f} {total[key] / total['']:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
