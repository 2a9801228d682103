"""GPU fragmentation per bucket and cell (cluster x pool x partition): free GPUs, the free-GPU histogram, whole
free nodes, the largest request one node can take, the largest gang of whole nodes, stranded GPUs per request
size, and the FGD fragmentation rate (Weng et al., ATC'23) against the request sizes observed in the same bucket.
Definitions: docs/METRICS.md ("Fragmentation").

Reads the free-GPU sample grid (models/kernels/free_grid.py): means, the free-GPU histogram, stranded GPUs and
FGD all follow from sums of that state over a bucket's samples; only FGD for GPU-sharing tasks also needs the
distribution of partial GPUs. With sample times on every segment edge, mean free GPUs x hours equals
utilization's idle GPU-hours (a property test checks it). Over whole UTC days at the default interval the report
sums the daily mart (models/marts/fragmentation_daily.py) instead of sweeping the samples.
"""
from __future__ import annotations

from typing import Iterable

import duckdb
import polars as pl

from ingest.warehouse import frame
from models.definitions.labels import normalise_dims
from models.definitions.nodes_sql import explode_partitions
from models.definitions.times import (DEFAULT_INTERVAL_S, bucket_sql, ceil_day, check_bucket, floor_day,
                                      month_chunks, parse_duration)
from models.kernels.free_grid import (MART_DIMS, chunk_params, max_gpus_per_node, partial_histogram_sql,
                                      sample_state, state_buckets, workload_cells_sql, workload_jobs_sql,
                                      workload_sql)
from models.metrics import timeline

CELL_DIMS = ("gpu_type", "partition")
#: Request sizes (GPUs on one node) whose stranded GPUs the report gives (``stranded_k``).
STRANDED_SIZES = (1, 2, 4, 8, 16, 32, 64)
#: The bucket of a window's FGD rate: each UTC day's samples against the requests submitted that day.
WINDOW_BUCKET = "day"


def samples(con: duckdb.DuckDBPyConnection, start=None, end=None, interval: str | int = DEFAULT_INTERVAL_S,
            by: str | Iterable[str] = CELL_DIMS) -> pl.DataFrame:
    """Per sample time and cell: nodes_up, free_gpus, partial_milli, whole_free_nodes, whole_free_gpus,
    largest_single_node, and ``ge`` (list: ge[k-1] = available nodes with >= k free whole GPUs). For charts of
    a short window; the report aggregates the same state month by month."""
    dims = normalise_dims(by, CELL_DIMS)
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    iv = parse_duration(interval)
    k_max = max_gpus_per_node(con)
    parts = [sample_state(con, dims, k_max, chunk_params(a, b, iv)) for a, b in month_chunks(*win)]
    out = pl.concat(parts) if parts else pl.DataFrame()
    if out.is_empty():
        return out
    return out.with_columns(pl.concat_list([f"ge{k}" for k in range(1, k_max + 1)]).alias("ge")).drop(
        [f"ge{k}" for k in range(1, k_max + 1)] + ["i"]).sort(["cluster", *dims, "ts"])


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
    dims = normalise_dims(by, CELL_DIMS)
    bucket = check_bucket(bucket)
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    iv = parse_duration(interval)
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
    for a, b in month_chunks(*win):
        p = chunk_params(a, b, iv)
        st_parts.append(state_buckets(sample_state(con, dims, k_max, p), ["cluster", *dims], bucket, k_max))
        if sharing:
            r_parts.append(frame(con, partial_histogram_sql(dims, bucket), p))
    st = pl.concat(st_parts)
    if st.is_empty():
        return st
    st = _combine_states(st, keys)
    rhist = (pl.concat(r_parts).group_by([*keys, "r"]).agg(pl.col("n").sum()) if r_parts else
             pl.DataFrame(schema={**dict(st.select(keys).schema), "r": pl.Int32, "n": pl.Int64}))
    wl = frame(con, workload_sql(dims, bucket), {"ws": win[0], "we": win[1]})
    return _assemble(st, rhist, wl, keys, k_max, popularity)


def _from_mart(con, win, dims: list[str], bucket: str, k_max: int):
    """(state sums, partial-GPU histogram, workload) per bucket and cell as :func:`report` computes them from
    the sample grid, summed from the daily mart; None when the window does not fall on its days."""
    bounds = timeline.whole_days(con, *win, "tl_frag_state_daily")
    if bounds is None:
        return None
    b = bucket_sql(bucket, "day")
    cols = ", ".join(dims)
    h = [f"sum(coalesce(hist[{k + 1}], 0))::BIGINT AS h{k}" for k in range(k_max)]
    # a node with more than k_max free GPUs cannot exist, but the sum keeps h_kmax the ">= k_max" bin regardless
    h.append(f"sum(coalesce(list_sum(hist[{k_max + 1}:]), 0))::BIGINT AS h{k_max}")
    st = frame(con, f"""
        SELECT {b} AS bucket, cluster, {cols}, sum(samples)::BIGINT AS samples,
               {', '.join(f'sum({c})::BIGINT AS {c}' for c in ('nodes_up', 'free_gpus', 'partial_milli'))},
               {', '.join(h)},
               {', '.join(f'sum({c}_sum)::BIGINT AS {c}_sum, min({c}_min) AS {c}_min' for c in ('lsn', 'wfn', 'wfg'))}
        FROM tl_frag_state_daily WHERE dims = $dims AND day >= $w0 AND day < $w1
        GROUP BY ALL""", {**bounds, "dims": MART_DIMS[tuple(sorted(dims))]})
    st = st.with_columns(pl.col("samples").cast(pl.UInt32))
    part = "SELECT * FROM tl_frag_partial_daily WHERE day >= $w0 AND day < $w1"
    rhist = frame(con, f"""
        SELECT {b} AS bucket, cluster, {cols}, r, sum(n)::BIGINT AS n
        FROM ({explode_partitions(part) if 'partition' in dims else part}) GROUP BY ALL""", bounds)
    return st, rhist, _workload_from_mart(con, win, dims, bucket)


def _workload_from_mart(con, win, dims: list[str], bucket: str) -> pl.DataFrame:
    """:func:`workload_sql` over ``win``: the mart's whole days, the jobs of partial days at either end."""
    d0 = min(ceil_day(win[0]), win[1])
    d1 = max(floor_day(win[1]), d0)
    parts = ["SELECT cluster, day AS t, partition, pool, k, q, jobs FROM tl_frag_workload_daily "
             "WHERE day >= $d0 AND day < $d1"]
    for lo, hi, keep in (("$ws", "$d0", win[0] < d0), ("$d1", "$we", d1 < win[1])):
        if keep:
            parts.append(f"SELECT cluster, submit, partition, pool, k, q, 1 FROM ({workload_jobs_sql(lo, hi)})")
    return frame(con, workload_cells_sql(" UNION ALL ".join(parts), dims, bucket),
                          {"ws": win[0], "we": win[1], "d0": d0, "d1": d1})


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
    sizes = [s for s in STRANDED_SIZES if s <= k_max]
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


def rate(df: pl.DataFrame | None) -> float | None:
    """The FGD rate pooled over the rows of a :func:`report` frame (any buckets and cells): Σ F / Σ free GPUs over
    every sample of every row (``fgd_frag_gpus`` and ``free_gpus`` are means per sample, so both are weighted by
    ``samples``). None without free GPUs."""
    if df is None or df.height == 0:
        return None
    w = df["samples"]
    free = (df["free_gpus"] * w).sum()
    return float((df["fgd_frag_gpus"].fill_null(0) * w).sum() / free) if free else None


def window_rate(con: duckdb.DuckDBPyConnection, start=None, end=None, by: str | Iterable[str] = ("gpu_type",),
                keep: dict[str, Iterable[str]] | None = None, interval: str | int = DEFAULT_INTERVAL_S,
                popularity: float = 1.0) -> float | None:
    """The fragmentation rate of a window, the one figure every page and report gives for it: Σ F(M_d) / Σ free
    GPUs over every sample of the window, where each UTC day d's samples are measured against M_d, the GPU
    requests submitted that day (inside the window). The free-GPU-weighted mean of the daily rates, so it does not
    depend on how a page buckets its chart. ``keep``: cells to keep, e.g. ``{"gpu_type": ["h100"]}``."""
    df = report(con, start, end, WINDOW_BUCKET, by, interval, popularity)
    for col, values in (keep or {}).items():
        if df.height:
            df = df.filter(pl.col(col).is_in(list(values)))
    return rate(df)
