-- 0011_efficiency: marts of GPU efficiency per job, built by models/efficiency.py from gpu_samples
-- (attribution in models/attribution.py). Columns are documented in docs/SCHEMA.md ("Efficiency marts").
-- GPU-seconds throughout; activity values are fractions 0..1 (see 0010_telemetry).

-- One row per GPU job that has started (ngpus > 0). Jobs without telemetry have telemetry_gpu_s = 0 and
-- NULL activity: they are never 0 % busy.
CREATE TABLE gpu_efficiency_job (
    job_uid          BIGINT PRIMARY KEY,
    cluster          VARCHAR NOT NULL,
    window_start     TIMESTAMP NOT NULL,   -- the job's start
    window_end       TIMESTAMP NOT NULL,   -- its end, or the data horizon while it runs
    alloc_gpu_s      DOUBLE NOT NULL,      -- ngpus x (window_end - window_start)
    telemetry_gpu_s  DOUBLE NOT NULL,      -- allocated GPU-seconds that telemetry covers
    active_gpu_s     DOUBLE NOT NULL,      -- sum of activity x covered GPU-seconds
    idle_alloc_gpu_s DOUBLE NOT NULL,      -- covered GPU-seconds in stretches >= 5 min at zero activity
    metric           VARCHAR,              -- SM_ACTIVE | GR_ENGINE_ACTIVE | GPU_UTIL; NULL without telemetry
    act_mean         DOUBLE,               -- active_gpu_s / telemetry_gpu_s (fraction)
    act_p95          DOUBLE,               -- GPU-second-weighted 95th percentile of activity (fraction)
    fb_max_mib       DOUBLE,               -- memory high-water mark over the job's devices, MiB
    energy_j         DOUBLE,               -- sum of power x covered GPU-seconds, joules
    method           VARCHAR NOT NULL,     -- exporter-label | gpu-index | node-share | none (most GPU-seconds)
    label_gpu_s      DOUBLE NOT NULL,      -- covered GPU-seconds attributed by the exporter's job label
    index_gpu_s      DOUBLE NOT NULL,      -- ... by known GPU indices (job_gpu_indices)
    share_gpu_s      DOUBLE NOT NULL,      -- ... by node and time overlap, shared in proportion to GPUs
    rollup_gpu_s     DOUBLE NOT NULL,      -- covered GPU-seconds read from the 5-minute rollup (raw pruned)
    n_devices        INTEGER NOT NULL,     -- distinct devices whose readings reached the job
    computed_at      TIMESTAMP NOT NULL
);

-- The same, split by UTC hour, so any bucket (hour..month) and month-split chargeback add up exactly.
CREATE TABLE gpu_efficiency_job_hour (
    job_uid          BIGINT NOT NULL,
    cluster          VARCHAR NOT NULL,
    hour             TIMESTAMP NOT NULL,   -- [hour, hour + 1 h), UTC
    alloc_gpu_s      DOUBLE NOT NULL,
    telemetry_gpu_s  DOUBLE NOT NULL,
    active_gpu_s     DOUBLE NOT NULL,
    idle_alloc_gpu_s DOUBLE NOT NULL,
    fb_max_mib       DOUBLE,
    energy_j         DOUBLE,
    label_gpu_s      DOUBLE NOT NULL,
    index_gpu_s      DOUBLE NOT NULL,
    share_gpu_s      DOUBLE NOT NULL,
    hist             DOUBLE[]              -- 21 bins of covered GPU-seconds: [0] activity < 0.5 %, [k] (k=1..20)
                                           -- activity in [5(k-1) %, 5k %) (bin 1 from 0.5 %; bin 20 includes 100 %)
);

-- Where each incremental mart refresh stopped.
CREATE TABLE gpu_mart_state (
    mart         VARCHAR PRIMARY KEY,
    last_run_id  BIGINT NOT NULL,          -- highest ingest run folded in
    refreshed_at TIMESTAMP NOT NULL
);
