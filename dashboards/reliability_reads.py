"""The Reliability page's model outputs (models/metrics/losses.py, models/metrics/reliability.py), cached per
snapshot version and filter set, as dashboards/model_reads.py does for the other pages: the model's groups, the
sidebar's filters applied to the columns that carry them, GPU-hours summed and goodput recomputed from sums."""
from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards import queries
from dashboards.filters import Filters
from dashboards.queries import CACHE
from models.definitions.losses_sql import CAUSES
from models.metrics import losses as losses_mod, reliability as reliability_mod, reliability_summary as summary_mod

_SUMS = ["allocated_gpu_h", "lost_gpu_h", *losses_mod.CAUSE_COLS, "jobs"]


def _cursor(version: str):
    """A snapshot cursor of the version and data scope ``version`` (the cache key) carries (dashboards/access.py)."""
    return queries.cursor(version)


@st.cache_data(**CACHE)
def losses(version: str, f: Filters, group: str | None = None, bucket: str | None = None) -> pl.DataFrame:
    """Lost and allocated GPU-hours by cause for the filters, per ``group`` (team, gpu_type or cluster) and
    ``bucket``; the model is asked for every filterable column, the filters applied, then summed back."""
    by = ["cluster", "team", "gpu_type"]
    df = losses_mod.report(_cursor(version), f.t0, f.t1, bucket=bucket, by=by)
    if df.is_empty():
        return df
    df = f.apply(df)
    keys = (["bucket"] if bucket else []) + ([group] if group else [])
    aggs = [pl.col(c).sum() for c in _SUMS]
    out = df.group_by(keys).agg(aggs).sort(keys) if keys else df.select(aggs)
    return losses_mod.goodput(out)


@st.cache_data(**CACHE)
def loss_jobs(version: str, f: Filters, n: int = 25) -> pl.DataFrame:
    """The jobs that lost the most GPU-hours in the window, for the filters (team, cluster)."""
    df = losses_mod.jobs(_cursor(version), f.t0, f.t1)
    return f.apply(df).head(n)


@st.cache_data(**CACHE)
def basis(version: str, f: Filters) -> dict:
    return losses_mod.basis(_cursor(version), f.t0, f.t1)


@st.cache_data(**CACHE)
def nodes(version: str, f: Filters) -> pl.DataFrame:
    return f.apply(reliability_mod.nodes(_cursor(version), f.t0, f.t1, "node"))


@st.cache_data(**CACHE)
def observed_until(version: str, f: Filters) -> dict:
    """Per cluster, where the window's node-hours and open outages stop, when before its end (the CLI's note)."""
    return reliability_mod.observed_until(_cursor(version), f.t0, f.t1)


@st.cache_data(**CACHE)
def offenders(version: str, f: Filters) -> pl.DataFrame:
    return f.apply(reliability_mod.offenders(_cursor(version), f.t0, f.t1))


@st.cache_data(**CACHE)
def telemetry(version: str) -> bool:
    return reliability_mod.has_telemetry(_cursor(version))


@st.cache_data(**CACHE)
def slow_nodes(version: str, f: Filters) -> pl.DataFrame:
    return f.apply(reliability_mod.slow_nodes(_cursor(version), f.t0, f.t1))


@st.cache_data(**CACHE)
def xid_gpus(version: str, f: Filters) -> pl.DataFrame:
    return f.apply(reliability_mod.gpus(_cursor(version), f.t0, f.t1))


@st.cache_data(**CACHE)
def last_full_month(version: str):
    """[first, next first) of the last full UTC month before the data's horizon, or None."""
    return summary_mod.last_full_month(_cursor(version))


@st.cache_data(**CACHE)
def month_teams(version: str, f: Filters) -> pl.DataFrame:
    """The manager's per-team summary over the last full month (sidebar dates do not apply; team filter does)."""
    month = summary_mod.last_full_month(_cursor(version))
    return pl.DataFrame() if month is None else f.apply(summary_mod.teams(_cursor(version), *month))


@st.cache_data(**CACHE)
def month_pull(version: str, f: Filters) -> pl.DataFrame:
    """The ranked nodes to pull over the last full month (cluster and pool filters apply)."""
    month = summary_mod.last_full_month(_cursor(version))
    return pl.DataFrame() if month is None else f.apply(summary_mod.pull(_cursor(version), *month))


def loss_bucket(f: Filters) -> str:
    """The bucket of the page's lost-GPU-hours-over-time chart: a bar a day up to 120 days, then weeks, months."""
    return "day" if f.days <= 120 else "week" if f.days <= 730 else "month"


def views(version: str, f: Filters) -> list:
    """The page's reads for filters ``f``, in its order, for the dashboards' warm-up (dashboards/prewarm.py): the
    page over 90 days or a year took 3.3 / 5.8 s cold on the year's warehouse, the others warm ~2.5 s."""
    return [lambda: month_teams(version, f), lambda: month_pull(version, f), lambda: losses(version, f),
            lambda: offenders(version, f), lambda: basis(version, f), lambda: losses(version, f, "team"),
            lambda: losses(version, f, None, loss_bucket(f)), lambda: telemetry(version),
            lambda: slow_nodes(version, f) if telemetry(version) else None, lambda: nodes(version, f),
            lambda: xid_gpus(version, f), lambda: loss_jobs(version, f)]


CAUSE_LABELS = {"node_failure": "Node failure", "gpu_xid": "GPU XID", "outage": "Other outage",
                "preemption": "Preemption", "requeue": "Requeue", "timeout": "Timeout", "user_failure": "Job failed"}
assert set(CAUSE_LABELS) == set(CAUSES)
