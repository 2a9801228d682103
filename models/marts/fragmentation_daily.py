"""The daily fragmentation mart (tl_frag_state_daily, tl_frag_partial_daily, tl_frag_workload_daily): the sums,
minima, partial-GPU counts and submitted-job specs of the free-GPU sample grid per UTC day and cell, at the
default interval. A step of the timeline build; models/metrics/fragmentation.py sums it for whole-day windows
(the same numbers as the grid, property-tested)."""
from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from ingest.warehouse import execute
from models.definitions.times import DEFAULT_INTERVAL_S, floor_day, month_chunks
from models.kernels.free_grid import (MART_DIMS, chunk_params, max_gpus_per_node, partial_histogram_sql,
                                      sample_state, state_buckets, workload_jobs_sql)

def rollup(con: duckdb.DuckDBPyConnection, c: str, D: dt.datetime, workload_from: dt.datetime | None = None) -> None:
    """Rebuild cluster ``c``'s rows of the daily mart from UTC midnight ``D`` on, at the default interval, with
    the code :func:`report` runs on the sample grid; the workload from ``workload_from`` if earlier. A step of
    the timeline build: tl_node_segments, tl_job_alloc and tl_clusters must be current."""
    span = con.execute("SELECT data_start, horizon FROM tl_clusters WHERE cluster = ?", [c]).fetchall()
    if not span:
        return
    ds, hz = span[0]
    _rollup_state(con, c, D, hz)
    W = D if workload_from is None else min(D, workload_from)
    if W <= floor_day(ds):
        # the workload counts jobs by submit time: the first day of the span may be preceded by submits
        first = con.execute("SELECT min(submit) FROM jobs WHERE cluster = ?", [c]).fetchall()[0][0]
        W = min(W, floor_day(first)) if first is not None else W
    con.execute("DELETE FROM tl_frag_workload_daily WHERE cluster = ? AND day >= ?", [c, W])
    execute(con, f"""
        INSERT INTO tl_frag_workload_daily
        SELECT cluster, date_trunc('day', submit) AS day, partition, pool, k, q, count(*) AS jobs
        FROM ({workload_jobs_sql(cluster=True)}) GROUP BY ALL ORDER BY day""",
                     {"c": c, "ws": W, "we": hz + dt.timedelta(days=1)})


def _rollup_state(con, c: str, D: dt.datetime, hz: dt.datetime) -> None:
    """tl_frag_state_daily and tl_frag_partial_daily of cluster ``c`` from day ``D`` to the horizon ``hz``."""
    for t in ("tl_frag_state_daily", "tl_frag_partial_daily"):
        con.execute(f"DELETE FROM {t} WHERE cluster = ? AND day >= ?", [c, D])
    if hz <= D:
        return
    k = max_gpus_per_node(con, c)
    for dims, label in MART_DIMS.items():
        for a, b in month_chunks(D, hz):
            day = state_buckets(sample_state(con, list(dims), k, chunk_params(a, b, DEFAULT_INTERVAL_S), c),
                                 ["cluster", *dims], "day", k)
            if day.is_empty():
                continue
            rows = day.select(
                pl.col("bucket").alias("day"), "cluster", pl.lit(label).alias("dims"), "gpu_type",
                (pl.col("partition") if "partition" in dims else pl.lit(None, pl.String)).alias("partition"),
                "samples", "nodes_up", "free_gpus", "partial_milli",
                pl.concat_list([f"h{j}" for j in range(k + 1)]).alias("hist"),
                "lsn_sum", "lsn_min", "wfn_sum", "wfn_min", "wfg_sum", "wfg_min")
            con.register("_frag_rows", rows)
            try:
                con.execute("INSERT INTO tl_frag_state_daily BY NAME SELECT * FROM _frag_rows ORDER BY day")
            finally:
                con.unregister("_frag_rows")
    # one row per pool and partition list: the partition cells explode it when read
    execute(con, f"""
        INSERT INTO tl_frag_partial_daily
        SELECT cluster, bucket, gpu_type, partitions, r, n
        FROM ({partial_histogram_sql(['gpu_type', 'partitions'], 'day', cluster=True)}) ORDER BY bucket""",
                     {"c": c, "ws": D, "we": hz, "iv_us": DEFAULT_INTERVAL_S * 1_000_000})
