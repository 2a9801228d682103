"""Chart builders: plain functions from a table (Polars DataFrame) to a plotly Figure.

No Streamlit and no data access here, so every chart can be tested without a browser. Every builder names
its axes with units; series colours come from the caller's colour map (dashboards.theme), so a team or pool
has one colour across pages.
"""
from __future__ import annotations

import math
from typing import Sequence

import plotly.graph_objects as go
import polars as pl

from dashboards import theme
from models.definitions.labels import SIZE_CLASSES


def _series(df: pl.DataFrame, color: str | None, order: Sequence[str] | None = None
            ) -> list[tuple[str | None, pl.DataFrame]]:
    """One frame per ``color`` value, in ``order`` (e.g. the colour map's order) then sorted."""
    if color is None:
        return [(None, df)]
    keys = df.get_column(color).fill_null(theme.UNMAPPED).cast(pl.String)
    df = df.with_columns(keys.alias("__key"))
    present = set(df["__key"].unique().to_list())
    first = [k for k in (order or []) if k in present]
    rest = _ordered(present - set(first))
    return [(k, df.filter(pl.col("__key") == k)) for k in first + rest]


def _ordered(values) -> list:
    """Distinct category values sorted: request-size classes in their defined order (labels.SIZE_CLASSES: 1,
    2-4, 5-8, 9-16, ...), never alphabetically (1, 2-4, 33+, 5-8); anything else as text sorts."""
    present = [v for v in dict.fromkeys(values) if v is not None]
    if present and all(str(v) in SIZE_CLASSES for v in present):
        return sorted(present, key=lambda v: SIZE_CLASSES.index(str(v)))
    return sorted(present)


# ---------------------------------------------------------------- what a screen can show
# A chart gets at most the points its pixels can show: a full-width chart is ~1,300 px wide, so more than one
# point (or bar) per two pixels is drawn for nobody, yet each point is sent, parsed and laid out by the browser.

#: Most buckets (x positions) a time chart is drawn with.
MAX_POINTS = 600
#: Most categories a chart stacks or lists; the rest are summed into one :data:`OTHER` category.
MAX_CATEGORIES = 12
OTHER = "(other)"
OTHER_COLOUR = "#C5CCD3"      # light grey: no team or pool has it
BUCKET_HOURS = {"hour": 1, "day": 24, "week": 24 * 7, "month": 24 * 30}


def fit_bucket(bucket: str, days: int, max_points: int = MAX_POINTS) -> str:
    """The finest bucket, ``bucket`` or coarser (hour < day < week < month), that draws a window of ``days``
    days in at most ``max_points`` buckets (month when none does)."""
    order = list(BUCKET_HOURS)
    for b in order[order.index(bucket):]:
        if days * 24 / BUCKET_HOURS[b] <= max_points:
            return b
    return "month"


def top_categories(df: pl.DataFrame, category: str, values: Sequence[str], n: int = MAX_CATEGORIES,
                   by: Sequence[str] = (), other: str = OTHER) -> pl.DataFrame:
    """At most ``n`` categories: the ``n - 1`` largest by their total of ``values[0]``, every other one summed
    into ``other`` (per ``by`` key, e.g. the bucket), so every total over the categories is unchanged.
    ``values`` must be additive (GPU-hours, amounts, counts)."""
    cats = df.get_column(category).n_unique()
    if cats <= n:
        return df
    keep = (df.group_by(category).agg(pl.col(values[0]).sum()).sort([values[0], category], descending=[True, False])
            .head(n - 1)[category].to_list())
    named = pl.col(category).is_in(keep)
    rest = (df.filter(~named).group_by(list(by), maintain_order=True).agg([pl.col(v).sum() for v in values])
            .with_columns(pl.lit(other).cast(df.schema[category]).alias(category)))
    return pl.concat([df.filter(named).select(*by, category, *values), rest.select(*by, category, *values)])


#: More legend entries than this go in a column on the right instead of a row above the plot.
LEGEND_ROW_MAX = 6


#: A horizontal axis title longer than this is set on two lines: plotly draws it as one SVG line centred on the
#: plot, cut at the figure's edge in a half-width chart on a laptop ("Usage share / entitlement s" at 1024 px).
AXIS_TITLE_CHARS = 20


def axis_title(text: str | None) -> str | None:
    """``text`` broken at the space nearest its middle when longer than AXIS_TITLE_CHARS (plotly's ``<br>``)."""
    if not text or len(text) <= AXIS_TITLE_CHARS or " " not in text:
        return text
    cut = min((i for i, c in enumerate(text) if c == " "), key=lambda i: abs(i - len(text) / 2))
    return f"{text[:cut]}<br>{text[cut + 1:]}"


def _finish(fig: go.Figure, title: str | None, x_title: str | None, y_title: str,
            height: int = 380, y_format: str | None = None) -> go.Figure:
    fig.update_layout(**theme.plotly_layout(height))
    fig.update_layout(title_text=title or None)
    names = [t.name for t in fig.data if t.showlegend is not False and t.name]
    if len(names) > LEGEND_ROW_MAX:
        fig.update_layout(legend=dict(orientation="v", yanchor="top", y=1, xanchor="left", x=1.02),
                          margin=dict(t=56, r=10))
    else:
        # A legend row wraps in a half-width chart (~60 characters at 1400 px): make room for every row.
        rows = max(1, math.ceil(sum(len(n) + 6 for n in names) / 60))
        fig.update_layout(margin=dict(t=62 + 22 * rows))
    fig.update_xaxes(title_text=axis_title(x_title))
    fig.update_yaxes(title_text=y_title, tickformat=y_format)
    return fig


def mark_partial(fig: go.Figure, x, text: str) -> go.Figure:
    """A dotted line at ``x`` labelled ``text``: the bucket starting there holds only part of its time (the data
    ends inside it), so its GPU-hours drop without anything having dropped. (A shape and an annotation: plotly's
    add_vline cannot label a date axis.)"""
    fig.add_shape(type="line", x0=x, x1=x, xref="x", y0=0, y1=1, yref="paper",
                  line=dict(dash="dot", color="#6B7785", width=1))
    fig.add_annotation(x=x, y=1, xref="x", yref="paper", text=text, showarrow=False, xanchor="right",
                       yanchor="bottom", font=dict(size=11, color="#6B7785"))
    return fig


def stacked_area(df: pl.DataFrame, x: str, y: str, color: str, colours: dict[str, str], *,
                 y_title: str, x_title: str | None = None, title: str | None = None,
                 order: Sequence[str] | None = None, names: dict[str, str] | None = None) -> go.Figure:
    """Areas stacked per ``color`` value (e.g. allocated / idle / unavailable GPU-hours per day)."""
    fig = go.Figure()
    groups = dict(_series(df.sort(x), color))
    keys = [k for k in (order or groups) if k in groups]
    for k in keys:
        g = groups[k]
        fig.add_trace(go.Scatter(
            x=g[x].to_list(), y=g[y].to_list(), name=(names or {}).get(k, k), stackgroup="one", mode="lines",
            line=dict(width=0.5, color=colours.get(k)), fillcolor=colours.get(k),
            hovertemplate="%{y:,.1f}"))
    return _finish(fig, title, x_title, y_title)


def bars(df: pl.DataFrame, x: str, y: str, *, color: str | None = None, colours: dict[str, str] | None = None,
         y_title: str, x_title: str | None = None, title: str | None = None, horizontal: bool = False,
         barmode: str = "stack", y_format: str | None = None, height: int = 380,
         single_colour: str = theme.PRIMARY, names: dict[str, str] | None = None,
         reference: float | None = None, reference_text: str | None = None,
         category_order: Sequence | None = None) -> go.Figure:
    """Bars of ``y`` by ``x`` (stacked or grouped per ``color``); horizontal puts categories on the y axis
    (first category on top). Text categories stay categories ("2", "4", "8" GPUs are not a number line);
    ``category_order`` fixes their order. ``reference`` draws a labelled line (e.g. a share ratio of 1)."""
    fig = go.Figure()
    for k, g in _series(df, color, list(colours or {})):
        cats, vals = g[x].to_list(), g[y].to_list()
        c = (colours or {}).get(k, single_colour) if k is not None else single_colour
        fig.add_trace(go.Bar(
            x=vals if horizontal else cats, y=cats if horizontal else vals, name=(names or {}).get(k, k) if k else y_title,
            orientation="h" if horizontal else "v", marker_color=c, showlegend=k is not None,
            hovertemplate="%{x:,.4~g}<extra></extra>" if horizontal else "%{y:,.4~g}"))
    fig.update_layout(barmode=barmode)
    if reference is not None:
        line = dict(line_dash="dot", line_color="#6B7785", annotation_text=reference_text,
                    annotation_position="top right")
        fig.add_vline(x=reference, **line) if horizontal else fig.add_hline(y=reference, **line)
    if category_order is None and (df[x].dtype in (pl.String, pl.Categorical) or isinstance(df[x].dtype, pl.Enum)):
        sized = _ordered(df[x].cast(pl.String).to_list())   # size classes keep their order, whatever the rows'
        category_order = sized if sized and all(v in SIZE_CLASSES for v in sized) else None
    cats = dict(type="category", categoryorder="array", categoryarray=list(category_order)) \
        if category_order is not None else (dict(type="category") if df[x].dtype == pl.String else {})
    (fig.update_yaxes if horizontal else fig.update_xaxes)(**cats)
    if horizontal:
        fig = _finish(fig, title, y_title, x_title or "", height=height)
        fig.update_xaxes(title_text=axis_title(y_title), tickformat=y_format, showgrid=True, gridcolor="#EEF1F4")
        fig.update_yaxes(title_text=x_title, autorange="reversed", showgrid=False)
        fig.update_layout(hovermode="closest")
        return fig
    return _finish(fig, title, x_title, y_title, height=height, y_format=y_format)


def lines(df: pl.DataFrame, x: str, y: str, *, color: str | None = None, colours: dict[str, str] | None = None,
          y_title: str, x_title: str | None = None, title: str | None = None, y_format: str | None = None,
          markers: bool = False, height: int = 380, names: dict[str, str] | None = None,
          hline: float | None = None, hline_text: str | None = None) -> go.Figure:
    """One line per ``color`` value; ``hline`` draws a labelled reference (e.g. a target or capacity)."""
    fig = go.Figure()
    for k, g in _series(df.sort(x), color, list(colours or {})):
        c = (colours or {}).get(k, theme.PRIMARY) if k is not None else theme.PRIMARY
        fig.add_trace(go.Scatter(x=g[x].to_list(), y=g[y].to_list(), name=(names or {}).get(k, k) if k else y_title,
                                 mode="lines+markers" if markers else "lines", line=dict(color=c, width=2),
                                 showlegend=k is not None))
    if hline is not None:
        fig.add_hline(y=hline, line_dash="dot", line_color="#6B7785",
                      annotation_text=hline_text, annotation_position="top left")
    return _finish(fig, title, x_title, y_title, height=height, y_format=y_format)


def forecast_band(history: pl.DataFrame, forecast: pl.DataFrame, *, x: str, y: str, mean: str,
                  lo80: str | None, hi80: str | None, lo95: str | None, hi95: str | None, colour: str,
                  y_title: str, title: str | None = None, capacity: pl.DataFrame | None = None,
                  capacity_col: str | None = None, exhaustion: object | None = None,
                  height: int = 380) -> go.Figure:
    """Observed history, the point forecast and its 80 %/95 % bands, with capacity and an exhaustion marker."""
    fig = go.Figure()
    fx = forecast[x].to_list()
    for lo, hi, alpha, name in ((lo95, hi95, 0.14, "95 % interval"), (lo80, hi80, 0.26, "80 % interval")):
        if lo and hi and lo in forecast.columns and hi in forecast.columns:
            fig.add_trace(go.Scatter(x=fx + fx[::-1], y=forecast[hi].to_list() + forecast[lo].to_list()[::-1],
                                     fill="toself", fillcolor=_rgba(colour, alpha), line=dict(width=0),
                                     name=name, hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=history[x].to_list(), y=history[y].to_list(), name="Observed", mode="lines",
                             line=dict(color="#3E4C59", width=1.5)))
    fig.add_trace(go.Scatter(x=fx, y=forecast[mean].to_list(), name="Forecast", mode="lines",
                             line=dict(color=colour, width=2.5, dash="dash")))
    if capacity is not None and capacity_col and capacity.height:
        fig.add_trace(go.Scatter(x=capacity[x].to_list(), y=capacity[capacity_col].to_list(), name="Usable capacity",
                                 mode="lines", line=dict(color=theme.BAD, width=1.5, dash="dot", shape="hv")))
    if exhaustion is not None:
        fig.add_vline(x=exhaustion, line_color=theme.BAD, line_width=1)
        fig.add_annotation(x=exhaustion, y=0, yref="paper", text=" capacity reached", showarrow=False,
                           font=dict(color=theme.BAD, size=12), xanchor="left", yanchor="bottom",
                           bgcolor="rgba(255,255,255,0.8)")
    return _finish(fig, title, None, y_title, height=height)


def heatmap(df: pl.DataFrame, x: str, y: str, z: str, *, z_title: str, x_title: str | None = None,
            y_title: str | None = None, title: str | None = None, colorscale: str = "Blues",
            x_order: Sequence | None = None, y_order: Sequence | None = None, height: int = 380,
            z_format: str = ",.1f", top_down: bool = False,
            z_range: tuple[float, float] | None = None) -> go.Figure:
    """A ``y`` x ``x`` grid coloured by ``z`` (e.g. nodes with k free GPUs per day, or p95 wait per team x size).
    ``z_range``: the values the colour scale spans (a share: 0 to 100), so that a grid of one value keeps its
    colour's meaning (without it, all-zero coverage was drawn in the scale's middle)."""
    xs = list(x_order) if x_order is not None else _ordered(df[x].to_list())
    ys = list(y_order) if y_order is not None else _ordered(df[y].to_list())
    lookup = {(r[0], r[1]): r[2] for r in df.select(x, y, z).iter_rows()}
    grid = [[lookup.get((xv, yv)) for xv in xs] for yv in ys]
    lo, hi = z_range if z_range is not None else (None, None)
    fig = go.Figure(go.Heatmap(x=xs, y=ys, z=grid, colorscale=colorscale, colorbar=dict(title=dict(text=z_title)),
                               zmin=lo, zmax=hi,
                               hovertemplate=f"%{{y}} · %{{x}}: %{{z:{z_format}}}<extra></extra>",
                               texttemplate=f"%{{z:{z_format}}}" if len(xs) * len(ys) <= 60 else None))
    fig = _finish(fig, title, x_title, y_title or "", height=height)
    fig.update_yaxes(type="category", showgrid=False, autorange="reversed" if top_down else True)
    fig.update_layout(hovermode="closest")
    return fig


def scatter(df: pl.DataFrame, x: str, y: str, *, color: str | None = None, colours: dict[str, str] | None = None,
            size: str | None = None, text: str | None = None, x_title: str, y_title: str,
            title: str | None = None, diagonal: bool = False, height: int = 380,
            x_format: str | None = None, y_format: str | None = None) -> go.Figure:
    """Points per row (e.g. usage share vs entitlement share per team); ``diagonal`` draws y = x."""
    fig = go.Figure()
    for k, g in _series(df, color, list(colours or {})):
        c = (colours or {}).get(k, theme.PRIMARY) if k is not None else theme.PRIMARY
        sz = None
        if size:
            vals = g[size].fill_null(0).to_list()
            top = max(df[size].fill_null(0).max() or 1, 1e-9)
            sz = [8 + 30 * (v / top) ** 0.5 for v in vals]
        fig.add_trace(go.Scatter(x=g[x].to_list(), y=g[y].to_list(), name=k, mode="markers+text" if text else "markers",
                                 text=g[text].to_list() if text else None, textposition="top center",
                                 marker=dict(color=c, size=sz or 11, line=dict(width=1, color="white")),
                                 showlegend=k is not None))
    if diagonal and df.height:
        hi = max(df[x].max() or 0, df[y].max() or 0) * 1.08 or 1
        fig.add_trace(go.Scatter(x=[0, hi], y=[0, hi], mode="lines", name="equal share",
                                 line=dict(color="#9AA5B1", dash="dot", width=1), hoverinfo="skip"))
    fig = _finish(fig, title, x_title, y_title, height=height, y_format=y_format)
    fig.update_xaxes(tickformat=x_format, showgrid=True, gridcolor="#EEF1F4", rangemode="tozero")
    fig.update_layout(hovermode="closest")
    return fig


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"
