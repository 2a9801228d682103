"""Server-side run time of every dashboard page on the 5,000,000-job synthetic year (target: <= 2 s a page).

Each page is run headless with Streamlit's AppTest against the serving snapshot of the year warehouse (with
its marts), with the default filters (the last 30 days of data):

- cold: the page's caches emptied first (st.cache_data / st.cache_resource cleared), so the page computes
  every figure from the snapshot through its models: what the first manager to open it after an ingest waits;
- warm: the same filter set again (the cached views): what everyone else waits.

Imports and JIT compilation are paid once by a throwaway pass before measuring. Medians of ``--runs`` runs;
peak RSS of this process at the end. Heavy (the year build is several GB): run it as
``flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/dashboard_speed.py``.

    python benchmarks/dashboard_speed.py [--db WAREHOUSE] [--runs 3] [--pages overview,utilization]
"""
from __future__ import annotations

import argparse
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

PAGES = ["overview", "utilization", "efficiency", "fragmentation", "fairness", "chargeback", "forecast",
         "data_health"]
TARGET_S = 2.0


def serving_copy(src: Path, workdir: Path, refresh: bool) -> tuple[Path, float]:
    """A private copy of ``src`` with its serving snapshot published (what `gpuledger refresh` leaves);
    ``refresh`` rebuilds the marts first (for a warehouse without them, or built by older models)."""
    import shutil
    import subprocess
    from ingest import warehouse
    db = workdir / "year.duckdb"
    shutil.copyfile(src, db)
    t = time.perf_counter()
    if refresh:   # in its own process, so the peak RSS below is the dashboard's
        subprocess.run([sys.executable, "-m", "gpuledger", "--db", str(db), "refresh", "--full"], check=True)
    else:
        con = warehouse.connect(db)
        warehouse.publish_serving(con, db)
        con.close()
    return db, time.perf_counter() - t


def run_page(at, page: str) -> tuple[float, str | None]:
    """(server-side seconds, the first error the page showed or None)."""
    at.switch_page(f"views/{page}.py")
    t = time.perf_counter()
    at.run()
    took = time.perf_counter() - t
    bad = [e.value for e in at.exception] + [e.value for e in at.error if "could not be computed" in e.value]
    bad += [c.value for c in at.caption if "could not be computed" in c.value]
    return took, (bad[0].splitlines()[0][:200] if bad else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="a warehouse with marts (default: the cached synthetic year, built if needed)")
    ap.add_argument("--refresh", action="store_true", help="rebuild the marts of --db's copy before publishing")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pages", default=",".join(PAGES))
    a = ap.parse_args(argv)
    pages = [p.strip() for p in a.pages.split(",") if p.strip()]
    if a.db:
        src = Path(a.db)
    else:
        from benchmarks._year import year_warehouse
        src = year_warehouse(marts=True)
    with tempfile.TemporaryDirectory(prefix="gpuledger-dash-") as tmp:
        db, publish_s = serving_copy(src, Path(tmp), a.refresh)
        os.environ["GPULEDGER_DB"] = str(db)
        import duckdb
        jobs = duckdb.connect(str(db), read_only=True).sql("SELECT count(*) FROM jobs").fetchall()[0][0]
        print(f"warehouse {src} ({jobs:,} jobs); {'marts refreshed and ' if a.refresh else ''}serving snapshot "
              f"published in {publish_s:.1f} s")
        import streamlit as st
        from streamlit.testing.v1 import AppTest
        at = AppTest.from_file(str(ROOT / "dashboards" / "app.py"), default_timeout=1800)
        t = time.perf_counter()
        at.run()
        print(f"entry script, first run (imports, catalogue): {time.perf_counter() - t:.2f} s")
        for p in pages:                           # imports, numba/JIT, first touches of the snapshot file
            run_page(at, p)
        rows = []
        for p in pages:
            cold, warm, errors = [], [], set()
            for _ in range(a.runs):
                st.cache_data.clear()
                st.cache_resource.clear()
                for into in (cold, warm):
                    took, err = run_page(at, p)
                    into.append(took)
                    if err:
                        errors.add(err)
            rows.append((p, statistics.median(cold), statistics.median(warm), sorted(errors)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\n{'page':<14}{'cold s':>9}{'warm s':>9}  target <= {TARGET_S:g} s")
    for p, c, w, errors in rows:
        verdict = "ok" if c <= TARGET_S else ("cold over" + ("" if w <= TARGET_S else ", warm over"))
        print(f"{p:<14}{c:>9.2f}{w:>9.2f}  {verdict}" + (f"  (page showed an error: {errors[0]})" if errors else ""))
    print(f"median of {a.runs} runs each; peak RSS {peak:,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
