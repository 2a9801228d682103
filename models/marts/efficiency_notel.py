"""The allocation of GPU jobs without telemetry per UTC day (``gpu_efficiency_notel_day``), built by `gpuledger
refresh` after the efficiency mart, so the efficiency reports over long windows read ~1M day-and-group rows
instead of expanding every job's window (#20: the 5M-job year has no telemetry; a 1-year page read 3-11 s each).

A job without telemetry (``gpu_efficiency_job.telemetry_gpu_s = 0``) is all allocation: ngpus x the seconds of
its window in each day. Rows are summed per day and every grouping column the reports offer (cluster, user,
team, account, partition, qos, pool as models/definitions/efficiency_sql.with_pool resolves it), with the jobs
overlapping the day and those starting on it (distinct jobs over consecutive days, see docs/SCHEMA.md).
models/metrics/efficiency.py reads the whole days of a window here and computes the partial edge days per job.

Incremental: ``gpu_efficiency_notel_job`` keeps each rolled-up job's window and a fingerprint of its grouping
columns as last summed. A refresh looks at the jobs the efficiency mart rewrote since the last build (its
``computed_at``) or whose job row changed, and recomputes only the days where one of them moved (an open job that
only grew: the days from its previous end on). A changed team mapping (the timeline's fingerprint), node pools
or device models, or a row count that does not add up, rebuilds it whole.
"""
from __future__ import annotations

import datetime as dt

import duckdb

from ingest import warehouse
from models.definitions.efficiency_sql import JOB_KEYS, with_pool
from models.definitions.marts import EFFICIENCY, EFFICIENCY_NOTEL as MART

TABLE = "gpu_efficiency_notel_day"
#: The marts this builder writes (noted for the serving view; its state tables are not published).
TABLES = (TABLE,)
_KEYS = ", ".join(f'"{c}"' for c in JOB_KEYS) + ", gpu_type"
#: A job's grouping columns and GPU count, as one hash: a job whose hash and start did not change moved only its end.
_FP = ("hash(concat_ws('|', j.ngpus::VARCHAR, " + ", ".join(
    f"coalesce(j.\"{c}\", '\\0')" for c in JOB_KEYS if c != "cluster") + ", e.cluster, coalesce(j.gpu_type, '\\0')))")


def _fingerprints(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """What the rows depend on besides the jobs' own rows: each cluster's team mapping (as the timeline, which runs
    first, fingerprinted it), each node's pools in the inventory, and the devices' models on nodes the inventory
    gives no pool (only there can a model name an untyped job's pool: with_pool). New telemetry devices on typed
    nodes and node state changes leave them as they are."""
    fps = dict(con.sql("SELECT 'teams:' || cluster, coalesce(team_fp, 0) FROM tl_clusters WHERE horizon IS NOT NULL")
               .fetchall())
    for key, sql in (("pools", "SELECT DISTINCT cluster || '|' || node || '|' || coalesce(gpu_type, '-') AS s "
                               "FROM nodes"),
                     ("models", "SELECT DISTINCT d.cluster || '|' || d.node || '|' || coalesce(d.model, '-') AS s "
                                "FROM gpu_devices d ANTI JOIN (SELECT cluster, node FROM nodes WHERE gpu_type IS NOT "
                                "NULL) n ON n.cluster = d.cluster AND n.node = d.node")):
        fps[key] = con.sql(f"SELECT (coalesce(sum(hash(s)), 0) % 18446744073709551557)::UBIGINT FROM ({sql})"
                           ).fetchall()[0][0]
    return fps


def _day_rows(where: str, only_dirty: bool = False) -> str:
    """Day rows of the jobs without telemetry matching ``where`` (over ``gpu_efficiency_job e`` and ``jobs j``):
    per day and group, allocated GPU-seconds, jobs overlapping the day, jobs starting on it. ``only_dirty``: only
    the days in ``_nt_days``. The pool is resolved per job, before its window is cut into days."""
    cols = ", ".join(f'j."{c}"' for c in JOB_KEYS if c != "cluster")
    keep = " WHERE day::DATE IN (SELECT day FROM _nt_days)" if only_dirty else ""
    return f"""
        WITH jb AS MATERIALIZED (
            SELECT e.job_uid, e.cluster, {cols}, j.gpu_type AS _job_gpu_type, e.window_start, e.window_end, j.ngpus
            FROM gpu_efficiency_job e JOIN jobs j USING (job_uid)
            WHERE e.telemetry_gpu_s = 0 AND e.window_end > e.window_start AND ({where})),
        p AS (
            SELECT *, unnest(generate_series(date_trunc('day', window_start), window_end - INTERVAL 1 MICROSECOND,
                                             INTERVAL 1 DAY)) AS day
            FROM ({with_pool('jb')}))
        SELECT day::DATE AS day, {_KEYS},
               sum(ngpus * epoch(least(window_end, day + INTERVAL 1 DAY) - greatest(window_start, day))) AS alloc_gpu_s,
               count(*) AS jobs, count(*) FILTER (WHERE date_trunc('day', window_start) = day) AS jobs_first
        FROM p{keep} GROUP BY ALL"""


def _job_rows(where: str) -> str:
    """The state rows (window, fingerprint) of the jobs without telemetry matching ``where``."""
    return f"""SELECT e.job_uid, e.window_start, e.window_end, {_FP} AS fp
               FROM gpu_efficiency_job e JOIN jobs j USING (job_uid)
               WHERE e.telemetry_gpu_s = 0 AND e.window_end > e.window_start AND ({where})"""


def _dirty_days(con: duckdb.DuckDBPyConnection, built: dt.datetime, last: int) -> None:
    """``_nt_cand``: jobs the efficiency mart rewrote since the last build (``built``: its end; the efficiency
    build that runs next stamps its rows later) or whose job row changed since run ``last``; ``_nt_new`` their
    rows now; ``_nt_days``: the UTC days whose rows they move."""
    con.execute("""CREATE OR REPLACE TEMP TABLE _nt_cand AS
                   SELECT job_uid FROM gpu_efficiency_job WHERE computed_at >= $w
                   UNION SELECT job_uid FROM jobs WHERE coalesce(updated_run_id, ingest_run_id) > $last""",
                {"w": built, "last": last})
    con.execute(f"CREATE OR REPLACE TEMP TABLE _nt_new AS {_job_rows('e.job_uid IN (SELECT job_uid FROM _nt_cand)')}")
    # per job the day ranges it moved: old and new windows, or only the end's days when nothing else changed
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _nt_days AS
        WITH o AS (SELECT * FROM gpu_efficiency_notel_job WHERE job_uid IN (SELECT job_uid FROM _nt_cand)),
        r AS (
            SELECT CASE WHEN o.fp = n.fp AND o.window_start = n.window_start THEN least(o.window_end, n.window_end)
                        ELSE n.window_start END AS lo, n.window_end AS hi
            FROM _nt_new n LEFT JOIN o USING (job_uid)
            WHERE o.job_uid IS NULL OR o.fp <> n.fp OR o.window_start <> n.window_start OR o.window_end <> n.window_end
            UNION ALL
            SELECT CASE WHEN o.fp = n.fp AND o.window_start = n.window_start THEN least(o.window_end, n.window_end)
                        ELSE o.window_start END, o.window_end
            FROM o LEFT JOIN _nt_new n USING (job_uid)
            WHERE n.job_uid IS NULL OR o.fp <> n.fp OR o.window_start <> n.window_start OR o.window_end <> n.window_end)
        SELECT DISTINCT unnest(generate_series(date_trunc('day', lo - INTERVAL 1 MICROSECOND),
                                               hi - INTERVAL 1 MICROSECOND, INTERVAL 1 DAY))::DATE AS day
        FROM r WHERE hi > lo - INTERVAL 1 MICROSECOND""")


def _reaching(con: duckdb.DuckDBPyConnection) -> str:
    """SQL over ``gpu_efficiency_job e``: the jobs whose windows reach a day of ``_nt_days``, as a few spans of
    consecutive days (zone maps skip the rest of the table; one span from the first to the last past 16)."""
    spans = con.sql("""SELECT min(day), max(day) + 1 FROM (SELECT day, day - (row_number() OVER (ORDER BY day))::INTEGER
                       AS run FROM _nt_days) GROUP BY run ORDER BY 1""").fetchall()
    if len(spans) > 16:
        spans = [(spans[0][0], spans[-1][1])]
    return " OR ".join(f"(e.window_start < DATE '{b}' AND e.window_end > DATE '{a}')" for a, b in spans)


def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> None:
    """Mart builder for models/pipeline/refresh.py (after the efficiency mart): the days moved since the last
    build, or all of them (``full``, never built, a fingerprint changed)."""
    eff_run = warehouse.mart_run(con, EFFICIENCY) or 0
    last, built = (con.execute("SELECT last_run_id, refreshed_at FROM mart_state WHERE mart = ?", [MART]).fetchall()
                   or [(None, None)])[0]
    fps = _fingerprints(con)
    full = full or last is None or dict(con.sql("SELECT key, value FROM gpu_efficiency_notel_state").fetchall()) != fps
    since = None
    if not full:
        _dirty_days(con, built, last)
        since = con.sql("SELECT min(day) FROM _nt_days").fetchall()[0][0]
    with warehouse.transaction(con):
        if full:
            con.execute(f"DELETE FROM {TABLE}")
            con.execute("DELETE FROM gpu_efficiency_notel_job")
            con.execute(f"INSERT INTO {TABLE} {_day_rows('TRUE')} ORDER BY day")
            con.execute(f"INSERT INTO gpu_efficiency_notel_job {_job_rows('TRUE')}")
            warehouse.note_changed(con, TABLES)
        elif since is not None:
            con.execute(f"DELETE FROM {TABLE} WHERE day IN (SELECT day FROM _nt_days)")
            con.execute(f"INSERT INTO {TABLE} {_day_rows(_reaching(con), only_dirty=True)} ORDER BY day")
            con.execute("DELETE FROM gpu_efficiency_notel_job WHERE job_uid IN (SELECT job_uid FROM _nt_cand)")
            con.execute("INSERT INTO gpu_efficiency_notel_job SELECT * FROM _nt_new")
            warehouse.note_changed(con, TABLES, since)
        con.execute("DELETE FROM gpu_efficiency_notel_state")
        con.executemany("INSERT INTO gpu_efficiency_notel_state VALUES (?, ?)",
                        list(fps.items()))
        warehouse.record_mart(con, MART, eff_run)
    for t in ("_nt_cand", "_nt_new", "_nt_days"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    # a job can leave the efficiency mart without a change to its job row (a purge): then the rows do not add up
    if not full and con.sql("""SELECT (SELECT count(*) FROM gpu_efficiency_notel_job) <> (SELECT count(*)
                               FROM gpu_efficiency_job WHERE telemetry_gpu_s = 0 AND window_end > window_start)"""
                            ).fetchall()[0][0]:
        build(con, full=True)
