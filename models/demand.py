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

from ingest import warehouse
from models import refresh, timeline

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
                 cluster: str | None = None, mart: bool = True) -> pl.DataFrame:
    """All three measures per bucket and group: (by..., ts, served_gpu_hours, demanded_gpu_hours,
    estimated_gpu_hours, peak_gpus). Every group has every bucket from the first submit to the last complete
    bucket (zeros where nothing happened). Hours and GPUs; timestamps are bucket starts, UTC.

    Daily tables come from the ``demand_day`` marts when `gpuledger refresh` built them after the last ingest and
    they hold the grouping (peaks are kept per pool only); otherwise, or with ``mart=False``, they are computed
    from the jobs."""
    if freq not in FREQS:
        raise ValueError(f"--freq: {freq!r} is not one of {', '.join(FREQS)}")
    by = parse_by(by)
    if mart and freq == "day":
        got = _from_mart(con, by, cluster, peak=True)
        if got is not None:
            return got
    return _direct(con, freq, by, cluster, peak=True)


def _empty(by: list[str], peak: bool = True) -> pl.DataFrame:
    return pl.DataFrame(schema={**{k: pl.String for k in by}, "ts": pl.Datetime("us"), "served_gpu_hours": pl.Float64,
                                "demanded_gpu_hours": pl.Float64, "estimated_gpu_hours": pl.Float64,
                                **({"peak_gpus": pl.Float64} if peak else {})})


def _direct(con, freq: str, by: list[str], cluster: str | None, peak: bool = True) -> pl.DataFrame:
    """The measures computed from the jobs (and the timeline's allocations); without ``peak``, no peak_gpus."""
    hz = _load_jobs(con, cluster)
    if hz is None:
        return _empty(by, peak)
    start, end = con.sql(f"SELECT date_trunc('{freq}', min(submit)), date_trunc('{freq}', min(hz)) "
                         "FROM _demand_jobs").fetchall()[0]
    if end <= start:
        return _empty(by, peak)
    return _measures(con, freq, by, start, end, peak=peak)


def _measures(con, freq: str, by: list[str], start, end, peak: bool = True, served: bool = True,
              additive: bool = True, rounded: bool = True) -> pl.DataFrame:
    """_MEASURES_SQL over the staged ``_demand_jobs`` for the buckets [start, end); the parts not asked for are
    left out (``rounded=False`` keeps the sums unrounded, for the marts)."""
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
        part=f"PARTITION BY {keys}" if by else "", alloc=timeline.job_alloc_in_buckets_sql(freq),
        asel="".join(f'{"a.cluster" if k == "cluster" else "coalesce(a.gpu_type, j.pool)" if k == "pool" else "j." + k} AS "{k}", '
                     for k in by),
        served_groups=f"UNION SELECT DISTINCT {sel} 1 FROM served" if served else "",
        cols=", ".join(c for c in cols if c), joins=joins)
    out = con.sql(sql, params={"s": start, "e": end}).pl()
    return out.cast({k: pl.String for k in by}).cast({"ts": pl.Datetime("us")})


_MEASURES_SQL = """
WITH grid AS (
    SELECT unnest(generate_series($s::TIMESTAMP, $e::TIMESTAMP - INTERVAL 1 {freq}, INTERVAL 1 {freq})) AS ts
), served AS (   -- the timeline's allocation, split by bucket, on the pool each piece ran on
    SELECT {asel} a.bucket AS ts, sum(a.gpu_s) / 3600 AS v
    FROM ({alloc}) a JOIN _demand_jobs j USING (job_uid)
    GROUP BY ALL
), groups AS (SELECT DISTINCT {sel} 1 AS one FROM _demand_jobs {served_groups}),
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
SELECT {gkeys} g.ts, {cols}
FROM g
{joins}ORDER BY {gkeys} g.ts
"""


def series(con: duckdb.DuckDBPyConnection, measure: str = "demanded", freq: str = "day", by=("pool",),
           cluster: str | None = None) -> pl.DataFrame:
    """One measure as a long table (by..., ts, value) ready for `forecast.forecast_table`."""
    if measure not in MEASURES:
        raise ValueError(f"--measure: {measure!r} is not one of {', '.join(MEASURES)}")
    by = parse_by(by)
    if freq not in FREQS:
        raise ValueError(f"--freq: {freq!r} is not one of {', '.join(FREQS)}")
    tab = _from_mart(con, by, cluster, peak=measure == "peak") if freq == "day" else None
    if tab is None:
        tab = _direct(con, freq, by, cluster, peak=measure == "peak")
    return tab.select([*by, "ts", pl.col(MEASURES[measure]).alias("value")])


# ---------------------------------------------------------------- the daily marts (built by `gpuledger refresh`)

#: The scope of the mart rows computed over every cluster together (written only when there are several).
ALL_CLUSTERS = "*"


def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> None:
    """Mart builder for models/refresh.py: the daily demand marts, recomputed whole (skipped when no ingest ran
    since the last build, unless ``full``).

    Per scope (each cluster alone, and with several clusters all of them together), exactly what
    :func:`demand_table` computes from the jobs for ``freq="day"`` and that cluster: ``demand_day`` holds the
    additive measures (GPU-hours, unrounded) per cluster, pool, partition and team and day; ``demand_peak_day``
    the peak GPUs per pool (per cluster and pool in a cluster's scope); ``demand_scopes`` the day range."""
    newest = con.sql("SELECT coalesce(max(run_id), 0) FROM ingest_runs WHERE status = 'ok'").fetchall()[0][0]
    last = refresh.mart_run(con, "demand")
    if not full and last is not None and last >= newest:
        return
    timeline.ensure_current(con)
    clusters = [r[0] for r in con.sql("""SELECT DISTINCT cluster FROM tl_clusters WHERE horizon IS NOT NULL
                                         ORDER BY cluster""").fetchall()]
    scopes = clusters + ([ALL_CLUSTERS] if len(clusters) > 1 else [])
    days, peaks, spans = [], [], []
    for scope in scopes:
        hz = _load_jobs(con, None if scope == ALL_CLUSTERS else scope)
        if hz is None:
            continue
        start, end = con.sql("SELECT date_trunc('day', min(submit)), date_trunc('day', min(hz)) "
                             "FROM _demand_jobs").fetchall()[0]
        spans.append((scope, start, end))
        if end <= start:
            continue
        d = _measures(con, "day", list(DIMENSIONS), start, end, peak=False, rounded=False)
        days.append(d.with_columns(pl.lit(scope).alias("scope")))
        keys = ["pool"] if scope == ALL_CLUSTERS else ["cluster", "pool"]
        p = _measures(con, "day", keys, start, end, additive=False, served=False, rounded=False)
        if scope == ALL_CLUSTERS:
            p = p.with_columns(pl.lit(None, pl.String).alias("cluster"))
        peaks.append(p.with_columns(pl.lit(scope).alias("scope")))
    con.execute("DROP TABLE IF EXISTS _demand_jobs")
    day_df = pl.concat(days) if days else None
    peak_df = pl.concat(peaks, how="diagonal") if peaks else None
    span_df = pl.DataFrame(spans, schema={"scope": pl.String, "first_ts": pl.Datetime("us"),
                                          "end_ts": pl.Datetime("us")}, orient="row")
    with warehouse.transaction(con):
        for t in ("demand_day", "demand_peak_day", "demand_scopes"):
            con.execute(f"DELETE FROM {t}")
        if day_df is not None:
            con.execute("INSERT INTO demand_day BY NAME SELECT * FROM day_df ORDER BY scope, ts")
            con.execute("INSERT INTO demand_peak_day BY NAME SELECT * FROM peak_df ORDER BY scope, ts")
        con.execute("INSERT INTO demand_scopes BY NAME SELECT * FROM span_df")
        refresh.record_mart(con, "demand", newest)


def _mart_scope(con, cluster: str | None) -> tuple[str, list[str]] | None:
    """(scope answering ``cluster``, the scopes built) when the marts are current; None otherwise (not built
    yet, an ingest ran since, or a warehouse older than the marts)."""
    try:
        last = refresh.mart_run(con, "demand")
        if last is None:
            return None
        newest = con.sql("SELECT coalesce(max(run_id), 0) FROM ingest_runs WHERE status = 'ok'").fetchall()[0][0]
        if newest > last:
            return None
        scopes = [r[0] for r in con.sql("SELECT scope FROM demand_scopes ORDER BY scope").fetchall()]
    except duckdb.CatalogException:
        return None
    if cluster is not None:
        return cluster, scopes
    clusters = [s for s in scopes if s != ALL_CLUSTERS]
    return (clusters[0] if len(clusters) == 1 else ALL_CLUSTERS), scopes


def _from_mart(con, by: list[str], cluster: str | None, peak: bool) -> pl.DataFrame | None:
    """The daily table read from the marts, or None when they cannot answer (stale, or a peak for a grouping
    other than pool / cluster and pool)."""
    got = _mart_scope(con, cluster)
    if got is None:
        return None
    scope, scopes = got
    if peak and set(by) not in ({"pool"}, {"cluster", "pool"}):
        return None
    if scope not in scopes:
        return _empty(by, peak)
    span = con.execute("SELECT first_ts, end_ts FROM demand_scopes WHERE scope = ?", [scope]).fetchall()[0]
    if span[1] <= span[0]:
        return _empty(by, peak)
    keys = ", ".join(f'"{k}"' for k in by)
    sel = (keys + ", ") if by else ""
    gkeys = ", ".join(f'g."{k}"' for k in by) + (", " if by else "")
    on = "".join(f' AND x."{k}" = g."{k}"' for k in by)
    peak_sql = ""
    if peak:
        # a cluster's own scope keeps its peaks per cluster and pool; all clusters together keep them per pool,
        # and per cluster and pool they are each cluster's (the level of a cluster's pool is its own jobs')
        src = ("scope = $scope" if scope != ALL_CLUSTERS or set(by) == {"pool"}
               else f"scope <> '{ALL_CLUSTERS}'")
        peak_sql = f"""LEFT JOIN (SELECT {sel} ts, peak_gpus FROM demand_peak_day WHERE {src}) p
                       ON p.ts = g.ts{on.replace('x.', 'p.')}"""
    q = f"""
        WITH grid AS (SELECT unnest(generate_series($s::TIMESTAMP, $e::TIMESTAMP - INTERVAL 1 day,
                                                    INTERVAL 1 day)) AS ts),
        g AS (SELECT * FROM (SELECT DISTINCT {sel} 1 AS one FROM demand_day WHERE scope = $scope) CROSS JOIN grid),
        x AS (SELECT {sel} ts, sum(served_gpu_hours) AS served, sum(demanded_gpu_hours) AS demanded,
                     sum(estimated_gpu_hours) AS est
              FROM demand_day WHERE scope = $scope GROUP BY ALL)
        SELECT {gkeys} g.ts, coalesce(round(x.served, 9), 0)::DOUBLE AS served_gpu_hours,
               coalesce(round(x.demanded, 9), 0)::DOUBLE AS demanded_gpu_hours,
               coalesce(round(x.est, 9), 0)::DOUBLE AS estimated_gpu_hours
               {', greatest(coalesce(round(p.peak_gpus, 9), 0), 0)::DOUBLE AS peak_gpus' if peak else ''}
        FROM g LEFT JOIN x ON x.ts = g.ts{on}
        {peak_sql}
        ORDER BY {gkeys} g.ts"""
    out = con.sql(q, params={"scope": scope, "s": span[0], "e": span[1]}).pl()
    return out.cast({k: pl.String for k in by}).cast({"ts": pl.Datetime("us")})
