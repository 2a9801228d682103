-- 0070_synthetic: provenance of warehouses built by the synthetic workload generator (`gpuledger demo`).
-- One row per build; dashboards show it so nobody mistakes demo figures for a real site's.

CREATE TABLE synthetic_builds (
    built_at          TIMESTAMP NOT NULL,         -- UTC
    cluster           VARCHAR NOT NULL,
    seed              BIGINT NOT NULL,
    scale             DOUBLE NOT NULL,
    generator_version INTEGER NOT NULL,
    code_version      VARCHAR NOT NULL,           -- hash of the generator and ingestor sources
    period_start      TIMESTAMP NOT NULL,         -- UTC
    period_end        TIMESTAMP NOT NULL,         -- UTC, the export time
    nodes             INTEGER NOT NULL,
    gpus              INTEGER NOT NULL,
    jobs              BIGINT NOT NULL,            -- job allocations generated (array tasks count)
    instances         BIGINT NOT NULL,            -- including requeued instances
    config            VARCHAR NOT NULL,           -- JSON of the generator configuration
    build_seconds     DOUBLE
);
