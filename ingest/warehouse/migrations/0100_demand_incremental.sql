-- Incremental demand marts (#15 part 2; models/marts/demand.py): each GPU job's demand attributes as the
-- demand kernel stages them (models/kernels/demand_measures.py), kept so a refresh restages only the jobs that
-- changed, are still open, or that the timeline placed again; and the marts' change journal that tells it which.

CREATE TABLE demand_job (             -- one row per GPU job (allocated or requested GPUs), without the horizon
    job_uid     BIGINT NOT NULL,
    cluster     VARCHAR NOT NULL,
    partition   VARCHAR NOT NULL,     -- '' when unknown
    team        VARCHAR NOT NULL,     -- the team label ((unmapped) when none)
    pool        VARCHAR NOT NULL,     -- where it ran most GPU-seconds, else what it asked for
    state       VARCHAR,
    submit      TIMESTAMP,
    eligible    TIMESTAMP,            -- entered the queue
    left_queue  TIMESTAMP,            -- left it, clipped to the horizon of the build that wrote the row
    start       TIMESTAMP,
    "end"       TIMESTAMP,            -- NULL: open (restaged at every refresh)
    elapsed_s   DOUBLE,
    timelimit_s BIGINT,
    ngpus       BIGINT,
    req_gpus    BIGINT                -- requested GPUs x array tasks of a pending array record
);

-- Per mart and cluster, from which instant (UTC) a builder changed its rows since the consumers last read the
-- journal: the timeline notes from where it placed jobs again; the demand builder reads and clears its notes.
CREATE TABLE mart_journal (
    mart      VARCHAR NOT NULL,
    cluster   VARCHAR NOT NULL,
    since_ts  TIMESTAMP NOT NULL,
    noted_at  TIMESTAMP NOT NULL
);

-- Fingerprints the demand builder compares (team mapping, partition pools): a change rebuilds it whole.
CREATE TABLE demand_state (
    key    VARCHAR PRIMARY KEY,
    value  UBIGINT NOT NULL
);
