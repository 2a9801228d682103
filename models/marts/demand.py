"""The daily demand marts (``demand_day``, ``demand_peak_day``, ``demand_scopes``), built by `gpuledger refresh`
with the kernel of models/kernels/demand_measures.py; models/metrics/demand.py reads them while current.

Incremental (#15 part 2): ``demand_job`` keeps every GPU job as the kernel stages it (pool, team, queue times).
A refresh restages only the jobs ingested or updated since the last build, the jobs still open (their figures
move with the horizon and the finished runs) and those the timeline placed again (``mart_journal``); then recomputes
each scope's days from the first day any of them touches (the previous last day at the latest), over the staged
jobs that reach those days, with the run-time estimates over all jobs. A changed team mapping or partition pools,
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

#: demand_job's columns (the staged ``_demand_jobs`` without the horizon).
JOB_COLS = ('job_uid, cluster, partition, team, pool, state, submit, eligible, left_queue, start, "end", elapsed_s, '
            'timelimit_s, ngpus, req_gpus')
GROUP = ["cluster", "pool", "partition", "team"]


def _fingerprints(con) -> dict[str, int]:
    """What the stored jobs depend on besides their own rows: each cluster's team mapping (as the timeline, which
    runs first, fingerprinted it: models/marts/rollups.team_fingerprint), the partition pools."""
    fps = dict(con.sql("SELECT 'teams:' || cluster, coalesce(team_fp, 0) FROM tl_clusters WHERE horizon IS NOT NULL")
               .fetchall())
    fps["pools"] = con.sql(f"""SELECT (coalesce(sum(hash(cluster || '|' || partition || '|' || coalesce(pool, '-'))), 0)
                                       % 18446744073709551557)::UBIGINT FROM ({PARTITION_POOL_SQL})""").fetchall()[0][0]
    return fps


#: demand_job's columns that place a job's figures; of an open job, left_queue and elapsed_s move with the horizon
#: and the next `sacct` read without moving its rows before the last horizon (they count up to the horizon).
_PLACING = ("cluster", "partition", "team", "pool", "state", "submit", "eligible", "start", "end", "timelimit_s",
            "ngpus", "req_gpus")


def _stage_jobs(con, where: str) -> tuple[dict, dict]:
    """Replace demand_job's rows of the jobs matching ``where`` (over ``jobs j``) by their staging now. Returns per
    cluster (the earliest submit among the old and new rows of jobs that moved: new, gone, or a placing column
    changed; the UTC days on which open jobs that did not move submitted: only their demanded GPU-hours there
    change, with the horizon and the finished runs)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _demand_jobs AS {jobs_sql(where)}", {"cluster": None})
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _dm_old AS SELECT * FROM demand_job
                    WHERE job_uid IN (SELECT job_uid FROM jobs j WHERE {where})""")
    con.execute(f"DELETE FROM demand_job WHERE job_uid IN (SELECT job_uid FROM jobs j WHERE {where})")
    con.execute(f"INSERT INTO demand_job ({JOB_COLS}) SELECT {JOB_COLS} FROM _demand_jobs")
    differs = " OR ".join(f'o."{c}" IS DISTINCT FROM n."{c}"' for c in _PLACING)
    rows = con.sql(f"""
        WITH m AS (
            SELECT coalesce(n.cluster, o.cluster) AS cluster, least(o.submit, n.submit) AS submit, n."end" IS NULL AS open,
                   o.job_uid IS NULL OR n.job_uid IS NULL OR {differs}
                   OR (n."end" IS NOT NULL AND o.elapsed_s IS DISTINCT FROM n.elapsed_s) AS moved
            FROM _dm_old o FULL JOIN _demand_jobs n USING (job_uid))
        SELECT cluster, min(submit) FILTER (WHERE moved),
               list(DISTINCT date_trunc('day', submit)) FILTER (WHERE NOT moved AND open)
        FROM m GROUP BY cluster""").fetchall()
    return ({c: s for c, s, _ in rows if s is not None}, {c: sorted(d) for c, _, d in rows if d})


def _restage(con, last: int) -> tuple[dict, dict]:
    """Restage the jobs whose demand may have changed since ingest run ``last``; returns per cluster (the instant
    from which its rows may differ: the earliest submit of jobs that moved, the timeline's re-placement; the
    earlier days where only demanded GPU-hours may differ: :func:`_stage_jobs`)."""
    placed = warehouse.mart_changes(con, TIMELINE)
    con.execute("CREATE OR REPLACE TEMP TABLE _dm_placed (cluster VARCHAR, t TIMESTAMP)")
    if placed:
        con.executemany("INSERT INTO _dm_placed VALUES (?, ?)", list(placed.items()))
    # changed rows; still open (horizon, finished runs); placed again from T on (their pool); submitted at or after
    # the last horizon (not staged then: the staging keeps submits before the horizon)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _dm_aff AS
        SELECT job_uid FROM jobs WHERE greatest(ingest_run_id, coalesce(updated_run_id, 0)) > $last
        UNION SELECT job_uid FROM demand_job WHERE "end" IS NULL
        UNION SELECT d.job_uid FROM demand_job d JOIN _dm_placed p USING (cluster) WHERE d."end" > p.t
        UNION SELECT j.job_uid FROM jobs j JOIN demand_scopes s ON s.scope = j.cluster WHERE j.submit >= s.end_ts""",
                {"last": last})
    since, dem_days = _stage_jobs(con, "j.job_uid IN (SELECT job_uid FROM _dm_aff)")
    for c, t in placed.items():
        since[c] = min(since.get(c, t), t)
    return since, dem_days


def _scope_rows(con, scope: str, since: dt.datetime | None, dem_days: list | None = None) -> tuple | None:
    """Recompute ``scope``'s rows from the day of ``since`` (None: every day), and the demanded GPU-hours of the
    earlier ``dem_days``; returns its (first, end) span or None when it has no jobs. Other rows before that day
    are kept; groups appear or go as the full build's would."""
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
        w = measures(con, "day", list(DIMENSIONS), d, end, peak=False, rounded=False, runs_from="_dm_scope")
        p = measures(con, "day", keys, d, end, additive=False, served=False, rounded=False, runs_from="_dm_scope")
        if cl is None:
            p = p.with_columns(pl.lit(None, pl.String).alias("cluster"))
        day_df = pl.concat([day_df, w.select(day_df.columns)])
        peak_df = pl.concat([peak_df, p.select(peak_df.columns)])
    day_df = _demanded_on(con, day_df, sorted({x for x in dem_days or [] if start <= x < d}))
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


def _demanded_on(con, day_df: pl.DataFrame, days: list) -> pl.DataFrame:
    """``day_df`` with the demanded and estimated GPU-hours of ``days`` recomputed from every job of the scope
    submitted on them (demanded GPU-hours sit on the submit day; served and peaks there did not change)."""
    if not days:
        return day_df
    con.execute("""CREATE OR REPLACE TEMP TABLE _demand_jobs AS SELECT * FROM _dm_scope
                   WHERE date_trunc('day', submit) IN (SELECT unnest($days::TIMESTAMP[]))""", {"days": days})
    x = measures(con, "day", list(DIMENSIONS), days[0], days[-1] + dt.timedelta(days=1), peak=False, served=False,
                 rounded=False, runs_from="_dm_scope").filter(pl.col("ts").is_in(days))
    on = [*GROUP, "ts"]
    vals = ["demanded_gpu_hours", "estimated_gpu_hours"]
    hit = pl.col("ts").is_in(days)
    kept = day_df.filter(~hit)
    redo = day_df.filter(hit).drop(vals).join(x.select(*on, *vals), on=on, how="left").with_columns(
        [pl.col(v).fill_null(0.0) for v in vals])
    new_groups = x.join(day_df.filter(hit), on=on, how="anti").with_columns(pl.lit(0.0).alias("served_gpu_hours"))
    return pl.concat([kept, redo.select(day_df.columns), new_groups.select(day_df.columns)])


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
    fps = _fingerprints(con)
    last = warehouse.mart_run(con, MART)
    old_scopes = dict(con.sql("SELECT scope, end_ts FROM demand_scopes").fetchall())
    incremental = (not full and last is not None
                   and dict(con.sql("SELECT key, value FROM demand_state").fetchall()) == fps)
    with warehouse.transaction(con):
        if incremental:
            since, dem_days = _restage(con, last)
        else:
            con.execute("DELETE FROM demand_job")
            _stage_jobs(con, "TRUE")
            since, dem_days = {}, {}
        spans = []
        for scope in scopes:
            s = None
            if incremental and scope in old_scopes:   # new days from the last end on, what restaged jobs touch
                s = min([old_scopes[scope]] + [t for c, t in since.items() if scope in (c, ALL_CLUSTERS)])
            span = _scope_rows(con, scope, s, sorted({x for c, ds in dem_days.items() if scope in (c, ALL_CLUSTERS)
                                                      for x in ds}))
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
