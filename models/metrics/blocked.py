"""Queue wait explained by fragmentation, read: per job (`per_job`) and per group (`blocked`), in hours and
GPU-hours, from the daily mart ``tl_blocked_daily`` where the window and interval allow it, else from the sample
grid of :mod:`models.kernels.blocked_grid`, which holds the definition (a job's pending samples classified as
placeable / fragmentation / capacity / unknown) and computes both. Caveats: docs/METRICS.md ("Blocked by
fragmentation").
"""
from __future__ import annotations

import duckdb
import polars as pl
from typing import Iterable

from ingest.warehouse import frame
from models.definitions.labels import ALL, ANY_POOL, normalise_dims, size_order
from models.definitions.times import DEFAULT_INTERVAL_S, parse_duration
from models.kernels.blocked_grid import CLASSES, classify_waits, pending_jobs
from models.kernels.free_grid import chunk_params
from models.metrics import timeline

DIMS = ("cluster", "team", "account", "user", "size_class", "partition", "gpu_type")


def per_job(con: duckdb.DuckDBPyConnection, start=None, end=None,
            interval: str | int = DEFAULT_INTERVAL_S) -> pl.DataFrame:
    """One row per job that was pending inside [start, end): its wait split into placeable / fragmentation /
    capacity / unknown, in hours and GPU-hours (sample counts x interval).

    At the default interval over a window of whole UTC days (or reaching past the data span), the sums of the
    daily mart ``tl_blocked_daily``; otherwise computed from the sample grid (the same numbers)."""
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    iv = parse_duration(interval)
    df = _from_mart(con, win) if iv == DEFAULT_INTERVAL_S else None
    if df is None:
        df = _compute(con, win, iv)
    if df.is_empty():
        return pl.DataFrame()
    h = iv / 3600
    df = df.with_columns((pl.col("samples") - pl.col("placeable") - pl.col("fragmentation") - pl.col("capacity"))
                         .alias("unknown"))
    return df.select(
        "job_uid", "cluster", "job_id", "team", "account", "user", "partition", "gpu_type", "gpus", "nnodes",
        "size_class", (pl.col("samples") * h).alias("wait_h"),
        *[(pl.col(c) * h).alias(f"{c}_h") for c in CLASSES],
        (pl.col("samples") * h * pl.col("gpus")).alias("wait_gpu_h"),
        *[(pl.col(c) * h * pl.col("gpus")).alias(f"{c}_gpu_h") for c in CLASSES],
    )


def _compute(con, win, iv: int) -> pl.DataFrame:
    """Per job: its attributes and pending samples in ``win`` (samples, placeable, fragmentation, capacity)."""
    jobs, shapes = pending_jobs(con, chunk_params(*win, iv))
    if jobs.is_empty():
        return pl.DataFrame()
    A, B = jobs["a"].to_numpy(), jobs["b"].to_numpy()
    counts = classify_waits(con, win, iv, A, B, jobs["_shape"].to_numpy(), shapes)
    return jobs.with_columns(pl.Series("samples", B - A), *[pl.Series(c, v) for c, v in counts.items()],
                             pl.col("pool").fill_null(ANY_POOL).alias("gpu_type"), pl.col("g").alias("gpus"),
                             pl.col("nn").alias("nnodes"))


def _from_mart(con, win) -> pl.DataFrame | None:
    """:func:`_compute` summed from ``tl_blocked_daily``, or None when the window does not fall on its days."""
    bounds = timeline.whole_days(con, *win, "tl_blocked_daily")
    if bounds is None:
        return None
    return frame(con, f"""
        SELECT job_uid, any_value(cluster) AS cluster, any_value(job_id) AS job_id, any_value(team) AS team,
               any_value(account) AS account, any_value("user") AS "user", any_value(partition) AS partition,
               coalesce(any_value(gpu_type), '{ANY_POOL}') AS gpu_type, any_value(gpus) AS gpus,
               any_value(nnodes) AS nnodes, any_value(size_class) AS size_class,
               sum(samples)::BIGINT AS samples, sum(placeable)::BIGINT AS placeable,
               sum(fragmentation)::BIGINT AS fragmentation, sum(capacity)::BIGINT AS capacity
        FROM tl_blocked_daily WHERE day >= $w0 AND day < $w1
        GROUP BY job_uid ORDER BY cluster, job_uid""", bounds)


def blocked(con: duckdb.DuckDBPyConnection, start=None, end=None, by: str | Iterable[str] = ("team", "size_class"),
            interval: str | int = DEFAULT_INTERVAL_S) -> pl.DataFrame:
    """Queue wait per group (``by`` any of cluster, team, account, user, size_class, partition, gpu_type) split
    into placeable / fragmentation / capacity / unknown GPU-hours, with the share of the group's wait and of
    all queue wait that fragmentation explains; a last row ``(all)`` holds the totals."""
    dims = normalise_dims(by, DIMS)
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    iv = parse_duration(interval)
    out = _groups_from_mart(con, win, dims) if iv == DEFAULT_INTERVAL_S else None
    if out is None:
        out = _groups(per_job(con, start, end, interval), dims)
    if out is None or out.is_empty():
        return pl.DataFrame()
    total = out.filter(pl.col("_total"))
    total_wait = total["wait_gpu_h"].sum()
    known_wait = total_wait - total["unknown_gpu_h"].sum()
    # a wait whose every sample is unknown (no inventory covers it) says nothing about fragmentation: no share,
    # not a share of 0 (a trace of jobs without nodes was "0 % blocked")
    out = out.with_columns(
        share_expr(),
        (pl.col("fragmentation_gpu_h") / total_wait if known_wait > 1e-9 else pl.lit(None, pl.Float64))
        .alias("fragmentation_share_of_all_wait"))
    order = [pl.col("_total")] + [size_order(pl.col(d)) if d == "size_class" else pl.col(d) for d in dims]
    return out.sort(order + [pl.col("wait_gpu_h")], descending=[False] * len(order) + [True]).select(
        *dims, pl.col("jobs").cast(pl.Int64), "wait_h", "wait_gpu_h", *[f"{c}_gpu_h" for c in CLASSES], "fragmentation_h",
        "fragmentation_share", "fragmentation_share_of_all_wait")


def share_expr() -> pl.Expr:
    """fragmentation_share of a row of summed classes: fragmentation_gpu_h / wait_gpu_h; null without wait or
    when no inventory covers any of it (all unknown)."""
    return (pl.when(pl.col("wait_gpu_h") - pl.col("unknown_gpu_h") > 1e-9)
            .then(pl.col("fragmentation_gpu_h") / pl.col("wait_gpu_h")).alias("fragmentation_share"))


def _groups(jobs: pl.DataFrame, dims: list[str]) -> pl.DataFrame | None:
    """Per group of ``dims`` and the ``(all)`` total (``_total``): jobs and the wait sums, from :func:`per_job`."""
    if jobs.is_empty():
        return None
    aggs = [pl.len().alias("jobs"), pl.col("wait_h").sum(), pl.col("wait_gpu_h").sum(),
            *[pl.col(f"{c}_gpu_h").sum() for c in CLASSES], pl.col("fragmentation_h").sum()]
    groups = jobs.group_by(dims).agg(aggs) if dims else jobs.select(aggs).head(0)
    total = jobs.select(aggs).with_columns(*[pl.lit(ALL).alias(d) for d in dims])
    return pl.concat([groups, total.select(groups.columns)], how="vertical_relaxed").with_columns(
        pl.int_range(pl.len()).ge(groups.height).alias("_total"))


def _groups_from_mart(con, win, dims: list[str]) -> pl.DataFrame | None:
    """:func:`_groups` summed in SQL from ``tl_blocked_daily`` (a job's attributes are the same on all its
    days, so it counts once per group); None when the window does not fall on the mart's days."""
    bounds = timeline.whole_days(con, *win, "tl_blocked_daily")
    if bounds is None:
        return None
    h = DEFAULT_INTERVAL_S / 3600
    cols = ", ".join(f'"{d}"' for d in dims)
    label = "".join(f"""CASE WHEN grouping("{d}") = 1 THEN '{ALL}' ELSE "{d}" END AS "{d}", """ for d in dims)
    out = frame(con, f"""
        SELECT {label} count(DISTINCT job_uid) AS jobs, sum(samples) * $h AS wait_h,
               sum(samples * gpus) * $h AS wait_gpu_h, sum(placeable * gpus) * $h AS placeable_gpu_h,
               sum(fragmentation * gpus) * $h AS fragmentation_gpu_h, sum(capacity * gpus) * $h AS capacity_gpu_h,
               sum((samples - placeable - fragmentation - capacity) * gpus) * $h AS unknown_gpu_h,
               sum(fragmentation) * $h AS fragmentation_h, {f"grouping({cols}) > 0" if dims else "true"} AS _total
        FROM (SELECT * REPLACE (coalesce(gpu_type, '{ANY_POOL}') AS gpu_type) FROM tl_blocked_daily
              WHERE day >= $w0 AND day < $w1)
        GROUP BY GROUPING SETS ({f"({cols}), " if dims else ""}())""", {**bounds, "h": h})
    return out if out.filter(pl.col("_total"))["jobs"].sum() else out.head(0)
