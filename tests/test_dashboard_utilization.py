"""The Utilization page shows models.utilization's figures for the sidebar's filters (AppTest, lab cluster)."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from dashboards.snapshot import Snapshot
from models.metrics import utilization

T0, T1 = dt.datetime(2026, 9, 21), dt.datetime(2026, 10, 21)   # the default window: 2026-09-21 .. 2026-10-20


@pytest.fixture(scope="module")
def model(lab_db):
    cur = Snapshot(lab_db).cursor()
    return lambda by, t0=T0, t1=T1: utilization.by_bucket(cur, t0, t1, "day", by=by)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def test_kpis_table_and_stack_match_the_model(lab_db, model, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "utilization")
    total = model(None)
    ratio = total["sreport_allocated"].sum() / total["available_gpu_h"].sum()
    assert dfx.metric(at, "Allocation ratio").value == _pct(ratio)
    assert dfx.metric(at, "Allocated GPU-hours").value == f"{total['allocated_gpu_h'].sum():,.0f}"
    assert dfx.metric(at, "Idle GPU-hours").value == f"{total['idle_gpu_h'].sum():,.0f}"
    assert dfx.metric(at, "Unavailable GPU-hours").value == f"{total['unavailable_gpu_h'].sum():,.0f}"
    # the drain of a100-02 (2026-10-05 08:00 to 10-06 20:00, 4 GPUs) is the only unavailability: 36 h x 4 GPUs
    assert total["unavailable_gpu_h"].sum() == pytest.approx(144.0)
    # the previous 30 days hold no data: no delta is invented
    assert not dfx.metric(at, "Allocation ratio").delta

    shown = dfx.frame_with(at, "Pool (GPU type)", "Allocated (GPU-hours)", "Allocation ratio (%)")
    pools = model(["gpu_type"]).sort("bucket", "gpu_type")
    assert len(shown) == pools.height
    assert shown["Allocated (GPU-hours)"].tolist() == pytest.approx(pools["allocated_gpu_h"].to_list())
    assert shown["Capacity (GPU-hours)"].tolist() == pytest.approx(pools["capacity_gpu_h"].to_list())
    assert shown["Allocation ratio (%)"].tolist() == pytest.approx((pools["allocation_ratio"] * 100).to_list())

    stack = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"] == "Where the capacity went")
    assert [t["name"] for t in stack["data"]] == ["Allocated", "Idle", "Unavailable"]
    assert stack["layout"]["yaxis"]["title"]["text"] == "GPU-hours per day"
    summed = [sum(v) for v in zip(*(t["y"] for t in stack["data"]))]
    assert summed == pytest.approx(total.sort("bucket")["capacity_gpu_h"].to_list())
    # the lab's data end at 2026-10-20 11:45 UTC: its last day is marked as partial where both charts of GPU-hours
    # per day end, not left to read as a drop
    assert total.sort("bucket")["hours"].to_list()[-1] == pytest.approx(11.75)
    for title in ("Where the capacity went", "Allocated GPU-hours by team"):
        fig = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"] == title)
        marks = [a for a in fig["layout"].get("annotations", []) if a["text"].startswith("partial")]
        assert [(m["text"], m["x"][:10]) for m in marks] == [("partial day: 11.8 of 24 h", "2026-10-20")], title


def test_team_filter_splits_allocation_into_selected_and_other(lab_db, model, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "utilization", f_teams=["nlp"])
    teams = model(["team"])
    nlp = teams.filter(pl.col("team") == "nlp")["allocated_gpu_h"].sum()
    total = teams.filter(pl.col("team") == utilization.TOTAL_LABEL)
    assert dfx.metric(at, "Allocated GPU-hours").value == f"{nlp:,.0f}"
    assert dfx.metric(at, "Allocation ratio").value == _pct(nlp / total["available_gpu_h"].sum())
    stack = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"] == "Where the capacity went")
    names = [t["name"] for t in stack["data"]]
    assert names == ["Allocated", "Allocated (other teams)", "Idle", "Unavailable"]
    other = sum(stack["data"][1]["y"])
    assert nlp + other == pytest.approx(total["allocated_gpu_h"].sum())
    by_team = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"] == "Allocated GPU-hours by team")
    assert [t["name"] for t in by_team["data"]] == ["nlp"]


def test_pool_filter_and_unmapped_team(lab_db, model, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "utilization", f_pools=["h100"], f_teams=["(unmapped)"])
    rows = model(["gpu_type", "team"]).filter(pl.col("gpu_type") == "h100")
    guest = rows.filter(pl.col("team") == "(unmapped)")["allocated_gpu_h"].sum()
    assert guest > 0
    assert dfx.metric(at, "Allocated GPU-hours").value == f"{guest:,.0f}"
    by_team = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"] == "Allocated GPU-hours by team")
    assert [t["name"] for t in by_team["data"]] == ["(unmapped)"]
    # colours are the theme's: the same team has the same colour on every page
    assert by_team["data"][0]["marker"]["color"] == "#9AA0A6"


def test_week_bucket_and_previous_period_delta(lab_db, model, monkeypatch):
    state = {"f_dates": (dt.date(2026, 10, 6), dt.date(2026, 10, 19)), "util_bucket": "Week"}
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "utilization", **state)
    now = model(None, dt.datetime(2026, 10, 6), dt.datetime(2026, 10, 20))
    before = model(None, dt.datetime(2026, 9, 22), dt.datetime(2026, 10, 6))
    r_now = now["sreport_allocated"].sum() / now["available_gpu_h"].sum()
    r_before = before["sreport_allocated"].sum() / before["available_gpu_h"].sum()
    m = dfx.metric(at, "Allocation ratio")
    assert m.value == _pct(r_now)
    assert m.delta == f"{100 * (r_now - r_before):+.1f} pp"
    shown = dfx.frame_with(at, "Pool (GPU type)", "Allocated (GPU-hours)")
    assert shown.columns[0] == "Period (week, UTC)"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(teams=st.sets(st.sampled_from(["nlp", "vision", "platform", "(unmapped)"]), min_size=1),
       pools=st.sets(st.sampled_from(["a100", "h100"])))
def test_any_team_and_pool_filter_keeps_the_capacity_identity(lab_db, monkeypatch, teams, pools):
    """Whatever teams and pools are selected: selected + other teams' allocation + idle + unavailable equals the
    capacity of the pools kept, in every bucket, and the selected teams' GPU-hours are theirs in the model."""
    from dashboards import model_reads as mr
    from dashboards.filters import Filters
    monkeypatch.setenv("GPULEDGER_DB", str(lab_db))
    f = Filters(dt.date(2026, 10, 1), dt.date(2026, 10, 15), pools=tuple(sorted(pools)), teams=tuple(sorted(teams)))
    from dashboards.queries import current
    df = mr.utilization(current().version, f, "day")
    parts = df["allocated_gpu_h"] + df["other_allocated_gpu_h"] + df["idle_gpu_h"] + df["unavailable_gpu_h"]
    assert parts.to_list() == pytest.approx((df["capacity_gpu_h"] + df["beyond_capacity_gpu_h"]).to_list())
    model = utilization.by_bucket(Snapshot(lab_db).cursor(), f.t0, f.t1, "day", by=["gpu_type", "team"])
    mine = model.filter(pl.col("team").is_in(list(teams)) & (pl.col("gpu_type").is_in(list(pools)) if pools
                                                            else pl.lit(True)))
    assert df["allocated_gpu_h"].sum() == pytest.approx(mine["allocated_gpu_h"].sum())


def test_jobs_without_placement_are_warned_of_with_the_clis_figures(run_cli, db_path, fixtures, monkeypatch):
    # openb's pods name no node: the page says how many jobs and GPU-hours its allocation leaves out, the same
    # figures as `report utilization`'s note (models.metrics.timeline.unplaced) for the same window
    from ingest import warehouse
    from models.metrics import timeline
    pods = fixtures / "traces" / "openb" / "openb_pod_list_gpuspec33.csv"
    assert run_cli("ingest", "trace", "alibaba-openb", str(pods))[0] == 0
    con = warehouse.connect(db_path, read_only=True)
    (lo, hi), = con.sql("SELECT min(data_start), max(horizon) FROM tl_clusters").fetchall()
    d0, d1 = lo.date(), (hi - dt.timedelta(microseconds=1)).date()
    want = timeline.unplaced(con, dt.datetime.combine(d0, dt.time()), dt.datetime.combine(d1, dt.time())
                             + dt.timedelta(days=1))
    con.close()
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "utilization", f_dates=(d0, d1))
    shown = [w.value for w in at.warning if "name no node" in w.value]
    assert want["jobs"] > 100 and shown == [
        f"{want['jobs']:,} jobs held {want['gpu_h']:,.1f} GPU-hours in the window by their records but name no node "
        "(a trace without placement, e.g. openb's pod lists): the allocation here leaves them out and counts "
        "their GPUs as idle."]
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "overview", f_dates=(d0, d1))      # the tile says it too
    assert f"Leaves out {want['gpu_h']:,.0f} GPU-hours of {want['jobs']:,} jobs that name no node" in [
        c.value for c in at.caption]
    code, _, err = run_cli("report", "utilization", "--from", str(d0), "--to", str(d1 + dt.timedelta(days=1)))
    assert f"note: {want['jobs']:,} jobs held {want['gpu_h']:,.2f} GPU-hours" in err
