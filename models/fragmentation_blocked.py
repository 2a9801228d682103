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
import numpy as np
import polars as pl

from models import fragmentation, timeline

DIMS = ("cluster", "team", "account", "user", "size_class", "partition", "gpu_type")
CLASSES = ("placeable", "fragmentation", "capacity", "unknown")

PENDING_SQL = """
    SELECT j.job_uid, j.cluster, j.job_id, coalesce(j.team, '(unmapped)') AS team, j.account, j."user",
           j.partition, j.gpu_type AS pool, g, nn, CAST(ceil(g / nn) AS INTEGER) AS k, coalesce(j.gpu_milli < 1000, false) AS frac,
           CASE WHEN j.gpu_milli < 1000 THEN 'fractional' WHEN nn > 1 THEN 'multi-node'
                ELSE CAST(CAST(pow(2, ceil(log2(greatest(g, 1)))) AS INTEGER) AS VARCHAR) END AS size_class,
           greatest(coalesce(j.eligible, j.submit), c.data_start, $ws) AS p0,
           least(coalesce(j.start, j."end", CASE WHEN j.state = 'PENDING' THEN c.horizon END), c.horizon, $we) AS p1
    FROM (SELECT *, coalesce(nullif(req_gpus, 0), ngpus) AS g, greatest(coalesce(nnodes, 1), 1) AS nn FROM jobs) j
    JOIN tl_clusters c ON c.cluster = j.cluster
    WHERE j.g > 0 AND coalesce(j.eligible, j.submit) < $we AND coalesce(j.start, c.horizon) > $ws"""


SHAPE = ["cluster", "partition", "pool", "g", "nn", "k", "frac"]


class _Cells:
    """Per-sample counters of the (cluster, gpu_type, partition) cells of one chunk, padded to the chunk."""

    def __init__(self, cells: pl.DataFrame, cols: dict, i0: int, n: int):
        self.rows = cells.to_dicts()
        self.cols, self.i0, self.n = cols, i0, n
        self._cache: dict = {}

    def matching(self, cluster: str, partition: str, pool: str | None) -> list[dict]:
        return [c for c in self.rows if c["cluster"] == cluster and c["partition"] == partition
                and (pool is None or c["gpu_type"] == pool)]

    def series(self, cell: dict, name: str) -> np.ndarray:
        key = (cell["cid"], name)
        if key not in self._cache:
            out = np.zeros(self.n, dtype=np.float64 if name == "valid" else np.int64)
            a, b, off = cell["lo"] - self.i0, cell["hi"] - self.i0, cell["offset"]
            out[a:b] = 1 if name == "valid" else self.cols[name][off:off + b - a]
            self._cache[key] = out
        return self._cache[key]


def _classify(cells: _Cells, shape: dict, k_max: int) -> dict[str, np.ndarray]:
    """Per sample of the chunk, for one request shape: placeable / fragmentation / capacity masks."""
    n = cells.n
    placeable, fits, known = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)
    for part in {p.strip() for p in (shape["partition"] or "").split(",")}:
        cand = cells.matching(shape["cluster"], part, shape["pool"])
        if not cand:
            continue
        valid = sum(cells.series(c, "valid") for c in cand) > 0
        big_enough = shape["k"] <= max(c["max_gpus"] for c in cand)
        tot = sum(cells.series(c, "free_gpus") + cells.series(c, "partial_milli") / 1000 for c in cand)
        ge = f"ge{1 if shape['frac'] else min(shape['k'], k_max)}"
        nodes = sum(cells.series(c, ge) for c in cand)
        known |= valid
        if big_enough:
            placeable |= valid & (nodes >= (1 if shape["frac"] else shape["nn"]))
            fits |= valid & (tot >= shape["g"] - 1e-9)
    frag = fits & ~placeable
    return {"placeable": placeable, "fragmentation": frag, "capacity": known & ~placeable & ~frag}


def _count_chunk(con, k_max: int, p: dict, A: np.ndarray, B: np.ndarray, shape_of: np.ndarray,
                 shapes: list[dict], counts: dict[str, np.ndarray]) -> None:
    """Add to ``counts`` each job's placeable / fragmentation / capacity samples inside the chunk [$i0, $i1).

    Jobs with the same request shape (cluster, partitions, pool, GPUs, nodes) see the same cells, so each shape
    is classified once per sample and each job reads its interval off prefix sums: the cost is shapes x samples
    plus jobs, not pending job-samples (a busy year has billions of those)."""
    i0, i1 = p["i0"], p["i1"]
    sel = np.flatnonzero((A < i1) & (B > i0))
    if not len(sel):
        return
    cells_df, cols = fragmentation.sample_grid(con, ["gpu_type", "partition"], k_max, p)
    cells = _Cells(cells_df, cols, i0, i1 - i0)
    a, b = np.maximum(A[sel], i0) - i0, np.minimum(B[sel], i1) - i0
    sh = shape_of[sel]
    for s_id in np.unique(sh):
        masks = _classify(cells, shapes[s_id], k_max)
        idx = np.flatnonzero(sh == s_id)
        for cls, m in masks.items():
            pref = np.r_[0, np.cumsum(m)]
            counts[cls][sel[idx]] += pref[b[idx]] - pref[a[idx]]


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
    p = fragmentation.chunk_params(*win, iv)
    jobs = timeline.frame(con, f"""
        SELECT * FROM (
          SELECT *, greatest({fragmentation._sample_index('p0')}, $i0) AS a,
                 least({fragmentation._sample_index('p1')}, $i1) AS b
          FROM ({PENDING_SQL}) WHERE p1 > p0)
        WHERE a < b ORDER BY cluster, job_uid""", p)
    if jobs.is_empty():
        return pl.DataFrame()
    shapes = jobs.select(SHAPE).unique().with_row_index("_shape")
    jobs = jobs.join(shapes, on=SHAPE, how="left", nulls_equal=True, maintain_order="left")
    A, B, shape_of = jobs["a"].to_numpy(), jobs["b"].to_numpy(), jobs["_shape"].to_numpy()
    counts = {c: np.zeros(jobs.height, np.int64) for c in CLASSES[:3]}
    shape_rows = shapes.sort("_shape").to_dicts()
    for ca, cb in fragmentation._chunks(*win):
        _count_chunk(con, k_max, fragmentation.chunk_params(ca, cb, iv), A, B, shape_of, shape_rows, counts)
    h = iv / 3600
    df = jobs.with_columns(pl.Series("samples", B - A), *[pl.Series(c, v) for c, v in counts.items()])
    df = df.with_columns((pl.col("samples") - pl.col("placeable") - pl.col("fragmentation") - pl.col("capacity"))
                         .alias("unknown"), pl.col("pool").fill_null("(any)").alias("gpu_type"),
                         pl.col("g").alias("gpus"), pl.col("nn").alias("nnodes"))
    return df.select(
        "job_uid", "cluster", "job_id", "team", "account", "user", "partition", "gpu_type", "gpus", "nnodes",
        "size_class", (pl.col("samples") * h).alias("wait_h"),
        *[(pl.col(c) * h).alias(f"{c}_h") for c in CLASSES],
        (pl.col("samples") * h * pl.col("gpus")).alias("wait_gpu_h"),
        *[(pl.col(c) * h * pl.col("gpus")).alias(f"{c}_gpu_h") for c in CLASSES],
    )


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
