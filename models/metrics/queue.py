"""Queue waits, bounded slowdown, starvation and pending demand, from the ``jobs`` table.

Definitions (docs/METRICS.md, "Queue"):

- wait = start - queue entry (eligible, else submit: models/definitions/jobs_sql.py), seconds, for jobs that
  started in the window;
  time held or waiting on a dependency before becoming eligible is not queue wait (as sreport's "Planned").
- size class by requested GPUs (req_gpus, else allocated): models/definitions/labels.py SIZE_CLASSES.
- bounded slowdown BSLD = max(1, (wait + run) / max(run, tau)), tau default 10 minutes (../shared/METRICS.md 2).
- a job is pending at time t if it became eligible before t and had not started (nor ended unstarted) by t.
- pending demand = requested GPUs x time pending inside the window (GPU-hours).

Times are naive UTC, windows half-open [start, end).
"""
from __future__ import annotations

import datetime as dt

import polars as pl

from ingest.warehouse import frame
from models.definitions.jobs_sql import PENDING_STATES, QUEUE_JOBS_SQL, pending_until_sql, sql_list
from models.definitions.labels import size_class_sql, sized
from models.metrics import timeline

#: Columns ``waits`` can group by.
GROUPS = ("team", "size_class", "qos", "pool", "partition", "account", "cluster", "user")
_SIZE_SQL = size_class_sql("g")
_JOB_SQL = QUEUE_JOBS_SQL
#: Pending at $t: in the queue before it and not started by it (a job that ended without starting stops pending then).
_PENDING_AT = f"""q < $t AND (start > $t OR (start IS NULL AND ("end" > $t OR ("end" IS NULL AND state IN
                 {sql_list(PENDING_STATES)}))))"""


def waits(con, start: dt.datetime, end: dt.datetime, by: tuple[str, ...] = ("team", "size_class"),
          tau_minutes: float = 10, threshold_hours: float = 24) -> pl.DataFrame:
    """Queue wait percentiles (hours) and bounded slowdown of jobs that started in [start, end), per ``by``
    (any of team, size_class, qos, pool, partition, account, cluster); plus ``p95_vs_all`` = the group's p95
    over the p95 of all jobs in the window (wait-time parity)."""
    cols = ", ".join(by)
    # Memory (a year of 5M jobs under the dashboard's DuckDB budget): ``j`` keeps only the columns used (it is
    # read twice), and each column's percentiles come from one list aggregate (one buffer of values, not one per
    # percentile); the values are quantile_cont's either way.
    out = frame(con, f"""
        WITH j AS (SELECT {cols}, g, "end", run_s, wait_s
                   FROM (SELECT *, {_SIZE_SQL} AS size_class, epoch(start - q) AS wait_s FROM ({_JOB_SQL})
                         WHERE start >= $s AND start < $e)),
        b AS (SELECT *, greatest(1.0, (wait_s + run_s) / greatest(run_s, $tau)) AS bsld FROM j),
        allp AS (SELECT quantile_cont(wait_s, 0.95) AS p95_all FROM j),
        grp AS (SELECT {cols}, count(*) AS jobs, round(sum(g), 3) AS gpus_requested,
                       quantile_cont(wait_s, [0.5, 0.9, 0.95]) AS w, max(wait_s) / 3600 AS wait_max_h,
                       avg(wait_s) / 3600 AS wait_mean_h,
                       quantile_cont(bsld, [0.5, 0.95]) FILTER (WHERE "end" IS NOT NULL) AS bs,
                       count(*) FILTER (WHERE wait_s > $thr) AS waited_over_threshold
                FROM b GROUP BY {cols})
        SELECT {cols}, jobs, gpus_requested, w[1] / 3600 AS wait_p50_h, w[2] / 3600 AS wait_p90_h,
               w[3] / 3600 AS wait_p95_h, wait_max_h, wait_mean_h, bs[1] AS bsld_p50, bs[2] AS bsld_p95,
               waited_over_threshold, w[3] / nullif(p95_all, 0) AS p95_vs_all
        FROM grp, allp""",
        {"s": start, "e": end, "tau": tau_minutes * 60, "thr": threshold_hours * 3600})
    return sized(out).sort(list(by), nulls_last=True)


def pending_at(con, at: dt.datetime) -> pl.DataFrame:
    """Jobs pending at ``at``: job_uid, cluster, job_id, team, account, user, qos, pool, size_class,
    gpus_requested, eligible_at, pending_h (``at`` - eligible), oldest first."""
    return frame(con, f"""
        SELECT job_uid, cluster, job_id, team, account, "user", qos, pool, {_SIZE_SQL} AS size_class,
               g AS gpus_requested, q AS eligible_at, epoch($t - q) / 3600 AS pending_h
        FROM ({_JOB_SQL}) WHERE {_PENDING_AT}
        ORDER BY q, job_uid""", {"t": at}).pipe(sized)


def starvation(con, start: dt.datetime, end: dt.datetime, threshold_hours: float = 24) -> pl.DataFrame:
    """Per team: jobs that started in the window after waiting longer than the threshold, jobs still pending
    at ``end`` longer than it (and their requested GPUs), and the oldest pending age at ``end`` (hours)."""
    thr = threshold_hours
    pend = pending_at(con, end)
    started = frame(con, f"""
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


def pending_demand(con, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Per (cluster, pool, team): requested GPU-hours spent pending inside [start, end), and pending jobs."""
    return frame(con, f"""
        WITH j AS (SELECT *, greatest(q, $s) AS a,
                          -- a job that left the queue at an unknown time stays NULL (not counted)
                          least({pending_until_sql('hz.horizon', 'qj')}, $e) AS z
                   FROM ({_JOB_SQL}) qj JOIN tl_clusters hz USING (cluster))
        SELECT cluster, pool AS gpu_type, team, sum(g * epoch(z - a)) / 3600 AS pending_gpu_h,
               count(*) AS pending_jobs
        FROM j WHERE z > a AND g > 0 GROUP BY ALL ORDER BY ALL""", {"s": start, "e": end})


def pending_gpu_hours(con, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """:func:`pending_demand`'s pending GPU-hours per (cluster, gpu_type = pool, team), without the job counts:
    summed from ``tl_pending_team_daily`` when [start, end) is whole UTC days inside every cluster's rollup
    (or ends at the one horizon), else computed from the jobs (the same numbers)."""
    w = timeline.whole_days(con, start, end, "tl_pending_team_daily", clip_start=False, past_horizon=False)
    if w is None:
        return pending_demand(con, start, end).drop("pending_jobs")
    return frame(con, """
        SELECT cluster, pool AS gpu_type, team, sum(pend_s) / 3600 AS pending_gpu_h
        FROM tl_pending_team_daily WHERE day >= $w0 AND day < $w1
        GROUP BY ALL HAVING sum(pend_s) > 0 ORDER BY ALL""", w)
