"""Queue waits, bounded slowdown, starvation and pending demand, from the ``jobs`` table.

Definitions (docs/METRICS.md, "Queue"):

- wait = start - eligible (submit when eligible is unknown), seconds, for jobs that started in the window;
  time held or waiting on a dependency before becoming eligible is not queue wait (as sreport's "Planned").
- size class by requested GPUs (req_gpus, else allocated): 0, 1, 2-4, 5-8, 9-15, 16+.
- bounded slowdown BSLD = max(1, (wait + run) / max(run, tau)), tau default 10 minutes (../shared/METRICS.md 2).
- a job is pending at time t if it became eligible before t and had not started (nor ended unstarted) by t.
- pending demand = requested GPUs x time pending inside the window (GPU-hours).

Times are naive UTC, windows half-open [start, end).
"""
from __future__ import annotations

import datetime as dt

import polars as pl

from models import timeline

SIZE_CLASSES = ("0", "1", "2-4", "5-8", "9-15", "16+")
#: Columns ``waits`` can group by.
GROUPS = ("team", "size_class", "qos", "pool", "partition", "account", "cluster", "user")
_SIZE_SQL = """CASE WHEN g <= 0 THEN '0' WHEN g <= 1 THEN '1' WHEN g <= 4 THEN '2-4' WHEN g <= 8 THEN '5-8'
                    WHEN g <= 15 THEN '9-15' ELSE '16+' END"""
#: A job's requested GPUs, its queue-entry time, its team label and its pool: the allocated GPU type, else the
#: type it requested (ReqTRES gres/gpu:TYPE), else the one GPU type of its partition's nodes, else '(any)'.
#: The one GPU type of each partition's current nodes (NULL when they have several).
PARTITION_POOL_SQL = """
    SELECT cluster, trim(p) AS partition, CASE WHEN count(DISTINCT gpu_type) = 1 THEN min(gpu_type) END AS pool
    FROM (SELECT cluster, gpu_type, unnest(string_split(partitions, ',')) AS p FROM nodes
          WHERE valid_to IS NULL AND gpus > 0) GROUP BY ALL"""
_JOB_SQL = f"""
    SELECT j.job_uid, j.cluster, j.job_id, coalesce(j.team, '(unmapped)') AS team, j.account, j."user", j.partition,
           coalesce(j.qos, '(none)') AS qos, j.state,
           coalesce(j.gpu_type, nullif(regexp_extract(j.req_tres, 'gres/gpu:([^=,]+)=', 1), ''), pp.pool, '(any)') AS pool,
           coalesce(nullif(j.req_gpus, 0), j.ngpus, 0) AS g, coalesce(j.eligible, j.submit) AS q, j.start, j."end",
           coalesce(j.elapsed_s, epoch(j."end" - j.start)) AS run_s
    FROM jobs j LEFT JOIN ({PARTITION_POOL_SQL}) pp
      ON pp.cluster = j.cluster AND pp.partition = j.partition
    WHERE coalesce(j.eligible, j.submit) IS NOT NULL"""
#: Pending at $t: eligible before it and not started by it (a job that ended without starting stops pending then).
_PENDING_AT = """q < $t AND (start > $t OR (start IS NULL AND ("end" > $t OR ("end" IS NULL AND state IN
                 ('PENDING', 'REQUEUED', 'REQUEUE_HOLD', 'REQUEUE_FED', 'RESV_DEL_HOLD')))))"""


def size_class_sql(expr: str) -> str:
    return _SIZE_SQL.replace("g <=", f"({expr}) <=")


def _frame(con, sql: str, params: dict) -> pl.DataFrame:
    return timeline.frame(con, sql, params)


def waits(con, start: dt.datetime, end: dt.datetime, by: tuple[str, ...] = ("team", "size_class"),
          tau_minutes: float = 10, threshold_hours: float = 24) -> pl.DataFrame:
    """Queue wait percentiles (hours) and bounded slowdown of jobs that started in [start, end), per ``by``
    (any of team, size_class, qos, pool, partition, account, cluster); plus ``p95_vs_all`` = the group's p95
    over the p95 of all jobs in the window (wait-time parity)."""
    cols = ", ".join(by)
    return _frame(con, f"""
        WITH j AS (SELECT *, {_SIZE_SQL} AS size_class, epoch(start - q) AS wait_s FROM ({_JOB_SQL})
                   WHERE start >= $s AND start < $e),
        b AS (SELECT *, greatest(1.0, (wait_s + run_s) / greatest(run_s, $tau)) AS bsld FROM j),
        allp AS (SELECT quantile_cont(wait_s, 0.95) AS p95_all FROM j)
        SELECT {cols}, count(*) AS jobs, round(sum(g), 3) AS gpus_requested,
               quantile_cont(wait_s, 0.5) / 3600 AS wait_p50_h, quantile_cont(wait_s, 0.9) / 3600 AS wait_p90_h,
               quantile_cont(wait_s, 0.95) / 3600 AS wait_p95_h, max(wait_s) / 3600 AS wait_max_h,
               avg(wait_s) / 3600 AS wait_mean_h,
               quantile_cont(bsld, 0.5) FILTER (WHERE "end" IS NOT NULL) AS bsld_p50,
               quantile_cont(bsld, 0.95) FILTER (WHERE "end" IS NOT NULL) AS bsld_p95,
               count(*) FILTER (WHERE wait_s > $thr) AS waited_over_threshold,
               quantile_cont(wait_s, 0.95) / nullif(any_value(p95_all), 0) AS p95_vs_all
        FROM b, allp GROUP BY {cols} ORDER BY {cols}""",
        {"s": start, "e": end, "tau": tau_minutes * 60, "thr": threshold_hours * 3600})


def pending_at(con, at: dt.datetime) -> pl.DataFrame:
    """Jobs pending at ``at``: job_uid, cluster, job_id, team, account, user, qos, pool, size_class,
    gpus_requested, eligible_at, pending_h (``at`` - eligible), oldest first."""
    return _frame(con, f"""
        SELECT job_uid, cluster, job_id, team, account, "user", qos, pool, {_SIZE_SQL} AS size_class,
               g AS gpus_requested, q AS eligible_at, epoch($t - q) / 3600 AS pending_h
        FROM ({_JOB_SQL}) WHERE {_PENDING_AT}
        ORDER BY q, job_uid""", {"t": at})


def starvation(con, start: dt.datetime, end: dt.datetime, threshold_hours: float = 24) -> pl.DataFrame:
    """Per team: jobs that started in the window after waiting longer than the threshold, jobs still pending
    at ``end`` longer than it (and their requested GPUs), and the oldest pending age at ``end`` (hours)."""
    thr = threshold_hours
    pend = pending_at(con, end)
    started = _frame(con, f"""
        SELECT team, count(*) AS started_after_threshold, max(epoch(start - q)) / 3600 AS longest_wait_h
        FROM ({_JOB_SQL}) WHERE start >= $s AND start < $e AND epoch(start - q) > $thr GROUP BY team""",
        {"s": start, "e": end, "thr": thr * 3600})
    waiting = pend.group_by("team").agg(
        pl.len().alias("pending_now"),
        (pl.col("pending_h") > thr).sum().alias("pending_over_threshold"),
        pl.col("gpus_requested").filter(pl.col("pending_h") > thr).sum().alias("gpus_pending_over_threshold"),
        pl.col("pending_h").max().alias("oldest_pending_h"))
    out = started.join(waiting, on="team", how="full", coalesce=True)
    ints = ["started_after_threshold", "pending_now", "pending_over_threshold"]
    return (out.with_columns([pl.col(c).fill_null(0).cast(pl.Int64) for c in ints])
            .with_columns(pl.col("gpus_pending_over_threshold").fill_null(0.0)).sort("team"))


_PENDING_STATES = "('PENDING', 'REQUEUED', 'REQUEUE_HOLD', 'REQUEUE_FED', 'RESV_DEL_HOLD')"


def pending_demand(con, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Per (cluster, pool, team): requested GPU-hours spent pending inside [start, end), and pending jobs."""
    return _frame(con, f"""
        WITH j AS (SELECT *, greatest(q, $s) AS a,
                          -- least() skips NULLs: a job that left the queue at an unknown time stays NULL
                          CASE WHEN start IS NOT NULL OR "end" IS NOT NULL THEN least(coalesce(start, "end"), $e)
                               WHEN state IN {_PENDING_STATES} THEN $e END AS z FROM ({_JOB_SQL}))
        SELECT cluster, pool AS gpu_type, team, sum(g * epoch(z - a)) / 3600 AS pending_gpu_h,
               count(*) AS pending_jobs
        FROM j WHERE z > a AND g > 0 GROUP BY ALL ORDER BY ALL""", {"s": start, "e": end})


#: Pending intervals of cluster $c's GPU jobs from $H on, up to the horizon $hz, for the daily rollup
#: (``tl_pending_team_daily``, models/timeline_rollups.py): (k, pool, team, t0, t1 in epoch microseconds, GPUs).
PENDING_INTERVALS_SQL = f"""
    SELECT hash(pool, team) AS k, pool, team, epoch_us(greatest(q, $H)) AS t0, epoch_us(z) AS t1, g AS v
    FROM (SELECT *, CASE WHEN start IS NOT NULL OR "end" IS NOT NULL THEN least(coalesce(start, "end"), $hz)
                         WHEN state IN {_PENDING_STATES} THEN $hz END AS z
          FROM ({_JOB_SQL}) WHERE cluster = $c)
    WHERE z > greatest(q, $H) AND g > 0"""


def pending_gpu_hours(con, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """:func:`pending_demand`'s pending GPU-hours per (cluster, gpu_type = pool, team), without the job counts:
    summed from ``tl_pending_team_daily`` when [start, end) is whole UTC days inside every cluster's rollup
    (or ends at the one horizon), else computed from the jobs (the same numbers)."""
    w = timeline.whole_days(con, start, end, "tl_pending_team_daily", clip_start=False, past_horizon=False)
    if w is None:
        return pending_demand(con, start, end).drop("pending_jobs")
    return _frame(con, """
        SELECT cluster, pool AS gpu_type, team, sum(pend_s) / 3600 AS pending_gpu_h
        FROM tl_pending_team_daily WHERE day >= $w0 AND day < $w1
        GROUP BY ALL HAVING sum(pend_s) > 0 ORDER BY ALL""", w)
