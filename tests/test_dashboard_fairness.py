"""The Fairness & queues page shows models.fairness and models.queue figures for the window."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from dashboards.snapshot import Snapshot
from models.metrics import fairness, queue, timeline

T0 = dt.datetime(2026, 9, 21)


def test_shares_indices_waits_and_starvation_match_the_models(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "fairness")
    cur = Snapshot(lab_db).cursor()
    end = timeline.horizon(cur)                                   # the window is clipped to the data horizon
    rep = fairness.report(cur, [("window", T0, end)])
    pool = rep["pools"].filter(pl.col("pool") == "(all)").row(0, named=True)
    assert dfx.metric(at, "Fairness (Jain index)").value == f"{pool['jain_pending_teams']:.2f}"
    assert dfx.metric(at, "Gini of share ratios").value == f"{pool['gini']:.2f}"
    teams = rep["teams"].filter(pl.col("pool") == "(all)")
    fig = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"].startswith("Usage vs entitlement"))
    usage = next(t for t in fig["data"] if t["name"] == "Usage share")
    assert dict(zip(usage["y"], usage["x"])) == pytest.approx(
        dict(zip(teams["team"], (teams["usage_share"] * 100).to_list())))

    waits = queue.waits(cur, dt.datetime(2026, 9, 21), dt.datetime(2026, 10, 21), by=("team", "size_class"))
    shown = dfx.frame_with(at, "Team", "Requested GPUs", "p95 wait (h)")
    got = {(t, s): v for t, s, v in zip(shown["Team"], shown["Requested GPUs"], shown["p95 wait (h)"])}
    want = {(t, s): v for t, s, v in waits.select("team", "size_class", "wait_p95_h").iter_rows()}
    assert got == pytest.approx(want)

    n = int(queue.starvation(cur, T0, end, 24)["pending_over_threshold"].sum())
    assert dfx.metric(at, "Pending > 24 h now").value == f"{n:,}" == "0"
    assert any("No job had been waiting more than 24 h" in s.value for s in at.success)


def test_threshold_lists_the_starving_jobs(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "fairness", fq_threshold=2)
    cur = Snapshot(lab_db).cursor()
    pending = queue.pending_at(cur, timeline.horizon(cur)).filter(pl.col("pending_h") > 2)
    assert pending.height == 4                     # jobs of the export still waiting for whole H100 nodes
    assert dfx.metric(at, "Pending > 2 h now").value == "4"
    shown = dfx.frame_with(at, "Job", "Waiting (h)")
    assert list(shown["Job"]) == pending.sort("pending_h", descending=True)["job_id"].to_list()


def test_team_filter(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "fairness", f_teams=["vision"])
    shown = dfx.frame_with(at, "Team", "Requested GPUs", "p95 wait (h)")
    assert set(shown["Team"]) == {"vision"}


def test_without_governance_the_queue_figures_still_show(run_cli, db_path, fixtures, monkeypatch):
    """A job trace and no governance file (MIT SuperCloud's): the shares need entitlements, the queue waits do not.
    The Overview's "p95 queue wait" links here; the page shows the same figure, the waits and starvation."""
    trace = fixtures / "traces" / "supercloud" / "slurm-log-handmade.csv"
    assert run_cli("ingest", "trace", "mit-supercloud", str(trace))[0] == 0
    days = {"f_dates": (dt.date(2021, 1, 1), dt.date(2021, 1, 14))}
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "overview", **days)
    p95 = dfx.metric(at, "p95 queue wait").value
    at = dfx.open_page(dfx.app(db_path, monkeypatch), "fairness", **days)
    assert any(i.value.startswith("Fairness needs the governance file") for i in at.info)
    assert dfx.metric(at, "p95 queue wait").value == p95 != "—"
    assert [s.value for s in at.subheader] == ["Queue waits by team and request size", "Starvation"]
    assert len(dfx.frame_with(at, "Team", "p95 wait (h)")) > 0
