"""Queue wait explained by fragmentation: for every job's pending time, at each sample, could it have started?

A job is pending from ``eligible`` (else ``submit``) until ``start`` (or, never started: its end if cancelled,
the horizon if still pending). At every sample time in that interval (the same sample grid as
:mod:`models.fragmentation`) its candidate nodes are the available nodes of the partitions it was submitted to
and of its typed GPU request (any pool when untyped). Each pending sample is classified:

- ``placeable``: some node had ``k`` free GPUs (``k`` = GPUs per node = ceil(GPUs / nodes)), or, for an
  N-node job, N nodes had ``k`` free each: GPUs were not what held it (priority, limits, reservations,
  backfill order, CPUs or memory);
- ``fragmentation``: not placeable, but the candidate nodes together had at least the job's GPUs free:
  the free GPUs were there, scattered over nodes that could not take it;
- ``capacity``: fewer free GPUs than the job needs in all its candidate nodes together;
- ``unknown``: no inventory for its partitions at that time.

GPU-hours of each class = sample count x interval x the job's GPUs. Definitions and caveats: docs/METRICS.md
("Blocked by fragmentation").
"""
from __future__ import annotations

from typing import Iterable

import duckdb
import polars as pl

from models import fragmentation, timeline

DIMS = ("cluster", "team", "account", "user", "size_class", "partition", "gpu_type")
CLASSES = ("placeable", "fragmentation", "capacity", "unknown")

PENDING_SQL = """
    SELECT j.job_uid, j.cluster, j.job_id, coalesce(j.team, '(unmapped)') AS team, j.account, j."user",
           j.partition, j.gpu_type AS pool, g, nn, CAST(ceil(g / nn) AS INTEGER) AS k, j.gpu_milli < 1000 AS frac,
           CASE WHEN j.gpu_milli < 1000 THEN 'fractional' WHEN nn > 1 THEN 'multi-node'
                ELSE CAST(CAST(pow(2, ceil(log2(greatest(g, 1)))) AS INTEGER) AS VARCHAR) END AS size_class,
           greatest(coalesce(j.eligible, j.submit), c.data_start, $ws) AS p0,
           least(coalesce(j.start, j."end", CASE WHEN j.state = 'PENDING' THEN c.horizon END), c.horizon, $we) AS p1
    FROM (SELECT *, coalesce(nullif(req_gpus, 0), ngpus) AS g, greatest(coalesce(nnodes, 1), 1) AS nn FROM jobs) j
    JOIN tl_clusters c ON c.cluster = j.cluster
    WHERE j.g > 0 AND coalesce(j.eligible, j.submit) < $we AND coalesce(j.start, c.horizon) > $ws"""


def _chunk_sql(k_max: int) -> str:
    """Per job: pending samples in the chunk by class. Needs temp table _fb_state (per-sample cell state)."""
    return f"""
    WITH pj AS (
      SELECT *, greatest({fragmentation._sample_index('p0')}, $i0) AS a,
             least({fragmentation._sample_index('p1')}, $i1) AS b
      FROM ({PENDING_SQL}) WHERE p1 > p0),
    pj2 AS (SELECT * FROM pj WHERE a < b),
    parts AS (SELECT job_uid, cluster, pool, g, nn, k, frac,
                     trim(unnest(string_split(coalesce(partition, ''), ','))) AS partition FROM pj2),
    pairs AS (SELECT job_uid, unnest(range(a, b)) AS i FROM pj2),
    per_part AS (
      SELECT pr.job_uid, pr.i, pa.partition, pa.g, pa.nn, pa.k, pa.frac,
             sum(s.free_gpus + s.partial_milli / 1000.0) AS tot, sum(list_extract(s.ge, pa.k)) AS nodes_k,
             sum(s.ge[1]) AS nodes_1
      FROM pairs pr JOIN parts pa ON pa.job_uid = pr.job_uid
      JOIN _fb_state s ON s.cluster = pa.cluster AND s.partition = pa.partition AND s.i = pr.i
                      AND (pa.pool IS NULL OR s.gpu_type = pa.pool)
      GROUP BY ALL),
    per_sample AS (
      SELECT job_uid, i,
             CASE WHEN bool_or(CASE WHEN k > {k_max} THEN false WHEN frac THEN nodes_1 >= 1
                                    ELSE coalesce(nodes_k, 0) >= nn END) THEN 'placeable'
                  WHEN bool_or(tot >= g AND k <= {k_max}) THEN 'fragmentation'
                  ELSE 'capacity' END AS cls
      FROM per_part GROUP BY job_uid, i),
    counts AS (SELECT job_uid, count(*) FILTER (WHERE cls = 'placeable') AS placeable,
                      count(*) FILTER (WHERE cls = 'fragmentation') AS fragmentation,
                      count(*) FILTER (WHERE cls = 'capacity') AS capacity
               FROM per_sample GROUP BY job_uid)
    SELECT pj2.job_uid, pj2.cluster, pj2.job_id, pj2.team, pj2.account, pj2."user", pj2.partition,
           coalesce(pj2.pool, '(any)') AS gpu_type, pj2.g AS gpus, pj2.nn AS nnodes, pj2.size_class,
           (pj2.b - pj2.a)::BIGINT AS samples, coalesce(c.placeable, 0)::BIGINT AS placeable,
           coalesce(c.fragmentation, 0)::BIGINT AS fragmentation, coalesce(c.capacity, 0)::BIGINT AS capacity
    FROM pj2 LEFT JOIN counts c ON c.job_uid = pj2.job_uid"""


def per_job(con: duckdb.DuckDBPyConnection, start=None, end=None,
            interval: str | int = fragmentation.DEFAULT_INTERVAL_S) -> pl.DataFrame:
    """One row per job that was pending inside [start, end): its wait split into placeable / fragmentation /
    capacity / unknown, in hours and GPU-hours (sample counts x interval)."""
    timeline.ensure_current(con)
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    iv = fragmentation.parse_interval(interval)
    k_max = fragmentation.max_gpus_per_node(con)
    state_sql = fragmentation.state_sql(["gpu_type", "partition"], k_max)
    parts = []
    try:
        for a, b in fragmentation._chunks(*win):
            p = fragmentation.chunk_params(a, b, iv)
            timeline.execute(con, "CREATE OR REPLACE TEMP TABLE _fb_state AS " + state_sql, p)
            parts.append(timeline.frame(con, _chunk_sql(k_max), p))
    finally:
        con.execute("DROP TABLE IF EXISTS _fb_state")
    df = pl.concat(parts)
    if df.is_empty():
        return df
    sums = ["samples", *CLASSES[:3]]
    df = df.group_by([c for c in df.columns if c not in sums]).agg(pl.col(s).sum() for s in sums)
    h = iv / 3600
    df = df.with_columns((pl.col("samples") - pl.col("placeable") - pl.col("fragmentation") - pl.col("capacity"))
                         .alias("unknown"))
    return df.select(
        "job_uid", "cluster", "job_id", "team", "account", "user", "partition", "gpu_type", "gpus", "nnodes",
        "size_class", (pl.col("samples") * h).alias("wait_h"),
        *[(pl.col(c) * h).alias(f"{c}_h") for c in CLASSES],
        (pl.col("samples") * h * pl.col("gpus")).alias("wait_gpu_h"),
        *[(pl.col(c) * h * pl.col("gpus")).alias(f"{c}_gpu_h") for c in CLASSES],
    ).sort("cluster", "job_uid")


def _size_order(c: pl.Expr) -> pl.Expr:
    return (pl.when(c == "fractional").then(0).when(c == "multi-node").then(10**6)
            .when(c == "(all)").then(10**7).otherwise(c.cast(pl.Int64, strict=False)))


def blocked(con: duckdb.DuckDBPyConnection, start=None, end=None, by: str | Iterable[str] = ("team", "size_class"),
            interval: str | int = fragmentation.DEFAULT_INTERVAL_S) -> pl.DataFrame:
    """Queue wait per group (``by`` any of cluster, team, account, user, size_class, partition, gpu_type) split
    into placeable / fragmentation / capacity / unknown GPU-hours, with the share of the group's wait and of
    all queue wait that fragmentation explains; a last row ``(all)`` holds the totals."""
    dims = timeline.normalise_dims(by, DIMS)
    jobs = per_job(con, start, end, interval)
    if jobs.is_empty():
        return jobs
    total_wait = jobs["wait_gpu_h"].sum()
    aggs = [pl.len().alias("jobs"), pl.col("wait_h").sum(), pl.col("wait_gpu_h").sum(),
            *[pl.col(f"{c}_gpu_h").sum() for c in CLASSES], pl.col("fragmentation_h").sum()]
    groups = jobs.group_by(dims).agg(aggs) if dims else jobs.select(aggs).head(0)
    total = jobs.select(aggs).with_columns(*[pl.lit("(all)").alias(d) for d in dims])
    out = pl.concat([groups, total.select(groups.columns)], how="vertical_relaxed")
    out = out.with_columns(
        pl.when(pl.col("wait_gpu_h") > 0).then(pl.col("fragmentation_gpu_h") / pl.col("wait_gpu_h"))
        .alias("fragmentation_share"),
        (pl.col("fragmentation_gpu_h") / total_wait if total_wait > 0 else pl.lit(None, pl.Float64))
        .alias("fragmentation_share_of_all_wait"))
    order = [pl.col(d) == "(all)" for d in dims[:1]] + [
        _size_order(pl.col(d)) if d == "size_class" else pl.col(d) for d in dims]
    return out.sort(order + [pl.col("wait_gpu_h")], descending=[False] * len(order) + [True]).select(
        *dims, "jobs", "wait_h", "wait_gpu_h", *[f"{c}_gpu_h" for c in CLASSES], "fragmentation_h",
        "fragmentation_share", "fragmentation_share_of_all_wait")
