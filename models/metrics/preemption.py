"""Preemption: GPU-hours preempted per victim team and per preemptor QOS, partition and team, requeue counts,
work lost.

Definitions (docs/METRICS.md, "Preemption"):

- a **victim** is a job record that ended ``PREEMPTED`` inside the window (sacct keeps one record per instance
  of a requeued job, ``--duplicates``); its preempted GPU-hours = allocated GPUs x (end - start);
- its **preemptor** is the job that started on one of the victim's nodes within ``grace`` seconds before or
  after the victim's end (Slurm frees the GPUs and starts the preemptor in the same scheduling pass), under a
  QOS or in a partition other than the victim's: Slurm preempts by QOS (preempt/qos) or by the partitions'
  PriorityTier (preempt/partition_prio, a scavenger partition overlapping the others), and the warehouse holds
  neither the site's PreemptType nor the priorities, but a job of the victim's own QOS *and* partition can have
  preempted it under neither; the earliest such start wins, then the most GPUs on the shared nodes.
  No such job: preemptor ``(unknown)``;
- **work lost** = allocated GPUs x (end - the run's last checkpoint) when the governance file gives a checkpoint
  interval for its job name or team, else x (end - start), an upper bound; ``basis`` says which. The rule is
  models/definitions/losses_sql.py's, the same the loss marts apply to every cause;
- **requeues** = job records that ended ``REQUEUED`` or ``PREEMPTED`` whose job (cluster, JobIDRaw) has a later
  record (it ran or waited again), counted per team of the record.

Windows are half-open [start, end) in UTC on the victim's end.
"""
from __future__ import annotations

import polars as pl

from ingest.warehouse import frame
from models.definitions.jobs_sql import team_sql
from models.definitions.labels import NONE
from models.definitions.losses_sql import basis_sql, checkpoint_interval_sql, lost_from_sql
from models.metrics import timeline

UNKNOWN = "(unknown)"
GRACE_S = 60

#: Victims in [$s, $e) with their preemptor (NULL columns when none was found).
VICTIMS_SQL = f"""
    WITH v0 AS (SELECT * FROM jobs j
                WHERE j.state = 'PREEMPTED' AND j."end" >= $s AND j."end" < $e AND j.start IS NOT NULL),
    v AS (
      SELECT j.job_uid, j.cluster, j.job_id, j.job_id_raw, {team_sql()} AS team, j.account, j."user",
             coalesce(j.qos, '{NONE}') AS qos, j.partition, j.ngpus, j.start, j."end",
             j.ngpus * epoch(j."end" - j.start) / 3600 AS gpu_h,
             j.ngpus * epoch(j."end" - {lost_from_sql('j.start', 'j."end"', 'k.interval_s')}) / 3600 AS work_lost_gpu_h,
             {basis_sql('k.interval_s')} AS basis, k.interval_s AS checkpoint_s
      FROM v0 j LEFT JOIN {checkpoint_interval_sql('v0')} k USING (job_uid)),
    vn AS (SELECT v.job_uid, v.cluster, v."end", v.qos, coalesce(v.partition, '{NONE}') AS partition, n.node, b.b
           FROM v JOIN job_nodes n USING (job_uid),
                unnest([floor(epoch(v."end") / $grace)::BIGINT - 1, floor(epoch(v."end") / $grace)::BIGINT,
                        floor(epoch(v."end") / $grace)::BIGINT + 1]) AS b(b)),
    -- jobs starting on a victim's node in its time bucket or a neighbour (buckets of `grace` seconds): an
    -- equi-join, not a scan of every job on the node
    p AS (SELECT pn.cluster, pn.node, pn.gpus_on_node, j.job_uid, j.job_id, j.team, j.qos, j.partition, j.start,
                 floor(epoch(j.start) / $grace)::BIGINT AS b
          FROM job_nodes pn JOIN jobs j USING (job_uid)
          WHERE j.start IS NOT NULL
            AND (pn.cluster, pn.node, floor(epoch(j.start) / $grace)::BIGINT) IN (SELECT cluster, node, b FROM vn)),
    c AS (
      SELECT vn.job_uid AS victim, p.job_uid, p.job_id, {team_sql('p')} AS team, coalesce(p.qos, '{NONE}') AS qos,
             coalesce(p.partition, '{NONE}') AS partition, p.start, sum(p.gpus_on_node) AS shared_gpus
      FROM vn JOIN p ON p.cluster = vn.cluster AND p.node = vn.node AND p.b = vn.b AND p.job_uid <> vn.job_uid
      WHERE p.start BETWEEN vn."end" - to_seconds($grace) AND vn."end" + to_seconds($grace)
        AND (coalesce(p.qos, '{NONE}') <> vn.qos OR coalesce(p.partition, '{NONE}') <> vn.partition)
      GROUP BY ALL),
    best AS (SELECT * FROM c QUALIFY row_number() OVER (PARTITION BY victim ORDER BY start, shared_gpus DESC,
                                                                                  job_uid) = 1)
    SELECT v.*, best.job_id AS preemptor_job_id, coalesce(best.team, '{UNKNOWN}') AS preemptor_team,
           coalesce(best.qos, '{UNKNOWN}') AS preemptor_qos,
           coalesce(best.partition, '{UNKNOWN}') AS preemptor_partition, best.start AS preemptor_start
    FROM v LEFT JOIN best ON best.victim = v.job_uid
    ORDER BY v."end", v.job_uid"""

#: Records that were requeued (REQUEUED, or PREEMPTED with a later record of the same job) ending in [$s, $e).
REQUEUES_SQL = f"""
    SELECT {team_sql()} AS team, count(*) AS requeues
    FROM jobs j
    WHERE j.state IN ('REQUEUED', 'PREEMPTED') AND j."end" >= $s AND j."end" < $e
      AND EXISTS (SELECT 1 FROM jobs k WHERE k.cluster = j.cluster AND k.job_id_raw = j.job_id_raw
                  AND k.submit > j.submit)
    GROUP BY ALL"""


def victims(con, start=None, end=None, grace_s: int = GRACE_S) -> pl.DataFrame:
    """One row per preempted job record ending in [start, end): its team, QOS, GPUs, preempted GPU-hours, and
    its preemptor's job id, team, QOS and partition (``(unknown)`` when none is found)."""
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    return frame(con, VICTIMS_SQL, {"s": win[0], "e": win[1], "grace": grace_s})


def views(con, start=None, end=None, grace_s: int = GRACE_S) -> dict[str, pl.DataFrame]:
    """The report's three views (victims per team, per preemptor, per job) from one computation of the victims."""
    v = victims(con, start, end, grace_s)
    return {"victims": by_victim(con, start, end, grace_s, v), "preemptors": by_preemptor(con, start, end, grace_s, v),
            "jobs": v}


def by_victim(con, start=None, end=None, grace_s: int = GRACE_S, v: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per victim team: preempted jobs, preempted GPU-hours, work lost (GPU-hours, since start), requeues.
    ``v``: :func:`victims` of the same window when already computed."""
    win = timeline.resolve_window(con, start, end)
    if win is None:
        return pl.DataFrame()
    v = victims(con, *win, grace_s=grace_s) if v is None else v
    req = frame(con, REQUEUES_SQL, {"s": win[0], "e": win[1]})
    per = (v.group_by("team").agg(pl.len().alias("preempted_jobs"), pl.col("gpu_h").sum().alias("preempted_gpu_h"),
                                  pl.col("work_lost_gpu_h").sum(),
                                  (pl.col("preemptor_team") != UNKNOWN).sum().alias("preemptor_found"))
           if v.height else pl.DataFrame(schema={"team": pl.String, "preempted_jobs": pl.UInt32,
                                                 "preempted_gpu_h": pl.Float64, "work_lost_gpu_h": pl.Float64,
                                                 "preemptor_found": pl.UInt32}))
    out = per.join(req, on="team", how="full", coalesce=True).with_columns(
        pl.col("preempted_jobs").fill_null(0).cast(pl.Int64), pl.col("preempted_gpu_h").fill_null(0.0),
        pl.col("work_lost_gpu_h").fill_null(0.0),
        pl.col("preemptor_found").fill_null(0).cast(pl.Int64), pl.col("requeues").fill_null(0).cast(pl.Int64))
    return out.select("team", "preempted_jobs", "preempted_gpu_h", "work_lost_gpu_h", "requeues",
                      "preemptor_found").sort("team")


def by_preemptor(con, start=None, end=None, grace_s: int = GRACE_S, v: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per preemptor QOS, partition and team, and the victim team: victims and their preempted GPU-hours."""
    v = victims(con, start, end, grace_s) if v is None else v
    keys = ("preemptor_qos", "preemptor_partition", "preemptor_team", "victim_team")
    if v.is_empty():
        return pl.DataFrame(schema={**{k: pl.String for k in keys}, "victims": pl.Int64, "preempted_gpu_h": pl.Float64})
    return (v.rename({"team": "victim_team"}).group_by(keys)
            .agg(pl.len().cast(pl.Int64).alias("victims"), pl.col("gpu_h").sum().alias("preempted_gpu_h"))
            .sort(keys))
