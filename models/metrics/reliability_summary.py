"""The manager's answer on one page (the top of the Reliability page, `gpuledger report reliability --view
teams|pull`): for a window (by default the last full UTC month before the data's horizon), per team the GPU-hours
lost to failures by cause, held back by slow nodes and lost to preemption, with goodput; and a ranked list of
the nodes to pull, with the evidence.

Every figure is another model's (no second definition): lost GPU-hours and goodput are models/metrics/losses.py's
(the checkpoint rule included), repeat offenders, slow nodes and XID GPUs models/metrics/reliability.py's.
Definitions: docs/METRICS.md ("Reliability summary").
"""
from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from models.definitions.jobs_sql import team_sql
from models.definitions.losses_sql import CAUSES
from models.definitions.times import floor_day
from models.metrics import losses, reliability

#: The per-team view's loss columns, failures first, preemption last (GPU-hours).
FAILURE_COLS = tuple(f"{c}_gpu_h" for c in CAUSES if c != "preemption")
#: Signals a node can be pulled for, in the order the evidence lists them.
SIGNALS = ("repeat offender", "slow node", "XID GPU")


def last_full_month(con: duckdb.DuckDBPyConnection) -> tuple[dt.datetime, dt.datetime] | None:
    """[first, next first) of the last whole UTC calendar month before the timeline's horizon (its latest
    cluster horizon); None without a timeline. A horizon on a 1st at 00:00 makes the month just ended the one."""
    hi = con.sql("SELECT max(horizon) FROM tl_clusters").fetchall()[0][0]
    if hi is None:
        return None
    end = floor_day(hi).replace(day=1)
    start = (end - dt.timedelta(days=1)).replace(day=1)
    return start, end


def _held_back_by_team(con, start, end) -> pl.DataFrame:
    """Per team: GPU-hours of whole multi-node jobs in which a listed slow node (one of :func:`slow_nodes`' rows)
    was below its peers, each job counted once."""
    win = losses.window(con, start, end)
    if win is None:
        return pl.DataFrame(schema={"team": pl.String, "slow_node_held_back_gpu_h": pl.Float64})
    return con.sql(f"""
        WITH a AS ({reliability.SLOW_PAIRS_SQL}),
        listed AS (SELECT cluster, node FROM a GROUP BY ALL HAVING count(*) FILTER (WHERE slow) >= $mj),
        held AS (SELECT DISTINCT a.job_uid, a.alloc_gpu_s FROM a JOIN listed USING (cluster, node) WHERE a.slow)
        SELECT {team_sql('j')} AS team, sum(h.alloc_gpu_s) / 3600 AS slow_node_held_back_gpu_h
        FROM held h JOIN jobs j USING (job_uid) GROUP BY ALL""",
                   params={"s": win[0], "e": win[1], "mm": reliability.SLOW_MIN_MINUTES, "share": reliability.SLOW_SHARE,
                           "mj": reliability.SLOW_MIN_JOBS}).pl()


def teams(con: duckdb.DuckDBPyConnection, start=None, end=None) -> pl.DataFrame:
    """Per team over [start, end) (whole UTC days): allocated GPU-hours, failure losses by cause (node failure,
    GPU XID, other outage, requeue, timeout, job failed), ``failure_gpu_h`` (their sum), ``preemption_gpu_h``,
    ``lost_gpu_h`` (all causes), ``slow_node_held_back_gpu_h`` (NULL without GPU telemetry) and
    ``goodput_share``; the most lost first. GPU-hours throughout."""
    rep = losses.report(con, start, end, bucket=None, by=["team"])
    if rep.is_empty():
        return rep
    telemetry = reliability.has_telemetry(con)
    held = _held_back_by_team(con, start, end) if telemetry else None
    out = rep.with_columns(pl.sum_horizontal(*FAILURE_COLS).alias("failure_gpu_h"))
    if held is not None:
        out = out.join(held, on="team", how="left").with_columns(pl.col("slow_node_held_back_gpu_h").fill_null(0.0))
    else:
        out = out.with_columns(pl.lit(None, pl.Float64).alias("slow_node_held_back_gpu_h"))
    return out.select("team", "allocated_gpu_h", *FAILURE_COLS, "failure_gpu_h", "preemption_gpu_h", "lost_gpu_h",
                      "slow_node_held_back_gpu_h", "goodput_share").sort(["lost_gpu_h", "team"],
                                                                           descending=[True, False])


_KEYS = ["cluster", "node", "gpu_type"]


def _offenders(con, start, end) -> pl.DataFrame:
    off = reliability.offenders(con, start, end)
    if off.is_empty():
        return pl.DataFrame(schema={**dict.fromkeys(_KEYS, pl.String), "failed": pl.Int64, "jobs": pl.Int64,
                                    "q_value": pl.Float64, "offender": pl.String})
    return off.filter(pl.col("flagged")).select(
        *_KEYS, "failed", "jobs", "q_value",
        pl.format("repeat offender: {} of {} jobs failed ({}% vs pool {}%, q = {})", "failed", "jobs",
                  (100 * pl.col("fail_rate")).round(1), (100 * pl.col("pool_rate")).round(1),
                  pl.col("q_value").round_sig_figs(2)).alias("offender"))


def _slow(con, start, end) -> pl.DataFrame:
    slow = reliability.slow_nodes(con, start, end)
    if slow.is_empty():
        return pl.DataFrame(schema={**dict.fromkeys(_KEYS, pl.String), "slow_jobs": pl.Int64,
                                    "held_back_gpu_h": pl.Float64, "slow": pl.String})
    return slow.select(
        *_KEYS, pl.col("slow_jobs").cast(pl.Int64), "held_back_gpu_h",
        pl.format("slow node: below its peers in {} of {} multi-node jobs ({} min, {} points lower), {} GPU-h "
                  "held back", "slow_jobs", "multi_node_jobs", "minutes_below", pl.col("activity_gap_pct").round(1),
                  pl.col("held_back_gpu_h").round(1)).alias("slow"))


def _xid(con, start, end) -> pl.DataFrame:
    g = reliability.gpus(con, start, end)
    empty = pl.DataFrame(schema={**dict.fromkeys(_KEYS, pl.String), "xid_gpus": pl.Int64, "xid": pl.String})
    if g.is_empty():
        return empty
    hw = g.filter((pl.col("hardware_xid_events") > 0) | (pl.col("row_remap_failures") > 0)
                  | (pl.col("ecc_dbe_events") > 0))
    if hw.is_empty():
        return empty
    per_gpu = pl.format("GPU {}: {} XID events (codes {}), {} row-remap failures, {} ECC double-bit",
                        "gpu", "hardware_xid_events", "codes", "row_remap_failures", "ecc_dbe_events")
    return (hw.sort("gpu").group_by(_KEYS, maintain_order=True)
            .agg(pl.len().cast(pl.Int64).alias("xid_gpus"), per_gpu.alias("x"))
            .select(*_KEYS, "xid_gpus", (pl.lit("XID GPU: ") + pl.col("x").list.join("; ")).alias("xid")))


def pull(con: duckdb.DuckDBPyConnection, start=None, end=None) -> pl.DataFrame:
    """The nodes to pull over [start, end) (whole UTC days), ranked: each node flagged as a repeat offender
    (reliability.offenders, Benjamini-Hochberg q <= 0.05), a slow node (reliability.slow_nodes) or carrying a
    GPU with hardware XIDs (not application class, not a recorded repair such as XID 63), row-remap failures or
    ECC double-bit errors (reliability.gpus); the signals, the
    hardware-lost GPU-hours of jobs it killed and the GPU-hours it held back (``at_stake_gpu_h`` = their sum),
    and the evidence. Ranked by the number of signals, then GPU-hours at stake, then q-value."""
    parts = [_offenders(con, start, end), _slow(con, start, end), _xid(con, start, end)]
    flagged = pl.concat([p.select(_KEYS) for p in parts]).unique()
    if flagged.is_empty():
        return pl.DataFrame()
    nodes = reliability.nodes(con, start, end, "node").select(
        *_KEYS, "outages", pl.col("lost_gpu_h").alias("hardware_lost_gpu_h"))
    out = flagged
    for p in (*parts, nodes):
        out = out.join(p, on=_KEYS, how="left", nulls_equal=True)
    ev = [pl.col(c) for c in ("offender", "slow", "xid")]
    out = out.with_columns(
        pl.col("hardware_lost_gpu_h").fill_null(0.0), pl.col("outages").fill_null(0),
        pl.col("held_back_gpu_h").fill_null(0.0), pl.col("xid_gpus").fill_null(0),
        pl.sum_horizontal(*[c.is_not_null().cast(pl.Int64) for c in ev]).alias("signals"),
        pl.concat_list([pl.when(c.is_not_null()).then(pl.lit(n)) for c, n in zip(ev, SIGNALS)])
        .list.drop_nulls().list.join(", ").alias("flags"),
        pl.concat_list(ev).list.drop_nulls().list.join("; ").alias("evidence"))
    out = out.with_columns((pl.col("hardware_lost_gpu_h") + pl.col("held_back_gpu_h")).alias("at_stake_gpu_h"))
    out = out.sort(["signals", "at_stake_gpu_h", "q_value", "cluster", "node"],
                   descending=[True, True, False, False, False], nulls_last=True)
    return out.with_row_index("rank", offset=1).select(
        pl.col("rank").cast(pl.Int64), *_KEYS, "flags", "signals", "at_stake_gpu_h", "hardware_lost_gpu_h",
        "held_back_gpu_h", "outages", "failed", "jobs", "q_value", "slow_jobs", "xid_gpus", "evidence")
