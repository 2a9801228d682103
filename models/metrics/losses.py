"""Where allocated GPU-hours were lost: failure losses by cause, per team, pool, node and UTC day/week/month,
and goodput (allocated minus lost, as a share). Reads the loss marts (models/marts/losses.py) and the
timeline's daily allocation rollup (``tl_demand_daily``); never builds.

Definitions (docs/METRICS.md, "Losses"): a job's cause is models/definitions/losses_sql.py's; its lost
GPU-seconds are the GPU-seconds it held since its last checkpoint (governance ``[[checkpoints]]``), else since
its start, counted in the UTC days they were held. The window is widened to whole UTC days (the marts' grain).
"""
from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from ingest.warehouse import has_table
from models.definitions.labels import UNMAPPED, UNTYPED, normalise_dims
from models.definitions.losses_sql import CAUSES
from models.definitions.times import ceil_day, check_bucket, floor_day

#: Grouping columns: what the job was (team), where it ran (cluster, pool = gpu_type, node), and why it ended.
DIMS = ("cluster", "team", "gpu_type", "node", "cause")
#: Groupings the timeline's daily allocation rollup can give an allocated (goodput) figure for.
ALLOC_DIMS = ("cluster", "team", "gpu_type")
CAUSE_COLS = tuple(f"{c}_gpu_h" for c in CAUSES)


def window(con: duckdb.DuckDBPyConnection, start: dt.datetime | None, end: dt.datetime | None
           ) -> tuple[dt.datetime, dt.datetime] | None:
    """[start, end) widened to whole UTC days; open ends take the timeline's span (None when there is none)."""
    lo, hi = con.sql("SELECT min(data_start), max(horizon) FROM tl_clusters").fetchall()[0]
    if (lo is None and start is None) or (hi is None and end is None):
        return None
    s, e = floor_day(start or lo), ceil_day(end or hi)
    return (s, e) if e > s else None


def has_marts(con: duckdb.DuckDBPyConnection) -> bool:
    """True once `gpuledger refresh` has built the loss marts."""
    return con.sql("SELECT count(*) FROM mart_state WHERE mart = 'losses'").fetchall()[0][0] > 0


def _lost_sql(dims: list[str], bucket: str | None) -> str:
    b = f"date_trunc('{bucket}', d.day) AS bucket, " if bucket else ""
    cols = {"cluster": "d.cluster", "team": "d.team", "gpu_type": f"coalesce(d.gpu_type, '{UNTYPED}') AS gpu_type",
            "node": "d.node", "cause": "d.cause"}
    sel = ", ".join(cols[x] for x in dims)
    per_cause = ", ".join(f"coalesce(sum(d.lost_gpu_s) FILTER (WHERE d.cause = '{c}'), 0) / 3600 AS {c}_gpu_h"
                          for c in CAUSES)
    return f"""
        SELECT {b}{sel}{', ' if sel else ''}sum(d.lost_gpu_s) / 3600 AS lost_gpu_h, {per_cause},
               count(DISTINCT d.job_uid) AS jobs
        FROM loss_days d WHERE d.day >= $s AND d.day < $e GROUP BY ALL"""


def _alloc_sql(dims: list[str], bucket: str | None) -> str:
    b = f"date_trunc('{bucket}', day) AS bucket, " if bucket else ""
    cols = {"cluster": "cluster", "team": f"coalesce(team, '{UNMAPPED}') AS team",
            "gpu_type": f"coalesce(gpu_type, '{UNTYPED}') AS gpu_type"}
    sel = ", ".join(cols[x] for x in dims)
    return f"""SELECT {b}{sel}{', ' if sel else ''}sum(gpu_s) / 3600 AS allocated_gpu_h
               FROM tl_demand_daily WHERE day >= $s AND day < $e GROUP BY ALL"""


def report(con: duckdb.DuckDBPyConnection, start=None, end=None, bucket: str | None = "month",
           by=("team",)) -> pl.DataFrame:
    """Lost GPU-hours per ``bucket`` (day/week/month, UTC; None = the whole window) and ``by`` any of cluster,
    team, gpu_type (pool), node, cause: total and per cause, jobs, and, grouped by cluster/team/pool only,
    allocated GPU-hours (the timeline's), goodput GPU-hours (allocated minus lost) and goodput share."""
    dims = normalise_dims(by, DIMS)
    if bucket is not None and check_bucket(bucket) == "hour":
        raise ValueError("bucket must be day, week or month (losses are kept per UTC day)")
    win = window(con, start, end)
    if win is None:
        return pl.DataFrame()
    params = {"s": win[0], "e": win[1]}
    keys = (["bucket"] if bucket else []) + dims
    lost = con.sql(_lost_sql(dims, bucket), params=params).pl()
    if not set(dims) <= set(ALLOC_DIMS):
        return lost.sort(keys or "lost_gpu_h").select(*keys, "lost_gpu_h", *CAUSE_COLS, "jobs") if keys else lost
    alloc = con.sql(_alloc_sql(dims, bucket), params=params).pl()
    if keys:
        out = alloc.join(lost, on=keys, how="full", coalesce=True, nulls_equal=True)
    else:
        out = pl.concat([alloc, lost], how="horizontal")
    out = out.with_columns(pl.col("allocated_gpu_h").fill_null(0.0), pl.col("lost_gpu_h").fill_null(0.0),
                           *[pl.col(c).fill_null(0.0) for c in CAUSE_COLS], pl.col("jobs").fill_null(0))
    out = goodput(out)
    return out.sort(keys) if keys else out


def goodput(df: pl.DataFrame) -> pl.DataFrame:
    """``goodput_gpu_h`` = allocated - lost and ``goodput_share`` = goodput / allocated (NULL without allocation);
    recomputed from the sums wherever rows are summed."""
    return df.with_columns((pl.col("allocated_gpu_h") - pl.col("lost_gpu_h")).alias("goodput_gpu_h")).with_columns(
        pl.when(pl.col("allocated_gpu_h") > 0).then(pl.col("goodput_gpu_h") / pl.col("allocated_gpu_h"))
        .alias("goodput_share"))


def jobs(con: duckdb.DuckDBPyConnection, start=None, end=None, cause: str | None = None,
         limit: int | None = None) -> pl.DataFrame:
    """The jobs that lost work and ended in the window, most lost GPU-hours first: cause, detail, the event
    behind it, lost GPU-hours and the basis ('checkpoint' or 'since start')."""
    win = window(con, start, end)
    if win is None:
        return pl.DataFrame()
    if cause is not None and cause not in CAUSES:
        raise ValueError(f"cause must be one of {', '.join(CAUSES)}, not {cause!r}")
    top = "" if limit is None else f"LIMIT {int(limit)}"
    # the first N before the join: the year has over a million loss jobs
    return con.sql(f"""
        WITH l AS (SELECT * FROM loss_jobs WHERE "end" >= $s AND "end" < $e AND ($cause IS NULL OR cause = $cause)
                   ORDER BY lost_gpu_s DESC, "end", job_id {top})
        SELECT l.cluster, l.job_id, l.team, j."user", l.state, l.cause, l.detail,
               l.xid, l.event_node, l.event_start, l.start, l."end", l.ngpus, l.alloc_gpu_s / 3600 AS allocated_gpu_h,
               l.lost_gpu_s / 3600 AS lost_gpu_h, l.basis, l.checkpoint_s, j.nodelist
        FROM l JOIN jobs j USING (job_uid)
        ORDER BY l.lost_gpu_s DESC, l."end", l.job_id""",
                   params={"s": win[0], "e": win[1], "cause": cause}).pl()


#: The sources each hardware cause needs beyond the job's own end state (any one will do), and how to name them.
CAUSE_SOURCES = {"outage": (("node_events",), "no node events loaded (`gpuledger ingest events`)"),
                 "gpu_xid": (("gpu_devices", "gpu_events"),
                             "no GPU telemetry loaded (`gpuledger ingest prometheus|dcgm`)")}


def unknown_causes(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """{cause: why it cannot be seen} for the hardware causes the warehouse has no source for: an outage needs
    node events, a GPU XID GPU telemetry. Their 0 GPU-hours then mean "not known", not "none" (node failures
    need only the jobs' NODE_FAIL states, and are always known)."""
    def empty(table: str) -> bool:
        return not has_table(con, table) or not con.sql(f"SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT 1)"
                                                        ).fetchall()[0][0]
    return {c: why for c, (tables, why) in CAUSE_SOURCES.items() if all(empty(t) for t in tables)}


def basis(con: duckdb.DuckDBPyConnection, start=None, end=None) -> dict:
    """How the window's lost GPU-hours were measured: since a known checkpoint or since the job's start, how
    many loss jobs had no placement (no timeline pieces, so nothing to count), and which hardware causes the
    warehouse cannot see (``unknown``: :func:`unknown_causes`)."""
    win = window(con, start, end)
    if win is None:
        return {"checkpoint_gpu_h": 0.0, "since_start_gpu_h": 0.0, "unplaced_jobs": 0, "unknown": {}}
    ck, ss, unplaced = con.sql("""
        SELECT coalesce(sum(lost_gpu_s) FILTER (WHERE basis = 'checkpoint'), 0) / 3600,
               coalesce(sum(lost_gpu_s) FILTER (WHERE basis = 'since start'), 0) / 3600,
               (SELECT count(*) FROM loss_jobs WHERE alloc_gpu_s = 0 AND "end" >= $s AND "end" < $e)
        FROM loss_days WHERE day >= $s AND day < $e""",
                                   params={"s": win[0], "e": win[1]}).fetchall()[0]
    return {"checkpoint_gpu_h": ck, "since_start_gpu_h": ss, "unplaced_jobs": unplaced, "window": win,
            "unknown": unknown_causes(con)}
