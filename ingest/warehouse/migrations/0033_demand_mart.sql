-- Daily demand marts (models/demand.py `build`, run by `gpuledger refresh`): what demand.demand_table computes
-- from the jobs for daily buckets, so forecasts and dashboards read it instead of staging every job.
-- A scope is one cluster, or '*' (every cluster together, written only when there are several).

CREATE TABLE demand_scopes (
    scope     VARCHAR PRIMARY KEY,
    first_ts  TIMESTAMP NOT NULL,     -- UTC midnight of the first submit
    end_ts    TIMESTAMP NOT NULL      -- UTC midnight of the (earliest) horizon: days before it are complete
);

CREATE TABLE demand_day (             -- every cluster, pool, partition and team x every day of the scope
    scope               VARCHAR NOT NULL,
    cluster             VARCHAR NOT NULL,
    pool                VARCHAR NOT NULL,
    partition           VARCHAR NOT NULL,
    team                VARCHAR NOT NULL,
    ts                  TIMESTAMP NOT NULL,
    served_gpu_hours    DOUBLE NOT NULL,   -- unrounded: readers sum, then round to 1e-9
    demanded_gpu_hours  DOUBLE NOT NULL,
    estimated_gpu_hours DOUBLE NOT NULL
);

CREATE TABLE demand_peak_day (        -- peak running + pending GPUs: per cluster and pool (a cluster's scope),
    scope      VARCHAR NOT NULL,      -- per pool with cluster NULL (scope '*')
    cluster    VARCHAR,
    pool       VARCHAR NOT NULL,
    ts         TIMESTAMP NOT NULL,
    peak_gpus  DOUBLE NOT NULL
);
