-- The collector service (`gpuledger serve`, models/service/): one row per (cluster, source) it collects, so the
-- Data health page and /metrics say when each source last succeeded, how far behind it is and why it fails.
-- Governance is collected once for every cluster: its row has cluster '*'.
CREATE TABLE IF NOT EXISTS source_status (
    cluster              VARCHAR NOT NULL,
    source               VARCHAR NOT NULL,     -- sacct, nodes, events, prometheus, governance, ...
    last_attempt         TIMESTAMP,            -- UTC, when the last collection started
    last_success         TIMESTAMP,            -- UTC, when the last successful collection started
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    last_error           VARCHAR,              -- one line; NULL after a success
    last_run_id          BIGINT,               -- ingest_runs.run_id of the last successful collection
    next_attempt         TIMESTAMP,            -- UTC, when the service will try again (interval or backoff)
    attempts             BIGINT NOT NULL DEFAULT 0,
    failures             BIGINT NOT NULL DEFAULT 0,
    lines_loaded         BIGINT NOT NULL DEFAULT 0,   -- input lines over every successful collection
    lines_skipped        BIGINT NOT NULL DEFAULT 0,
    lines_rejected       BIGINT NOT NULL DEFAULT 0,
    updated_at           TIMESTAMP,
    PRIMARY KEY (cluster, source)
);
