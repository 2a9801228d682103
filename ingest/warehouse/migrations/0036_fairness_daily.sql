-- 0036_fairness_daily: the two fairness inputs that otherwise read every job of the window (and of the last
-- 20 half-lives), rolled up per UTC day by the timeline build (models/timeline_rollups.py `fairness_rollup`):
-- pending GPU-seconds per pool and team (models/queue.py `pending_demand`'s definition) and allocated
-- GPU-seconds decayed to the start of each day at the governance's half-life (models/fairness.py
-- `decayed_usage`). Readers use them for windows of whole days and fall back to the jobs otherwise.
-- The timeline marts are rebuilt from scratch on the next refresh (tl_clusters emptied), which fills them.

CREATE TABLE tl_pending_team_daily (
    cluster  VARCHAR NOT NULL,
    day      TIMESTAMP NOT NULL,         -- UTC midnight
    pool     VARCHAR NOT NULL,           -- the pool a job asked for, as queue.pending_demand names it
    team     VARCHAR NOT NULL,           -- '(unmapped)' when the job has none
    pend_s   DOUBLE NOT NULL             -- requested GPUs x seconds pending in the day (up to the horizon)
);

CREATE TABLE tl_decay_daily (
    cluster    VARCHAR NOT NULL,
    day        TIMESTAMP NOT NULL,       -- UTC midnight D
    pool       VARCHAR NOT NULL,         -- the node's pool, else the job's GPU type, else '(untyped)'
    team       VARCHAR NOT NULL,
    account    VARCHAR,
    decayed_s  DOUBLE NOT NULL           -- sum of GPUs x integral over the day of 2^((t - D) / half-life) dt
);

ALTER TABLE tl_clusters ADD COLUMN fair_fp UBIGINT;      -- fingerprint of what the rollups depend on besides jobs
ALTER TABLE tl_clusters ADD COLUMN half_life_s DOUBLE;   -- half-life of tl_decay_daily (NULL: no governance)
ALTER TABLE tl_clusters ADD COLUMN cells_fp UBIGINT;     -- fingerprint of the sample grid's cells (blocked, fragmentation)

DELETE FROM tl_clusters;
