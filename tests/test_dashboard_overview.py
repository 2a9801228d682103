"""The Overview page: each headline figure is the one its own page (and model) shows, with the previous period."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from dashboards.snapshot import Snapshot
from models.forecasting import capacity
from models.metrics import chargeback, utilization


def test_headline_figures_match_the_models(lab_db, monkeypatch):
    state = {"f_dates": (dt.date(2026, 10, 6), dt.date(2026, 10, 19))}
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "overview", **state)
    cur = Snapshot(lab_db).cursor()
    u = utilization.by_bucket(cur, dt.datetime(2026, 10, 6), dt.datetime(2026, 10, 20), "month", by=None)
    ub = utilization.by_bucket(cur, dt.datetime(2026, 9, 22), dt.datetime(2026, 10, 6), "month", by=None)
    r, rb = (d["sreport_allocated"].sum() / d["available_gpu_h"].sum() for d in (u, ub))
    m = dfx.metric(at, "Allocation ratio")
    assert (m.value, m.delta) == (f"{100 * r:.1f} %", f"{100 * (r - rb):+.1f} pp")

    october = chargeback.statement(cur, "2026-10")
    cost = float(october.lines.filter(pl.col("kind") == "charge")["total"].cast(pl.Float64).sum())
    assert dfx.metric(at, "Cost 2026-10 so far").value == f"{cost:,.0f} EUR"
    september = chargeback.statement(cur, "2026-09")
    assert dfx.metric(at, "Cost 2026-10 so far").delta == (
        f"2026-09: {float(september.lines['total'].cast(pl.Float64).sum()):,.0f} EUR")

    cap = capacity.forecast_warehouse(cur, 90, by=("pool",), measure="demanded", target_util=0.85, band="80")
    hits = cap["capacity"].filter(pl.col("exhausted_upper80").is_not_null()).sort("exhausted_upper80")
    m = dfx.metric(at, "Capacity reached (forecast)")
    assert m.value == (f"{hits['exhausted_upper80'][0]:%Y-%m-%d}" if hits.height else "not within 90 days")

    table = dfx.frame_with(at, "Figure", "This period", "Previous period")
    row = dict(zip(table["Figure"], table["This period"]))
    assert row["Allocation ratio"] == f"{100 * r:,.2f}"
    # every tile either shows a figure or says why not; none failed
    assert not [c.value for c in at.caption if "could not be computed" in c.value]
    assert len(at.metric) == 8

    # with no filter, the cost tile is the Chargeback page's "Charged to teams" for the same month
    at.switch_page("views/chargeback.py").run()
    assert at.selectbox(key="cb_period").value == "2026-10"
    assert dfx.metric(at, "Charged to teams").value == f"{cost:,.0f} EUR"
