"""The warehouse schema: the migrations shipped in ``migrations/``, applied in order, one transaction each."""
from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import duckdb

from ingest.warehouse.base import WarehouseError, transaction, utcnow

#: Stored activity (gpu_samples' fractions 0..1) below this, 0.5 %, counts as zero (it prints as 0 %): idle
#: minutes for the efficiency model (models/kernels/attribution.py), zero minutes for the push-down telemetry's
#: mixed-interval test (ingest/prometheus_pushdown.py).
IDLE_EPSILON = 0.005


def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration shipped in ingest/warehouse/migrations, in order."""
    out = []
    for entry in resources.files("ingest.warehouse.migrations").iterdir():
        m = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if m:
            out.append((int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    return sorted(out)


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_migrations'").fetchall()[0][0]
    if not exists:
        return 0
    return con.sql("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()[0][0]


def migrate(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply every migration newer than the warehouse's version, each in its own transaction."""
    con.execute("""CREATE TABLE IF NOT EXISTS schema_migrations (
        version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)""")
    have = {r[0] for r in con.sql("SELECT version FROM schema_migrations").fetchall()}
    applied = []
    for version, name, sql in migration_files():
        if version in have:
            continue
        with transaction(con):
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", [version, name, utcnow()])
        applied.append(version)
    return applied


def check_version(con: duckdb.DuckDBPyConnection, p: Path) -> None:
    """A read-only warehouse must not be newer than this gpuledger, nor older (its missing tables would make
    every read fail: `gpuledger refresh` migrates it)."""
    versions = [v for v, _, _ in migration_files()]
    have = {r[0] for r in con.sql("SELECT version FROM schema_migrations").fetchall()} if schema_version(con) else set()
    if have and max(have) > max(versions, default=0):
        raise WarehouseError(f"{p}: schema version {max(have)} is newer than this gpuledger knows "
                             f"({max(versions)}); upgrade gpuledger")
    missing = [v for v in versions if v not in have]
    if have and missing:
        raise WarehouseError(f"{p}: the warehouse schema is older than this gpuledger (missing migration "
                             f"{missing[0]:04d}); run `gpuledger refresh` once to upgrade it")
