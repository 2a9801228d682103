"""The efficiency marts (``gpu_efficiency_job``, ``gpu_efficiency_job_hour``): telemetry attributed to jobs
(models/kernels/attribution.py), per job and UTC hour; rebuilt incrementally by `gpuledger refresh` for the
jobs that changed, their node neighbours and the jobs under new telemetry. Definitions and the reports that
read them: models/metrics/efficiency.py.
"""
from __future__ import annotations

import datetime as dt

import duckdb

from ingest import warehouse
from models.definitions.marts import EFFICIENCY as MART
from models.kernels import attribution
from models.kernels.attribution import IDLE_STRETCH_S, N_BINS
from models.marts import efficiency_open as opened, slow_nodes


#: Per cluster, a lower bound of the horizon at the last refresh (run ``$last``): the latest submit/start/end of
#: the job rows no run since has changed (they were there, unchanged, then; models/definitions/jobs_sql.py).
_OLD_HORIZON = """SELECT cluster, greatest(max(submit), max(start), max("end")) AS hz FROM jobs
                  WHERE coalesce(updated_run_id, ingest_run_id) <= $last GROUP BY cluster"""


def _new_labels(con: duckdb.DuckDBPyConnection, last: int) -> bool:
    """Whether telemetry ingested since run ``last`` names jobs (hpc_job label): a job it names becomes exact on
    its node over its whole window (attribution._owned), which changes its neighbours' shares before the cut."""
    return con.sql("""SELECT EXISTS (SELECT 1 FROM gpu_ingest_ranges r JOIN gpu_samples g ON g.cluster = r.cluster
                          AND g.node = r.node AND g.ts BETWEEN r.min_ts AND r.max_ts
                      WHERE r.run_id > $last AND g.hpc_jobs IS NOT NULL)""", params={"last": last}).fetchall()[0][0]


def _unpaired(con: duckdb.DuckDBPyConnection, last: int | None) -> None:
    """``_eff_unpaired(job_uid, gone)``: started GPU jobs without a row (never built) and rows without a started
    GPU job (it left or vanished). Usually only jobs changed since run ``last`` can be either: when the other jobs
    (those with a window: a job whose window is empty never gets a row) and the other rows are the same set (count
    and sum of uid hashes, two scans), only those are joined; else every job with every row (a full join of both
    tables, a second or more on a site's year)."""
    since = "coalesce(updated_run_id, ingest_run_id) > $last"
    if last is not None and con.sql(f"""
            SELECT (SELECT (count(*), sum(hash(j.job_uid)::HUGEINT)) FROM jobs j
                    JOIN ({attribution.horizon_sql()}) h USING (cluster)
                    WHERE ngpus > 0 AND start IS NOT NULL AND NOT {since} AND {attribution.end_sql()} > j.start)
                   IS NOT DISTINCT FROM
                   (SELECT (count(*), sum(hash(job_uid)::HUGEINT)) FROM gpu_efficiency_job
                    WHERE job_uid NOT IN (SELECT job_uid FROM jobs WHERE {since}))""", params={"last": last}
                                     ).fetchall()[0][0]:
        jobs = f"(SELECT * FROM jobs WHERE {since})"
        rows = f"(SELECT job_uid FROM gpu_efficiency_job WHERE job_uid IN (SELECT job_uid FROM jobs WHERE {since}))"
    else:
        jobs, rows = "jobs", "gpu_efficiency_job"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _eff_unpaired AS
                    SELECT coalesce(j.job_uid, e.job_uid) AS job_uid, j.job_uid IS NULL AS gone
                    FROM (SELECT job_uid FROM {jobs} WHERE ngpus > 0 AND start IS NOT NULL) j
                    FULL JOIN (SELECT job_uid FROM {rows}) e USING (job_uid)
                    WHERE j.job_uid IS NULL OR e.job_uid IS NULL""", {"last": last} if "$last" in jobs else {})


def _targets(con: duckdb.DuckDBPyConnection, full: bool) -> int:
    """``_eff_targets(job_uid, cut)``: GPU jobs to (re)compute, and from which minute (``cut``, NULL = whole: see
    models/marts/efficiency_open.py); returns the run id the refresh will be current to."""
    newest = con.sql("SELECT coalesce(max(run_id), 0) FROM ingest_runs").fetchall()[0][0]
    last = warehouse.mart_run(con, MART)
    if not full:
        _unpaired(con, last)
    if full or last is None:
        con.execute("""CREATE OR REPLACE TEMP TABLE _eff_targets AS
                       SELECT job_uid, NULL::TIMESTAMP AS cut FROM jobs WHERE ngpus > 0 AND start IS NOT NULL""")
        return newest
    # tail: dirty only because it is open (its window grew past the last refresh's horizon, nothing else changed)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _eff_dirty AS
        SELECT job_uid, bool_and(tail) AS tail FROM (
            SELECT job_uid, coalesce(updated_run_id, ingest_run_id) <= $last AS tail FROM jobs
            WHERE ngpus > 0 AND start IS NOT NULL AND (coalesce(updated_run_id, ingest_run_id) > $last OR "end" IS NULL)
            UNION ALL SELECT job_uid, FALSE FROM job_gpu_indices WHERE ingest_run_id > $last
            UNION ALL SELECT j.job_uid, FALSE FROM jobs j JOIN ({attribution.horizon_sql()}) h USING (cluster)
                  SEMI JOIN (SELECT job_uid FROM _eff_unpaired WHERE NOT gone) USING (job_uid)
                  -- never built; not a job whose window is empty (it never gets a row: attribution.job_windows), which
                  -- would be a target at every refresh and make the serving view compare every part from its uid on
                  WHERE {attribution.end_sql()} > j.start)
        GROUP BY job_uid""", {"last": last})
    # neighbours share nodes with changed jobs (their node-share changes), or sit under new telemetry. An open job
    # that only grew changed its node's shares from the last refresh's horizon on: only neighbours after that (a
    # week-long running job would otherwise pull in every job its node ran that week, at every refresh). ``c``:
    # from when the jobs under a window may be attributed differently (a changed job: its start, or its stored
    # window's; new readings: their first 5-minute rollup bucket; NULL: a label, everything whole)
    labelled = _new_labels(con, last)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _eff_win AS
        WITH h AS ({attribution.horizon_sql()})
        SELECT jn.cluster, jn.node, d.job_uid,
               CASE WHEN d.tail AND NOT $labelled THEN greatest(j.start, coalesce(o.hz, j.start))
                    ELSE j.start END AS lo,
               {attribution.end_sql()} AS hi,
               CASE WHEN $labelled THEN NULL WHEN d.tail THEN greatest(j.start, coalesce(o.hz, j.start))
                    ELSE least(j.start, e.window_start) END AS c, d.tail
        FROM _eff_dirty d JOIN jobs j USING (job_uid) JOIN job_nodes jn USING (job_uid) JOIN h ON h.cluster = j.cluster
        LEFT JOIN ({_OLD_HORIZON}) o ON o.cluster = j.cluster LEFT JOIN gpu_efficiency_job e ON e.job_uid = d.job_uid
        UNION ALL
        SELECT cluster, node, NULL, min_ts, max_ts,
               CASE WHEN NOT $labelled THEN time_bucket(INTERVAL 5 MINUTE, min_ts) END, NULL
        FROM gpu_ingest_ranges WHERE run_id > $last""", {"last": last, "labelled": labelled})
    # only jobs that ran inside the windows' span can overlap one (constant bounds: the year's others are skipped)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _eff_targets AS
        WITH h AS ({attribution.horizon_sql()}),
        nb AS (
            SELECT j.job_uid, w.c FROM _eff_win w JOIN job_nodes jn ON jn.cluster = w.cluster AND jn.node = w.node
                JOIN (SELECT * FROM jobs WHERE ngpus > 0 AND start IS NOT NULL AND start < $hi
                      AND ("end" IS NULL OR "end" > $lo)) j ON j.job_uid = jn.job_uid
                JOIN h ON h.cluster = j.cluster
            WHERE j.start < w.hi AND {attribution.end_sql()} > w.lo
            UNION ALL   -- the changed jobs themselves (also those without a placement: no window above)
            SELECT d.job_uid, CASE WHEN d.tail AND NOT $labelled THEN greatest(j.start, coalesce(o.hz, j.start)) END
            FROM _eff_dirty d JOIN jobs j USING (job_uid) LEFT JOIN ({_OLD_HORIZON}) o ON o.cluster = j.cluster)
        SELECT job_uid, CASE WHEN bool_or(c IS NULL) THEN NULL ELSE min(c) END AS cut FROM nb GROUP BY job_uid""",
                {"last": last, "labelled": labelled,
                 **dict(zip(("lo", "hi"), con.sql("SELECT min(lo), max(hi) FROM _eff_win").fetchall()[0]))})
    opened.eligible(con)
    return newest


def _metric_choice(con: duckdb.DuckDBPyConnection) -> None:
    """``_eff_metric``: per job the activity metric (0 SM_ACTIVE, 1 GR_ENGINE_ACTIVE, 2 GPU_UTIL): the first in
    that order covering at least half as many of the job's GPU-seconds as the best-covered one (a merged job:
    with its stored hours'; half less a billionth, so sums added in another order choose alike)."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _eff_metric AS
        WITH c AS (SELECT job_uid, sum(c0) AS c0, sum(c1) AS c1, sum(c2) AS c2 FROM (
                       SELECT job_uid, sum(share) FILTER (WHERE sm IS NOT NULL) AS c0,
                              sum(share) FILTER (WHERE gr IS NOT NULL) AS c1,
                              sum(share) FILTER (WHERE gu IS NOT NULL) AS c2
                       FROM _att JOIN _pc USING (dev, mi) GROUP BY job_uid
                       UNION ALL {opened.old_coverage_sql()}) GROUP BY job_uid),
        b AS (SELECT *, list_max([c0, c1, c2]) * (0.5 - 1e-9) AS half FROM c)
        SELECT job_uid, CASE WHEN c0 >= half THEN 0 WHEN c1 >= half THEN 1
                             WHEN c2 >= half THEN 2 END::TINYINT AS metric FROM b WHERE half > 0""")


def _scored(con: duckdb.DuckDBPyConnection) -> None:
    """``_eff_px``: attributed device-minutes with the job's activity, idle flag, histogram bin and hour.

    Idle: the device read zero (< 0.5 %) for a stretch that, cut to the job's window, lasts >= 5 minutes."""
    eps = attribution.IDLE_EPSILON
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _eff_px AS
        WITH a AS (
            SELECT t.job_uid, t.dev, t.mi, t.share * 60 AS cov, t.meth, p.rolled, p.fb, p.pw, e.metric,
                   CASE e.metric WHEN 0 THEN p.sm WHEN 1 THEN p.gr ELSE p.gu END AS act,
                   CASE e.metric WHEN 0 THEN p.sm_x WHEN 1 THEN p.gr_x ELSE p.gu_x END AS act_x
            FROM _att t JOIN _pc p USING (dev, mi) JOIN _eff_metric e USING (job_uid)),
        z AS (SELECT z.dev, z.metric, z.mi, r.rs, r.re FROM _zr z JOIN _runs r USING (dev, metric, run))
        SELECT a.job_uid, a.dev, a.mi, a.cov, a.meth, a.rolled, a.fb, a.pw, a.act, a.mi // 60 AS hr,
               CASE WHEN a.act < {eps} THEN 0 ELSE least(20, floor(a.act * 20)::INTEGER + 1) END AS bin,
               z.rs IS NOT NULL AND least(z.re * 60, w.we_s) - greatest(z.rs * 60, w.ws_s) >= {IDLE_STRETCH_S} AS idle
        FROM a JOIN (SELECT job_uid, epoch(ws) AS ws_s, epoch(we) AS we_s FROM _jwc) w USING (job_uid)
        LEFT JOIN z ON z.dev = a.dev AND z.mi = a.mi AND z.metric = a.metric AND a.act_x < {eps}
        WHERE a.act IS NOT NULL""")


def _hours(con: duckdb.DuckDBPyConnection) -> None:
    """``_eff_hour``: per job with telemetry and UTC hour, allocated and telemetry figures (+ histogram).

    A job no reading reached gets no hour rows: its hours are all allocation, which the readers derive from its
    window (:func:`_hours_in`). Expanding them here would store a row per hour of every job of a site without
    telemetry (and of every runaway job accounting still shows RUNNING), for nothing. A merged job: its hours
    from the hour of its cut."""
    hist = ", ".join(f"coalesce(sum(s) FILTER (WHERE bin = {b}), 0)" for b in range(N_BINS))
    by_method = ", ".join(f"coalesce(sum(cov) FILTER (WHERE meth = {i + 1}), 0) AS {col}"
                          for i, col in enumerate(("label_gpu_s", "index_gpu_s", "share_gpu_s")))
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _eff_hour AS
        WITH alloc AS (
            SELECT job_uid, cluster, hour,
                   ngpus * epoch(least(we, hour + INTERVAL 1 HOUR) - greatest(ws, hour)) AS alloc_gpu_s
            FROM (SELECT *, unnest(generate_series(date_trunc('hour', coalesce(cut, ws)), we - INTERVAL 1 MICROSECOND,
                                                   INTERVAL 1 HOUR)) AS hour
                  FROM _jwc WHERE job_uid IN (SELECT job_uid FROM _eff_px)
                     OR job_uid IN (SELECT job_uid FROM _eff_tailc WHERE had_px))),
        tel AS (
            SELECT job_uid, hr, sum(cov) AS telemetry_gpu_s, sum(cov * act) AS active_gpu_s,
                   coalesce(sum(cov) FILTER (WHERE idle), 0) AS idle_alloc_gpu_s,
                   max(fb) AS fb_max_mib, sum(cov * pw) AS energy_j, {by_method},
                   coalesce(sum(cov) FILTER (WHERE rolled), 0) AS rollup_gpu_s
            FROM _eff_px GROUP BY job_uid, hr),
        hb AS (SELECT job_uid, hr, bin, sum(cov) AS s FROM _eff_px GROUP BY ALL),
        h AS (SELECT job_uid, hr, [{hist}] AS hist FROM hb GROUP BY job_uid, hr)
        SELECT a.job_uid, a.cluster, a.hour, a.alloc_gpu_s, coalesce(t.telemetry_gpu_s, 0) AS telemetry_gpu_s,
               coalesce(t.active_gpu_s, 0) AS active_gpu_s, coalesce(t.idle_alloc_gpu_s, 0) AS idle_alloc_gpu_s,
               t.fb_max_mib, t.energy_j, coalesce(t.label_gpu_s, 0) AS label_gpu_s,
               coalesce(t.index_gpu_s, 0) AS index_gpu_s, coalesce(t.share_gpu_s, 0) AS share_gpu_s,
               coalesce(t.rollup_gpu_s, 0) AS rollup_gpu_s, h.hist
        FROM alloc a LEFT JOIN tel t ON t.job_uid = a.job_uid AND t.hr = epoch(a.hour) // 3600
        LEFT JOIN h ON h.job_uid = a.job_uid AND h.hr = epoch(a.hour) // 3600""")


def _jobs(con: duckdb.DuckDBPyConnection, now: dt.datetime) -> None:
    """``_eff_job``: the per-job row, with the exact GPU-second-weighted p95 (a merged job: with its stored hours
    before the hour of its cut, and their activity values and devices)."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _eff_job AS
        WITH t AS (
            SELECT job_uid, sum(telemetry_gpu_s) AS telemetry_gpu_s, sum(active_gpu_s) AS active_gpu_s,
                   sum(idle_alloc_gpu_s) AS idle_alloc_gpu_s, max(fb_max_mib) AS fb_max_mib, sum(energy_j) AS energy_j,
                   sum(label_gpu_s) AS label_gpu_s, sum(index_gpu_s) AS index_gpu_s, sum(share_gpu_s) AS share_gpu_s,
                   sum(rollup_gpu_s) AS rollup_gpu_s
            FROM (SELECT * FROM _eff_hour UNION ALL BY NAME {opened.old_hours_sql()}) GROUP BY job_uid),
        s AS (   -- every job of the chunk; allocation from its window (= the sum of its hours where it has them)
            SELECT w.job_uid, w.cluster, w.ngpus * epoch(w.we - w.ws) AS alloc_gpu_s,
                   coalesce(t.telemetry_gpu_s, 0) AS telemetry_gpu_s, coalesce(t.active_gpu_s, 0) AS active_gpu_s,
                   coalesce(t.idle_alloc_gpu_s, 0) AS idle_alloc_gpu_s, t.fb_max_mib, t.energy_j,
                   coalesce(t.label_gpu_s, 0) AS label_gpu_s, coalesce(t.index_gpu_s, 0) AS index_gpu_s,
                   coalesce(t.share_gpu_s, 0) AS share_gpu_s, coalesce(t.rollup_gpu_s, 0) AS rollup_gpu_s
            FROM _jwc w LEFT JOIN t USING (job_uid)),
        v AS (SELECT job_uid, act, sum(cov) AS w
              FROM (SELECT job_uid, act, cov FROM _eff_px UNION ALL {opened.old_acts_sql()}) GROUP BY job_uid, act),
        q AS (
            SELECT job_uid, min(act) FILTER (WHERE cum >= 0.95 * tot) AS act_p95
            FROM (SELECT job_uid, act, sum(w) OVER (PARTITION BY job_uid) AS tot,
                         sum(w) OVER (PARTITION BY job_uid ORDER BY act ROWS UNBOUNDED PRECEDING) AS cum FROM v)
            GROUP BY job_uid),
        nd AS (SELECT job_uid, count(DISTINCT d) AS n_devices FROM (
                   SELECT p.job_uid, {{'node': d.node, 'gpu': d.gpu}} AS d FROM _eff_px p JOIN _dev d USING (dev)
                   UNION ALL {opened.old_devices_sql()}) GROUP BY job_uid)
        SELECT s.job_uid, s.cluster, w.ws AS window_start, w.we AS window_end, s.alloc_gpu_s,
               s.telemetry_gpu_s, s.active_gpu_s, s.idle_alloc_gpu_s,
               CASE WHEN s.telemetry_gpu_s > 0 THEN ['SM_ACTIVE', 'GR_ENGINE_ACTIVE', 'GPU_UTIL'][e.metric + 1] END
                   AS metric,
               CASE WHEN s.telemetry_gpu_s > 0 THEN s.active_gpu_s / s.telemetry_gpu_s END AS act_mean,
               q.act_p95, s.fb_max_mib, s.energy_j,
               CASE WHEN s.telemetry_gpu_s = 0 THEN 'none'
                    WHEN s.label_gpu_s >= s.index_gpu_s AND s.label_gpu_s >= s.share_gpu_s THEN 'exporter-label'
                    WHEN s.index_gpu_s >= s.share_gpu_s THEN 'gpu-index' ELSE 'node-share' END AS method,
               s.label_gpu_s, s.index_gpu_s, s.share_gpu_s, s.rollup_gpu_s,
               coalesce(nd.n_devices, 0)::INTEGER AS n_devices, $now AS computed_at
        FROM s JOIN _jwc w USING (job_uid) LEFT JOIN _eff_metric e USING (job_uid) LEFT JOIN q USING (job_uid)
        LEFT JOIN nd USING (job_uid)""", {"now": now})


def _chunk(con: duckdb.DuckDBPyConnection, now: dt.datetime) -> None:
    """The efficiency rows of the current chunk's jobs (``_jwc``, attributed in ``_att``), appended to
    ``_eff_job_all`` / ``_eff_hour_all``; the state of its open jobs to ``_eff_open_all`` / ``_eff_att_all``."""
    opened.stored_attribution(con)
    _metric_choice(con)
    opened.set_aside_flips(con)
    opened.tails(con)
    _scored(con)
    _hours(con)
    _jobs(con, now)
    opened.collect(con)
    for part in ("hour", "job"):
        con.execute(f"CREATE TEMP TABLE IF NOT EXISTS _eff_{part}_all AS SELECT * FROM _eff_{part} LIMIT 0")
        con.execute(f"INSERT INTO _eff_{part}_all SELECT * FROM _eff_{part}")


def _empty_attribution(con: duckdb.DuckDBPyConnection) -> None:
    """An empty attribution for jobs that ran on no node telemetry could cover (no placement known)."""
    con.execute("""CREATE OR REPLACE TEMP TABLE _att (job_uid BIGINT, dev INTEGER, mi BIGINT, ov_s DOUBLE,
                   share DOUBLE, meth TINYINT)""")
    con.execute("""CREATE OR REPLACE TEMP TABLE _pc (dev INTEGER, nid INTEGER, mi BIGINT, sm DOUBLE, gr DOUBLE,
                   gu DOUBLE, sm_x DOUBLE, gr_x DOUBLE, gu_x DOUBLE, fb DOUBLE, pw DOUBLE, hpc_jobs VARCHAR,
                   rolled BOOLEAN)""")
    con.execute("CREATE OR REPLACE TEMP TABLE _dev (dev INTEGER, nid INTEGER, cluster VARCHAR, node VARCHAR, "
                "gpu VARCHAR)")
    con.execute("CREATE OR REPLACE TEMP TABLE _zr (dev INTEGER, metric INTEGER, mi BIGINT, run BIGINT)")
    con.execute("CREATE OR REPLACE TEMP TABLE _runs (dev INTEGER, metric INTEGER, run BIGINT, rs BIGINT, re BIGINT)")


#: The marts this builder writes (noted for the serving view).
EFFICIENCY_TABLES = ("gpu_efficiency_job", "gpu_efficiency_job_hour")


def _pass(con: duckdb.DuckDBPyConnection, targets: str, now: dt.datetime) -> None:
    """Attribute and score the jobs of ``targets`` (from their ``cut``), node group by node group
    (:func:`models.kernels.attribution.node_chunks`, so memory stays bounded on any range); merged jobs that must be
    attributed whole after all go to ``_eff_redo``."""
    attribution.prepare(con, targets, "t.cut")
    opened.keep(con)
    done = False
    for nids in attribution.node_chunks(con):
        attribution.attribute_chunk(con, nids)
        _chunk(con, now)
        slow_nodes.collect_chunk(con)   # per job and node against its peers (slow nodes), same attribution
        done = True
    held = "(SELECT job_uid FROM _eff_redo" + (" UNION ALL SELECT job_uid FROM _eff_job_all)" if done else ")")
    # a merged job no node group holds (its node's telemetry stopped long before the cut): whole, after
    con.execute(f"INSERT INTO _eff_redo SELECT job_uid FROM _jw WHERE cut IS NOT NULL AND job_uid NOT IN {held}")
    # jobs no node group holds (no placement known): allocated GPU-hours only, "no telemetry"
    con.execute(f"CREATE OR REPLACE TEMP TABLE _jwc AS SELECT * FROM _jw WHERE job_uid NOT IN {held}")
    _empty_attribution(con)
    _chunk(con, now)


def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> None:
    """Mart builder for models/pipeline/refresh.py: recompute the changed jobs' rows of both efficiency marts
    (merging new telemetry into open jobs' rows: models/marts/efficiency_open.py). Skipped when no ingest ran
    since the last build, unless ``full``: every input is as it was (a refresh after a close, a second refresh),
    and attributing the open jobs' tails again cost 2.2 s on the demo for no change (a migration that changes the
    mart forgets its state, which forces the rebuild)."""
    if not full and warehouse.is_current(con, MART):
        return
    now = warehouse.utcnow()
    newest = _targets(con, full)
    for t in ("_eff_hour_all", "_eff_job_all", "_eff_open_all", "_eff_att_all", "_jna_all"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    con.execute("CREATE OR REPLACE TEMP TABLE _eff_redo (job_uid BIGINT)")
    _pass(con, "_eff_targets", now)
    if con.sql("SELECT count(*) FROM _eff_redo").fetchall()[0][0]:
        con.execute("UPDATE _eff_targets SET cut = NULL WHERE job_uid IN (SELECT job_uid FROM _eff_redo)")
        con.execute("CREATE OR REPLACE TEMP TABLE _eff_whole AS SELECT DISTINCT job_uid, NULL::TIMESTAMP AS cut "
                    "FROM _eff_redo")
        con.execute("DELETE FROM _eff_redo")
        _pass(con, "_eff_whole", now)
    # jobs that stopped being GPU jobs (or vanished) leave the marts
    con.execute("CREATE OR REPLACE TEMP TABLE _eff_gone AS SELECT job_uid FROM " + (
        "_eff_targets LIMIT 0" if full else "_eff_unpaired WHERE gone"))
    with warehouse.transaction(con):
        if full:
            warehouse.note_changed(con, EFFICIENCY_TABLES)
            con.execute("DELETE FROM gpu_efficiency_job")
            con.execute("DELETE FROM gpu_efficiency_job_hour")
        else:
            # the serving view: the targets' rows and those of jobs that left (both deleted below) changed
            warehouse.note_changed(con, EFFICIENCY_TABLES, con.sql(
                "SELECT least((SELECT min(job_uid) FROM _eff_targets), (SELECT min(job_uid) FROM _eff_gone))"
            ).fetchall()[0][0])
            con.execute("""DELETE FROM gpu_efficiency_job WHERE job_uid IN
                           (SELECT job_uid FROM _eff_targets UNION ALL SELECT job_uid FROM _eff_gone)""")
            # a merged job's hours from the hour of its cut
            con.execute("""DELETE FROM gpu_efficiency_job_hour h USING _eff_targets t
                           WHERE h.job_uid = t.job_uid AND (t.cut IS NULL OR h.hour >= date_trunc('hour', t.cut))""")
            con.execute("DELETE FROM gpu_efficiency_job_hour WHERE job_uid IN (SELECT job_uid FROM _eff_gone)")
        con.execute("INSERT INTO gpu_efficiency_job BY NAME SELECT * FROM _eff_job_all")
        slow_nodes.store(con, full)
        opened.store(con, full)
        con.execute("INSERT INTO gpu_efficiency_job_hour BY NAME SELECT * EXCLUDE (rollup_gpu_s) FROM _eff_hour_all "
                    "ORDER BY hour, job_uid")
        warehouse.record_mart(con, MART, newest)
    for t in ("_eff_targets", "_eff_dirty", "_eff_win", "_eff_metric", "_eff_px", "_eff_hour", "_eff_job",
              "_eff_hour_all", "_eff_job_all", "_eff_open", "_eff_att", "_eff_open_all", "_eff_att_all", "_eff_redo",
              "_eff_whole", "_eff_gone", "_eff_unpaired", "_eff_keep", "_eff_tailc", "_att", "_jw", "_jwc", "_jn",
              "_nodes", "_nodes_all", "_dev", "_pc", "_zr", "_runs"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
