"""The occupancy timeline: who held which GPUs when, and what capacity there was. The stable API.

Everything else (utilization, fragmentation, chargeback, forecasts, dashboards) reads the timeline through the
functions of this module, never through the raw marts, so their numbers agree to the GPU-second.

Definitions (docs/METRICS.md has the full text):

- **data span** of a cluster: ``[data_start, horizon)``. ``horizon`` is the latest time the warehouse has
  accounting for (the latest submit/start/end, or the end of the last live sacct window). A job still running
  holds its GPUs up to the horizon, never beyond. ``data_start`` is the earliest job start. Nothing is counted
  outside the span: capacity before our records, or after the horizon, is not "idle", it is unknown.
- **capacity**: GPUs of the nodes the inventory (``nodes`` with validity) lists, over time.
- **unavailable**: free GPUs on nodes that ``node_events`` marks DOWN/DRAIN/FAIL... (sreport *Down*) or
  MAINT/POWERED_DOWN... (sreport *PlannedDown*). GPUs still held by jobs on a draining node stay *allocated*.
- **allocated**: GPUs held by jobs (``jobs`` x ``job_nodes``), from start to end (or the horizon).
- **idle** = capacity - unavailable - allocated (allocated capped at the node's GPUs; the excess, on nodes the
  inventory lacks or says are smaller, is reported as ``beyond_capacity``, never hidden).

Units: timestamps naive UTC; intervals half-open; GPU-seconds in tables ending ``_s``, GPU-hours in ``_gpu_h``.
All functions take an open warehouse connection and return Polars DataFrames (or a DuckDB relation where noted).
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable, Sequence

import duckdb
import polars as pl

from ingest.warehouse import frame, has_table, parse_time
from models.definitions.jobs_sql import (end_eff_sql, open_sql, pending_from_sql, pending_until_sql,
                                         req_gpus_sql)
from models.definitions.labels import CAPACITY_DIMS, UNTYPED, normalise_dims
from models.definitions.nodes_sql import explode_partitions
from models.definitions.timeline_sql import SEGMENTS_SQL
from models.definitions.times import (bucket_sql, ceil_day, ceil_hour, check_window, floor_day,
                                      floor_hour)

# ---------------------------------------------------------------- span

def data_span(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per cluster: ``data_start`` and ``horizon`` (UTC) of the timeline."""
    return con.sql("SELECT cluster, data_start, horizon FROM tl_clusters ORDER BY cluster").pl()


def horizon(con: duckdb.DuckDBPyConnection, cluster: str | None = None) -> dt.datetime | None:
    """The data horizon (UTC): of ``cluster``, or with None the earliest over clusters (all are covered to it).

    None when the timeline is empty."""
    if cluster is None:
        return con.sql("SELECT min(horizon) FROM tl_clusters").fetchall()[0][0]
    rows = con.execute("SELECT horizon FROM tl_clusters WHERE cluster = ?", [cluster]).fetchall()
    return rows[0][0] if rows else None


def resolve_window(con, start=None, end=None) -> tuple[dt.datetime, dt.datetime] | None:
    """The window [start, end) with defaults: from the first data_start to the last horizon. None if no data."""
    lo, hi = con.sql("SELECT min(data_start), max(horizon) FROM tl_clusters").fetchall()[0]
    if lo is None:
        return None
    s, e = parse_time(start, "--from") or lo, parse_time(end, "--to") or hi
    check_window(s, e)
    return s, e


def whole_days(con, start, end, table: str, clip_start: bool = True, past_horizon: bool = True) -> dict | None:
    """The UTC days {w0, w1} whose daily rollup rows sum exactly to the window [start, end), or None.

    Daily rollups hold each cluster's days from its data start's midnight to its horizon (the last day partial).
    A bound must be a UTC midnight, or lie where the rollup and the computation it replaces agree anyway:
    ``clip_start`` - the quantity has nothing before the data start (allocations), so any start at or before
    it will do (else the start must be a midnight at or after every cluster's first day: waits before the data
    start are counted by the computation but not rolled up); ``past_horizon`` - nothing after the horizon
    either, so any end at or after the last horizon will do (else the end must not pass the first horizon:
    jobs still pending at the horizon are counted to the window's end by the computation). None also when the
    warehouse has no ``table`` (the rollup) yet."""
    if not has_table(con, table):
        return None
    spans = con.sql("SELECT data_start, horizon FROM tl_clusters WHERE horizon IS NOT NULL").fetchall()
    s, e = parse_time(start), parse_time(end)
    if not spans or s is None or e is None:
        return None
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    first_days, horizons = max(floor_day(a) for a, _ in spans), {b for _, b in spans}
    ok_start = (clip_start and s <= lo) or (s == floor_day(s) and (clip_start or s >= first_days))
    if past_horizon:
        ok_end = e >= hi or e == floor_day(e)
    else:
        ok_end = e <= min(horizons) and (e == floor_day(e) or horizons == {e})
    return {"w0": floor_day(s), "w1": e} if ok_start and ok_end else None


# ---------------------------------------------------------------- capacity side


def _edge_sql(n: int) -> str:
    return f"""
    SELECT cluster, gpu_type, partitions, date_trunc('hour', a) AS hour,
           sum(ov * gpus) AS capacity_s, sum(ov * alloc) AS alloc_s, sum(ov * ain) AS alloc_in_s,
           coalesce(sum(ov * (gpus - ain)) FILTER (WHERE avail = 'up'), 0) AS idle_s,
           coalesce(sum(ov * (gpus - ain)) FILTER (WHERE avail = 'down'), 0) AS down_s,
           coalesce(sum(ov * (gpus - ain)) FILTER (WHERE avail = 'planned_down'), 0) AS planned_down_s
    FROM (SELECT *, least(alloc, gpus) AS ain, greatest(t0, $ea{n}) AS a,
                 (epoch_us(least(t1, $eb{n})) - epoch_us(greatest(t0, $ea{n}))) / 1e6 AS ov
          FROM ({SEGMENTS_SQL}) WHERE t1 > $ea{n} AND t0 < $eb{n} AND $ea{n} < $eb{n})
    GROUP BY ALL"""


def hourly_sql(start: dt.datetime, end: dt.datetime) -> tuple[str, dict]:
    """SQL (and its parameters) for hourly capacity rows with tl_hourly's columns covering exactly [start, end):
    whole hours come from the mart, a partial first/last hour is computed from the segments."""
    h0 = ceil_hour(start)
    h1 = max(floor_hour(end), h0)
    params = {"h0": h0, "h1": h1, "ea1": start, "eb1": min(h0, end), "ea2": max(h1, start), "eb2": end}
    sql = ("SELECT cluster, gpu_type, partitions, hour, capacity_s, alloc_s, alloc_in_s, idle_s, down_s, "
           "planned_down_s FROM tl_hourly WHERE hour >= $h0 AND hour < $h1"
           f" UNION ALL {_edge_sql(1)} UNION ALL {_edge_sql(2)}")
    return sql, params


def demand_sql(start: dt.datetime, end: dt.datetime, bucket: str = "day") -> tuple[str, dict]:
    """SQL (and parameters) for GPU-seconds held per node class and job attributes covering exactly
    [start, end): cluster, hour (the start of the bucket's smallest part: a UTC day, or an hour for hour
    buckets), gpu_type, partitions (the node's), team, account, user, job_partition, qos, gpu_s.

    Whole days come from tl_demand_daily, a partial first/last day from the job pieces; hour buckets read the
    pieces (split by hour) for the whole window."""
    if bucket == "hour":
        d0 = d1 = floor_hour(start)
        edges = [(start, end, "hour")]
    else:
        d0 = ceil_day(start)
        d1 = max(floor_day(end), d0)
        edges = [(start, min(d0, end), "day"), (max(d1, start), end, "day")]
    params = {"dd0": d0, "dd1": d1}
    parts = ['SELECT cluster, day AS hour, gpu_type, partitions, team, account, "user", job_partition, qos, gpu_s '
             "FROM tl_demand_daily WHERE day >= $dd0 AND day < $dd1"]
    for n, (ea, eb, unit) in enumerate(edges, start=1):
        params.update({f"da{n}": ea, f"db{n}": eb})
        iv = "INTERVAL 1 HOUR" if unit == "hour" else "INTERVAL 1 DAY"
        parts.append(f"""
        SELECT a.cluster, p AS hour, a.gpu_type, a.partitions, j.team, j.account, j."user",
               j.partition AS job_partition, j.qos,
               sum(a.gpus * (epoch_us(least(a.t1, $db{n}, p + {iv})) - epoch_us(greatest(a.t0, $da{n}, p))) / 1e6)
                   AS gpu_s
        FROM (SELECT *, unnest(generate_series(date_trunc('{unit}', greatest(t0, $da{n})),
                                               least(t1, $db{n}) - INTERVAL 1 MICROSECOND, {iv})) AS p
              FROM tl_job_alloc WHERE t1 > $da{n} AND t0 < $db{n} AND $da{n} < $db{n}) a
        JOIN jobs j ON j.job_uid = a.job_uid GROUP BY ALL""")
    return " UNION ALL ".join(parts), params


def pending_sql(start: dt.datetime, end: dt.datetime) -> tuple[str, dict]:
    """SQL (and parameters) for hourly GPU-seconds of queue waits per request covering exactly [start, end):
    cluster, hour, partition (as the job named them), gpu_type (typed request, NULL = any), pend_s."""
    h0 = ceil_hour(start)
    h1 = max(floor_hour(end), h0)
    params = {"ph0": h0, "ph1": h1, "pa1": start, "pb1": min(h0, end), "pa2": max(h1, start), "pb2": end}
    edge = lambda n: f"""
        SELECT cluster, date_trunc('hour', $pa{n}) AS hour, partition, gpu_type,
               sum(g * (epoch_us(least(p1, $pb{n})) - epoch_us(greatest(p0, $pa{n}))) / 1e6) AS pend_s
        FROM (SELECT j.cluster, j.partition, j.gpu_type, {req_gpus_sql()} AS g,
                     greatest({pending_from_sql()}, c.data_start) AS p0, {pending_until_sql('c.horizon')} AS p1
              FROM jobs j JOIN tl_clusters c ON c.cluster = j.cluster
              WHERE {pending_from_sql()} < $pb{n} AND coalesce(j.start, j."end", c.horizon) > $pa{n})
        WHERE g > 0 AND p1 > $pa{n} AND p0 < $pb{n} AND $pa{n} < $pb{n} GROUP BY ALL"""   # noqa: E731
    sql = ("SELECT cluster, hour, partition, gpu_type, pend_s FROM tl_pending_hourly "
           f"WHERE hour >= $ph0 AND hour < $ph1 UNION ALL {edge(1)} UNION ALL {edge(2)}")
    return sql, params


def capacity_dim_sql(dims: Sequence[str], alias: str = "") -> list[str]:
    """SELECT expressions for capacity dims over a row with cluster/gpu_type/partition columns."""
    p = f"{alias}." if alias else ""
    return [f"{p}{d}" if d != "gpu_type" else f"coalesce({p}gpu_type, '{UNTYPED}') AS gpu_type" for d in dims]


def capacity(con: duckdb.DuckDBPyConnection, start=None, end=None, bucket: str = "day",
             by: str | Iterable[str] = ("cluster", "gpu_type")) -> pl.DataFrame:
    """Capacity per bucket and group of cluster/gpu_type(pool)/partition, in GPU-hours.

    Columns: bucket (UTC start), the ``by`` columns, capacity_gpu_h (installed), unavailable_gpu_h (free GPUs on
    down/drained/maintenance nodes), available_gpu_h (= capacity - unavailable).
    """
    dims = normalise_dims(by, CAPACITY_DIMS)
    win = resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    src, params = hourly_sql(*win)
    if "partition" in dims:
        src = explode_partitions(src)
    sel = ", ".join([bucket_sql(bucket, "hour") + " AS bucket", *capacity_dim_sql(dims)])
    grp = ", ".join(["bucket", *dims])
    q = f"""SELECT {sel}, sum(capacity_s) / 3600 AS capacity_gpu_h,
                   sum(down_s + planned_down_s) / 3600 AS unavailable_gpu_h,
                   (sum(capacity_s) - sum(down_s + planned_down_s)) / 3600 AS available_gpu_h
            FROM ({src}) GROUP BY {grp} ORDER BY {grp}"""
    return frame(con, q, params)


# ---------------------------------------------------------------- demand side

def job_gpu_seconds(con: duckdb.DuckDBPyConnection, start=None, end=None) -> pl.DataFrame:
    """GPU-seconds each job held inside [start, end), per pool it ran on.

    Columns: job_uid, cluster, gpu_type (the node's pool), gpu_seconds. Running jobs count up to the horizon.
    Jobs with no GPU time in the window are absent. Summed over jobs this equals utilization's allocated.
    """
    win = resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame(schema={"job_uid": pl.Int64, "cluster": pl.String, "gpu_type": pl.String,
                                    "gpu_seconds": pl.Float64})
    return frame(con, """
        SELECT job_uid, cluster, gpu_type,
               sum(gpus * (epoch_us(least(t1, $e)) - epoch_us(greatest(t0, $s))) / 1e6) AS gpu_seconds
        FROM tl_job_alloc WHERE t1 > $s AND t0 < $e
        GROUP BY ALL ORDER BY job_uid, gpu_type""", {"s": win[0], "e": win[1]})


def unplaced(con: duckdb.DuckDBPyConnection, start=None, end=None) -> dict:
    """Jobs that held GPUs inside [start, end) by their own records (ngpus > 0, start to end, clipped to the
    horizon) but have no allocation in the timeline because the records name no node (no nodelist: a trace
    without placement, as openb's pod lists). {"jobs", "gpu_h"}: what allocated GPU-hours leave out, so an allocation
    ratio computed without them understates. (Jobs on nodes the inventory lacks are in the timeline, as
    utilization's beyond_capacity_gpu_h.)"""
    win = resolve_window(con, start, end)
    if win is None:
        return {"jobs": 0, "gpu_h": 0.0}
    jobs, gpu_h = con.sql(f"""
        WITH r AS (SELECT j.job_uid, j.ngpus, greatest(j.start, $s) AS a,
                          least({end_eff_sql("c.horizon")}, $e) AS b
                   FROM jobs j JOIN tl_clusters c USING (cluster)
                   -- the nodelist test first: on a warehouse where every job names its nodes it finds nothing
                   -- at once (a year of 5M jobs: 2 ms, the anti-join alone 0.8 s)
                   WHERE j.ngpus > 0 AND j.start IS NOT NULL
                     AND (j.nodelist IS NULL OR j.nodelist IN ('', 'None assigned')))
        SELECT count(*), coalesce(sum(ngpus * (epoch_us(b) - epoch_us(a)) / 3.6e9), 0)
        FROM r WHERE b > a AND NOT EXISTS (SELECT 1 FROM tl_job_alloc t WHERE t.job_uid = r.job_uid)""",
                          params={"s": win[0], "e": win[1]}).fetchall()[0]
    return {"jobs": int(jobs), "gpu_h": float(gpu_h)}


def running_jobs(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Jobs whose allocation is still open at their cluster's horizon (``jobs_sql.open_sql``): job_uid, cluster,
    horizon. Their GPU-hours stop at the horizon; a listing shows them as running, not as ending there."""
    return con.sql(f"""
        SELECT j.job_uid, j.cluster, c.horizon FROM jobs j JOIN tl_clusters c USING (cluster)
        WHERE {open_sql("j")} AND j.start IS NOT NULL AND j.start < c.horizon ORDER BY j.job_uid""").pl()




def node_segments(con: duckdb.DuckDBPyConnection, start=None, end=None) -> duckdb.DuckDBPyRelation:
    """The per-node occupancy segments overlapping [start, end), clipped to it (a relation: it can be large).

    Columns: cluster, node, t0, t1, gpus, gpu_type, partitions, avail (up/down/planned_down/absent), alloc,
    whole_gpus, frac_milli, jobs."""
    win = resolve_window(con, start, end)
    s, e = win if win else (dt.datetime(1970, 1, 1), dt.datetime(1970, 1, 1))
    return con.sql(f"""SELECT g.cluster, n.node, greatest(g.t0, $s) AS t0, least(g.t1, $e) AS t1, g.gpus, g.gpu_type,
                              g.partitions, g.avail, g.alloc, g.whole_gpus, g.frac_milli, g.jobs
                       FROM ({SEGMENTS_SQL}) g JOIN tl_nodes n ON n.nid = g.nid
                       WHERE g.t1 > $s AND g.t0 < $e""", params={"s": s, "e": e})
