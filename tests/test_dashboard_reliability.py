"""The Reliability page shows models.losses' and models.reliability's figures, the same the CLI prints
(`gpuledger report losses|reliability`), for the lab cluster of tests/dashboard_fixtures.py."""
from __future__ import annotations

import datetime as dt
import json

import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
import gpuledger

WINDOW = {"f_dates": (dt.date(2026, 9, 21), dt.date(2026, 10, 19))}
FROM, TO = "2026-09-21", "2026-10-20"


def _cli(db, tmp_path, *argv) -> list[dict]:
    out = tmp_path / "out.json"
    assert gpuledger.main(["-q", "--db", str(db), "report", *argv, "--from", FROM, "--to", TO,
                           "--format", "json", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_page_figures_equal_the_cli_report(lab_db, monkeypatch, tmp_path):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "reliability", **WINDOW)
    teams = _cli(lab_db, tmp_path, "losses", "--total", "--by", "team")
    lost = sum(r["lost_gpu_h"] for r in teams)
    alloc = sum(r["allocated_gpu_h"] for r in teams)
    assert lost > 0 and alloc > 0
    kpi = dfx.metric(at, "Lost GPU-hours")
    assert (kpi.value, kpi.delta) == (f"{lost:,.0f}", f"of {alloc:,.0f} allocated")
    assert dfx.metric(at, "Goodput").value == f"{100 * (alloc - lost) / alloc:.1f} %"
    shown = dfx.frame_with(at, "Team", "Lost (GPU-hours)", "Goodput (%)")
    want = {r["team"]: r for r in teams}
    assert set(shown["Team"]) == set(want)
    for team, lost_h, good in zip(shown["Team"], shown["Lost (GPU-hours)"], shown["Goodput (%)"]):
        assert lost_h == pytest.approx(want[team]["lost_gpu_h"])
        assert good == pytest.approx(100 * want[team]["goodput_share"])
    # the chart by team and cause stacks to each team's loss
    fig = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"] == "Lost GPU-hours by team and cause")
    per_team: dict[str, float] = {}
    for trace in fig["data"]:
        for team, v in zip(trace["y"], trace["x"]):
            per_team[team] = per_team.get(team, 0.0) + v
    assert per_team == pytest.approx({t: r["lost_gpu_h"] for t, r in want.items()})
    assert _partial_marks(at) == []       # the window's last day, 2026-10-19, is whole
    # the outage table lists the CLI's nodes with outages
    nodes = [r for r in _cli(lab_db, tmp_path, "reliability", "--view", "nodes") if r["outages"] > 0]
    table = dfx.frame_with(at, "Node", "Outages", "MTBF (hours)")
    assert list(table["Node"]) == [r["node"] for r in nodes]
    assert any(m.value.startswith("**Node outages**: unplanned") for m in at.markdown)   # titled as its neighbours


def _partial_marks(at) -> list[tuple[str, str]]:
    fig = next(f for f in dfx.figures(at) if f["layout"]["title"]["text"].startswith("Lost GPU-hours per "))
    return [(a["text"], a["x"][:10]) for a in fig["layout"].get("annotations", []) if a["text"].startswith("partial")]


def test_the_day_the_data_end_inside_is_marked_partial_as_on_the_utilization_page(lab_db, monkeypatch):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "reliability")    # the default window: to the data's end
    assert _partial_marks(at) == [("partial day: 11.8 of 24 h", "2026-10-20")]   # 2026-10-20 11:45 UTC


def test_a_window_without_node_outages_says_so_instead_of_an_empty_table(lab_db, monkeypatch, tmp_path):
    dates = (dt.date(2026, 10, 12), dt.date(2026, 10, 13))
    out = tmp_path / "nodes.json"
    assert gpuledger.main(["--db", str(lab_db), "report", "reliability", "--view", "nodes", "--from",
                           "2026-10-12", "--to", "2026-10-14", "--format", "json", "--out", str(out)]) == 0
    assert not [r for r in json.loads(out.read_text()) if r["outages"] > 0]
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "reliability", f_dates=dates)
    assert "No unplanned node outage started in this window." in [c.value for c in at.caption]
    dfx.open_tables(at)
    assert not any("Outages" in el.value.columns for el in at.dataframe)


def test_one_team_filter_matches_its_cli_row(lab_db, monkeypatch, tmp_path):
    teams = _cli(lab_db, tmp_path, "losses", "--total", "--by", "team")
    top = max(teams, key=lambda r: r["lost_gpu_h"])
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "reliability", f_teams=[top["team"]], **WINDOW)
    assert dfx.metric(at, "Lost GPU-hours").value == f"{top['lost_gpu_h']:,.0f}"
    assert dfx.metric(at, "Goodput").value == f"{100 * top['goodput_share']:.1f} %"


def test_where_node_hours_stop_is_said_as_the_cli_says_it(lab_db, monkeypatch, capsys):
    """A window through the data's last day (2026-10-20; outages in it): node-hours stop at the last time
    anything of the cluster is known, and the outage table's caption names that time as `report reliability`
    does."""
    assert gpuledger.main(["--db", str(lab_db), "report", "reliability", "--view", "nodes", "--from",
                           "2026-09-21", "--to", "2026-10-21", "--format", "json"]) == 0
    note = next(line for line in capsys.readouterr().err.splitlines() if "node-hours and open outages stop" in line)
    when = note.split("before the window's end: ")[1]
    assert when.startswith("lab ") and when.endswith(" UTC")
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "reliability",
                       f_dates=(dt.date(2026, 9, 21), dt.date(2026, 10, 20)))
    assert any(f"stop at the last time anything of the cluster is known: {when}." in c.value for c in at.caption)


@pytest.fixture(scope="module")
def july_db(tmp_path_factory):
    from tests.test_reliability_summary import build_july
    return build_july(tmp_path_factory.mktemp("july") / "july.duckdb", publish=True)


def test_last_full_month_on_top_equals_the_cli_views(july_db, monkeypatch, tmp_path):
    """The top of the page (July 2026, the last full month before the data's August horizon) shows `report
    reliability --view teams` and `--view pull` (no --from/--to: the same month), whatever the sidebar dates."""
    at = dfx.open_page(dfx.app(july_db, monkeypatch), "reliability")
    assert any(h.value == "Last full month: July 2026" for h in at.subheader)

    def cli(view):
        out = tmp_path / f"{view}.json"
        assert gpuledger.main(["-q", "--db", str(july_db), "report", "reliability", "--view", view,
                               "--format", "json", "--out", str(out)]) == 0
        return json.loads(out.read_text())
    teams = cli("teams")
    shown = dfx.frame_with(at, "Team", "Failures, all causes (GPU-hours)", "Held back by slow nodes (GPU-hours)")
    assert list(shown["Team"]) == [r["team"] for r in teams] == ["research", "product"]
    for col, key in (("GPU XID (GPU-hours)", "gpu_xid_gpu_h"), ("Preemption (GPU-hours)", "preemption_gpu_h"),
                     ("Failures, all causes (GPU-hours)", "failure_gpu_h"),
                     ("Held back by slow nodes (GPU-hours)", "slow_node_held_back_gpu_h")):
        assert list(shown[col]) == pytest.approx([r[key] for r in teams])
    assert list(shown["Goodput (%)"]) == pytest.approx([100 * r["goodput_share"] for r in teams])
    pull = cli("pull")
    table = dfx.frame_with(at, "Rank", "Node", "Evidence")
    assert list(table["Node"]) == [r["node"] for r in pull] == ["n3", "n4", "n5"]
    assert list(table["Evidence"]) == [r["evidence"] for r in pull]
    assert list(table["At stake (GPU-hours)"]) == pytest.approx([r["at_stake_gpu_h"] for r in pull])
