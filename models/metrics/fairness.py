"""Is the cluster shared as agreed? Usage against entitlement per team and pool, Slurm's fair-share factors,
Jain's index and Gini, the entitlement gap.

Definitions (docs/METRICS.md, "Fairness"; sources in ../shared/METRICS.md section 2 and ../shared/ANCHORS.md):

- usage U_i: allocated GPU-hours of team i in the window and pool (from the timeline); usage share U_i/sum U.
- entitlement E_i: entitled GPU-hours in the window (a share of the pool's capacity, or a quota); its share
  S_i = E_i/sum E. A pool without entitlements gives every team present an equal share (Slurm's default
  Fairshare=1 per association). For the whole cluster (pool ``(all)``), teams' ``fairshare`` raw shares are
  used when the governance sets any (normalised down the association tree, as Slurm does), else sum E.
- share ratio r_i = (U_i/sum U)/S_i.
- decayed usage: every GPU-second weighted 2^(-age/half-life) at the window's end (Slurm PriorityDecayHalfLife,
  continuous instead of every PriorityCalcPeriod); its normalised form U~_i = D_i/sum D.
- Slurm classic fair-share factor F_i = 2^(-U~_i/S_i) (dampening 1); Fair Tree level factor LF_i = S_i/U~_i
  (infinite, shown empty, with no usage).
- Jain's index over r_i of teams that had pending demand (J = (sum r)^2/(n sum r^2)); Gini over r_i of teams with
  an entitlement and any usage or demand (G = sum_ij |r_i - r_j| / (2 n^2 mean r)).
- entitlement gap g_i = max(0, min(D_i, E_i) - U_i) / E_i with demand D_i = U_i + pending GPU-hours.
"""
from __future__ import annotations

import datetime as dt
import math

import polars as pl

from ingest.warehouse import frame, has_table
from models.definitions.jobs_sql import team_sql
from models.definitions.labels import ALL, UNTYPED
from models.definitions.policy import Policy, current_policy
from models.definitions.times import ceil_day, floor_day
from models.kernels.decay import decay_integral_sql
from models.metrics import cost, queue, timeline

ALL_POOLS = ALL
#: Usage older than this many half-lives weighs < 1e-6 and is not read.
DECAY_HORIZON_HALF_LIVES = 20


# ---------------------------------------------------------------- formulas

def jain(x: list[float]) -> float | None:
    """Jain's fairness index (Jain, Chiu & Hawe 1984): 1 = perfectly equal, 1/n = one takes all."""
    x = [v for v in x if v is not None and math.isfinite(v)]
    sq = sum(v * v for v in x)
    return None if not x or sq == 0 else sum(x) ** 2 / (len(x) * sq)


def gini(x: list[float]) -> float | None:
    """Gini coefficient: 0 = equal, towards 1 = concentrated."""
    x = [v for v in x if v is not None and math.isfinite(v)]
    if not x or sum(x) == 0:
        return None
    n, mean = len(x), sum(x) / len(x)
    return sum(abs(a - b) for a in x for b in x) / (2 * n * n * mean)


def classic_factor(norm_usage: float, norm_shares: float, dampening: float = 1.0) -> float:
    """Slurm classic fair-share factor 2^(-U/S/d); 0 for an association without shares."""
    if norm_shares <= 0:
        return 0.0
    return 2.0 ** (-norm_usage / norm_shares / dampening)


def level_fs(norm_shares: float, norm_usage: float) -> float:
    """Fair Tree level fairshare S/U (infinite without usage)."""
    return math.inf if norm_usage <= 0 else norm_shares / norm_usage


def association_tree(nodes: pl.DataFrame) -> pl.DataFrame:
    """sshare-like columns for an association tree ``nodes`` (node, parent (None = root), raw_shares, raw_usage;
    raw_usage of leaves, parents' usage is their children's sum unless given).

    Returns node, parent, depth, raw_shares, norm_shares (S_self/S_self+siblings, Fair Tree and sshare),
    raw_usage, norm_usage (over the root's), effectv_usage (over the parent's: Fair Tree's sshare column),
    level_fs (norm_shares/effectv_usage), classic_shares (the product down the tree), classic_effectv_usage
    (U_E = U + (U_E,parent - U) S_child/S_siblings), classic_fairshare (2^(-U_E/S)) and, for leaves,
    fair_tree_fairshare (Fair Tree's rank / number of leaves)."""
    rows = {r["node"]: dict(r) for r in nodes.iter_rows(named=True)}
    kids: dict = {}
    for n, r in rows.items():
        kids.setdefault(r["parent"], []).append(n)

    def usage(n):
        own = rows[n].get("raw_usage")
        return own if own is not None and n not in kids else sum(usage(k) for k in kids.get(n, [])) + (own or 0.0)
    total = sum(usage(n) for n in kids.get(None, []))
    out = []

    def walk(parent, depth, p_usage, p_shares, p_ue):
        sibs = kids.get(parent, [])
        s_sum = sum(rows[k]["raw_shares"] or 0 for k in sibs)
        for n in sorted(sibs):
            raw_s, u = rows[n]["raw_shares"] or 0.0, usage(n)
            ns = raw_s / s_sum if s_sum else 0.0
            eff = u / p_usage if p_usage else 0.0
            cs = p_shares * ns
            nu = u / total if total else 0.0
            ue = nu + (p_ue - nu) * ns if parent is not None else nu
            out.append({"node": n, "parent": parent, "depth": depth, "raw_shares": raw_s, "norm_shares": ns,
                        "raw_usage": u, "norm_usage": nu, "effectv_usage": eff,
                        "level_fs": None if eff <= 0 else ns / eff, "classic_shares": cs,
                        "classic_effectv_usage": ue, "classic_fairshare": classic_factor(ue, cs)})
            walk(n, depth + 1, u, cs, ue)
    walk(None, 1, total, 1.0, 0.0)
    _fair_tree_ranks(out, kids)
    return pl.DataFrame(out, schema={
        "node": pl.String, "parent": pl.String, "depth": pl.Int32, "raw_shares": pl.Float64,
        "norm_shares": pl.Float64, "raw_usage": pl.Float64, "norm_usage": pl.Float64, "effectv_usage": pl.Float64,
        "level_fs": pl.Float64, "classic_shares": pl.Float64, "classic_effectv_usage": pl.Float64,
        "classic_fairshare": pl.Float64, "fair_tree_fairshare": pl.Float64})


def _fair_tree_ranks(rows: list[dict], kids: dict) -> None:
    """Fair Tree's FairShare for leaves: a depth-first walk visiting siblings by level fairshare, highest first
    (no usage = infinite); the n-th leaf visited of N gets (N - n + 1) / N; siblings tied in level fairshare tie."""
    by = {r["node"]: r for r in rows}
    leaves = [r for r in rows if r["node"] not in kids]
    order: list[list[dict]] = []

    def lf(n):
        v = by[n]["level_fs"]
        return math.inf if v is None else v

    def walk(parent):
        sibs = sorted(kids.get(parent, []), key=lambda n: (-lf(n), n))
        for n in sibs:
            if n in kids:
                walk(n)
            elif order and order[-1][0]["parent"] == parent and lf(order[-1][0]["node"]) == lf(n):
                order[-1].append(by[n])
            else:
                order.append([by[n]])
    walk(None)
    rank = len(leaves)
    for group in order:
        for r in group:
            r["fair_tree_fairshare"] = rank / len(leaves)
        rank -= len(group)
    for r in rows:
        r.setdefault("fair_tree_fairshare", None)


# ---------------------------------------------------------------- usage

def decayed_usage(con, at: dt.datetime, half_life_days: float, basis: str = "gpu") -> pl.DataFrame:
    """Usage decayed to ``at``: every second weighted 2^(-(at - t)/half-life), integrated exactly over each
    allocation. basis 'gpu': GPU-seconds per (cluster, gpu_type, team, account) from the timeline; 'billing':
    billing-TRES-seconds per (cluster, team, account) from jobs (all jobs, as sshare's RawUsage)."""
    h = half_life_days * 86400.0
    since = at - dt.timedelta(seconds=h * DECAY_HORIZON_HALF_LIVES)
    if basis == "gpu":
        return _decayed_gpu(con, since, at, h)
    hz = timeline.horizon(con) or at
    sql = f"""
        WITH p AS (SELECT cluster, {team_sql('jobs')} AS team, account, billing,
                          greatest(start, $s) AS a, least(coalesce("end", $hz), $at) AS z
                   FROM jobs WHERE start IS NOT NULL AND start < $at AND coalesce("end", $hz) > $s AND billing > 0)
        SELECT cluster, team, account, sum({decay_integral_sql('billing')}) AS decayed FROM p WHERE z > a GROUP BY ALL"""
    return frame(con, sql, {"s": since, "at": at, "h": h, "hz": hz})


def _decayed_gpu(con, since: dt.datetime, at: dt.datetime, h: float) -> pl.DataFrame:
    """GPU-seconds decayed to ``at`` per (cluster, gpu_type, team, account): whole days from tl_decay_daily when
    it was rolled up at this half-life (a day's value x 2^(-(at - day) / h)), the part-days at both ends from
    the timeline's pieces."""
    keys = ["cluster", "gpu_type", "team", "account"]
    d0, d1 = ceil_day(since), floor_day(at)
    if d1 <= d0 or not has_table(con, "tl_decay_daily") or con.execute(
            "SELECT count(*) FILTER (WHERE half_life_s IS DISTINCT FROM ?) FROM tl_clusters", [h]).fetchall()[0][0]:
        return _decayed_pieces(con, since, at, at, h)
    days = frame(con, """
        SELECT cluster, pool AS gpu_type, team, account,
               sum(decayed_s * pow(2, -(epoch($at) - epoch(day)) / $h)) AS decayed
        FROM tl_decay_daily WHERE day >= $d0 AND day < $d1 GROUP BY ALL""", {"at": at, "h": h, "d0": d0, "d1": d1})
    parts = [p.select(*keys, "decayed") for p in (_decayed_pieces(con, since, d0, at, h), days,
                                                  _decayed_pieces(con, d1, at, at, h)) if p.height]
    if not parts:
        return days
    return pl.concat(parts, how="vertical_relaxed").group_by(keys).agg(pl.col("decayed").sum())


def _decayed_pieces(con, s: dt.datetime, e: dt.datetime, at: dt.datetime, h: float) -> pl.DataFrame:
    """The timeline's pieces inside [s, e), decayed to ``at``, per (cluster, gpu_type, team, account)."""
    # the integral adds up over any split of a piece, so pieces are used whole (clipped) and joined to their
    # jobs directly (about one piece per job: grouping by job first only added a pass)
    return frame(con, f"""
        WITH p AS (SELECT job_uid, cluster, gpu_type, gpus, greatest(t0, $s) AS a, least(t1, $e) AS z
                   FROM tl_job_alloc WHERE t1 > $s AND t0 < $e AND gpus > 0)
        SELECT p.cluster, coalesce(p.gpu_type, j.gpu_type, '{UNTYPED}') AS gpu_type,
               {team_sql()} AS team, j.account, sum({decay_integral_sql('p.gpus')}) AS decayed
        FROM p JOIN jobs j USING (job_uid) GROUP BY ALL""", {"s": s, "e": e, "at": at, "h": h})


# ---------------------------------------------------------------- the association tree (sshare view)

def sshare(con, at: dt.datetime | None = None, half_life_days: float | None = None, basis: str = "billing",
           policy: Policy | None = None) -> pl.DataFrame:
    """Our numbers in sshare's shape, to hold against `sshare -l`: the governance association tree (teams
    with their ``fairshare`` and ``parent``), usage decayed to ``at`` (default: the data horizon). Raw usage is
    billing-TRES-seconds like sshare's RawUsage (``basis='gpu'`` for GPU-seconds). A team is matched to its jobs
    through team_map, so a team that is one Slurm account compares one to one."""
    policy = policy or current_policy(con)
    at = at or timeline.horizon(con)
    hl = half_life_days or policy.half_life_days
    use = decayed_usage(con, at, hl, basis).group_by("team").agg(pl.col("decayed").sum())
    by_team = dict(use.iter_rows())
    nodes = [{"node": n, "parent": p, "raw_shares": 1.0 if s is None else s,
              "raw_usage": by_team.get(n, 0.0) if is_team else None} for n, p, s, is_team in policy.team_tree]
    frame = pl.DataFrame(nodes, schema={"node": pl.String, "parent": pl.String, "raw_shares": pl.Float64,
                                        "raw_usage": pl.Float64})
    return association_tree(frame).with_columns(pl.lit(at, pl.Datetime("us")).alias("as_of"))


# ---------------------------------------------------------------- the fairness report

def default_windows(con, days: tuple | list, end: dt.datetime | None = None) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """(label, start, end) windows of ``days`` days ending at ``end`` (default: the data horizon)."""
    end = end or timeline.horizon(con)
    if end is None:
        return []
    return [(f"{d}d", end - dt.timedelta(days=d), end) for d in days]


def report(con, windows: list[tuple[str, dt.datetime, dt.datetime]], policy: Policy | None = None,
           half_life_days: float | None = None, pool: str | None = None) -> dict[str, pl.DataFrame]:
    """Fairness per window, cluster and pool (each GPU type, and ``(all)``): {"teams": per team, "pools": per
    pool (Jain, Gini, largest gap)}. GPU-hours; shares and ratios are fractions."""
    policy = policy or current_policy(con)
    hl = half_life_days or policy.half_life_days
    teams = [_window_teams(con, policy, label, s, e, hl) for label, s, e in windows]
    teams = pl.concat([t for t in teams if t.height]) if any(t.height for t in teams) else _empty_teams()
    if pool:
        teams = teams.filter(pl.col("pool") == pool)
    return {"teams": teams, "pools": _pool_summary(teams)}


def _window_teams(con, policy, label, start, end, hl) -> pl.DataFrame:
    keys = ["cluster", "pool", "team"]
    use = _usage(con, start, end)
    ent = (cost.entitled_gpu_seconds(con, policy, start, end).rename({"gpu_type": "pool"})
           .with_columns((pl.col("entitled_s") / 3600).alias("entitled_gpu_h")).drop("entitled_s"))
    pend = queue.pending_gpu_hours(con, start, end).rename({"gpu_type": "pool"})
    dec = (decayed_usage(con, end, hl, "gpu").rename({"gpu_type": "pool"})
           .group_by(keys).agg((pl.col("decayed").sum() / 3600).alias("decayed_gpu_h")))
    frames = [use, ent, pend.filter(pl.col("pool") != "(any)"), dec]
    per_pool = _outer(frames, keys)
    whole = _outer([f.group_by("cluster", "team").agg(pl.exclude("pool").sum()).with_columns(pool=pl.lit(ALL_POOLS))
                    for f in (use, ent, pend, dec)], keys)
    whole = _fairshare_shares(whole, policy)
    out = pl.concat([per_pool.with_columns(shares_from=pl.lit("entitlements"), raw_share=pl.col("entitled_gpu_h")),
                     whole], how="diagonal_relaxed")
    out = _derive(out).with_columns(window=pl.lit(label), window_start=pl.lit(start, pl.Datetime("us")),
                                    window_end=pl.lit(end, pl.Datetime("us")))
    return out.select(list(_TEAM_SCHEMA)).cast(_TEAM_SCHEMA).sort("window", "cluster", "pool", "team")


def _usage(con, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Allocated GPU-hours per (cluster, pool, team) in [start, end): the node's pool, else the job's GPU type.
    From the daily demand rollup (timeline.demand_sql: whole days rolled up, part-days from the pieces) unless a
    node there has no pool, whose jobs' own GPU type only the pieces carry."""
    sql, params = timeline.demand_sql(start, end)
    use = frame(con, f"""
        SELECT cluster, gpu_type AS pool, {team_sql('')} AS team, sum(gpu_s) / 3600 AS usage_gpu_h
        FROM ({sql}) GROUP BY ALL""", params)
    return use if use["pool"].null_count() == 0 else _usage_from_pieces(con, start, end)


def _usage_from_pieces(con, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """:func:`_usage` from the jobs' pieces in the window."""
    con.register("_fair_alloc", cost.job_allocations(con, start, end).to_arrow())
    try:
        return con.sql(f"""
            SELECT a.cluster, coalesce(a.gpu_type, j.gpu_type, '{UNTYPED}') AS pool,
                   {team_sql()} AS team, sum(a.gpu_s) / 3600 AS usage_gpu_h
            FROM _fair_alloc a JOIN jobs j USING (job_uid) GROUP BY ALL""").pl()
    finally:
        con.unregister("_fair_alloc")


def _outer(frames: list[pl.DataFrame], keys: list[str]) -> pl.DataFrame:
    out = None
    for f in frames:
        f = f.select(keys + [c for c in f.columns if c not in keys])
        out = f if out is None else out.join(f, on=keys, how="full", coalesce=True)
    cols = {"usage_gpu_h": 0.0, "entitled_gpu_h": 0.0, "pending_gpu_h": 0.0, "decayed_gpu_h": 0.0}
    for c in cols:
        if c not in out.columns:
            out = out.with_columns(pl.lit(0.0).alias(c))
    return out.with_columns([pl.col(c).fill_null(0.0) for c in cols])


def _fairshare_shares(whole: pl.DataFrame, policy: Policy) -> pl.DataFrame:
    """The (all) pool: teams' Slurm-style raw shares normalised down the tree, when the governance sets any."""
    if not any(s is not None for n, p, s, is_team in policy.team_tree if is_team):
        return whole.with_columns(shares_from=pl.lit("entitlements"))
    nodes = pl.DataFrame([{"node": n, "parent": p, "raw_shares": 1.0 if s is None else s, "raw_usage": 0.0}
                          for n, p, s, _ in policy.team_tree],
                         schema={"node": pl.String, "parent": pl.String, "raw_shares": pl.Float64,
                                 "raw_usage": pl.Float64})
    shares = association_tree(nodes).select(pl.col("node").alias("team"), pl.col("classic_shares").alias("fs_share"))
    return (whole.join(shares, on="team", how="left")
            .with_columns(raw_share=pl.col("fs_share").fill_null(0.0), shares_from=pl.lit("fairshare"))
            .drop("fs_share"))


def _derive(df: pl.DataFrame) -> pl.DataFrame:
    g = ["cluster", "pool"]
    tot = lambda c: pl.col(c).sum().over(g)
    if "raw_share" not in df.columns:
        df = df.with_columns(raw_share=pl.lit(None, pl.Float64))
    df = df.with_columns(raw_share=pl.coalesce("raw_share", "entitled_gpu_h"))
    equal = tot("raw_share") == 0
    share = pl.when(equal).then(1.0 / pl.len().over(g)).otherwise(pl.col("raw_share") / tot("raw_share"))
    df = df.with_columns(
        shares_from=pl.when(equal).then(pl.lit("equal (no entitlements)")).otherwise(pl.col("shares_from")),
        usage_share=pl.col("usage_gpu_h") / tot("usage_gpu_h"), entitlement_share=share,
        norm_decayed_usage=pl.col("decayed_gpu_h") / tot("decayed_gpu_h"),
        demand_gpu_h=pl.col("usage_gpu_h") + pl.col("pending_gpu_h"))
    ent_h = pl.col("entitled_gpu_h")
    gap_h = pl.max_horizontal(pl.min_horizontal("demand_gpu_h", ent_h) - pl.col("usage_gpu_h"), pl.lit(0.0))
    return df.with_columns(
        share_ratio=pl.when(pl.col("entitlement_share") > 0).then(pl.col("usage_share") / pl.col("entitlement_share")),
        fairshare_classic=pl.when(pl.col("entitlement_share") > 0)
            .then(pl.lit(2.0).pow(-pl.col("norm_decayed_usage").fill_nan(0) / pl.col("entitlement_share"))).otherwise(0.0),
        level_fs=pl.when(pl.col("norm_decayed_usage") > 0).then(pl.col("entitlement_share") / pl.col("norm_decayed_usage")),
        gap_gpu_h=pl.when(ent_h > 0).then(gap_h), gap=pl.when(ent_h > 0).then(gap_h / ent_h))


_TEAM_SCHEMA = {
    "window": pl.String, "window_start": pl.Datetime("us"), "window_end": pl.Datetime("us"), "cluster": pl.String,
    "pool": pl.String, "team": pl.String, "usage_gpu_h": pl.Float64, "usage_share": pl.Float64,
    "entitled_gpu_h": pl.Float64, "entitlement_share": pl.Float64, "shares_from": pl.String,
    "share_ratio": pl.Float64, "decayed_gpu_h": pl.Float64, "norm_decayed_usage": pl.Float64,
    "fairshare_classic": pl.Float64, "level_fs": pl.Float64, "pending_gpu_h": pl.Float64,
    "demand_gpu_h": pl.Float64, "gap_gpu_h": pl.Float64, "gap": pl.Float64}


def _empty_teams() -> pl.DataFrame:
    return pl.DataFrame(schema=_TEAM_SCHEMA)


def _pool_summary(teams: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for (window, cluster, pool), t in teams.group_by(["window", "cluster", "pool"], maintain_order=True):
        demand = t.filter((pl.col("pending_gpu_h") > 0) & (pl.col("entitlement_share") > 0))
        active = t.filter((pl.col("entitlement_share") > 0) & (pl.col("demand_gpu_h") > 0))
        gaps = t.filter(pl.col("gap").is_not_null()).sort("gap", descending=True)
        rows.append({"window": window, "cluster": cluster, "pool": pool, "teams": t.height,
                     "allocated_gpu_h": t["usage_gpu_h"].sum(), "pending_gpu_h": t["pending_gpu_h"].sum(),
                     "teams_with_pending_demand": demand.height,
                     "jain_pending_teams": jain(demand["share_ratio"].to_list()),
                     "gini": gini(active["share_ratio"].to_list()),
                     "max_gap": gaps["gap"][0] if gaps.height else None,
                     "max_gap_team": gaps["team"][0] if gaps.height and gaps["gap"][0] > 0 else None,
                     "teams_with_gap": gaps.filter(pl.col("gap") > 0).height,
                     "shares_from": t["shares_from"][0]})
    return pl.DataFrame(rows, schema={
        "window": pl.String, "cluster": pl.String, "pool": pl.String, "teams": pl.Int64, "allocated_gpu_h": pl.Float64,
        "pending_gpu_h": pl.Float64, "teams_with_pending_demand": pl.Int64, "jain_pending_teams": pl.Float64,
        "gini": pl.Float64, "max_gap": pl.Float64, "max_gap_team": pl.String, "teams_with_gap": pl.Int64,
        "shares_from": pl.String})
