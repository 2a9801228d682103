"""Chargeback: what each team and cost centre owes for a month, reconciled to the cent, with the exports."""
from __future__ import annotations

import re

import polars as pl
import streamlit as st

from dashboards import access, actions, charts, exports, model_reads as mr, theme, ui
from models.metrics import chargeback

ctx = ui.context()
f = ctx.filters
st.title("Chargeback")
st.markdown("**What did each team cost, and does it add up to what the cluster cost?**")


periods, closed = mr.chargeback_periods(ctx.version, ctx.cat.first_day, ctx.cat.last_day)
default = f.month
top = st.columns([1, 3])
period = top[0].selectbox("Statement period (month)", periods, key="cb_period",
                          index=periods.index(default) if default in periods else 0,
                          help="Statements are per calendar month in the governance file's time zone; the "
                               "sidebar's dates choose the default month only.")
res = mr.statement(ctx.version, period)
if isinstance(res, str):
    st.warning(f"No statement for {period}: {res}", icon=":material/receipt_long:")
    st.stop()
stmt, views = res
cur = stmt.policy.currency
minor = stmt.policy.minor_units
with top[1]:
    st.markdown("&nbsp;")
    badge = {"closed": ("Closed", "green", ":material/lock:"), "open": ("Open", "blue", ":material/lock_open:"),
             "provisional": ("Open, provisional", "orange", ":material/hourglass_top:")}[stmt.status]
    st.badge(badge[0], color=badge[1], icon=badge[2])
    # the badge says open, provisional or closed: the caption gives the statement's own reason once
    detail = re.sub(r"^(open|provisional) \((.*)\)$", r"\2", dict(stmt.header).get("Status", stmt.status))
    st.caption(detail[:1].upper() + detail[1:]
               + (f" · content hash {stmt.content_hash[:12]}" if stmt.content_hash else ""))

# ---------------------------------------------------------------- period close (finance, managers, admins)
def _close(viewer: access.Scope, period: str) -> None:
    """Close ``period`` as ``viewer`` (the server checks the role) and keep the outcome for the page to show."""
    try:
        with st.spinner(f"Closing {period} (waits while the collector holds the warehouse) ..."):
            outcome = actions.close_period(viewer, mr.db_path(), period)
    except access.Forbidden as exc:
        outcome = actions.Outcome(False, f"Refused: {exc}.")
    st.session_state["cb_close_outcome"] = (period, outcome)


viewer = access.viewer()
# The outcome of the last close attempt stays shown for its period until the next attempt: popped after one run,
# any rerun that followed the button's (a widget touched, the snapshot switched) wiped it before it was read.
shown_period, done = st.session_state.get("cb_close_outcome", (None, None))
if shown_period == period:
    (st.success if done.ok else st.error)(done.message, icon=":material/lock:" if done.ok else ":material/block:")
if stmt.status != "closed":
    refusal = chargeback.close_refusal(stmt)   # the close's own refusal: the button is not offered for it
    with st.expander(f"Close {period}", icon=":material/lock:"):
        st.markdown(f"Closing freezes this statement as it stands: later jobs of {period} reach the books only as "
                    "adjustments of the next open period. It cannot be undone.")
        if refusal:
            st.caption(f"{period} cannot be closed yet: {refusal}.")
        elif not viewer.may("close"):
            st.caption("Only finance, managers and admins may close a period; the server refuses it for "
                       f"your role ({viewer.role.replace('_', ' ')}).")
        # The close runs in the button's callback, at the start of the run the click causes, not in the page body
        # behind `if st.button(...)`: a click's True is lost when another rerun interrupts its run before the page
        # reaches the button (Streamlit resets trigger values of an interrupted run), and a load test once saw a
        # click shown nothing for 90 s. The page then draws the outcome (above) and the statement after the close.
        st.button(f"Close {period} now", key="cb_close", icon=":material/lock:", type="primary",
                  on_click=_close, args=(viewer, period), disabled=refusal is not None)

t = stmt.total_row
money = lambda x: f"{float(x):,.{minor}f} {cur}"   # noqa: E731 (display only; sums stay Decimal)
whole = lambda x: f"{float(x):,.0f} {cur}"         # noqa: E731 (tiles; the reconciliation line below is exact)
charged = t["direct_cost"] + t["idle_allocated"]
k = st.columns(5)
ui.kpi(k[0], "Cluster cost", whole(t["cluster_cost"]), help="Installed GPU-hours x the pool's base rate.")
# the tiles add up to the cluster cost as the line below does: charged + unallocated idle + rate variance + residue
ui.kpi(k[1], "Charged to teams", whole(charged), help="Direct cost plus the idle shares. Idle policy: "
       f"{dict(stmt.header).get('Idle policy', stmt.policy.idle_policy)}.")
k[1].caption(f"of which idle shares {whole(t['idle_allocated'])}")
ui.kpi(k[2], "Unallocated idle", whole(t["unallocated_idle"]), help="Idle cost no team carries under the policy.")
ui.kpi(k[3], "Rate variance", whole(t["rate_variance"]),
       help="What partition rates (discounts or premiums) change against the pool's base rate on the GPU-hours "
            "used: base rate x allocated GPU-hours - direct cost. Charged to no team, shown on its own.")
ui.kpi(k[4], "Rounding residue", money(t["rounding_residue"]),
       help="Each amount is rounded once, half-even; the residue is reported, never spread.")

holds = t["difference"] == 0
recon_text = "C" + chargeback.reconciliation_sentence(t, minor, cur)[1:]     # the CLI's and the finance pack's
(st.success if holds else st.error)(recon_text + (" — reconciles to the cent." if holds else
                                                  f" — differs by {money(t['difference'])}."),
                                    icon=":material/check_circle:" if holds else ":material/error:")

# ---------------------------------------------------------------- the statement, filtered
lines = views["by team"].with_columns(pl.col("team").fill_null(theme.UNMAPPED))
shown = f.apply(lines, skip=("partitions",))
if f.partitions:
    st.caption("Statement lines are per team and pool; the partition filter does not apply to them.")
if f.clusters or f.pools or f.teams:
    st.caption(f"Showing {shown.height} of {lines.height} statement lines (sidebar filters); the cluster cost and "
               "the reconciliation above are for the whole statement.")

left, right = st.columns([3, 2])
by_team = shown.group_by("team", "gpu_type").agg(pl.col("total").cast(pl.Float64).sum())
order = by_team.group_by("team").agg(pl.col("total").sum()).sort("total", descending=True)["team"].to_list()
with left:
    ui.chart(st, charts.bars(by_team, "team", "total", color="gpu_type", colours=ctx.pool_colours,
                             horizontal=True, category_order=order,
                             y_title=f"Total ({cur})", x_title="Team", title=f"Cost per team and pool, {period}",
                             height=max(260, 90 + 40 * len(order))), key="cb_teams")
by_cc = (shown.with_columns(pl.col("cost_center").fill_null("(no cost centre)"))
         .group_by("cost_center").agg(pl.col("direct_cost").cast(pl.Float64).sum().alias("Direct"),
                                      pl.col("idle_share").cast(pl.Float64).sum().alias("Idle share"))
         .unpivot(index="cost_center", variable_name="part", value_name="amount").sort("cost_center"))
with right:
    ui.chart(st, charts.bars(by_cc, "cost_center", "amount", color="part", horizontal=True,
                             colours={"Direct": theme.PRIMARY, "Idle share": "#A5B8CF"}, y_title=f"Amount ({cur})",
                             x_title="Cost centre", title="Per cost centre: direct and idle share",
                             height=max(260, 90 + 40 * by_cc["cost_center"].n_unique())), key="cb_cc")

st.subheader("Statement lines")
money_fmt = f"%.{minor}f"
line_cols = {"cluster": "Cluster", "team": "Team", "account": "Slurm account (unmapped)", "cost_center": "Cost centre",
             "gpu_type": "Pool (GPU type)", "jobs": "Jobs", "gpu_hours": "GPU-hours", "rate": f"Rate ({cur}/GPU-hour)",
             "direct_cost": f"Direct ({cur})", "idle_share": f"Idle share ({cur})", "total": f"Total ({cur})",
             "waste_gpu_hours": "Idle-allocated GPU-hours", "waste_cost": f"Waste, shown not added ({cur})"}
ui.table(shown.with_columns(pl.col("account").fill_null("")), key="cb_lines", file_stem=f"chargeback_{period}_lines",
         ctx=ctx, columns=line_cols,
         formats={"gpu_hours": "%.2f", "rate": "%.4f", "direct_cost": money_fmt, "idle_share": money_fmt,
                  "total": money_fmt, "waste_gpu_hours": "%.2f", "waste_cost": money_fmt})

d1, d2, _ = st.columns([1, 1, 3])
d1.download_button("Statement CSV", data=lambda: exports.csv_bytes(views["by team"]), file_name=f"chargeback-{period}.csv",
                   mime="text/csv", key="cb_csv", icon=":material/download:", on_click="ignore", width="stretch",
                   help="The finance export, as `gpuledger chargeback --period P --out chargeback-P.csv` writes it.")
d2.download_button("Workbook XLSX", data=lambda: mr.statement_xlsx(ctx.version, period),
                   file_name=f"chargeback-{period}.xlsx", key="cb_xlsx", icon=":material/table_view:",
                   mime="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", on_click="ignore",
                   width="stretch", help="Summary, one sheet per view, the reconciliation and the job-level detail.")

rec_cols = {"kind": "Row", "cluster": "Cluster", "gpu_type": "Pool (GPU type)",
            "capacity_gpu_hours": "Capacity (GPU-hours)", "allocated_gpu_hours": "Allocated (GPU-hours)",
            "idle_gpu_hours": "Idle (GPU-hours)", "cluster_cost": f"Cluster cost ({cur})",
            "direct_cost": f"Direct ({cur})", "idle_allocated": f"Idle charged ({cur})",
            "unallocated_idle": f"Unallocated idle ({cur})", "rate_variance": f"Rate variance ({cur})",
            "rounding_residue": f"Rounding residue ({cur})", "difference": f"Difference ({cur})"}
ui.table(views["reconciliation"], label="Reconciliation per pool",
         key="cb_recon", file_stem=f"chargeback_{period}_reconciliation", ctx=ctx,
         columns=rec_cols, formats={c: "%.2f" for c in rec_cols if c not in ("kind", "cluster", "gpu_type")})
if views["adjustments"].height:
    ui.table(views["adjustments"], label=f"Adjustments for closed periods ({views['adjustments'].height} lines)",
             key="cb_adj", file_stem=f"chargeback_{period}_adjustments", ctx=ctx,
             columns={"adjusts_period": "Adjusts period", **line_cols, "job_refs": "Jobs"})

# ---------------------------------------------------------------- budgets (issue 19): as `gpuledger report budgets`
bud = mr.budgets(ctx.version, period)
if isinstance(bud, pl.DataFrame) and bud.height:
    seen_teams = set(lines["team"].to_list())
    seen_cc = set(lines["cost_center"].drop_nulls().to_list())
    bud = bud.filter(pl.when(pl.col("scope") == "team").then(pl.col("name").is_in(seen_teams))
                     .otherwise(pl.col("name").is_in(seen_cc)))
if isinstance(bud, pl.DataFrame) and bud.height:
    st.subheader("Budgets")
    over = bud.filter(pl.col("forecast_pct") > 100)
    if over.height:
        st.warning(f"{over.height} of {bud.height} budgets are forecast over 100 %: "
                   + ", ".join(f"{r['name']} {r['period']} ({r['forecast_pct']:.0f} %)" for r in over.iter_rows(named=True)),
                   icon=":material/savings:")
    ui.table(bud.drop("horizon", "budget_no"), key="cb_budgets", file_stem=f"budgets_{period}", ctx=ctx,
             columns={"scope": "Scope", "name": "Team or cost centre", "period": "Budget period", "unit": "Unit",
                      "budget": "Budget", "actual": "Charged so far", "forecast_rest": "Forecast, rest of period",
                      "forecast": "Forecast, period", "actual_pct": "Charged (% of budget)",
                      "forecast_pct": "Forecast (% of budget)", "rate": f"Rate ({cur}/GPU-hour)",
                      "period_end": "Period ends (UTC)", "note": "Note"},
             formats={"budget": "%.2f", "actual": "%.2f", "forecast_rest": "%.2f", "forecast": "%.2f",
                      "actual_pct": "%.1f", "forecast_pct": "%.1f", "rate": "%.4f"},
             caption=f"Money budgets in {cur}, the others in GPU-hours. Charged so far: the period's statements to "
                     f"the data horizon ({bud['horizon'][0]:%Y-%m-%d %H:%M} UTC); the rest: the daily forecast of "
                     "served GPU-hours, priced at the scope's rate so far (`gpuledger report budgets`).")

# ---------------------------------------------------------------- drill-down to jobs
JOBS_SHOWN = 1000   # a big site's line holds 100,000 jobs: the browser gets the costliest, the workbook all
st.subheader("Jobs behind a line")
labels = {f"{r['team']} · {r['gpu_type']}" + (f" · account {r['account']}" if r["account"] else "")
          + (f" · {r['cluster']}" if len(ctx.cat.clusters) > 1 else ""): r for r in shown.iter_rows(named=True)}
if labels:
    pick = st.selectbox("Statement line", list(labels), key="cb_drill")
    r = labels[pick]
    jobs = views["jobs"].with_columns(pl.col("team").fill_null(theme.UNMAPPED)).filter(
        (pl.col("cluster") == r["cluster"]) & (pl.col("gpu_type") == r["gpu_type"]) & (pl.col("team") == r["team"]))
    if r["account"]:
        jobs = jobs.filter(pl.col("account") == r["account"])
    top = jobs.sort("direct_cost", descending=True).head(JOBS_SHOWN)
    # a job still running at the horizon: its GPU-hours stop there, but it did not end there
    hz = mr.running_jobs(ctx.version).select("job_uid", pl.col("horizon").alias("_hz"))
    top = top.join(hz, on="job_uid", how="left")
    top = ui.job_end(top, "t1", pl.col("_hz").is_not_null() & (pl.col("t1") >= pl.col("_hz"))).drop("_hz")
    ui.table(top, key="cb_jobs", file_stem=f"chargeback_{period}_jobs", ctx=ctx,
             columns={"job_id": "Job", "user": "User", "account": "Slurm account", "partition": "Partition",
                      "t0": "From (UTC)", "t1": "To (UTC)", "gpu_hours": "GPU-hours in period",
                      "direct_cost": f"Direct ({cur})"},
             formats={"gpu_hours": "%.3f", "direct_cost": "%.4f"},
             caption=(f"{jobs.height:,} jobs" + (f", the {JOBS_SHOWN:,} costliest shown (the workbook's jobs "
                                                 "sheet has them all)" if jobs.height > JOBS_SHOWN else "")
                      + "; direct cost per job before rounding (the line is rounded once)."))
