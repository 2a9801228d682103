"""Speed of the preemption, reservations and pending-reason reports on the synthetic year (~5,000,000 jobs,
2,000 nodes x 8 GPUs; benchmarks/_year.py). Target: each report <= 2 s (issue 16 part 7).

On a private copy of the cached year with its marts (the newest ``*-marts*.duckdb`` of the schema the cache holds;
these reports add tables but no mart, so any current marts file serves), migrated to this branch's schema, with
``--reservations`` synthetic reservations ingested (the year has none; owners round-robin over the teams, each
over 1-8 random nodes for 2-72 h). The year has no squeue snapshots, so the pending report answers from sacct
alone (its Reason column is not in the year's export either: every wait is ``unknown``, the honest answer).

It prints, per report and window (the whole year; the 30 days from midnight before the horizon), the median of ``--repeat`` runs and the ratio to
a baseline in the same process: one scan of the jobs table (count and GPU-seconds).

    flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/waiting_speed.py
"""
from __future__ import annotations

import argparse
import datetime as dt
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _year  # noqa: E402
from ingest import reservations as ingest_resv  # noqa: E402
from ingest import plausible, warehouse  # noqa: E402
from models.metrics import pending, preemption, reservations, timeline  # noqa: E402

TARGET_S = 2.0


def timed(fn, repeat: int) -> tuple[float, object]:
    runs, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs), out


def marts_file() -> Path:
    """The newest plain marts file of the 5M-job year (not a variant such as another benchmark's ``-x4`` copy)."""
    pat = re.compile(r"year-seed1-scale33\.33-gen\d+-schema\d+-marts[0-9a-f]{12}\.duckdb")
    found = sorted((p for p in _year.CACHE.glob("year-seed1-*-marts*.duckdb") if pat.fullmatch(p.name)),
                   key=lambda p: p.stat().st_mtime)
    return found[-1] if found else _year.year_warehouse(marts=True)


def add_reservations(con, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    nodes = [r[0] for r in con.sql("SELECT DISTINCT node FROM nodes WHERE gpus > 0 ORDER BY 1").fetchall()]
    accounts = [r[0] for r in con.sql("SELECT DISTINCT account FROM jobs WHERE account IS NOT NULL ORDER BY 1 LIMIT 20").fetchall()]
    lo, hi = con.sql("SELECT min(data_start), max(horizon) FROM tl_clusters").fetchall()[0]
    lines = []
    for i in range(n):
        a = lo + dt.timedelta(seconds=rng.randrange(max(1, int((hi - lo).total_seconds()) - 86400)))
        b = a + dt.timedelta(hours=rng.randint(2, 72))
        ns = ",".join(rng.sample(nodes, rng.randint(1, min(8, len(nodes)))))
        lines.append(f"ReservationName=bench{i} StartTime={a:%Y-%m-%dT%H:%M:%S} EndTime={b:%Y-%m-%dT%H:%M:%S} "
                     f"Nodes={ns} TRES=cpu=64 Users=(null) Accounts={accounts[i % len(accounts)]} Flags=SPEC_NODES")
    with plausible.replaying(f"2000-01-01..{hi + dt.timedelta(days=4):%Y-%m-%d}"):   # the year runs ahead of the clock
        s = ingest_resv.load(con, "\n".join(lines) + "\n", "bench-reservations")
    assert s["loaded"] == n, s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reservations", type=int, default=200)
    a = ap.parse_args(argv)
    src = marts_file()
    print(f"year: {src.name}")
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        db = _year.work_copy(src, Path(tmp))
        con = warehouse.connect(db)           # migrates the copy to this branch's schema
        add_reservations(con, a.reservations)
        con.execute("CHECKPOINT")
        con.close()
        con = warehouse.connect(db, read_only=True)
        hz = timeline.horizon(con)
        # whole UTC days, as a user's --from/--to dates (the blocked-by-fragmentation column then sums daily rollups)
        day0 = dt.datetime.combine(hz.date(), dt.time()) - dt.timedelta(days=30)
        windows = {"year": (None, None), "last 30 days": (day0, None)}
        base, n = timed(lambda: con.sql("SELECT count(*), sum(ngpus * elapsed_s) FROM jobs").fetchall(), a.repeat)
        print(f"jobs: {n[0][0]:,}; baseline (scan of jobs): {base:.3f} s")
        reports = {
            "preemption": lambda s, e: preemption.views(con, s, e),
            "reservations": lambda s, e: reservations.report(con, s, e),
            "pending": lambda s, e: pending.views(con, s, e),     # as `report pending` calls it
        }
        print(f"{'report':<14}{'window':<15}{'median s':>10}{'x baseline':>12}  target {TARGET_S} s")
        worst = 0.0
        for name, fn in reports.items():
            for wname, (s, e) in windows.items():
                secs, out = timed(lambda: fn(s, e), a.repeat)
                worst = max(worst, secs)
                print(f"{name:<14}{wname:<15}{secs:>10.2f}{secs / base:>12.1f}  "
                      + ("met" if secs <= TARGET_S else "MISSED"))
        pv = preemption.by_victim(con)
        print(f"preempted jobs in the year: {pv['preempted_jobs'].sum():,}, "
              f"{pv['preempted_gpu_h'].sum():,.0f} GPU-h; requeues {pv['requeues'].sum():,}")
        r = reservations.report(con)
        print(f"reservations: {r.height}, reserved {r['reserved_gpu_h'].sum():,.0f} GPU-h, "
              f"idle {r['reserved_idle_gpu_h'].sum():,.0f} GPU-h")
        con.close()
    return 0 if worst <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
