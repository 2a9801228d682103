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


def note_mart_change(con: duckdb.DuckDBPyConnection, mart: str, cluster: str, since) -> None:
    """Journal that ``mart``'s rows of ``cluster`` changed from ``since`` (UTC) on (inside the builder's
    transaction), for the builders that read them incrementally (:func:`mart_changes`)."""
    con.execute("INSERT INTO mart_journal VALUES (?, ?, ?, ?)", [mart, cluster, since, utcnow()])


def mart_changes(con: duckdb.DuckDBPyConnection, mart: str) -> dict[str, object]:
    """Per cluster, the earliest instant (UTC) ``mart`` noted a change from since the journal was last cleared."""
    return dict(con.execute("SELECT cluster, min(since_ts) FROM mart_journal WHERE mart = ? GROUP BY cluster",
                            [mart]).fetchall())


def clear_mart_changes(con: duckdb.DuckDBPyConnection, mart: str) -> None:
    """Forget ``mart``'s notes (its one consumer read them, inside that consumer's transaction)."""
    con.execute("DELETE FROM mart_journal WHERE mart = ?", [mart])
