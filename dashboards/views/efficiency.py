"""Efficiency: how busy allocated GPUs really were (telemetry), by team and user, and the worst offenders."""
from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards import charts, model_reads as mr, sidebar, theme, ui

ctx = ui.context()
f = ctx.filters
ui.header("Efficiency", "Were allocated GPUs actually busy, and who leaves them idle?", ctx)


mr.prefetch([lambda: mr.efficiency(ctx.version, f, "gpu_type", mr.auto_bucket(f)),
             lambda: mr.efficiency(ctx.version, f), lambda: mr.efficiency(ctx.version, f.previous()),
             lambda: mr.efficiency(ctx.version, f, "team"), lambda: mr.efficiency(ctx.version, f, "user"),
             lambda: mr.efficiency_jobs(ctx.version, f, 25), lambda: mr.efficiency_methods(ctx.version, f)])
t = mr.efficiency_total(ctx.version, f)
if t is None:
    ui.no_data("GPU jobs", "Widen the dates or clear a filter.")
    st.stop()
b = mr.efficiency_total(ctx.version, f.previous()) or {}
metric_used = t.get("metric") or "no telemetry"

if not t["telemetry_gpu_h"]:
    st.warning("No GPU telemetry covers these jobs, so how busy their GPUs were is unknown (not 0 %). Ingest DCGM "
               "or nvidia-smi telemetry (`gpuledger ingest prometheus|dcgm|nvidia-smi`).", icon=":material/sensors_off:")
k = st.columns(5)
pct_of = lambda x: None if x is None else x / 100   # noqa: E731  (% -> ratio for the pp delta)
ui.kpi(k[0], "GPU efficiency", f"{t['mean_pct']:.1f} %" if t["mean_pct"] is not None else None,
       ui.pp_delta(pct_of(t["mean_pct"]), pct_of(b.get("mean_pct"))),
       help=f"Mean activity over the GPU-hours telemetry covers, weighted by GPU-hours. Metric: {metric_used}.",
       missing=ui.NO_TELEMETRY)
if t["mean_pct"] is not None:
    k[0].caption(ui.coverage_text(t["coverage_pct"]))
ui.kpi(k[1], "Active GPU-hours", f"{t['active_gpu_h']:,.0f}" if t["telemetry_gpu_h"] else None,
       help="Sum over telemetry-covered GPU-hours of the activity fraction.", missing="no telemetry")
ui.kpi(k[2], "Idle-allocated GPU-hours", f"{t['idle_alloc_gpu_h']:,.0f}" if t["telemetry_gpu_h"] else None,
       ui.rel_delta(t["idle_alloc_gpu_h"], b.get("idle_alloc_gpu_h")), delta_color="inverse",
       help="Allocated GPU-hours in stretches of 5 minutes or more at zero activity.", missing="no telemetry")
ui.kpi(k[3], "Telemetry coverage", f"{t['coverage_pct']:.1f} %" if t["coverage_pct"] is not None else None,
       ui.pp_delta(pct_of(t["coverage_pct"]), pct_of(b.get("coverage_pct"))), delta_color="off",
       help="Share of allocated GPU-hours with telemetry readings attributed to the job.")
ui.kpi(k[4], "Jobs without telemetry", f"{int(t['jobs_without_telemetry']):,}", f"of {int(t['jobs']):,} GPU jobs",
       delta_color="off", arrow=False, help="Counted and shown as 'no telemetry', never as 0 % busy.")
st.caption(f"Activity metric: **{metric_used}** — DCGM SM_ACTIVE (share of time a streaming multiprocessor had "
           "a warp resident) where the exporter has it, else GR_ENGINE_ACTIVE, else GPU_UTIL (time any kernel "
           "ran, which reads 100 % for one tiny kernel). The metric chosen per job is named in every table.")

# Short legend names (they share a row above half-width charts); the caption below the charts defines them.
SPLIT = {"active_gpu_h": "Active", "busy_gpu_h": "Partly busy", "idle_alloc_gpu_h": "Idle ≥ 5 min",
         "untracked_gpu_h": "No telemetry"}
SPLIT_COLOURS = {"Active": theme.STATE_COLOURS["active"], "Partly busy": "#A8D5A2",
                 "Idle ≥ 5 min": theme.STATE_COLOURS["allocated_idle"], "No telemetry": theme.STATE_COLOURS["no_telemetry"]}


def _split(df: pl.DataFrame, key: str) -> pl.DataFrame:
    """Allocated GPU-hours of each group split so the bar's length is its allocation."""
    d = df.with_columns(
        (pl.col("telemetry_gpu_h") - pl.col("active_gpu_h") - pl.col("idle_alloc_gpu_h")).clip(0).alias("busy_gpu_h"),
        (pl.col("alloc_gpu_h") - pl.col("telemetry_gpu_h")).clip(0).alias("untracked_gpu_h"))
    return (d.select(key, *SPLIT).unpivot(index=key, variable_name="part", value_name="gpu_h")
            .with_columns(pl.col("part").replace_strict(SPLIT)))


left, right = st.columns(2)
teams = mr.efficiency(ctx.version, f, "team")
with left:
    order = teams.sort("alloc_gpu_h", descending=True)["team"].to_list()
    ui.chart(st, charts.bars(
        _split(teams, "team"), "team", "gpu_h", color="part", colours=SPLIT_COLOURS, horizontal=True,
        category_order=order, y_title="Allocated GPU-hours", x_title="Team",
        title="Allocated vs active GPU-hours by team", height=max(300, 110 + 34 * len(order))), key="eff_teams")
users = mr.efficiency(ctx.version, f, "user")
with right:
    top = users.filter(pl.col("user").is_not_null()).sort("alloc_gpu_h", descending=True).head(15)
    order_u = top["user"].to_list()
    if top.height:
        ui.chart(st, charts.bars(
            _split(top, "user"), "user", "gpu_h", color="part", colours=SPLIT_COLOURS, horizontal=True,
            category_order=order_u, y_title="Allocated GPU-hours", x_title="User",
            title="The 15 users with the most allocated GPU-hours", height=max(300, 110 + 34 * len(order_u))),
            key="eff_users")
    else:   # a trace without users (openb's pod lists): an empty chart would look like users without GPU-hours
        st.caption("**Users**: the accounting records no user for these jobs.")

st.caption("Each bar is a group's allocated GPU-hours: **active** = activity x GPU-hours with telemetry; "
           "**idle ≥ 5 min** = stretches of 5 minutes or more at zero activity; **partly busy** = the rest of the "
           "GPU-hours with telemetry; **no telemetry** = allocated GPU-hours without readings (unknown, not idle).")
over_time = mr.efficiency(ctx.version, f, "gpu_type", mr.auto_bucket(f))
over_time = over_time.filter(pl.col("mean_pct").is_not_null()) if over_time is not None else None
if over_time is not None and over_time.height:   # none without telemetry: the warning above says why
    ui.chart(st, charts.lines(over_time, "bucket", "mean_pct",
                              color="gpu_type", colours=ctx.pool_colours, y_title="GPU efficiency (%)",
                              title=f"GPU efficiency by pool per {mr.auto_bucket(f)}", markers=True, height=320),
                 key="eff_time")

st.subheader("Worst offenders")
# One person's jobs (a team lead looking at someone's idle GPUs): kept in the URL as ?user=NAME.
names = users.sort("alloc_gpu_h", descending=True)["user"].drop_nulls().to_list()
if "eff_user" not in st.session_state:
    st.session_state["eff_user"] = sidebar.url_value("user") if sidebar.url_value("user") in names else None
who = st.selectbox("User", names, index=None, key="eff_user", placeholder="All users",
                   help="Show one person's jobs (users with GPU jobs in the window, most GPU-hours first).")
sidebar.page_param("user", who)
if who is not None:
    u = users.filter(pl.col("user") == who).row(0, named=True)
    st.caption(f"{who}: {u['alloc_gpu_h']:,.1f} allocated GPU-hours in {int(u['jobs']):,} GPU jobs"
               + (f", GPU efficiency {u['mean_pct']:.1f} %" if u.get("mean_pct") is not None else
                  f", {ui.NO_TELEMETRY}") + ".")
# (the same arguments as the prefetch above and the warm-up: a cache key counts the arguments given)
worst = mr.efficiency_jobs(ctx.version, f, 25) if who is None else mr.efficiency_jobs(ctx.version, f, 25, who)
if not t["telemetry_gpu_h"]:
    st.info(f"Idle GPUs: {ui.NO_TELEMETRY}. No reading covers these jobs' GPU-hours, so whether any job left its "
            "GPUs idle cannot be told.", icon=":material/sensors_off:")
elif worst is None or worst.height == 0:
    st.success(f"No job{f' of {who}' if who else ''} left its GPUs idle for 5 minutes or more in the window"
               + ("." if t["coverage_pct"] >= 100 - 1e-9 else
                  f", in the {t['coverage_pct']:.1f} % of allocated GPU-hours telemetry covers (the rest is unknown)."),
               icon=":material/check_circle:")
else:
    ui.table(ui.job_end(worst, "end", pl.col("running")), key="eff_worst", file_stem="efficiency_worst_offenders",
             ctx=ctx,
             columns={"job_id": "Job", "user": "User", "team": "Team", "partition": "Partition",
                      "gpu_type": "Pool (GPU type)", "ngpus": "GPUs", "start": "Started (UTC)",
                      "end": "Ended (UTC)",
                      "idle_alloc_gpu_h": "Idle-allocated (GPU-hours)", "alloc_gpu_h": "Allocated (GPU-hours)",
                      "mean_pct": "Mean activity (%)", "p95_pct": "p95 activity (%)", "metric": "Metric",
                      "method": "Attribution"},
             formats={"idle_alloc_gpu_h": "%.2f", "alloc_gpu_h": "%.2f", "mean_pct": "%.1f", "p95_pct": "%.1f",
                      "ngpus": "%g"},
             caption="Jobs with the most GPU-hours in stretches of 5 minutes or more at zero activity.")

st.subheader("By team")
ui.table(teams.sort("alloc_gpu_h", descending=True), key="eff_team_table", file_stem="efficiency_by_team", ctx=ctx,
         columns={"team": "Team", "metric": "Metric", "jobs": "Jobs", "jobs_without_telemetry": "Jobs without telemetry",
                  "alloc_gpu_h": "Allocated (GPU-hours)", "telemetry_gpu_h": "With telemetry (GPU-hours)",
                  "active_gpu_h": "Active (GPU-hours)", "idle_alloc_gpu_h": "Idle-allocated (GPU-hours)",
                  "mean_pct": "GPU efficiency (%)", "p95_pct": "p95 activity (%)", "coverage_pct": "Coverage (%)",
                  "energy_kwh": "Energy (kWh)"},
         formats={c: "%.1f" for c in ("alloc_gpu_h", "telemetry_gpu_h", "active_gpu_h", "idle_alloc_gpu_h", "mean_pct",
                                      "p95_pct", "coverage_pct", "energy_kwh")})
methods = mr.efficiency_methods(ctx.version, f)
if methods is not None and methods.height:
    ui.table(methods, label="How telemetry was attributed to jobs",
             key="eff_methods", file_stem="efficiency_attribution", ctx=ctx,
             columns={"method": "Method", "gpu_h": "Telemetry GPU-hours", "pct": "Share (%)"},
             formats={"gpu_h": "%.1f", "pct": "%.1f"},
             caption="Exact: the exporter named the job, or the job's GPU indices are known (collected while jobs "
                     "run: `gpuledger ingest job-gpus --live`, the service's job-gpus source). Node share: "
                     "readings of a node shared among its jobs in proportion to their GPUs.")
