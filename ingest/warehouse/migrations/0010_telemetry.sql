-- 0010_telemetry: GPU telemetry (DCGM exporter via Prometheus or scraped files, nvidia-smi CSV).
-- Every column is documented in docs/SCHEMA.md ("Telemetry").
--
-- ONE SCALE for activity: gpu_util, sm_active, gr_engine_active and tensor_active are FRACTIONS 0..1.
-- DCGM_FI_DEV_GPU_UTIL and nvidia-smi utilization.gpu arrive in percent (0..100) and are divided by 100 on
-- ingest; the DCGM_FI_PROF_* ratios arrive as 0..1 and are stored as they are. Reports multiply by 100.

-- One row per device and UTC minute. A row stands for [ts, ts + interval_s).
CREATE TABLE gpu_samples (
    cluster          VARCHAR NOT NULL,
    node             VARCHAR NOT NULL,      -- Hostname label (domain stripped), --node, or the instance host
    gpu              VARCHAR NOT NULL,      -- device key: '3' = GPU index 3; '3/mig13' = MIG GPU instance 13 of GPU 3
    ts               TIMESTAMP NOT NULL,    -- start of the UTC minute the reading fell in
    interval_s       INTEGER NOT NULL,      -- resolution: the row covers [ts, ts + interval_s); >= 60
    gpu_util         DOUBLE,                -- fraction 0..1 (DCGM_FI_DEV_GPU_UTIL / 100)
    sm_active        DOUBLE,                -- fraction 0..1 (DCGM_FI_PROF_SM_ACTIVE)
    gr_engine_active DOUBLE,                -- fraction 0..1 (DCGM_FI_PROF_GR_ENGINE_ACTIVE)
    tensor_active    DOUBLE,                -- fraction 0..1 (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)
    fb_used_mib      DOUBLE,                -- framebuffer used, MiB (max of the readings in the minute)
    power_w          DOUBLE,                -- watts (mean of the readings in the minute)
    temp_c           DOUBLE,                -- degrees Celsius
    xid              INTEGER,               -- last XID value read in the minute (0 = none)
    hpc_jobs         VARCHAR,               -- job id(s) named by the exporter (hpc_job label), comma-joined; NULL = none
    pod              VARCHAR,
    namespace        VARCHAR,
    container        VARCHAR,
    n_raw            INTEGER NOT NULL,      -- readings folded into the row (max over metrics)
    source           VARCHAR NOT NULL,      -- prometheus | dcgm | nvidia-smi
    ingest_run_id    BIGINT NOT NULL
);

-- 5-minute rollup kept for long ranges (raw rows may be pruned; this is not).
CREATE TABLE gpu_samples_5m (
    cluster               VARCHAR NOT NULL,
    node                  VARCHAR NOT NULL,
    gpu                   VARCHAR NOT NULL,
    bucket                TIMESTAMP NOT NULL,  -- [bucket, bucket + 5 min)
    covered_s             INTEGER NOT NULL,    -- seconds of the bucket covered by raw rows
    n_rows                INTEGER NOT NULL,
    gpu_util_min          DOUBLE, gpu_util_mean DOUBLE, gpu_util_max DOUBLE,
    sm_active_min         DOUBLE, sm_active_mean DOUBLE, sm_active_max DOUBLE,
    gr_engine_active_min  DOUBLE, gr_engine_active_mean DOUBLE, gr_engine_active_max DOUBLE,
    tensor_active_min     DOUBLE, tensor_active_mean DOUBLE, tensor_active_max DOUBLE,
    fb_used_mib_mean      DOUBLE, fb_used_mib_max DOUBLE,
    power_w_mean          DOUBLE, power_w_max DOUBLE,
    temp_c_mean           DOUBLE, temp_c_max DOUBLE,
    energy_j              DOUBLE,              -- sum of power_w x covered seconds
    xid_max               INTEGER
);

-- The devices telemetry has named, with what the exporter said about them.
CREATE TABLE gpu_devices (
    cluster       VARCHAR NOT NULL,
    node          VARCHAR NOT NULL,
    gpu           VARCHAR NOT NULL,
    gpu_index     INTEGER,                 -- physical GPU index (the `gpu` label / nvidia-smi index)
    mig_instance  INTEGER,                 -- GPU_I_ID; NULL for a whole GPU
    mig_profile   VARCHAR,                 -- GPU_I_PROFILE, e.g. 1g.5gb
    uuid          VARCHAR,
    model         VARCHAR,                 -- modelName / nvidia-smi name
    first_seen    TIMESTAMP NOT NULL,
    last_seen     TIMESTAMP NOT NULL,
    PRIMARY KEY (cluster, node, gpu)
);

-- XID errors as events: a reading whose XID value is nonzero and differs from the device's previous reading.
CREATE TABLE gpu_events (
    cluster       VARCHAR NOT NULL,
    node          VARCHAR NOT NULL,
    gpu           VARCHAR NOT NULL,
    ts            TIMESTAMP NOT NULL,
    kind          VARCHAR NOT NULL,        -- 'xid'
    code          INTEGER NOT NULL,        -- the XID number
    source        VARCHAR NOT NULL,
    ingest_run_id BIGINT NOT NULL
);

-- Which (cluster, node) time ranges each telemetry run wrote: drives incremental mart refresh.
CREATE TABLE gpu_ingest_ranges (
    run_id   BIGINT NOT NULL,
    cluster  VARCHAR NOT NULL,
    node     VARCHAR NOT NULL,
    min_ts   TIMESTAMP NOT NULL,
    max_ts   TIMESTAMP NOT NULL            -- end of the last row written (ts + interval_s)
);

-- GPU indices a job held on a node, from any source that knows them (scontrol show job -d GRES IDX,
-- slurmrestd gres_detail, a prolog's job map). Makes attribution exact without exporter job labels.
CREATE TABLE job_gpu_indices (
    cluster       VARCHAR NOT NULL,
    job_uid       BIGINT NOT NULL,
    node          VARCHAR NOT NULL,
    gpu           VARCHAR NOT NULL,        -- device key as in gpu_samples.gpu
    source        VARCHAR NOT NULL,
    ingest_run_id BIGINT
);
