-- The efficiency page's long windows (#20; models/marts/efficiency_notel.py): the allocated GPU-seconds of GPU
-- jobs without telemetry (gpu_efficiency_job.telemetry_gpu_s = 0), summed per UTC day and every grouping column
-- the efficiency reports offer, so a year's window reads ~1M day rows instead of expanding ~5M jobs. Readers
-- combine the whole days inside a window with the exact per-job computation of its partial edge days.

CREATE TABLE gpu_efficiency_notel_day (
    day          DATE NOT NULL,       -- UTC day
    cluster      VARCHAR NOT NULL,
    "user"       VARCHAR,
    team         VARCHAR,
    account      VARCHAR,
    partition    VARCHAR,
    qos          VARCHAR,
    gpu_type     VARCHAR NOT NULL,    -- typed GRES, else the node's pool, else the exporter's model, else (untyped)
    alloc_gpu_s  DOUBLE NOT NULL,     -- ngpus x seconds of the jobs' windows within the day
    jobs         BIGINT NOT NULL,     -- jobs whose window overlaps the day
    jobs_first   BIGINT NOT NULL      -- of those, jobs whose window starts on the day (distinct jobs over days
                                      -- D1..D2 = jobs of D1 + jobs_first of D1+1..D2)
);

-- The builder's own state: each rolled-up job as last summed (to find the days a changed job left), and the
-- fingerprints of what its last build depended on besides the jobs (team mapping, node pools, device models).
CREATE TABLE gpu_efficiency_notel_job (
    job_uid      BIGINT NOT NULL,
    window_start TIMESTAMP NOT NULL,
    window_end   TIMESTAMP NOT NULL,
    fp           UBIGINT NOT NULL     -- hash of the job's grouping columns and ngpus
);

CREATE TABLE gpu_efficiency_notel_state (
    key    VARCHAR PRIMARY KEY,
    value  UBIGINT NOT NULL
);
