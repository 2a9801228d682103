-- 0095: why jobs wait and who holds reserved GPUs (issue 16 parts 4-5). Every column: docs/SCHEMA.md.

-- One row per job line of a `squeue` snapshot (ingest/squeue.py). A snapshot is (cluster, captured_at);
-- a pending job's reason holds from its snapshot until the cluster's next snapshot (docs/METRICS.md, "Why jobs pend").
CREATE TABLE squeue_snapshots (
    cluster       VARCHAR NOT NULL,
    captured_at   TIMESTAMP NOT NULL,             -- UTC, when squeue ran
    job_id        VARCHAR NOT NULL,               -- as squeue prints it: 123, 123_4, 123_[5-9]
    state         VARCHAR NOT NULL,               -- PENDING, RUNNING, ... (squeue's long state)
    reason        VARCHAR,                        -- squeue's %r: Priority, Resources, Dependency, QOSMax..., None
    gpus          DOUBLE,                         -- GPUs the job asks for (TRES alloc/per job/per node x nodes)
    nnodes        INTEGER,
    partition     VARCHAR,
    account       VARCHAR,
    "user"        VARCHAR,
    qos           VARCHAR,
    submit        TIMESTAMP,
    reservation   VARCHAR,
    job_name      VARCHAR,
    ingest_run_id BIGINT NOT NULL
);

-- Advance reservations (ingest/reservations.py), from `scontrol show reservation -o` (users, accounts, flags) and
-- `sacctmgr -P show reservation` (history, real end). Key: (cluster, name, start).
CREATE TABLE reservations (
    cluster       VARCHAR NOT NULL,
    name          VARCHAR NOT NULL,
    start         TIMESTAMP NOT NULL,
    "end"         TIMESTAMP NOT NULL,
    nodelist      VARCHAR,                        -- as printed (hostlist expression)
    nodes         VARCHAR,                        -- expanded, comma-separated
    gpus          DOUBLE,                         -- from TRES gres/gpu=N; NULL = not printed (see reserved_gpus)
    tres          VARCHAR,
    users         VARCHAR,                        -- comma-separated; NULL = (null)
    accounts      VARCHAR,
    flags         VARCHAR,
    source        VARCHAR NOT NULL,               -- scontrol | sacctmgr
    ingest_run_id BIGINT NOT NULL
);
