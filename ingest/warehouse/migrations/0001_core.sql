-- 0001_core: the canonical accounting tables, the ingest audit, and cluster configuration.
-- Every column is documented in docs/SCHEMA.md. Timestamps are UTC (TIMESTAMP without zone);
-- durations are seconds; GPU counts are DOUBLE so GPU-sharing traces can carry fractions.

CREATE SEQUENCE seq_ingest_run START 1;
CREATE SEQUENCE seq_job_uid START 1;

CREATE TABLE clusters (
    cluster     VARCHAR PRIMARY KEY,
    tz          VARCHAR NOT NULL DEFAULT 'UTC',   -- zone sacct prints local times in
    description VARCHAR
);

CREATE TABLE ingest_runs (
    run_id      BIGINT PRIMARY KEY,
    source      VARCHAR NOT NULL,                 -- sacct, nodes, events, prometheus, dcgm, ...
    input_name  VARCHAR NOT NULL,                 -- path, '-' for stdin, or the command that was run
    sha256      VARCHAR,                          -- of the input bytes
    bytes       BIGINT,
    cluster     VARCHAR,
    lines_read  BIGINT NOT NULL DEFAULT 0,
    loaded      BIGINT NOT NULL DEFAULT 0,
    skipped     BIGINT NOT NULL DEFAULT 0,
    rejected    BIGINT NOT NULL DEFAULT 0,
    inserted    BIGINT NOT NULL DEFAULT 0,
    updated     BIGINT NOT NULL DEFAULT 0,
    unchanged   BIGINT NOT NULL DEFAULT 0,
    started_at  TIMESTAMP NOT NULL,
    finished_at TIMESTAMP,
    status      VARCHAR NOT NULL,                 -- ok | failed
    message     VARCHAR,
    options     VARCHAR                           -- JSON of the options that shaped the parse
);

CREATE TABLE ingest_skips (
    run_id        BIGINT NOT NULL,
    reason        VARCHAR NOT NULL,
    lines         BIGINT NOT NULL,
    first_line_no BIGINT
);

CREATE TABLE rejects (
    run_id  BIGINT NOT NULL,
    line_no BIGINT NOT NULL,
    field   VARCHAR,
    reason  VARCHAR NOT NULL,
    raw     VARCHAR
);

CREATE TABLE watermarks (
    source     VARCHAR NOT NULL,
    cluster    VARCHAR NOT NULL,
    value      TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    PRIMARY KEY (source, cluster)
);

CREATE TABLE jobs (
    job_uid          BIGINT NOT NULL,             -- surrogate key, stable once assigned
    cluster          VARCHAR NOT NULL,
    job_id           VARCHAR NOT NULL,            -- as sacct prints it: 123, 123_4, 123_[5-9], 123+0
    job_id_raw       VARCHAR NOT NULL,
    array_job_id     BIGINT,
    array_task_id    BIGINT,
    array_task_spec  VARCHAR,                     -- pending array ranges, e.g. '5-9,12'
    het_job_id       BIGINT,
    het_offset       INTEGER,
    user             VARCHAR,
    uid              BIGINT,
    "group"          VARCHAR,
    gid              BIGINT,
    account          VARCHAR,
    team             VARCHAR,                     -- resolved from governance; NULL = unmapped
    partition        VARCHAR,
    qos              VARCHAR,
    state            VARCHAR NOT NULL,            -- normalised, see docs/SCHEMA.md
    state_raw        VARCHAR,
    cancelled_by_uid BIGINT,
    exit_code        INTEGER,
    signal           INTEGER,
    submit           TIMESTAMP,
    eligible         TIMESTAMP,
    start            TIMESTAMP,
    "end"            TIMESTAMP,
    elapsed_s        BIGINT,
    timelimit_s      BIGINT,                      -- NULL = UNLIMITED / Partition_Limit / unknown
    timelimit_raw    VARCHAR,
    nnodes           INTEGER,
    ncpus            INTEGER,
    req_cpus         INTEGER,
    ngpus            DOUBLE NOT NULL DEFAULT 0,   -- allocated GPUs (effective: num_gpu*gpu_milli/1000)
    gpu_milli        INTEGER,                     -- per-GPU share for GPU-sharing traces; NULL = whole GPUs
    req_gpus         DOUBLE,
    gpu_type         VARCHAR,
    mem_bytes        BIGINT,
    req_mem_bytes    BIGINT,
    billing          DOUBLE,
    alloc_tres       VARCHAR,
    req_tres         VARCHAR,
    nodelist         VARCHAR,
    job_name         VARCHAR,
    extra            VARCHAR,                     -- JSON object of input columns we do not model
    source           VARCHAR NOT NULL,
    ingest_run_id    BIGINT NOT NULL,
    updated_run_id   BIGINT
);

CREATE TABLE job_nodes (
    job_uid      BIGINT NOT NULL,
    cluster      VARCHAR NOT NULL,
    job_id_raw   VARCHAR NOT NULL,
    submit       TIMESTAMP,
    node         VARCHAR NOT NULL,
    gpus_on_node DOUBLE NOT NULL
);

CREATE TABLE nodes (
    cluster       VARCHAR NOT NULL,
    node          VARCHAR NOT NULL,
    partitions    VARCHAR,                        -- comma-separated
    gpu_type      VARCHAR,                        -- '+'-joined when a node has several types
    gpus          INTEGER NOT NULL DEFAULT 0,
    cpus          INTEGER,
    mem_bytes     BIGINT,
    gres          VARCHAR,                        -- as reported
    features      VARCHAR,
    valid_from    TIMESTAMP,                      -- NULL = since before our records begin
    valid_to      TIMESTAMP,                      -- NULL = still valid
    ingest_run_id BIGINT NOT NULL
);

CREATE TABLE node_states (
    -- the state each node snapshot reported, kept for audit and for 'now' views
    cluster       VARCHAR NOT NULL,
    node          VARCHAR NOT NULL,
    observed_at   TIMESTAMP NOT NULL,
    state         VARCHAR NOT NULL,
    state_raw     VARCHAR,
    reason        VARCHAR,
    gpus_alloc    INTEGER,
    ingest_run_id BIGINT NOT NULL
);

CREATE TABLE node_events (
    cluster       VARCHAR NOT NULL,
    node          VARCHAR NOT NULL,
    state         VARCHAR NOT NULL,               -- DOWN | DRAIN | MAINT | FAIL | POWERED_DOWN | ...
    state_raw     VARCHAR,
    start         TIMESTAMP NOT NULL,
    "end"         TIMESTAMP,                      -- NULL = still open
    reason        VARCHAR,
    "user"        VARCHAR,
    source        VARCHAR NOT NULL,
    ingest_run_id BIGINT NOT NULL
);

CREATE TABLE teams (
    team        VARCHAR PRIMARY KEY,
    cost_center VARCHAR,
    display     VARCHAR
);

-- account/user -> team mapping; patterns are SQL LIKE patterns, lower priority number wins
CREATE TABLE team_map (
    team            VARCHAR NOT NULL,
    account_pattern VARCHAR,
    user_pattern    VARCHAR,
    cluster         VARCHAR,
    priority        INTEGER NOT NULL DEFAULT 100
);
