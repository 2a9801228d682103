-- 0037_open_statements: the statements of the newest open periods (the month of the data horizon and the one
-- before), computed by `gpuledger refresh` (models/statement_mart.py) without their job-level detail, so the
-- dashboard's cost tile reads a few hundred rows instead of pricing every job of two months. A reader uses a
-- row only while no ingest ran since (run_id), the governance is the same (policy_sha) and no period was
-- closed since (closed_sha); otherwise the statement is computed. Same columns as the closed statements'.

CREATE TABLE open_statements (
    period       VARCHAR PRIMARY KEY,   -- YYYY-MM
    run_id       BIGINT NOT NULL,       -- newest ok ingest run when computed
    policy_sha   VARCHAR NOT NULL,      -- sha256 of the governance document in force
    closed_sha   VARCHAR NOT NULL,      -- sha256 of the closed periods and their content hashes
    status       VARCHAR NOT NULL,      -- open | provisional
    header       VARCHAR NOT NULL,      -- JSON of the summary sheet's key/value rows
    computed_at  TIMESTAMP NOT NULL     -- UTC
);
CREATE TABLE open_statement_lines AS SELECT * FROM statement_lines LIMIT 0;
CREATE TABLE open_statement_recon AS SELECT * FROM statement_recon LIMIT 0;
CREATE TABLE open_statement_rates AS SELECT * FROM statement_rates LIMIT 0;
