"""Chargeback statements per team and cost centre, by GPU type, reconciled to the cent; period close.

A statement for a month prices the allocated GPU-seconds of every job (split by time at the month's edges)
at the rate card, shares each pool's idle cost under the idle policy, and proves that

    cluster cost = sum(line totals) + unallocated idle + rate variance + rounding residue

per pool and in total, where cluster cost = installed GPU-hours (inventory with validity) x base rate. All money
is computed exactly (fractions) and rounded once per amount, half-even, to the currency's minor units; the
rounding residue is reported, never spread. See docs/METRICS.md ("Chargeback").

The functions here read: closing a period (freezing its statement with a content hash) is the pipeline's
(models/pipeline/close.py); late jobs reach a closed period only as adjustment lines of the next open period.
The newest open months are stored by `gpuledger refresh` (models/pipeline/open_statements.py) and read here while
still current.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

import polars as pl

from ingest.warehouse import has_table, newest_run
from models.definitions.labels import NONE, UNMAPPED, UNTYPED
from models.definitions.policy import CostError, Policy, current_policy
from models.definitions.times import next_period, period_bounds, period_of
from models.definitions.times import split_at
from models.metrics import cost, reservations, timeline

#: The line kind of reserved-but-idle GPU-hours charged to a reservation's owner (docs/METRICS.md, "Chargeback").
RESERVED_IDLE = "reserved idle"

MONEY = pl.Decimal(18, 4)
QTY = pl.Decimal(38, 6)
RATE = pl.Decimal(18, 6)
JOB_MONEY = pl.Decimal(24, 6)
LINE_KEY = ["cluster", "team", "account", "cost_center", "gpu_type"]

LINE_SCHEMA = {
    "period": pl.String, "line_no": pl.Int32, "kind": pl.String, "adjusts_period": pl.String,
    "cluster": pl.String, "team": pl.String, "account": pl.String, "cost_center": pl.String,
    "gpu_type": pl.String, "jobs": pl.Int64, "gpu_hours": QTY, "billing_hours": QTY, "rate": RATE,
    "rate_note": pl.String, "direct_cost": MONEY, "idle_share": MONEY, "total": MONEY,
    "waste_gpu_hours": QTY, "waste_cost": MONEY, "telemetry_gpu_hours": QTY, "job_refs": pl.String}
RECON_SCHEMA = {
    "period": pl.String, "row_no": pl.Int32, "kind": pl.String, "adjusts_period": pl.String,
    "cluster": pl.String, "gpu_type": pl.String, "capacity_gpu_hours": QTY, "allocated_gpu_hours": QTY,
    "idle_gpu_hours": QTY, "cluster_cost": MONEY, "direct_cost": MONEY, "idle_allocated": MONEY,
    "unallocated_idle": MONEY, "rate_variance": MONEY, "rounding_residue": MONEY, "difference": MONEY,
    "note": pl.String}
RATES_SCHEMA = {
    "period": pl.String, "cluster": pl.String, "team": pl.String, "account": pl.String,
    "cost_center": pl.String, "gpu_type": pl.String, "partition": pl.String, "rate_from": pl.Datetime("us"),
    "t0": pl.Datetime("us"), "t1": pl.Datetime("us"), "gpu_hours": QTY, "billing_hours": QTY, "rate": RATE,
    "base_rate": RATE, "direct_cost": JOB_MONEY}
JOBS_SCHEMA = {
    "period": pl.String, "kind": pl.String, "adjusts_period": pl.String, "job_uid": pl.Int64,
    "cluster": pl.String, "job_id": pl.String, "account": pl.String, "user": pl.String, "team": pl.String,
    "cost_center": pl.String, "partition": pl.String, "gpu_type": pl.String, "t0": pl.Datetime("us"),
    "t1": pl.Datetime("us"), "gpu_hours": QTY, "billing_hours": QTY, "direct_cost": JOB_MONEY}


@dataclass
class Statement:
    """One period's statement: the parts that are frozen at close, and how to present them."""

    period: str
    status: str                          # open | provisional | closed
    policy: Policy
    header: list[tuple[str, str]]        # the summary sheet, in order
    lines: pl.DataFrame                  # LINE_SCHEMA (charges, then adjustments)
    recon: pl.DataFrame                  # RECON_SCHEMA
    rates: pl.DataFrame                  # RATES_SCHEMA: the lines broken down by rate in force
    jobs: pl.DataFrame                   # JOBS_SCHEMA: job-level detail for audits (empty without ``detail``)
    closed_at: dt.datetime | None = None
    detail: bool = True                  # False: computed without the job-level detail (totals only)
    content_hash: str | None = None

    @property
    def total_row(self) -> dict:
        return self.recon.filter(pl.col("kind") == "total").row(0, named=True)


# ---------------------------------------------------------------- exact money

def _frac(x) -> Fraction:
    return Fraction(0) if x is None else Fraction(Decimal(x) if not isinstance(x, (Decimal, int)) else x)


def money(x: Fraction, minor: int) -> Decimal:
    """Round a fraction once, half-even, to ``minor`` decimals."""
    return Decimal(round(x * 10 ** minor)).scaleb(-minor)


def _hours(gpu_s: Fraction) -> Decimal:
    return Decimal(round(gpu_s / 3600 * 10 ** 6)).scaleb(-6)


# ---------------------------------------------------------------- computing a statement

def compute(con, period: str, policy: Policy | None = None, adjustments: bool = True,
            detail: bool = True) -> Statement:
    """The statement of ``period`` (YYYY-MM) from the warehouse as it is now (a closed period: see
    :func:`statement`). ``policy`` defaults to the governance in force; adjustments for closed periods whose
    next open period this is are appended unless ``adjustments`` is False. Without ``detail`` the period's own
    job-level detail is left out (lines, reconciliation and summary are the same; a dashboard tile needs no
    more, and on a large month the detail is half the work)."""
    policy = policy or current_policy(con)
    start, end = period_bounds(period, policy.period_timezone)
    spans = cost.clipped_spans(con, start, end)
    cost.load_allocations(con, start, end, policy)
    _check_billing(con, policy)
    groups = _groups(con)
    cap = con.sql("SELECT * FROM _cap ORDER BY cluster, gpu_type, t0").pl().to_dicts()
    ents = (cost.entitled_gpu_seconds(con, policy, start, end) if policy.idle_policy == "proportional_entitlement"
            else None)
    waste = _waste(con, start, end)
    resv = _reserved_idle(con, policy, start, end, cap)
    lines, recon = _price(period, policy, groups, cap, ents, _job_counts(con), waste, resv)
    n_jobs = con.sql("SELECT count(DISTINCT job_uid) FROM _alloc").fetchall()[0][0]
    jobs = (_jobs_view(con, period, policy, "charge", None) if detail
            else pl.DataFrame(schema=JOBS_SCHEMA))
    st = Statement(period=period, status=_status(con, end), policy=policy, header=[], lines=lines, recon=recon,
                   rates=_rates_view(period, policy, groups), jobs=jobs, detail=detail)
    if adjustments:
        _append_adjustments(con, st)
    st.header = _header(st, start, end, spans, waste is not None, n_jobs)
    return st


def _status(con, end: dt.datetime) -> str:
    spans = cost.data_spans(con)
    return "provisional" if not spans or any(h < end for _, h in spans.values()) else "open"


def _check_billing(con, policy: Policy) -> None:
    if policy.billing_basis != "billing_tres":
        return
    n, example = con.sql("SELECT count(DISTINCT job_uid), min(job_id) FROM _alloc WHERE billing IS NULL").fetchall()[0]
    if n:
        raise CostError(f"billing basis is billing_tres but {n} jobs (e.g. {example}) have no billing TRES recorded; "
                        "set [billing] tres_weights in the governance file to compute it")


def _groups(con) -> list[dict]:
    """Allocated GPU-seconds per line key and rate in force (the unit a rate applies to)."""
    return con.sql(f"""
        SELECT cluster, gpu_type, team, CASE WHEN team IS NULL THEN coalesce(account, '{NONE}') END AS account,
               pkey, rate_t0, max(rate_t1) AS rate_t1, rate, base_rate, rate_from,
               sum(gpu_s) AS gpu_s, sum(billing_s) AS billing_s
        FROM _alloc GROUP BY ALL ORDER BY ALL""").pl().to_dicts()


def _job_counts(con) -> dict[tuple, int]:
    rows = con.sql(f"""
        SELECT cluster, team, CASE WHEN team IS NULL THEN coalesce(account, '{NONE}') END, gpu_type,
               count(DISTINCT job_uid)
        FROM _alloc GROUP BY ALL""").fetchall()
    return {(c, t, a, g): n for c, t, a, g, n in rows}


def _waste(con, start: dt.datetime, end: dt.datetime) -> dict | None:
    """Per line key: (idle-allocated GPU-seconds, telemetry-covered GPU-seconds) from the telemetry efficiency
    mart (UTC hours inside the period; a job's waste is spread over its pools by GPU-seconds), or None when the
    period has no telemetry at all (waste is then unavailable, never 0)."""
    have = con.execute("""SELECT count(*) FROM gpu_efficiency_job_hour
                          WHERE hour >= ? AND hour < ? AND telemetry_gpu_s > 0""", [start, end]).fetchall()[0][0]
    if not have:
        return None
    rows = con.execute(f"""
        WITH w AS (SELECT job_uid, sum(idle_alloc_gpu_s) AS idle_s, sum(telemetry_gpu_s) AS tel_s
                   FROM gpu_efficiency_job_hour WHERE hour >= ? AND hour < ? GROUP BY job_uid),
        g AS (SELECT job_uid, cluster, gpu_type, team, account, sum(gpu_s)::DOUBLE AS gpu_s
              FROM _alloc GROUP BY job_uid, cluster, gpu_type, team, account),
        a AS (SELECT *, sum(gpu_s) OVER (PARTITION BY job_uid) AS job_s FROM g)
        SELECT a.cluster, a.team, CASE WHEN a.team IS NULL THEN coalesce(a.account, '{NONE}') END, a.gpu_type,
               sum(w.idle_s * a.gpu_s / a.job_s), sum(w.tel_s * a.gpu_s / a.job_s)
        FROM a JOIN w USING (job_uid) WHERE a.job_s > 0 GROUP BY ALL""", [start, end]).fetchall()
    return {(c, t, acc, g): (idle or 0.0, tel or 0.0) for c, t, acc, g, idle, tel in rows}


# ---------------------------------------------------------------- pricing

@dataclass
class _Line:
    gpu_s: Fraction = Fraction(0)
    billing_s: Fraction = Fraction(0)
    direct: Fraction = Fraction(0)
    idle: Fraction = Fraction(0)
    rates: set = field(default_factory=set)


def _pool_of(row: dict) -> tuple:
    return (row["cluster"], row["gpu_type"])


def _line_key(row: dict) -> tuple:
    return (row["cluster"], row["team"], row["account"], row["gpu_type"])


def _check_rates(groups: list[dict], cap: list[dict]) -> None:
    for g in groups:
        if g["rate"] is None or g["base_rate"] is None:
            raise CostError(f"no rate for pool {g['gpu_type'] or UNTYPED} on cluster {g['cluster']} from "
                            f"{g['rate_t0']:%Y-%m-%d %H:%M} to {g['rate_t1']:%Y-%m-%d %H:%M} UTC: add a [[rates]] "
                            "entry without partition covering it")
    for c in cap:
        if c["base_rate"] is None and c["gpu_s"]:
            raise CostError(f"no base rate for pool {c['gpu_type'] or UNTYPED} on cluster {c['cluster']} from "
                            f"{c['t0']:%Y-%m-%d %H:%M} to {c['t1']:%Y-%m-%d %H:%M} UTC, which has installed GPUs: add "
                            "a [[rates]] entry without partition covering it")


def _direct(groups: list[dict], basis: str) -> list[Fraction]:
    """Direct cost of each group: GPU-seconds x rate, or (billing basis) the used cost of the groups that share
    a pool, partition key and rate interval, split by billing-TRES-seconds."""
    used = [_frac(g["gpu_s"]) * _frac(g["rate"]) / 3600 for g in groups]
    if basis != "billing_tres":
        return used
    tot_used, tot_bill = {}, {}
    for g, u in zip(groups, used):
        k = (g["cluster"], g["gpu_type"], g["pkey"], g["rate_t0"])
        tot_used[k] = tot_used.get(k, 0) + u
        tot_bill[k] = tot_bill.get(k, 0) + _frac(g["billing_s"])
    out = []
    for g, u in zip(groups, used):
        k = (g["cluster"], g["gpu_type"], g["pkey"], g["rate_t0"])
        out.append(tot_used[k] * _frac(g["billing_s"]) / tot_bill[k] if tot_bill[k] else u)
    return out


def _idle_weights(policy: Policy, pool: tuple, lines: dict, ents: pl.DataFrame | None) -> dict:
    """Weights of the lines of ``pool`` that share its idle cost (empty: idle stays unallocated)."""
    mine = {k: v for k, v in lines.items() if (k[0], k[3]) == pool}
    if policy.idle_policy == "proportional_usage":
        w = {k: v.direct for k, v in mine.items() if v.direct}
        return w or {k: v.gpu_s for k, v in mine.items() if v.gpu_s}
    if policy.idle_policy == "proportional_entitlement" and ents is not None:
        rows = ents.filter((pl.col("cluster") == pool[0]) & (pl.col("gpu_type") == pool[1]) & (pl.col("entitled_s") > 0))
        w = {}
        for r in rows.iter_rows(named=True):
            key = (pool[0], r["team"], None, pool[1])
            lines.setdefault(key, _Line())
            w[key] = Fraction(Decimal(repr(r["entitled_s"])))
        return w
    return {}


def _price(period: str, policy: Policy, groups: list[dict], cap: list[dict], ents, job_counts: dict,
           waste: dict | None, resv: list[dict] = ()) -> tuple[pl.DataFrame, pl.DataFrame]:
    _check_rates(groups, cap)
    lines: dict[tuple, _Line] = {}
    for g, d in zip(groups, _direct(groups, policy.billing_basis)):
        ln = lines.setdefault(_line_key(g), _Line())
        ln.gpu_s += _frac(g["gpu_s"])
        ln.billing_s += _frac(g["billing_s"])
        ln.direct += d
        ln.rates.add(g["rate"])
    pools = sorted({_pool_of(g) for g in groups} | {_pool_of(c) for c in cap}, key=str)
    recon, rlines = [], {}
    for pool in pools:
        recon.append(_price_pool(policy, pool, groups, [c for c in cap if _pool_of(c) == pool], lines, ents,
                                 [r for r in resv if _pool_of(r) == pool], rlines))
    minor = policy.minor_units
    line_rows = _line_rows(period, policy, lines, job_counts, waste)
    if rlines:
        line_rows = _with_reserved(line_rows, _reserved_rows(period, policy, rlines))
    return line_rows, _recon_rows(period, minor, recon, line_rows)


def _price_pool(policy: Policy, pool: tuple, groups: list[dict], cap: list[dict], lines: dict, ents,
                resv: list[dict] = (), rlines: dict | None = None) -> dict:
    """Cluster cost, idle and its sharing for one pool; adds each line's idle share, and (idle shared at all)
    charges reserved idle to the reservations' owners first (``rlines``). Exact (fractions)."""
    mine = [g for g in groups if _pool_of(g) == pool]
    cost_cap = sum((_frac(c["gpu_s"]) * _frac(c["base_rate"]) / 3600 for c in cap), Fraction(0))
    used_base = sum((_frac(g["gpu_s"]) * _frac(g["base_rate"]) / 3600 for g in mine), Fraction(0))
    direct = sum((v.direct for k, v in lines.items() if (k[0], k[3]) == pool), Fraction(0))
    idle_all = cost_cap - used_base
    reserved = _charge_reserved(policy, idle_all, resv, rlines if rlines is not None else {})
    idle = idle_all - reserved
    weights = _idle_weights(policy, pool, lines, ents) if idle > 0 and policy.idle_policy != "none" else {}
    total_w = sum(weights.values(), Fraction(0))
    shared = Fraction(0)
    for k, w in weights.items():
        lines[k].idle = idle * w / total_w
        shared += lines[k].idle
    cap_s = sum((_frac(c["gpu_s"]) for c in cap), Fraction(0))
    alloc_s = sum((_frac(g["gpu_s"]) for g in mine), Fraction(0))
    note = []
    if alloc_s > cap_s:
        note.append(f"allocated exceeds installed GPU-hours by {_hours(alloc_s - cap_s)} (jobs on nodes missing "
                    "from the inventory); the excess is shown as negative idle")
    if idle > 0 and policy.idle_policy != "none" and not weights:
        note.append("idle not shared: no usage" if policy.idle_policy == "proportional_usage"
                    else "idle not shared: no entitlements in this pool")
    if reserved and sum((r["cost"] for r in resv), Fraction(0)) > reserved:
        note.append("reserved idle capped at the pool's idle")
    assert cost_cap == direct + reserved + shared + (idle - shared) + (used_base - direct)  # the exact identity
    return {"cluster": pool[0], "gpu_type": pool[1], "cap_s": cap_s, "alloc_s": alloc_s, "cost": cost_cap,
            "unallocated": idle - shared, "variance": used_base - direct, "note": "; ".join(note) or None}


# ---------------------------------------------------------------- reserved idle (reservations)

def _reserved_idle(con, policy: Policy, start: dt.datetime, end: dt.datetime, cap: list[dict]) -> list[dict]:
    """Reserved-idle GPU-seconds per pool, owner and rate window (models/metrics/reservations.py), priced at the
    pool's base rate in force (the rate that prices capacity, hence idle): dicts with cluster, gpu_type, team,
    account, gpu_s and cost (fractions)."""
    if policy.idle_policy == "none":
        return []
    rows = reservations.idle_by_owner(con, split_at(start, end, [c["t0"] for c in cap] + [c["t1"] for c in cap]))
    rates = {(c["cluster"], c["gpu_type"], c["t0"], c["t1"]): c["base_rate"] for c in cap}
    out = []
    for r in rows.iter_rows(named=True):
        rate = rates.get((r["cluster"], r["gpu_type"], r["w0"], r["w1"]))
        if rate is None:
            continue       # a pool or window without capacity: nothing installed is idle there
        gpu_s = _frac(Decimal(f"{r['idle_s']:.6f}"))
        out.append({"cluster": r["cluster"], "gpu_type": r["gpu_type"], "team": r["team"], "account": r["account"],
                    "gpu_s": gpu_s, "cost": gpu_s * _frac(rate) / 3600})
    return out


def _charge_reserved(policy: Policy, idle: Fraction, resv: list[dict], rlines: dict) -> Fraction:
    """Charge each owner its reserved idle (scaled down to the pool's idle when more is claimed); returns the total."""
    claimed = sum((r["cost"] for r in resv), Fraction(0))
    if not resv or idle <= 0 or claimed <= 0 or policy.idle_policy == "none":
        return Fraction(0)
    scale = min(Fraction(1), idle / claimed)
    for r in resv:
        ln = rlines.setdefault((r["cluster"], r["team"], r["account"], r["gpu_type"]), _Line())
        ln.gpu_s += r["gpu_s"] * scale
        ln.idle += r["cost"] * scale
    return claimed * scale


def _reserved_rows(period: str, policy: Policy, rlines: dict) -> pl.DataFrame:
    rows = [{"period": period, "kind": RESERVED_IDLE, "adjusts_period": None, "cluster": c, "team": t, "account": a,
             "cost_center": policy.cost_center(t), "gpu_type": g, "jobs": 0, "gpu_hours": _hours(ln.gpu_s),
             "billing_hours": None, "rate": None, "rate_note": "reserved GPUs no job used, at the pool's base rate",
             "direct_cost": money(Fraction(0), policy.minor_units), "idle_share": money(ln.idle, policy.minor_units),
             "total": money(ln.idle, policy.minor_units), "waste_gpu_hours": None, "waste_cost": None,
             "telemetry_gpu_hours": None, "job_refs": None}
            for (c, t, a, g), ln in rlines.items()]
    return pl.DataFrame(rows, schema={k: v for k, v in LINE_SCHEMA.items() if k != "line_no"})


def _with_reserved(lines: pl.DataFrame, reserved: pl.DataFrame) -> pl.DataFrame:
    df = pl.concat([lines.drop("line_no"), reserved]).sort(
        ["cluster", "cost_center", "team", "account", "gpu_type", "kind"], nulls_last=True)
    return df.with_columns(pl.int_range(1, df.height + 1, dtype=pl.Int32).alias("line_no")).select(list(LINE_SCHEMA))


def _line_rows(period: str, policy: Policy, lines: dict, job_counts: dict, waste: dict | None) -> pl.DataFrame:
    minor = policy.minor_units
    rows = []
    for key, ln in lines.items():
        cluster, team, account, pool = key
        d, i = money(ln.direct, minor), money(ln.idle, minor)
        rate = next(iter(ln.rates)) if len(ln.rates) == 1 else (
            Decimal(round(ln.direct * 3600 / ln.gpu_s * 10 ** 6)).scaleb(-6) if ln.gpu_s else None)
        note = None
        if len(ln.rates) > 1:
            note = f"blended over {len(ln.rates)} rates (see the by-rate view)"
        if policy.billing_basis == "billing_tres" and ln.gpu_s:
            rate = Decimal(round(ln.direct * 3600 / ln.gpu_s * 10 ** 6)).scaleb(-6)
            note = "effective rate: the pool's used cost shared by billing-TRES-hours"
        idle_s, tel_s = (waste or {}).get(key, (0.0, 0.0))
        w_s = _frac(Decimal(f"{idle_s:.6f}")) if tel_s > 0 else None
        rows.append({
            "period": period, "kind": "charge", "adjusts_period": None, "cluster": cluster, "team": team,
            "account": account, "cost_center": policy.cost_center(team), "gpu_type": pool,
            "jobs": job_counts.get((cluster, team, account, pool), 0), "gpu_hours": _hours(ln.gpu_s),
            "billing_hours": _hours(ln.billing_s) if policy.billing_basis == "billing_tres" else None,
            "rate": rate, "rate_note": note, "direct_cost": d, "idle_share": i, "total": d + i,
            "waste_gpu_hours": None if w_s is None else _hours(w_s),
            "waste_cost": None if w_s is None else money(w_s * ln.direct / ln.gpu_s if ln.gpu_s else Fraction(0), minor),
            "telemetry_gpu_hours": None if waste is None else _hours(_frac(Decimal(f"{tel_s:.6f}"))),
            "job_refs": None})
    df = pl.DataFrame(rows, schema={k: v for k, v in LINE_SCHEMA.items() if k != "line_no"})
    df = df.sort(["cluster", "cost_center", "team", "account", "gpu_type"], nulls_last=True)
    return df.with_columns(pl.int_range(1, df.height + 1, dtype=pl.Int32).alias("line_no")).select(list(LINE_SCHEMA))


def _recon_rows(period: str, minor: int, pools: list[dict], lines: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for p in pools:
        mine = lines.filter((pl.col("cluster") == p["cluster"]) & pl.col("gpu_type").eq_missing(p["gpu_type"]))
        d = sum(mine["direct_cost"].to_list(), Decimal(0))
        i = sum(mine["idle_share"].to_list(), Decimal(0))
        cc, un, va = money(p["cost"], minor), money(p["unallocated"], minor), money(p["variance"], minor)
        residue = cc - d - i - un - va
        rows.append({"period": period, "kind": "pool", "adjusts_period": None, "cluster": p["cluster"],
                     "gpu_type": p["gpu_type"], "capacity_gpu_hours": _hours(p["cap_s"]),
                     "allocated_gpu_hours": _hours(p["alloc_s"]),
                     "idle_gpu_hours": _hours(p["cap_s"]) - _hours(p["alloc_s"]), "cluster_cost": cc,
                     "direct_cost": d, "idle_allocated": i, "unallocated_idle": un, "rate_variance": va,
                     "rounding_residue": residue, "difference": cc - (d + i + un + va + residue), "note": p["note"]})
    rows.append(_sum_row(period, "total", None, rows))
    return _number(pl.DataFrame(rows, schema={k: v for k, v in RECON_SCHEMA.items() if k != "row_no"}))


def _sum_row(period: str, kind: str, adjusts: str | None, rows: list[dict]) -> dict:
    out = {"period": period, "kind": kind, "adjusts_period": adjusts, "cluster": None, "gpu_type": None,
           "note": None}
    for c in ("capacity_gpu_hours", "allocated_gpu_hours", "idle_gpu_hours", "cluster_cost", "direct_cost",
              "idle_allocated", "unallocated_idle", "rate_variance", "rounding_residue", "difference"):
        out[c] = sum((r[c] for r in rows if r[c] is not None), Decimal(0))
    return out


def _number(recon: pl.DataFrame) -> pl.DataFrame:
    return recon.with_columns(pl.int_range(1, recon.height + 1, dtype=pl.Int32).alias("row_no")).select(list(RECON_SCHEMA))


# ---------------------------------------------------------------- views of a computed statement

def _teams_frame(policy: Policy) -> pl.DataFrame:
    return pl.DataFrame([(t, cc) for t, cc, _ in policy.teams], orient="row",
                        schema={"team": pl.String, "cost_center": pl.String})


def _rates_view(period: str, policy: Policy, groups: list[dict]) -> pl.DataFrame:
    rows = []
    for g, d in zip(groups, _direct(groups, policy.billing_basis)):
        rows.append({"period": period, "cluster": g["cluster"], "team": g["team"], "account": g["account"],
                     "cost_center": policy.cost_center(g["team"]), "gpu_type": g["gpu_type"],
                     "partition": g["pkey"], "rate_from": g["rate_from"], "t0": g["rate_t0"], "t1": g["rate_t1"],
                     "gpu_hours": _hours(_frac(g["gpu_s"])),
                     "billing_hours": _hours(_frac(g["billing_s"])) if policy.billing_basis == "billing_tres" else None,
                     "rate": g["rate"], "base_rate": g["base_rate"], "direct_cost": money(d, 6)})
    return pl.DataFrame(rows, schema=RATES_SCHEMA)


def _jobs_view(con, period: str, policy: Policy, kind: str, adjusts: str | None) -> pl.DataFrame:
    """Job-level detail: each job's GPU-hours in the period per pool and its direct cost before rounding."""
    share = ("used" if policy.billing_basis != "billing_tres" else
             "coalesce(sum(used) OVER g * billing_s / nullif(sum(billing_s) OVER g, 0), used)")
    con.register("_cb_teams", _teams_frame(policy).to_arrow())
    try:
        df = con.sql(f"""
            WITH s AS (SELECT *, gpu_s::DOUBLE * rate::DOUBLE / 3600 AS used FROM _alloc),
            d AS (SELECT *, {share} AS direct FROM s
                  WINDOW g AS (PARTITION BY cluster, gpu_type, pkey, rate_t0))
            SELECT $period AS period, $kind AS kind, $adj AS adjusts_period, d.job_uid, d.cluster,
                   any_value(d.job_id) AS job_id, any_value(d.account) AS account, any_value(d."user") AS "user",
                   any_value(d.team) AS team, any_value(t.cost_center) AS cost_center,
                   any_value(d.partition) AS partition, d.gpu_type,
                   greatest(any_value(d.start), min(d.w0)) AS t0,
                   least(coalesce(any_value(d."end"), max(d.w1)), max(d.w1)) AS t1,
                   round(sum(d.gpu_s)::DOUBLE / 3600, 6)::DECIMAL(38, 6) AS gpu_hours,
                   CASE WHEN $billing THEN round(sum(d.billing_s)::DOUBLE / 3600, 6)::DECIMAL(38, 6) END AS billing_hours,
                   round(sum(d.direct), 6)::DECIMAL(24, 6) AS direct_cost
            FROM d LEFT JOIN _cb_teams t ON t.team = d.team
            GROUP BY d.job_uid, d.cluster, d.gpu_type ORDER BY d.cluster, d.job_uid, d.gpu_type NULLS LAST""",
            params={"period": period, "kind": kind, "adj": adjusts,
             "billing": policy.billing_basis == "billing_tres"}).pl()
    finally:
        con.unregister("_cb_teams")
    return df.cast(JOBS_SCHEMA).select(list(JOBS_SCHEMA))


def _fmt(x: Decimal | None, policy: Policy) -> str:
    return "" if x is None else f"{x.quantize(Decimal(1).scaleb(-policy.minor_units)):,} {policy.currency}"


def _amounts(st: Statement) -> dict[str, Decimal]:
    """The summary's money items from the statement's parts (lines and reconciliation), so a frozen statement
    gives the same amounts its frozen summary text shows."""
    t = st.total_row
    charged = sum(st.lines.filter(pl.col("kind").is_in(["charge", RESERVED_IDLE]))["total"].to_list(), Decimal(0))
    adj_total = sum(st.lines.filter(pl.col("kind") == "adjustment")["total"].to_list(), Decimal(0))
    return {"Cluster cost": t["cluster_cost"], "Charged to teams": charged, "  of which direct": t["direct_cost"],
            "  of which idle shares": t["idle_allocated"], "Unallocated idle": t["unallocated_idle"],
            "Rate variance": t["rate_variance"], "Rounding residue": t["rounding_residue"],
            "Adjustments for closed periods": adj_total, "Total of this statement": charged + adj_total}


def _reserved_header(st: Statement) -> list[tuple[str, str]]:
    """A summary row for reserved idle, only when a statement has such lines."""
    r = st.lines.filter(pl.col("kind") == RESERVED_IDLE)
    if not r.height:
        return []
    return [("Reserved idle", f"{sum(r['gpu_hours'].to_list(), Decimal(0))} GPU-hours reserved and left idle, "
                              f"{_fmt(sum(r['total'].to_list(), Decimal(0)), st.policy)} charged to the reservations' "
                              "owners (within the idle shares)")]


#: the header's "Accounting covered (UTC)" for a period no accounting reaches
NO_ACCOUNTING = "no accounting in this period"


def _header(st: Statement, start: dt.datetime, end: dt.datetime, spans: pl.DataFrame,
            have_waste: bool, n_jobs: int) -> list[tuple[str, str]]:
    p, t, a = st.policy, st.total_row, _amounts(st)
    adj = st.lines.filter(pl.col("kind") == "adjustment")
    covered = "; ".join(f"{r['cluster']}: {r['t0']:%Y-%m-%d %H:%M} to {r['t1']:%Y-%m-%d %H:%M}"
                        for r in spans.sort("cluster").iter_rows(named=True)) or NO_ACCOUNTING
    first = spans["t0"].min() if spans.height else None
    status = {"open": f"open ({NO_ACCOUNTING}: nothing to charge or to close)" if first is None else
                      f"open (the accounting starts inside the period, {first:%Y-%m-%d %H:%M} UTC; not closed)"
                      if first > start else "open (the accounting covers the whole period; not closed)",
              "provisional": "provisional (the accounting does not reach the end of the period yet)"}[st.status]
    return [
        ("Statement", f"GPU chargeback {st.period}"),
        ("Status", status),
        ("Period", f"{st.period} in {p.period_timezone}: {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"),
        ("Accounting covered (UTC)", covered),
        ("Currency", p.currency),
        ("Billing basis", {"gpu_hours": "allocated GPU-hours x rate",
                           "billing_tres": "pool's used cost shared by Slurm billing-TRES-hours"}[p.billing_basis]),
        ("Idle policy", {"none": "none: idle is its own line",
                         "proportional_usage": "shared in proportion to direct cost per pool (OpenCost shareIdle)",
                         "proportional_entitlement": "shared in proportion to entitlement per pool"}[p.idle_policy]),
        *_reserved_header(st),
        ("Rounding", f"each amount once, half-even, to {p.minor_units} decimals; the residue is reported"),
        *((k, _fmt(a[k], p)) for k in ("Cluster cost", "Charged to teams", "  of which direct",
                                        "  of which idle shares", "Unallocated idle", "Rate variance",
                                        "Rounding residue")),
        ("Reconciliation", "cluster cost = charged + unallocated idle + rate variance + rounding residue: "
                           + ("holds" if t["difference"] == 0 else f"FAILS by {t['difference']}")),
        ("Adjustments for closed periods", f"{_fmt(a['Adjustments for closed periods'], p)} on {adj.height} lines"),
        ("Total of this statement", _fmt(a["Total of this statement"], p)),
        ("Jobs", str(n_jobs)),
        ("Waste", "idle-allocated GPU-hours from telemetry, priced at the line's rate; shown beside, not added"
         if have_waste else "unavailable: no GPU telemetry efficiency data in the warehouse"),
        ("Governance", "sha256 " + hashlib.sha256(p.document.encode()).hexdigest()),
    ]


# ---------------------------------------------------------------- adjustments for closed periods

def closed_periods(con) -> list[str]:
    return [r[0] for r in con.sql("SELECT period FROM statements ORDER BY period").fetchall()]


def _append_adjustments(con, st: Statement) -> None:
    """Late or changed jobs of the closed periods just before ``st.period`` (those whose next open period this
    is): each such period is restated under its frozen governance and the differences posted here."""
    closed = set(closed_periods(con))
    if st.period in closed:
        return
    targets, p = [], next_period(st.period, -1)
    while p in closed:
        targets.append(p)
        p = next_period(p, -1)
    lines, recon, jobs = [st.lines], [st.recon], [st.jobs]
    for p in sorted(targets):
        l, r, j = _adjustments_for(con, st.period, p)
        lines.append(l)
        recon.append(r)
        jobs.append(j)
    st.lines = pl.concat(lines).with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).alias("line_no"))
    recon = pl.concat(recon)
    if recon.filter(pl.col("kind") == "adjustment").height:
        recon = pl.concat([recon, pl.DataFrame([_sum_row(st.period, "grand_total", None, [
            r for r in recon.to_dicts() if r["kind"] in ("total", "adjustment")])], schema=RECON_SCHEMA)])
    st.recon = _number(recon)
    st.jobs = pl.concat(jobs)


_SUMS = ["gpu_hours", "billing_hours", "direct_cost", "idle_share", "total", "waste_gpu_hours", "waste_cost",
         "telemetry_gpu_hours"]
_RSUMS = ["capacity_gpu_hours", "allocated_gpu_hours", "idle_gpu_hours", "cluster_cost", "direct_cost",
          "idle_allocated", "unallocated_idle", "rate_variance", "rounding_residue"]
_JSUMS = ["gpu_hours", "billing_hours", "direct_cost"]


def _baseline(con, table: str, period: str, keys: list[str], sums: list[str], kind: str) -> pl.DataFrame:
    """What the books already say about closed ``period``: its frozen rows plus every adjustment posted for it."""
    cols = ", ".join(f'"{k}"' for k in keys) + ", " + ", ".join(f"sum({s}) AS {s}" for s in sums)
    return con.sql(f"""SELECT {cols} FROM {table}
                           WHERE (period = $p AND (kind = $kind OR ($kind = 'charge' AND kind = 'reserved idle')))
                              OR (kind = 'adjustment' AND adjusts_period = $p)
                           GROUP BY ALL""", params={"p": period, "kind": kind}).pl()


def _delta(new: pl.DataFrame, old: pl.DataFrame, keys: list[str], sums: list[str]) -> pl.DataFrame:
    new = new.group_by(keys).agg([pl.col(s).sum() for s in sums])
    old = old.select(keys + sums).cast({s: new.schema[s] for s in sums})
    j = new.join(old, on=keys, how="full", coalesce=True, nulls_equal=True, suffix="_old")
    j = j.with_columns([(pl.col(s).fill_null(0) - pl.col(f"{s}_old").fill_null(0)).alias(s) for s in sums])
    return j.select(keys + sums).filter(pl.any_horizontal([pl.col(s).fill_null(0) != 0 for s in sums]))


def _adjustments_for(con, here: str, period: str) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    doc = con.execute("SELECT policy_document FROM statements WHERE period = ?", [period]).fetchall()[0][0]
    restated = compute(con, period, policy=Policy.from_document(doc), adjustments=False)
    jkeys = ["job_uid", "cluster", "gpu_type"]
    jd = _delta(restated.jobs, _baseline(con, "statement_jobs", period, jkeys, _JSUMS, "charge"), jkeys, _JSUMS)
    info = pl.concat([restated.jobs.drop(_JSUMS), con.sql(
        "SELECT * EXCLUDE (gpu_hours, billing_hours, direct_cost) FROM statement_jobs WHERE period = $p OR adjusts_period = $p",
        params={"p": period}).pl().cast({k: v for k, v in JOBS_SCHEMA.items() if k not in _JSUMS})])
    info = info.unique(subset=jkeys, keep="first", maintain_order=True).drop(["period", "kind", "adjusts_period"])
    jobs = jd.join(info, on=jkeys, how="left", nulls_equal=True).with_columns(
        period=pl.lit(here), kind=pl.lit("adjustment"), adjusts_period=pl.lit(period))
    jobs = jobs.cast(JOBS_SCHEMA).select(list(JOBS_SCHEMA)).sort(["cluster", "job_uid", "gpu_type"], nulls_last=True)
    lines = _adjustment_lines(con, here, period, restated, jobs)
    rkeys = ["cluster", "gpu_type"]
    rd = _delta(restated.recon.filter(pl.col("kind") == "pool"),
                _baseline(con, "statement_recon", period, rkeys, _RSUMS, "pool"), rkeys, _RSUMS)
    recon = rd.with_columns(
        period=pl.lit(here), kind=pl.lit("adjustment"), adjusts_period=pl.lit(period),
        note=pl.lit(f"restatement of {period}: late or changed jobs"), row_no=pl.lit(0, pl.Int32),
        difference=pl.col("cluster_cost") - pl.sum_horizontal(
            "direct_cost", "idle_allocated", "unallocated_idle", "rate_variance", "rounding_residue"))
    return lines, recon.cast(RECON_SCHEMA).select(list(RECON_SCHEMA)), jobs


def _adjustment_lines(con, here: str, period: str, restated: Statement, jobs: pl.DataFrame) -> pl.DataFrame:
    keys = LINE_KEY
    old = _baseline(con, "statement_lines", period, keys, _SUMS, "charge")
    d = _delta(restated.lines, old, keys, _SUMS)
    refs = (jobs.with_columns(account=pl.when(pl.col("team").is_null()).then(pl.col("account").fill_null(NONE)))
            .group_by(keys).agg(pl.len().alias("jobs"), pl.col("job_id").sort().str.join(" ").alias("job_refs")))
    rates = restated.lines.select(keys + ["rate"])
    out = (d.join(refs, on=keys, how="left", nulls_equal=True).join(rates, on=keys, how="left", nulls_equal=True)
           .with_columns(period=pl.lit(here), kind=pl.lit("adjustment"), adjusts_period=pl.lit(period),
                         line_no=pl.lit(0, pl.Int32), jobs=pl.col("jobs").fill_null(0),
                         rate_note=pl.lit(f"restatement of {period}")))
    return out.cast(LINE_SCHEMA).select(list(LINE_SCHEMA)).sort(keys, nulls_last=True)


# ---------------------------------------------------------------- closing and reading statements

PARTS = {"lines": ("statement_lines", "line_no", LINE_SCHEMA), "recon": ("statement_recon", "row_no", RECON_SCHEMA),
         "rates": ("statement_rates", "cluster, gpu_type, team, account, partition, t0", RATES_SCHEMA),
         "jobs": ("statement_jobs", "kind, adjusts_period, cluster, job_uid, gpu_type", JOBS_SCHEMA)}


def close_refusal(st: Statement) -> str | None:
    """Why the statement ``st`` cannot be closed now, in words that follow "cannot close PERIOD: "; None when
    it can. The close (models/pipeline/close.py) and the Chargeback page's close button say the same."""
    covered = dict(st.header).get("Accounting covered (UTC)", "")
    if st.status == "closed":
        return "it is closed already"
    if covered == NO_ACCOUNTING:
        return "no accounting covers it"
    if st.status == "provisional":
        return (f"the accounting does not reach the end of the period yet ({covered}); "
                "ingest the rest of the month first")
    return None


def content_hash(header: list, policy_document: str, parts: dict[str, pl.DataFrame]) -> str:
    """sha256 over the summary, the governance and the canonical CSV of every part, in a fixed order."""
    h = hashlib.sha256()
    h.update(json.dumps(header).encode())
    h.update(policy_document.encode())
    for name in PARTS:
        h.update(f"\n--{name}--\n".encode())
        h.update(parts[name].write_csv().encode())
    return h.hexdigest()


def read_parts(con, period: str) -> dict[str, pl.DataFrame]:
    out = {}
    for name, (table, order, schema) in PARTS.items():
        out[name] = con.sql(f"SELECT * FROM {table} WHERE period = $p ORDER BY {order} NULLS LAST",
                            params={"p": period}).pl().cast(schema).select(list(schema))
    return out




def statement(con, period: str, detail: bool = True, verify: bool = True) -> Statement:
    """The statement of ``period``: the frozen one if the period is closed (its hash verified unless not
    ``verify``: a team-scoped reader sees the frozen rows masked, and verifies on the unscoped rows first),
    else computed (without its job-level detail unless ``detail``)."""
    rows = con.execute("SELECT closed_at, content_hash, header, policy_document FROM statements WHERE period = ?",
                       [period]).fetchall()
    if not rows:
        stored = None if detail else stored_open(con, period)
        return stored if stored is not None else compute(con, period, detail=detail)
    closed_at, digest, header, doc = rows[0]
    header = [tuple(x) for x in json.loads(header)]
    parts = read_parts(con, period)
    if verify and content_hash(header, doc, parts) != digest:
        raise CostError(f"closed statement {period} does not match its content hash {digest[:12]}: "
                        "the statement tables were modified after the close")
    header = [(k, v) for k, v in header if k != "Status"]
    header.insert(1, ("Status", f"closed {closed_at:%Y-%m-%d %H:%M:%S} UTC; frozen: later jobs appear as "
                                "adjustments in the next open period"))
    header.append(("Content hash", "sha256 " + digest))
    return Statement(period=period, status="closed", policy=Policy.from_document(doc), header=header,
                     closed_at=closed_at, content_hash=digest, **parts)


#: part of a stored open statement -> (table, order, schema); written by models/pipeline/open_statements.py
OPEN_PARTS = {"lines": ("open_statement_lines", "line_no", LINE_SCHEMA),
              "recon": ("open_statement_recon", "row_no", RECON_SCHEMA),
              "rates": ("open_statement_rates", "cluster, gpu_type, team, account, partition, t0", RATES_SCHEMA)}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def closed_fingerprint(con) -> str:
    """A hash of the closed periods and their content hashes: a stored open statement is stale once it changes
    (a period closed since needs its adjustments)."""
    return sha(json.dumps(con.sql("SELECT period, content_hash FROM statements ORDER BY period").fetchall()))


def stored_open(con, period: str) -> Statement | None:
    """The statement of open ``period`` as `gpuledger refresh` stored it (without job-level detail) while it is
    still what :func:`compute` would give: no ingest run since, the same governance, the same closed periods."""
    if not has_table(con, "open_statements"):
        return None
    rows = con.execute("SELECT run_id, policy_sha, closed_sha, status, header FROM open_statements WHERE period = ?",
                       [period]).fetchall()
    if not rows:
        return None
    run_id, policy_sha, closed_sha, status, header = rows[0]
    try:
        policy = current_policy(con)
    except CostError:
        return None
    if (run_id != newest_run(con) or policy_sha != sha(policy.document)
            or closed_sha != closed_fingerprint(con)):
        return None
    parts = {name: con.sql(f"SELECT * FROM {table} WHERE period = $p ORDER BY {order} NULLS LAST",
                           params={"p": period}).pl().cast(schema).select(list(schema))
             for name, (table, order, schema) in OPEN_PARTS.items()}
    return Statement(period=period, status=status, policy=policy, header=[tuple(x) for x in json.loads(header)],
                     jobs=pl.DataFrame(schema=JOBS_SCHEMA), detail=False, **parts)


def recent_periods(con, policy: Policy) -> list[str]:
    """The period (in the governance's time zone) holding the earliest data horizon, and the one before: the
    months the dashboard's cost tile shows, stored by `gpuledger refresh`."""
    hz = timeline.horizon(con)
    if hz is None:
        return []
    last = period_of(hz - dt.timedelta(microseconds=1), policy.period_timezone)
    return [next_period(last, -1), last]


# ---------------------------------------------------------------- presentation tables

#: columns of the views holding money in the statement's currency, and rates per GPU-hour
MONEY_COLUMNS = ("direct_cost", "idle_share", "total", "waste_cost", "cluster_cost", "idle_allocated",
                 "unallocated_idle", "rate_variance", "rounding_residue", "difference", "amount")
RATE_COLUMNS = ("rate", "base_rate", "price_per_gpu_hour")


def units(st: Statement) -> dict[str, str]:
    """Column -> unit of the statement's views (currency, currency per GPU-hour), for typed exports."""
    cur = st.policy.currency
    return {**dict.fromkeys(MONEY_COLUMNS, cur), **dict.fromkeys(RATE_COLUMNS, f"{cur}/GPU-h")}


def summary_frame(st: Statement) -> pl.DataFrame:
    """The summary typed: item; value (text items); amount (money, in the currency's minor units); count (jobs,
    adjustment lines). Money and counts come from the statement's parts; the header's text stays as frozen."""
    amounts, n_adj = _amounts(st), st.lines.filter(pl.col("kind") == "adjustment").height
    rows = []
    for item, text in st.header:
        count = n_adj if item == "Adjustments for closed periods" else _whole(text) if item == "Jobs" else None
        amount = amounts.get(item)
        typed = amount is not None or count is not None
        rows.append((item, None if typed else text, amount, count))
    return pl.DataFrame(rows, orient="row", schema={"item": pl.String, "value": pl.String,
                                                    "amount": pl.Decimal(18, st.policy.minor_units),
                                                    "count": pl.Int64})


def _whole(text: str) -> int | None:
    return int(text.replace(",", "")) if text.replace(",", "").isdigit() else None


def reconciliation_sentence(total: dict, minor: int, currency: str) -> str:
    """The statement's reconciliation in one sentence, the same words wherever it is shown (the CLI, the
    Chargeback page, the finance pack): cluster cost = charged to teams (direct + idle shares) + unallocated idle
    + rate variance + rounding residue, amounts in ``currency`` to ``minor`` decimals."""
    m = lambda x: f"{x:,.{minor}f}"   # noqa: E731
    return (f"cluster cost {m(total['cluster_cost'])} {currency} = charged to teams "
            f"{m(total['direct_cost'] + total['idle_allocated'])} (direct {m(total['direct_cost'])} + idle shares "
            f"{m(total['idle_allocated'])}) + unallocated idle {m(total['unallocated_idle'])} + rate variance "
            f"{m(total['rate_variance'])} + rounding residue {m(total['rounding_residue'])}")


def views(st: Statement) -> dict[str, pl.DataFrame]:
    """The statement as named tables, in workbook order: summary, one per view, job-level detail last.
    Money columns carry the currency's minor units."""
    m = pl.Decimal(18, st.policy.minor_units)
    money_cols = ["direct_cost", "idle_share", "total", "waste_cost"]
    label = [pl.when(pl.col("team").is_null()).then(pl.lit(UNMAPPED)).otherwise(pl.col("team")).alias("team")]
    charges = st.lines.filter(pl.col("kind") != "adjustment").drop("period", "adjusts_period", "job_refs")
    charges = charges.with_columns([pl.col(c).cast(m) for c in money_cols] + label)
    agg = [pl.col("jobs").sum(), pl.col("gpu_hours").sum(), pl.col("direct_cost").sum(), pl.col("idle_share").sum(),
           pl.col("total").sum(), pl.col("waste_gpu_hours").sum(), pl.col("waste_cost").sum(),
           pl.col("telemetry_gpu_hours").sum()]
    def by(cols):
        out = charges.group_by(cols).agg(agg).sort(cols, nulls_last=True)
        if charges["waste_cost"].null_count() == charges.height:   # unavailable stays unavailable, not 0
            out = out.with_columns(pl.lit(None, QTY).alias("waste_gpu_hours"), pl.lit(None, m).alias("waste_cost"),
                                   pl.lit(None, QTY).alias("telemetry_gpu_hours"))
        return out
    recon_money = ["cluster_cost", "direct_cost", "idle_allocated", "unallocated_idle", "rate_variance",
                   "rounding_residue", "difference"]
    return {
        "summary": summary_frame(st),
        "by team": charges,
        "by cost centre": by(["cost_center"]),
        "by gpu type": by(["cluster", "gpu_type"]),
        "reconciliation": st.recon.drop("period").with_columns([pl.col(c).cast(m) for c in recon_money]),
        "adjustments": st.lines.filter(pl.col("kind") == "adjustment").drop("period", "kind")
                         .with_columns([pl.col(c).cast(m) for c in money_cols] + label),
        "by rate": st.rates.drop("period"),
        "rate card": rate_card_frame(st.policy),
        **({"jobs": st.jobs.drop("period")} if st.detail else {}),
    }


def rate_card_frame(policy: Policy) -> pl.DataFrame:
    rows = [(r.cluster or "*", r.gpu_type, r.partition or "(base)", r.valid_from, r.valid_to, r.price,
             policy.currency, r.method, r.derivation or "") for r in policy.rates]
    return pl.DataFrame(rows, orient="row", schema={
        "cluster": pl.String, "gpu_type": pl.String, "partition": pl.String, "valid_from": pl.Datetime("us"),
        "valid_to": pl.Datetime("us"), "price_per_gpu_hour": RATE, "currency": pl.String, "method": pl.String,
        "derivation": pl.String})
