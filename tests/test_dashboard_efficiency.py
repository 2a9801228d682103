"""The Efficiency page shows models.efficiency's figures, names the metric, and never shows 0 % for no data."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from dashboards.snapshot import Snapshot
from models.metrics import efficiency

DAY = {"f_dates": (dt.date(2026, 10, 12), dt.date(2026, 10, 12))}   # the day the fixture has DCGM telemetry for
T0, T1 = dt.datetime(2026, 10, 12), dt.datetime(2026, 10, 13)


def test_kpis_teams_and_worst_offenders_match_the_model(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "efficiency", **DAY)
    cur = Snapshot(lab_db).cursor()
    total = efficiency.by_group(cur, T0, T1, by=[], bucket=None).row(0, named=True)
    assert dfx.metric(at, "GPU efficiency").value == f"{total['mean_pct']:.1f} %"
    assert dfx.metric(at, "Idle-allocated GPU-hours").value == f"{total['idle_alloc_gpu_h']:,.0f}"
    assert dfx.metric(at, "Telemetry coverage").value == f"{total['coverage_pct']:.1f} %"
    m = dfx.metric(at, "Jobs without telemetry")
    assert (m.value, m.delta) == (f"{total['jobs_without_telemetry']:,}", f"of {total['jobs']:,} GPU jobs")
    # the metric used is named on the page
    assert any("Activity metric: **SM_ACTIVE**" in c.value for c in at.caption)

    teams = efficiency.by_group(cur, T0, T1, by=["team"], bucket=None).sort("alloc_gpu_h", descending=True)
    shown = dfx.frame_with(at, "Team", "GPU efficiency (%)", "Allocated (GPU-hours)")
    assert list(shown["Team"]) == teams["team"].to_list()
    assert list(shown["GPU efficiency (%)"]) == pytest.approx(teams["mean_pct"].to_list())
    # the bar of each team is its allocation, split into active, partly busy, idle-allocated and untracked
    fig = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"] == "Allocated vs active GPU-hours by team")
    by_team: dict[str, float] = {}
    for trace in fig["data"]:
        for team, v in zip(trace["y"], trace["x"]):
            by_team[team] = by_team.get(team, 0.0) + v
    assert by_team == pytest.approx(dict(zip(teams["team"], teams["alloc_gpu_h"])))
    active = next(t for t in fig["data"] if t["name"] == "Active")
    assert dict(zip(active["y"], active["x"])) == pytest.approx(dict(zip(teams["team"], teams["active_gpu_h"])))

    worst = efficiency.per_job(cur, T0, T1, order="idle").filter(pl.col("idle_alloc_gpu_h") > 0).head(25)
    shown = dfx.frame_with(at, "Job", "Idle-allocated (GPU-hours)")
    assert list(shown["Job"]) == worst["job_id"].to_list()


def test_no_telemetry_is_unknown_not_zero(lab_db, monkeypatch):
    # the a100 pool has no telemetry at all: its efficiency is unknown, and the page says so
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "efficiency", f_pools=["a100"], **DAY)
    assert dfx.metric(at, "GPU efficiency").value == "—"
    assert any("unknown (not 0 %)" in w.value for w in at.warning)
    assert dfx.metric(at, "Telemetry coverage").value == "0.0 %"


def test_a_trace_without_users_or_telemetry_draws_no_empty_chart(run_cli, db_path, fixtures, monkeypatch):
    """openb's pod list names no user and has no telemetry: the users chart would be an empty frame and the
    efficiency line an empty axis; the page says the accounting has no users and draws neither."""
    pods = fixtures / "traces" / "openb" / "openb_pod_list_gpuspec33.csv"
    assert run_cli("ingest", "trace", "alibaba-openb", str(pods))[0] == 0
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "efficiency",
                       f_dates=(dt.date(2023, 1, 2), dt.date(2023, 5, 30)))
    titles = [fig["layout"]["title"]["text"] for fig in dfx.figures(at)]
    assert titles == ["Allocated vs active GPU-hours by team"]
    assert "**Users**: the accounting records no user for these jobs." in [c.value for c in at.caption]
