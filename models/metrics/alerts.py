"""The alerts the service raised and whom it told (tables ``alerts``, ``alert_deliveries``; written by
models/service/alerts.py): `gpuledger report alerts`. Times naive UTC."""
from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from ingest.warehouse import has_table


def history(con: duckdb.DuckDBPyConnection, start: dt.datetime | None = None,
            end: dt.datetime | None = None) -> pl.DataFrame:
    """One row per alert episode overlapping [start, end) (open episodes reach to now), newest first, with the
    recipients told of its firing and of its resolution (``told_fired``, ``told_resolved``: comma-separated)
    and the deliveries still failing (``undelivered``)."""
    if not has_table(con, "alerts"):
        return pl.DataFrame()
    return con.sql("""
        WITH d AS (SELECT alert_id, event, recipient, bool_or(ok) AS ok FROM alert_deliveries GROUP BY ALL)
        SELECT a.alert_id, a.rule, a.kind, a.subject, a.fired_at, a.resolved_at, a.value, a.last_value, a.threshold,
               a.summary,
               string_agg(d.recipient, ', ' ORDER BY d.recipient) FILTER (WHERE d.event = 'fired' AND d.ok) AS told_fired,
               string_agg(d.recipient, ', ' ORDER BY d.recipient) FILTER (WHERE d.event = 'resolved' AND d.ok)
                   AS told_resolved,
               string_agg(d.recipient || ' (' || d.event || ')', ', ' ORDER BY d.recipient) FILTER (WHERE NOT d.ok)
                   AS undelivered
        FROM alerts a LEFT JOIN d USING (alert_id)
        WHERE ($hi IS NULL OR a.fired_at < $hi) AND ($lo IS NULL OR coalesce(a.resolved_at, 'infinity') > $lo)
        GROUP BY ALL ORDER BY a.fired_at DESC, a.alert_id DESC""", params={"lo": start, "hi": end}).pl()


def deliveries(con: duckdb.DuckDBPyConnection, start: dt.datetime | None = None,
               end: dt.datetime | None = None) -> pl.DataFrame:
    """Every delivery attempt in [start, end), newest first: who was told what (the digest's subject), when, and
    whether it arrived."""
    if not has_table(con, "alert_deliveries"):
        return pl.DataFrame()
    return con.sql("""
        SELECT d.attempted_at, d.recipient, d.channel, d.event, a.rule, a.subject, d.ok, d.attempts, d.error,
               d.subject_line
        FROM alert_deliveries d JOIN alerts a USING (alert_id)
        WHERE ($hi IS NULL OR d.attempted_at < $hi) AND ($lo IS NULL OR d.attempted_at >= $lo)
        ORDER BY d.attempted_at DESC, d.recipient, a.alert_id""", params={"lo": start, "hi": end}).pl()
