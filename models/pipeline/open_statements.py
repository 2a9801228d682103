"""The statements of the newest open periods, stored by `gpuledger refresh` (after the marts).

The month of the data horizon and the one before are what the dashboard's cost tile shows every time it opens;
pricing every job of two months takes about a second on a large site, reading the stored lines a few
milliseconds. The stored statement is exactly :func:`models.metrics.chargeback.compute` without job-level detail,
and :func:`models.metrics.chargeback.stored_open` uses it only while it still is: no ingest run since, the same
governance document, the same closed periods.
"""
from __future__ import annotations

import json

import duckdb

from ingest import warehouse
from models.definitions.policy import CostError, current_policy
from models.definitions.marts import OPEN_STATEMENTS as MART
from models.metrics import chargeback


def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> None:
    """Recompute the open statements of :func:`chargeback.recent_periods` (skipped when no ingest ran since the
    last build and no period was closed since, unless ``full``); nothing without a governance file."""
    newest = warehouse.newest_run(con)
    closed_sha = chargeback.closed_fingerprint(con)
    stored = {r[0] for r in con.execute("SELECT DISTINCT closed_sha FROM open_statements").fetchall()}
    if not full and warehouse.is_current(con, MART) and stored <= {closed_sha}:
        return
    try:
        policy = current_policy(con)
    except CostError:
        policy = None
    closed = set(chargeback.closed_periods(con))
    todo = [p for p in (chargeback.recent_periods(con, policy) if policy else []) if p not in closed]
    done = []
    for p in todo:
        try:
            done.append(chargeback.compute(con, p, policy, detail=False))
        except CostError:   # e.g. a pool without a rate: the reader computes it and says why
            continue
    now = warehouse.utcnow()
    with warehouse.transaction(con):
        for table in ["open_statements", *(t for t, _, _ in chargeback.OPEN_PARTS.values())]:
            con.execute(f"DELETE FROM {table}")
        for st in done:
            con.execute("INSERT INTO open_statements VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [st.period, newest, chargeback.sha(policy.document), closed_sha, st.status,
                         json.dumps(st.header), now])
            for name, (table, _, _) in chargeback.OPEN_PARTS.items():
                con.register("_open_part", getattr(st, name).to_arrow())
                con.execute(f"INSERT INTO {table} SELECT * FROM _open_part")
                con.unregister("_open_part")
        warehouse.record_mart(con, MART, newest)
