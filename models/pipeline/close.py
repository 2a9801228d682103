"""Period close: freeze a month's statement (the ``statement*`` tables, once, in one transaction, with a content
hash over exactly what was computed). Later jobs of a closed month reach the books only as adjustment lines of
the next open period (models/metrics/chargeback.py)."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb

from ingest import warehouse
from models.definitions.policy import CostError
from models.definitions.times import period_bounds
from models.metrics import chargeback, cost
from models.pipeline import refresh


def close_period(con: duckdb.DuckDBPyConnection, period: str, now: dt.datetime | None = None,
                 db_path: str | Path | None = None) -> chargeback.Statement:
    """Freeze the statement of ``period`` (YYYY-MM) and return it as read back. Refuses a period already closed,
    one the accounting does not reach the end of yet, and one no accounting covers at all (it would freeze an
    empty statement).

    With ``db_path`` (the warehouse file of ``con``), then refreshes and republishes the serving snapshot, so the
    dashboard shows the period closed at once (the Chargeback page and the Overview's cost tile read the snapshot;
    without a new one they would keep showing the open statement they were published with)."""
    if period in chargeback.closed_periods(con):
        raise CostError(f"period {period} is already closed; re-export it with "
                        f"`gpuledger chargeback --period {period} --out FILE`")
    st = chargeback.compute(con, period)
    start, end = period_bounds(period, st.policy.period_timezone)
    if cost.clipped_spans(con, start, end).is_empty():
        spans = cost.data_spans(con)
        what = (f"the accounting covers {min(s for s, _ in spans.values()):%Y-%m-%d} to "
                f"{max(h for _, h in spans.values()):%Y-%m-%d %H:%M} UTC" if spans else "the warehouse has no accounting")
        raise CostError(f"cannot close {period}: no accounting covers it ({what})")
    if refusal := chargeback.close_refusal(st):
        raise CostError(f"cannot close {period}: {refusal}")
    closed_at = (now or warehouse.utcnow()).replace(microsecond=0)
    parts = {"lines": st.lines, "recon": st.recon, "rates": st.rates, "jobs": st.jobs}
    with warehouse.transaction(con):
        warehouse.note_changed(con, "statement_jobs", period)     # the serving view: this period's part
        for name, (table, _, _) in chargeback.PARTS.items():
            con.register("_st_part", parts[name].to_arrow())
            con.execute(f"INSERT INTO {table} SELECT * FROM _st_part")
            con.unregister("_st_part")
        digest = chargeback.content_hash(st.header, st.policy.document, chargeback.read_parts(con, period))
        con.execute("INSERT INTO statements VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [period, closed_at, digest, start, end, st.policy.currency, st.policy.minor_units,
                     st.policy.idle_policy, st.policy.billing_basis, json.dumps(st.header), st.policy.document])
    if db_path is not None:
        refresh.run(con, db_path)   # the open statements drop the period; the snapshot carries the frozen one
    return chargeback.statement(con, period)
