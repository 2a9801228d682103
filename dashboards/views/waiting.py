"""Why jobs wait: pending reasons per team, preemption (victims and preemptors), reservations and their idle GPUs."""
from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards import charts, model_reads as mr, theme, ui
from models.definitions.reasons import CLASSES

ctx = ui.context()
f = ctx.filters
ui.header("Why jobs wait", "What holds each team's jobs in the queue, who preempts whom, and what reserved GPUs "
          "sat idle?", ctx, deltas=False)

classes = mr.pending_classes(ctx.version, f)
cov = mr.pending_coverage(ctx.version)
pre_victims, pre_by = mr.preemption(ctx.version, f)
resv = mr.reservations(ctx.version, f)

k = st.columns(4)
wait = float(classes["wait_gpu_h"].sum()) if classes.height else None
ui.kpi(k[0], "Waiting (GPU-hours)", f"{wait:,.1f}" if wait is not None else None,
       help="Requested GPUs x time from submit until the job started (or left the queue), inside the window.",
       missing="no GPU job waited in the window")
# no snapshot ever loaded: "0.0 %" would read as snapshots that explained nothing
share = (float((classes["wait_gpu_h"] * classes["from_snapshots_share"].fill_null(0)).sum()) / wait
         if wait and cov.get("snapshots") else None)
# the span the snapshots cover: a share well below 100 % often says only that collection began inside the window
span = f"snapshots {cov['first']:%Y-%m-%d} to {cov['last']:%Y-%m-%d}" if share is not None else None
ui.kpi(k[1], "Explained by squeue snapshots", ui.pct(share), span, delta_color="off", arrow=False,
       help="The share of the wait whose Slurm reason a queue snapshot recorded; the rest comes from sacct's last "
       "reason or is unknown.",
       missing="no wait to explain" if not wait else "not known: no squeue snapshots loaded (`gpuledger ingest "
       "squeue`)")
ui.kpi(k[2], "Preempted (GPU-hours)",
       f"{pre_victims['preempted_gpu_h'].sum():,.1f}" if pre_victims.height else "0",
       f"{int(pre_victims['requeues'].sum()):,} requeues" if pre_victims.height else None, delta_color="off",
       arrow=False, help="GPU-hours of runs that ended PREEMPTED in the window (all lost: counted from each run's start).")
# no reservation ever loaded: how much reserved capacity sat idle is not known, not 0
idle = mr.reserved_idle(ctx.version, f)
ui.kpi(k[3], "Reserved but idle (GPU-hours)", None if idle is None else f"{idle:,.1f}",
       f"of {resv['reserved_gpu_h'].sum():,.1f} reserved" if resv.height else None, delta_color="off", arrow=False,
       missing="not known: no reservations loaded (`gpuledger ingest reservations`)",
       help="Reserved GPUs no job held; charged to the reservation's owner in the chargeback (line 'reserved idle').")

# ---------------------------------------------------------------- pending reasons
st.subheader("Waiting GPU-hours by team and reason")
if not cov.get("snapshots"):
    st.info("No squeue snapshots in the warehouse (`gpuledger ingest squeue`): reasons come from sacct's last "
            "reason where the export had one, else they are unknown.", icon=":material/info:")
if classes.height == 0:
    ui.no_data("waiting GPU jobs", "Widen the dates or clear a filter.")
else:
    cols = {f"{c.replace(' ', '_')}_gpu_h": c for c in CLASSES}
    long = (classes.select("team", *cols).unpivot(index="team", variable_name="col", value_name="gpu_h")
            .with_columns(pl.col("col").replace_strict(cols).alias("reason class")).filter(pl.col("gpu_h") > 0))
    ui.chart(st, charts.bars(long, "team", "gpu_h", color="reason class", colours=theme.REASON_COLOURS,
                             horizontal=True, y_title="Waiting GPU-hours", x_title="Team",
                             title="Why each team's jobs waited",
                             height=max(300, 110 + 44 * classes.height)), key="wait_classes")
    ui.table(classes, key="wait_class_table", file_stem="pending_by_class", ctx=ctx,
             columns={"team": "Team", "wait_gpu_h": "Waiting (GPU-h)",
                      **{k: f"{v.capitalize()} (GPU-h)" for k, v in cols.items()},
                      "from_snapshots_share": "From snapshots",
                      "blocked_by_fragmentation_gpu_h": "Blocked by fragmentation (GPU-h, beside)"},
             formats={c: "%.2f" for c in [*cols, "wait_gpu_h", "blocked_by_fragmentation_gpu_h",
                                         "from_snapshots_share"]},
             caption="Not yet evaluated: Slurm's reason None, no scheduling pass had looked at the job (a large share "
                     "says the scheduler's passes do not reach the queue). Blocked by fragmentation: eligible wait "
                     "while enough GPUs were free but scattered, whatever Slurm's reason (another view of the same "
                     "wait, not added).")
    ui.table(mr.pending_reasons(ctx.version, f), label="Each Slurm reason",
             key="wait_reason_table", file_stem="pending_by_reason", ctx=ctx,
             columns={"team": "Team", "class": "Class", "reason": "Slurm reason", "source": "Source",
                      "jobs": "Jobs", "before_eligible_gpu_h": "Before eligible (GPU-h)",
                      "eligible_gpu_h": "Eligible (GPU-h)", "wait_gpu_h": "Waiting (GPU-h)",
                      "share_of_wait": "Share of the team's wait"},
             formats={"before_eligible_gpu_h": "%.2f", "eligible_gpu_h": "%.2f", "wait_gpu_h": "%.2f",
                      "share_of_wait": "%.3f"})

# ---------------------------------------------------------------- preemption
st.subheader("Preemption")
if pre_victims.height == 0 or pre_victims["preempted_jobs"].sum() + pre_victims["requeues"].sum() == 0:
    st.success("No job was preempted or requeued in the window.", icon=":material/check_circle:")
else:
    left, right = st.columns(2)
    with left:
        ui.table(pre_victims, key="pre_victims", file_stem="preemption_victims", ctx=ctx, label="Victims by team",
                 columns={"team": "Team (victim)", "preempted_jobs": "Preempted runs",
                          "preempted_gpu_h": "Preempted (GPU-h)", "work_lost_gpu_h": "Work lost (GPU-h, since start)",
                          "requeues": "Requeues", "preemptor_found": "Preemptor found"},
                 formats={"preempted_gpu_h": "%.2f", "work_lost_gpu_h": "%.2f"})
    with right:
        ui.table(pre_by, key="pre_by", file_stem="preemption_preemptors", ctx=ctx, label="Who preempted whom",
                 columns={"preemptor_qos": "Preemptor QOS", "preemptor_partition": "Preemptor partition",
                          "preemptor_team": "Preemptor team",
                          "victim_team": "Victim team", "victims": "Victims", "preempted_gpu_h": "Preempted (GPU-h)"},
                 formats={"preempted_gpu_h": "%.2f"})

# ---------------------------------------------------------------- reservations
st.subheader("Reservations")
if resv.height == 0:
    ui.no_data("reservations in the window", "Load them with `gpuledger ingest reservations`.")
else:
    ui.table(resv.sort("reserved_idle_gpu_h", descending=True), key="resv", file_stem="reservations", ctx=ctx,
             columns={"name": "Reservation", "team": "Owner team", "owner_account": "Account", "owner_user": "User",
                      "start": "Start (UTC)", "end": "End (UTC)", "nodelist": "Nodes", "gpu_type": "Pool",
                      "gpus": "GPUs", "jobs": "Jobs inside", "reserved_gpu_h": "Reserved (GPU-h)",
                      "used_gpu_h": "Used (GPU-h)", "reserved_idle_gpu_h": "Idle (GPU-h)", "used_share": "Used share"},
             formats={"reserved_gpu_h": "%.2f", "used_gpu_h": "%.2f", "reserved_idle_gpu_h": "%.2f",
                      "used_share": "%.3f", "gpus": "%g"},
             caption="Idle reserved GPU-hours are charged to the owner in the chargeback (line kind 'reserved idle').")
