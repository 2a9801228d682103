-- 0140: the efficiency mart's state for merging new telemetry into open jobs (#15 part 2; models/marts/
-- efficiency.py). Kept only for open GPU jobs on one node; a job's rows go when it ends (its last refresh
-- re-attributes it whole). Documented in docs/SCHEMA.md ("Efficiency marts").

-- Per open job and UTC hour, what the job row needs that gpu_efficiency_job_hour does not add up to.
CREATE TABLE gpu_efficiency_open_hour (
    job_uid       BIGINT NOT NULL,
    hour          TIMESTAMP NOT NULL,
    cov_sm_gpu_s  DOUBLE NOT NULL,     -- attributed GPU-seconds with an SM_ACTIVE reading (the metric choice)
    cov_gr_gpu_s  DOUBLE NOT NULL,     -- ... with a GR_ENGINE_ACTIVE reading
    cov_gu_gpu_s  DOUBLE NOT NULL,     -- ... with a GPU_UTIL reading
    rollup_gpu_s  DOUBLE NOT NULL,     -- covered GPU-seconds read from the 5-minute rollup
    devices       STRUCT(node VARCHAR, gpu VARCHAR)[],   -- devices whose readings reached it (n_devices)
    acts          DOUBLE[],            -- distinct activity values of the hour (the job's metric) ...
    act_gpu_s     DOUBLE[]             -- ... and their covered GPU-seconds (the exact p95)
);

-- Per open job, the attribution of the hour its window ends in (device-minutes and shares): a refresh
-- re-attributes only from the cut on and takes the hour's earlier minutes from here.
CREATE TABLE gpu_efficiency_open_att (
    job_uid  BIGINT NOT NULL,
    node     VARCHAR NOT NULL,
    gpu      VARCHAR NOT NULL,
    mi       BIGINT NOT NULL,          -- epoch minute
    ov_s     DOUBLE NOT NULL,          -- the job's seconds in the minute
    share    DOUBLE NOT NULL,          -- of the device-minute
    meth     TINYINT NOT NULL          -- 1 exporter-label, 2 gpu-index, 3 node-share
);

-- The marts were built without this state: the next refresh rebuilds them whole (and writes it).
DELETE FROM mart_state WHERE mart = 'efficiency';
