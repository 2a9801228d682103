"""SQL fragments over the ``jobs`` table that define a job's intervals and attributes, once.

Every fragment takes the alias of the jobs row (``j``) so that it can be used inside any query; the
horizon of the job's cluster is passed as SQL too (a parameter such as ``$hz`` or a column such as
``c.horizon``)."""
from __future__ import annotations

from models.definitions.labels import ANY_POOL, NONE, UNMAPPED


def sql_list(items) -> str:
    """A SQL tuple of string literals from code constants (never user input)."""
    return "(" + ", ".join("'" + s + "'" for s in items) + ")"


#: Job states in which a NULL end means "still running" (counted up to the horizon).
RUNNING_STATES = ("RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING", "STAGE_OUT", "SIGNALING",
                  "STOPPED", "REQUEUED")
#: Job states in which a job that has not started is still waiting in the queue.
PENDING_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD")


#: Per cluster, the data span from the accounting itself: ``data_start`` = the earliest job start (else submit),
#: ``horizon`` = the latest submit/start/end seen, or the end of the last live ``sacct`` window if later.
#: Eligible times are not used: a --begin in the future would push the horizon past what was observed.
SPANS_SQL = """
    WITH j AS (
      SELECT cluster, coalesce(min(start), min(submit)) AS data_start,
             greatest(max(submit), max(start), max("end")) AS hz
      FROM jobs GROUP BY cluster),
    w AS (SELECT cluster, max(value) AS wm FROM watermarks WHERE source LIKE 'sacct%' GROUP BY cluster)
    SELECT j.cluster, j.data_start, greatest(j.hz, w.wm) AS horizon FROM j LEFT JOIN w USING (cluster)"""


def end_eff_sql(hz: str = "$hz", j: str = "j") -> str:
    """End of a job's allocation, clipped to the horizon ``hz`` (running jobs run up to it, never beyond):
    its end, else (finished without an end) start + elapsed, else the horizon."""
    return f"""least(coalesce({j}."end",
        CASE WHEN {j}.state NOT IN {sql_list(RUNNING_STATES)} AND {j}.elapsed_s IS NOT NULL
             THEN {j}.start + to_seconds({j}.elapsed_s) END, {hz}), {hz})"""


def open_sql(j: str = "j") -> str:
    """True for a job whose allocation is still open at the horizon."""
    return f"""({j}."end" IS NULL AND ({j}.state IN {sql_list(RUNNING_STATES)} OR {j}.elapsed_s IS NULL))"""


def req_gpus_sql(j: str = "j") -> str:
    """GPUs a job asked for: its requested GPUs, else (not recorded, or 0) the GPUs it was allocated."""
    return f"coalesce(nullif({j}.req_gpus, 0), {j}.ngpus, 0)"


def array_tasks_sql(j: str = "j") -> str:
    """Tasks a job record stands for: a pending array record ('123_[5-9,12%4]', spec '5-9,12%4') lists every
    task it still holds (6 here; a step '1-9:2' counts 1, 3, 5, 7, 9); any other record is one job."""
    x = "split_part(trim(x), ':', 1)"
    step = "coalesce(nullif(split_part(x, ':', 2), '')::BIGINT, 1)"
    return (f"""CASE WHEN {j}.array_task_spec IS NOT NULL AND {j}.state = 'PENDING' THEN list_sum(list_transform("""
            f"""string_split(split_part({j}.array_task_spec, '%', 1), ','), lambda x: CASE WHEN strpos(x, '-') = 0 """
            f"""THEN 1 ELSE (split_part({x}, '-', 2)::BIGINT - split_part({x}, '-', 1)::BIGINT) // {step} + 1 """
            f"""END)) ELSE 1 END""")


def pending_from_sql(j: str = "j") -> str:
    """When a job entered the queue: its eligible time (after dependencies and --begin), else its submit time
    when the export has no eligible time."""
    return f"coalesce({j}.eligible, {j}.submit)"


def pending_until_sql(hz: str, j: str = "j") -> str:
    """When a job left the queue, clipped to the horizon ``hz``: its start; never started: its end (cancelled
    while pending), or the horizon while it is still in a pending state; NULL when nothing says (a job that
    left the queue at an unknown time is not counted)."""
    return (f"""least(coalesce({j}.start, {j}."end", CASE WHEN {j}.state IN {sql_list(PENDING_STATES)} """
            f"""THEN {hz} END), {hz})""")


#: The one GPU type of each partition's current GPU nodes (NULL when they have several).
PARTITION_POOL_SQL = """
    SELECT cluster, trim(p) AS partition, CASE WHEN count(DISTINCT gpu_type) = 1 THEN min(gpu_type) END AS pool
    FROM (SELECT cluster, gpu_type, unnest(string_split(partitions, ',')) AS p FROM nodes
          WHERE valid_to IS NULL AND gpus > 0) GROUP BY ALL"""


def requested_pool_sql(j: str = "j", pp: str = "pp") -> str:
    """The pool a job asked for: its GPU type, else the type its ReqTRES names (gres/gpu:TYPE), else the one
    GPU type of its partition's nodes (``pp``: a join on PARTITION_POOL_SQL), else (any)."""
    return (f"coalesce({j}.gpu_type, nullif(regexp_extract({j}.req_tres, 'gres/gpu:([^=,]+)=', 1), ''), "
            f"{pp}.pool, '{ANY_POOL}')")


def team_sql(j: str = "j") -> str:
    """A job's team label: its governance team, or (unmapped). ``j`` '' for an unqualified ``team`` column."""
    return f"coalesce({j + '.' if j else ''}team, '{UNMAPPED}')"


#: Jobs with what the queue models need: job_uid, cluster, job_id, team (label), account, user, partition,
#: qos (label), state, pool (:func:`requested_pool_sql`), g (requested GPUs), q (queue entry), start, end, run_s.
QUEUE_JOBS_SQL = f"""
    SELECT j.job_uid, j.cluster, j.job_id, {team_sql()} AS team, j.account, j."user", j.partition,
           coalesce(j.qos, '{NONE}') AS qos, j.state, {requested_pool_sql()} AS pool,
           {req_gpus_sql()} AS g, {pending_from_sql()} AS q, j.start, j."end",
           coalesce(j.elapsed_s, epoch(j."end" - j.start)) AS run_s
    FROM jobs j LEFT JOIN ({PARTITION_POOL_SQL}) pp
      ON pp.cluster = j.cluster AND pp.partition = j.partition
    WHERE {pending_from_sql()} IS NOT NULL"""

#: Pending intervals of cluster $c's GPU jobs from $H on, up to the horizon $hz, per pool and team:
#: (k, pool, team, t0, t1 in epoch microseconds, GPUs) - the daily rollup tl_pending_team_daily and the queue's
#: pending GPU-hours integrate the same intervals.
PENDING_TEAM_INTERVALS_SQL = f"""
    SELECT hash(pool, team) AS k, pool, team, epoch_us(greatest(q, $H)) AS t0, epoch_us(z) AS t1, g AS v
    FROM (SELECT *, {pending_until_sql('$hz', 'qj')} AS z FROM ({QUEUE_JOBS_SQL}) qj WHERE cluster = $c)
    WHERE z > greatest(q, $H) AND g > 0"""
