"""Fragmentation: why jobs wait while GPUs sit free (free-GPU histogram, stranded GPUs, blocked waits)."""
from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards import charts, model_reads as mr, theme, ui
from models.definitions.labels import size_order
from models.metrics.fragmentation import WINDOW_BUCKET

ctx = ui.context()
f = ctx.filters
ui.header("Fragmentation", "Why do jobs wait while GPUs sit free?", ctx)


bucket = mr.auto_bucket(f)
mr.prefetch([lambda: mr.blocked(ctx.version, f), lambda: mr.fragmentation(ctx.version, f, bucket),
             lambda: mr.fragmentation(ctx.version, f, WINDOW_BUCKET),
             lambda: mr.fragmentation(ctx.version, f.previous(), WINDOW_BUCKET)])
frag = mr.fragmentation(ctx.version, f, bucket)
if frag is None or frag.height == 0:
    if mr.capacity_known(ctx.version, f):
        ui.no_data("node samples", "Widen the dates or clear a filter.")
    else:   # no filter brings samples back: there are no nodes to sample
        st.info(f"Fragmentation needs the nodes' free GPUs: {mr.NO_CAPACITY}.", icon=":material/info:")
    st.stop()
lost = mr.unplaced(ctx.version, f)
if lost["jobs"]:
    st.warning(f"{lost['jobs']:,} jobs held {lost['gpu_h']:,.1f} GPU-hours in the window by their records but name "
               "no node (a trace without placement, e.g. openb's pod lists): the free GPUs here count theirs as "
               "free, so free GPUs, whole free nodes and fragmentation overstate.", icon=":material/help:")
blocked_rows = mr.blocked(ctx.version, f)
blocked_all = mr.blocked_by(blocked_rows, []) if blocked_rows is not None else None


def _mean(df: pl.DataFrame, col: str) -> float:
    """Mean over the window's samples of a per-sample quantity summed over pools."""
    per_bucket = df.group_by("bucket").agg(pl.col(col).sum(), pl.col("samples").max())
    return (per_bucket[col] * per_bucket["samples"]).sum() / per_bucket["samples"].sum()


rate, rate_before = mr.fragmentation_rate(ctx.version, f), mr.fragmentation_rate(ctx.version, f.previous())
k = st.columns(5)
ui.kpi(k[0], "Fragmentation rate (FGD)", ui.pct(rate), ui.pp_delta(rate, rate_before), delta_color="inverse",
       missing=mr.fragmentation_missing(ctx.version, f),
       help="Free GPUs that the typical requests of the period could not use, over all free GPUs (Weng et al., "
            "ATC'23), on available nodes, over the window's 5-minute samples, each day's samples against the "
            "requests submitted that day.")
ui.kpi(k[1], "Free GPUs (mean)", f"{_mean(frag, 'free_gpus'):,.1f}", help="On available nodes, mean over samples.")
ui.kpi(k[2], "Whole free nodes (mean)", f"{_mean(frag, 'whole_free_nodes'):,.1f}")
ui.kpi(k[3], "Stranded for 8-GPU jobs (mean)",
       f"{_mean(frag, 'stranded_8'):,.1f} GPUs" if "stranded_8" in frag.columns else None,
       help="Free GPUs on nodes with fewer than 8 free: an 8-GPU job cannot use them.", missing="no 8-GPU nodes")
if blocked_all is not None and (blocked_all["wait_gpu_h"][0] or 0) > 0:
    ui.kpi(k[4], "Waiting blocked by fragmentation", ui.pct(mr.blocked_share(ctx.version, f)),
           missing=mr.blocked_missing(ctx.version, f),
           help="Share of the queue wait (GPU-hours) of jobs pending in the window during which enough GPUs were "
                "free in their partitions but no node (or set of nodes) could take the job.")
else:
    ui.kpi(k[4], "Waiting blocked by fragmentation", None, missing="no queue wait in the window")

# ---------------------------------------------------------------- free-GPU histogram over time
ks = sorted(int(c.rsplit("_", 1)[1]) for c in frag.columns if c.startswith("nodes_free_"))
hist = (frag.group_by("bucket").agg([pl.col(f"nodes_free_{k}").sum() for k in ks])
        .unpivot(index="bucket", variable_name="k", value_name="nodes")
        .with_columns(pl.col("k").str.replace("nodes_free_", "").cast(pl.Int64)))
left, right = st.columns([3, 2])
with left:
    ui.chart(st, charts.heatmap(hist, "bucket", "k", "nodes", z_title="Nodes (mean)", x_title=None,
                                y_title="Free GPUs on the node", y_order=ks, colorscale="Blues",
                                title=f"Free-GPU histogram per {bucket}: nodes with k free GPUs", height=380,
                                z_format=",.2f"), key="frag_hist")
sizes = [c for c in frag.columns if c.startswith("stranded_")]
stranded = (frag.select("bucket", "gpu_type", "samples", *sizes)
            .with_columns(pl.col(c) * pl.col("samples") for c in sizes)
            .group_by("gpu_type").agg(*[pl.col(c).sum() for c in sizes], pl.col("samples").sum())
            .with_columns(pl.col(c) / pl.col("samples") for c in sizes)
            .unpivot(index=["gpu_type", "samples"], on=sizes, variable_name="size", value_name="gpus")
            .with_columns(pl.col("size").str.replace("stranded_", "")
                          .replace({"multinode": "multi-node"}).alias("size")))
stranded_order = [s.replace("stranded_", "").replace("multinode", "multi-node") for s in sizes]
with right:
    ui.chart(st, charts.bars(stranded, "size", "gpus", color="gpu_type", category_order=stranded_order,
        colours=ctx.pool_colours, barmode="group", y_title="Stranded GPUs (mean)", x_title="Request size (GPUs)",
        title="Free GPUs a request of each size could not use", height=380), key="frag_stranded")

ui.chart(st, charts.lines(frag.with_columns(pl.col("fgd_rate") * 100), "bucket", "fgd_rate", color="gpu_type",
                          colours=ctx.pool_colours, y_title="Fragmentation rate (%)", markers=bucket != "hour",
                          title=f"FGD fragmentation rate by pool per {bucket}", height=320), key="frag_rate")

# ---------------------------------------------------------------- blocked by fragmentation
st.subheader("Queue wait blocked by fragmentation")
by_team = mr.blocked_by(blocked_rows, ["team"]).filter(pl.col("wait_gpu_h") > 0)
by_size = mr.blocked_by(blocked_rows, ["size_class"]).filter(pl.col("wait_gpu_h") > 0)
CLASSES = {"fragmentation_gpu_h": "Fragmentation", "capacity_gpu_h": "Too few free GPUs",
           "placeable_gpu_h": "Placeable", "unknown_gpu_h": "Unknown"}
colours = {"Fragmentation": theme.BAD, "Too few free GPUs": "#F2A541", "Placeable": "#A5B8CF",
           "Unknown": "#D5D9DE"}

def _classes(df: pl.DataFrame, key: str) -> pl.DataFrame:
    return (df.select(key, *CLASSES).unpivot(index=key, variable_name="why", value_name="gpu_h")
            .with_columns(pl.col("why").replace_strict(CLASSES), pl.col(key).cast(pl.String)))

l2, r2 = st.columns(2)
if by_team is not None and by_team.height:
    order = by_team.sort("wait_gpu_h", descending=True)["team"].to_list()
    ui.chart(l2, charts.bars(_classes(by_team, "team"), "team", "gpu_h", color="why", category_order=order,
        colours=colours, horizontal=True, y_title="Queue wait (GPU-hours)", x_title="Team",
        title="Why each team's jobs waited", height=max(300, 110 + 34 * len(order))), key="frag_blocked_team")
if by_size is not None and by_size.height:
    ui.chart(r2, charts.bars(_classes(by_size, "size_class"), "size_class", "gpu_h", color="why",
                             category_order=by_size.sort(size_order(pl.col("size_class").cast(pl.String)))["size_class"]
                             .cast(pl.String).to_list(),
                             colours=colours, y_title="Queue wait (GPU-hours)", x_title="Request size class",
                             title="Why jobs of each size waited", height=380), key="frag_blocked_size")
st.caption("Each 5-minute sample of a job's wait is classed: **fragmentation** when its partitions had enough "
           "free GPUs in total but no node (or set of whole nodes) could take it; **too few free GPUs**; "
           "**placeable** when GPUs were there and priority, limits or backfill order held it; **unknown** "
           "without a node inventory for the time.")
if by_team is not None and by_team.height:
    ui.table(by_team.with_columns(pl.col("fragmentation_share") * 100).sort("wait_gpu_h", descending=True),
             key="frag_blocked", file_stem="blocked_by_fragmentation", ctx=ctx,
             columns={"team": "Team", "jobs": "Jobs that waited", "wait_gpu_h": "Queue wait (GPU-hours)",
                      "fragmentation_gpu_h": "Blocked by fragmentation (GPU-hours)",
                      "capacity_gpu_h": "Not enough free GPUs (GPU-hours)",
                      "placeable_gpu_h": "Placeable (GPU-hours)",
                      "fragmentation_share": "Share of wait blocked by fragmentation (%)"},
             formats={c: "%.1f" for c in ("wait_gpu_h", "fragmentation_gpu_h", "capacity_gpu_h",
                                          "placeable_gpu_h", "fragmentation_share")})

st.subheader(f"By {bucket} and pool")
table_cols = {"bucket": f"Period ({bucket}, UTC)", "gpu_type": "Pool (GPU type)", "nodes_up": "Available nodes (mean)",
              "free_gpus": "Free GPUs (mean)", "whole_free_nodes": "Whole free nodes (mean)",
              "largest_single_node": "Largest one-node request (GPUs, mean)", "fgd_rate_pct": "FGD rate (%)"}
table_cols.update({c: f"Stranded for {c.split('_')[1]}-GPU jobs (mean)" for c in sizes if c != "stranded_multinode"})
if "stranded_multinode" in sizes:
    table_cols["stranded_multinode"] = "Stranded for multi-node jobs (mean)"
ui.table(ui.period_column(frag.with_columns((pl.col("fgd_rate") * 100).alias("fgd_rate_pct")), bucket), key="frag",
         file_stem="fragmentation",
         ctx=ctx, columns=table_cols, formats={c: "%.2f" for c in table_cols if c not in ("bucket", "gpu_type")})
if f.teams:
    st.caption("Free-GPU figures describe nodes, not teams: the team filter applies to the queue-wait section only.")
