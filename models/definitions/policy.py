"""The governance policy: teams and cost centres, entitlements, the rate card over time, billing weights and the
idle and fairness rules, as loaded by `gpuledger ingest governance` (the newest document) or frozen with a
closed statement. Money is :class:`decimal.Decimal` in the policy's currency."""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from decimal import Decimal

import polars as pl

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


def entitlements_frame(policy: Policy) -> pl.DataFrame:
    rows = [(t, c, g, float(s) if s is not None else None, float(n) if n is not None else None, a, b)
            for t, c, g, s, n, a, b in policy.entitlements]
    return pl.DataFrame(rows, orient="row", schema={
        "team": pl.String, "cluster": pl.String, "gpu_type": pl.String, "share": pl.Float64, "gpus": pl.Float64,
        "valid_from": pl.Datetime("us"), "valid_to": pl.Datetime("us")})


def billing_weights_frame(policy: Policy) -> pl.DataFrame:
    """TRES weights as rows (pkey, tres, weight); pkey '*' applies to partitions without their own weights."""
    rows = [(p, t, float(w)) for p, ws in sorted((policy.tres_weights or {}).items()) for t, w in sorted(ws.items())]
    return pl.DataFrame(rows, orient="row", schema={"pkey": pl.String, "tres": pl.String, "weight": pl.Float64})


def rate_cuts(policy: Policy) -> list[dt.datetime]:
    return [t for r in policy.rates for t in (r.valid_from, r.valid_to) if t is not None]


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
