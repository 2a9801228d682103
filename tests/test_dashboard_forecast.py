"""The Forecast & capacity page shows models.capacity's forecasts and answers, and runs the what-if simulator."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db, two_clusters_db  # noqa: F401 (fixtures)
from dashboards import model_reads as mr
from dashboards.snapshot import Snapshot
from models.definitions.labels import SIZE_CLASSES
from models.forecasting import capacity
from waiting_fixtures import shared_db


def test_forecasts_and_exhaustion_dates_match_the_model(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "forecast")
    res = capacity.forecast_warehouse(Snapshot(lab_db).cursor(), 90, by=("pool",), measure="demanded",
                                      target_util=0.85, band="80")
    cap = res["capacity"]
    for pool in ("a100", "h100"):
        row = cap.filter(pl.col("pool") == pool).row(0, named=True)
        ex = row["exhausted_upper80"]
        m = dfx.metric(at, f"{pool}: capacity reached")
        assert m.value == (f"{ex:%Y-%m-%d}" if ex else "not within 90 days")
    figs = {f["layout"]["title"]["text"]: f for f in dfx.figures(at)}
    fig = figs["h100: Demanded GPU-hours, history and forecast"]
    names = [t["name"] for t in fig["data"]]
    assert names[:4] == ["95 % interval", "80 % interval", "Observed", "Forecast"]
    want = res["forecast"].filter(pl.col("pool") == "h100")
    assert fig["data"][3]["y"] == pytest.approx(want["forecast"].to_list())
    assert fig["layout"]["yaxis"]["title"]["text"] == "GPU-hours per day"
    table = dfx.frame_with(at, "Pool (GPU type)", "Model chosen", "Backtest MASE")
    summary = res["summary"].filter(pl.col("pool").is_in(["a100", "h100"]))
    assert list(table["Model chosen"]) == summary["model"].to_list()
    # the pseudo-pool of jobs that never ran (no GPU type) is not offered as a pool to plan for
    assert "(any)" not in set(table["Pool (GPU type)"])
    # ... but said why, once per note of the model (the pools without demand or without known capacity)
    notes = [c.value for c in at.caption if c.value in res["notes"]]
    assert notes == res["notes"] and notes


@pytest.mark.slow
def test_whatif_runs_the_simulator_and_compares_p95_wait(lab_db, monkeypatch):
    from models.simulation import simulate, whatif
    at = dfx.open_page(dfx.app(lab_db, monkeypatch, timeout=600), "forecast",
                       **{"wi_add_h100": 2, "wi_reps": 3})
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    snap = Snapshot(lab_db)
    inp = whatif.load_inputs(snap.cursor(), "2026-09-21T00:00:00", "2026-10-21T00:00:00", None)
    scen = whatif.run_whatif(inp, whatif.Scenario(add={"h100": 2}, policy=simulate.Policy.parse("fifo-backfill")),
                             3, 0, ("team", "size_class"))
    base = whatif.run_whatif(inp, whatif.Scenario(policy=simulate.Policy.parse("fifo-backfill")), 3, 0,
                             ("team", "size_class"))
    p95 = lambda df: df.filter((pl.col("metric") == "p95_wait_h") & (pl.col("scope") == "all"))["mean"][0]  # noqa
    m = dfx.metric(at, "p95 queue wait")
    assert m.value == f"{p95(scen):.2f} h"
    assert m.delta.startswith(f"{p95(scen) - p95(base):+.2f} h (baseline")
    # two more H100 nodes cannot make the queue longer
    assert p95(scen) <= p95(base) + 1e-9
    # the caption says what the window holds, as `simulate` does: its jobs, and those carried in from before it
    held = inp.counts()
    said = [c.value for c in at.caption if "The window holds" in c.value]
    assert len(said) == 1 and f"The window holds {held['jobs']:,} jobs" in said[0] \
        and f"{held['carried']:,} jobs carried in" in said[0]
    # a change of a percentage is in percentage points; request sizes in their order, not alphabetical
    assert dfx.metric(at, "GPU utilization (allocation)").delta.split()[1] == "pp"
    table = dfx.frame_with(at, "Figure", "For", "Change in")
    units = dict(zip(table["Figure"], table["Change in"]))
    assert units["GPU utilization (%)"] == "pp" and units["p95 queue wait (h)"] == "h"
    sizes = [s.split(": ")[1] for s, fig in zip(table["For"], table["Figure"])
             if fig == "p95 queue wait (h)" and s.startswith("Request size")]
    assert len(sizes) >= 2 and sizes == sorted(sizes, key=SIZE_CLASSES.index)


def test_two_clusters_sharing_a_pool_name_get_one_forecast_each(two_clusters_db, monkeypatch):
    """Both clusters have an "a100" and an "h100" pool: the page plans each (cluster, pool) on its own, with
    the model's answer for that cluster's pool, instead of failing on a duplicate element key."""
    at = dfx.open_page(dfx.app(two_clusters_db, monkeypatch, timeout=300), "forecast")
    res = capacity.forecast_warehouse(Snapshot(two_clusters_db).cursor(), 90, by=("cluster", "pool"),
                                      measure="demanded", target_util=0.85, band="80")
    cap = res["capacity"]
    assert sorted(cap.select("cluster", "pool").iter_rows()) == [("lab", "a100"), ("lab", "h100"),
                                                                  ("lab2", "a100"), ("lab2", "h100")]
    for cluster, pool, ex in cap.select("cluster", "pool", "exhausted_upper80").iter_rows():
        m = dfx.metric(at, f"{cluster} / {pool}: capacity reached")
        assert m.value == (f"{ex:%Y-%m-%d}" if ex else "not within 90 days")
    titles = {f["layout"]["title"]["text"] for f in dfx.figures(at)}
    assert {"lab / h100: Demanded GPU-hours, history and forecast",
            "lab2 / h100: Demanded GPU-hours, history and forecast"} <= titles
    table = dfx.frame_with(at, "Cluster", "Pool (GPU type)", "Model chosen")
    assert sorted(zip(table["Cluster"], table["Pool (GPU type)"])) == sorted(cap.select("cluster", "pool").iter_rows())


def test_cluster_filter_keeps_that_clusters_pools(two_clusters_db, monkeypatch):
    at = dfx.open_page(dfx.app(two_clusters_db, monkeypatch, timeout=300), "forecast", f_clusters=["lab2"])
    assert sorted(m.label for m in at.metric if m.label.endswith("capacity reached")) == [
        "lab2 / a100: capacity reached", "lab2 / h100: capacity reached"]


def test_overview_capacity_tile_plans_each_clusters_pool(two_clusters_db, monkeypatch):
    """The Overview's tile is the earliest of the Forecast page's per-(cluster, pool) answers, named by both."""
    res = capacity.forecast_warehouse(Snapshot(two_clusters_db).cursor(), 90, by=("cluster", "pool"),
                                      measure="demanded", target_util=0.85, band="80")
    hits = res["capacity"].filter(pl.col("exhausted_upper80").is_not_null()).sort("exhausted_upper80")
    at = dfx.open_page(dfx.app(two_clusters_db, monkeypatch, timeout=300), "overview")
    assert not at.exception, [e.value for e in at.exception]
    m = dfx.metric(at, "Capacity reached (forecast)")
    if hits.height == 0:
        assert m.value == "not within 90 days"
    else:
        h = hits.row(0, named=True)
        assert m.value == mr.reached_text(h["exhausted_upper80"], h["already_above"]) \
            and m.delta.startswith(f"{h['cluster']} / {h['pool']},")


def test_a_pool_without_known_capacity_is_still_charted_as_a_demand_forecast(db_path, monkeypatch):
    """The lab's accounting without its node inventory (as a job trace such as MIT SuperCloud's): no capacity
    answer, but the demand forecast a planner reads is drawn (it was "No forecastable pools"), its tile says why
    there is no date, and no capacity line is claimed."""
    dfx.cli(db_path, "ingest", "sacct", str(dfx.FIX / "sacct.psv"))
    res = capacity.forecast_warehouse(Snapshot(db_path).cursor(), 90, by=("pool",), measure="demanded",
                                      target_util=0.85, band="80")
    assert res["capacity"].height == 0
    pools = sorted(set(res["forecast"]["pool"]) - {"(any)"})
    assert pools
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "forecast")
    assert not [i.value for i in at.info if "No forecastable pools" in i.value]
    titles = [f["layout"]["title"]["text"] for f in dfx.figures(at)]
    for pool in pools:
        assert f"{pool}: Demanded GPU-hours, history and forecast" in titles
        assert dfx.metric(at, f"{pool}: capacity reached").value == "—"
    assert "no installed capacity known" in [c.value for c in at.caption]
    assert not any(c.value.startswith("Dotted red") for c in at.caption)


def test_whatif_without_the_advance_reservations_says_so(tmp_path_factory, monkeypatch):
    """The real Slurm capture with a reservation (tests/fixtures/slurm_waiting: gl-resv on gpu03, one job in it):
    the what-if replays it, and the box runs the scenario without it, as `simulate --no-reservations` does."""
    from models.simulation import simulate, whatif
    db = shared_db(tmp_path_factory)
    at = dfx.open_page(dfx.app(db, monkeypatch, timeout=600), "forecast",
                       f_dates=(dt.date(2026, 12, 1), dt.date(2026, 12, 4)), wi_reps=3, wi_no_resv=True)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    inp = whatif.load_inputs(Snapshot(db).cursor(), "2026-12-01T00:00:00", "2026-12-05T00:00:00", None)
    held = inp.counts()
    assert held["reservations"] == 1 and held["in_reservations"] >= 1
    said = [c.value for c in at.caption if "The window holds" in c.value]
    assert len(said) == 1 and "Scenario: without the advance reservations." in said[0]
    assert (f"1 advance reservation(s) hold their nodes for their {held['in_reservations']} jobs in the baseline "
            "only.") in said[0]
    pol = simulate.Policy.parse("fifo-backfill")
    scen = whatif.run_whatif(inp, whatif.Scenario(policy=pol, replay_reservations=False), 3, 0, ("team", "size_class"))
    p95 = scen.filter((pl.col("metric") == "p95_wait_h") & (pl.col("scope") == "all"))["mean"][0]
    assert dfx.metric(at, "p95 queue wait").value == f"{p95:.2f} h"
