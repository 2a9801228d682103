"""The demand measures (served, demanded, peak GPU-hours per bucket and group) over the staged GPU jobs: the
kernel shared by the demand reader (models/metrics/demand.py) and its daily marts (models/marts/demand.py).
Definitions: docs/FORECAST.md ("Which series answers what").
"""
from __future__ import annotations

import polars as pl

from models.definitions.jobs_sql import (PARTITION_POOL_SQL, PENDING_STATES, array_tasks_sql, end_eff_sql, open_sql,
                                         pending_from_sql, pending_until_sql, req_gpus_sql, requested_pool_sql,
                                         sql_list, team_sql)
from models.definitions.expected_run_sql import expected_run_ctes
from models.definitions.timeline_sql import job_alloc_in_buckets_sql
from models.definitions.times import BUCKET_HOURS

FREQS = BUCKET_HOURS        # hours per period of each frequency a demand series can have


DIMENSIONS = ("cluster", "pool", "partition", "team")


#: The GPU jobs of the demand series, staged once per call: pool (where it ran, else what it asked for: the
#: definitions of models/definitions/jobs_sql.py), team label, queue entry and exit (the one pending interval),
#: requested GPUs (a pending array record '123_[5-9,12%4]' counts every task it lists), the cluster's horizon.
def jobs_sql(where: str = "TRUE") -> str:
    """SELECT of the staged GPU jobs (``_demand_jobs``' columns) among the jobs ``j`` matching ``where``; the
    horizon is ``$cluster``'s (every cluster's when NULL)."""
    ran_of = "" if where == "TRUE" else f"AND job_uid IN (SELECT job_uid FROM jobs j WHERE {where})"
    return f"""
WITH ran AS (
    SELECT job_uid, arg_max(gpu_type, gpus * (epoch(t1) - epoch(t0))) AS pool FROM tl_job_alloc
    WHERE gpu_type IS NOT NULL {ran_of} GROUP BY job_uid
), hz AS (SELECT cluster, horizon AS hz FROM tl_clusters
          WHERE horizon IS NOT NULL AND ($cluster::VARCHAR IS NULL OR cluster = $cluster::VARCHAR))
SELECT j.job_uid, j.cluster, coalesce(j.partition, '') AS partition, {team_sql()} AS team,
       coalesce(r.pool, {requested_pool_sql()}) AS pool,
       j.state, j.submit, {pending_from_sql()} AS eligible, {pending_until_sql('hz.hz')} AS left_queue,
       j.start, j."end", coalesce(j.elapsed_s, epoch(j."end") - epoch(j.start)) AS elapsed_s, j.timelimit_s,
       j.ngpus, {req_gpus_sql()} * {array_tasks_sql()} AS req_gpus, hz.hz
FROM jobs j JOIN hz USING (cluster)
LEFT JOIN ({PARTITION_POOL_SQL}) pp ON pp.cluster = j.cluster AND pp.partition = j.partition
LEFT JOIN ran r ON r.job_uid = j.job_uid
WHERE (j.ngpus > 0 OR coalesce(j.req_gpus, 0) > 0) AND j.submit IS NOT NULL AND j.submit < hz.hz AND ({where})
"""


_JOBS_SQL = "CREATE OR REPLACE TEMP TABLE _demand_jobs AS " + jobs_sql()


def load_jobs(con, cluster: str | None):
    """Stage the GPU jobs with their pool, team and horizon; returns the series end (min horizon) or None."""
    con.execute(_JOBS_SQL, {"cluster": cluster})
    return con.sql("SELECT min(hz) FROM _demand_jobs").fetchall()[0][0]


def empty(by: list[str], peak: bool = True) -> pl.DataFrame:
    return pl.DataFrame(schema={**{k: pl.String for k in by}, "ts": pl.Datetime("us"), "served_gpu_hours": pl.Float64,
                                "demanded_gpu_hours": pl.Float64, "estimated_gpu_hours": pl.Float64,
                                **({"peak_gpus": pl.Float64} if peak else {})})


def measures(con, freq: str, by: list[str], start, end, peak: bool = True, served: bool = True,
              additive: bool = True, rounded: bool = True, runs_from: str = "_demand_jobs") -> pl.DataFrame:
    """_MEASURES_SQL over the staged ``_demand_jobs`` for the buckets [start, end); the parts not asked for are
    left out (``rounded=False`` keeps the sums unrounded, for the marts). ``runs_from``: the jobs whose finished
    runs estimate unfinished work (the incremental mart stages only some jobs, the estimates are over all)."""
    keys = ", ".join(f'"{k}"' for k in by)
    sel = (keys + ", ") if by else ""
    def join(alias: str) -> str:
        return " AND ".join(f'g."{k}" = {alias}."{k}"' for k in by) or "TRUE"
    rnd = (lambda x: f"round({x}, 9)") if rounded else (lambda x: x)
    cols = []
    if additive:
        cols += [f"coalesce({rnd('s.v')}, 0)::DOUBLE AS served_gpu_hours" if served else "",
                 f"coalesce({rnd('x.v')}, 0)::DOUBLE AS demanded_gpu_hours",
                 f"coalesce({rnd('x.est')}, 0)::DOUBLE AS estimated_gpu_hours"]
    if peak:
        cols.append(f"greatest(coalesce({rnd('p.v')}, 0), 0)::DOUBLE AS peak_gpus")
    joins = ((f"LEFT JOIN served s ON {join('s')} AND s.ts = g.ts\n" if served and additive else "")
             + (f"LEFT JOIN demanded x ON {join('x')} AND x.ts = g.ts\n" if additive else "")
             + (f"LEFT JOIN peak p ON {join('p')} AND p.ts = g.ts\n" if peak else ""))
    sql = _MEASURES_SQL.format(
        freq=freq, sel=sel, gkeys=", ".join(f'g."{k}"' for k in by) + (", " if by else ""),
        part=f"PARTITION BY {keys}" if by else "", alloc=job_alloc_in_buckets_sql(freq),
        asel="".join(f'{"a.cluster" if k == "cluster" else "coalesce(a.gpu_type, j.pool)" if k == "pool" else "j." + k} AS "{k}", '
                     for k in by),
        served_groups=f"UNION SELECT DISTINCT {sel} 1 FROM served" if served else "",
        cols=", ".join(c for c in cols if c), joins=joins, pending=sql_list(PENDING_STATES), open_d=open_sql("d"),
        end_eff_d=end_eff_sql("d.hz", "d"),
        expected=expected_run_ctes(_RUNS_SQL.format(runs_from=runs_from), _TODO_SQL))
    out = con.sql(sql, params={"s": start, "e": end}).pl()
    return out.cast({k: pl.String for k in by}).cast({"ts": pl.Datetime("us")})


#: Finished runs (the estimate's sample) and the work not finished at the horizon, for expected_run_ctes.
#: A job is running at the horizon as the timeline says (jobs_sql.open_sql): one finished without an end is not.
_RUNS_SQL = ("SELECT cluster, partition, elapsed_s FROM {runs_from} d WHERE d.start IS NOT NULL AND NOT "
             + open_sql("d"))
_TODO_SQL = f"""SELECT job_uid, cluster, partition, timelimit_s,
       CASE WHEN start IS NOT NULL THEN epoch(hz) - epoch(start) ELSE 0 END AS ran_s
FROM _demand_jobs d WHERE (d.start IS NULL AND d."end" IS NULL) OR (d.start IS NOT NULL AND {open_sql("d")})"""

_MEASURES_SQL = """
WITH grid AS (
    SELECT unnest(generate_series($s::TIMESTAMP, $e::TIMESTAMP - INTERVAL 1 {freq}, INTERVAL 1 {freq})) AS ts
), served AS (   -- the timeline's allocation, split by bucket, on the pool each piece ran on
    SELECT {asel} a.bucket AS ts, sum(a.gpu_s) / 3600 AS v
    FROM ({alloc}) a JOIN _demand_jobs j USING (job_uid)
    GROUP BY ALL
), groups AS (SELECT DISTINCT {sel} 1 AS one FROM _demand_jobs {served_groups}),
g AS (SELECT * FROM groups CROSS JOIN grid),
{expected}, work AS (   -- run time of work not finished (definitions/expected_run_sql.py); 0 when nothing is known
    SELECT d.*, coalesce(e.est_s, 0) AS est_s FROM _demand_jobs d LEFT JOIN expected e USING (job_uid)
), demanded AS (
    SELECT {sel} date_trunc('{freq}', submit) AS ts,
        sum(req_gpus * CASE WHEN start IS NOT NULL AND NOT {open_d} THEN elapsed_s
                            WHEN start IS NOT NULL THEN greatest(epoch(hz) - epoch(start), est_s)
                            WHEN state IN {pending} THEN est_s ELSE 0 END) / 3600 AS v,
        sum(req_gpus * CASE WHEN start IS NOT NULL AND NOT {open_d} THEN 0
                            WHEN start IS NOT NULL THEN greatest(est_s - (epoch(hz) - epoch(start)), 0)
                            WHEN state IN {pending} THEN est_s ELSE 0 END) / 3600 AS est
    FROM work d GROUP BY ALL
), ev AS (  -- +/- GPUs when a job enters/leaves the queue and starts/ends; 0 at every bucket start
    SELECT {sel} eligible AS t, req_gpus AS d FROM _demand_jobs WHERE eligible < left_queue
    UNION ALL SELECT {sel} left_queue, -req_gpus FROM _demand_jobs WHERE eligible < left_queue
    UNION ALL SELECT {sel} start, ngpus FROM _demand_jobs WHERE start IS NOT NULL AND ngpus > 0
    UNION ALL SELECT {sel} {end_eff_d}, -ngpus FROM _demand_jobs d WHERE start IS NOT NULL AND ngpus > 0
    UNION ALL SELECT {sel} ts, 0 FROM g
), evt AS (SELECT {sel} t, sum(d) AS d FROM ev GROUP BY ALL
), lvl AS (
    SELECT {sel} t, sum(d) OVER ({part} ORDER BY t ROWS UNBOUNDED PRECEDING) AS level FROM evt
), peak AS (
    SELECT {sel} date_trunc('{freq}', t) AS ts, max(level) AS v FROM lvl
    WHERE t >= $s::TIMESTAMP AND t < $e::TIMESTAMP GROUP BY ALL
)
SELECT {gkeys} g.ts, {cols}
FROM g
{joins}ORDER BY {gkeys} g.ts
"""


#: The scope of the mart rows computed over every cluster together (written only when there are several).
ALL_CLUSTERS = "*"
