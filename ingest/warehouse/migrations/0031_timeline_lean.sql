-- 0031_timeline_lean: the occupancy segments keep integer keys (node id, class id) instead of repeating the
-- node's name, pool, partitions and availability on every row: at a large site tl_node_segments has ~10M rows
-- per year and writing the wide form cost ~3x more. models/timeline.py joins the names back for readers.
-- The marts are rebuilt from scratch on the next refresh (tl_clusters emptied).

CREATE TABLE tl_nodes (
    cluster VARCHAR NOT NULL,
    node    VARCHAR NOT NULL,
    nid     INTEGER NOT NULL             -- stable once assigned
);

-- Node classes: every (cluster, GPUs, pool, partitions, availability) a node has had. Append-only.
CREATE TABLE tl_classes (
    class_id   INTEGER NOT NULL,         -- stable once assigned
    cluster    VARCHAR NOT NULL,
    gpus       INTEGER NOT NULL,
    gpu_type   VARCHAR,
    partitions VARCHAR,
    avail      VARCHAR NOT NULL          -- up | down | planned_down | absent
);

DROP TABLE tl_node_segments;
CREATE TABLE tl_node_segments (
    cluster    VARCHAR NOT NULL,
    nid        INTEGER NOT NULL,         -- tl_nodes
    class_id   INTEGER NOT NULL,         -- tl_classes: the node's class and availability during the segment
    t0         TIMESTAMP NOT NULL,
    t1         TIMESTAMP NOT NULL,
    whole_gpus DOUBLE NOT NULL,          -- whole GPUs held by jobs
    frac_milli BIGINT NOT NULL,          -- milli-GPUs held by GPU-sharing jobs
    jobs       INTEGER NOT NULL
);

DELETE FROM tl_clusters;
