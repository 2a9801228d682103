"""GPU utilization (allocation) per time bucket: capacity, unavailable, allocated and idle GPU-hours, the
allocation ratio, GPU time idle while eligible jobs waited, and Slurm's sreport categories beside them as
``sreport -t hours -T gres/gpu cluster utilization`` computes them, so an admin can reconcile the two.

Reads only the occupancy timeline (:mod:`models.metrics.timeline`). Definitions and sources: docs/METRICS.md
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
import polars as pl

from ingest.warehouse import frame
from models.definitions.jobs_sql import team_sql
from models.definitions.labels import ALL, CAPACITY_DIMS, DEMAND_DIMS, normalise_dims
from models.definitions.nodes_sql import explode_partitions
from models.definitions.times import bucket_interval, bucket_sql, check_bucket
from models.metrics import timeline

ALL_DIMS = CAPACITY_DIMS + DEMAND_DIMS
TOTAL_LABEL = ALL

TOTAL_COLUMNS = ["hours", "capacity_gpu_h", "unavailable_gpu_h", "available_gpu_h", "allocated_gpu_h", "idle_gpu_h",
                 "allocation_ratio", "beyond_capacity_gpu_h", "pending_gpu_h", "planned_gpu_h", "sreport_allocated",
                 "sreport_down",
                 "sreport_planned_down", "sreport_idle", "sreport_planned", "sreport_reported"]


def _cap_key(dims: list[str]) -> list[str]:
    return [d for d in dims if d in CAPACITY_DIMS]


def _inner_keys(cap: list[str]) -> list[str]:
    return ["cluster", *[d for d in cap if d != "cluster"]]


def _hour_groups_sql(cap: list[str], hourly_src: str, pending_src: str) -> str:
    """Per hour, cluster and capacity group: the hourly rollup, with pend_s (GPU-seconds of eligible waits of the
    jobs that could run in the group) and planned = min(idle, pend_s), capped per hour as slurmdbd caps its
    Planned."""
    inner = _inner_keys(cap)
    src = explode_partitions(hourly_src) if "partition" in cap else hourly_src
    dims_sel = ", ".join(timeline.capacity_dim_sql([d for d in inner if d != "cluster"]))
    on = " AND ".join(f"p.{k} = hg.{k}" for k in inner)
    return f"""
    hg AS (
      SELECT hour, cluster{', ' + dims_sel if dims_sel else ''}, sum(capacity_s) AS cap, sum(alloc_s) AS alloc,
             sum(alloc_in_s) AS ain, sum(idle_s) AS idle, sum(down_s) AS down, sum(planned_down_s) AS pdown
      FROM ({src}) GROUP BY ALL),
    pr AS ({pending_src}),
    {_request_groups_sql(cap)},
    pend AS (SELECT {', '.join('rg.' + k for k in inner)}, pr.hour, sum(pr.pend_s) AS pend_s
             FROM pr JOIN rg ON rg.cluster = pr.cluster AND rg.r_partition IS NOT DISTINCT FROM pr.partition
                            AND rg.r_gpu_type IS NOT DISTINCT FROM pr.gpu_type
             GROUP BY ALL),
    hp AS (
      SELECT hg.*, coalesce(p.pend_s, 0) AS pend_s, least(hg.idle, coalesce(p.pend_s, 0)) AS planned
      FROM hg LEFT JOIN pend p ON p.hour = hg.hour AND {on})"""


def _request_groups_sql(cap: list[str]) -> str:
    """rg(cluster, partition, gpu_type -> capacity group): the groups a request could run in. Partition: the
    partitions it named; pool: its typed GPU request, else every pool of those partitions."""
    others = [d for d in cap if d != "cluster"]
    if not others:
        return "rg AS (SELECT DISTINCT cluster, partition AS r_partition, gpu_type AS r_gpu_type FROM pr)"
    cells = explode_partitions(
        "SELECT DISTINCT cluster, gpu_type, partitions FROM tl_node_state WHERE avail <> 'absent'")
    sel = ", ".join(f"c.{d}" for d in others)
    return f"""cells AS (SELECT cluster, coalesce(gpu_type, '(untyped)') AS gpu_type, partition FROM ({cells})),
    rg AS (
      SELECT DISTINCT q.cluster, q.partition AS r_partition, q.gpu_type AS r_gpu_type, {sel}
      FROM (SELECT DISTINCT cluster, partition, gpu_type FROM pr) q JOIN cells c ON c.cluster = q.cluster
        AND (q.partition IS NULL OR list_contains(string_split(q.partition, ','), c.partition))
        AND (q.gpu_type IS NULL OR list_contains(string_split(q.gpu_type, '+'), c.gpu_type)))"""


def _totals_sql(cap: list[str], bucket: str, hourly_src: str, pending_src: str) -> str:
    grp = ["bucket", *cap]
    keys = ", ".join(grp)
    span_join = "ON sp.cluster = hp.cluster" if "cluster" in cap else "ON true"
    return f"""
    WITH {_hour_groups_sql(cap, hourly_src, pending_src)},
    sp AS (SELECT cluster, greatest(data_start, $s) AS a, least(horizon, $e) AS b FROM tl_clusters),
    tot AS (
      SELECT {bucket_sql(bucket, 'hp.hour')} AS bucket{''.join(', hp.' + d for d in cap)},
             sum(cap) AS cap, sum(down + pdown) AS unav, sum(alloc) AS alloc, sum(ain) AS ain, sum(idle) AS idle,
             sum(down) AS down, sum(pdown) AS pdown, sum(planned) AS planned, sum(pend_s) AS pend
      FROM hp GROUP BY ALL),
    hrs AS (
      SELECT t.bucket{''.join(', t.' + d for d in cap)},
             max(greatest(0, epoch_us(least(sp.b, t.bucket + {bucket_interval(bucket)}))
                             - epoch_us(greatest(sp.a, t.bucket))) / 3.6e9) AS hours
      FROM tot t JOIN sp {span_join.replace('hp.', 't.')} GROUP BY ALL)
    SELECT tot.bucket{''.join(', tot.' + d for d in cap)}, hrs.hours,
           cap / 3600 AS capacity_gpu_h, unav / 3600 AS unavailable_gpu_h, (cap - unav) / 3600 AS available_gpu_h,
           alloc / 3600 AS allocated_gpu_h, idle / 3600 AS idle_gpu_h,
           CASE WHEN cap - unav > 0 THEN ain / (cap - unav) END AS allocation_ratio,
           (alloc - ain) / 3600 AS beyond_capacity_gpu_h, pend / 3600 AS pending_gpu_h, planned / 3600 AS planned_gpu_h,
           ain / 3600 AS sreport_allocated, down / 3600 AS sreport_down, pdown / 3600 AS sreport_planned_down,
           idle / 3600 AS sreport_idle, 0.0::DOUBLE AS sreport_planned, cap / 3600 AS sreport_reported
    FROM tot JOIN hrs USING ({keys})
    ORDER BY {keys}"""


def _demand_sql(cap: list[str], dem: list[str], bucket: str, demand_src: str) -> str:
    src = f"SELECT * FROM ({demand_src})"
    if "partition" in cap:
        src = explode_partitions(src)
    dem_sel = [f"{team_sql('')} AS team" if d == "team" else f'"{d}"' for d in dem]
    return f"""
    SELECT {bucket_sql(bucket, 'hour')} AS bucket, {', '.join(timeline.capacity_dim_sql(cap) + dem_sel)},
           sum(gpu_s) / 3600 AS allocated_gpu_h
    FROM ({src}) GROUP BY ALL"""


def by_bucket(con: duckdb.DuckDBPyConnection, start=None, end=None, bucket: str = "day",
              by: str | Iterable[str] | None = ("cluster",)) -> pl.DataFrame:
    """Utilization per ``bucket`` (hour/day/week/month, UTC) of [start, end), grouped ``by`` any of
    cluster, gpu_type (pool), partition, team, account, user, job_partition, qos. GPU-hours throughout.

    The window defaults to the whole data span and is clipped to each cluster's [data_start, horizon)."""
    dims = normalise_dims(by, ALL_DIMS)
    bucket = check_bucket(bucket)
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    cap, dem = _cap_key(dims), [d for d in dims if d not in CAPACITY_DIMS]
    hourly_src, params = timeline.hourly_sql(*win)
    pending_src, p2 = timeline.pending_sql(*win)
    demand_src, p3 = timeline.demand_sql(*win, bucket)
    params.update({"s": win[0], "e": win[1], **p2, **p3})
    totals = frame(con, _totals_sql(cap, bucket, hourly_src, pending_src), params)
    if not dem:
        return totals
    demand = frame(con, _demand_sql(cap, dem, bucket, demand_src), params)
    keys = ["bucket", *cap]
    avail = totals.select(*keys, pl.col("available_gpu_h").alias("_avail"))
    demand = (demand.join(avail, on=keys, how="left", nulls_equal=True)
              .with_columns(pl.when(pl.col("_avail") > 0).then(pl.col("allocated_gpu_h") / pl.col("_avail"))
                            .alias("share_of_available"))   # no available capacity there: no share, not infinity
              .drop("_avail").with_columns(pl.lit(1).alias("_order")))
    totals = totals.with_columns(*[pl.lit(TOTAL_LABEL).alias(d) for d in dem], pl.lit(0).alias("_order"))
    out = pl.concat([totals, demand], how="diagonal_relaxed")
    cols = ["bucket", *cap, *dem, *TOTAL_COLUMNS[:6], "share_of_available", *TOTAL_COLUMNS[6:]]
    return (out.sort([*keys, "_order", "allocated_gpu_h"], descending=[False] * len(keys) + [False, True],
                     nulls_last=True).select(cols))
