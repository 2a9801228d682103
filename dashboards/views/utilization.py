"""Utilization: where the GPU-hours of the capacity we own went (allocated, idle, unavailable)."""
from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards import charts, model_reads as mr, theme, ui

ctx = ui.context()
f = ctx.filters
ui.header("Utilization", "How much of the GPU capacity we own was allocated, idle or unavailable?", ctx)


BUCKETS = {"Hour": "hour", "Day": "day", "Week": "week", "Month": "month"}
auto = mr.auto_bucket(f)
c1, c2 = st.columns([2, 3])
picked = c1.segmented_control("Time bucket (UTC)", list(BUCKETS), key="util_bucket",
                              default=next(k for k, v in BUCKETS.items() if v == auto))
bucket = BUCKETS.get(picked or "", auto)

util = mr.utilization(ctx.version, f, bucket)
if util is None or util.height == 0:
    ui.no_data("capacity or jobs", "Widen the dates or clear a filter.")
    st.stop()
now = mr.window_totals(util, f)
before = mr.window_totals(mr.utilization(ctx.version, f.previous(), "month"), f)

k = st.columns(5)
ratio, ratio_before = mr.allocation_ratio(ctx.version, f), mr.allocation_ratio(ctx.version, f.previous())
known, placed = mr.capacity_known(ctx.version, f), mr.placement_known(ctx.version, f)
ui.kpi(k[0], "Allocation ratio", ui.pct(ratio), ui.pp_delta(ratio, ratio_before),
       missing=mr.allocation_missing(ctx.version, f),
       help="Allocated GPU-hours inside capacity / available GPU-hours (capacity minus down, drained and "
            "maintenance). With a team filter: the selected teams' allocated GPU-hours / available GPU-hours.")
ui.kpi(k[1], "Allocated GPU-hours", f"{now['allocated_gpu_h']:,.0f}" if placed else None,
       ui.rel_delta(now["allocated_gpu_h"], before.get("allocated_gpu_h")) if placed else None,
       missing=mr.NO_PLACEMENT)
# without capacity, idle and unavailable are unknown, not zero; without placement, so is idle
ui.kpi(k[2], "Idle GPU-hours", f"{now['idle_gpu_h']:,.0f}" if known and placed else None,
       missing=mr.NO_CAPACITY if not known else mr.NO_PLACEMENT, help="Available but allocated to no job.")
ui.kpi(k[3], "Unavailable GPU-hours", f"{now['unavailable_gpu_h']:,.0f}" if known else None,
       missing=mr.NO_CAPACITY, help="Free GPUs on nodes that were down, drained or in maintenance (GPUs still held "
                                    "by jobs on a draining node count as allocated).")
ui.kpi(k[4], "Queued GPU-hours", f"{now['pending_gpu_h']:,.0f}",
       help="GPU-hours that eligible jobs spent waiting in the queue in the window (requested GPUs x wait).")

# ---------------------------------------------------------------- capacity stack
# The charts get the points a screen can show (charts.fit_bucket); the tables keep the bucket chosen.
chart_bucket = charts.fit_bucket(bucket, f.days)
chart_util = util if chart_bucket == bucket else mr.utilization(ctx.version, f, chart_bucket)
if chart_bucket != bucket:
    st.caption(f"Charts per {chart_bucket}: per {bucket}, {f.days} days would be more points than a chart can "
               f"show. The tables below are per {bucket}.")
stack_cols = {"allocated_gpu_h": "Allocated", "other_allocated_gpu_h": "Allocated (other teams)",
              "idle_gpu_h": "Idle", "unavailable_gpu_h": "Unavailable"}
if not f.teams:
    stack_cols.pop("other_allocated_gpu_h")
long = (chart_util.select("bucket", *stack_cols).unpivot(index="bucket", variable_name="state", value_name="gpu_h")
        .with_columns(pl.col("state").replace_strict(stack_cols)))
colours = {"Allocated": theme.STATE_COLOURS["allocated"], "Allocated (other teams)": "#A5B8CF",
           "Idle": theme.STATE_COLOURS["idle"], "Unavailable": theme.STATE_COLOURS["unavailable"]}
partial = ui.partial_bucket(chart_util, chart_bucket)
if placed:   # without placement every GPU would be drawn idle
    fig = charts.stacked_area(long, "bucket", "gpu_h", "state", colours, order=list(stack_cols.values()),
                              y_title=f"GPU-hours per {chart_bucket}", title="Where the capacity went")
    ui.chart(st, charts.mark_partial(fig, *partial) if partial else fig, key="util_stack")
if now.get("beyond_capacity_gpu_h", 0) > 0.005:
    st.warning(f"{now['beyond_capacity_gpu_h']:,.1f} GPU-hours were allocated on nodes the inventory lacks or lists "
               "with fewer GPUs; they are counted as allocated but not inside capacity. Ingest a fuller node "
               "inventory (`gpuledger ingest nodes`).", icon=":material/inventory:")

lost = mr.unplaced(ctx.version, f)
if lost["jobs"]:
    st.warning(f"{lost['jobs']:,} jobs held {lost['gpu_h']:,.1f} GPU-hours in the window by their records but name "
               "no node (a trace without placement, e.g. openb's pod lists): the allocation here leaves them out "
               "and counts their GPUs as idle.", icon=":material/help:")

left, right = st.columns(2)
pools = mr.utilization(ctx.version, f, bucket, "gpu_type")
chart_pools = pools if chart_bucket == bucket else mr.utilization(ctx.version, f, chart_bucket, "gpu_type")
with left:
    # none without capacity; without placement they would be lines at 0 %
    if placed and chart_pools is not None and chart_pools["allocation_ratio"].is_not_null().any():
        ui.chart(st, charts.lines(chart_pools.with_columns(pl.col("allocation_ratio") * 100), "bucket", "allocation_ratio",
                                  color="gpu_type", colours=ctx.pool_colours, y_title="Allocation ratio (%)",
                                  title="Allocation ratio by pool", height=360), key="util_pools")
teams = mr.allocation_by_team(ctx.version, f, chart_bucket)
with right:
    if teams is not None and teams.height:
        # the largest teams and one "(other)" stack: each bucket's total is every team's
        shown_teams = charts.top_categories(teams, "team", ["allocated_gpu_h"], by=["bucket"])
        fig = charts.bars(shown_teams, "bucket", "allocated_gpu_h", color="team",
                          colours={**ctx.team_colours, charts.OTHER: charts.OTHER_COLOUR},
                          y_title=f"Allocated GPU-hours per {chart_bucket}", title="Allocated GPU-hours by team",
                          height=360)
        ui.chart(st, charts.mark_partial(fig, *partial) if partial else fig, key="util_teams")

parts = mr.utilization(ctx.version, f, "month", "partition")
if parts is not None and parts.height and known and placed:
    per_part = (parts.group_by("partition").agg(pl.col("sreport_allocated", "available_gpu_h", "allocated_gpu_h",
                                                      "idle_gpu_h", "unavailable_gpu_h").sum())
                .with_columns((100 * (pl.col("allocated_gpu_h" if f.teams else "sreport_allocated")
                                      / pl.col("available_gpu_h"))).alias("ratio_pct"))
                .sort("ratio_pct", descending=True, nulls_last=True))
    ui.chart(st, charts.bars(per_part, "partition", "ratio_pct", horizontal=True, y_title="Allocation ratio (%)",
                             x_title="Partition", title="Allocation ratio by partition over the window",
                             height=max(200, 60 + 34 * per_part.height)), key="util_parts")
    st.caption("A node in several partitions counts in each partition's capacity.")

# ---------------------------------------------------------------- the table beneath
st.subheader("By period and pool")
table = ui.period_column((pools if pools is not None and pools.height else util).with_columns(
    (pl.col("allocation_ratio") * 100).alias("allocation_ratio_pct")), bucket)
cols = {"bucket": f"Period ({bucket}, UTC)", "gpu_type": "Pool (GPU type)",
        "capacity_gpu_h": "Capacity (GPU-hours)", "unavailable_gpu_h": "Unavailable (GPU-hours)",
        "available_gpu_h": "Available (GPU-hours)", "allocated_gpu_h": "Allocated (GPU-hours)",
        "idle_gpu_h": "Idle (GPU-hours)", "allocation_ratio_pct": "Allocation ratio (%)",
        "pending_gpu_h": "Queued demand (GPU-hours)"}
if f.teams:
    cols["other_allocated_gpu_h"] = "Allocated by other teams (GPU-hours)"
ui.table(table, key="util", file_stem="utilization", ctx=ctx, columns=cols,
         formats={c: "%.1f" for c in cols if c not in ("bucket", "gpu_type")})

sr = {"bucket": f"Period ({bucket}, UTC)", "sreport_allocated": "Allocated (GPU-hours)",
      "sreport_down": "Down (GPU-hours)", "sreport_planned_down": "PlannedDown (GPU-hours)",
      "sreport_idle": "Idle (GPU-hours)", "sreport_planned": "Planned (GPU-hours)",
      "sreport_reported": "Reported (GPU-hours)"}
ui.table(ui.period_column(util, bucket),
         label="Slurm sreport categories (to reconcile with `sreport cluster utilization -T gres/gpu`)", key="sreport", file_stem="sreport_categories", ctx=ctx, columns=sr,
         formats={c: "%.1f" for c in sr if c != "bucket"},
         caption="Planned = idle GPU-hours while eligible jobs that could run there were waiting.")
