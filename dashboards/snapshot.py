"""The dashboard's only door to data: the read-only serving snapshot of a warehouse.

The dashboard never opens the live warehouse (docs/ARCHITECTURE.md, "Concurrency"). ``refresh`` publishes
``X.serving.duckdb`` by writing a new file and renaming it over the old one, so the path always names a
complete snapshot. We hold one read-only connection per snapshot file and reopen when the path starts naming
a different file (inode, mtime or size changed). The old connection keeps reading the old, unlinked file
until its last cursor is gone (POSIX semantics), so a page never sees half of two snapshots. Each snapshot
is ATTACHed read-only to its own in-memory database (see ``_open_read_only`` for why).

``version`` identifies the snapshot file; caches key on it, so a new snapshot invalidates every cached view.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from ingest import warehouse


@dataclass(frozen=True)
class SnapshotState:
    """What the dashboard knows about the snapshot file right now."""
    db_path: Path            # the live warehouse the snapshot belongs to (never opened here)
    path: Path               # the serving snapshot
    exists: bool
    version: str             # '' when there is no snapshot


class Snapshot:
    """A read-only view of ``serving_path(db_path)`` that follows atomic replacements of the file."""

    def __init__(self, db_path: str | os.PathLike):
        self.db_path = Path(db_path)
        self.path = warehouse.serving_path(self.db_path)
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._version = ""

    def _stat_version(self) -> str:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return ""
        return f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"

    def state(self) -> SnapshotState:
        v = self._stat_version()
        return SnapshotState(self.db_path, self.path, bool(v), v)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """An independent cursor on the current snapshot (one per query: cursors are not shared by threads).

        Raises FileNotFoundError when no snapshot has been published yet.
        """
        with self._lock:
            v = self._stat_version()
            if not v:
                raise FileNotFoundError(f"{self.path}: no serving snapshot yet")
            if self._con is None or v != self._version:
                # Dropping our reference is enough: cursors still reading the old file keep it alive.
                self._con = _open_read_only(self.path)
                self._version = v
            cur = self._con.cursor()
        cur.execute(f"USE {CATALOG}")   # a cursor starts in the in-memory catalog
        return cur

    @property
    def version(self) -> str:
        """The version of the file the next :meth:`cursor` will read ('' when absent)."""
        return self._stat_version()

    def frame(self, sql: str, params: list | dict | None = None) -> pl.DataFrame:
        """Run a parameterised query on the snapshot and return a Polars frame."""
        cur = self.cursor()
        try:
            return cur.sql(sql, params=params or None).pl()
        finally:
            cur.close()

    def has_table(self, name: str) -> bool:
        return name in self.tables()

    def tables(self) -> set[str]:
        return set(self.frame(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND database_name = ?", [CATALOG]
        )["table_name"].to_list())

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
            self._con = None
            self._version = ""


#: The catalog name the snapshot is attached under; every cursor makes it its default.
CATALOG = "snapshot"


def _open_read_only(path: Path) -> duckdb.DuckDBPyConnection:
    """A fresh in-memory database with the snapshot file ATTACHed read-only.

    Not ``duckdb.connect(path)``: DuckDB caches one database instance per path in a process, so while any
    cursor still held the previous snapshot, connecting to the path again would hand back that old instance.
    """
    con = duckdb.connect(":memory:")
    con.execute(f"ATTACH '{_quoted(path)}' AS {CATALOG} (READ_ONLY)")
    con.execute(f"USE {CATALOG}")
    con.execute("SET TimeZone = 'UTC'")
    if os.environ.get(warehouse.ENV_MEMORY_LIMIT):   # the server's share of its memory budget (dashboards/budget.py)
        con.execute("SET memory_limit = ?", [os.environ[warehouse.ENV_MEMORY_LIMIT]])
    return con


def _quoted(path: Path) -> str:
    # ATTACH takes no bound parameters; the path is configuration (--db), never a filter value.
    return str(path).replace("'", "''")


_registry: dict[Path, Snapshot] = {}
_registry_lock = threading.Lock()


def for_warehouse(db_path: str | os.PathLike | None = None) -> Snapshot:
    """The process-wide :class:`Snapshot` for a warehouse path (``--db``/``$GPULEDGER_DB``/default)."""
    p = warehouse.resolve_path(db_path).resolve()
    with _registry_lock:
        snap = _registry.get(p)
        if snap is None:
            snap = _registry[p] = Snapshot(p)
        return snap
