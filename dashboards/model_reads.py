"""The model outputs each page shows, cached per snapshot version and filter set.

Each function calls the library function of the model that owns the figure (models/metrics, forecasting,
simulation), on a read-only cursor of the serving snapshot. No business SQL lives here: only the mapping from the sidebar's filters to
the model's parameters, and sums of the model's additive columns (GPU-hours) over the groups a filter
keeps, with ratios recomputed from those sums.
"""
from __future__ import annotations

import datetime as dt
import os
from concurrent.futures import ThreadPoolExecutor

import polars as pl
import streamlit as st

from dashboards import access, exports, queries
from dashboards.filters import Filters
from dashboards.budget import BUDGET
from dashboards.queries import CACHE
from models.definitions.labels import ALL, UNMAPPED, sized
from models.definitions.policy import CostError, current_policy
from models.definitions.times import next_period
from models.forecasting import budgets as budgets_mod, capacity as capacity_mod
from models.metrics import blocked as blocked_mod, chargeback as chargeback_mod, efficiency as efficiency_mod
from models.metrics import fairness as fairness_mod, fragmentation as fragmentation_mod, queue as queue_mod
from models.metrics import timeline, utilization as utilization_mod
from models.metrics import pending as pending_mod, preemption as preemption_mod, reservations as reservations_mod
from models.metrics import alerts as alerts_mod
from models.simulation import simulate as simulate_mod, whatif as whatif_mod


def _cursor(version: str):
    """A snapshot cursor of the version and scope ``version`` (the cache key) says: a cached view is computed on
    its own snapshot, in its own scope."""
    return queries.cursor(version)


def db_path():
    """The warehouse this dashboard serves (the period-close action writes it; reads never do)."""
    return queries.current().db_path


def prefetch(calls, workers: int | None = None) -> None:
    """Run independent cached reads concurrently and wait for them, so a page that shows several models waits
    about as long as its slowest few, not their sum (DuckDB and Polars release the GIL while they compute).

    ``calls``: zero-argument callables of this module's cached functions, slowest first. Results land in the
    caches, where the page's own calls find them; a call that fails is left for the page to repeat and report."""
    # one read per core: each DuckDB query already uses every core, so more threads only contend (on the year,
    # 2 cores: overview cold 2.7-2.8 s with 2 workers, 3.1-3.25 s with 3 or 4)
    workers = workers or os.cpu_count() or 2
    def run(call):
        try:
            call()
        except Exception:  # noqa: BLE001 - the page's own call raises it again, inside ui.guarded
            pass
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpuledger-prefetch") as pool:
        list(pool.map(run, calls))


def auto_bucket(f: Filters) -> str:
    """A bucket that gives a readable number of points for the window (about 24 to 120)."""
    if f.days <= 3:
        return "hour"
    if f.days <= 120:
        return "day"
    if f.days <= 730:
        return "week"
    return "month"


# ---------------------------------------------------------------- utilization (models/utilization.py, issue 5)

#: Additive GPU-hour columns of utilization.by_bucket's capacity rows.
UTIL_SUMS = ["capacity_gpu_h", "unavailable_gpu_h", "available_gpu_h", "allocated_gpu_h", "idle_gpu_h",
             "beyond_capacity_gpu_h", "pending_gpu_h", "sreport_allocated", "sreport_down", "sreport_planned_down",
             "sreport_idle", "sreport_planned", "sreport_reported"]
_CAP_FILTERS = {"clusters": "cluster", "pools": "gpu_type", "partitions": "partition"}


def _capacity_by(f: Filters, group: str | None) -> list[str]:
    by = [col for name, col in _CAP_FILTERS.items() if f.dimensions()[name]]
    if group and group != "team" and group not in by:
        by.append(group)
    return by


@st.cache_data(**CACHE)
def utilization(version: str, f: Filters, bucket: str, group: str | None = None) -> pl.DataFrame | None:
    """Capacity and allocation per bucket (and ``group``: cluster, gpu_type or partition), GPU-hours.

    With a team filter, ``allocated_gpu_h`` is the selected teams' allocation and ``other_allocated_gpu_h``
    the rest, so allocated + other + idle + unavailable = capacity still holds. ``allocation_ratio`` is the
    (selected) allocation inside capacity over available capacity, recomputed from the sums.
    """
    mod = utilization_mod
    by = _capacity_by(f, group)
    if f.teams:
        by.append("team")
    df = mod.by_bucket(_cursor(version), f.t0, f.t1, bucket, by=by or None)
    keys = ["bucket"] + ([group] if group and group != "team" else [])
    if df.height == 0:
        return df
    df = f.apply(df, skip=("teams",))
    if f.teams:
        totals = df.filter(pl.col("team") == mod.TOTAL_LABEL)
        chosen = (_team_rows(df, f, mod.TOTAL_LABEL).group_by(keys)
                  .agg(pl.col("allocated_gpu_h").sum().alias("_sel")))
    else:
        totals, chosen = df, None
    out = totals.group_by(keys).agg(pl.col("hours").max(), *[pl.col(c).sum() for c in UTIL_SUMS if c in totals.columns])
    if chosen is not None:
        out = (out.join(chosen, on=keys, how="left").with_columns(pl.col("_sel").fill_null(0.0))
               .with_columns((pl.col("allocated_gpu_h") - pl.col("_sel")).alias("other_allocated_gpu_h"),
                             pl.col("_sel").alias("allocated_gpu_h"))
               .drop("_sel"))
        ratio = pl.col("allocated_gpu_h") / pl.col("available_gpu_h")
    else:
        out = out.with_columns(pl.lit(0.0).alias("other_allocated_gpu_h"))
        ratio = pl.col("sreport_allocated") / pl.col("available_gpu_h")
    out = out.with_columns(pl.when(pl.col("available_gpu_h") > 0).then(ratio).otherwise(None).alias("allocation_ratio"))
    return out.sort(keys)


def _team_rows(df: pl.DataFrame, f: Filters, total_label: str) -> pl.DataFrame:
    rows = df.filter(pl.col("team") != total_label)
    return f.apply(rows.with_columns(pl.when(pl.col("team") == UNMAPPED).then(None).otherwise(pl.col("team"))
                                     .alias("team")), skip=("clusters", "pools", "partitions"))


@st.cache_data(**CACHE)
def allocation_by_team(version: str, f: Filters, bucket: str) -> pl.DataFrame | None:
    """Allocated GPU-hours per bucket and team (teams the filter keeps; unmapped jobs as UNMAPPED)."""
    mod = utilization_mod
    by = _capacity_by(f, None) + ["team"]
    df = mod.by_bucket(_cursor(version), f.t0, f.t1, bucket, by=by)
    if df.height == 0:
        return pl.DataFrame(schema={"bucket": pl.Datetime, "team": pl.String, "allocated_gpu_h": pl.Float64})
    df = _team_rows(f.apply(df, skip=("teams",)), f, mod.TOTAL_LABEL)
    return (df.with_columns(pl.col("team").fill_null(UNMAPPED))
            .group_by("bucket", "team").agg(pl.col("allocated_gpu_h").sum()).sort("bucket", "team"))


def window_totals(df: pl.DataFrame | None, f: Filters) -> dict[str, float | None]:
    """Sum a utilization frame over its buckets (and groups): GPU-hours and the recomputed allocation ratio.

    Without a team filter the ratio counts allocation inside capacity (as the model does); with one, the
    selected teams' allocation over the available capacity of the pools and partitions kept."""
    if df is None or df.height == 0:
        return {}
    sums = {c: float(df[c].sum()) for c in [*UTIL_SUMS, "other_allocated_gpu_h"] if c in df.columns}
    avail = sums.get("available_gpu_h") or 0.0
    num = sums["allocated_gpu_h"] if f.teams else sums.get("sreport_allocated", sums["allocated_gpu_h"])
    sums["allocation_ratio"] = num / avail if avail > 0 else None
    return sums




# ---------------------------------------------------------------- cost and chargeback (models/chargeback.py, issue 6)

@st.cache_data(**CACHE)
def currency(version: str) -> str | None:
    """The governance currency, or None before a governance file is loaded (or before the cost model lands)."""
    try:
        return current_policy(_cursor(version)).currency
    except CostError:  # no governance loaded yet: amounts are simply not shown
        return None


@st.cache_data(**CACHE)
def chargeback_periods(version: str, first: dt.date | None, last: dt.date | None) -> tuple[list[str], list[str]]:
    """(every month the data touches, newest first; the months closed so far)."""
    closed = chargeback_mod.closed_periods(_cursor(version))
    months = set(closed)
    if first and last:
        y, m = first.year, first.month
        while (y, m) <= (last.year, last.month):
            months.add(f"{y:04d}-{m:02d}")
            y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return sorted(months, reverse=True), closed


@st.cache_resource(max_entries=BUDGET.statements, ttl=BUDGET.ttl, show_spinner=False)
def statement(version: str, period: str, detail: bool = True):
    """The period's Statement (frozen if closed, else computed from the snapshot; without its job-level detail
    unless ``detail``) and its views; CostError text if it cannot be.

    Cached as a resource (not copied per view): the statement of a big month carries every job."""
    try:
        if access.scope_key(version) and period in chargeback_mod.closed_periods(_cursor(version)):
            # a closed statement's hash holds over its stored rows: checked on them, then read as scoped
            chargeback_mod.statement(queries.cursor(access.snapshot_version(version)), period, detail=False)
            st_ = chargeback_mod.statement(_cursor(version), period, detail=detail, verify=False)
        else:
            st_ = chargeback_mod.statement(_cursor(version), period, detail=detail)
    except CostError as exc:
        return str(exc)
    return st_, chargeback_mod.views(st_)


@st.cache_data(max_entries=4, ttl=BUDGET.ttl, show_spinner=False)
def statement_xlsx(version: str, period: str) -> bytes:
    """The statement workbook exactly as `gpuledger chargeback --out X.xlsx` writes it (dashboards/exports.py).

    Stamped with the close time, or for an open period with the snapshot's publication time, so one snapshot
    always gives the same bytes."""
    stmt, views = statement(version, period)
    created = stmt.closed_at or queries.published_at(version)
    return exports.xlsx_bytes(views, title=f"GPU chargeback {stmt.period}", created=created,
                              units=chargeback_mod.units(stmt))


@st.cache_data(**CACHE)
def budgets(version: str, period: str) -> pl.DataFrame | str:
    """`gpuledger report budgets --period P`'s table (models/forecasting/budgets.py), or why there is none."""
    try:
        return budgets_mod.report(_cursor(version), period)
    except CostError as exc:
        return str(exc)


@st.cache_data(**CACHE)
def alert_history(version: str) -> pl.DataFrame:
    """`gpuledger report alerts`'s table (every episode of the service's alert rules), empty without any."""
    return alerts_mod.history(_cursor(version))


# ---------------------------------------------------------------- forecasts (models/capacity.py + forecast.py, issue 7)

@st.cache_resource(max_entries=16, ttl=BUDGET.ttl, show_spinner=False)
def forecast(version: str, measure: str, horizon: int, target_util: float, band: str, by: tuple[str, ...],
             cluster: str | None) -> dict | None:
    """capacity.forecast_warehouse's answer (history, forecast with intervals, model summary, capacity answers).

    Cached as a resource per snapshot and settings: fitting and backtesting every series takes seconds."""
    return capacity_mod.forecast_warehouse(_cursor(version), horizon, by=by, freq="day", measure=measure, cluster=cluster,
                                  target_util=target_util, band=band)


# ---------------------------------------------------------------- what-if (models/whatif.py, issue 8)

@st.cache_resource(max_entries=2, ttl=BUDGET.ttl, show_spinner=False)
def whatif_inputs(version: str, t0: dt.datetime, t1: dt.datetime, cluster: str | None):
    """The simulator's inputs for the window (capacity at its start, its jobs and outages), or the reason
    there are none as a string."""
    try:
        return whatif_mod.load_inputs(_cursor(version), t0.isoformat(), t1.isoformat(), cluster)
    except ValueError as exc:
        return str(exc)


@st.cache_data(max_entries=32, ttl=BUDGET.ttl, show_spinner=False)
def whatif(version: str, t0: dt.datetime, t1: dt.datetime, cluster: str | None, add: tuple[tuple[str, int], ...],
           demand_scale: float, policy: str, replications: int, seed: int = 0,
           reservations: bool = True) -> pl.DataFrame | str | None:
    """Metrics of one scenario (p50/p95 wait overall, per team, per size class, per pool; utilization;
    fragmentation), each a mean with its 95 % interval over ``replications`` bootstrapped replications; without
    ``reservations`` the advance reservations' jobs run as ordinary jobs."""
    mod, sim = whatif_mod, simulate_mod
    inp = whatif_inputs(version, t0, t1, cluster)
    if inp is None or isinstance(inp, str):
        return None
    try:
        sc = mod.Scenario(add=dict(add), demand_scale=demand_scale, policy=sim.Policy.parse(policy, seed=seed),
                          replay_reservations=reservations)
        return mod.run_whatif(inp, sc, replications, seed, ("team", "size_class"))
    except ValueError as exc:   # e.g. a pool with no node to copy the shape of
        return str(exc)


# ---------------------------------------------------------------- efficiency (models/efficiency.py, issue 3)

_EFF_SUMS = ["jobs", "jobs_without_telemetry", "alloc_gpu_h", "telemetry_gpu_h", "active_gpu_h", "idle_alloc_gpu_h",
             "energy_kwh"]
_EFF_FILTERS = {"clusters": "cluster", "pools": "gpu_type", "partitions": "partition", "teams": "team"}


@st.cache_data(**CACHE)
def efficiency(version: str, f: Filters, group: str | None = None, bucket: str | None = None) -> pl.DataFrame | None:
    """Efficiency per ``group`` (team, user, gpu_type, partition...) and bucket, for the filters (GPU-hours, %).

    Groups the model splits further only to apply a filter are summed back (GPU-hours) and the percentages
    recomputed from the sums; the p95 cannot be summed and is kept only when no such split happened."""
    mod = efficiency_mod
    extra = [col for name, col in _EFF_FILTERS.items() if f.dimensions()[name] and col != group]
    by = ([group] if group else []) + extra
    df = mod.by_group(_cursor(version), f.t0, f.t1, by=by, bucket=bucket)
    if df.height == 0:
        return df
    df = f.apply(df.with_columns(pl.col("team").fill_null(UNMAPPED)) if "team" in df.columns else df)
    if not extra:
        return df
    keys = (["bucket"] if bucket else []) + ([group] if group else [])
    aggs = [pl.col(c).sum() for c in _EFF_SUMS] + [pl.col("metric").drop_nulls().unique().sort().str.join(", ")]
    out = df.group_by(keys).agg(aggs) if keys else df.select(aggs)
    return efficiency_mod.shares(out).sort(keys) if keys else efficiency_mod.shares(out)


@st.cache_data(**CACHE)
def efficiency_jobs(version: str, f: Filters, n: int = 25, user: str | None = None) -> pl.DataFrame | None:
    """The worst offenders: jobs with the most idle-allocated GPU-hours in the window, for the filters (and of
    one ``user`` only, when given)."""
    mod = efficiency_mod
    filtered = any(f.dimensions().values()) or user is not None
    df = mod.worst_offenders(_cursor(version), f.t0, f.t1, n=None if filtered else n)
    df = f.apply(df.with_columns(pl.col("team").fill_null(UNMAPPED)))
    if user is not None:
        df = df.filter(pl.col("user") == user)
    return df.filter(pl.col("idle_alloc_gpu_h") > 0).head(n)


@st.cache_data(**CACHE)
def efficiency_methods(version: str, f: Filters) -> pl.DataFrame | None:
    """Share of telemetry GPU-hours attributed exactly (exporter label, GPU index) or by node share (window)."""
    return efficiency_mod.method_shares(_cursor(version), f.t0, f.t1)


# ---------------------------------------------------------------- fragmentation (models/fragmentation*.py, issue 5)

@st.cache_data(**CACHE)
def fragmentation(version: str, f: Filters, bucket: str) -> pl.DataFrame | None:
    """Fragmentation per bucket and pool for the filters: node-state means summed over the cells kept
    (nodes, free and stranded GPUs add up over cells sampled at the same times), FGD rate recomputed.

    Partitions are split only when filtered on (a node in several partitions would count in each)."""
    mod = fragmentation_mod
    by = ("gpu_type", "partition") if f.partitions else ("gpu_type",)
    df = mod.report(_cursor(version), f.t0, f.t1, bucket, by=by)
    if df.height == 0:
        return df
    df = f.apply(df, skip=("teams",))
    add = [c for c in df.columns if c.startswith(("nodes_free_", "stranded_"))] + [
        "nodes_up", "free_gpus", "whole_free_nodes", "fgd_frag_gpus", "largest_gang_gpus"]
    return (df.with_columns(pl.col(c) * pl.col("samples") for c in add if c in df.columns)
            .group_by("bucket", "gpu_type")
            .agg(pl.col("samples").max(), *[pl.col(c).sum() for c in add if c in df.columns],
                 pl.col("largest_single_node").max(), pl.col("workload_jobs").sum())
            .with_columns(pl.col(c) / pl.col("samples") for c in add if c in df.columns)
            .with_columns(pl.when(pl.col("free_gpus") > 0).then(pl.col("fgd_frag_gpus") / pl.col("free_gpus"))
                          .alias("fgd_rate"))
            .sort("bucket", "gpu_type"))




BLOCKED_SUMS = ["jobs", "wait_h", "wait_gpu_h", "placeable_gpu_h", "fragmentation_gpu_h", "capacity_gpu_h",
                "unknown_gpu_h", "fragmentation_h"]


@st.cache_data(**CACHE)
def blocked(version: str, f: Filters) -> pl.DataFrame | None:
    """Queue wait GPU-hours of the jobs the filters keep, per team and size class, split into placeable /
    fragmentation / capacity / unknown (one model run per filter set; pages sum the groups they show)."""
    mod = blocked_mod
    by = ["team", "size_class"]
    extra = [col for name, col in _EFF_FILTERS.items() if f.dimensions()[name] and col not in by]
    df = mod.blocked(_cursor(version), f.t0, f.t1, by=by + extra)
    if df.height == 0:
        return sized(pl.DataFrame(schema={"team": pl.String, "size_class": pl.String,
                                          **{c: pl.Float64 for c in BLOCKED_SUMS}}))
    df = f.apply(df.filter(pl.all_horizontal(pl.col(c) != ALL for c in by + extra)))
    return sized(df.group_by(by).agg([pl.col(c).sum() for c in BLOCKED_SUMS]))   # size classes in their order


def blocked_by(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Sum :func:`blocked` rows over ``keys`` (none: one total row) and add the share fragmentation explains."""
    out = df.group_by(keys).agg([pl.col(c).sum() for c in BLOCKED_SUMS]) if keys else df.select(
        [pl.col(c).sum() for c in BLOCKED_SUMS])
    return out.with_columns(blocked_mod.share_expr())


# ---------------------------------------------------------------- fairness and queues (models/fairness.py, queue.py, issue 6)

@st.cache_data(**CACHE)
def fairness(version: str, f: Filters) -> dict[str, pl.DataFrame] | str | None:
    """fairness.report over the window (clipped to the data horizon): per team and pool, and per pool."""
    cur = _cursor(version)
    end = min(f.t1, timeline.horizon(cur) or f.t1)
    if end <= f.t0:
        return {"teams": pl.DataFrame(), "pools": pl.DataFrame()}
    try:
        rep = fairness_mod.report(cur, [("window", f.t0, end)])
    except CostError as exc:   # no governance loaded (entitlements are what fairness is about)
        return str(exc)
    teams = f.apply(rep["teams"], skip=("pools", "partitions"))
    pools = f.apply(rep["pools"], skip=("pools", "partitions", "teams"))
    return {"teams": teams, "pools": pools}


@st.cache_data(**CACHE)
def waits(version: str, f: Filters, by: tuple[str, ...] = ("team", "size_class")) -> pl.DataFrame | None:
    """Queue wait percentiles (hours) of jobs that started in the window, per ``by`` plus the filtered dims
    (percentiles cannot be merged: a filter with several values keeps its column)."""
    mod = queue_mod
    dims = {"clusters": "cluster", "pools": "pool", "partitions": "partition", "teams": "team"}
    extra = tuple(col for name, col in dims.items() if f.dimensions()[name] and col not in by)
    df = mod.waits(_cursor(version), f.t0, f.t1, by=by + extra)
    return f.apply(df) if df.height else df


@st.cache_data(**CACHE)
def starvation(version: str, f: Filters, threshold_hours: float) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """(per team: starved and pending-too-long counts, oldest pending age; the jobs pending longer than the
    threshold at the end of the window), for the team, pool and cluster filters."""
    mod = queue_mod
    cur = _cursor(version)
    end = min(f.t1, timeline.horizon(cur) or f.t1)
    per_team = f.apply(mod.starvation(cur, f.t0, end, threshold_hours), skip=("pools", "partitions"))
    pending = mod.pending_at(cur, end)
    pending = f.apply(pending, skip=("partitions",)).filter(pl.col("pending_h") > threshold_hours)
    return per_team, pending


# ---------------------------------------------------------------- headline figures
# The Overview's tiles and the KPI of the page each links to call these same functions, so the two can never
# disagree; views only format what they return. tests/test_consistency.py checks each against the library
# figure the CLI prints for the same window and filters.

def allocation_ratio(version: str, f: Filters) -> float | None:
    """Allocated / available GPU-hours of the window (``report utilization``'s sreport_allocated / available,
    summed; with a team filter the selected teams' allocated); None when no job of the window names its nodes
    (:func:`placement_known`)."""
    if not placement_known(version, f):
        return None
    return window_totals(utilization(version, f, "month"), f).get("allocation_ratio")


#: why allocation figures are missing although capacity is known: every job of the window lacks a node
NO_PLACEMENT = "not known: the jobs hold GPUs but name no node (a trace without placement)"


def placement_known(version: str, f: Filters) -> bool:
    """False when the window's GPU jobs hold GPU-hours by their records but none names a node (openb's pod
    lists): allocated and idle GPU-hours per node cannot be told, and "0 % allocated" would be a claim. With
    some jobs placed the figures stand, and the pages warn about the rest."""
    if not unplaced(version, f)["jobs"]:
        return True
    return bool(window_totals(utilization(version, f, "month"), f).get("allocated_gpu_h"))


def node_figure_missing(version: str, f: Filters, otherwise: str) -> str:
    """Why a figure of the nodes' GPUs (allocation ratio, fragmentation rate) is None: no inventory, no job
    placed on it, else ``otherwise`` (the figure's own reason: no GPU available, no free GPUs)."""
    if not capacity_known(version, f):
        return NO_CAPACITY
    return NO_PLACEMENT if not placement_known(version, f) else otherwise


def allocation_missing(version: str, f: Filters) -> str:
    """Why :func:`allocation_ratio` is None."""
    return node_figure_missing(version, f, "no GPU available in the window")


def efficiency_total(version: str, f: Filters) -> dict | None:
    """The window's efficiency row (``report efficiency --total``): mean_pct (None without telemetry),
    coverage_pct (efficiency.shares: telemetry / allocated GPU-hours), GPU-hours, jobs; None without GPU jobs."""
    df = efficiency(version, f)
    if df is None or df.height == 0 or not df["alloc_gpu_h"].sum():
        return None
    return df.row(0, named=True)


def fragmentation_rate(version: str, f: Filters) -> float | None:
    """The window's FGD rate (fragmentation.window_rate: each day's samples against that day's requests); None
    when no job of the window names its nodes (every GPU would be sampled free: :func:`placement_known`)."""
    if not placement_known(version, f):
        return None
    return fragmentation_mod.rate(fragmentation(version, f, fragmentation_mod.WINDOW_BUCKET))


def fragmentation_missing(version: str, f: Filters) -> str:
    """Why :func:`fragmentation_rate` is None."""
    return node_figure_missing(version, f, "no free GPUs in the window")


#: why a figure that needs installed GPUs is missing: the warehouse has accounting but no node inventory
NO_CAPACITY = "no GPU capacity known: no node inventory (ingest `scontrol show node` snapshots)"
#: the inventory is there, but none of it lies in the partitions the jobs waited in (openb: pods name none)
NO_COVER = "not known: no node of the inventory is in the partitions the jobs waited in"


def capacity_known(version: str, f: Filters) -> bool:
    """Whether the window has installed GPUs (node inventory): without, allocation ratio, fragmentation and
    blocked waits cannot be told (a trace of jobs alone, such as MIT SuperCloud's)."""
    return bool(window_totals(utilization(version, f, "month"), f).get("capacity_gpu_h"))


def blocked_share(version: str, f: Filters) -> float | None:
    """Share of the window's queue wait (GPU-hours) blocked by fragmentation; None without queue wait, or when
    no inventory covers any of it (no node inventory: "0 % blocked" would be a claim we cannot make)."""
    df = blocked(version, f)
    if df is None:
        return None
    return blocked_by(df, [])["fragmentation_share"][0]


def blocked_missing(version: str, f: Filters) -> str:
    """Why :func:`blocked_share` is None: no inventory at all, none in the partitions the jobs waited in, or no
    queue wait (the Overview and Fragmentation tiles say the same)."""
    if not capacity_known(version, f):
        return NO_CAPACITY
    df = blocked(version, f)
    waited = df is not None and (blocked_by(df, [])["wait_gpu_h"][0] or 0) > 0
    return NO_COVER if waited else "no queue wait in the window"


def fairness_pool(f: Filters) -> str:
    """The pool whose fairness figures a page shows: the one pool selected, else the whole cluster."""
    return f.pools[0] if len(f.pools) == 1 else ALL


def jain(version: str, f: Filters) -> float | None:
    """Jain's index over the teams with pending demand (``report fairness``'s jain_pending_teams) of
    :func:`fairness_pool`; with several clusters the least fair. None without such teams (or governance)."""
    rep = fairness(version, f)
    if not isinstance(rep, dict) or rep["pools"].height == 0:
        return None
    return rep["pools"].filter(pl.col("pool") == fairness_pool(f))["jain_pending_teams"].min()


def worst_wait(version: str, f: Filters) -> dict | None:
    """Queue waits of the jobs that started in the window (``report queue``), the cluster (and, with a team
    filter, team) with the highest p95; None when no job started."""
    w = waits(version, f, ("cluster",))
    if w is None or w.height == 0:
        return None
    return w.sort("wait_p95_h", descending=True, nulls_last=True).row(0, named=True)


def month_cost(version: str, f: Filters, month: str | None = None) -> dict | str:
    """The statement of ``month`` (default: the month of the window's last instant) charged to the teams and
    pools the filters keep (``gpuledger chargeback --period``'s by-team lines, summed): month, status (open,
    provisional, closed), currency, cost, lines, statement; or why there is none (text)."""
    month = month or f.month
    res = statement(version, month, detail=False)
    if res is None or isinstance(res, str):
        return res or f"no statement for {month}"
    stmt, views = res
    lines = f.apply(views["by team"].with_columns(pl.col("team").fill_null(UNMAPPED)), skip=("partitions",))
    return {"month": month, "status": stmt.status, "currency": stmt.policy.currency, "statement": stmt,
            "lines": lines, "cost": float(lines["total"].cast(pl.Float64).sum())}


def previous_month(month: str) -> str:
    return next_period(month, -1)


def month_cost_label(cost: dict) -> str:
    """The headline row's name for :func:`month_cost`'s ``cost`` wherever it is shown (Overview, weekly report):
    its status, and that the figure beside it is the whole previous month, not the previous week."""
    status = {"closed": ", closed", "provisional": " to date"}.get(cost["status"], ", open")
    return f"Cost {cost['month']}{status} (previous: all of {previous_month(cost['month'])})"


#: what "Capacity reached" rests on wherever it is shown (Overview, weekly report): the upper band of the demand
#: forecast against the target utilisation, not the median (the Forecast page shows both dates)
CAPACITY_BAND, CAPACITY_TARGET = "80", 0.85
CAPACITY_BASIS = f"upper {CAPACITY_BAND} % band"


def capacity_reached(version: str, f: Filters) -> dict | None:
    """The first pool (of those the filters keep) whose upper 80 % demand forecast exceeds 85 % of its capacity
    within 90 days (``gpuledger forecast --horizon 90``; the Forecast page's defaults, the same call): {date,
    pool, capacity_gpus, already}, the pool named "cluster / pool" when there are several clusters; ``already``:
    its demand over the last window is above the target now (the forecast's ``already_above``); {} when none
    reaches it; None without a forecast."""
    keys = queries.catalogue(version).pool_keys
    cap = _capacity_forecast(version, f)["capacity"]
    if cap is None or cap.height == 0:
        return None
    cap = cap.filter(pl.col("pool").is_in(f.pools) if f.pools else pl.col("capacity_gpus").is_not_null())
    if f.clusters and "cluster" in cap.columns:
        cap = cap.filter(pl.col("cluster").is_in(f.clusters))
    hits = cap.filter(pl.col("exhausted_upper80").is_not_null()).sort("exhausted_upper80")
    if hits.height == 0:
        return {}
    h = hits.row(0, named=True)
    pool = f"{h['cluster']} / {h['pool']}" if "cluster" in keys else h["pool"]
    return {"date": h["exhausted_upper80"], "pool": pool, "capacity_gpus": h["capacity_gpus"],
            "already": bool(h.get("already_above"))}


def reached_text(date, already: bool) -> str:
    """A capacity date as the tiles and reports print it: a pool already over its target says so, rather than
    showing the first forecast day (which reads as "tomorrow")."""
    return f"already (before {date:%Y-%m-%d})" if already else f"{date:%Y-%m-%d}"


def capacity_since(version: str, f: Filters):
    """The first day of the forecast behind :func:`capacity_reached` (UTC): it is made from all the accounting
    before that day, whatever window ``f`` selects; None without a forecast."""
    fc = _capacity_forecast(version, f)["forecast"]
    return fc["ts"].min() if fc is not None and fc.height else None


def _capacity_forecast(version: str, f: Filters) -> dict:
    """The forecast "Capacity reached" rests on: per pool (each cluster's pool has its own capacity and forecast),
    the Forecast page's defaults, of the one cluster the filters keep, else of all."""
    keys = queries.catalogue(version).pool_keys
    cluster = f.clusters[0] if len(f.clusters) == 1 else None
    return forecast(version, "demanded", 90, CAPACITY_TARGET, CAPACITY_BAND, keys, cluster)


@st.cache_data(**CACHE)
def unplaced(version: str, f: Filters) -> dict:
    """Jobs that held GPUs in the window by their records but name no node (timeline.unplaced): {jobs, gpu_h}."""
    return timeline.unplaced(_cursor(version), f.t0, f.t1)


@st.cache_data(**CACHE)
def running_jobs(version: str) -> pl.DataFrame:
    """Jobs still running at the horizon (timeline.running_jobs): job_uid, cluster, horizon."""
    return timeline.running_jobs(_cursor(version))


# ---------------------------------------------------------------- why jobs wait (issue 16: preemption, reservations, pending)

@st.cache_data(**CACHE)
def _pending_views(version: str, t0, t1) -> dict:
    """Both pending views per team over [t0, t1), from one computation of the reason segments."""
    return pending_mod.views(_cursor(version), t0, t1, "team")


@st.cache_data(**CACHE)
def pending_classes(version: str, f: Filters) -> pl.DataFrame:
    """Waiting GPU-hours per team and reason class (models/metrics/pending.py), for the team filter."""
    df = _pending_views(version, f.t0, f.t1)["classes"]
    return f.apply(df) if df.height else df


@st.cache_data(**CACHE)
def pending_reasons(version: str, f: Filters) -> pl.DataFrame:
    """Waiting GPU-hours per team, Slurm reason and source, for the team filter."""
    df = _pending_views(version, f.t0, f.t1)["reasons"]
    return f.apply(df) if df.height else df


@st.cache_data(**CACHE)
def pending_coverage(version: str) -> dict:
    return pending_mod.coverage(_cursor(version))


@st.cache_data(**CACHE)
def preemption(version: str, f: Filters) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per victim team, per preemptor QOS/team and victim team) for the window and the team filter."""
    v = preemption_mod.views(_cursor(version), f.t0, f.t1)
    victims = v["victims"]
    return (f.apply(victims) if victims.height else victims), v["preemptors"]


@st.cache_data(**CACHE)
def reservations_loaded(version: str) -> bool:
    """Whether the snapshot holds any reservation (models.metrics.reservations.loaded)."""
    return reservations_mod.loaded(_cursor(version))


@st.cache_data(**CACHE)
def reservations(version: str, f: Filters) -> pl.DataFrame:
    """Reserved, used and idle GPU-hours per reservation overlapping the window, for the team filter. In a
    team-scoped read another team's reservation (its owner removed, dashboards/access.py) is "other teams", as
    that team's jobs are, not "(unmapped)"."""
    df = reservations_mod.report(_cursor(version), f.t0, f.t1)
    if df.height and access.scope_key(version):
        mine = list(access.teams_of(access.scope_key(version)))
        df = df.with_columns(team=pl.when(pl.col("team").is_in(mine)).then(pl.col("team"))
                             .otherwise(pl.lit(access.OTHER)))
    return f.apply(df) if df.height else df


def reserved_idle(version: str, f: Filters) -> float | None:
    """Reserved GPU-hours no job held in the window (the Why jobs wait tile, the Overview's and the weekly
    report's row); 0 when reservations were loaded but none falls in it, None when none was ever loaded."""
    df = reservations(version, f)
    if df.height:
        return float(df["reserved_idle_gpu_h"].sum())
    return 0.0 if reservations_loaded(version) else None
