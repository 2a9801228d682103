"""SQL over the occupancy timeline marts' shape (models/marts/timeline.py builds them; docs/SCHEMA.md), shared by
the kernels and readers that sweep or clip them."""
from __future__ import annotations

from models.definitions.times import bucket_interval, bucket_sql

#: tl_node_segments with their class columns: cluster, nid, t0, t1, gpus, gpu_type, partitions, avail, alloc,
#: whole_gpus, frac_milli, jobs. Filters on t0/t1 given by callers are pushed below the join.
SEGMENTS_SQL = """
    SELECT s.cluster, s.nid, s.t0, s.t1, k.gpus, k.gpu_type, k.partitions, k.avail,
           s.whole_gpus + s.frac_milli / 1000.0 AS alloc, s.whole_gpus, s.frac_milli, s.jobs
    FROM tl_node_segments s JOIN tl_classes k ON k.class_id = s.class_id"""


def job_alloc_in_buckets_sql(bucket: str) -> str:
    """SQL over tl_job_alloc clipped to [$s, $e) and split into buckets: one row per job piece and bucket with
    ``bucket`` and ``gpu_s`` (GPU-seconds in that bucket), plus tl_job_alloc's columns."""
    iv = bucket_interval(bucket)
    return f"""
        SELECT a.*, (epoch_us(least(a.t1, $e, b + {iv})) - epoch_us(greatest(a.t0, $s, b))) / 1e6 * a.gpus AS gpu_s,
               b AS bucket
        FROM (SELECT *, unnest(generate_series({bucket_sql(bucket, 'greatest(t0, $s)')},
                                               least(t1, $e) - INTERVAL 1 MICROSECOND, {iv})) AS b
              FROM tl_job_alloc WHERE t1 > $s AND t0 < $e) a"""
