"""Attribution of GPU telemetry to jobs: which job's allocation each device-minute of readings belongs to.

The unit is the *device-minute* (one ``gpu_samples`` row covers one or more of them; where raw rows were pruned,
``gpu_samples_5m`` buckets stand in). Each device-minute on a node is given to jobs by the first rule that
applies, and the rule is recorded:

1. ``exporter-label`` (exact): the reading carries the exporter's job label (``hpc_job``). It belongs to the
   named job(s) running on that node in that minute; a label naming a job the warehouse does not know keeps the
   device-minute from everyone else too.
2. ``gpu-index`` (exact): ``job_gpu_indices`` says the job held that device (``scontrol -d`` IDX, ...).
3. ``node-share``: otherwise the node's remaining device-minutes are shared by the node's remaining jobs in
   proportion to their GPUs (``gpus_on_node``) and their overlap with the minute. When those jobs hold fewer
   GPUs (A) than the node has reporting devices, the pool is the A busiest devices of that minute, because
   Slurm's device cgroup leaves unallocated GPUs idle: a busy job is never diluted by GPUs it did not have.

A job's share of a device-minute is at most its overlap with the minute (seconds / 60), so covered GPU-seconds
never exceed allocated GPU-seconds. The result is a temp table of ``(job_uid, cluster, node, gpu, m, ov_s,
share, method, ...)``: ``share x 60`` covered GPU-seconds of device ``gpu`` in minute ``m``.
"""
from __future__ import annotations

import duckdb

#: activity below this (0.5 %) counts as zero: it prints as 0 %.
IDLE_EPSILON = 0.005
METHODS = ("exporter-label", "gpu-index", "node-share")


def horizon_sql() -> str:
    """Per cluster, the latest time accounting knows about (running jobs are counted up to it)."""
    return """SELECT cluster, max(list_max([submit, start, "end"])) AS horizon FROM jobs GROUP BY cluster"""


def job_windows(con: duckdb.DuckDBPyConnection, targets: str) -> None:
    """``_jw``: the target jobs' accounted windows ``[ws, we)`` (running jobs end at the horizon)."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _jw AS
        SELECT j.job_uid, j.cluster, j.start AS ws,
               CASE WHEN j."end" IS NULL THEN h.horizon ELSE least(j."end", coalesce(h.horizon, j."end")) END AS we,
               j.ngpus
        FROM jobs j JOIN {targets} t USING (job_uid) JOIN ({horizon_sql()}) h USING (cluster)
        WHERE j.start IS NOT NULL AND j.ngpus > 0""")
    con.execute("DELETE FROM _jw WHERE we IS NULL OR we <= ws")


def _job_node_minutes(con: duckdb.DuckDBPyConnection) -> None:
    """``_jnm``: every job on the targets' nodes and times, one row per (job, node, minute) with overlap."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _tn AS
        SELECT jn.cluster, jn.node, min(w.ws) AS lo, max(w.we) AS hi
        FROM _jw w JOIN job_nodes jn USING (job_uid) GROUP BY ALL""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _jn AS
        SELECT j.job_uid, jn.cluster, jn.node, jn.gpus_on_node AS g, j.job_id, j.job_id_raw, j.start AS ws,
               CASE WHEN j."end" IS NULL THEN h.horizon ELSE least(j."end", coalesce(h.horizon, j."end")) END AS we
        FROM job_nodes jn JOIN jobs j USING (job_uid) JOIN _tn t ON t.cluster = jn.cluster AND t.node = jn.node
             JOIN ({horizon_sql()}) h ON h.cluster = j.cluster
        WHERE j.start IS NOT NULL AND j.ngpus > 0 AND jn.gpus_on_node > 0
          AND j.start < t.hi AND coalesce(j."end", h.horizon) > t.lo""")
    con.execute("DELETE FROM _jn WHERE we IS NULL OR we <= ws")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _jnm AS
        SELECT job_uid, cluster, node, g, job_id, job_id_raw, m,
               epoch(least(we, m + INTERVAL 1 MINUTE) - greatest(ws, m)) AS ov
        FROM (SELECT *, unnest(generate_series(date_trunc('minute', ws), we - INTERVAL 1 MICROSECOND,
                                               INTERVAL 1 MINUTE)) AS m FROM _jn)""")


def _pieces(con: duckdb.DuckDBPyConnection) -> None:
    """``_pc``: device-minutes of readings on the targets' nodes and times (raw rows, else the rollup)."""
    cols = "sm_active AS sm, gr_engine_active AS gr, gpu_util AS gu"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _pc AS
        WITH raw AS (
            SELECT g.cluster, g.node, g.gpu, g.ts, g.interval_s, {cols}, g.fb_used_mib AS fb, g.power_w AS pw,
                   g.hpc_jobs
            FROM gpu_samples g JOIN _tn t ON g.cluster = t.cluster AND g.node = t.node
            WHERE g.ts < t.hi AND g.ts >= t.lo - INTERVAL 1 DAY),
        rawm AS (
            SELECT cluster, node, gpu, ts AS m, sm, gr, gu, fb, pw, hpc_jobs FROM raw WHERE interval_s = 60
            UNION ALL
            SELECT cluster, node, gpu, m, sm, gr, gu, fb, pw, hpc_jobs FROM (
                SELECT *, unnest(generate_series(ts, ts + to_seconds(interval_s - 60), INTERVAL 1 MINUTE)) AS m
                FROM raw WHERE interval_s <> 60)),
        rb AS (SELECT DISTINCT cluster, node, gpu, time_bucket(INTERVAL 5 MINUTE, m) AS bucket FROM rawm),
        roll AS (
            SELECT r.cluster, r.node, r.gpu, m, r.sm_active_mean AS sm, r.gr_engine_active_mean AS gr,
                   r.gpu_util_mean AS gu, r.sm_active_max AS sm_x, r.gr_engine_active_max AS gr_x,
                   r.gpu_util_max AS gu_x, r.fb_used_mib_max AS fb, r.power_w_mean AS pw
            FROM (SELECT r.*, unnest(generate_series(r.bucket, r.bucket + to_seconds(r.covered_s - 60),
                                                     INTERVAL 1 MINUTE)) AS m
                  FROM gpu_samples_5m r JOIN _tn t ON r.cluster = t.cluster AND r.node = t.node
                  WHERE r.bucket < t.hi AND r.bucket >= t.lo - INTERVAL 5 MINUTE
                    AND NOT EXISTS (SELECT 1 FROM rb WHERE rb.cluster = r.cluster AND rb.node = r.node
                                    AND rb.gpu = r.gpu AND rb.bucket = r.bucket)) r)
        SELECT p.*, FALSE AS rolled FROM (
            SELECT cluster, node, gpu, m, sm, gr, gu, sm AS sm_x, gr AS gr_x, gu AS gu_x, fb, pw, hpc_jobs FROM rawm
        ) p JOIN _tn t ON p.cluster = t.cluster AND p.node = t.node
        WHERE p.m >= date_trunc('minute', t.lo) AND p.m < t.hi
        UNION ALL
        SELECT cluster, node, gpu, m, sm, gr, gu, sm_x, gr_x, gu_x, fb, pw, NULL, TRUE FROM roll""")


def _owned(con: duckdb.DuckDBPyConnection) -> None:
    """``_own``: device-minutes owned exactly (exporter label, GPU index), and the jobs in exact mode."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _lab AS
        SELECT p.cluster, p.node, p.gpu, p.m, trim(l.lbl) AS lbl, len(string_split(p.hpc_jobs, ',')) AS n_lbl
        FROM _pc p, unnest(string_split(p.hpc_jobs, ',')) AS l(lbl)
        WHERE p.hpc_jobs IS NOT NULL""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _own AS
        SELECT l.cluster, l.node, l.gpu, l.m, j.job_uid, j.ov, j.ov / 60.0 / l.n_lbl AS share,
               'exporter-label' AS method
        FROM _lab l JOIN _jnm j ON j.cluster = l.cluster AND j.node = l.node AND j.m = l.m
                               AND (l.lbl = j.job_id OR l.lbl = j.job_id_raw)
        UNION ALL
        SELECT x.cluster, x.node, x.gpu, j.m, j.job_uid, j.ov,
               j.ov / 60.0 / greatest(1.0, sum(j.ov / 60.0) OVER (PARTITION BY x.cluster, x.node, x.gpu, j.m)),
               'gpu-index'
        FROM job_gpu_indices x JOIN _jnm j ON j.job_uid = x.job_uid AND j.cluster = x.cluster AND j.node = x.node
        WHERE NOT EXISTS (SELECT 1 FROM _lab l WHERE l.cluster = x.cluster AND l.node = x.node AND l.gpu = x.gpu
                          AND l.m = j.m)""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _exact_jobs AS
        SELECT DISTINCT job_uid, cluster, node FROM _own
        UNION SELECT DISTINCT x.job_uid, x.cluster, x.node FROM job_gpu_indices x JOIN _jn USING (job_uid)""")


def _shared(con: duckdb.DuckDBPyConnection) -> None:
    """``_shr``: the remaining device-minutes shared by the remaining jobs, busiest devices first."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _shr AS
        WITH jobs_nm AS (
            SELECT j.cluster, j.node, j.m, j.job_uid, j.ov, j.g * j.ov / 60.0 AS a
            FROM _jnm j ANTI JOIN _exact_jobs e ON e.job_uid = j.job_uid AND e.node = j.node AND e.cluster = j.cluster),
        alloc AS (SELECT cluster, node, m, sum(a) AS a_tot FROM jobs_nm GROUP BY ALL),
        pool AS (
            SELECT p.cluster, p.node, p.gpu, p.m, a.a_tot,
                   row_number() OVER (PARTITION BY p.cluster, p.node, p.m
                                      ORDER BY coalesce(p.sm, p.gr, p.gu) DESC NULLS LAST, p.gpu) AS r
            FROM _pc p JOIN alloc a USING (cluster, node, m)
            WHERE p.hpc_jobs IS NULL
              AND NOT EXISTS (SELECT 1 FROM _own o WHERE o.cluster = p.cluster AND o.node = p.node
                              AND o.gpu = p.gpu AND o.m = p.m)),
        weighted AS (SELECT *, least(1.0, greatest(0.0, a_tot - r + 1)) AS w FROM pool)
        SELECT w.cluster, w.node, w.gpu, w.m, j.job_uid, j.ov, w.w * j.a / w.a_tot AS share, 'node-share' AS method
        FROM weighted w JOIN jobs_nm j USING (cluster, node, m)
        WHERE w.w > 0 AND j.a > 0""")


def attribute(con: duckdb.DuckDBPyConnection, targets: str) -> duckdb.DuckDBPyRelation:
    """Attribute readings to the jobs listed in table ``targets`` (column ``job_uid``).

    Returns the relation ``_att``: one row per (job, device, minute) with ``ov_s`` (the job's seconds in the
    minute), ``share`` (of the device-minute; ``share x 60`` covered GPU-seconds), ``method``, ``rolled``
    (read from the 5-minute rollup), the readings ``sm``, ``gr``, ``gu`` (fractions 0..1) and their maxima
    ``sm_x``, ``gr_x``, ``gu_x`` within the reading, ``fb`` (MiB) and ``pw`` (W). Only target jobs appear;
    the other jobs on their nodes take their shares all the same.
    """
    job_windows(con, targets)
    _job_node_minutes(con)
    _pieces(con)
    _owned(con)
    _shared(con)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _att AS
        SELECT a.job_uid, a.cluster, a.node, a.gpu, a.m, a.ov AS ov_s, a.share, a.method, p.rolled,
               p.sm, p.gr, p.gu, p.sm_x, p.gr_x, p.gu_x, p.fb, p.pw
        FROM (SELECT * FROM _own UNION ALL SELECT * FROM _shr) a
        JOIN _pc p USING (cluster, node, gpu, m)
        SEMI JOIN _jw w ON w.job_uid = a.job_uid
        WHERE a.share > 0""")
    for t in ("_tn", "_jn", "_jnm", "_pc", "_lab", "_own", "_exact_jobs", "_shr"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    return con.table("_att")
