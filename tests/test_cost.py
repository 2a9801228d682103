"""models/cost.py: period edges, the rate card over time, capacity, entitlements, allocations; and property tests
that statements reconcile to the cent for random workloads, rates, entitlements and policies."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal as D
from fractions import Fraction as F

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_helpers import Job, T, add_jobs, clone, load_governance, refresh, template
from models.metrics import chargeback, cost
from models.definitions.policy import Policy, Rate
from models.definitions import times
from models.definitions import policy as policy_defs

DAY = dt.timedelta(days=1)


def policy(rates=(), entitlements=(), idle="none", basis="gpu_hours", minor=2, teams=()) -> Policy:
    return Policy(currency="EUR", minor_units=minor, period_timezone="UTC", billing_basis=basis, tres_weights=None,
                  max_tres=False, idle_policy=idle, half_life_days=7.0, windows_days=(7, 30), starvation_hours=24.0,
                  bsld_tau_minutes=10.0, teams=tuple(teams), team_tree=(), entitlements=tuple(entitlements),
                  rates=tuple(rates), document="{}")


def rate(pool, price, start, end=None, partition=None, cluster=None) -> Rate:
    return Rate(cluster, pool, partition, start, end, D(price), "price", None)


@pytest.mark.parametrize("period,tz,start,end", [
    ("2026-03", "UTC", dt.datetime(2026, 3, 1), dt.datetime(2026, 4, 1)),
    ("2026-12", "UTC", dt.datetime(2026, 12, 1), dt.datetime(2027, 1, 1)),
    ("2026-03", "Europe/Berlin", dt.datetime(2026, 2, 28, 23), dt.datetime(2026, 3, 31, 22)),
    ("2026-10", "America/New_York", dt.datetime(2026, 10, 1, 4), dt.datetime(2026, 11, 1, 4)),
])
def test_period_bounds_are_the_local_month_in_utc(period, tz, start, end):
    assert times.period_bounds(period, tz) == (start, end)


def test_next_period_and_bad_periods():
    assert times.next_period("2026-12") == "2027-01" and times.next_period("2026-01", -1) == "2025-12"
    with pytest.raises(ValueError, match="expected YYYY-MM"):
        times.period_bounds("March")


def test_rate_card_resolves_dates_partitions_clusters_and_wildcards():
    s, e = dt.datetime(2026, 3, 1), dt.datetime(2026, 4, 1)
    p = policy(rates=[rate("h100", "2.00", dt.datetime(2026, 1, 1), dt.datetime(2026, 3, 16)),
                      rate("h100", "2.50", dt.datetime(2026, 3, 16)),
                      rate("h100", "3.00", dt.datetime(2026, 3, 20), cluster="c2"),
                      rate("h100", "1.00", dt.datetime(2026, 3, 10), dt.datetime(2026, 3, 25), partition="preempt"),
                      rate("*", "0.50", dt.datetime(2026, 1, 1))])
    iv = policy_defs.rate_intervals(p, [("c1", "h100"), ("c2", "h100"), ("c1", "(untyped)")], s, e)
    def at(cluster, pool, pkey, t):
        r = iv.filter((pl.col("cluster") == cluster) & (pl.col("gpu_type") == pool) & pl.col("pkey").eq_missing(pkey)
                      & (pl.col("t0") <= t) & (pl.col("t1") > t))
        assert r.height == 1
        return r["rate"][0], r["base_rate"][0]
    assert at("c1", "h100", None, dt.datetime(2026, 3, 5)) == (D("2.00"), D("2.00"))
    assert at("c1", "h100", None, dt.datetime(2026, 3, 16)) == (D("2.50"), D("2.50"))
    assert at("c1", "h100", "preempt", dt.datetime(2026, 3, 5)) == (D("2.00"), D("2.00"))    # before the partition rate
    assert at("c1", "h100", "preempt", dt.datetime(2026, 3, 12)) == (D("1.00"), D("2.00"))
    assert at("c1", "h100", "preempt", dt.datetime(2026, 3, 30)) == (D("2.50"), D("2.50"))   # after it ends
    assert at("c2", "h100", None, dt.datetime(2026, 3, 21)) == (D("3.00"), D("3.00"))        # cluster-specific wins
    assert at("c1", "(untyped)", None, dt.datetime(2026, 3, 21)) == (D("0.50"), D("0.50"))   # only '*' matches
    gap = policy_defs.rate_intervals(policy(rates=[rate("h100", "2", dt.datetime(2026, 3, 10))]), [("c1", "h100")], s, e)
    assert gap.filter(pl.col("t0") == s)["base_rate"].to_list() == [None]


NODES = [("h1", 4, "h100"), ("h2", 4, "h100"), ("a1", 8, "a100")]


@pytest.fixture(scope="module")
def nodes_only(tmp_path_factory):
    return template(tmp_path_factory.mktemp("nodes"), [], NODES)


def test_capacity_and_entitlements_follow_the_inventory_and_validity(nodes_only, tmp_path):
    con = clone(nodes_only, tmp_path)
    add_jobs(con, tmp_path, [Job(1, "x", 1, T(1), T(2)), Job(2, "x", 1, T(30), T(2, month=4))])
    refresh(con, tmp_path)
    cap = cost.capacity(con, [(T(1), T(11)), (T(11), T(1, month=4))])
    got = {(r["w0"].day, r["gpu_type"]): r["gpu_s"] / 3600 for r in cap.iter_rows(named=True)}
    assert got == {(1, "h100"): 8 * 240, (1, "a100"): 8 * 240, (11, "h100"): 8 * 504, (11, "a100"): 8 * 504}
    p = policy(entitlements=[("t1", None, "h100", D("0.25"), None, dt.datetime(2026, 3, 11), None),
                             ("t2", "c1", "a100", None, D(3), dt.datetime(2026, 1, 1), dt.datetime(2026, 3, 2))])
    ent = cost.entitled_gpu_seconds(con, p, T(1), T(1, month=4))
    got = {r["team"]: r["entitled_s"] / 3600 for r in ent.iter_rows(named=True)}
    assert got == {"t1": 0.25 * 8 * 504, "t2": 3 * 24}


# ---------------------------------------------------------------- property: the pricing core reconciles

POOLS = [("c1", "h100"), ("c1", "a100")]
money_st = st.decimals(min_value=D("0"), max_value=D("9.999999"), places=6)


@st.composite
def priced_month(draw):
    """Random groups (GPU-seconds per team, pool, partition key and rate interval) and capacity."""
    basis = draw(st.sampled_from(["gpu_hours", "billing_tres"]))
    idle = draw(st.sampled_from(["none", "proportional_usage", "proportional_entitlement"]))
    teams = ["a", "b", "c", None]
    cut = dt.datetime(2026, 3, 1) + draw(st.integers(1, 30)) * DAY
    groups, cap = [], []
    for cluster, pool in POOLS:
        bases = [draw(money_st), draw(money_st)]
        for i, (t0, t1) in enumerate([(dt.datetime(2026, 3, 1), cut), (cut, dt.datetime(2026, 4, 1))]):
            cap_s = D(draw(st.integers(0, 10 ** 7)))
            cap.append({"cluster": cluster, "gpu_type": pool, "t0": t0, "t1": t1, "base_rate": bases[i],
                        "gpu_s": cap_s})
            for team in draw(st.lists(st.sampled_from(teams), max_size=4, unique=True)):
                for pkey in draw(st.lists(st.sampled_from([None, "preempt"]), min_size=1, max_size=2, unique=True)):
                    price = bases[i] if pkey is None else draw(money_st)
                    groups.append({"cluster": cluster, "gpu_type": pool, "team": team,
                                   "account": None if team else "orphan", "pkey": pkey, "rate_t0": t0,
                                   "rate_t1": t1, "rate": price, "base_rate": bases[i], "rate_from": t0,
                                   "gpu_s": D(draw(st.integers(0, 10 ** 7))) / 1000,
                                   "billing_s": D(draw(st.integers(0, 10 ** 7))) / 7})
    ents = pl.DataFrame([{"team": t, "cluster": c, "gpu_type": g, "entitled_s": float(draw(st.integers(0, 10 ** 6)))}
                         for t in teams[:3] for c, g in POOLS if draw(st.booleans())],
                        schema={"team": pl.String, "cluster": pl.String, "gpu_type": pl.String, "entitled_s": pl.Float64})
    minor = draw(st.sampled_from([0, 2, 3]))
    return policy(idle=idle, basis=basis, minor=minor, teams=[("a", "CC1", "a"), ("b", "CC1", "b"), ("c", "CC2", "c")]), groups, cap, ents


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(priced_month())
def test_statements_reconcile_to_the_cent_for_random_prices_usage_and_policies(case):
    p, groups, cap, ents = case
    lines, recon = chargeback._price("2026-03", p, groups, cap, ents, {}, None)
    q = D(1).scaleb(-p.minor_units)
    for r in recon.iter_rows(named=True):
        parts = r["direct_cost"] + r["idle_allocated"] + r["unallocated_idle"] + r["rate_variance"]
        assert r["cluster_cost"] == parts + r["rounding_residue"]
        n = lines.height if r["kind"] == "total" else lines.filter(
            (pl.col("cluster") == r["cluster"]) & (pl.col("gpu_type") == r["gpu_type"])).height
        pools = len(POOLS) if r["kind"] == "total" else 1
        assert abs(r["rounding_residue"]) <= (2 * n + 3 * pools) * q / 2
    # the exact direct cost is what the rate card says (gpu_hours) or the pool's used cost (billing_tres)
    exact = sum((F(g["gpu_s"]) * F(g["rate"]) / 3600 for g in groups), F(0))
    total = recon.filter(pl.col("kind") == "total").row(0, named=True)
    assert abs(F(total["direct_cost"]) - exact) <= F(lines.height) * F(q) / 2
    # every line's money is rounded once to the currency's minor units, and totals add
    for r in lines.iter_rows(named=True):
        assert r["direct_cost"] == r["direct_cost"].quantize(q) and r["total"] == r["direct_cost"] + r["idle_share"]
        assert r["idle_share"] >= 0
    if p.idle_policy == "none":
        assert all(v == 0 for v in lines["idle_share"].to_list())


# ---------------------------------------------------------------- property: the whole pipeline reconciles

@st.composite
def workload(draw):
    jobs = []
    for i in range(draw(st.integers(1, 6))):
        node, gpu_type, size = draw(st.sampled_from([("h1", "h100", 4), ("h2", "h100", 4), ("a1", "a100", 8)]))
        start = dt.datetime(2026, 2, 25) + draw(st.integers(0, 40 * 24)) * dt.timedelta(hours=1)
        dur = draw(st.integers(1, 10 * 24 * 60)) * dt.timedelta(minutes=1)
        jobs.append(Job(i + 1, draw(st.sampled_from(["va", "vb", "orphan"])), draw(st.integers(1, size)), start,
                        start + dur, node=node, gpu_type=gpu_type, cpus=draw(st.integers(1, 32)),
                        billing=draw(st.integers(1, 64)), partition=draw(st.sampled_from(["gpu", "preempt"]))))
    jobs.append(Job(99, "va", 1, dt.datetime(2026, 4, 5), dt.datetime(2026, 4, 6), node="h1"))  # horizon past March
    prices = [draw(st.decimals(D("0.01"), D("9.99"), places=2)) for _ in range(4)]
    gov = f'''currency = "JPY"
minor_units = {draw(st.sampled_from([0, 2]))}
[[teams]]
name = "A"
accounts = ["va"]
[[teams]]
name = "B"
accounts = ["vb"]
[[entitlements]]
team = "A"
gpu_type = "h100"
share = "{draw(st.decimals(D("0.01"), D("1"), places=2))}"
from = 2026-03-{draw(st.integers(1, 28)):02d}
[[entitlements]]
team = "B"
gpu_type = "a100"
gpus = {draw(st.integers(1, 8))}
from = 2026-01-01
[[rates]]
gpu_type = "h100"
price_per_gpu_hour = "{prices[0]}"
from = 2026-01-01
[[rates]]
gpu_type = "h100"
price_per_gpu_hour = "{prices[1]}"
from = 2026-03-{draw(st.integers(2, 28)):02d}
[[rates]]
gpu_type = "h100"
partition = "preempt"
price_per_gpu_hour = "{prices[2]}"
from = 2026-01-01
[[rates]]
gpu_type = "*"
price_per_gpu_hour = "{prices[3]}"
from = 2026-01-01
[billing]
basis = "{draw(st.sampled_from(["gpu_hours", "billing_tres"]))}"
[idle]
policy = "{draw(st.sampled_from(["none", "proportional_usage", "proportional_entitlement"]))}"
'''
    return jobs, gov


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(workload())
def test_random_workloads_reconcile_through_the_real_pipeline(nodes_only, tmp_path_factory, case):
    jobs, gov = case
    tmp = tmp_path_factory.mktemp("prop")
    con = clone(nodes_only, tmp)
    try:
        add_jobs(con, tmp, jobs)
        refresh(con, tmp)
        load_governance(con, tmp, gov)
        st_ = chargeback.compute(con, "2026-03")
        for r in st_.recon.iter_rows(named=True):
            assert r["cluster_cost"] == (r["direct_cost"] + r["idle_allocated"] + r["unallocated_idle"]
                                         + r["rate_variance"] + r["rounding_residue"])
        charges = st_.lines.filter(pl.col("kind") == "charge")
        q = D(1).scaleb(-st_.policy.minor_units)
        assert abs(st_.total_row["rounding_residue"]) <= (2 * charges.height + 6) * q / 2
        # the job-level detail adds up to the lines' GPU-hours and (before rounding) direct cost
        assert sum(st_.jobs["gpu_hours"].to_list(), D(0)) == pytest.approx(sum(charges["gpu_hours"].to_list(), D(0)), abs=D("0.001"))
        assert float(sum(st_.jobs["direct_cost"].to_list(), D(0))) == pytest.approx(
            float(st_.total_row["direct_cost"]), abs=float(q) * (charges.height + 1))
    finally:
        con.close()
