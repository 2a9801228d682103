"""models/fairness.py: Slurm's fair-share formulas against the documentation's statements, a published sshare
output and a real Slurm's `sshare -l`; Jain and Gini; the fairness report on a small cluster, hand-computed."""
from __future__ import annotations

import contextlib
import datetime as dt
import math
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_helpers import Job, T, build
from models.metrics import fairness
from models.marts import timeline as timeline_mart

FIX = Path(__file__).resolve().parent / "fixtures"


# ---------------------------------------------------------------- formulas (../shared/METRICS.md section 2)

def test_classic_factor_follows_the_documented_curve():
    # classic_fair_share.html: F = 2^(-U/S); usage equal to the share gives 0.5, no usage 1, twice the share 0.25
    assert fairness.classic_factor(0.2, 0.2) == 0.5
    assert fairness.classic_factor(0.0, 0.3) == 1.0
    assert fairness.classic_factor(0.4, 0.2) == 0.25
    assert fairness.classic_factor(0.4, 0.2, dampening=2) == 0.5      # FairShareDampeningFactor divides U/S
    assert fairness.classic_factor(0.4, 0.0) == 0.0                    # no shares, no priority


def test_level_fairshare_is_shares_over_usage_and_infinite_without_usage():
    assert fairness.level_fs(0.6, 0.3) == 2.0 and fairness.level_fs(0.6, 0.0) == math.inf


def test_normalised_shares_multiply_down_the_tree_as_in_the_machine_allocation_example():
    # classic_fair_share.html Figure 1: accounts A, B, C, D; A's shares split over A1..A4; "If there are 10 users
    # given equal shares in Account A3, they will each be allocated 1% of the machine." With A = 40 of 100 shares
    # and A3 = a quarter of A, A3 holds 10 %, so each of its 10 users 1 %.
    nodes = [("A", None, 40), ("B", None, 30), ("C", None, 20), ("D", None, 10)]
    nodes += [(f"A{i}", "A", 25) for i in range(1, 5)] + [(f"u{i}", "A3", 1) for i in range(10)]
    tree = fairness.association_tree(pl.DataFrame(
        [{"node": n, "parent": p, "raw_shares": float(s), "raw_usage": 0.0} for n, p, s in nodes]))
    shares = dict(zip(tree["node"], tree["classic_shares"]))
    assert shares["A"] == pytest.approx(0.4) and shares["A3"] == pytest.approx(0.1)
    assert all(shares[f"u{i}"] == pytest.approx(0.01) for i in range(10))


def test_classic_effective_usage_under_a_hierarchy():
    # U_E = U_child + (U_E,parent - U_child) * S_child / S_siblings, with U_E = U at the first level
    tree = fairness.association_tree(pl.DataFrame([
        {"node": "P", "parent": None, "raw_shares": 1.0, "raw_usage": None},
        {"node": "Q", "parent": None, "raw_shares": 1.0, "raw_usage": 20.0},
        {"node": "x", "parent": "P", "raw_shares": 3.0, "raw_usage": 60.0},
        {"node": "y", "parent": "P", "raw_shares": 1.0, "raw_usage": 20.0}]))
    t = {r["node"]: r for r in tree.iter_rows(named=True)}
    assert t["P"]["classic_effectv_usage"] == pytest.approx(0.8)
    assert t["x"]["classic_effectv_usage"] == pytest.approx(0.6 + (0.8 - 0.6) * 0.75)
    assert t["x"]["classic_fairshare"] == pytest.approx(2 ** (-0.75 / (0.5 * 0.75)))
    assert t["y"]["level_fs"] == pytest.approx(0.25 / 0.25) and t["Q"]["level_fs"] == pytest.approx(0.5 / 0.2)


@pytest.mark.parametrize("x,j", [([1, 1, 1, 1], 1.0), ([1, 0, 0, 0], 0.25), ([2, 1], 9 / 10), ([], None)])
def test_jain(x, j):
    assert fairness.jain(x) == (pytest.approx(j) if j is not None else None)


@pytest.mark.parametrize("x,g", [([1, 1], 0.0), ([0, 0, 0, 1], 0.75), ([1, 3], 0.25), ([0, 0], None)])
def test_gini(x, g):
    assert fairness.gini(x) == (pytest.approx(g) if g is not None else None)


# ---------------------------------------------------------------- a published sshare output

def _sshare_rows(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) < 5 or not parts[-1].replace(".", "").isdigit() or line.startswith(("root ", "-", "$")):
            continue
        depth = len(line) - len(line.lstrip(" "))
        rows.append({"line": line, "depth": depth, "name": parts[0], "user": len(parts) == 7})
    return rows


def test_tree_reproduces_a_published_sshare_output():
    """cmc-aau/biocloud-docs (Apache-2.0): NormShares = raw/siblings' raw and EffectvUsage = usage/parent's."""
    text = (FIX / "fairness" / "biocloud-aau-sshare.txt").read_text().splitlines()[3:]
    acct = []
    for line in text:
        depth = len(line) - len(line.lstrip(" "))
        f = line.split()
        if depth == 1 and len(f) == 5:          # first-level accounts: name, raw shares, norm, raw usage, effectv
            acct.append((f[0], float(f[1]), float(f[2]), float(f[3]), float(f[4])))
        elif depth == 1 and len(f) == 7:        # the root user association
            acct.append(("root-user", float(f[2]), float(f[3]), float(f[4]), float(f[5])))
    tree = fairness.association_tree(pl.DataFrame([{"node": n, "parent": None, "raw_shares": s, "raw_usage": u}
                                                   for n, s, _, u, _ in acct]))
    ours = {r["node"]: r for r in tree.iter_rows(named=True)}
    assert len(acct) == 21
    for name, _, norm, _, eff in acct:
        assert ours[name]["norm_shares"] == pytest.approx(norm, abs=1e-6), name   # sshare prints 6 decimals
        assert ours[name]["effectv_usage"] == pytest.approx(eff, abs=5e-7), name
    # chem's sub-accounts: equal raw shares, usage relative to chem
    kids = fairness.association_tree(pl.DataFrame([
        {"node": "chem", "parent": None, "raw_shares": 1.0, "raw_usage": None},
        {"node": "kt", "parent": "chem", "raw_shares": 1.0, "raw_usage": 854815349.0},
        {"node": "mms", "parent": "chem", "raw_shares": 1.0, "raw_usage": 97239289.0},
        {"node": "sss", "parent": "chem", "raw_shares": 1.0, "raw_usage": 1583157.0}]))
    k = {r["node"]: r for r in kids.iter_rows(named=True)}
    assert k["kt"]["norm_shares"] == pytest.approx(0.333333, abs=1e-6)
    assert [k[n]["effectv_usage"] for n in ("kt", "mms", "sss")] == pytest.approx([0.896373, 0.101967, 0.001660], abs=1e-6)


# ---------------------------------------------------------------- the real Slurm integration cluster

SLURM = FIX / "slurm_real"


def _real_sshare() -> list[dict]:
    p = SLURM / "sshare-l.psv"
    if not p.exists():
        pytest.skip(f"{p} is absent: produced by tests/slurm/make-fixtures.sh (needs the real Slurm harness)")
    lines = p.read_text().splitlines()
    head = lines[0].split("|")
    return [dict(zip(head, ln.split("|")), depth=len(ln) - len(ln.lstrip(" "))) for ln in lines[1:] if ln.strip()]


def _node_id(r: dict) -> str:
    return f"{r['Account'].strip()}/{r['User']}" if r["User"] else r["Account"].strip()


def _parents(rows: list[dict]) -> dict:
    stack, out = [], {}
    for r in rows[1:]:                                    # row 0 is root
        while stack and stack[-1][0] >= r["depth"]:
            stack.pop()
        out[_node_id(r)] = stack[-1][1] if stack else None
        if not r["User"]:
            stack.append((r["depth"], _node_id(r)))
    return out


def test_fair_tree_numbers_match_real_sshare_given_its_usage():
    """From sshare's own raw shares and the users' normalised usage, our tree gives sshare's NormShares,
    EffectvUsage, LevelFS and the Fair Tree FairShare of every user (Slurm 22.05, tests/slurm/up.sh tree)."""
    rows = _real_sshare()
    parents = _parents(rows)
    nodes = [{"node": _node_id(r), "parent": parents[_node_id(r)], "raw_shares": float(r["RawShares"]),
              "raw_usage": float(r["NormUsage"]) if r["User"] else None} for r in rows[1:]]
    ours = {r["node"]: r for r in fairness.association_tree(pl.DataFrame(nodes)).iter_rows(named=True)}
    for r in rows[1:]:
        o = ours[_node_id(r)]
        assert o["norm_shares"] == pytest.approx(float(r["NormShares"]), abs=1e-6), _node_id(r)
        assert o["effectv_usage"] == pytest.approx(float(r["EffectvUsage"]), abs=2e-6), _node_id(r)
        lf = math.inf if o["level_fs"] is None else o["level_fs"]
        assert lf == pytest.approx(float(r["LevelFS"]), rel=1e-5), _node_id(r)
        if r["User"]:
            assert o["fair_tree_fairshare"] == pytest.approx(float(r["FairShare"]), abs=1e-6), _node_id(r)


def test_raw_usage_from_accounting_matches_real_sshare(tmp_path):
    """Our decayed billing-TRES-seconds per account, from the same cluster's sacct, against sshare's RawUsage.
    Slurm accrues usage in whole seconds at each PriorityCalcPeriod tick (1 minute here) and prints it truncated,
    so a job of a few seconds can gain a second or two: we allow 5 %."""
    from ingest import sacct, warehouse
    from models.pipeline import refresh
    rows = _real_sshare()
    cmd = (SLURM / "sshare-l.psv.cmd").read_text()
    at = dt.datetime.strptime(cmd.split("captured ")[1][:20], "%Y-%m-%dT%H:%M:%SZ")
    con = warehouse.connect(tmp_path / "w.duckdb")
    sacct.ingest_path(con, str(SLURM / "sacct-allocations.psv"), sacct.SacctOptions())
    refresh.run(con, tmp_path / "x.duckdb", publish=False)
    use = fairness.decayed_usage(con, at, 7.0, "billing")
    ours = dict(use.group_by("account").agg(pl.col("decayed").sum()).iter_rows())
    theirs = {r["Account"].strip(): float(r["RawUsage"]) for r in rows if not r["User"] and r["depth"] >= 1}
    for acct in ("infra", "ml", "vision"):
        assert ours[acct] == pytest.approx(theirs[acct], rel=0.05), acct
    assert sum(ours.values()) == pytest.approx(float(rows[0]["RawUsage"]), rel=0.05)


# ---------------------------------------------------------------- the report on a small cluster

NODES = [("h1", 4, "h100"), ("h2", 4, "h100")]
GOV = '''currency = "EUR"
[[teams]]
name = "vision"
accounts = ["vision"]
[[teams]]
name = "nlp"
accounts = ["nlp"]
[[teams]]
name = "idle"
accounts = ["idle"]
[[entitlements]]
team = "vision"
gpu_type = "h100"
share = "0.5"
from = 2026-01-01
[[entitlements]]
team = "nlp"
gpu_type = "h100"
share = "0.25"
from = 2026-01-01
[[entitlements]]
team = "idle"
gpu_type = "h100"
gpus = 2
from = 2026-01-01
'''
# A 10-day window [Mar 1, Mar 11): capacity 8 GPUs x 240 h = 1920 GPU-h.
# vision holds 4 GPUs all 10 days (960 GPU-h); nlp 2 GPUs for 5 days (240 GPU-h) and waits with a 4-GPU job from
# Mar 6 to the end (4 x 120 = 480 pending GPU-h); the team "idle" (quota 2 GPUs = 480 GPU-h) runs nothing.
JOBS = [
    Job(1, "vision", 4, T(1), T(11), node="h1", submit=T(1)),
    Job(2, "nlp", 2, T(1), T(6), node="h2", submit=T(1)),
    Job(3, "nlp", 4, None, None, submit=T(6)),
    Job(4, "vision", 1, T(11), T(11, 1), node="h2", submit=T(11)),     # sets the horizon at Mar 11 01:00
]


@pytest.fixture(scope="module")
def fcon(tmp_path_factory):
    from ingest import warehouse
    tmp = tmp_path_factory.mktemp("fair")
    con = warehouse.connect(tmp / "w.duckdb")
    build(con, tmp, JOBS, NODES, GOV)
    yield con
    con.close()


def test_report_shares_ratios_factors_and_gap(fcon):
    rep = fairness.report(fcon, [("10d", T(1), T(11))])
    t = {r["team"]: r for r in rep["teams"].filter(pl.col("pool") == "h100").iter_rows(named=True)}
    v, n, i = t["vision"], t["nlp"], t["idle"]
    assert v["usage_gpu_h"] == pytest.approx(960) and n["usage_gpu_h"] == pytest.approx(240) and i["usage_gpu_h"] == 0
    assert v["usage_share"] == pytest.approx(0.8) and n["usage_share"] == pytest.approx(0.2)
    # entitled: vision 0.5 x 1920 = 960, nlp 0.25 x 1920 = 480, idle 2 x 240 = 480 -> shares 0.5, 0.25, 0.25
    assert [v["entitlement_share"], n["entitlement_share"], i["entitlement_share"]] == pytest.approx([0.5, 0.25, 0.25])
    assert v["share_ratio"] == pytest.approx(1.6) and n["share_ratio"] == pytest.approx(0.8)
    assert n["pending_gpu_h"] == pytest.approx(480) and n["demand_gpu_h"] == pytest.approx(720)
    # nlp wanted 720 GPU-h, was entitled to 480 and got 240: gap 240 GPU-h, half its entitlement
    assert n["gap_gpu_h"] == pytest.approx(240) and n["gap"] == pytest.approx(0.5)
    assert v["gap"] == 0 and i["gap"] == 0                               # idle wanted nothing: no gap
    # decayed usage at Mar 11 with a 7-day half-life, integrated exactly: 4 GPUs over [Mar 1, Mar 11)
    h = 7 * 24.0
    dv = 4 * h / math.log(2) * (1 - 2 ** (-240 / h))
    dn = 2 * h / math.log(2) * (2 ** (-120 / h) - 2 ** (-240 / h))
    assert v["decayed_gpu_h"] == pytest.approx(dv) and n["decayed_gpu_h"] == pytest.approx(dn)
    assert v["fairshare_classic"] == pytest.approx(2 ** (-(dv / (dv + dn)) / 0.5))
    assert n["level_fs"] == pytest.approx(0.25 / (dn / (dv + dn)))
    assert i["level_fs"] is None and i["fairshare_classic"] == 1.0       # no usage: Fair Tree LF infinite
    pool = rep["pools"].filter(pl.col("pool") == "h100").row(0, named=True)
    assert pool["teams_with_pending_demand"] == 1 and pool["jain_pending_teams"] == pytest.approx(1.0)
    assert pool["max_gap"] == pytest.approx(0.5) and pool["max_gap_team"] == "nlp"
    assert pool["gini"] == pytest.approx(fairness.gini([1.6, 0.8]))


def test_default_windows_end_at_the_horizon(fcon):
    w = fairness.default_windows(fcon, [7, 30])
    assert [x[0] for x in w] == ["7d", "30d"] and w[0][2] == T(11, 1) and w[1][1] == T(11, 1) - dt.timedelta(days=30)


def test_cli_fairness_report_and_sshare_view(fcon, capsys):
    import gpuledger
    db = fcon.sql("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()[0][0]
    assert gpuledger.main(["--db", db, "report", "fairness", "--from", "2026-03-01", "--to", "2026-03-11"]) == 0
    out = capsys.readouterr().out
    assert "== pools" in out and "== teams" in out and "nlp" in out
    assert gpuledger.main(["--db", db, "report", "fairness", "--view", "sshare", "--basis", "gpu", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("node,parent,depth,raw_shares,norm_shares,raw_usage") and len(lines) == 4


def test_whole_cluster_uses_slurm_style_fairshare_down_the_tree(tmp_path):
    """With `fairshare` set, the (all) pool's shares are the tree's normalised shares (classic S), like sshare."""
    from ingest import warehouse
    gov = GOV.replace('accounts = ["vision"]', 'accounts = ["vision"]\nfairshare = 60\nparent = "research"')
    gov = gov.replace('accounts = ["nlp"]', 'accounts = ["nlp"]\nfairshare = 40\nparent = "research"')
    gov = gov.replace('accounts = ["idle"]', 'accounts = ["idle"]\nfairshare = 1')
    con = warehouse.connect(tmp_path / "w.duckdb")
    try:
        build(con, tmp_path, JOBS, NODES, gov)
        t = fairness.report(con, [("10d", T(1), T(11))])["teams"].filter(pl.col("pool") == fairness.ALL_POOLS)
        got = {r["team"]: r for r in t.iter_rows(named=True)}
        # root: research (default 1 share) and idle (1) -> 0.5 each; research: vision 60, nlp 40
        assert got["vision"]["entitlement_share"] == pytest.approx(0.3)
        assert got["nlp"]["entitlement_share"] == pytest.approx(0.2) and got["idle"]["entitlement_share"] == pytest.approx(0.5)
        assert {r["shares_from"] for r in got.values()} == {"fairshare"}
        assert got["nlp"]["entitled_gpu_h"] == pytest.approx(480) and got["nlp"]["gap"] == pytest.approx(0.5)
    finally:
        con.close()


# ---------------------------------------------------------------- the daily rollups = the jobs

@contextlib.contextmanager
def _without_rollups():
    """Force every fairness input to be computed from the jobs and the timeline's pieces."""
    from unittest import mock
    from models.metrics import timeline
    with mock.patch.multiple(timeline, whole_days=lambda *a, **k: None, has_table=lambda *a, **k: False), \
         mock.patch.object(fairness, "_usage", fairness._usage_from_pieces):
        yield


def _same_frames(a: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> None:
    assert a.columns == b.columns and a.height == b.height
    for x, y in zip(a.sort(keys).iter_rows(), b.sort(keys).iter_rows()):
        for u, v in zip(x, y):
            assert u == (pytest.approx(v, rel=1e-9, abs=1e-9, nan_ok=True) if isinstance(v, float) else v)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(-3, 12), st.integers(1, 14), st.sampled_from([0, 0, 1, 13]))
def test_report_from_the_rollups_equals_the_report_from_the_jobs(fcon, first, days, hours):
    """Whole-day windows read tl_demand_daily, tl_pending_team_daily and tl_decay_daily; others (and ends past
    the horizon, where pending jobs count to the window's end) compute from the jobs: the same numbers."""
    start = T(1) + dt.timedelta(days=first)
    end = start + dt.timedelta(days=days, hours=hours)
    fast = fairness.report(fcon, [("w", start, end)])
    with _without_rollups():
        slow = fairness.report(fcon, [("w", start, end)])
    _same_frames(fast["teams"], slow["teams"], ["cluster", "pool", "team"])
    _same_frames(fast["pools"], slow["pools"], ["cluster", "pool"])


def test_decayed_usage_from_the_rollup_at_any_time(fcon):
    for at in (T(11), T(11, 1), T(9, 13), T(20), T(2, 5)):
        fast = fairness.decayed_usage(fcon, at, 7.0, "gpu")
        with _without_rollups():
            slow = fairness.decayed_usage(fcon, at, 7.0, "gpu")
        _same_frames(fast, slow, ["cluster", "gpu_type", "team", "account"])
    # rolled up at the governance's half-life only: another one is computed from the pieces
    other = fairness.decayed_usage(fcon, T(11), 3.0, "gpu")
    h = 3 * 24.0
    assert other.filter(pl.col("team") == "vision")["decayed"].sum() / 3600 == pytest.approx(
        4 * h / math.log(2) * (1 - 2 ** (-240 / h)))


def test_fairness_rollups_after_a_late_export_equal_a_full_rebuild(tmp_path):
    """The pending job finishes in a later export (a changed job), and a new job arrives: the incremental
    refresh rebuilds the rollups from the right day."""
    from ingest import warehouse
    from models.pipeline import refresh
    from models.metrics import timeline
    from cost_helpers import add_jobs
    con = warehouse.connect(tmp_path / "w.duckdb")
    build(con, tmp_path, JOBS, NODES, GOV)
    add_jobs(con, tmp_path, [Job(3, "nlp", 4, T(11, 1), T(12), node="h1", submit=T(6)),
                             Job(5, "idle", 2, T(11, 6), T(13), node="h2", submit=T(10))], name="later.psv")
    refresh.run(con, tmp_path / "unused.duckdb", publish=False)

    def rows():
        return {t: [tuple(round(v, 4) if isinstance(v, float) else v for v in r)
                    for r in con.sql(f"SELECT * FROM {t} ORDER BY ALL").fetchall()]
                for t in ("tl_pending_team_daily", "tl_decay_daily")}
    incremental = rows()
    assert incremental["tl_decay_daily"] and incremental["tl_pending_team_daily"]
    timeline_mart.build(con, full=True)
    assert rows() == incremental
    con.close()
