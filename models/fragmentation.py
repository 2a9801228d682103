"""GPU fragmentation: the free-GPU state of every available node at regular samples (default every 5 minutes),
aggregated per bucket and cell (cluster x pool x partition): free GPUs, the free-GPU histogram, whole free nodes,
the largest request one node can take, the largest gang of whole nodes, stranded GPUs per request size, and the
FGD fragmentation rate (Weng et al., ATC'23) against the request sizes observed in the same bucket.

Reads only the occupancy timeline (:mod:`models.timeline`). Definitions: docs/METRICS.md ("Fragmentation").

Sampling: sample times are the multiples of the interval since the Unix epoch (UTC) inside the window and the
cluster's data span; at each one, a node counts if it is available (not DOWN/DRAIN/MAINT..., in the inventory).
Its free GPUs are ``f`` whole GPUs plus ``r`` milli-GPUs left on GPUs that GPU-sharing jobs (gpu_milli) use:
accounting does not say which GPU a sharing job sat on, so they are assumed packed onto as few GPUs as possible
(the least fragmented placement: a lower bound).

How: never a per-node-per-sample table. The per-sample state of each cell (available nodes, free GPUs, nodes
with >= k free GPUs for every k, whole free nodes...) is swept month by month from the occupancy segments: each
segment adds its node's state at its first sample and removes it after its last (numpy bincount + cumsum over
the dense sample grid). Means, the free-GPU histogram, stranded GPUs and FGD all follow from sums of that state
over a bucket's samples; only FGD for GPU-sharing tasks also needs the distribution of partial GPUs, taken from
the segments that have one. With sample times on every segment edge, mean free GPUs x hours equals
utilization's idle GPU-hours (a property test checks it).

Those sums, minima, partial-GPU counts and submitted jobs add over days, so the timeline build keeps them per
UTC day (:func:`rollup`, tables tl_frag_*_daily): :func:`report` over whole days at the default interval reads a
few rows per day and cell instead of sweeping the year's samples (0.6 s -> 0.07 s for 30 days of a busy year).
"""
from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
from typing import Iterable

import duckdb
import numpy as np
import polars as pl

from models import timeline
from models.intervals import ceil_day, floor_day, group_cumsum

DEFAULT_INTERVAL_S = 300
CELL_DIMS = ("gpu_type", "partition")
SIZE_CLASSES = (1, 2, 4, 8, 16, 32, 64)
MAX_K = 64


def parse_interval(value: str | int | float | None) -> int:
    """'5m', '300', '300s', '1h', 300 -> seconds (>= 1)."""
    if value is None or value == "":
        return DEFAULT_INTERVAL_S
    if isinstance(value, (int, float)):
        secs = float(value)
    else:
        v = str(value).strip().lower()
        mult = {"s": 1, "m": 60, "h": 3600}.get(v[-1:], None)
        try:
            secs = float(v[:-1]) * mult if mult else float(v)
        except ValueError as exc:
            raise ValueError(f"cannot read interval {value!r}: use seconds or e.g. 5m, 1h") from exc
    if secs < 1 or secs != int(secs):
        raise ValueError(f"interval must be a whole number of seconds >= 1, not {value!r}")
    return int(secs)


def max_gpus_per_node(con, cluster: str | None = None) -> int:
    """GPUs of the largest node in the inventory (of ``cluster``, or all), at least 1, at most MAX_K."""
    k = con.execute("SELECT coalesce(max(gpus), 0) FROM tl_node_state WHERE avail <> 'absent'"
                    + (" AND cluster = ?" if cluster else ""), [cluster] if cluster else []).fetchall()[0][0]
    return max(1, min(int(k), MAX_K))


# ---------------------------------------------------------------- node free state

#: Free state of each available node in a segment: f whole free GPUs, r free milli-GPUs on shared GPUs.
FREE_SQL = f"""
    SELECT cluster, nid, t0, t1, gpus, coalesce(gpu_type, '(untyped)') AS gpu_type, partitions,
           CAST(greatest(gpus - whole_gpus - ceil(frac_milli / 1000.0), 0) AS INTEGER) AS f,
           CAST(CASE WHEN whole_gpus + ceil(frac_milli / 1000.0) <= gpus
                     THEN ceil(frac_milli / 1000.0) * 1000 - frac_milli ELSE 0 END AS INTEGER) AS r
    FROM ({timeline.SEGMENTS_SQL})
    WHERE avail = 'up' AND gpus > 0 AND t1 > $ws AND t0 < $we"""


def _cells_sql(dims: list[str]) -> str:
    """Cells (cluster + dims) that have inventory nodes, labelled as in FREE_SQL, with their largest node."""
    src = ("SELECT DISTINCT cluster, coalesce(gpu_type, '(untyped)') AS gpu_type, partitions, gpus FROM tl_node_state "
           "WHERE avail <> 'absent' AND gpus > 0")
    if "partition" in dims:
        src = timeline.explode_partitions(src)
    return f"SELECT cluster{''.join(', ' + d for d in dims)}, max(gpus) AS max_gpus FROM ({src}) GROUP BY ALL"


def cells_fingerprint(con, c: str) -> int:
    """A hash of cluster ``c``'s (pool x partition) cells and their largest node: the sample grid of every day
    depends on them (a cell with inventory at any time is known, and big enough, on all days), so the daily
    rollups that read it are rebuilt whole when they change."""
    return con.execute(f"""SELECT (coalesce(sum(hash(coalesce(gpu_type, '') || '|' || coalesce(partition, '')
                                                   || '|' || max_gpus)), 0) % 18446744073709551557)::UBIGINT
                           FROM ({_cells_sql(['gpu_type', 'partition'])}) WHERE cluster = ?""", [c]).fetchall()[0][0]


def _sample_index(col: str) -> str:
    """Index of the first sample time at or after ``col`` (samples at multiples of $iv_us since the epoch)."""
    return f"((epoch_us({col}) + $iv_us - 1) // $iv_us)"


def _segments_sql(dims: list[str]) -> str:
    """The available segments of the chunk per cell (``cid`` of temp table _cells) as sample-index ranges [a, b)
    clipped to the cell's grid, with the node's free state: a segment holds its node's state from its first
    sample (a) to its last (b - 1)."""
    keys = ", ".join(["cluster", *dims])
    src = FREE_SQL if "partition" not in dims else timeline.explode_partitions(FREE_SQL)
    return f"""
    SELECT c.cid, greatest({_sample_index('s.t0')}, c.lo) AS a, least({_sample_index('s.t1')}, c.hi) AS b,
           s.gpus, s.f, s.r
    FROM ({src}) s JOIN _cells c USING ({keys})
    WHERE c.hi > c.lo AND {_sample_index('s.t0')} < least({_sample_index('s.t1')}, c.hi)
      AND {_sample_index('s.t1')} > c.lo"""


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
    timeline.execute(con, f"""
        CREATE OR REPLACE TEMP TABLE _cells AS
        SELECT (row_number() OVER (ORDER BY {', '.join('c.' + k for k in keys)}) - 1)::INTEGER AS cid, c.*,
               greatest($i0, {_sample_index('sp.data_start')}) AS lo, least($i1, {_sample_index('sp.horizon')}) AS hi
        FROM ({_cells_sql(dims)}) c JOIN tl_clusters sp ON sp.cluster = c.cluster
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


def _chunks(start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """Calendar months (UTC) covering [start, end): per-sample work is done a month at a time (bounded memory)."""
    out, a = [], start
    while a < end:
        nxt = (a.replace(day=1, hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=32)).replace(day=1)
        b = min(nxt, end)
        out.append((a, b))
        a = b
    return out


def chunk_params(a: dt.datetime, b: dt.datetime, interval_s: int) -> dict:
    iv_us = interval_s * 1_000_000
    ep = dt.datetime(1970, 1, 1)
    us = lambda t: (t - ep) // dt.timedelta(microseconds=1)   # noqa: E731
    return {"iv_us": iv_us, "i0": -(-us(a) // iv_us), "i1": -(-us(b) // iv_us), "ws": a, "we": b}


def samples(con: duckdb.DuckDBPyConnection, start=None, end=None, interval: str | int = DEFAULT_INTERVAL_S,
            by: str | Iterable[str] = CELL_DIMS) -> pl.DataFrame:
    """Per sample time and cell: nodes_up, free_gpus, partial_milli, whole_free_nodes, whole_free_gpus,
    largest_single_node, and ``ge`` (list: ge[k-1] = available nodes with >= k free whole GPUs). For charts of
    a short window; the report aggregates the same state month by month."""
    timeline.ensure_current(con)
    dims = timeline.normalise_dims(by, CELL_DIMS)
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    iv = parse_interval(interval)
    k_max = max_gpus_per_node(con)
    parts = [sample_state(con, dims, k_max, chunk_params(a, b, iv)) for a, b in _chunks(*win)]
    out = pl.concat(parts) if parts else pl.DataFrame()
    if out.is_empty():
        return out
    return out.with_columns(pl.concat_list([f"ge{k}" for k in range(1, k_max + 1)]).alias("ge")).drop(
        [f"ge{k}" for k in range(1, k_max + 1)] + ["i"]).sort(["cluster", *dims, "ts"])


# ---------------------------------------------------------------- per-bucket aggregates

def _state_buckets(st: pl.DataFrame, keys: list[str], bucket: str, k_max: int) -> pl.DataFrame:
    """Per bucket and cell, sums (and minima) over the samples: the histogram h_k = ge_k - ge_(k+1) (h_0 =
    nodes_up - ge_1), free and partial GPUs, whole free nodes and GPUs, the largest single-node request."""
    every = {"hour": "1h", "day": "1d", "week": "1w", "month": "1mo"}[bucket]
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
    src = FREE_SQL if "partition" not in dims else timeline.explode_partitions(FREE_SQL)
    iv = timeline.bucket_interval(bucket)
    a, b = "greatest(t0, bk, $ws)", f"least(t1, bk + {iv}, $we)"
    return f"""
    SELECT bk AS bucket, {keys}, r, sum({_sample_index(b)} - {_sample_index(a)})::BIGINT AS n
    FROM (SELECT *, unnest(generate_series({timeline.bucket_sql(bucket, 'greatest(t0, $ws)')},
                                           least(t1, $we) - INTERVAL 1 MICROSECOND, {iv})) AS bk
          FROM ({src}) WHERE r > 0 {"AND cluster = $c" if cluster else ""})
    GROUP BY ALL HAVING sum({_sample_index(b)} - {_sample_index(a)}) > 0"""


def _workload_jobs_sql(lo: str = "$ws", hi: str = "$we", cluster: bool = False) -> str:
    """GPU jobs submitted in [lo, hi) (of cluster $c with ``cluster``): cluster, submit, the first partition named,
    the pool when the job names it (typed request) or ran on one (its first allocation), else NULL, and the spec
    (k = GPUs per node, q = milli-GPU per GPU; 1000 = whole GPUs). The pool of the rest depends on the whole
    inventory (:func:`_workload_cells_sql`), so it is left to the reader."""
    return f"""
    WITH j0 AS (
      SELECT job_uid, cluster, submit, gpu_type, gpu_milli,
             CASE WHEN contains(partition, ',') THEN trim(split_part(partition, ',', 1)) ELSE partition END AS partition,
             coalesce(nullif(ngpus, 0), req_gpus) AS g, greatest(coalesce(nnodes, 1), 1) AS nn
      FROM jobs WHERE submit >= {lo} AND submit < {hi} {"AND cluster = $c" if cluster else ""}),
    j1 AS (SELECT * FROM j0 WHERE g > 0),
    ran AS (SELECT job_uid, arg_min(coalesce(gpu_type, '(untyped)'), t0) AS pool FROM tl_job_alloc
            WHERE job_uid IN (SELECT job_uid FROM j1 WHERE gpu_type IS NULL) GROUP BY job_uid)
    SELECT j1.cluster, j1.submit, j1.partition, coalesce(j1.gpu_type, ran.pool) AS pool,
           CASE WHEN gpu_milli < 1000 THEN 1 ELSE CAST(ceil(g / nn) AS INTEGER) END AS k,
           CASE WHEN gpu_milli < 1000 THEN gpu_milli ELSE 1000 END AS q
    FROM j1 LEFT JOIN ran ON ran.job_uid = j1.job_uid"""


def _workload_cells_sql(src: str, dims: list[str], bucket: str) -> str:
    """``src`` (cluster, t, partition, pool, k, q, jobs) per bucket of t and cell: a job without a pool takes
    the only pool of its partition (in the whole inventory), if there is one."""
    keys = ", ".join(["cluster", *dims])
    return f"""
    WITH ppool AS (SELECT cluster, partition, any_value(gpu_type) AS pool
                   FROM ({_cells_sql(['gpu_type', 'partition'])}) GROUP BY ALL HAVING count(*) = 1),
    j AS (SELECT w.cluster, {timeline.bucket_sql(bucket, 'w.t')} AS bucket, w.partition,
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
    src = f"SELECT cluster, submit AS t, partition, pool, k, q, 1 AS jobs FROM ({_workload_jobs_sql()})"
    return _workload_cells_sql(src, dims, bucket)


def _popular(m: pl.DataFrame, keys: list[str], popularity: float) -> pl.DataFrame:
    """FGD's 'typical tasks': per group, specs by descending frequency until they cover ``popularity`` of the
    jobs (the spec crossing the threshold included); probabilities renormalised."""
    m = m.sort([*keys, "jobs", "k", "q"], descending=[False] * len(keys) + [True, False, False])
    m = m.with_columns(pl.col("jobs").cum_sum().over(keys).alias("_cum"),
                       pl.col("jobs").sum().over(keys).alias("_tot"))
    m = m.filter((pl.col("_cum") - pl.col("jobs")) < popularity * pl.col("_tot") - 1e-9)
    return m.with_columns((pl.col("jobs") / pl.col("jobs").sum().over(keys)).alias("p")).drop("_cum", "_tot")


def fgd_fragment(f: pl.Expr, r: pl.Expr, k: pl.Expr, q: pl.Expr) -> pl.Expr:
    """FGD's F_n(m) in milli-GPU for one node with f whole free GPUs and r free milli on a shared GPU, and a task
    of k GPUs of q milli each (GetNodePodFrag): whole-GPU task: r + 1000 f [f < k]; sharing task: r [r < q].
    :func:`report` sums exactly this over nodes and samples, from histogram sums (see :func:`_fgd`)."""
    return pl.when(q >= 1000).then(r + 1000 * f * (f < k).cast(pl.Int64)).otherwise(r * (r < q).cast(pl.Int64))


def report(con: duckdb.DuckDBPyConnection, start=None, end=None, bucket: str = "day",
           by: str | Iterable[str] = CELL_DIMS, interval: str | int = DEFAULT_INTERVAL_S,
           popularity: float = 1.0) -> pl.DataFrame:
    """Fragmentation per bucket and cell (cluster + ``by`` of gpu_type/pool, partition). GPUs are means over
    the bucket's sample times unless the column says ``_min``. See docs/METRICS.md for every column."""
    timeline.ensure_current(con)
    dims = timeline.normalise_dims(by, CELL_DIMS)
    bucket = timeline.check_bucket(bucket)
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    iv = parse_interval(interval)
    if not 0 < popularity <= 1:
        raise ValueError("popularity must be in (0, 1]")
    k_max = max_gpus_per_node(con)
    keys = ["bucket", "cluster", *dims]
    if iv == DEFAULT_INTERVAL_S and bucket != "hour" and tuple(sorted(dims)) in MART_DIMS:
        parts = _from_mart(con, win, dims, bucket, k_max)
        if parts is not None:
            return parts[0] if parts[0].is_empty() else _assemble(*parts, keys, k_max, popularity)
    sharing = con.execute("SELECT count(*) > 0 FROM tl_node_segments WHERE frac_milli > 0 AND t1 > ? AND t0 < ?",
                          list(win)).fetchall()[0][0]
    st_parts, r_parts = [], []
    for a, b in _chunks(*win):
        p = chunk_params(a, b, iv)
        st_parts.append(_state_buckets(sample_state(con, dims, k_max, p), ["cluster", *dims], bucket, k_max))
        if sharing:
            r_parts.append(timeline.frame(con, partial_histogram_sql(dims, bucket), p))
    st = pl.concat(st_parts)
    if st.is_empty():
        return st
    st = _combine_states(st, keys)
    rhist = (pl.concat(r_parts).group_by([*keys, "r"]).agg(pl.col("n").sum()) if r_parts else
             pl.DataFrame(schema={**dict(st.select(keys).schema), "r": pl.Int32, "n": pl.Int64}))
    wl = timeline.frame(con, workload_sql(dims, bucket), {"ws": win[0], "we": win[1]})
    return _assemble(st, rhist, wl, keys, k_max, popularity)


# ---------------------------------------------------------------- the daily mart

#: Cell granularities stored in tl_frag_state_daily (sorted dims -> its ``dims`` label).
MART_DIMS = {("gpu_type",): "gpu_type", ("gpu_type", "partition"): "gpu_type,partition"}


def _from_mart(con, win, dims: list[str], bucket: str, k_max: int):
    """(state sums, partial-GPU histogram, workload) per bucket and cell as :func:`report` computes them from
    the sample grid, summed from the daily mart; None when the window does not fall on its days."""
    bounds = timeline.whole_days(con, *win, "tl_frag_state_daily")
    if bounds is None:
        return None
    b = timeline.bucket_sql(bucket, "day")
    cols = ", ".join(dims)
    h = [f"sum(coalesce(hist[{k + 1}], 0))::BIGINT AS h{k}" for k in range(k_max)]
    # a node with more than k_max free GPUs cannot exist, but the sum keeps h_kmax the ">= k_max" bin regardless
    h.append(f"sum(coalesce(list_sum(hist[{k_max + 1}:]), 0))::BIGINT AS h{k_max}")
    st = timeline.frame(con, f"""
        SELECT {b} AS bucket, cluster, {cols}, sum(samples)::BIGINT AS samples,
               {', '.join(f'sum({c})::BIGINT AS {c}' for c in ('nodes_up', 'free_gpus', 'partial_milli'))},
               {', '.join(h)},
               {', '.join(f'sum({c}_sum)::BIGINT AS {c}_sum, min({c}_min) AS {c}_min' for c in ('lsn', 'wfn', 'wfg'))}
        FROM tl_frag_state_daily WHERE dims = $dims AND day >= $w0 AND day < $w1
        GROUP BY ALL""", {**bounds, "dims": MART_DIMS[tuple(sorted(dims))]})
    st = st.with_columns(pl.col("samples").cast(pl.UInt32))
    part = "SELECT * FROM tl_frag_partial_daily WHERE day >= $w0 AND day < $w1"
    rhist = timeline.frame(con, f"""
        SELECT {b} AS bucket, cluster, {cols}, r, sum(n)::BIGINT AS n
        FROM ({timeline.explode_partitions(part) if 'partition' in dims else part}) GROUP BY ALL""", bounds)
    return st, rhist, _workload_from_mart(con, win, dims, bucket)


def _workload_from_mart(con, win, dims: list[str], bucket: str) -> pl.DataFrame:
    """:func:`workload_sql` over ``win``: the mart's whole days, the jobs of partial days at either end."""
    d0 = min(ceil_day(win[0]), win[1])
    d1 = max(floor_day(win[1]), d0)
    parts = ["SELECT cluster, day AS t, partition, pool, k, q, jobs FROM tl_frag_workload_daily "
             "WHERE day >= $d0 AND day < $d1"]
    for lo, hi, keep in (("$ws", "$d0", win[0] < d0), ("$d1", "$we", d1 < win[1])):
        if keep:
            parts.append(f"SELECT cluster, submit, partition, pool, k, q, 1 FROM ({_workload_jobs_sql(lo, hi)})")
    return timeline.frame(con, _workload_cells_sql(" UNION ALL ".join(parts), dims, bucket),
                          {"ws": win[0], "we": win[1], "d0": d0, "d1": d1})


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
    timeline.execute(con, f"""
        INSERT INTO tl_frag_workload_daily
        SELECT cluster, date_trunc('day', submit) AS day, partition, pool, k, q, count(*) AS jobs
        FROM ({_workload_jobs_sql(cluster=True)}) GROUP BY ALL ORDER BY day""",
                     {"c": c, "ws": W, "we": hz + dt.timedelta(days=1)})


def _rollup_state(con, c: str, D: dt.datetime, hz: dt.datetime) -> None:
    """tl_frag_state_daily and tl_frag_partial_daily of cluster ``c`` from day ``D`` to the horizon ``hz``."""
    for t in ("tl_frag_state_daily", "tl_frag_partial_daily"):
        con.execute(f"DELETE FROM {t} WHERE cluster = ? AND day >= ?", [c, D])
    if hz <= D:
        return
    k = max_gpus_per_node(con, c)
    for dims, label in MART_DIMS.items():
        for a, b in _chunks(D, hz):
            day = _state_buckets(sample_state(con, list(dims), k, chunk_params(a, b, DEFAULT_INTERVAL_S), c),
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
    timeline.execute(con, f"""
        INSERT INTO tl_frag_partial_daily
        SELECT cluster, bucket, gpu_type, partitions, r, n
        FROM ({partial_histogram_sql(['gpu_type', 'partitions'], 'day', cluster=True)}) ORDER BY bucket""",
                     {"c": c, "ws": D, "we": hz, "iv_us": DEFAULT_INTERVAL_S * 1_000_000})


def _combine_states(st: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Sums and minima of per-chunk aggregates (a week can straddle two months)."""
    mins = [c for c in st.columns if c.endswith("_min")]
    sums = [c for c in st.columns if c not in keys and c not in mins]
    return st.group_by(keys).agg(*[pl.col(c).sum() for c in sums], *[pl.col(c).min() for c in mins])


def _fgd(st: pl.DataFrame, rhist: pl.DataFrame, m: pl.DataFrame, keys: list[str], k_max: int) -> pl.DataFrame:
    """Σ over samples of F(M) in milli-GPU per bucket and cell, from the histogram sums h_j and the partial-GPU
    distribution: a whole-GPU task of k per node: Σ r + 1000 Σ_(j<k) j h_j; a sharing task of q milli:
    Σ r [r < q]."""
    below = {k: sum(j * pl.col(f"h{j}") for j in range(1, min(k, k_max + 1))) if k > 1 else pl.lit(0)
             for k in sorted(set(m["k"].to_list()) | {1})}
    whole = m.filter(pl.col("q") >= 1000).join(st.select(*keys, "partial_milli", *[f"h{j}" for j in range(k_max + 1)]),
                                               on=keys, how="inner", nulls_equal=True)
    whole = whole.with_columns(pl.coalesce([pl.when(pl.col("k") == k).then(e) for k, e in below.items()])
                               .alias("_below"))
    whole = whole.select(*keys, (pl.col("p") * (pl.col("partial_milli") + 1000 * pl.col("_below"))).alias("_F"))
    share = (m.filter(pl.col("q") < 1000).join(rhist, on=keys, how="inner", nulls_equal=True)
             .select(*keys, (pl.col("p") * pl.col("n") * pl.col("r") * (pl.col("r") < pl.col("q")).cast(pl.Int64))
                     .alias("_F")))
    return pl.concat([whole, share], how="vertical_relaxed").group_by(keys).agg(pl.col("_F").sum())


def _assemble(st, rhist, wl, keys, k_max, popularity) -> pl.DataFrame:
    sizes = [s for s in SIZE_CLASSES if s <= k_max]
    m = _popular(wl, keys, popularity) if wl.height else wl.with_columns(pl.lit(0.0).alias("p"))
    fgd = _fgd(st, rhist, m, keys, k_max)
    jobs = wl.group_by(keys).agg(pl.col("jobs").sum().alias("workload_jobs"), pl.len().alias("workload_specs"))
    out = st.join(fgd, on=keys, how="left", nulls_equal=True).join(jobs, on=keys, how="left", nulls_equal=True)
    per = lambda e: e / pl.col("samples")   # noqa: E731  a sum over samples -> mean per sample
    partial = pl.col("partial_milli") / 1000
    out = out.with_columns(
        per(pl.col("nodes_up")).alias("nodes_up"), per(pl.col("free_gpus") + partial).alias("free_gpus_mean"),
        *[per(pl.col(f"h{k}")).alias(f"nodes_free_{k}") for k in range(k_max + 1)],
        *[per(sum((j * pl.col(f"h{j}") for j in range(1, s)), pl.lit(0)) + partial).alias(f"stranded_{s}")
          for s in sizes],
        per(pl.col("free_gpus") + partial - pl.col("wfg_sum")).alias("stranded_multinode"),
        per(pl.col("wfn_sum")).alias("whole_free_nodes"), pl.col("wfn_min").alias("whole_free_nodes_min"),
        per(pl.col("lsn_sum")).alias("largest_single_node"), pl.col("lsn_min").alias("largest_single_node_min"),
        per(pl.col("wfg_sum")).alias("largest_gang_gpus"), pl.col("wfg_min").alias("largest_gang_gpus_min"),
        per(pl.col("_F") / 1000).alias("fgd_frag_gpus"),
        pl.when(1000 * pl.col("free_gpus") + pl.col("partial_milli") > 0)
        .then(pl.col("_F") / (1000 * pl.col("free_gpus") + pl.col("partial_milli"))).alias("fgd_rate"),
        pl.col("workload_jobs").fill_null(0), pl.col("workload_specs").fill_null(0))
    cols = [*keys, "samples", "nodes_up", "free_gpus", *[f"nodes_free_{k}" for k in range(0, k_max + 1)],
            "whole_free_nodes", "whole_free_nodes_min", "largest_single_node", "largest_single_node_min",
            "largest_gang_gpus", "largest_gang_gpus_min", *[f"stranded_{s}" for s in sizes], "stranded_multinode",
            "fgd_frag_gpus", "fgd_rate", "workload_jobs", "workload_specs"]
    return out.drop("free_gpus").rename({"free_gpus_mean": "free_gpus"}).select(cols).sort(keys)
