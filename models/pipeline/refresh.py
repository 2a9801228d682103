"""`gpuledger refresh`: build the marts in dependency order, store the open statements, then publish the serving
snapshot. The one place (with ingest and period close) that changes the warehouse.

Each step is a module with ``build(con, full: bool)``; it is incremental unless ``full`` is set and records itself
in ``mart_state`` (ingest/warehouse/mart_state.py), so every reader can say how fresh it is.
"""
from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType

import duckdb

from ingest import warehouse
from models.marts import demand, efficiency, efficiency_notel, losses, timeline
from models.pipeline import open_statements

#: The marts, in dependency order (later ones read earlier ones).
STEPS: list[tuple[str, ModuleType]] = [
    ("timeline", timeline),        # occupancy timeline and its daily rollups: utilization, fragmentation, cost
    ("efficiency", efficiency),    # GPU efficiency per job and hour, from telemetry
    ("efficiency days", efficiency_notel),   # allocation of jobs without telemetry per day (long windows)
    ("demand", demand),            # daily demand per pool/partition/team, read by forecasts
    ("losses", losses),            # lost GPU-hours by cause (reads the timeline's pieces), jobs ended per node
    ("open statements", open_statements),   # the newest open months' statements (chargeback tile)
]


def run(con: duckdb.DuckDBPyConnection, db_path: str | Path, full: bool = False,
        publish: bool = True) -> list[tuple[str, float]]:
    """Refresh every mart, then publish the serving snapshot; returns (name, seconds) per step."""
    done = []
    for name, step in STEPS:
        t0 = time.perf_counter()
        step.build(con, full)
        done.append((name, time.perf_counter() - t0))
    if publish:
        t0 = time.perf_counter()
        warehouse.publish_serving(con, db_path, full=full)   # only what changed, unless full
        done.append(("serving snapshot", time.perf_counter() - t0))
    return done
