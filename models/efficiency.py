"""GPU efficiency: how busy allocated GPUs were, per job and per user/team/partition/GPU type and time bucket.

Definitions (docs/METRICS.md, "GPU efficiency"):

* activity metric, per job: ``SM_ACTIVE``, else ``GR_ENGINE_ACTIVE``, else ``GPU_UTIL`` — the first that covers at
  least half as many of the job's GPU-seconds as the best-covered one; named in every output;
* telemetry GPU-seconds: allocated GPU-seconds covered by readings of that metric (models/attribution.py);
* active GPU-seconds: Σ activity × covered GPU-seconds; mean = active / telemetry; p95 GPU-second-weighted;
* idle-allocated GPU-seconds: covered GPU-seconds inside stretches of ≥ 5 minutes (of the job's time on a device)
  at zero activity (< 0.5 %) — Run:ai's "idle for more than 5 minutes", jobstats' "GPU-hours at 0 %";
* memory high-water mark (MiB) and energy (J; reports show kWh).

A job without telemetry keeps ``telemetry_gpu_s = 0`` and NULL activity: it is counted and shown as "no
telemetry", never as 0 % busy. The marts (``gpu_efficiency_job``, ``gpu_efficiency_job_hour``) are rebuilt
incrementally by :func:`build`; the report functions read them and return Polars frames.
"""
from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from ingest import warehouse
from models import attribution, refresh

IDLE_STRETCH_S = 300
METRIC_NAMES = {"sm": "SM_ACTIVE", "gr": "GR_ENGINE_ACTIVE", "gu": "GPU_UTIL"}
N_BINS = 21
GROUPABLE = ("user", "team", "account", "partition", "qos", "gpu_type", "cluster", "node")


# ---------------------------------------------------------------- the mart

def _targets(con: duckdb.DuckDBPyConnection, full: bool) -> int:
    """``_eff_targets``: GPU jobs to (re)compute; returns the run id the refresh will be current to."""
    newest = con.sql("SELECT coalesce(max(run_id), 0) FROM ingest_runs").fetchall()[0][0]
    last = refresh.mart_run(con, "efficiency")
    if full or last is None:
        con.execute("""CREATE OR REPLACE TEMP TABLE _eff_targets AS
                       SELECT job_uid FROM jobs WHERE ngpus > 0 AND start IS NOT NULL""")
        return newest
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _eff_dirty AS
        SELECT job_uid FROM jobs WHERE ngpus > 0 AND start IS NOT NULL
          AND (coalesce(updated_run_id, ingest_run_id) > $last OR "end" IS NULL)
        UNION SELECT job_uid FROM job_gpu_indices WHERE ingest_run_id > $last
        UNION SELECT j.job_uid FROM jobs j ANTI JOIN gpu_efficiency_job e USING (job_uid)
              WHERE j.ngpus > 0 AND j.start IS NOT NULL""", {"last": last})
    # neighbours share nodes with changed jobs (their node-share changes), or sit under new telemetry
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _eff_targets AS
        WITH h AS ({attribution.horizon_sql()}),
        win AS (SELECT jn.cluster, jn.node, j.start AS lo, {attribution.end_sql()} AS hi
                FROM _eff_dirty d JOIN jobs j USING (job_uid) JOIN job_nodes jn USING (job_uid) JOIN h ON h.cluster = j.cluster
                UNION ALL
                SELECT cluster, node, min_ts, max_ts FROM gpu_ingest_ranges WHERE run_id > $last)
        SELECT job_uid FROM _eff_dirty
        UNION
        SELECT DISTINCT j.job_uid FROM win JOIN job_nodes jn ON jn.cluster = win.cluster AND jn.node = win.node
            JOIN jobs j ON j.job_uid = jn.job_uid JOIN h ON h.cluster = j.cluster
        WHERE j.ngpus > 0 AND j.start IS NOT NULL AND j.start < win.hi AND {attribution.end_sql()} > win.lo""",
                {"last": last})
    return newest


def _metric_choice(con: duckdb.DuckDBPyConnection) -> None:
    """``_eff_metric``: per job the activity metric (0 SM_ACTIVE, 1 GR_ENGINE_ACTIVE, 2 GPU_UTIL): the first in
    that order covering at least half as many of the job's GPU-seconds as the best-covered one."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _eff_metric AS
        WITH c AS (SELECT job_uid, sum(share) FILTER (WHERE sm IS NOT NULL) AS c0,
                          sum(share) FILTER (WHERE gr IS NOT NULL) AS c1,
                          sum(share) FILTER (WHERE gu IS NOT NULL) AS c2
                   FROM _att JOIN _pc USING (dev, mi) GROUP BY job_uid),
        b AS (SELECT *, list_max([c0, c1, c2]) AS best FROM c)
        SELECT job_uid, CASE WHEN c0 >= 0.5 * best THEN 0 WHEN c1 >= 0.5 * best THEN 1
                             WHEN c2 >= 0.5 * best THEN 2 END::TINYINT AS metric FROM b WHERE best > 0""")


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
    telemetry (and of every runaway job accounting still shows RUNNING), for nothing."""
    hist = ", ".join(f"coalesce(sum(s) FILTER (WHERE bin = {b}), 0)" for b in range(N_BINS))
    by_method = ", ".join(f"coalesce(sum(cov) FILTER (WHERE meth = {i + 1}), 0) AS {col}"
                          for i, col in enumerate(("label_gpu_s", "index_gpu_s", "share_gpu_s")))
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _eff_hour AS
        WITH alloc AS (
            SELECT job_uid, cluster, hour,
                   ngpus * epoch(least(we, hour + INTERVAL 1 HOUR) - greatest(ws, hour)) AS alloc_gpu_s
            FROM (SELECT *, unnest(generate_series(date_trunc('hour', ws), we - INTERVAL 1 MICROSECOND,
                                                   INTERVAL 1 HOUR)) AS hour
                  FROM _jwc SEMI JOIN (SELECT DISTINCT job_uid FROM _eff_px) USING (job_uid))),
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
    """``_eff_job``: the per-job row, with the exact GPU-second-weighted p95."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _eff_job AS
        WITH t AS (
            SELECT job_uid, sum(telemetry_gpu_s) AS telemetry_gpu_s, sum(active_gpu_s) AS active_gpu_s,
                   sum(idle_alloc_gpu_s) AS idle_alloc_gpu_s, max(fb_max_mib) AS fb_max_mib, sum(energy_j) AS energy_j,
                   sum(label_gpu_s) AS label_gpu_s, sum(index_gpu_s) AS index_gpu_s, sum(share_gpu_s) AS share_gpu_s,
                   sum(rollup_gpu_s) AS rollup_gpu_s
            FROM _eff_hour GROUP BY job_uid),
        s AS (   -- every job of the chunk; allocation from its window (= the sum of its hours where it has them)
            SELECT w.job_uid, w.cluster, w.ngpus * epoch(w.we - w.ws) AS alloc_gpu_s,
                   coalesce(t.telemetry_gpu_s, 0) AS telemetry_gpu_s, coalesce(t.active_gpu_s, 0) AS active_gpu_s,
                   coalesce(t.idle_alloc_gpu_s, 0) AS idle_alloc_gpu_s, t.fb_max_mib, t.energy_j,
                   coalesce(t.label_gpu_s, 0) AS label_gpu_s, coalesce(t.index_gpu_s, 0) AS index_gpu_s,
                   coalesce(t.share_gpu_s, 0) AS share_gpu_s, coalesce(t.rollup_gpu_s, 0) AS rollup_gpu_s
            FROM _jwc w LEFT JOIN t USING (job_uid)),
        v AS (SELECT job_uid, act, sum(cov) AS w FROM _eff_px GROUP BY job_uid, act),
        q AS (
            SELECT job_uid, min(act) FILTER (WHERE cum >= 0.95 * tot) AS act_p95
            FROM (SELECT job_uid, act, sum(w) OVER (PARTITION BY job_uid) AS tot,
                         sum(w) OVER (PARTITION BY job_uid ORDER BY act ROWS UNBOUNDED PRECEDING) AS cum FROM v)
            GROUP BY job_uid),
        nd AS (SELECT job_uid, count(DISTINCT dev) AS n_devices FROM _eff_px GROUP BY job_uid)
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
    ``_eff_job_all`` / ``_eff_hour_all``."""
    _metric_choice(con)
    _scored(con)
    _hours(con)
    _jobs(con, now)
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
    con.execute("CREATE OR REPLACE TEMP TABLE _zr (dev INTEGER, metric INTEGER, mi BIGINT, run BIGINT)")
    con.execute("CREATE OR REPLACE TEMP TABLE _runs (dev INTEGER, metric INTEGER, run BIGINT, rs BIGINT, re BIGINT)")


def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> None:
    """Mart builder for models/refresh.py: recompute the changed jobs' rows of both efficiency marts.

    Node group by node group (:func:`models.attribution.node_chunks`), so memory stays bounded on any range."""
    now = warehouse.utcnow()
    newest = _targets(con, full)
    for t in ("_eff_hour_all", "_eff_job_all"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    attribution.prepare(con, "_eff_targets")
    done = False
    for nids in attribution.node_chunks(con):
        attribution.attribute_chunk(con, nids)
        _chunk(con, now)
        done = True
    # jobs no node group holds (no placement known): allocated GPU-hours only, "no telemetry"
    con.execute("CREATE OR REPLACE TEMP TABLE _jwc AS SELECT * FROM _jw" + (
        " WHERE job_uid NOT IN (SELECT job_uid FROM _eff_job_all)" if done else ""))
    _empty_attribution(con)
    _chunk(con, now)
    with warehouse.transaction(con):
        if full:
            con.execute("DELETE FROM gpu_efficiency_job")
            con.execute("DELETE FROM gpu_efficiency_job_hour")
        else:
            con.execute("DELETE FROM gpu_efficiency_job WHERE job_uid IN (SELECT job_uid FROM _eff_targets)")
            con.execute("DELETE FROM gpu_efficiency_job_hour WHERE job_uid IN (SELECT job_uid FROM _eff_targets)")
            # jobs that stopped being GPU jobs (or vanished) leave the marts
            for t in ("gpu_efficiency_job", "gpu_efficiency_job_hour"):
                con.execute(f"""DELETE FROM {t} WHERE job_uid NOT IN
                                (SELECT job_uid FROM jobs WHERE ngpus > 0 AND start IS NOT NULL)""")
        con.execute("INSERT INTO gpu_efficiency_job BY NAME SELECT * FROM _eff_job_all")
        con.execute("INSERT INTO gpu_efficiency_job_hour BY NAME SELECT * EXCLUDE (rollup_gpu_s) FROM _eff_hour_all "
                    "ORDER BY hour, job_uid")
        refresh.record_mart(con, "efficiency", newest)
    for t in ("_eff_targets", "_eff_dirty", "_eff_metric", "_eff_px", "_eff_hour", "_eff_job", "_eff_hour_all",
              "_eff_job_all", "_att", "_jw", "_jwc", "_jn", "_nodes", "_nodes_all", "_dev", "_pc", "_zr", "_runs"):
        con.execute(f"DROP TABLE IF EXISTS {t}")


# ---------------------------------------------------------------- reports

JOB_COLS = ("user", "team", "account", "partition", "qos", "gpu_type", "cluster")
_BIN_LO = "CASE WHEN i = 1 THEN 0 WHEN i = 2 THEN 0.005 ELSE 0.05 * (i - 2) END"
_BIN_HI = "CASE WHEN i = 1 THEN 0 ELSE 0.05 * (i - 1) END"


def _hours_in(by: list[str], grain: str | None = "hour", only: str | None = None) -> str:
    """Mart hours in the window, with the job's metric and grouping columns (gpu_type falls back to the node
    pool).

    ``grain`` (hour, day, week, month or None) is the bucket the caller groups by: the allocation-only hours of
    jobs without telemetry come summed per bucket of it (None: one row per job), which adds up to the same
    GPU-seconds in far fewer rows. ``only``: SQL selecting the job_uids to keep (all when None)."""
    cols = "".join(f', j."{c}"' if c != "gpu_type" else ", j.gpu_type AS _job_gpu_type"
                   for c in by if c != "cluster")
    if "gpu_type" not in by:
        return _all_hours(grain, only, ", e.metric" + cols)
    # GPU type: Slurm's typed GRES, else the node's pool in the inventory, else the model the exporter reports
    # (looked up only for the jobs in the window without a typed GRES: job_nodes is as long as the job table)
    return f"""
        WITH _h_all AS ({_all_hours(grain, only, ", e.metric" + cols)})
        SELECT h.* EXCLUDE (_job_gpu_type), coalesce(h._job_gpu_type, gt.gpu_type, gm.model, 'unknown') AS gpu_type
        FROM _h_all h
        LEFT JOIN (SELECT jn.job_uid, min(n.gpu_type) AS gpu_type FROM job_nodes jn
                   JOIN nodes n ON n.cluster = jn.cluster AND n.node = jn.node
                   WHERE jn.job_uid IN (SELECT job_uid FROM _h_all WHERE _job_gpu_type IS NULL) GROUP BY 1) gt
          USING (job_uid)
        LEFT JOIN (SELECT jn.job_uid, min(d.model) AS model FROM job_nodes jn
                   JOIN gpu_devices d ON d.cluster = jn.cluster AND d.node = jn.node
                   WHERE jn.job_uid IN (SELECT job_uid FROM _h_all WHERE _job_gpu_type IS NULL) GROUP BY 1) gm
          USING (job_uid)"""


def _all_hours(grain: str | None = "hour", only: str | None = None, extra: str = "") -> str:
    """Mart hours in [$lo, $hi), plus the hours of jobs without telemetry, which the mart does not store: all
    allocation (ngpus x the job's seconds in the hour), nothing covered. With a coarser ``grain`` those come as
    one row per job and bucket (None: per job; ``hour`` then holds the bucket start, or $lo), the sum of the
    job's hours in it; a job has a row wherever it has an hour (``from_mart`` false: already one row per job and
    bucket, so readers group only the mart's rows by job). ``only``: SQL selecting the job_uids to keep;
    ``extra``: more columns of the job's ``gpu_efficiency_job e`` and ``jobs j`` rows (", e.metric, j.team")."""
    keep = f" AND job_uid IN ({only})" if only else ""
    first = "greatest(date_trunc('hour', e.window_start), $lo::TIMESTAMP)"    # the job's first hour in the window
    last = "least(e.window_end, $hi::TIMESTAMP)"
    if grain == "hour":
        piece = f"unnest(generate_series({first}, {last} - INTERVAL 1 MICROSECOND, INTERVAL 1 HOUR))"
        step = "INTERVAL 1 HOUR"
    elif grain is None:
        piece, step = "$lo::TIMESTAMP", None
    else:
        piece = (f"unnest(generate_series(date_trunc('{grain}', {first}), {last} - INTERVAL 1 MICROSECOND, "
                 f"INTERVAL 1 {grain}))")
        step = f"INTERVAL 1 {grain}"
    lo = "greatest(window_start, hour)" if grain == "hour" else "greatest(window_start, hour, $lo::TIMESTAMP)"
    hi = (f"least(window_end, hour + {step}, $hi::TIMESTAMP)" if step else "least(window_end, $hi::TIMESTAMP)")
    names = "".join(", " + c.split(" AS ")[-1].split(".")[-1] for c in extra.split(",")[1:])
    mart = ("gpu_efficiency_job_hour h" if not extra else
            "gpu_efficiency_job_hour h JOIN gpu_efficiency_job e USING (job_uid) JOIN jobs j USING (job_uid)")
    return f"""
    SELECT h.job_uid, h.cluster, h.hour, h.alloc_gpu_s, h.telemetry_gpu_s, h.active_gpu_s, h.idle_alloc_gpu_s,
           h.fb_max_mib, h.energy_j, h.label_gpu_s, h.index_gpu_s, h.share_gpu_s, h.hist, true AS from_mart{extra}
    FROM {mart} WHERE h.hour >= $lo AND h.hour < $hi{keep.replace(' job_uid IN', ' h.job_uid IN', 1)}
    UNION ALL
    SELECT job_uid, cluster, hour, ngpus * epoch({hi} - {lo}),
           0.0, 0.0, 0.0, NULL, NULL, 0.0, 0.0, 0.0, NULL, false{names}
    FROM (SELECT e.job_uid, e.cluster, e.window_start, e.window_end, j.ngpus{extra}, {piece} AS hour
          FROM gpu_efficiency_job e JOIN jobs j USING (job_uid)
          WHERE e.telemetry_gpu_s = 0 AND e.window_start < $hi AND e.window_end > $lo
            AND {first} <= {last} - INTERVAL 1 MICROSECOND{keep.replace(' job_uid IN', ' e.job_uid IN', 1)})"""


#: The allocation-only hours of jobs without telemetry, hour by hour (see :func:`_all_hours`).
_ALL_HOURS = _all_hours("hour")


def _window(con, date_from: dt.datetime | None, date_to: dt.datetime | None) -> tuple[dt.datetime, dt.datetime]:
    """The report window rounded out to whole UTC hours (the mart's grain); open ends take the data's."""
    lo, hi = con.sql("""SELECT date_trunc('hour', min(window_start)),
                               date_trunc('hour', max(window_end) - INTERVAL 1 MICROSECOND) + INTERVAL 1 HOUR
                        FROM gpu_efficiency_job""").fetchall()[0]
    lo = date_from.replace(minute=0, second=0, microsecond=0) if date_from else lo
    if date_to:
        hi = date_to if date_to == date_to.replace(minute=0, second=0, microsecond=0) else \
            date_to.replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=1)
    epoch = dt.datetime(1970, 1, 1)
    return lo or epoch, hi or epoch


def _check_by(by: list[str]) -> None:
    bad = [c for c in by if c not in JOB_COLS]
    if bad:
        raise ValueError(f"cannot group efficiency by {', '.join(bad)}; choose from {', '.join(JOB_COLS)} or job")


def by_group(con: duckdb.DuckDBPyConnection, date_from: dt.datetime | None = None,
             date_to: dt.datetime | None = None, by: list[str] | None = None,
             bucket: str | None = "day") -> pl.DataFrame:
    """Efficiency per ``by`` columns and time ``bucket`` (hour/day/week/month, or None for the whole window).

    GPU-hours; percentages of telemetry-covered GPU-hours; group p95 interpolated in 5 % bins.
    """
    by = list(by or [])
    _check_by(by)
    lo, hi = _window(con, date_from, date_to)
    keys = ([f"date_trunc('{bucket}', hour) AS bucket"] if bucket else []) + [f'"{c}"' for c in by]
    names = (["bucket"] if bucket else []) + [f'"{c}"' for c in by]
    gsel = ", ".join(keys)
    gkey = ", ".join(names)
    sel = (gkey + ", ") if gkey else ""
    on = " AND ".join(f"g.{n} IS NOT DISTINCT FROM x.{n}" for n in names) or "TRUE"
    q = f"""
    WITH h AS ({_hours_in(by, bucket)}),
    per_job AS (
        SELECT {gsel + ', ' if gsel else ''}job_uid, any_value(metric) AS metric, sum(alloc_gpu_s) AS alloc,
               sum(telemetry_gpu_s) AS tel, sum(active_gpu_s) AS act, sum(idle_alloc_gpu_s) AS idle,
               max(fb_max_mib) AS fb, sum(energy_j) AS energy, sum(label_gpu_s) AS lab, sum(index_gpu_s) AS idx,
               sum(share_gpu_s) AS shr
        FROM h WHERE from_mart GROUP BY ALL
        UNION ALL   -- jobs without telemetry: one row per job and bucket already (most jobs of a large site)
        SELECT {gsel + ', ' if gsel else ''}job_uid, metric, alloc_gpu_s, telemetry_gpu_s, active_gpu_s,
               idle_alloc_gpu_s, fb_max_mib, energy_j, label_gpu_s, index_gpu_s, share_gpu_s
        FROM h WHERE NOT from_mart),
    g AS (
        SELECT {sel}count(*) AS jobs, count(*) FILTER (WHERE tel = 0) AS jobs_without_telemetry,
               sum(alloc) AS alloc, sum(tel) AS tel, sum(act) AS act, sum(idle) AS idle, max(fb) AS fb,
               sum(energy) AS energy, sum(lab) AS lab, sum(idx) AS idx, sum(shr) AS shr
        FROM per_job GROUP BY ALL),
    mt AS (SELECT {sel}metric, sum(tel) AS t FROM per_job WHERE tel > 0 GROUP BY ALL),
    mix AS (
        SELECT {sel}string_agg(metric || CASE WHEN n > 1 THEN ' ' || round(100 * t / tt)::INTEGER || '%' ELSE '' END,
                              ', ' ORDER BY t DESC) AS metric
        FROM (SELECT *, sum(t) OVER (PARTITION BY {gkey or 'NULL'}) AS tt,
                     count(*) OVER (PARTITION BY {gkey or 'NULL'}) AS n FROM mt) GROUP BY ALL),
    bins AS (
        SELECT {sel}i, sum(hist[i]) AS s FROM (SELECT {gsel + ', ' if gsel else ''}hist FROM h WHERE hist IS NOT NULL),
               range(1, {N_BINS + 1}) r(i) GROUP BY ALL),
    cum AS (
        SELECT *, sum(s) OVER w AS c, sum(s) OVER (PARTITION BY {gkey or 'NULL'}) AS tot
        FROM bins WINDOW w AS (PARTITION BY {gkey or 'NULL'} ORDER BY i ROWS UNBOUNDED PRECEDING)),
    p95 AS (
        SELECT {sel}arg_min({_BIN_LO} + ({_BIN_HI} - {_BIN_LO}) * (0.95 * tot - (c - s)) / s, i) AS p95
        FROM cum WHERE c >= 0.95 * tot AND s > 0 AND tot > 0 GROUP BY ALL)
    SELECT {', '.join(f'g.{n}' for n in names) + ', ' if names else ''}
           x.metric, g.jobs, g.jobs_without_telemetry,
           g.alloc / 3600 AS alloc_gpu_h, g.tel / 3600 AS telemetry_gpu_h,
           100 * g.tel / nullif(g.alloc, 0) AS coverage_pct,
           100 * g.act / nullif(g.tel, 0) AS mean_pct, 100 * p.p95 AS p95_pct,
           g.act / 3600 AS active_gpu_h, g.idle / 3600 AS idle_alloc_gpu_h,
           100 * g.idle / nullif(g.tel, 0) AS idle_alloc_pct, g.fb AS mem_hwm_mib, g.energy / 3.6e6 AS energy_kwh,
           100 * g.lab / nullif(g.tel, 0) AS exact_label_pct, 100 * g.idx / nullif(g.tel, 0) AS exact_index_pct,
           100 * g.shr / nullif(g.tel, 0) AS node_share_pct
    FROM g LEFT JOIN mix x ON {on} LEFT JOIN p95 p ON {on.replace('x.', 'p.')}
    ORDER BY {', '.join(f'g.{n}' for n in names) or '1'}"""
    return con.sql(q, params={"lo": lo, "hi": hi}).pl()


def per_job(con: duckdb.DuckDBPyConnection, date_from: dt.datetime | None = None,
            date_to: dt.datetime | None = None, order: str = "start", limit: int | None = None) -> pl.DataFrame:
    """One row per GPU job overlapping the window, its figures within the window (GPU-hours, %).

    ``order``: ``start`` or ``idle`` (worst offenders first: most idle-allocated GPU-hours).
    """
    lo, hi = _window(con, date_from, date_to)
    order_sql = {"start": "j.start, j.job_id", "idle": "idle_alloc_gpu_h DESC, j.job_id"}[order]
    only = None
    if order == "idle" and limit:
        # Only jobs with telemetry have idle GPU-hours, all in the hour mart: the first ``limit`` rows are among
        # the ``limit`` most idle of those (ties kept) and the first ``limit`` by job id of the rest (ties kept)
        only = f"""
            WITH idle AS (SELECT job_uid, sum(idle_alloc_gpu_s) AS idle FROM gpu_efficiency_job_hour
                          WHERE hour >= $lo AND hour < $hi GROUP BY job_uid HAVING sum(idle_alloc_gpu_s) > 0)
            SELECT job_uid FROM idle QUALIFY rank() OVER (ORDER BY idle DESC) <= {int(limit)}
            UNION ALL
            SELECT e.job_uid FROM gpu_efficiency_job e JOIN jobs j USING (job_uid) ANTI JOIN idle USING (job_uid)
            WHERE e.window_start < $hi AND e.window_end > $lo
              AND greatest(date_trunc('hour', e.window_start), $lo::TIMESTAMP)
                  <= least(e.window_end, $hi::TIMESTAMP) - INTERVAL 1 MICROSECOND
            QUALIFY rank() OVER (ORDER BY j.job_id) <= {int(limit)}"""
    q = f"""
    WITH h AS ({_hours_in(["gpu_type"], None, only)}),
    s AS (SELECT job_uid, any_value(gpu_type) AS gpu_type, sum(alloc_gpu_s) AS alloc, sum(telemetry_gpu_s) AS tel,
                 sum(active_gpu_s) AS act, sum(idle_alloc_gpu_s) AS idle, max(fb_max_mib) AS fb,
                 sum(energy_j) AS energy, count(*) = any_value(e_hours) AS whole
          FROM h LEFT JOIN (SELECT job_uid, count(*) AS e_hours FROM gpu_efficiency_job_hour
                            WHERE job_uid IN (SELECT job_uid FROM h WHERE hist IS NOT NULL) GROUP BY 1) USING (job_uid)
          GROUP BY job_uid),
    bins AS (SELECT job_uid, i, sum(hist[i]) AS s FROM h, range(1, {N_BINS + 1}) r(i) WHERE hist IS NOT NULL
             GROUP BY ALL),
    cum AS (SELECT *, sum(s) OVER (PARTITION BY job_uid ORDER BY i ROWS UNBOUNDED PRECEDING) AS c,
                   sum(s) OVER (PARTITION BY job_uid) AS tot FROM bins),
    p95 AS (SELECT job_uid, arg_min({_BIN_LO} + ({_BIN_HI} - {_BIN_LO}) * (0.95 * tot - (c - s)) / s, i) AS p95
            FROM cum WHERE c >= 0.95 * tot AND s > 0 AND tot > 0 GROUP BY job_uid)
    SELECT j.cluster, j.job_id, j.user, j.team, j.account, j.partition, s.gpu_type, j.state, j.start, j."end",
           j.ngpus, CASE WHEN s.tel > 0 THEN e.metric ELSE 'no telemetry' END AS metric,
           s.alloc / 3600 AS alloc_gpu_h, s.tel / 3600 AS telemetry_gpu_h,
           100 * s.tel / nullif(s.alloc, 0) AS coverage_pct, 100 * s.act / nullif(s.tel, 0) AS mean_pct,
           100 * CASE WHEN s.tel = 0 THEN NULL WHEN s.whole THEN e.act_p95 ELSE p.p95 END AS p95_pct,
           s.act / 3600 AS active_gpu_h, s.idle / 3600 AS idle_alloc_gpu_h, s.fb AS mem_hwm_mib,
           s.energy / 3.6e6 AS energy_kwh, e.method
    FROM s JOIN jobs j USING (job_uid) JOIN gpu_efficiency_job e USING (job_uid) LEFT JOIN p95 p USING (job_uid)
    ORDER BY {order_sql}{f' LIMIT {int(limit)}' if limit else ''}"""
    return con.sql(q, params={"lo": lo, "hi": hi}).pl()


def worst_offenders(con: duckdb.DuckDBPyConnection, date_from: dt.datetime | None = None,
                    date_to: dt.datetime | None = None, n: int = 10) -> pl.DataFrame:
    """The ``n`` jobs with the most idle-allocated GPU-hours in the window."""
    df = per_job(con, date_from, date_to, order="idle", limit=n)
    return df.filter(pl.col("idle_alloc_gpu_h") > 0)


def summary(con: duckdb.DuckDBPyConnection, date_from: dt.datetime | None = None,
            date_to: dt.datetime | None = None) -> dict:
    """Window totals: GPU-hours by attribution method and by activity metric, jobs without telemetry."""
    lo, hi = _window(con, date_from, date_to)
    row = con.sql(f"""
        WITH h AS ({_hours_in([], None)}),
        pj AS (SELECT job_uid, any_value(metric) AS metric, sum(alloc_gpu_s) AS alloc, sum(telemetry_gpu_s) AS tel,
                      sum(label_gpu_s) AS lab, sum(index_gpu_s) AS idx, sum(share_gpu_s) AS shr
               FROM h WHERE from_mart GROUP BY job_uid
               UNION ALL
               SELECT job_uid, metric, alloc_gpu_s, telemetry_gpu_s, label_gpu_s, index_gpu_s, share_gpu_s
               FROM h WHERE NOT from_mart)
        SELECT count(*), count(*) FILTER (WHERE tel = 0), coalesce(sum(alloc) FILTER (WHERE tel = 0), 0) / 3600,
               coalesce(sum(alloc), 0) / 3600, coalesce(sum(tel), 0) / 3600, coalesce(sum(lab), 0) / 3600,
               coalesce(sum(idx), 0) / 3600, coalesce(sum(shr), 0) / 3600,
               coalesce(sum(tel) FILTER (WHERE metric = 'SM_ACTIVE'), 0) / 3600,
               coalesce(sum(tel) FILTER (WHERE metric = 'GR_ENGINE_ACTIVE'), 0) / 3600,
               coalesce(sum(tel) FILTER (WHERE metric = 'GPU_UTIL'), 0) / 3600
        FROM pj""", params={"lo": lo, "hi": hi}).fetchall()[0]
    keys = ("jobs", "jobs_without_telemetry", "gpu_h_without_telemetry", "alloc_gpu_h", "telemetry_gpu_h",
            "exporter_label_gpu_h", "gpu_index_gpu_h", "node_share_gpu_h", "sm_active_gpu_h",
            "gr_engine_active_gpu_h", "gpu_util_gpu_h")
    return {"window": (lo, hi), **dict(zip(keys, row))}


def method_shares(con: duckdb.DuckDBPyConnection, date_from: dt.datetime | None = None,
                  date_to: dt.datetime | None = None) -> pl.DataFrame:
    """Share of telemetry GPU-hours attributed by each method (exact by exporter label, exact by GPU index,
    node-share), as a table."""
    s = summary(con, date_from, date_to)
    tel = s["telemetry_gpu_h"]
    rows = [(m, s[k], 100 * s[k] / tel if tel else None) for m, k in
            (("exporter-label (exact)", "exporter_label_gpu_h"), ("gpu-index (exact)", "gpu_index_gpu_h"),
             ("node-share", "node_share_gpu_h"))]
    return pl.DataFrame(rows, schema=["method", "gpu_h", "pct"], orient="row")
