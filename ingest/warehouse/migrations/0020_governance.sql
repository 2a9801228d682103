-- 0020_governance: what `gpuledger ingest governance FILE.toml` loads besides the core teams/team_map/clusters.
-- Every column is documented in docs/SCHEMA.md ("Governance and cost"). Money is DECIMAL; times are UTC.

-- The settings of the governance file in force (at most one row; a load replaces it).
CREATE TABLE governance (
    loaded_at         TIMESTAMP NOT NULL,
    source            VARCHAR NOT NULL,       -- path of the file
    sha256            VARCHAR NOT NULL,       -- of the file's bytes
    ingest_run_id     BIGINT NOT NULL,
    currency          VARCHAR NOT NULL,       -- ISO 4217
    minor_units       INTEGER NOT NULL,       -- decimals statements round to
    period_timezone   VARCHAR NOT NULL,       -- chargeback months are calendar months in this zone
    billing_basis     VARCHAR NOT NULL,       -- gpu_hours | billing_tres
    tres_weights      VARCHAR,                -- JSON {partition or '*': {tres: weight}}; NULL = Slurm's recorded billing
    max_tres          BOOLEAN NOT NULL,
    idle_policy       VARCHAR NOT NULL,       -- none | proportional_usage | proportional_entitlement
    half_life_days    DOUBLE NOT NULL,
    windows_days      INTEGER[] NOT NULL,
    starvation_hours  DOUBLE NOT NULL,
    bsld_tau_minutes  DOUBLE NOT NULL,
    document          VARCHAR NOT NULL        -- the whole validated file as canonical JSON (for statements)
);

CREATE TABLE cost_centers (
    cost_center VARCHAR PRIMARY KEY,
    name        VARCHAR,
    owner       VARCHAR
);

-- The Slurm-like association tree for the cluster-wide fair-share view (teams and their parents).
CREATE TABLE team_tree (
    node       VARCHAR PRIMARY KEY,           -- a team, or a parent account that is not a team
    parent     VARCHAR,                       -- NULL = child of root
    raw_shares DOUBLE,                        -- Slurm Fairshare=; NULL = use entitlements (teams) or 1 (parents)
    is_team    BOOLEAN NOT NULL
);

CREATE TABLE entitlements (
    team       VARCHAR NOT NULL,
    cluster    VARCHAR,                       -- NULL = every cluster with this pool
    gpu_type   VARCHAR NOT NULL,              -- the pool
    share      DECIMAL(9, 6),                 -- fraction of the pool's capacity, or
    gpus       DECIMAL(12, 3),                -- a fixed GPU quota (exactly one of the two is set)
    valid_from TIMESTAMP NOT NULL,
    valid_to   TIMESTAMP                      -- NULL = open-ended
);

CREATE TABLE rates (
    cluster            VARCHAR,               -- NULL = any cluster (a cluster-specific entry wins)
    gpu_type           VARCHAR NOT NULL,
    partition          VARCHAR,               -- NULL = the pool's base rate (prices capacity)
    valid_from         TIMESTAMP NOT NULL,
    valid_to           TIMESTAMP,             -- the next entry's valid_from, or the entry's `to`; NULL = open
    price_per_gpu_hour DECIMAL(18, 6) NOT NULL,
    method             VARCHAR NOT NULL,      -- price | tco
    derivation         VARCHAR                -- the TCO arithmetic, in words and numbers
);
