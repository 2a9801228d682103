#!/usr/bin/env python3
"""A consistent copy of the gpuledger warehouse while the collector runs.

    gpuledger-backup.py /var/lib/gpuledger/warehouse.duckdb /srv/backup/warehouse-$(date +%F).duckdb

The collector opens the warehouse read-write only during a cycle. This waits (up to --wait seconds, default 600)
for a moment between cycles, attaches the warehouse read-only, which holds off the next cycle (it waits up to its
[service] lock_timeout and otherwise retries next cycle: nothing is lost), and copies every table, the schema
version included, into a new DuckDB file with DuckDB's COPY FROM DATABASE: a snapshot of one instant, committed
data only (a write-ahead log left by a crash is read, not lost). The copy is written beside the destination and
renamed into place, so the destination is always either absent or complete. Exit 0 with one line of figures, or
1 with one line saying why.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import duckdb


def backup(src: Path, dest: Path, wait: float) -> tuple[int, float]:
    """Copy ``src`` to ``dest``; returns (tables copied, seconds holding the warehouse)."""
    if not src.exists():
        raise FileNotFoundError("no warehouse here")
    tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    ok = False
    try:
        deadline, delay = time.monotonic() + wait, 0.1
        while True:
            try:
                con.execute(f"ATTACH '{str(src).replace(chr(39), chr(39) * 2)}' AS src (READ_ONLY)")
                break
            except duckdb.IOException as exc:           # the collector is in a cycle: wait for its end
                if "lock" not in str(exc).lower() or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        held = time.monotonic()
        here = con.sql("SELECT current_database()").fetchall()[0][0].replace('"', '""')
        con.execute(f'COPY FROM DATABASE src TO "{here}"')
        tables = con.sql("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'src'").fetchall()[0][0]
        con.execute("DETACH src")
        held = time.monotonic() - held
        con.execute("CHECKPOINT")
        ok = True
    finally:
        con.close()
        if not ok:                                   # nothing half-written is left behind
            for leftover in (tmp, Path(f"{tmp}.wal")):
                leftover.unlink(missing_ok=True)
    os.replace(tmp, dest)
    return tables, held


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--wait", type=float, default=600.0, help="seconds to wait for the collector (default 600)")
    args = ap.parse_args(argv)
    try:
        tables, held = backup(args.warehouse, args.dest, args.wait)
    except (OSError, duckdb.Error) as exc:
        print(f"gpuledger-backup: {args.warehouse}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    size = args.dest.stat().st_size
    print(f"gpuledger-backup: {args.warehouse} -> {args.dest}: {tables} tables, {size / 1e6:.1f} MB, "
          f"warehouse held {held:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
