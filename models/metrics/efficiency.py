"""GPU efficiency: how busy allocated GPUs were, per job and per user/team/partition/GPU type and time bucket.

Definitions (docs/METRICS.md, "GPU efficiency"):

* activity metric, per job: ``SM_ACTIVE``, else ``GR_ENGINE_ACTIVE``, else ``GPU_UTIL`` — the first that covers at
  least half as many of the job's GPU-seconds as the best-covered one; named in every output;
* telemetry GPU-seconds: allocated GPU-seconds covered by readings of that metric (models/kernels/attribution.py);
* active GPU-seconds: Σ activity × covered GPU-seconds; mean = active / telemetry; p95 GPU-second-weighted;
* idle-allocated GPU-seconds: covered GPU-seconds inside stretches of ≥ 5 minutes (of the job's time on a device)
  at zero activity (< 0.5 %) — Run:ai's "idle for more than 5 minutes", jobstats' "GPU-hours at 0 %";
* memory high-water mark (MiB) and energy (J; reports show kWh).

A job without telemetry keeps ``telemetry_gpu_s = 0`` and NULL activity: it is counted and shown as "no
telemetry", never as 0 % busy. The marts (``gpu_efficiency_job``, ``gpu_efficiency_job_hour``) are rebuilt
incrementally by models/marts/efficiency.py; the report functions here read them and return Polars frames. The
allocation of jobs without telemetry over a window's whole UTC days comes from ``gpu_efficiency_notel_day``
(models/marts/efficiency_notel.py) while it is current, the partial edge days from the jobs' windows.
"""
from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from ingest.warehouse import mart_run
from models.definitions.efficiency_sql import with_pool
from models.definitions.jobs_sql import open_sql
from models.definitions.marts import EFFICIENCY, EFFICIENCY_NOTEL
from models.definitions.times import ceil_day, floor_day
from models.kernels.attribution import N_BINS

METRIC_NAMES = {"sm": "SM_ACTIVE", "gr": "GR_ENGINE_ACTIVE", "gu": "GPU_UTIL"}
GROUPABLE = ("user", "team", "account", "partition", "qos", "gpu_type", "cluster", "node")


# ---------------------------------------------------------------- reports

JOB_COLS = ("user", "team", "account", "partition", "qos", "gpu_type", "cluster")
_BIN_LO = "CASE WHEN i = 1 THEN 0 WHEN i = 2 THEN 0.005 ELSE 0.05 * (i - 2) END"
_BIN_HI = "CASE WHEN i = 1 THEN 0 ELSE 0.05 * (i - 1) END"


def _hours_in(by: list[str], grain: str | None = "hour", only: str | None = None,
              days: tuple[dt.datetime, dt.datetime] | None = None) -> str:
    """Mart hours in the window, with the job's metric and grouping columns (gpu_type falls back to the node
    pool: models/definitions/efficiency_sql.with_pool), and the allocation of jobs without telemetry.

    ``grain`` (hour, day, week, month or None) is the bucket the caller groups by: the allocation-only hours of
    jobs without telemetry come summed per bucket of it (None: one row per job), which adds up to the same
    GPU-seconds in far fewer rows. ``only``: SQL selecting the job_uids to keep (all when None). ``days``: the
    whole UTC days [D1, D2) of the window when the no-telemetry rollup is current (:func:`_whole_days`); those
    days' allocation-only rows then come from ``gpu_efficiency_notel_day`` (job_uid NULL, ``n`` jobs each) and
    only the partial edge days are computed per job. Every row has ``n``: the distinct jobs it adds to its
    bucket's count."""
    extra = ", e.metric" + "".join(f', j."{c}"' if c != "gpu_type" else ", j.gpu_type AS _job_gpu_type"
                                   for c in by if c != "cluster")
    if days is None or grain == "hour" or only:
        exact = _mart_hours(only, extra) + "\nUNION ALL" + _notel_jobs(grain, only, extra)
        return f"WITH _h_all AS ({exact}) {with_pool('_h_all')}" if "gpu_type" in by else exact
    exact = _mart_hours(None, extra) + "".join("\nUNION ALL" + _notel_jobs(grain, None, extra, edge, days)
                                                for edge in _edges(days))
    if "gpu_type" in by:
        exact = f"WITH _h_all AS ({exact}) {with_pool('_h_all')}"
    return f"SELECT * FROM ({exact}) UNION ALL BY NAME {_notel_rollup(grain, days, by)}"


_COLS = ("h.job_uid, h.cluster, h.hour, h.alloc_gpu_s, h.telemetry_gpu_s, h.active_gpu_s, h.idle_alloc_gpu_s, "
         "h.fb_max_mib, h.energy_j, h.label_gpu_s, h.index_gpu_s, h.share_gpu_s, h.hist")


def _mart_hours(only: str | None, extra: str) -> str:
    """Mart hours in [$lo, $hi) (``from_mart``, one job each). ``only``: SQL selecting the job_uids to keep;
    ``extra``: more columns of the job's ``gpu_efficiency_job e`` and ``jobs j`` rows (", e.metric, j.team")."""
    keep = f" AND h.job_uid IN ({only})" if only else ""
    mart = ("gpu_efficiency_job_hour h" if not extra else
            "gpu_efficiency_job_hour h JOIN gpu_efficiency_job e USING (job_uid) JOIN jobs j USING (job_uid)")
    return f"""
    SELECT {_COLS}, true AS from_mart, 1 AS n{extra}
    FROM {mart} WHERE h.hour >= $lo AND h.hour < $hi{keep}"""


def _edges(days: tuple[dt.datetime, dt.datetime]) -> list[tuple[str, str]]:
    """The window's partial edge days around its whole days [D1, D2), as SQL bounds: [$lo, D1), [D2, $hi)."""
    d1, d2 = (f"TIMESTAMP '{d:%Y-%m-%d %H:%M:%S}'" for d in days)
    return [("$lo::TIMESTAMP", d1), (d2, "$hi::TIMESTAMP")]


def _notel_jobs(grain: str | None, only: str | None, extra: str, edge: tuple[str, str] | None = None,
                days: tuple[dt.datetime, dt.datetime] | None = None) -> str:
    """The hours of jobs without telemetry in [$lo, $hi) (or in ``edge``, a partial day of it), which the mart
    does not store: all allocation (ngpus x the job's seconds in the hour), nothing covered. With a coarser
    ``grain`` those come as one row per job and bucket (None: per job; ``hour`` then holds the bucket start, or
    $lo), the sum of the job's hours in it; a job has a row wherever it has an hour (``from_mart`` false: already
    one row per job and bucket, so readers group only the mart's rows by job). An edge row counts its job
    (``n`` = 1) only when the job holds no GPU-second of the whole ``days`` in the same bucket (the rollup counts
    those)."""
    keep = f" AND e.job_uid IN ({only})" if only else ""
    wlo, whi = edge or ("$lo::TIMESTAMP", "$hi::TIMESTAMP")
    first = f"greatest(date_trunc('hour', e.window_start), {wlo})"    # the job's first hour in the window
    last = f"least(e.window_end, {whi})"
    if grain == "hour":
        piece = f"unnest(generate_series({first}, {last} - INTERVAL 1 MICROSECOND, INTERVAL 1 HOUR))"
        step = "INTERVAL 1 HOUR"
    elif grain is None:
        piece, step = "$lo::TIMESTAMP", None
    else:
        piece = (f"unnest(generate_series(date_trunc('{grain}', {first}), {last} - INTERVAL 1 MICROSECOND, "
                 f"INTERVAL 1 {grain}))")
        step = f"INTERVAL 1 {grain}"
    lo = "greatest(window_start, hour)" if grain == "hour" else f"greatest(window_start, hour, {wlo})"
    hi = f"least(window_end, hour + {step}, {whi})" if step else f"least(window_end, {whi})"
    n = "1"
    if edge:
        d1, d2 = _edges(days)[0][1], _edges(days)[1][0]
        b_lo, b_hi = (f"greatest(hour, {d1})", f"least(hour + {step}, {d2})") if step else (d1, d2)
        n = f"CASE WHEN {b_lo} < {b_hi} AND window_start < {b_hi} AND window_end > {b_lo} THEN 0 ELSE 1 END"
    names = "".join(", " + c.split(" AS ")[-1].split(".")[-1] for c in extra.split(",")[1:])
    return f"""
    SELECT job_uid, cluster, hour, ngpus * epoch({hi} - {lo}) AS alloc_gpu_s,
           0.0, 0.0, 0.0, NULL, NULL, 0.0, 0.0, 0.0, NULL, false, {n}{names}
    FROM (SELECT e.job_uid, e.cluster, e.window_start, e.window_end, j.ngpus{extra}, {piece} AS hour
          FROM gpu_efficiency_job e JOIN jobs j USING (job_uid)
          WHERE e.telemetry_gpu_s = 0 AND e.window_start < {whi} AND e.window_end > {wlo}
            AND {first} <= {last} - INTERVAL 1 MICROSECOND{keep})"""


def _notel_rollup(grain: str | None, days: tuple[dt.datetime, dt.datetime], by: list[str]) -> str:
    """The allocation of jobs without telemetry on the whole days [D1, D2), from ``gpu_efficiency_notel_day``
    (models/marts/efficiency_notel.py): one row per day and group, ``hour`` its bucket's start ($lo when
    ``grain`` is None). Its jobs: those of the bucket's first day (within the days) and those starting on each
    later day, which counts each job once per bucket."""
    d1, d2 = _edges(days)[0][1], _edges(days)[1][0]
    bucket = f"date_trunc('{grain}', day::TIMESTAMP)" if grain else "$lo::TIMESTAMP"
    start = f"greatest({bucket}, {d1})" if grain else d1
    cols = "".join(f', "{c}"' for c in by if c != "cluster")
    return f"""(
    SELECT NULL::BIGINT AS job_uid, cluster, {bucket} AS hour, alloc_gpu_s, 0.0 AS telemetry_gpu_s,
           0.0 AS active_gpu_s, 0.0 AS idle_alloc_gpu_s, NULL::DOUBLE AS fb_max_mib, NULL::DOUBLE AS energy_j,
           0.0 AS label_gpu_s, 0.0 AS index_gpu_s, 0.0 AS share_gpu_s, NULL::DOUBLE[] AS hist, false AS from_mart,
           CASE WHEN day = {start}::DATE THEN jobs ELSE jobs_first END AS n, NULL::VARCHAR AS metric{cols}
    FROM gpu_efficiency_notel_day WHERE day >= {d1}::DATE AND day < {d2}::DATE)"""


def _whole_days(con, lo: dt.datetime, hi: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    """The whole UTC days [D1, D2) inside [lo, hi) when ``gpu_efficiency_notel_day`` was built from the efficiency
    mart as it is (both record the same ingest run): the reads then sum its days and compute only the partial edge
    days per job. None when there is no whole day, or the rollup is missing or behind (the reads then expand every
    job, as exact and slower)."""
    d1, d2 = ceil_day(lo), floor_day(hi)
    if d1 >= d2:
        return None
    notel = mart_run(con, EFFICIENCY_NOTEL)
    return (d1, d2) if notel is not None and notel == mart_run(con, EFFICIENCY) else None


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


def has_jobs(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the efficiency mart holds any GPU job yet (a report has something to show)."""
    return con.sql("SELECT EXISTS (SELECT 1 FROM gpu_efficiency_job)").fetchall()[0][0]


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
    WITH h AS ({_hours_in(by, bucket, days=_whole_days(con, lo, hi))}),
    per_job AS (
        SELECT {gsel + ', ' if gsel else ''}job_uid, 1 AS n, any_value(metric) AS metric, sum(alloc_gpu_s) AS alloc,
               sum(telemetry_gpu_s) AS tel, sum(active_gpu_s) AS act, sum(idle_alloc_gpu_s) AS idle,
               max(fb_max_mib) AS fb, sum(energy_j) AS energy, sum(label_gpu_s) AS lab, sum(index_gpu_s) AS idx,
               sum(share_gpu_s) AS shr
        FROM h WHERE from_mart GROUP BY ALL
        UNION ALL   -- jobs without telemetry: one row per job (or day and group: n jobs) and bucket already
        SELECT {gsel + ', ' if gsel else ''}job_uid, n, metric, alloc_gpu_s, telemetry_gpu_s, active_gpu_s,
               idle_alloc_gpu_s, fb_max_mib, energy_j, label_gpu_s, index_gpu_s, share_gpu_s
        FROM h WHERE NOT from_mart),
    g AS (
        SELECT {sel}sum(n)::BIGINT AS jobs,
               coalesce(sum(n) FILTER (WHERE tel = 0), 0)::BIGINT AS jobs_without_telemetry,
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
           NULL::DOUBLE AS coverage_pct, NULL::DOUBLE AS mean_pct, 100 * p.p95 AS p95_pct,   -- shares() fills them
           g.act / 3600 AS active_gpu_h, g.idle / 3600 AS idle_alloc_gpu_h,
           NULL::DOUBLE AS idle_alloc_pct, g.fb AS mem_hwm_mib, g.energy / 3.6e6 AS energy_kwh,
           100 * g.lab / nullif(g.tel, 0) AS exact_label_pct, 100 * g.idx / nullif(g.tel, 0) AS exact_index_pct,
           100 * g.shr / nullif(g.tel, 0) AS node_share_pct
    FROM g LEFT JOIN mix x ON {on} LEFT JOIN p95 p ON {on.replace('x.', 'p.')}
    ORDER BY {', '.join(f'g.{n}' for n in names) or '1'}"""
    return shares(con.sql(q, params={"lo": lo, "hi": hi}).pl())


def shares(df: pl.DataFrame) -> pl.DataFrame:
    """The percentages of a group's summed GPU-hours, one definition for every report and page (so a page that
    sums groups recomputes them the same way):

    * ``coverage_pct`` = telemetry GPU-hours / allocated GPU-hours: the share of the allocation that readings
      cover. 0 means no telemetry: how busy the GPUs were is *unknown*, never 0 %; None without allocation;
    * ``mean_pct`` = active / telemetry GPU-hours; ``idle_alloc_pct`` = idle-allocated / telemetry GPU-hours
      (both None without telemetry)."""
    tel, alloc = pl.col("telemetry_gpu_h"), pl.col("alloc_gpu_h")
    return df.with_columns(
        pl.when(alloc > 0).then(100 * tel / alloc).cast(pl.Float64).alias("coverage_pct"),
        pl.when(tel > 0).then(100 * pl.col("active_gpu_h") / tel).cast(pl.Float64).alias("mean_pct"),
        pl.when(tel > 0).then(100 * pl.col("idle_alloc_gpu_h") / tel).cast(pl.Float64).alias("idle_alloc_pct"))


def per_job(con: duckdb.DuckDBPyConnection, date_from: dt.datetime | None = None,
            date_to: dt.datetime | None = None, order: str = "start", limit: int | None = None,
            idle_only: bool = False) -> pl.DataFrame:
    """One row per GPU job overlapping the window, its figures within the window (GPU-hours, %). ``running``: the
    job's allocation is still open at the data horizon (its GPU-hours stop there; ``end`` is empty).

    ``order``: ``start`` or ``idle`` (worst offenders first: most idle-allocated GPU-hours). ``idle_only`` (with
    ``idle``): only the jobs with idle-allocated GPU-hours in the window; they all have telemetry, so they are
    found in the hour mart and a site's jobs without telemetry are never read job by job.
    """
    lo, hi = _window(con, date_from, date_to)
    order_sql = {"start": "j.start, j.job_id", "idle": "idle_alloc_gpu_h DESC, j.job_id"}[order]
    only = None
    if order == "idle" and (limit or idle_only):
        # Only jobs with telemetry have idle GPU-hours, all in the hour mart: the first ``limit`` rows are among
        # the ``limit`` most idle of those (ties kept) and the first ``limit`` by job id of the rest (ties kept)
        top = f" QUALIFY rank() OVER (ORDER BY idle DESC) <= {int(limit)}" if limit else ""
        only = f"""
            WITH idle AS (SELECT job_uid, sum(idle_alloc_gpu_s) AS idle FROM gpu_efficiency_job_hour
                          WHERE hour >= $lo AND hour < $hi GROUP BY job_uid HAVING sum(idle_alloc_gpu_s) > 0)
            SELECT job_uid FROM idle{top}"""
        if not idle_only:
            only += f"""
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
           {open_sql("j")} AS running,
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
                    date_to: dt.datetime | None = None, n: int | None = 10) -> pl.DataFrame:
    """The ``n`` jobs with the most idle-allocated GPU-hours in the window (None: every job with any), most idle
    first. Idle needs readings, so these are jobs with telemetry only, read from the hour mart: a year of a site
    without telemetry costs no scan of its jobs."""
    df = per_job(con, date_from, date_to, order="idle", limit=n, idle_only=True)
    return df.filter(pl.col("idle_alloc_gpu_h") > 0)


def summary(con: duckdb.DuckDBPyConnection, date_from: dt.datetime | None = None,
            date_to: dt.datetime | None = None) -> dict:
    """Window totals: GPU-hours by attribution method and by activity metric, jobs without telemetry."""
    lo, hi = _window(con, date_from, date_to)
    row = con.sql(f"""
        WITH h AS ({_hours_in([], None, days=_whole_days(con, lo, hi))}),
        pj AS (SELECT job_uid, 1 AS n, any_value(metric) AS metric, sum(alloc_gpu_s) AS alloc,
                      sum(telemetry_gpu_s) AS tel, sum(label_gpu_s) AS lab, sum(index_gpu_s) AS idx,
                      sum(share_gpu_s) AS shr
               FROM h WHERE from_mart GROUP BY job_uid
               UNION ALL
               SELECT job_uid, n, metric, alloc_gpu_s, telemetry_gpu_s, label_gpu_s, index_gpu_s, share_gpu_s
               FROM h WHERE NOT from_mart)
        SELECT coalesce(sum(n), 0)::BIGINT, coalesce(sum(n) FILTER (WHERE tel = 0), 0)::BIGINT,
               coalesce(sum(alloc) FILTER (WHERE tel = 0), 0) / 3600,
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


# ---------------------------------------------------------------- jobs holding GPUs at 0 % (issue 19's alert)

def zero_runs(con: duckdb.DuckDBPyConnection, date_from: dt.datetime, date_to: dt.datetime,
              min_hours: float) -> pl.DataFrame:
    """Jobs that held GPUs at 0 % (every telemetry-covered GPU-second in the histogram's first bin, activity
    below 0.5 %) for at least ``min_hours`` consecutive whole hours within [date_from, date_to): one row per job
    with its longest such run (``zero_hours``, ``zero_from``, ``zero_to``, UTC) and the run's allocated GPU-hours.
    Hours without telemetry break a run (nothing is known of them)."""
    return con.sql("""
        WITH z AS (SELECT job_uid, hour, alloc_gpu_s FROM gpu_efficiency_job_hour
                   WHERE hour >= $lo AND hour + INTERVAL 1 HOUR <= $hi AND telemetry_gpu_s > 0
                     AND hist[1] >= 0.999 * telemetry_gpu_s),
        g AS (SELECT *, hour - INTERVAL 1 HOUR * row_number() OVER (PARTITION BY job_uid ORDER BY hour) AS grp FROM z),
        runs AS (SELECT job_uid, count(*) AS zero_hours, min(hour) AS zero_from,
                        max(hour) + INTERVAL 1 HOUR AS zero_to, sum(alloc_gpu_s) / 3600 AS zero_gpu_h
                 FROM g GROUP BY job_uid, grp HAVING count(*) >= $n
                 QUALIFY row_number() OVER (PARTITION BY job_uid ORDER BY count(*) DESC, min(hour) DESC) = 1)
        SELECT j.cluster, j.job_id, j.user, j.team, j.account, j.ngpus, j.start, j."end", r.zero_hours::DOUBLE AS zero_hours,
               r.zero_from, r.zero_to, r.zero_gpu_h
        FROM runs r JOIN jobs j USING (job_uid) ORDER BY r.zero_hours DESC, j.job_id""",
        params={"lo": date_from, "hi": date_to, "n": min_hours}).pl()
