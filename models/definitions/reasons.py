"""Why a job pends: Slurm's pending reasons (squeue %r, sacct's Reason) grouped into classes, once.

Classes, in the order reports list them (docs/METRICS.md, "Why jobs pend"):

- ``priority``: other jobs come first (Priority, PriorityHigherPending ...);
- ``resources``: not enough free resources where it may run (Resources, Nodes_required...);
- ``limits``: a QOS, association or partition limit (QOSMax*, QOSGrp*, AssocMax*, AssocGrp*, MaxJobs*,
  Partition*Limit, QOS*Limit ...);
- ``nodes unavailable``: ReqNodeNotAvail, NodeDown, PartitionDown, PartitionInactive, BadConstraints ...;
- ``reservation``: waiting for or shut out by a reservation (Reservation, ResvDeleted ...);
- ``dependency``: Dependency, DependencyNeverSatisfied;
- ``begin time``: BeginTime (--begin, and a requeued job's hold-off);
- ``held``: JobHeldUser, JobHeldAdmin, *Hold;
- ``not yet evaluated``: a snapshot's reason ``None``, a job no scheduling pass has looked at yet: a new
  submission for a few seconds, longer on a busy cluster whose passes stop before they reach it
  (SchedulerParameters' default_queue_depth, bf_max_job_test). A large share says the scheduler does not reach
  those jobs, not why they wait (counted under ``other`` until 2026-12-06; sacct's last reason ``None`` says
  nothing and is not used);
- ``other``: any other reason Slurm printed (named in the report);
- ``unknown``: no reason recorded for that part of the wait (no snapshot covering it, no sacct Reason).
"""
from __future__ import annotations

UNKNOWN = "unknown"
NOT_EVALUATED = "not yet evaluated"
CLASSES = ("priority", "resources", "limits", "nodes unavailable", "reservation", "dependency", "begin time", "held",
           NOT_EVALUATED, "other", UNKNOWN)


def reason_class_sql(col: str) -> str:
    """SQL: the class of the Slurm reason in column ``col`` (NULL or empty: unknown)."""
    return f"""CASE
        WHEN {col} IS NULL OR {col} = '' THEN '{UNKNOWN}'
        WHEN {col} = 'None' THEN '{NOT_EVALUATED}'
        WHEN {col} IN ('Dependency', 'DependencyNeverSatisfied') THEN 'dependency'
        WHEN {col} = 'BeginTime' THEN 'begin time'
        WHEN {col} IN ('JobHeldUser', 'JobHeldAdmin') OR {col} LIKE '%Hold%' THEN 'held'
        WHEN {col} LIKE 'Priority%' THEN 'priority'
        WHEN {col} = 'Resources' OR {col} LIKE 'Nodes_required%' THEN 'resources'
        WHEN {col} LIKE 'QOS%' OR {col} LIKE 'Assoc%' OR {col} LIKE 'MaxJob%' OR {col} LIKE 'MaxCpu%'
             OR {col} LIKE 'MaxGRES%' OR {col} LIKE 'MaxTRES%' OR {col} LIKE 'Partition%Limit'
             OR {col} LIKE '%Limit' THEN 'limits'
        WHEN {col} IN ('ReqNodeNotAvail', 'NodeDown', 'PartitionDown', 'PartitionInactive', 'BadConstraints',
                       'PartitionConfig', 'FrontEndDown')
             OR {col} LIKE 'ReqNodeNotAvail%' THEN 'nodes unavailable'
        WHEN {col} LIKE 'Resv%' OR {col} = 'Reservation' THEN 'reservation'
        ELSE 'other' END"""
