-- 0111: alerts of the service's [[alerts]] rules (issue 19): who was told what, when. Every column: docs/SCHEMA.md
-- ("Budgets and alerts"). Written only by `gpuledger serve` after a refresh (models/service/alerts.py).

-- One row per condition episode: opened when a rule's condition starts to hold for a subject, closed when it clears.
CREATE TABLE alerts (
    alert_id     BIGINT PRIMARY KEY,
    rule         VARCHAR NOT NULL,            -- the [[alerts]] name
    kind         VARCHAR NOT NULL,            -- budget | idle_gpu_hours | zero_util_job | exhaustion | stale_source | blocked_wait
    subject      VARCHAR NOT NULL,            -- what it is about: a team, budget, job, pool, cluster/source
    fired_at     TIMESTAMP NOT NULL,          -- UTC, the evaluation that first saw the condition
    resolved_at  TIMESTAMP,                   -- UTC, the first evaluation that no longer saw it; NULL: still firing
    last_seen    TIMESTAMP NOT NULL,          -- UTC, the last evaluation that saw it
    value        DOUBLE,                      -- the measured value when fired (unit: the kind's, see docs/METRICS.md)
    last_value   DOUBLE,                      -- ... at last_seen
    threshold    DOUBLE NOT NULL,
    summary      VARCHAR NOT NULL,            -- one line, as sent
    detail       VARCHAR NOT NULL             -- JSON: lines (jobs and owners, ...) and facts, as sent
);

-- Every evaluation: one row per rule (subject '') and per subject whose condition held.
CREATE TABLE alert_observations (
    evaluated_at TIMESTAMP NOT NULL,          -- UTC
    rule         VARCHAR NOT NULL,
    subject      VARCHAR NOT NULL,
    value        DOUBLE,
    threshold    DOUBLE NOT NULL,
    firing       BOOLEAN NOT NULL,
    data_horizon TIMESTAMP                    -- the data horizon the evaluation saw
);

-- One row per delivery attempt of an alert event (fired or resolved) to one recipient (a digest holds several).
CREATE TABLE alert_deliveries (
    alert_id     BIGINT NOT NULL,
    event        VARCHAR NOT NULL,            -- fired | resolved
    recipient    VARCHAR NOT NULL,            -- an email address or webhook:NAME
    channel      VARCHAR NOT NULL,            -- email | webhook
    attempted_at TIMESTAMP NOT NULL,          -- UTC, when the delivery ended
    ok           BOOLEAN NOT NULL,
    attempts     INTEGER NOT NULL,            -- connection attempts within this delivery (retries with backoff)
    error        VARCHAR,                     -- one line, when not ok
    subject_line VARCHAR NOT NULL             -- the digest's subject line as sent
);
