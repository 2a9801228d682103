"""Why jobs pend: each GPU job's wait split by Slurm's pending reason, in GPU-hours, per team (or other group).

Definitions (docs/METRICS.md, "Why jobs pend"):

- a job's wait runs from its submit time to when it left the queue (models/definitions/jobs_sql.py:
  ``pending_until_sql``), in two phases split at its queue entry (``pending_from_sql``: eligible, else submit):
  ``before eligible`` (dependencies, --begin, holds) and ``eligible`` (the one pending interval, which every
  queue metric uses);
- the reason of a squeue snapshot (``squeue_snapshots``, state PENDING) holds from the snapshot until the
  cluster's next snapshot, but never more than ``max_gap`` (default 15 minutes) after it: a collector that stopped
  does not stretch one reason over hours;
- wait that no snapshot covers (before the job's first snapshot, gaps, no snapshots at all) takes sacct's Reason
  when the export had that column (``jobs.extra``; Slurm keeps only the *last* reason, so this is a weaker
  source and marked ``sacct (last reason)``), else it is ``unknown``: counted, never dropped;
- GPU-hours of waiting = requested GPUs x seconds / 3600; reasons are grouped into classes by
  models/definitions/reasons.py;
- beside it (not added: another view of the same eligible wait) the GPU-hours during which GPUs were free
  but scattered (``blocked by fragmentation``, models/metrics/blocked.py).

Times naive UTC; windows half-open [start, end), applied to the wait itself (a wait crossing an edge counts its
part inside).
"""
from __future__ import annotations

import polars as pl

from ingest.warehouse import frame, has_table
from models.definitions.jobs_sql import pending_from_sql, pending_until_sql, req_gpus_sql, team_sql
from models.definitions.labels import ALL, NONE, normalise_dims
from models.definitions.reasons import CLASSES, UNKNOWN, reason_class_sql
from models.definitions.times import parse_duration
from models.metrics import blocked, timeline

DIMS = ("team", "account", "user", "partition", "qos", "cluster")
MAX_GAP_S = 15 * 60
SOURCES = ("squeue", "sacct (last reason)", "none")


def _segments_sql(dims: list[str]) -> str:
    """Per job and reason source: seconds before eligible / eligible inside [$s, $e), with the grouping columns
    (carried through each part, so no join back to the jobs at the end: the year has millions of waits)."""
    keep = ", ".join(f"jw.{d}" for d in dims)
    return f"""
    WITH j AS (
      SELECT j.job_uid, j.cluster, j.job_id, {team_sql()} AS team, j.account, j."user", j.partition,
             coalesce(j.qos, '{NONE}') AS qos, {req_gpus_sql()} AS g,
             nullif(nullif(json_extract_string(j.extra, '$.reason'), 'None'), '') AS sacct_reason,
             j.submit AS q0, {pending_from_sql()} AS q1, {pending_until_sql('c.horizon')} AS q2
      FROM jobs j JOIN tl_clusters c USING (cluster)
      WHERE j.submit < $e AND {req_gpus_sql()} > 0),
    jw AS (
      SELECT *, greatest(q0, $s) AS a0, least(greatest(q1, q0), q2) AS e1, least(q2, $e) AS b0
      FROM j WHERE q2 > $s AND q2 > q0),
    snaps AS (
      SELECT cluster, captured_at AS t,
             least(coalesce(lead(captured_at) OVER (PARTITION BY cluster ORDER BY captured_at),
                            captured_at + to_seconds($gap)), captured_at + to_seconds($gap)) AS t_next
      FROM (SELECT DISTINCT cluster, captured_at FROM squeue_snapshots)),
    seg AS (
      SELECT jw.job_uid, {keep}, jw.g, s.reason, greatest(n.t, jw.a0) AS a, least(n.t_next, jw.b0) AS b, jw.e1
      FROM squeue_snapshots s JOIN snaps n ON n.cluster = s.cluster AND n.t = s.captured_at
      JOIN jw ON jw.cluster = s.cluster AND jw.job_id = s.job_id AND s.captured_at >= jw.q0 AND s.captured_at < jw.q2
      WHERE s.state = 'PENDING' AND least(n.t_next, jw.b0) > greatest(n.t, jw.a0)),
    cov AS (
      SELECT job_uid, {", ".join(dims)}, g, reason, 'squeue' AS source,
             sum(greatest(0, epoch(least(b, e1) - a))) AS before_s, sum(greatest(0, epoch(b - greatest(a, e1)))) AS elig_s
      FROM seg GROUP BY ALL),
    tot AS (
      SELECT jw.*, greatest(0, epoch(least(e1, b0) - a0)) AS before_s, greatest(0, epoch(b0 - greatest(e1, a0))) AS elig_s
      FROM jw),
    unk AS (
      SELECT t.job_uid, {", ".join(f"t.{d}" for d in dims)}, t.g, t.sacct_reason AS reason,
             CASE WHEN t.sacct_reason IS NULL THEN 'none' ELSE 'sacct (last reason)' END AS source,
             t.before_s - coalesce(c.before_s, 0) AS before_s, t.elig_s - coalesce(c.elig_s, 0) AS elig_s
      FROM tot t LEFT JOIN (SELECT job_uid, sum(before_s) AS before_s, sum(elig_s) AS elig_s FROM cov GROUP BY 1) c
        USING (job_uid)),
    parts AS (SELECT * FROM cov UNION ALL BY NAME SELECT * FROM unk WHERE before_s + elig_s > 0)
    SELECT {", ".join(f"p.{d}" for d in dims)}, p.job_uid, p.g, p.reason, p.source,
           {reason_class_sql('p.reason')} AS class, p.before_s, p.elig_s
    FROM parts p"""


def _segments(con, start, end, dims: list[str], max_gap: str | int) -> tuple[str, dict] | None:
    win = timeline.resolve_window(con, start, end)
    if win is None or not has_table(con, "squeue_snapshots"):
        return None
    return _segments_sql(dims), {"s": win[0], "e": win[1], "gap": parse_duration(max_gap)}


def by_reason(con, start=None, end=None, by="team", max_gap: str | int = MAX_GAP_S) -> pl.DataFrame:
    """Per group of ``by`` (team, account, user, partition, qos, cluster), reason class, Slurm reason and source:
    jobs, waiting GPU-hours (before eligible, eligible, total) and the share of the group's wait."""
    dims = normalise_dims(by, DIMS) or ["team"]
    q = _segments(con, start, end, dims, max_gap)
    if q is None:
        return pl.DataFrame()
    sql, params = q
    cols = ", ".join(f'"{d}"' for d in dims)
    # a job has one segment row per (reason, source) and its grouping columns are its own: count(*) counts jobs
    out = frame(con, f"""
        SELECT {cols}, class, coalesce(reason, '{UNKNOWN}') AS reason, source, count(*) AS jobs,
               sum(g * before_s) / 3600 AS before_eligible_gpu_h, sum(g * elig_s) / 3600 AS eligible_gpu_h,
               sum(g * (before_s + elig_s)) / 3600 AS wait_gpu_h
        FROM ({sql}) GROUP BY ALL""", params)
    if out.is_empty():
        return out
    order = {c: i for i, c in enumerate(CLASSES)}
    return (out.with_columns((pl.col("wait_gpu_h") / pl.col("wait_gpu_h").sum().over(dims)).alias("share_of_wait"),
                             pl.col("class").replace_strict(order, default=len(order)).alias("_o"),
                             pl.col("jobs").cast(pl.Int64))
            .sort([*dims, "_o", "wait_gpu_h"], descending=[False] * len(dims) + [False, True]).drop("_o"))


def views(con, start=None, end=None, by="team", max_gap: str | int = MAX_GAP_S) -> dict[str, pl.DataFrame]:
    """The report's two views (``classes``, ``reasons``) from one computation of the per-job reason segments."""
    rs = by_reason(con, start, end, by, max_gap)
    return {"classes": by_class(con, start, end, by, max_gap, rs), "reasons": rs}


def by_class(con, start=None, end=None, by="team", max_gap: str | int = MAX_GAP_S,
             rs: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per group: waiting GPU-hours per reason class as columns (``priority_gpu_h`` ...), the total, the share that
    squeue snapshots explain, and beside it the eligible wait blocked by fragmentation (not added).
    ``rs``: :func:`by_reason` of the same window, grouping and gap when already computed."""
    dims = normalise_dims(by, DIMS) or ["team"]
    rs = by_reason(con, start, end, dims, max_gap) if rs is None else rs
    if rs.is_empty():
        return rs
    wide = rs.pivot(on="class", index=dims, values="wait_gpu_h", aggregate_function="sum")
    for c in CLASSES:
        if c not in wide.columns:
            wide = wide.with_columns(pl.lit(0.0).alias(c))
    tot = rs.group_by(dims).agg(pl.col("wait_gpu_h").sum(),
                                pl.col("wait_gpu_h").filter(pl.col("source") == "squeue").sum().alias("_sq"))
    out = wide.join(tot, on=dims).with_columns(
        *[pl.col(c).fill_null(0.0).alias(f"{c.replace(' ', '_')}_gpu_h") for c in CLASSES],
        (pl.col("_sq") / pl.col("wait_gpu_h")).alias("from_snapshots_share"))
    out = out.select(*dims, "wait_gpu_h", *[f"{c.replace(' ', '_')}_gpu_h" for c in CLASSES], "from_snapshots_share")
    if dims == ["team"]:     # no pending sample of the grid inside the window: 0
        frag = blocked.blocked(con, start, end, by=("team",))
        frag = (frag.filter(pl.col("team") != ALL).select("team", "fragmentation_gpu_h") if not frag.is_empty()
                else pl.DataFrame(schema={"team": pl.String, "fragmentation_gpu_h": pl.Float64}))
        out = out.join(frag.rename({"fragmentation_gpu_h": "blocked_by_fragmentation_gpu_h"}), on="team",
                       how="left").with_columns(pl.col("blocked_by_fragmentation_gpu_h").fill_null(0.0))
    return out.sort(dims)


def coverage(con) -> dict:
    """How much the snapshots cover: count, first/last capture, clusters (for the report's notes)."""
    if not has_table(con, "squeue_snapshots"):
        return {"snapshots": 0}
    n, first, last = con.sql("SELECT count(DISTINCT (cluster, captured_at)), min(captured_at), max(captured_at) "
                             "FROM squeue_snapshots").fetchall()[0]
    return {"snapshots": n, "first": first, "last": last}
