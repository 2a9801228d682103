-- 0090_losses: where allocated GPU-hours were lost (issue 16 parts 1-3). Every column is documented in
-- docs/SCHEMA.md ("Losses and reliability"). Built by models/marts/losses.py and models/marts/efficiency.py in
-- `gpuledger refresh`; readers in models/metrics/losses.py and models/metrics/reliability.py.

-- Checkpoint intervals from the governance file's [[checkpoints]] (a job-name pattern wins over a team).
CREATE TABLE checkpoint_intervals (
    team          VARCHAR,                 -- NULL = any team
    job_name_like VARCHAR,                 -- SQL LIKE pattern from the glob; NULL = any job name
    interval_s    BIGINT NOT NULL,         -- the job writes a checkpoint every interval_s seconds of its run
    priority      INTEGER NOT NULL         -- higher wins (job-name rules 100, team rules 50)
);

-- One row per ended GPU job whose end lost work, with its cause (models/definitions/losses_sql.py).
CREATE TABLE loss_jobs (
    job_uid      BIGINT NOT NULL,
    cluster      VARCHAR NOT NULL,
    job_id       VARCHAR NOT NULL,
    team         VARCHAR NOT NULL,        -- the team label (jobs.team, else '(unmapped)'); a governance load rebuilds
    state        VARCHAR NOT NULL,        -- jobs.state
    cause        VARCHAR NOT NULL,        -- node_failure | gpu_xid | outage | preemption | requeue | timeout | user_failure
    detail       VARCHAR,                 -- XID class, outage reason or end state
    xid          INTEGER,                 -- the XID code behind a gpu_xid (or application) cause
    event_node   VARCHAR,                 -- node of the outage / XID that explains the end
    event_start  TIMESTAMP,               -- start of that outage (or the XID's time)
    start        TIMESTAMP NOT NULL,
    "end"        TIMESTAMP NOT NULL,
    ngpus        DOUBLE NOT NULL,
    alloc_gpu_s  DOUBLE NOT NULL,         -- GPU-seconds the job held (the timeline's pieces)
    lost_from    TIMESTAMP NOT NULL,      -- the last checkpoint before the end, else the start
    lost_gpu_s   DOUBLE NOT NULL,         -- GPU-seconds held in [lost_from, end)
    basis        VARCHAR NOT NULL,        -- 'checkpoint' | 'since start'
    checkpoint_s BIGINT                   -- the checkpoint interval used (NULL: none known)
);

-- The lost GPU-seconds of each loss_jobs row per node and UTC day (split like the timeline: node pieces), with
-- the job's team, cause and basis so that reports read this table alone.
CREATE TABLE loss_days (
    job_uid    BIGINT NOT NULL,
    cluster    VARCHAR NOT NULL,
    team       VARCHAR NOT NULL,
    cause      VARCHAR NOT NULL,
    basis      VARCHAR NOT NULL,
    node       VARCHAR NOT NULL,
    gpu_type   VARCHAR,                   -- the node's pool at the time (tl_job_alloc)
    day        TIMESTAMP NOT NULL,        -- UTC midnight
    lost_gpu_s DOUBLE NOT NULL
);

-- Jobs that ended on each node per UTC day, and how many ended failed (repeat offenders' test).
CREATE TABLE node_job_days (
    cluster     VARCHAR NOT NULL,
    node        VARCHAR NOT NULL,
    day         TIMESTAMP NOT NULL,
    jobs_ended  INTEGER NOT NULL,         -- GPU jobs that ended on the node that day (any final state)
    jobs_failed INTEGER NOT NULL          -- of them, those that ended NODE_FAIL, BOOT_FAIL or FAILED
);

-- Per multi-node GPU job and node: its activity against its peers in the same minutes (slow nodes), from the
-- efficiency attribution (models/kernels/attribution.py).
CREATE TABLE job_node_activity (
    job_uid        BIGINT NOT NULL,
    cluster        VARCHAR NOT NULL,
    node           VARCHAR NOT NULL,
    metric         VARCHAR NOT NULL,      -- SM_ACTIVE | GR_ENGINE_ACTIVE | GPU_UTIL (the job's)
    minutes        INTEGER NOT NULL,      -- minutes the node and at least one peer both reported
    minutes_below  INTEGER NOT NULL,      -- of them, minutes its activity was below its peers' mean by >= 0.10
    act_mean       DOUBLE,                -- its mean activity (0..1) over those minutes
    peer_act_mean  DOUBLE,                -- its peers' mean activity over the same minutes
    power_mean     DOUBLE,                -- watts per GPU, same minutes
    peer_power_mean DOUBLE
);
