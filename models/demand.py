"""GPU demand series from the warehouse's jobs, per hour or day and per cluster, pool, partition and team.

Three measures, in half-open UTC buckets [ts, ts + 1 bucket) (docs/FORECAST.md, "Which series answers what"):

- ``served_gpu_hours``: allocated GPU-hours, ngpus × the part of [start, end) inside the bucket. What the cluster
  delivered; capped by capacity, so it understates demand when queues are long.
- ``demanded_gpu_hours``: GPU-hours of work *submitted* in the bucket, requested GPUs × run time, booked to the
  submit bucket and not capped by a full cluster (the offered load). Run time is the elapsed time of jobs that
  ran; a running job counts at least what it has run; a pending job counts the median run time of finished
  jobs of its partition (else of its cluster), capped by its time limit. ``estimated_gpu_hours`` says how much of it is estimated.
- ``peak_gpus``: the most GPUs running + pending at any instant of the bucket (pending jobs count their
  requested GPUs from eligible time until they start or leave the queue).

Served GPU-hours, the data horizon and where each job ran come from the occupancy timeline (models/timeline.py),
so served demand agrees with utilization to the GPU-second. A job's pool is the pool it ran on (most
GPU-seconds), else its typed request, else the single GPU type of its partition's current nodes, else
``unknown``; team NULL is reported as ``unmapped``. Only buckets that end by the data horizon are returned,
so the last bucket is never a partial one.
"""
from __future__ import annotations

import duckdb
import polars as pl

from models import timeline

FREQS = {"hour": 1.0, "day": 24.0, "week": 168.0}
DIMENSIONS = ("cluster", "pool", "partition", "team")
MEASURES = {"served": "served_gpu_hours", "demanded": "demanded_gpu_hours", "peak": "peak_gpus"}


def parse_by(by) -> list[str]:
    """'team,pool' or a list → validated dimension names (identifiers come only from this whitelist)."""
    cols = [c.strip() for c in (by.split(",") if isinstance(by, str) else by) if c and c.strip()]
    bad = [c for c in cols if c not in DIMENSIONS]
    if bad:
        raise ValueError(f"--by: unknown column {bad[0]!r}; choose from {', '.join(DIMENSIONS)}")
    return list(dict.fromkeys(cols))


_JOBS_SQL = """
CREATE OR REPLACE TEMP TABLE _demand_jobs AS
WITH part_pool AS (
    SELECT cluster, partition, min(gpu_type) AS pool
    FROM (SELECT cluster, trim(unnest(string_split(partitions, ','))) AS partition, gpu_type
          FROM nodes WHERE valid_to IS NULL AND gpus > 0 AND gpu_type IS NOT NULL)
    GROUP BY cluster, partition HAVING count(DISTINCT gpu_type) = 1
), tasks AS (
    -- a pending array record '123_[5-9,12%4]' stands for every task it lists
    SELECT job_uid, sum(CASE WHEN r[2] IS NULL THEN 1 ELSE r[2]::BIGINT - r[1]::BIGINT + 1 END) AS n
    FROM (SELECT job_uid, string_split(split_part(trim(unnest(string_split(split_part(array_task_spec, '%', 1), ','))),
                                                  ':', 1), '-') AS r
          FROM jobs WHERE array_task_spec IS NOT NULL AND state = 'PENDING')
    GROUP BY job_uid
), ran AS (
    SELECT job_uid, arg_max(gpu_type, gpus * (epoch(t1) - epoch(t0))) AS pool FROM tl_job_alloc
    WHERE gpu_type IS NOT NULL GROUP BY job_uid
), hz AS (SELECT cluster, horizon AS hz FROM tl_clusters WHERE horizon IS NOT NULL AND ($cluster::VARCHAR IS NULL OR cluster = $cluster::VARCHAR))
SELECT j.job_uid, j.cluster, coalesce(j.partition, '') AS partition, coalesce(j.team, 'unmapped') AS team,
       coalesce(r.pool, nullif(j.gpu_type, ''), pp.pool, 'unknown') AS pool,
       j.state, j.submit, coalesce(j.eligible, j.submit) AS eligible, j.start, j."end",
       coalesce(j.elapsed_s, epoch(j."end") - epoch(j.start)) AS elapsed_s, j.timelimit_s,
       j.ngpus, coalesce(j.req_gpus, j.ngpus) * coalesce(t.n, 1) AS req_gpus, hz.hz
FROM jobs j JOIN hz USING (cluster)
LEFT JOIN part_pool pp ON pp.cluster = j.cluster AND pp.partition = j.partition
LEFT JOIN tasks t ON t.job_uid = j.job_uid
LEFT JOIN ran r ON r.job_uid = j.job_uid
WHERE (j.ngpus > 0 OR coalesce(j.req_gpus, 0) > 0) AND j.submit IS NOT NULL AND j.submit < hz.hz
"""


def _load_jobs(con, cluster: str | None):
    """Stage the GPU jobs with their pool, team and horizon; returns the series end (min horizon) or None."""
    timeline.ensure_current(con)
    con.execute(_JOBS_SQL, {"cluster": cluster})
    return con.sql("SELECT min(hz) FROM _demand_jobs").fetchall()[0][0]


def demand_table(con: duckdb.DuckDBPyConnection, freq: str = "day", by=("pool",),
                 cluster: str | None = None) -> pl.DataFrame:
    """All three measures per bucket and group: (by..., ts, served_gpu_hours, demanded_gpu_hours,
    estimated_gpu_hours, peak_gpus). Every group has every bucket from the first submit to the last complete
    bucket (zeros where nothing happened). Hours and GPUs; timestamps are bucket starts, UTC."""
    if freq not in FREQS:
        raise ValueError(f"--freq: {freq!r} is not one of {', '.join(FREQS)}")
    by = parse_by(by)
    hz = _load_jobs(con, cluster)
    keys_schema = {k: pl.String for k in by}
    empty = pl.DataFrame(schema={**keys_schema, "ts": pl.Datetime("us"), "served_gpu_hours": pl.Float64,
                                 "demanded_gpu_hours": pl.Float64, "estimated_gpu_hours": pl.Float64,
                                 "peak_gpus": pl.Float64})
    if hz is None:
        return empty
    keys = ", ".join(f'"{k}"' for k in by)
    sel = (keys + ", ") if by else ""
    def join(alias: str) -> str:
        return " AND ".join(f'g."{k}" = {alias}."{k}"' for k in by) or "TRUE"
    start, end = con.sql(f"SELECT date_trunc('{freq}', min(submit)), date_trunc('{freq}', min(hz)) "
                         "FROM _demand_jobs").fetchall()[0]
    if end <= start:
        return empty
    sql = _MEASURES_SQL.format(freq=freq, sel=sel, kjoin_s=join("s"), kjoin=join("x"), kjoin_p=join("p"),
                               gkeys=", ".join(f'g."{k}"' for k in by) + (", " if by else ""),
                               part=f"PARTITION BY {keys}" if by else "",
                               alloc=timeline.job_alloc_in_buckets_sql(freq),
                               asel="".join(f'{"a.cluster" if k == "cluster" else "coalesce(a.gpu_type, j.pool)" if k == "pool" else "j." + k} AS "{k}", '
                                            for k in by))
    out = con.sql(sql, params={"s": start, "e": end}).pl()
    return out.cast({k: pl.String for k in by}).cast({"ts": pl.Datetime("us")})


_MEASURES_SQL = """
WITH grid AS (
    SELECT unnest(generate_series($s::TIMESTAMP, $e::TIMESTAMP - INTERVAL 1 {freq}, INTERVAL 1 {freq})) AS ts
), served AS (   -- the timeline's allocation, split by bucket, on the pool each piece ran on
    SELECT {asel} a.bucket AS ts, sum(a.gpu_s) / 3600 AS v
    FROM ({alloc}) a JOIN _demand_jobs j USING (job_uid)
    GROUP BY ALL
), groups AS (SELECT DISTINCT {sel} 1 AS one FROM _demand_jobs UNION SELECT DISTINCT {sel} 1 FROM served),
g AS (SELECT * FROM groups CROSS JOIN grid),
med AS (
    SELECT cluster, partition, median(elapsed_s) AS med_s FROM _demand_jobs
    WHERE "end" IS NOT NULL AND start IS NOT NULL GROUP BY GROUPING SETS ((cluster, partition), (cluster))
), work AS (   -- run time of work not finished: median of finished jobs (partition, else cluster), <= time limit
    SELECT d.*, least(coalesce(d.timelimit_s, 1e18), coalesce(m.med_s, c.med_s, d.timelimit_s, 0)) AS est_s
    FROM _demand_jobs d LEFT JOIN med m ON m.cluster = d.cluster AND m.partition = d.partition
    LEFT JOIN med c ON c.cluster = d.cluster AND c.partition IS NULL
), demanded AS (
    SELECT {sel} date_trunc('{freq}', submit) AS ts,
        sum(req_gpus * CASE WHEN start IS NOT NULL AND "end" IS NOT NULL THEN elapsed_s
                            WHEN start IS NOT NULL THEN greatest(epoch(hz) - epoch(start), est_s)
                            WHEN state = 'PENDING' THEN est_s ELSE 0 END) / 3600 AS v,
        sum(req_gpus * CASE WHEN start IS NOT NULL AND "end" IS NOT NULL THEN 0
                            WHEN start IS NOT NULL THEN greatest(est_s - (epoch(hz) - epoch(start)), 0)
                            WHEN state = 'PENDING' THEN est_s ELSE 0 END) / 3600 AS est
    FROM work GROUP BY ALL
), ev AS (  -- +/- GPUs when a job enters/leaves the queue and starts/ends; 0 at every bucket start
    SELECT {sel} eligible AS t, req_gpus AS d FROM _demand_jobs
        WHERE (start IS NOT NULL OR "end" IS NOT NULL OR state = 'PENDING') AND eligible < coalesce(start, "end", hz)
    UNION ALL SELECT {sel} least(coalesce(start, "end", hz), hz), -req_gpus FROM _demand_jobs
        WHERE (start IS NOT NULL OR "end" IS NOT NULL OR state = 'PENDING') AND eligible < coalesce(start, "end", hz)
    UNION ALL SELECT {sel} start, ngpus FROM _demand_jobs WHERE start IS NOT NULL AND ngpus > 0
    UNION ALL SELECT {sel} least(coalesce("end", hz), hz), -ngpus FROM _demand_jobs WHERE start IS NOT NULL AND ngpus > 0
    UNION ALL SELECT {sel} ts, 0 FROM g
), evt AS (SELECT {sel} t, sum(d) AS d FROM ev GROUP BY ALL
), lvl AS (
    SELECT {sel} t, sum(d) OVER ({part} ORDER BY t ROWS UNBOUNDED PRECEDING) AS level FROM evt
), peak AS (
    SELECT {sel} date_trunc('{freq}', t) AS ts, max(level) AS v FROM lvl
    WHERE t >= $s::TIMESTAMP AND t < $e::TIMESTAMP GROUP BY ALL
)
SELECT {gkeys} g.ts,
       coalesce(round(s.v, 9), 0)::DOUBLE AS served_gpu_hours,
       coalesce(round(x.v, 9), 0)::DOUBLE AS demanded_gpu_hours,
       coalesce(round(x.est, 9), 0)::DOUBLE AS estimated_gpu_hours,
       greatest(coalesce(round(p.v, 9), 0), 0)::DOUBLE AS peak_gpus
FROM g
LEFT JOIN served s ON {kjoin_s} AND s.ts = g.ts
LEFT JOIN demanded x ON {kjoin} AND x.ts = g.ts
LEFT JOIN peak p ON {kjoin_p} AND p.ts = g.ts
ORDER BY {gkeys} g.ts
"""


def series(con: duckdb.DuckDBPyConnection, measure: str = "demanded", freq: str = "day", by=("pool",),
           cluster: str | None = None) -> pl.DataFrame:
    """One measure as a long table (by..., ts, value) ready for `forecast.forecast_table`."""
    if measure not in MEASURES:
        raise ValueError(f"--measure: {measure!r} is not one of {', '.join(MEASURES)}")
    tab = demand_table(con, freq, by, cluster)
    return tab.select([*parse_by(by), "ts", pl.col(MEASURES[measure]).alias("value")])
