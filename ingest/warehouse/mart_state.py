"""Mart state: the one freshness rule. A mart is current when it was built from every ingest run that
succeeded (``mart_state.last_run_id`` >= the newest ``ok`` run); `gpuledger refresh` records it, readers only
compare. Governance loads are ingest runs too, so a new governance file makes every mart stale until the next
refresh."""
from __future__ import annotations

import duckdb

from ingest.warehouse.base import utcnow


def newest_run(con: duckdb.DuckDBPyConnection) -> int:
    """The id of the newest successful ingest run (0 before any)."""
    return con.sql("SELECT coalesce(max(run_id), 0) FROM ingest_runs WHERE status = 'ok'").fetchall()[0][0]


def mart_run(con: duckdb.DuckDBPyConnection, mart: str) -> int | None:
    """The ingest run ``mart`` was last refreshed up to, or None if it was never built."""
    rows = con.execute("SELECT last_run_id FROM mart_state WHERE mart = ?", [mart]).fetchall()
    return rows[0][0] if rows else None


def is_current(con: duckdb.DuckDBPyConnection, mart: str) -> bool:
    """True when ``mart`` holds every successful ingest run."""
    last = mart_run(con, mart)
    return last is not None and last >= newest_run(con)


def record_mart(con: duckdb.DuckDBPyConnection, mart: str, run_id: int) -> None:
    """Note that ``mart`` is now current up to ingest run ``run_id`` (inside the builder's transaction)."""
    con.execute("""INSERT INTO mart_state VALUES (?, ?, ?)
                   ON CONFLICT (mart) DO UPDATE SET last_run_id = excluded.last_run_id,
                                                    refreshed_at = excluded.refreshed_at""",
                [mart, run_id, utcnow()])


def states_of(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int, object]]:
    """(mart, last_run_id, refreshed_at UTC) of every mart built so far."""
    return con.sql("SELECT mart, last_run_id, refreshed_at FROM mart_state ORDER BY mart").fetchall()
