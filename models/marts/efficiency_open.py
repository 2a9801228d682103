"""The efficiency mart's merge of new telemetry into open jobs (``gpu_efficiency_open_hour``,
``gpu_efficiency_open_att``): an open GPU job on one node whose allocation did not change since the last refresh
is attributed again only from its *cut* on (the first minute anything it depends on may have changed: its own
and its neighbours' window growth, new readings, a changed neighbour), and its rows are merged:

- the hours from the hour of the cut on are recomputed whole: the stored attribution of that hour's minutes
  before the cut (``gpu_efficiency_open_att``; a minute's attribution depends only on that minute's readings and
  jobs, which did not change before the cut) plus the fresh one from the cut on, with readings from 5 minutes
  before the hour, so the zero stretches that decide idle minutes are seen whole enough (a stretch reaching
  back further is >= 5 minutes long anyway);
- the hours before stay as stored; the job row adds them up with the new ones, and what does not add up is kept
  per job and hour in ``gpu_efficiency_open_hour``: GPU-seconds per activity value (the exact p95), coverage per
  metric (the metric choice), the devices (their count), the rollup GPU-seconds;
- a job whose metric choice changes with the new readings is attributed again whole (its stored hours were
  scored on the other metric).

Every other target (ended, requeued, late accounting, a neighbour of one of those, labelled telemetry, a node
whose readings carry job labels) is attributed whole as before. The state is kept for open one-node jobs only
and dropped when they end, when their last refresh attributes them whole.
"""
from __future__ import annotations

import duckdb

from models.definitions.jobs_sql import open_sql

METRIC_NAMES = "['SM_ACTIVE', 'GR_ENGINE_ACTIVE', 'GPU_UTIL']"


def eligible(con: duckdb.DuckDBPyConnection) -> None:
    """Clear ``_eff_targets.cut`` (attribute whole) where merging is not possible: the job is not open on one
    node, was never built, its cut is not in the hour its stored window ended (the stored attribution covers that
    hour only) or not after its start, or its node's readings carry job labels (a label makes a job exact over
    its whole window, which the minutes after the cut alone do not show)."""
    con.execute("UPDATE _eff_targets SET cut = date_trunc('minute', cut) WHERE cut IS NOT NULL")
    con.execute(f"""
        UPDATE _eff_targets t SET cut = NULL
        WHERE t.cut IS NOT NULL AND t.job_uid NOT IN (
            SELECT j.job_uid FROM jobs j JOIN gpu_efficiency_job e USING (job_uid)
                 JOIN (SELECT job_uid, any_value(cluster) AS cluster, any_value(node) AS node FROM job_nodes
                       WHERE job_uid IN (SELECT job_uid FROM _eff_targets WHERE cut IS NOT NULL)
                       GROUP BY job_uid HAVING count(*) = 1) n USING (job_uid)
                 JOIN _eff_targets x USING (job_uid)
            WHERE {open_sql()} AND x.cut > j.start AND date_trunc('hour', x.cut) = date_trunc('hour', e.window_end)
              AND NOT EXISTS (SELECT 1 FROM gpu_samples g WHERE g.cluster = n.cluster AND g.node = n.node
                              AND g.hpc_jobs IS NOT NULL))""")


def keep(con: duckdb.DuckDBPyConnection) -> None:
    """``_eff_keep``: the jobs of ``_jw`` whose state is kept (open, on one node)."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _eff_keep AS
        SELECT w.job_uid FROM _jw w JOIN jobs j USING (job_uid)
        WHERE {open_sql()} AND (SELECT count(*) FROM job_nodes jn WHERE jn.job_uid = w.job_uid) = 1""")


def stored_attribution(con: duckdb.DuckDBPyConnection) -> None:
    """The chunk's merged jobs (``_jwc.cut``): fresh attribution from the cut on, the stored one before it in the
    cut's hour."""
    con.execute("""DELETE FROM _att a USING _jwc w
                   WHERE a.job_uid = w.job_uid AND w.cut IS NOT NULL AND a.mi < epoch(w.cut) // 60""")
    con.execute("""
        INSERT INTO _att
        SELECT s.job_uid, d.dev, s.mi, s.ov_s, s.share, s.meth
        FROM gpu_efficiency_open_att s JOIN _jwc w USING (job_uid)
             JOIN _dev d ON d.cluster = w.cluster AND d.node = s.node AND d.gpu = s.gpu
        WHERE w.cut IS NOT NULL AND s.mi >= epoch(date_trunc('hour', w.cut)) // 60 AND s.mi < epoch(w.cut) // 60""")


def old_coverage_sql() -> str:
    """Per merged job of the chunk, share-minutes with each metric's reading before the hour of its cut."""
    return """SELECT o.job_uid, sum(o.cov_sm_gpu_s) / 60 AS c0, sum(o.cov_gr_gpu_s) / 60 AS c1,
                     sum(o.cov_gu_gpu_s) / 60 AS c2
              FROM gpu_efficiency_open_hour o JOIN _jwc w USING (job_uid)
              WHERE w.cut IS NOT NULL AND o.hour < date_trunc('hour', w.cut) GROUP BY o.job_uid"""


def set_aside_flips(con: duckdb.DuckDBPyConnection) -> None:
    """Merged jobs whose metric choice (``_eff_metric``) differs from the stored one go to ``_eff_redo`` and
    leave this chunk: their stored hours were scored on the other metric, they are attributed whole after."""
    con.execute(f"""
        INSERT INTO _eff_redo
        SELECT w.job_uid FROM _jwc w JOIN gpu_efficiency_job e USING (job_uid) LEFT JOIN _eff_metric m USING (job_uid)
        WHERE w.cut IS NOT NULL AND e.metric IS NOT NULL
          AND {METRIC_NAMES}[m.metric + 1] IS DISTINCT FROM e.metric""")
    for t in ("_jwc", "_att", "_eff_metric"):
        con.execute(f"DELETE FROM {t} WHERE job_uid IN (SELECT job_uid FROM _eff_redo)")


def tails(con: duckdb.DuckDBPyConnection) -> None:
    """``_eff_tailc``: the chunk's merged jobs, the hour their rows are recomputed from (``lo``), and whether
    they had telemetry rows before (a job no reading reached has no hour rows)."""
    con.execute("""CREATE OR REPLACE TEMP TABLE _eff_tailc AS
                   SELECT w.job_uid, date_trunc('hour', w.cut) AS lo, e.telemetry_gpu_s > 0 AS had_px
                   FROM _jwc w JOIN gpu_efficiency_job e USING (job_uid) WHERE w.cut IS NOT NULL""")


def old_hours_sql() -> str:
    """The stored hour rows before ``lo`` of the merged jobs, as ``_eff_hour`` rows (rollup from the state)."""
    return """SELECT h.job_uid, h.cluster, h.hour, h.alloc_gpu_s, h.telemetry_gpu_s, h.active_gpu_s,
                     h.idle_alloc_gpu_s, h.fb_max_mib, h.energy_j, h.label_gpu_s, h.index_gpu_s, h.share_gpu_s,
                     coalesce(o.rollup_gpu_s, 0) AS rollup_gpu_s, h.hist
              FROM gpu_efficiency_job_hour h JOIN _eff_tailc t ON h.job_uid = t.job_uid AND h.hour < t.lo
                   LEFT JOIN gpu_efficiency_open_hour o ON o.job_uid = h.job_uid AND o.hour = h.hour"""


def old_acts_sql() -> str:
    """(job_uid, act, cov) of the merged jobs' hours before ``lo``."""
    return """SELECT o.job_uid, unnest(o.acts) AS act, unnest(o.act_gpu_s) AS cov
              FROM gpu_efficiency_open_hour o JOIN _eff_tailc t ON o.job_uid = t.job_uid AND o.hour < t.lo"""


def old_devices_sql() -> str:
    """(job_uid, device) of the merged jobs' hours before ``lo``."""
    return """SELECT o.job_uid, unnest(o.devices) AS d
              FROM gpu_efficiency_open_hour o JOIN _eff_tailc t ON o.job_uid = t.job_uid AND o.hour < t.lo"""


def collect(con: duckdb.DuckDBPyConnection) -> None:
    """Append the state of the chunk's kept jobs (the hours it computed) to ``_eff_open_all`` and the
    attribution of the hour their window ends in to ``_eff_att_all`` (a merged job: from its cut on, the stored
    minutes before it stay)."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _eff_open AS
        WITH cv AS (
            SELECT a.job_uid, a.mi // 60 AS hr, coalesce(sum(a.share) FILTER (WHERE p.sm IS NOT NULL), 0) * 60 AS c0,
                   coalesce(sum(a.share) FILTER (WHERE p.gr IS NOT NULL), 0) * 60 AS c1,
                   coalesce(sum(a.share) FILTER (WHERE p.gu IS NOT NULL), 0) * 60 AS c2
            FROM _att a JOIN _pc p USING (dev, mi) WHERE a.job_uid IN (SELECT job_uid FROM _eff_keep) GROUP BY ALL),
        ac AS (SELECT job_uid, hr, list(act ORDER BY act) AS acts, list(w ORDER BY act) AS ws
               FROM (SELECT job_uid, hr, act, sum(cov) AS w FROM _eff_px
                     WHERE job_uid IN (SELECT job_uid FROM _eff_keep) GROUP BY ALL) GROUP BY ALL),
        dv AS (SELECT p.job_uid, p.hr, list(DISTINCT {'node': d.node, 'gpu': d.gpu}) AS devices
               FROM _eff_px p JOIN _dev d USING (dev) WHERE p.job_uid IN (SELECT job_uid FROM _eff_keep) GROUP BY ALL)
        SELECT cv.job_uid, make_timestamp(cv.hr * 3600000000) AS hour, cv.c0 AS cov_sm_gpu_s, cv.c1 AS cov_gr_gpu_s,
               cv.c2 AS cov_gu_gpu_s, coalesce(h.rollup_gpu_s, 0) AS rollup_gpu_s, dv.devices, ac.acts,
               ac.ws AS act_gpu_s
        FROM cv LEFT JOIN ac USING (job_uid, hr) LEFT JOIN dv USING (job_uid, hr)
        LEFT JOIN _eff_hour h ON h.job_uid = cv.job_uid AND h.hour = make_timestamp(cv.hr * 3600000000)""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _eff_att AS
        SELECT a.job_uid, d.node, d.gpu, a.mi, a.ov_s, a.share, a.meth
        FROM _att a JOIN _jwc w USING (job_uid) JOIN _dev d USING (dev)
        WHERE a.job_uid IN (SELECT job_uid FROM _eff_keep) AND a.mi >= epoch(date_trunc('hour', w.we)) // 60
          AND (w.cut IS NULL OR a.mi >= epoch(w.cut) // 60)""")
    for part in ("open", "att"):
        con.execute(f"CREATE TEMP TABLE IF NOT EXISTS _eff_{part}_all AS SELECT * FROM _eff_{part} LIMIT 0")
        con.execute(f"INSERT INTO _eff_{part}_all SELECT * FROM _eff_{part}")


def store(con: duckdb.DuckDBPyConnection, full: bool) -> None:
    """Replace the targets' state (all of it when ``full``; a merged job's hours from the hour of its cut), inside
    the efficiency transaction; jobs no longer GPU jobs (``_eff_gone``) leave it."""
    if full:
        con.execute("DELETE FROM gpu_efficiency_open_hour")
        con.execute("DELETE FROM gpu_efficiency_open_att")
    else:
        con.execute("""DELETE FROM gpu_efficiency_open_hour o USING _eff_targets t
                       WHERE o.job_uid = t.job_uid AND (t.cut IS NULL OR o.hour >= date_trunc('hour', t.cut))""")
        # a merged job keeps its stored minutes of the cut's hour before the cut (unchanged); those of earlier
        # hours go (a window that entered a new hour leaves at most the cut's hour behind, never read again)
        con.execute("""DELETE FROM gpu_efficiency_open_att o USING _eff_targets t
                       WHERE o.job_uid = t.job_uid AND (t.cut IS NULL OR o.mi >= epoch(t.cut) // 60
                                                        OR o.mi < epoch(date_trunc('hour', t.cut)) // 60)""")
        for t in ("gpu_efficiency_open_hour", "gpu_efficiency_open_att"):
            con.execute(f"DELETE FROM {t} WHERE job_uid IN (SELECT job_uid FROM _eff_gone)")
    for part, table in (("open", "gpu_efficiency_open_hour"), ("att", "gpu_efficiency_open_att")):
        if con.sql(f"SELECT count(*) FROM duckdb_tables() WHERE table_name = '_eff_{part}_all'").fetchall()[0][0]:
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _eff_{part}_all ORDER BY job_uid")
