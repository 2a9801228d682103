"""The statements of the newest open periods, materialised by `gpuledger refresh` (a mart builder).

The month of the data horizon and the one before are what the dashboard's cost tile shows every time it opens;
pricing every job of two months takes about a second on a large site, reading the stored lines a few
milliseconds. The stored statement is exactly :func:`models.chargeback.compute` without job-level detail, and
is used only while it still is: no ingest run since, the same governance document, the same closed periods.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import zoneinfo

import duckdb
import polars as pl

from ingest import warehouse
from models import chargeback, cost, refresh, timeline

#: part of a Statement -> (table, order, schema)
PARTS = {"lines": ("open_statement_lines", "line_no", chargeback.LINE_SCHEMA),
         "recon": ("open_statement_recon", "row_no", chargeback.RECON_SCHEMA),
         "rates": ("open_statement_rates", "cluster, gpu_type, team, account, partition, t0", chargeback.RATES_SCHEMA)}


def _newest_run(con) -> int:
    return con.sql("SELECT coalesce(max(run_id), 0) FROM ingest_runs WHERE status = 'ok'").fetchall()[0][0]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _closed_sha(con) -> str:
    rows = con.sql("SELECT period, content_hash FROM statements ORDER BY period").fetchall()
    return _sha(json.dumps(rows))


def recent_periods(con, policy: cost.Policy) -> list[str]:
    """The period (in the governance's time zone) holding the earliest data horizon, and the one before."""
    hz = timeline.horizon(con)
    if hz is None:
        return []
    last = ((hz - dt.timedelta(microseconds=1)).replace(tzinfo=dt.timezone.utc)
            .astimezone(zoneinfo.ZoneInfo(policy.period_timezone)).strftime("%Y-%m"))
    return [cost.next_period(last, -1), last]


def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> None:
    """Mart builder for models/refresh.py: recompute the open statements of :func:`recent_periods` (skipped
    when no ingest ran since the last build, unless ``full``); nothing without a governance file."""
    newest = _newest_run(con)
    last = refresh.mart_run(con, "open_statements")
    if not full and last is not None and last >= newest:
        return
    try:
        policy = cost.current_policy(con)
    except cost.CostError:
        policy = None
    closed = set(chargeback.closed_periods(con))
    todo = [p for p in (recent_periods(con, policy) if policy else []) if p not in closed]
    done = []
    for p in todo:
        try:
            done.append(chargeback.compute(con, p, policy, detail=False))
        except cost.CostError:   # e.g. a pool without a rate: the reader computes it and says why
            continue
    now, closed_sha = warehouse.utcnow(), _closed_sha(con)
    with warehouse.transaction(con):
        for table in ["open_statements", *(t for t, _, _ in PARTS.values())]:
            con.execute(f"DELETE FROM {table}")
        for st in done:
            con.execute("INSERT INTO open_statements VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [st.period, newest, _sha(policy.document), closed_sha, st.status, json.dumps(st.header), now])
            for name, (table, _, _) in PARTS.items():
                con.register("_open_part", getattr(st, name).to_arrow())
                con.execute(f"INSERT INTO {table} SELECT * FROM _open_part")
                con.unregister("_open_part")
        refresh.record_mart(con, "open_statements", newest)


def read(con, period: str) -> chargeback.Statement | None:
    """The stored statement of ``period`` (without job-level detail) while it is current, else None."""
    if not timeline.has_table(con, "open_statements"):
        return None
    rows = con.execute("SELECT run_id, policy_sha, closed_sha, status, header FROM open_statements WHERE period = ?",
                       [period]).fetchall()
    if not rows:
        return None
    run_id, policy_sha, closed_sha, status, header = rows[0]
    try:
        policy = cost.current_policy(con)
    except cost.CostError:
        return None
    if run_id != _newest_run(con) or policy_sha != _sha(policy.document) or closed_sha != _closed_sha(con):
        return None
    parts = {name: con.sql(f"SELECT * FROM {table} WHERE period = $p ORDER BY {order} NULLS LAST",
                           params={"p": period}).pl().cast(schema).select(list(schema))
             for name, (table, order, schema) in PARTS.items()}
    return chargeback.Statement(period=period, status=status, policy=policy,
                                header=[tuple(x) for x in json.loads(header)],
                                jobs=pl.DataFrame(schema=chargeback.JOBS_SCHEMA), detail=False, **parts)
