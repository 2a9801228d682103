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

import datetime as dt
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
                 shapes: list[dict], counts: dict[str, np.ndarray], cluster: str | None = None) -> None:
    """Add to ``counts`` each pending interval's placeable / fragmentation / capacity samples inside the chunk
    [$i0, $i1) (intervals [A, B) in sample indices, of request shape ``shape_of``).

    Intervals with the same request shape (cluster, partitions, pool, GPUs, nodes) see the same cells, so each
    shape is classified once per sample and each interval read off prefix sums: the cost is shapes x samples
    plus intervals, not pending job-samples (a busy year has billions of those)."""
    i0, i1 = p["i0"], p["i1"]
    sel = np.flatnonzero((A < i1) & (B > i0))
    if not len(sel):
        return
    cells_df, cols = fragmentation.sample_grid(con, ["gpu_type", "partition"], k_max, p, cluster)
    cells = _Cells(cells_df, cols, i0, i1 - i0)
    a, b = np.maximum(A[sel], i0) - i0, np.minimum(B[sel], i1) - i0
    order = np.argsort(shape_of[sel], kind="stable")
    sh = shape_of[sel][order]
    cuts = np.flatnonzero(np.diff(sh)) + 1
    for idx in np.split(order, cuts):
        masks = _classify(cells, shapes[shape_of[sel[idx[0]]]], k_max)
        for cls, m in masks.items():
            pref = np.r_[0, np.cumsum(m)]
            counts[cls][sel[idx]] += pref[b[idx]] - pref[a[idx]]


def _pending(con, p: dict, cluster: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(GPU jobs pending inside the window of ``p`` with their pending sample indices [a, b) and ``_shape``,
    the distinct request shapes with their ``_shape`` number)."""
    where = "AND j.cluster = $c" if cluster else ""
    jobs = timeline.frame(con, f"""
        SELECT * FROM (
          SELECT *, greatest({fragmentation._sample_index('p0')}, $i0) AS a,
                 least({fragmentation._sample_index('p1')}, $i1) AS b
          FROM ({PENDING_SQL} {where}) WHERE p1 > p0)
        WHERE a < b ORDER BY cluster, job_uid""", {**p, "c": cluster})
    shapes = jobs.select(SHAPE).unique().with_row_index("_shape")
    return jobs.join(shapes, on=SHAPE, how="left", nulls_equal=True, maintain_order="left"), shapes


def _counts(con, win, iv: int, A: np.ndarray, B: np.ndarray, shape_of: np.ndarray, shapes: pl.DataFrame,
            cluster: str | None = None) -> dict[str, np.ndarray]:
    """Placeable / fragmentation / capacity samples of each interval [A, B), month by month."""
    # a request larger than the cluster's largest node is capacity-bound whatever k_max is: the cluster's own
    # lets the fragmentation rollup reuse the same grids (fragmentation.shared_grids)
    k_max = fragmentation.max_gpus_per_node(con, cluster)
    counts = {c: np.zeros(len(A), np.int64) for c in CLASSES[:3]}
    shape_rows = shapes.sort("_shape").to_dicts()
    for ca, cb in fragmentation._chunks(*win):
        _count_chunk(con, k_max, fragmentation.chunk_params(ca, cb, iv), A, B, shape_of, shape_rows, counts,
                     cluster)
    return counts


def per_job(con: duckdb.DuckDBPyConnection, start=None, end=None,
            interval: str | int = fragmentation.DEFAULT_INTERVAL_S) -> pl.DataFrame:
    """One row per job that was pending inside [start, end): its wait split into placeable / fragmentation /
    capacity / unknown, in hours and GPU-hours (sample counts x interval).

    At the default interval over a window of whole UTC days (or reaching past the data span), the sums of the
    daily mart ``tl_blocked_daily``; otherwise computed from the sample grid (the same numbers)."""
    timeline.ensure_current(con)
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    iv = fragmentation.parse_interval(interval)
    df = _from_mart(con, win) if iv == fragmentation.DEFAULT_INTERVAL_S else None
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
    jobs, shapes = _pending(con, fragmentation.chunk_params(*win, iv))
    if jobs.is_empty():
        return pl.DataFrame()
    A, B = jobs["a"].to_numpy(), jobs["b"].to_numpy()
    counts = _counts(con, win, iv, A, B, jobs["_shape"].to_numpy(), shapes)
    return jobs.with_columns(pl.Series("samples", B - A), *[pl.Series(c, v) for c, v in counts.items()],
                             pl.col("pool").fill_null("(any)").alias("gpu_type"), pl.col("g").alias("gpus"),
                             pl.col("nn").alias("nnodes"))


def _from_mart(con, win) -> pl.DataFrame | None:
    """:func:`_compute` summed from ``tl_blocked_daily``, or None when the window does not fall on its days."""
    bounds = timeline.whole_days(con, *win, "tl_blocked_daily")
    if bounds is None:
        return None
    return timeline.frame(con, """
        SELECT job_uid, any_value(cluster) AS cluster, any_value(job_id) AS job_id, any_value(team) AS team,
               any_value(account) AS account, any_value("user") AS "user", any_value(partition) AS partition,
               coalesce(any_value(gpu_type), '(any)') AS gpu_type, any_value(gpus) AS gpus,
               any_value(nnodes) AS nnodes, any_value(size_class) AS size_class,
               sum(samples)::BIGINT AS samples, sum(placeable)::BIGINT AS placeable,
               sum(fragmentation)::BIGINT AS fragmentation, sum(capacity)::BIGINT AS capacity
        FROM tl_blocked_daily WHERE day >= $w0 AND day < $w1
        GROUP BY job_uid ORDER BY cluster, job_uid""", bounds)


def rollup(con: duckdb.DuckDBPyConnection, c: str, D: dt.datetime) -> None:
    """Rebuild ``tl_blocked_daily`` of cluster ``c`` from UTC midnight ``D`` on, at the default interval: each
    pending interval split at UTC midnights (a day is a whole number of samples) and classified like
    :func:`per_job`. A step of the timeline build: tl_node_segments and tl_clusters must be current."""
    con.execute("DELETE FROM tl_blocked_daily WHERE cluster = ? AND day >= ?", [c, D])
    hz = timeline.horizon(con, c)
    if hz is None or hz <= D:
        return
    iv = fragmentation.DEFAULT_INTERVAL_S
    per_day = 86400 // iv
    win = (D, hz)
    jobs, shapes = _pending(con, fragmentation.chunk_params(*win, iv), c)
    if jobs.is_empty():
        return
    a, b = jobs["a"].to_numpy(), jobs["b"].to_numpy()
    first, n = a // per_day, (b - 1) // per_day - a // per_day + 1
    job = np.repeat(np.arange(len(a)), n)
    day = first[job] + np.arange(len(job)) - np.repeat(np.cumsum(n) - n, n)
    A, B = np.maximum(a[job], day * per_day), np.minimum(b[job], (day + 1) * per_day)
    counts = _counts(con, win, iv, A, B, jobs["_shape"].to_numpy()[job], shapes, c)
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


def _size_order(c: pl.Expr) -> pl.Expr:
    return (pl.when(c == "fractional").then(0).when(c == "multi-node").then(10**6)
            .when(c == "(all)").then(10**7).otherwise(c.cast(pl.Int64, strict=False)))


def blocked(con: duckdb.DuckDBPyConnection, start=None, end=None, by: str | Iterable[str] = ("team", "size_class"),
            interval: str | int = fragmentation.DEFAULT_INTERVAL_S) -> pl.DataFrame:
    """Queue wait per group (``by`` any of cluster, team, account, user, size_class, partition, gpu_type) split
    into placeable / fragmentation / capacity / unknown GPU-hours, with the share of the group's wait and of
    all queue wait that fragmentation explains; a last row ``(all)`` holds the totals."""
    dims = timeline.normalise_dims(by, DIMS)
    timeline.ensure_current(con)
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    iv = fragmentation.parse_interval(interval)
    out = _groups_from_mart(con, win, dims) if iv == fragmentation.DEFAULT_INTERVAL_S else None
    if out is None:
        out = _groups(per_job(con, start, end, interval), dims)
    if out is None or out.is_empty():
        return pl.DataFrame()
    total_wait = out.filter(pl.col("_total"))["wait_gpu_h"].sum()
    out = out.with_columns(
        pl.when(pl.col("wait_gpu_h") > 0).then(pl.col("fragmentation_gpu_h") / pl.col("wait_gpu_h"))
        .alias("fragmentation_share"),
        (pl.col("fragmentation_gpu_h") / total_wait if total_wait > 0 else pl.lit(None, pl.Float64))
        .alias("fragmentation_share_of_all_wait"))
    order = [pl.col("_total")] + [_size_order(pl.col(d)) if d == "size_class" else pl.col(d) for d in dims]
    return out.sort(order + [pl.col("wait_gpu_h")], descending=[False] * len(order) + [True]).select(
        *dims, pl.col("jobs").cast(pl.Int64), "wait_h", "wait_gpu_h", *[f"{c}_gpu_h" for c in CLASSES], "fragmentation_h",
        "fragmentation_share", "fragmentation_share_of_all_wait")


def _groups(jobs: pl.DataFrame, dims: list[str]) -> pl.DataFrame | None:
    """Per group of ``dims`` and the ``(all)`` total (``_total``): jobs and the wait sums, from :func:`per_job`."""
    if jobs.is_empty():
        return None
    aggs = [pl.len().alias("jobs"), pl.col("wait_h").sum(), pl.col("wait_gpu_h").sum(),
            *[pl.col(f"{c}_gpu_h").sum() for c in CLASSES], pl.col("fragmentation_h").sum()]
    groups = jobs.group_by(dims).agg(aggs) if dims else jobs.select(aggs).head(0)
    total = jobs.select(aggs).with_columns(*[pl.lit("(all)").alias(d) for d in dims])
    return pl.concat([groups, total.select(groups.columns)], how="vertical_relaxed").with_columns(
        pl.int_range(pl.len()).ge(groups.height).alias("_total"))


def _groups_from_mart(con, win, dims: list[str]) -> pl.DataFrame | None:
    """:func:`_groups` summed in SQL from ``tl_blocked_daily`` (a job's attributes are the same on all its
    days, so it counts once per group); None when the window does not fall on the mart's days."""
    bounds = timeline.whole_days(con, *win, "tl_blocked_daily")
    if bounds is None:
        return None
    h = fragmentation.DEFAULT_INTERVAL_S / 3600
    cols = ", ".join(f'"{d}"' for d in dims)
    label = "".join(f"""CASE WHEN grouping("{d}") = 1 THEN '(all)' ELSE "{d}" END AS "{d}", """ for d in dims)
    out = timeline.frame(con, f"""
        SELECT {label} count(DISTINCT job_uid) AS jobs, sum(samples) * $h AS wait_h,
               sum(samples * gpus) * $h AS wait_gpu_h, sum(placeable * gpus) * $h AS placeable_gpu_h,
               sum(fragmentation * gpus) * $h AS fragmentation_gpu_h, sum(capacity * gpus) * $h AS capacity_gpu_h,
               sum((samples - placeable - fragmentation - capacity) * gpus) * $h AS unknown_gpu_h,
               sum(fragmentation) * $h AS fragmentation_h, {f"grouping({cols}) > 0" if dims else "true"} AS _total
        FROM (SELECT * REPLACE (coalesce(gpu_type, '(any)') AS gpu_type) FROM tl_blocked_daily
              WHERE day >= $w0 AND day < $w1)
        GROUP BY GROUPING SETS ({f"({cols}), " if dims else ""}())""", {**bounds, "h": h})
    return out if out.filter(pl.col("_total"))["jobs"].sum() else out.head(0)
