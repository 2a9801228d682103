"""Exporting the 5,000,000-job year to the open lake (issue 18 part 4): full, unchanged and incremental (+1 day).

On a private copy of the year with its marts (benchmarks/_year.py):

- ``baseline``: DuckDB's own ``COPY ... (PARTITION_BY (cluster, month))`` of the same tables and rows (no
  manifest, no fingerprints, no hashes, nothing incremental): what a hand-written export costs;
- ``full``: ``lake.export`` into an empty directory (every part written, hashed, manifest);
- ``unchanged``: the same export again, nothing changed (``--repeat`` runs, median): with the serving view
  published (as the service does at every refresh; timed apart), no partitioned table is read;
- ``+1 day``: one more day of accounting through the real ingest path (96 collection cycles of
  benchmarks/service_freshness.py's ``sacct -P`` lines: 11,520 new jobs), the incremental refresh of the marts
  and its publish (timed apart), then ``lake.export``: the parts that day touched are rewritten, the rest
  carried over.

Prints seconds and bytes of each and the ratios full/baseline and +1 day/full. The 5M-job year's marts cache is
reused when one exists for any models version (the export does not change what refresh builds).

Heavy: ``flock /tmp/gpuledger-heavy.lock .venv/bin/python benchmarks/lake_export.py``.
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

from benchmarks._year import CACHE, YEAR_SCALE, _log, cache_key, work_copy, year_warehouse  # noqa: E402
from benchmarks.service_freshness import HEADER, _templates, sacct_lines  # noqa: E402
from ingest import sacct, warehouse  # noqa: E402
from ingest.warehouse import serving  # noqa: E402
from models.pipeline import lake, refresh  # noqa: E402


def marts_year() -> Path:
    """The year with its marts: a cached marts file of this schema (newest), else built."""
    found = sorted(CACHE.glob(f"{cache_key(1, YEAR_SCALE)}-marts*.duckdb"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else year_warehouse(marts=True)


def du(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*.parquet"))


def baseline(con, out: Path) -> float:
    """Seconds of DuckDB's partitioned COPY of the lake's tables (same columns, UTC instants, same partitions)."""
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    cols = serving._columns(con)
    for name in sorted(set(cols) - lake.LAKE_EXCLUDE):
        has_cluster, month, bucket = lake._spec(cols[name])
        if not con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]:
            continue
        sel = ", ".join(f"timezone('UTC', \"{c}\") AS \"{c}\"" if ty == "TIMESTAMP" else f'"{c}"'
                        for c, ty in cols[name])
        msql = ("" if not month else f", {serving._key_sql(month, bucket)} AS month")
        part = [*(["cluster"] if has_cluster else []), *(["month"] if month else [])]
        opts = f", PARTITION_BY ({', '.join(part)})" if part else ""
        target = out / name if part else out / f"{name}.parquet"
        con.execute(f"""COPY (SELECT {sel}{msql} FROM "{name}") TO '{target}'
                        (FORMAT parquet, COMPRESSION zstd{opts})""")
    return time.perf_counter() - t


def add_day(con, work: Path) -> int:
    """One more day of accounting after the year (96 cycles of 15 minutes); returns the sacct lines loaded."""
    tpl = _templates(con, 200)
    cluster, last = con.sql('SELECT any_value(cluster), greatest(max(submit), max(start), max("end")) FROM jobs'
                            ).fetchall()[0]
    epoch = dt.datetime(1970, 1, 1)
    start = epoch + dt.timedelta(seconds=(int((last - epoch).total_seconds()) // 900 + 1) * 900)
    first_id = int(con.sql("SELECT max(try_cast(job_id_raw AS BIGINT)) FROM jobs").fetchall()[0][0]) + 1000
    lines = [ln for c in range(96) for ln in sacct_lines(tpl, cluster, start, c, first_id)[0]]
    (work / "day.psv").write_text("\n".join([HEADER, *lines]) + "\n")
    s = sacct.ingest_path(con, str(work / "day.psv"), sacct.SacctOptions())
    assert s["error"] is None and s["loaded"] == len(lines), s
    return len(lines)


def verify(con, m: dict) -> list[str]:
    """Tables whose parts in the manifest differ from every part fingerprinted anew (the export's change
    detection skipped something): [] when the lake is what a full fingerprint says."""
    cols = serving._columns(con)
    bad = []
    for t, e in m["tables"].items():
        has_cluster, month, bucket = lake._spec(cols[t])
        fresh = lake._fingerprints(con, t, lake._key_sql(has_cluster, month, bucket), None)
        if {k: [n, fp] for k, (n, fp, _) in fresh.items()} != {k: [p["rows"], p["fp"]] for k, p in e["parts"].items()}:
            bad.append(t)
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of the unchanged export (median)")
    ap.add_argument("--db", type=Path, help="another warehouse with marts instead of the year (to try the script)")
    args = ap.parse_args(argv)
    os.environ.setdefault("GPULEDGER_TIME_WINDOW", "2020-01-01..2027-03-01")   # the year runs ahead of the clock
    src = args.db or marts_year()
    with tempfile.TemporaryDirectory(prefix="lake-bench-", dir=CACHE.parent) as tmp:
        work = Path(tmp)
        db = work_copy(src, work)
        con = warehouse.connect(db)
        jobs = con.execute("SELECT count(*) FROM jobs").fetchall()[0][0]
        _log(f"{src.name}: {jobs:,} jobs")
        base_s = baseline(con, work / "baseline")
        base_b = du(work / "baseline")
        _log(f"baseline COPY PARTITION_BY: {base_s:.1f} s, {base_b / 1e6:.1f} MB")
        t = time.perf_counter()
        warehouse.publish_serving(con, db, full=True)     # the service publishes at every refresh
        pub0_s = time.perf_counter() - t
        _log(f"serving view published (full): {pub0_s:.1f} s")
        full = lake.export(con, work / "lake")
        _log(f"full export: {full}")
        same = [lake.export(con, work / "lake") for _ in range(args.repeat)]
        assert all(s["written"] == 0 for s in same), same
        t = time.perf_counter()
        n = add_day(con, work)
        ingest_s = time.perf_counter() - t
        steps = refresh.run(con, db)                       # the incremental refresh, then its publish
        pub_s = sum(s for name, s in steps if name == "serving snapshot")
        refresh_s = sum(s for _, s in steps) - pub_s
        inc = lake.export(con, work / "lake")
        _log(f"+1 day: {n:,} sacct lines ingested in {ingest_s:.1f} s, refresh {refresh_s:.1f} s, publish "
             f"{pub_s:.1f} s; export {inc}")
        m = lake.read_manifest(work / "lake")
        bad = verify(con, m)
        _log(f"verified (untimed): every part's rows and fingerprint against the warehouse: {bad or 'all equal'}")
        assert not bad, bad
        parts = sum(len(e["parts"]) for e in m["tables"].values())
        total_b = sum(p["bytes"] for e in m["tables"].values() for p in e["parts"].values())
        biggest = sorted(((sum(p["bytes"] for p in e["parts"].values()), t, e["rows"], len(e["parts"]))
                          for t, e in m["tables"].items()), reverse=True)[:8]
        con.close()
    med = statistics.median(s["seconds"] for s in same)
    print(f"lake export of the {jobs:,}-job year ({len(m['tables'])} tables, {parts} parts, "
          f"{total_b / 1e6:.1f} MB in the lake):")
    print(f"  baseline DuckDB COPY PARTITION_BY  {base_s:7.1f} s  {base_b / 1e6:8.1f} MB")
    print(f"  full export                        {full['seconds']:7.1f} s  {full['bytes_written'] / 1e6:8.1f} MB  "
          f"{full['written']} parts  (x{full['seconds'] / base_s:.2f} the baseline)")
    print(f"  unchanged (median of {len(same)})           {med:7.1f} s  {0:8.1f} MB  0 parts  "
          f"({same[0]['fingerprinted']} parts fingerprinted)")
    print(f"  +1 day ({n:,} sacct lines)       {inc['seconds']:7.1f} s  {inc['bytes_written'] / 1e6:8.1f} MB  "
          f"{inc['written']} parts, {inc['rows_written']:,} rows  (x{inc['seconds'] / full['seconds']:.2f} the full; "
          f"{inc['fingerprinted']} of {inc['written'] + inc['kept']} parts fingerprinted)")
    print(f"  (serving view: full publish {pub0_s:.1f} s before the exports; after +1 day ingest {ingest_s:.1f} s, "
          f"refresh {refresh_s:.1f} s, publish {pub_s:.1f} s)")
    print("  largest tables: " + "; ".join(f"{t} {b / 1e6:.1f} MB ({n:,} rows, {k} parts)" for b, t, n, k in biggest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
