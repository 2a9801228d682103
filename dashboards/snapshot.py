"""The dashboard's only door to data: the published serving view of a warehouse.

The dashboard never opens the live warehouse (docs/ARCHITECTURE.md, "Concurrency"). ``refresh`` publishes
``X.serving/``: immutable Parquet parts and ``manifest.json``, which it replaces atomically by rename
(ingest/warehouse/serving.py). For each manifest version we build one in-memory DuckDB database whose catalog
``snapshot`` holds a view per published table over that manifest's parts, so unqualified table names resolve
to the published tables and further views can be layered on top. A new manifest gets a new database; the old
one keeps serving the cursors still open on it (its parts outlive it by the publisher's grace period), so a
page never sees half of two publishes.

``version`` is the manifest's version; it changes exactly when the published content changes, and caches key
on it, so a new publish invalidates every cached view.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from dashboards import access
from ingest import warehouse


@dataclass(frozen=True)
class SnapshotState:
    """What the dashboard knows about the published view right now."""
    db_path: Path            # the live warehouse the view belongs to (never opened here)
    path: Path               # the published manifest
    exists: bool
    version: str             # '' when nothing is published


class Snapshot:
    """A read-only view of the manifest at ``serving_path(db_path)`` that follows its atomic replacements."""

    def __init__(self, db_path: str | os.PathLike):
        self.db_path = Path(db_path)
        self.path = warehouse.serving_path(self.db_path)
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._version = ""
        self._stat_key: tuple | None = None
        self._manifest: dict | None = None
        self._scopes: dict[str, str] = {}   # scope -> the schema of its views on the current connection

    def _current(self) -> tuple[str, dict | None]:
        """(version, manifest) of the manifest file now; the file is parsed again only when it was replaced."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return "", None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            if key != self._stat_key:
                try:
                    m = json.loads(self.path.read_text(encoding="utf-8"))
                except FileNotFoundError:
                    return "", None
                self._stat_key, self._manifest = key, m
            m = self._manifest
        return m["version"], m

    def _stat_version(self) -> str:
        return self._current()[0]

    def state(self) -> SnapshotState:
        v = self._stat_version()
        return SnapshotState(self.db_path, self.path, bool(v), v)

    def cursor(self, scope: str = "") -> duckdb.DuckDBPyConnection:
        """An independent cursor on the current view (one per query: cursors are not shared by threads),
        its tables scoped to ``scope`` (dashboards/access.py: '' is everything).

        Raises FileNotFoundError when nothing has been published yet.
        """
        v, m = self._current()
        if not v:
            raise FileNotFoundError(f"{self.path}: no serving view published yet")
        with self._lock:
            if self._con is None or v != self._version:
                # Dropping our reference is enough: cursors still reading the old views keep that database alive.
                self._con = _open_views(self.path.parent, m)
                self._version = v
                self._scopes = {}
            cur = self._con.cursor()
            if scope and scope not in self._scopes:   # the scope's views, once per snapshot (dashboards/access.py)
                self._scopes[scope] = access.create_views(cur, scope, CATALOG)
            schema = self._scopes.get(scope, "")
        cur.execute(f"USE {CATALOG}")   # a cursor starts in the default in-memory catalog
        if scope:
            cur.execute(access.search_path(schema, CATALOG))
        return cur

    @property
    def version(self) -> str:
        """The version of the view the next :meth:`cursor` will read ('' when nothing is published)."""
        return self._stat_version()

    def frame(self, sql: str, params: list | dict | None = None, scope: str = "") -> pl.DataFrame:
        """Run a parameterised query on the view (scoped to ``scope``) and return a Polars frame."""
        cur = self.cursor(scope)
        try:
            return cur.sql(sql, params=params or None).pl()
        finally:
            cur.close()

    def has_table(self, name: str) -> bool:
        return name in self.tables()

    def tables(self) -> set[str]:
        return set(self.frame(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND database_name = $c "
            "UNION SELECT view_name FROM duckdb_views() WHERE schema_name = 'main' AND database_name = $c "
            "AND NOT internal", {"c": CATALOG})["table_name"].to_list())

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
            self._con = None
            self._version = ""


#: The catalog the published tables live in; every cursor makes it its default.
CATALOG = "snapshot"


def _open_views(folder: Path, manifest: dict) -> duckdb.DuckDBPyConnection:
    """A fresh in-memory database whose catalog ``snapshot`` has a view per published table of ``manifest``.

    Each view casts its columns to the warehouse's types (Parquet would give, e.g., no ENUM), so the view
    has the table's exact schema; a table without rows is an empty SELECT of typed NULLs."""
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    if os.environ.get(warehouse.ENV_MEMORY_LIMIT):   # the server's share of its memory budget (dashboards/budget.py)
        con.execute("SET memory_limit = ?", [os.environ[warehouse.ENV_MEMORY_LIMIT]])
    con.execute("SET parquet_metadata_cache = true")   # footers read once per database, not once per query
    con.execute(f"ATTACH ':memory:' AS {CATALOG}")
    con.execute(f"USE {CATALOG}")
    for t, e in manifest["tables"].items():
        cols = ", ".join(f'CAST({_ident(c)} AS {ty}) AS {_ident(c)}' for c, ty in e["columns"])
        files = [str(folder / p["file"]) for _, p in sorted(e["parts"].items())]
        if files:
            src = "read_parquet([" + ", ".join(_literal(f) for f in files) + "], hive_partitioning = false)"
            con.execute(f"CREATE VIEW {_ident(t)} AS SELECT {cols} FROM {src}")
        else:
            nulls = ", ".join(f"CAST(NULL AS {ty}) AS {_ident(c)}" for c, ty in e["columns"])
            con.execute(f"CREATE VIEW {_ident(t)} AS SELECT {nulls} LIMIT 0")
    con.execute(f"""CREATE VIEW snapshot_info AS SELECT CAST({_literal(manifest['published_at'])} AS TIMESTAMP)
                    AS published_at, {_literal(manifest['source_db'])} AS source_db,
                    {_literal(manifest['version'])} AS version""")
    return con


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    # Views take no bound parameters; the texts are the manifest's own file names and times, never user input.
    return "'" + text.replace("'", "''") + "'"


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
