"""GPU utilization (allocation) per time bucket: capacity, unavailable, allocated and idle GPU-hours, the
allocation ratio, GPU time idle while eligible jobs waited, and Slurm's sreport categories beside them as
``sreport -t hours -T gres/gpu cluster utilization`` computes them, so an admin can reconcile the two.

Reads only the occupancy timeline (:mod:`models.timeline`). Definitions and sources: docs/METRICS.md
("Utilization"). Rows:

- grouped only by capacity columns (cluster, gpu_type/pool, partition): one row per bucket and group with every
  column; ``allocated - beyond_capacity + idle + unavailable = capacity`` in every row;
- grouped also by demand columns (team, account, user, job_partition, qos): per bucket and capacity group, one
  *total* row whose demand columns read ``(all)`` and carry every column (as sreport's root line does), then one
  row per demand group with only ``allocated_gpu_h`` and ``share_of_available``. Capacity and idle belong to
  nodes, not to teams, so they are never split by team: demand rows sum to the total row's allocated.
"""
from __future__ import annotations

from typing import Iterable

import duckdb
import numpy as np
import polars as pl

from models import timeline
from models.intervals import hour_integrals

DEMAND_DIMS = ("team", "account", "user", "job_partition", "qos")
ALL_DIMS = timeline.CAPACITY_DIMS + DEMAND_DIMS
TOTAL_LABEL = "(all)"

_DEMAND_SQL = {"team": "coalesce(j.team, '(unmapped)')", "account": "j.account", "user": 'j."user"',
               "job_partition": "j.partition", "qos": "j.qos"}

TOTAL_COLUMNS = ["hours", "capacity_gpu_h", "unavailable_gpu_h", "available_gpu_h", "allocated_gpu_h", "idle_gpu_h",
                 "allocation_ratio", "beyond_capacity_gpu_h", "pending_gpu_h", "planned_gpu_h", "sreport_allocated",
                 "sreport_down",
                 "sreport_planned_down", "sreport_idle", "sreport_planned", "sreport_reported"]


def _cap_key(dims: list[str]) -> list[str]:
    return [d for d in dims if d in timeline.CAPACITY_DIMS]


def _inner_keys(cap: list[str]) -> list[str]:
    return ["cluster", *[d for d in cap if d != "cluster"]]


def _pending_sql(cap: list[str]) -> str:
    """Eligible waits (epoch microseconds, clipped to the window and the data span) of GPU jobs, once per
    capacity group they could run in."""
    keys = ", ".join(f"jg.{k}" for k in _inner_keys(cap))
    return f"""
    WITH pj AS (
      SELECT j.job_uid, j.cluster, j.partition, j.gpu_type, coalesce(nullif(j.req_gpus, 0), j.ngpus) AS g,
             greatest(j.eligible, $s, c.data_start) AS p0,
             least(coalesce(j.start, j."end", CASE WHEN j.state = 'PENDING' THEN c.horizon END), c.horizon, $e) AS p1
      FROM jobs j JOIN tl_clusters c ON c.cluster = j.cluster
      WHERE j.eligible IS NOT NULL AND j.eligible < $e AND coalesce(j.start, c.horizon) > $s),
    pj2 AS (SELECT * FROM pj WHERE g > 0 AND p1 > p0){_job_groups_sql(cap)}
    SELECT {keys}, epoch_us(pj2.p0) AS p0, epoch_us(pj2.p1) AS p1, pj2.g::DOUBLE AS g
    FROM pj2 JOIN jg ON jg.job_uid = pj2.job_uid"""


def _pending_hourly(con, cap: list[str], params: dict) -> pl.DataFrame:
    """Pending GPU-seconds per hour and capacity group (a long wait is one row, integrated hour by hour in
    numpy: splitting waits into job-hours in SQL costs a row per hour of every wait)."""
    keys = _inner_keys(cap)
    waits = timeline.frame(con, _pending_sql(cap), params)
    schema = {**{k: pl.String for k in keys}, "hour": pl.Datetime("us"), "pend_s": pl.Float64}
    if waits.is_empty():
        return pl.DataFrame(schema=schema)
    groups = waits.select(keys).unique().with_row_index("_g")
    waits = waits.join(groups, on=keys, how="left", nulls_equal=True)
    g, hour, out = hour_integrals(waits["_g"].to_numpy().astype(np.int64), waits["p0"].to_numpy(),
                                  waits["p1"].to_numpy(), {"pend_s": waits["g"].to_numpy()})
    frame = pl.DataFrame({"_g": g.astype(np.uint32), "hour": pl.Series(hour).cast(pl.Datetime("us")),
                          "pend_s": out["pend_s"]})
    return frame.join(groups.with_columns(pl.col("_g").cast(pl.UInt32)), on="_g").select(*keys, "hour", "pend_s")


def _hour_groups_sql(cap: list[str], hourly_src: str) -> str:
    """Per hour, cluster and capacity group: the hourly rollup, with planned = min(idle, eligible pending
    GPU-seconds (temp table _pend) of the jobs that could run in the group), capped per hour as slurmdbd caps
    its Planned."""
    inner = _inner_keys(cap)
    src = timeline.explode_partitions(hourly_src) if "partition" in cap else hourly_src
    dims_sel = ", ".join(timeline.capacity_dim_sql([d for d in inner if d != "cluster"]))
    return f"""
    hg AS (
      SELECT hour, cluster{', ' + dims_sel if dims_sel else ''}, sum(capacity_s) AS cap, sum(alloc_s) AS alloc,
             sum(alloc_in_s) AS ain, sum(idle_s) AS idle, sum(down_s) AS down, sum(planned_down_s) AS pdown
      FROM ({src}) GROUP BY ALL),
    hp AS (
      SELECT hg.*, coalesce(p.pend_s, 0) AS pend_s, least(hg.idle, coalesce(p.pend_s, 0)) AS planned
      FROM hg LEFT JOIN _pend p ON p.hour = hg.hour {''.join(f' AND p.{k} = hg.{k}' for k in inner)})"""


def _job_groups_sql(cap: list[str]) -> str:
    """jg(job_uid, cluster, capacity dims): the groups a pending job could run in. Partition: the partitions it
    was submitted to; pool: its typed GPU request, else every pool of those partitions."""
    others = [d for d in cap if d != "cluster"]
    if not others:
        return ", jg AS (SELECT job_uid, cluster FROM pj2)"
    cells = timeline.explode_partitions(
        "SELECT DISTINCT cluster, gpu_type, partitions FROM tl_node_state WHERE avail <> 'absent'")
    sel = ", ".join(f"c.{d}" for d in others)
    return f""",
    cells AS (SELECT cluster, coalesce(gpu_type, '(untyped)') AS gpu_type, partition FROM ({cells})),
    jg AS (
      SELECT DISTINCT pj2.job_uid, pj2.cluster, {sel} FROM pj2 JOIN cells c ON c.cluster = pj2.cluster
        AND (pj2.partition IS NULL OR list_contains(string_split(pj2.partition, ','), c.partition))
        AND (pj2.gpu_type IS NULL OR list_contains(string_split(pj2.gpu_type, '+'), c.gpu_type)))"""


def _totals_sql(cap: list[str], bucket: str, hourly_src: str) -> str:
    grp = ["bucket", *cap]
    keys = ", ".join(grp)
    span_join = "ON sp.cluster = hp.cluster" if "cluster" in cap else "ON true"
    return f"""
    WITH {_hour_groups_sql(cap, hourly_src)},
    sp AS (SELECT cluster, greatest(data_start, $s) AS a, least(horizon, $e) AS b FROM tl_clusters),
    tot AS (
      SELECT {timeline.bucket_sql(bucket, 'hp.hour')} AS bucket{''.join(', hp.' + d for d in cap)},
             sum(cap) AS cap, sum(down + pdown) AS unav, sum(alloc) AS alloc, sum(ain) AS ain, sum(idle) AS idle,
             sum(down) AS down, sum(pdown) AS pdown, sum(planned) AS planned, sum(pend_s) AS pend
      FROM hp GROUP BY ALL),
    hrs AS (
      SELECT t.bucket{''.join(', t.' + d for d in cap)},
             max(greatest(0, epoch_us(least(sp.b, t.bucket + {timeline.bucket_interval(bucket)}))
                             - epoch_us(greatest(sp.a, t.bucket))) / 3.6e9) AS hours
      FROM tot t JOIN sp {span_join.replace('hp.', 't.')} GROUP BY ALL)
    SELECT tot.bucket{''.join(', tot.' + d for d in cap)}, hrs.hours,
           cap / 3600 AS capacity_gpu_h, unav / 3600 AS unavailable_gpu_h, (cap - unav) / 3600 AS available_gpu_h,
           alloc / 3600 AS allocated_gpu_h, idle / 3600 AS idle_gpu_h,
           CASE WHEN cap - unav > 0 THEN ain / (cap - unav) END AS allocation_ratio,
           (alloc - ain) / 3600 AS beyond_capacity_gpu_h, pend / 3600 AS pending_gpu_h, planned / 3600 AS planned_gpu_h,
           ain / 3600 AS sreport_allocated, down / 3600 AS sreport_down, pdown / 3600 AS sreport_planned_down,
           idle / 3600 AS sreport_idle, 0.0 AS sreport_planned, cap / 3600 AS sreport_reported
    FROM tot JOIN hrs USING ({keys})
    ORDER BY {keys}"""


def _demand_sql(cap: list[str], dem: list[str], bucket: str) -> str:
    src = timeline.job_alloc_in_buckets_sql(bucket)
    if "partition" in cap:
        src = timeline.explode_partitions(src)
    cap_sel = timeline.capacity_dim_sql(cap, "a")
    dem_sel = [f"{_DEMAND_SQL[d]} AS {d}" for d in dem]
    return f"""
    SELECT a.bucket, {', '.join(cap_sel + dem_sel)}, sum(a.gpu_s) / 3600 AS allocated_gpu_h
    FROM ({src}) a JOIN jobs j ON j.job_uid = a.job_uid
    GROUP BY ALL"""


def by_bucket(con: duckdb.DuckDBPyConnection, start=None, end=None, bucket: str = "day",
              by: str | Iterable[str] | None = ("cluster",)) -> pl.DataFrame:
    """Utilization per ``bucket`` (hour/day/week/month, UTC) of [start, end), grouped ``by`` any of
    cluster, gpu_type (pool), partition, team, account, user, job_partition, qos. GPU-hours throughout.

    The window defaults to the whole data span and is clipped to each cluster's [data_start, horizon)."""
    timeline.ensure_current(con)
    dims = timeline.normalise_dims(by, ALL_DIMS)
    bucket = timeline.check_bucket(bucket)
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    cap, dem = _cap_key(dims), [d for d in dims if d not in timeline.CAPACITY_DIMS]
    hourly_src, params = timeline.hourly_sql(*win)
    params.update({"s": win[0], "e": win[1]})
    con.register("_pend", _pending_hourly(con, cap, params))
    try:
        totals = timeline.frame(con, _totals_sql(cap, bucket, hourly_src), params)
    finally:
        con.unregister("_pend")
    if not dem:
        return totals
    demand = timeline.frame(con, _demand_sql(cap, dem, bucket), params)
    keys = ["bucket", *cap]
    avail = totals.select(*keys, pl.col("available_gpu_h").alias("_avail"))
    demand = (demand.join(avail, on=keys, how="left", nulls_equal=True)
              .with_columns((pl.col("allocated_gpu_h") / pl.col("_avail")).alias("share_of_available"))
              .drop("_avail").with_columns(pl.lit(1).alias("_order")))
    totals = totals.with_columns(*[pl.lit(TOTAL_LABEL).alias(d) for d in dem], pl.lit(0).alias("_order"))
    out = pl.concat([totals, demand], how="diagonal_relaxed")
    cols = ["bucket", *cap, *dem, *TOTAL_COLUMNS[:6], "share_of_available", *TOTAL_COLUMNS[6:]]
    return (out.sort([*keys, "_order", "allocated_gpu_h"], descending=[False] * len(keys) + [False, True],
                     nulls_last=True).select(cols))
