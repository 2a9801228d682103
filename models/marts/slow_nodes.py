"""``job_node_activity``: per multi-node GPU job and node, its activity against its peers in the same minutes,
built inside the efficiency mart's refresh from the same attribution (models/kernels/attribution.py), so slow
nodes need no second telemetry-to-job join. Read by models/metrics/reliability.py (slow nodes).

Per job, node and minute: the node's activity (the job's metric, mean over its GPUs weighted by covered
seconds) and watts per GPU; its peers' = the mean over the job's other nodes reporting that minute. A minute
counts "below" when the node's activity is lower than its peers' mean by at least :data:`SLOW_GAP`.
"""
from __future__ import annotations

import duckdb

#: How far (activity fraction, 0..1) below its peers' mean a node must be in a minute to count as below them.
SLOW_GAP = 0.10


def collect_chunk(con: duckdb.DuckDBPyConnection) -> None:
    """Append the current efficiency chunk's rows (``_eff_px`` with the job's metric, ``_dev``) to ``_jna_all``."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _jna AS
        WITH m AS (   -- per job, node and minute
            SELECT p.job_uid, d.cluster, d.node, p.mi, sum(p.cov * p.act) / sum(p.cov) AS a,
                   sum(p.cov * p.pw) / nullif(sum(p.cov) FILTER (WHERE p.pw IS NOT NULL), 0) AS w
            FROM _eff_px p JOIN _dev d USING (dev)
            WHERE p.cov > 0 AND p.job_uid IN (SELECT job_uid FROM _eff_px p2 JOIN _dev d2 USING (dev)
                                              GROUP BY job_uid HAVING count(DISTINCT d2.node) > 1)
            GROUP BY ALL),
        s AS (SELECT *, count(*) OVER k AS n, sum(a) OVER k AS sa, sum(w) OVER k AS sw,
                     count(w) OVER k AS nw FROM m WINDOW k AS (PARTITION BY job_uid, mi)),
        q AS (SELECT *, (sa - a) / (n - 1) AS pa,
                     CASE WHEN w IS NOT NULL AND nw > 1 THEN (sw - w) / (nw - 1) END AS pw FROM s WHERE n > 1)
        SELECT q.job_uid, any_value(q.cluster) AS cluster, q.node,
               ['SM_ACTIVE', 'GR_ENGINE_ACTIVE', 'GPU_UTIL'][any_value(e.metric) + 1] AS metric,
               count(*)::INTEGER AS minutes, count(*) FILTER (WHERE q.a <= q.pa - {SLOW_GAP})::INTEGER AS minutes_below,
               avg(q.a) AS act_mean, avg(q.pa) AS peer_act_mean, avg(q.w) AS power_mean, avg(q.pw) AS peer_power_mean
        FROM q JOIN _eff_metric e USING (job_uid) GROUP BY q.job_uid, q.node""")
    con.execute("CREATE TEMP TABLE IF NOT EXISTS _jna_all AS SELECT * FROM _jna LIMIT 0")
    con.execute("INSERT INTO _jna_all SELECT * FROM _jna")
    con.execute("DROP TABLE _jna")


def store(con: duckdb.DuckDBPyConnection, full: bool) -> None:
    """Replace the target jobs' rows (``_eff_targets``; all when ``full``) and drop those of jobs no longer GPU
    jobs (``_eff_gone``), inside the efficiency transaction."""
    con.execute("DELETE FROM job_node_activity" + ("" if full else
                " WHERE job_uid IN (SELECT job_uid FROM _eff_targets UNION ALL SELECT job_uid FROM _eff_gone)"))
    if con.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = '_jna_all'").fetchall()[0][0]:
        con.execute("INSERT INTO job_node_activity BY NAME SELECT * FROM _jna_all ORDER BY job_uid, node")
        con.execute("DROP TABLE _jna_all")
