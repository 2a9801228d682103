"""The Overview page: each headline figure is the one its own page (and model) shows, with the previous period."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from dashboards import model_reads as mr, queries, reports
from dashboards.filters import Filters
from dashboards.snapshot import Snapshot
from models.forecasting import capacity
from models.metrics import chargeback, reservations, timeline, utilization
from waiting_fixtures import shared_db


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
    assert m.value == (mr.reached_text(hits["exhausted_upper80"][0], hits["already_above"][0]) if hits.height
                       else "not within 90 days")

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


def test_without_a_node_inventory_capacity_figures_say_why_instead_of_zero(run_cli, db_path, fixtures, monkeypatch):
    """A job trace without nodes (MIT SuperCloud's): allocation ratio, fragmentation, blocked waits, idle and
    unavailable GPU-hours cannot be told; the tiles say why ("0 % blocked" and "0 idle" were claims), and the
    headline table (the weekly report's rows) has "—"."""
    trace = fixtures / "traces" / "supercloud" / "slurm-log-handmade.csv"
    assert run_cli("ingest", "trace", "mit-supercloud", str(trace))[0] == 0
    days = {"f_dates": (dt.date(2021, 1, 1), dt.date(2021, 1, 14))}
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "overview", **days)
    for label in ("Allocation ratio", "Fragmentation rate", "Waiting blocked by fragmentation"):
        assert dfx.metric(at, label).value == "—", label
    assert sum(c.value.startswith("no GPU capacity known: no node inventory") for c in at.caption) >= 3
    table = dfx.frame_with(at, "Figure", "This period")
    assert dict(zip(table["Figure"], table["This period"]))["Queue wait blocked by fragmentation"] == "—"
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "utilization", **days)
    assert [dfx.metric(at, k).value for k in ("Allocation ratio", "Idle GPU-hours", "Unavailable GPU-hours")] \
        == ["—"] * 3 and dfx.metric(at, "Allocated GPU-hours").value != "—"
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "fragmentation", **days)
    assert [i.value for i in at.info] == ["Fragmentation needs the nodes' free GPUs: no GPU capacity known: no node "
                                          "inventory (ingest `scontrol show node` snapshots)."]


def test_a_change_that_rounds_to_zero_is_grey_without_an_arrow():
    from dashboards import ui
    shown = []

    class Col:
        def metric(self, label, value, delta, **kw):
            shown.append((delta, kw["delta_color"], kw["delta_arrow"]))

    for delta in ("+0.0 pp", "-0.0 pp", "+0.00", "+0.1 pp", "-5.0 h"):
        ui.kpi(Col(), "x", "1", delta, delta_color="inverse")
    assert shown == [("+0.0 pp", "off", "off"), ("-0.0 pp", "off", "off"), ("+0.00", "off", "off"),
                     ("+0.1 pp", "inverse", "auto"), ("-5.0 h", "inverse", "auto")]


def test_pods_without_placement_say_what_is_not_known(run_cli, db_path, fixtures, monkeypatch):
    """openb's pod list: an inventory, queue wait, but no pod names a node or a partition. Allocation and idle
    per node cannot be told ("0.0 %" allocated was shown); no node covers the waits, so the blocked-by-
    fragmentation tiles say that (not "no node inventory", not "no queue wait"); the Fragmentation page warns
    that the unplaced pods' GPUs are sampled as free, with utilization's figures."""
    d = fixtures / "traces" / "openb"
    assert run_cli("ingest", "trace", "alibaba-openb", str(d / "openb_pod_list_gpuspec33.csv"))[0] == 0
    cur = Snapshot(db_path).cursor()
    lost = timeline.unplaced(cur, dt.datetime(2023, 1, 2), dt.datetime(2023, 5, 31))     # the pages' window
    assert lost["jobs"] > 100
    days = {"f_dates": (dt.date(2023, 1, 2), dt.date(2023, 5, 30))}
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "overview", **days)
    assert dfx.metric(at, "Waiting blocked by fragmentation").value == "—"
    captions = [c.value for c in at.caption]
    assert "not known: no node of the inventory is in the partitions the jobs waited in" in captions
    assert dfx.metric(at, "Allocation ratio").value == "—"
    assert "not known: the jobs hold GPUs but name no node (a trace without placement)" in captions
    assert dfx.metric(at, "Fragmentation rate").value == "—"     # every GPU would be sampled free
    table = dfx.frame_with(at, "Figure", "This period")
    shown = dict(zip(table["Figure"], table["This period"]))
    assert (shown["Allocation ratio"], shown["Fragmentation rate (FGD)"]) == ("—", "—")
    assert not [fig for fig in dfx.figures(at) if fig["layout"]["title"]["text"].startswith("Allocation ratio")]
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "utilization", **days)
    assert [dfx.metric(at, k).value for k in ("Allocation ratio", "Allocated GPU-hours", "Idle GPU-hours")] \
        == ["—"] * 3
    titles = [fig["layout"]["title"]["text"] for fig in dfx.figures(at)]
    assert not [t for t in titles if t.startswith("Allocation ratio by") or t == "Where the capacity went"], titles
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "fragmentation", **days)
    assert dfx.metric(at, "Waiting blocked by fragmentation").value == "—"
    assert dfx.metric(at, "Fragmentation rate (FGD)").value == "—"
    assert [w.value for w in at.warning] == [
        f"{lost['jobs']:,} jobs held {lost['gpu_h']:,.1f} GPU-hours in the window by their records but name no node (a "
        "trace without placement, e.g. openb's pod lists): the free GPUs here count theirs as free, so free GPUs, "
        "whole free nodes and fragmentation overstate."]


def test_reserved_idle_is_one_figure_on_the_overview_the_waiting_page_and_the_weekly_report(tmp_path_factory,
                                                                                           monkeypatch):
    """The real Slurm capture with a reservation (tests/fixtures/slurm_waiting): the Overview's row, the Why jobs
    wait tile and the weekly report's row are the reservation report's idle GPU-hours; a site that never loaded a
    reservation gets no row (the lab: tests/test_reports.py counts its nine)."""
    db = shared_db(tmp_path_factory)
    cur = Snapshot(db).cursor()
    want = reservations.report(cur, dt.datetime(2026, 12, 1), dt.datetime(2026, 12, 5))["reserved_idle_gpu_h"].sum()
    assert want > 0
    dates = (dt.date(2026, 12, 1), dt.date(2026, 12, 4))
    at = dfx.open_page(dfx.app(db, monkeypatch), "overview", f_dates=dates)
    table = dfx.frame_with(at, "Figure", "Unit", "This period")
    row = {fig: (unit, now) for fig, unit, now in zip(table["Figure"], table["Unit"], table["This period"])}
    assert row["Reserved but idle"] == ("GPU-hours", f"{want:,.2f}")
    assert list(table["Figure"]).index("Reserved but idle") == list(table["Figure"]).index("p95 queue wait") + 1
    at.switch_page("views/waiting.py").run()
    assert dfx.metric(at, "Reserved but idle (GPU-hours)").value == f"{want:,.1f}"
    monkeypatch.setenv("GPULEDGER_DB", str(db))
    weekly = {r["metric"]: r for r in reports.headline(queries.current().version,
                                                        Filters(dt.date(2026, 12, 1), dt.date(2026, 12, 5)))}
    assert weekly["Reserved but idle"]["now"] == pytest.approx(want)
