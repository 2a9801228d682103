"""The serving snapshot: a read-only copy of the warehouse that dashboards open, swapped in by rename.

Concurrency (docs/ARCHITECTURE.md): one process may hold the warehouse read-write. Dashboards never open it;
they read the snapshot that :func:`publish_serving` writes next to it, so an ingest never waits for a dashboard
and a dashboard never sees half a batch.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

import duckdb

from ingest.warehouse.base import utcnow

#: Tables too large or too raw to copy into the serving snapshot.
SERVING_EXCLUDE = frozenset({"gpu_samples", "schema_migrations"})


def serving_path(db_path: str | os.PathLike) -> Path:
    """Where the read-only serving snapshot of ``db_path`` lives (``X.duckdb`` -> ``X.serving.duckdb``)."""
    p = Path(db_path)
    return p.with_name(p.stem + ".serving" + (p.suffix or ".duckdb"))


def _sql_string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def table_names(con, schema: str = "main") -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? AND database_name = current_database() "
        "ORDER BY table_name", [schema]).fetchall()]


def publish_serving(con: duckdb.DuckDBPyConnection, db_path: str | os.PathLike,
                    exclude: Iterable[str] = SERVING_EXCLUDE) -> Path:
    """Copy every table but ``exclude`` into a fresh snapshot file and swap it in by rename.

    Readers that still have the previous snapshot open keep reading it (POSIX rename semantics);
    new readers see the new one. Returns the snapshot path.
    """
    target = serving_path(db_path)
    remove_orphaned_snapshots(db_path)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    for stale in (tmp, Path(str(tmp) + ".wal")):
        stale.unlink(missing_ok=True)
    skip = set(exclude)
    con.execute(f"ATTACH {_sql_string(str(tmp))} AS serving_snap")
    try:
        for t in table_names(con):
            if t not in skip:
                con.execute(f'CREATE TABLE serving_snap."{t}" AS SELECT * FROM main."{t}"')
        con.execute("CREATE TABLE serving_snap.snapshot_info AS SELECT ?::TIMESTAMP AS published_at, ? AS source_db",
                    [utcnow(), str(Path(db_path).resolve())])
    finally:
        con.execute("DETACH serving_snap")
    os.replace(tmp, target)
    return target


# ---------------------------------------------------------------- orphaned snapshot files

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's live process
        return True
    return True


def remove_orphaned_snapshots(db_path: str | os.PathLike) -> list[Path]:
    """Delete the ``X.serving.duckdb.tmpPID`` files (and their ``.wal``) that a publish killed mid-way left behind:
    those whose process is gone. A live process's file may be a publish in progress and is kept (so is one whose
    PID was reused: it goes on a later call). Returns the paths removed."""
    target = serving_path(db_path)
    pattern = re.compile(re.escape(target.name) + r"\.tmp(\d+)(\.wal)?")
    removed = []
    try:
        names = os.listdir(target.parent)
    except OSError:
        return removed
    for name in names:
        m = pattern.fullmatch(name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            (target.parent / name).unlink(missing_ok=True)
            removed.append(target.parent / name)
    return removed
