"""What ended a job and what its end cost, once: the cause of a job's end (node failure, GPU XID class, other
outage, preemption, requeue, timeout, user failure) and the XID classes of NVIDIA's catalogue.

The loss mart (models/marts/losses.py) classifies every ended GPU job with :func:`cause_sql`; other models
(preemption and requeue views) take "preemption" and "requeue" from :func:`state_cause_sql` rather than
defining them again. docs/METRICS.md ("Losses") gives the rules and the sources."""
from __future__ import annotations

from models.definitions.jobs_sql import sql_list

NODE_FAILURE, GPU_XID, OUTAGE = "node_failure", "gpu_xid", "outage"
PREEMPTION, REQUEUE, TIMEOUT, USER_FAILURE = "preemption", "requeue", "timeout", "user_failure"
#: Every cause, in the order reports list them.
CAUSES = (NODE_FAILURE, GPU_XID, OUTAGE, PREEMPTION, REQUEUE, TIMEOUT, USER_FAILURE)
#: Causes that are failures of the machine (not of the job or of the scheduler's policy).
HARDWARE_CAUSES = (NODE_FAILURE, GPU_XID, OUTAGE)

#: A FAILED/CANCELLED end this close (seconds) to the start of an outage on one of the job's nodes is the outage's.
OUTAGE_GRACE_S = 600
#: An XID this long after a job's end still explains it (the exporter's scrape and fold lag a minute or two).
XID_GRACE_S = 120

#: States that end a job by the node: NODE_FAIL, and BOOT_FAIL (the node failed to boot for it).
NODE_FAIL_STATES = ("NODE_FAIL", "BOOT_FAIL")
#: States an outage or an XID can explain (a user-visible failure or a cancel by an operator).
EXPLAINABLE_STATES = ("NODE_FAIL", "BOOT_FAIL", "FAILED", "CANCELLED", "REQUEUED", "OUT_OF_MEMORY")
#: States whose end counts as the job failing (repeat offenders' rate).
FAILED_STATES = ("NODE_FAIL", "BOOT_FAIL", "FAILED")

#: XID code -> class, from NVIDIA's Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/) and the dynamic
#: page retirement / row remapping pages: memory = DBE/ECC, page retirement and row remapping; bus = fallen off
#: the bus; nvlink = NVLink errors; application = errors the catalogue resolves by restarting the application
#: (illegal address, page fault, stopped processing, preemptive cleanup), i.e. the job's own fault; gsp = GSP
#: firmware timeouts; anything else = 'other'.
XID_CLASSES = {48: "memory", 63: "memory", 64: "memory", 92: "memory", 94: "memory", 95: "memory",
               140: "memory", 79: "bus", 74: "nvlink", 13: "application", 31: "application", 43: "application",
               45: "application", 119: "gsp", 120: "gsp"}
APPLICATION = "application"
#: XIDs that record a repair the GPU made (63: a page retirement / row remapping recorded): memory class, but
#: no reason by themselves to pull the node (64, the failure to record one, is).
RECORDED_REPAIR_XIDS = (63,)


def xid_class_sql(code: str) -> str:
    """SQL: the class of an XID code column/expression (see :data:`XID_CLASSES`)."""
    whens = " ".join(f"WHEN {k} THEN '{v}'" for k, v in sorted(XID_CLASSES.items()))
    return f"CASE {code} {whens} ELSE 'other' END"


def reason_xid_sql(reason: str) -> str:
    """SQL: the XID code an outage reason names ('GPU Xid 79: fallen off the bus' -> 79), else NULL."""
    return f"TRY_CAST(nullif(regexp_extract({reason}, '(?i)xid\\s*(\\d+)', 1), '') AS INTEGER)"


def state_cause_sql(j: str = "j") -> str:
    """SQL: the cause an end state alone gives (no events consulted): NODE_FAIL/BOOT_FAIL node_failure,
    PREEMPTED preemption, REQUEUED requeue, TIMEOUT/DEADLINE timeout, FAILED/OUT_OF_MEMORY user_failure; NULL for
    every other state (COMPLETED, CANCELLED by a user, still running)."""
    return f"""CASE WHEN {j}.state IN {sql_list(NODE_FAIL_STATES)} THEN '{NODE_FAILURE}'
                    WHEN {j}.state = 'PREEMPTED' THEN '{PREEMPTION}'
                    WHEN {j}.state = 'REQUEUED' THEN '{REQUEUE}'
                    WHEN {j}.state IN ('TIMEOUT', 'DEADLINE') THEN '{TIMEOUT}'
                    WHEN {j}.state IN ('FAILED', 'OUT_OF_MEMORY') THEN '{USER_FAILURE}' END"""


def cause_sql(j: str = "j", x: str = "x", o: str = "o") -> str:
    """SQL: the cause of a job's end, given ``x`` (the job's worst XID: ``x.code``, ``x.cls``; NULL columns when
    none) and ``o`` (the outage that explains it: ``o.xid`` from its reason, NULL when none).

    In order: a hardware XID (not application class) on one of its nodes during the job, or an outage whose
    reason names one -> gpu_xid; NODE_FAIL/BOOT_FAIL -> node_failure; PREEMPTED -> preemption; REQUEUED ->
    requeue; FAILED/CANCELLED near an outage -> outage; then the state alone (:func:`state_cause_sql`)."""
    explain = f"{j}.state IN {sql_list(EXPLAINABLE_STATES)}"
    return f"""CASE
        WHEN {explain} AND {x}.cls IS NOT NULL AND {x}.cls <> '{APPLICATION}' THEN '{GPU_XID}'
        WHEN {explain} AND {o}.xid IS NOT NULL AND {xid_class_sql(o + '.xid')} <> '{APPLICATION}' THEN '{GPU_XID}'
        WHEN {j}.state IN ('PREEMPTED', 'REQUEUED') OR {j}.state IN {sql_list(NODE_FAIL_STATES)}
             THEN {state_cause_sql(j)}
        WHEN {j}.state IN ('FAILED', 'CANCELLED') AND {o}.node IS NOT NULL THEN '{OUTAGE}'
        ELSE {state_cause_sql(j)} END"""


# ---------------------------------------------------------------- work lost: the checkpoint rule (one definition)

#: How a job's lost work was measured: since its last checkpoint (an interval known from the governance file's
#: ``[[checkpoints]]``), or since its start (no interval known: an upper bound).
CHECKPOINT, SINCE_START = "checkpoint", "since start"


def checkpoint_interval_sql(src: str, team: str = "team", job_name: str = "job_name") -> str:
    """SQL: ``(job_uid, interval_s)`` for the jobs of relation ``src`` (columns job_uid, ``team`` = the job's
    team key as stored in ``jobs.team``, ``job_name``) that a governance ``[[checkpoints]]`` rule covers: a
    job-name rule over a team rule (``priority``), then the shortest interval. Jobs no rule covers are absent."""
    return f"""(SELECT job_uid, interval_s FROM (
        SELECT l.job_uid, c.interval_s,
               row_number() OVER (PARTITION BY l.job_uid ORDER BY c.priority DESC, c.interval_s) AS rn
        FROM {src} l JOIN checkpoint_intervals c
          ON (c.team IS NULL OR c.team = l.{team})
         AND (c.job_name_like IS NULL OR l.{job_name} LIKE c.job_name_like ESCAPE '\\'))
        WHERE rn = 1)"""


def lost_from_sql(start: str, end: str, interval_s: str) -> str:
    """SQL: the instant (UTC) from which a job's work is lost: its last checkpoint before ``end`` when
    ``interval_s`` (seconds, checkpoints every interval from ``start``) is not NULL, else ``start``. Work lost =
    GPUs x (end - this), in GPU-seconds; e.g. 1 GPU for 4,800 s with 1-h checkpoints loses 1,200 GPU-s."""
    return f"""CASE WHEN {interval_s} IS NULL THEN {start}
        ELSE {start} + to_seconds(floor(epoch({end} - {start}) / {interval_s}) * {interval_s}) END"""


def basis_sql(interval_s: str) -> str:
    """SQL: the basis of :func:`lost_from_sql` ('checkpoint' or 'since start')."""
    return f"CASE WHEN {interval_s} IS NULL THEN '{SINCE_START}' ELSE '{CHECKPOINT}' END"
