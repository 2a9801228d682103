"""Slow nodes (models/marts/slow_nodes.py, models/metrics/reliability.py): a node below its peers in multi-node
jobs, hand-computed from DCGM text through the real ingest and refresh; and the demo generator's planted slow
node and XID-caused losses found by the Reliability report."""
from __future__ import annotations

import pytest

from ingest import warehouse
from models.demo import build, config, faults, telemetry
from models.metrics import losses, reliability, reliability_summary
from models.pipeline import refresh
from tests.telemetry_fixtures import add_jobs, at, load_readings, readings


def _sm(nodes_values: dict[str, dict[int, float]]) -> dict:
    """SM_ACTIVE and power for GPUs 0 and 1 of each node: {node: {minute: activity}}."""
    out = {}
    for node, points in nodes_values.items():
        for gpu in ("0", "1"):
            out[(node, gpu, None, "DCGM_FI_PROF_SM_ACTIVE")] = points
            out[(node, gpu, None, "DCGM_FI_DEV_POWER_USAGE")] = {m: 100 + 300 * v for m, v in points.items()}
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Jobs 1 and 2 (6 GPUs on n[1-3], 60 minutes each): n3 reads 0.5 SM_ACTIVE while n1 and n2 read 0.9.
    Job 3 (n[1-3]): n2 dips to 0.3 for 10 of its 60 minutes only. Job 4 runs on n4 alone."""
    d = tmp_path_factory.mktemp("slow")
    path = d / "w.duckdb"
    con = warehouse.connect(path)
    add_jobs(con, d, [{"id": 1, "start": 0, "end": 60, "gpus": 6, "nodes": "n[1-3]", "nnodes": 3},
                      {"id": 2, "start": 60, "end": 120, "gpus": 6, "nodes": "n[1-3]", "nnodes": 3},
                      {"id": 3, "start": 120, "end": 180, "gpus": 6, "nodes": "n[1-3]", "nnodes": 3},
                      {"id": 4, "start": 0, "end": 180, "gpus": 2, "nodes": "n4"}])
    minutes = range(0, 180)
    vals = {"n1": {m: 0.9 for m in minutes}, "n2": {m: (0.3 if 130 <= m < 140 else 0.9) for m in minutes},
            "n3": {m: (0.5 if m < 120 else 0.9) for m in minutes}, "n4": {m: 0.2 for m in minutes}}
    assert load_readings(con, readings(_sm(vals)))["rejected"] == 0
    refresh.run(con, path, publish=False)
    yield con
    con.close()


def test_node_below_its_peers_in_two_jobs_is_slow(lab):
    """n3 is 40 points below its peers' mean (0.9) in every minute of jobs 1 and 2: 120 minutes below, power
    120 W lower per GPU, and it held back both whole jobs (6 GPUs x 1 h each = 12 GPU-h)."""
    df = reliability.slow_nodes(lab, at(0), at(24 * 60))
    assert df["node"].to_list() == ["n3"]
    r = df.row(0, named=True)
    assert (r["multi_node_jobs"], r["slow_jobs"], r["minutes_below"], r["minutes"]) == (3, 2, 120, 120)
    assert r["activity_gap_pct"] == pytest.approx(40.0)
    assert r["power_gap_w"] == pytest.approx(120.0)
    assert r["held_back_gpu_h"] == pytest.approx(12.0)
    assert r["metric"] == "SM_ACTIVE"
    ev = reliability.slow_node_jobs(lab, at(0), at(24 * 60))
    assert sorted(ev["job_id"].to_list()) == ["1", "2"] and set(ev["node"]) == {"n3"}
    # n2's 10-minute dip in job 3 is not "most of the job"; the single-node job 4 has no peers
    rows = lab.sql("SELECT j.job_id, a.node, a.minutes, a.minutes_below FROM job_node_activity a "
                   "JOIN jobs j USING (job_uid) WHERE j.job_id IN ('3', '4') ORDER BY 1, 2").fetchall()
    assert rows == [("3", "n1", 60, 0), ("3", "n2", 60, 10), ("3", "n3", 60, 0)]


def test_one_slow_job_is_not_enough(lab):
    assert reliability.slow_nodes(lab, at(0), at(24 * 60), min_jobs=3).is_empty()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A small demo cluster (30 nodes, 8 days, telemetry for the last 5): a100-001 is planted slow."""
    cfg = config.for_scale(0.5, seed=3, days=8, telemetry_days=5, squeue_days=0)
    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    build.build(path, cfg)
    syn = build.generate(cfg)
    con = warehouse.connect(path, read_only=True)
    yield con, syn
    con.close()


def test_demo_slow_nodes_and_xid_losses_are_found(demo):
    con, syn = demo
    planted = {syn.layout.names[i] for i in telemetry.slow_nodes(len(syn.layout))}
    assert planted == {"a100-001"}
    found = reliability.slow_nodes(con)
    assert set(found["node"]) == planted
    assert found["activity_gap_pct"][0] > 20
    # every hardware failure whose reason names a GPU fault inside the telemetry window shows as that XID, and the
    # jobs it ended are gpu_xid losses on that node
    o = syn.outages
    t_tel = syn.t_end - syn.cfg.telemetry_days * 86400 + telemetry.XID_LEAD_S
    want = {(syn.layout.names[n], telemetry.REASON_XID[faults.DOWN_REASONS[r]])
            for n, k, s, r in zip(o.node, o.kind, o.start, o.reason)
            if k == faults.DOWN and s >= t_tel and faults.DOWN_REASONS[r] in telemetry.REASON_XID}
    assert want, "the fixture should plant at least one GPU-fault failure in the telemetry window"
    xids = reliability.gpus(con)
    seen = {(n, int(c)) for n, codes in zip(xids["node"], xids["codes"]) for c in codes.split(",")}
    assert want <= seen
    lost = losses.jobs(con, cause="gpu_xid")
    assert lost.height > 0 and set(lost["detail"]) <= {"memory", "bus", "nvlink"}
    assert {(n, x) for n, x in zip(lost["event_node"], lost["xid"])} <= {*want, *(
        (syn.layout.names[n], telemetry.REASON_XID[faults.DOWN_REASONS[r]])
        for n, k, r in zip(o.node, o.kind, o.reason) if k == faults.DOWN and faults.DOWN_REASONS[r] in telemetry.REASON_XID)}
    assert (lost["lost_gpu_h"] > 0).all()
    # the nodes to pull: the planted slow node among them; no node for a recorded row remapping (XID 63) alone
    pull = reliability_summary.pull(con)
    assert "slow node" in pull.filter(pull["node"] == "a100-001")["flags"].to_list()[0]
    hw_nodes = set(xids.filter((xids["hardware_xid_events"] > 0) | (xids["row_remap_failures"] > 0)
                               | (xids["ecc_dbe_events"] > 0))["node"])
    assert {n for n, f in zip(pull["node"], pull["flags"]) if "XID GPU" in f} == hw_nodes
    assert set(xids.filter(xids["codes"] == "63")["node"]) - hw_nodes, "the demo should plant a lone XID 63"
