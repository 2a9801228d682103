"""The dashboard's only door to data: the published serving view of a warehouse.

The dashboard never opens the live warehouse (docs/ARCHITECTURE.md, "Concurrency"). ``refresh`` publishes
``X.serving/``: immutable Parquet parts and ``manifest.json``, which it replaces atomically by rename
(ingest/warehouse/serving.py). For each manifest version we build one in-memory DuckDB database whose catalog
``snapshot`` holds a view per published table over that manifest's parts, so unqualified table names resolve
to the published tables and further views can be layered on top. A new manifest gets a new database; the old
one keeps serving the cursors still open on it (its parts outlive it by the publisher's grace period), so a
page never sees half of two publishes, and stays open while the dashboard holds it (it shows the previous
snapshot until the new one's views are computed: dashboards/prewarm.py).

``version`` is the manifest's version; it changes exactly when the published content changes, and caches key
on it: a cursor asked for a version reads that version when it is open here, so a cached view holds the data of
the version in its key.
"""
from __future__ import annotations

import json
import os
import threading
import weakref
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


class _Database:
    """The in-memory database of one manifest version: its views, and the scopes' views made on it."""

    def __init__(self, folder: Path, manifest: dict):
        self.con = _open_views(folder, manifest)
        self.manifest = manifest
        self.scopes: dict[str, str] = {}   # scope -> the schema of its views on this database


class Snapshot:
    """A read-only view of the manifest at ``serving_path(db_path)`` that follows its atomic replacements.

    It keeps the database of the current version open, and those of older versions :meth:`hold` names (the
    dashboard keeps showing the previous snapshot while the new one warms up, dashboards/prewarm.py); a
    version neither current nor held is closed once its last cursor is."""

    def __init__(self, db_path: str | os.PathLike):
        self.db_path = Path(db_path)
        self.path = warehouse.serving_path(self.db_path)
        self._lock = threading.Lock()
        self._dbs: dict[str, _Database] = {}
        self._held: frozenset[str] = frozenset()
        self._stat_key: tuple | None = None
        self._manifest: dict | None = None
        # per thread: where to record the cursors it opens, for another thread to interrupt (track)
        self._tracked = threading.local()

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

    def published_at(self, version: str | None = None) -> str | None:
        """When ``version`` (default: the current one) was published (the manifest's ISO text, UTC); None if
        it is neither current nor open here."""
        v, m = self._current()
        if version and version != v:
            with self._lock:
                db = self._dbs.get(version)
            m = db.manifest if db is not None else None
        return m["published_at"] if m else None

    def hold(self, versions) -> None:
        """Keep the databases of ``versions`` open after newer versions are published; close every other one
        but the current (its open cursors keep reading it until they close)."""
        v = self._stat_version()
        with self._lock:
            self._held = frozenset(versions)
            for old in [k for k in self._dbs if k != v and k not in self._held]:
                del self._dbs[old]

    def holds(self, version: str) -> bool:
        """True if a cursor on ``version`` reads ``version`` (it is current, or held and open)."""
        current = self._stat_version()
        with self._lock:
            return version == current or version in self._dbs

    def cursor(self, scope: str = "", version: str = "") -> duckdb.DuckDBPyConnection:
        """An independent cursor (one per query: cursors are not shared by threads) on ``version``'s view if
        it is open here, else on the current one, its tables scoped to ``scope`` (dashboards/access.py: '' is
        everything).

        Raises FileNotFoundError when nothing has been published yet.
        """
        v, m = self._current()
        if not v:
            raise FileNotFoundError(f"{self.path}: no serving view published yet")
        with self._lock:
            db = self._dbs.get(version) if version and version != v else None
            if db is None:
                db = self._dbs.get(v)
                if db is None:
                    # a new version: older ones stay open only if held (their cursors keep theirs alive)
                    self._dbs = {k: d for k, d in self._dbs.items() if k in self._held}
                    db = self._dbs[v] = _Database(self.path.parent, m)
            cur = db.con.cursor()
            if scope and scope not in db.scopes:   # the scope's views, once per snapshot (dashboards/access.py)
                db.scopes[scope] = access.create_views(cur, scope, CATALOG)
            schema = db.scopes.get(scope, "")
        cur.execute(f"USE {CATALOG}")   # a cursor starts in the default in-memory catalog
        if scope:
            cur.execute(access.search_path(schema, CATALOG))
        tracked = getattr(self._tracked, "cursors", None)
        if tracked is not None:
            tracked.add(cur)
        return cur

    def track(self, cursors: "weakref.WeakSet") -> None:
        """Add every cursor this thread opens from now on to ``cursors`` (None: stop), so another thread can
        interrupt their queries (dashboards/prewarm.py cancels the warm-up of a superseded version)."""
        self._tracked.cursors = cursors

    @property
    def version(self) -> str:
        """The version of the view the next :meth:`cursor` will read ('' when nothing is published)."""
        return self._stat_version()

    def frame(self, sql: str, params: list | dict | None = None, scope: str = "", version: str = "") -> pl.DataFrame:
        """Run a parameterised query on the view (scoped to ``scope``; of ``version``, see :meth:`cursor`) and
        return a Polars frame."""
        cur = self.cursor(scope, version)
        try:
            return cur.sql(sql, params=params or None).pl()
        finally:
            cur.close()

    def has_table(self, name: str) -> bool:
        return name in self.tables()

    def tables(self, version: str = "") -> set[str]:
        return set(self.frame(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND database_name = $c "
            "UNION SELECT view_name FROM duckdb_views() WHERE schema_name = 'main' AND database_name = $c "
            "AND NOT internal", {"c": CATALOG}, version=version)["table_name"].to_list())

    def close(self) -> None:
        with self._lock:
            for db in self._dbs.values():
                db.con.close()
            self._dbs = {}


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
