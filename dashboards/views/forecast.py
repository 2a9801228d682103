"""Forecast & capacity: when demand outgrows each pool, and what adding GPUs (or another policy) would change."""
from __future__ import annotations

import datetime as dt

import polars as pl
import streamlit as st

from dashboards import charts, model_reads as mr, theme, ui
from models.definitions.labels import ANY_POOL, size_order

ctx = ui.context()
f = ctx.filters
ui.header("Forecast & capacity", "When do we need more GPUs, and what would adding them change?", ctx, deltas=False)

MEASURES = {"Demanded GPU-hours": "demanded", "Served GPU-hours": "served", "Peak GPUs (running + pending)": "peak"}
MEASURE_HELP = ("Demanded: GPU-hours of work submitted each day, which a full cluster does not cap (the right "
                "series for buying). Served: allocated GPU-hours, capped by capacity, so it understates demand "
                "when queues are long. Peak: the most GPUs running + pending at any instant of the day.")

# The slider last: where the four do not fit on one line (1024 px with the sidebar open) it is the one that
# wraps, and a slider reads well across a whole line.
with ui.control_row("fc_controls", {"fc_measure": 12.5, "fc_horizon": 6.5, "fc_band": 8.5, "fc_target": 11}):
    measure_label = st.selectbox("Series", list(MEASURES), index=0, key="fc_measure", help=MEASURE_HELP)
    measure = MEASURES[measure_label]
    horizon = st.selectbox("Horizon (days)", [30, 60, 90, 180], index=2, key="fc_horizon")
    band = st.selectbox("Plan for", ["median", "upper 80 %"], index=1, key="fc_band",
                        help="Which forecast the GPUs-needed figures use.")
    target = st.slider("Target utilization (%)", 50, 100, 85, 5, key="fc_target",
                       help="A pool is exhausted when smoothed forecast demand exceeds capacity x this.")
cluster = f.clusters[0] if len(f.clusters) == 1 else None
by = ctx.cat.pool_keys     # pools per cluster when there are several: each has its own capacity and forecast
with st.spinner("Fitting and backtesting the forecast models..."):
    res = mr.forecast(ctx.version, measure, horizon, target / 100, "80" if band != "median" else "median",
                      by, cluster)
hist, fc, summary, cap = res["history"], res["forecast"], res["summary"], res["capacity"]
unit, per_hour, keys = res["unit"], res["per_hour"], list(res["keys"])
# The series charted: each pool (on each cluster) forecast, with its capacity answer where capacity is known
# (a pool without one is still a demand forecast a planner reads); "(any)" only with a capacity of its own
# (a trace without GPU types); those the cluster and pool filters keep.
skeys = [k for k in keys if k in fc.columns]
answered = set(cap.select(skeys).iter_rows()) if cap is not None and cap.height else set()
series = [s for s in (dict(zip(skeys, r)) for r in sorted(set(fc.select(skeys).iter_rows()),
                                                          key=lambda r: tuple(map(str, r))))
          if s["pool"] and (s["pool"] != ANY_POOL or tuple(s.values()) in answered)
          and (not f.pools or s["pool"] in f.pools)
          and (not f.clusters or s.get("cluster", f.clusters[0]) in f.clusters)]


def _rows(df: pl.DataFrame, s: dict) -> pl.DataFrame:
    """The rows of ``df`` for series ``s`` (matched on the key columns ``df`` has)."""
    return df.filter(*[pl.col(k) == v for k, v in s.items() if k in df.columns])


def _answer(s: dict) -> dict:
    """The capacity answer of series ``s`` ({} when its capacity is unknown)."""
    rows = _rows(cap, s) if cap is not None and cap.height else None
    return rows.row(0, named=True) if rows is not None and rows.height else {}


def _name(s: dict) -> str:
    return " / ".join(str(v) for v in s.values())


if "cluster" in skeys:
    st.caption("One forecast per cluster and pool: a pool name shared by several clusters is planned per cluster.")
if f.teams or f.partitions:
    st.caption("Capacity answers are per pool: the team and partition filters do not apply on this page.")
for note in res.get("notes", []):      # pools without demand (not forecast) or without known capacity (no answer)
    st.caption(note)
if not series:
    ui.no_data("forecastable pools")
else:
    y_title = f"{'GPUs' if measure == 'peak' else 'GPU-hours per day'}"
    for col, s in zip(ui.tile_columns(len(series)), series):
        row = _answer(s)
        ex = row.get("exhausted_upper80" if band != "median" else "exhausted_median")
        reached = mr.reached_text(ex, row.get("already_above")) if ex else f"not within {horizon} days"
        ui.kpi(col, f"{_name(s)}: capacity reached", reached if row else None,
               f"{row.get('capacity_gpus', 0):,.0f} GPUs installed" if row.get("capacity_gpus") else None,
               missing="no installed capacity known", delta_color="off", arrow=False,
               help=f"First day the {band} forecast (smoothed) exceeds {target} % of installed capacity.")
    grid = st.columns(2)
    for i, s in enumerate(series):
        h = _rows(hist, s).filter(pl.col("ts") >= f.t0 - dt.timedelta(days=f.days))
        fp = _rows(fc, s)
        row = _answer(s)
        ex = row.get("exhausted_upper80" if band != "median" else "exhausted_median")
        limit = None
        if row.get("capacity_gpus") and measure != "served":
            level = row["capacity_gpus"] * target / 100 * (per_hour if measure != "peak" else 1.0)
            xs = [h["ts"].min() if h.height else fp["ts"].min(), fp["ts"].max()]
            limit = pl.DataFrame({"ts": xs, "cap": [level, level]})
        fig = charts.forecast_band(h, fp, x="ts", y="value", mean="forecast", lo80="lo80", hi80="hi80",
                                   lo95="lo95", hi95="hi95", colour=ctx.pool_colours.get(s["pool"], theme.PRIMARY),
                                   y_title=y_title, title=f"{_name(s)}: {measure_label}, history and forecast",
                                   capacity=limit, capacity_col="cap", exhaustion=ex, height=360)
        ui.chart(grid[i % 2], fig, key=f"fc_{tuple(s.values())!r}")
    st.caption((f"Dotted red: {target} % of installed capacity, in the series' units. " if answered else "")
               + "Bands: 80 % and 95 % prediction intervals, calibrated on the backtest's errors.")
    for r in (cap.filter(pl.col("above_ceiling_from").is_not_null()).iter_rows(named=True)
              if cap is not None and "above_ceiling_from" in cap.columns else ()):
        st.caption(f"{_name({k: r[k] for k in skeys})}: {r['note']}")   # a band beyond physical demand: drawn capped

    st.subheader("Models and capacity answers")
    chosen = pl.DataFrame(series, schema={k: summary.schema[k] for k in skeys})
    table = summary.join(chosen, on=skeys, how="semi")
    if cap is not None:
        table = table.join(cap.drop("note"), on=[k for k in keys if k in cap.columns], how="left")
    need = f"gpus_needed_h{horizon}"
    cols = {"cluster": "Cluster", "pool": "Pool (GPU type)", "model": "Model chosen", "model_detail": "Model detail",
            "history_periods": "History (days)", "backtest_mase": "Backtest MASE",
            "coverage80": "80 % interval coverage (%)", "coverage95": "95 % interval coverage (%)",
            "capacity_gpus": "Installed (GPUs)", "recent_gpus": "Recent demand (GPUs)",
            "already_above": "Already above the target",
            "exhausted_median": "Capacity reached, median (UTC)",
            "exhausted_upper80": "Capacity reached, upper 80 % (UTC)",
            need: f"GPUs needed in {horizon} days", f"shortfall_h{horizon}": f"Shortfall in {horizon} days (GPUs)",
            "notes": "Notes"}
    every = [c for c in table.columns if c.startswith("mase_")]     # every candidate's backtest MASE
    cols |= {c: f"Backtest MASE: {c.removeprefix('mase_')}" for c in every} | {"weights": "Combination weights"}
    for cov in ("coverage80", "coverage95"):
        if cov in table.columns:
            table = table.with_columns(pl.col(cov) * 100)
    ui.table(table, key="fc_summary", file_stem="forecast_models", ctx=ctx, columns=cols,
             formats={"backtest_mase": "%.2f", "coverage80": "%.0f", "coverage95": "%.0f",
                      **{c: "%.2f" for c in every},
                      "capacity_gpus": "%.0f", "recent_gpus": "%.1f"},
             caption="MASE below 1 beats the seasonal naive forecast in the rolling-origin backtest.")
    ui.table(fc.join(chosen, on=skeys, how="semi"), label="Forecast values",
             key="fc_values", file_stem=f"forecast_{measure}", ctx=ctx,
             columns={"cluster": "Cluster", "pool": "Pool (GPU type)", "ts": "Day (UTC)",
                      "forecast": f"Forecast ({unit})", "lo80": "80 % low", "hi80": "80 % high",
                      "lo95": "95 % low", "hi95": "95 % high", "model": "Model"},
             formats={c: "%.1f" for c in ("forecast", "lo80", "hi80", "lo95", "hi95")})

# ---------------------------------------------------------------- what-if
st.subheader("What if?")
st.markdown("Replay the window's workload through the scheduler simulator with more nodes, more demand or "
            "another policy, and compare the p95 queue wait with the window's as simulated.")

cluster = f.clusters[0] if len(f.clusters) == 1 else None
with st.form("whatif"):
    pools_sim = [p for p in ctx.cat.pools if not f.pools or p in f.pools]
    add = {}
    per_node = dict(ctx.cat.node_gpus)
    widths = {f"wi_add_{p}": 13 for p in pools_sim} | {"wi_growth": 10, "wi_policy": 10}
    with ui.control_row("wi_controls", widths):     # one line per few pools on a cluster with many
        for p in pools_sim:
            add[p] = st.number_input(f"Add {p} nodes" + (f" ({per_node[p]} GPUs each)" if p in per_node else ""),
                                     0, 256, 0, 1, key=f"wi_add_{p}",
                                     help="Copies of the pool's most common node shape.")
        growth = st.slider("Demand growth (%)", -50, 200, 0, 10, key="wi_growth",
                           help="Whole days of the window's workload are resampled to this much more demand.")
        policy = st.selectbox("Policy", ["fifo-backfill", "priority-backfill", "fifo", "priority"], key="wi_policy",
                              help="Queue order (FIFO or Slurm-like multifactor priority), with or without EASY "
                                   "backfill.")
    reps = st.select_slider("Replications (more: narrower intervals, slower)", [3, 5, 10], value=5, key="wi_reps")
    no_resv = st.checkbox("Without the advance reservations", key="wi_no_resv",
                          help="What the window's advance reservations cost: the scenario runs their jobs as "
                               "ordinary jobs and frees their nodes; the baseline keeps them, as they happened.")
    go = st.form_submit_button("Run simulation", type="primary", icon=":material/play_arrow:")
scenario = (tuple(sorted((p, int(n)) for p, n in add.items() if n)), round(1 + growth / 100, 4), policy, int(reps),
            bool(no_resv))
if go:
    st.session_state["wi_last"] = scenario
if st.session_state.get("wi_last") is None:
    st.caption(f"The simulation replays the jobs submitted in the window ({f.describe()}) on the capacity at its "
               "start, with the outages that happened; it starts from the cluster as it was (the jobs then running "
               "on their nodes, those then queued first in line) and measures up to where the accounting ends.")
    st.stop()
add_t, scale, pol, reps, no_resv = st.session_state["wi_last"]
with st.spinner("Simulating the baseline and the scenario (the first run after an upgrade also compiles the "
                "simulator)..."):
    inp = mr.whatif_inputs(ctx.version, f.t0, f.t1, cluster)
    if inp is None or isinstance(inp, str):
        st.info(f"No simulation for this window: {inp}", icon=":material/info:")
        st.stop()
    base = mr.whatif(ctx.version, f.t0, f.t1, cluster, (), 1.0, "fifo-backfill", reps)
    scen = mr.whatif(ctx.version, f.t0, f.t1, cluster, add_t, scale, pol, reps, reservations=not no_resv)
for res_ in (base, scen):
    if not isinstance(res_, pl.DataFrame):
        st.warning(f"The simulator could not run this scenario: {res_}", icon=":material/warning:")
        st.stop()


def _metric(df: pl.DataFrame, metric: str, scope: str = "all") -> dict | None:
    rows = df.filter((pl.col("metric") == metric) & (pl.col("scope") == scope))
    return rows.row(0, named=True) if rows.height else None


desc = ", ".join([f"+{n} {p} nodes" for p, n in add_t] + ([f"demand x{scale:g}"] if scale != 1 else [])
                 + ([f"policy {pol}"] if pol != "fifo-backfill" else [])
                 + (["without the advance reservations"] if no_resv else [])) or "no change"
held = inp.counts()
st.caption(f"Scenario: {desc}. Baseline: the window's workload on its observed capacity with FIFO + EASY backfill. "
           f"Means of {reps} replications with 95 % intervals. The window holds {held['jobs']:,} jobs "
           f"({held['queued_at_horizon']:,} still queued where the accounting ends"
           + (f", at {inp.horizon:%Y-%m-%d %H:%M} UTC" if inp.horizon is not None else "")
           + f"); {held['carried']:,} jobs carried in from before it hold their capacity but are not measured."
           + (f" {held['reservations']:,} advance reservation(s) hold their nodes for their "
              f"{held['in_reservations']:,} jobs in the baseline" + (" only." if no_resv else " and the scenario.")
              if held["reservations"] else ""))
k = st.columns(3)
for col, metric, name, unit in ((k[0], "p95_wait_h", "p95 queue wait", "h"), (k[1], "p50_wait_h", "Median queue wait", "h"),
                                (k[2], "utilization_pct", "GPU utilization (allocation)", "%")):
    b, s = _metric(base, metric), _metric(scen, metric)
    if s is None:
        ui.kpi(col, name, None, missing="not produced by the simulator")
        continue
    change_unit = "pp" if unit == "%" else unit   # a change of a percentage is in percentage points
    delta = f"{s['mean'] - b['mean']:+.2f} {change_unit} (baseline {b['mean']:.2f} {unit})" if b else None
    ui.kpi(col, name, f"{s['mean']:.2f} {unit}", delta, delta_color="inverse" if metric != "utilization_pct" else "normal",
           help=f"95 % interval {s['ci_low']:.2f}-{s['ci_high']:.2f} {unit} over {s['replications']} replications.")

both = (base.with_columns(pl.lit("Baseline").alias("run")).vstack(scen.with_columns(pl.lit("Scenario").alias("run")))
        .filter(pl.col("metric") == "p95_wait_h"))
charts_row = st.columns(2)
for col, (prefix, title, key) in zip(charts_row, (("team=", "p95 wait by team", "wi_team"),
                                                  ("size_class=", "p95 wait by request size (GPUs)", "wi_size"))):
    part = both.filter(pl.col("scope").str.starts_with(prefix)).with_columns(
        pl.col("scope").str.replace(prefix, "", literal=True).alias("group"))
    if part.height:
        ui.chart(col, charts.bars(part.sort("group"), "group", "mean", color="run", barmode="group",
                                  colours={"Baseline": "#A5B8CF", "Scenario": theme.PRIMARY},
                                  y_title="p95 queue wait (hours)", title=title, height=320), key=key)
METRICS = {"p95_wait_h": "p95 queue wait (h)", "p50_wait_h": "Median queue wait (h)", "jobs": "Jobs simulated",
           "utilization_pct": "GPU utilization (%)", "fragmentation_pct": "Fragmentation (%)"}
SCOPES = {"team": "Team", "size_class": "Request size (GPUs)", "pool": "Pool"}
#: The unit of each figure's change: percentage points for percentages.
CHANGE_UNITS = {"p95_wait_h": "h", "p50_wait_h": "h", "jobs": "jobs", "utilization_pct": "pp",
                "fragmentation_pct": "pp"}
table = (base.select("metric", "scope", pl.col("mean").alias("baseline"))
         .join(scen.select("metric", "scope", pl.col("mean").alias("scenario"), "ci_low", "ci_high"),
               on=["metric", "scope"], how="full", coalesce=True)
         .with_columns((pl.col("scenario") - pl.col("baseline")).alias("change"),
                       pl.col("metric").replace_strict(CHANGE_UNITS, default="").alias("change_unit"),
                       pl.col("scope").str.extract(r"^(\w+)=").fill_null("").alias("_kind"),
                       size_order(pl.col("scope").str.replace("size_class=", "", literal=True)).alias("_size"))
         .sort("metric", "_kind", "_size", "scope").drop("_kind", "_size")
         .with_columns(pl.col("metric").replace(METRICS),
                       pl.when(pl.col("scope") == "all").then(pl.lit("All jobs"))
                       .otherwise(pl.col("scope").str.replace_many(
                           [f"{k}=" for k in SCOPES], [f"{v}: " for v in SCOPES.values()])).alias("scope")))
ui.table(table, key="wi_table", file_stem="whatif", ctx=ctx,
         columns={"metric": "Figure", "scope": "For", "baseline": "Baseline", "scenario": "Scenario",
                  "change": "Change", "change_unit": "Change in", "ci_low": "Scenario 95 % low", "ci_high": "Scenario 95 % high"},
         formats={c: "%.2f" for c in ("baseline", "scenario", "change", "ci_low", "ci_high")})
