"""Warm the views people open first, in the background, yielding to every visitor, and say which snapshot the
pages show meanwhile.

The first person to open a page after a server start or an ingest would otherwise wait for its models to run on
the snapshot. For each snapshot version, once per process, a daemon thread computes the views the pages show
for the window presets people open most (the default last 30 days, then the last 90 days and the last year;
no other filter), through the same cached functions with the same arguments the pages use, so their page views
find them cached. A page asking for a view the thread is computing waits for that one computation (Streamlit's
cache computes a key once).

Stale while revalidating: until a new snapshot is as warm as the one shown (as many windows' views computed:
all three on a server that has run a while, so the 90-day and 1-year views stay warm across publications too),
the pages keep showing the previous snapshot, whose views are cached (:func:`shown`; the sidebar says so), for
at most :func:`hold_s` after the new one's publication. Measured on the year (docs/BENCHMARKS.md): the overview's first visit after
a new snapshot took 90 s when the pages switched at once, the visitor computing every view cold beside a
warm-up still busy with the previous snapshot's one-year views.

It yields: before each view it waits until no visitor's script has run, and no request for a page or its bundles
was answered (:func:`note_requests`), for :data:`DRAW_S`, the time a browser takes to draw the page, so neither the
script nor the drawing competes with it for the 2 cores (a view it already started finishes first: at most one
view's time, ~0.1-1 s for the default window); its waits beyond :data:`QUIET_S` add up to no more than the time it
has computed plus :data:`DRAW_S` (:class:`_Share`), so one user reloading a page every second cannot hold back
everyone's new snapshot. Once the default window is warm its thread runs at a lower CPU priority. It starts when
the server starts (dashboards/launch.py: :func:`watch` polls the snapshot file) or, failing that, on the first page
view of a new snapshot (:func:`ensure`). A newer snapshot cancels it: the view it is computing is interrupted
(DuckDB's ``interrupt``), not finished (a one-year view takes 10-50 s on the loaded year). A model that fails is
left for its page to report.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import sys
import threading
import time
import weakref
from typing import Callable

from streamlit.runtime import Runtime
from streamlit.runtime.app_session import AppSessionState

from dashboards import access, model_reads as mr, queries, reliability_reads, streamlit_hooks
from dashboards.filters import DEFAULT_WINDOW, Filters, preset_window
from ingest.warehouse.serving import grace_seconds
from models.metrics.fragmentation import WINDOW_BUCKET

log = logging.getLogger(__name__)
#: Set by dashboards.server for the processes it starts; headless runs (AppTest, benchmarks) stay cold.
ENV = "GPULEDGER_DASHBOARD_PREWARM"
#: The windows warmed, in order (names of filters.WINDOWS).
WINDOWS = (DEFAULT_WINDOW, "90d", "1y")
#: How often the watcher looks at the snapshot file (seconds); the quiet spell after a visitor's script before
#: the next view always (a page runs scripts back to back: widgets, then the page), and the spell it waits while
#: it has time to spare (:class:`_Share`): a browser on these 2 cores draws a page 2-3 s after its script (docs/
#: BENCHMARKS.md, 2026-12-05: a 3 s spell for every view made warm visits faster, 44.7 -> 40.6 s over nine, but
#: without the share one user reloading a page every second or two starved the warm-up: the new snapshot was
#: not shown within 120 s in tests/test_dashboard_concurrency.py).
POLL_S, QUIET_S, DRAW_S = 2.0, 0.3, 3.0
#: The warm-up thread's niceness once the default window is warm (Linux niceness is per thread): the longer
#: windows' views (10-50 s each on the loaded year) give way to visitors' scripts; the default window's views
#: run at the normal priority, as the pages wait for them to show a new snapshot (niced on a machine loaded by
#: other work, they took 118 s instead of 26).
NICE = 10
_started: set[str] = set()
_lock = threading.Lock()
_runners: list["_Runner"] = []
#: The snapshot version the pages show while a newer one warms up (:func:`shown`), and how many of each
#: version's windows are warm.
_ready = ""
_levels: dict[str, int] = {}
_last_busy = 0.0        # time.monotonic() when a visitor's script was last seen running or a request answered


def hold_s() -> float:
    """How long after a snapshot's publication the pages may still show the previous one (seconds): half the
    publisher's grace period ($GPULEDGER_SERVING_GRACE_S), after which the previous one's parts may be gone."""
    return grace_seconds() / 2


def shown(newest: str) -> str:
    """The snapshot version the pages show: ``newest`` (the published one), unless it is not yet as warm as the
    version shown so far (:func:`_switch`) and that one is still open here and was replaced less than
    :func:`hold_s` ago; then that one."""
    prev = _ready
    if not newest or newest == prev or not prev or os.environ.get(ENV) != "1":
        return newest
    if not queries.current().holds(prev):
        return newest
    return prev if _age_s(newest) < hold_s() else newest


def _age_s(version: str) -> float:
    """Seconds since ``version`` was published (the manifest's time, UTC); infinite if it is not open here."""
    published = queries.current().published_at(version)
    if published is None:
        return float("inf")
    return (dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
            - dt.datetime.fromisoformat(published)).total_seconds()


def views(version: str, f: Filters) -> list[Callable[[], object]]:
    """The views the pages read for filters ``f``, most viewed first (Overview, then the pages in menu order)."""
    prev = f.previous()
    bucket = mr.auto_bucket(f)
    month = f.month
    last_month = mr.previous_month(month)
    out = [
        # what every page's entry script reads (dashboards/app.py, the sidebar)
        lambda: queries.access_roles(access.snapshot_version(version)), lambda: queries.freshness(version),
        lambda: queries.published_at(version), lambda: mr.currency(version),
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
        # Why jobs wait
        lambda: mr.pending_classes(version, f), lambda: mr.pending_coverage(version), lambda: mr.preemption(version, f),
        lambda: mr.reservations(version, f), lambda: mr.pending_reasons(version, f),
        # Chargeback (the newest month, with its job-level detail for the drill-down)
        lambda: mr.statement(version, month),
        # Forecast (the drawing of its history), Reliability and Data health
        lambda: mr.efficiency(version, f, "gpu_type", "day"), *reliability_reads.views(version, f),
        lambda: queries.ingest_runs(version, f), lambda: queries.unmapped_accounts(version, f),
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
    return _start(version)


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
            _start(queries.current().version)
        except Exception:       # the page views report snapshot problems; the watcher keeps watching
            log.debug("prewarm: watching failed", exc_info=True)
        time.sleep(POLL_S)


def _start(version: str) -> bool:
    """Warm ``version`` (a scoped version too) unless this process already started it; cancel the warm-ups of
    other snapshot versions first."""
    snapshot = access.snapshot_version(version)
    with _lock:
        if not version or version in _started:
            return False
        _started.add(version)
        old = [r for r in _runners if r.snapshot != snapshot]
        _runners[:] = [r for r in _runners if r.snapshot == snapshot and r.is_alive()]
    for r in old:
        r.cancel()
    # This thread (not the niced runner) opens the version's database: DuckDB's worker threads, which every
    # visitor's query uses too, inherit the niceness of the thread that starts them.
    queries.current().cursor(version=snapshot).close()
    runner = _Runner(version, old)
    with _lock:
        _runners.append(runner)
    runner.start()
    return True


def visitors_running() -> bool:
    """True while any visitor's script run is in progress in this server."""
    if not Runtime.exists():
        return False
    try:
        sessions = Runtime.instance()._session_mgr.list_sessions()   # no public API says which are running
        return any(getattr(s.session, "_state", None) == AppSessionState.APP_IS_RUNNING for s in sessions)
    except Exception:           # a Streamlit without these internals: warm without yielding
        return False


class _Share:
    """One warm-up's account of its time (seconds): ``worked`` computing views, ``held`` waiting for visitors'
    pages to load and draw (beyond the :data:`QUIET_S` after their scripts and requests). It waits the whole
    :data:`DRAW_S` while ``held`` is below ``worked`` + DRAW_S: at least about half of a busy server's time goes to
    the warm-up."""

    def __init__(self) -> None:
        self.worked = self.held = 0.0

    def spell(self) -> float:
        return DRAW_S if self.held < self.worked + DRAW_S else QUIET_S


class _NoteRequests:
    """ASGI middleware: an HTTP request (but a health check) marks a visitor's activity (:func:`note_requests`)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        global _last_busy
        if scope["type"] == "http" and not scope.get("path", "").endswith("/_stcore/health"):
            _last_busy = time.monotonic()
        await self.app(scope, receive, send)


def note_requests() -> None:
    """In the server (dashboards/launch.py): count every HTTP request, but health checks, as a visitor's activity.
    A browser opening a page fetches it and its bundles about a second before the page's script runs, and spends
    that second parsing them; a new snapshot's warm-up starting then takes the cores the page loads on. The counter
    is outermost in Streamlit's middleware list (dashboards/streamlit_hooks.py), so it sees every request.
    Idempotent."""
    streamlit_hooks.add_middleware(_NoteRequests, outermost=True)


def _yield_to_visitors(stop: threading.Event, share: _Share | None = None) -> None:
    """Wait until no visitor's script has been seen running, nor a request answered, for the spell (``share``'s,
    else QUIET_S seconds), or for ``stop``; at once when none was (a fixed pause before each view cost the lab's 35
    views 10 s)."""
    global _last_busy
    last = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if visitors_running():
            _last_busy = now
        elif now - _last_busy >= (share.spell() if share else QUIET_S):
            return
        elif share and now - _last_busy >= QUIET_S:
            share.held += now - last            # waiting only for the page to draw
        last = now
        time.sleep(0.05)


def _nice() -> None:
    """Lower this thread's CPU priority to :data:`NICE` (Linux: per thread; elsewhere nothing)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (AttributeError, OSError):
        pass


class _Runner(threading.Thread):
    """Warms one (scoped) version; :meth:`cancel` stops it and interrupts the query it is running."""

    def __init__(self, version: str, after: list["_Runner"]):
        super().__init__(name="gpuledger-prewarm", daemon=True)
        self.version, self.snapshot = version, access.snapshot_version(version)
        self._after = after                  # cancelled runners to let finish first (one warm-up at a time)
        self._cancelled = threading.Event()
        self._cursors: weakref.WeakSet = weakref.WeakSet()

    def cancel(self) -> None:
        self._cancelled.set()
        for cur in list(self._cursors):
            try:
                cur.interrupt()
            except Exception:                # closed meanwhile
                pass

    def run(self) -> None:
        for r in self._after:
            r.join()
        queries.current().track(self._cursors)
        t0 = time.perf_counter()
        try:
            done, failed = _warm(self.version, self._cancelled)
        except Exception:                    # the snapshot itself failed (its catalogue): the pages report it
            log.debug("prewarm: warming failed", exc_info=True)
            return
        if self._cancelled.is_set():
            return
        # One line in the server's log, so an admin can see what a new snapshot costs.
        print(f"gpuledger dashboard: warmed {done} views of the new snapshot in {time.perf_counter() - t0:.1f} s"
              + (f" ({failed} failed; their pages say why)" if failed else ""), file=sys.stderr, flush=True)


def _switch(version: str, level: int) -> bool:
    """Record that ``level`` windows of ``version`` are warm; the pages show it from now on if that is as many
    as the version shown so far had. True when it became the one shown."""
    global _ready
    with _lock:
        _levels[version] = level
        if _ready == version or level < _levels.get(_ready, 0):
            return False
        _levels.pop(_ready, None)
        _ready = version
    snap = queries.current()
    snap.hold({version})                    # open while the next snapshot warms up; older ones closed
    # and opened now if no read did (every view may have come from the cache): a shown version must be open
    snap.cursor(version=access.snapshot_version(version)).close()
    return True


def _warm(version: str, stop: threading.Event) -> tuple[int, int]:
    """Compute the views of every window of :data:`WINDOWS`, the pages showing ``version`` as soon as it is as
    warm as the version they show (a scoped version's warm-up decides nothing). (views done, views failed)"""
    done = failed = 0
    t0 = time.perf_counter()
    share = _Share()
    _yield_to_visitors(stop, share)
    for i, f in enumerate(window_filters(version)):
        for view in views(version, f):
            _yield_to_visitors(stop, share)
            if stop.is_set() or queries.current().version != access.snapshot_version(version):
                return done, failed         # a newer snapshot arrived: warming this one helps nobody
            started = time.perf_counter()
            try:
                view()
                done += 1
            except Exception:               # the page that shows this view reports the failure itself
                failed += 1
                log.debug("prewarm: a view failed", exc_info=True)
            share.worked += time.perf_counter() - started
        if version == access.snapshot_version(version) and _switch(version, i + 1):
            print(f"gpuledger dashboard: showing snapshot {version}, {_age_s(version):.1f} s after its publication "
                  f"(the views of {i + 1} window(s) computed in {time.perf_counter() - t0:.1f} s)",
                  file=sys.stderr, flush=True)
        if i == 0:
            _nice()
    return done, failed
