"""Build simulator inputs from the warehouse: the observed capacity (``nodes``), the observed workload
(``jobs`` + ``job_nodes``) and outages (``node_events``), and what-if transformations of the workload.

Times become seconds since ``t0`` (the window start, naive UTC); GPUs are counts.
"""
from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import numpy as np
import polars as pl

from models.definitions.times import check_window, floor_day, parse_window
from models.simulation.simulate import Cluster, Workload, node_events

DAY = 86400.0


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: dict) -> pl.DataFrame:
    return con.sql(sql, params=params).pl()


DOWN_STATES = ("DOWN", "FAIL", "FAILING", "NODE_FAIL", "NOT_RESPONDING", "POWERED_DOWN", "UNKNOWN")


def window(con: duckdb.DuckDBPyConnection, date_from: str | None, date_to: str | None,
           cluster: str | None = None) -> tuple[datetime, datetime]:
    """[from, to) in naive UTC (any time form gpuledger reads); defaults to the whole UTC days of GPU jobs'
    submit times in the warehouse."""
    lo, hi = con.execute(
        "SELECT min(submit), max(submit) FROM jobs WHERE ngpus > 0 AND ($c IS NULL OR cluster = $c)",
        {"c": cluster}).fetchall()[0]
    if lo is None:
        raise ValueError("the warehouse has no GPU jobs to simulate (ingest sacct or run `gpuledger demo`)")
    f, t = parse_window(date_from, date_to)
    f = f or floor_day(lo)
    t = t or floor_day(hi) + timedelta(days=1)
    check_window(f, t)
    return f, t


def load_cluster(con: duckdb.DuckDBPyConnection, t0: datetime, t1: datetime | None = None,
                 cluster: str | None = None) -> tuple[Cluster, np.ndarray]:
    """GPU nodes that exist at some time in [t0, t1) (nodes.valid_from/valid_to), with pool = gpu_type and
    partitions, and the times each is absent (seconds since t0) as 'drain'/'up' events: a node installed
    during the window is drained until its valid_from, a retired one from its valid_to. A node takes the shape
    of its first version in the window. Returns (cluster, events)."""
    t1 = t1 or t0
    df = _frame(con, """
        SELECT node, coalesce(gpu_type, 'gpu') AS pool, gpus::DOUBLE AS gpus, coalesce(partitions, '') AS parts,
               CASE WHEN valid_from IS NULL OR valid_from <= $t0 THEN 0.0
                    ELSE epoch(valid_from - $t0)::DOUBLE END AS vf,
               CASE WHEN valid_to IS NULL THEN NULL ELSE epoch(valid_to - $t0)::DOUBLE END AS vt
        FROM nodes
        WHERE gpus > 0 AND ($c IS NULL OR cluster = $c)
          AND (valid_from IS NULL OR valid_from < greatest($t1, $t0 + INTERVAL 1 SECOND))
          AND (valid_to IS NULL OR valid_to > $t0)
        ORDER BY node, vf""", {"c": cluster, "t0": t0, "t1": t1})
    if df.height == 0:
        # no inventory valid in the window: take each node's first known row, present throughout
        df = _frame(con, """
            SELECT node, coalesce(gpu_type, 'gpu') AS pool, gpus::DOUBLE AS gpus, coalesce(partitions, '') AS parts,
                   0.0 AS vf, NULL::DOUBLE AS vt
            FROM nodes WHERE gpus > 0 AND ($c IS NULL OR cluster = $c)
            QUALIFY row_number() OVER (PARTITION BY cluster, node ORDER BY valid_from NULLS FIRST) = 1
            ORDER BY node""", {"c": cluster})
    if df.height == 0:
        raise ValueError("the warehouse has no GPU nodes (ingest nodes first)")
    first = df.unique("node", keep="first", maintain_order=True)
    cl = Cluster.from_arrays(first["gpus"].to_numpy(), first["pool"].to_list(), first["parts"].to_list(),
                             first["node"].to_list())
    rows = []
    for i, (node, d) in enumerate(df.group_by("node", maintain_order=True)):
        t = 0.0  # the node is absent before its first interval and between intervals
        for vf, vt in d.select("vf", "vt").iter_rows():
            if vf > t:
                rows += [(t, i, "drain"), (vf, i, "up")]
            t = float("inf") if vt is None else max(t, vt)
        if t < float("inf"):
            rows.append((t, i, "drain"))
    return cl, node_events(cl, rows)


def load_jobs(con: duckdb.DuckDBPyConnection, t0: datetime, t1: datetime, cluster: str | None = None
              ) -> pl.DataFrame:
    """GPU jobs submitted in [t0, t1) that ran (start known), with their observed wait and pool.
    A job arrives when it became eligible (sacct's Eligible, after holds, dependencies, BeginTime, array
    throttles and requeue holds, none of which the simulator models), else at submit; the observed wait is
    counted from there. The pool is the job's typed GPU request, else the type of the first node it ran on."""
    return _frame(con, """
        WITH first_node AS (
            SELECT jn.job_uid, any_value(n.gpu_type) AS node_pool
            FROM job_nodes jn JOIN nodes n ON n.cluster = jn.cluster AND n.node = jn.node
            GROUP BY jn.job_uid)
        SELECT j.job_uid, epoch(least(greatest(coalesce(j.eligible, j.submit), j.submit), j.start) - $t0)::DOUBLE
                   AS submit_s,
               epoch(j.start - least(greatest(coalesce(j.eligible, j.submit), j.submit), j.start))::DOUBLE
                   AS observed_wait_s,
               coalesce(j.elapsed_s, epoch(j."end" - j.start))::DOUBLE AS run_s,
               j.timelimit_s::DOUBLE AS limit_s, greatest(coalesce(j.nnodes, 1), 1) AS nnodes,
               j.ngpus / greatest(coalesce(j.nnodes, 1), 1) AS gpus_per_node, j.ngpus AS gpus,
               coalesce(CASE WHEN j.gpu_type LIKE '%+%' THEN NULL ELSE j.gpu_type END, f.node_pool) AS pool,
               j.partition, coalesce(j.account, 'default') AS account, j.team, j.qos, j.state
        FROM jobs j LEFT JOIN first_node f USING (job_uid)
        WHERE j.ngpus > 0 AND j.start IS NOT NULL AND j.submit >= $t0 AND j.submit < $t1
          AND ($c IS NULL OR j.cluster = $c)
        ORDER BY j.submit, j.job_uid""", {"t0": t0, "t1": t1, "c": cluster})


def to_workload(jobs: pl.DataFrame, qos_factor: dict[str, float] | None = None, runtime_scale: float = 1.0
                ) -> Workload:
    """The simulator's workload from ``load_jobs`` rows; run time and limit scaled by ``runtime_scale``."""
    q = qos_factor or {}
    df = jobs.with_columns(
        (pl.col("run_s").fill_null(0.0) * runtime_scale).alias("run_s"),
        (pl.col("limit_s") * runtime_scale).alias("limit_s"),
        pl.col("qos").replace_strict(q, default=0.0, return_dtype=pl.Float64).alias("qos_factor"))
    return Workload.from_columns(df.select("job_uid", "submit_s", "run_s", "limit_s", "gpus_per_node", "nnodes",
                                           "pool", "partition", "account", "team", "qos_factor"))


def resample_days(jobs: pl.DataFrame, days: int, scale: float, seed: int) -> pl.DataFrame:
    """Demand what-if: each of the ``days`` day slots receives whole observed days drawn with replacement,
    floor(scale) of them plus one more with probability frac(scale), shifted into the slot; jobs keep their
    time of day. scale=1 is a bootstrap of days (the replication's noise)."""
    rng = np.random.default_rng(seed)
    day_of = (jobs["submit_s"].to_numpy() // DAY).astype(np.int64)
    parts = []
    uid = 0
    for slot in range(days):
        k = int(np.floor(scale)) + (1 if rng.random() < scale - np.floor(scale) else 0)
        for _ in range(k):
            src = int(rng.integers(0, days))
            d = jobs.filter(pl.Series(day_of == src))
            if d.height == 0:
                continue
            d = d.with_columns((pl.col("submit_s") + (slot - src) * DAY).alias("submit_s"),
                               pl.int_range(uid, uid + d.height, dtype=pl.Int64).alias("job_uid"))
            uid += d.height
            parts.append(d)
    if not parts:
        return jobs.head(0)
    return pl.concat(parts).sort("submit_s", "job_uid")


def load_events(con: duckdb.DuckDBPyConnection, cluster_obj: Cluster, t0: datetime, t1: datetime,
                cluster: str | None = None) -> np.ndarray:
    """Node outages overlapping [t0, t1) as simulator events (DOWN-like states kill and requeue jobs,
    DRAIN/MAINT only stop new ones). Outages that began before t0 start at 0."""
    df = _frame(con, """
        SELECT node, upper(state) AS state, greatest(epoch(start - $t0), 0)::DOUBLE AS s,
               CASE WHEN "end" IS NULL THEN NULL ELSE epoch("end" - $t0)::DOUBLE END AS e
        FROM node_events
        WHERE start < $t1 AND ("end" IS NULL OR "end" > $t0) AND ($c IS NULL OR cluster = $c)""",
                {"t0": t0, "t1": t1, "c": cluster})
    names = {n: i for i, n in enumerate(cluster_obj.node_names)}
    rows = []
    for node, state, s, e in df.iter_rows():
        if node not in names:
            continue
        kind = "down" if any(state.startswith(d) for d in DOWN_STATES) else "drain"
        rows.append((s, names[node], kind))
        if e is not None:
            rows.append((e, names[node], "up"))
    return node_events(cluster_obj, rows)
