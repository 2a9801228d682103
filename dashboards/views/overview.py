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
st.caption(f"Changes are against the previous {f.days} days ({prev.start:%Y-%m-%d} to "
           f"{prev.end - dt.timedelta(days=1):%Y-%m-%d}).")

rows: list[dict] = []   # the headline table beneath: what each tile shows, now and before


def _row(name: str, unit: str, now, before, page: str) -> None:
    rows.append({"metric": name, "unit": unit, "now": now, "previous": before, "page": page})


def _num(x, scale: float = 1.0) -> float | None:
    return None if x is None else x * scale


def _fmt_value(x) -> str | None:
    """Table text: numbers to two decimals with thousands separators, dates and words as they are."""
    if x is None:
        return None
    return f"{x:,.2f}" if isinstance(x, (int, float)) else str(x)


r1 = st.columns(4)
r2 = st.columns(4)

# ---------------------------------------------------------------- utilization
if mr.landed("utilization", "by_bucket"):
    u_now = mr.window_totals(mr.utilization(ctx.version, f, "month"), f)
    u_before = mr.window_totals(mr.utilization(ctx.version, prev, "month"), prev)
    a, b = u_now.get("allocation_ratio"), u_before.get("allocation_ratio")
    ui.kpi(r1[0], "Allocation ratio", ui.pct(a), ui.pp_delta(a, b), help="Allocated / available GPU-hours.")
    _row("Allocation ratio", "%", _num(a, 100), _num(b, 100), "Utilization")
else:
    ui.kpi(r1[0], "Allocation ratio", None, missing="utilization model not landed (issue #5)")

# ---------------------------------------------------------------- efficiency
eff = mr.efficiency(ctx.version, f) if mr.landed("efficiency", "by_group") else None
if eff is not None:
    e_before = mr.efficiency(ctx.version, prev)
    e = eff.row(0, named=True)["mean_pct"] if eff.height else None
    eb = e_before.row(0, named=True)["mean_pct"] if e_before is not None and e_before.height else None
    ui.kpi(r1[1], "GPU efficiency", None if e is None else f"{e:.1f} %",
           None if e is None or eb is None else f"{e - eb:+.1f} pp vs previous period",
           help="Mean activity of allocated GPUs over the GPU-hours telemetry covers.",
           missing="no GPU telemetry for these jobs")
    _row("GPU efficiency", "%", e, eb, "Efficiency")
else:
    ui.kpi(r1[1], "GPU efficiency", None, missing="efficiency model not landed (issue #3)")

# ---------------------------------------------------------------- fragmentation and blocked waits
if mr.landed("fragmentation", "report"):
    fr, frb = mr.fgd_rate(mr.fragmentation(ctx.version, f, "month")), mr.fgd_rate(mr.fragmentation(ctx.version, prev, "month"))
    ui.kpi(r1[2], "Fragmentation rate", ui.pct(fr), ui.pp_delta(fr, frb), delta_color="inverse",
           help="Free GPUs the period's typical requests could not use, over free GPUs (FGD).")
    _row("Fragmentation rate (FGD)", "%", _num(fr, 100), _num(frb, 100), "Fragmentation")
else:
    ui.kpi(r1[2], "Fragmentation rate", None, missing="fragmentation model not landed (issue #5)")
if mr.landed("fragmentation_blocked", "blocked"):
    bl = mr.blocked_by(mr.blocked(ctx.version, f), []).row(0, named=True)
    blb = mr.blocked_by(mr.blocked(ctx.version, prev), []).row(0, named=True)
    s, sb = bl["fragmentation_share"], blb["fragmentation_share"]
    ui.kpi(r1[3], "Waiting blocked by fragmentation", ui.pct(s), ui.pp_delta(s, sb), delta_color="inverse",
           help="Share of queue wait (GPU-hours) during which enough GPUs were free but scattered.",
           missing="no queue wait in the window")
    _row("Queue wait blocked by fragmentation", "%", _num(s, 100), _num(sb, 100), "Fragmentation")
else:
    ui.kpi(r1[3], "Waiting blocked by fragmentation", None, missing="model not landed (issue #5)")

# ---------------------------------------------------------------- fairness
fair = mr.fairness(ctx.version, f) if mr.landed("fairness", "report") else None
if isinstance(fair, dict):
    fb = mr.fairness(ctx.version, prev)
    pick = lambda rep: (rep["pools"].filter(pl.col("pool") == "(all)")["jain_pending_teams"].max()  # noqa: E731
                        if isinstance(rep, dict) and rep["pools"].height else None)
    j, jb = pick(fair), pick(fb)
    ui.kpi(r2[0], "Fairness (Jain index)", None if j is None else f"{j:.2f}",
           None if j is None or jb is None else f"{j - jb:+.2f} vs previous period",
           help="1 = every team with waiting jobs got the same multiple of its entitlement.",
           missing="no team had waiting jobs")
    _row("Fairness (Jain index over teams with demand)", "index", j, jb, "Fairness & queues")
else:
    ui.kpi(r2[0], "Fairness (Jain index)", None,
           missing="needs a governance file" if isinstance(fair, str) else "fairness model not landed (issue #6)")

# ---------------------------------------------------------------- cost this month
month = f"{f.end - dt.timedelta(days=1):%Y-%m}"
stmt = mr.statement(ctx.version, month) if mr.landed("chargeback", "statement", "views") else None
if stmt is not None and not isinstance(stmt, str):
    lines = f.apply(stmt[1]["by team"].with_columns(pl.col("team").fill_null("(unmapped)")), skip=("partitions",))
    cost = float(lines["total"].cast(pl.Float64).sum())
    y, m = int(month[:4]), int(month[5:])
    last_month = f"{y - (m == 1):04d}-{12 if m == 1 else m - 1:02d}"
    pstmt = mr.statement(ctx.version, last_month)
    pcost = None
    if pstmt is not None and not isinstance(pstmt, str):
        plines = f.apply(pstmt[1]["by team"].with_columns(pl.col("team").fill_null("(unmapped)")), skip=("partitions",))
        pcost = float(plines["total"].cast(pl.Float64).sum())
    cur = stmt[0].policy.currency
    label = "Cost this month" if stmt[0].status != "closed" else f"Cost {month}"
    ui.kpi(r2[1], f"{label} ({month})", f"{cost:,.0f} {cur}",
           None if pcost is None else f"{last_month}: {pcost:,.0f} {cur} (whole month)", delta_color="off", arrow=False,
           help=f"Statement lines charged to the selected teams and pools for {month}, status {stmt[0].status}.")
    _row(f"Cost {month} (month to date)" if stmt[0].status != "closed" else f"Cost {month}", cur, cost, pcost,
         "Chargeback")
else:
    ui.kpi(r2[1], "Cost this month", None,
           missing=stmt if isinstance(stmt, str) else "chargeback model not landed (issue #6)")

# ---------------------------------------------------------------- capacity
if mr.landed("capacity", "forecast_warehouse"):
    cluster = f.clusters[0] if len(f.clusters) == 1 else None
    fc = mr.forecast(ctx.version, "demanded", 90, 0.85, "80", ("pool",), cluster)
    cap = fc["capacity"]
    if cap is not None and cap.height:
        cap = cap.filter(pl.col("pool").is_in(f.pools) if f.pools else pl.col("capacity_gpus").is_not_null())
        hits = cap.filter(pl.col("exhausted_upper80").is_not_null()).sort("exhausted_upper80")
        if hits.height:
            h = hits.row(0, named=True)
            ui.kpi(r2[2], "Capacity reached (forecast)", f"{h['exhausted_upper80']:%Y-%m-%d}",
                   f"{h['pool']}, {h['capacity_gpus']:,.0f} GPUs", delta_color="off", arrow=False,
                   help="First day the upper 80 % demand forecast exceeds 85 % of a pool's capacity.")
            _row(f"Capacity reached ({h['pool']})", "date", f"{h['exhausted_upper80']:%Y-%m-%d}", None,
                 "Forecast & capacity")
        else:
            ui.kpi(r2[2], "Capacity reached (forecast)", "not within 90 days", delta_color="off")
            _row("Capacity reached", "date", "not within 90 days", None, "Forecast & capacity")
else:
    ui.kpi(r2[2], "Capacity reached (forecast)", None, missing="forecast model not landed (issue #7)")

if mr.landed("queue", "waits"):
    w = mr.waits(ctx.version, f, ("cluster",))
    wb = mr.waits(ctx.version, prev, ("cluster",))
    p95 = w["wait_p95_h"].max() if w is not None and w.height else None
    p95b = wb["wait_p95_h"].max() if wb is not None and wb.height else None
    ui.kpi(r2[3], "p95 queue wait", None if p95 is None else f"{p95:.1f} h",
           None if p95 is None or p95b is None else f"{p95 - p95b:+.1f} h vs previous period", delta_color="inverse",
           missing="no job started in the window")
    _row("p95 queue wait", "hours", p95, p95b, "Fairness & queues")

# ---------------------------------------------------------------- trends
left, right = st.columns(2)
if mr.landed("utilization", "by_bucket"):
    bucket = mr.auto_bucket(f)
    pools = mr.utilization(ctx.version, f, bucket, "gpu_type")
    if pools is not None and pools.height:
        left.plotly_chart(charts.lines(pools.with_columns(pl.col("allocation_ratio") * 100), "bucket", "allocation_ratio",
                                       color="gpu_type", colours=ctx.pool_colours, y_title="Allocation ratio (%)",
                                       title=f"Allocation ratio by pool per {bucket}", height=340), key="ov_alloc")
if stmt is not None and not isinstance(stmt, str):
    per_team = (lines.group_by("team").agg(pl.col("total").cast(pl.Float64).sum()).sort("total", descending=True))
    fig = charts.bars(per_team, "team", "total", color="team", colours=ctx.team_colours, horizontal=True,
                      y_title=f"Cost ({stmt[0].policy.currency})", x_title="Team", title=f"Cost per team, {month}",
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
             caption="Empty: not available for that period (no data, or no telemetry), never zero.")
