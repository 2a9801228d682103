"""The "Why jobs wait" page shows models.pending, models.preemption and models.reservations figures."""
from __future__ import annotations

import datetime as dt

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from dashboards import theme
from dashboards.snapshot import Snapshot
from models.metrics import pending, preemption, reservations, timeline
from waiting_fixtures import shared_db


def test_waiting_figures_match_the_models_and_say_where_reasons_come_from(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "waiting")
    cur = Snapshot(lab_db).cursor()
    end = timeline.horizon(cur)
    classes = pending.by_class(cur, dt.datetime(2026, 9, 21), end)
    assert dfx.metric(at, "Waiting (GPU-hours)").value == f"{classes['wait_gpu_h'].sum():,.1f}"
    assert any("No squeue snapshots" in i.value for i in at.info)            # the lab export has none
    assert dfx.metric(at, "Explained by squeue snapshots").value == "—"       # not "0.0 %": none were taken
    assert "not known: no squeue snapshots loaded (`gpuledger ingest squeue`)" in [c.value for c in at.caption]
    shown = dfx.frame_with(at, "Team", "Waiting (GPU-h)")
    assert sorted(shown["Team"]) == sorted(classes["team"].to_list())
    assert "Not yet evaluated (GPU-h)" in shown.columns                     # every class has its column ...
    assert any(c.value.startswith("Not yet evaluated: Slurm's reason None") for c in at.caption)   # ... and is said
    # the lab loaded no reservation: how much reserved capacity sat idle is not known, not 0
    assert dfx.metric(at, "Reserved but idle (GPU-hours)").value == "—"
    assert "not known: no reservations loaded (`gpuledger ingest reservations`)" in [c.value for c in at.caption]
    assert not at.exception


def test_reserved_idle_is_the_reservation_report_once_reservations_are_loaded(tmp_path_factory, monkeypatch):
    """The real Slurm capture with reservations (tests/fixtures/slurm_waiting): the tile is the report's sum."""
    db = shared_db(tmp_path_factory)
    cur = Snapshot(db).cursor()
    rep = reservations.report(cur, dt.datetime(2026, 12, 1), timeline.horizon(cur))
    assert rep.height and rep["reserved_idle_gpu_h"].sum() > 0
    at = dfx.open_page(dfx.app(db, monkeypatch), "waiting", f_dates=(dt.date(2026, 12, 1), dt.date(2026, 12, 4)))
    m = dfx.metric(at, "Reserved but idle (GPU-hours)")
    assert (m.value, m.delta) == (f"{rep['reserved_idle_gpu_h'].sum():,.1f}",
                                  f"of {rep['reserved_gpu_h'].sum():,.1f} reserved")
    classes = pending.by_class(cur, dt.datetime(2026, 12, 1), timeline.horizon(cur))    # this capture has snapshots
    explained = (classes["wait_gpu_h"] * classes["from_snapshots_share"].fill_null(0)).sum()
    want = 100 * explained / classes["wait_gpu_h"].sum()
    assert dfx.metric(at, "Explained by squeue snapshots").value == f"{want:.1f} %"
    cov = pending.coverage(cur)                                     # the span they cover, as `report pending` says
    assert dfx.metric(at, "Explained by squeue snapshots").delta == (f"snapshots {cov['first']:%Y-%m-%d} to "
                                                                     f"{cov['last']:%Y-%m-%d}")
    # each reason class of the chart in its own colour (the same for the class on every page and filter)
    fig = next(g for g in dfx.figures(at) if g["layout"]["title"]["text"] == "Why each team's jobs waited")
    drawn = {t["name"]: t["marker"]["color"] for t in fig["data"]}
    assert len(drawn) >= 2 and drawn == {c: theme.REASON_COLOURS[c] for c in drawn}
    # the capture's one preemption (QOS scavenger preempted by high): the page's table is the report's view
    by = preemption.by_preemptor(cur, dt.datetime(2026, 12, 1), timeline.horizon(cur))
    shown = dfx.frame_with(at, "Preemptor QOS", "Preemptor partition", "Victims")
    assert [tuple(r) for r in shown[["Preemptor QOS", "Preemptor partition", "Preemptor team", "Victim team",
                                     "Victims"]].itertuples(index=False)] == list(
        by.select("preemptor_qos", "preemptor_partition", "preemptor_team", "victim_team", "victims").iter_rows())
    assert list(shown["Preemptor partition"]) == ["a100"]
