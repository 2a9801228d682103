-- 0030_timeline: the occupancy timeline marts (models/timeline.py builds them; docs/SCHEMA.md documents them).
-- Every interval is half-open [t0, t1), UTC, and lies inside the cluster's data span [data_start, horizon).

-- What the timeline was last built from: the newest ingest run folded in, per cluster span.
CREATE TABLE tl_clusters (
    cluster      VARCHAR PRIMARY KEY,
    data_start   TIMESTAMP,                -- earliest job start (else submit) in the warehouse
    horizon      TIMESTAMP,                -- latest time the accounting covers; running jobs count up to here
    last_run_id  BIGINT,                   -- newest ingest run reflected in the marts
    refreshed_at TIMESTAMP
);

-- Per node: inventory class and availability, piecewise constant. avail: up | down | planned_down | absent
-- ('absent' = the node ran jobs but no inventory row covers that time; its capacity is unknown, so 0).
CREATE TABLE tl_node_state (
    cluster    VARCHAR NOT NULL,
    node       VARCHAR NOT NULL,
    t0         TIMESTAMP NOT NULL,
    t1         TIMESTAMP NOT NULL,
    gpus       INTEGER NOT NULL,
    gpu_type   VARCHAR,
    partitions VARCHAR,
    avail      VARCHAR NOT NULL,
    reason     VARCHAR                      -- node_events.state that made it unavailable
);

-- Per job and node: the GPUs the job held there and when, split where the node's class changed.
CREATE TABLE tl_job_alloc (
    job_uid    BIGINT NOT NULL,
    cluster    VARCHAR NOT NULL,
    node       VARCHAR NOT NULL,
    t0         TIMESTAMP NOT NULL,
    t1         TIMESTAMP NOT NULL,         -- end, or the horizon while the job runs
    is_open    BOOLEAN NOT NULL,           -- still running at the horizon
    gpus       DOUBLE NOT NULL,            -- whole_gpus + frac_milli / 1000
    whole_gpus DOUBLE NOT NULL,
    frac_milli BIGINT NOT NULL,            -- milli-GPUs of GPU-sharing jobs (gpu_milli < 1000)
    gpu_type   VARCHAR,                    -- the node's pool at the time
    partitions VARCHAR                     -- the node's partitions at the time
);

-- Per node: allocation and availability together, piecewise constant (the occupancy timeline).
CREATE TABLE tl_node_segments (
    cluster    VARCHAR NOT NULL,
    node       VARCHAR NOT NULL,
    t0         TIMESTAMP NOT NULL,
    t1         TIMESTAMP NOT NULL,
    gpus       INTEGER NOT NULL,
    gpu_type   VARCHAR,
    partitions VARCHAR,
    avail      VARCHAR NOT NULL,
    alloc      DOUBLE NOT NULL,            -- GPUs held by jobs (may exceed gpus when the inventory is wrong)
    whole_gpus DOUBLE NOT NULL,
    frac_milli BIGINT NOT NULL,
    jobs       INTEGER NOT NULL
);

-- Hourly rollup of tl_node_segments per node class (what sreport rolls up, per hour).
CREATE TABLE tl_hourly (
    cluster         VARCHAR NOT NULL,
    gpu_type        VARCHAR,
    partitions      VARCHAR,
    hour            TIMESTAMP NOT NULL,
    capacity_s      DOUBLE NOT NULL,       -- GPU-seconds installed
    alloc_s         DOUBLE NOT NULL,       -- GPU-seconds held by jobs
    alloc_in_s      DOUBLE NOT NULL,       -- the part within installed GPUs
    idle_s          DOUBLE NOT NULL,       -- free GPU-seconds on available nodes
    down_s          DOUBLE NOT NULL,       -- free GPU-seconds on DOWN/DRAIN/FAIL... nodes
    planned_down_s  DOUBLE NOT NULL        -- free GPU-seconds on MAINT/POWERED_DOWN... nodes
);
