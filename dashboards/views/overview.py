"""Overview: the Monday-morning answers, each against the previous period of the same length."""
from __future__ import annotations

import datetime as dt

import polars as pl
import streamlit as st

from dashboards import charts, model_reads as mr, ui

ctx = ui.context()
f = ctx.filters
prev = f.previous()
ui.header("Overview", "How well is the cluster used, is it fair, what did it cost, and when do we need more?", ctx)

rows: list[dict] = []   # the headline table beneath: what each tile shows, now and before


def _row(name: str, unit: str, now, before, page: str) -> None:
    rows.append({"metric": name, "unit": unit, "now": now, "previous": before, "page": page})


def _num(x, scale: float = 1.0) -> float | None:
    return None if x is None else x * scale


def _fmt_value(x) -> str | None:
    """Table text: numbers to two decimals with thousands separators, dates and words as they are."""
    if x is None:
        return "—"
    return f"{x:,.2f}" if isinstance(x, (int, float)) else str(x)


def _allocation(col) -> None:
    a = mr.window_totals(mr.utilization(ctx.version, f, "month"), f).get("allocation_ratio")
    b = mr.window_totals(mr.utilization(ctx.version, prev, "month"), prev).get("allocation_ratio")
    ui.kpi(col, "Allocation ratio", ui.pct(a), ui.pp_delta(a, b), help="Allocated / available GPU-hours.")
    _row("Allocation ratio", "%", _num(a, 100), _num(b, 100), "Utilization")


def _efficiency(col) -> None:
    now, before = mr.efficiency(ctx.version, f), mr.efficiency(ctx.version, prev)
    e = now.row(0, named=True)["mean_pct"] if now.height else None
    eb = before.row(0, named=True)["mean_pct"] if before.height else None
    ui.kpi(col, "GPU efficiency", None if e is None else f"{e:.1f} %",
           None if e is None or eb is None else f"{e - eb:+.1f} pp",
           help="Mean activity of allocated GPUs over the GPU-hours telemetry covers.",
           missing="no GPU telemetry for these jobs")
    _row("GPU efficiency", "%", e, eb, "Efficiency")


def _fragmentation(col) -> None:
    fr = mr.fgd_rate(mr.fragmentation(ctx.version, f, "month"))
    frb = mr.fgd_rate(mr.fragmentation(ctx.version, prev, "month"))
    ui.kpi(col, "Fragmentation rate", ui.pct(fr), ui.pp_delta(fr, frb), delta_color="inverse",
           help="Free GPUs the period's typical requests could not use, over free GPUs (FGD).")
    _row("Fragmentation rate (FGD)", "%", _num(fr, 100), _num(frb, 100), "Fragmentation")


def _blocked(col) -> None:
    s = mr.blocked_by(mr.blocked(ctx.version, f), [])["fragmentation_share"][0]
    sb = mr.blocked_by(mr.blocked(ctx.version, prev), [])["fragmentation_share"][0]
    ui.kpi(col, "Waiting blocked by fragmentation", ui.pct(s), ui.pp_delta(s, sb), delta_color="inverse",
           help="Share of queue wait (GPU-hours) during which enough GPUs were free but scattered.",
           missing="no queue wait in the window")
    _row("Queue wait blocked by fragmentation", "%", _num(s, 100), _num(sb, 100), "Fragmentation")


def _jain(rep) -> float | None:
    if not isinstance(rep, dict) or rep["pools"].height == 0:
        return None
    return rep["pools"].filter(pl.col("pool") == "(all)")["jain_pending_teams"].max()


def _fairness(col) -> None:
    fair = mr.fairness(ctx.version, f)
    if not isinstance(fair, dict):
        return ui.kpi(col, "Fairness (Jain index)", None, missing=fair)
    j, jb = _jain(fair), _jain(mr.fairness(ctx.version, prev))
    ui.kpi(col, "Fairness (Jain index)", None if j is None else f"{j:.2f}",
           None if j is None or jb is None else f"{j - jb:+.2f}",
           help="1 = every team with waiting jobs got the same multiple of its entitlement.",
           missing="no team had waiting jobs")
    _row("Fairness (Jain index over teams with demand)", "index", j, jb, "Fairness & queues")


def _month_lines(month: str) -> tuple | None:
    """(statement, its lines kept by the filters), or None when there is no statement for the month."""
    res = mr.statement(ctx.version, month, detail=False)
    if res is None or isinstance(res, str):
        return None
    stmt, views = res
    lines = f.apply(views["by team"].with_columns(pl.col("team").fill_null("(unmapped)")), skip=("partitions",))
    return stmt, lines


def _cost(col) -> tuple | None:
    month = f"{f.end - dt.timedelta(days=1):%Y-%m}"
    now = _month_lines(month)
    if now is None:
        ui.kpi(col, "Cost this month", None, missing="no statement (is a governance file loaded?)")
        return None
    stmt, lines = now
    y, m = int(month[:4]), int(month[5:])
    last_month = f"{y - (m == 1):04d}-{12 if m == 1 else m - 1:02d}"
    before = _month_lines(last_month)
    cost = float(lines["total"].cast(pl.Float64).sum())
    pcost = float(before[1]["total"].cast(pl.Float64).sum()) if before else None
    cur = stmt.policy.currency
    ui.kpi(col, f"Cost {month}" + (" so far" if stmt.status != "closed" else ""), f"{cost:,.0f} {cur}",
           None if pcost is None else f"{last_month}: {pcost:,.0f} {cur}", delta_color="off", arrow=False,
           help=f"Statement lines charged to the selected teams and pools for {month} ({stmt.status}); below it "
                "the whole previous month.")
    _row(f"Cost {month}" + (" (month to date)" if stmt.status != "closed" else ""), cur, cost, pcost, "Chargeback")
    return month, stmt, lines


def _capacity(col) -> None:
    cluster = f.clusters[0] if len(f.clusters) == 1 else None
    cap = mr.forecast(ctx.version, "demanded", 90, 0.85, "80", ("pool",), cluster)["capacity"]
    if cap is None or cap.height == 0:
        return ui.kpi(col, "Capacity reached (forecast)", None, missing="no pool with a forecast")
    cap = cap.filter(pl.col("pool").is_in(f.pools) if f.pools else pl.col("capacity_gpus").is_not_null())
    hits = cap.filter(pl.col("exhausted_upper80").is_not_null()).sort("exhausted_upper80")
    if hits.height == 0:
        ui.kpi(col, "Capacity reached (forecast)", "not within 90 days")
        return _row("Capacity reached", "date", "not within 90 days", None, "Forecast & capacity")
    h = hits.row(0, named=True)
    ui.kpi(col, "Capacity reached (forecast)", f"{h['exhausted_upper80']:%Y-%m-%d}",
           f"{h['pool']}, {h['capacity_gpus']:,.0f} GPUs", delta_color="off", arrow=False,
           help="First day the upper 80 % demand forecast exceeds 85 % of a pool's capacity.")
    _row(f"Capacity reached ({h['pool']})", "date", f"{h['exhausted_upper80']:%Y-%m-%d}", None, "Forecast & capacity")


def _wait(col) -> None:
    w, wb = mr.waits(ctx.version, f, ("cluster",)), mr.waits(ctx.version, prev, ("cluster",))
    p95 = w["wait_p95_h"].max() if w.height else None
    p95b = wb["wait_p95_h"].max() if wb.height else None
    ui.kpi(col, "p95 queue wait", None if p95 is None else f"{p95:.1f} h",
           None if p95 is None or p95b is None else f"{p95 - p95b:+.1f} h", delta_color="inverse",
           missing="no job started in the window")
    _row("p95 queue wait", "hours", p95, p95b, "Fairness & queues")


def _prefetch() -> None:
    """Compute the tiles' model reads (this period and the previous one) concurrently, slowest first."""
    month = f"{f.end - dt.timedelta(days=1):%Y-%m}"
    y, m = int(month[:4]), int(month[5:])
    last_month = f"{y - (m == 1):04d}-{12 if m == 1 else m - 1:02d}"
    cluster = f.clusters[0] if len(f.clusters) == 1 else None
    calls = []
    calls += [lambda: mr.fairness(ctx.version, f), lambda: mr.fairness(ctx.version, prev)]
    calls += [lambda: mr.statement(ctx.version, month, detail=False),
              lambda: mr.statement(ctx.version, last_month, detail=False)]
    calls += [lambda: mr.blocked(ctx.version, f), lambda: mr.blocked(ctx.version, prev)]
    calls += [lambda: mr.fragmentation(ctx.version, f, "month"), lambda: mr.fragmentation(ctx.version, prev, "month")]
    calls += [lambda: mr.efficiency(ctx.version, f), lambda: mr.efficiency(ctx.version, prev)]
    calls += [lambda: mr.utilization(ctx.version, f, "month"), lambda: mr.utilization(ctx.version, prev, "month"),
              lambda: mr.utilization(ctx.version, f, mr.auto_bucket(f), "gpu_type")]
    calls.append(lambda: mr.forecast(ctx.version, "demanded", 90, 0.85, "80", ("pool",), cluster))
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
cost = None
with ui.guarded(r2[1], "Cost this month"):
    cost = _cost(r2[1])

# ---------------------------------------------------------------- trends
left, right = st.columns(2)
bucket = mr.auto_bucket(f)
pools = mr.utilization(ctx.version, f, bucket, "gpu_type")
if pools is not None and pools.height:
    left.plotly_chart(charts.lines(pools.with_columns(pl.col("allocation_ratio") * 100), "bucket", "allocation_ratio",
                                   color="gpu_type", colours=ctx.pool_colours, y_title="Allocation ratio (%)",
                                   title=f"Allocation ratio by pool per {bucket}", height=340), key="ov_alloc")
if cost is not None:
    month, stmt, lines = cost
    per_team = lines.group_by("team").agg(pl.col("total").cast(pl.Float64).sum()).sort("total", descending=True)
    fig = charts.bars(per_team, "team", "total", color="team", colours=ctx.team_colours, horizontal=True,
                      category_order=per_team["team"].to_list(),
                      y_title=f"Cost ({stmt.policy.currency})", x_title="Team", title=f"Cost per team, {month}",
                      height=340)
    fig.update_layout(showlegend=False)
    right.plotly_chart(fig, key="ov_cost")

st.subheader("The headline figures")
if rows:
    text = pl.DataFrame({"metric": [r["metric"] for r in rows], "unit": [r["unit"] for r in rows],
                         "now": [_fmt_value(r["now"]) for r in rows],
                         "previous": [_fmt_value(r["previous"]) for r in rows], "page": [r["page"] for r in rows]})
    ui.table(text, key="ov_headline", file_stem="overview", ctx=ctx,
             columns={"metric": "Figure", "unit": "Unit", "now": "This period", "previous": "Previous period",
                      "page": "Details on page"},
             caption="—: not available for that period (no data, or no telemetry); never shown as zero.")
