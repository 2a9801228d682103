-- The serving view is published in O(change) (ingest/warehouse/serving.py, docs/ARCHITECTURE.md "Concurrency"):
-- writers of partitioned tables note here from which partition key on they changed a table (NULL bounds: the
-- whole table); a publish reads the notes, rewrites only those partitions' Parquet parts, and clears them in
-- the same step that records the new manifest's sequence number in serving_state.
CREATE TABLE serving_journal (
    table_name VARCHAR NOT NULL,
    since_ts   TIMESTAMP,          -- lower bound of a time partition column (all three NULL: the whole table)
    since_int  BIGINT,             -- lower bound of an integer partition column (job_uid, run_id)
    since_text VARCHAR,            -- lower bound of a partition-per-value column (a statement's period)
    noted_at   TIMESTAMP NOT NULL
);
-- key 'epoch': random id of this warehouse file's serving lineage; 'seq': the published manifest's number.
CREATE TABLE serving_state (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);
