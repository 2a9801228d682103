"""The dashboard's one writing action: closing a chargeback period, for the roles that may (dashboards/access.py).

The role is checked here, in the action on the server, whatever the page showed. The warehouse may be held by
the collector (`gpuledger serve`) during a cycle: the close waits for it, up to ``wait`` seconds, and says so.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dashboards import access
from ingest import warehouse
from models.definitions.policy import CostError
from models.metrics import chargeback
from models.pipeline import close

#: how long a close from the dashboard waits for a collector's cycle to release the warehouse (seconds)
CLOSE_WAIT_S = 30.0


@dataclass(frozen=True)
class Outcome:
    ok: bool
    message: str


def close_period(scope: access.Scope, db_path: str | os.PathLike, period: str,
                 wait: float = CLOSE_WAIT_S) -> Outcome:
    """Freeze ``period``'s statement, refresh and republish (models/pipeline/close.py), as ``scope``.

    Raises access.Forbidden for a role that may not close. A refusal of the model (period already closed, not yet
    covered) or a warehouse held longer than ``wait`` is an Outcome with ok False and the reason."""
    access.require(scope, "close")
    try:
        con = warehouse.connect(Path(db_path), lock_timeout=wait)
    except warehouse.WarehouseError as exc:
        return Outcome(False, f"{exc} (the collector may be in a long cycle; try again in a minute)")
    try:
        if period in chargeback.closed_periods(con):
            return Outcome(False, f"{period} is already closed; nothing changed")
        st = close.close_period(con, period, db_path=db_path)
    except CostError as exc:
        return Outcome(False, str(exc))
    finally:
        con.close()
    return Outcome(True, f"closed {period} at {st.closed_at:%Y-%m-%d %H:%M:%S} UTC by {scope.user or scope.role}, "
                         f"sha256 {st.content_hash}")
