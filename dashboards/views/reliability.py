"""Reliability: where allocated GPU-hours were lost (failures, XIDs, preemption, timeouts), per team, and which
nodes should be pulled (outages, repeat offenders, slow nodes, GPUs with XIDs)."""
from __future__ import annotations

import datetime as dt

import polars as pl
import streamlit as st

from dashboards import charts, model_reads as mr, reliability_reads as rr, theme, ui

ctx = ui.context()
f = ctx.filters
ui.header("Reliability", "How many GPU-hours did failures, slow nodes and preemption cost each team, and which "
          "nodes should be pulled?", ctx, deltas=False)


def _last_month(month) -> None:
    """The manager's answer for the last full month: per team losses by cause, slow-node held back, preemption
    and goodput; the ranked nodes to pull with the evidence. The same tables as `gpuledger report reliability
    --view teams|pull` (which default to the same month)."""
    st.subheader(f"Last full month: {month[0]:%B %Y}")
    st.caption(f"{month[0]:%Y-%m-%d} to {(month[1] - dt.timedelta(days=1)):%Y-%m-%d} UTC, whatever dates the sidebar "
               "gives; its team, cluster and pool filters apply. Lost = GPUs x time since the last checkpoint "
               "(governance [[checkpoints]]), else since the job's start.")
    teams_m = rr.month_teams(ctx.version, f)
    if teams_m.is_empty():
        st.caption("No GPU job ran in that month.")
    else:
        ui.table(teams_m.with_columns(pl.col("goodput_share") * 100), key="rel_month_teams", file_stem="month_teams",
                 ctx=ctx, columns={"team": "Team", "allocated_gpu_h": "Allocated (GPU-hours)",
                                   **{f"{c}_gpu_h": f"{lab} (GPU-hours)" for c, lab in rr.CAUSE_LABELS.items()},
                                   "failure_gpu_h": "Failures, all causes (GPU-hours)",
                                   "lost_gpu_h": "Lost incl. preemption (GPU-hours)",
                                   "slow_node_held_back_gpu_h": "Held back by slow nodes (GPU-hours)",
                                   "goodput_share": "Goodput (%)"},
                 formats={c: "%.1f" for c in teams_m.columns if c != "team"})
    pull = rr.month_pull(ctx.version, f)
    st.markdown("**Nodes to pull**: repeat offenders (significant, not counted), slow nodes, GPUs with hardware "
                "XIDs; the most flags first, then the GPU-hours at stake")
    if pull.is_empty():
        st.caption("No node was a repeat offender, slow, or carried a GPU with hardware XIDs that month.")
    else:
        ui.table(pull.select("rank", "node", "gpu_type", "flags", "at_stake_gpu_h", "outages", "evidence"),
                 key="rel_month_pull", file_stem="nodes_to_pull", ctx=ctx,
                 columns={"rank": "Rank", "node": "Node", "gpu_type": "Pool", "flags": "Flags",
                          "at_stake_gpu_h": "At stake (GPU-hours)", "outages": "Outages that month",
                          "evidence": "Evidence"}, formats={"at_stake_gpu_h": "%.1f"})
    st.divider()


month = rr.last_full_month(ctx.version)
if month is not None:
    _last_month(month)
    st.subheader("In the selected window")

CAUSE_COLOURS = {"Node failure": theme.BAD, "GPU XID": "#C05621", "Other outage": "#D69E2E",
                 "Preemption": "#6B46C1", "Requeue": "#9F7AEA", "Timeout": "#718096", "Job failed": "#A0AEC0"}

total = rr.losses(ctx.version, f)
if total.is_empty() or not total["allocated_gpu_h"][0]:
    ui.no_data("allocated GPU-hours", "Widen the dates or clear a filter (the loss marts are built by "
               "`gpuledger refresh`).")
    st.stop()
t = total.row(0, named=True)
hw = t["node_failure_gpu_h"] + t["gpu_xid_gpu_h"] + t["outage_gpu_h"]
off = rr.offenders(ctx.version, f)
flagged = int(off["flagged"].sum()) if off.height else 0
k = st.columns(4)
ui.kpi(k[0], "Lost GPU-hours", f"{t['lost_gpu_h']:,.0f}", f"of {t['allocated_gpu_h']:,.0f} allocated",
       delta_color="off", arrow=False, help="GPU-hours of jobs that ended by a failure, preemption, requeue or "
       "timeout, since their last checkpoint (or their start when no interval is known).")
ui.kpi(k[1], "Goodput", ui.pct(t["goodput_share"]), help="Allocated GPU-hours minus lost, as a share of allocated.")
b = rr.basis(ctx.version, f)
seen = [label for c, label in (("gpu_xid", "GPU XIDs"), ("outage", "outages")) if c not in b["unknown"]]
ui.kpi(k[2], "Lost to hardware", f"{hw:,.0f}", None if len(seen) == 2 else "node failures" + "".join(
       f", {x}" for x in seen) + " only", delta_color="off", arrow=False,
       help="Node failures, GPU XIDs and other outages (GPU-hours).")
ui.kpi(k[3], "Nodes flagged", f"{flagged:,}", help="Nodes whose jobs fail significantly more often than their "
       "pool's (one-sided binomial test, Benjamini-Hochberg q <= 0.05).")
st.caption(f"Lost since a known checkpoint: {b['checkpoint_gpu_h']:,.0f} GPU-h; since the job's start (no checkpoint "
           f"interval in the governance file): {b['since_start_gpu_h']:,.0f} GPU-h. Whole UTC days."
           + "".join(f" {rr.CAUSE_LABELS[c]}: not known, shown as 0: {why}." for c, why in b["unknown"].items()))


def _by_cause(df: pl.DataFrame, key: str) -> pl.DataFrame:
    return (df.select(key, *[f"{c}_gpu_h" for c in rr.CAUSE_LABELS])
            .unpivot(index=key, variable_name="cause", value_name="gpu_h")
            .with_columns(pl.col("cause").str.replace("_gpu_h$", "").replace_strict(rr.CAUSE_LABELS)))


teams = rr.losses(ctx.version, f, "team").sort("lost_gpu_h", descending=True)
left, right = st.columns(2)
with left:
    ui.chart(st, charts.bars(_by_cause(teams, "team"), "team", "gpu_h", color="cause", colours=CAUSE_COLOURS,
                             horizontal=True, category_order=teams["team"].to_list(), y_title="Lost GPU-hours",
                             x_title="Team", title="Lost GPU-hours by team and cause",
                             height=max(300, 110 + 34 * teams.height)), key="rel_teams")
bucket = rr.loss_bucket(f)
per = rr.losses(ctx.version, f, None, bucket)
partial = ui.partial_bucket(mr.utilization(ctx.version, f, bucket), bucket)   # the data end inside the last one
with right:     # a time axis (as the other pages' charts), not one category per day written out sideways
    fig = charts.bars(_by_cause(per, "bucket"), "bucket", "gpu_h", color="cause", colours=CAUSE_COLOURS,
                      y_title="Lost GPU-hours", x_title=bucket.title(), title=f"Lost GPU-hours per {bucket}")
    ui.chart(st, charts.mark_partial(fig, *partial) if partial and per.height else fig, key="rel_time")
ui.table(teams.with_columns(pl.col("goodput_share") * 100), key="rel_team_table", file_stem="losses_by_team", ctx=ctx,
         columns={"team": "Team", "allocated_gpu_h": "Allocated (GPU-hours)", "lost_gpu_h": "Lost (GPU-hours)",
                  **{f"{c}_gpu_h": f"{lab} (GPU-hours)" for c, lab in rr.CAUSE_LABELS.items()},
                  "goodput_share": "Goodput (%)", "jobs": "Jobs that lost work"},
         formats={"goodput_share": "%.1f", "allocated_gpu_h": "%.1f", "lost_gpu_h": "%.1f"})

def _stops(until: dict) -> str:
    """Where node-hours and open outages stop, as `report reliability` notes it, when before the window's end."""
    return (" Node-hours and open outages stop at the last time anything of the cluster is known: "
            + ", ".join(f"{c} {t:%Y-%m-%d %H:%M} UTC" for c, t in until.items()) + ".") if until else ""


st.subheader("Nodes to pull")
slow = rr.slow_nodes(ctx.version, f) if rr.telemetry(ctx.version) else None
a, c = st.columns(2)
with a:
    st.markdown("**Repeat offenders**: jobs fail more often than on the pool's other nodes")
    shown = off.filter(pl.col("flagged")) if off.height else off
    if shown.is_empty():
        st.caption("No node's failure rate is significantly above its pool's in this window.")
    else:
        ui.table(shown, key="rel_offenders", file_stem="repeat_offenders", ctx=ctx,
                 columns={"node": "Node", "gpu_type": "Pool", "jobs": "Jobs ended", "failed": "Failed",
                          "fail_rate": "Failure rate", "pool_rate": "Pool rate", "q_value": "q-value"})
with c:
    st.markdown("**Slow nodes**: below their peers for most of multi-node jobs")
    if slow is None:
        st.caption("No GPU telemetry in this warehouse: slow nodes and XIDs need DCGM or nvidia-smi readings "
                   "(`gpuledger ingest prometheus|dcgm|nvidia-smi`).")
    elif slow.is_empty():
        st.caption("No node stayed below its peers in two or more multi-node jobs in this window.")
    else:
        ui.table(slow, key="rel_slow", file_stem="slow_nodes", ctx=ctx,
                 columns={"node": "Node", "gpu_type": "Pool", "slow_jobs": "Slow in jobs",
                          "multi_node_jobs": "Multi-node jobs", "minutes_below": "Minutes below",
                          "activity_gap_pct": "Activity gap (points)", "power_gap_w": "Power gap (W)",
                          "held_back_gpu_h": "Held back (GPU-hours)", "metric": "Metric"})
st.markdown("**Node outages**: unplanned outages (DOWN, DRAIN, FAIL ...) starting in the window, the most first")
nodes = rr.nodes(ctx.version, f).filter(pl.col("outages") > 0)
if nodes.is_empty():
    st.caption("No unplanned node outage started in this window.")
else:
    ui.table(nodes.head(50), key="rel_nodes", file_stem="node_outages", ctx=ctx,
             columns={"node": "Node", "gpu_type": "Pool", "outages": "Outages", "down_h": "Down (hours)",
                      "mttr_h": "MTTR (hours)", "mtbf_h": "MTBF (hours)", "jobs_killed": "Jobs killed",
                      "lost_gpu_h": "Lost (GPU-hours)"},
             caption="MTTR: mean hours to repair, over the outages that ended; MTBF: node-hours in the window / "
                     "outages." + _stops(rr.observed_until(ctx.version, f))
                     + (f" The first 50 of {nodes.height} nodes." if nodes.height > 50 else ""))
if slow is not None:
    x = rr.xid_gpus(ctx.version, f)
    if x.height:
        st.markdown("**GPUs with XID errors, slowdown throttling, row-remap failures or ECC double-bit errors**")
        ui.table(x, key="rel_xid", file_stem="xid_gpus", ctx=ctx,
                 columns={"node": "Node", "gpu": "GPU", "gpu_type": "Pool", "xid_events": "XID events",
                          "memory": "Memory/ECC", "bus": "Off the bus", "nvlink": "NVLink",
                          "application": "Application", "other": "Other", "codes": "XID codes",
                          "throttle_events": "Throttling", "row_remap_failures": "Row-remap failures",
                          "ecc_dbe_events": "ECC double-bit"})

st.subheader("Jobs that lost the most")
jobs = rr.loss_jobs(ctx.version, f)
if jobs.is_empty():
    ui.no_data("jobs that lost work")
else:
    ui.table(jobs.with_columns(pl.col("cause").replace_strict(rr.CAUSE_LABELS)), key="rel_jobs",
             file_stem="loss_jobs", ctx=ctx,
             columns={"job_id": "Job", "team": "Team", "state": "State", "cause": "Cause", "detail": "Detail",
                      "event_node": "Node", "end": "Ended (UTC)", "ngpus": "GPUs", "lost_gpu_h": "Lost (GPU-hours)",
                      "basis": "Measured"})
