"""Page furniture shared by every page: the page context, headers, KPI tiles, tables with CSV download, and
what a page says when a model cannot compute on this snapshot (never invented numbers).

A failure is shown to viewers as one line and a short reference; the traceback (which names source paths and
may quote data) goes only to the server's log, under the same reference, for the administrator.
"""
from __future__ import annotations

import datetime as dt
import html
import logging
import re
import secrets
import sys
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb
import polars as pl
import streamlit as st

from dashboards import exports, page_shell, theme
from dashboards.filters import Filters
from dashboards.queries import Catalogue
from models.definitions.times import bucket_hours

_CTX_KEY = "_gpuledger_ctx"

#: Failures the viewer is told about by reference; the server's stderr (its log) gets the traceback.
log = logging.getLogger("gpuledger.dashboard")
if not log.handlers:          # Streamlit configures only its own loggers: give ours a line format of its own
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s gpuledger dashboard %(levelname)s: %(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.INFO)
    log.propagate = False


@dataclass(frozen=True)
class Context:
    """What a page needs: the snapshot version (cache key), what it holds, and the global filters."""
    version: str
    cat: Catalogue
    filters: Filters
    currency: str | None = None

    @property
    def team_colours(self) -> dict[str, str]:
        return theme.team_colours(list(self.cat.all_teams))

    @property
    def pool_colours(self) -> dict[str, str]:
        return theme.pool_colours(list(self.cat.pools))


def set_context(ctx: Context) -> None:
    st.session_state[_CTX_KEY] = ctx


def context() -> Context:
    """The context the entry script (app.py) set for this run."""
    ctx = st.session_state.get(_CTX_KEY)
    if ctx is None:
        st.error("Open the dashboard through its entry page (dashboards/app.py).")
        st.stop()
    return ctx


def header(title: str, question: str, ctx: Context, deltas: bool = True) -> None:
    """Title, the question the page answers, and the filters in force (and what KPI changes compare with)."""
    st.title(title)
    st.markdown(f"**{question}**")
    f = ctx.filters
    prev = f.previous()
    against = f" · changes against the previous {f.days} days ({prev.span_text()})" if deltas else ""
    st.caption(f.describe() + against)


FAILED_TEXT = "could not be computed"


def reference() -> str:
    """A short random id that ties what a viewer sees to the server log's entry (8 hex digits)."""
    return secrets.token_hex(4)


def log_failure(what: str, exc: BaseException) -> str:
    """Log ``exc`` with its traceback under a new reference, for the administrator; returns the reference."""
    ref = reference()
    log.error("reference %s: %s failed", ref, what, exc_info=exc)
    return ref


def page_failed(title: str, exc: Exception) -> None:
    """A model raised on this snapshot: one clear line and a reference for the viewer; the traceback is in the
    server log under that reference (never on the page: it names source paths and may quote data)."""
    ref = log_failure(f"page {title!r}", exc)
    hint = ""
    if isinstance(exc, duckdb.CatalogException):   # a mart this version reads is missing from the snapshot
        hint = (" If gpuledger was upgraded since the last ingest, `gpuledger refresh` rebuilds the marts and "
                "republishes the snapshot.")
    st.error(f"**{title} {FAILED_TEXT}** from this snapshot. Reference `{ref}`: the administrator finds the "
             f"details in the dashboard server's log under it." + hint, icon=":material/error:")


@contextmanager
def guarded(col, label: str):
    """Run one tile's computation; if its model raises on this snapshot, that tile says so (with a reference
    to the server log's entry) and the rest of the page still renders."""
    try:
        yield
    except Exception as exc:
        ref = log_failure(f"tile {label!r}", exc)
        col.metric(label, "—")
        col.caption(f":red[{FAILED_TEXT}] (reference `{ref}`)")


def no_data(what: str, hint: str | None = None) -> None:
    st.info(f"No {what} for these filters." + (f" {hint}" if hint else ""), icon=":material/filter_alt_off:")


def present(df: pl.DataFrame, columns: dict[str, str] | None = None, currency: str | None = None) -> pl.DataFrame:
    """Rename to human labels (``columns`` overrides, else theme.label) and keep only the named columns."""
    if columns is not None:
        df = df.select([c for c in columns if c in df.columns])
    return df.rename({c: (columns or {}).get(c) or theme.label(c, currency) for c in df.columns})


def table_csv(df: pl.DataFrame, columns: dict[str, str] | None = None, currency: str | None = None) -> bytes:
    """The bytes of a table's CSV download: the labelled columns shown, text cells neutralised against formula
    injection (exports.csv_bytes, the one rule for every file that leaves the product)."""
    return exports.csv_bytes(present(df, columns, currency))


def table(df: pl.DataFrame, *, key: str, file_stem: str, ctx: Context, columns: dict[str, str] | None = None,
          formats: dict[str, str] | None = None, height: int | str = "auto", caption: str | None = None,
          links: dict[str, str] | None = None, label: str | None = None, lazy: bool = True) -> None:
    """The table beneath a chart, and a CSV download of exactly what is shown (same rows, same labels).
    ``links``: columns holding URLs (relative ones resolve against the page's), shown as links with the text
    given (a LinkColumn ``display_text``).

    ``lazy`` (the default): the table is drawn only once the viewer opens it, a collapsed section labelled
    ``label`` (default "Table") whose opening reruns the page (cached reads: a fraction of a second); the
    CSV download and the caption are always shown. Why: a page's tables cost the browser 0.2-0.5 s to draw,
    as much as all its charts, and Streamlit mounts a table's grid even inside a closed expander
    (docs/BENCHMARKS.md, 2026-12-05 evening). The open state is per session, so a table stays open while the
    viewer changes filters, as long as its label does not change: Streamlit 1.67 counts an expander's label in its
    identity, so the default label carries no row count. ``lazy=False``: a page's main content, drawn at once."""
    if lazy:
        box = st.expander(label or "Table", key=f"open_{key}", on_change="rerun", icon=":material/table:")
        if box.open:
            with box:
                _grid(df, key, ctx, columns, formats, height, links)
    else:
        _grid(df, key, ctx, columns, formats, height, links)
    # One row that wraps: the button keeps its width (in a half-width column a fixed fifth of the row cut its
    # label to "Do..."), the caption takes the rest, and the button goes beneath it when both do not fit.
    row = st.container(horizontal=True, horizontal_alignment="right", vertical_alignment="center")
    if caption:
        row.caption(caption, width="stretch")
    # A callable: the file is written when someone clicks, not on every page view.
    row.download_button("Download CSV", data=lambda: table_csv(df, columns, ctx.currency),
                        file_name=f"{file_stem}_{ctx.filters.slug()}.csv",
                        mime="text/csv", key=f"dl_{key}", icon=":material/download:", on_click="ignore",
                        width="content")


def _grid(df: pl.DataFrame, key: str, ctx: Context, columns: dict[str, str] | None, formats: dict[str, str] | None,
          height: int | str, links: dict[str, str] | None) -> None:
    """The interactive table (Streamlit's data grid) of :func:`table`, with the page's labels and formats."""
    shown = present(df, columns, ctx.currency)
    config = {}
    for raw, fmt in (formats or {}).items():
        lab = (columns or {}).get(raw) or theme.label(raw, ctx.currency)
        if lab in shown.columns:
            config[lab] = st.column_config.NumberColumn(format=fmt)
    for raw, text in (links or {}).items():
        lab = (columns or {}).get(raw) or theme.label(raw, ctx.currency)
        if lab in shown.columns:
            config[lab] = st.column_config.LinkColumn(display_text=text)
    st.dataframe(shown, hide_index=True, column_config=config or None, height=height, key=f"tbl_{key}")


def chart(where, fig, *, key: str) -> None:
    """Draw a plotly figure in ``where`` (``st`` or a column). ``theme=None``: the figure is drawn as built
    (dashboards.theme.plotly_layout over Streamlit's plotly template, which Streamlit makes the default), not
    re-themed in the browser, which costs each page 0.05-0.2 s (docs/BENCHMARKS.md, 2026-12-05 evening).

    The figure's title is drawn above it as HTML, which wraps: a plotly title is one SVG line, cut at the chart's
    edge in a half-width column on a laptop ("Free GPUs a request of eac" at 1024 px). The figure itself keeps
    its title (PDF and image exports draw it): it is taken out only while the chart is sent."""
    title, top = fig.layout.title.text, fig.layout.margin.t
    if not title:
        where.plotly_chart(fig, key=key, theme=None)
        return
    where.html(f'<div class="gl-chart-title">{html.escape(title)}</div>')
    fig.layout.title.text, fig.layout.margin.t = None, max(10, (top or 0) - CHART_TITLE_PX)
    try:
        where.plotly_chart(fig, key=key, theme=None)
    finally:   # the figure may be a cached object that other reruns draw again
        fig.layout.title.text, fig.layout.margin.t = title, top


#: Streamlit's chart code (plotly.js inside, 4.7 MB): a content-hashed chunk of its frontend, found once per
#: process; None if a Streamlit release renames it.
CHART_CHUNK: str | None = page_shell.chunk("PlotlyChart")


def load_chart_code() -> None:
    """Have the browser load and evaluate Streamlit's chart code now, while this run's reads compute.

    The browser otherwise fetches and evaluates it only when the first chart arrives; on a first visit after a
    server start the script runs about 1 s while the browser is idle, and such visits now draw 0.04-0.44 s
    sooner (docs/BENCHMARKS.md, 2026-12-05 20:50). A module script of the same URL the app imports is evaluated
    once and shared, so the charts then find it ready. Sent to the event container (where Streamlit puts
    style-only HTML): no space in the layout. Same-origin and not inline: the nginx site's
    Content-Security-Policy allows it. The dashboard's page shell has the browser fetch this chunk, and the HTML
    element's own, before the run starts (dashboards/page_shell.py), so the evaluation starts with the run."""
    event = getattr(st, "_event", None)    # Streamlit's event container (its toasts'); tests/test_dashboard_app.py
    if CHART_CHUNK is not None and event is not None:   # fails if a release drops either: pages still draw
        event.html(f'<script type="module" src="./static/js/{CHART_CHUNK}"></script>', unsafe_allow_javascript=True)


#: the height a plotly title takes at the top of a figure (theme.plotly_layout: 12 px pad, a 15 px line)
CHART_TITLE_PX = 30

#: The dashboards' only CSS. KPI tiles: five in a row are 100-170 pixels wide on a 1024-1366 pixel screen, where
#: Streamlit cut the values to "91,5…", the labels to "Charged to…" and the changes to "23 started a…". The
#: value's type shrinks with its tile (20 % of the tile's width fits ten characters, up to Streamlit's 2.25rem),
#: a label's too (to 0.75rem: "Fragmentation" had been broken as "Fragmentati/on"), and values, labels and
#: changes wrap at spaces, never inside a word. Chart titles (ui.chart) look like plotly's and wrap.
STYLES = """<style>
[data-testid="stMetric"] { container-type: inline-size; }
[data-testid="stMetricValue"] { font-size: clamp(1.25rem, 20cqi, 2.25rem); }
[data-testid="stMetricLabel"] p { font-size: clamp(0.75rem, 11cqi, 0.875rem); }
[data-testid="stMetricValue"] :is(div, p), [data-testid="stMetricLabel"] p,
[data-testid="stMetricDelta"] :is(div, p) { white-space: normal; overflow-wrap: normal; word-break: normal; }
.gl-chart-title { font-size: 15px; color: #1F2933; padding: 4px 10px 0; line-height: 1.3; }
</style>"""


def load_styles() -> None:
    """The dashboards' own CSS; style-only HTML goes to Streamlit's event container and takes no space."""
    st.html(STYLES)


def css_class(key: str) -> str:
    """The CSS class Streamlit gives an element or widget with ``key`` (its front end's rule: ``st-key-`` and the
    key, trimmed, with every character but letters, digits, ``_`` and ``-`` made ``-``)."""
    return "st-key-" + re.sub(r"[^a-zA-Z0-9_-]", "-", key.strip())


def control_row(key: str, min_rem: dict[str, float]):
    """A row of input widgets that wraps onto another line rather than cut a value or a label: widget ``k`` (by
    its key) is never narrower than ``min_rem[k]`` rem, and a widget that does not fit beside the others starts
    a new line (a narrow window, a sidebar open at 1024 px, a cluster with many pools). Add the widgets to the
    returned container, in order; they share the row's width."""
    rules = "".join(f".{css_class(k)} {{ min-width: {w}rem; }}" for k, w in min_rem.items())
    st.html(f"<style>{rules}</style>")
    return st.container(horizontal=True, key=key)


#: KPI tiles a row holds at most: at 1024 px with the sidebar open, six in a row broke a date inside it
#: ("2026-07-" / "11"); four fit "2026-07-11" whole.
TILES_PER_ROW = 4


def tile_columns(n: int) -> list:
    """Columns for ``n`` KPI tiles (one per pool, per cluster: as many as a site has), in rows of at most
    :data:`TILES_PER_ROW`, every row as wide as the first so the tiles line up."""
    width = max(1, min(n, TILES_PER_ROW))
    return [c for _ in range(0, max(n, 1), width) for c in st.columns(width)][:max(n, 1)]


_ZERO_CHANGE = re.compile(r"^[+-]?0(\.0*)?( |$)")


def kpi(col, label: str, value: str | None, delta: str | None = None, *, help: str | None = None,
        delta_color: str = "normal", missing: str = "not available yet", arrow: bool = True) -> None:
    """A KPI tile; ``value`` None shows the reason it is missing instead of a number. A change that rounds to
    zero ("+0.0 pp") is shown grey without an arrow, not as a red or green rise."""
    if delta is not None and _ZERO_CHANGE.match(delta):
        delta_color, arrow = "off", False
    if value is None:
        col.metric(label, "—", help=help)
        col.caption(missing)
    else:
        col.metric(label, value, delta, delta_color=delta_color, help=help,
                   delta_arrow="auto" if arrow else "off")


def period_column(df: pl.DataFrame, bucket: str, col: str = "bucket") -> pl.DataFrame:
    """Show a bucket start as ISO text: a date unless buckets are hours (tables read better without 00:00:00;
    Streamlit would show a date column as a datetime again)."""
    if col not in df.columns:
        return df
    return df.with_columns(pl.col(col).dt.strftime("%Y-%m-%d %H:%M" if bucket == "hour" else "%Y-%m-%d"))


def partial_bucket(df: pl.DataFrame, bucket: str) -> tuple[dt.datetime, str] | None:
    """The last bucket of ``df`` (columns ``bucket``, ``hours``: the part of it inside the data and the window) when
    it is cut short, with a label (e.g. "partial day: 6.7 of 24 h"): charts of GPU-hours per bucket say so there."""
    if df is None or df.is_empty() or "hours" not in df.columns:
        return None
    last = df.sort("bucket").row(-1, named=True)
    full = bucket_hours(bucket, last["bucket"])
    if last["hours"] is None or last["hours"] >= full - 1e-9:
        return None
    return last["bucket"], f"partial {bucket}: {last['hours']:,.1f} of {full:,.0f} h"


def pct(x: float | None, digits: int = 1) -> str | None:
    return None if x is None else f"{100 * x:.{digits}f} %"


def pp_delta(now: float | None, before: float | None) -> str | None:
    """Change in percentage points between two ratios, for KPI deltas."""
    if now is None or before is None:
        return None
    return f"{100 * (now - before):+.1f} pp"


def rel_delta(now: float | None, before: float | None) -> str | None:
    """Relative change against the previous period, for KPI deltas."""
    if now is None or not before:
        return None
    return f"{100 * (now / before - 1):+.1f} %"


def ago(t: dt.datetime | None, now: dt.datetime | None = None) -> str:
    if t is None:
        return "never"
    now = now or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    s = (now - t).total_seconds()
    if s < 0:
        return "just now"
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n:
            return f"{s / n:.0f} {unit} ago"
    return f"{s:.0f} s ago"


#: What a page shows for GPU activity when no telemetry covers the allocation: unknown, never 0 %.
NO_TELEMETRY = "unknown — no telemetry"
#: How a job still running at the data horizon reads where a listing gives its end.
RUNNING = "running"
_STATUS = {"closed": "Closed: the statement is frozen", "open": "Open: the month is complete, not closed yet",
           "provisional": "Open, provisional: month to date"}


def coverage_text(coverage_pct: float | None) -> str:
    """Beside an efficiency figure: how much of the allocation it rests on (efficiency.shares' coverage)."""
    if not coverage_pct:
        return NO_TELEMETRY
    return f"telemetry covers {coverage_pct:.1f} % of allocated GPU-hours"


def statement_status(status: str) -> str:
    """A chargeback statement's status as the Chargeback page and the Overview both say it."""
    return _STATUS.get(status, status)


def job_end(df: pl.DataFrame, end: str, running: pl.Expr, fmt: str = "%Y-%m-%d %H:%M:%S") -> pl.DataFrame:
    """The ``end`` column as text, :data:`RUNNING` for jobs still running at the data horizon (their GPU-hours
    stop there; the horizon is not when they ended)."""
    return df.with_columns(pl.when(running).then(pl.lit(RUNNING)).otherwise(pl.col(end).dt.strftime(fmt))
                           .alias(end))
