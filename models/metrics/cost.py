"""Cost inputs read from the warehouse: the data spans a period covers, installed capacity and entitlements per
window, the allocated GPU-seconds of a period priced under the rate card in force (the policy itself:
models/definitions/policy.py).

Allocated GPU-seconds and installed capacity come from the occupancy timeline's reader (models/metrics/timeline.py):
the one definition of "which GPUs a job held, where and when, and what was installed" in the codebase. Times are
naive UTC; quantities are GPU-seconds; money is :class:`decimal.Decimal` in the governance currency.
"""
from __future__ import annotations

import datetime as dt

import polars as pl

from models.definitions.labels import NONE, UNTYPED
from models.definitions.policy import (Policy, billing_sql, billing_weights_frame, entitlements_frame, rate_cuts,
                                       rate_intervals)
from models.definitions.times import split_at
from models.metrics import timeline

def data_spans(con) -> dict[str, tuple[dt.datetime, dt.datetime]]:
    """Per cluster: [data_start, horizon) that the accounting covers (the timeline's span)."""
    return {r["cluster"]: (r["data_start"], r["horizon"]) for r in timeline.data_span(con).iter_rows(named=True)
            if r["horizon"] is not None}


def clipped_spans(con, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Per cluster: the part of [start, end) inside its data span (cluster, t0, t1); empty parts dropped."""
    rows = [(c, max(start, s or start), min(end, h)) for c, (s, h) in data_spans(con).items()]
    rows = [r for r in rows if r[1] < r[2]]
    return pl.DataFrame(rows, schema={"cluster": pl.String, "t0": pl.Datetime("us"), "t1": pl.Datetime("us")},
                        orient="row")


def rate_card(con) -> pl.DataFrame:
    """The loaded rate card, one row per entry, with the TCO derivation where the rate was derived."""
    return con.sql("""
        SELECT coalesce(cluster, '*') AS cluster, gpu_type, coalesce(partition, '(base)') AS partition,
               strftime(valid_from, '%Y-%m-%d %H:%M') AS valid_from,
               coalesce(strftime(valid_to, '%Y-%m-%d %H:%M'), 'open') AS valid_to,
               price_per_gpu_hour, (SELECT currency FROM governance LIMIT 1) AS currency, method,
               coalesce(derivation, '') AS derivation
        FROM rates ORDER BY gpu_type, cluster NULLS FIRST, partition NULLS FIRST, valid_from""").pl()


def unmapped_accounts(con) -> pl.DataFrame:
    """Accounts whose jobs no team_map pattern matches: (cluster, account, jobs, users, first/last submit)."""
    return con.sql(f"""
        SELECT cluster, coalesce(account, '{NONE}') AS account, count(*) AS jobs, count(DISTINCT "user") AS users,
               min(submit) AS first_submit, max(submit) AS last_submit
        FROM jobs WHERE team IS NULL GROUP BY ALL ORDER BY jobs DESC, cluster, account""").pl()


def capacity(con, wins: list[tuple[dt.datetime, dt.datetime]]) -> pl.DataFrame:
    """Installed GPU-seconds per (w0, w1, cluster, gpu_type) for each window, from the timeline (the inventory
    with validity, inside each cluster's data span). GPU-seconds are rounded to the microsecond."""
    frames = []
    for w0, w1 in wins:
        cap = timeline.capacity(con, w0, w1, bucket="month", by=("cluster", "gpu_type"))
        if cap.height:
            frames.append(cap.group_by("cluster", "gpu_type").agg(
                (pl.col("capacity_gpu_h").sum() * 3600).round(6).alias("gpu_s"))
                .with_columns(w0=pl.lit(w0, pl.Datetime("us")), w1=pl.lit(w1, pl.Datetime("us"))))
    schema = {"w0": pl.Datetime("us"), "w1": pl.Datetime("us"), "cluster": pl.String, "gpu_type": pl.String,
              "gpu_s": pl.Float64}
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat(frames).select(list(schema)).cast(schema)


def entitled_gpu_seconds(con, policy: Policy, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Entitled GPU-seconds per (team, cluster, gpu_type) inside [start, end) and the data span: a share
    entitlement is that share of the pool's installed capacity while in force; a quota is GPUs x time."""
    ent = entitlements_frame(policy)
    out_schema = {"team": pl.String, "cluster": pl.String, "gpu_type": pl.String, "entitled_s": pl.Float64}
    spans = clipped_spans(con, start, end)
    if ent.height == 0 or spans.height == 0:
        return pl.DataFrame(schema=out_schema)
    wins = split_at(start, end, [*ent["valid_from"].to_list(), *ent["valid_to"].to_list()])
    cap = capacity(con, wins)
    span_s = pl.DataFrame([(c, w0, w1, max(0.0, (min(w1, t1) - max(w0, t0)).total_seconds()))
                           for c, t0, t1 in spans.iter_rows() for w0, w1 in wins], orient="row",
                          schema={"cluster": pl.String, "w0": pl.Datetime("us"), "w1": pl.Datetime("us"),
                                  "span_s": pl.Float64})
    e = (ent.join(span_s, how="cross")
         .filter((pl.col("cluster").is_null() | (pl.col("cluster") == pl.col("cluster_right")))
                 & (pl.col("valid_from") <= pl.col("w0")) & (pl.col("valid_to").is_null() | (pl.col("valid_to") >= pl.col("w1"))))
         .drop("cluster").rename({"cluster_right": "cluster"})
         .join(cap, on=["cluster", "gpu_type", "w0", "w1"], how="left"))
    e = e.with_columns(entitled_s=pl.when(pl.col("gpus").is_not_null()).then(pl.col("gpus") * pl.col("span_s"))
                       .otherwise(pl.col("share") * pl.col("gpu_s").fill_null(0)))
    return e.group_by("team", "cluster", "gpu_type").agg(pl.col("entitled_s").sum()).sort("team", "cluster", "gpu_type")


def job_allocations(con, start: dt.datetime, end: dt.datetime, cuts=()) -> pl.DataFrame:
    """GPU-seconds each job held in [start, end) per pool, split at ``cuts``: (w0, w1, job_uid, cluster,
    gpu_type, gpu_s). The pool is the node's GPU type, else the job's recorded one; from the timeline."""
    frames = []
    for w0, w1 in split_at(start, end, cuts):
        f = timeline.job_gpu_seconds(con, w0, w1)
        if f.height:
            frames.append(f.with_columns(w0=pl.lit(w0, pl.Datetime("us")), w1=pl.lit(w1, pl.Datetime("us"))))
    schema = {"w0": pl.Datetime("us"), "w1": pl.Datetime("us"), "job_uid": pl.Int64, "cluster": pl.String,
              "gpu_type": pl.String, "gpu_s": pl.Float64}
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat(frames).rename({"gpu_seconds": "gpu_s"}).select(list(schema)).cast(schema)


def load_allocations(con, start: dt.datetime, end: dt.datetime, policy: Policy) -> pl.DataFrame:
    """Build temp tables ``_alloc`` (one row per job x pool x rate window in [start, end): GPU-seconds
    ``gpu_s``, billing-TRES-seconds ``billing_s``, the rate in force ``rate``/``base_rate``) and ``_cap``
    (installed GPU-seconds per pool and rate window, with the base rate). Returns the resolved rate card.

    A job's billing TRES is spread over its pools in proportion to the GPU-seconds held there.
    """
    cuts = rate_cuts(policy)
    alloc = job_allocations(con, start, end, cuts)
    cap = capacity(con, split_at(start, end, cuts))
    con.register("_al_in", alloc.to_arrow())
    con.register("_bw", billing_weights_frame(policy).to_arrow())
    try:
        # one pass over jobs: everything later steps need about each job
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE _alloc_raw AS
            SELECT a.w0, a.w1, a.job_uid, a.cluster, coalesce(a.gpu_type, jb.gpu_type, $u) AS gpu_type, a.gpu_s,
                   jb.team, jb.account, jb."user", jb.partition, jb.job_id, jb.ngpus AS job_gpus, jb.start,
                   jb."end", ({billing_sql(policy)}) AS billing
            FROM _al_in a JOIN jobs jb USING (job_uid)""", {"u": UNTYPED})
    finally:
        con.unregister("_al_in")
    pools = {tuple(r) for r in con.sql("SELECT DISTINCT cluster, gpu_type FROM _alloc_raw").fetchall()}
    pools |= {(c, g) for c, g in cap.select("cluster", "gpu_type").unique().iter_rows()}
    rates = rate_intervals(policy, sorted(pools, key=str), start, end)
    con.register("_rates", rates.to_arrow())
    con.register("_cap_in", cap.to_arrow())
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE _rate_iv AS SELECT * FROM _rates")
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _cap AS
            SELECT c.cluster, c.gpu_type, c.w0 AS t0, c.w1 AS t1, r.base_rate, c.gpu_s::DECIMAL(38, 6) AS gpu_s
            FROM _cap_in c LEFT JOIN _rate_iv r ON r.cluster = c.cluster AND r.gpu_type = c.gpu_type
             AND r.pkey IS NULL AND r.t0 <= c.w0 AND r.t1 >= c.w1""")
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _alloc AS
            WITH j AS (
              SELECT a.*, p.pkey FROM _alloc_raw a
              LEFT JOIN (SELECT DISTINCT cluster, gpu_type, pkey FROM _rate_iv WHERE pkey IS NOT NULL) p
                ON p.cluster = a.cluster AND p.gpu_type = a.gpu_type AND p.pkey = a.partition)
            SELECT j.* EXCLUDE (gpu_s), j.gpu_s::DECIMAL(38, 6) AS gpu_s,
                   (j.billing / nullif(j.job_gpus, 0) * j.gpu_s)::DECIMAL(38, 6) AS billing_s,
                   r.rate, r.base_rate, r.rate_from, r.t0 AS rate_t0, r.t1 AS rate_t1
            FROM j LEFT JOIN _rate_iv r ON r.cluster = j.cluster AND r.gpu_type = j.gpu_type
             AND r.pkey IS NOT DISTINCT FROM j.pkey AND r.t0 <= j.w0 AND r.t1 >= j.w1""")
    finally:
        for name in ("_rates", "_bw", "_cap_in"):
            con.unregister(name)
    return rates
