"""Cost foundations: the governance policy in force, the rate card resolved over time, capacity, entitlements
and the allocated GPU-seconds of a period, priced.

Allocated GPU-seconds and installed capacity come from the occupancy timeline's API (models/timeline.py): the
one definition of "which GPUs a job held, where and when, and what was installed" in the codebase. Times are
naive UTC; quantities are GPU-seconds; money is :class:`decimal.Decimal` in the governance currency.
"""
from __future__ import annotations

import datetime as dt
import json
import zoneinfo
from dataclasses import dataclass
from decimal import Decimal

import polars as pl

from models import timeline

FAR_FUTURE = dt.datetime(9999, 1, 1)


class CostError(Exception):
    """A problem a user can fix (no governance loaded, a pool without a rate, ...): one line, what and where."""


@dataclass(frozen=True)
class Rate:
    cluster: str | None
    gpu_type: str              # '*' = any pool
    partition: str | None      # None = the pool's base rate
    valid_from: dt.datetime
    valid_to: dt.datetime | None
    price: Decimal             # per GPU-hour
    method: str
    derivation: str | None


@dataclass(frozen=True)
class Policy:
    """The governance rules a statement is computed under (current, or frozen with a closed statement)."""

    currency: str
    minor_units: int
    period_timezone: str
    billing_basis: str
    tres_weights: dict | None
    max_tres: bool
    idle_policy: str
    half_life_days: float
    windows_days: tuple
    starvation_hours: float
    bsld_tau_minutes: float
    teams: tuple               # (team, cost_center, display)
    team_tree: tuple           # (node, parent, raw_shares, is_team)
    entitlements: tuple        # (team, cluster, gpu_type, share, gpus, valid_from, valid_to)
    rates: tuple               # Rate
    document: str

    @classmethod
    def from_document(cls, document: str) -> "Policy":
        d = json.loads(document)
        ts = lambda v: None if v is None else dt.datetime.fromisoformat(v)
        dec = lambda v: None if v is None else Decimal(v)
        return cls(
            currency=d["currency"], minor_units=d["minor_units"], period_timezone=d["period_timezone"],
            billing_basis=d["billing_basis"], tres_weights=d["tres_weights"], max_tres=d["max_tres"],
            idle_policy=d["idle_policy"], half_life_days=d["half_life_days"], windows_days=tuple(d["windows_days"]),
            starvation_hours=d["starvation_hours"], bsld_tau_minutes=d["bsld_tau_minutes"],
            teams=tuple(tuple(t) for t in d["teams"]), team_tree=tuple(tuple(t) for t in d["team_tree"]),
            entitlements=tuple((t, c, g, dec(s), dec(n), ts(a), ts(b)) for t, c, g, s, n, a, b in d["entitlements"]),
            rates=tuple(Rate(c, g, p, ts(a), ts(b), Decimal(x), m, v) for c, g, p, a, b, x, m, v in d["rates"]),
            document=document)

    def cost_center(self, team: str | None) -> str | None:
        return next((cc for t, cc, _ in self.teams if t == team), None)


def current_policy(con) -> Policy:
    """The governance loaded by `gpuledger ingest governance`; CostError when none has been loaded."""
    rows = con.sql("SELECT document FROM governance ORDER BY loaded_at DESC LIMIT 1").fetchall()
    if not rows:
        raise CostError("no governance loaded: run `gpuledger ingest governance FILE.toml` "
                        "(format: data/governance.example.toml)")
    return Policy.from_document(rows[0][0])


# ---------------------------------------------------------------- time

def period_bounds(period: str, tz: str = "UTC") -> tuple[dt.datetime, dt.datetime]:
    """``'2026-03'`` -> [start, end) of that calendar month in zone ``tz``, as naive UTC."""
    try:
        year, month = (int(x) for x in period.split("-"))
        first = dt.date(year, month, 1)
    except ValueError:
        raise CostError(f"period {period!r}: expected YYYY-MM, e.g. 2026-03") from None
    nxt = dt.date(year + month // 12, month % 12 + 1, 1)
    zone = zoneinfo.ZoneInfo(tz)
    to_utc = lambda d: dt.datetime(d.year, d.month, d.day, tzinfo=zone).astimezone(dt.timezone.utc).replace(tzinfo=None)
    return to_utc(first), to_utc(nxt)


def next_period(period: str, step: int = 1) -> str:
    year, month = (int(x) for x in period.split("-"))
    idx = year * 12 + month - 1 + step
    return f"{idx // 12:04d}-{idx % 12 + 1:02d}"


def data_spans(con) -> dict[str, tuple[dt.datetime, dt.datetime]]:
    """Per cluster: [data_start, horizon) that the accounting covers (the timeline's span)."""
    timeline.ensure_current(con)
    return {r["cluster"]: (r["data_start"], r["horizon"]) for r in timeline.data_span(con).iter_rows(named=True)
            if r["horizon"] is not None}


def clipped_spans(con, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Per cluster: the part of [start, end) inside its data span (cluster, t0, t1); empty parts dropped."""
    rows = [(c, max(start, s or start), min(end, h)) for c, (s, h) in data_spans(con).items()]
    rows = [r for r in rows if r[1] < r[2]]
    return pl.DataFrame(rows, schema={"cluster": pl.String, "t0": pl.Datetime("us"), "t1": pl.Datetime("us")},
                        orient="row")


def windows(start: dt.datetime, end: dt.datetime, cuts) -> list[tuple[dt.datetime, dt.datetime]]:
    """[start, end) split at every cut strictly inside it."""
    pts = sorted({start, end} | {t for t in cuts if t is not None and start < t < end})
    return list(zip(pts, pts[1:]))


# ---------------------------------------------------------------- rates

def _effective(rates: list[Rate], t: dt.datetime) -> Rate | None:
    live = [r for r in rates if r.valid_from <= t < (r.valid_to or FAR_FUTURE)]
    return max(live, key=lambda r: (r.gpu_type != "*", r.cluster is not None), default=None)


def rate_intervals(policy: Policy, pools: list[tuple[str, str | None]], start: dt.datetime,
                   end: dt.datetime) -> pl.DataFrame:
    """The rate card resolved over [start, end) for each (cluster, pool) and partition key.

    Rows (cluster, gpu_type, pkey, t0, t1, rate, base_rate, rate_from): ``pkey`` NULL is the pool's base rate
    (which prices capacity); a partition named by a partition-specific rate gets its own rows, falling back
    to the base rate where no partition rate is in force. ``base_rate`` NULL marks a gap in the rate card.
    A pool of NULL gpu_type (untyped GPUs) matches only rates with gpu_type '*'.
    """
    rows = []
    for cluster, pool in pools:
        cands = [r for r in policy.rates if r.cluster in (cluster, None) and r.gpu_type in (pool, "*")]
        parts = sorted({r.partition for r in cands if r.partition is not None})
        cuts = {start, end} | {t for r in cands for t in (r.valid_from, r.valid_to) if t and start < t < end}
        cuts = sorted(cuts)
        for a, b in zip(cuts, cuts[1:]):
            base = _effective([r for r in cands if r.partition is None], a)
            for p in [None, *parts]:
                own = _effective([r for r in cands if r.partition == p], a) if p else None
                use = own or base
                rows.append((cluster, pool, p, a, b, use and use.price, base and base.price,
                             use and use.valid_from))
    schema = {"cluster": pl.String, "gpu_type": pl.String, "pkey": pl.String, "t0": pl.Datetime("us"),
              "t1": pl.Datetime("us"), "rate": pl.Decimal(18, 6), "base_rate": pl.Decimal(18, 6),
              "rate_from": pl.Datetime("us")}
    return pl.DataFrame(rows, schema=schema, orient="row")


def rate_card(con) -> pl.DataFrame:
    """The loaded rate card, one row per entry, with the TCO derivation where the rate was derived."""
    return con.sql("""
        SELECT coalesce(cluster, '*') AS cluster, gpu_type, coalesce(partition, '(base)') AS partition,
               strftime(valid_from, '%Y-%m-%d %H:%M') AS valid_from,
               coalesce(strftime(valid_to, '%Y-%m-%d %H:%M'), 'open') AS valid_to,
               price_per_gpu_hour, (SELECT currency FROM governance LIMIT 1) AS currency, method,
               coalesce(derivation, '') AS derivation
        FROM rates ORDER BY gpu_type, cluster NULLS FIRST, partition NULLS FIRST, valid_from""").pl()


# ---------------------------------------------------------------- teams

def unmapped_accounts(con) -> pl.DataFrame:
    """Accounts whose jobs no team_map pattern matches: (cluster, account, jobs, users, first/last submit)."""
    return con.sql("""
        SELECT cluster, coalesce(account, '(none)') AS account, count(*) AS jobs, count(DISTINCT "user") AS users,
               min(submit) AS first_submit, max(submit) AS last_submit
        FROM jobs WHERE team IS NULL GROUP BY ALL ORDER BY jobs DESC, cluster, account""").pl()


# ---------------------------------------------------------------- capacity and entitlements

UNTYPED = "(untyped)"


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


def entitlements_frame(policy: Policy) -> pl.DataFrame:
    rows = [(t, c, g, float(s) if s is not None else None, float(n) if n is not None else None, a, b)
            for t, c, g, s, n, a, b in policy.entitlements]
    return pl.DataFrame(rows, orient="row", schema={
        "team": pl.String, "cluster": pl.String, "gpu_type": pl.String, "share": pl.Float64, "gpus": pl.Float64,
        "valid_from": pl.Datetime("us"), "valid_to": pl.Datetime("us")})


def entitled_gpu_seconds(con, policy: Policy, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Entitled GPU-seconds per (team, cluster, gpu_type) inside [start, end) and the data span: a share
    entitlement is that share of the pool's installed capacity while in force; a quota is GPUs x time."""
    ent = entitlements_frame(policy)
    out_schema = {"team": pl.String, "cluster": pl.String, "gpu_type": pl.String, "entitled_s": pl.Float64}
    spans = clipped_spans(con, start, end)
    if ent.height == 0 or spans.height == 0:
        return pl.DataFrame(schema=out_schema)
    wins = windows(start, end, [*ent["valid_from"].to_list(), *ent["valid_to"].to_list()])
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


# ---------------------------------------------------------------- allocations

def billing_weights_frame(policy: Policy) -> pl.DataFrame:
    """TRES weights as rows (pkey, tres, weight); pkey '*' applies to partitions without their own weights."""
    rows = [(p, t, float(w)) for p, ws in sorted((policy.tres_weights or {}).items()) for t, w in sorted(ws.items())]
    return pl.DataFrame(rows, orient="row", schema={"pkey": pl.String, "tres": pl.String, "weight": pl.Float64})


def rate_cuts(policy: Policy) -> list[dt.datetime]:
    return [t for r in policy.rates for t in (r.valid_from, r.valid_to) if t is not None]


def job_allocations(con, start: dt.datetime, end: dt.datetime, cuts=()) -> pl.DataFrame:
    """GPU-seconds each job held in [start, end) per pool, split at ``cuts``: (w0, w1, job_uid, cluster,
    gpu_type, gpu_s). The pool is the node's GPU type, else the job's recorded one; from the timeline."""
    frames = []
    for w0, w1 in windows(start, end, cuts):
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
    cap = capacity(con, windows(start, end, cuts))
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


def billing_sql(policy: Policy) -> str:
    """SQL expression (over ``jb``, a jobs row) for a job's billing TRES: Slurm's recorded value, or the
    configured TRESBillingWeights (sum, or max with MAX_TRES), truncated to an integer as Slurm stores it.
    The weights come from the registered ``_bw`` table, never from SQL text."""
    if not policy.tres_weights:
        return "jb.billing"
    agg = "max" if policy.max_tres else "sum"
    return f"""(SELECT floor({agg}(w.weight * CASE
                   WHEN w.tres = 'cpu' THEN coalesce(jb.ncpus, 0)
                   WHEN w.tres = 'mem' THEN coalesce(jb.mem_bytes, 0) / 1048576.0
                   WHEN w.tres = 'node' THEN coalesce(jb.nnodes, 0)
                   WHEN w.tres = 'gpu' THEN jb.ngpus
                   WHEN w.tres = 'gpu:' || jb.gpu_type THEN jb.ngpus
                   ELSE 0 END))
                FROM _bw w
                WHERE w.pkey = CASE WHEN EXISTS (SELECT 1 FROM _bw x WHERE x.pkey = jb.partition)
                                    THEN jb.partition ELSE '*' END)"""
