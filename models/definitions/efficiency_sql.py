"""SQL shared by the efficiency marts' builders and their readers: one definition of a GPU job's pool (the reports
in models/metrics/efficiency.py group by it; models/marts/efficiency_notel.py stores it per day)."""
from __future__ import annotations

from models.definitions.labels import UNTYPED

#: The grouping columns of a job the efficiency reports offer besides the pool (jobs ``j``).
JOB_KEYS = ("cluster", "user", "team", "account", "partition", "qos")


def with_pool(src: str) -> str:
    """``src``'s rows (a relation with ``job_uid`` and ``_job_gpu_type``, the job's typed GRES) with ``gpu_type``:
    Slurm's typed GRES, else the node's pool in the inventory, else the model the exporter reports, else
    (untyped). ``job_nodes`` is as long as the job table: it is looked up only for the rows without a typed GRES."""
    return f"""
        SELECT h.* EXCLUDE (_job_gpu_type), coalesce(h._job_gpu_type, gt.gpu_type, gm.model, '{UNTYPED}') AS gpu_type
        FROM {src} h
        LEFT JOIN (SELECT jn.job_uid, min(n.gpu_type) AS gpu_type FROM job_nodes jn
                   JOIN nodes n ON n.cluster = jn.cluster AND n.node = jn.node
                   WHERE jn.job_uid IN (SELECT job_uid FROM {src} WHERE _job_gpu_type IS NULL) GROUP BY 1) gt
          USING (job_uid)
        LEFT JOIN (SELECT jn.job_uid, min(d.model) AS model FROM job_nodes jn
                   JOIN gpu_devices d ON d.cluster = jn.cluster AND d.node = jn.node
                   WHERE jn.job_uid IN (SELECT job_uid FROM {src} WHERE _job_gpu_type IS NULL) GROUP BY 1) gm
          USING (job_uid)"""
