"""Overview: the Monday-morning answers, each against the previous period of the same length."""
from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards import charts, model_reads as mr, sidebar, ui
from models.metrics.fragmentation import WINDOW_BUCKET

ctx = ui.context()
f = ctx.filters
prev = f.previous()
ui.header("Overview", "How well is the cluster used, is it fair, what did it cost, and when do we need more?", ctx)

rows: list[dict] = []   # the headline table beneath: what each tile shows, now and before, and the change


def _row(name: str, unit: str, now, before, page: str, change_unit: str | None = None) -> None:
    """``change_unit``: how the change reads (``pp`` for a percentage, ``h``, or "" for an index); None: no
    change is shown (e.g. a month to date against a whole month)."""
    change = None
    if change_unit is not None and isinstance(now, (int, float)) and isinstance(before, (int, float)):
        change = f"{now - before:+,.2f}" + (f" {change_unit}" if change_unit else "")
    rows.append({"metric": name, "unit": unit, "now": now, "previous": before, "change": change, "page": page})


def _num(x, scale: float = 1.0) -> float | None:
    return None if x is None else x * scale


def _fmt_value(x) -> str | None:
    """Table text: numbers to two decimals with thousands separators, dates and words as they are."""
    if x is None:
        return "—"
    return f"{x:,.2f}" if isinstance(x, (int, float)) else str(x)


def _allocation(col) -> None:
    a, b = mr.allocation_ratio(ctx.version, f), mr.allocation_ratio(ctx.version, prev)
    ui.kpi(col, "Allocation ratio", ui.pct(a), ui.pp_delta(a, b), help="Allocated / available GPU-hours.",
           missing=mr.allocation_missing(ctx.version, f))
    lost = mr.unplaced(ctx.version, f)
    if lost["jobs"]:    # the Utilization page's warning, in short
        col.caption(f"Leaves out {lost['gpu_h']:,.0f} GPU-hours of {lost['jobs']:,} jobs that name no node")
    _row("Allocation ratio", "%", _num(a, 100), _num(b, 100), "Utilization", "pp")


def _efficiency(col) -> None:
    now, before = mr.efficiency_total(ctx.version, f), mr.efficiency_total(ctx.version, prev)
    e = now["mean_pct"] if now else None
    eb = before["mean_pct"] if before else None
    ui.kpi(col, "GPU efficiency", None if e is None else f"{e:.1f} %", ui.pp_delta(_num(e, 0.01), _num(eb, 0.01)),
           help="Mean activity of allocated GPUs over the GPU-hours telemetry covers.",
           missing=ui.NO_TELEMETRY if now else "no GPU jobs in the window")
    if now and e is not None:
        col.caption(ui.coverage_text(now["coverage_pct"]))
    _row("GPU efficiency", "%", e, eb, "Efficiency", "pp")
    _row("Telemetry coverage (of allocated GPU-hours)", "%", now["coverage_pct"] if now else None,
         before["coverage_pct"] if before else None, "Efficiency", "pp")


def _fragmentation(col) -> None:
    fr, frb = mr.fragmentation_rate(ctx.version, f), mr.fragmentation_rate(ctx.version, prev)
    ui.kpi(col, "Fragmentation rate", ui.pct(fr), ui.pp_delta(fr, frb), delta_color="inverse",
           help="Free GPUs the requests of each day could not use, over free GPUs (FGD), over the window's samples.",
           missing=mr.fragmentation_missing(ctx.version, f))
    _row("Fragmentation rate (FGD)", "%", _num(fr, 100), _num(frb, 100), "Fragmentation", "pp")


def _blocked(col) -> None:
    s, sb = mr.blocked_share(ctx.version, f), mr.blocked_share(ctx.version, prev)
    ui.kpi(col, "Waiting blocked by fragmentation", ui.pct(s), ui.pp_delta(s, sb), delta_color="inverse",
           help="Share of queue wait (GPU-hours) during which enough GPUs were free but scattered.",
           missing=mr.blocked_missing(ctx.version, f))
    _row("Queue wait blocked by fragmentation", "%", _num(s, 100), _num(sb, 100), "Fragmentation", "pp")


def _fairness(col) -> None:
    fair = mr.fairness(ctx.version, f)
    if not isinstance(fair, dict):
        return ui.kpi(col, "Fairness (Jain index)", None, missing=fair)
    j, jb = mr.jain(ctx.version, f), mr.jain(ctx.version, prev)
    ui.kpi(col, "Fairness (Jain index)", None if j is None else f"{j:.2f}",
           None if j is None or jb is None else f"{j - jb:+.2f}",
           help="1 = every team with waiting jobs got the same multiple of its entitlement.",
           missing="no team had waiting jobs")
    _row("Fairness (Jain index over teams with demand)", "index", j, jb, "Fairness & queues", "")


def _cost(col) -> dict | None:
    now = mr.month_cost(ctx.version, f)
    if isinstance(now, str):
        ui.kpi(col, "Cost this month", None, missing=f"no statement: {now}")
        return None
    month, cur = now["month"], now["currency"]
    to_date = now["status"] == "provisional"      # the accounting does not reach the month's end yet
    last_month = mr.previous_month(month)
    before = mr.month_cost(ctx.version, f, last_month)
    pcost = before["cost"] if isinstance(before, dict) else None
    ui.kpi(col, f"Cost {month}" + (" so far" if to_date else ""), f"{now['cost']:,.0f} {cur}",
           None if pcost is None else f"{last_month}: {pcost:,.0f} {cur}", delta_color="off", arrow=False,
           help=f"Statement lines charged to the selected teams and pools for {month} ({now['status']}); with no "
                "filter, the Chargeback page's *Charged to teams*: the cluster's cost less unallocated idle, rate "
                "variance and rounding. Below it the whole previous month.")
    col.caption(ui.statement_status(now["status"]))
    _row(mr.month_cost_label(now), cur, now["cost"], pcost, "Chargeback")
    return now


def _capacity(col) -> None:
    hit = mr.capacity_reached(ctx.version, f)
    if hit is None:
        return ui.kpi(col, "Capacity reached (forecast)", None,
                      missing="no pool with a forecast" if mr.capacity_known(ctx.version, f) else mr.NO_CAPACITY)
    if not hit:
        ui.kpi(col, "Capacity reached (forecast)", "not within 90 days")
        return _row(f"Capacity reached ({mr.CAPACITY_BASIS})", "date", "not within 90 days", None,
                    "Forecast & capacity")
    since = mr.capacity_since(ctx.version, f)
    ui.kpi(col, "Capacity reached (forecast)", mr.reached_text(hit["date"], hit["already"]),
           f"{hit['pool']}, {hit['capacity_gpus']:,.0f} GPUs", delta_color="off", arrow=False,
           help=f"First day on which a pool's demand, as its upper {mr.CAPACITY_BAND} % forecast, exceeds "
                f"{mr.CAPACITY_TARGET * 100:.0f} % of its capacity; the Forecast page also gives the median's date."
                + (" \"already\": its demand over the last days is above that now." if hit["already"] else "")
                + (f" Forecast from all the accounting before {since:%Y-%m-%d}, whatever the window." if since else ""))
    _row(f"Capacity reached ({hit['pool']}; {mr.CAPACITY_BASIS})", "date", mr.reached_text(hit["date"], hit["already"]),
         None, "Forecast & capacity")


def _wait(col) -> None:
    w, wb = mr.worst_wait(ctx.version, f), mr.worst_wait(ctx.version, prev)
    p95 = w["wait_p95_h"] if w else None
    p95b = wb["wait_p95_h"] if wb else None
    ui.kpi(col, "p95 queue wait", None if p95 is None else f"{p95:.1f} h",
           None if p95 is None or p95b is None else f"{p95 - p95b:+.1f} h", delta_color="inverse",
           missing="no job started in the window")
    _row("p95 queue wait", "hours", p95, p95b, "Fairness & queues", "h")


def _reserved() -> None:
    """A row of the table only (no tile): reserved GPUs no job held, when reservations are loaded at all."""
    idle = mr.reserved_idle(ctx.version, f)
    if idle is not None:
        _row("Reserved but idle", "GPU-hours", idle, mr.reserved_idle(ctx.version, prev), "Why jobs wait", "GPU-h")


def _prefetch() -> None:
    """Compute the tiles' model reads (this period and the previous one) concurrently, slowest first."""
    month = f.month
    last_month = mr.previous_month(month)
    calls = []
    calls += [lambda: mr.fairness(ctx.version, f), lambda: mr.fairness(ctx.version, prev)]
    calls += [lambda: mr.statement(ctx.version, month, detail=False),
              lambda: mr.statement(ctx.version, last_month, detail=False)]
    calls += [lambda: mr.blocked(ctx.version, f), lambda: mr.blocked(ctx.version, prev)]
    calls += [lambda: mr.fragmentation(ctx.version, f, WINDOW_BUCKET),
              lambda: mr.fragmentation(ctx.version, prev, WINDOW_BUCKET)]
    calls += [lambda: mr.efficiency(ctx.version, f), lambda: mr.efficiency(ctx.version, prev)]
    calls += [lambda: mr.utilization(ctx.version, f, "month"), lambda: mr.utilization(ctx.version, prev, "month"),
              lambda: mr.utilization(ctx.version, f, mr.auto_bucket(f), "gpu_type")]
    calls.append(lambda: mr.capacity_reached(ctx.version, f))
    calls += [lambda: mr.waits(ctx.version, f, ("cluster",)), lambda: mr.waits(ctx.version, prev, ("cluster",))]
    mr.prefetch(calls)


_prefetch()
r1, r2 = st.columns(4), st.columns(4)
for col, label, tile in ((r1[0], "Allocation ratio", _allocation), (r1[1], "GPU efficiency", _efficiency),
                         (r1[2], "Fragmentation rate", _fragmentation),
                         (r1[3], "Waiting blocked by fragmentation", _blocked),
                         (r2[0], "Fairness (Jain index)", _fairness), (r2[2], "Capacity reached (forecast)", _capacity),
                         (r2[3], "p95 queue wait", _wait)):
    with ui.guarded(col, label):
        tile(col)
_reserved()
cost = None
with ui.guarded(r2[1], "Cost this month"):
    cost = _cost(r2[1])

# ---------------------------------------------------------------- trends
left, right = st.columns(2)
bucket = mr.auto_bucket(f)
pools = mr.utilization(ctx.version, f, bucket, "gpu_type")
if mr.placement_known(ctx.version, f) and pools is not None and pools["allocation_ratio"].is_not_null().any():
    ui.chart(left, charts.lines(pools.with_columns(pl.col("allocation_ratio") * 100), "bucket", "allocation_ratio",
                                color="gpu_type", colours=ctx.pool_colours, y_title="Allocation ratio (%)",
                                title=f"Allocation ratio by pool per {bucket}", height=340), key="ov_alloc")
if cost is not None:
    month, stmt, lines = cost["month"], cost["statement"], cost["lines"]
    per_team = lines.group_by("team").agg(pl.col("total").cast(pl.Float64).sum()).sort("total", descending=True)
    fig = charts.bars(per_team, "team", "total", color="team", colours=ctx.team_colours, horizontal=True,
                      category_order=per_team["team"].to_list(),
                      y_title=f"Cost ({stmt.policy.currency})", x_title="Team", title=f"Cost per team, {month}",
                      height=340)
    fig.update_layout(showlegend=False)
    ui.chart(right, fig, key="ov_cost")

#: Each detail page's URL path (dashboards/app.py's url_path), for links that keep the view.
PAGE_PATHS = {"Utilization": "utilization", "Efficiency": "efficiency", "Fragmentation": "fragmentation",
              "Fairness & queues": "fairness", "Why jobs wait": "waiting", "Chargeback": "chargeback",
              "Forecast & capacity": "forecast"}
view = sidebar.view_params(f, ctx.cat)

st.subheader("The headline figures")
if rows:
    # relative links: they resolve next to this page's URL, behind a proxy's path prefix too
    link = {title: f"{path}{sidebar.query_string(view)}" for title, path in PAGE_PATHS.items()}
    text = pl.DataFrame({"metric": [r["metric"] for r in rows], "unit": [r["unit"] for r in rows],
                         "now": [_fmt_value(r["now"]) for r in rows],
                         "previous": [_fmt_value(r["previous"]) for r in rows],
                         "change": [r["change"] or "—" for r in rows], "page": [r["page"] for r in rows],
                         "link": [link.get(r["page"]) for r in rows]})
    ui.table(text, lazy=False, key="ov_headline", file_stem="overview", ctx=ctx,
             columns={"metric": "Figure", "unit": "Unit", "now": "This period", "previous": "Previous period",
                      "change": "Change", "page": "Details on page", "link": "Open (same filters)"},
             links={"link": r"^([a-z_]+)"},
             caption="—: not available for that period (no data, or no telemetry); never shown as zero. A change "
                     "of a percentage is in percentage points (pp). Each link opens its page with this window and "
                     "these filters.")
    # three to a row: six across cut "Forecast & capacity" to "Forecast & capacit" on a 1400-pixel screen
    pages = list(PAGE_PATHS.items())
    for start in range(0, len(pages), 3):
        for col, (title, path) in zip(st.columns(3), pages[start:start + 3]):
            col.page_link(f"views/{path}.py", label=title, icon=":material/arrow_forward:", query_params=view)
