"""Node reliability and slow nodes: outages with MTBF and MTTR per node and pool, the jobs each outage killed,
repeat offenders (a significance test, not a raw count), GPUs with XIDs, and nodes that hold multi-node jobs
back. Reads ``node_events``, ``gpu_events``, ``nodes`` and the marts (``loss_jobs``, ``node_job_days``,
``job_node_activity``); never builds. Definitions: docs/METRICS.md ("Node reliability", "Slow nodes").
"""
from __future__ import annotations

import datetime as dt
import duckdb
import numpy as np
import polars as pl
from scipy import stats

from models.definitions.labels import UNTYPED
from models.definitions.losses_sql import APPLICATION, HARDWARE_CAUSES, RECORDED_REPAIR_XIDS, xid_class_sql
from models.definitions.jobs_sql import sql_list
from models.definitions.nodes_sql import event_class_sql
from models.metrics.losses import window

#: Repeat offenders: the false-discovery rate of the Benjamini-Hochberg procedure over a pool's nodes.
FDR = 0.05
#: Slow nodes: a job counts against a node when the node was below its peers in this share of its minutes...
SLOW_SHARE = 0.5
#: ... over at least this many minutes; a node is listed when that happened in at least SLOW_MIN_JOBS jobs.
SLOW_MIN_MINUTES = 30
SLOW_MIN_JOBS = 2

_POOL = f"""(SELECT cluster, node, coalesce(any_value(gpu_type ORDER BY valid_from DESC NULLS FIRST), '{UNTYPED}')
             AS gpu_type FROM nodes GROUP BY ALL)"""


def _params(con, start, end) -> dict | None:
    win = window(con, start, end)
    return None if win is None else {"s": win[0], "e": win[1]}


#: Per cluster, where the window's observations end (``oe``): its end, or the last time anything of the cluster is
#: known when that is earlier (the accounting's horizon, a node event's start or end, a node snapshot). Node-hours
#: and open outages stop there: after it nothing is known of the nodes, up or down.
_OBSERVED = """obs AS (SELECT cluster, least($e, max(t)) AS oe FROM (
        SELECT cluster, horizon AS t FROM tl_clusters UNION ALL SELECT cluster, greatest(start, "end") FROM node_events
        UNION ALL SELECT cluster, observed_at FROM node_states) GROUP BY cluster)"""


def observed_until(con: duckdb.DuckDBPyConnection, start=None, end=None) -> dict[str, dt.datetime]:
    """Per cluster, where node-hours and open outages of the window stop (``_OBSERVED``) when that is before the
    window's end: the figures' last known time, for a note. Empty when the window ends within what is known."""
    p = _params(con, start, end)
    if p is None:
        return {}
    return dict(con.sql(f"WITH {_OBSERVED} SELECT cluster, oe FROM obs WHERE oe < $e ORDER BY cluster",
                        params={"e": p["e"]}).fetchall())


def outages(con: duckdb.DuckDBPyConnection, start=None, end=None) -> pl.DataFrame:
    """Every outage (node_events with an outage class) starting in the window: node, pool, class, state, reason,
    hours (to its end, or while open to the window's end or the last time anything of the cluster is known,
    whichever is first), the jobs it killed and their lost GPU-hours."""
    p = _params(con, start, end)
    if p is None:
        return pl.DataFrame()
    return con.sql(f"""
        WITH {_OBSERVED},
        e AS (SELECT e.*, {event_class_sql('e')} AS class, b.oe FROM node_events e JOIN obs b USING (cluster)
              WHERE e.start >= $s AND e.start < $e)
        SELECT e.cluster, e.node, coalesce(p.gpu_type, '{UNTYPED}') AS gpu_type, e.class, e.state, e.reason, e.start,
               e."end", greatest(0, epoch(coalesce(e."end", e.oe) - e.start)) / 3600 AS hours,
               count(l.job_uid) AS jobs_killed, coalesce(sum(l.lost_gpu_s), 0) / 3600 AS lost_gpu_h
        FROM e LEFT JOIN {_POOL} p USING (cluster, node)
        LEFT JOIN loss_jobs l ON l.cluster = e.cluster AND l.event_node = e.node AND l.event_start = e.start
        WHERE e.class IS NOT NULL GROUP BY ALL ORDER BY e.start, e.node""", params=p).pl()


def nodes(con: duckdb.DuckDBPyConnection, start=None, end=None, by: str = "node") -> pl.DataFrame:
    """Per node (``by='node'``) or pool (``by='gpu_type'``): unplanned outages (class 'down') starting in the
    window, down hours, MTTR (mean hours of the closed ones), MTBF (node-hours in the window divided by
    outages; NULL without one), jobs killed by hardware causes and their lost GPU-hours. Node-hours and open
    outages' down hours stop at the last time anything of the cluster is known (``_OBSERVED``) when the window
    reaches past it."""
    if by not in ("node", "gpu_type"):
        raise ValueError("by must be node or gpu_type (pool)")
    p = _params(con, start, end)
    if p is None:
        return pl.DataFrame()
    keys = "cluster, node, gpu_type" if by == "node" else "cluster, gpu_type"
    df = con.sql(f"""
        WITH {_OBSERVED},
        inv AS (   -- node-hours each node existed in the window (its inventory validity), up to what is known
            SELECT cluster, node, sum(greatest(0, epoch(least(coalesce(valid_to, b.oe), b.oe)
                                                       - greatest(coalesce(valid_from, $s), $s)))) / 3600 AS node_h
            FROM nodes LEFT JOIN (SELECT cluster, coalesce(oe, $e) AS oe FROM obs) b USING (cluster) GROUP BY ALL),
        o AS (SELECT cluster, node, count(*) AS outages,
                     sum(greatest(0, epoch(least(coalesce("end", b.oe), b.oe) - start))) / 3600 AS down_h,
                     avg(epoch("end" - start)) FILTER (WHERE "end" IS NOT NULL) / 3600 AS mttr_h
              FROM node_events e JOIN obs b USING (cluster)
              WHERE start >= $s AND start < $e AND {event_class_sql('e')} = 'down' GROUP BY ALL),
        k AS (SELECT cluster, event_node AS node, count(*) AS jobs_killed, sum(lost_gpu_s) / 3600 AS lost_gpu_h
              FROM loss_jobs WHERE "end" >= $s AND "end" < $e AND cause IN {sql_list(HARDWARE_CAUSES)}
                AND event_node IS NOT NULL GROUP BY ALL),
        n AS (SELECT i.cluster, i.node, coalesce(p.gpu_type, '{UNTYPED}') AS gpu_type, i.node_h,
                     coalesce(o.outages, 0) AS outages, coalesce(o.down_h, 0) AS down_h, o.mttr_h,
                     coalesce(k.jobs_killed, 0) AS jobs_killed, coalesce(k.lost_gpu_h, 0) AS lost_gpu_h
              FROM inv i LEFT JOIN {_POOL} p USING (cluster, node) LEFT JOIN o USING (cluster, node)
              LEFT JOIN k USING (cluster, node))
        SELECT {keys}, {'1' if by == 'node' else 'count(*)'} AS nodes, sum(node_h) AS node_h,
               sum(outages)::BIGINT AS outages, sum(down_h) AS down_h,
               sum(mttr_h * outages) / nullif(sum(outages) FILTER (WHERE mttr_h IS NOT NULL), 0) AS mttr_h,
               sum(node_h) / nullif(sum(outages), 0) AS mtbf_h, sum(jobs_killed)::BIGINT AS jobs_killed,
               sum(lost_gpu_h) AS lost_gpu_h
        FROM n GROUP BY {keys} ORDER BY outages DESC, lost_gpu_h DESC, {keys}""", params=p).pl()
    return df


def offenders(con: duckdb.DuckDBPyConnection, start=None, end=None, fdr: float = FDR) -> pl.DataFrame:
    """Nodes whose GPU jobs fail (end NODE_FAIL, BOOT_FAIL or FAILED) more often than their pool's: per node the
    jobs that ended there and failed, the pool's rate, the one-sided binomial p-value P(X >= failed | n, pool
    rate) and the Benjamini-Hochberg q-value over the pool's nodes; ``flagged`` when q <= ``fdr``."""
    p = _params(con, start, end)
    if p is None:
        return pl.DataFrame()
    df = con.sql(f"""
        SELECT d.cluster, d.node, coalesce(p.gpu_type, '{UNTYPED}') AS gpu_type, sum(d.jobs_ended)::BIGINT AS jobs,
               sum(d.jobs_failed)::BIGINT AS failed
        FROM node_job_days d LEFT JOIN {_POOL} p USING (cluster, node)
        WHERE d.day >= $s AND d.day < $e GROUP BY ALL HAVING sum(d.jobs_ended) > 0""", params=p).pl()
    if df.is_empty():
        return df
    df = df.with_columns((pl.col("failed") / pl.col("jobs")).alias("fail_rate"),
                         (pl.col("failed").sum().over("cluster", "gpu_type")
                          / pl.col("jobs").sum().over("cluster", "gpu_type")).alias("pool_rate"))
    pv = stats.binom.sf(df["failed"].to_numpy() - 1, df["jobs"].to_numpy(), df["pool_rate"].to_numpy())
    df = df.with_columns(pl.Series("p_value", np.where(df["failed"].to_numpy() > 0, pv, 1.0)))
    q = np.empty(df.height)
    for idx in df.with_row_index("_i").group_by("cluster", "gpu_type").agg("_i")["_i"]:
        rows = idx.to_numpy()
        q[rows] = bh_qvalues(df["p_value"].to_numpy()[rows])
    df = df.with_columns(pl.Series("q_value", q))
    return (df.with_columns(((pl.col("q_value") <= fdr) & (pl.col("fail_rate") > pl.col("pool_rate")))
                            .alias("flagged"))
            .sort(["q_value", "p_value", "failed", "cluster", "node"], descending=[False, False, True, False, False]))


def bh_qvalues(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values: q_(k) = min over j >= k of p_(j) m / j (p sorted ascending), capped at 1."""
    m = len(p)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    q_sorted = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    out = np.empty(m)
    out[order] = q_sorted
    return out


def has_telemetry(con: duckdb.DuckDBPyConnection) -> bool:
    """True when any GPU telemetry was ingested (XID and slow-node views need it; without it they say so)."""
    return con.sql("SELECT count(*) FROM (SELECT 1 FROM gpu_devices LIMIT 1)").fetchall()[0][0] > 0


def gpus(con: duckdb.DuckDBPyConnection, start=None, end=None) -> pl.DataFrame:
    """GPUs that reported XID errors, slowdown throttling (thermal, hardware, power brake), row-remap failures
    or ECC double-bit errors in the window: per device, XID events per class, ``hardware_xid_events`` (neither
    application class nor a recorded repair, losses_sql.RECORDED_REPAIR_XIDS), the XID codes seen, throttle /
    remap / ECC events, first and last event, and the jobs on its node whose end XIDs explain (gpu_xid cause)."""
    p = _params(con, start, end)
    if p is None:
        return pl.DataFrame()
    return con.sql(f"""
        WITH e AS (SELECT *, CASE WHEN kind = 'xid' THEN {xid_class_sql('code')} END AS cls FROM gpu_events
                   WHERE ts >= $s AND ts < $e),
        k AS (SELECT cluster, event_node AS node, count(*) AS jobs_killed, sum(lost_gpu_s) / 3600 AS lost_gpu_h
              FROM loss_jobs WHERE cause = 'gpu_xid' AND xid IS NOT NULL AND "end" >= $s AND "end" < $e GROUP BY ALL)
        SELECT e.cluster, e.node, e.gpu, coalesce(p.gpu_type, '{UNTYPED}') AS gpu_type,
               count(*) FILTER (WHERE kind = 'xid') AS xid_events,
               count(*) FILTER (WHERE cls = 'memory') AS memory, count(*) FILTER (WHERE cls = 'bus') AS bus,
               count(*) FILTER (WHERE cls = 'nvlink') AS nvlink, count(*) FILTER (WHERE cls = 'application') AS application,
               count(*) FILTER (WHERE cls NOT IN ('memory', 'bus', 'nvlink', 'application')) AS other,
               count(*) FILTER (WHERE kind = 'xid' AND cls <> '{APPLICATION}'
                                  AND code NOT IN ({', '.join(map(str, RECORDED_REPAIR_XIDS))})) AS hardware_xid_events,
               coalesce(string_agg(DISTINCT code::VARCHAR, ',' ORDER BY code::VARCHAR) FILTER (WHERE kind = 'xid'), '')
                   AS codes,
               count(*) FILTER (WHERE kind = 'throttle') AS throttle_events,
               count(*) FILTER (WHERE kind = 'row_remap_failure') AS row_remap_failures,
               count(*) FILTER (WHERE kind = 'ecc_dbe') AS ecc_dbe_events, min(ts) AS first, max(ts) AS last,
               any_value(coalesce(k.jobs_killed, 0)) AS node_jobs_killed, any_value(coalesce(k.lost_gpu_h, 0)) AS node_lost_gpu_h
        FROM e LEFT JOIN {_POOL} p USING (cluster, node) LEFT JOIN k USING (cluster, node)
        GROUP BY e.cluster, e.node, e.gpu, p.gpu_type
        ORDER BY (count(*) - count(*) FILTER (WHERE cls = 'application')) DESC, e.cluster, e.node, e.gpu""",
                   params=p).pl()


#: Per multi-node job ending in [$s, $e) (its telemetry window's end) and node: the job's allocated GPU-seconds
#: and ``slow`` (below its peers for >= $share of >= $mm shared minutes), the rule of :func:`slow_nodes`.
SLOW_PAIRS_SQL = """
    SELECT a.*, g.alloc_gpu_s, a.minutes >= $mm AND a.minutes_below >= $share * a.minutes AS slow
    FROM job_node_activity a JOIN gpu_efficiency_job g USING (job_uid)
    WHERE g.window_end >= $s AND g.window_end < $e"""


def slow_nodes(con: duckdb.DuckDBPyConnection, start=None, end=None, share: float = SLOW_SHARE,
               min_minutes: int = SLOW_MIN_MINUTES, min_jobs: int = SLOW_MIN_JOBS) -> pl.DataFrame:
    """Nodes that stayed below their peers in multi-node jobs that ended in the window: per node, the multi-node
    jobs it ran with telemetry, those in which it was below its peers' mean activity by >= 10 points for at
    least ``share`` of at least ``min_minutes`` shared minutes (``slow_jobs``), the minutes, the mean activity
    gap and power gap in those jobs, and the whole jobs' allocated GPU-hours it held back; listed when
    ``slow_jobs >= min_jobs``, the most GPU-hours held back first."""
    p = _params(con, start, end)
    if p is None:
        return pl.DataFrame()
    return con.sql(f"""
        WITH a AS ({SLOW_PAIRS_SQL})
        SELECT a.cluster, a.node, coalesce(p.gpu_type, '{UNTYPED}') AS gpu_type, count(*) AS multi_node_jobs,
               count(*) FILTER (WHERE slow) AS slow_jobs,
               sum(minutes_below) FILTER (WHERE slow)::BIGINT AS minutes_below,
               sum(minutes) FILTER (WHERE slow)::BIGINT AS minutes,
               100 * avg(peer_act_mean - act_mean) FILTER (WHERE slow) AS activity_gap_pct,
               avg(peer_power_mean - power_mean) FILTER (WHERE slow) AS power_gap_w,
               sum(alloc_gpu_s) FILTER (WHERE slow) / 3600 AS held_back_gpu_h,
               string_agg(DISTINCT metric, ', ') AS metric
        FROM a LEFT JOIN {_POOL} p USING (cluster, node)
        GROUP BY a.cluster, a.node, p.gpu_type HAVING count(*) FILTER (WHERE slow) >= $mj
        ORDER BY held_back_gpu_h DESC, slow_jobs DESC, a.cluster, a.node""",
                   params={**p, "mm": min_minutes, "share": share, "mj": min_jobs}).pl()


def slow_node_jobs(con: duckdb.DuckDBPyConnection, start=None, end=None, share: float = SLOW_SHARE,
                   min_minutes: int = SLOW_MIN_MINUTES) -> pl.DataFrame:
    """The evidence: each multi-node job in which a node was below its peers (the rule of :func:`slow_nodes`)."""
    p = _params(con, start, end)
    if p is None:
        return pl.DataFrame()
    return con.sql("""
        SELECT a.cluster, a.node, j.job_id, a.metric, a.minutes, a.minutes_below, 100 * a.act_mean AS activity_pct,
               100 * a.peer_act_mean AS peer_activity_pct, a.power_mean AS power_w, a.peer_power_mean AS peer_power_w,
               g.alloc_gpu_s / 3600 AS job_gpu_h
        FROM job_node_activity a JOIN gpu_efficiency_job g USING (job_uid) JOIN jobs j USING (job_uid)
        WHERE g.window_end >= $s AND g.window_end < $e AND a.minutes >= $mm AND a.minutes_below >= $share * a.minutes
        ORDER BY a.node, g.window_end""", params={**p, "mm": min_minutes, "share": share}).pl()
