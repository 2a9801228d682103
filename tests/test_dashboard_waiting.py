"""The "Why jobs wait" page shows models.pending, models.preemption and models.reservations figures."""
from __future__ import annotations

import datetime as dt

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from dashboards.snapshot import Snapshot
from models.metrics import pending, timeline


def test_waiting_figures_match_the_models_and_say_where_reasons_come_from(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "waiting")
    cur = Snapshot(lab_db).cursor()
    end = timeline.horizon(cur)
    classes = pending.by_class(cur, dt.datetime(2026, 9, 21), end)
    assert dfx.metric(at, "Waiting (GPU-hours)").value == f"{classes['wait_gpu_h'].sum():,.1f}"
    assert any("No squeue snapshots" in i.value for i in at.info)            # the lab export has none
    shown = dfx.frame_with(at, "Team", "Waiting (GPU-h)")
    assert sorted(shown["Team"]) == sorted(classes["team"].to_list())
    assert dfx.metric(at, "Reserved but idle (GPU-hours)").value == "0"
    assert not at.exception
