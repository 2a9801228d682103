"""Usage decayed to an instant: every GPU-second weighted 2^(-(at - t) / half-life), integrated exactly over each
allocation piece (Slurm's PriorityDecayHalfLife, continuously). Shared by the fairness report
(models/metrics/fairness.py) and its daily rollup (models/marts/rollups.py)."""
from __future__ import annotations

from models.definitions.jobs_sql import team_sql
from models.definitions.labels import UNTYPED

#: Allocation pieces of cluster $c from $H on with the keys decayed usage is kept by (for tl_decay_daily):
#: (k, pool, team, account, t0, t1 in epoch microseconds, GPUs).
DECAY_PIECES_SQL = f"""
    SELECT hash(pool, team, account) AS k, pool, team, account, t0, t1, v
    FROM (SELECT coalesce(a.gpu_type, j.gpu_type, '{UNTYPED}') AS pool, {team_sql()} AS team,
                 j.account, epoch_us(greatest(a.t0, $H)) AS t0, epoch_us(a.t1) AS t1, a.gpus AS v
          FROM tl_job_alloc a JOIN jobs j USING (job_uid) WHERE a.cluster = $c AND a.t1 > $H AND a.gpus > 0)"""


def decay_integral_sql(weight: str, a: str = "a", z: str = "z") -> str:
    """SQL for the integral over [a, z) of ``weight`` x 2^(-($at - t) / $h) dt (seconds; $h the half-life in
    seconds, $at the instant decayed to)."""
    return (f"({weight} * $h / ln(2) * (pow(2, -(epoch($at) - epoch({z})) / $h) "
            f"- pow(2, -(epoch($at) - epoch({a})) / $h)))")
