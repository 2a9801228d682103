"""ingest/reservations.py and models/metrics/reservations.py: scontrol and sacctmgr listings, reserved vs used
GPU-hours, and the chargeback's "reserved idle" lines, hand-computed, plus a property test that statements with
reservations still reconcile to the cent.

The cluster (March 2026, 744 h): h100 nodes h1, h2 (4 GPUs each), rate 2.00 EUR per GPU-hour.
Jobs:  J1 vision 4 GPUs on h1 Mar 1 - Mar 11                       960 GPU-h
       J2 nlp    1 GPU on h2 Mar 10 02:00:30 - 08:00:30, in `train`    6 GPU-h
       J3 nlp    1 GPU on h2 Mar 20 - Apr 2 (horizon past March)     288 GPU-h in March
Reservation `train`: h2 (4 GPUs), Mar 9 23:59:30 - Mar 11 00:00:00, accounts nlp, users bob:
  reserved 4 x 24 h 30 s = 96.033333 GPU-h, used 6, idle 90.033333 GPU-h = 180.07 EUR charged to nlp.
Cluster cost 8 x 744 x 2 = 11904; used 1254 GPU-h = 2508; idle 9396; after the reserved idle 9215.933...
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal as D
from fractions import Fraction as F

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ingest import sacct, slurm_nodes
from models.pipeline import refresh
from cost_helpers import SACCT_HEADER, Job, T, clone, load_governance, node_line, sacct_line
from ingest import reservations as ingest_resv, warehouse
from models.metrics import chargeback, reservations
from waiting_fixtures import shared_db

NODES = [("h1", 4, "h100", "gpu"), ("h2", 4, "h100", "gpu")]
JOBS = [(Job(1, "vision", 4, T(1), T(11), node="h1"), ""),
        (Job(2, "nlp", 1, dt.datetime(2026, 3, 10, 2, 0, 30), dt.datetime(2026, 3, 10, 8, 0, 30), node="h2",
             user="bob"), "train"),
        (Job(3, "nlp", 1, T(20), T(2, month=4), node="h2"), "")]
RESV = ("ReservationName=train StartTime=2026-03-09T23:59:30 EndTime=2026-03-11T00:00:00 Duration=1-00:00:30 "
        "Nodes=h2 NodeCnt=1 CoreCnt=64 Features=(null) PartitionName=(null) Flags=SPEC_NODES TRES=cpu=64 "
        "Users=bob Groups=(null) Accounts=nlp Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a\n")
GOV = '''currency = "EUR"
[[cost_centers]]
id = "CC1"
[[teams]]
name = "vision"
cost_center = "CC1"
accounts = ["vision"]
[[teams]]
name = "nlp"
cost_center = "CC1"
accounts = ["nlp"]
[[entitlements]]
team = "vision"
gpu_type = "h100"
share = "0.5"
from = 2026-01-01
[[rates]]
gpu_type = "h100"
price_per_gpu_hour = "2.00"
from = 2026-01-01
[idle]
policy = "{policy}"
'''


def _build(tmp, jobs):
    tmp.mkdir(parents=True, exist_ok=True)
    con = warehouse.connect(tmp / "template.duckdb")
    (tmp / "nodes.txt").write_text("\n".join(node_line(*n) for n in NODES) + "\n")
    slurm_nodes.ingest_path(con, str(tmp / "nodes.txt"), cluster="c1", as_of="2025-01-01T00:00:00")
    # Reservation first: an empty last column would read as --parsable's trailing delimiter
    (tmp / "sacct.psv").write_text("Reservation|" + SACCT_HEADER + "\n" + "".join(f"{r}|{sacct_line(j)}\n" for j, r in jobs))
    sacct.ingest_path(con, str(tmp / "sacct.psv"), sacct.SacctOptions(tz="UTC"))
    refresh.run(con, tmp / "unused.duckdb", publish=False)
    con.execute("CHECKPOINT")
    con.close()
    return tmp / "template.duckdb"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("resv"), JOBS)


@pytest.fixture
def make(base, tmp_path):
    made = []

    def _make(policy="proportional_usage", resv=RESV):
        c = clone(base, tmp_path / str(len(made)), GOV.format(policy=policy))
        if resv:
            s = ingest_resv.load(c, resv, "resv.txt", cluster="c1")
            assert s["rejected"] == 0, s
        made.append(c)
        return c
    yield _make
    for c in made:
        c.close()


# ---------------------------------------------------------------- ingest

def test_scontrol_one_line_and_multi_line_and_sacctmgr_listings(con):
    multi = ("ReservationName=a StartTime=2026-03-01T00:00:00 EndTime=2026-03-01T06:00:00 Duration=06:00:00\n"
             "   Nodes=h[1-2] NodeCnt=2 CoreCnt=8 Features=(null) PartitionName=gpu Flags=MAINT,SPEC_NODES\n"
             "   TRES=cpu=8,gres/gpu=6\n"
             "   Users=(null) Groups=(null) Accounts=nlp,vision Licenses=(null) State=INACTIVE\n\n"
             "ReservationName=b StartTime=2026-03-02T00:00:00 EndTime=not-a-time Duration=06:00:00\n"
             "   Nodes=h1\n")
    s = ingest_resv.load(con, multi, "multi.txt", cluster="c1")
    assert (s["read"], s["loaded"], s["skipped"], s["rejected"]) == (7, 1, 4, 2)   # b's 2 lines rejected
    assert s["reject_examples"][0] == "multi.txt:6: field end: cannot read time 'not-a-time'"
    row = con.sql("SELECT name, nodes, gpus, users, accounts, flags, source FROM reservations").fetchall()
    assert row == [("a", "h1,h2", 6.0, None, "nlp,vision", "MAINT,SPEC_NODES", "scontrol")]
    # sacctmgr later: the real end wins, the owner is kept
    hist = ("Cluster|Name|TRES|TimeStart|TimeEnd|NodeName|Flags\n"
            "c1|a|cpu=8|2026-03-01T00:00:00|2026-03-01T03:00:00|h[1-2]|MAINT,SPEC_NODES\n"
            "c1|z|cpu=8|2026-03-05T00:00:00|2026-03-04T00:00:00|h1|\n")
    s = ingest_resv.load(con, hist, "hist.psv")
    assert (s["loaded"], s["skipped"], s["rejected"], s["updated"]) == (1, 1, 1, 1)
    assert con.sql('SELECT "end", accounts, gpus, source FROM reservations').fetchall() == [
        (dt.datetime(2026, 3, 1, 3), "nlp,vision", 6.0, "sacctmgr")]
    assert ingest_resv.load(con, "No reservations in the system\n", "none.txt")["error"] is None


# ---------------------------------------------------------------- the report

def test_reserved_used_and_idle_per_reservation_with_its_owner(make):
    con = make()
    r = reservations.report(con, T(1), T(1, month=4)).row(0, named=True)
    assert (r["name"], r["team"], r["owner_account"], r["owner_user"], r["gpus"], r["jobs"]) == \
        ("train", "nlp", "nlp", "bob", 4, 1)
    assert r["reserved_gpu_h"] == pytest.approx(4 * (24 + 30 / 3600))
    assert r["used_gpu_h"] == pytest.approx(6) and r["other_jobs_gpu_h"] == pytest.approx(0)
    assert r["reserved_idle_gpu_h"] == pytest.approx(4 * (24 + 30 / 3600) - 6)
    # a window cutting the reservation counts its part inside
    part = reservations.report(con, dt.datetime(2026, 3, 10, 6), T(11)).row(0, named=True)
    assert part["reserved_gpu_h"] == pytest.approx(4 * 18) and part["used_gpu_h"] == pytest.approx(2 + 30 / 3600)


def test_other_jobs_on_reserved_nodes_are_not_idle(base, tmp_path):
    # an IGNORE_JOBS reservation over J3's node while J3 runs: J3's GPU is held, not idle
    c = clone(base, tmp_path, GOV.format(policy="proportional_usage"))
    ingest_resv.load(c, RESV.replace("2026-03-09T23:59:30", "2026-03-20T00:00:00")
                     .replace("2026-03-11T00:00:00", "2026-03-21T00:00:00"), "r.txt", cluster="c1")
    r = reservations.report(c).row(0, named=True)
    assert (r["used_gpu_h"], r["other_jobs_gpu_h"], r["reserved_idle_gpu_h"]) == pytest.approx((0, 24, 72))
    c.close()


# ---------------------------------------------------------------- chargeback

def test_reserved_idle_is_charged_to_the_owner_and_the_statement_reconciles(make):
    st = chargeback.compute(make("proportional_usage"), "2026-03")
    res = st.lines.filter(pl.col("kind") == chargeback.RESERVED_IDLE)
    assert res.height == 1
    r = res.row(0, named=True)
    idle_h = F(4 * (24 * 3600 + 30), 3600) - 6
    assert (r["team"], r["gpu_type"], r["gpu_hours"], r["total"], r["direct_cost"]) == \
        ("nlp", "h100", D("90.033333"), D("180.07"), D("0.00"))
    t = st.total_row
    assert t["cluster_cost"] == D("11904.00") and t["difference"] == 0
    # the rest of the idle (9396 - 180.066...) is shared by direct cost: vision 1920, nlp 588
    rest = F(9396) - idle_h * 2
    charges = {x["team"]: x for x in st.lines.filter(pl.col("kind") == "charge").iter_rows(named=True)}
    assert charges["vision"]["idle_share"] == D(round(rest * 1920 / 2508 * 100)).scaleb(-2)
    assert charges["nlp"]["idle_share"] == D(round(rest * 588 / 2508 * 100)).scaleb(-2)
    assert t["unallocated_idle"] == 0
    amounts = dict(chargeback.summary_frame(st).select("item", "amount").iter_rows())
    assert amounts["Charged to teams"] == sum(st.lines["total"].to_list(), D(0))
    assert "Reserved idle" in dict(st.header)
    assert "reserved idle" in chargeback.views(st)["by team"]["kind"].to_list()


def test_under_idle_policy_none_nobody_pays_reserved_idle(make):
    st = chargeback.compute(make("none"), "2026-03")
    assert st.lines.filter(pl.col("kind") == chargeback.RESERVED_IDLE).height == 0
    assert st.total_row["unallocated_idle"] == D("9396.00")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(resvs=st.lists(st.tuples(st.integers(0, 40 * 86400), st.integers(60, 10 * 86400), st.sampled_from(["h1", "h2", "h[1-2]"]),
                                st.sampled_from(["nlp", "vision", "zeta"]), st.sampled_from([None, 2, 8])),
                      min_size=1, max_size=4),
       policy=st.sampled_from(["proportional_usage", "proportional_entitlement"]))
def test_statements_with_reservations_reconcile_to_the_cent(make, resvs, policy):
    """Any reservations (overlapping, crossing the month's edges, over running jobs, partial TRES, unmapped owners):
    every pool and the total reconcile exactly; reserved idle never exceeds the pool's idle."""
    t0 = dt.datetime(2026, 2, 20, 0, 0, 7)
    text = "".join(
        f"ReservationName=r{i} StartTime={(t0 + dt.timedelta(seconds=a)):%Y-%m-%dT%H:%M:%S} "
        f"EndTime={(t0 + dt.timedelta(seconds=a + d)):%Y-%m-%dT%H:%M:%S} Nodes={n} "
        f"TRES=cpu=8{'' if g is None else f',gres/gpu={g}'} Users=u1 Accounts={acc} Flags=IGNORE_JOBS\n"
        for i, (a, d, n, acc, g) in enumerate(resvs))
    st_ = chargeback.compute(make(policy, text), "2026-03")
    for r in st_.recon.iter_rows(named=True):
        assert r["difference"] == 0
        assert r["cluster_cost"] == (r["direct_cost"] + r["idle_allocated"] + r["unallocated_idle"]
                                     + r["rate_variance"] + r["rounding_residue"])
        assert abs(r["rounding_residue"]) <= D("0.01") * 20
    t = st_.total_row
    assert sum(st_.lines["total"].to_list(), D(0)) == t["direct_cost"] + t["idle_allocated"]
    res = st_.lines.filter(pl.col("kind") == chargeback.RESERVED_IDLE)
    assert sum(res["total"].to_list(), D(0)) <= t["cluster_cost"] - t["direct_cost"] - t["rate_variance"] + D("0.01")
    assert (res["direct_cost"] == 0).all() and (res["gpu_hours"] >= 0).all()


# ---------------------------------------------------------------- the captured real reservation

def test_captured_reservation_owner_and_reserved_idle_in_the_statement(tmp_path_factory):
    """gl-resv (gpu03, 4 h100, accounts vision) 05:37:38-05:38:08; the accounting spans 05:37:40-05:37:55, inresv
    used 1 GPU 05:37:40-:45: reserved 4 x 15 = 60 GPU-s, used 5, idle 55 GPU-s = 0.055 EUR at 3.60/GPU-h."""
    con = warehouse.connect(shared_db(tmp_path_factory), read_only=True)
    r = reservations.report(con).row(0, named=True)
    assert (r["name"], r["team"], r["owner_user"], r["gpu_type"], r["gpus"], r["jobs"]) == \
        ("gl-resv", "vision", "carol", "h100", 4, 1)
    assert [round(r[k] * 3600, 6) for k in ("reserved_gpu_h", "used_gpu_h", "reserved_idle_gpu_h")] == [60, 5, 55]
    st = chargeback.compute(con, "2026-12")
    line = st.lines.filter(pl.col("kind") == chargeback.RESERVED_IDLE).row(0, named=True)
    assert (line["team"], line["gpu_type"], line["gpu_hours"], line["total"]) == \
        ("vision", "h100", D("0.015278"), D("0.06"))
    assert st.total_row["difference"] == 0
    con.close()
