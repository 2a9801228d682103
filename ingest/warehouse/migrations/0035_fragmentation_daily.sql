-- 0035_fragmentation_daily: the free-GPU state behind the fragmentation report, per cluster, UTC day and cell
-- (models/fragmentation.py `rollup`, a step of the timeline build), so reports and dashboards over day-aligned
-- windows at the default 5-minute interval sum a few rows per day instead of sweeping the sample grid. Week and
-- month buckets add days (minima take the least); the numbers are those of the sample grid.
-- The timeline marts are rebuilt from scratch on the next refresh (tl_clusters emptied), which fills them.

-- Sums over the day's 5-minute samples of the per-sample state of each cell. Both cell granularities of the
-- report are stored: a node in several partitions counts in each partition cell, and minima do not add.
CREATE TABLE tl_frag_state_daily (
    cluster       VARCHAR NOT NULL,
    day           TIMESTAMP NOT NULL,    -- UTC midnight
    dims          VARCHAR NOT NULL,      -- cell granularity: 'gpu_type' or 'gpu_type,partition'
    gpu_type      VARCHAR NOT NULL,      -- pool; '(untyped)' when the inventory names none
    partition     VARCHAR,               -- NULL when dims = 'gpu_type'; '(none)' for nodes in no partition
    samples       INTEGER NOT NULL,      -- sample times in the day inside the cluster's data span
    nodes_up      BIGINT NOT NULL,       -- available nodes (summed over the samples, as every column below)
    free_gpus     BIGINT NOT NULL,       -- whole free GPUs
    partial_milli BIGINT NOT NULL,       -- free milli-GPUs left on GPUs that GPU-sharing jobs use
    hist          BIGINT[] NOT NULL,     -- hist[k + 1]: available nodes with k whole free GPUs (the last: >= k)
    lsn_sum       BIGINT NOT NULL,       -- largest request one node can take (whole GPUs)
    lsn_min       BIGINT NOT NULL,       --   and its least value over the day's samples
    wfn_sum       BIGINT NOT NULL,       -- whole free nodes
    wfn_min       BIGINT NOT NULL,
    wfg_sum       BIGINT NOT NULL,       -- GPUs of whole free nodes (the largest gang)
    wfg_min       BIGINT NOT NULL
);

-- Node-samples per free milli-GPU r on a shared GPU (FGD of GPU-sharing tasks), per pool and node partition
-- list: partition cells count a node in each of its partitions when read.
CREATE TABLE tl_frag_partial_daily (
    cluster    VARCHAR NOT NULL,
    day        TIMESTAMP NOT NULL,       -- UTC midnight
    gpu_type   VARCHAR NOT NULL,
    partitions VARCHAR,                  -- the nodes' partitions, comma-separated, as in tl_node_state
    r          INTEGER NOT NULL,         -- free milli-GPUs on the node's shared GPU (1..999)
    n          BIGINT NOT NULL           -- node-samples in the day
);

-- GPU jobs submitted per UTC day by request spec: FGD's target workload. pool is NULL when the job neither names
-- one nor ran: the report gives it the only pool of its partition, which depends on the whole inventory.
CREATE TABLE tl_frag_workload_daily (
    cluster   VARCHAR NOT NULL,
    day       TIMESTAMP NOT NULL,        -- UTC midnight of submit (may precede the data span)
    partition VARCHAR,                   -- the first partition the job named
    pool      VARCHAR,                   -- typed request, else the pool of its first allocation
    k         INTEGER NOT NULL,          -- GPUs per node (1 for GPU-sharing jobs)
    q         INTEGER NOT NULL,          -- milli-GPU per GPU (1000 = whole GPUs)
    jobs      BIGINT NOT NULL
);

DELETE FROM tl_clusters;
