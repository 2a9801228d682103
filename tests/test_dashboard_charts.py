"""Chart builders, filters and theme: plain functions, tested without a browser."""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboards import charts, theme
from dashboards.filters import Filters, default_window
from models.definitions.reasons import CLASSES

DAYS = [dt.datetime(2026, 10, d) for d in (1, 2, 3)]


def test_stacked_area_keeps_order_units_and_colours():
    df = pl.DataFrame({"bucket": DAYS * 2, "state": ["Idle"] * 3 + ["Allocated"] * 3,
                       "gpu_h": [10.0, 20.0, 30.0, 1.0, 2.0, 3.0]})
    fig = charts.stacked_area(df, "bucket", "gpu_h", "state", {"Allocated": "#111111", "Idle": "#222222"},
                              order=["Allocated", "Idle"], y_title="GPU-hours per day", title="t")
    assert [t.name for t in fig.data] == ["Allocated", "Idle"]
    assert fig.data[0].line.color == "#111111" and list(fig.data[1].y) == [10.0, 20.0, 30.0]
    assert fig.layout.yaxis.title.text == "GPU-hours per day"


def test_a_partial_bucket_is_marked_by_a_dotted_line_and_its_label():
    df = pl.DataFrame({"d": [dt.datetime(2026, 7, 5), dt.datetime(2026, 7, 6)], "v": [10.0, 3.0], "s": ["a", "a"]})
    fig = charts.mark_partial(charts.stacked_area(df, "d", "v", "s", {"a": "#000"}, y_title="GPU-hours per day"),
                              dt.datetime(2026, 7, 6), "partial day: 6.7 of 24 h")
    (line,), (label,) = fig.layout.shapes, [a for a in fig.layout.annotations if a.text.startswith("partial")]
    assert (line.x0, line.x1, line.yref, line.line.dash) == (dt.datetime(2026, 7, 6), dt.datetime(2026, 7, 6),
                                                            "paper", "dot")
    assert (label.x, label.text) == (dt.datetime(2026, 7, 6), "partial day: 6.7 of 24 h")


def test_bars_follow_the_colour_maps_order_and_long_legends_move_right():
    teams = [f"t{i:02d}" for i in range(9)]
    colours = theme.team_colours(teams)
    df = pl.DataFrame({"day": [DAYS[0]] * 9, "team": list(reversed(teams)), "v": list(range(9))}).cast({"v": pl.Float64})
    fig = charts.bars(df, "day", "v", color="team", colours=colours, y_title="GPU-hours")
    assert [t.name for t in fig.data] == teams                     # colour-map order, not data order
    assert all(t.marker.color == colours[t.name] for t in fig.data)
    assert fig.layout.legend.orientation == "v"                    # 9 entries: a column on the right
    few = charts.bars(df.head(3), "day", "v", color="team", colours=colours, y_title="GPU-hours")
    assert few.layout.legend.orientation == "h"


def test_horizontal_bars_put_units_on_the_value_axis_and_draw_a_reference():
    df = pl.DataFrame({"team": ["a", "b"], "ratio": [0.5, 1.5]})
    fig = charts.bars(df, "team", "ratio", horizontal=True, y_title="Usage share / entitlement share",
                      x_title="Team", reference=1.0, reference_text="fair")
    assert fig.layout.xaxis.title.text == "Usage share /<br>entitlement share"   # two lines: see below
    assert fig.layout.yaxis.title.text == "Team"
    assert any(s.x0 == 1.0 for s in fig.layout.shapes)


def test_a_long_horizontal_axis_title_is_set_on_two_lines_at_the_space_nearest_its_middle():
    """plotly draws an axis title as one line centred on the plot: in a half-width chart on a 1024-pixel screen
    "Usage share / entitlement share" was cut to "Usage share / entitlement s" (tests/test_dashboard_browser.py)."""
    assert charts.axis_title("Queue wait (GPU-hours)") == "Queue wait<br>(GPU-hours)"
    assert charts.axis_title("Request size (GPUs)") == "Request size (GPUs)"          # 19 characters: one line
    assert charts.axis_title("Share of GPU-hours (%)") == "Share of<br>GPU-hours (%)"
    assert charts.axis_title("arrived_GPU_demand_of_capacity") == "arrived_GPU_demand_of_capacity"   # no space
    assert charts.axis_title(None) is None and charts.axis_title("") == ""
    fig = charts.bars(pl.DataFrame({"k": ["a"], "v": [1.0]}), "k", "v", y_title="GPU-hours",
                      x_title="Requested GPUs per job (count)")
    assert fig.layout.xaxis.title.text == "Requested GPUs<br>per job (count)"
    assert fig.layout.yaxis.title.text == "GPU-hours"


def test_forecast_band_draws_intervals_capacity_and_exhaustion():
    hist = pl.DataFrame({"ts": DAYS, "value": [1.0, 2.0, 3.0]})
    fc = pl.DataFrame({"ts": [dt.datetime(2026, 10, 4)], "forecast": [4.0], "lo80": [3.0], "hi80": [5.0],
                       "lo95": [2.0], "hi95": [6.0]})
    cap = pl.DataFrame({"ts": [DAYS[0], dt.datetime(2026, 10, 4)], "cap": [4.5, 4.5]})
    fig = charts.forecast_band(hist, fc, x="ts", y="value", mean="forecast", lo80="lo80", hi80="hi80", lo95="lo95",
                               hi95="hi95", colour="#5B3CC4", y_title="GPU-hours per day", capacity=cap,
                               capacity_col="cap", exhaustion=dt.datetime(2026, 10, 4))
    assert [t.name for t in fig.data] == ["95 % interval", "80 % interval", "Observed", "Forecast", "Usable capacity"]
    assert list(fig.data[1].y) == [5.0, 3.0]                       # the band: upper bound out, lower bound back
    assert fig.layout.annotations[0].text.strip() == "capacity reached"


def test_heatmap_grid_and_missing_cells():
    df = pl.DataFrame({"size": ["1", "8"], "team": ["a", "b"], "p95": [1.5, 9.0]})
    fig = charts.heatmap(df, "size", "team", "p95", z_title="p95 wait (h)", x_order=["1", "8"])
    assert [list(r) for r in fig.data[0].z] == [[1.5, None], [None, 9.0]]
    assert (fig.data[0].zmin, fig.data[0].zmax) == (None, None)      # the data's own range


def test_a_share_heatmap_keeps_its_scale_when_every_cell_is_zero():
    """Telemetry coverage of 0 % everywhere (a trace without telemetry) is the red end of 0-100 %, not the
    middle of a degenerate -0.5..0.5 scale (it was drawn yellow, "half covered")."""
    df = pl.DataFrame({"day": ["2023-05-01", "2023-05-02"], "pool": ["t4", "t4"], "coverage": [0.0, 0.0]})
    fig = charts.heatmap(df, "day", "pool", "coverage", z_title="Coverage (%)", colorscale="RdYlGn", z_range=(0, 100))
    assert (fig.data[0].zmin, fig.data[0].zmax) == (0, 100)


def test_colours_are_stable_per_team_and_pool():
    a = theme.team_colours(["vision", "nlp", None])
    b = theme.team_colours(["nlp", "vision", "platform"])
    assert a["nlp"] == theme.PALETTE[0] and a[theme.UNMAPPED] == theme.UNMAPPED_COLOUR
    assert b["nlp"] == a["nlp"]                                    # sorted names: the same map from any order
    pools = theme.pool_colours(["H100", "a100", "mi300x"])
    assert pools["H100"] == theme.POOL_COLOURS["h100"] and pools["a100"] == theme.POOL_COLOURS["a100"]
    assert pools["mi300x"] == theme.POOL_FALLBACK[0]
    # one colour per pending-reason class, the unknown one grey
    assert len(set(theme.REASON_COLOURS.values())) == len(theme.REASON_COLOURS) == len(CLASSES)
    assert theme.REASON_COLOURS["unknown"] == theme.UNMAPPED_COLOUR


@pytest.mark.parametrize("col,label", [("allocated_gpu_h", "Allocated (GPU-hours)"), ("idle_gpu_hours", "Idle (GPU-hours)"),
                                       ("coverage_pct", "Coverage (%)"), ("wait_s", "Wait (s)"), ("team", "Team"),
                                       ("energy_kwh", "Energy (kWh)"), ("free_gpus", "Free (GPUs)")])
def test_labels_carry_units_and_hide_raw_names(col, label):
    assert theme.label(col) == label
    assert theme.label("direct_cost", currency="EUR") == "Direct cost (EUR)"


def test_filters_window_previous_and_describe():
    f = Filters(dt.date(2026, 10, 6), dt.date(2026, 10, 20), pools=("h100",), teams=("nlp", theme.UNMAPPED))
    assert (f.t0, f.t1, f.days) == (dt.datetime(2026, 10, 6), dt.datetime(2026, 10, 20), 14)
    assert (f.previous().start, f.previous().end) == (dt.date(2026, 9, 22), dt.date(2026, 10, 6))
    assert f.describe() == "2026-10-06 to 2026-10-19 (UTC); pool: h100; team: nlp, (unmapped)"
    assert default_window(dt.date(2026, 10, 1), dt.date(2026, 10, 20)) == (dt.date(2026, 10, 1), dt.date(2026, 10, 20))
    assert default_window(dt.date(2026, 1, 1), dt.date(2026, 10, 20)) == (dt.date(2026, 9, 21), dt.date(2026, 10, 20))


def test_filters_apply_keeps_matching_rows_and_unmapped():
    df = pl.DataFrame({"gpu_type": ["h100", "a100", "h100", "h100"], "team": ["nlp", "nlp", None, "vision"], "v": [1, 2, 3, 4]})
    f = Filters(dt.date(2026, 1, 1), dt.date(2026, 1, 2), pools=("h100",), teams=("nlp", theme.UNMAPPED))
    assert f.apply(df)["v"].to_list() == [1, 3]
    assert f.apply(df, skip=("teams",))["v"].to_list() == [1, 3, 4]
    assert Filters(dt.date(2026, 1, 1), dt.date(2026, 1, 2), partitions=("gpu",)).apply(df).height == 4  # no column


@given(st.lists(st.sampled_from(["a", "b", "c", None]), max_size=30),
       st.sets(st.sampled_from(["a", "b", "c", theme.UNMAPPED])))
def test_filters_apply_is_a_partition_of_rows(teams, chosen):
    """Rows kept by a team filter plus rows kept by its complement are all rows, each once."""
    df = pl.DataFrame({"team": teams, "i": list(range(len(teams)))}, schema={"team": pl.String, "i": pl.Int64})
    everyone = {"a", "b", "c", theme.UNMAPPED}
    if not chosen or chosen == everyone:
        return
    f = Filters(dt.date(2026, 1, 1), dt.date(2026, 1, 2), teams=tuple(sorted(chosen)))
    g = Filters(dt.date(2026, 1, 1), dt.date(2026, 1, 2), teams=tuple(sorted(everyone - chosen)))
    kept = f.apply(df)["i"].to_list() + g.apply(df)["i"].to_list()
    assert sorted(kept) == list(range(len(teams)))
