"""Where the warehouse lives and how it is opened: read-write (one process, migrated on open) or read-only
(many processes; never created, never changed)."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import duckdb

from ingest.warehouse.base import ENV_MEMORY_LIMIT, WarehouseError
from ingest.warehouse.schema import check_version, migrate
from ingest.warehouse.serving import remove_orphaned_snapshots

DEFAULT_DB = Path("data") / "warehouse.duckdb"
ENV_DB = "GPULEDGER_DB"
ENV_LOCK_TIMEOUT = "GPULEDGER_LOCK_TIMEOUT"


def resolve_path(path: str | os.PathLike | None = None) -> Path:
    """The warehouse path: the explicit ``--db``, else ``$GPULEDGER_DB``, else data/warehouse.duckdb."""
    if path:
        return Path(path)
    if os.environ.get(ENV_DB):
        return Path(os.environ[ENV_DB])
    return DEFAULT_DB


def connect(path: str | os.PathLike | None = None, read_only: bool = False,
            lock_timeout: float | None = None, migrate_schema: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the warehouse; session time zone is UTC.

    Read-write opens create the file if needed and migrate it. Read-only opens never create a file: a missing
    one is a :class:`WarehouseError` naming the path. A file locked by another process is retried for
    ``lock_timeout`` seconds (default ``$GPULEDGER_LOCK_TIMEOUT`` or 60) before failing in one line.
    """
    p = resolve_path(path)
    if read_only and not p.exists():
        raise WarehouseError(f"{p}: no warehouse here (run `gpuledger ingest ...` or `gpuledger demo`, "
                             "or give --db / $GPULEDGER_DB)")
    if not read_only:
        p.parent.mkdir(parents=True, exist_ok=True)
    timeout = float(os.environ.get(ENV_LOCK_TIMEOUT, 60) if lock_timeout is None else lock_timeout)
    con = _open_with_retry(p, read_only, timeout)
    con.execute("SET TimeZone = 'UTC'")
    if os.environ.get(ENV_MEMORY_LIMIT):
        con.execute("SET memory_limit = ?", [os.environ[ENV_MEMORY_LIMIT]])
    if migrate_schema and not read_only:
        migrate(con)
    if not read_only:
        remove_orphaned_snapshots(p)
    else:
        check_version(con, p)
    return con


def _open_with_retry(p: Path, read_only: bool, timeout: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            return duckdb.connect(str(p), read_only=read_only)
        except duckdb.ConnectionException as exc:
            # DuckDB keeps one database per file and process: when this process already has the file open
            # read-write (a service that also answers reads, a test driving the CLI in-process), a read-only
            # open joins that database instead of failing; the caller still only reads.
            if not read_only or "different configuration" not in str(exc):
                raise WarehouseError(f"{p}: cannot open warehouse: {str(exc).splitlines()[0]}") from exc
            return duckdb.connect(str(p))
        except duckdb.IOException as exc:
            msg = str(exc)
            if "lock" not in msg.lower():
                raise WarehouseError(f"{p}: cannot open warehouse: {msg.splitlines()[0]}") from exc
            if time.monotonic() >= deadline:
                holder = re.search(r"PID (\d+)", msg)
                who = f" by process {holder.group(1)}" if holder else ""
                raise WarehouseError(
                    f"{p}: warehouse is locked{who} and stayed locked for {timeout:.0f} s; "
                    "is another ingest running?") from exc
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
