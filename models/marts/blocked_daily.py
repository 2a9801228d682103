"""The daily blocked-wait mart (tl_blocked_daily): each pending job's wait per UTC day split into placeable,
fragmentation and capacity samples at the default interval (models/kernels/blocked_grid.py). A step of the
timeline build; models/metrics/blocked.py sums it for whole-day windows."""
from __future__ import annotations

import datetime as dt

import duckdb
import numpy as np
import polars as pl

from ingest import warehouse
from models.definitions.times import DEFAULT_INTERVAL_S
from models.kernels.blocked_grid import classify_waits, pending_jobs
from models.kernels.free_grid import chunk_params

def rollup(con: duckdb.DuckDBPyConnection, c: str, D: dt.datetime) -> None:
    """Rebuild ``tl_blocked_daily`` of cluster ``c`` from UTC midnight ``D`` on, at the default interval: each
    pending interval split at UTC midnights (a day is a whole number of samples) and classified like
    :func:`models.metrics.blocked.per_job`. A step of the timeline build: tl_node_segments and tl_clusters must be current."""
    con.execute("DELETE FROM tl_blocked_daily WHERE cluster = ? AND day >= ?", [c, D])
    warehouse.note_changed(con, "tl_blocked_daily", D)
    rows = con.execute("SELECT horizon FROM tl_clusters WHERE cluster = ?", [c]).fetchall()
    hz = rows[0][0] if rows else None
    if hz is None or hz <= D:
        return
    iv = DEFAULT_INTERVAL_S
    per_day = 86400 // iv
    win = (D, hz)
    jobs, shapes = pending_jobs(con, chunk_params(*win, iv), c)
    if jobs.is_empty():
        return
    a, b = jobs["a"].to_numpy(), jobs["b"].to_numpy()
    first, n = a // per_day, (b - 1) // per_day - a // per_day + 1
    job = np.repeat(np.arange(len(a)), n)
    day = first[job] + np.arange(len(job)) - np.repeat(np.cumsum(n) - n, n)
    A, B = np.maximum(a[job], day * per_day), np.minimum(b[job], (day + 1) * per_day)
    counts = classify_waits(con, win, iv, A, B, jobs["_shape"].to_numpy()[job], shapes, c)
    rows = jobs.select("cluster", "job_uid", "job_id", "team", "account", "user", "partition",
                       pl.col("pool").alias("gpu_type"), pl.col("g").alias("gpus"), pl.col("nn").alias("nnodes"),
                       "size_class")[job]
    rows = rows.with_columns(pl.Series("day", day * 86400 * 1_000_000).cast(pl.Datetime("us")),
                             pl.Series("samples", B - A), *[pl.Series(k, v) for k, v in counts.items()])
    con.register("_blocked_rows", rows)
    try:
        con.execute("INSERT INTO tl_blocked_daily BY NAME SELECT * FROM _blocked_rows ORDER BY day, job_uid")
    finally:
        con.unregister("_blocked_rows")
