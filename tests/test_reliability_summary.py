"""The manager's summary (models/metrics/reliability_summary.py, `report reliability --view teams|pull`):
hand-computed per-team losses, held-back and preemption GPU-hours, and the ranked nodes to pull, through the
real sacct, scontrol, DCGM ingestors and the real refresh.

July 2026 (T0 = 07-14 10:00 UTC, telemetry_fixtures.at): six a100 nodes of 8 GPUs; research = account ml,
product = cv.
- jobs 1 (ml) and 2 (cv): 6 GPUs on n1-n3, 60 min each; n3 reads SM_ACTIVE 0.5 against its peers' 0.9: slow,
  holding back 6 GPU-h of each team;
- job 3 (ml): 4 GPUs on n3, 12:10-13:50, FAILED with XID 79 on n3 GPU 2 at 13:40: gpu_xid, 4 x 100 min;
- job 4 (ml): 8 GPUs on n4, 10:00-10:30, FAILED with XID 48 on n4 GPU 0 at 10:20: gpu_xid, 8 x 30 min = 4 GPU-h;
- jobs 10-19 (cv): 1 GPU on n5, 50 min each from 15:00 hourly, 8 of them FAILED: user failure, 8 x 50 min;
- jobs 20-29 (cv): 1 GPU on n6, the same hours, all COMPLETED;
- job 30 (ml): 2 GPUs on n6, 10:00-11:00, PREEMPTED: preemption 2 GPU-h (no checkpoint rule: since start);
- job 40 (cv): 1 GPU on n6, 08-02 09:00-09:30: the data runs into August, so July is the last full month.
"""
from __future__ import annotations

import datetime as dt
import json
import math

import pytest

from ingest import warehouse
from models.metrics import reliability, reliability_summary as rs
from models.pipeline import refresh
from tests.telemetry_fixtures import at, load_readings, readings
from tests.timeline_fixtures import Job, load

NODES = [(f"n{i}", 8, "a100", "a100") for i in range(1, 7)]
JULY = (dt.datetime(2026, 7, 1), dt.datetime(2026, 8, 1))


def _jobs() -> list[Job]:
    m = dt.timedelta(minutes=1)
    jobs = [Job(1, "u", "ml", "a100", 6, ["n1", "n2", "n3"], start=at(0), end=at(60)),
            Job(2, "u", "cv", "a100", 6, ["n1", "n2", "n3"], start=at(60), end=at(120)),
            Job(3, "u", "ml", "a100", 4, ["n3"], start=at(130), end=at(230), state="FAILED"),
            Job(4, "u", "ml", "a100", 8, ["n4"], start=at(0), end=at(30), state="FAILED"),
            Job(30, "u", "ml", "a100", 2, ["n6"], start=at(0), end=at(60), state="PREEMPTED"),
            Job(40, "u", "cv", "a100", 1, ["n6"], start=dt.datetime(2026, 8, 2, 9), end=dt.datetime(2026, 8, 2, 9, 30))]
    for i in range(10):
        s = at(300 + 60 * i)
        jobs.append(Job(10 + i, "u", "cv", "a100", 1, ["n5"], start=s, end=s + 50 * m,
                        state="FAILED" if i < 8 else "COMPLETED"))
        jobs.append(Job(20 + i, "u", "cv", "a100", 1, ["n6"], start=s, end=s + 50 * m))
    return jobs


def _telemetry() -> str:
    series = {}
    for node in ("n1", "n2", "n3"):
        for gpu in ("0", "1"):
            act = {mi: (0.5 if node == "n3" else 0.9) for mi in range(0, 120)}
            series[(node, gpu, None, "DCGM_FI_PROF_SM_ACTIVE")] = act
            series[(node, gpu, None, "DCGM_FI_DEV_POWER_USAGE")] = {mi: 100 + 300 * v for mi, v in act.items()}
    series[("n3", "2", None, "DCGM_FI_DEV_XID_ERRORS")] = {mi: (79 if mi == 220 else 0) for mi in range(130, 231)}
    series[("n4", "0", None, "DCGM_FI_DEV_XID_ERRORS")] = {mi: (48 if mi == 20 else 0) for mi in range(0, 31)}
    return readings(series)


def build_july(path, publish: bool = False):
    """The module's warehouse at ``path`` (its serving snapshot beside it when ``publish``)."""
    con = warehouse.connect(path)
    load(con, "c1", _jobs(), NODES, team_map=[("research", "ml"), ("product", "cv")],
         as_of="2026-06-01T00:00:00", refresh=False)
    assert load_readings(con, _telemetry(), cluster="c1")["rejected"] == 0
    refresh.run(con, path, publish=publish)
    con.close()
    return path


@pytest.fixture(scope="module")
def july(tmp_path_factory):
    path = build_july(tmp_path_factory.mktemp("summary") / "w.duckdb")
    ro = warehouse.connect(path, read_only=True)
    yield ro, path
    ro.close()


def test_last_full_month_is_july(july):
    con, _ = july
    assert rs.last_full_month(con) == JULY


def test_teams_hand_computed(july):
    con, _ = july
    t = {r["team"]: r for r in rs.teams(con, *JULY).iter_rows(named=True)}
    r, p = t["research"], t["product"]
    assert r["gpu_xid_gpu_h"] == pytest.approx(4 * 100 / 60 + 4)
    assert r["preemption_gpu_h"] == pytest.approx(2.0)
    assert r["failure_gpu_h"] == pytest.approx(4 * 100 / 60 + 4)
    assert r["lost_gpu_h"] == pytest.approx(4 * 100 / 60 + 4 + 2)
    assert r["slow_node_held_back_gpu_h"] == pytest.approx(6.0)
    r_alloc = 6 + 4 * 100 / 60 + 4 + 2
    assert r["allocated_gpu_h"] == pytest.approx(r_alloc)
    assert r["goodput_share"] == pytest.approx(1 - (4 * 100 / 60 + 6) / r_alloc)
    assert p["user_failure_gpu_h"] == pytest.approx(8 * 50 / 60) and p["preemption_gpu_h"] == 0
    assert p["slow_node_held_back_gpu_h"] == pytest.approx(6.0)
    p_alloc = 6 + 20 * 50 / 60
    assert p["allocated_gpu_h"] == pytest.approx(p_alloc)
    assert p["goodput_share"] == pytest.approx(1 - (8 * 50 / 60) / p_alloc)
    assert list(t) == ["research", "product"]            # the most lost first


def test_nodes_to_pull_ranked_with_evidence(july):
    """n3: slow and an XID GPU (2 flags; 12 GPU-h held back + 6.67 lost); n4: XID GPU (4 GPU-h lost); n5: repeat
    offender, 8 of 10 failed against the pool's rate, p = P(X >= 8 | 10, rate), Benjamini-Hochberg over 6 nodes."""
    con, _ = july
    df = rs.pull(con, *JULY)
    assert df["node"].to_list() == ["n3", "n4", "n5"] and df["rank"].to_list() == [1, 2, 3]
    n3, n4, n5 = df.iter_rows(named=True)
    assert (n3["flags"], n3["signals"]) == ("slow node, XID GPU", 2)
    assert n3["held_back_gpu_h"] == pytest.approx(12.0) and n3["hardware_lost_gpu_h"] == pytest.approx(400 / 60)
    assert n3["at_stake_gpu_h"] == pytest.approx(12 + 400 / 60)
    assert "below its peers in 2 of 2 multi-node jobs (120 min, 40.0 points lower)" in n3["evidence"]
    assert "GPU 2: 1 XID events (codes 79)" in n3["evidence"]
    assert (n4["flags"], n4["hardware_lost_gpu_h"]) == ("XID GPU", pytest.approx(4.0))
    # ended jobs per node: n1, n2 2; n3 3 (1 failed); n4 1 (failed); n5 10 (8 failed); n6 11 (July) -> 29, 10 failed
    rate = 10 / 29
    pv = {"n5": sum(math.comb(10, k) * rate ** k * (1 - rate) ** (10 - k) for k in range(8, 11)),
          "n3": 1 - (1 - rate) ** 3, "n4": rate}
    q_n5 = min(pv["n5"] * 6, pv["n4"] * 6 / 3, 1.0)   # BH over the pool's 6 nodes; n4 then n3 follow n5
    assert n5["flags"] == "repeat offender" and n5["q_value"] == pytest.approx(q_n5)
    assert n5["evidence"] == f"repeat offender: 8 of 10 jobs failed (80.0% vs pool {round(100 * rate, 1)}%, " \
                             f"q = {float(f'{q_n5:.2g}')})"
    assert (n5["at_stake_gpu_h"], n5["failed"], n5["jobs"]) == (0.0, 8, 10)


def test_no_flagged_node_no_rows(july):
    con, _ = july
    assert rs.pull(con, dt.datetime(2026, 8, 1), dt.datetime(2026, 8, 3)).is_empty()


def test_cli_views_default_to_the_last_full_month(july, tmp_path, capsys):
    import gpuledger
    _, path = july
    for view, fn in (("teams", rs.teams), ("pull", rs.pull)):
        out = tmp_path / f"{view}.json"
        assert gpuledger.main(["--db", str(path), "report", "reliability", "--view", view, "--format", "json",
                               "--out", str(out)]) == 0
        got = json.loads(out.read_text())
        con = warehouse.connect(path, read_only=True)
        want = json.loads(fn(con, *JULY).write_json())
        con.close()
        assert got == want and got
    assert "the last full UTC month, 2026-07" in capsys.readouterr().err
