"""Warm the default views of every page when a new snapshot appears, in the background.

The first person to open a page after an ingest would otherwise wait for its models to run on the new
snapshot. When the entry script first sees a snapshot version, a daemon thread computes, once per version per
process, the views the pages show for the default filters (the last 30 days, no other filter), through the same
cached functions with the same arguments the pages use, so their page views find them cached. A page asking
for a view the thread is computing waits for that one computation (Streamlit's cache computes a key once).
The thread stops when a newer snapshot appears; a model that fails is left for its page to report.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Callable

from dashboards import access, model_reads as mr, queries
from dashboards.filters import Filters
from models.metrics.fragmentation import WINDOW_BUCKET

log = logging.getLogger(__name__)
#: Set by dashboards.server for the processes it starts; headless runs (AppTest, benchmarks) stay cold.
ENV = "GPULEDGER_DASHBOARD_PREWARM"
_started: set[str] = set()
_lock = threading.Lock()


def views(version: str, f: Filters) -> list[Callable[[], object]]:
    """The views the pages read for filters ``f``, most viewed first (Overview, then the pages in menu order)."""
    prev = f.previous()
    bucket = mr.auto_bucket(f)
    month = f.month
    last_month = mr.previous_month(month)
    out = [
        lambda: mr.utilization(version, f, "month"), lambda: mr.utilization(version, prev, "month"),
        lambda: mr.utilization(version, f, bucket, "gpu_type"),
        lambda: mr.efficiency(version, f), lambda: mr.efficiency(version, prev),
        lambda: mr.fragmentation(version, f, WINDOW_BUCKET), lambda: mr.fragmentation(version, prev, WINDOW_BUCKET),
        lambda: mr.blocked(version, f), lambda: mr.blocked(version, prev),
        lambda: mr.fairness(version, f), lambda: mr.fairness(version, prev),
        lambda: mr.statement(version, month, detail=False), lambda: mr.statement(version, last_month, detail=False),
        lambda: mr.forecast(version, "demanded", 90, 0.85, "80", queries.catalogue(version).pool_keys, None),
        lambda: mr.waits(version, f, ("cluster",)), lambda: mr.waits(version, prev, ("cluster",)),
        # Utilization
        lambda: mr.utilization(version, f, bucket), lambda: mr.allocation_by_team(version, f, bucket),
        lambda: mr.utilization(version, f, "month", "partition"),
        # Efficiency
        lambda: mr.efficiency(version, f, "team"), lambda: mr.efficiency(version, f, "user"),
        lambda: mr.efficiency(version, f, "gpu_type", bucket), lambda: mr.efficiency_jobs(version, f, 25),
        lambda: mr.efficiency_methods(version, f),
        # Fragmentation, Fairness & queues
        lambda: mr.fragmentation(version, f, bucket),
        lambda: mr.waits(version, f, ("team", "size_class")), lambda: mr.starvation(version, f, 24),
        # Chargeback (the newest month, with its job-level detail for the drill-down)
        lambda: mr.statement(version, month),
    ]
    return out


def ensure(version: str, f: Filters) -> bool:
    """Start warming ``version`` for ``f`` unless this process already did; True if a thread was started."""
    if not version or os.environ.get(ENV) != "1":
        return False
    with _lock:
        if version in _started:
            return False
        _started.add(version)
    threading.Thread(target=_run, args=(version, f), name="gpuledger-prewarm", daemon=True).start()
    return True


def _run(version: str, f: Filters) -> None:
    t0 = time.perf_counter()
    done = failed = 0
    for view in views(version, f):
        if queries.current().version != access.snapshot_version(version):
            return                      # a newer snapshot arrived: warming this one helps nobody
        try:
            view()
            done += 1
        except Exception:               # the page that shows this view reports the failure itself
            failed += 1
            log.debug("prewarm: a view failed", exc_info=True)
    # One line in the server's log, so an admin can see what a new snapshot costs.
    print(f"gpuledger dashboard: warmed {done} views of the new snapshot in {time.perf_counter() - t0:.1f} s"
          + (f" ({failed} failed; their pages say why)" if failed else ""), file=sys.stderr, flush=True)
