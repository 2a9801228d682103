"""The kernel of queue wait explained by fragmentation (models/metrics/blocked.py reads it, models/marts/blocked_daily.py
rolls it up per day): for every job's pending time, at each sample, could it have started?

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

import numpy as np
import polars as pl

from ingest.warehouse import frame
from models.definitions.jobs_sql import pending_from_sql, pending_until_sql, req_gpus_sql, team_sql
from models.definitions.labels import size_class_sql
from models.definitions.times import month_chunks
from models.kernels.free_grid import chunk_params, max_gpus_per_node, sample_grid, sample_index

CLASSES = ("placeable", "fragmentation", "capacity", "unknown")


#: GPU jobs pending inside [$ws, $we) with their pending interval [p0, p1) clipped to the window and the data
#: span (the one pending interval: models/definitions/jobs_sql.py), request shape and attributes.
PENDING_SQL = f"""
    SELECT j.job_uid, j.cluster, j.job_id, {team_sql()} AS team, j.account, j."user",
           j.partition, j.gpu_type AS pool, g, nn, CAST(ceil(g / nn) AS INTEGER) AS k,
           coalesce(j.gpu_milli < 1000, false) AS frac, {size_class_sql('g', 'j.gpu_milli')} AS size_class,
           greatest({pending_from_sql()}, c.data_start, $ws) AS p0,
           least({pending_until_sql('c.horizon')}, $we) AS p1
    FROM (SELECT *, {req_gpus_sql('jobs')} AS g, greatest(coalesce(nnodes, 1), 1) AS nn FROM jobs) j
    JOIN tl_clusters c ON c.cluster = j.cluster
    WHERE j.g > 0 AND {pending_from_sql()} < $we AND coalesce(j.start, c.horizon) > $ws"""


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
    cells_df, cols = sample_grid(con, ["gpu_type", "partition"], k_max, p, cluster)
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


def pending_jobs(con, p: dict, cluster: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(GPU jobs pending inside the window of ``p`` with their pending sample indices [a, b) and ``_shape``,
    the distinct request shapes with their ``_shape`` number)."""
    where = "AND j.cluster = $c" if cluster else ""
    jobs = frame(con, f"""
        SELECT * FROM (
          SELECT *, greatest({sample_index('p0')}, $i0) AS a,
                 least({sample_index('p1')}, $i1) AS b
          FROM ({PENDING_SQL} {where}) WHERE p1 > p0)
        WHERE a < b ORDER BY cluster, job_uid""", {**p, "c": cluster})
    shapes = jobs.select(SHAPE).unique().with_row_index("_shape")
    return jobs.join(shapes, on=SHAPE, how="left", nulls_equal=True, maintain_order="left"), shapes


def classify_waits(con, win, iv: int, A: np.ndarray, B: np.ndarray, shape_of: np.ndarray, shapes: pl.DataFrame,
            cluster: str | None = None) -> dict[str, np.ndarray]:
    """Placeable / fragmentation / capacity samples of each interval [A, B), month by month."""
    # a request larger than the cluster's largest node is capacity-bound whatever k_max is: the cluster's own
    # lets the fragmentation rollup reuse the same grids (fragmentation.shared_grids)
    k_max = max_gpus_per_node(con, cluster)
    counts = {c: np.zeros(len(A), np.int64) for c in CLASSES[:3]}
    shape_rows = shapes.sort("_shape").to_dicts()
    for ca, cb in month_chunks(*win):
        _count_chunk(con, k_max, chunk_params(ca, cb, iv), A, B, shape_of, shape_rows, counts,
                     cluster)
    return counts
