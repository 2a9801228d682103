"""Attribution of GPU telemetry to jobs: which job's allocation each device-minute of readings belongs to.

The unit is the *device-minute* (one ``gpu_samples`` row covers one or more of them; where raw rows were pruned,
``gpu_samples_5m`` buckets stand in). Each device-minute on a node is given to jobs by the first rule that
applies, and the rule is recorded:

1. ``exporter-label`` (exact): the reading carries the exporter's job label (``hpc_job``). It belongs to the
   named job(s) running on that node in that minute, each its GPUs there over the devices labelled with it (a
   job on 0.25 GPU of shards gets a quarter of the device-minute, a whole-GPU job all of it; jobs claiming more
   than the device between them split it in proportion); a label naming a job the warehouse does not know
   claims a whole device too, keeping it from everyone else.
2. ``gpu-index`` (exact): ``job_gpu_indices`` says the job held that device (``scontrol -d`` IDX). A job holding
   less than a whole GPU per device (shards, MPS: 0.5 GPU on IDX 0) gets that part of the device-minute.
3. ``node-share``: otherwise the node's remaining device-minutes are shared by the node's remaining jobs in
   proportion to their GPUs (``gpus_on_node``) and their overlap with the minute. When those jobs hold fewer
   GPUs (A) than the node has reporting devices, the pool is the A busiest devices of that minute, because
   Slurm's device cgroup leaves unallocated GPUs idle: a busy job is never diluted by GPUs it did not have.

A job's share of a device-minute is at most its overlap with the minute (seconds / 60), so covered GPU-seconds
never exceed allocated GPU-seconds.

Everything runs on integer keys (device number, node number, epoch minute): the joins of a large site's day
(millions of device-minutes, tens of thousands of jobs) stay in DuckDB's fast paths.
"""
from __future__ import annotations

import duckdb

from ingest.warehouse import IDLE_EPSILON
from models.definitions.jobs_sql import SPANS_SQL, end_eff_sql
#: A job's GPU counts as idle-allocated only in stretches of at least this many seconds at zero activity.
IDLE_STRETCH_S = 300
#: Bins of the activity histogram kept per job and hour (0, (0, 0.5 %), then 5 % steps).
N_BINS = 21
METHODS = ("exporter-label", "gpu-index", "node-share")
#: activity readings, in the preference order of the efficiency model
ACTIVITY = (("sm", "sm_active"), ("gr", "gr_engine_active"), ("gu", "gpu_util"))


def horizon_sql() -> str:
    """Per cluster, the data horizon (the occupancy timeline's rule, models/definitions/jobs_sql.py)."""
    return f"SELECT cluster, horizon FROM ({SPANS_SQL})"


def end_sql(j: str = "j", h: str = "h") -> str:
    """A job's end as the timeline counts it (models/definitions/jobs_sql.py), against the horizon of ``h``."""
    return end_eff_sql(f"{h}.horizon", j)


def job_windows(con: duckdb.DuckDBPyConnection, targets: str, cut: str = "NULL") -> None:
    """``_jw``: the target jobs' accounted windows ``[ws, we)`` (running jobs end at the horizon), ``cut``: from
    when a job is attributed again (``cut`` of ``targets``, NULL = its whole window; a minute), and ``rd``: from
    when readings are read for it (5 minutes before the hour of its cut, so zero stretches crossing into that hour
    are seen whole enough to decide which minutes are idle)."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _jw AS
        SELECT j.job_uid, j.cluster, j.start AS ws, {end_sql()} AS we, j.ngpus, ({cut})::TIMESTAMP AS cut,
               greatest(j.start, coalesce(date_trunc('hour', ({cut})::TIMESTAMP) - INTERVAL 5 MINUTE, j.start)) AS rd
        FROM jobs j JOIN {targets} t USING (job_uid) JOIN ({horizon_sql()}) h USING (cluster)
        WHERE j.start IS NOT NULL AND j.ngpus > 0""")
    con.execute("DELETE FROM _jw WHERE we IS NULL OR we <= ws")


def prepare(con: duckdb.DuckDBPyConnection, targets: str, cut: str = "NULL") -> None:
    """``_jw`` (target job windows, :func:`job_windows`) and ``_nodes_all``: the nodes they ran on that have
    telemetry, numbered (``nid``), with the time span to read (the jobs' span from ``rd`` cut to the node's
    telemetry span), the first minute to attribute (``at_mi``: the earliest target's cut, else start) and an
    estimate of the device-minutes there (``est``).

    Only nodes and times with readings are expanded into job-minutes: a site whose telemetry covers the last
    week of a year of jobs attributes a week, and jobs elsewhere keep their allocated GPU-hours with no
    telemetry. A reading may cover up to a day after its timestamp (the raw scan's look-back), hence the
    margin on ``last_seen``."""
    job_windows(con, targets, cut)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _nodes_all AS
        SELECT (row_number() OVER (ORDER BY s.cluster, s.node))::INTEGER AS nid, s.cluster, s.node, s.lo, s.hi,
               (epoch(date_trunc('minute', s.lo)) // 60)::BIGINT AS lo_mi, ceil(epoch(s.hi) / 60)::BIGINT AS hi_mi,
               (epoch(date_trunc('minute', greatest(s.at, s.lo))) // 60)::BIGINT AS at_mi,
               greatest(1, s.n) * (epoch(s.hi) - epoch(s.lo)) / 60 AS est
        FROM (SELECT jn.cluster, jn.node, greatest(min(w.rd), any_value(d.t0)) AS lo,
                     min(coalesce(w.cut, w.ws)) AS at,
                     least(max(w.we), any_value(d.t1)) AS hi, any_value(d.n) AS n
              FROM _jw w JOIN job_nodes jn USING (job_uid)
                   JOIN (SELECT cluster, node, count(*) AS n, min(first_seen) AS t0,
                                max(last_seen) + INTERVAL 1 DAY AS t1
                         FROM gpu_devices GROUP BY ALL) d ON d.cluster = jn.cluster AND d.node = jn.node
              GROUP BY ALL) s
        WHERE s.hi > s.lo""")


#: device-minutes attributed at once (a node group); bounds the memory of a refresh over any range
CHUNK_PIECES = 1_500_000


def node_chunks(con: duckdb.DuckDBPyConnection, max_pieces: float | None = None) -> list[list[int]]:
    """Groups of nodes to attribute together, about ``max_pieces`` device-minutes each (memory stays bounded on
    any range). A multi-node job's nodes always share a group, so every job is computed whole in one group."""
    max_pieces = CHUNK_PIECES if max_pieces is None else max_pieces
    est = dict(con.sql("SELECT nid, est FROM _nodes_all").fetchall())
    parent = {n: n for n in est}

    def root(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n
    for (nids,) in con.sql("""SELECT list(DISTINCT n.nid) FROM _jw w JOIN job_nodes jn USING (job_uid)
                              JOIN _nodes_all n ON n.cluster = jn.cluster AND n.node = jn.node
                              GROUP BY w.job_uid HAVING count(DISTINCT n.nid) > 1""").fetchall():
        for n in nids[1:]:
            a, b = root(nids[0]), root(n)
            if a != b:
                parent[max(a, b)] = min(a, b)
    comps: dict[int, list[int]] = {}
    for n in sorted(est):
        comps.setdefault(root(n), []).append(n)
    chunks, cur, size = [], [], 0.0
    for _, nodes in sorted(comps.items()):
        w = sum(est[n] for n in nodes)
        if cur and size + w > max_pieces:
            chunks.append(cur)
            cur, size = [], 0.0
        cur += nodes
        size += w
    return chunks + ([cur] if cur else [])


def _job_node_minutes(con: duckdb.DuckDBPyConnection, nids: list[int]) -> None:
    """``_nodes`` (this chunk), ``_jwc`` (its target jobs), ``_jn`` and ``_jnm``: every job on the chunk's nodes
    and times, one row per (job, node, minute) with its GPUs there and its seconds in the minute, from the node's
    first minute to attribute (``at_mi``) to the end of its span: a minute's attribution depends only on that
    minute's readings and jobs, so the minutes before are neither needed nor changed."""
    con.execute("CREATE OR REPLACE TEMP TABLE _nodes AS SELECT * FROM _nodes_all WHERE list_contains($n, nid)",
                {"n": nids})
    con.execute("""CREATE OR REPLACE TEMP TABLE _jwc AS
                   SELECT * FROM _jw w WHERE EXISTS (SELECT 1 FROM job_nodes jn JOIN _nodes n
                       ON n.cluster = jn.cluster AND n.node = jn.node WHERE jn.job_uid = w.job_uid)""")
    # constant time bounds first: only the jobs of the chunk's times are joined with their nodes, not the year's
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _jn AS
        SELECT j.job_uid, n.nid, jn.gpus_on_node AS g, j.job_id, j.job_id_raw, epoch(j.start) AS ws_s,
               epoch({end_sql()}) AS we_s
        FROM job_nodes jn
             JOIN (SELECT * FROM jobs WHERE start IS NOT NULL AND ngpus > 0 AND start < $thi
                   AND ("end" IS NULL OR "end" > $tlo)) j USING (job_uid)
             JOIN _nodes n ON n.cluster = jn.cluster AND n.node = jn.node
             JOIN ({horizon_sql()}) h ON h.cluster = j.cluster
        WHERE jn.gpus_on_node > 0 AND j.start < n.hi AND {end_sql()} > n.lo""",
                dict(zip(("tlo", "thi"), con.sql("SELECT min(lo), max(hi) FROM _nodes").fetchall()[0])))
    con.execute("DELETE FROM _jn WHERE we_s IS NULL OR we_s <= ws_s")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _jnm AS
        SELECT job_uid, nid, g, mi, least(we_s, mi * 60 + 60) - greatest(ws_s, mi * 60) AS ov
        FROM (SELECT j.*, unnest(range(greatest((j.ws_s // 60)::BIGINT, n.at_mi),
                                       least(ceil(j.we_s / 60)::BIGINT, n.hi_mi))) AS mi
              FROM _jn j JOIN _nodes n USING (nid))""")


def _pieces(con: duckdb.DuckDBPyConnection) -> None:
    """``_dev`` (device numbers) and ``_pc``: device-minutes of readings on the targets' nodes and times
    (raw rows, else the 5-minute rollup where raw rows were pruned)."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _dev AS
        SELECT (row_number() OVER (ORDER BY n.nid, d.gpu))::INTEGER AS dev, n.nid, d.cluster, d.node, d.gpu
        FROM (SELECT DISTINCT cluster, node, gpu FROM gpu_devices) d
        JOIN _nodes n ON n.cluster = d.cluster AND n.node = d.node""")
    raw_cols = "g.sm_active AS sm, g.gr_engine_active AS gr, g.gpu_util AS gu, g.fb_used_mib AS fb, g.power_w AS pw"
    # constant node and time bounds let DuckDB skip the row groups of other nodes and times by their min/max
    bounds = dict(zip(("nlo", "nhi", "tlo", "thi"), con.sql(
        "SELECT min(node), max(node), min(lo), max(hi) FROM _nodes").fetchall()[0]))
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _pc AS
        WITH raw AS (
            SELECT d.dev, d.nid, (epoch(g.ts) // 60)::BIGINT AS mi, g.interval_s // 60 AS k, {raw_cols}, g.hpc_jobs
            FROM gpu_samples g JOIN _dev d ON d.cluster = g.cluster AND d.node = g.node AND d.gpu = g.gpu
            JOIN _nodes n ON n.nid = d.nid
            WHERE g.node BETWEEN $nlo AND $nhi AND g.ts < $thi AND g.ts >= $tlo - INTERVAL 1 DAY
              AND g.ts < n.hi AND g.ts >= n.lo - INTERVAL 1 DAY),
        rawm AS (
            SELECT dev, nid, mi, sm, gr, gu, fb, pw, hpc_jobs FROM raw WHERE k = 1
            UNION ALL
            SELECT dev, nid, mi + unnest(range(k)) AS mi, sm, gr, gu, fb, pw, hpc_jobs FROM raw WHERE k > 1),
        rb AS (SELECT DISTINCT dev, mi // 5 AS b FROM rawm),
        roll AS (
            SELECT d.dev, d.nid, (epoch(r.bucket) // 60)::BIGINT AS mi0, r.covered_s // 60 AS k,
                   r.sm_active_mean AS sm, r.gr_engine_active_mean AS gr, r.gpu_util_mean AS gu,
                   r.sm_active_max AS sm_x, r.gr_engine_active_max AS gr_x, r.gpu_util_max AS gu_x,
                   r.fb_used_mib_max AS fb, r.power_w_mean AS pw
            FROM gpu_samples_5m r JOIN _dev d ON d.cluster = r.cluster AND d.node = r.node AND d.gpu = r.gpu
            JOIN _nodes n ON n.nid = d.nid
            WHERE r.node BETWEEN $nlo AND $nhi AND r.bucket < $thi AND r.bucket >= $tlo - INTERVAL 5 MINUTE
              AND r.bucket < n.hi AND r.bucket >= n.lo - INTERVAL 5 MINUTE)
        SELECT p.dev, p.nid, p.mi, p.sm, p.gr, p.gu, p.sm AS sm_x, p.gr AS gr_x, p.gu AS gu_x, p.fb, p.pw,
               p.hpc_jobs, FALSE AS rolled
        FROM rawm p JOIN _nodes n USING (nid) WHERE p.mi >= n.lo_mi AND p.mi < n.hi_mi
        UNION ALL
        SELECT dev, nid, mi0 + unnest(range(k)), sm, gr, gu, sm_x, gr_x, gu_x, fb, pw, NULL, TRUE
        FROM roll ANTI JOIN rb ON rb.dev = roll.dev AND rb.b = roll.mi0 // 5""", bounds)


def _zero_runs(con: duckdb.DuckDBPyConnection) -> None:
    """``_zr(dev, metric, mi, run)`` and ``_runs(dev, metric, run, rs, re)``: per device and activity metric
    (0, 1, 2 = :data:`ACTIVITY`), the stretches of consecutive minutes at zero activity, ``[rs, re)``."""
    parts = [f"""SELECT dev, {code} AS metric, mi, mi - row_number() OVER (PARTITION BY dev ORDER BY mi) AS run
                 FROM _pc WHERE {short}_x < {IDLE_EPSILON}""" for code, (short, _) in enumerate(ACTIVITY)]
    con.execute("CREATE OR REPLACE TEMP TABLE _zr AS " + " UNION ALL ".join(parts))
    con.execute("""CREATE OR REPLACE TEMP TABLE _runs AS
                   SELECT dev, metric, run, min(mi) AS rs, max(mi) + 1 AS re FROM _zr GROUP BY dev, metric, run""")


def _owned(con: duckdb.DuckDBPyConnection) -> None:
    """``_own``: device-minutes owned exactly (exporter label, GPU index), and the jobs in exact mode."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _lab AS
        SELECT p.dev, p.nid, p.mi, trim(l.lbl) AS lbl, len(string_split(p.hpc_jobs, ',')) AS n_lbl
        FROM _pc p, unnest(string_split(p.hpc_jobs, ',')) AS l(lbl)
        WHERE p.hpc_jobs IS NOT NULL""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _own AS
        SELECT dev, mi, job_uid, ov,
               w / greatest(1.0, sum(w) OVER (PARTITION BY dev, mi) + n_lbl - count(*) OVER (PARTITION BY dev, mi))
                 AS share, 1::TINYINT AS meth
        FROM (SELECT l.dev, l.mi, l.n_lbl, j.job_uid, j.ov,
                     j.ov / 60.0 * least(1.0, j.g / count(*) OVER (PARTITION BY j.job_uid, l.nid, l.mi)) AS w
              FROM _lab l JOIN _jnm j ON j.nid = l.nid AND j.mi = l.mi
                   JOIN _jn n ON n.job_uid = j.job_uid AND n.nid = j.nid
                        AND (l.lbl = n.job_id OR l.lbl = n.job_id_raw))
        UNION ALL
        SELECT dev, mi, job_uid, ov, w / greatest(1.0, sum(w) OVER (PARTITION BY dev, mi)), 2::TINYINT
        FROM (SELECT d.dev, j.mi, j.job_uid, j.ov, j.ov / 60.0 * least(1.0, j.g / x.held) AS w
              FROM (SELECT *, count(*) OVER (PARTITION BY job_uid, node) AS held FROM job_gpu_indices) x
                   JOIN _dev d ON d.cluster = x.cluster AND d.node = x.node AND d.gpu = x.gpu
                   JOIN _jnm j ON j.job_uid = x.job_uid AND j.nid = d.nid
              WHERE NOT EXISTS (SELECT 1 FROM _lab l WHERE l.dev = d.dev AND l.mi = j.mi))""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _exact_jobs AS
        SELECT DISTINCT o.job_uid, d.nid FROM _own o JOIN _dev d USING (dev)
        UNION SELECT DISTINCT x.job_uid, d.nid FROM job_gpu_indices x
              JOIN _dev d ON d.cluster = x.cluster AND d.node = x.node AND d.gpu = x.gpu""")


def _shared(con: duckdb.DuckDBPyConnection) -> None:
    """``_shr``: the remaining device-minutes shared by the remaining jobs, busiest devices first."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _shr AS
        WITH jobs_nm AS (
            SELECT j.nid, j.mi, j.job_uid, j.ov, j.g * j.ov / 60.0 AS a
            FROM _jnm j ANTI JOIN _exact_jobs e ON e.job_uid = j.job_uid AND e.nid = j.nid),
        alloc AS (SELECT nid, mi, sum(a) AS a_tot FROM jobs_nm GROUP BY ALL),
        pool AS (
            SELECT p.dev, p.nid, p.mi, a.a_tot,
                   row_number() OVER (PARTITION BY p.nid, p.mi
                                      ORDER BY coalesce(p.sm, p.gr, p.gu) DESC NULLS LAST, p.dev) AS r
            FROM _pc p JOIN alloc a USING (nid, mi)
            WHERE p.hpc_jobs IS NULL
              AND NOT EXISTS (SELECT 1 FROM _own o WHERE o.dev = p.dev AND o.mi = p.mi)),
        weighted AS (SELECT dev, nid, mi, a_tot, least(1.0, greatest(0.0, a_tot - r + 1)) AS w FROM pool)
        SELECT w.dev, w.mi, j.job_uid, j.ov, w.w * j.a / w.a_tot AS share, 3::TINYINT AS meth
        FROM weighted w JOIN jobs_nm j USING (nid, mi)
        WHERE w.w > 0 AND j.a > 0""")


def attribute_chunk(con: duckdb.DuckDBPyConnection, nids: list[int]) -> duckdb.DuckDBPyRelation:
    """Attribute the readings of nodes ``nids`` (after :func:`prepare`) to the chunk's target jobs (``_jwc``).

    Returns the relation ``_att``: one row per (job, device, minute): ``dev`` (temp table ``_dev`` has its
    cluster, node and gpu), ``mi`` (epoch minute), ``ov_s`` (the job's seconds in the minute), ``share`` (of the
    device-minute; ``share x 60`` covered GPU-seconds), ``meth`` (1, 2, 3 = :data:`METHODS`). The readings are in
    ``_pc`` (``dev, mi``: ``sm``, ``gr``, ``gu`` fractions 0..1, their maxima ``sm_x``, ``gr_x``, ``gu_x``, ``fb``
    MiB, ``pw`` W, ``rolled``); ``_zr``/``_runs`` hold the zero-activity stretches (:func:`_zero_runs`). The other
    jobs on the chunk's nodes take their shares all the same; only target jobs appear.
    """
    _job_node_minutes(con, nids)
    _pieces(con)
    _owned(con)
    _shared(con)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _att AS
        SELECT job_uid, dev, mi, ov AS ov_s, share, meth
        FROM (SELECT * FROM _own UNION ALL SELECT * FROM _shr) a
        SEMI JOIN _jwc w USING (job_uid)
        WHERE share > 0 AND EXISTS (SELECT 1 FROM _pc p WHERE p.dev = a.dev AND p.mi = a.mi)""")
    _zero_runs(con)
    for t in ("_jnm", "_lab", "_own", "_exact_jobs", "_shr"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    return con.table("_att")


def attribute(con: duckdb.DuckDBPyConnection, targets: str) -> duckdb.DuckDBPyRelation:
    """Attribute readings to the jobs listed in table ``targets`` (column ``job_uid``), all nodes at once; see
    :func:`attribute_chunk` for the result. (The efficiency mart works node group by node group instead.)"""
    prepare(con, targets)
    nids = [r[0] for r in con.sql("SELECT nid FROM _nodes_all").fetchall()]
    return attribute_chunk(con, nids)
