"""Data health: can the numbers on the other pages be trusted? Ingest runs, rejected lines, telemetry gaps,
unmapped accounts."""
from __future__ import annotations

import datetime as dt

import polars as pl
import streamlit as st

from dashboards import access, charts, model_reads, queries, theme, ui

if not access.viewer().may("health"):   # it names input files and sources: admins and managers only
    st.error("Data health is for admins and managers.", icon=":material/block:")
    st.stop()
ctx = ui.context()
f = ctx.filters
ui.header("Data health", "Did every input line arrive, and is every job attributed to a team?", ctx, deltas=False)

OUTCOME_COLOURS = {"Loaded": theme.GOOD, "Skipped": "#A0AEC0", "Rejected": theme.BAD}
#: A source whose data is complete only to this many minutes before its last success is shown as behind (a
#: Prometheus window ends on its step grid, a sacct read at its start: both within minutes when healthy).
BEHIND_WARN_MIN = 60

# ---------------------------------------------------------------- sources of the collector service
sources = queries.source_status(ctx.version)
if sources.height:
    st.subheader("Sources")
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    shown = sources.with_columns(
        ((pl.lit(now) - pl.col("last_success")).dt.total_seconds() / 60).round(1).alias("lag_min"),
        ((pl.col("last_success") - pl.col("complete_to")).dt.total_seconds() / 60).clip(0).round(1)
        .alias("behind_min"))
    failing = shown.filter(pl.col("consecutive_failures") > 0)
    behind = shown.filter(pl.col("behind_min") > BEHIND_WARN_MIN)
    if failing.height:
        st.error(f"{failing.height} source(s) failing: " + "; ".join(
            f"{r['cluster']}/{r['source']}: {r['last_error']}" for r in failing.head(5).iter_rows(named=True)),
            icon=":material/error:")
    else:
        st.success("Every source's last collection succeeded.", icon=":material/check_circle:")
    if behind.height:
        st.warning(f"{behind.height} source(s) collected but complete only to an earlier time: " + "; ".join(
            f"{r['cluster']}/{r['source']} to {r['complete_to']:%Y-%m-%d %H:%M} UTC ({r['behind_min']:.0f} minutes "
            f"before its last collection)" for r in behind.head(5).iter_rows(named=True)) + ". For sacct, slurmctld "
            "still holds records for slurmdbd, or sdiag cannot say (the service's log names which).",
            icon=":material/schedule:")
    ui.table(shown.select("cluster", "source", "last_success", "lag_min", "complete_to", "behind_min",
                          "consecutive_failures", "last_error",
                          "last_attempt", "next_attempt", "lines_loaded", "lines_skipped", "lines_rejected"),
             key="sources", file_stem="source_status", ctx=ctx,
             columns={"cluster": "Cluster", "source": "Source", "last_success": "Last success (UTC)",
                      "lag_min": "Lag (minutes)", "complete_to": "Complete to (UTC)",
                      "behind_min": "Behind its collection (minutes)", "consecutive_failures": "Failures in a row",
                      "last_error": "Last error", "last_attempt": "Last attempt (UTC)",
                      "next_attempt": "Next attempt (UTC)", "lines_loaded": "Lines loaded",
                      "lines_skipped": "Lines skipped", "lines_rejected": "Lines rejected"},
             formats={"lag_min": "%.1f", "behind_min": "%.1f"},
             caption="What `gpuledger serve` collects: lag is the time since a source's last successful "
                     "collection; a failing source is retried with backoff while the others go on "
                     "(cluster * is the governance file). Complete to: the time up to which a source that reads "
                     "from a watermark (sacct, prometheus) has every record; sacct's waits while slurmctld holds "
                     "records for slurmdbd. As of the dashboard's snapshot.")

# ---------------------------------------------------------------- alerts of the service (issue 19)
fired = model_reads.alert_history(ctx.version)
if fired.height:
    st.subheader("Alerts")
    ui.table(fired.select("fired_at", "resolved_at", "rule", "kind", "summary", "told_fired", "told_resolved",
                          "undelivered"),
             key="alerts", file_stem="alerts", ctx=ctx,
             columns={"fired_at": "Fired (UTC)", "resolved_at": "Resolved (UTC)", "rule": "Rule", "kind": "Kind",
                      "summary": "What was said", "told_fired": "Told it fired", "told_resolved": "Told it resolved",
                      "undelivered": "Not delivered (yet)"},
             caption="The `[[alerts]]` rules of `gpuledger serve`: one row per episode, newest first, and who was "
                     "told (`gpuledger report alerts`). As of the dashboard's snapshot.")

# ---------------------------------------------------------------- ingest runs
st.subheader("Ingest runs")
runs = queries.ingest_runs(ctx.version, f)
scope = "started in the window"
if runs.height == 0:
    runs = queries.all_ingest_runs(ctx.version).head(100)
    scope = "the latest 100: none started in the window"
if runs.height == 0:
    ui.no_data("ingest runs", "Run `gpuledger ingest ...` to load data.")
else:
    failed = runs.filter(pl.col("status") != "ok").height
    c1, c2, c3, c4 = st.columns(4)
    ui.kpi(c1, "Runs", f"{runs.height:,}", help=f"Ingest runs: {scope}.")
    ui.kpi(c2, "Failed runs", f"{failed:,}", help="A failed run changed nothing; its message says why.")
    read = int(runs["lines_read"].sum())
    rej = int(runs["rejected"].sum())
    ui.kpi(c3, "Lines read", f"{read:,}")
    ui.kpi(c4, "Rejected lines", f"{rej:,}", f"{100 * rej / read:.2f} % of lines" if read else None,
           delta_color="off", arrow=False)
    recent = runs.head(40).sort("run_id")
    long = (recent.with_columns(pl.format("{} · {}", pl.col("run_id"), pl.col("source")).alias("run"))
            .select("run", "loaded", "skipped", "rejected")
            .unpivot(index="run", variable_name="outcome", value_name="lines")
            .with_columns(pl.col("outcome").str.to_titlecase()))
    ui.chart(st, charts.bars(long, "run", "lines", color="outcome", colours=OUTCOME_COLOURS,
                             category_order=recent.select(pl.format("{} · {}", "run_id", "source"))
                             .to_series().to_list(), y_title="Input lines", x_title="Ingest run · source",
                             title=f"Every input line, by outcome, per ingest run ({scope}"
                                   f"{'; the latest 40 shown' if runs.height > 40 else ''})"),
                 key="runs_chart")
    if failed:
        st.error(f"{failed} ingest run(s) failed and were rolled back; see the message column.",
                 icon=":material/error:")
    ui.table(runs, key="runs", file_stem="ingest_runs", ctx=ctx,
             columns={"run_id": "Run", "source": "Source", "input_name": "Input", "cluster": "Cluster",
                      "status": "Status", "lines_read": "Lines read", "loaded": "Loaded", "skipped": "Skipped",
                      "rejected": "Rejected", "inserted": "New", "updated": "Updated", "unchanged": "Unchanged",
                      "started_at": "Started (UTC)", "finished_at": "Finished (UTC)", "message": "Message"},
             caption="Every line read is loaded, skipped with a reason, or rejected with a reason. New, Updated "
                     "and Unchanged count stored rows: telemetry readings of one GPU-minute fold into one sample, "
                     "a Philly job splits into its attempts. Inputs are named by file name only.")

    ids = tuple(runs["run_id"].to_list())

    # ------------------------------------------------------------ rejected and skipped lines
    st.subheader("Rejected lines")
    reasons = queries.reject_reasons(ctx.version, ids)
    if reasons.height == 0:
        st.success("No rejected lines in these runs.", icon=":material/check_circle:")
    else:
        ui.chart(st, charts.bars(reasons.head(15), "reason", "lines", horizontal=True, y_title="Rejected lines",
                                 x_title=None, title="Why lines were rejected", single_colour=theme.BAD,
                                 height=max(220, 40 + 28 * min(reasons.height, 15))), key="reasons_chart")
        rej_lines = queries.rejects(ctx.version, ids)
        ui.table(rej_lines, key="rejects", file_stem="rejected_lines", ctx=ctx,
                 columns={"run_id": "Run", "source": "Source", "input_name": "Input", "line_no": "Line",
                          "field": "Field", "reason": "Reason"},
                 caption=f"Up to 5,000 rejected lines of these runs (of {int(reasons['lines'].sum()):,}): where "
                         "and why, not their content. The lines themselves stay in the warehouse's `rejects` "
                         "table (column `raw`), for operators with access to the warehouse.")
    skips = queries.skip_reasons(ctx.version, ids)
    if skips.height:
        ui.table(skips, label=f"Skipped lines by reason ({int(skips['lines'].sum()):,})",
                 key="skips", file_stem="skipped_lines", ctx=ctx,
                 columns={"reason": "Reason", "lines": "Lines"},
                 caption="Skipped lines are expected input that is not a job (steps, headers, blank lines).")

# ---------------------------------------------------------------- telemetry gaps
st.subheader("Telemetry gaps")
daily = model_reads.efficiency(ctx.version, f, "gpu_type", "day")
gaps = (daily.with_columns((pl.col("alloc_gpu_h") - pl.col("telemetry_gpu_h")).clip(0).alias("untracked_gpu_h"))
        if daily is not None and daily.height else pl.DataFrame())
if gaps.height == 0 or gaps["untracked_gpu_h"].sum() < 0.005:
    st.success("Every allocated GPU-hour in the window has telemetry.", icon=":material/check_circle:")
else:
    ui.chart(st, charts.heatmap(gaps.with_columns(pl.col("coverage_pct").fill_null(0.0)), "bucket", "gpu_type",
                                "coverage_pct", z_title="Coverage (%)", y_title="Pool (GPU type)",
                                colorscale="RdYlGn", z_format=".0f", z_range=(0, 100),
                                title="Share of allocated GPU-hours with telemetry, per day and pool",
                                height=max(220, 120 + 40 * gaps["gpu_type"].n_unique())), key="gaps_chart")
    shown = gaps.filter(pl.col("untracked_gpu_h") > 0.005).sort("untracked_gpu_h", descending=True)
    ui.table(ui.period_column(shown, "day"), key="gaps", file_stem="telemetry_gaps", ctx=ctx,
             columns={"bucket": "Day (UTC)", "gpu_type": "Pool (GPU type)", "jobs": "Jobs",
                      "jobs_without_telemetry": "Jobs without telemetry", "alloc_gpu_h": "Allocated (GPU-hours)",
                      "untracked_gpu_h": "Without telemetry (GPU-hours)", "coverage_pct": "Coverage (%)"},
             formats={"alloc_gpu_h": "%.1f", "untracked_gpu_h": "%.1f", "coverage_pct": "%.1f"},
             caption="GPU-hours jobs held with no DCGM/nvidia-smi reading attributed to them: a missing "
                     "exporter, a scrape gap, or telemetry not ingested for the period. Largest gaps first.")

# ---------------------------------------------------------------- unmapped accounts
st.subheader("Unmapped accounts")
if f.teams and theme.UNMAPPED not in f.teams:
    st.caption("The team filter excludes unmapped jobs; add “(unmapped)” to it to see them here.")
else:
    um = queries.unmapped_accounts(ctx.version, f)
    if um.height == 0:
        st.success("Every job submitted in the window maps to a team.", icon=":material/check_circle:")
    else:
        st.warning(f"{um.height} Slurm account(s) map to no team: their GPU-hours appear as “(unmapped)” and "
                   "are not billed to any team. Add them to the governance file's team map.",
                   icon=":material/person_off:")
        ui.chart(st, charts.bars(um.head(20), "account", "gpu_hours", horizontal=True, y_title="GPU-hours",
                                 x_title="Slurm account", title="Unmapped accounts by GPU-hours (whole jobs)",
                                 single_colour=theme.UNMAPPED_COLOUR,
                                 height=max(220, 40 + 28 * min(um.height, 20))), key="unmapped_chart")
        ui.table(um, key="unmapped", file_stem="unmapped_accounts", ctx=ctx,
                 columns={"cluster": "Cluster", "account": "Slurm account", "jobs": "Jobs", "users": "Users",
                          "gpu_hours": "GPU-hours (whole jobs)", "first_seen": "First submitted (UTC)",
                          "last_seen": "Last submitted (UTC)"},
                 formats={"gpu_hours": "%.2f"})
