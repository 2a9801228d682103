"""The free-GPU sample grid: the state of every (cluster x pool [x partition]) cell at regular sample times, swept
from the occupancy segments. The kernel under the fragmentation report (models/metrics/fragmentation.py), its
daily mart (models/marts/fragmentation_daily.py) and the blocked-wait classification (models/kernels/blocked_grid.py).

Sampling: sample times are the multiples of the interval since the Unix epoch (UTC) inside the window and the
cluster's data span; at each one, a node counts if it is available (not DOWN/DRAIN/MAINT..., in the inventory).
Its free GPUs are ``f`` whole GPUs plus ``r`` milli-GPUs left on GPUs that GPU-sharing jobs (gpu_milli) use:
accounting does not say which GPU a sharing job sat on, so they are assumed packed onto as few GPUs as possible
(the least fragmented placement: a lower bound).

How: never a per-node-per-sample table. The per-sample state of each cell (available nodes, free GPUs, nodes
with >= k free GPUs for every k, whole free nodes...) is swept month by month from the occupancy segments: each
segment adds its node's state at its first sample and removes it after its last (numpy bincount + cumsum over
the dense sample grid).
"""
from __future__ import annotations

import contextlib
import contextvars
import datetime as dt

import numpy as np
import polars as pl

from ingest.warehouse import execute
from models.definitions.labels import UNTYPED
from models.definitions.nodes_sql import explode_partitions
from models.definitions.timeline_sql import SEGMENTS_SQL
from models.definitions.times import EVERY, bucket_interval, bucket_sql
from models.kernels.intervals import group_cumsum

MAX_K = 64


def max_gpus_per_node(con, cluster: str | None = None) -> int:
    """GPUs of the largest node in the inventory (of ``cluster``, or all), at least 1, at most MAX_K."""
    k = con.execute("SELECT coalesce(max(gpus), 0) FROM tl_node_state WHERE avail <> 'absent'"
                    + (" AND cluster = ?" if cluster else ""), [cluster] if cluster else []).fetchall()[0][0]
    return max(1, min(int(k), MAX_K))


#: Free state of each available node in a segment: f whole free GPUs, r free milli-GPUs on shared GPUs.
FREE_SQL = f"""
    SELECT cluster, nid, t0, t1, gpus, coalesce(gpu_type, '{UNTYPED}') AS gpu_type, partitions,
           CAST(greatest(gpus - whole_gpus - ceil(frac_milli / 1000.0), 0) AS INTEGER) AS f,
           CAST(CASE WHEN whole_gpus + ceil(frac_milli / 1000.0) <= gpus
                     THEN ceil(frac_milli / 1000.0) * 1000 - frac_milli ELSE 0 END AS INTEGER) AS r
    FROM ({SEGMENTS_SQL})
    WHERE avail = 'up' AND gpus > 0 AND t1 > $ws AND t0 < $we"""


def cells_sql(dims: list[str]) -> str:
    """Cells (cluster + dims) that have inventory nodes, labelled as in FREE_SQL, with their largest node."""
    src = (f"SELECT DISTINCT cluster, coalesce(gpu_type, '{UNTYPED}') AS gpu_type, partitions, gpus FROM tl_node_state "
           "WHERE avail <> 'absent' AND gpus > 0")
    if "partition" in dims:
        src = explode_partitions(src)
    return f"SELECT cluster{''.join(', ' + d for d in dims)}, max(gpus) AS max_gpus FROM ({src}) GROUP BY ALL"


def cells_fingerprint(con, c: str) -> int:
    """A hash of cluster ``c``'s (pool x partition) cells and their largest node: the sample grid of every day
    depends on them (a cell with inventory at any time is known, and big enough, on all days), so the daily
    rollups that read it are rebuilt whole when they change."""
    return con.execute(f"""SELECT (coalesce(sum(hash(coalesce(gpu_type, '') || '|' || coalesce(partition, '')
                                                   || '|' || max_gpus)), 0) % 18446744073709551557)::UBIGINT
                           FROM ({cells_sql(['gpu_type', 'partition'])}) WHERE cluster = ?""", [c]).fetchall()[0][0]


def sample_index(col: str) -> str:
    """Index of the first sample time at or after ``col`` (samples at multiples of $iv_us since the epoch)."""
    return f"((epoch_us({col}) + $iv_us - 1) // $iv_us)"


def _segments_sql(dims: list[str]) -> str:
    """The available segments of the chunk per cell (``cid`` of temp table _cells) as sample-index ranges [a, b)
    clipped to the cell's grid, with the node's free state: a segment holds its node's state from its first
    sample (a) to its last (b - 1)."""
    keys = ", ".join(["cluster", *dims])
    src = FREE_SQL if "partition" not in dims else explode_partitions(FREE_SQL)
    return f"""
    SELECT c.cid, greatest({sample_index('s.t0')}, c.lo) AS a, least({sample_index('s.t1')}, c.hi) AS b,
           s.gpus, s.f, s.r
    FROM ({src}) s JOIN _cells c USING ({keys})
    WHERE c.hi > c.lo AND {sample_index('s.t0')} < least({sample_index('s.t1')}, c.hi)
      AND {sample_index('s.t1')} > c.lo"""


STATE_COUNTERS = ("nodes_up", "free_gpus", "partial_milli", "whole_free_nodes", "whole_free_gpus")


#: While the timeline build's rollups run (:func:`shared_grids`): one cluster's (pool x partition) grids, each
#: computed by the blocked-wait rollup and handed to the fragmentation rollup, which sweeps the same months.
_GRIDS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("fragmentation_grids", default=None)


SHARED_DIMS = ("gpu_type", "partition")


_SHARED_BYTES = 1 << 30   # beyond this, grids are recomputed rather than held


@contextlib.contextmanager
def shared_grids():
    """Within the block, each (pool x partition) sample grid of a cluster is computed once and given to its
    second reader, then dropped (the full year's grids cost ~5 s to sweep again on a 2,000-node site)."""
    token = _GRIDS.set({})
    try:
        yield
    finally:
        _GRIDS.reset(token)


def sample_grid(con, dims: list[str], k_max: int, p: dict,
                cluster: str | None = None) -> tuple[pl.DataFrame, dict[str, np.ndarray]]:
    """:func:`_sample_grid`, shared between the rollups inside :func:`shared_grids`."""
    memo = _GRIDS.get()
    if memo is None or cluster is None or tuple(dims) != SHARED_DIMS:
        return _sample_grid(con, dims, k_max, p, cluster)
    key = (cluster, k_max, p["i0"], p["i1"], p["iv_us"])
    if key in memo:
        return memo.pop(key)
    out = _sample_grid(con, dims, k_max, p, cluster)
    held = sum(a.nbytes for grid in memo.values() for a in grid[1].values())
    if held + sum(a.nbytes for a in out[1].values()) <= _SHARED_BYTES:
        memo[key] = out
    return out


def _sample_grid(con, dims: list[str], k_max: int, p: dict,
                 cluster: str | None = None) -> tuple[pl.DataFrame, dict[str, np.ndarray]]:
    """The per-sample state of every cell (of ``cluster``, or all) for sample indices [$i0, $i1), inside each
    cluster's data span.

    Returns ``cells`` (cid, cluster, dims, lo, hi, offset: cell c covers samples lo..hi-1, stored at
    offset..offset+hi-lo-1) and the counters concatenated over cells: nodes_up, free_gpus (whole),
    partial_milli, whole_free_nodes, whole_free_gpus, ge1..geK (available nodes with >= k free whole GPUs).
    SQL finds the segments; numpy turns them into +state at their first sample and -state after their last
    (bincount) and running sums over the dense grid (cumsum): a GROUP BY with a dozen sums, or a window-function
    cumulative sum, costs microseconds a row in DuckDB, these nanoseconds."""
    keys = ["cluster", *dims]
    execute(con, f"""
        CREATE OR REPLACE TEMP TABLE _cells AS
        SELECT (row_number() OVER (ORDER BY {', '.join('c.' + k for k in keys)}) - 1)::INTEGER AS cid, c.*,
               greatest($i0, {sample_index('sp.data_start')}) AS lo, least($i1, {sample_index('sp.horizon')}) AS hi
        FROM ({cells_sql(dims)}) c JOIN tl_clusters sp ON sp.cluster = c.cluster
        {"WHERE c.cluster = $c" if cluster else ""}""", {**p, "c": cluster})
    names = [*STATE_COUNTERS, *(f"ge{k}" for k in range(1, k_max + 1))]
    try:
        cells = con.sql("SELECT * FROM _cells WHERE hi > lo ORDER BY cid").pl()
        if cells.is_empty():
            return cells.with_columns(pl.lit(0).alias("offset")), {n: np.zeros(0, np.int64) for n in names}
        sg = con.execute(_segments_sql(dims), {k: p[k] for k in ("iv_us", "ws", "we")}).fetchnumpy()
    finally:
        con.execute("DROP TABLE IF EXISTS _cells")
    lo, hi = cells["lo"].to_numpy(), cells["hi"].to_numpy()
    length = hi - lo
    offset = np.r_[0, np.cumsum(length)[:-1]]
    total = int(length.sum())
    cids = cells["cid"].to_numpy()
    row = np.searchsorted(cids, sg["cid"])
    start_pos = offset[row] + (sg["a"] - lo[row])
    # a segment reaching the end of its cell's grid has no "remove" event: send it to a spare slot
    end_pos = np.where(sg["b"] < hi[row], offset[row] + (sg["b"] - lo[row]), total)
    starts = np.zeros(total, dtype=bool)
    starts[offset] = True
    f, r, g = sg["f"].astype(np.int64), sg["r"].astype(np.int64), sg["gpus"].astype(np.int64)
    whole = (f == g).astype(np.int64)
    weights = {"nodes_up": np.ones_like(f), "free_gpus": f, "partial_milli": r, "whole_free_nodes": whole,
               "whole_free_gpus": whole * g, **{f"ge{k}": (f >= k).astype(np.int64) for k in range(1, k_max + 1)}}
    cols = {}
    for n in names:
        w = weights[n]
        dense = (np.bincount(start_pos, weights=w, minlength=total + 1)
                 - np.bincount(end_pos, weights=w, minlength=total + 1))[:total]
        cols[n] = np.rint(group_cumsum(dense, starts)).astype(np.int64)
    return cells.with_columns(pl.Series("offset", offset)), cols


def sample_state(con, dims: list[str], k_max: int, p: dict, cluster: str | None = None) -> pl.DataFrame:
    """:func:`sample_grid` as a table: cluster, dims, i (sample index), ts, the counters, largest_single_node."""
    keys = ["cluster", *dims]
    cells, cols = sample_grid(con, dims, k_max, p, cluster)
    names = list(cols)
    if cells.is_empty():
        return pl.DataFrame(schema={**{k: pl.String for k in keys}, "i": pl.Int64, "ts": pl.Datetime("us"),
                                    **{n: pl.Int64 for n in names}, "largest_single_node": pl.Int64})
    ge = np.stack([cols[f"ge{k}"] for k in range(1, k_max + 1)], axis=1)
    has = ge > 0
    largest = np.where(has.any(axis=1), k_max - np.argmax(has[:, ::-1], axis=1), 0)
    lo, hi = cells["lo"].to_numpy(), cells["hi"].to_numpy()
    out = pl.DataFrame({"cid": np.repeat(cells["cid"].to_numpy(), hi - lo),
                        "i": np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)]), **cols,
                        "largest_single_node": largest})
    out = out.with_columns((pl.col("i") * p["iv_us"]).cast(pl.Datetime("us")).alias("ts"))
    return cells.select("cid", *keys).join(out, on="cid").select(*keys, "i", "ts", *names, "largest_single_node")


def chunk_params(a: dt.datetime, b: dt.datetime, interval_s: int) -> dict:
    iv_us = interval_s * 1_000_000
    ep = dt.datetime(1970, 1, 1)
    us = lambda t: (t - ep) // dt.timedelta(microseconds=1)   # noqa: E731
    return {"iv_us": iv_us, "i0": -(-us(a) // iv_us), "i1": -(-us(b) // iv_us), "ws": a, "we": b}


def state_buckets(st: pl.DataFrame, keys: list[str], bucket: str, k_max: int) -> pl.DataFrame:
    """Per bucket and cell, sums (and minima) over the samples: the histogram h_k = ge_k - ge_(k+1) (h_0 =
    nodes_up - ge_1), free and partial GPUs, whole free nodes and GPUs, the largest single-node request."""
    every = EVERY[bucket]
    ge = lambda k: pl.col(f"ge{k}") if k <= k_max else pl.lit(0)   # noqa: E731
    hist = [((pl.col("nodes_up") if k == 0 else ge(k)) - ge(k + 1)).sum().alias(f"h{k}") for k in range(k_max + 1)]
    return st.group_by(pl.col("ts").dt.truncate(every).alias("bucket"), *keys).agg(
        pl.len().alias("samples"), pl.col("nodes_up").sum(), pl.col("free_gpus").sum(),
        pl.col("partial_milli").sum(), *hist,
        pl.col("largest_single_node").sum().alias("lsn_sum"), pl.col("largest_single_node").min().alias("lsn_min"),
        pl.col("whole_free_nodes").sum().alias("wfn_sum"), pl.col("whole_free_nodes").min().alias("wfn_min"),
        pl.col("whole_free_gpus").sum().alias("wfg_sum"), pl.col("whole_free_gpus").min().alias("wfg_min"))


def partial_histogram_sql(dims: list[str], bucket: str, cluster: bool = False) -> str:
    """Node-samples per bucket, cell and free milli-GPU ``r`` on shared GPUs (only nodes where GPU-sharing jobs
    leave a partial GPU): each segment weighted by the sample times it covers inside the bucket. FGD needs the
    distribution of r for sharing tasks (a fragment when r < their milli-GPU). ``cluster``: only cluster $c."""
    keys = ", ".join(["cluster", *dims])
    src = FREE_SQL if "partition" not in dims else explode_partitions(FREE_SQL)
    iv = bucket_interval(bucket)
    a, b = "greatest(t0, bk, $ws)", f"least(t1, bk + {iv}, $we)"
    return f"""
    SELECT bk AS bucket, {keys}, r, sum({sample_index(b)} - {sample_index(a)})::BIGINT AS n
    FROM (SELECT *, unnest(generate_series({bucket_sql(bucket, 'greatest(t0, $ws)')},
                                           least(t1, $we) - INTERVAL 1 MICROSECOND, {iv})) AS bk
          FROM ({src}) WHERE r > 0 {"AND cluster = $c" if cluster else ""})
    GROUP BY ALL HAVING sum({sample_index(b)} - {sample_index(a)}) > 0"""


def workload_jobs_sql(lo: str = "$ws", hi: str = "$we", cluster: bool = False) -> str:
    """GPU jobs submitted in [lo, hi) (of cluster $c with ``cluster``): cluster, submit, the first partition named,
    the pool when the job names it (typed request) or ran on one (its first allocation), else NULL, and the spec
    (k = GPUs per node, q = milli-GPU per GPU; 1000 = whole GPUs). The pool of the rest depends on the whole
    inventory (:func:`workload_cells_sql`), so it is left to the reader."""
    return f"""
    WITH j0 AS (
      SELECT job_uid, cluster, submit, gpu_type, gpu_milli,
             CASE WHEN contains(partition, ',') THEN trim(split_part(partition, ',', 1)) ELSE partition END AS partition,
             coalesce(nullif(ngpus, 0), req_gpus) AS g, greatest(coalesce(nnodes, 1), 1) AS nn
      FROM jobs WHERE submit >= {lo} AND submit < {hi} {"AND cluster = $c" if cluster else ""}),
    j1 AS (SELECT * FROM j0 WHERE g > 0),
    ran AS (SELECT job_uid, arg_min(coalesce(gpu_type, '{UNTYPED}'), t0) AS pool FROM tl_job_alloc
            WHERE job_uid IN (SELECT job_uid FROM j1 WHERE gpu_type IS NULL) GROUP BY job_uid)
    SELECT j1.cluster, j1.submit, j1.partition, coalesce(j1.gpu_type, ran.pool) AS pool,
           CASE WHEN gpu_milli < 1000 THEN 1 ELSE CAST(ceil(g / nn) AS INTEGER) END AS k,
           CASE WHEN gpu_milli < 1000 THEN gpu_milli ELSE 1000 END AS q
    FROM j1 LEFT JOIN ran ON ran.job_uid = j1.job_uid"""


def workload_cells_sql(src: str, dims: list[str], bucket: str) -> str:
    """``src`` (cluster, t, partition, pool, k, q, jobs) per bucket of t and cell: a job without a pool takes
    the only pool of its partition (in the whole inventory), if there is one."""
    keys = ", ".join(["cluster", *dims])
    return f"""
    WITH ppool AS (SELECT cluster, partition, any_value(gpu_type) AS pool
                   FROM ({cells_sql(['gpu_type', 'partition'])}) GROUP BY ALL HAVING count(*) = 1),
    j AS (SELECT w.cluster, {bucket_sql(bucket, 'w.t')} AS bucket, w.partition,
                 coalesce(w.pool, pp.pool) AS gpu_type, w.k, w.q, w.jobs
          FROM ({src}) w LEFT JOIN ppool pp ON pp.cluster = w.cluster AND pp.partition = w.partition)
    SELECT bucket, {keys}, k, q, sum(jobs)::BIGINT AS jobs
    FROM j WHERE true {''.join(f' AND {d} IS NOT NULL' for d in dims)}
    GROUP BY ALL"""


def workload_sql(dims: list[str], bucket: str) -> str:
    """The request-size distribution per bucket and cell: jobs submitted in [$ws, $we) asking for GPUs, by spec
    (k = GPUs per node, q = milli-GPU per GPU; 1000 = whole GPUs). A job's pool is its typed GPU type
    (AllocTRES names the type of the GPUs a job got), else the pool it ran on, else the only pool of its
    partition; its partition the first one it named."""
    src = f"SELECT cluster, submit AS t, partition, pool, k, q, 1 AS jobs FROM ({workload_jobs_sql()})"
    return workload_cells_sql(src, dims, bucket)


#: Cell granularities stored in tl_frag_state_daily (sorted dims -> its ``dims`` label).
MART_DIMS = {("gpu_type",): "gpu_type", ("gpu_type", "partition"): "gpu_type,partition"}
