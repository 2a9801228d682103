-- 0021_statements: closed chargeback periods. Written only by `gpuledger chargeback --close`
-- (models/chargeback.close_period); rows are never updated or deleted. docs/SCHEMA.md documents every column.
-- Money is DECIMAL(18,4) (enough for any currency's minor units); quantities are GPU-hours DECIMAL(38,6).

CREATE TABLE statements (
    period          VARCHAR PRIMARY KEY,   -- YYYY-MM
    closed_at       TIMESTAMP NOT NULL,    -- UTC
    content_hash    VARCHAR NOT NULL,      -- sha256 of the canonical CSV of every part below (see docs/METRICS.md)
    period_start    TIMESTAMP NOT NULL,    -- UTC start of the month in period_timezone
    period_end      TIMESTAMP NOT NULL,
    currency        VARCHAR NOT NULL,
    minor_units     INTEGER NOT NULL,
    idle_policy     VARCHAR NOT NULL,
    billing_basis   VARCHAR NOT NULL,
    header          VARCHAR NOT NULL,      -- JSON of the summary sheet's key/value rows
    policy_document VARCHAR NOT NULL       -- the governance in force, as canonical JSON (used to restate the period)
);

CREATE TABLE statement_lines (
    period          VARCHAR NOT NULL,
    line_no         INTEGER NOT NULL,
    kind            VARCHAR NOT NULL,      -- charge | adjustment
    adjusts_period  VARCHAR,               -- for adjustments: the closed period restated
    cluster         VARCHAR NOT NULL,
    team            VARCHAR,               -- NULL = unmapped (see account)
    account         VARCHAR,               -- the Slurm account of an unmapped line
    cost_center     VARCHAR,
    gpu_type        VARCHAR,
    jobs            BIGINT NOT NULL,
    gpu_hours       DECIMAL(38, 6) NOT NULL,
    billing_hours   DECIMAL(38, 6),
    rate            DECIMAL(18, 6),
    rate_note       VARCHAR,
    direct_cost     DECIMAL(18, 4) NOT NULL,
    idle_share      DECIMAL(18, 4) NOT NULL,
    total           DECIMAL(18, 4) NOT NULL,
    waste_gpu_hours DECIMAL(38, 6),        -- NULL = unavailable (no telemetry)
    waste_cost      DECIMAL(18, 4),
    telemetry_gpu_hours DECIMAL(38, 6),    -- GPU-hours of the line that telemetry covers; NULL = no telemetry at all
    job_refs        VARCHAR,               -- adjustments: the jobs that changed
    PRIMARY KEY (period, line_no)
);

CREATE TABLE statement_recon (
    period             VARCHAR NOT NULL,
    row_no             INTEGER NOT NULL,
    kind               VARCHAR NOT NULL,   -- pool | total | adjustment
    adjusts_period     VARCHAR,
    cluster            VARCHAR,
    gpu_type           VARCHAR,
    capacity_gpu_hours DECIMAL(38, 6),
    allocated_gpu_hours DECIMAL(38, 6),
    idle_gpu_hours     DECIMAL(38, 6),
    cluster_cost       DECIMAL(18, 4) NOT NULL,
    direct_cost        DECIMAL(18, 4) NOT NULL,
    idle_allocated     DECIMAL(18, 4) NOT NULL,
    unallocated_idle   DECIMAL(18, 4) NOT NULL,
    rate_variance      DECIMAL(18, 4) NOT NULL,
    rounding_residue   DECIMAL(18, 4) NOT NULL,
    difference         DECIMAL(18, 4) NOT NULL,
    note               VARCHAR,
    PRIMARY KEY (period, row_no)
);

CREATE TABLE statement_rates (
    period        VARCHAR NOT NULL,
    cluster       VARCHAR NOT NULL,
    team          VARCHAR,
    account       VARCHAR,
    cost_center   VARCHAR,
    gpu_type      VARCHAR,
    partition     VARCHAR,               -- the partition of a partition-specific rate, else NULL
    rate_from     TIMESTAMP,
    t0            TIMESTAMP NOT NULL,
    t1            TIMESTAMP NOT NULL,
    gpu_hours     DECIMAL(38, 6) NOT NULL,
    billing_hours DECIMAL(38, 6),
    rate          DECIMAL(18, 6),
    base_rate     DECIMAL(18, 6),
    direct_cost   DECIMAL(24, 6) NOT NULL -- before the line's rounding
);

CREATE TABLE statement_jobs (
    period         VARCHAR NOT NULL,
    kind           VARCHAR NOT NULL,      -- charge | adjustment
    adjusts_period VARCHAR,
    job_uid        BIGINT NOT NULL,
    cluster        VARCHAR NOT NULL,
    job_id         VARCHAR,
    account        VARCHAR,
    "user"         VARCHAR,
    team           VARCHAR,
    cost_center    VARCHAR,
    partition      VARCHAR,
    gpu_type       VARCHAR,
    t0             TIMESTAMP,             -- first GPU-second inside the period
    t1             TIMESTAMP,             -- last
    gpu_hours      DECIMAL(38, 6) NOT NULL,
    billing_hours  DECIMAL(38, 6),
    direct_cost    DECIMAL(24, 6) NOT NULL -- the job's share before rounding (lines are rounded once)
);
