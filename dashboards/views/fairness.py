"""Fairness & queues: is the cluster shared as agreed, and who waits too long?"""
from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards import charts, model_reads as mr, theme, ui
from models.definitions.labels import SIZE_CLASSES, size_order

ctx = ui.context()
f = ctx.filters
ui.header("Fairness & queues", "Does each team get its share, and who waits too long?", ctx)


threshold = st.session_state.get("fq_threshold", 24)
mr.prefetch([lambda: mr.fairness(ctx.version, f), lambda: mr.fairness(ctx.version, f.previous()),
             lambda: mr.starvation(ctx.version, f, threshold), lambda: mr.waits(ctx.version, f, ("cluster",)),
             lambda: mr.waits(ctx.version, f, ("team", "size_class"))])


# ---------------------------------------------------------------- queue figures (no governance needed)

def _wait_kpis(col_wait, col_starv, starv) -> None:
    """p95 queue wait and jobs pending past the threshold: Slurm's accounting alone gives them."""
    w = mr.worst_wait(ctx.version, f)
    if w is not None:
        ui.kpi(col_wait, "p95 queue wait", f"{w['wait_p95_h']:.1f} h", f"median {w['wait_p50_h']:.1f} h",
               delta_color="off", arrow=False, help="Of jobs that started in the window, from eligible to start. "
               "With several clusters or selected teams: the worst of them.")
    else:
        ui.kpi(col_wait, "p95 queue wait", None, missing="no job started in the window")
    if starv is not None:
        n_starving = int(starv[0]["pending_over_threshold"].sum()) if starv[0].height else 0
        ui.kpi(col_starv, f"Pending > {threshold:g} h now", f"{n_starving:,}",
               f"{int(starv[0]['started_after_threshold'].sum()):,} started after > {threshold:g} h"
               if starv[0].height else None, delta_color="off", arrow=False,
               help="Jobs still waiting at the end of the window longer than the starvation threshold.")


def _waits() -> None:
    """Queue waits by team and request size: heatmap and table."""
    st.subheader("Queue waits by team and request size")
    wt = mr.waits(ctx.version, f, ("team", "size_class"))
    if wt is None or wt.height == 0:
        ui.no_data("jobs that started in the window")
    else:
        extra = [c for c in ("cluster", "pool", "partition") if c in wt.columns and wt[c].n_unique() > 1]
        label = (pl.concat_str([pl.col("team"), *[pl.col(c) for c in extra]], separator=" · ") if extra
                 else pl.col("team"))
        grid = wt.with_columns(label.alias("row"))
        present = set(grid["size_class"].cast(pl.String).to_list())
        sizes = [s for s in SIZE_CLASSES if s in present]       # the defined order, never alphabetical
        grid = grid.with_columns(pl.col("size_class").cast(pl.String))
        ui.chart(st, charts.heatmap(grid, "size_class", "row", "wait_p95_h", z_title="p95 wait (h)",
                                    x_title="Requested GPUs", y_title=None, x_order=sizes, colorscale="Oranges",
                                    top_down=True,
                                    title="p95 queue wait (hours) by team and request size",
                                    height=max(280, 90 + 36 * grid["row"].n_unique())), key="fq_waits")
        ui.table(wt.sort(pl.col("team"), size_order(pl.col("size_class").cast(pl.String))), key="fq_wait_table",
                 file_stem="queue_waits", ctx=ctx,
                 columns={"team": "Team", "cluster": "Cluster", "pool": "Pool (GPU type)", "partition": "Partition",
                          "size_class": "Requested GPUs", "jobs": "Jobs started", "wait_p50_h": "p50 wait (h)",
                          "wait_p90_h": "p90 wait (h)", "wait_p95_h": "p95 wait (h)", "wait_max_h": "Max wait (h)",
                          "bsld_p95": "p95 bounded slowdown", "p95_vs_all": "p95 vs all jobs' p95"},
                 formats={c: "%.2f" for c in ("wait_p50_h", "wait_p90_h", "wait_p95_h", "wait_max_h", "bsld_p95",
                                              "p95_vs_all")})


def _starvation(starv) -> None:
    """The threshold, the jobs pending past it, and per team."""
    st.subheader("Starvation")
    st.number_input("Starvation threshold (hours)", 1, 24 * 14, 24, 1, key="fq_threshold",
                    help="A job waiting longer than this is starving (default 24 h).")
    if starv is not None:
        per_team, pending = starv
        if pending.height == 0:
            st.success(f"No job had been waiting more than {threshold:g} h at the end of the window.",
                       icon=":material/check_circle:")
        else:
            ui.table(pending.sort("pending_h", descending=True), key="fq_starving", file_stem="starving_jobs",
                     ctx=ctx, columns={"job_id": "Job", "team": "Team", "user": "User", "account": "Slurm account",
                                       "qos": "QOS", "pool": "Pool (GPU type)", "gpus_requested": "GPUs requested",
                                       "eligible_at": "Eligible (UTC)", "pending_h": "Waiting (h)"},
                     formats={"pending_h": "%.1f", "gpus_requested": "%g"},
                     caption="Jobs still pending at the end of the window, longest waiting first.")
        if per_team.height:
            ui.table(per_team, label="Per team", key="fq_starv_team", file_stem="starvation_by_team", ctx=ctx,
                     columns={"team": "Team", "started_after_threshold": f"Started after > {threshold:g} h",
                              "longest_wait_h": "Longest wait (h)", "pending_now": "Pending now",
                              "pending_over_threshold": f"Pending > {threshold:g} h",
                              "gpus_pending_over_threshold": f"GPUs pending > {threshold:g} h",
                              "oldest_pending_h": "Oldest pending (h)"},
                     formats={"longest_wait_h": "%.1f", "oldest_pending_h": "%.1f",
                              "gpus_pending_over_threshold": "%g"})


rep = mr.fairness(ctx.version, f)
starv = mr.starvation(ctx.version, f, threshold)
if isinstance(rep, str):    # the shares need teams and entitlements; the queue figures do not
    st.info(f"Fairness needs the governance file (teams and entitlements): {rep}. The queue figures below come "
            "from Slurm's accounting alone.", icon=":material/gavel:")
    _wait_kpis(*st.columns(5)[:2], starv)
    _waits()
    _starvation(starv)
    st.stop()
teams_all, pools_all = rep["teams"], rep["pools"]
if teams_all.height == 0:
    ui.no_data("usage or demand", "Widen the dates or clear a filter.")
    st.stop()
POOL_ALL = "(all)"
pool = mr.fairness_pool(f)
scope = "the whole cluster" if pool == POOL_ALL else f"the {pool} pool"
teams = teams_all.filter(pl.col("pool") == pool)
pools = pools_all.filter(pl.col("pool") == pool)
before = mr.fairness(ctx.version, f.previous())
pools_before = before["pools"].filter(pl.col("pool") == pool) if isinstance(before, dict) and before["pools"].height \
    else pl.DataFrame()
p = pools.row(0, named=True) if pools.height == 1 else {}
pb = pools_before.row(0, named=True) if pools_before.height == 1 else {}
if len(f.pools) > 1:
    st.caption("Several pools are selected: the figures below are for the whole cluster; the table lists each pool.")

k = st.columns(5)
jain, jain_before = mr.jain(ctx.version, f), mr.jain(ctx.version, f.previous())
ui.kpi(k[0], "Fairness (Jain index)", f"{jain:.2f}" if jain is not None else None,
       None if jain is None or jain_before is None else f"{jain - jain_before:+.2f}",
       help="Jain's index over usage/entitlement ratios of the teams that had jobs waiting: 1 = every team with "
            "demand got the same multiple of its share; 1/n = one team got it all.",
       missing="no team had pending demand")
gini = p.get("gini")
ui.kpi(k[1], "Gini of share ratios", f"{gini:.2f}" if gini is not None else None,
       None if gini is None or pb.get("gini") is None else f"{gini - pb['gini']:+.2f}",
       delta_color="inverse", help="0 = usage proportional to entitlement for every active team.",
       missing="no active entitled team")
gap = p.get("max_gap")
ui.kpi(k[2], "Largest entitlement gap", f"{100 * gap:.0f} %" if gap else "none",
       f"{p['max_gap_team']}" if gap and p.get("max_gap_team") else None, delta_color="off", arrow=False,
       help="Share of its entitlement a team wanted (usage + pending demand) but did not get in the window.")
_wait_kpis(k[3], k[4], starv)

# ---------------------------------------------------------------- shares
left, right = st.columns(2)
shares = (teams.select("team", pl.col("usage_share").alias("Usage share"),
                       pl.col("entitlement_share").alias("Entitlement share"))
          .unpivot(index="team", variable_name="what", value_name="share")
          .with_columns(pl.col("share") * 100))
order = teams.sort("entitlement_share", descending=True)["team"].to_list()
with left:
    ui.chart(st, charts.bars(shares, "team", "share", color="what", barmode="group", horizontal=True,
                             category_order=order,
                             colours={"Entitlement share": "#A5B8CF", "Usage share": theme.PRIMARY},
                             y_title="Share of GPU-hours (%)", x_title="Team",
                             title=f"Usage vs entitlement, {scope}", height=max(300, 110 + 44 * len(order))),
                 key="fq_shares")
with right:
    ratio = teams.filter(pl.col("share_ratio").is_not_null())
    fig = charts.bars(ratio, "team", "share_ratio", color="team", colours=ctx.team_colours, horizontal=True,
                      category_order=[t for t in order if t in set(ratio["team"].to_list())],
                      y_title="Usage share / entitlement share", x_title="Team", reference=1.0,
                      reference_text="fair", title="Share ratio (1 = got exactly its share)",
                      height=max(300, 110 + 44 * len(order)))
    fig.update_layout(showlegend=False)
    ui.chart(st, fig, key="fq_ratio")

_waits()
_starvation(starv)

st.subheader("Shares and fair-share factors")
table = teams_all.filter(pl.col("pool").is_in(f.pools) if f.pools else pl.lit(True)).with_columns(
    (pl.col("usage_share") * 100), (pl.col("entitlement_share") * 100), (pl.col("gap") * 100))
ui.table(table.sort("pool", "team"), key="fq_teams", file_stem="fairness", ctx=ctx,
         columns={"pool": "Pool (GPU type)", "team": "Team", "usage_gpu_h": "Usage (GPU-hours)",
                  "usage_share": "Usage share (%)", "entitled_gpu_h": "Entitlement (GPU-hours)",
                  "entitlement_share": "Entitlement share (%)", "share_ratio": "Share ratio",
                  "fairshare_classic": "Slurm fair-share factor F", "level_fs": "Fair Tree level factor",
                  "pending_gpu_h": "Pending demand (GPU-hours)", "gap": "Entitlement gap (%)"},
         formats={"usage_gpu_h": "%.1f", "usage_share": "%.1f", "entitled_gpu_h": "%.1f", "entitlement_share": "%.1f",
                  "share_ratio": "%.2f", "fairshare_classic": "%.3f", "level_fs": "%.2f", "pending_gpu_h": "%.1f",
                  "gap": "%.1f"},
         caption="F = 2^(-usage/share) with usage decayed by the governance half-life (0.5 = usage equals the "
                 "share), to compare with `sshare`; the Fair Tree level factor is share / usage (> 1 under-served).")
