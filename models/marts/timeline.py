"""Build the occupancy timeline marts and keep them current (a ``gpuledger refresh`` step).

From the canonical tables (``jobs``, ``job_nodes``, ``nodes``, ``node_events``) it materialises, per cluster,
inside the cluster's data span ``[data_start, horizon)`` (see :mod:`models.metrics.timeline`, its reader):

- ``tl_node_state``: per node, inventory class (GPUs, pool, partitions) and availability, piecewise constant;
- ``tl_job_alloc``: per job and node, the GPUs held and when (running jobs up to the horizon);
- ``tl_node_segments``: per node (``tl_nodes``), allocation and class/availability (``tl_classes``) together,
  piecewise constant;
- ``tl_hourly``: the segments rolled up per hour and node class (capacity, allocated, idle, down).

Incremental: a refresh finds, per cluster, the earliest time ``T`` from which anything could differ (the old
horizon, where running jobs must be extended; the first difference in node state; the first difference in the
placement of jobs written by ingest runs newer than the last refresh) and rebuilds only from ``T`` on.
"""
from __future__ import annotations

import datetime as dt
import re

import duckdb
import numpy as np
import polars as pl

from ingest import warehouse
from models.definitions import marts
from models.definitions.jobs_sql import SPANS_SQL, end_eff_sql, open_sql
from models.definitions.nodes_sql import event_class_sql
from models.definitions.policy import CostError, current_policy
from models.definitions.times import floor_day, floor_hour
from models.kernels import free_grid
from models.kernels.intervals import group_cumsum, hour_integrals
from models.marts import blocked_daily, fragmentation_daily, rollups as timeline_rollups

END_EFF_SQL = end_eff_sql("$hz")
#: The partitioned timeline marts (ingest/warehouse/serving.PARTITIONS): a cluster rebuilt whole notes them all.
TIMELINE_TABLES = ("tl_job_alloc", "tl_node_segments", "tl_hourly", "tl_pending_hourly", "tl_demand_daily",
                   "tl_blocked_daily")
OPEN_SQL = open_sql()
EVENT_CLASS_SQL = event_class_sql("e")


def _ex(con, sql: str, params: dict | list | None = None):
    """Execute with only the $parameters the statement names (DuckDB rejects unused ones)."""
    if isinstance(params, dict):
        used = set(re.findall(r"\$(\w+)", sql))
        params = {k: v for k, v in params.items() if k in used}
    return con.execute(sql, params)


# ---------------------------------------------------------------- spans

def compute_spans(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[dt.datetime, dt.datetime]]:
    """Per cluster (data_start, horizon) from the accounting itself (models/definitions/jobs_sql.py SPANS_SQL)."""
    rows = con.execute(f"""SELECT cluster, data_start, horizon FROM ({SPANS_SQL})
                           WHERE data_start IS NOT NULL AND horizon IS NOT NULL""").fetchall()
    return {c: (ds, hz) for c, ds, hz in rows if hz > ds}


# ---------------------------------------------------------------- node state

def _node_state_sql() -> str:
    """Elementary intervals per node between every inventory and event edge, classified."""
    return f"""
    WITH inv AS (
      SELECT node, coalesce(valid_from, $ds) AS vf, coalesce(valid_to, $hz) AS vt, gpus, gpu_type, partitions
      FROM nodes WHERE cluster = $c),
    ev AS (
      SELECT e.node, e.start AS es, coalesce(e."end", $hz) AS ee, e.state, {EVENT_CLASS_SQL} AS cls
      FROM node_events e WHERE e.cluster = $c),
    ev2 AS (SELECT * FROM ev WHERE cls IS NOT NULL AND ee > es),
    allnodes AS (SELECT node FROM inv UNION SELECT DISTINCT node FROM job_nodes WHERE cluster = $c),
    b AS (SELECT node, $ds AS t FROM allnodes UNION SELECT node, $hz FROM allnodes
          UNION SELECT node, vf FROM inv UNION SELECT node, vt FROM inv
          UNION SELECT node, es FROM ev2 WHERE node IN (SELECT node FROM allnodes)
          UNION SELECT node, ee FROM ev2 WHERE node IN (SELECT node FROM allnodes)),
    iv AS (SELECT node, t AS t0, lead(t) OVER (PARTITION BY node ORDER BY t) AS t1
           FROM b WHERE t >= $ds AND t <= $hz),
    cls AS (
      SELECT iv.node, iv.t0, iv.t1, arg_max(i.gpus, {{'vf': i.vf, 'g': i.gpus, 't': i.gpu_type, 'p': i.partitions}}) AS gpus,
             arg_max(i.gpu_type, {{'vf': i.vf, 'g': i.gpus, 't': i.gpu_type, 'p': i.partitions}}) AS gpu_type,
             arg_max(i.partitions, {{'vf': i.vf, 'g': i.gpus, 't': i.gpu_type, 'p': i.partitions}}) AS partitions,
             count(i.node) > 0 AS present
      FROM iv LEFT JOIN inv i ON i.node = iv.node AND i.vf <= iv.t0 AND iv.t0 < i.vt
      WHERE iv.t1 IS NOT NULL GROUP BY ALL),
    out AS (
      SELECT c.node, c.t0, c.t1, c.gpus, c.gpu_type, c.partitions, c.present,
             -- overlapping events: down first, then the latest to start, then by name; a total order, so a
             -- rebuild picks what the last one picked (an arbitrary pick among ties made an incremental refresh
             -- see a change far back and rebuild from there)
             arg_min(e.cls, {{'p': CASE e.cls WHEN 'down' THEN 0 ELSE 1 END, 'es': -epoch_us(e.es), 'c': e.cls,
                             's': e.state}}) AS cls,
             arg_min(e.state, {{'p': CASE e.cls WHEN 'down' THEN 0 ELSE 1 END, 'es': -epoch_us(e.es), 'c': e.cls,
                               's': e.state}}) AS reason
      FROM cls c LEFT JOIN ev2 e ON e.node = c.node AND e.es <= c.t0 AND c.t0 < e.ee
      GROUP BY ALL)
    SELECT $c AS cluster, node, t0, t1,
           CASE WHEN present THEN coalesce(gpus, 0) ELSE 0 END AS gpus,
           CASE WHEN present THEN gpu_type END AS gpu_type,
           CASE WHEN present THEN partitions END AS partitions,
           CASE WHEN NOT present THEN 'absent' ELSE coalesce(cls, 'up') END AS avail,
           CASE WHEN present THEN reason END AS reason
    FROM out"""


def _merge_adjacent(con, src: str, dst: str, keys: list[str]) -> None:
    """dst = src with consecutive rows of one node that agree on ``keys`` merged (gaps and islands)."""
    same = " AND ".join(f"lag({k}) OVER w IS NOT DISTINCT FROM {k}" for k in keys)
    cols = ", ".join(f"any_value({k}) AS {k}" for k in keys)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE {dst} AS
        WITH m AS (SELECT *, CASE WHEN lag(t1) OVER w = t0 AND {same} THEN 0 ELSE 1 END AS brk
                   FROM {src} WINDOW w AS (PARTITION BY cluster, node ORDER BY t0)),
        g AS (SELECT *, sum(brk) OVER (PARTITION BY cluster, node ORDER BY t0 ROWS UNBOUNDED PRECEDING) AS grp FROM m)
        SELECT cluster, node, min(t0) AS t0, max(t1) AS t1, {cols} FROM g GROUP BY cluster, node, grp""")


def build_node_state(con, cluster: str, ds: dt.datetime, hz: dt.datetime) -> None:
    """Temp table ``_ns``: the new tl_node_state rows of ``cluster``; ``_classes``: the same, merged
    where only availability changes (what a job's GPUs are attributed to)."""
    con.execute("CREATE OR REPLACE TEMP TABLE _ns_raw AS " + _node_state_sql(), {"c": cluster, "ds": ds, "hz": hz})
    _merge_adjacent(con, "_ns_raw", "_ns", ["gpus", "gpu_type", "partitions", "avail", "reason"])
    _merge_adjacent(con, "_ns", "_classes", ["gpus", "gpu_type", "partitions"])


# ---------------------------------------------------------------- job placement

def _job_alloc_sql(job_filter: str) -> str:
    """tl_job_alloc rows of the jobs of cluster $c passing ``job_filter`` (SQL on alias j), split at class edges.

    GPU-sharing jobs (gpu_milli < 1000) hold milli-GPUs; others hold whole GPUs (a stray fraction is kept in
    milli so that sums stay exact in integers)."""
    return f"""
    WITH jn AS (
      SELECT j.job_uid, j.cluster, n.node, greatest(j.start, $ds) AS a, {END_EFF_SQL} AS b, {OPEN_SQL} AS is_open,
             CASE WHEN j.gpu_milli < 1000 THEN 0 ELSE floor(n.gpus_on_node) END AS whole,
             CASE WHEN j.gpu_milli < 1000 THEN round(n.gpus_on_node * 1000)
                  ELSE round((n.gpus_on_node - floor(n.gpus_on_node)) * 1000) END::BIGINT AS frac
      FROM jobs j JOIN job_nodes n ON n.job_uid = j.job_uid
      WHERE j.cluster = $c AND j.start IS NOT NULL AND j.start < $hz AND n.gpus_on_node > 0 AND ({job_filter}))
    SELECT jn.job_uid, jn.cluster, jn.node, greatest(jn.a, k.t0) AS t0, least(jn.b, k.t1) AS t1,
           jn.is_open AND k.t1 >= jn.b AS is_open, jn.whole + jn.frac / 1000.0 AS gpus, jn.whole AS whole_gpus,
           jn.frac AS frac_milli, k.gpu_type, k.partitions
    FROM jn JOIN _classes k ON k.node = jn.node AND k.t0 < jn.b AND jn.a < k.t1
    WHERE jn.a < jn.b"""


# ---------------------------------------------------------------- change detection

def _earliest_change(con, old: str, new: str, keys: list[str], params: dict) -> dt.datetime | None:
    """Earliest time at which two sets of interval rows (t0, t1, keys...) differ, or None when equal.

    ``new`` is first clipped to the old horizon $old_hz (what it would have looked like then). Rows equal but
    for t1 differ from the smaller t1 on; other unmatched rows from their t0."""
    on = " AND ".join(f"o.{k} IS NOT DISTINCT FROM n.{k}" for k in ["t0", *keys])
    return _ex(con, f"""
        WITH n AS (SELECT * REPLACE (least(t1, $old_hz) AS t1) FROM {new} WHERE t0 < $old_hz)
        SELECT min(CASE WHEN o.t0 IS NULL THEN n.t0 WHEN n.t0 IS NULL THEN o.t0 ELSE least(o.t1, n.t1) END)
        FROM ({old}) o FULL JOIN n ON {on}
        WHERE o.t0 IS NULL OR n.t0 IS NULL OR o.t1 <> n.t1""", params).fetchall()[0][0]


# ---------------------------------------------------------------- segments and hourly rollup

def register_ids(con, c: str) -> None:
    """Give new nodes of ``_ns`` an id in tl_nodes and new (class, availability) combinations one in tl_classes;
    ids are global and never change, so stored segments stay valid."""
    _ex(con, """INSERT INTO tl_nodes
                SELECT $c, node, (SELECT coalesce(max(nid), 0) FROM tl_nodes) + row_number() OVER (ORDER BY node)
                FROM (SELECT DISTINCT node FROM _ns) n
                WHERE NOT EXISTS (SELECT 1 FROM tl_nodes t WHERE t.cluster = $c AND t.node = n.node)""", {"c": c})
    _ex(con, """INSERT INTO tl_classes
                SELECT (SELECT coalesce(max(class_id), 0) FROM tl_classes)
                         + row_number() OVER (ORDER BY gpus, gpu_type, partitions, avail), $c, gpus, gpu_type,
                       partitions, avail
                FROM (SELECT DISTINCT gpus, gpu_type, partitions, avail FROM _ns) n
                WHERE NOT EXISTS (SELECT 1 FROM tl_classes k WHERE k.cluster = $c AND k.gpus = n.gpus
                                  AND k.gpu_type IS NOT DISTINCT FROM n.gpu_type
                                  AND k.partitions IS NOT DISTINCT FROM n.partitions AND k.avail = n.avail)""",
        {"c": c})


#: The node states in force from $T on, with their ids (temp table _st).
STATES_FROM_SQL = """
    CREATE OR REPLACE TEMP TABLE _st AS
    SELECT (row_number() OVER () - 1)::BIGINT AS sid, n.nid, k.class_id, k.gpus, k.avail, s.t0, s.t1
    FROM tl_node_state s JOIN tl_nodes n ON n.cluster = s.cluster AND n.node = s.node
    JOIN tl_classes k ON k.cluster = s.cluster AND k.gpus = s.gpus AND k.gpu_type IS NOT DISTINCT FROM s.gpu_type
                     AND k.partitions IS NOT DISTINCT FROM s.partitions AND k.avail = s.avail
    WHERE s.cluster = $c AND s.t1 > $T"""

#: Every change point of every node from $T on: job starts and ends (GPU deltas) and node-state edges (sid of
#: the state starting there). Several rows may share (nid, t): the sweep keeps the last one.
EVENTS_FROM_SQL = """
    WITH ja AS (SELECT n.nid, a.t0, a.t1, a.whole_gpus, a.frac_milli
                FROM tl_job_alloc a JOIN tl_nodes n ON n.cluster = a.cluster AND n.node = a.node
                WHERE a.cluster = $c AND a.t1 > $T),
    ev AS (
      SELECT nid, greatest(t0, $T) AS t, whole_gpus AS dw, frac_milli AS df, 1 AS dj, -1 AS sid FROM ja
      UNION ALL SELECT nid, t1, -whole_gpus, -frac_milli, -1, -1 FROM ja
      UNION ALL SELECT nid, greatest(t0, $T), 0, 0, 0, sid FROM _st
      UNION ALL SELECT nid, t1, 0, 0, 0, -1 FROM _st)
    SELECT nid, epoch_us(t) AS t, dw::DOUBLE AS dw, df::BIGINT AS df, dj::BIGINT AS dj, sid::BIGINT AS sid
    FROM ev ORDER BY nid, t"""


def sweep_segments(ev: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-node events (nid, t, deltas dw/df/dj, sid = the state row starting there or -1), sorted by (nid, t),
    into piecewise-constant segments [t0, t1) with the running allocation and the node state in force.

    A window-function cumulative sum does this too, but it costs microseconds a row in DuckDB; numpy's cumsum
    over the sorted events is linear and a hundred times faster. Of several events at one time only the last
    row (which has seen them all) starts a segment; the others would be empty."""
    nid, t = ev["nid"], ev["t"]
    n = len(nid)
    if n == 0:
        return {k: np.zeros(0, np.int64) for k in ("nid", "t0", "t1", "dw", "df", "dj", "sid")}
    starts = np.r_[True, nid[1:] != nid[:-1]]
    sid = ev["sid"]
    last = np.maximum.accumulate(np.where(sid >= 0, np.arange(n), 0))
    t1 = np.r_[t[1:], 0]
    keep = np.r_[nid[1:] == nid[:-1], False] & (t1 > t)
    return {"nid": nid[keep], "t0": t[keep], "t1": t1[keep], "dw": group_cumsum(ev["dw"], starts)[keep],
            "df": group_cumsum(ev["df"], starts)[keep], "dj": group_cumsum(ev["dj"], starts)[keep],
            "sid": sid[last][keep]}


def build_segments(con, c: str, T: dt.datetime) -> dict[str, np.ndarray]:
    """Append the segments of cluster ``c`` from ``T`` on to tl_node_segments (tl_job_alloc and tl_node_state
    must be current from T); returns them as arrays (t in epoch microseconds) for the hourly rollup."""
    _ex(con, STATES_FROM_SQL, {"c": c, "T": T})
    st = _ex(con, "SELECT sid, class_id, gpus FROM _st ORDER BY sid").fetchnumpy()
    seg = sweep_segments(_ex(con, EVENTS_FROM_SQL, {"c": c, "T": T}).fetchnumpy())
    seg["class_id"] = st["class_id"][seg["sid"]]
    keep = (st["gpus"][seg["sid"]] > 0) | (seg["dj"] > 0)      # nodes outside the inventory, idle: nothing there
    seg = {k: v[keep] for k, v in seg.items()}
    # Polars, not pyarrow, carries the arrays back: pyarrow's numpy conversion imports pandas (seconds).
    frame = pl.DataFrame({"cluster": pl.repeat(c, len(seg["nid"]), eager=True), "nid": seg["nid"].astype(np.int32),
                          "class_id": seg["class_id"].astype(np.int32),
                          "t0": pl.Series(seg["t0"]).cast(pl.Datetime("us")),
                          "t1": pl.Series(seg["t1"]).cast(pl.Datetime("us")), "whole_gpus": seg["dw"],
                          "frac_milli": seg["df"], "jobs": seg["dj"].astype(np.int32)})
    # stored in time order, so that time-window scans (a month of fragmentation samples) skip row groups
    con.register("_seg_in", frame.sort("t0"))
    try:
        con.execute("INSERT INTO tl_node_segments SELECT * FROM _seg_in")
    finally:
        con.unregister("_seg_in")
    return seg


HOURLY_RATES = ("capacity_s", "alloc_s", "alloc_in_s", "idle_s", "down_s", "planned_down_s")


def hourly_rollup(con, c: str, H: dt.datetime, T: dt.datetime, new: dict[str, np.ndarray]) -> None:
    """Insert tl_hourly rows of cluster ``c`` for the hours from ``H`` (an hour start <= T): the stored segments
    of [H, T) plus the ``new`` ones from T, integrated hour by hour (models.intervals.hour_integrals)."""
    old = _ex(con, """SELECT class_id, epoch_us(greatest(t0, $H)) AS t0, epoch_us(t1) AS t1, whole_gpus AS dw,
                             frac_milli AS df FROM tl_node_segments WHERE cluster = $c AND t1 > $H AND t0 < $T""",
              {"c": c, "H": H, "T": T}).fetchnumpy()
    cls = np.concatenate([old["class_id"], new["class_id"]]).astype(np.int64)
    if not len(cls):
        return
    alloc = np.concatenate([old["dw"], new["dw"]]) + np.concatenate([old["df"], new["df"]]) / 1000
    classes = _ex(con, "SELECT class_id, gpus, avail FROM tl_classes WHERE cluster = $c ORDER BY class_id",
                  {"c": c}).fetchnumpy()
    row = np.searchsorted(classes["class_id"], cls)
    gpus = classes["gpus"][row].astype(np.float64)
    avail = classes["avail"][row]
    ain = np.minimum(alloc, gpus)
    free = gpus - ain
    rates = {"capacity_s": gpus, "alloc_s": alloc, "alloc_in_s": ain, "idle_s": free * (avail == "up"),
             "down_s": free * (avail == "down"), "planned_down_s": free * (avail == "planned_down")}
    group, hour, out = hour_integrals(cls, np.concatenate([old["t0"], new["t0"]]).astype(np.int64),
                                      np.concatenate([old["t1"], new["t1"]]).astype(np.int64), rates)
    frame = pl.DataFrame({"class_id": group.astype(np.int32), "hour": pl.Series(hour).cast(pl.Datetime("us")),
                          **out})
    con.register("_hourly_in", frame)
    try:
        _ex(con, f"""INSERT INTO tl_hourly
                     SELECT $c, k.gpu_type, k.partitions, h.hour, {', '.join(f'sum(h.{r})' for r in HOURLY_RATES)}
                     FROM _hourly_in h JOIN tl_classes k ON k.class_id = h.class_id
                     GROUP BY k.gpu_type, k.partitions, h.hour""", {"c": c})
    finally:
        con.unregister("_hourly_in")


# ---------------------------------------------------------------- the builder

def build(con: duckdb.DuckDBPyConnection, full: bool = False) -> dict[str, dict]:
    """Bring the timeline marts up to date; ``full`` rebuilds every cluster from scratch.

    Returns, per cluster, what was done: {'from': T (rebuilt from), 'full': bool, 'jobs': jobs re-placed}.
    One transaction: a failure leaves the marts as they were.
    """
    last_run = con.sql("SELECT coalesce(max(run_id), 0) FROM ingest_runs").fetchall()[0][0]
    spans = compute_spans(con)
    old = {r[0]: r[1:] for r in con.sql(
        "SELECT cluster, data_start, horizon, last_run_id, team_fp, fair_fp, cells_fp FROM tl_clusters").fetchall()}
    half_life_s = _half_life_s(con)
    report = {}
    try:
        with warehouse.transaction(con):
            for gone in set(old) - set(spans):
                for t in ("tl_node_state", "tl_job_alloc", "tl_node_segments", "tl_hourly", "tl_demand_daily",
                          "tl_pending_hourly", "tl_blocked_daily", "tl_pending_team_daily", "tl_decay_daily",
                          "tl_frag_state_daily", "tl_frag_partial_daily", "tl_frag_workload_daily", "tl_clusters"):
                    con.execute(f"DELETE FROM {t} WHERE cluster = ?", [gone])
                warehouse.note_changed(con, TIMELINE_TABLES)
            for cluster, (ds, hz) in sorted(spans.items()):
                report[cluster] = _build_cluster(con, cluster, ds, hz, None if full else old.get(cluster), last_run,
                                                 half_life_s)
            warehouse.record_mart(con, marts.TIMELINE, last_run)
    finally:
        for t in ("_ns_raw", "_ns", "_classes", "_changed", "_rb", "_ja_new", "_st"):
            con.execute(f"DROP TABLE IF EXISTS {t}")
    return report


def _build_cluster(con, c: str, ds, hz, old, last_run: int, half_life_s: float | None) -> dict:
    p = {"c": c, "ds": ds, "hz": hz}
    build_node_state(con, c, ds, hz)
    incremental = old is not None and old[0] == ds and old[1] is not None and hz >= old[1]
    if incremental:
        old_hz, old_run = old[1], old[2] or 0
        T = old_hz
        q = {"c": c, "old_hz": old_hz}
        t_state = _earliest_change(con, "SELECT * FROM tl_node_state WHERE cluster = $c", "_ns",
                                   ["node", "gpus", "gpu_type", "partitions", "avail", "reason"], q)
        _ex(con, """CREATE OR REPLACE TEMP TABLE _changed AS SELECT job_uid FROM jobs
                       WHERE cluster = $c AND greatest(ingest_run_id, coalesce(updated_run_id, 0)) > $r""",
                    {"c": c, "r": old_run})
        _ex(con, "CREATE OR REPLACE TEMP TABLE _ja_new AS "
                    + _job_alloc_sql("j.job_uid IN (SELECT job_uid FROM _changed)"), p)
        t_jobs = _earliest_change(
            con, "SELECT * FROM tl_job_alloc WHERE cluster = $c AND job_uid IN (SELECT job_uid FROM _changed)",
            "_ja_new", ["job_uid", "node", "whole_gpus", "frac_milli", "gpu_type", "partitions"], q)
        T = min(t for t in (T, t_state, t_jobs) if t is not None)
    else:
        T = ds
        _ex(con, "CREATE OR REPLACE TEMP TABLE _changed AS SELECT job_uid FROM jobs WHERE false")
        for t in ("tl_node_state", "tl_job_alloc", "tl_node_segments", "tl_hourly", "tl_blocked_daily",
                  "tl_pending_team_daily", "tl_decay_daily", "tl_frag_state_daily", "tl_frag_partial_daily",
                  "tl_frag_workload_daily"):
            _ex(con, f"DELETE FROM {t} WHERE cluster = ?", [c])
        warehouse.note_changed(con, TIMELINE_TABLES)
    p["T"] = T
    if T < hz:       # jobs placed again from T on (the demand mart); from the horizon on, nothing was placed again
        warehouse.note_mart_change(con, marts.TIMELINE, c, T)
    register_ids(con, c)
    _ex(con, "DELETE FROM tl_node_state WHERE cluster = ?", [c])
    _ex(con, "INSERT INTO tl_node_state SELECT cluster, node, t0, t1, gpus, gpu_type, partitions, avail, reason FROM _ns")
    # Re-place every job that changed or holds GPUs after T (running jobs grow with the horizon).
    _ex(con, f"""CREATE OR REPLACE TEMP TABLE _rb AS
                    SELECT job_uid FROM _changed UNION
                    SELECT j.job_uid FROM jobs j WHERE j.cluster = $c AND j.start IS NOT NULL AND j.start < $hz
                      AND j.ngpus > 0 AND {END_EFF_SQL} > $T""", p)
    if incremental:
        _ex(con, "DELETE FROM tl_job_alloc WHERE cluster = $c AND job_uid IN (SELECT job_uid FROM _rb)", {"c": c})
    _ex(con, "INSERT INTO tl_job_alloc " + _job_alloc_sql("j.job_uid IN (SELECT job_uid FROM _rb)"),
                {k: p[k] for k in ("c", "ds", "hz")})
    # the serving view: placements of _rb's jobs changed; segments ending after T and hours from H (below)
    warehouse.note_changed(con, "tl_job_alloc", con.sql("SELECT min(job_uid) FROM _rb").fetchall()[0][0])
    warehouse.note_changed(con, "tl_node_segments", T)
    _ex(con, "DELETE FROM tl_node_segments WHERE cluster = $c AND t0 >= $T", {"c": c, "T": T})
    _ex(con, "UPDATE tl_node_segments SET t1 = $T WHERE cluster = $c AND t1 > $T", {"c": c, "T": T})
    new = build_segments(con, c, T)
    H = floor_hour(T)
    _ex(con, "DELETE FROM tl_hourly WHERE cluster = $c AND hour >= $H", {"c": c, "H": H})
    warehouse.note_changed(con, "tl_hourly", H)
    hourly_rollup(con, c, H, T, new)
    # Job attributes (team, account, ...) and waits can change without changing placements: roll demand up
    # from the earliest start of a changed job, waits from the earliest eligibility (or everything when
    # governance re-mapped teams).
    team_fp = timeline_rollups.team_fingerprint(con, c)
    t_start, t_elig, t_submit = _ex(con, """SELECT min(start), min(coalesce(eligible, submit)), min(submit) FROM jobs
                                            WHERE job_uid IN (SELECT job_uid FROM _changed)""").fetchall()[0]
    demand_from = T if t_start is None else min(T, max(t_start, ds))
    if incremental and old[3] != team_fp:
        demand_from = ds
    timeline_rollups.demand_rollup(con, c, floor_day(demand_from))
    timeline_rollups.pending_rollup(con, c, floor_hour(T if t_elig is None else min(T, max(t_elig, ds))), ds, hz)
    # fairness inputs: allocations change from T or a changed job's start, waits from a changed job's submit
    # (its eligibility may have moved later); the partition pools, the half-life or the teams: everything
    fair_fp = timeline_rollups.fairness_fingerprint(con, c, half_life_s)
    cells_fp = free_grid.cells_fingerprint(con, c)
    same_cells = incremental and old[5] == cells_fp
    fair_from = ds
    if incremental and old[3] == team_fp and old[4] == fair_fp:
        fair_from = min([T] + [max(t, ds) for t in (t_start, t_submit) if t is not None])
    timeline_rollups.fairness_rollup(con, c, floor_day(fair_from), hz,
                                     half_life_s)
    _ex(con, """INSERT INTO tl_clusters (cluster, data_start, horizon, last_run_id, refreshed_at, team_fp, fair_fp,
                                         half_life_s, cells_fp)
                   VALUES ($c, $ds, $hz, $r, $now, $fp, $ffp, $hl, $cfp)
                   ON CONFLICT (cluster) DO UPDATE SET data_start = excluded.data_start, horizon = excluded.horizon,
                     last_run_id = excluded.last_run_id, refreshed_at = excluded.refreshed_at,
                     team_fp = excluded.team_fp, fair_fp = excluded.fair_fp, half_life_s = excluded.half_life_s,
                     cells_fp = excluded.cells_fp""",
                {"c": c, "ds": ds, "hz": hz, "r": last_run, "now": warehouse.utcnow(), "fp": team_fp, "ffp": fair_fp,
                 "hl": half_life_s, "cfp": cells_fp})
    with free_grid.shared_grids():      # both rollups sweep the same (pool x partition) grid
        _blocked_rollup(con, c, ds, T, t_elig, same_cells and old[3] == team_fp)
        _fragmentation_rollup(con, c, floor_day(T if same_cells else ds),
                              T, incremental)
    n_jobs = con.sql("SELECT count(*) FROM _rb").fetchall()[0][0]
    return {"from": T, "full": not incremental, "jobs": n_jobs}


def _blocked_rollup(con, c: str, ds: dt.datetime, T: dt.datetime, t_elig: dt.datetime | None, keep: bool) -> None:
    """Blocked-by-fragmentation per job and day, from the first day where the free GPUs (T), a changed job's
    wait (its eligibility now, its rows before) or, unless ``keep``, the teams or the grid's cells could differ. Runs after
    tl_clusters holds the new horizon: the sample grid is clipped to it."""
    D = ds
    if keep:
        old_rows = _ex(con, """SELECT min(day) FROM tl_blocked_daily
                               WHERE cluster = $c AND job_uid IN (SELECT job_uid FROM _changed)""",
                       {"c": c}).fetchall()[0][0]
        D = min(t for t in (T, None if t_elig is None else max(t_elig, ds), old_rows) if t is not None)
    blocked_daily.rollup(con, c, floor_day(D))


def _fragmentation_rollup(con, c: str, D: dt.datetime, T: dt.datetime, incremental: bool) -> None:
    """The daily fragmentation mart from day D (the free-GPU state depends only on the segments); its workload
    also from the first submit day of a changed job or of an untyped one placed again from T (its pool is where
    it ran). A full rebuild (D = the first day) rebuilds the whole workload, submits before the span included."""
    W = None
    if incremental:
        W = _ex(con, """SELECT min(submit) FROM jobs WHERE cluster = $c AND (job_uid IN (SELECT job_uid FROM _changed)
                                                                        OR (gpu_type IS NULL AND start >= $T))""",
                {"c": c, "T": T}).fetchall()[0][0]
    fragmentation_daily.rollup(con, c, D, None if W is None else floor_day(W))


def _half_life_s(con) -> float | None:
    """The governance's fair-share half-life in seconds, or None before a governance file is loaded."""
    try:
        return current_policy(con).half_life_days * 86400.0
    except CostError:
        return None
