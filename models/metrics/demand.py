"""GPU demand series from the warehouse's jobs, per hour or day and per cluster, pool, partition and team.

Three measures, in half-open UTC buckets [ts, ts + 1 bucket) (docs/FORECAST.md, "Which series answers what"):

- ``served_gpu_hours``: allocated GPU-hours, ngpus × the part of [start, end) inside the bucket. What the cluster
  delivered; capped by capacity, so it understates demand when queues are long.
- ``demanded_gpu_hours``: GPU-hours of work *submitted* in the bucket, requested GPUs × run time, booked to the
  submit bucket and not capped by a full cluster (the offered load). Run time is the elapsed time of jobs that
  ended; a job not finished (running, or pending: run 0 s) counts its expected run time given what it has run by
  the horizon: the mean run time of the finished jobs of its partition (else cluster) that ran at least that
  long, else its time limit, capped by its time limit. ``estimated_gpu_hours`` says how much of it is estimated.
- ``peak_gpus``: the most GPUs running + pending at any instant of the bucket (pending jobs count their
  requested GPUs from eligible time until they start or leave the queue).

Served GPU-hours, the data horizon and where each job ran come from the occupancy timeline (models/metrics/timeline.py),
so served demand agrees with utilization to the GPU-second. A job's pool is the pool it ran on (most
GPU-seconds), else its typed request, else the single GPU type of its partition's current nodes, else
``(any)``; team NULL is reported as ``(unmapped)`` (models/definitions/labels.py). Only buckets that end by the data horizon are returned,
so the last bucket is never a partial one.
"""
from __future__ import annotations

import duckdb
import polars as pl

from ingest import warehouse
from models.kernels.demand_measures import (ALL_CLUSTERS, DIMENSIONS, FREQS, empty, load_jobs, measures)
from models.definitions.marts import DEMAND as MART

MEASURES = {"served": "served_gpu_hours", "demanded": "demanded_gpu_hours", "peak": "peak_gpus"}


def parse_by(by) -> list[str]:
    """'team,pool' or a list → validated dimension names (identifiers come only from this whitelist)."""
    cols = [c.strip() for c in (by.split(",") if isinstance(by, str) else by) if c and c.strip()]
    bad = [c for c in cols if c not in DIMENSIONS]
    if bad:
        raise ValueError(f"--by: unknown column {bad[0]!r}; choose from {', '.join(DIMENSIONS)}")
    return list(dict.fromkeys(cols))


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


def _direct(con, freq: str, by: list[str], cluster: str | None, peak: bool = True) -> pl.DataFrame:
    """The measures computed from the jobs (and the timeline's allocations); without ``peak``, no peak_gpus."""
    hz = load_jobs(con, cluster)
    if hz is None:
        return empty(by, peak)
    start, end = con.sql(f"SELECT date_trunc('{freq}', min(submit)), date_trunc('{freq}', min(hz)) "
                         "FROM _demand_jobs").fetchall()[0]
    if end <= start:
        return empty(by, peak)
    return measures(con, freq, by, start, end, peak=peak)


def series(con: duckdb.DuckDBPyConnection, measure: str = "demanded", freq: str = "day", by=("pool",),
           cluster: str | None = None, estimated: bool = False) -> pl.DataFrame:
    """One measure as a long table (by..., ts, value) ready for `forecast.forecast_table`; with ``estimated`` a
    demanded series also has ``estimated`` (its GPU-hours of work not finished beyond what it has run)."""
    if measure not in MEASURES:
        raise ValueError(f"--measure: {measure!r} is not one of {', '.join(MEASURES)}")
    by = parse_by(by)
    if freq not in FREQS:
        raise ValueError(f"--freq: {freq!r} is not one of {', '.join(FREQS)}")
    tab = _from_mart(con, by, cluster, peak=measure == "peak") if freq == "day" else None
    if tab is None:
        tab = _direct(con, freq, by, cluster, peak=measure == "peak")
    extra = [pl.col("estimated_gpu_hours").alias("estimated")] if estimated and measure == "demanded" else []
    return tab.select([*by, "ts", pl.col(MEASURES[measure]).alias("value"), *extra])


def _mart_scope(con, cluster: str | None) -> tuple[str, list[str]] | None:
    """(scope answering ``cluster``, the scopes built) when the marts are current; None otherwise (not built
    yet, an ingest ran since, or a warehouse older than the marts)."""
    try:
        if not warehouse.is_current(con, MART):
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
        return empty(by, peak)
    span = con.execute("SELECT first_ts, end_ts FROM demand_scopes WHERE scope = ?", [scope]).fetchall()[0]
    if span[1] <= span[0]:
        return empty(by, peak)
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
