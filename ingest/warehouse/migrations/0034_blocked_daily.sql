-- 0034_blocked_daily: queue wait explained by fragmentation, per job and UTC day (models/fragmentation_blocked.py
-- `rollup`, a step of the timeline build), so dashboards and reports over day-aligned windows sum rows instead
-- of sweeping every pending job against the 5-minute sample grid. Sample counts at the default 5-minute
-- interval: a day is 288 samples; hours = samples x 300 / 3600.
-- The timeline marts are rebuilt from scratch on the next refresh (tl_clusters emptied), which fills it.

CREATE TABLE tl_blocked_daily (
    cluster       VARCHAR NOT NULL,
    day           TIMESTAMP NOT NULL,    -- UTC midnight
    job_uid       BIGINT NOT NULL,
    job_id        VARCHAR,
    team          VARCHAR NOT NULL,      -- jobs.team, '(unmapped)' when NULL
    account       VARCHAR,
    "user"        VARCHAR,
    partition     VARCHAR,               -- jobs.partition as submitted (may list several)
    gpu_type      VARCHAR,               -- typed GPU request; NULL = any pool
    gpus          DOUBLE NOT NULL,       -- GPUs requested (fractional for GPU-sharing jobs)
    nnodes        INTEGER NOT NULL,
    size_class    VARCHAR NOT NULL,
    samples       INTEGER NOT NULL,      -- pending sample times in the day
    placeable     INTEGER NOT NULL,      -- of which: some node(s) could have taken it
    fragmentation INTEGER NOT NULL,      -- enough GPUs free in its candidate nodes, but scattered
    capacity      INTEGER NOT NULL       -- too few GPUs free (the rest: no inventory known, 'unknown')
);

DELETE FROM tl_clusters;
