"""Warm the views people open first, in the background, yielding to every visitor.

The first person to open a page after a server start or an ingest would otherwise wait for its models to run on
the snapshot. For each snapshot version, once per process, a daemon thread computes the views the pages show
for the window presets people open most (the default last 30 days, then the last 90 days and the last year;
no other filter), through the same cached functions with the same arguments the pages use, so their page views
find them cached. A page asking for a view the thread is computing waits for that one computation (Streamlit's
cache computes a key once).

It yields: before each view it waits until no visitor's script is running, so a visitor never competes with it
for the 2 cores (a view it already started finishes first: at most one view's time, ~0.1-1 s). It starts when
the server starts (dashboards/launch.py: :func:`watch` polls the snapshot file) or, failing that, on the first
page view of a new snapshot (:func:`ensure`), and stops when a newer snapshot appears. A model that fails is
left for its page to report.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import sys
import threading
import time
from typing import Callable

from streamlit.runtime import Runtime
from streamlit.runtime.app_session import AppSessionState

from dashboards import access, model_reads as mr, queries
from dashboards.filters import DEFAULT_WINDOW, Filters, preset_window
from models.metrics.fragmentation import WINDOW_BUCKET

log = logging.getLogger(__name__)
#: Set by dashboards.server for the processes it starts; headless runs (AppTest, benchmarks) stay cold.
ENV = "GPULEDGER_DASHBOARD_PREWARM"
#: The windows warmed, in order (names of filters.WINDOWS).
WINDOWS = (DEFAULT_WINDOW, "90d", "1y")
#: How often the watcher looks at the snapshot file (seconds), and how long a quiet spell must last before the
#: next view starts (a visitor's page runs scripts back to back: widgets, then the page).
POLL_S, QUIET_S = 2.0, 0.3
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
        # Forecast (the drawing of its history) and Data health
        lambda: mr.efficiency(version, f, "gpu_type", "day"), lambda: queries.ingest_runs(version, f),
        lambda: queries.unmapped_accounts(version, f),
    ]
    return out


def window_filters(version: str) -> list[Filters]:
    """The filters of :data:`WINDOWS` on this snapshot's data (no other filter), duplicates dropped."""
    cat = queries.catalogue(version)
    out: list[Filters] = []
    for name in WINDOWS:
        first, last = preset_window(name, cat.first_day, cat.last_day)
        f = Filters(start=first, end=last + dt.timedelta(days=1))
        if f not in out:
            out.append(f)
    return out


def ensure(version: str, f: Filters | None = None) -> bool:
    """Start warming ``version`` unless this process already did; True if a thread was started. (``f``: the
    page's default filters, kept for callers; the windows warmed are :func:`window_filters`.)"""
    if not version or os.environ.get(ENV) != "1":
        return False
    with _lock:
        if version in _started:
            return False
        _started.add(version)
    threading.Thread(target=_run, args=(version,), name="gpuledger-prewarm", daemon=True).start()
    return True


def watch() -> threading.Thread | None:
    """In the server (dashboards/launch.py): a daemon thread that waits for Streamlit's runtime, then warms each
    new snapshot as soon as it is published, before anyone asks for it. None when warming is off."""
    if os.environ.get(ENV) != "1":
        return None
    t = threading.Thread(target=_watch, name="gpuledger-prewarm-watch", daemon=True)
    t.start()
    return t


def _watch() -> None:
    while not Runtime.exists():
        time.sleep(0.1)
    while True:
        try:
            version = queries.current().version
            with _lock:
                fresh = bool(version) and version not in _started
                _started.add(version)
            if fresh:
                _run(version)
        except Exception:       # the page views report snapshot problems; the watcher keeps watching
            log.debug("prewarm: watching failed", exc_info=True)
        time.sleep(POLL_S)


def visitors_running() -> bool:
    """True while any visitor's script run is in progress in this server."""
    if not Runtime.exists():
        return False
    try:
        sessions = Runtime.instance()._session_mgr.list_sessions()   # no public API says which are running
        return any(getattr(s.session, "_state", None) == AppSessionState.APP_IS_RUNNING for s in sessions)
    except Exception:           # a Streamlit without these internals: warm without yielding
        return False


def _yield_to_visitors() -> None:
    quiet_since = None
    while True:
        if visitors_running():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_S:
            return
        time.sleep(0.05)


def _run(version: str) -> None:
    t0 = time.perf_counter()
    done = failed = 0
    _yield_to_visitors()
    for f in window_filters(version):
        for view in views(version, f):
            _yield_to_visitors()
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
