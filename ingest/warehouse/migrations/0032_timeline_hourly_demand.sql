-- 0032_timeline_hourly_demand: rollups of who held GPUs (per day) and of eligible waits (per hour), so
-- utilization by team / account / user and its planned (idle while jobs waited) figures read thousands of rows,
-- not millions of jobs. (Demand is daily: per user and hour it would be as large as the job table.)
-- Built by models/timeline_mart.py with the other tl_* marts; rebuilt from scratch on the next refresh.

-- GPU-seconds held per UTC day, node class (pool, partitions) and job attributes. A governance reload that
-- changes jobs.team is noticed by tl_clusters.team_fp and rebuilds the cluster's rows.
CREATE TABLE tl_demand_daily (
    cluster       VARCHAR NOT NULL,
    day           TIMESTAMP NOT NULL,      -- UTC midnight
    gpu_type      VARCHAR,                 -- the node's pool
    partitions    VARCHAR,                 -- the node's partitions
    team          VARCHAR,                 -- jobs.team (NULL = unmapped)
    account       VARCHAR,
    "user"        VARCHAR,
    job_partition VARCHAR,                 -- jobs.partition
    qos           VARCHAR,
    gpu_s         DOUBLE NOT NULL          -- GPU-seconds held in the day
);

-- GPU-seconds of eligible waits per hour and request (the partitions a job named, its typed GPU request).
CREATE TABLE tl_pending_hourly (
    cluster   VARCHAR NOT NULL,
    hour      TIMESTAMP NOT NULL,
    partition VARCHAR,                     -- jobs.partition as submitted (may list several)
    gpu_type  VARCHAR,                     -- jobs.gpu_type (typed request); NULL = any pool
    pend_s    DOUBLE NOT NULL              -- requested GPUs x seconds waited after eligibility
);

ALTER TABLE tl_clusters ADD COLUMN team_fp UBIGINT;   -- fingerprint of jobs.team when demand was rolled up

DELETE FROM tl_clusters;
