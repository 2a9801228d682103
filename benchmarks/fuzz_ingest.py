"""The ingest fuzz at scale: thousands of mutated inputs (tests/fuzz_inputs.py) through every text ingestor, with
refresh and every report every --refresh-every cases, on one accumulating warehouse.

`make test` runs 100 cases, the same ones every run (tests/test_fuzz_ingest.py); this runs as many as asked and prints what happened:
cases per ingestor and outcome, and the time taken. A failing case stops the
run with Hypothesis' minimal reproducing input.

    .venv/bin/python benchmarks/fuzz_ingest.py [--cases 2000] [--refresh-every 250] [--seed N]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HYPOTHESIS_PROFILE", "explore")   # tests/conftest.py would fix the examples otherwise

from hypothesis import HealthCheck, given, seed as hseed, settings  # noqa: E402

import fuzz_inputs  # noqa: E402
from conftest import FIXTURES  # noqa: E402
from ingest import governance, warehouse  # noqa: E402
from test_extreme_values import every_report  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--refresh-every", type=int, default=250)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from models.pipeline import refresh
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "fuzz.duckdb"
        con = warehouse.connect(db)
        governance.ingest_path(con, FIXTURES / "dashboard" / "governance.toml")
        tally: collections.Counter = collections.Counter()
        refreshes = []
        t0 = time.perf_counter()

        @hseed(args.seed)
        @settings(max_examples=args.cases, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(case=fuzz_inputs.cases)
        def one(case):
            ingestor, data = case
            tally[(ingestor, fuzz_inputs.check_case(con, ingestor, data, Path(tmp) / f"case-{ingestor}.txt"))] += 1
            done = sum(tally.values())
            if done % args.refresh_every == 0:
                r0 = time.perf_counter()
                refresh.run(con, db)
                every_report(con)
                refreshes.append(time.perf_counter() - r0)
                print(f"  {done} cases, refresh + every report in {refreshes[-1]:.1f} s", flush=True)

        one()
        r0 = time.perf_counter()
        refresh.run(con, db)
        every_report(con)
        refreshes.append(time.perf_counter() - r0)
        took = time.perf_counter() - t0
        jobs = con.sql("SELECT count(*) FROM jobs").fetchall()[0][0]
        con.close()
    print(f"{sum(tally.values())} cases in {took:.0f} s ({len(refreshes)} refreshes + every report, "
          f"{sum(refreshes):.0f} s of it); {jobs} jobs in the warehouse at the end")
    for (ingestor, code), n in sorted(tally.items()):
        print(f"  {ingestor:<7} exit {code}: {n}")


if __name__ == "__main__":
    main()
