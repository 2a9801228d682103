"""The dashboard frame under AppTest: first run, navigation, sidebar filters and freshness, every page runs."""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
import streamlit

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_db  # noqa: F401 (fixture)
from dashboards import page_shell, prewarm, server, ui
from ingest import warehouse

PAGES = ["overview", "utilization", "efficiency", "fragmentation", "fairness", "waiting", "chargeback", "forecast",
         "data_health"]


def _texts(at) -> str:
    parts = [m.value for m in at.markdown] + [x.value for x in at.info] + [x.value for x in at.warning]
    parts += [c.value for c in at.code] + [t.value for t in at.title] + [c.value for c in at.caption]
    return "\n".join(parts)


def test_no_warehouse_shows_first_run_page(monkeypatch):
    at = dfx.app(None, monkeypatch)
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Welcome to gpuledger"]
    text = _texts(at)
    assert "no warehouse at" in text and "gpuledger demo" in text and "gpuledger ingest sacct" in text


def test_warehouse_without_snapshot_says_refresh(tmp_path, monkeypatch):
    db = tmp_path / "w.duckdb"
    warehouse.connect(db).close()
    at = dfx.app(db, monkeypatch)
    at.run()
    assert not at.exception
    text = _texts(at)
    assert "gpuledger --db w.duckdb refresh" in text and str(tmp_path) not in text   # no directories to viewers


def test_empty_snapshot_offers_welcome_and_data_health(tmp_path, monkeypatch):
    db = tmp_path / "w.duckdb"
    dfx.cli(db, "refresh")                      # migrates and publishes an empty snapshot
    at = dfx.app(db, monkeypatch)
    at.run()
    assert not at.exception
    assert "holds no jobs yet" in _texts(at)
    at.switch_page("views/data_health.py").run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Data health"]


def test_sidebar_filters_and_freshness(lab_db, monkeypatch):
    at = dfx.app(lab_db, monkeypatch)
    at.run()
    assert not at.exception
    labels = {w.label for w in at.sidebar.multiselect}
    assert labels == {"Pool (GPU type)", "Partition", "Team"}        # one cluster: no cluster filter
    teams = next(w for w in at.sidebar.multiselect if w.label == "Team").options
    assert teams == ["nlp", "platform", "vision", "(unmapped)"]     # the guest account maps to no team
    pools = next(w for w in at.sidebar.multiselect if w.label == "Pool (GPU type)").options
    assert pools == ["a100", "h100"]
    dates = at.sidebar.date_input[0].value
    assert dates == (dt.date(2026, 9, 21), dt.date(2026, 10, 20))   # last 30 days of data, clipped to its start
    fresh = "\n".join(m.value for m in at.sidebar.markdown) + "\n".join(c.value for c in at.sidebar.caption)
    for source in ("sacct", "nodes", "events", "governance"):
        assert f"- {source}:" in fresh
    assert "Accounting up to **2026-10-20" in fresh


def test_window_preset_changes_the_window(lab_db, monkeypatch):
    at = dfx.app(lab_db, monkeypatch)
    at.run()
    at.sidebar.pills[0].set_value("7 days").run()
    assert not at.exception
    assert at.sidebar.date_input[0].value == (dt.date(2026, 10, 14), dt.date(2026, 10, 20))


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_without_exception(lab_db, monkeypatch, page):
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), page)
    assert at.title, f"{page} shows no title"
    # a page either shows figures or says plainly that its model has not landed; never a traceback
    shown = dfx.figures(at) or [i for i in at.info if "not available yet" in i.value]
    assert shown, f"{page} shows neither charts nor a not-landed notice"


def test_tables_are_drawn_when_opened_and_download_always(lab_db, monkeypatch):
    """A page's tables are closed sections (drawn only once opened: the browser's grid is the costliest part of a
    page, docs/BENCHMARKS.md), their CSV downloads always shown; opening one draws it, and it stays open."""
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "efficiency")
    keys = dfx.lazy_tables(at)
    assert "open_eff_team_table" in keys and not at.dataframe
    assert dfx.downloads(at).count("Download CSV") >= len(keys)
    closed = [e.label for e in at.expander]
    at.session_state["open_eff_team_table"] = True
    at.run()
    assert len(at.dataframe) == 1
    teams = at.dataframe[0].value
    assert "Team" in teams.columns and closed.count("Table") == 2       # worst offenders, by team
    at.run()               # open across reruns (across a filter change: tests/test_dashboard_browser.py)
    assert len(at.dataframe) == 1
    at.switch_page("views/overview.py").run()
    assert len(at.dataframe) == 1                                      # the overview's headline table is its content


def test_charts_are_drawn_as_built(lab_db, monkeypatch):
    """Every chart is drawn with the layout the chart builders give it, not re-themed in the browser."""
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "fragmentation")
    charts = at.get("plotly_chart")
    assert charts and all(c.proto.theme == "" for c in charts)


def test_the_chart_code_is_sent_first_to_the_event_container(lab_db, monkeypatch):
    """Before any read, the browser is told to load Streamlit's chart code (an existing file of this release),
    from the event container, so it takes no place on the page (the browser loads it: test_dashboard_browser);
    then the dashboards' CSS, without script rights (what it does to the tiles: test_dashboard_browser)."""
    at = dfx.open_page(dfx.app(lab_db, monkeypatch), "utilization")
    event = at._tree.children[2]                         # main, sidebar, event, bottom
    html = [e for e in event.children.values() if e.type == "html"]
    assert len(html) == 2 and html[0].proto.unsafe_allow_javascript
    src = re.fullmatch(r'<script type="module" src="\./(static/js/PlotlyChart\.[\w-]+\.js)"></script>',
                       html[0].proto.body).group(1)
    assert (Path(streamlit.__file__).parent / "static" / src).is_file()
    assert html[1].proto.body == ui.STYLES and not html[1].proto.unsafe_allow_javascript
    # the page's own HTML is chart titles only (ui.chart)
    assert all(e.proto.body.startswith('<div class="gl-chart-title">')
               for e in at.main.children.values() if e.type == "html")


def test_only_the_dashboards_server_warms_up_their_views_and_preloads_their_code(tmp_path):
    """Another entry script served the same way (the browser benchmark's floor) gets no warm-up of the
    dashboard's views, which would take a core while its pages draw, and Streamlit's page shell as shipped."""
    for env in (prewarm.ENV, page_shell.ENV):
        assert server.environment(tmp_path / "w.duckdb")[env] == "1"
        assert server.environment(tmp_path / "w.duckdb", app=server.APP)[env] == "1"
        assert server.environment(tmp_path / "w.duckdb", app=tmp_path / "floor.py")[env] == "0"


def test_cli_port_in_use_is_a_one_line_error(tmp_path, capsys):
    import socket

    import gpuledger
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = gpuledger.main(["--db", str(tmp_path / "w.duckdb"), "dashboard", "--port", str(port)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith(f"gpuledger: port {port} on 127.0.0.1 is in use") and "--port" in err[-1]
    assert not (tmp_path / "w.duckdb").exists()          # serving never creates (or writes) a warehouse
