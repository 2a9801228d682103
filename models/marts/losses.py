"""The loss marts (``loss_jobs``, ``loss_days``, ``node_job_days``): which ended GPU jobs lost work, why
(models/definitions/losses_sql.py), and how many GPU-seconds, per node and UTC day; and how many jobs ended,
and failed, on each node per day (the repeat-offender test of models/metrics/reliability.py).

Lost GPU-seconds are the timeline's own allocation (``tl_job_alloc`` pieces, so a loss never exceeds what the
utilization report counts as allocated) inside ``[lost_from, end)``: ``lost_from`` is the job's last checkpoint
before its end when the governance file gives a checkpoint interval for its name or team (checkpoints every
interval from the start), else its start.

Incremental: rebuilt from the earliest UTC day a change can reach (the earliest end of a job ingested or
updated since the last build, the earliest outage or XID ingested since then, less the grace periods); whole
when the governance (checkpoint intervals, teams), the node inventory or a trace was loaded since then.
"""
from __future__ import annotations

import datetime as dt

import duckdb

from ingest import warehouse
from models.definitions import losses_sql as L
from models.definitions.jobs_sql import sql_list, team_sql
from models.definitions.marts import LOSSES as MART
from models.definitions.nodes_sql import event_class_sql

#: Ingest sources whose runs rebuild the loss marts whole (they change teams, checkpoints, pools or everything).
WHOLE_SOURCES = ("governance", "nodes")
#: End states the loss mart looks at (every other ended state loses nothing we can name).
CANDIDATE_STATES = L.EXPLAINABLE_STATES + ("PREEMPTED", "TIMEOUT", "DEADLINE")
_SECONDS = "INTERVAL 1 SECOND"


def _rebuild_from(con: duckdb.DuckDBPyConnection, full: bool) -> tuple[int, dt.datetime | None]:
    """(newest run id, the UTC day to rebuild from; None = nothing changed; datetime.min = everything)."""
    newest = con.sql("SELECT coalesce(max(run_id), 0) FROM ingest_runs").fetchall()[0][0]
    last = warehouse.mart_run(con, MART)
    if full or last is None:
        return newest, dt.datetime.min
    whole = con.execute(f"""SELECT count(*) FROM ingest_runs WHERE run_id > ? AND status = 'ok'
                            AND (source IN {sql_list(WHOLE_SOURCES)} OR source LIKE 'trace:%')""",
                        [last]).fetchall()[0][0]
    if whole:
        return newest, dt.datetime.min
    grace = max(L.OUTAGE_GRACE_S, L.XID_GRACE_S)
    d = con.execute(f"""
        SELECT min(t) FROM (
            SELECT min("end") AS t FROM jobs WHERE coalesce(updated_run_id, ingest_run_id) > $last
            UNION ALL SELECT min(start) - to_seconds({grace}) FROM node_events WHERE ingest_run_id > $last
            UNION ALL SELECT min(ts) - to_seconds({grace}) FROM gpu_events WHERE ingest_run_id > $last)""",
                    {"last": last}).fetchall()[0][0]
    changed = con.execute("SELECT count(*) FROM jobs WHERE coalesce(updated_run_id, ingest_run_id) > ?",
                          [last]).fetchall()[0][0]
    if d is None and not changed:
        return newest, None
    return newest, (dt.datetime.min if d is None else d.replace(hour=0, minute=0, second=0, microsecond=0))


def _candidates(con: duckdb.DuckDBPyConnection, since: dt.datetime) -> None:
    """``_lc``: ended GPU jobs in a candidate state ending on or after ``since``, with their events and checkpoint."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _lc0 AS
        SELECT j.job_uid, j.cluster, j.job_id, j.state, j.team, {team_sql('j')} AS team_label, j.job_name, j.start,
               j."end", j.ngpus
        FROM jobs j WHERE j.ngpus > 0 AND j.start IS NOT NULL AND j."end" > j.start AND j."end" >= $since
          AND j.state IN {sql_list(CANDIDATE_STATES)}""", {"since": since})
    explain = f"l.state IN {sql_list(L.EXPLAINABLE_STATES)}"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _lx AS   -- the XID that explains the end: hardware classes first, then latest
        SELECT job_uid, code, cls, node, ts FROM (
            SELECT l.job_uid, e.code, {L.xid_class_sql('e.code')} AS cls, e.node, e.ts,
                   row_number() OVER (PARTITION BY l.job_uid
                                      ORDER BY {L.xid_class_sql('e.code')} = '{L.APPLICATION}', e.ts DESC, e.node) AS rn
            FROM _lc0 l JOIN job_nodes jn USING (job_uid)
                 JOIN gpu_events e ON e.cluster = jn.cluster AND e.node = jn.node AND e.kind = 'xid'
                  AND e.ts >= l.start AND e.ts <= l."end" + to_seconds({L.XID_GRACE_S})
            WHERE {explain}) WHERE rn = 1""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _lo AS   -- the outage nearest the end on one of the job's nodes
        SELECT job_uid, node, start, reason, xid FROM (
            SELECT l.job_uid, e.node, e.start, coalesce(e.reason, e.state) AS reason, {L.reason_xid_sql('e.reason')} AS xid,
                   row_number() OVER (PARTITION BY l.job_uid ORDER BY abs(epoch(e.start) - epoch(l."end")), e.node) AS rn
            FROM _lc0 l JOIN job_nodes jn USING (job_uid)
                 JOIN node_events e ON e.cluster = jn.cluster AND e.node = jn.node
                  AND e.start <= l."end" + to_seconds({L.OUTAGE_GRACE_S})
                  AND e.start >= CASE WHEN l.state IN {sql_list(L.NODE_FAIL_STATES)} THEN l.start
                                      ELSE l."end" - to_seconds({L.OUTAGE_GRACE_S}) END
            WHERE {explain} AND {event_class_sql('e')} IS NOT NULL) WHERE rn = 1""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _lk AS   -- the checkpoint interval (governance [[checkpoints]])
                    SELECT * FROM {L.checkpoint_interval_sql('_lc0')}""")


def _classified(con: duckdb.DuckDBPyConnection) -> None:
    """``_lj``: candidates with a cause, their detail and the start of the lost window."""
    detail = f"""CASE c.cause
        WHEN '{L.GPU_XID}' THEN {L.xid_class_sql('coalesce(c.x_code, c.o_xid)')}
        WHEN '{L.NODE_FAILURE}' THEN coalesce(c.o_reason, 'no node event recorded')
        WHEN '{L.OUTAGE}' THEN c.o_reason
        WHEN '{L.USER_FAILURE}' THEN CASE WHEN c.x_cls = '{L.APPLICATION}' THEN 'application XID' ELSE c.state END
        ELSE coalesce(c.o_reason, c.state) END"""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _lj AS
        WITH c AS (SELECT l.*, {L.cause_sql('l', 'x', 'o')} AS cause, x.code AS x_code, x.cls AS x_cls,
                          x.node AS x_node, x.ts AS x_ts, o.node AS o_node, o.start AS o_start, o.reason AS o_reason,
                          o.xid AS o_xid, k.interval_s
                   FROM _lc0 l LEFT JOIN _lx x USING (job_uid) LEFT JOIN _lo o USING (job_uid)
                   LEFT JOIN _lk k USING (job_uid))
        SELECT c.job_uid, c.cluster, c.job_id, c.team_label AS team, c.state, c.cause,
               {detail} AS detail,
               CASE WHEN c.cause = '{L.GPU_XID}' THEN coalesce(c.x_code, c.o_xid)
                    WHEN c.x_cls = '{L.APPLICATION}' THEN c.x_code END AS xid,
               CASE WHEN c.cause = '{L.GPU_XID}' AND c.x_code IS NOT NULL THEN c.x_node ELSE c.o_node END AS event_node,
               CASE WHEN c.cause = '{L.GPU_XID}' AND c.x_code IS NOT NULL THEN c.x_ts ELSE c.o_start END AS event_start,
               c.start, c."end", c.ngpus,
               {L.lost_from_sql('c.start', 'c."end"', 'c.interval_s')} AS lost_from,
               {L.basis_sql('c.interval_s')} AS basis,
               c.interval_s AS checkpoint_s
        FROM c WHERE c.cause IS NOT NULL""")


def _split(con: duckdb.DuckDBPyConnection) -> None:
    """``_ld``: lost GPU-seconds of ``_lj`` per node and UTC day, from the timeline's pieces; ``_la``: allocated."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _lp AS
        SELECT a.job_uid, a.cluster, l.team, l.cause, l.basis, a.node, a.gpu_type, a.gpus, a.t0, a.t1, l.lost_from,
               l."end"
        FROM _lj l JOIN tl_job_alloc a USING (job_uid)""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _ld AS
        SELECT job_uid, cluster, team, cause, basis, node, gpu_type, day,
               gpus * epoch(least(b, day + INTERVAL 1 DAY) - greatest(a, day)) AS lost_gpu_s
        FROM (SELECT *, unnest(generate_series(date_trunc('day', a), b - INTERVAL 1 MICROSECOND, INTERVAL 1 DAY)) AS day
              FROM (SELECT *, greatest(t0, lost_from) AS a, least(t1, "end") AS b FROM _lp) WHERE b > a)""")
    con.execute("""CREATE OR REPLACE TEMP TABLE _la AS
                   SELECT job_uid, sum(gpus * epoch(t1 - t0)) AS alloc_gpu_s FROM _lp GROUP BY job_uid""")


def _node_days(con: duckdb.DuckDBPyConnection, since: dt.datetime) -> None:
    """``_nd``: GPU jobs ended per node and day from ``since`` on, and how many of them failed."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _nd AS
        SELECT jn.cluster, jn.node, date_trunc('day', j."end") AS day, count(*)::INTEGER AS jobs_ended,
               count(*) FILTER (WHERE j.state IN {sql_list(L.FAILED_STATES)})::INTEGER AS jobs_failed
        FROM jobs j JOIN job_nodes jn USING (job_uid)
        WHERE j.ngpus > 0 AND j.start IS NOT NULL AND j."end" >= $since AND jn.gpus_on_node > 0
        GROUP BY ALL""", {"since": since})


def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> None:
    """Mart builder for models/pipeline/refresh.py (see the module doc)."""
    newest, since = _rebuild_from(con, full)
    if since is None:
        with warehouse.transaction(con):
            warehouse.record_mart(con, MART, newest)
        return
    _candidates(con, since)
    _classified(con)
    _split(con)
    _node_days(con, since)
    with warehouse.transaction(con):
        # the serving view republishes the job_uid parts from the lowest uid removed or written on (the uids of
        # jobs that end now are recent), node_job_days' months from `since` on
        uids = [con.sql("SELECT min(job_uid) FROM _lj").fetchall()[0][0]]
        if since == dt.datetime.min:
            for t in ("loss_jobs", "loss_days", "node_job_days"):
                con.execute(f"DELETE FROM {t}")
            warehouse.note_changed(con, ("loss_jobs", "loss_days", "node_job_days"))
        else:
            # jobs ending from `since` on are recomputed; a changed job may have left a candidate state or moved
            for t, where in (("loss_days", "job_uid IN (SELECT job_uid FROM loss_jobs WHERE \"end\" >= $s)"),
                             ("loss_jobs", '"end" >= $s')):
                uids += [r[0] for r in con.execute(f"""
                    DELETE FROM {t} WHERE {where}
                    OR job_uid IN (SELECT job_uid FROM jobs WHERE "end" >= $s OR "end" IS NULL)
                    RETURNING job_uid""", {"s": since}).fetchall()]
            con.execute("DELETE FROM node_job_days WHERE day >= $s", {"s": since})
            warehouse.note_changed(con, ("loss_jobs", "loss_days"), min((u for u in uids if u is not None),
                                                                        default=None))
            warehouse.note_changed(con, "node_job_days", since)
        con.execute("""
            INSERT INTO loss_jobs BY NAME
            SELECT l.*, coalesce(a.alloc_gpu_s, 0) AS alloc_gpu_s, coalesce(d.lost_gpu_s, 0) AS lost_gpu_s
            FROM _lj l LEFT JOIN _la a USING (job_uid)
            LEFT JOIN (SELECT job_uid, sum(lost_gpu_s) AS lost_gpu_s FROM _ld GROUP BY job_uid) d USING (job_uid)
            ORDER BY job_uid""")
        con.execute("INSERT INTO loss_days BY NAME SELECT * FROM _ld ORDER BY day, job_uid")
        con.execute("INSERT INTO node_job_days BY NAME SELECT * FROM _nd ORDER BY day, node")
        warehouse.record_mart(con, MART, newest)
    for t in ("_lc0", "_lx", "_lo", "_lk", "_lj", "_lp", "_ld", "_la", "_nd"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
