"""The warm-up of a new snapshot and which snapshot the pages show meanwhile (dashboards/prewarm.py)."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_copy, lab_db  # noqa: F401 (fixtures)
from dashboards import prewarm, queries
from ingest import warehouse


def _republish(db) -> str:
    """A 15-minute cycle that found no new line: a new ingest run, so a new version. Returns it."""
    con = warehouse.connect(db)
    try:
        with warehouse.IngestRun(con, "sacct", "test: a cycle with no new line", cluster="lab"):
            pass
        warehouse.publish_serving(con, db)
    finally:
        con.close()
    return warehouse.read_manifest(db)["version"]


@pytest.fixture
def served(lab_copy, monkeypatch):
    """A private copy of the lab warehouse that this process's dashboard serves, warm-up enabled (no thread is
    started: the tests call its steps), of the default window only (the others are the same views on other
    dates: seconds more)."""
    monkeypatch.setenv("GPULEDGER_DB", str(lab_copy))
    monkeypatch.setenv(prewarm.ENV, "1")
    monkeypatch.setattr(prewarm, "_ready", "")
    monkeypatch.setattr(prewarm, "_levels", {})
    monkeypatch.setattr(prewarm, "WINDOWS", prewarm.WINDOWS[:1])
    monkeypatch.setattr(prewarm, "QUIET_S", 0.0)          # no visitor here to yield to
    monkeypatch.setattr(prewarm, "DRAW_S", 0.0)
    yield lab_copy
    queries.current().close()


def test_the_pages_show_the_warmed_snapshot_until_the_new_one_is_warm(served, monkeypatch):
    v1 = queries.current().version
    assert prewarm.shown(v1) == v1                      # nothing warmed yet: the published one
    done, failed = prewarm._warm(v1, threading.Event())
    # every view of the default window computed on the lab data, none failed
    assert failed == 0 and done == len(prewarm.views(v1, prewarm.window_filters(v1)[0]))
    assert prewarm._ready == v1
    v2 = _republish(served)
    assert v2 != v1
    assert prewarm.shown(v2) == v1                      # v2's views are not computed yet: v1's are shown
    assert queries.current().holds(v1)
    monkeypatch.setenv("GPULEDGER_SERVING_GRACE_S", "0")
    assert prewarm.shown(v2) == v2                      # held no longer than half the grace period
    monkeypatch.delenv("GPULEDGER_SERVING_GRACE_S")
    monkeypatch.setenv(prewarm.ENV, "0")
    assert prewarm.shown(v2) == v2                      # no warm-up (AppTest, benchmarks): the newest at once
    monkeypatch.setenv(prewarm.ENV, "1")
    stop = threading.Event()
    stop.set()
    assert prewarm._warm(v2, stop) == (0, 0)            # cancelled: not one view, not shown
    assert prewarm.shown(v2) == v1
    prewarm._warm(v2, threading.Event())
    assert prewarm._ready == v2 and prewarm.shown(v2) == v2
    assert not queries.current().holds(v1)              # v1 closed once v2 was shown


def test_the_sidebar_says_a_newer_snapshot_is_being_prepared(served, monkeypatch):
    v1 = queries.current().version
    monkeypatch.setattr(prewarm, "_ready", v1)          # as if v1's views were computed (the test above)
    queries.current().hold({v1})
    queries.current().cursor().close()
    v2 = _republish(served)
    monkeypatch.setattr(prewarm, "_started", {v2})      # no warm-up thread: v2 stays unwarmed for the test
    at = dfx.app(served, monkeypatch)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    captions = [c.value for c in at.sidebar.caption]
    assert any(c.startswith("A newer snapshot (published") for c in captions), captions
    monkeypatch.setattr(prewarm, "_ready", v2)
    at.run()
    assert not any(c.value.startswith("A newer snapshot") for c in at.sidebar.caption)


def test_a_new_snapshot_is_shown_once_as_warm_as_the_one_shown(served):
    v1 = queries.current().version
    queries.current().cursor().close()
    assert prewarm._switch(v1, 1) and prewarm.shown(v1) == v1   # the first one: shown once one window is warm
    assert not prewarm._switch(v1, 3)                            # still the one shown, now with three windows
    v2 = _republish(served)
    assert not prewarm._switch(v2, 1) and prewarm.shown(v2) == v1
    assert not prewarm._switch(v2, 2) and prewarm.shown(v2) == v1
    assert prewarm._switch(v2, 3) and prewarm.shown(v2) == v2
    assert prewarm._levels == {v2: 3}


def test_a_snapshot_warmed_from_the_cache_is_held_open(served, monkeypatch):
    # its views all cached already (a second warm-up of the version, here after its database was closed): no
    # read opened it, and the version shown must still be open when the next one is published
    v1 = queries.current().version
    prewarm._warm(v1, threading.Event())
    queries.current().close()
    monkeypatch.setattr(prewarm, "_ready", "")
    monkeypatch.setattr(prewarm, "_levels", {})
    assert prewarm._warm(v1, threading.Event())[1] == 0
    v2 = _republish(served)
    assert prewarm.shown(v2) == v1 and queries.current().holds(v1)


def test_the_warm_up_waits_a_quiet_spell_after_the_last_visitor_script(monkeypatch):
    """A visitor's page runs scripts back to back (widgets, then the page): the next view starts only once no
    script has run for QUIET_S, counted from the last time one was seen running."""
    busy_until = time.monotonic() + 0.3
    monkeypatch.setattr(prewarm, "visitors_running", lambda: time.monotonic() < busy_until)
    monkeypatch.setattr(prewarm, "QUIET_S", 0.4)
    monkeypatch.setattr(prewarm, "_last_busy", 0.0)
    t0 = time.monotonic()
    prewarm._yield_to_visitors(threading.Event())
    assert time.monotonic() - t0 >= 0.3 + 0.4 - 0.06          # the script's 0.3 s, then the whole spell
    assert prewarm._last_busy >= busy_until - 0.06
    stop = threading.Event()
    stop.set()
    monkeypatch.setattr(prewarm, "visitors_running", lambda: True)
    prewarm._yield_to_visitors(stop)                          # a newer snapshot: it stops waiting at once


def test_without_visitors_the_warm_up_does_not_wait(monkeypatch):
    monkeypatch.setattr(prewarm, "visitors_running", lambda: False)
    monkeypatch.setattr(prewarm, "_last_busy", 0.0)           # none seen since the process started
    t0 = time.monotonic()
    prewarm._yield_to_visitors(threading.Event())
    assert time.monotonic() - t0 < prewarm.QUIET_S


def test_the_warm_up_waits_for_a_visitors_page_to_draw_while_it_has_time_to_spare(monkeypatch):
    """With its account (a _Share), the spell after a visitor's script is DRAW_S, the browser's drawing time,
    and the wait beyond QUIET_S is booked as held; once held reaches the time worked + DRAW_S, it is QUIET_S."""
    busy_until = time.monotonic() + 0.2
    monkeypatch.setattr(prewarm, "visitors_running", lambda: time.monotonic() < busy_until)
    monkeypatch.setattr(prewarm, "QUIET_S", 0.1)
    monkeypatch.setattr(prewarm, "DRAW_S", 0.5)
    monkeypatch.setattr(prewarm, "_last_busy", 0.0)
    share = prewarm._Share()
    t0 = time.monotonic()
    prewarm._yield_to_visitors(threading.Event(), share)
    assert time.monotonic() - t0 >= 0.2 + 0.5 - 0.06          # the script, then the whole drawing spell
    assert 0.4 - 0.11 <= share.held <= 0.4 + 0.11             # DRAW_S - QUIET_S
    share.worked, share.held = 1.0, 1.5                       # its allowance used up
    busy_until = time.monotonic() + 0.2
    t0 = time.monotonic()
    prewarm._yield_to_visitors(threading.Event(), share)
    assert 0.2 + 0.1 - 0.06 <= time.monotonic() - t0 < 0.2 + 0.5 - 0.06


def test_a_page_reloaded_without_pause_cannot_starve_the_warm_up(monkeypatch):
    """A script every 0.3 s (one user reloading a page again and again) never leaves a quiet DRAW_S: the warm-up
    still computes, its waits for drawing bounded by the time it worked + DRAW_S (tests/test_dashboard_concurrency.py
    is the same in a real browser)."""
    start = time.monotonic()
    monkeypatch.setattr(prewarm, "visitors_running", lambda: (time.monotonic() - start) % 0.3 < 0.1)
    monkeypatch.setattr(prewarm, "QUIET_S", 0.05)
    monkeypatch.setattr(prewarm, "DRAW_S", 0.6)
    monkeypatch.setattr(prewarm, "_last_busy", 0.0)
    share, views = prewarm._Share(), 0
    while time.monotonic() - start < 3.0:
        prewarm._yield_to_visitors(threading.Event(), share)
        time.sleep(0.1)                                       # a view
        share.worked += 0.1
        views += 1
    assert views >= 6                                         # without the bound the first wait never ends
    assert share.held <= share.worked + 0.6 + 0.1


def test_a_page_being_loaded_counts_as_a_visitor(monkeypatch):
    """note_requests: Streamlit's web application gets the middleware first, and every HTTP request through it (a
    page, its bundles) is a visitor's activity, health checks are not."""
    from streamlit.web.server.starlette import starlette_app
    monkeypatch.setattr(starlette_app, "create_streamlit_middleware", starlette_app.create_streamlit_middleware)
    prewarm.note_requests()
    prewarm.note_requests()                                   # once only
    stack = starlette_app.create_streamlit_middleware()
    assert stack[0].cls is prewarm._NoteRequests and stack[1].cls is not prewarm._NoteRequests
    served = []

    async def app(scope, receive, send):
        served.append(scope.get("path"))

    mw = prewarm._NoteRequests(app)
    monkeypatch.setattr(prewarm, "_last_busy", 0.0)
    asyncio.run(mw({"type": "http", "path": "/_stcore/health"}, None, None))
    asyncio.run(mw({"type": "lifespan"}, None, None))
    assert prewarm._last_busy == 0.0
    t0 = time.monotonic()
    asyncio.run(mw({"type": "http", "path": "/static/js/index.js"}, None, None))
    assert prewarm._last_busy >= t0 and served == ["/_stcore/health", None, "/static/js/index.js"]
