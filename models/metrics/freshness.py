"""How fresh the marts are: the one freshness rule (ingest/warehouse/mart_state.py) said in words. Readers never
rebuild; every report and page says when what it shows is older than the accounting, and by how much."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb

from ingest import warehouse
from models.definitions.jobs_sql import SPANS_SQL
from models.definitions.marts import ALL as MARTS


@dataclass(frozen=True)
class Freshness:
    """newest_run: the newest successful ingest run; stale: marts built before it (or never); runs_behind: ingest
    runs since the oldest mart's build; refreshed_at: the oldest mart's build (UTC); accounting_horizon /
    mart_horizon: how far the accounting reaches and how far the timeline marts do (UTC)."""
    newest_run: int
    stale: tuple[str, ...]
    runs_behind: int
    refreshed_at: dt.datetime | None
    accounting_horizon: dt.datetime | None
    mart_horizon: dt.datetime | None

    @property
    def current(self) -> bool:
        return not self.stale

    @property
    def lag(self) -> dt.timedelta | None:
        """How much later the accounting reaches than the marts (None when unknown or not behind)."""
        if self.accounting_horizon is None:
            return None
        if self.mart_horizon is None:
            return None
        return self.accounting_horizon - self.mart_horizon if self.accounting_horizon > self.mart_horizon else None


def freshness(con: duckdb.DuckDBPyConnection) -> Freshness:
    """The marts' state against the accounting (read-only)."""
    newest = warehouse.newest_run(con)
    built = {m: (r, at) for m, r, at in warehouse.states_of(con)}
    stale = tuple(m for m in MARTS if m not in built or built[m][0] < newest)
    runs = [built[m][0] for m in MARTS if m in built]
    behind = con.execute("SELECT count(*) FROM ingest_runs WHERE status = 'ok' AND run_id > ?",
                         [min(runs) if len(runs) == len(MARTS) else 0]).fetchall()[0][0] if stale else 0
    acc = con.sql(f"SELECT max(horizon) FROM ({SPANS_SQL})").fetchall()[0][0]
    mart_hz = con.sql("SELECT max(horizon) FROM tl_clusters").fetchall()[0][0]
    at = min((built[m][1] for m in MARTS if m in built), default=None)
    return Freshness(newest, stale, behind, at, acc, mart_hz)


def _span(d: dt.timedelta) -> str:
    s = int(d.total_seconds())
    if s >= 86400:
        return f"{s // 86400} d {s % 86400 // 3600} h"
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 60} min {s % 60} s"


def note(con: duckdb.DuckDBPyConnection) -> str | None:
    """One line when the marts are older than the accounting (None when they are current)."""
    f = freshness(con)
    if f.current:
        return None
    if f.refreshed_at is None or f.mart_horizon is None:
        return ("note: the marts have not been built from this warehouse's accounting yet; figures below may be "
                "empty or incomplete: run `gpuledger refresh`")
    lag = f" and reaches {_span(f.lag)} further ({f.accounting_horizon:%Y-%m-%d %H:%M} UTC)" if f.lag else ""
    return (f"note: the marts are older than the accounting: {f.runs_behind} ingest run(s) since the last refresh "
            f"({f.refreshed_at:%Y-%m-%d %H:%M} UTC){lag}; figures reach {f.mart_horizon:%Y-%m-%d %H:%M} UTC: "
            "run `gpuledger refresh` to include the rest")


def window_note(con: duckdb.DuckDBPyConnection, start: dt.datetime | None, end: dt.datetime | None,
                what: str = "the window") -> str | None:
    """One line when the window [start, end) (naive UTC; None: open), called ``what`` ("the period 2030-01"),
    lies wholly outside what the accounting covers, before the first data start or from the last horizon on: its
    figures are then empty, or zero, for want of data, and a reader must not take them for a quiet month."""
    lo, hi = con.sql("SELECT min(data_start), max(horizon) FROM tl_clusters").fetchall()[0]
    if lo is None or hi is None or not ((start is not None and start >= hi) or (end is not None and end <= lo)):
        return None
    shown = " to ".join(f"{t:%Y-%m-%d %H:%M}" if t is not None else "open" for t in (start, end))
    return (f"note: {what} ({shown}) lies outside what the accounting covers ({lo:%Y-%m-%d %H:%M} to "
            f"{hi:%Y-%m-%d %H:%M} UTC): its figures are empty or zero for want of data, not a quiet period")
