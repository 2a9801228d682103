"""Build simulator inputs from the warehouse: the observed capacity (``nodes``), the observed workload
(``jobs`` + ``job_nodes``) and outages (``node_events``), and what-if transformations of the workload.

Times become seconds since ``t0`` (the window start, naive UTC); GPUs are counts.
"""
from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import numpy as np
import polars as pl

from ingest.warehouse import has_table
from models.definitions.expected_run_sql import expected_run_ctes
from models.definitions.jobs_sql import (PARTITION_POOL_SQL, PENDING_STATES, SPANS_SQL, array_tasks_sql, end_eff_sql,
                                         open_sql, pending_from_sql, req_gpus_sql, requested_pool_sql, sql_list)
from models.definitions.labels import ANY_POOL
from models.definitions.times import check_window, floor_day, parse_window
from models.simulation.simulate import RESERVATION_SCHEMA, Cluster, Workload, node_events

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


def data_start(con: duckdb.DuckDBPyConnection, cluster: str | None = None) -> datetime | None:
    """Where the accounting begins (naive UTC): ``cluster``'s first start (else submit), the earliest of every
    cluster's when None. Before it nothing is known, as after the horizon."""
    return con.execute(f"SELECT min(data_start) FROM ({SPANS_SQL}) WHERE $c IS NULL OR cluster = $c",
                       {"c": cluster}).fetchall()[0][0]


def horizon(con: duckdb.DuckDBPyConnection, cluster: str | None = None) -> datetime | None:
    """Where the accounting ends (naive UTC): ``cluster``'s horizon, the latest of every cluster's when None."""
    return con.execute(f"SELECT max(horizon) FROM ({SPANS_SQL}) WHERE $c IS NULL OR cluster = $c",
                       {"c": cluster}).fetchall()[0][0]


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
    """The GPU jobs the window [t0, t1) holds (seconds since t0; a pending array record one row per task):

    - the window's own: submitted in [t0, t1) and either run or still queued at the horizon (the end of the
      cluster's accounting). A job arrives when it became eligible (sacct's Eligible, after holds, dependencies,
      BeginTime, array throttles and requeue holds, none of which the simulator models), else at submit; its
      observed wait is counted from there (NULL while it is still queued: censored at the horizon).
    - ``carried``: submitted before t0 and still in the cluster at t0, so that the window starts from the
      cluster's state rather than from idle nodes: one running at t0 arrives at its observed start (a negative
      time) pinned to the nodes it held (``nodes``) and runs its whole run; one queued at t0 arrives at 0, its
      priority's age counted from when it entered the queue (``queued_s`` < 0; NULL for every other job).
      Carried jobs take capacity but are not the window's: no wait of theirs is measured.

    Run time (``run_s``): a finished job's elapsed time; a job not finished at the horizon runs its expected run
    time (models/definitions/expected_run_sql.py) and at least what it has run; ``estimated_s`` is the part of
    it not observed. Pool: a started job's typed GPU request, else the type of the first node it ran on; a queued
    one's requested pool (NULL: any). Partition: where it ran; a queued job listing several: the first.
    ``nodes``: the nodes a job running at t0 holds (it is pinned there), else NULL. ``reservation``: the advance
    reservation it ran (or waits) in, sacct's Reservation (``jobs.extra``), else NULL."""
    return _frame(con, _LOAD_JOBS_SQL.format(
        expected=expected_run_ctes(_RUNS_SQL.format(open=open_sql("j")),
                                   "SELECT job_uid, cluster, partition, timelimit_s, ran_s FROM held WHERE unfinished"),
        spans=SPANS_SQL, open=open_sql("j"), end_eff=end_eff_sql("s.horizon", "j"), queued=pending_from_sql("j"),
        pending=sql_list(PENDING_STATES), req_j=req_gpus_sql("j"), req=req_gpus_sql("h"),
        tasks=array_tasks_sql("h"), asked=requested_pool_sql("h", "pp"), any_pool=ANY_POOL, pp=PARTITION_POOL_SQL),
        {"t0": t0, "t1": t1, "c": cluster})


#: The finished runs the expected run time of a job not finished is estimated from (every GPU job's).
_RUNS_SQL = """SELECT cluster, coalesce(partition, '') AS partition,
           coalesce(elapsed_s, epoch(j."end" - start)) AS elapsed_s
    FROM jobs j WHERE start IS NOT NULL AND NOT {open} AND (ngpus > 0 OR coalesce(req_gpus, 0) > 0)
      AND ($c IS NULL OR cluster = $c)"""

_LOAD_JOBS_SQL = """
WITH spans AS ({spans}),
held AS (   -- the jobs the window holds, with their arrival, horizon and seconds run by the horizon
    SELECT j.*, s.horizon AS hz, least(greatest({queued}, j.submit), j.start) AS arrive,   -- the queue's entry
           j.submit < $t0 AS carried, j.start IS NULL OR {open} AS unfinished,   -- queued, or running at the horizon
           CASE WHEN j.start IS NOT NULL THEN epoch(s.horizon) - epoch(j.start) ELSE 0 END AS ran_s,
           split_part(coalesce(j.partition, ''), ',', 1) AS partition_
    FROM jobs j JOIN spans s USING (cluster)
    WHERE ($c IS NULL OR j.cluster = $c) AND j.submit < $t1
      AND ((j.start IS NOT NULL AND j.ngpus > 0)                                          -- ran
           OR (j.start IS NULL AND j."end" IS NULL AND j.state IN {pending} AND {req_j} > 0))  -- queued at the horizon
      AND (j.submit >= $t0                                                                -- the window's
           OR coalesce(j.start, s.horizon) >= $t0 OR {end_eff} > $t0)   -- in the cluster at t0
), {expected}, ran_on AS (   -- one scan of job_nodes: a node's GPU type, and every node (a job running at t0
                              -- stays on its nodes)
    SELECT jn.job_uid, any_value(n.gpu_type) AS node_pool, list_sort(list_distinct(list(jn.node))) AS nodes
    FROM job_nodes jn LEFT JOIN nodes n ON n.cluster = jn.cluster AND n.node = jn.node
    WHERE jn.job_uid IN (SELECT job_uid FROM held) GROUP BY jn.job_uid
), rows AS (
    SELECT h.job_uid, h.carried,
           CASE WHEN NOT h.carried THEN epoch(coalesce(h.arrive, h.submit) - $t0)
                WHEN h.start < $t0 THEN epoch(h.start - $t0) ELSE 0 END::DOUBLE AS submit_s,
           CASE WHEN h.carried AND coalesce(h.start, $t0) >= $t0 THEN epoch(h.arrive - $t0) END::DOUBLE AS queued_s,
           CASE WHEN NOT h.carried AND h.start IS NOT NULL THEN epoch(h.start - h.arrive) END::DOUBLE
               AS observed_wait_s,
           CASE WHEN NOT h.unfinished THEN coalesce(h.elapsed_s, epoch(h."end" - h.start))
                ELSE greatest(h.ran_s, coalesce(e.est_s, 0)) END::DOUBLE AS run_s,
           CASE WHEN NOT h.unfinished THEN 0 ELSE greatest(coalesce(e.est_s, 0) - h.ran_s, 0) END::DOUBLE
               AS estimated_s,
           h.timelimit_s::DOUBLE AS limit_s, greatest(coalesce(h.nnodes, 1), 1) AS nnodes,
           CASE WHEN h.start IS NOT NULL THEN h.ngpus ELSE {req} END AS gpus,
           CASE WHEN h.start IS NOT NULL THEN coalesce(CASE WHEN h.gpu_type LIKE '%+%' THEN NULL ELSE h.gpu_type END,
                                                       f.node_pool)
                ELSE nullif(CASE WHEN h.gpu_type LIKE '%+%' THEN '{any_pool}' ELSE {asked} END, '{any_pool}')
           END AS pool,
           nullif(h.partition_, '') AS partition, coalesce(h.account, 'default') AS account, h.team, h.qos, h.state,
           CASE WHEN h.start IS NULL THEN {tasks} ELSE 1 END AS tasks,
           CASE WHEN h.carried AND h.start < $t0 THEN f.nodes END AS nodes,
           nullif(json_extract_string(h.extra, '$.reservation'), '') AS reservation
    FROM held h LEFT JOIN expected e USING (job_uid) LEFT JOIN ran_on f USING (job_uid)
    LEFT JOIN ({pp}) pp ON pp.cluster = h.cluster AND pp.partition = h.partition_
)
SELECT CASE WHEN k = 0 THEN job_uid ELSE -(job_uid * 100000 + k) END AS job_uid,   -- uids are >= 0: a task's < 0
       submit_s, queued_s, observed_wait_s, run_s, estimated_s, limit_s, nnodes, gpus / nnodes AS gpus_per_node, gpus,
       pool, partition, account, team, qos, state, carried, nodes, reservation
FROM rows, range(tasks::BIGINT) t(k)
ORDER BY submit_s, job_uid"""


def to_workload(jobs: pl.DataFrame, qos_factor: dict[str, float] | None = None, runtime_scale: float = 1.0
                ) -> Workload:
    """The simulator's workload from ``load_jobs`` rows; run time and limit scaled by ``runtime_scale``."""
    q = qos_factor or {}
    df = jobs.with_columns(
        (pl.col("run_s").fill_null(0.0) * runtime_scale).alias("run_s"),
        (pl.col("limit_s") * runtime_scale).alias("limit_s"),
        pl.col("qos").replace_strict(q, default=0.0, return_dtype=pl.Float64).alias("qos_factor"))
    cols = ["job_uid", "submit_s", "run_s", "limit_s", "gpus_per_node", "nnodes", "pool", "partition", "account",
            "team", "qos_factor"] + [c for c in ("nodes", "queued_s", "reservation") if c in df.columns]
    return Workload.from_columns(df.select(cols))


def resample_days(jobs: pl.DataFrame, days: int, scale: float, seed: int, whole: int | None = None
                  ) -> pl.DataFrame:
    """Demand what-if: each of the ``days`` day slots receives whole observed days drawn with replacement,
    floor(scale) of them plus one more with probability frac(scale), shifted into the slot; jobs keep their
    time of day. scale=1 is a bootstrap of days (the replication's noise). Days are drawn from the first
    ``whole`` (default all): a last day cut by the horizon holds only its first hours of arrivals, and drawn
    into a whole slot it would make that day light. Jobs ``carried`` in from before the window are the state
    it starts from, and jobs in an advance ``reservation`` belong to its dates (moved to another day they could
    not run in it): both kept once, as they are."""
    rng = np.random.default_rng(seed)
    whole = days if whole is None else max(1, min(whole, days))
    fixed = pl.lit(False)
    for c in ("carried", "reservation"):
        if c in jobs.columns:
            fixed = fixed | (pl.col(c).is_not_null() if c == "reservation" else pl.col(c))
    carried = jobs.filter(fixed)
    jobs = jobs.filter(~fixed)
    day_of = (jobs["submit_s"].to_numpy() // DAY).astype(np.int64)
    parts = [carried.with_columns(pl.int_range(0, carried.height, dtype=pl.Int64).alias("job_uid"))]
    uid = carried.height
    for slot in range(days):
        k = int(np.floor(scale)) + (1 if rng.random() < scale - np.floor(scale) else 0)
        for _ in range(k):
            src = int(rng.integers(0, whole))
            d = jobs.filter(pl.Series(day_of == src))
            if d.height == 0:
                continue
            d = d.with_columns((pl.col("submit_s") + (slot - src) * DAY).alias("submit_s"),
                               pl.int_range(uid, uid + d.height, dtype=pl.Int64).alias("job_uid"))
            uid += d.height
            parts.append(d)
    return pl.concat(parts).sort("submit_s", "job_uid")


def load_reservations(con: duckdb.DuckDBPyConnection, t0: datetime, t1: datetime, cluster: str | None = None
                      ) -> pl.DataFrame:
    """Advance reservations overlapping [t0, t1) (``reservations``, from ``ingest reservations``) for ``simulate``:
    name, start_s, end_s (seconds since t0) and nodes (the expanded node names); empty without the table. Whole
    nodes: a reservation of part of a node's GPUs (TRES gres/gpu) keeps the whole node from other jobs."""
    empty = pl.DataFrame(schema=RESERVATION_SCHEMA)
    if not has_table(con, "reservations"):
        return empty
    df = _frame(con, """
        SELECT name, epoch(start - $t0)::DOUBLE AS start_s, epoch("end" - $t0)::DOUBLE AS end_s,
               list_filter(list_transform(string_split(coalesce(nodes, ''), ','), lambda x: trim(x)), lambda x: x <> '')
                   AS nodes
        FROM reservations
        WHERE start < $t1 AND "end" > $t0 AND "end" > start AND ($c IS NULL OR cluster = $c)
        ORDER BY start, name""", {"t0": t0, "t1": t1, "c": cluster})
    return df if df.height else empty


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
