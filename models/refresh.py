"""`gpuledger refresh`: rebuild the marts that models and dashboards read, then publish the serving snapshot.

Each mart builder is ``build(con, full: bool) -> None``; it is incremental unless ``full`` is set.
Builders run in the order listed (later marts may read earlier ones).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import duckdb

from ingest import warehouse

MartBuilder = Callable[[duckdb.DuckDBPyConnection, bool], None]


def mart_builders() -> list[tuple[str, MartBuilder]]:
    """The marts, in dependency order. Each model module that owns a mart adds itself here."""
    from models import timeline
    return [
        ("timeline", timeline.build),  # occupancy timeline: the base of utilization, fragmentation, cost
        ("efficiency", _efficiency_build),  # GPU efficiency per job and hour, from telemetry (models/efficiency.py)
        ("demand", _demand_build),  # daily demand per pool/partition/team (models/demand.py), read by forecasts
        ("open statements", _statement_build),  # the newest open months' statements (models/statement_mart.py)
    ]


def run(con: duckdb.DuckDBPyConnection, db_path: str | Path, full: bool = False,
        publish: bool = True) -> list[tuple[str, float]]:
    """Refresh every mart, then publish the serving snapshot; returns (name, seconds) per step."""
    done = []
    for name, build in mart_builders():
        t0 = time.perf_counter()
        build(con, full)
        done.append((name, time.perf_counter() - t0))
    if publish:
        t0 = time.perf_counter()
        warehouse.publish_serving(con, db_path)
        done.append(("serving snapshot", time.perf_counter() - t0))
    return done


def mart_run(con: duckdb.DuckDBPyConnection, mart: str) -> int | None:
    """The ingest run ``mart`` was last refreshed up to (``gpu_mart_state``), or None if never built."""
    rows = con.execute("SELECT last_run_id FROM gpu_mart_state WHERE mart = ?", [mart]).fetchall()
    return rows[0][0] if rows else None


def record_mart(con: duckdb.DuckDBPyConnection, mart: str, run_id: int) -> None:
    """Note that ``mart`` is now current up to ingest run ``run_id`` (inside the builder's transaction)."""
    con.execute("""INSERT INTO gpu_mart_state VALUES (?, ?, ?)
                   ON CONFLICT (mart) DO UPDATE SET last_run_id = excluded.last_run_id,
                                                    refreshed_at = excluded.refreshed_at""",
                [mart, run_id, warehouse.utcnow()])


def _efficiency_build(con: duckdb.DuckDBPyConnection, full: bool) -> None:
    from models import efficiency
    efficiency.build(con, full)


def _demand_build(con: duckdb.DuckDBPyConnection, full: bool) -> None:
    from models import demand
    demand.build(con, full)


def _statement_build(con: duckdb.DuckDBPyConnection, full: bool) -> None:
    from models import statement_mart
    statement_mart.build(con, full)
