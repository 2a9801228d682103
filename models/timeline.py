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
import re
from typing import Iterable, Sequence

import duckdb
import polars as pl

from models import timeline_mart
from models.intervals import ceil_day, floor_day

BUCKETS = ("hour", "day", "week", "month")
#: Grouping columns that describe capacity (node properties) and their SQL over tl_* rows.
CAPACITY_DIMS = ("cluster", "gpu_type", "partition")
_DIM_ALIASES = {"pool": "gpu_type"}


def _used(sql: str, params: dict | None) -> dict:
    names = set(re.findall(r"\$(\w+)", sql))
    return {k: v for k, v in (params or {}).items() if k in names}


def frame(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> pl.DataFrame:
    """Run ``sql`` with the named $parameters it uses and return a Polars DataFrame."""
    return con.sql(sql, params=_used(sql, params)).pl()


def execute(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> None:
    """Execute a statement with the named $parameters it uses (DuckDB rejects unused ones)."""
    con.execute(sql, _used(sql, params))


# ---------------------------------------------------------------- freshness and span

def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> None:
    """Mart builder for :func:`models.refresh.mart_builders`: refresh the timeline marts (incremental)."""
    timeline_mart.build(con, full)


def ensure_current(con: duckdb.DuckDBPyConnection) -> None:
    """Refresh the timeline if an ingest ran since it was built (no-op on read-only connections/snapshots)."""
    try:
        stale = timeline_mart.is_stale(con)
    except duckdb.CatalogException:
        return
    if stale:
        try:
            timeline_mart.build(con)
        except (duckdb.InvalidInputException, duckdb.PermissionException):  # read-only snapshot: serve as is
            pass


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


def parse_time(value: str | dt.date | dt.datetime | None) -> dt.datetime | None:
    """'2024-05-01', '2024-05-01T06:00', a date or a datetime -> naive UTC datetime (aware ones converted)."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        t = value
    elif isinstance(value, dt.date):
        t = dt.datetime(value.year, value.month, value.day)
    else:
        try:
            t = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"cannot read time {value!r}: use YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] (UTC)") from exc
    if t.tzinfo is not None:
        t = t.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return t


def resolve_window(con, start=None, end=None) -> tuple[dt.datetime, dt.datetime] | None:
    """The window [start, end) with defaults: from the first data_start to the last horizon. None if no data."""
    lo, hi = con.sql("SELECT min(data_start), max(horizon) FROM tl_clusters").fetchall()[0]
    if lo is None:
        return None
    s, e = parse_time(start) or lo, parse_time(end) or hi
    if e <= s:
        raise ValueError(f"empty window: --from {s} is not before --to {e}")
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


def has_table(con, name: str) -> bool:
    """True when the warehouse has table ``name`` (a migration newer than the file may not have run)."""
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [name]).fetchall()[0][0])


def normalise_dims(by: str | Iterable[str] | None, allowed: Sequence[str]) -> list[str]:
    """'team,gpu_type' or a list -> validated list (aliases: pool = gpu_type)."""
    if by is None:
        return []
    items = [b.strip() for b in (by.split(",") if isinstance(by, str) else by)]
    out = []
    for b in items:
        if not b:
            continue
        b = _DIM_ALIASES.get(b, b)
        if b not in allowed:
            raise ValueError(f"cannot group by {b!r}: choose from {', '.join(allowed)}")
        if b not in out:
            out.append(b)
    return out


def check_bucket(bucket: str) -> str:
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}, not {bucket!r}")
    return bucket


# ---------------------------------------------------------------- capacity side

#: tl_node_segments with their class columns: cluster, nid, t0, t1, gpus, gpu_type, partitions, avail, alloc,
#: whole_gpus, frac_milli, jobs. Filters on t0/t1 given by callers are pushed below the join.
SEGMENTS_SQL = """
    SELECT s.cluster, s.nid, s.t0, s.t1, k.gpus, k.gpu_type, k.partitions, k.avail,
           s.whole_gpus + s.frac_milli / 1000.0 AS alloc, s.whole_gpus, s.frac_milli, s.jobs
    FROM tl_node_segments s JOIN tl_classes k ON k.class_id = s.class_id"""

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
    h0 = _ceil_hour(start)
    h1 = max(_floor_hour(end), h0)
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
        d0 = d1 = _floor_hour(start)
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
    """SQL (and parameters) for hourly GPU-seconds of eligible waits per request covering exactly [start, end):
    cluster, hour, partition (as the job named them), gpu_type (typed request, NULL = any), pend_s."""
    h0 = _ceil_hour(start)
    h1 = max(_floor_hour(end), h0)
    params = {"ph0": h0, "ph1": h1, "pa1": start, "pb1": min(h0, end), "pa2": max(h1, start), "pb2": end}
    edge = lambda n: f"""
        SELECT cluster, date_trunc('hour', $pa{n}) AS hour, partition, gpu_type,
               sum(g * (epoch_us(least(p1, $pb{n})) - epoch_us(greatest(p0, $pa{n}))) / 1e6) AS pend_s
        FROM (SELECT j.cluster, j.partition, j.gpu_type, coalesce(nullif(j.req_gpus, 0), j.ngpus) AS g,
                     greatest(j.eligible, c.data_start) AS p0,
                     least(coalesce(j.start, j."end", CASE WHEN j.state = 'PENDING' THEN c.horizon END),
                           c.horizon) AS p1
              FROM jobs j JOIN tl_clusters c ON c.cluster = j.cluster
              WHERE j.eligible IS NOT NULL AND j.eligible < $pb{n} AND coalesce(j.start, j."end", c.horizon) > $pa{n})
        WHERE g > 0 AND p1 > $pa{n} AND p0 < $pb{n} AND $pa{n} < $pb{n} GROUP BY ALL"""   # noqa: E731
    sql = ("SELECT cluster, hour, partition, gpu_type, pend_s FROM tl_pending_hourly "
           f"WHERE hour >= $ph0 AND hour < $ph1 UNION ALL {edge(1)} UNION ALL {edge(2)}")
    return sql, params


def _floor_hour(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _ceil_hour(t: dt.datetime) -> dt.datetime:
    f = _floor_hour(t)
    return f if f == t else f + dt.timedelta(hours=1)


def bucket_sql(bucket: str, col: str) -> str:
    """SQL for the start of the ``bucket`` (hour/day/week (Monday)/month, UTC) containing ``col``."""
    return f"date_trunc('{check_bucket(bucket)}', {col})"


def bucket_interval(bucket: str) -> str:
    return {"hour": "INTERVAL 1 HOUR", "day": "INTERVAL 1 DAY", "week": "INTERVAL 7 DAY",
            "month": "INTERVAL 1 MONTH"}[check_bucket(bucket)]


def capacity_dim_sql(dims: Sequence[str], alias: str = "") -> list[str]:
    """SELECT expressions for capacity dims over a row with cluster/gpu_type/partition columns."""
    p = f"{alias}." if alias else ""
    return [f"{p}{d}" if d != "gpu_type" else f"coalesce({p}gpu_type, '(untyped)') AS gpu_type" for d in dims]


def explode_partitions(rel_sql: str) -> str:
    """Rows of ``rel_sql`` (with a comma-separated ``partitions`` column) once per partition, as ``partition``.
    A node in several partitions counts in each: partition rows overlap, the cluster row counts it once."""
    return (f"SELECT * EXCLUDE (partitions), coalesce(trim(p), '(none)') AS partition "
            f"FROM (SELECT *, unnest(CASE WHEN partitions IS NULL OR partitions = '' THEN [NULL] "
            f"ELSE string_split(partitions, ',') END) AS p FROM ({rel_sql}))")


def capacity(con: duckdb.DuckDBPyConnection, start=None, end=None, bucket: str = "day",
             by: str | Iterable[str] = ("cluster", "gpu_type")) -> pl.DataFrame:
    """Capacity per bucket and group of cluster/gpu_type(pool)/partition, in GPU-hours.

    Columns: bucket (UTC start), the ``by`` columns, capacity_gpu_h (installed), unavailable_gpu_h (free GPUs on
    down/drained/maintenance nodes), available_gpu_h (= capacity - unavailable).
    """
    ensure_current(con)
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
    ensure_current(con)
    win = resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame(schema={"job_uid": pl.Int64, "cluster": pl.String, "gpu_type": pl.String,
                                    "gpu_seconds": pl.Float64})
    return frame(con, """
        SELECT job_uid, cluster, gpu_type,
               sum(gpus * (epoch_us(least(t1, $e)) - epoch_us(greatest(t0, $s))) / 1e6) AS gpu_seconds
        FROM tl_job_alloc WHERE t1 > $s AND t0 < $e
        GROUP BY ALL ORDER BY job_uid, gpu_type""", {"s": win[0], "e": win[1]})


def job_alloc_in_buckets_sql(bucket: str) -> str:
    """SQL over tl_job_alloc clipped to [$s, $e) and split into buckets: one row per job piece and bucket with
    ``bucket`` and ``gpu_s`` (GPU-seconds in that bucket), plus tl_job_alloc's columns."""
    iv = bucket_interval(bucket)
    return f"""
        SELECT a.*, (epoch_us(least(a.t1, $e, b + {iv})) - epoch_us(greatest(a.t0, $s, b))) / 1e6 * a.gpus AS gpu_s,
               b AS bucket
        FROM (SELECT *, unnest(generate_series({bucket_sql(bucket, 'greatest(t0, $s)')},
                                               least(t1, $e) - INTERVAL 1 MICROSECOND, {iv})) AS b
              FROM tl_job_alloc WHERE t1 > $s AND t0 < $e) a"""


def node_segments(con: duckdb.DuckDBPyConnection, start=None, end=None) -> duckdb.DuckDBPyRelation:
    """The per-node occupancy segments overlapping [start, end), clipped to it (a relation: it can be large).

    Columns: cluster, node, t0, t1, gpus, gpu_type, partitions, avail (up/down/planned_down/absent), alloc,
    whole_gpus, frac_milli, jobs."""
    ensure_current(con)
    win = resolve_window(con, start, end)
    s, e = win if win else (dt.datetime(1970, 1, 1), dt.datetime(1970, 1, 1))
    return con.sql(f"""SELECT g.cluster, n.node, greatest(g.t0, $s) AS t0, least(g.t1, $e) AS t1, g.gpus, g.gpu_type,
                              g.partitions, g.avail, g.alloc, g.whole_gpus, g.frac_milli, g.jobs
                       FROM ({SEGMENTS_SQL}) g JOIN tl_nodes n ON n.nid = g.nid
                       WHERE g.t1 > $s AND g.t0 < $e""", params={"s": s, "e": e})
