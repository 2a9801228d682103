"""The daily demand marts (``demand_day``, ``demand_peak_day``, ``demand_scopes``), built by `gpuledger refresh`
with the kernel of models/kernels/demand_measures.py; models/metrics/demand.py reads them while current.

Incremental (#15 part 2): ``demand_job`` keeps every GPU job as the kernel stages it (pool, team, queue times).
A refresh restages only the jobs ingested or updated since the last build, the jobs still open (their figures
move with the horizon and the medians) and those the timeline placed again (``mart_journal``); then recomputes
each scope's days from the first day any of them touches (the previous last day at the latest), over the staged
jobs that reach those days, with the run-time medians over all jobs. A changed team mapping or partition pools,
or a cluster that came or went, rebuilds it whole.
"""
from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from ingest import warehouse
from models.definitions.jobs_sql import PARTITION_POOL_SQL
from models.definitions.marts import DEMAND as MART, TIMELINE
from models.definitions.times import floor_day
from models.kernels.demand_measures import ALL_CLUSTERS, DIMENSIONS, jobs_sql, measures
from models.marts.rollups import team_fingerprint

#: demand_job's columns (the staged ``_demand_jobs`` without the horizon).
JOB_COLS = ('job_uid, cluster, partition, team, pool, state, submit, eligible, left_queue, start, "end", elapsed_s, '
            'timelimit_s, ngpus, req_gpus')
GROUP = ["cluster", "pool", "partition", "team"]


def _fingerprints(con, clusters: list[str]) -> dict[str, int]:
    """What the stored jobs depend on besides their own rows: each cluster's team mapping, the partition pools."""
    fps = {f"teams:{c}": team_fingerprint(con, c) for c in clusters}
    fps["pools"] = con.sql(f"""SELECT (coalesce(sum(hash(cluster || '|' || partition || '|' || coalesce(pool, '-'))), 0)
                                       % 18446744073709551557)::UBIGINT FROM ({PARTITION_POOL_SQL})""").fetchall()[0][0]
    return fps


def _stage_jobs(con, where: str) -> dict[str, dt.datetime]:
    """Replace demand_job's rows of the jobs matching ``where`` (over ``jobs j``) by their staging now; returns per
    cluster the earliest submit among the old and new rows (their demanded GPU-hours sit on that day)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _demand_jobs AS {jobs_sql(where)}", {"cluster": None})
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _dm_old AS SELECT cluster, min(submit) AS s FROM demand_job
                    WHERE job_uid IN (SELECT job_uid FROM jobs j WHERE {where}) GROUP BY cluster""")
    con.execute(f"DELETE FROM demand_job WHERE job_uid IN (SELECT job_uid FROM jobs j WHERE {where})")
    con.execute(f"INSERT INTO demand_job ({JOB_COLS}) SELECT {JOB_COLS} FROM _demand_jobs")
    rows = con.sql("""SELECT cluster, min(s) FROM (SELECT cluster, s FROM _dm_old
                      UNION ALL SELECT cluster, min(submit) FROM _demand_jobs GROUP BY cluster) GROUP BY cluster""")
    return {c: s for c, s in rows.fetchall() if s is not None}


def _restage(con, last: int) -> dict[str, dt.datetime]:
    """Restage the jobs whose demand may have changed since ingest run ``last``; returns per cluster the instant
    from which its rows may differ (the earliest submit of those jobs, the timeline's re-placement)."""
    placed = warehouse.mart_changes(con, TIMELINE)
    con.execute("CREATE OR REPLACE TEMP TABLE _dm_placed (cluster VARCHAR, t TIMESTAMP)")
    if placed:
        con.executemany("INSERT INTO _dm_placed VALUES (?, ?)", list(placed.items()))
    # changed rows; still open (horizon, medians); placed again from T on (their pool); submitted at or after
    # the last horizon (not staged then: the staging keeps submits before the horizon)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _dm_aff AS
        SELECT job_uid FROM jobs WHERE greatest(ingest_run_id, coalesce(updated_run_id, 0)) > $last
        UNION SELECT job_uid FROM demand_job WHERE "end" IS NULL
        UNION SELECT d.job_uid FROM demand_job d JOIN _dm_placed p USING (cluster) WHERE d."end" > p.t
        UNION SELECT j.job_uid FROM jobs j JOIN demand_scopes s ON s.scope = j.cluster WHERE j.submit >= s.end_ts""",
                {"last": last})
    since = _stage_jobs(con, "j.job_uid IN (SELECT job_uid FROM _dm_aff)")
    for c, t in placed.items():
        since[c] = min(since.get(c, t), t)
    return since


def _scope_rows(con, scope: str, since: dt.datetime | None) -> tuple | None:
    """Recompute ``scope``'s rows from the day of ``since`` (None: every day); returns its (first, end) span or
    None when it has no jobs. Rows before that day are kept; groups appear or go as the full build's would."""
    cl = None if scope == ALL_CLUSTERS else scope
    con.execute("""CREATE OR REPLACE TEMP VIEW _dm_scope AS
                   SELECT d.*, c.horizon AS hz FROM demand_job d JOIN tl_clusters c USING (cluster)
                   WHERE c.horizon IS NOT NULL AND d.submit < c.horizon""" + ("" if cl is None else
                f" AND d.cluster = '{cl.replace(chr(39), chr(39) * 2)}'"))
    start, end = con.sql("SELECT date_trunc('day', min(submit)), date_trunc('day', min(hz)) FROM _dm_scope").fetchall()[0]
    if start is None:
        return None
    d = start if since is None else min(max(floor_day(since), start), max(end, start))
    old_day = con.sql("SELECT * FROM demand_day WHERE scope = ? AND ts >= ? AND ts < ?", params=[scope, start, d]).pl()
    old_peak = con.sql("SELECT * FROM demand_peak_day WHERE scope = ? AND ts >= ? AND ts < ?",
                        params=[scope, start, d]).pl()
    day_df, peak_df = old_day.drop("scope"), old_peak.drop("scope")
    keys = ["pool"] if cl is None else ["cluster", "pool"]
    if d < end:
        # the jobs that reach day d: every other job's events and GPU-hours all lie before it
        con.execute("""CREATE OR REPLACE TEMP TABLE _demand_jobs AS SELECT * FROM _dm_scope
                       WHERE submit >= $d OR "end" IS NULL OR "end" > $d""", {"d": d})
        w = measures(con, "day", list(DIMENSIONS), d, end, peak=False, rounded=False, med_from="_dm_scope")
        p = measures(con, "day", keys, d, end, additive=False, served=False, rounded=False, med_from="_dm_scope")
        if cl is None:
            p = p.with_columns(pl.lit(None, pl.String).alias("cluster"))
        day_df = pl.concat([day_df, w.select(day_df.columns)])
        peak_df = pl.concat([peak_df, p.select(peak_df.columns)])
    grid = pl.DataFrame({"ts": pl.datetime_range(start, end, "1d", closed="left", eager=True)
                         if end > start else []}, schema={"ts": pl.Datetime("us")})
    # the full build's groups: every job's, and (demand_day) any that served GPU-hours on a day of the scope
    groups = con.sql("SELECT DISTINCT cluster, pool, partition, team FROM _dm_scope").pl()
    groups = pl.concat([groups, day_df.filter(pl.col("served_gpu_hours") != 0).select(GROUP)]).unique()
    day_df = _complete(day_df.join(groups, on=GROUP, how="semi"), groups, grid, GROUP,
                       ["served_gpu_hours", "demanded_gpu_hours", "estimated_gpu_hours"])
    pgroups = con.sql(f"SELECT DISTINCT {', '.join(keys)} FROM _dm_scope").pl()
    peak_df = _complete(peak_df.join(pgroups, on=keys, how="semi", nulls_equal=True), pgroups, grid, keys,
                        ["peak_gpus"])
    if cl is None:
        peak_df = peak_df.with_columns(pl.lit(None, pl.String).alias("cluster"))
    for t, df in (("demand_day", day_df), ("demand_peak_day", peak_df)):
        con.execute(f"DELETE FROM {t} WHERE scope = ?", [scope])
        out = df.with_columns(pl.lit(scope).alias("scope"))   # noqa: F841  (read by DuckDB below)
        con.execute(f"INSERT INTO {t} BY NAME SELECT * FROM out ORDER BY ts")
    return start, end


def _complete(df: pl.DataFrame, groups: pl.DataFrame, grid: pl.DataFrame, keys: list[str],
              values: list[str]) -> pl.DataFrame:
    """``df`` with a zero row for every (group, day) it lacks: every group has every day of the scope."""
    full = groups.join(grid, how="cross")
    missing = full.join(df, on=[*keys, "ts"], how="anti", nulls_equal=True).with_columns(
        [pl.lit(0.0).alias(v) for v in values]
        + [pl.lit(None, df.schema[c]).alias(c) for c in df.columns if c not in (*keys, "ts", *values)])
    return pl.concat([df, missing.select(df.columns)], how="vertical_relaxed")


def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> None:
    """Mart builder for models/pipeline/refresh.py: the daily demand marts, incrementally (module docstring;
    skipped when no ingest ran since the last build, unless ``full``).

    Per scope (each cluster alone, and with several clusters all of them together), exactly what
    :func:`demand_table` computes from the jobs for ``freq="day"`` and that cluster: ``demand_day`` holds the
    additive measures (GPU-hours, unrounded) per cluster, pool, partition and team and day; ``demand_peak_day``
    the peak GPUs per pool (per cluster and pool in a cluster's scope); ``demand_scopes`` the day range."""
    newest = warehouse.newest_run(con)
    if not full and warehouse.is_current(con, MART):
        return
    clusters = [r[0] for r in con.sql("""SELECT DISTINCT cluster FROM tl_clusters WHERE horizon IS NOT NULL
                                         ORDER BY cluster""").fetchall()]
    scopes = clusters + ([ALL_CLUSTERS] if len(clusters) > 1 else [])
    fps = _fingerprints(con, clusters)
    last = warehouse.mart_run(con, MART)
    old_scopes = dict(con.sql("SELECT scope, end_ts FROM demand_scopes").fetchall())
    incremental = (not full and last is not None
                   and dict(con.sql("SELECT key, value FROM demand_state").fetchall()) == fps)
    with warehouse.transaction(con):
        if incremental:
            since = _restage(con, last)
        else:
            con.execute("DELETE FROM demand_job")
            _stage_jobs(con, "TRUE")
            since = {}
        spans = []
        for scope in scopes:
            s = None
            if incremental and scope in old_scopes:   # new days from the last end on, what restaged jobs touch
                s = min([old_scopes[scope]] + [t for c, t in since.items() if scope in (c, ALL_CLUSTERS)])
            span = _scope_rows(con, scope, s)
            if span is not None:
                spans.append((scope, *span))
        for t in ("demand_day", "demand_peak_day", "demand_scopes"):
            con.execute(f"DELETE FROM {t} WHERE scope NOT IN (SELECT unnest(?::VARCHAR[]))", [[s[0] for s in spans]])
        con.execute("DELETE FROM demand_scopes")
        if spans:
            con.executemany("INSERT INTO demand_scopes VALUES (?, ?, ?)", spans)
        con.execute("DELETE FROM demand_state")
        con.executemany("INSERT INTO demand_state VALUES (?, ?)", list(fps.items()))
        warehouse.clear_mart_changes(con, TIMELINE)
        warehouse.record_mart(con, MART, newest)
    for t in ("_demand_jobs", "_dm_old", "_dm_aff", "_dm_placed"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    con.execute("DROP VIEW IF EXISTS _dm_scope")
