-- 0071_traces: what public traces carry beyond the canonical tables (see docs/TRACES.md).

-- Kubernetes pod specs of GPU-sharing traces (Alibaba openb), exact to the milli-CPU and milli-GPU; the pod is
-- also a `jobs` row (job_id_raw = pod name) with ncpus rounded up and ngpus = num_gpu * gpu_milli / 1000.
CREATE TABLE trace_pods (
    cluster       VARCHAR NOT NULL,
    pod           VARCHAR NOT NULL,
    cpu_milli     INTEGER,
    memory_mib    BIGINT,
    num_gpu       INTEGER,
    gpu_milli     INTEGER,          -- per-GPU share requested (1000 = a whole GPU)
    gpu_spec      VARCHAR,          -- GPU types the pod may run on, '|'-separated; NULL = any
    qos           VARCHAR,          -- LS, BE, Burstable, Guaranteed
    pod_phase     VARCHAR,          -- last phase the trace saw: Pending, Running, Succeeded, Failed
    creation_s    BIGINT,           -- seconds from the trace's start
    scheduled_s   BIGINT,
    deletion_s    BIGINT,
    ingest_run_id BIGINT NOT NULL
);

-- Cluster-level occupancy series (Philly via Helios: nodes running >= 1 job, per minute).
CREATE TABLE trace_node_occupancy (
    cluster       VARCHAR NOT NULL,
    ts            TIMESTAMP NOT NULL,   -- UTC, start of the minute
    active_nodes  INTEGER NOT NULL,
    total_nodes   INTEGER NOT NULL,
    ingest_run_id BIGINT NOT NULL
);

-- Virtual clusters (tenants with a node quota) of traces that have them (Philly).
CREATE TABLE trace_virtual_clusters (
    cluster       VARCHAR NOT NULL,
    vc            VARCHAR NOT NULL,
    nodes         INTEGER NOT NULL,
    ingest_run_id BIGINT NOT NULL
);
