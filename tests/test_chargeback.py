"""models/chargeback.py: hand-computed statements for a small cluster under each idle policy and billing basis,
period close, late jobs as adjustments, byte-identical re-export, and reconciliation to the cent.

The cluster (March 2026, 744 h): h100 nodes h1, h2 (4 GPUs each), a100 node a1 (8 GPUs).
Rates: h100 2.00 until Mar 16, 2.50 from Mar 16; partition 'preempt' on h100 1.00; a100 1.00.
Jobs:  J1 vision 4 h100 Mar 1 - Mar 11         960 GPU-h x 2.00           = 1920
       J2 nlp    2 h100 Feb 28 12:00 - Mar 2 12:00 (72 GPU-h in March)    =  144   (24 GPU-h fall in February)
       J3 nlp    1 h100 preempt Mar 20 - Mar 21   24 GPU-h x 1.00          =   24   (base would be 60: variance 36)
       J4 vision 2 h100 Mar 15 12:00 - Mar 16 12:00: 24 GPU-h x 2.00 + 24 GPU-h x 2.50 = 108 (two rates)
       J5 zeta (unmapped) 1 a100 Mar 5 - Mar 6    24 GPU-h x 1.00          =   24
       J6 nlp    1 h100 Apr 1 - Apr 2 (puts the horizon past March)
Cluster cost: h100 8 x 360 h x 2.00 + 8 x 384 h x 2.50 = 13440; a100 8 x 744 x 1.00 = 5952; total 19392.
h100 allocated 960 + 72 + 24 + 48 = 1104 GPU-h; used at base = 1920 + 144 + 60 + 108 = 2232, so idle = 11208;
direct = 2196 (vision 2028, nlp 168), rate variance = 36.
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal as D
from fractions import Fraction as F

import openpyxl
import polars as pl
import pytest

from cost_helpers import Job, T, add_jobs, build, clone, load_governance, refresh, template
from models.metrics import chargeback, cost
from models.definitions.policy import CostError
from models.pipeline import close

NODES = [("h1", 4, "h100", "gpu,preempt"), ("h2", 4, "h100", "gpu,preempt"), ("a1", 8, "a100", "gpu")]
JOBS = [
    Job(1, "vision", 4, T(1), T(11), node="h1", cpus=16, billing=16),
    Job(2, "nlp", 2, T(28, 12, month=2), T(2, 12), node="h2", cpus=32, billing=32),
    Job(3, "nlp", 1, T(20), T(21), node="h2", partition="preempt", cpus=4, billing=4),
    Job(4, "vision", 2, T(15, 12), T(16, 12), node="h1", cpus=8, billing=8),
    Job(5, "zeta", 1, T(5), T(6), node="a1", gpu_type="a100", cpus=4, billing=4),
    Job(6, "nlp", 1, T(1, month=4), T(2, month=4), node="h2", cpus=4, billing=4),
]
GOV = '''currency = "EUR"
[[cost_centers]]
id = "CC1"
[[cost_centers]]
id = "CC2"
[[teams]]
name = "vision"
cost_center = "CC1"
accounts = ["vision"]
[[teams]]
name = "nlp"
cost_center = "CC2"
accounts = ["nlp"]
[[entitlements]]
team = "vision"
gpu_type = "h100"
share = "0.5"
from = 2026-01-01
[[entitlements]]
team = "nlp"
gpu_type = "h100"
gpus = 2
from = 2026-03-16
[[rates]]
gpu_type = "h100"
price_per_gpu_hour = "2.00"
from = 2026-01-01
[[rates]]
gpu_type = "h100"
price_per_gpu_hour = "2.50"
from = 2026-03-16
[[rates]]
gpu_type = "h100"
partition = "preempt"
price_per_gpu_hour = "1.00"
from = 2026-01-01
[[rates]]
gpu_type = "a100"
price_per_gpu_hour = "1.00"
from = 2026-01-01
[billing]
basis = "{basis}"
{weights}
[idle]
policy = "{policy}"
'''


def gov(policy="none", basis="gpu_hours", weights=""):
    return GOV.format(policy=policy, basis=basis, weights=weights)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return template(tmp_path_factory.mktemp("cb"), JOBS, NODES)


@pytest.fixture
def make(base, tmp_path):
    """make(governance) -> a connection to a fresh copy of the small cluster under that governance."""
    made = []
    def _make(text=None):
        c = clone(base, tmp_path, gov() if text is None else text)
        made.append(c)
        return c
    yield _make
    for c in made:
        c.close()


@pytest.fixture
def cluster(make, tmp_path):
    return make(), tmp_path


def lines(st) -> dict:
    out = {}
    for r in st.lines.filter(pl.col("kind") == "charge").iter_rows(named=True):
        out[r["team"] or r["account"], r["gpu_type"]] = r
    return out


def recon(st) -> dict:
    return {r["gpu_type"] or r["kind"]: r for r in st.recon.iter_rows(named=True)}


def money(x) -> D:
    return D(round(F(x) * 100)).scaleb(-2)


def check_identity(st):
    """cluster cost = charged to teams + unallocated idle + rate variance + residue, per pool and in total, to the
    cent."""
    for r in st.recon.filter(pl.col("kind").is_in(["pool", "total"])).iter_rows(named=True):
        assert r["cluster_cost"] == (r["direct_cost"] + r["idle_allocated"] + r["unallocated_idle"]
                                     + r["rate_variance"] + r["rounding_residue"])
        assert r["difference"] == 0
    charges = st.lines.filter(pl.col("kind") == "charge")
    t = st.total_row
    assert sum(charges["total"].to_list(), D(0)) == t["direct_cost"] + t["idle_allocated"]
    assert all(r["total"] == r["direct_cost"] + r["idle_share"] for r in charges.iter_rows(named=True))


def test_policy_none_idle_is_its_own_line(cluster):
    con, _ = cluster
    st = chargeback.compute(con, "2026-03")
    L, R = lines(st), recon(st)
    assert st.status == "open"
    assert L["vision", "h100"]["gpu_hours"] == D("1008") and L["vision", "h100"]["direct_cost"] == D("2028.00")
    assert L["vision", "h100"]["rate"] == D("2.011905")   # 2028 / 1008, blended over two rates
    assert "blended over 2 rates" in L["vision", "h100"]["rate_note"]
    assert L["nlp", "h100"]["gpu_hours"] == D("96") and L["nlp", "h100"]["direct_cost"] == D("168.00")
    assert L["zeta", "a100"]["team"] is None and L["zeta", "a100"]["cost_center"] is None
    assert L["zeta", "a100"]["direct_cost"] == D("24.00") and L["zeta", "a100"]["rate"] == D("1")
    assert all(r["idle_share"] == 0 for r in L.values())
    assert R["h100"]["cluster_cost"] == D("13440.00") and R["a100"]["cluster_cost"] == D("5952.00")
    assert R["h100"]["capacity_gpu_hours"] == D("5952") and R["h100"]["allocated_gpu_hours"] == D("1104")
    assert R["h100"]["unallocated_idle"] == D("11208.00") and R["h100"]["rate_variance"] == D("36.00")
    assert R["a100"]["unallocated_idle"] == D("5928.00")
    assert R["total"]["cluster_cost"] == D("19392.00") and R["total"]["rounding_residue"] == 0
    check_identity(st)


def test_jobs_crossing_the_month_edge_are_split_by_time(cluster):
    con, _ = cluster
    feb = chargeback.compute(con, "2026-02")
    assert lines(feb)["nlp", "h100"]["gpu_hours"] == D("24")      # Feb 28 12:00 - Mar 1 00:00, 2 GPUs
    mar = chargeback.compute(con, "2026-03").jobs
    j2 = mar.filter(pl.col("job_id") == "2").row(0, named=True)
    assert j2["gpu_hours"] == D("72") and j2["t0"] == dt.datetime(2026, 3, 1) and j2["direct_cost"] == D("144")
    # February is only covered from the first job's start: capacity before our records is unknown, not idle
    assert recon(feb)["h100"]["capacity_gpu_hours"] == D("96")


def test_policy_usage_shares_idle_by_direct_cost_like_opencost_share_idle(make):
    con = make(gov("proportional_usage"))
    st = chargeback.compute(con, "2026-03")
    L, R = lines(st), recon(st)
    assert L["vision", "h100"]["idle_share"] == money(F(11208) * 2028 / 2196) == D("10350.56")
    assert L["nlp", "h100"]["idle_share"] == money(F(11208) * 168 / 2196) == D("857.44")
    assert L["zeta", "a100"]["idle_share"] == D("5928.00")          # the only user of the a100 pool
    assert L["vision", "h100"]["total"] == D("12378.56")
    assert R["total"]["unallocated_idle"] == 0 and R["total"]["rate_variance"] == D("36.00")
    check_identity(st)


def test_policy_entitlement_charges_reserved_capacity_to_its_owners(make):
    con = make(gov("proportional_entitlement"))
    st = chargeback.compute(con, "2026-03")
    L, R = lines(st), recon(st)
    # vision: half of 8 GPUs x 744 h = 2976 GPU-h; nlp: a quota of 2 GPUs from Mar 16 = 2 x 384 = 768 GPU-h
    assert L["vision", "h100"]["idle_share"] == money(F(11208) * 2976 / 3744) == D("8908.92")
    assert L["nlp", "h100"]["idle_share"] == money(F(11208) * 768 / 3744) == D("2299.08")
    assert L["zeta", "a100"]["idle_share"] == 0
    assert R["a100"]["unallocated_idle"] == D("5928.00") and "no entitlements" in R["a100"]["note"]
    check_identity(st)


def test_entitlement_owner_without_usage_still_gets_a_line(con, tmp_path):
    build(con, tmp_path, [j for j in JOBS if j.account != "vision"], NODES, gov("proportional_entitlement"))
    st = chargeback.compute(con, "2026-03")
    v = lines(st)["vision", "h100"]
    assert v["jobs"] == 0 and v["gpu_hours"] == 0 and v["direct_cost"] == 0 and v["idle_share"] > 0
    check_identity(st)


def test_billing_tres_basis_splits_used_cost_by_recorded_billing(make):
    con = make(gov("none", "billing_tres"))
    st = chargeback.compute(con, "2026-03")
    L = lines(st)
    # Group (h100, base rate 2.00): J1 16/4 x 960 = 3840, J2 32/2 x 72 = 1152, J4 8/2 x 24 = 96 billing-hours;
    # its used cost (960 + 72 + 24) x 2.00 = 2112 is split by them. J4's second half (2.50) and J3 (preempt) are
    # alone in their groups.
    vision = F(2112) * (3840 + 96) / 5088 + 60
    nlp = F(2112) * 1152 / 5088 + 24
    assert L["vision", "h100"]["direct_cost"] == money(vision) == D("1693.81")
    assert L["nlp", "h100"]["direct_cost"] == money(nlp) == D("502.19")
    assert L["vision", "h100"]["billing_hours"] == D("4032")   # 3840 + 96 + 96
    assert "billing-TRES" in L["vision", "h100"]["rate_note"]
    assert recon(st)["h100"]["rate_variance"] == D("36.00")      # the pool's used cost is unchanged
    check_identity(st)


def test_billing_tres_basis_with_configured_weights_sum_and_max(make, tmp_path):
    weights = 'tres_weights = "CPU=0.25,GRES/gpu=1.0"'
    con = make(gov("none", "billing_tres", weights))
    L = lines(chargeback.compute(con, "2026-03"))
    # sum: J1 0.25 x 16 + 4 = 8, J2 0.25 x 32 + 2 = 10, J4 0.25 x 8 + 2 = 4 -> per GPU 2, 5, 2
    vision = F(2112) * (2 * 960 + 2 * 24) / (2 * 960 + 5 * 72 + 2 * 24) + 60
    assert L["vision", "h100"]["direct_cost"] == money(vision)
    load_governance(con, tmp_path, gov("none", "billing_tres", weights + "\nmax_tres = true"))
    L = lines(chargeback.compute(con, "2026-03"))
    # max: J1 max(4, 4) = 4, J2 max(8, 2) = 8, J4 max(2, 2) = 2 -> per GPU 1, 4, 1
    vision = F(2112) * (960 + 24) / (960 + 4 * 72 + 24) + 60
    assert L["vision", "h100"]["direct_cost"] == money(vision)


def test_billing_basis_without_billing_data_is_a_clear_error(con, tmp_path):
    jobs = [Job(1, "vision", 1, T(1), T(2), billing=0), Job(2, "nlp", 1, T(1, month=4), T(2, month=4))]
    build(con, tmp_path, jobs, NODES, gov("none", "billing_tres"))
    con.execute("UPDATE jobs SET billing = NULL WHERE job_id = '1'")
    with pytest.raises(CostError, match="1 jobs .* have no billing TRES"):
        chargeback.compute(con, "2026-03")


def test_pool_without_a_base_rate_is_a_clear_error(con, tmp_path):
    build(con, tmp_path, JOBS, NODES + [("b1", 8, "b200", "gpu")], gov())
    with pytest.raises(CostError, match="no base rate for pool b200 on cluster c1"):
        chargeback.compute(con, "2026-03")


def test_period_in_a_time_zone_uses_local_month_edges(make):
    con = make(gov().replace('currency = "EUR"', 'currency = "EUR"\nperiod_timezone = "Europe/Berlin"'))
    st = chargeback.compute(con, "2026-03")
    # March in Berlin: Feb 28 23:00 UTC to Mar 31 22:00 UTC (summer time from Mar 29) = 743 h
    assert recon(st)["a100"]["capacity_gpu_hours"] == D(8 * 743)
    check_identity(st)


def test_close_freezes_and_a_late_job_becomes_an_adjustment_next_period(make, tmp_path):
    con = make(gov("proportional_usage"))
    closed = close.close_period(con, "2026-03", now=dt.datetime(2026, 4, 3, 9, 30))
    assert closed.status == "closed" and len(closed.content_hash) == 64
    assert closed.closed_at == dt.datetime(2026, 4, 3, 9, 30)
    before = chargeback.statement(con, "2026-03")
    with pytest.raises(CostError, match="already closed"):
        close.close_period(con, "2026-03")
    # a March job arrives after the close (and April continues, so April is the next open period)
    add_jobs(con, tmp_path, [Job(7, "nlp", 1, T(25), T(26), node="h2"),
                             Job(8, "nlp", 1, T(3, month=4), T(4, month=4), node="h2")], name="late.psv")
    refresh(con, tmp_path)
    after = chargeback.statement(con, "2026-03")
    assert after.content_hash == before.content_hash
    assert after.lines.equals(before.lines) and after.jobs.equals(before.jobs)
    assert "7" not in after.jobs["job_id"].to_list()
    apr = chargeback.compute(con, "2026-04")
    lean = chargeback.compute(con, "2026-04", detail=False)   # the dashboard tile's: no job detail, same money
    assert lean.lines.equals(apr.lines) and lean.recon.equals(apr.recon) and lean.header == apr.header
    assert lean.jobs.filter(pl.col("kind") == "charge").height == 0 and "jobs" not in chargeback.views(lean)
    assert dict(apr.header)["Jobs"] == str(apr.jobs.filter(pl.col("kind") == "charge")["job_uid"].n_unique())
    adj = apr.lines.filter(pl.col("kind") == "adjustment")
    assert set(adj["adjusts_period"]) == {"2026-03"}
    by = {r["team"]: r for r in adj.iter_rows(named=True)}
    # nlp: +24 GPU-h x 2.50; the h100 idle shrinks by 60 and is re-shared by the new direct costs
    assert by["nlp"]["gpu_hours"] == D("24") and by["nlp"]["direct_cost"] == D("60.00") and by["nlp"]["job_refs"] == "7"
    new_vision = money(F(11148) * 2028 / 2256)
    new_nlp = money(F(11148) * 228 / 2256)
    assert by["vision"]["idle_share"] == new_vision - D("10350.56")
    assert by["nlp"]["idle_share"] == new_nlp - D("857.44")
    assert by["vision"]["job_refs"] is None and by["vision"]["gpu_hours"] == 0
    # the restatement moves money between lines but not the cluster cost: adjustments net to zero
    ar = apr.recon.filter(pl.col("kind") == "adjustment").row(0, named=True)
    assert ar["cluster_cost"] == 0 and ar["difference"] == 0
    assert sum(adj["total"].to_list(), D(0)) + ar["unallocated_idle"] + ar["rate_variance"] + ar["rounding_residue"] == 0
    assert apr.jobs.filter(pl.col("kind") == "adjustment")["job_id"].to_list() == ["7"]
    # once April closes with its adjustment, the late job is accounted for and not adjusted again
    add_jobs(con, tmp_path, [Job(9, "nlp", 1, T(1, month=5), T(2, month=5), node="h2")], name="may.psv")
    refresh(con, tmp_path)
    close.close_period(con, "2026-04")
    may = chargeback.compute(con, "2026-05")
    assert may.lines.filter(pl.col("kind") == "adjustment").height == 0


def test_a_provisional_period_cannot_be_closed(cluster):
    con, _ = cluster
    with pytest.raises(CostError, match="cannot close 2026-04: the accounting does not reach the end"):
        close.close_period(con, "2026-04")
    assert chargeback.compute(con, "2026-04").status == "provisional"


def test_the_status_says_whether_the_accounting_covers_the_period(make):
    """'covers the whole period' was printed for a month before any accounting (a typo of the year gave an
    all-zero statement that said so) and for the month the accounting starts in. The accounting here starts
    2026-02-28 12:00 UTC: March in UTC is covered whole; March at UTC+14 (Kiritimati: from 2026-02-28 10:00 UTC)
    is not."""
    con = make()
    assert [s for s, _ in cost.data_spans(con).values()] == [dt.datetime(2026, 2, 28, 12)]
    assert dict(chargeback.compute(con, "2020-01").header)["Status"] == (
        "open (no accounting in this period: nothing to charge or to close)")
    assert dict(chargeback.compute(con, "2026-03").header)["Status"] == (
        "open (the accounting covers the whole period; not closed)")
    east = make(gov().replace('currency = "EUR"', 'currency = "EUR"\nperiod_timezone = "Pacific/Kiritimati"'))
    assert dict(chargeback.compute(east, "2026-03").header)["Status"] == (
        "open (the accounting starts inside the period, 2026-02-28 12:00 UTC; not closed)")


def test_tampering_with_a_closed_statement_is_detected(cluster):
    con, _ = cluster
    close.close_period(con, "2026-03")
    con.execute("UPDATE statement_lines SET total = total + 1 WHERE period = '2026-03' AND line_no = 1")
    with pytest.raises(CostError, match="does not match its content hash"):
        chargeback.statement(con, "2026-03")


def test_cli_closes_and_re_exports_byte_identically_in_every_format(cluster, run_cli, tmp_path):
    code, out, err = run_cli("chargeback", "--period", "2026-03", "--close", "--out", str(tmp_path / "a") + "/")
    assert code == 0 and "closed 2026-03" in err
    xlsx = tmp_path / "a" / "chargeback-2026-03.xlsx"
    first = {fmt: tmp_path / f"one.{fmt}" for fmt in ("xlsx", "csv", "parquet")}
    for fmt, p in first.items():
        assert run_cli("chargeback", "--period", "2026-03", "--out", str(p))[0] == 0
    for fmt, p in first.items():
        again = tmp_path / f"two.{fmt}"
        assert run_cli("chargeback", "--period", "2026-03", "--out", str(again))[0] == 0
        assert again.read_bytes() == p.read_bytes()
    assert xlsx.read_bytes() == first["xlsx"].read_bytes()
    assert (tmp_path / "one.jobs.csv").exists() and (tmp_path / "one.reconciliation.parquet").exists()
    wb = openpyxl.load_workbook(xlsx)
    assert wb.sheetnames == ["summary", "by team", "by cost centre", "by gpu type", "reconciliation",
                             "adjustments", "by rate", "rate card", "jobs"]
    assert [c.value for c in wb["summary"][1]] == ["item", "value", "amount", "count"]
    summary = {r[0].value: r for r in wb["summary"].iter_rows(min_row=2)}
    item, text, amount, count = summary["Cluster cost"]          # money: a number in the currency's format
    assert text.value is None and amount.value == 19392 and amount.number_format == '#,##0.00 "EUR"'
    assert isinstance(summary["Jobs"][3].value, int) and summary["Jobs"][3].value == 5
    assert summary["Content hash"][1].value.startswith("sha256 ") and summary["Content hash"][2].value is None
    assert wb.properties.created is not None
    header = [c.value for c in wb["jobs"][1]]
    assert "job_id" in header and wb["jobs"].max_row == 6          # 5 jobs with GPU time in March
    assert pl.read_csv(tmp_path / "one.csv")["total"].cast(pl.Float64).sum() == pytest.approx(2220.0)


def test_formula_like_names_are_neutralised_in_csv_and_xlsx(con, tmp_path, run_cli):
    build(con, tmp_path, [Job(1, "=HYPERLINK(1)", 1, T(1), T(2), node="a1", gpu_type="a100"),
                          Job(2, "@sum", 1, T(1), T(2), node="a1", gpu_type="a100"),
                          Job(3, "nlp", 1, T(1, month=4), T(2, month=4), node="h2")], NODES, gov())
    assert run_cli("chargeback", "--period", "2026-03", "--out", str(tmp_path / "s.csv"))[0] == 0
    text = (tmp_path / "s.csv").read_text()
    assert "'=HYPERLINK(1)" in text and "'@sum" in text and "\n=" not in text and ",=" not in text
    assert run_cli("chargeback", "--period", "2026-03", "--out", str(tmp_path / "s.xlsx"))[0] == 0
    values = [c for row in openpyxl.load_workbook(tmp_path / "s.xlsx")["by team"].iter_rows(values_only=True)
              for c in row if isinstance(c, str)]
    assert "'=HYPERLINK(1)" in values and not any(v.startswith(("=", "@", "+")) for v in values)


def test_cli_prints_the_statement_and_explains_errors(cluster, run_cli):
    code, out, err = run_cli("chargeback", "--period", "2026-03")
    assert code == 0 and "== by team" in out and "== reconciliation" in out and "holds" in out
    code, out, err = run_cli("chargeback", "--period", "2026-3x")
    assert code == 1 and "expected YYYY-MM" in err
    code, out, err = run_cli("chargeback", "--period", "2026-03", "--view", "by cost centre", "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("cost_center,")


def test_waste_from_telemetry_is_priced_beside_and_not_added(make):
    """Idle-allocated GPU-hours come from the efficiency mart (as models/efficiency.py writes it); lines
    without telemetry show waste as unavailable, not 0."""
    con = make()
    uid = con.sql("SELECT job_uid FROM jobs WHERE job_id = '1'").fetchall()[0][0]
    # 100 telemetry-covered hours of job 1 (4 GPUs), 10 of them at zero activity
    con.execute("""INSERT INTO gpu_efficiency_job_hour
                   SELECT $u, 'c1', TIMESTAMP '2026-03-01' + to_hours(h), 14400, 14400, 14400 * (h >= 10)::INT,
                          14400 * (h < 10)::INT, NULL, NULL, 14400, 0, 0, NULL FROM range(100) t(h)""", {"u": uid})
    st = chargeback.compute(con, "2026-03")
    L = lines(st)
    v = L["vision", "h100"]
    assert v["waste_gpu_hours"] == D("40") and v["telemetry_gpu_hours"] == D("400")
    assert v["waste_cost"] == money(F(40) * 2028 / 1008)            # at the line's (blended) rate
    assert v["total"] == v["direct_cost"] + v["idle_share"]          # beside, not added
    assert L["nlp", "h100"]["waste_gpu_hours"] is None and L["nlp", "h100"]["telemetry_gpu_hours"] == 0
    assert "idle-allocated GPU-hours from telemetry" in dict(st.header)["Waste"]
    check_identity(st)


def test_the_summary_is_typed_and_says_what_the_frozen_text_says(cluster, run_cli, tmp_path):
    """Money as amounts, counts as integers, text as text; a closed statement's header is read as frozen (its
    hash covers the text), and the typed amounts come from the frozen parts, so they agree with it."""
    con, _ = cluster
    close.close_period(con, "2026-03")
    st = chargeback.statement(con, "2026-03")
    header = dict(st.header)
    summary = {r["item"]: r for r in chargeback.summary_frame(st).iter_rows(named=True)}
    assert header["Cluster cost"] == "19,392.00 EUR" and summary["Cluster cost"]["amount"] == D("19392.00")
    for item, row in summary.items():
        if row["amount"] is not None:
            assert row["value"] is None and header[item].startswith(f"{row['amount']:,} EUR"), item
        elif row["count"] is None:
            assert row["value"] == header[item]
    assert summary["Jobs"]["count"] == int(header["Jobs"]) == 5 and summary["Jobs"]["value"] is None
    assert summary["Adjustments for closed periods"]["count"] == 0
    assert chargeback.summary_frame(st).schema["amount"] == pl.Decimal(18, 2)
    assert run_cli("chargeback", "--period", "2026-03", "--out", str(tmp_path / "s.csv"))[0] == 0
    back = pl.read_csv(tmp_path / "s.summary.csv")
    assert back.schema["amount"] == pl.Float64 and back.schema["count"] == pl.Int64
    assert back.filter(pl.col("item") == "Cluster cost")["amount"][0] == 19392.0
    assert "'-" not in (tmp_path / "s.summary.csv").read_text()          # no number became neutralised text


def test_json_carries_money_as_numbers(cluster, run_cli):
    import json
    code, out, err = run_cli("chargeback", "--period", "2026-03", "--view", "by cost centre", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and all(isinstance(r["total"], float) and isinstance(r["jobs"], int) for r in rows)
    assert sum(r["total"] for r in rows) == pytest.approx(2220.0)       # the lines' total, as in the CSV
